"""Sites whose ``.bim`` files list their variants in another order, with A1/A2 exchanged or some missing."""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest

from fl_strategies.files.variants import align_variants, site_alignment

bed_reader = pytest.importorskip("bed_reader")

from tests.test_genotype_bed import (compare_sites, imputed_reference, simulated_sites,  # noqa: E402
                                    weighted_grm_and_diagonal)

ALLELES = [("A", "G"), ("C", "T"), ("A", "T"), ("G", "C"), ("T", "G")]


def write_site(path, G, ids, alleles) -> None:
    """Genotypes ``G`` (s, d) counting each variant's A1 (NaN: missing) as a ``.bed`` whose ``.bim`` lists ``ids``
    with ``alleles`` (A1, A2)."""
    d = G.shape[1]
    bed_reader.to_bed(path, np.asarray(G, dtype=np.float32), properties={
        "sid": list(ids), "chromosome": ["1"] * d, "bp_position": [int(i[2:]) for i in ids],
        "allele_1": [a for a, _ in alleles], "allele_2": [b for _, b in alleles]})


def disagreeing_sites(folder, sites, d):
    """Site 0 as it is; site 1 in another order with every third variant's A1/A2 exchanged (its calls counted
    ``2 - g``); site 2 without variants 5..9. Returns the variants the run keeps, in site 0's order: those every
    site holds, less the strand-ambiguous ones (A/T, C/G) site 1 lists the other way round."""
    ids = [f"rs{100 + j}" for j in range(d)]
    alleles = [ALLELES[j % len(ALLELES)] for j in range(d)]
    write_site(folder / "partition_0.bed", sites[0], ids, alleles)
    order = np.random.default_rng(1).permutation(d)
    G1 = sites[1][:, order].copy()
    swapped = order % 3 == 0
    G1[:, swapped] = 2 - G1[:, swapped]  # NaN stays NaN
    write_site(folder / "partition_1.bed", G1, [ids[j] for j in order],
               [alleles[j][::-1] if j % 3 == 0 else alleles[j] for j in order])
    held = [j for j in range(d) if not 5 <= j < 10]
    write_site(folder / "partition_2.bed", sites[2][:, held], [ids[j] for j in held], [alleles[j] for j in held])
    return [j for j in held if not (j % 3 == 0 and set(alleles[j]) in ({"A", "T"}, {"C", "G"}))]


def run(tmp_path, sites, d):
    (tmp_path / "data").mkdir()
    kept = disagreeing_sites(tmp_path / "data", sites, d)
    return compare_sites(tmp_path, len(sites), scale='"hwe"', rounds=30, rank=2), kept


def test_sites_in_another_order_with_swapped_alleles_and_missing_variants_are_aligned(tmp_path):
    from fl_strategies.kernels.linalg import subspace_distance

    sites = simulated_sites((50, 60, 45), 300, seed=11)
    model, kept = run(tmp_path, sites, 300)
    G = np.vstack([S[:, kept] for S in sites])  # the aligned pooled genotypes, counting site 0's A1
    assert model["components"].shape[1] == len(kept) == 295 - 40  # 40 ambiguous ones swapped at site 1 dropped
    np.testing.assert_allclose(model["mean"], np.nanmean(G, axis=0), rtol=0, atol=1e-12)
    X = imputed_reference(G, "hwe")
    weights = (G.shape[1] / (~np.isnan(G)).sum(axis=1)) ** 2  # plink2's correction for missingness, d / c_i
    values, vectors = np.linalg.eigh(X.T @ (weights[:, None] * X) / len(X))
    assert subspace_distance(model["components"].T, vectors[:, ::-1][:, :2]) < 1e-8
    np.testing.assert_allclose(model["singular_values"] ** 2, values[::-1][:2] * len(X), rtol=1e-8)
    K_fed, delta = weighted_grm_and_diagonal(G)  # the explained variance has plink2's diagonal
    np.testing.assert_allclose(model["explained_variance"] * (len(X) - 1) / G.shape[1],
                               np.linalg.eigvalsh(K_fed + np.diag(delta))[::-1][:2], rtol=1e-6)


def test_too_few_shared_variants_refuse_the_run_in_one_line():
    lists = {0: [(f"rs{j}", "A", "G") for j in range(10)], 1: [(f"rs{j}", "A", "G") for j in range(6, 16)]}
    with pytest.raises(ValueError, match=r"^the sites share 4 variants .*fewer than 0.5 .*12 not at every site"
                                         r"[^\n]*refusing to run on so few$"):
        align_variants(lists)


def test_alignment_keeps_the_shared_variants_flips_swapped_alleles_and_drops_mismatches():
    lists = {0: [("a", "A", "G"), ("b", "C", "T"), ("c", "A", "T"), ("d", "G", "T"), ("e", "A", "C")],
             1: [("e", "C", "A"), ("c", "T", "A"), ("b", "C", "T"), ("a", "A", "G"), ("d", "G", "C")]}
    variants, report = align_variants(lists)
    assert variants == [("a", "A", "G"), ("b", "C", "T"), ("e", "A", "C")]  # c: A/T read T/A, a swap or a flip
    assert report["mismatched"] == 1 and report["flipped"] == {0: 0, 1: 1}
    assert report["ambiguous"] == 0 and report["ambiguous-dropped"] == 1
    columns, flip = site_alignment(lists[1], variants)
    np.testing.assert_array_equal(columns, [2, -1, 1, 0, -1])
    np.testing.assert_array_equal(flip, [True, False, False, False, False])


def test_strand_ambiguous_variants_are_kept_only_in_one_order_and_all_dropped_with_drop_ambiguous():
    """A/T and C/G: listed in the same order at every site they are kept (and counted); listed the other way round
    at a site they are dropped, as a strand flip cannot be told from a swap; ``drop_ambiguous`` drops them all."""
    lists = {0: [("s1", "A", "T"), ("s2", "c", "g"), ("s3", "G", "C"), ("s4", "A", "G")],
             1: [("s1", "A", "T"), ("s2", "g", "c"), ("s3", "G", "C"), ("s4", "G", "A")],
             2: [("s4", "A", "G"), ("s3", "G", "C"), ("s2", "c", "g"), ("s1", "A", "T")]}
    plain = [("s5", "A", "G"), ("s6", "C", "T"), ("s7", "A", "C"), ("s8", "G", "T")]
    lists = {pid: variants + plain for pid, variants in lists.items()}
    variants, report = align_variants(lists)
    assert variants == [("s1", "A", "T"), ("s3", "G", "C"), ("s4", "A", "G")] + plain
    assert report["ambiguous"] == 2 and report["ambiguous-dropped"] == 1 and report["flipped"] == {0: 0, 1: 1, 2: 0}
    variants, report = align_variants(lists, drop_ambiguous=True)
    assert variants == [("s4", "A", "G")] + plain
    assert report["ambiguous"] == 0 and report["ambiguous-dropped"] == 3


@pytest.mark.plink2
@pytest.mark.skipif(shutil.which("plink2") is None, reason="plink2 is not installed")
@pytest.mark.parametrize("site", [0, 1, 2])
def test_plink2_score_with_the_runs_weights_gives_transforms_eigenvectors(tmp_path, site):
    """Site 1 lists the variants in another order with a third of A1/A2 exchanged, site 2 lacks five of them."""
    import pandas as pd

    from client_app.transform import main
    from fl_strategies.files.plink_outputs import score_command

    sites = simulated_sites((50, 60, 45), 300, seed=13)
    model, kept = run(tmp_path, sites, 300)
    (npz,) = (tmp_path / "out" / "estimates").glob("*.pca.npz")
    prefix = str(npz)[:-len(".pca.npz")]
    bed = tmp_path / "data" / f"partition_{site}.bed"
    assert main(["--model", str(npz), "--data", str(bed), "--out", str(tmp_path / "site.eigenvec")]) == 0
    vectors = np.loadtxt(tmp_path / "site.eigenvec", skiprows=1, usecols=(2, 3), ndmin=2)
    subprocess.run(score_command(str(bed)[:-4], prefix, 2, str(tmp_path / "score")) + ["--threads", "1"],
                   check=True, capture_output=True)
    table = pd.read_csv(tmp_path / "score.sscore", sep="\t")
    calls = table["ALLELE_CT"].to_numpy() / 2  # each person's non-missing calls of the model's variants
    sums = table[["PC1_SUM", "PC2_SUM"]].to_numpy() * (len(kept) / calls)[:, None]  # plink2's missingness factor
    G = sites[site][:, kept]
    np.testing.assert_array_equal(calls, (~np.isnan(G)).sum(axis=1))
    X = imputed_reference(np.vstack([S[:, kept] for S in sites]), "hwe")[sum(len(S) for S in sites[:site]):][:len(G)]
    exact = X @ model["components"].T / model["singular_values"] * (len(kept) / calls)[:, None]
    for written in (sums, vectors):  # both printed to 6 significant digits: at most half a unit of the 6th off
        assert np.all(np.abs(written - exact) <= 5e-6 * np.abs(exact) + 1e-12)
    print(f"site {site}: plink2 --score vs exact, max abs {np.abs(sums - exact).max():.2g} (largest score "
          f"{np.abs(exact).max():.3g}), max rel {np.max(np.abs(sums - exact) / np.abs(exact)):.2g}")


def test_a_run_whose_sites_share_too_few_variants_is_refused_in_one_line(tmp_path):
    from simulations.compare import run_comparison
    from simulations.compare.cli import ComparisonError

    sites = simulated_sites((30, 30), 40, seed=15)
    (tmp_path / "data").mkdir()
    ids = [f"rs{100 + j}" for j in range(40)]
    write_site(tmp_path / "data" / "partition_0.bed", sites[0], ids, [("A", "G")] * 40)
    write_site(tmp_path / "data" / "partition_1.bed", sites[1], ids[:15] + [f"rs{900 + j}" for j in range(25)],
               [("A", "G")] * 40)
    (tmp_path / "c.toml").write_text(f'''title = "genotypes"
[defaults]
dataset = "{tmp_path / 'data'}"
num-clients = 2
rank = 2
iteration-rank = 3
num-server-rounds = 3
center = true
row-normalize = false
[[runs]]
name = "fedpower"
strategy = "fedpower"
''')
    with pytest.raises(ComparisonError) as refused:  # before any run: the sites' files are read as `run` reads them
        run_comparison(tmp_path / "c.toml", out=tmp_path / "out")
    assert not (tmp_path / "out").exists() and "\n" not in str(refused.value)
    assert str(refused.value).endswith(
        "the sites share 15 variants (same ID and alleles), fewer than 0.5 of a site's (partition 0: 40, partition 1: "
        "40; 50 not at every site, 0 with other alleles, 0 listed twice at a site): refusing to run on so few")


def test_compare_draws_every_site_in_the_ancestry_space(tmp_path):
    run(tmp_path, simulated_sites((50, 60, 45), 300, seed=16), 300)
    (picture,) = (tmp_path / "out" / "estimates").glob("*.ancestry.png")
    assert picture.read_bytes()[:4] == b"\x89PNG"
