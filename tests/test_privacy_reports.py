"""Every privacy number a run reports, against a hand computation from the papers' formulas.

The expected values are computed here from the formulas themselves (FedPower's Theorem 6 and eq. A.2; the DP
power method's zCDP accounting, Bun & Steinke), never by calling fl_strategies.privacy.fedpower_dp or
fl_strategies.privacy.zcdp: a bug in those modules, or in how a strategy feeds them (which client, how many steps), must
show up as a wrong number here. The row counts of the partitions come from the data layer
(simulations.data.federated_data), which does no accounting.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from conftest import run_app
from fl_strategies.protocol import checkpoint as ck
from fl_strategies.settings.config import validate_run_config
from simulations.engines import fused_run_config
from simulations.data.federated_data import federated_dataset

# FedPower on unequal partitions ("linear": client j holds about j+1 shares), d = 20, r = 3
UNEQUAL = dict(dataset="fedpower-model1", num_samples=2000, dimension=20, rank=2, iteration_rank=3, num_clients=4,
               partitioner="linear", local_steps=2, schedule="fixed", num_server_rounds=3, row_normalize=True,
               delta=1e-5)


def partition_sizes(**overrides) -> list[int]:
    cfg = validate_run_config(fused_run_config({k.replace("_", "-"): v for k, v in overrides.items()}))
    _, parts = federated_dataset(cfg)
    return [len(p) for p in parts]


def eq_a2(sigma_g: float, steps: int, delta: float) -> float:
    """FedPower eq. (A.2): ``T / (2 sigma_g^2) + sqrt(2 T ln(1/delta)) / sigma_g`` after ``T`` Gaussian steps."""
    return steps / (2 * sigma_g ** 2) + math.sqrt(2 * steps * math.log(1 / delta)) / sigma_g if steps else 0.0


def theorem6_sigma_g(eps: float, delta: float, T: int) -> float:
    """Theorem 6: ``max(sqrt(T / eps), 2 sqrt(2 T ln(1/delta)) / eps)``."""
    return max(math.sqrt(T / eps), 2 * math.sqrt(2 * T * math.log(1 / delta)) / eps)


# -- the formulas themselves, at the spec's table (FedPower spec 2.4: T = 10, delta = 1e-4) -------------------------

@pytest.mark.parametrize("eps, sigma_g, achieved", [(0.5, 54.289, 0.2517), (1, 27.145, 0.5068), (10, 2.7145, 5.679)])
def test_theorem6_calibration_matches_the_spec_table(eps, sigma_g, achieved):
    from fl_strategies.privacy.fedpower_dp import achieved_epsilon, noise_multiplier, noise_std
    assert noise_multiplier(eps, 1e-4, 10) == pytest.approx(sigma_g, rel=1e-4)
    assert achieved_epsilon(noise_multiplier(eps, 1e-4, 10), 10, 1e-4) == pytest.approx(achieved, rel=1e-3)
    # Model I: r = 5, s_i = n/m = 1e5 rows
    assert noise_std(eps, 1e-4, 10, 5, 100_000) == pytest.approx(2 * math.sqrt(5) * sigma_g / 1e5, rel=1e-4)
    # explicit sigma_g, steps at the boundaries
    assert achieved_epsilon(2.0, 3, 1e-5) == pytest.approx(3 / 8 + math.sqrt(6 * math.log(1e5)) / 2, rel=1e-12)
    assert achieved_epsilon(2.0, 0, 1e-5) == 0.0


@pytest.mark.parametrize("eps, delta, L, calibration", [(1.0, 1e-6, 5, "paper"), (2.0, 1e-5, 3, "tight"),
                                                        (0.5, 1e-6, 7, "paper")])
def test_zcdp_calibration_by_hand(eps, delta, L, calibration):
    from fl_strategies.privacy.zcdp import calibrate
    log_term = math.log(1 / delta)
    if calibration == "paper":
        sigma = math.sqrt(4 * L * log_term) / eps
    else:  # rho* solves rho + 2 sqrt(rho ln(1/delta)) = eps
        rho_star = (math.sqrt(log_term + eps) - math.sqrt(log_term)) ** 2
        sigma = math.sqrt(L / (2 * rho_star))
    cal = calibrate(eps, delta, L, calibration)
    assert cal.sigma == pytest.approx(sigma, rel=1e-12)
    for released in range(L + 1):
        rho = released / (2 * sigma ** 2)
        assert cal.spent(released) == pytest.approx((rho, rho + 2 * math.sqrt(rho * log_term)), rel=1e-12)
    assert cal.epsilon <= eps * (1 + 1e-12)
    if calibration == "tight":
        assert cal.epsilon == pytest.approx(eps, rel=1e-9)


# -- FedPower runs ------------------------------------------------------------------------------------------------

def test_explicit_noise_std_reports_the_epsilon_of_the_smallest_client():
    """With ``noise-std = nu`` client i's sigma_g is ``nu s_i / (2 sqrt r)``: the smallest client spends the most."""
    nu = 0.05
    sizes = partition_sizes(**UNEQUAL)
    assert len(set(sizes)) == len(sizes)  # really unequal
    s = run_app(noise_std=nu, **UNEQUAL)
    sigma_g = nu * min(sizes) / (2 * math.sqrt(3))
    expected = [eq_a2(sigma_g, 2 * j, 1e-5) for j in range(4)]
    assert [row["epsilon_spent"] for row in s.records] == pytest.approx(expected, rel=1e-12)
    assert all(row["delta"] == 1e-5 for row in s.records)
    # the largest client would report far less: the report must not be the optimistic one
    assert s.records[-1]["epsilon_spent"] > 3 * eq_a2(nu * max(sizes) / (2 * math.sqrt(3)), 6, 1e-5)


def test_epsilon_target_reports_eq_a2_at_theorem6_sigma_with_sampling():
    """With a target epsilon every client has the same sigma_g; all T local steps count, sampled or not."""
    over = dict(UNEQUAL, epsilon=4.0, clients_per_round=2, local_steps=3, schedule="decayed", num_server_rounds=10,
                total_iterations=7)
    s = run_app(**over)
    lengths = [3, 2, 1, 1]  # the decay schedule from p = 3 up to T = 7
    sigma_g = theorem6_sigma_g(4.0, 1e-5, 7)
    expected = [eq_a2(sigma_g, sum(lengths[:j]), 1e-5) for j in range(len(lengths) + 1)]
    assert [row["local_iterations"] for row in s.records] == [sum(lengths[:j]) for j in range(len(lengths) + 1)]
    assert [row["epsilon_spent"] for row in s.records] == pytest.approx(expected, rel=1e-12)
    assert s.records[-1]["epsilon_spent"] <= 4.0
    assert any(row["distinct_participants"] < 4 for row in s.records[1:])  # sampling really happened


def test_clients_add_theorem6_noise_for_their_own_row_count():
    """The noise in each reply has std ``2 sqrt(r) sigma_g / s_i`` (one local step: ``Y = A_i Z + N``)."""
    over = dict(UNEQUAL, epsilon=50.0, local_steps=1, num_server_rounds=4, delta=1e-3)
    cfg = validate_run_config(fused_run_config({k.replace("_", "-"): v for k, v in over.items()}))
    data, parts = federated_dataset(cfg)
    seen: dict[int, list[np.ndarray]] = {}

    def observer(rnd, pid, Z, arrays):
        M = np.asarray(data.X[parts[pid]], dtype=np.float64)
        M = M / np.linalg.norm(M, axis=1, keepdims=True)
        seen.setdefault(pid, []).append(arrays[0] - M.T @ (M @ Z) / len(M))

    run_app(observer=observer, **over)
    sigma_g = theorem6_sigma_g(50.0, 1e-3, 4)
    for pid, noises in seen.items():
        N = np.concatenate([n.ravel() for n in noises])  # 4 rounds x d r = 240 entries
        nu = 2 * math.sqrt(3) * sigma_g / len(parts[pid])
        assert np.std(N) == pytest.approx(nu, rel=0.2), pid
        assert abs(np.mean(N)) < 4 * nu / math.sqrt(N.size)


class Killed(BaseException):
    """The ServerApp process killed (nothing may catch it)."""


def test_resumed_run_reports_the_epsilon_of_all_steps(tmp_path, monkeypatch):
    """A run killed after round 2 and resumed reports the same epsilon as if it had never stopped."""
    over = dict(UNEQUAL, epsilon=6.0, num_server_rounds=5, clients_per_round=3)
    save = ck.Checkpoint.save

    def dying_save(self, server_round, parameters, strategy):
        save(self, server_round, parameters, strategy)
        if server_round == 2:
            raise Killed()

    with monkeypatch.context() as patch:
        patch.setattr(ck.Checkpoint, "save", dying_save)
        with pytest.raises(Killed):
            run_app(checkpoint_dir=str(tmp_path), **over)
    resumed = run_app(checkpoint_dir=str(tmp_path), resume=True, **over)
    sigma_g = theorem6_sigma_g(6.0, 1e-5, 10)
    expected = [eq_a2(sigma_g, 2 * j, 1e-5) for j in range(6)]
    assert [row["epsilon_spent"] for row in resumed.records] == pytest.approx(expected, rel=1e-12)
    assert resumed.records[-1]["epsilon_spent"] <= 6.0


# -- dp-power (zCDP) ------------------------------------------------------------------------------------------------

@pytest.mark.usefixtures("every_iterate")
@pytest.mark.parametrize("calibration, channel", [("paper", "plaintext"), ("tight", "public")])
def test_dp_power_reports_rho_epsilon_sensitivity_and_noise_by_hand(calibration, channel):
    eps, delta, L, m = 2.0, 1e-6, 4, 4
    s = run_app(strategy="dp-power", dataset="dp-haar", dimension=60, rank=3, iteration_rank=5, num_server_rounds=L,
                num_clients=m, delta=delta, epsilon=eps, row_normalize=False, partitioner="iid",
                dp_channel=channel, dp_sensitivity="row-norm", dp_calibration=calibration)
    log_term = math.log(1 / delta)
    if calibration == "paper":
        sigma = math.sqrt(4 * L * log_term) / eps
    else:
        sigma = math.sqrt(L / (2 * (math.sqrt(log_term + eps) - math.sqrt(log_term)) ** 2))
    assert [row["round"] for row in s.records] == list(range(L + 1))
    for l, row in enumerate(s.records):
        rho = l / (2 * sigma ** 2)
        assert row["rho"] == pytest.approx(rho, rel=1e-12, abs=0)
        assert row["epsilon_spent"] == pytest.approx(rho + 2 * math.sqrt(rho * log_term), rel=1e-12, abs=0)
        assert row["delta"] == delta
        if l:
            X = s.iterates[l - 1]  # the broadcast iterate of round l
            Delta = max(math.sqrt(float(x @ x)) for x in X)  # largest row norm (the paper's Delta^b)
            assert row["sensitivity"] == pytest.approx(Delta, rel=1e-12)
            share = 1.0 if channel == "public" else math.sqrt(m)
            assert row["client_noise_std"] == pytest.approx(Delta * sigma / share, rel=1e-12)
    assert s.records[-1]["epsilon_spent"] <= eps * (1 + 1e-12)
