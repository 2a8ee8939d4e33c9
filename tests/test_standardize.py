"""``scale = true``: federated standardisation as scikit-learn's ``StandardScaler`` followed by ``PCA``."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse
from sklearn.decomposition import PCA
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from conftest import run_app
from client_app.data import NodeData
from fl_strategies.settings.config import ConfigError, validate_run_config
from fl_strategies.kernels.linalg import subspace_distance
from fl_strategies.files.pca import load_model, transform
from fl_strategies.kernels.standardize import column_scale, pooled_mean, pooled_variance
from simulations.engines import fused_run_config

D, K, CONSTANT = 9, 3, 4


def unit_files(folder, sizes=(70, 110, 140), seed=1):
    """Per-client files of rows whose columns have units from 1e-3 to 1e3, a large offset and one constant column."""
    rng = np.random.default_rng(seed)
    loadings = rng.standard_normal((K, D))
    units = 10.0 ** rng.uniform(-3, 3, D)
    offset = rng.uniform(-5, 5, D) * units
    blocks = []
    for s in sizes:
        latent = rng.standard_normal((s, K)) * [4.0, 2.5, 1.5]
        X = (latent @ loadings + 0.3 * rng.standard_normal((s, D))) * units + offset
        X[:, CONSTANT] = 3.7  # a monomorphic column: StandardScaler keeps scale 1
        blocks.append(X)
    folder.mkdir(exist_ok=True)
    for i, block in enumerate(blocks):
        np.save(folder / f"partition_{i}.npy", block)
    return blocks


ROUNDS = {"covariance": 1, "faps": 150}


@pytest.fixture(params=["rows", "gram"])
def product_path(request, monkeypatch):
    """Every client computes its products on this path (``M^T (M Z)`` from rows, or a Gram matrix formed once)."""
    import client_app.data

    monkeypatch.setattr(client_app.data, "gram_is_cheaper", lambda *args, **kwargs: request.param == "gram")
    return request.param


def paths_used(folder):
    """The product paths of the local operators built in this process for the files of ``folder``."""
    from client_app.data import _OPERATORS

    return {op.path for key, op in _OPERATORS.items() if key[0] == "file" and str(folder) in key[1]}


@pytest.mark.parametrize("strategy", ["fedpower", "power", "ssi", "localpower", "faps", "covariance"])
def test_scaled_run_is_standard_scaler_then_pca(tmp_path, strategy, product_path):
    X = np.vstack(unit_files(tmp_path / "data"))
    s = run_app(strategy=strategy, dataset=str(tmp_path / "data"), num_clients=3, rank=K, iteration_rank=4,
                num_server_rounds=ROUNDS.get(strategy, 60), center=True, scale=True, row_normalize=False,
                results_dir=str(tmp_path / "out"))
    model = load_model(tmp_path / "out" / "pca.npz")
    ref = make_pipeline(StandardScaler(), PCA(n_components=K)).fit(X)
    scaler, pca = ref.named_steps["standardscaler"], ref.named_steps["pca"]
    assert s.scale is not None and model["scale"][CONSTANT] == scaler.scale_[CONSTANT] == 1.0
    np.testing.assert_allclose(model["scale"], scaler.scale_, rtol=1e-8, atol=0)
    np.testing.assert_allclose(model["mean"], scaler.mean_, rtol=1e-8, atol=0)
    assert subspace_distance(model["components"].T, pca.components_.T) < 1e-8
    np.testing.assert_allclose(model["components"], pca.components_, rtol=0, atol=1e-8)  # signs included
    for key in ("explained_variance", "explained_variance_ratio", "singular_values"):
        np.testing.assert_allclose(model[key], getattr(pca, key + "_"), rtol=1e-8)
    new = np.random.default_rng(7).standard_normal((25, D)) * scaler.scale_ + scaler.mean_
    expected = ref.transform(new)
    np.testing.assert_allclose(transform(model, new), expected, rtol=0, atol=1e-8)
    unscaled = PCA(n_components=K).fit(X)  # the units dominate without scaling: a different answer
    assert subspace_distance(model["components"].T, unscaled.components_.T) > 0.5
    assert paths_used(tmp_path / "data") == {product_path}


def test_transform_command_applies_the_scale(tmp_path):
    from client_app.transform import main

    X = np.vstack(unit_files(tmp_path / "data"))
    run_app(strategy="covariance", dataset=str(tmp_path / "data"), num_clients=3, rank=K, iteration_rank=K,
            num_server_rounds=1, center=True, scale=True, row_normalize=False, results_dir=str(tmp_path / "out"))
    ref = make_pipeline(StandardScaler(), PCA(n_components=K)).fit(X)
    assert main(["--model", str(tmp_path / "out" / "pca.npz"), "--data", str(tmp_path / "data" / "partition_1.npy"),
                 "--out", str(tmp_path / "scores.npy")]) == 0
    expected = ref.transform(np.load(tmp_path / "data" / "partition_1.npy"))
    np.testing.assert_allclose(np.load(tmp_path / "scores.npy"), expected, rtol=0, atol=1e-8)


@pytest.mark.parametrize("strategy", ["covariance", "fedpower"])
def test_digits_with_blank_pixels_match_scikit_learn_in_simulation(strategy):
    """digits has pixels that are 0 in every image (constant columns): scale 1 there, as StandardScaler; the
    simulation's exact reference is standardised too, so the reported distance is the one to the pipeline's."""
    from simulations.data.federated_data import federated_dataset

    s = run_app(strategy=strategy, dataset="digits", partitioner="label", num_clients=5, rank=5, iteration_rank=5,
                num_server_rounds=1 if strategy == "covariance" else 8, center=True, scale=True, row_normalize=False)
    X = federated_dataset(s.cfg)[0].X
    scaler = StandardScaler().fit(X)
    pca = PCA(n_components=5).fit(scaler.transform(X))
    assert np.sum(scaler.scale_ == 1.0) >= 3  # the blank pixels
    np.testing.assert_allclose(s.model["scale"], scaler.scale_, rtol=1e-10)
    reported = s.records[-1]["subspace_distance"]
    assert reported == pytest.approx(subspace_distance(s.estimate, pca.components_.T), rel=1e-6, abs=1e-10)
    if strategy == "covariance":  # exact in one round
        assert reported < 1e-8 and subspace_distance(s.model["components"].T, pca.components_.T) < 1e-8
        np.testing.assert_allclose(s.model["explained_variance_ratio"], pca.explained_variance_ratio_, rtol=1e-8)


def test_the_reference_standardises_blocks_far_from_zero():
    from fl_strategies.kernels.metrics import pooled_covariance

    rng = np.random.default_rng(2)
    X = 1e4 + rng.standard_normal((300, 6)) @ rng.standard_normal((6, 6)) * [1e-2, 1, 1e2, 1, 1, 1]
    X[:, 4] = 7.0
    Y = StandardScaler().fit_transform(X)
    blocks = [X[:40], X[40:200], X[200:]]
    np.testing.assert_allclose(pooled_covariance(blocks, center=True, scale="true"), Y.T @ Y / len(X), atol=1e-8)
    with pytest.raises(ValueError, match="scale needs center"):
        pooled_covariance(blocks, center=False, scale="true")


def test_the_wide_reference_standardises_like_the_dense_one():
    """Wide data (n < d): the thin-SVD reference of the standardised rows = eigh of the standardised covariance."""
    from fl_strategies.kernels.metrics import Reference

    rng = np.random.default_rng(5)
    X = 3.0 + rng.standard_normal((40, 60)) @ np.diag(10.0 ** rng.uniform(-2, 2, 60))
    X[:, 7] = -1.0
    dense = Reference.from_rows([X[:15], X[15:]], 3, 4, center=True, scale="true")
    wide = Reference.from_thin_svd(X, 3, 4, center=True, scale="true")
    np.testing.assert_allclose(wide.values, dense.values, rtol=1e-10)
    assert subspace_distance(wide.vectors, dense.vectors) < 1e-8
    Q = np.linalg.qr(rng.standard_normal((60, 4)))[0]
    np.testing.assert_allclose(wide.covariance @ Q, dense.covariance @ Q, atol=1e-10)


def test_pooled_variance_is_free_of_cancellation():
    """Per-client sums about each client's own mean combined pairwise: accurate where sum x^2 - n mu^2 is not."""
    rng = np.random.default_rng(3)
    offset = 1e6
    blocks = [offset + rng.standard_normal((s, 4)) * [1.0, 1e-3, 5.0, 0.0] for s in (5, 40, 300)]
    X = np.vstack(blocks)
    exact = (X - offset).var(axis=0)  # the shift is exact in floating point (Sterbenz), the spread then is not lost
    sizes = [len(b) for b in blocks]
    sums = [b.sum(axis=0) for b in blocks]
    squares = [np.sum((b - b.mean(axis=0)) ** 2, axis=0) for b in blocks]
    mean = pooled_mean(sizes, sums)
    variance = pooled_variance(sizes, sums, squares, mean)
    np.testing.assert_allclose(variance[:3], exact[:3], rtol=1e-8)
    naive = sum(np.sum(b ** 2, axis=0) for b in blocks) / len(X) - mean ** 2  # the formula it avoids
    assert abs(naive[1] / exact[1] - 1) > 1.0
    scale = column_scale(variance, mean, len(X))
    np.testing.assert_allclose(scale, StandardScaler().fit(X).scale_, rtol=1e-8)
    assert scale[3] == 1.0


def test_a_nodes_column_sums_of_squares_dense_and_sparse():
    rng = np.random.default_rng(4)
    rows = rng.standard_normal((9000, 5)) + 3.0  # more rows than one block
    expected = np.sum((rows - rows.mean(axis=0)) ** 2, axis=0)
    np.testing.assert_allclose(NodeData.of(0, rows=rows).column_sq_sums(), expected, rtol=1e-12)
    sparse = scipy.sparse.random(200, 30, density=0.1, random_state=0, format="csr")
    dense = sparse.toarray()
    np.testing.assert_allclose(NodeData.of(0, rows=sparse).column_sq_sums(),
                               np.sum((dense - dense.mean(axis=0)) ** 2, axis=0), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("over, message", [
    ({"scale": True}, r"^scale = true needs center = true"),
    ({"scale": True, "center": True, "epsilon": 1.0, "row-normalize": True}, r"^scale is refused with epsilon"),
    ({"scale": True, "center": True, "noise-std": 0.1, "row-normalize": True}, r"^scale is refused with epsilon"),
    ({"scale": True, "center": True, "strategy": "dp-power"}, r"^scale is refused for .dp-power. here: its row sums"),
    ({"scale": True, "center": True, "strategy": "covariance", "secure-aggregation": "true"},
     r"^scale is refused for .covariance. here: its row sums travel through SecAgg\+"),
])
def test_scale_settings_that_cannot_hold_are_refused(over, message):
    with pytest.raises(ConfigError, match=message):
        validate_run_config(fused_run_config(over))


def test_a_node_without_its_column_sums_is_left_out(tmp_path):
    """A node that sends no col-sq-sum under scale = true fails discovery like one without its row sum."""
    from fl_strategies.protocol.strategies.fedpower import FedPowerStrategy
    from fl_strategies.settings.registry import settings_for
    from simulations.engines import fused_run_config

    strategy = FedPowerStrategy.__new__(FedPowerStrategy)
    strategy.cfg = validate_run_config(fused_run_config({"center": True, "scale": True}))
    strategy.settings, strategy.d = settings_for(strategy.cfg), 3
    strategy._row_sums, strategy._col_sq_sums = {}, {}

    class Proxy:
        cid = "7"

    row_sum = np.ones(3).astype("<f8").tobytes()
    reason = strategy._column_sums(Proxy(), {"row-sum": row_sum}, (0, 10))
    assert reason == "no col-sq-sum of 3 numbers in its properties (scale = true)" and not strategy._row_sums
    negative = np.array([1.0, -1.0, 0.0]).astype("<f8").tobytes()
    assert "col-sq-sum is not finite and >= 0" in strategy._column_sums(
        Proxy(), {"row-sum": row_sum, "col-sq-sum": negative}, (0, 10))
    good = np.array([1.0, 2.0, 0.0]).astype("<f8").tobytes()
    assert strategy._column_sums(Proxy(), {"row-sum": row_sum, "col-sq-sum": good}, (0, 10)) == (0, 10)
    assert strategy._col_sq_sums["7"].tolist() == [1.0, 2.0, 0.0]


@pytest.mark.parametrize("strategy", ["power", "fedpower"])
def test_row_normalised_and_scaled_replies_are_within_their_bound(tmp_path, strategy):
    """With ``row-normalize`` the server bounds every reply; scaled columns stretch a unit row up to
    ``(1 + ||mu||) / min(scale)``, so the bound must carry that factor or every honest reply is refused."""
    X = np.vstack(unit_files(tmp_path / "data"))
    run_app(strategy=strategy, dataset=str(tmp_path / "data"), num_clients=3, rank=K, iteration_rank=4,
            num_server_rounds=60, center=True, scale=True, row_normalize=True, results_dir=str(tmp_path / "out"))
    model = load_model(tmp_path / "out" / "pca.npz")
    unit = X / np.linalg.norm(X, axis=1, keepdims=True)
    ref = make_pipeline(StandardScaler(), PCA(n_components=K)).fit(unit)
    assert subspace_distance(model["components"].T, ref.named_steps["pca"].components_.T) < 1e-6
    np.testing.assert_allclose(model["explained_variance"], ref.named_steps["pca"].explained_variance_, rtol=1e-6)
