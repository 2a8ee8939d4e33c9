"""dp-power: the DP decentralised randomized power method with Flower's SecAgg+ (spec dp_power.md)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from conftest import run_app
from flwr.app import Context, RecordDict
from flwr.common import bytes_to_ndarray
from flwr.common.secure_aggregation.secaggplus_constants import RECORD_KEY_CONFIGS, Key, Stage

from fl_strategies.settings.config import ConfigError
from fl_strategies.protocol.strategies.dp_power import secagg_tolerance
from fl_strategies.protocol.base import RunFailed
from fl_strategies.kernels.linalg import gaussian_basis, orth, subspace_distance
from fl_strategies.privacy.zcdp import calibrate, epsilon_of, max_epsilon, noise_multiplier, rho_of
from simulations.data.dp_data import planted_rows, planted_spectrum
from simulations.engines import fused_run_config
from simulations.engines.local import LocalGrid

# The spec's synthetic set-up (Sec. 6.3): n = 1000, k = 10, p = 20, L = 5, delta = 1e-6
SPEC = dict(strategy="dp-power", dataset="dp-haar", dimension=1000, rank=10, iteration_rank=20, num_server_rounds=5,
            delta=1e-6, row_normalize=False, secagg_clip=1500.0, partitioner="iid")
# a small instance for the protocol tests
SMALL = dict(strategy="dp-power", dataset="dp-haar", dimension=120, rank=4, iteration_rank=8, num_server_rounds=4,
             num_clients=4, delta=1e-6, row_normalize=False, secagg_clip=1500.0, partitioner="iid")


def final_error(**overrides) -> float:
    return run_app(**overrides).records[-1]["subspace_distance"]


# -- accounting (spec Sec. 3) -----------------------------------------------------------------------------------
@pytest.mark.parametrize("eps, delta, rho, eps_achieved, sigma", [
    (1, 1e-5, 0.010857, 0.71796, 15.174), (1, 1e-6, 0.009048, 0.71615, 16.623), (0.5, 1e-6, 0.002262, 0.35582, 33.245),
    (2, 1e-6, 0.036191, 1.45040, 8.311), (4, 1e-6, 0.144765, 2.97319, 4.156), (8, 1e-6, 0.579059, 6.23591, 2.078)])
def test_accountant_matches_the_closed_form(eps, delta, rho, eps_achieved, sigma):
    cal = calibrate(eps, delta, 5)
    assert cal.sigma == pytest.approx(sigma, abs=1e-3)
    assert cal.rho == pytest.approx(rho, abs=1e-6)
    assert cal.epsilon == pytest.approx(eps_achieved, abs=1e-5)
    # by hand: rho = eps^2 / (8 ln(1/delta)), eps' = rho + eps / sqrt(2) (the paper's eq. 33 prints eps/2)
    assert cal.rho == pytest.approx(eps ** 2 / (8 * math.log(1 / delta)), rel=1e-12)
    assert cal.epsilon == pytest.approx(cal.rho + eps / math.sqrt(2), rel=1e-12)
    assert cal.spent(0) == (0.0, 0.0) and cal.spent(5) == pytest.approx((cal.rho, cal.epsilon))
    assert cal.spent(1)[0] == pytest.approx(cal.rho / 5)  # rho_l = eps^2 / (8 L ln(1/delta)) per iteration


def test_the_case_the_papers_condition_gets_wrong_is_refused():
    eps, delta = 30.0, 1e-5
    assert delta <= math.exp(-eps / 4)  # the paper's condition accepts it ...
    rho = rho_of(noise_multiplier(eps, delta, 5), 5)
    assert epsilon_of(rho, delta) == pytest.approx(30.985, abs=1e-3)  # ... but it achieves 30.985 > 30
    with pytest.raises(ValueError, match=r"would achieve epsilon' = 30.98.*8 \(1 - 1/sqrt 2\) ln\(1/delta\) = 26.98"):
        calibrate(eps, delta, 5)
    assert max_epsilon(delta) == pytest.approx(8 * (1 - 1 / math.sqrt(2)) * math.log(1e5))
    calibrate(26.9, delta, 5)  # just inside the corrected condition
    with pytest.raises(ConfigError, match="cannot be met"):
        run_app(**dict(SMALL, epsilon=eps, delta=delta))


def test_tight_calibration_spends_exactly_epsilon_with_less_noise():
    for eps in (0.5, 1.0, 8.0, 30.0):
        tight, paper = calibrate(eps, 1e-5, 5, "tight"), None
        assert tight.epsilon == pytest.approx(eps, rel=1e-12)
        if eps <= max_epsilon(1e-5):
            paper = calibrate(eps, 1e-5, 5)
            assert tight.sigma < paper.sigma
    assert calibrate(1.0, 1e-6, 5, "tight").sigma == pytest.approx(11.963, abs=1e-3)  # spec Sec. 3 table


@pytest.mark.parametrize("overrides, message", [
    (dict(num_clients=1), r"dp-channel = \"secagg\" needs 2 <= num-clients"),
    (dict(num_clients=2000, dimension=2000, num_samples=2000), r"needs 2 <= num-clients <= 1000"),
    (dict(secagg_clip=0.0), "secagg-clip must be set"),
    (dict(secagg_num_shares=9), "secagg-num-shares must be at most num-clients = 4"),
    (dict(dp_sensitivity="rownorm"), "Did you mean 'row-norm'"),
    (dict(rank=200), "rank"),
])
def test_bad_dp_configs_are_refused_before_round_one(overrides, message):
    with pytest.raises(ConfigError, match=message):
        run_app(**dict(SMALL, **overrides))


# -- exactness without noise ------------------------------------------------------------------------------------
def central_power_method(cfg: dict, rounds: int) -> list[np.ndarray]:
    """A0 of the spec on the pooled A = B^T B, from the same X_0 as the strategy."""
    B, _ = planted_rows(cfg["dataset"], cfg["dimension"], cfg["rank"], cfg["data_seed"])
    A = B.T @ B
    X = [gaussian_basis(cfg["dimension"], cfg["iteration_rank"], np.random.default_rng([cfg["seed"], 0]))]
    for _ in range(rounds):
        X.append(orth(A @ X[-1]))
    return X


@pytest.mark.usefixtures("every_iterate")
def test_without_noise_the_sum_is_the_central_power_method():
    cfg = dict(SMALL, seed=3, data_seed=0, epsilon=0.0)
    ref = central_power_method(cfg, 4)
    plain = run_app(**dict(cfg, dp_channel="plaintext"))
    assert max(np.max(np.abs(a - b)) for a, b in zip(plain.iterates, ref)) < 1e-10
    secure = run_app(**dict(cfg, dp_channel="secagg"))
    # SecAgg+ quantises each upload with step 2C/2^22 = 7e-4 (C = 1500) on sums of size ~1e2: ~1e-5 per round
    assert max(np.max(np.abs(a - b)) for a, b in zip(secure.iterates, ref)) < 1e-4
    assert secure.records[-1]["subspace_distance"] < 0.05  # it is converging (gap 800 vs 300)


# -- what the server receives through SecAgg+ -------------------------------------------------------------------
class RecordingGrid(LocalGrid):
    """A LocalGrid that keeps every reply (to inspect what a client uploads)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.replies = []

    def push_messages(self, messages):
        ids = list(super().push_messages(messages))
        self.replies.extend((self.partition_of[self._replies[i].metadata.src_node_id], self._replies[i])
                            for i in ids if i in self._replies)
        return ids


def run_recorded(**overrides):
    from client_app.app import app as client_app
    from server_app.app import run_server

    cfg = fused_run_config({k.replace("_", "-"): v for k, v in overrides.items()})
    grid = RecordingGrid(client_app, cfg["num-clients"], cfg)
    strategy = run_server(grid, Context(run_id=1, node_id=0, node_config={}, state=RecordDict(), run_config=cfg))
    return strategy, grid


def test_secagg_delivers_the_sum_of_the_noisy_products_and_masks_each_upload():
    cfg = dict(SMALL, seed=5, epsilon=2.0, noise_source="seeded", num_server_rounds=1)
    products = {}  # the clients' noisy products in the clear (same seeded noise, so the same products)

    def observe(server_round, pid, broadcast, arrays):
        products[server_round, pid] = arrays[0]

    plain = run_app(observer=observe, **dict(cfg, dp_channel="plaintext"))
    secure, grid = run_recorded(**dict(cfg, dp_channel="secagg"))
    tol = secagg_tolerance(secure.clip, 4)
    assert tol < 1e-2
    # the same X_0 and the same seeded noise: the clients' products are those of the plaintext run, and what the
    # server gets is their sum, each entry within s quantisation steps 2C/2^22
    assert np.max(np.abs(secure.last_sum - sum(products[1, pid] for pid in range(4)))) <= tol
    assert np.max(np.abs(secure.last_sum - plain.last_sum)) <= tol
    assert np.max(np.abs(secure.last_sum - plain.last_sum)) > 0  # it did go through quantisation
    # a masked upload of round 1 tells nothing about that client's product: uniform ints mod 2^32
    uploads = [(pid, msg.content.config_records[RECORD_KEY_CONFIGS][Key.MASKED_PARAMETERS]) for pid, msg in grid.replies
               if msg.has_content() and RECORD_KEY_CONFIGS in msg.content.config_records
               and Key.MASKED_PARAMETERS in msg.content.config_records[RECORD_KEY_CONFIGS]]
    assert len(uploads) == 4  # 4 clients x 1 round
    for pid, masked in uploads:
        vector = bytes_to_ndarray(masked[1]).astype(np.float64).ravel()
        assert vector.size == SMALL["dimension"] * SMALL["iteration_rank"]
        corr = np.corrcoef(vector, products[1, pid].ravel())[0, 1]
        assert abs(corr) < 0.15, corr  # 960 entries: |corr| of independent vectors has std 0.03
        assert abs(vector.mean() / 2 ** 32 - 0.5) < 0.05  # spread over the whole modulus, not around C


# -- a lost client stops the run -----------------------------------------------------------------------------------
@pytest.mark.parametrize("channel", ["secagg", "plaintext"])
def test_a_lost_client_stops_the_run_with_the_rows_so_far(channel, tmp_path):
    def fault(msg, pid):  # partition 2 stops answering in round 2
        return "error" if pid == 2 and msg.metadata.group_id == "2" else "ok"

    # plaintext: the server names the partition; SecAgg+ halts its round (too few key shares) before the sum
    where = r"partition\(s\) 2" if channel == "plaintext" else "SecAgg\\+ halted"
    with pytest.raises(RunFailed, match=rf"round 2: .*{where}.*missing noise \(results of rounds 0\.\.1 are kept\)"):
        run_app(fault_fn=fault, **dict(SMALL, epsilon=1.0, dp_channel=channel, results_dir=str(tmp_path)))
    rows = (tmp_path / "rounds.csv").read_text().strip().splitlines()
    assert len(rows) == 1 + 2  # header, rounds 0 and 1


def test_a_client_lost_after_its_upload_is_recovered_by_secagg():
    """SecAgg+'s reconstruction: partition 2 uploads its masked product in round 1 and then drops out (no key
    shares in the unmask stage); its self-mask is rebuilt from the others' shares and the round's sum, with all
    four noises, is the same as without the fault."""
    dropped = []

    def fault(msg, pid):
        config = msg.content.config_records.get(RECORD_KEY_CONFIGS)
        unmask = config is not None and config.get(Key.STAGE) == Stage.UNMASK
        if pid == 2 and unmask:
            dropped.append(pid)
            return "error"
        return "ok"

    cfg = dict(SMALL, epsilon=2.0, noise_source="seeded", num_server_rounds=1, secagg_clip=600.0)
    faulty, clean = run_app(fault_fn=fault, **cfg), run_app(**cfg)
    assert dropped == [2] and len(faulty.records) == 2 and faulty.failure is None
    # the same X_0 and seeded noise: the two sums differ only by their stochastic quantisation
    np.testing.assert_allclose(faulty.last_sum, clean.last_sum, rtol=0, atol=2 * secagg_tolerance(600.0, 4))


def test_secagg_replies_outside_secagg_are_refused():
    """dp-power with dp-channel = secagg in a plain server loop (no SecAgg+): each reply is one client's product,
    not the sum; the strategy sees that they differ and stops instead of releasing one client's product x s."""
    from flwr.server.compat.app import start_grid

    from client_app.app import app as client_app
    from server_app.app import server_fn

    cfg = fused_run_config({k.replace("_", "-"): v for k, v in dict(SMALL, epsilon=2.0).items()})
    components = server_fn(Context(run_id=1, node_id=0, node_config={}, state=RecordDict(), run_config=cfg))
    start_grid(grid=LocalGrid(client_app, 4, cfg), server=components.server, config=components.config)
    strategy = components.server.strategy
    assert strategy.stopped and "not a SecAgg+ aggregate" in strategy.failure
    assert len(strategy.records) == 1  # round 0 only


def test_a_product_outside_the_clip_range_is_not_uploaded():
    with pytest.raises(RunFailed, match="round 1: SecAgg\\+ halted .*outside secagg-clip"):
        run_app(**dict(SMALL, secagg_clip=1.0))


def test_the_client_refuses_to_exceed_its_budget():
    from client_app.data import NodeData
    from client_app.dp_power_client import DPPowerClient
    from fl_strategies.settings.config import validate_run_config

    cfg = validate_run_config(fused_run_config({k.replace("_", "-"): v for k, v in
                                                dict(SMALL, epsilon=1.0, dp_channel="plaintext").items()}))
    client = DPPowerClient(NodeData.of(0, rows=np.eye(3, 120)), cfg, Context(run_id=1, node_id=1, node_config={}, state=RecordDict(),
                                                            run_config={}))
    X = gaussian_basis(120, 8, np.random.default_rng(0))
    for _ in range(4):
        client.fit([X], {"round": 1})
    with pytest.raises(RuntimeError, match="privacy budget exhausted: 4 products released, L = 4"):
        client.fit([X], {"round": 5})


# -- utility: the spec's table (Sec. 6.3, 7.2 checks 5, 6, 8) ------------------------------------------------------
def test_utility_of_the_three_noise_scales_matches_the_spec():
    """Central (one client) at eps = 2, median of 5 seeds; spec medians of 10 seeds: 0.071 / 0.203 / 0.337."""
    med = {mode: np.median([final_error(**dict(SPEC, seed=s, epsilon=2.0, num_clients=1, dp_channel="plaintext",
                                               dp_sensitivity=mode)) for s in range(5)])
           for mode in ("row-norm", "max-entry", "one")}
    assert med["row-norm"] == pytest.approx(0.071, rel=0.15)
    assert med["max-entry"] == pytest.approx(0.203, rel=0.15)
    assert med["one"] == pytest.approx(0.337, rel=0.15)
    assert 2.2 < med["max-entry"] / med["row-norm"] < 3.4  # about Delta^a / Delta^b = 2.8 on a Haar basis


def test_new_scale_is_never_above_the_old_one_and_error_scales_like_one_over_epsilon():
    errors = []
    for eps in (1.0, 8.0):
        st = run_app(**dict(SPEC, seed=1, epsilon=eps, num_clients=1, dp_channel="plaintext"))
        assert all(r["delta_b"] <= r["delta_a"] + 1e-15 for r in st.records[1:])
        assert all(r["delta_b"] <= 1 + 1e-12 and r["sensitivity"] == r["delta_b"] for r in st.records[1:])
        assert st.records[-1]["epsilon_spent"] == pytest.approx(calibrate(eps, 1e-6, 5).epsilon)
        errors.append(st.records[-1]["subspace_distance"])
    slope = math.log(errors[1] / errors[0]) / math.log(8.0)
    assert -1.15 < slope < -0.85, slope


def test_federated_with_secagg_equals_central_and_the_public_channel_is_far_worse():
    """Theorem 6.2: s = 10 clients with noise sigma/sqrt(s) through SecAgg+ = central DP (spec: 0.0706 vs 0.0714
    at eps = 2); the public channel (each client the full noise, HP sensitivity) ~8.7x worse at eps = 8."""
    central = [final_error(**dict(SPEC, seed=s, epsilon=2.0, num_clients=1, dp_channel="plaintext"))
               for s in range(4)]
    federated = [final_error(**dict(SPEC, seed=s, epsilon=2.0, num_clients=10, dp_channel="secagg"))
                 for s in range(10, 13)]
    assert np.median(federated) == pytest.approx(np.median(central), rel=0.12)
    secure8 = final_error(**dict(SPEC, seed=0, epsilon=8.0, num_clients=1, dp_channel="plaintext"))
    public8 = np.median([final_error(**dict(SPEC, seed=s, epsilon=8.0, num_clients=10, dp_channel="public",
                                            dp_sensitivity="max-entry")) for s in range(3)])
    assert 6.0 < public8 / secure8 < 12.0, public8 / secure8


def test_planted_data_have_the_planted_spectrum():
    for name in ("dp-haar", "dp-coherent"):
        B, U = planted_rows(name, 200, 5, seed=1)
        lam = planted_spectrum(200, 5)
        np.testing.assert_allclose(B.T @ B, (U * lam) @ U.T, atol=1e-9)
        np.testing.assert_allclose(U.T @ U, np.eye(200), atol=1e-12)
        mu0 = np.max(np.abs(U))
        assert (mu0 == pytest.approx(1.0)) if name == "dp-coherent" else mu0 < 0.4
    with pytest.raises(ValueError, match="rank"):
        planted_spectrum(10, 10)
    assert subspace_distance(planted_rows("dp-coherent", 50, 3, 0)[1][:, :3], np.eye(50, 3)) < 1e-12


# -- the paper's real data: Gowalla, users spread over clients ----------------------------------------------------
GOWALLA = __import__("pathlib").Path(__file__).resolve().parents[1].parent / "shared" / "data" / "gowalla"
needs_gowalla = pytest.mark.skipif(not (GOWALLA / "train.txt").is_file(), reason=f"no Gowalla data in {GOWALLA}")


@pytest.mark.usefixtures("every_iterate")
@needs_gowalla
def test_gowalla_users_over_clients_give_the_central_power_method_without_noise():
    from fl_strategies.settings.config import validate_run_config
    from simulations.data.interaction_data import client_rows, interaction_rows

    over = dict(strategy="dp-power", dataset=str(GOWALLA), dimension=300, rank=2, iteration_rank=4, num_clients=3,
                num_server_rounds=3, epsilon=0.0, dp_channel="plaintext", seed=1)
    cfg = validate_run_config(fused_run_config({k.replace("_", "-"): v for k, v in over.items()}))
    rows = interaction_rows(cfg)
    assert rows.shape == (29858, 300)
    norms = np.sqrt(np.asarray(rows.multiply(rows).sum(axis=1)).ravel())
    assert np.all((np.abs(norms - 1) < 1e-12) | (norms == 0))  # every user's row has unit norm (or is empty)
    assert sum(client_rows(cfg, c).shape[0] for c in range(3)) == 29858  # the users are split, none twice
    A = (rows.T @ rows).toarray()
    X = [gaussian_basis(300, 4, np.random.default_rng([1, 0]))]
    for _ in range(3):
        X.append(orth(A @ X[-1]))
    st = run_app(**over)
    assert max(np.max(np.abs(a - b)) for a, b in zip(st.iterates, X)) < 1e-10
    with pytest.raises(ConfigError, match="needs 1 <= dimension <= 5000"):
        run_app(**dict(over, dimension=0))
    with pytest.raises(ConfigError, match="only dp-power reads"):
        run_app(**dict(over, strategy="fedpower", dimension=300))


@pytest.mark.usefixtures("every_iterate")
def test_int8_node_files_are_multiplied_as_stored_without_a_float64_copy(tmp_path, monkeypatch):
    """dp-power's clients multiply M_i^T (M_i X) over float64 row blocks of their int8 files (rows normalised
    block by block, centred with the released mean): never the whole rows in float64 (NodeData.rows raises), and
    the central power method's iterates of the pooled normalised centred rows to 1e-10."""
    from client_app.data import NodeData

    rng = np.random.default_rng(5)
    parts = [rng.integers(0, 3, (s, 30)).astype(np.int8) for s in (40, 55, 35)]
    for i, part in enumerate(parts):
        np.save(tmp_path / f"partition_{i}.npy", part)

    def whole_rows_in_float64(self):
        raise AssertionError("a client copied its rows to float64 as a whole")

    monkeypatch.setattr(NodeData, "rows", property(whole_rows_in_float64))
    s = run_app(strategy="dp-power", dataset=str(tmp_path), num_clients=3, dimension=30, rank=2, iteration_rank=3,
                num_server_rounds=5, epsilon=0.0, row_normalize=True, dp_channel="plaintext", center=True, seed=2)
    M = np.vstack(parts).astype(np.float64)
    M /= np.linalg.norm(M, axis=1, keepdims=True)
    Mc = M - M.mean(axis=0)
    X = s.iterates[1]  # round 1 releases the mean; the estimate is kept
    np.testing.assert_array_equal(X, s.iterates[0])
    for later in list(s.iterates)[2:]:
        X = orth(Mc.T @ (Mc @ X))
        assert np.max(np.abs(later - X)) < 1e-10
