"""Private covariance: the distributed Analyze Gauss mechanism through SecAgg+, and the private centred model."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import run_app
from flwr.app import Context, RecordDict
from flwr.common import bytes_to_ndarray
from flwr.common.secure_aggregation.secaggplus_constants import RECORD_KEY_CONFIGS, Key

from fl_strategies.privacy import analyze_gauss as ag
from fl_strategies.settings.config import ConfigError, validate_run_config
from fl_strategies.protocol.strategies.dp_power import secagg_tolerance
from fl_strategies.kernels.linalg import subspace_distance
from fl_strategies.files.pca import load_model
from simulations.engines import fused_run_config
from simulations.experiments.private_pca.owners import centred_pca, owner_rows, write_folder

K = 3
PRIVATE = dict(strategy="covariance", num_clients=4, rank=K, row_normalize=True, center=True, epsilon=1.0,
               delta=1e-6, dp_calibration="pld")


def owners_folder(tmp_path, seed=0, **kwargs):
    blocks = owner_rows(seed=seed, **kwargs)
    return blocks, str(write_folder(blocks, tmp_path / f"owners{seed}"))


# -- the maths ---------------------------------------------------------------------------------------------------
def _moves(U, W, a):
    """``||(svec(u u^T), a u) - (svec(w w^T), a w)||`` for each pair of rows of ``U``, ``W`` (N, d)."""
    gram = np.einsum("ni,nj->nij", U, U) - np.einsum("ni,nj->nij", W, W)
    return np.sqrt(np.sum(gram ** 2, axis=(1, 2)) + a * a * np.sum((U - W) ** 2, axis=1))


@pytest.mark.parametrize("a", [0.0, ag.MEAN_WEIGHT, 1.0, 1.5, 2.0])
def test_the_joint_sensitivity_is_the_largest_move_of_one_replaced_row(a):
    """No pair of rows in the unit ball moves the one release ``(svec(sum u u^T), a sum u)`` further than
    :func:`joint_sensitivity`, and the optimiser (from random starts, rows of any length <= 1) and the pair of
    the derivation (``u . w = -a^2 / 2``) reach it: the bound is the maximum, below the two releases' composed
    ``sqrt(2 + 4 a^2)`` for ``a > 0``."""
    from scipy.optimize import minimize

    D = ag.joint_sensitivity(a)
    d, rng = 4, np.random.default_rng(int(10 * a))

    def ball(p):  # R^d -> the open unit ball, onto
        norm = np.linalg.norm(p)
        return p * (np.tanh(norm) / norm if norm > 0 else 1.0)

    def negative(p):
        return -_moves(ball(p[:d])[None], ball(p[d:])[None], a)[0]

    best = max(-minimize(negative, rng.standard_normal(2 * d) * rng.uniform(0.1, 3.0), method="L-BFGS-B").fun
               for _ in range(12))
    # random pairs, shorter rows included
    U, W = rng.standard_normal((2, 20000, d))
    U *= rng.uniform(0, 1, (20000, 1)) ** 0.3 / np.linalg.norm(U, axis=1, keepdims=True)
    W *= rng.uniform(0, 1, (20000, 1)) ** 0.3 / np.linalg.norm(W, axis=1, keepdims=True)
    sampled = _moves(U, W, a).max()
    t = -min(a * a / 2.0, 1.0)  # the derivation's worst pair: unit rows with u . w = t
    worst = _moves(np.array([[1.0, 0, 0, 0]]), np.array([[t, np.sqrt(1 - t * t), 0, 0]]), a)[0]
    assert max(best, sampled, worst) <= D * (1 + 1e-9)
    assert best >= 0.999 * D and worst == pytest.approx(D, rel=1e-12)
    if a > 0:
        assert D < np.sqrt(2.0 + 4.0 * a * a)


@pytest.mark.parametrize("c", [1e-12, 1.0, 1e6])
def test_the_uploads_of_two_neighbouring_row_sets_differ_by_at_most_the_sensitivity(c):
    """Through the client's own packing: one row of norm <= c replaced moves the upload by at most
    :func:`covariance_sensitivity`, whatever c (the upload is in units of c)."""
    rng = np.random.default_rng(1)
    X = rng.standard_normal((20, 5))
    X *= c / np.linalg.norm(X, axis=1, keepdims=True).max()
    worst = 0.0
    for _ in range(300):
        y = rng.standard_normal(5)
        y *= c * rng.uniform(0.5, 1.0) / np.linalg.norm(y)
        Y = X.copy()
        Y[0] = y if rng.random() < 0.5 else -X[0] / np.linalg.norm(X[0]) * c
        for center in (True, False):
            moved = np.linalg.norm(ag.upload_vector(X.T @ X, X.sum(axis=0) if center else None, c)
                                   - ag.upload_vector(Y.T @ Y, Y.sum(axis=0) if center else None, c))
            assert moved <= ag.covariance_sensitivity(center) * (1 + 1e-9)
            worst = max(worst, moved / ag.covariance_sensitivity(center))
    assert worst > 0.5


def test_the_releases_compose_to_one_gaussian_certified_by_dp_accounting():
    dpa = pytest.importorskip("dp_accounting")
    releases = ag.calibrate(1.0, 1e-6, "pld", {"gram": (0.9, 1), "row-sum": (0.1, 1)})
    assert releases.epsilon <= 1.0
    # an independent accountant on the same two Gaussian mechanisms
    acc = dpa.pld.PLDAccountant(value_discretization_interval=1e-4)
    acc.compose(dpa.GaussianDpEvent(releases.multipliers["gram"]))
    acc.compose(dpa.GaussianDpEvent(releases.multipliers["row-sum"]))
    assert acc.get_epsilon(1e-6) <= 1.0 + 1e-3
    # 1% less noise would not be certified: the calibration is tight
    acc = dpa.pld.PLDAccountant(value_discretization_interval=1e-4)
    acc.compose(dpa.GaussianDpEvent(0.99 * releases.multipliers["gram"]))
    acc.compose(dpa.GaussianDpEvent(0.99 * releases.multipliers["row-sum"]))
    assert acc.get_epsilon(1e-6) > 1.0
    assert releases.multipliers["row-sum"] == pytest.approx(3.0 * releases.multipliers["gram"])  # sqrt(0.9/0.1)


# -- configuration ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("overrides, message", [
    (dict(secure_aggregation="false"), "secure-aggregation = false with epsilon set"),
    (dict(secure_aggregation="true", num_clients=1, epsilon=0.0), "secure-aggregation = true needs 2"),
    (dict(noise_std=0.1, epsilon=0.0), "noise-std"),
    (dict(row_normalize=False), "row-normalize must be true"),
    (dict(secure_aggregation="maybe"), "secure-aggregation must be one of auto, true, false"),
])
def test_bad_private_covariance_configs_are_refused(overrides, message):
    cfg = fused_run_config({k.replace("_", "-"): v for k, v in dict(PRIVATE, dataset="fedpower-model1",
                                                                   **overrides).items()})
    with pytest.raises(ConfigError, match=message):
        validate_run_config(cfg)


def test_secure_aggregation_takes_toml_booleans_and_auto_follows_the_noise():
    base = fused_run_config({"strategy": "covariance", "num-clients": 4, "row-normalize": True})
    assert validate_run_config({**base, "secure-aggregation": True})["secure-aggregation"] == "true"
    from fl_strategies.settings.config import secure_covariance
    assert not secure_covariance(validate_run_config(base))
    assert secure_covariance(validate_run_config({**base, "epsilon": 1.0, "delta": 1e-6}))


# -- what the server learns ------------------------------------------------------------------------------------------
def test_secure_covariance_gives_the_server_only_the_masked_sum(tmp_path):
    from client_app.app import app as client_app
    from server_app.app import run_server
    from test_dp_power import RecordingGrid

    blocks, folder = owners_folder(tmp_path, num_rows=800, dimension=40)
    cfg = fused_run_config({k.replace("_", "-"): v for k, v in dict(PRIVATE, dataset=folder, epsilon=0.0,
                                                                   secure_aggregation=True).items()})
    grid = RecordingGrid(client_app, 4, cfg)
    secure = run_server(grid, Context(run_id=1, node_id=0, node_config={}, state=RecordDict(), run_config=cfg))
    plain = run_app(**dict(PRIVATE, dataset=folder, epsilon=0.0))
    own = {pid: ag.upload_vector(X.T @ X, X.sum(axis=0), 1.0) for pid, X in enumerate(blocks)}
    # the server's sum is the sum of the clients' packed Gram matrices and row sums, to SecAgg+'s quantisation
    assert np.max(np.abs(secure.last_sum - sum(own.values()))) <= secagg_tolerance(secure.clip, 4)
    X = np.vstack(blocks)
    np.testing.assert_allclose(secure.model["mean"], X.mean(axis=0), rtol=0, atol=1e-6)
    assert subspace_distance(secure.model["components"].T, plain.model["components"].T) < 1e-3
    # nothing at discovery: no row sum, no sum of squares (they travel only inside the masked sum)
    assert all("row-sum" not in props and "sq-sum" not in props for props in secure.node_properties.values())
    uploads = [(pid, msg.content.config_records[RECORD_KEY_CONFIGS][Key.MASKED_PARAMETERS]) for pid, msg in grid.replies
               if msg.has_content() and RECORD_KEY_CONFIGS in msg.content.config_records
               and Key.MASKED_PARAMETERS in msg.content.config_records[RECORD_KEY_CONFIGS]]
    assert sorted(pid for pid, _ in uploads) == [0, 1, 2, 3]
    for pid, masked in uploads:
        vector = bytes_to_ndarray(masked[1]).astype(np.float64).ravel()
        assert vector.size == own[pid].size == ag.upper_size(40) + 40
        assert abs(np.corrcoef(vector, own[pid])[0, 1]) < 0.15  # 860 entries: |corr| of independent ones ~ 0.03
        assert abs(vector.mean() / 2 ** 32 - 0.5) < 0.05  # spread over the whole modulus
    # the server kept no client's matrix: every array it holds is the sum or computed from it
    held = [v for v in vars(secure).values() if isinstance(v, np.ndarray)]
    assert not any(v.shape == own[0].shape and np.allclose(v, own[pid], atol=1.0) for v in held for pid in own)


# -- done when: the private centred model is as good as central Analyze Gauss -----------------------------------
def _gaussian_sigma(epsilon, delta):
    """The smallest multiplier of one Gaussian mechanism that dp-accounting's PLD certifies (its own calibration)."""
    import dp_accounting
    from dp_accounting import mechanism_calibration

    return float(mechanism_calibration.calibrate_dp_mechanism(
        lambda: dp_accounting.pld.PLDAccountant(value_discretization_interval=1e-4), dp_accounting.GaussianDpEvent,
        epsilon, delta, mechanism_calibration.LowerEndpointAndGuess(0.1, 2.0), tol=1e-6))


def _central_analyze_gauss(X, k, sigma, weight, rng):
    """A trusted curator's Analyze Gauss on the pooled unit rows ``X`` (n, d), replace-one neighbours: one Gaussian
    release of ``(X^T X, weight X^T 1)`` in the Frobenius norm, sensitivity ``sqrt(2) + weight^2 / sqrt(2)`` (the
    maximum over unit rows x, y of ``||x x^T - y y^T||_F^2 + weight^2 ||x - y||^2``, at ``x . y = -weight^2 /
    2``); symmetric noise (std ``nu`` on the diagonal, ``nu / sqrt(2)`` off it); the centred covariance's top ``k``
    eigenvectors (d, k)."""
    n, d = X.shape
    nu = sigma * (np.sqrt(2.0) + weight ** 2 / np.sqrt(2.0))
    Z = rng.standard_normal((d, d)) * nu
    E = np.triu(Z, 1) / np.sqrt(2.0)
    mu = (X.sum(axis=0) + rng.standard_normal(d) * nu / weight) / n
    C = (X.T @ X + E + E.T + np.diag(np.diag(Z))) / n - np.outer(mu, mu)
    return np.linalg.eigh(C)[1][:, ::-1][:, :k]


@pytest.mark.slow
def test_private_centred_covariance_is_within_1_1x_of_central_analyze_gauss(tmp_path):
    """5 seeds of the federated private model against the central limit on the same rows, (epsilon, delta) and
    neighbouring relation: the best over row-sum weights of the central mechanism's median (10 draws per seed)."""
    from client_app.transform import main as transform_main

    sigma = _gaussian_sigma(1.0, 1e-6)
    private, central = [], {w: [] for w in (0.2, 0.3, 0.5, 1.0)}
    for seed in range(5):
        blocks, folder = owners_folder(tmp_path, seed=seed)
        _, U = centred_pca(blocks, K)
        out = tmp_path / f"out{seed}"
        run_app(**dict(PRIVATE, dataset=folder, seed=seed, results_dir=str(out)))
        model = load_model(out / "pca.npz")
        private.append(subspace_distance(model["components"].T, U))
        spent = json.loads(str(model["privacy"]))
        assert spent["epsilon"] <= 1.0 and spent["delta"] == 1e-6 and spent["calibration"] == "pld"
        assert [r["name"] for r in spent["releases"]] == ["gram-and-row-sum"]
        X = np.vstack(blocks)
        expected = spent["noise_std"]["row-sum"] * np.sqrt(X.shape[1]) / X.shape[0]
        assert 0.5 * expected < np.linalg.norm(model["mean"] - X.mean(axis=0)) < 1.5 * expected  # the mean's noise
        for w, errors in central.items():
            errors.extend(subspace_distance(_central_analyze_gauss(X, K, sigma, w, np.random.default_rng([seed, i])),
                                            U) for i in range(10))
        if seed == 0:  # transform applies the private model unchanged
            np.save(tmp_path / "new.npy", blocks[0][:5])
            assert transform_main(["--model", str(out / "pca.npz"), "--data", str(tmp_path / "new.npy"),
                                   "--out", str(tmp_path / "scores.npy")]) == 0
            scores = np.load(tmp_path / "scores.npy")
            np.testing.assert_allclose(scores, (blocks[0][:5] - model["mean"]) @ model["components"].T)
    limit = min(np.median(v) for v in central.values())
    uncentred = subspace_distance(np.linalg.eigh(X.T @ X)[1][:, -K:], U)
    print(f"private covariance median sin theta {np.median(private):.4f}, central Analyze Gauss limit {limit:.4f} "
          f"(by row-sum weight: {', '.join(f'{w}: {np.median(v):.4f}' for w, v in central.items())}), ratio "
          f"{np.median(private) / limit:.3f}, uncentred PCA {uncentred:.4f}")
    assert np.median(private) <= 1.1 * limit, (private, limit)
    assert np.median(private) < 0.2 * uncentred  # centring matters on these data


# -- clip-norm: rows longer than c scaled to c, the others kept -------------------------------------------------------
def test_clip_norm_scales_only_long_rows_and_the_model_and_transform_apply_it(tmp_path):
    from client_app.transform import main as transform_main
    from fl_strategies.files.data_files import clip_rows

    rng = np.random.default_rng(3)
    blocks = [rng.standard_normal((300, 6)) * rng.uniform(0.1, 0.6, (300, 1)) + 0.2 for _ in range(3)]
    folder = write_folder(blocks, tmp_path / "bounded")
    X = np.vstack(blocks)
    c = 1.2
    clipped = clip_rows(X, c)
    norms = np.linalg.norm(X, axis=1)
    assert (norms > c).any() and (norms <= c).any()  # both kinds of rows
    np.testing.assert_array_equal(clipped[norms <= c], X[norms <= c])
    np.testing.assert_allclose(np.linalg.norm(clipped[norms > c], axis=1), c)
    out = tmp_path / "out"
    run_app(strategy="covariance", dataset=str(folder), num_clients=3, rank=2, center=True, clip_norm=c,
            secure_aggregation=True, results_dir=str(out))
    model = load_model(out / "pca.npz")
    assert model["clip_norm"] == c and not model["row_normalize"]
    mu = clipped.mean(axis=0)
    np.testing.assert_allclose(model["mean"], mu, atol=1e-5)  # the mean of the clipped rows, through SecAgg+
    exact = np.linalg.eigh((clipped - mu).T @ (clipped - mu))[1][:, ::-1][:, :2]
    assert subspace_distance(model["components"].T, exact) < 1e-3
    np.save(tmp_path / "new.npy", X[:7])
    assert transform_main(["--model", str(out / "pca.npz"), "--data", str(tmp_path / "new.npy"),
                           "--out", str(tmp_path / "s.npy")]) == 0
    np.testing.assert_allclose(np.load(tmp_path / "s.npy"), (clipped[:7] - model["mean"]) @ model["components"].T)
    # with epsilon: one release of sensitivity sqrt(2) + a^2 / sqrt(2) in units of c, its noise in the data's units
    run_app(strategy="covariance", dataset=str(folder), num_clients=3, rank=2, center=True, clip_norm=c,
            epsilon=1.0, delta=1e-6, dp_calibration="pld", results_dir=str(out), overwrite=True)
    spent = json.loads(str(load_model(out / "pca.npz")["privacy"]))
    (release,) = spent["releases"]
    a = ag.MEAN_WEIGHT
    assert release["name"] == "gram-and-row-sum" and spent["row_bound"] == c and spent["mean_weight"] == a
    assert release["sensitivity"] == pytest.approx(np.sqrt(2) + a * a / np.sqrt(2))
    nu = release["sensitivity"] * release["noise_multiplier"]
    assert spent["noise_std"] == pytest.approx({"gram-diagonal": c * c * nu, "row-sum": c * nu / a,
                                                "gram-off-diagonal": c * c * nu / np.sqrt(2)})


@pytest.mark.parametrize("overrides, message", [
    (dict(row_normalize=True), "clip-norm and row-normalize = true contradict"),
    (dict(strategy="fedpower", epsilon=1.0, delta=1e-6, dp_calibration="tight"), "covariance only"),
    (dict(strategy="fedmf"), "strategies that write a PCA model"),
    (dict(clip_norm=1e200, epsilon=1.0, delta=1e-6, num_clients=4), r"^clip-norm = 1e\+200 is outside \[.*overflow"),
    (dict(clip_norm=1e-200, epsilon=1.0, delta=1e-6, num_clients=4), r"^clip-norm = 1e-200 is outside \[.*underflow"),
    (dict(clip_norm=1e160), r"^clip-norm = 1e\+160 is outside"),  # no noise: the Gram matrix itself overflows
    (dict(clip_norm=1e-160, secure_aggregation=True, num_clients=2), r"^clip-norm = 1e-160 is outside"),
    (dict(clip_norm=1e-200, strategy="fedpower"), r"^clip-norm = 1e-200 is outside"),
])
def test_clip_norm_is_refused_where_it_would_be_wrong(overrides, message):
    cfg = fused_run_config({k.replace("_", "-"): v for k, v in dict(dict(
        strategy="covariance", dataset="fedpower-model1", clip_norm=1.0), **overrides).items()})
    with pytest.raises(ConfigError, match=message):
        validate_run_config(cfg)


def _scaled_folder(blocks, factor, folder):
    """The owners' unit rows times ``factor`` in a dataset folder."""
    return str(write_folder([factor * X for X in blocks], folder))


@pytest.fixture(scope="module")
def small_owners(tmp_path_factory):
    """Small owners (4 x 200 unit rows, d = 10) and the private model of their row-normalised rows."""
    tmp = tmp_path_factory.mktemp("small")
    blocks = owner_rows(num_rows=800, dimension=10, seed=5)
    run = run_app(**dict(PRIVATE, dataset=_scaled_folder(blocks, 1.0, tmp / "unit"), dp_calibration="tight"))
    return blocks, run.model


@pytest.mark.parametrize("c", [1e-12, 1e-6, 1e6, 1e100])
def test_clipping_rows_longer_than_c_gives_the_row_normalised_model_in_units_of_c(tmp_path, small_owners, c):
    """Rows all longer than c: clipping only rescales them, so the private model is the row-normalised one (the
    same seeded noise) with its mean times c and its explained variance times c^2; the Gram matrix and the row
    sum travel in units of c (nothing rounds away at c = 1e-12, nothing overflows at 1e100)."""
    blocks, unit = small_owners
    run = run_app(**dict(PRIVATE, row_normalize=False, clip_norm=c, dp_calibration="tight",
                         dataset=_scaled_folder(blocks, 3.0 * c, tmp_path / "scaled")))
    model = run.model
    assert subspace_distance(model["components"].T, unit["components"].T) < 1e-6
    np.testing.assert_allclose(model["mean"] / c, unit["mean"], rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(model["explained_variance"] / (c * c), unit["explained_variance"], rtol=1e-6)
    np.testing.assert_allclose(model["explained_variance_ratio"], unit["explained_variance_ratio"], rtol=1e-6)
    assert model["privacy"]["row_bound"] == c


@pytest.mark.slow
def test_the_error_at_any_clip_norm_is_the_row_normalise_error_over_seeds(tmp_path):
    """Median sin theta over 5 seeds at c in {1e-12, 1e-6, 1, 1e6} (rows all longer than c) against row-normalize
    on the same rows: within 2 % (paired seeds, the same seeded noise)."""
    errors = {}
    for seed in range(5):
        blocks = owner_rows(seed=seed)
        _, U = centred_pca(blocks, K)
        for c in (None, 1e-12, 1e-6, 1.0, 1e6):
            folder = _scaled_folder(blocks, 1.0 if c is None else 3.0 * c, tmp_path / f"s{seed}c{c}")
            extra = dict(row_normalize=True) if c is None else dict(row_normalize=False, clip_norm=c)
            run = run_app(**dict(PRIVATE, dataset=folder, seed=seed, **extra))
            errors.setdefault(c, []).append(subspace_distance(run.model["components"].T, U))
    median = {c: float(np.median(v)) for c, v in errors.items()}
    print("median sin theta: " + ", ".join(f"{'row-normalize' if c is None else f'c = {c:g}'} {m:.4f}"
                                           for c, m in median.items()))
    for c in (1e-12, 1e-6, 1.0, 1e6):
        assert median[c] == pytest.approx(median[None], rel=0.02), median


# -- dp-power with center: the mean is one more private release --------------------------------------------------------
DP_CENTRED = dict(strategy="dp-power", num_clients=4, rank=K, iteration_rank=6, num_server_rounds=5,
                  row_normalize=True, center=True, dp_sensitivity="one")


def test_dp_power_with_center_writes_a_centred_model(tmp_path):
    from fl_strategies.privacy.dp_power_noise import MEAN_SHARE

    blocks, folder = owners_folder(tmp_path)
    X = np.vstack(blocks)
    mu, U = centred_pca(blocks, K)
    exact = run_app(**dict(DP_CENTRED, dataset=folder, num_server_rounds=12))  # no noise: the centred power method
    assert subspace_distance(exact.model["components"].T, U) < 1e-4
    np.testing.assert_allclose(exact.model["mean"], mu, atol=1e-5)  # through SecAgg+: quantisation only
    np.testing.assert_allclose(exact.model["explained_variance"],
                               np.linalg.eigvalsh(np.cov(X.T, bias=True))[::-1][:K] * len(X) / (len(X) - 1), rtol=1e-3)
    out = tmp_path / "out"
    private = run_app(**dict(DP_CENTRED, dataset=folder, epsilon=1.0, delta=1e-6, dp_calibration="pld",
                             results_dir=str(out)))
    model = load_model(out / "pca.npz")
    spent = json.loads(str(model["privacy"]))
    assert spent["epsilon"] <= 1.0 and private.records[-1]["epsilon_spent"] == pytest.approx(spent["epsilon"])
    releases = {r["name"]: r for r in spent["releases"]}
    assert releases["mean"]["count"] == 1 and releases["products"]["count"] == 5
    # the mean's share of 1/sigma^2 is MEAN_SHARE
    inv = {name: r["count"] / r["noise_multiplier"] ** 2 for name, r in releases.items()}
    assert inv["mean"] / sum(inv.values()) == pytest.approx(MEAN_SHARE)
    assert len(private.records) == 1 + 1 + 5  # round 0, the mean, the products
    expected = 2.0 * releases["mean"]["noise_multiplier"] * np.sqrt(X.shape[1]) / X.shape[0]
    assert 0.5 * expected < np.linalg.norm(model["mean"] - mu) < 1.5 * expected
    uncentred = subspace_distance(np.linalg.eigh(X.T @ X)[1][:, -K:], U)
    error = subspace_distance(model["components"].T, U)
    print(f"centred dp-power sin theta {error:.4f}, uncentred PCA {uncentred:.4f}")
    assert error < 0.3 * uncentred, (error, uncentred)  # centred: far closer to the PCA a user wants
    assert np.isnan(model["explained_variance_ratio"]).all()  # tr(C) is not released


def test_dp_power_centring_with_epsilon_needs_one_row_replaced_accounting():
    cfg = fused_run_config({k.replace("_", "-"): v for k, v in dict(
        DP_CENTRED, dataset="dp-haar", epsilon=1.0, delta=1e-6, dp_sensitivity="row-norm").items()})
    with pytest.raises(ConfigError, match="dp-sensitivity = \"one\""):
        validate_run_config(cfg)


def test_a_lost_client_stops_a_private_covariance_round_and_no_model_is_written(tmp_path):
    from fl_strategies.protocol.base import RunFailed

    _, folder = owners_folder(tmp_path, num_rows=400, dimension=6)

    def fault(msg, pid):  # partition 2 stops answering in the gram round
        return "error" if pid == 2 and msg.metadata.group_id == "1" else "ok"

    out = tmp_path / "out"
    with pytest.raises(RunFailed, match="round 1: SecAgg\\+ halted"):
        run_app(fault_fn=fault, **dict(PRIVATE, dataset=folder, results_dir=str(out)))
    assert not (out / "pca.npz").exists()
