"""PCA of wide int8 genotype files: no client forms a d x d matrix, and the model is scikit-learn's."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.decomposition import PCA

from fl_strategies.kernels.linalg import subspace_distance
from fl_strategies.files.pca import load_model
from simulations.data.genotypes import write_genotype_sites

SIZES = (300, 250, 350, 300)


def compare_fedpower(tmp_path, d, rounds=15, strategy="fedpower"):
    """``compare`` with one run on four int8 node files of width ``d``; the written model and the pooled rows."""
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
    run_comparison(tmp_path / "c.toml", out=tmp_path / "out")
    (path,) = sorted((tmp_path / "out" / "estimates").glob("*.pca.npz"))
    return load_model(path), np.vstack([np.load(p) for p in paths]).astype(np.float64)


def check_against_scikit_learn(model, X, solver):
    ref = PCA(n_components=2, svd_solver=solver, **({"tol": 0.0} if solver == "arpack" else {})).fit(X)
    assert subspace_distance(model["components"].T, ref.components_.T) <= 1e-8
    np.testing.assert_allclose(model["explained_variance"], ref.explained_variance_, rtol=1e-6)
    np.testing.assert_allclose(model["mean"], X.mean(axis=0), rtol=0, atol=1e-10)
    assert model["n_samples"] == X.shape[0] == sum(SIZES)


def test_int8_node_files_give_the_pca_of_scikit_learn_from_row_products(tmp_path):
    from client_app import data

    model, X = compare_fedpower(tmp_path, d=1000)
    check_against_scikit_learn(model, X, "full")
    ops = [op for key, op in data._OPERATORS.items() if key[0] == "file" and str(tmp_path) in key[1]]
    assert len(ops) == 4  # each node file read once in this process, kept as stored
    for op in ops:
        assert op.path == "rows" and op.gram is None and op._dense is None  # no d x d matrix on any client
        assert isinstance(op.rows.rows, np.memmap) and op.rows.rows.dtype == np.int8


@pytest.mark.slow
def test_int8_node_files_at_d_30000(tmp_path):
    model, X = compare_fedpower(tmp_path, d=30_000)
    check_against_scikit_learn(model, X, "arpack")
