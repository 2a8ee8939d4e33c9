"""Outliers as smartpca removes them (``fl_strategies/kernels/outliers.py``): each site flags its own people from
the federation's score sums, they leave the fit (as a ``.keep`` leaves people out), the fit is run again."""

from __future__ import annotations

import numpy as np
import pytest

from fl_strategies.files.data_files import open_samples
from fl_strategies.files.pca import pca_model, transform
from fl_strategies.kernels.outliers import (federation_moments, flagged, outlier_passes, outlier_pcs,
                                            pooled_outliers, score_sums, site_outliers)

bed_reader = pytest.importorskip("bed_reader")

from test_genotype_bed import simulated_sites, write_bed  # noqa: E402


def sites_with_outliers(tmp_path, seed=8, d=300):
    """Three ``.bed`` sites (1 % missing calls) with one person of a distant population at sites 0 and 2 (each
    of their own: each one a PC of their own); the genotypes (s_i, d) and the opened files."""
    rng = np.random.default_rng(seed)
    sites = simulated_sites((50, 40, 45), d, seed=seed)
    for i in (0, 2):
        far = rng.uniform(0.02, 0.98, d)  # allele frequencies of a population none of the others resembles
        G = rng.binomial(2, far, (1, d)).astype(float)
        sites[i] = np.vstack([sites[i][:10], G, sites[i][10:]])
    files = [open_samples(write_bed(tmp_path / f"site{i}.bed", G)) for i, G in enumerate(sites)]
    return sites, files


def federated_fit(files, k=4):
    """A fit of the sites' ``people`` from sums alone (call counts, allele sums, each site's ``X_i^T X_i``), the
    mean-imputed centred rows as the runs fit them: the model of :func:`pca_model`."""
    def fit(people):
        kept = [X.subset(p) for X, p in zip(files, people)]
        mean = sum(S.stats()[0] for S in kept) / sum(S.call_counts() for S in kept)
        d = mean.size
        gram = sum((lambda L: L.T @ L)(S.left(np.eye(d), mean)) for S in kept)
        n = sum(S.num_rows for S in kept)
        C = gram / n
        values, vectors = np.linalg.eigh(C)
        Z = vectors[:, ::-1][:, :k + 2]
        return pca_model(Z, C @ Z, float(np.trace(C)), n, mean, k)

    def scores(i, model, people):
        return transform(model, files[i].subset(people))

    return fit, scores


def smartpca_numpy(G, sigma, iterations, pcs, k, start=None):
    """smartpca's loop on the pooled genotypes (n, d) (NaN missing): fit the people left (mean-imputed centred
    rows, SVD), z-scores about the mean with divisor n on the top min(pcs, k, n - 1) PCs, remove |z| > sigma, up to
    ``iterations`` times or until none is removed, from the rows ``start`` (bool, all by default); the kept rows
    (bool) and the final components (k, d)."""
    keep = np.ones(len(G), dtype=bool) if start is None else start.copy()

    def fit():
        mean = np.nanmean(G[keep], axis=0)
        X = np.nan_to_num(G[keep] - mean, nan=0.0)
        U, s, Vt = np.linalg.svd(X, full_matrices=False)
        return U[:, :k] * s[:k], Vt[:k]

    scores, components = fit()
    for _ in range(iterations):
        y = scores[:, :min(pcs, k, keep.sum() - 1)]
        z = (y - y.mean(axis=0)) / np.sqrt(((y - y.mean(axis=0)) ** 2).mean(axis=0))
        bad = np.any(np.abs(z) > sigma, axis=1)
        if not bad.any():
            break
        keep[np.flatnonzero(keep)[bad]] = False
        scores, components = fit()
    return keep, components


@pytest.mark.parametrize("sigma,iterations,pcs", [(6.0, 5, 10), (2.0, 3, 4), (2.2, 5, 3)])
def test_the_sites_remove_the_people_smartpcas_rule_removes_from_the_pooled_data(tmp_path, sigma, iterations, pcs,
                                                                                 caplog):
    """Sums only (each site's count, score sums and squares; the server learns per-site counts): the same people
    removed as smartpca's rule on the pooled genotypes, the same final model to 1e-10, each pass's counts logged."""
    sites, files = sites_with_outliers(tmp_path)
    fit, scores = federated_fit(files)
    with caplog.at_level("INFO", logger="flwr.fedspectral"):
        model, people, passes = outlier_passes(fit, scores, [np.arange(len(G)) for G in sites], sigma, iterations,
                                               pcs)
    keep, components = smartpca_numpy(np.vstack(sites), sigma, iterations, pcs, k=4)
    offsets = np.cumsum([0] + [len(G) for G in sites[:-1]])
    pooled_kept = np.concatenate([o + p for o, p in zip(offsets, people)])
    np.testing.assert_array_equal(pooled_kept, np.flatnonzero(keep))
    assert (~keep).sum() >= 1 and (sigma < 6 or not keep[10] or not keep[51 + 40 + 10])  # a distant person
    assert 1 <= len(passes) <= iterations and passes[0]["pcs"] == min(pcs, 4)
    signs = np.sign(np.sum(model["components"] * components, axis=1))
    np.testing.assert_allclose(model["components"], components * signs[:, None], rtol=0, atol=1e-10)
    assert model["n_samples"] == keep.sum()
    logged = [r.getMessage() for r in caplog.records if r.getMessage().startswith("outliers, pass")]
    assert len(logged) == len(passes)
    assert logged[0].endswith("(per site: " + ", ".join(map(str, passes[0]["counts"])) + ")")
    # every site recomputes its own list from the recorded passes alone
    for i, G in enumerate(sites):
        removed = site_outliers(lambda m, p, i=i: scores(i, m, p), np.arange(len(G)), passes, sigma)
        np.testing.assert_array_equal(np.sort(removed), np.setdiff1d(np.arange(len(G)), people[i]))
    if sigma == 2:  # removals on every pass allowed: the loop stops after outlier-iterations of them
        assert len(passes) == iterations and all(sum(p["counts"]) for p in passes)


def test_the_moments_are_those_of_the_pooled_scores_and_the_rule_is_strict():
    """The federation's mean and standard deviation (divisor n, about the mean) from per-site sums equal numpy's
    on the pooled scores; ``|z| > sigma`` strictly; a PC of zero spread flags nobody; fewer than 3 people none."""
    rng = np.random.default_rng(1)
    parts = [rng.standard_normal((s, 3)) * [1, 5, 0.1] + [2, -1, 0] for s in (7, 11, 4)]
    n, mean, sd = federation_moments([score_sums(y) for y in parts])
    pooled = np.vstack(parts)
    assert n == 22
    np.testing.assert_allclose(mean, pooled.mean(axis=0), rtol=1e-13)
    np.testing.assert_allclose(sd, pooled.std(axis=0, ddof=0), rtol=1e-12)
    y = np.array([[0.0], [2.0], [-2.0], [1.0]])
    np.testing.assert_array_equal(flagged(y, np.zeros(1), np.ones(1), 2.0), [False, False, False, False])
    np.testing.assert_array_equal(flagged(y, np.zeros(1), np.ones(1), 1.5), [False, True, True, False])
    np.testing.assert_array_equal(flagged(np.ones((4, 1)), np.ones(1), np.zeros(1), 0.5), [False] * 4)
    assert not pooled_outliers(np.array([[0.0], [100.0]]), 0.1).any()
    assert outlier_pcs(10, 4, 100) == 4 and outlier_pcs(10, 20, 6) == 5 and outlier_pcs(3, 20, 100) == 3


def run_outliers(tmp_path, sites, extra, strategy="covariance", rank=4, keeps=None, scale="false"):
    """``compare`` with one run over the sites as ``data/partition_<i>.bed`` (with a ``.keep`` of the positions
    ``keeps[i]`` where given) with ``extra`` run-config lines; the model's path."""
    from fl_strategies.files.variants import read_fam
    from simulations.compare import run_comparison

    (tmp_path / "data").mkdir(parents=True)
    for i, G in enumerate(sites):
        bed = write_bed(tmp_path / "data" / f"partition_{i}.bed", G)
        if keeps is not None and keeps[i] is not None:
            fam = read_fam(bed)
            (tmp_path / "data" / f"partition_{i}.keep").write_text("".join(f"{fam[j][0]} {fam[j][1]}\n"
                                                                           for j in keeps[i]))
    (tmp_path / "c.toml").write_text(f'''title = "outliers"
[defaults]
dataset = "{tmp_path / 'data'}"
num-clients = {len(sites)}
rank = {rank}
iteration-rank = {rank + 2}
num-server-rounds = 30
local-steps = 2
center = true
scale = "{scale}"
row-normalize = false
{extra}
[[runs]]
name = "{strategy}"
strategy = "{strategy}"
''')
    run_comparison(tmp_path / "c.toml", out=tmp_path / "out")
    (path,) = sorted((tmp_path / "out" / "estimates").glob("*.pca.npz"))
    return path


@pytest.mark.parametrize("sigma,iterations,pcs,strategy", [(6.0, 5, 4, "covariance"), (2.2, 3, 3, "covariance"),
                                                           (2.2, 2, 3, "krylov")])
def test_a_run_removes_smartpcas_outliers_and_transform_lists_them_at_each_site(tmp_path, sigma, iterations, pcs,
                                                                               strategy, caplog):
    """A run with outlier-sigma, site 1 fitting on the people of its ``.keep``: its model is the pooled fit
    without the people smartpca's rule removes from the pooled kept genotypes (components to 1e-10), each pass's
    per-site counts are logged, and ``transform`` writes each site's removed people (FID IID) beside its
    ``.eigenvec`` from the model alone (the people outside the ``.keep`` are no outliers)."""
    from client_app.transform import main as transform_main
    from fl_strategies.files.pca import load_model
    from fl_strategies.files.variants import read_fam

    sites, _ = sites_with_outliers(tmp_path)
    kept_1 = np.setdiff1d(np.arange(40), [3, 17, 30])
    with caplog.at_level("INFO", logger="flwr.fedspectral"):
        path = run_outliers(tmp_path / "run", sites, f"outlier-sigma = {sigma}\noutlier-iterations = {iterations}\n"
                            f"outlier-pcs = {pcs}", strategy=strategy, keeps=[None, kept_1, None])
    model = load_model(path)
    start = np.ones(sum(len(G) for G in sites), dtype=bool)
    start[51 + np.array([3, 17, 30])] = False
    keep, components = smartpca_numpy(np.vstack(sites), sigma, iterations, pcs, k=4, start=start)
    assert (start & ~keep).sum() >= 1 and model["n_samples"] == keep.sum()
    signs = np.sign(np.sum(model["components"] * components, axis=1))
    np.testing.assert_allclose(model["components"], components * signs[:, None], rtol=0, atol=1e-10)
    logged = [r.getMessage() for r in caplog.records if r.getMessage().startswith("outliers, pass")]
    assert logged and all("per site: partition 0 " in m for m in logged)
    import csv  # every fit's rounds in turn, each from round 0: one fit more than the passes that removed somebody

    with open(tmp_path / "run" / "out" / "results.csv", newline="") as handle:
        starts = sum(row["round"] == "0" for row in csv.DictReader(handle))
    assert starts == 1 + sum(int(m.split(": ")[1].split(" of ")[0]) > 0 for m in logged)
    offsets = np.cumsum([0] + [len(G) for G in sites[:-1]])
    for i, G in enumerate(sites):
        bed = tmp_path / "run" / "data" / f"partition_{i}.bed"
        out = str(tmp_path / f"s{i}.eigenvec")
        assert transform_main(["--model", str(path), "--data", str(bed), "--out", out]) == 0
        fam = read_fam(bed)
        listed = [tuple(line.split()) for line in (tmp_path / f"s{i}.outliers").read_text().splitlines()]
        expected = [tuple(fam[j][:2]) for j in range(len(G)) if start[offsets[i] + j] and not keep[offsets[i] + j]]
        assert listed == expected
    # an existing list is never written over without --force (the .eigenvec and its picture gone: nothing written)
    for name in ("s0.eigenvec", "s0.eigenvec.png"):
        (tmp_path / name).unlink()
    bed = str(tmp_path / "run" / "data" / "partition_0.bed")
    assert transform_main(["--model", str(path), "--data", bed, "--out", str(tmp_path / "s0.eigenvec")]) == 2
    assert not (tmp_path / "s0.eigenvec").exists()


def test_outlier_keys_are_refused_where_they_cannot_apply(tmp_path):
    """outlier-pcs beyond rank, an uncentred run, a secure covariance run (its SecAgg+ sums are Gram matrices), a
    checkpoint, bad values: one ConfigError naming the key; secure aggregation of power, krylov, ... is accepted
    (the passes' sums go through SecAgg+: tests/test_secure_outliers.py)."""
    from fl_strategies.settings.config import ConfigError, default_run_config, validate_run_config

    base = {**default_run_config(), "strategy": "fedpower", "center": True, "dataset": "nodes", "outlier-sigma": 6.0,
            "rank": 4, "iteration-rank": 6}
    assert validate_run_config({**base, "outlier-pcs": 4})["outlier-sigma"] == 6.0
    for strategy in ("fedpower", "power", "krylov"):
        secure = {**base, "strategy": strategy, "secure-aggregation": "true", "outlier-pcs": 4}
        assert validate_run_config(secure)["outlier-sigma"] == 6.0
    for extra, match in (({}, "outlier-pcs = 10 exceeds rank = 4"), ({"center": False, "outlier-pcs": 2}, "center"),
                         ({"strategy": "covariance", "secure-aggregation": "true", "outlier-pcs": 2},
                          "with secure-aggregation, a strategy of power"),
                         ({"checkpoint-dir": "ck", "outlier-pcs": 2}, "checkpoint-dir"),
                         ({"outlier-sigma": -1.0}, "outlier-sigma"), ({"outlier-iterations": 0}, "outlier-iterations")):
        with pytest.raises(ConfigError, match=match):
            validate_run_config({**base, **extra})


def test_rows_without_people_ids_are_refused_by_the_site(tmp_path):
    """A site with .npy rows cannot list its people: the outlier pass is refused there, naming why."""
    from client_app.data import NodeData
    from client_app.outlier_replies import OutlierClient

    np.save(tmp_path / "rows.npy", np.random.default_rng(0).standard_normal((10, 5)))
    data = NodeData({"dataset": "nodes", "num-clients": 1},
                    {"partition-id": 0, "data-path": str(tmp_path / "rows.npy")})
    with pytest.raises(ValueError, match="outlier-sigma needs PLINK genotype files"):
        OutlierClient(data).fit([np.eye(5)[:2]], {"phase": "outlier-scores"})


SMARTPCA = "/usr/lib/eigensoft/smartpca"  # the program; /usr/bin/smartpca is Debian's perl wrapper of it


@pytest.mark.smartpca
@pytest.mark.skipif(not __import__("os").access(SMARTPCA, __import__("os").X_OK), reason="eigensoft not installed")
@pytest.mark.parametrize("sigma,pcs", [(6.0, 4), (3.0, 3)])
def test_the_people_removed_are_those_smartpca_removes(tmp_path, sigma, pcs):
    """eigensoft's smartpca on the pooled file (``numoutlieriter`` 5, ``numoutlierevec``, ``outliersigmathresh``)
    and a run over the sites with ``scale = "hwe"``: the same people removed (smartpca's ``REMOVED outlier``
    lines, the sites' ``.outliers``)."""
    import re
    import subprocess

    from client_app.transform import main as transform_main

    sites, _ = sites_with_outliers(tmp_path)
    path = run_outliers(tmp_path / "run", sites, f"outlier-sigma = {sigma}\noutlier-iterations = 5\n"
                        f"outlier-pcs = {pcs}", scale="hwe")
    removed = []
    for i in range(len(sites)):
        bed = tmp_path / "run" / "data" / f"partition_{i}.bed"
        out = str(tmp_path / f"s{i}.eigenvec")
        assert transform_main(["--model", str(path), "--data", str(bed), "--out", out]) == 0
        removed += [(i, line.split()[1]) for line in (tmp_path / f"s{i}.outliers").read_text().splitlines()]
    pooled = tmp_path / "pooled"
    write_bed(pooled.with_suffix(".bed"), np.vstack(sites))
    # smartpca wants chromosomes 1-22 with positions, and column 6 of the .fam a phenotype it does not ignore
    bim = pooled.with_suffix(".bim")
    bim.write_text("".join(f"1\t{f[1]}\t0\t{10000 * (j + 1)}\t{f[4]}\t{f[5]}\n"
                           for j, f in enumerate(line.split() for line in bim.read_text().splitlines())))
    owner = [i for i, G in enumerate(sites) for _ in range(len(G))]
    fam = pooled.with_suffix(".fam")
    iids = [line.split()[1] for line in fam.read_text().splitlines()]
    fam.write_text("".join(f"F{j}\t{iid}\t0\t0\t0\t1\n" for j, iid in enumerate(iids)))
    (tmp_path / "par.txt").write_text(
        f"genotypename: {pooled}.bed\nsnpname: {bim}\nindivname: {fam}\nevecoutname: {pooled}.evec\n"
        f"evaloutname: {pooled}.eval\nnumoutevec: 4\nnumoutlieriter: 5\nnumoutlierevec: {pcs}\n"
        f"outliersigmathresh: {sigma}\noutlieroutname: {pooled}.outliers\nnumthreads: 1\n")
    subprocess.run([SMARTPCA, "-p", str(tmp_path / "par.txt")], check=True, capture_output=True, cwd=tmp_path,
                   timeout=300)
    text = pooled.with_suffix(".outliers").read_text()
    smartpca = [int(j) for j in re.findall(r"REMOVED outlier F(\d+):", text)]
    # the site files' IIDs restart at each site: name each removed person by (site, IID) on both sides
    site_iids = [line.split()[1] for i in range(len(sites))
                 for line in (tmp_path / "run" / "data" / f"partition_{i}.fam").read_text().splitlines()]
    assert smartpca and sorted((owner[j], site_iids[j]) for j in smartpca) == sorted(removed)


@pytest.mark.ray
@pytest.mark.timeout(400)
@pytest.mark.parametrize("run", ['strategy="covariance"',
                                 'strategy="krylov" secure-aggregation="true" num-server-rounds=30'])
def test_fedspectral_run_removes_the_outliers_on_flowers_engine(tmp_path, flower_processes, run):
    """``fedspectral run`` (Flower's Ray engine: each node keeps its removed people in its state between messages)
    over a folder of ``.bed`` sites, plain and with SecAgg+ (the passes' sums through Flower's secaggplus_mod): the
    model is the pooled fit without smartpca's outliers, and each site's ``.outliers`` lists its people that the
    pooled rule removes."""
    import subprocess
    import sys

    from client_app.transform import main as transform_main
    from fl_strategies.files.pca import load_model

    sites, _ = sites_with_outliers(tmp_path)
    (tmp_path / "data").mkdir()
    for i, G in enumerate(sites):
        write_bed(tmp_path / "data" / f"partition_{i}.bed", G)
    done = subprocess.run([sys.executable, "-m", "fedspectral", "run", "--run-config",
                           f'dataset="{tmp_path / "data"}" num-clients=3 center=true row-normalize=false '
                           f'{run} rank=4 iteration-rank=6 results-dir="pca-out" outlier-sigma=2.2 '
                           'outlier-iterations=3 outlier-pcs=3'], cwd=tmp_path, capture_output=True, text=True,
                          timeout=380)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    keep, components = smartpca_numpy(np.vstack(sites), 2.2, 3, 3, k=4)
    model = load_model(tmp_path / "pca-out" / "pca.npz")
    assert model["n_samples"] == keep.sum() < len(keep)
    signs = np.sign(np.sum(model["components"] * components, axis=1))
    np.testing.assert_allclose(model["components"], components * signs[:, None], rtol=0, atol=1e-10)
    offsets = np.cumsum([0] + [len(G) for G in sites[:-1]])
    for i, G in enumerate(sites):
        out = str(tmp_path / f"s{i}.eigenvec")
        bed = str(tmp_path / "data" / f"partition_{i}.bed")
        assert transform_main(["--model", str(tmp_path / "pca-out" / "pca.npz"), "--data", bed, "--out", out]) == 0
        listed = [line.split()[1] for line in (tmp_path / f"s{i}.outliers").read_text().splitlines()]
        assert len(listed) == int((~keep[offsets[i]:offsets[i] + len(G)]).sum())
