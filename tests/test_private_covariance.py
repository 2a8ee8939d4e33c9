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
from simulations.experiments.private_pca.central import central_analyze_gauss
from simulations.experiments.private_pca.owners import centred_pca, owner_rows, write_folder

K = 3
PRIVATE = dict(strategy="covariance", num_clients=4, rank=K, row_normalize=True, center=True, epsilon=1.0,
               delta=1e-6, dp_calibration="pld")


def owners_folder(tmp_path, seed=0, **kwargs):
    blocks = owner_rows(seed=seed, **kwargs)
    return blocks, str(write_folder(blocks, tmp_path / f"owners{seed}"))


# -- the maths ---------------------------------------------------------------------------------------------------
def test_packing_and_the_sensitivity_of_the_gram_triangle():
    rng = np.random.default_rng(0)
    A = rng.standard_normal((6, 6))
    G = A + A.T
    np.testing.assert_array_equal(ag.unpack_upper(ag.pack_upper(G), 6), G)
    assert ag.pack_upper(G).size == ag.upper_size(6) == 21
    # replacing one unit row moves the packed triangle by at most sqrt(2) (and the sum by at most 2)
    worst = 0.0
    for _ in range(2000):
        x, y = rng.standard_normal((2, 6))
        x, y = x / np.linalg.norm(x), y / np.linalg.norm(y)
        if rng.random() < 0.3:  # near the worst case: disjoint supports
            x, y = np.eye(6)[rng.integers(6)], np.eye(6)[rng.integers(6)]
        worst = max(worst, np.linalg.norm(ag.pack_upper(np.outer(x, x) - np.outer(y, y))))
    assert worst <= ag.gram_sensitivity(1.0) + 1e-12
    assert worst > 0.99 * ag.gram_sensitivity(1.0)  # attained by two basis vectors
    assert ag.sum_sensitivity(1.0) == 2.0


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
    own = {pid: np.concatenate([ag.pack_upper(X.T @ X), X.sum(axis=0)]) for pid, X in enumerate(blocks)}
    # the server's sum is the sum of the clients' Gram triangles and row sums, to SecAgg+'s quantisation
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
@pytest.mark.slow
def test_private_centred_covariance_is_within_1_25x_of_central_analyze_gauss(tmp_path):
    from client_app.transform import main as transform_main

    private, central = [], []
    for seed in range(5):
        blocks, folder = owners_folder(tmp_path, seed=seed)
        _, U = centred_pca(blocks, K)
        out = tmp_path / f"out{seed}"
        run_app(**dict(PRIVATE, dataset=folder, seed=seed, results_dir=str(out)))
        model = load_model(out / "pca.npz")
        private.append(subspace_distance(model["components"].T, U))
        spent = json.loads(str(model["privacy"]))
        assert spent["epsilon"] <= 1.0 and spent["delta"] == 1e-6 and spent["calibration"] == "pld"
        assert {r["name"] for r in spent["releases"]} == {"gram", "row-sum"}
        X = np.vstack(blocks)
        row_sum = next(r for r in spent["releases"] if r["name"] == "row-sum")
        expected = row_sum["sensitivity"] * row_sum["noise_multiplier"] * np.sqrt(X.shape[1]) / X.shape[0]
        assert 0.5 * expected < np.linalg.norm(model["mean"] - X.mean(axis=0)) < 1.5 * expected  # the mean's noise
        central.extend(subspace_distance(central_analyze_gauss(X, K, 1.0, 1e-6, np.random.default_rng([seed, i]),
                                                               mean_share=ag.MEAN_SHARE), U) for i in range(10))
        if seed == 0:  # transform applies the private model unchanged
            np.save(tmp_path / "new.npy", blocks[0][:5])
            assert transform_main(["--model", str(out / "pca.npz"), "--data", str(tmp_path / "new.npy"),
                                   "--out", str(tmp_path / "scores.npy")]) == 0
            scores = np.load(tmp_path / "scores.npy")
            np.testing.assert_allclose(scores, (blocks[0][:5] - model["mean"]) @ model["components"].T)
    uncentred = subspace_distance(np.linalg.eigh(X.T @ X)[1][:, -K:], U)
    print(f"private covariance median sin theta {np.median(private):.4f}, central Analyze Gauss {np.median(central):.4f}, "
          f"uncentred PCA {uncentred:.4f}")
    assert np.median(private) <= 1.25 * np.median(central), (private, np.median(central))
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
    # with epsilon the sensitivities come from c: sqrt(2) c^2 for the Gram triangle, 2 c for the row sum
    run_app(strategy="covariance", dataset=str(folder), num_clients=3, rank=2, center=True, clip_norm=c,
            epsilon=1.0, delta=1e-6, dp_calibration="pld", results_dir=str(out), overwrite=True)
    spent = json.loads(str(load_model(out / "pca.npz")["privacy"]))
    sens = {r["name"]: r["sensitivity"] for r in spent["releases"]}
    assert sens == pytest.approx({"gram": np.sqrt(2) * c * c, "row-sum": 2 * c}) and spent["row_bound"] == c


@pytest.mark.parametrize("overrides, message", [
    (dict(row_normalize=True), "clip-norm and row-normalize = true contradict"),
    (dict(strategy="fedpower", epsilon=1.0, delta=1e-6, dp_calibration="tight"), "covariance only"),
    (dict(strategy="fedmf"), "strategies that write a PCA model"),
])
def test_clip_norm_is_refused_where_it_would_be_wrong(overrides, message):
    cfg = fused_run_config({k.replace("_", "-"): v for k, v in dict(dict(
        strategy="covariance", dataset="fedpower-model1", clip_norm=1.0), **overrides).items()})
    with pytest.raises(ConfigError, match=message):
        validate_run_config(cfg)


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
