"""simulations/data/admixed_bed.py (biobank-size genotypes straight to .bed) and the benchmark that uses it,
simulations/benchmarks/bench_biobank.py."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from simulations.data.admixed_bed import admixed_blocks, draw_people, pack, site_sizes, write_admixed_bed

PEOPLE, VARIANTS = 2002, 500  # the last site holds 502 people: a padded last byte


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    folder = tmp_path_factory.mktemp("admixed")
    made = write_admixed_bed(folder, PEOPLE, VARIANTS, seed=3)
    counts = np.hstack([c for _, c, _, _ in admixed_blocks(draw_people(PEOPLE, seed=3), VARIANTS, seed=3)])
    return folder, made, counts  # counts (people, variants), 3 = missing


def test_sites_and_pooled_have_their_shapes(written):
    folder, made, _ = written
    assert made["sites"] == site_sizes(PEOPLE, 4) == [500, 500, 500, 502]
    for name, people in [(f"sites/partition_{s}", n) for s, n in enumerate(made["sites"])] + [("pooled", PEOPLE)]:
        assert (folder / f"{name}.bed").stat().st_size == 3 + VARIANTS * -(-people // 4)
        assert len((folder / f"{name}.fam").read_text().splitlines()) == people
        assert len((folder / f"{name}.bim").read_text().splitlines()) == VARIANTS
    assert np.load(folder / "admixture.npy").shape == (PEOPLE, 3)
    assert np.load(folder / "frequencies.npy").shape == (3, VARIANTS)
    assert 0.009 < made["missing"] < 0.011


def test_codes_decode_with_bed_reader_to_what_was_drawn(written):
    bed_reader = pytest.importorskip("bed_reader")
    folder, made, counts = written
    expected = np.where(counts == 3, np.nan, counts)
    pooled = bed_reader.open_bed(folder / "pooled.bed").read()
    np.testing.assert_array_equal(pooled, expected)
    start = 0
    for s, people in enumerate(made["sites"]):
        site = bed_reader.open_bed(folder / "sites" / f"partition_{s}.bed").read()
        np.testing.assert_array_equal(site, expected[start:start + people])
        start += people
    assert np.mean(counts == 3) == pytest.approx(made["missing"])


def test_allele_frequencies_are_those_drawn(written):
    folder, _, counts = written
    q, p = np.load(folder / "admixture.npy"), np.load(folder / "frequencies.npy")
    observed = np.ma.masked_equal(counts, 3).mean(axis=0).filled() / 2
    drawn = (q @ p).mean(axis=0)  # each person's expected frequency, averaged
    assert np.abs(observed - drawn).mean() < 0.01
    assert np.corrcoef(observed, drawn)[0, 1] > 0.99
    assert 0.2 < drawn.mean() < 0.8 and drawn.std() > 0.15  # spread over (0.05, 0.95) as drawn
    by_site = [(q[i:i + 500] @ p).mean() for i in (0, 500, 1000)]
    assert max(by_site) - min(by_site) > 0  # the sites' ancestry mixes differ


def test_neighbouring_variants_are_in_ld_that_decays(written):
    _, _, counts = written
    X = np.where(counts == 3, np.nan, counts.astype(float))
    X = np.where(np.isnan(X), np.nanmean(X, axis=0), X)
    X = (X - X.mean(axis=0)) / X.std(axis=0)
    r2 = (X.T @ X / len(X)) ** 2
    within = {k: np.mean([r2[j, j + k] for j in range(VARIANTS - k) if j // 50 == (j + k) // 50]) for k in (1, 20)}
    across = np.mean([r2[j, j + 50] for j in range(VARIANTS - 50)])  # always in different blocks
    assert within[1] > 0.1 and within[1] > 5 * within[20] and within[20] < 3 * across + 0.01
    assert across < 0.01


def test_the_files_follow_from_the_seed(tmp_path):
    write_admixed_bed(tmp_path / "a", 64, 120, seed=5)
    write_admixed_bed(tmp_path / "b", 64, 120, seed=5)
    write_admixed_bed(tmp_path / "c", 64, 120, seed=6)
    for name in ("pooled.bed", "sites/partition_3.bed", "admixture.npy", "pooled.fam", "pooled.bim"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    assert (tmp_path / "a" / "pooled.bed").read_bytes() != (tmp_path / "c" / "pooled.bed").read_bytes()


def test_pack_pads_with_code_00():
    counts = np.array([[0], [1], [2], [3], [1]], dtype=np.uint8)  # five people, one variant
    assert pack(counts).tolist() == [[0b01_00_10_11, 0b00_00_00_10]]


def test_the_benchmark_rejects_a_bad_size(capsys):
    from simulations.benchmarks.bench_biobank import main

    with pytest.raises(SystemExit) as stop:
        main(["--size", "100x"])
    assert stop.value.code == 2 and "--size '100x'" in capsys.readouterr().err


def test_the_ancestry_fit_is_exact_for_linear_scores():
    from simulations.benchmarks.bench_biobank import admixture_fit

    q = draw_people(400, seed=1)
    scores = q[:, :2] @ np.array([[2.0, -1.0], [0.5, 3.0]]) + 7
    assert admixture_fit(scores, q) == pytest.approx([1.0, 1.0, 1.0])
    assert max(admixture_fit(np.random.default_rng(0).standard_normal((400, 2)), q)) < 0.1


@pytest.mark.plink2
@pytest.mark.skipif(shutil.which("plink2") is None, reason="plink2 is not installed")
def test_the_benchmark_runs_sizes_and_keeps_earlier_ones(tmp_path, capsys):
    from simulations.benchmarks.bench_biobank import main
    from simulations.benchmarks.bench_plink2 import blas_choices

    common = ["--rank", "2", "--iteration-rank", "4", "--out", str(tmp_path / "out"), "--data", str(tmp_path / "d")]
    assert main(["--size", "400x1000", "--size", "240x600"] + common) == 0
    first = json.loads((tmp_path / "out" / "bench_biobank.json").read_text())
    assert [(r["people"], r["variants"]) for r in first] == [(240, 600), (400, 1000)]
    assert not (tmp_path / "d" / "400x1000").exists()  # each size's data removed after its runs
    big = first[1]
    assert len([m for m in big["methods"] if m["method"].startswith("plink2 --pca approx")]) == len(blas_choices())
    assert big["methods"][-1]["method"].startswith("plink2 --pca (exact")
    assert big["methods"][0]["one_minus_r"][0] < 1e-5 and min(big["methods"][0]["admixture_r2"]) > 0.5
    assert [s["people"] for s in big["site_passes"]] == [100] * 4
    capsys.readouterr()
    assert main(["--size", "240x600", "--exact-max-people", "100"] + common) == 0
    again = json.loads((tmp_path / "out" / "bench_biobank.json").read_text())
    assert again[1] == big and not again[0]["methods"][-1]["method"].startswith("plink2 --pca (exact")
    table = (tmp_path / "out" / "bench_biobank.md").read_text()
    assert "| 240 x 600 | plink2 --pca (exact) | not run" in table and "| 400 x 1,000 | fedspectral" in table
