"""Variant QC across sites: ``maf-min`` and ``geno-max`` (plink2's ``--maf`` and ``--geno``) from federated counts."""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest

from fl_strategies.kernels.variant_qc import variant_filter

bed_reader = pytest.importorskip("bed_reader")

from tests.test_genotype_bed import imputed_reference, run_sites, simulated_sites, write_bed  # noqa: E402


def numpy_filter(G, maf_min, geno_max):
    """plink2's definitions on the pooled genotypes ``G`` (n, d), NaN missing: keep where the missing-call rate is
    at most ``geno_max`` and the minor allele frequency over the calls at least ``maf_min``; (d,) bool."""
    called = ~np.isnan(G)
    rate = 1 - called.mean(axis=0)
    with np.errstate(invalid="ignore"):
        p = np.nansum(G, axis=0) / (2 * called.sum(axis=0))
    maf = np.minimum(p, 1 - p)
    return (rate <= geno_max) & (maf >= maf_min)


def qc_sites(sizes, d, seed):
    """Sites of genotypes with 1 % missing calls, a tenth of the variants with 2..20 % missing calls and a tenth
    made rare (MAF under 5 %): what the filters are for."""
    sites = simulated_sites(sizes, d, seed=seed, populations=4)
    rng = np.random.default_rng(seed + 100)
    patchy = rng.choice(d, d // 10, replace=False)
    rates = rng.uniform(0.02, 0.2, size=patchy.size)
    rare = rng.choice(np.setdiff1d(np.arange(d), patchy), d // 10, replace=False)
    for G in sites:
        G[:, patchy] = np.where(rng.random((G.shape[0], patchy.size)) < rates, np.nan, G[:, patchy])
        G[:, rare] = np.where(np.isnan(G[:, rare]), np.nan,
                              (rng.random((G.shape[0], rare.size)) < 0.03).astype(float))
    return sites


def test_the_filter_is_plink2s_definitions_from_summed_counts():
    sites = qc_sites((40, 55, 35), 500, seed=21)
    G = np.vstack(sites)
    calls = sum((~np.isnan(S)).sum(axis=0) for S in sites).astype(float)
    sums = sum(np.nansum(S, axis=0) for S in sites)
    for maf_min, geno_max in ((0.0, 1.0), (0.05, 1.0), (0.0, 0.05), (0.05, 0.05), (0.2, 0.1), (0.5, 0.0)):
        keep, by_geno, by_maf = variant_filter(calls, sums, G.shape[0], maf_min, geno_max)
        expected = numpy_filter(G, maf_min, geno_max)
        np.testing.assert_array_equal(keep, expected)
        rate = 1 - (~np.isnan(G)).mean(axis=0)
        assert by_geno == int(np.sum(rate > geno_max))
        assert by_geno + by_maf == int(np.sum(~expected))
    keep, by_geno, by_maf = variant_filter(calls, sums, G.shape[0], 0.05, 0.05)
    assert 0 < by_geno < 500 and 0 < by_maf < 500  # the data exercise both filters


def test_thresholds_are_inclusive_and_a_variant_without_a_call_has_no_frequency():
    calls = np.array([10.0, 9.0, 8.0, 0.0, 10.0, 10.0])
    sums = np.array([1.0, 9.0, 0.0, 0.0, 19.0, 2.0])  # MAF 0.05, 0.5, 0, -, 0.05, 0.1
    keep, by_geno, by_maf = variant_filter(calls, sums, 10, maf_min=0.05, geno_max=0.1)
    np.testing.assert_array_equal(keep, [True, True, False, False, True, True])
    assert (by_geno, by_maf) == (2, 0)  # 20 % and 100 % missing above 0.1; variant 2's MAF 0 is one of them
    keep, by_geno, by_maf = variant_filter(calls, sums, 10, maf_min=0.0, geno_max=1.0)
    assert keep.all() and by_geno == by_maf == 0  # the defaults keep every variant, one without a call too


def test_a_filtered_run_is_the_model_of_the_kept_variants_and_transform_applies_it_to_a_whole_file(tmp_path):
    from fl_strategies.files.data_files import open_samples
    from fl_strategies.files.pca import transform
    from fl_strategies.files.variants import as_variants, read_bim
    from fl_strategies.kernels.linalg import subspace_distance

    sites = qc_sites((50, 60, 45), 400, seed=22)
    G = np.vstack(sites)
    model = run_sites(tmp_path, sites, scale='"hwe"', rank=3, rounds=60,
                      extra="maf-min = 0.05\ngeno-max = 0.05")
    keep = numpy_filter(G, 0.05, 0.05)
    ids = [vid for _, vid, _, _, _ in read_bim(tmp_path / "data" / "partition_0.bed")]
    assert [vid for vid, _, _ in model["variants"]] == [vid for vid, k in zip(ids, keep) if k]
    assert 0 < keep.sum() < 400 - 40
    Gk = G[:, keep]
    np.testing.assert_allclose(model["mean"], np.nanmean(Gk, axis=0), rtol=0, atol=1e-12)
    p = np.nanmean(Gk, axis=0) / 2
    np.testing.assert_allclose(model["scale"], np.sqrt(2 * p * (1 - p)), rtol=1e-12)
    called = ~np.isnan(Gk)
    weights = Gk.shape[1] / called.sum(axis=1)  # plink2's correction for missingness, over the kept variants
    X = imputed_reference(Gk, "hwe") * weights[:, None]
    values, vectors = np.linalg.eigh(X.T @ X / len(X))
    assert subspace_distance(model["components"].T, vectors[:, ::-1][:, :3]) < 1e-8
    write_bed(tmp_path / "new.bed", sites[1])  # a new sample's file with every variant
    X_new = as_variants(open_samples(tmp_path / "new.bed"), tmp_path / "new.bed", model["variants"])
    scores = transform(model, X_new)
    S = sites[1][:, keep]
    w = S.shape[1] / (~np.isnan(S)).sum(axis=1)
    expected = (imputed_reference_with(S, model["mean"], model["scale"]) * w[:, None]) @ model["components"].T
    np.testing.assert_allclose(scores, expected, rtol=0, atol=1e-9)


def imputed_reference_with(G, mean, scale):
    """``(g - mean) / scale`` with missing calls 0, (s, d)."""
    return np.nan_to_num((G - mean) / scale, nan=0.0)


def test_filters_that_keep_too_few_variants_or_meet_data_without_variants_are_refused(tmp_path):
    from simulations.compare import run_comparison

    sites = qc_sites((30, 30), 60, seed=23)
    with pytest.raises(Exception, match=r"maf-min = 0.5 keep \d+ of the 60 variants .*fewer than iteration-rank"):
        run_sites(tmp_path, sites, rank=2, extra="maf-min = 0.5")
    folder = tmp_path / "npy"
    folder.mkdir()
    for i, S in enumerate(sites):
        np.save(folder / f"partition_{i}.npy", np.nan_to_num(S).astype(np.int8))
    (tmp_path / "n.toml").write_text(f'''title = "int8"
[defaults]
dataset = "{folder}"
num-clients = 2
rank = 2
num-server-rounds = 3
center = true
geno-max = 0.1
[[runs]]
name = "fedpower"
strategy = "fedpower"
''')
    with pytest.raises(Exception, match="geno-max = 0.1: the variant filters apply to PLINK .bed data"):
        run_comparison(tmp_path / "n.toml", out=tmp_path / "out_npy")


@pytest.mark.plink2
@pytest.mark.skipif(shutil.which("plink2") is None, reason="plink2 is not installed")
def test_the_kept_variants_and_pcs_are_plink2s_with_maf_and_geno(tmp_path):
    """``plink2 --maf 0.05 --geno 0.05 --pca 3 --write-snplist`` on the pooled ``.bed`` against a run over four
    sites with the same thresholds: the same variants kept, the PCs above the noise to |r| >= 0.99999."""
    from fl_strategies.files.data_files import open_samples
    from fl_strategies.files.pca import transform
    from fl_strategies.files.variants import as_variants

    sites = qc_sites((60, 50, 70, 40), 1500, seed=24)
    G = np.vstack(sites)
    model = run_sites(tmp_path, sites, scale='"hwe"', rank=3, rounds=60,
                      extra="maf-min = 0.05\ngeno-max = 0.05")
    write_bed(tmp_path / "pooled.bed", G)
    subprocess.run(["plink2", "--bfile", str(tmp_path / "pooled"), "--maf", "0.05", "--geno", "0.05",
                    "--pca", "3", "--write-snplist", "--threads", "1", "--out", str(tmp_path / "plink2")],
                   check=True, capture_output=True)
    theirs = (tmp_path / "plink2.snplist").read_text().split()
    assert [vid for vid, _, _ in model["variants"]] == theirs
    scores = np.vstack([transform(model, as_variants(open_samples(tmp_path / "data" / f"partition_{i}.bed"),
                                                     tmp_path / "data" / f"partition_{i}.bed", model["variants"]))
                        for i in range(len(sites))])
    vectors = np.loadtxt(tmp_path / "plink2.eigenvec", skiprows=1, usecols=(2, 3, 4))
    correlation = np.array([abs(np.corrcoef(scores[:, j], vectors[:, j])[0, 1]) for j in range(3)])
    print("kept", len(theirs), "of", G.shape[1], "per-PC 1 - |r|", 1 - correlation)
    assert np.all(correlation >= 0.99999)


@pytest.mark.parametrize("strategy", ["krylov", "power"])
def test_with_secure_aggregation_the_filters_come_from_the_secagg_sums_and_give_the_plain_runs_model(tmp_path,
                                                                                                     strategy):
    """maf-min and geno-max under SecAgg+: the filter from the secure sums of the call counts and allele sums (the
    nodes send none in the clear), the kept variants sent with the next exchange, Z_0 drawn in their dimension:
    the plain filtered run's variants, mean, scale and model."""
    from conftest import run_app
    from test_secure_power import assert_same_model

    sites = qc_sites((60, 50, 70, 55), 300, seed=24)
    (tmp_path / "data").mkdir()
    for i, G in enumerate(sites):
        write_bed(tmp_path / "data" / f"partition_{i}.bed", G)
    keep = numpy_filter(np.vstack(sites), 0.05, 0.05)
    assert 20 < keep.sum() < 280  # both filters drop variants
    cfg = dict(strategy=strategy, dataset=str(tmp_path / "data"), num_clients=4, rank=2, iteration_rank=3,
               num_server_rounds=25, center=True, scale="hwe", row_normalize=False, maf_min=0.05, geno_max=0.05)
    plain = run_app(**cfg)
    secure = run_app(**cfg, secure_aggregation="true", secagg_clip=1e12)
    assert plain.d == secure.d == int(keep.sum())
    assert secure.variants == plain.variants
    assert not any("row-sum" in props or "call-count" in props for props in secure.node_properties.values())
    np.testing.assert_allclose(secure.mean, plain.mean, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(secure.scale, plain.scale, rtol=1e-12, atol=0)
    assert_same_model(secure, plain)


def test_with_secure_aggregation_filters_that_keep_too_few_variants_stop_the_run_in_one_line(tmp_path):
    from conftest import run_app

    from fl_strategies.protocol.base import RunFailed

    sites = qc_sites((30, 30, 30), 60, seed=25)
    (tmp_path / "data").mkdir()
    for i, G in enumerate(sites):
        write_bed(tmp_path / "data" / f"partition_{i}.bed", G)
    with pytest.raises(RunFailed, match=r"maf-min = 0.5 keep \d+ of the 60 variants .*fewer than iteration-rank"):
        run_app(strategy="krylov", dataset=str(tmp_path / "data"), num_clients=3, rank=2, iteration_rank=2,
                num_server_rounds=5, center=True, scale="hwe", row_normalize=False, maf_min=0.5,
                secure_aggregation="true", secagg_clip=1e12)


def test_with_the_filters_no_message_from_a_node_holds_its_own_call_counts_or_allele_sums(tmp_path):
    """Every value of every message the server receives in a secure filtered run: no site's row count, call counts,
    allele (row) sums or sums of squares, over all variants or over the kept ones, in the clear or as float64
    bytes; the discovery properties as without the filters. The same scan finds them in the plain run's."""
    from test_secure_power import _leaks, _received, _site_secrets, assert_only_public_fields, secure_recorded

    sites = qc_sites((101, 97, 113), 150, seed=37)
    (tmp_path / "data").mkdir()
    for i, G in enumerate(sites):
        write_bed(tmp_path / "data" / f"partition_{i}.bed", G)
    cfg = dict(strategy="power", dataset=str(tmp_path / "data"), num_clients=3, rank=2, iteration_rank=2,
               num_server_rounds=2, center=True, scale="hwe", row_normalize=False, secagg_clip=1e12,
               maf_min=0.05, geno_max=0.05)
    plain, plain_grid = secure_recorded(**cfg)
    kept_ids = [vid for vid, _, _ in plain.variants]
    assert 0 < len(kept_ids) < 150
    keep = np.isin([f"sid{j + 1}" for j in range(150)], kept_ids)  # bed_reader's default variant IDs
    assert int(np.sum(keep)) == len(kept_ids)
    secrets = _site_secrets(sites) + _site_secrets([G[:, keep] for G in sites])  # over all and the kept variants
    found = _leaks(_received(plain_grid), secrets)
    assert {f.split(" in ")[0].split(" = ")[0] for f in found} >= {f"site {i} {what}" for i in range(3) for what in
                                                                  ("rows", "call counts", "row sum")}
    secure, grid = secure_recorded(**cfg, secure_aggregation="true")
    received = _received(grid)
    assert [vid for vid, _, _ in secure.variants] == kept_ids
    assert _leaks(received, secrets) == []
    assert_only_public_fields(received, 3)
