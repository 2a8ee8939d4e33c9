"""Where bugs hide from end-to-end numbers: centred products over several local steps with very different node means,
the model's row preprocessing on new rows, and a second reply of one partition in one round.

Each is checked against a dense reference on the same data (numpy, scipy eigh, scikit-learn PCA).
"""

from __future__ import annotations

import logging

import numpy as np
import pytest

from conftest import run_app
from fl_strategies.kernels.linalg import subspace_distance

D = 7


def _uneven_blocks(seed: int = 11, sizes=(50, 80, 120)) -> list[np.ndarray]:
    """Three nodes whose means lie far apart (|m_i - m_j| ~ 30) around a planted 2-dimensional spike."""
    rng = np.random.default_rng(seed)
    U = np.linalg.qr(rng.standard_normal((D, 2)))[0]
    return [10.0 * rng.standard_normal(D) + rng.standard_normal((s, 2)) * [6.0, 3.0] @ U.T
            + 0.5 * rng.standard_normal((s, D)) for s in sizes]


def test_centred_products_over_three_local_steps_with_uneven_means_match_the_dense_reference(tmp_path):
    """fedpower, center = true, local-steps = 3: every reply [Y, Z_prev] of node i is the dense centred
    A_i = (B_i - mu)^T (B_i - mu) / s_i with the pooled mean mu applied three times from the broadcast Z
    (Y = A_i Z_prev, span Z_prev = span A_i^2 Z), and its summary reply A_i Z; the model is the Rayleigh-Ritz
    solution of the dense pooled centred covariance on the run's basis, with the pooled mean."""
    from scipy.linalg import eigh

    from test_noise_source import _nodes

    blocks = _uneven_blocks()
    pooled = np.vstack(blocks)
    mu = pooled.mean(axis=0)
    means = np.array([b.mean(axis=0) for b in blocks])
    assert np.min(np.linalg.norm(means[:, None] - means[None], axis=2) + 1e9 * np.eye(3)) > 10  # uneven
    replies = []
    strategy = _nodes(tmp_path, blocks, observer=lambda rnd, pid, Z, arrays: replies.append(
        (pid, Z.copy(), [a.copy() for a in arrays])), strategy="fedpower", rank=2, center=True,
        **{"iteration-rank": 3, "num-server-rounds": 12, "local-steps": 3, "schedule": "fixed",
           "row-normalize": False})
    assert strategy.failure is None and len(replies) == 3 * 12 + 3  # and the summary exchange
    for pid, Z, arrays in replies:
        B = blocks[pid] - mu
        A = B.T @ B / len(B)
        if len(arrays) == 1:  # the summary's A_i Z, which the model is made of
            np.testing.assert_allclose(arrays[0], A @ Z, rtol=0, atol=1e-10 * np.linalg.norm(A))
            continue
        Y, Z_prev, G = arrays  # G_i = s_i Z^T A_i Z at the broadcast Z (node data: the kept components' Ritz basis)
        np.testing.assert_allclose(Y, A @ Z_prev, rtol=0, atol=1e-10 * np.linalg.norm(A))
        np.testing.assert_allclose(G, len(B) * Z.T @ A @ Z, rtol=0, atol=1e-10 * len(B) * np.linalg.norm(A))
        assert subspace_distance(Z_prev, A @ (A @ Z)) < 1e-8, f"partition {pid}: the second step's product"
    C = (pooled - mu).T @ (pooled - mu) / len(pooled)
    Z = strategy.iterates[-1]
    values, W = eigh(Z.T @ C @ Z)  # Rayleigh-Ritz on the run's own basis, densely
    model = strategy.model
    np.testing.assert_allclose(model["mean"], mu, rtol=0, atol=1e-12 * np.abs(mu).max())
    assert subspace_distance(model["components"].T, Z @ W[:, -2:]) < 1e-8
    np.testing.assert_allclose(model["explained_variance"], values[::-1][:2] * len(pooled) / (len(pooled) - 1),
                               rtol=1e-9)
    assert subspace_distance(model["components"].T, eigh(C)[1][:, -2:]) < 0.05  # near the pooled eigenspace


def test_transform_of_a_raw_row_gives_the_runs_own_preprocessed_rows_scores(tmp_path):
    """row-normalize = true, center = true: the saved model scales new rows as the run scaled its rows, so a raw
    row (any positive multiple of it) transformed on a node gets the scores of the run's own unit-norm row in
    scikit-learn's PCA of the preprocessed pooled rows."""
    from sklearn.decomposition import PCA

    from client_app.transform import main
    from fl_strategies.files.pca import load_model
    from test_pca import K, folder_run

    _, X, _ = folder_run(tmp_path, row_normalize=True)
    Xn = X / np.linalg.norm(X, axis=1, keepdims=True)  # what each node did to its rows
    model = load_model(tmp_path / "out" / "pca.npz")
    np.testing.assert_allclose(model["mean"], Xn.mean(axis=0), rtol=0, atol=1e-10)
    ref = PCA(n_components=K).fit(Xn)
    assert subspace_distance(model["components"].T, ref.components_.T) < 1e-6
    rows = X[::25] * np.random.default_rng(2).uniform(0.01, 100.0, (len(X[::25]), 1))
    np.save(tmp_path / "rows.npy", rows)
    assert main(["--model", str(tmp_path / "out" / "pca.npz"), "--data", str(tmp_path / "rows.npy"),
                 "--out", str(tmp_path / "scores.npy")]) == 0
    scores = np.load(tmp_path / "scores.npy")
    np.testing.assert_allclose(scores, ref.transform(Xn[::25]), rtol=0, atol=1e-6)  # signs included


@pytest.mark.usefixtures("every_iterate")
def test_a_second_reply_of_one_partition_is_named_and_dropped(monkeypatch, caplog):
    """Round 2 gets partition 1's reply twice, the second with a doubled product: the second is rejected with a
    WARNING naming the partition, the first is used, and the run equals the run without the duplicate."""
    from flwr.common import ndarrays_to_parameters, parameters_to_ndarrays

    from fl_strategies.protocol.strategies.fedpower import FedPowerStrategy

    cfg = dict(strategy="fedpower", num_clients=3, num_samples=90, dimension=6, rank=2, iteration_rank=3,
               num_server_rounds=3, local_steps=1, schedule="fixed")
    clean = run_app(**cfg)
    real = FedPowerStrategy.aggregate_fit

    def aggregate_fit(self, server_round, results, failures):
        if server_round == 2:
            proxy, res = next((p, r) for p, r in results if self.partition_of(p) == 1)
            twin = type(res)(res.status, ndarrays_to_parameters([2.0 * a for a in parameters_to_ndarrays(
                res.parameters)]), res.num_examples, dict(res.metrics))
            results = list(results) + [(proxy, twin)]
        return real(self, server_round, results, failures)

    monkeypatch.setattr(FedPowerStrategy, "aggregate_fit", aggregate_fit)
    with caplog.at_level(logging.WARNING, logger="flwr"):
        twice = run_app(expect_clean=False, **cfg)
    assert "round 2: reply of partition 1 (node " in caplog.text and "a second reply of this partition" in caplog.text
    assert [r.get("rejected") or 0 for r in twice.records] == [0, 0, 1, 0]
    for a, b in zip(clean.iterates, twice.iterates):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("first_doubled", [False, True])
def test_collect_replies_keeps_the_first_of_two_replies(monkeypatch, caplog, first_doubled):
    """Directly on the strategy: whichever of two replies of one partition arrives first is the one kept."""
    from flwr.common import Code, FitRes, Status, ndarrays_to_parameters

    cfg = dict(strategy="fedpower", num_clients=2, num_samples=40, dimension=5, rank=2, iteration_rank=2,
               num_server_rounds=1)
    strategy = run_app(**cfg)
    proxy = strategy.proxies[0]
    Y = np.arange(10.0).reshape(5, 2) + 1
    replies = [np.asarray(Y), 2.0 * Y] if not first_doubled else [2.0 * Y, np.asarray(Y)]
    size = strategy.sizes[0]
    results = [(proxy, FitRes(Status(Code.OK, ""), ndarrays_to_parameters([a]), size, {"partition-id": 0}))
               for a in replies]
    with caplog.at_level(logging.WARNING, logger="flwr"):
        kept, rejected = strategy.collect_replies(5, results, {0, 1}, [(5, 2)])
    assert rejected == 1 and list(kept) == [0]
    np.testing.assert_array_equal(kept[0][0][0], replies[0])
    assert "round 5: reply of partition 0" in caplog.text and "a second reply of this partition" in caplog.text
