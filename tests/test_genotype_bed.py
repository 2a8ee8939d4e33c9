"""PLINK ``.bed`` files read in their own variant-major order: products, discovery sums and ``transform``."""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest

from fl_strategies.files.data_files import open_samples
from fl_strategies.kernels.products import LocalOperator
from fl_strategies.kernels.rows import BedVariants

bed_reader = pytest.importorskip("bed_reader")


def write_bed(path, G) -> str:
    """``G`` (n, d) of 0/1/2 (NaN: a missing call) as a PLINK ``.bed`` with its ``.fam`` and ``.bim``."""
    bed_reader.to_bed(path, np.asarray(G, dtype=np.float32))
    return str(path)


class Recorder:
    """The raw bytes of a :class:`BedVariants`, recording which variant slices are read."""

    def __init__(self, raw):
        self.raw, self.reads, self.shape, self.nbytes = raw, [], raw.shape, raw.nbytes

    def __getitem__(self, index):
        self.reads.append((index.start, index.stop))
        return self.raw[index]


def test_a_bed_product_reads_the_file_in_variant_blocks_in_file_order(tmp_path):
    rng = np.random.default_rng(0)
    G = rng.integers(0, 3, (37, 101)).astype(float)
    X = open_samples(write_bed(tmp_path / "g.bed", G))
    assert isinstance(X, BedVariants) and X.shape == (37, 101)
    X.product_block, X.right_block, X.threads = 10, 10, 1  # variants per block, one thread: blocks in file order
    X.code_counts  # the codes counted (one read, on first use) before the reads recorded
    X.rows = recorder = Recorder(X.rows)
    op = LocalOperator.from_rows(X)
    mean, scale = G.mean(axis=0), G.std(axis=0) + 0.5
    Z = rng.standard_normal((101, 3))
    Xc = (G - mean) / scale
    np.testing.assert_allclose(op.centered(mean, scale) @ Z, Xc.T @ (Xc @ Z) / 37, rtol=0, atol=1e-12)
    blocks = [(start, min(start + 10, 101)) for start in range(0, 101, 10)]
    assert recorder.reads == [(a, a + 10) for a, _ in blocks] + blocks  # two passes (X Z, then X^T Y), in order
    np.testing.assert_allclose(op @ Z, G.T @ (G @ Z) / 37, rtol=0, atol=1e-12)
    np.testing.assert_allclose(op.centered(mean, scale).trace(), np.trace(Xc.T @ Xc) / 37, rtol=1e-13)


@pytest.mark.parametrize("people", [28, 29, 30, 31])
def test_decoding_agrees_with_bed_reader_whatever_the_padding(tmp_path, people):
    G = np.random.default_rng(people).integers(0, 3, (people, 23)).astype(float)
    X = open_samples(write_bed(tmp_path / "g.bed", G))
    X.block = 4
    np.testing.assert_array_equal(np.asarray(X), bed_reader.open_bed(tmp_path / "g.bed").read(dtype="float64"))
    total, squares = X.stats()
    np.testing.assert_array_equal(total, G.sum(axis=0))
    np.testing.assert_array_equal(squares, (G * G).sum(axis=0))


def test_a_fam_short_of_a_person_is_refused(tmp_path):
    G = np.random.default_rng(2).integers(0, 3, (32, 40)).astype(float)
    path = write_bed(tmp_path / "g.bed", G)
    fam = (tmp_path / "g.fam").read_text().splitlines()
    (tmp_path / "g.fam").write_text("\n".join(fam[:-1]) + "\n")  # 31 people fit the same bytes as 32
    with pytest.raises(ValueError, match=r"g.bed'.*calls beyond the 31 people its .fam lists"):
        open_samples(path, "node config data-path")


def test_transform_of_a_bed_reads_it_in_variant_order(tmp_path):
    from client_app.transform import main

    rng = np.random.default_rng(3)
    G = rng.integers(0, 3, (21, 30)).astype(float)
    write_bed(tmp_path / "g.bed", G)
    components = np.linalg.qr(rng.standard_normal((30, 2)))[0].T
    model = {"components": components, "mean": G.mean(axis=0) + 0.1, "scale": G.std(axis=0) + 0.2,
             "explained_variance": np.array([2.0, 1.0]), "explained_variance_ratio": np.array([0.2, 0.1]),
             "singular_values": np.array([3.0, 2.0]), "n_samples": 21}
    from fl_strategies.files.pca import save_model

    save_model(tmp_path / "pca.npz", model, {"center": True})
    assert main(["--model", str(tmp_path / "pca.npz"), "--data", str(tmp_path / "g.bed"),
                 "--out", str(tmp_path / "s.npy")]) == 0
    expected = ((G - model["mean"]) / model["scale"]) @ components.T
    np.testing.assert_allclose(np.load(tmp_path / "s.npy"), expected, rtol=0, atol=1e-12)


def simulated_sites(sizes, d, missing=0.01, seed=5, populations=3):
    """Genotypes of several populations (Balding-Nichols) at sites of ``sizes`` people, with ``missing`` of the calls
    missing (NaN) and variant 0 missing at the whole of site 0 (with ``missing > 0``); a list of float (s_i, d)
    arrays."""
    from simulations.data.genotypes import genotype_sites

    rng = np.random.default_rng(seed)
    sites = [G.astype(float) for G in genotype_sites(sizes, d, populations=populations, seed=seed)]
    for G in sites:
        G[rng.random(G.shape) < missing] = np.nan
    if missing > 0:
        sites[0][:, 0] = np.nan
    return sites


def imputed_reference(G, scale="none"):
    """The centred pooled genotypes with missing calls mean-imputed (0 after centring), (n, d): ``(g - 2p) /
    sqrt(2p(1-p))`` with ``scale = "hwe"`` (plink2's documented standardisation, monomorphic variants 0), over the
    standard deviation of the non-missing calls with ``scale = "std"``."""
    mean = np.nanmean(G, axis=0)
    X = np.nan_to_num(G - mean, nan=0.0)
    if scale == "hwe":
        p = mean / 2
        sd = np.sqrt(2 * p * (1 - p))
        X = np.divide(X, sd, out=np.zeros_like(X), where=sd > 0)
    elif scale == "std":
        sd = np.nanstd(G, axis=0)
        X = X / np.where(sd > 0, sd, 1.0)
    return X


def run_sites(tmp_path, sites, scale="false", rounds=30, rank=2, extra=""):
    """``compare`` with one fedpower run over the sites as ``.bed`` files; the written model."""
    (tmp_path / "data").mkdir()
    for i, G in enumerate(sites):
        write_bed(tmp_path / "data" / f"partition_{i}.bed", G)
    return compare_sites(tmp_path, len(sites), scale=scale, rounds=rounds, rank=rank, extra=extra)


def compare_sites(tmp_path, num_clients, scale="false", rounds=30, rank=2, extra=""):
    """``compare`` with one fedpower run over the site files in ``tmp_path / "data"`` (``extra``: more lines of its
    defaults); the written model."""
    from fl_strategies.files.pca import load_model
    from simulations.compare import run_comparison

    (tmp_path / "c.toml").write_text(f'''title = "genotypes"
[defaults]
dataset = "{tmp_path / 'data'}"
num-clients = {num_clients}
rank = {rank}
iteration-rank = {rank + 2}
num-server-rounds = {rounds}
local-steps = 2
center = true
scale = {scale}
row-normalize = false
{extra}
[[runs]]
name = "fedpower"
strategy = "fedpower"
''')
    run_comparison(tmp_path / "c.toml", out=tmp_path / "out")
    (path,) = sorted((tmp_path / "out" / "estimates").glob("*.pca.npz"))
    return load_model(path)


def test_missing_calls_are_mean_imputed_inside_the_products(tmp_path):
    from fl_strategies.kernels.linalg import subspace_distance

    sites = simulated_sites((60, 50, 70), 400)
    G = np.vstack(sites)
    model = run_sites(tmp_path, sites)
    np.testing.assert_allclose(model["mean"], np.nanmean(G, axis=0), rtol=0, atol=1e-12)
    assert not list((tmp_path / "out" / "estimates").glob("*.eigenval"))  # not plink2's model without scale = hwe
    X = imputed_reference(G)
    values, vectors = np.linalg.eigh(X.T @ X / len(X))
    assert subspace_distance(model["components"].T, vectors[:, ::-1][:, :2]) < 1e-8
    np.testing.assert_allclose(model["explained_variance"], values[::-1][:2] * len(X) / (len(X) - 1), rtol=1e-8)
    np.testing.assert_allclose(model["explained_variance_ratio"], values[::-1][:2] / values.sum(), rtol=1e-8)
    write_bed(tmp_path / "new.bed", sites[1])
    X = open_samples(tmp_path / "new.bed")
    from fl_strategies.files.pca import transform

    scores = transform(model, X)  # a new sample's missing call gets the model's mean
    np.testing.assert_allclose(scores, np.nan_to_num(sites[1] - model["mean"], nan=0.0) @ model["components"].T,
                               rtol=0, atol=1e-10)


def test_scale_true_with_missing_calls_is_standard_scaler_over_the_calls(tmp_path):
    from fl_strategies.kernels.linalg import subspace_distance

    sites = simulated_sites((40, 50, 45), 300, seed=6)
    G = np.vstack(sites)
    model = run_sites(tmp_path, sites, scale="true")
    sd = np.nanstd(G, axis=0)
    np.testing.assert_allclose(model["scale"], np.where(sd > 0, sd, 1.0), rtol=1e-10)
    X = imputed_reference(G, "std")
    values, vectors = np.linalg.eigh(X.T @ X / len(X))
    assert subspace_distance(model["components"].T, vectors[:, ::-1][:, :2]) < 1e-8
    np.testing.assert_allclose(model["explained_variance_ratio"], values[::-1][:2] / values.sum(), rtol=1e-8)


def plink2_grm(G):
    """plink2's documented ``--pca`` matrix of genotypes ``G`` (n, d) (NaN: missing): ``X X^T / N`` with ``X`` the
    variance-standardised genotypes ``(g - 2p) / sqrt(2 p (1 - p))`` (missing calls 0, monomorphic variants 0) and
    ``N_ij`` the variants both people have called (``d`` without missing calls); (n, n)."""
    X = imputed_reference(G, "hwe")
    called = (~np.isnan(G)).astype(float)
    return X @ X.T / (called @ called.T)


def scores_and_eigenvalues(tmp_path, model, sites):
    """The model's scores of every site's people (``transform`` of each ``.bed``), (n, k), and its eigenvalues on
    plink2's scale (of the GRM), (k,)."""
    from fl_strategies.files.pca import transform

    scores = np.vstack([transform(model, open_samples(tmp_path / "data" / f"partition_{i}.bed"))
                        for i in range(len(sites))])
    n, d = scores.shape[0], model["components"].shape[1]
    return scores, model["explained_variance"] * (n - 1) / d


def per_pc_agreement(scores, values, K, k):
    """``(|correlation| of each score column with K's eigenvector, our eigenvalue over K's)``, each (k,)."""
    reference_values, vectors = np.linalg.eigh(K)
    reference_values, vectors = reference_values[::-1][:k], vectors[:, ::-1][:, :k]
    correlation = np.array([abs(np.corrcoef(scores[:, j], vectors[:, j])[0, 1]) for j in range(k)])
    return correlation, values[:k] / reference_values


def test_scale_hwe_is_plink2s_pca_without_missing_calls(tmp_path):
    sites = simulated_sites((60, 50, 70, 40), 800, missing=0.0, seed=7, populations=4)
    for G in sites:
        G[:, 0] = 0.0  # a monomorphic variant: in plink2's denominator, 0 in every product
    G = np.vstack(sites)
    model = run_sites(tmp_path, sites, scale='"hwe"', rank=3, rounds=60)
    p = np.nanmean(G, axis=0) / 2
    np.testing.assert_allclose(model["scale"], np.where(p * (1 - p) > 0, np.sqrt(2 * p * (1 - p)), 1.0), rtol=1e-12)
    scores, values = scores_and_eigenvalues(tmp_path, model, sites)
    correlation, ratio = per_pc_agreement(scores, values, plink2_grm(G), 3)
    assert np.all(correlation >= 1 - 1e-10)
    np.testing.assert_allclose(ratio, 1.0, rtol=1e-8)


def weighted_grm_and_diagonal(G):
    """What the federated run stands for on genotypes ``G`` (n, d) with missing calls: ``K_fed = X X^T d / (c_i
    c_j)`` (the rows weighted by ``d / c_i``) and plink2's diagonal ``delta_i = ||x_i||^2 (1 / c_i - d / c_i^2)``
    (``N_ii = c_i``); ((n, n), (n,))."""
    X, calls = imputed_reference(G, "hwe"), (~np.isnan(G)).sum(axis=1).astype(float)
    d = G.shape[1]
    return X @ X.T * d / np.outer(calls, calls), (X * X).sum(axis=1) * (1 / calls - d / calls ** 2)


def test_scale_hwe_with_missing_calls_has_plink2s_diagonal_in_its_eigenvalues(tmp_path):
    """The eigenvalues are those of ``K_fed + diag(delta)`` (plink2's diagonal, the sites' parts summed at the
    summary) to first order, and nearer plink2's matrix than ``K_fed``'s by far; the scores are ``K_fed``'s
    eigenvectors."""
    sites = simulated_sites((60, 50, 70, 40), 1500, missing=0.01, seed=8, populations=4)
    G = np.vstack(sites)
    model = run_sites(tmp_path, sites, scale='"hwe"', rank=3, rounds=60)
    scores, values = scores_and_eigenvalues(tmp_path, model, sites)
    K_fed, delta = weighted_grm_and_diagonal(G)
    exact = np.linalg.eigvalsh(K_fed + np.diag(delta))[::-1][:3]
    np.testing.assert_allclose(values, exact, rtol=1e-6)  # first order in delta: within 1e-6 of the exact shift
    correlation, _ = per_pc_agreement(scores, values, K_fed, 3)
    assert np.all(correlation >= 1 - 1e-8)
    plink2 = np.linalg.eigvalsh(plink2_grm(G))[::-1][:3]
    before = np.linalg.eigvalsh(K_fed)[::-1][:3]  # without the diagonal, as before
    assert np.all(np.abs(values / plink2 - 1) < np.abs(before / plink2 - 1) / 10)
    np.testing.assert_allclose(values / plink2, 1.0, rtol=1e-4)  # the rest: N_ij != c_i c_j / d off the diagonal
    explained = np.linalg.eigvalsh(K_fed + np.diag(delta))
    np.testing.assert_allclose(model["explained_variance_ratio"], exact / explained.sum(), rtol=1e-6)


@pytest.mark.plink2
@pytest.mark.skipif(shutil.which("plink2") is None, reason="plink2 is not installed")
def test_scale_hwe_reproduces_plink2_pca_on_the_pooled_file(tmp_path):
    """``plink2 --pca`` itself on the pooled ``.bed`` (1 % missing calls, a variant missing at a whole site)."""
    sites = simulated_sites((60, 50, 70, 40), 1500, missing=0.01, seed=9, populations=4)
    G = np.vstack(sites)
    model = run_sites(tmp_path, sites, scale='"hwe"', rank=3, rounds=60)
    scores, values = scores_and_eigenvalues(tmp_path, model, sites)
    write_bed(tmp_path / "pooled.bed", G)
    subprocess.run(["plink2", "--bfile", str(tmp_path / "pooled"), "--pca", "3", "--threads", "1",
                    "--out", str(tmp_path / "plink2")], check=True, capture_output=True)
    vectors = np.loadtxt(tmp_path / "plink2.eigenvec", skiprows=1, usecols=(2, 3, 4))
    reference = np.loadtxt(tmp_path / "plink2.eigenval")
    written = np.loadtxt(next((tmp_path / "out" / "estimates").glob("*.eigenval")))
    correlation = np.array([abs(np.corrcoef(scores[:, j], vectors[:, j])[0, 1]) for j in range(3)])
    before = np.linalg.eigvalsh(weighted_grm_and_diagonal(G)[0])[::-1][:3]
    print("1 - |r|", 1 - correlation, "eigenvalues / plink2's - 1", values / reference - 1, "without the diagonal",
          before / reference - 1)
    assert np.all(correlation >= 0.99999)
    np.testing.assert_allclose(written, values, rtol=1e-5)  # .eigenval: 6 significant digits
    np.testing.assert_allclose(values / reference, 1.0, rtol=1e-4)
    assert np.all(np.abs(values / reference - 1) < np.abs(before / reference - 1) / 10)


@pytest.mark.parametrize("people", [29, 30, 31, 32])
def test_products_with_missing_calls_are_those_of_the_imputed_rows(tmp_path, people):
    rng = np.random.default_rng(people)
    G = rng.integers(0, 3, (people, 45)).astype(float)
    G[rng.random(G.shape) < 0.1] = np.nan
    G[:, 4] = np.nan  # a variant without a call
    X = open_samples(write_bed(tmp_path / "g.bed", G))
    X.block = 8
    mean, scale = rng.uniform(0.2, 1.8, 45), rng.uniform(0.5, 2.0, 45)
    dense = np.nan_to_num((G - mean) / scale, nan=0.0)
    Z, Y = rng.standard_normal((45, 3)), rng.standard_normal((people, 3))
    np.testing.assert_allclose(X.left(Z, mean, scale), dense @ Z, rtol=0, atol=1e-12)
    np.testing.assert_allclose(X.right(Y, mean, scale), dense.T @ Y, rtol=0, atol=1e-12)
    weights = X.missingness_weights()
    np.testing.assert_allclose(weights, (45 / (~np.isnan(G)).sum(axis=1)) ** 2)
    op = LocalOperator.from_rows(X.weighted(weights)).centered(mean, scale)
    np.testing.assert_allclose(op @ Z, dense.T @ (weights[:, None] * (dense @ Z)) / people, rtol=0, atol=1e-12)
    np.testing.assert_allclose(op.trace(), np.sum(weights[:, None] * dense ** 2) / people, rtol=1e-12)


def test_scale_takes_hwe_beside_true_and_false_and_an_older_boolean_resumes():
    from fl_strategies.protocol.checkpoint import _comparable
    from fl_strategies.settings.config import ConfigError, validate_run_config
    from simulations.engines import fused_run_config

    assert validate_run_config(fused_run_config({"scale": True, "center": True}))["scale"] == "true"
    assert validate_run_config(fused_run_config({"scale": "hwe", "center": True}))["scale"] == "hwe"
    with pytest.raises(ConfigError, match=r"^scale = hwe needs center = true"):
        validate_run_config(fused_run_config({"scale": "hwe"}))
    with pytest.raises(ConfigError, match=r"scale"):
        validate_run_config(fused_run_config({"scale": "std", "center": True}))
    assert _comparable({"scale": False}) == _comparable({"scale": "false"})  # a checkpoint written before "hwe"


def test_a_run_over_bed_files_writes_plink2s_eigenval_and_transform_its_eigenvec(tmp_path):
    from client_app.transform import main

    sites = simulated_sites((60, 50, 70), 600, missing=0.0, seed=12, populations=4)
    G = np.vstack(sites)
    run_sites(tmp_path, sites, scale='"hwe"', rank=3, rounds=60)
    (eigenval,) = (tmp_path / "out" / "estimates").glob("*.eigenval")
    reference_values, vectors = np.linalg.eigh(plink2_grm(G))
    values = np.array([float(line) for line in eigenval.read_text().splitlines()])
    np.testing.assert_allclose(values, reference_values[::-1][:3], rtol=1e-5)  # 6 significant digits, as plink2
    written = []
    for i in range(3):
        bed = tmp_path / "data" / f"partition_{i}.bed"
        out = tmp_path / f"site{i}.eigenvec"
        assert main(["--model", str(next((tmp_path / "out" / "estimates").glob("*.pca.npz"))), "--data", str(bed),
                     "--out", str(out)]) == 0
        lines = out.read_text().splitlines()
        assert lines[0] == "#FID\tIID\tPC1\tPC2\tPC3"
        fam = [line.split()[:2] for line in (tmp_path / "data" / f"partition_{i}.fam").read_text().splitlines()]
        assert [line.split("\t")[:2] for line in lines[1:]] == fam
        written.append(np.array([[float(v) for v in line.split("\t")[2:]] for line in lines[1:]]))
        assert (tmp_path / f"site{i}.eigenvec.png").read_bytes()[:4] == b"\x89PNG"
    pooled, reference = np.vstack(written), vectors[:, ::-1][:, :3]
    np.testing.assert_allclose(np.abs(pooled.T @ reference), np.eye(3), atol=1e-5)  # plink2's unit-norm vectors
    np.testing.assert_allclose(pooled * np.sign(pooled.T @ reference).diagonal(), reference, rtol=0, atol=1e-5)


@pytest.mark.plink2
@pytest.mark.skipif(shutil.which("plink2") is None, reason="plink2 is not installed")
def test_eigenval_and_the_sites_eigenvec_are_plink2_pcas_files(tmp_path):
    """The run's ``.eigenval`` and the sites' ``.eigenvec`` (pooled) against ``plink2 --pca`` on the pooled file."""
    from client_app.transform import main

    sites = simulated_sites((60, 50, 70, 40), 1500, missing=0.0, seed=14, populations=4)
    run_sites(tmp_path, sites, scale='"hwe"', rank=3, rounds=60)
    estimates = tmp_path / "out" / "estimates"
    (model,) = estimates.glob("*.pca.npz")
    written = []
    for i in range(4):
        out = tmp_path / f"site{i}.eigenvec"
        assert main(["--model", str(model), "--data", str(tmp_path / "data" / f"partition_{i}.bed"),
                     "--out", str(out)]) == 0
        written.append(out.read_text().splitlines())
    write_bed(tmp_path / "pooled.bed", np.vstack(sites))
    subprocess.run(["plink2", "--bfile", str(tmp_path / "pooled"), "--pca", "3", "--threads", "1",
                    "--out", str(tmp_path / "plink2")], check=True, capture_output=True)
    reference = (tmp_path / "plink2.eigenvec").read_text().splitlines()
    assert written[0][0] == reference[0]  # the header, byte for byte
    ours = np.array([[float(v) for v in line.split("\t")[2:]] for lines in written for line in lines[1:]])
    theirs = np.loadtxt(tmp_path / "plink2.eigenvec", skiprows=1, usecols=(2, 3, 4))
    signs = np.sign(np.sum(ours * theirs, axis=0))
    difference = np.abs(ours * signs - theirs).max()
    values = np.loadtxt(next(estimates.glob("*.eigenval")))
    ratio = values / np.loadtxt(tmp_path / "plink2.eigenval")
    print(f"eigenvec max abs difference {difference:.2g}; eigenval ratios {ratio}")
    assert difference <= 2e-6  # both printed to 6 significant digits
    np.testing.assert_allclose(ratio, 1.0, rtol=1e-5)


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_a_bed_product_on_threads_decodes_each_block_once_and_agrees_with_numpy(tmp_path, threads):
    """The products decode each byte with its variant's table (centring, scale, a missing call's mean
    imputation): the same numbers as numpy on the dense values, whatever the threads and the block size."""
    rng = np.random.default_rng(threads)
    G = rng.integers(0, 3, (53, 211)).astype(float)
    G[rng.random(G.shape) < 0.05] = np.nan
    X = open_samples(write_bed(tmp_path / "g.bed", G))
    X.product_block, X.right_block, X.threads = 16, 16, threads
    X.code_counts  # the codes counted (one read, on first use) before the reads recorded
    X.rows = recorder = Recorder(X.rows)
    mean, scale = rng.uniform(0.1, 1.9, 211), rng.uniform(0.5, 2.0, 211)
    Xc = np.where(np.isnan(G), 0.0, (G - mean) / scale)
    Z, Y = rng.standard_normal((211, 4)), rng.standard_normal((53, 4))
    np.testing.assert_allclose(X.left(Z, mean, scale), Xc @ Z, rtol=0, atol=1e-12)
    blocks = sorted((a, a + 16) for a in range(0, 211, 16))
    assert sorted(recorder.reads) == blocks  # every block once
    for pass_ in range(2):
        recorder.reads = []
        if pass_ == 0:
            np.testing.assert_allclose(X.right(Y, mean, scale), Xc.T @ Y, rtol=0, atol=1e-12)
        else:
            np.testing.assert_allclose(X.right(Y[:, 0]), np.nan_to_num(G).T @ Y[:, 0], rtol=0, atol=1e-12)
        read = np.zeros(211, dtype=int)  # each thread's run of variants in blocks of at most 16
        for start, stop in recorder.reads:
            assert 0 < stop - start <= 16
            read[start:stop] += 1
        assert (read == 1).all()  # every variant once


@pytest.mark.parametrize("people,threads,block", [(29, 1, 4), (32, 2, 3), (31, 3, 64)])
def test_aligned_products_with_missing_calls_are_those_of_the_dense_rows(tmp_path, people, threads, block):
    """The missing calls found when a file is opened stay at the right variant through :meth:`aligned` (variants
    dropped, alleles flipped, another order) in every block and thread: products, row squares and the
    missingness diagonal equal those of the dense mean-imputed rows."""
    rng = np.random.default_rng(people)
    G = rng.integers(0, 3, (people, 40)).astype(float)
    G[rng.random(G.shape) < 0.15] = np.nan
    G[:, 7] = np.nan  # a variant without a call
    X = open_samples(write_bed(tmp_path / "g.bed", G))
    assert X.missing_ptr[-1] == np.isnan(G).sum()
    columns = rng.permutation(40)
    columns[[2, 11, 12, 39]] = -1  # four of the file's variants left out
    kept = columns >= 0
    flip = rng.random(40) < 0.4
    A = X.aligned(np.where(kept, np.argsort(np.argsort(np.where(kept, columns, 99))), -1), flip, int(kept.sum()))
    listed = np.full((people, A.dimension), np.nan)  # the list's columns: the file's kept variants, flipped
    for j in np.flatnonzero(kept):
        col = A.columns[j]
        listed[:, col] = 2 - G[:, j] if flip[j] else G[:, j]
    A.product_block, A.threads = block, threads
    mean, scale = rng.uniform(0.2, 1.8, A.dimension), rng.uniform(0.5, 2.0, A.dimension)
    dense = np.nan_to_num((listed - mean) / scale, nan=0.0)
    Z, Y = rng.standard_normal((A.dimension, 3)), rng.standard_normal((people, 3))
    np.testing.assert_allclose(A.left(Z, mean, scale), dense @ Z, rtol=0, atol=1e-12)
    np.testing.assert_allclose(A.right(Y, mean, scale), dense.T @ Y, rtol=0, atol=1e-12)
    np.testing.assert_allclose(A.left(Z), np.nan_to_num(listed) @ Z, rtol=0, atol=1e-12)  # counts, missing 0
    np.testing.assert_allclose(A.row_squares(mean, scale), (dense ** 2).sum(axis=1), rtol=1e-13)
    S, delta = A.missingness_diagonal(Z, mean, scale)
    calls = (~np.isnan(listed)).sum(axis=1)
    d_i = (dense ** 2).sum(axis=1) * (1 / calls - A.dimension / calls ** 2)
    Yd = dense @ Z
    np.testing.assert_allclose(S, (Yd * (d_i * (A.dimension / calls) ** 2)[:, None]).T @ Yd, rtol=1e-12, atol=1e-12)
    assert delta == pytest.approx(d_i.sum(), rel=1e-12)
    weights = rng.uniform(0.5, 2.0, people)
    W = A.weighted(weights)
    operator = LocalOperator(people, W.dimension, rows=W, mean=mean, scale=scale)  # sum omega_i ||x_i||^2 / s
    assert operator.trace() == pytest.approx(weights @ (dense ** 2).sum(axis=1) / people, rel=1e-12)
    # the summary exchange's two reads give what five gave
    product, trace, parts = W.summary(Z, mean, scale, diagonal=True)
    np.testing.assert_allclose(product, W.product(Z, mean, scale), rtol=0, atol=1e-11)
    assert trace == pytest.approx(weights @ (dense ** 2).sum(axis=1), rel=1e-12)
    np.testing.assert_allclose(parts[0], S, rtol=1e-12, atol=1e-12)
    assert parts[1] == pytest.approx(delta, rel=1e-12)
    assert W.summary(Z, None, None, diagonal=False)[1] == pytest.approx(
        weights @ (np.nan_to_num(listed) ** 2).sum(axis=1))


@pytest.mark.parametrize("text", [b"", b"\n", b"a\n", b"a", b"a\nb", b"a\n\nb\n", b"a\n  \nb", b"\n\na\n",
                                  b"a\r\nb\r\n", b"a\nb\n\n", b"a\nb\n \n", b" a\n", b"a\n\t\n", b"\r\n", b" ",
                                  b"a\n ", b"\na", b"1 v1 0 1 A C\n" * 1000])
def test_people_and_variants_are_the_non_blank_lines_of_the_fam_and_bim(tmp_path, text):
    """A ``.fam`` / ``.bim`` counts its lines that are not blank (white space alone), as line by line, however its
    blank lines and last newline fall (the count is made in one pass where the file has no blank line)."""
    from fl_strategies.files.data_files import _lines

    path = tmp_path / "g.bim"
    path.write_bytes(text)
    assert _lines(path) == sum(1 for line in text.split(b"\n") if line.strip())
