"""The model's components carry scikit-learn's signs: ``pca.npz``, ``transform`` and ``.eigenvec`` equal
``sklearn.decomposition.PCA`` fitted on the pooled rows entry for entry, with no sign alignment by the user."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.decomposition import PCA
from sklearn.utils.extmath import svd_flip

from conftest import run_app
from fl_strategies.files.pca import load_model, pca_model, save_model, sklearn_signs, transform
from fl_strategies.files.warm_start import initial_basis
from fl_strategies.kernels.linalg import subspace_distance
from fl_strategies.settings.registry import STRATEGY_NAMES, spec


def test_the_rule_is_svd_flip_on_the_components_rows():
    """``svd_flip(None, Vt, u_based_decision=False)``, as scikit-learn's PCA calls it, on random rows, rows whose
    largest entry is negative, and rows with two entries of equal magnitude (the first decides)."""
    rng = np.random.default_rng(0)
    rows = [rng.standard_normal((5, 11)) for _ in range(50)]
    rows.append(np.array([[0.5, -0.5, 0.1], [-0.5, 0.5, 0.1], [0.1, -0.7, 0.7], [0.0, 0.0, -1.0]]))
    for V in rows:
        _, expected = svd_flip(None, V.copy(), u_based_decision=False)
        np.testing.assert_array_equal(sklearn_signs(V), expected)
        np.testing.assert_array_equal(sklearn_signs(-V), expected)  # whatever sign the iteration ended with
    assert np.array_equal(sklearn_signs(np.zeros((1, 3))), np.zeros((1, 3)))  # no row is zeroed or made NaN


def test_pca_model_takes_the_signs_whatever_the_basis_signs():
    """The Ritz rotation inside :func:`pca_model` may give any signs; the model's are the rule's."""
    rng = np.random.default_rng(1)
    X = rng.standard_normal((60, 6)) * [5.0, 3.0, 2.0, 1.0, 0.5, 0.2]
    C = np.cov(X.T, bias=True)
    Z = np.linalg.eigh(C)[1][:, ::-1][:, :4]
    ref = PCA(n_components=3).fit(X)
    for flips in ([1, 1, 1, 1], [-1, 1, -1, 1], [-1, -1, -1, -1]):
        Zs = Z * flips
        model = pca_model(Zs, C @ Zs, float(np.trace(C)), len(X), X.mean(axis=0), 3)
        np.testing.assert_allclose(model["components"], ref.components_, rtol=0, atol=1e-10)


def test_a_federated_pca_equals_scikit_learns_on_the_pooled_rows(tmp_path):
    """Three clients' files, noise-free power iteration to convergence: ``components``, the scores of
    ``transform`` (the node command's) and the explained variances are scikit-learn's, no sign aligned."""
    rng = np.random.default_rng(4)
    basis = np.linalg.qr(rng.standard_normal((7, 7)))[0]
    mean = rng.uniform(-2, 2, 7)
    blocks = [mean + (rng.standard_normal((s, 7)) * [6, 4, 2.5, 1, .6, .4, .2]) @ basis.T for s in (50, 80, 120)]
    (tmp_path / "data").mkdir()
    for i, block in enumerate(blocks):
        np.save(tmp_path / "data" / f"partition_{i}.npy", block)
    X = np.vstack(blocks)
    run_app(strategy="power", dataset=str(tmp_path / "data"), num_clients=3, rank=3, iteration_rank=5,
            num_server_rounds=80, center=True, row_normalize=False, results_dir=str(tmp_path / "out"))
    model = load_model(tmp_path / "out" / "pca.npz")
    ref = PCA(n_components=3).fit(X)
    np.testing.assert_allclose(model["components"], ref.components_, rtol=0, atol=1e-8)
    np.testing.assert_allclose(model["explained_variance"], ref.explained_variance_, rtol=1e-10)
    new = rng.standard_normal((9, 7)) * 4
    np.testing.assert_allclose(transform(model, new), ref.transform(new), rtol=0, atol=1e-8)


MODEL_STRATEGIES = [name for name in STRATEGY_NAMES if spec(name).family == "eigenspace"]


@pytest.mark.parametrize("strategy", MODEL_STRATEGIES)
def test_every_strategy_that_writes_a_model_writes_scikit_learns_signs(tmp_path, strategy):
    """Each eigenspace strategy's ``pca.npz`` (dp-power's from its noisy released product): the entry of largest
    magnitude of every component is positive, as scikit-learn's PCA has it."""
    assert len(MODEL_STRATEGIES) >= 8 and {"krylov", "dp-power", "covariance"} <= set(MODEL_STRATEGIES)
    over = dict(strategy=strategy, dataset="fedpower-model1", num_clients=4, rank=3, iteration_rank=4,
                num_server_rounds=4, results_dir=str(tmp_path / "out"), row_normalize=False)
    if strategy == "dp-power":
        over.update(dataset="dp-haar", dimension=40, delta=1e-6, epsilon=4.0, secagg_clip=1500.0,
                    iteration_rank=6, num_server_rounds=2)
    if strategy == "dp-krylov":  # unit rows: its sensitivity's bound (no secagg-clip)
        over.update(dataset="dp-haar", dimension=40, delta=1e-6, epsilon=4.0, row_normalize=True, num_server_rounds=3)
    if strategy == "covariance":
        over.update(num_server_rounds=1)
    run_app(**over)
    components = load_model(tmp_path / "out" / "pca.npz")["components"]
    largest = components[np.arange(len(components)), np.argmax(np.abs(components), axis=1)]
    assert np.all(largest > 0), largest


def test_an_older_model_with_other_signs_loads_transforms_and_warm_starts_as_written(tmp_path):
    """A ``pca.npz`` written before the rule (any signs) is read as it is, not re-signed: its scores keep the
    signs it was used with; ``init-from`` takes its span only, so a warm start is the same either way."""
    rng = np.random.default_rng(2)
    X = rng.standard_normal((40, 5)) * [3.0, 2.0, 1.0, 0.5, 0.1]
    C = np.cov(X.T, bias=True)
    Z = np.linalg.eigh(C)[1][:, ::-1][:, :3]
    model = pca_model(Z, C @ Z, float(np.trace(C)), len(X), X.mean(axis=0), 2)
    older = dict(model, components=model["components"] * np.array([[-1.0], [1.0]]))
    path = save_model(tmp_path / "old.npz", older, {"center": True})
    loaded = load_model(path)
    np.testing.assert_array_equal(loaded["components"], older["components"])
    np.testing.assert_allclose(transform(loaded, X[:4])[:, 0], -transform(model, X[:4])[:, 0], rtol=0, atol=1e-12)
    start_old = initial_basis(loaded, 5, 3, np.random.default_rng(0))
    start_new = initial_basis(model, 5, 3, np.random.default_rng(0))
    assert subspace_distance(start_old[:, :2], start_new[:, :2]) < 1e-12
