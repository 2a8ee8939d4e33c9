"""simulations/benchmarks/bench_plink2.py: its .bed encoder, and the whole benchmark at a tiny size."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from simulations.benchmarks.bench_plink2 import encode_bed, site_counts


@pytest.mark.parametrize("people", [5, 6, 7, 8])
def test_the_encoder_writes_what_bed_reader_reads(tmp_path, people):
    bed_reader = pytest.importorskip("bed_reader")
    rng = np.random.default_rng(people)
    dosage = rng.integers(-1, 3, (11, people)).astype(np.int8)  # variants x people, -1 missing
    (tmp_path / "g.bed").write_bytes(bytes([0x6C, 0x1B, 0x01]) + encode_bed(dosage))
    (tmp_path / "g.fam").write_text("".join(f"f\ti{j}\t0\t0\t0\t-9\n" for j in range(people)))
    (tmp_path / "g.bim").write_text("".join(f"1\tv{k}\t0\t{k + 1}\tT\tC\n" for k in range(11)))
    read = bed_reader.open_bed(tmp_path / "g.bed").read()
    expected = np.where(dosage.T < 0, np.nan, dosage.T)
    np.testing.assert_array_equal(read, expected)


def test_the_sites_hold_their_mixes_and_everyone():
    counts = site_counts(1001)
    assert [sum(row) for row in counts] == [251, 250, 250, 250]
    assert [int(np.argmax(row)) for row in counts] == [0, 1, 2, 0]  # YRI-, CEU-, CHB-heavy, then even


@pytest.mark.plink2
@pytest.mark.skipif(shutil.which("plink2") is None, reason="plink2 is not installed")
def test_the_benchmark_runs_at_a_tiny_size(tmp_path, capsys):
    pytest.importorskip("msprime")
    from simulations.benchmarks.bench_plink2 import main

    assert main(["--people", "240", "--variants", "1200", "--rank", "2", "--iteration-rank", "4", "--rounds", "40",
                 "--stop-tol", "1e-9", "--out", str(tmp_path / "out"), "--data", str(tmp_path / "data")]) == 0
    table = capsys.readouterr().out
    from simulations.benchmarks.bench_plink2 import blas_choices

    assert table.count("| plink2 --pca approx") == len(blas_choices()) and "| fedspectral (4 sites" in table
    assert table.count("| plink2 --pca (exact") == 1
    found = json.loads((tmp_path / "out" / "bench_plink2.json").read_text())
    assert found["people"] == 240 and found["variants"] == 1200 and 0.005 < found["missing"] < 0.015
    assert found["above_noise"][0]  # three populations: PC1 stands out
    assert found["correlation_fedspectral"][0] > 1 - 1e-5
    assert found["rounds"] < 40  # stop-tol on the kept components ended the run
    kept = next((tmp_path / "data").glob("plink2-exact-*/run.json"))  # exact plink2, kept for a later run
    assert main(["--people", "240", "--variants", "1200", "--rank", "2", "--iteration-rank", "4", "--rounds", "40",
                 "--stop-tol", "1e-9", "1e-2", "--plink2-runs", "2", "--out", str(tmp_path / "again"), "--data",
                 str(tmp_path / "data")]) == 0
    again = json.loads((tmp_path / "again" / "bench_plink2.json").read_text())
    for blas, walls in again["plink2_approx_walls"].items():  # plink2 approx twice with each BLAS: the fastest
        assert len(walls) == 2 and min(walls) == (again["plink2_approx_s"] if blas == again["plink2_blas"]
                                                  else again["plink2_approx_other"][blas]["wall"])
        assert f"{blas}; fastest of 2: {walls[0]:.1f}, {walls[1]:.1f} s) |" in \
            (tmp_path / "again" / "bench_plink2.md").read_text()
    assert len(found["plink2_approx_walls"][found["plink2_blas"]]) == 1 and "fastest of" not in table
    (looser,) = again["fedspectral_other"]  # a second stop-tol: its own run in the same table
    assert looser["stop_tol"] == 1e-2 and looser["rounds"] < again["rounds"] == found["rounds"]
    assert 0.99 < looser["correlation"][0] <= 1 and looser["wall"] > 0 and looser["cpu"] > 0
    assert f"stop-tol 0.01, {looser['rounds']} rounds) |" in (tmp_path / "again" / "bench_plink2.md").read_text()
    assert again["plink2_exact_cached"] == json.loads(kept.read_text())["when"]
    assert again["plink2_exact_s"] == found["plink2_exact_s"] and again["exact_eigenvalues"] == found["exact_eigenvalues"]
    assert "kept with the data" in (tmp_path / "again" / "bench_plink2.md").read_text()
    for name in ("pooled", "sites/partition_0", "sites/partition_3"):
        assert (tmp_path / "data" / f"{name}.bed").stat().st_size > 3
    people = sum(len((tmp_path / "data" / "sites" / f"partition_{i}.fam").read_text().splitlines())
                 for i in range(4))
    assert people == 240 == len((tmp_path / "data" / "pooled.fam").read_text().splitlines())
