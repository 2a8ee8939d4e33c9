"""PCA of wide int8 genotype files: no client forms a d x d matrix, and the model is scikit-learn's."""

from __future__ import annotations

import time

import numpy as np
import pytest
from sklearn.decomposition import PCA

from fl_strategies.kernels.linalg import subspace_distance
from fl_strategies.files.pca import load_model
from simulations.data.genotypes import write_genotype_sites

SIZES = (300, 250, 350, 300)


def compare_fedpower(tmp_path, d, rounds=15, strategy="fedpower"):
    """``compare`` with one run on four int8 node files of width ``d``: the written model, the pooled rows, and
    ``compare``'s wall time (s) with the process's peak resident memory right after it (bytes), as a dict."""
    from simulations.compare import run_comparison

    paths = write_genotype_sites(tmp_path / "data", SIZES, d, populations=3, seed=1)
    (tmp_path / "c.toml").write_text(f'''title = "genotypes"
[defaults]
dataset = "{tmp_path / 'data'}"
num-clients = 4
rank = 2
iteration-rank = 4
num-server-rounds = {rounds}
local-steps = 2
center = true
row-normalize = false
[[runs]]
name = "{strategy}"
strategy = "{strategy}"
''')
    start = time.perf_counter()
    run_comparison(tmp_path / "c.toml", out=tmp_path / "out")
    measured = {"wall": time.perf_counter() - start, "peak": peak_resident_bytes()}  # before the pooled rows
    (path,) = sorted((tmp_path / "out" / "estimates").glob("*.pca.npz"))
    return load_model(path), np.vstack([np.load(p) for p in paths]).astype(np.float64), measured


def check_against_scikit_learn(model, X, solver) -> dict[str, float]:
    """Assert the model is scikit-learn's PCA of the pooled rows; return the three differences."""
    ref = PCA(n_components=2, svd_solver=solver, **({"tol": 0.0} if solver == "arpack" else {})).fit(X)
    found = {"sin theta": subspace_distance(model["components"].T, ref.components_.T),
             "explained variance, max rel. error": float(np.max(np.abs(model["explained_variance"]
                                                                        / ref.explained_variance_ - 1))),
             "mean, max abs. error": float(np.max(np.abs(model["mean"] - X.mean(axis=0))))}
    assert found["sin theta"] <= 1e-8
    np.testing.assert_allclose(model["explained_variance"], ref.explained_variance_, rtol=1e-6)
    np.testing.assert_allclose(model["mean"], X.mean(axis=0), rtol=0, atol=1e-10)
    assert model["n_samples"] == X.shape[0] == sum(SIZES)
    return found


def peak_resident_bytes() -> int:
    """This process's peak resident memory so far (``VmHWM``)."""
    with open("/proc/self/status") as handle:
        return next(int(line.split()[1]) * 1024 for line in handle if line.startswith("VmHWM:"))


def test_int8_node_files_give_the_pca_of_scikit_learn_from_row_products(tmp_path):
    from client_app import data

    model, X, _ = compare_fedpower(tmp_path, d=1000)
    check_against_scikit_learn(model, X, "full")
    ops = [op for key, op in data._OPERATORS.items() if key[0] == "file" and str(tmp_path) in key[1]]
    assert len(ops) == 4  # each node file read once in this process, kept as stored
    for op in ops:
        assert op.path == "rows" and op.gram is None and op._dense is None  # no d x d matrix on any client
        assert isinstance(op.rows.rows, np.memmap) and op.rows.rows.dtype == np.int8


@pytest.mark.slow
def test_int8_node_files_at_d_30000(tmp_path):
    """The issue's set-up; prints (``-s``) the wall time of ``compare``, the process's peak memory right after it
    (the interpreter, pytest and generating the files included) and the differences from scikit-learn."""
    model, X, measured = compare_fedpower(tmp_path, d=30_000)
    found = check_against_scikit_learn(model, X, "arpack")
    print(f"\nd = 30,000, {X.shape[0]} rows: compare took {measured['wall']:.1f} s, peak resident memory "
          f"{measured['peak'] / 1e9:.2f} GB; " + ", ".join(f"{key} {value:.1e}" for key, value in found.items()))
