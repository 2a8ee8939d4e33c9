"""Every noisy eigenspace run writes a PCA model: uncentred noisy runs, and private centring for fedpower."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import run_app

from fl_strategies.kernels.linalg import subspace_distance
from fl_strategies.files.pca import load_model, transform
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


# -- fedpower with epsilon and center: the mean is one more private release of each client --------------------------
FEDPOWER = dict(strategy="fedpower", num_clients=4, rank=K, iteration_rank=K, local_steps=1, num_server_rounds=3,
                total_iterations=0, row_normalize=True, epsilon=1.0, delta=1e-6, dp_calibration="pld")


def test_fedpower_with_epsilon_and_center_writes_a_centred_model(tmp_path):
    from sklearn.decomposition import PCA

    from fl_strategies.privacy.fedpower_dp import MEAN_SHARE

    # 10,000 rows per client: each client's release is private on its own, so its noise is the central one's
    blocks, folder = owners_folder(tmp_path, num_rows=40000)
    X = np.vstack(blocks)
    pca = PCA(n_components=K, svd_solver="full").fit(X)
    out = tmp_path / "centred"
    centred = run_app(**dict(FEDPOWER, dataset=folder, center=True, results_dir=str(out)))
    model = load_model(out / "pca.npz")
    assert model["centered"] is True and np.isnan(model["explained_variance_ratio"]).all()
    spent = json.loads(str(model["privacy"]))
    assert spent["epsilon"] <= 1.0 and centred.records[-1]["epsilon_spent"] == pytest.approx(spent["epsilon"])
    releases = {r["name"]: r for r in spent["releases"]}
    assert releases["mean"]["count"] == 1 and releases["products"]["count"] == centred.T
    inv = {name: r["count"] / r["noise_multiplier"] ** 2 for name, r in releases.items()}
    assert inv["mean"] / sum(inv.values()) == pytest.approx(MEAN_SHARE)
    # the mean: the 4 clients' row-sum noises (std 2 sigma_mean each) over n rows
    expected = 2.0 * releases["mean"]["noise_multiplier"] * np.sqrt(4 * X.shape[1]) / X.shape[0]
    assert 0.5 * expected < np.linalg.norm(model["mean"] - pca.mean_) < 1.5 * expected
    np.testing.assert_allclose(transform(model, X[:5]), (X[:5] - model["mean"]) @ model["components"].T)
    uncentred = run_app(**dict(FEDPOWER, dataset=folder))
    error = subspace_distance(model["components"].T, pca.components_.T)
    error_uncentred = subspace_distance(uncentred.model["components"].T, pca.components_.T)
    print(f"fedpower, epsilon 1, sin theta vs scikit-learn's PCA: centred {error:.4f}, uncentred {error_uncentred:.4f}"
          f"; epsilon spent {spent['epsilon']:.4f}")
    assert error < 0.5 * error_uncentred, (error, error_uncentred)


@pytest.mark.parametrize("overrides, message", [
    (dict(noise_std=0.01, epsilon=0.0, dp_calibration="paper"), "center = true with noise-std is refused for fedpower"),
    (dict(center=False, variance_target=0.9), "variance-target is refused with epsilon"),
])
def test_fedpower_private_centring_refuses_what_it_cannot_account(overrides, message):
    from fl_strategies.settings.config import ConfigError, validate_run_config
    from simulations.engines import fused_run_config

    cfg = fused_run_config({k.replace("_", "-"): v for k, v in {
        **FEDPOWER, "dataset": "fedpower-model1", "center": True, **overrides}.items()})
    with pytest.raises(ConfigError, match=message):
        validate_run_config(cfg)


# -- in simulation the exact reference of a centred dp-power run is the centred PCA -----------------------------------
def test_the_reference_of_a_centred_dp_power_run_is_the_centred_pca(tmp_path):
    blocks = owner_rows(num_rows=2000, dimension=12)
    X = np.vstack(blocks)  # unit rows whose mean is far from zero
    path = tmp_path / "rows.npy"
    np.save(path, X)
    U = np.linalg.eigh(np.cov(X.T, bias=True))[1][:, ::-1][:, :K]
    U_uncentred = np.linalg.eigh(X.T @ X)[1][:, ::-1][:, :K]
    assert subspace_distance(U, U_uncentred) > 0.5  # the two references differ
    run = run_app(strategy="dp-power", dataset=str(path), num_clients=4, rank=K, iteration_rank=K + 2,
                  num_server_rounds=12, row_normalize=True, center=True, dp_sensitivity="one")
    last = run.records[-1]
    assert last["subspace_distance"] == pytest.approx(subspace_distance(run.estimate, U), abs=1e-9)
    assert last["subspace_distance"] < 1e-3  # the centred power method converged to the centred PCA


def test_the_interactions_reference_follows_center(tmp_path):
    from simulations.data.interaction_data import interaction_reference, interaction_rows
    from simulations.engines import fused_run_config
    from fl_strategies.settings.config import validate_run_config

    folder = tmp_path / "gowalla"
    folder.mkdir()
    rng = np.random.default_rng(3)
    lines = [f"{u} " + " ".join(map(str, sorted(rng.choice(10, size=rng.integers(2, 6), replace=False))))
             for u in range(60)]
    for name, part in (("train", lines[:40]), ("valid", lines[40:50]), ("test", lines[50:])):
        (folder / f"{name}.txt").write_text("\n".join(part) + "\n")
    for center in (True, False):
        cfg = validate_run_config(fused_run_config({"strategy": "dp-power", "dataset": str(folder), "dimension": 8,
                                                    "num-clients": 2, "rank": 2, "iteration-rank": 2,
                                                    "center": center, "row-normalize": True,
                                                    "dp-sensitivity": "one"}))
        R = interaction_rows(cfg).toarray()
        C = np.cov(R.T, bias=True) if center else R.T @ R / len(R)
        ref = interaction_reference(cfg)
        np.testing.assert_allclose(ref.covariance, C, atol=1e-12)
        assert subspace_distance(ref.vectors[:, :2], np.linalg.eigh(C)[1][:, ::-1][:, :2]) < 1e-8


# -- the maths of fedpower's private centring -------------------------------------------------------------------------
def test_the_centred_product_sensitivity_bound_holds_and_is_nearly_attained():
    from fl_strategies.kernels.linalg import into_unit_ball
    from fl_strategies.privacy.fedpower_dp import sensitivity

    rng = np.random.default_rng(0)
    d, r, s = 6, 3, 1
    worst = 0.0
    for _ in range(3000):
        x, y, mu = rng.standard_normal((3, d))
        x, y = x / np.linalg.norm(x), y / np.linalg.norm(y)
        mu = into_unit_ball(mu * rng.random() * 2)
        if rng.random() < 0.3:  # near the worst case: mu opposite to x, y orthogonal to both
            mu, y = -x, np.linalg.qr(np.column_stack([x, rng.standard_normal(d)]))[0][:, 1]
        Z = np.linalg.qr(rng.standard_normal((d, r)))[0]
        if rng.random() < 0.3:
            Z[:, 0] = x
            Z = np.linalg.qr(Z)[0]
        u, v = x - mu, y - mu
        worst = max(worst, np.linalg.norm((np.outer(u, u) - np.outer(v, v)) @ Z) / s)
    assert worst <= sensitivity(r, s, centred=True) + 1e-12
    assert worst > sensitivity(r, s)  # the uncentred bound would not hold
    # attained with one column: mu = -x, the neighbour y = -x, z = x gives ||(u u^T - v v^T) z|| = ||4 x|| = 4
    x = np.eye(d)[0]
    u, v = 2 * x, np.zeros(d)
    assert np.linalg.norm((np.outer(u, u) - np.outer(v, v)) @ x) == pytest.approx(sensitivity(1, 1, centred=True))


def test_the_centred_releases_are_certified_by_dp_accounting():
    dpa = pytest.importorskip("dp_accounting")
    from fl_strategies.privacy.fedpower_dp import centred_releases, MEAN_SHARE

    releases = centred_releases(1.0, 1e-6, "pld", 3)
    assert releases.epsilon <= 1.0
    inv = 1 / releases.multipliers["mean"] ** 2 + 3 / releases.multipliers["products"] ** 2
    assert (1 / releases.multipliers["mean"] ** 2) / inv == pytest.approx(MEAN_SHARE)
    for scale, below in ((1.0, True), (0.99, False)):  # certified, and 1 % less noise would not be
        acc = dpa.pld.PLDAccountant(value_discretization_interval=1e-4)
        acc.compose(dpa.GaussianDpEvent(scale * releases.multipliers["mean"]))
        acc.compose(dpa.GaussianDpEvent(scale * releases.multipliers["products"]), 3)
        assert (acc.get_epsilon(1e-6) <= 1.0 + 1e-3) is below
