"""The genotype benchmark of ``dp-krylov`` (simulations/benchmarks/bench_dp_krylov_bed.py) on a small admixed set."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("bed_reader")


@pytest.fixture(scope="module")
def admixed(tmp_path_factory):
    from simulations.data.admixed_bed import write_admixed_bed

    folder = tmp_path_factory.mktemp("admixed")
    write_admixed_bed(folder, 2000, 300, missing=0.0, seed=1)
    return folder


def test_the_reference_is_the_exact_pca_of_the_pooled_centred_unit_rows(admixed):
    """The benchmark's noise-free block Krylov reference equals numpy's eigenvectors of the decoded, normalised,
    centred pooled rows (top 2: the ancestry PCs), with small residuals."""
    from fl_strategies.files.data_files import open_samples
    from fl_strategies.kernels.linalg import subspace_distance
    from fl_strategies.kernels.rows import normalize_rows
    from fl_strategies.kernels.unit_genotypes import UnitGenotypes
    from simulations.benchmarks.bench_dp_krylov_bed import reference

    U = UnitGenotypes(open_samples(str(admixed / "pooled.bed"), "test"))
    V, lam, residual, mu = reference(U)
    X = normalize_rows(next(U.bed.blocks()))
    C = (X - X.mean(axis=0)).T @ (X - X.mean(axis=0))
    values, vectors = np.linalg.eigh(C)
    np.testing.assert_allclose(mu, X.mean(axis=0), atol=1e-12)
    np.testing.assert_allclose(lam[:2], values[::-1][:2], rtol=1e-8)
    assert subspace_distance(V[:, :2], vectors[:, ::-1][:, :2]) < 1e-4
    assert residual[0] < 1e-4 and residual[1] < 1e-4


def test_the_command_writes_one_row_per_epsilon_with_the_privacy_spent(admixed, tmp_path):
    from simulations.benchmarks.bench_dp_krylov_bed import main

    main([str(admixed), "--epsilons", "4", "--out", str(tmp_path)])
    table = (tmp_path / "dp_krylov_bed.md").read_text().splitlines()
    rows = [line for line in table if line.startswith("| 4 |")]
    assert len(rows) == 1 and "| 2000 | 300 |" in rows[0]
    csv = (tmp_path / "dp_krylov_bed.csv").read_text().splitlines()
    assert len(csv) == 2
    values = [float(x) for x in csv[1].split(",")]
    assert values[0] == pytest.approx(4.0, rel=1e-6) and values[1] == 1e-6
    assert all(0.0 <= x <= 1.0 + 1e-9 for x in values[4:10])
