"""The exact reference every accuracy figure is measured against is that of the estimator the run computes."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.decomposition import PCA

from conftest import run_app
from fl_strategies.kernels.linalg import subspace_distance
from fl_strategies.kernels.metrics import pooled_covariance
from simulations.data.federated_data import federated_dataset, reference
from simulations.engines import fused_run_config

K, R = 3, 5
DIGITS = dict(dataset="digits", partitioner="label", num_clients=10, rank=K, iteration_rank=R, center=True)


@pytest.mark.parametrize("strategy", ["fedpower", "power", "ssi", "localpower", "faps", "covariance"])
def test_centred_run_reports_its_distance_to_scikit_learns_pca(strategy):
    """digits split by label (a mean far from 0): the reported distance is the one to scikit-learn's components."""
    s = run_app(strategy=strategy, num_server_rounds=8, **DIGITS)
    X = federated_dataset(fused_run_config({k.replace("_", "-"): v for k, v in DIGITS.items()}))[0].X
    components = PCA(n_components=K, svd_solver="full").fit(X).components_.T
    reported = s.records[-1]["subspace_distance"]
    assert reported == pytest.approx(subspace_distance(s.estimate, components), rel=1e-6, abs=1e-10)
    if strategy == "covariance":  # exact in one round; the uncentred reference put it at 0.997
        assert reported < 1e-10


def test_the_reference_follows_center():
    cfg = fused_run_config({k.replace("_", "-"): v for k, v in DIGITS.items()})
    X = federated_dataset(cfg)[0].X
    pca = PCA(n_components=R, svd_solver="full").fit(X)
    centred = reference(cfg)
    assert subspace_distance(centred.vectors, pca.components_.T) < 1e-10
    np.testing.assert_allclose(centred.values, pca.explained_variance_ * (len(X) - 1) / len(X), rtol=1e-10)
    uncentred = reference({**cfg, "center": False})
    _, _, Vt = np.linalg.svd(X, full_matrices=False)
    assert subspace_distance(uncentred.vectors[:, :K], Vt[:K].T) < 1e-10
    assert subspace_distance(uncentred.vectors[:, :K], centred.vectors[:, :K]) > 0.5  # not the same question


def test_lazy_reference_is_centred_one_partition_at_a_time():
    cfg = fused_run_config({"dataset": "fedpower-model1-lazy", "partitioner": "contiguous", "num-clients": 7,
                            "num-samples": 700, "dimension": 30, "rank": 3, "center": True, "row-normalize": False})
    from simulations.data.federated_data import client_rows

    X = np.vstack([client_rows(cfg, i) for i in range(7)])
    Xc = X - X.mean(axis=0)
    np.testing.assert_allclose(reference(cfg).covariance, Xc.T @ Xc / len(X), rtol=1e-10, atol=1e-14)


def test_pooled_covariance_in_blocks_equals_the_whole_far_from_zero():
    rng = np.random.default_rng(0)
    X = 1e6 + rng.standard_normal((300, 6)) @ np.diag([3.0, 2, 1, 0.5, 0.2, 0.1])
    Xc = X - X.mean(axis=0)
    blocks = [X[:50], X[50:51], X[51:51], X[51:]]
    np.testing.assert_allclose(pooled_covariance(blocks, center=True), Xc.T @ Xc / 300, rtol=1e-8, atol=1e-9)
    np.testing.assert_allclose(pooled_covariance(blocks, center=False), X.T @ X / 300, rtol=1e-12)
    Y = rng.random((40, 5)) * (rng.random((40, 5)) < 0.3)
    Yc = Y - Y.mean(axis=0)
    np.testing.assert_allclose(pooled_covariance([sp.csr_matrix(Y[:25]), sp.csr_matrix(Y[25:])], center=True),
                               Yc.T @ Yc / 40, atol=1e-14)
    with pytest.raises(ValueError, match="no rows"):
        pooled_covariance([], center=True)
