"""dp-krylov (and dp-power) over ``.bed`` sites with ``row-normalize``: unit rows whose products run on the file.

:class:`fl_strategies.kernels.unit_genotypes.UnitGenotypes` against the decoded, normalised rows; a node's
``stored_rows`` of a ``.bed``; and a dp-krylov run over ``.bed`` sites that never decodes a site whole, with the
same components as over the same people's rows in ``.npy`` files.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from fl_strategies.kernels.rows import BedVariants, RowBlocks, normalize_rows
from fl_strategies.kernels.unit_genotypes import UnitGenotypes

sys.path.insert(0, str(Path(__file__).parent))
from test_genotype_bed import simulated_sites, write_bed  # noqa: E402

pytest.importorskip("bed_reader")


def sites_on_disk(tmp_path, sizes=(40, 30, 50), d=60, seed=4):
    """Three ``.bed`` sites (no missing call; site 0's person 0 without a counted allele) in ``tmp_path/bed`` and
    the same rows as ``.npy`` files in ``tmp_path/npy``; the list of (s_i, d) count arrays."""
    sites = simulated_sites(sizes, d, missing=0.0, seed=seed)
    sites[0][0] = 0.0
    for kind in ("bed", "npy"):
        (tmp_path / kind).mkdir()
    for i, G in enumerate(sites):
        write_bed(tmp_path / "bed" / f"partition_{i}.bed", G)
        np.save(tmp_path / "npy" / f"partition_{i}.npy", G)
    return sites


def test_the_unit_rows_of_a_bed_are_its_normalised_counts_in_products_sums_and_squares(tmp_path):
    """Product, row sum, column squares and centred sum of squares equal those of the decoded counts normalised
    row by row (a person with no counted allele stays a zero row); the view never decodes the file whole."""
    G = sites_on_disk(tmp_path)[0]
    from fl_strategies.files.data_files import open_samples

    bed = open_samples(str(tmp_path / "bed" / "partition_0.bed"), "test")
    assert isinstance(bed, BedVariants)
    U = normalize_rows(G.copy())
    assert not U[0].any() and np.allclose(np.linalg.norm(U[1:], axis=1), 1.0)
    view = UnitGenotypes(bed)
    Z = np.random.default_rng(0).standard_normal((G.shape[1], 4))
    np.testing.assert_allclose(view.product(Z), U.T @ (U @ Z), rtol=1e-10, atol=1e-12)
    total, squares = view.stats()
    np.testing.assert_allclose(total, U.sum(axis=0), rtol=1e-12)
    np.testing.assert_allclose(squares, (U * U).sum(axis=0), rtol=1e-12)
    m = U.mean(axis=0) + 0.01
    assert view.centered_sum_of_squares(m) == pytest.approx(float(((U - m) ** 2).sum()), rel=1e-10)
    np.testing.assert_allclose(next(view.blocks()), U, rtol=1e-12)
    assert (view.num_rows, view.dimension) == G.shape and view.rows is bed.rows


def test_a_bed_with_missing_calls_is_refused_by_the_unit_rows(tmp_path):
    G = simulated_sites((20,), 30, missing=0.05, seed=2)[0]
    from fl_strategies.files.data_files import open_samples

    bed = open_samples(write_bed(tmp_path / "m.bed", G), "test")
    with pytest.raises(ValueError, match="missing calls"):
        UnitGenotypes(bed)


@pytest.mark.parametrize("normalize, clip, kind", [(True, 0.0, UnitGenotypes), (True, 2.0, RowBlocks),
                                                    (False, 0.0, BedVariants)])
def test_a_nodes_stored_bed_rows_stay_on_disk_only_when_normalised_without_clipping(tmp_path, normalize, clip,
                                                                                     kind):
    from client_app.data import NodeData
    from simulations.engines import fused_run_config

    sites_on_disk(tmp_path)
    cfg = fused_run_config({"strategy": "dp-krylov", "num-clients": 3, "rank": 2, "dataset": str(tmp_path / "bed"),
                            "row-normalize": normalize, "clip-norm": clip, "epsilon": 1.0, "delta": 1e-6})
    rows = NodeData(cfg, {"partition-id": 1}).stored_rows()
    assert type(rows) is kind and (rows.num_rows, rows.dimension) == (30, 60)


def test_dp_krylov_over_bed_sites_never_decodes_a_site_and_matches_the_same_rows_as_npy(tmp_path, monkeypatch):
    """The seeded private run over three ``.bed`` sites gives the components, mean and privacy record of the same
    run over the same people's counts in ``.npy`` files, while decoding a ``.bed`` whole fails the test."""
    from simulations.engines import fused_run_config
    from simulations.engines.local import run_local

    sites_on_disk(tmp_path)
    common = {"strategy": "dp-krylov", "num-clients": 3, "rank": 2, "row-normalize": True, "center": True,
              "epsilon": 4.0, "delta": 1e-6, "iteration-rank": 0, "num-server-rounds": 3, "seed": 7,
              "dp-channel": "plaintext", "noise-source": "seeded-not-private"}
    dense = run_local(fused_run_config({**common, "dataset": str(tmp_path / "npy")}))

    def refuse(self):
        raise AssertionError("a .bed was decoded whole")
        yield  # pragma: no cover

    monkeypatch.setattr(BedVariants, "blocks", refuse)
    lazy = run_local(fused_run_config({**common, "dataset": str(tmp_path / "bed")}))
    assert dense.failure is None and lazy.failure is None
    assert len(lazy.products) == 3
    np.testing.assert_allclose(lazy.model["components"], dense.model["components"], atol=1e-8)
    np.testing.assert_allclose(lazy.mean, dense.mean, atol=1e-10)
    assert lazy.privacy_record() == dense.privacy_record()
