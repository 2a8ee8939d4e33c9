"""Every noisy eigenspace run writes a PCA model: uncentred noisy runs, and private centring for fedpower."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import run_app

from fl_strategies.linalg import subspace_distance
from fl_strategies.pca import load_model, transform
from simulations.experiments.private_pca.owners import owner_rows, write_folder

K = 3


def owners_folder(tmp_path, seed=0, **kwargs):
    blocks = owner_rows(seed=seed, **kwargs)
    return blocks, str(write_folder(blocks, tmp_path / f"owners{seed}"))


def uncentred_eigenvalues(X: np.ndarray, k: int) -> np.ndarray:
    """Top ``k`` eigenvalues of ``X^T X / n`` in the model's ``n - 1`` convention."""
    n = len(X)
    return np.linalg.eigvalsh(X.T @ X / n)[::-1][:k] * n / (n - 1)


def check_uncentred_private_model(strategy, out, X, epsilon, rtol=0.1):
    """The checks every uncentred noisy model passes; returns the model read back from ``pca.npz``."""
    model = load_model(out / "pca.npz")
    assert model["centered"] is False and not np.any(model["mean"])
    assert model["components"].shape == (K, X.shape[1]) and model["n_samples"] == len(X)
    # the components lie in the run's final estimate
    Z = strategy.estimate
    assert np.linalg.norm(model["components"].T - Z @ (Z.T @ model["components"].T)) < 1e-8
    assert np.isnan(model["explained_variance_ratio"]).all()  # tr(C) is not released
    # explained variance: post-processing of the last noisy release, near the uncentred eigenvalues (the noise
    # biases it upward: fedpower's per-client noise more than dp-power's central noise)
    np.testing.assert_allclose(model["explained_variance"], uncentred_eigenvalues(X, K), rtol=rtol)
    np.testing.assert_allclose(transform(model, X[:5]), X[:5] @ model["components"].T)
    spent = json.loads(str(model["privacy"]))
    assert 0 < spent["epsilon"] <= epsilon and spent["delta"] == 1e-6
    assert spent["epsilon"] == pytest.approx(strategy.records[-1]["epsilon_spent"])
    return model, spent


def test_uncentred_dp_power_with_epsilon_writes_a_model(tmp_path):
    blocks, folder = owners_folder(tmp_path)
    X = np.vstack(blocks)
    out = tmp_path / "out"
    run = run_app(strategy="dp-power", dataset=folder, num_clients=4, rank=K, iteration_rank=6,
                  num_server_rounds=5, row_normalize=True, epsilon=1.0, delta=1e-6, dp_calibration="pld",
                  results_dir=str(out))
    model, spent = check_uncentred_private_model(run, out, X, 1.0)
    (products,) = spent["releases"]
    assert products["count"] == 5 and len(products["sensitivity"]) == 5
    assert subspace_distance(model["components"].T, np.linalg.eigh(X.T @ X)[1][:, -K:]) < 0.5


def test_fedpower_with_epsilon_writes_a_model(tmp_path):
    blocks, folder = owners_folder(tmp_path)
    X = np.vstack(blocks)
    out = tmp_path / "out"
    run = run_app(strategy="fedpower", dataset=folder, num_clients=4, rank=K, iteration_rank=6, local_steps=2,
                  num_server_rounds=5, row_normalize=True, epsilon=1.0, delta=1e-6, dp_calibration="pld",
                  results_dir=str(out))
    model, spent = check_uncentred_private_model(run, out, X, 1.0, rtol=0.2)
    assert spent["releases"][0]["count"] == run.T == sum(run.lengths) and spent["calibration"] == "pld"
    bias = np.max(np.abs(model["explained_variance"] / uncentred_eigenvalues(X, K) - 1))
    error = subspace_distance(model["components"].T, np.linalg.eigh(X.T @ X)[1][:, -K:])
    print(f"fedpower, epsilon 1: uncentred sin theta {error:.4f}, explained variance off by at most {bias:.1%}")


def test_fedpower_with_noise_std_writes_a_model(tmp_path):
    blocks, folder = owners_folder(tmp_path)
    X = np.vstack(blocks)
    out = tmp_path / "out"
    run = run_app(strategy="fedpower", dataset=folder, num_clients=4, rank=K, iteration_rank=6, local_steps=1,
                  num_server_rounds=6, row_normalize=True, noise_std=1e-3, delta=1e-6, results_dir=str(out))
    model = load_model(out / "pca.npz")
    spent = json.loads(str(model["privacy"]))
    assert spent["epsilon"] == pytest.approx(run.records[-1]["epsilon_spent"]) and spent["epsilon_target"] is None
    assert model["centered"] is False and np.isnan(model["explained_variance_ratio"]).all()
    np.testing.assert_allclose(model["explained_variance"], uncentred_eigenvalues(X, K), rtol=0.1)
