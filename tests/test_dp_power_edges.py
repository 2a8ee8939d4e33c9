"""dp-power's server side where bugs hide: the centred private run, the accounting columns, SecAgg+'s set-up.

Each privacy number is recomputed here from its definition (zCDP: ``rho = sum count / (2 sigma^2)``,
``epsilon = rho + 2 sqrt(rho ln(1/delta))``; the exact Gaussian mechanism for the PLD column), not read back
from the module.
"""

from __future__ import annotations

import logging
import math

import numpy as np
import pytest
from conftest import run_app
from scipy.optimize import brentq
from scipy.stats import norm

from fl_strategies.kernels.linalg import gaussian_basis, orth
from fl_strategies.privacy import accounting
from fl_strategies.privacy.dp_power_noise import mean_noise_std, privacy_plan
from fl_strategies.protocol.strategies.dp_power import (QUANTIZATION_RANGE, DPPowerStrategy, num_shares,
                                                        secagg_tolerance)
from fl_strategies.settings.config import MAX_SECAGG_CLIENTS, validate_run_config
from simulations.engines import fused_run_config

D, L, S, DELTA = 8, 3, 4, 1e-6


def config(**overrides) -> dict:
    """A validated dp-power run config: ``d = 8``, ``L = 3`` products, 4 clients, unit rows."""
    over = dict(strategy="dp-power", dataset="dp-haar", dimension=D, rank=2, iteration_rank=3, num_server_rounds=L,
                num_clients=S, delta=DELTA, row_normalize=True, partitioner="iid", dp_channel="plaintext")
    over.update(overrides)
    return validate_run_config(fused_run_config({k.replace("_", "-"): v for k, v in over.items()}))


def zcdp_epsilon(rho: float) -> float:
    return rho + 2 * math.sqrt(rho * math.log(1 / DELTA)) if rho else 0.0


def gaussian_epsilon(mu: float) -> float:
    """Exact epsilon at ``DELTA`` of one Gaussian mechanism with ``mu = sensitivity / std`` (Balle & Wang 2018)."""
    def excess(eps):
        return norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * norm.cdf(-eps / mu - mu / 2) - DELTA
    return brentq(excess, 0.0, 100.0, xtol=1e-12) if mu else 0.0


def unit_rows(n: int, seed: int = 0) -> np.ndarray:
    """Unit rows whose mean is far from zero (so that centring changes the covariance)."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, D)) * np.linspace(2.0, 0.2, D) + 1.5
    return X / np.linalg.norm(X, axis=1, keepdims=True)


# -- the privacy plan --------------------------------------------------------------------------------------------------
def test_the_uncentred_plan_is_the_products_calibration_alone():
    calibration, releases = privacy_plan(2.0, DELTA, "paper", L, False)
    assert releases is None
    assert calibration.sigma == pytest.approx(math.sqrt(4 * L * math.log(1 / DELTA)) / 2.0, rel=1e-12)
    assert privacy_plan(0.0, DELTA, "paper", L, False) == (None, None)
    assert privacy_plan(0.0, DELTA, "paper", L, True) == (None, None)


@pytest.mark.parametrize("kind", ["paper", "tight"])
def test_the_centred_plan_gives_the_mean_its_share_and_spends_the_target(kind):
    calibration, releases = privacy_plan(2.0, DELTA, kind, L, True)
    sigma_mean, sigma_products = releases.multipliers["mean"], releases.multipliers["products"]
    assert calibration.sigma == sigma_products and calibration.iterations == L
    # one mean and L products: the mean takes 5 % of the composed 1 / sigma^2
    total = 1 / sigma_mean ** 2 + L / sigma_products ** 2
    assert (1 / sigma_mean ** 2) / total == pytest.approx(0.05, rel=1e-9)
    spent = zcdp_epsilon(total / 2)
    if kind == "tight":
        assert spent == pytest.approx(2.0, rel=1e-9)
    else:  # the paper's calibration: sigma^2 = 4 L ln(1/delta) / eps^2 for the composed Gaussian
        assert 1 / total == pytest.approx(4 * math.log(1 / DELTA) / 2.0 ** 2, rel=1e-9)
    assert releases.spent({"mean": 1, "products": L}) == pytest.approx(spent, rel=1e-9)


@pytest.mark.parametrize("channel, share", [("plaintext", math.sqrt(S)), ("secagg", math.sqrt(S)), ("public", 1.0)])
def test_the_mean_noise_is_its_sensitivity_two_times_its_multiplier_over_the_share(channel, share):
    _, releases = privacy_plan(2.0, DELTA, "paper", L, True)
    assert mean_noise_std(channel, S, releases) == pytest.approx(2.0 * releases.multipliers["mean"] / share,
                                                                 rel=1e-12)
    assert mean_noise_std(channel, S, None) == 0.0


# -- the accounting columns --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("pld", [True, False])
def test_the_uncentred_columns_are_the_zcdp_and_gaussian_accounts_of_the_products_so_far(pld, monkeypatch):
    if not pld:
        monkeypatch.setattr(accounting, "available", lambda: False)
    strategy = DPPowerStrategy(config(epsilon=2.0), D)
    sigma = strategy.calibration.sigma
    for released in range(L + 1):
        row = strategy.privacy_columns(released)
        rho = released / (2 * sigma ** 2)
        assert row["rho"] == pytest.approx(rho, rel=1e-12, abs=0) and row["delta"] == DELTA
        assert row["epsilon_spent"] == pytest.approx(zcdp_epsilon(rho), rel=1e-12, abs=0)
        assert row["epsilon_zcdp"] == pytest.approx(zcdp_epsilon(rho), rel=1e-12, abs=0)
        if pld:  # PLD: the exact Gaussian mechanism of mu = sqrt(l) / sigma, up to its discretisation
            assert row["epsilon_pld"] == pytest.approx(gaussian_epsilon(math.sqrt(released) / sigma), rel=2e-3,
                                                       abs=1e-12)
        else:
            assert row["epsilon_pld"] is None
    assert DPPowerStrategy(config(epsilon=0.0), D).privacy_columns(2) == dict.fromkeys(
        ("rho", "epsilon_spent", "delta", "epsilon_zcdp", "epsilon_pld"))


@pytest.mark.parametrize("pld", [True, False])
def test_the_centred_columns_compose_the_mean_of_round_one_with_the_products_after_it(pld, monkeypatch):
    if not pld:
        monkeypatch.setattr(accounting, "available", lambda: False)
    strategy = DPPowerStrategy(config(epsilon=2.0, center=True, dp_sensitivity="one", dp_calibration="tight"), D)
    sigma_mean, sigma_products = strategy.releases.multipliers["mean"], strategy.releases.multipliers["products"]
    assert strategy.num_rounds == L + 1
    for rnd in range(L + 2):  # round 1 releases the mean, rounds 2 .. L + 1 the products
        row = strategy.privacy_columns(rnd)
        inverse = min(rnd, 1) / sigma_mean ** 2 + max(rnd - 1, 0) / sigma_products ** 2
        assert strategy.products_before(rnd) == max(rnd - 1, 0)
        assert row["rho"] == pytest.approx(inverse / 2, rel=1e-12, abs=0)
        assert row["epsilon_spent"] == pytest.approx(zcdp_epsilon(inverse / 2), rel=1e-9, abs=0)
        assert row["epsilon_zcdp"] == pytest.approx(zcdp_epsilon(inverse / 2), rel=1e-12, abs=0)
        if pld:
            assert row["epsilon_pld"] == pytest.approx(gaussian_epsilon(math.sqrt(inverse)), rel=2e-3, abs=1e-12)
        else:
            assert row["epsilon_pld"] == (0.0 if rnd == 0 else None)
    assert strategy.privacy_columns(L + 1)["epsilon_spent"] == pytest.approx(2.0, rel=1e-9)


def test_a_centred_private_run_reports_each_rounds_noise_and_sensitivity_and_records_both_releases(tmp_path):
    rows = unit_rows(40)
    np.save(tmp_path / "rows.npy", rows)
    run = run_app(**dict(strategy="dp-power", dataset=str(tmp_path / "rows.npy"), dimension=D, rank=2,
                         iteration_rank=3, num_server_rounds=L, num_clients=S, delta=DELTA, epsilon=2.0,
                         row_normalize=True, center=True, dp_sensitivity="one", dp_channel="plaintext",
                         noise_source="seeded"))
    sigma_mean, sigma_products = run.releases.multipliers["mean"], run.releases.multipliers["products"]
    assert [r["round"] for r in run.records] == list(range(L + 2))
    assert run.records[0]["sensitivity"] is None and run.records[0]["rho"] == 0
    assert run.records[1]["sensitivity"] == 2.0
    assert run.records[1]["client_noise_std"] == pytest.approx(2.0 * sigma_mean / math.sqrt(S), rel=1e-12)
    for row in run.records[2:]:
        assert row["sensitivity"] == 2.0
        assert row["client_noise_std"] == pytest.approx(2.0 * sigma_products / math.sqrt(S), rel=1e-12)
    assert run.records[-1]["epsilon_spent"] == pytest.approx(zcdp_epsilon(
        (1 / sigma_mean ** 2 + L / sigma_products ** 2) / 2), rel=1e-9)
    privacy = run.model["privacy"]
    privacy = privacy if isinstance(privacy, dict) else __import__("json").loads(str(privacy))
    releases = {r["name"]: r for r in privacy["releases"]}
    assert releases["mean"]["count"] == 1 and releases["products"]["count"] == L
    assert releases["mean"]["noise_multiplier"] == pytest.approx(sigma_mean, rel=1e-12)
    assert releases["products"]["noise_multiplier"] == pytest.approx(sigma_products, rel=1e-12)


def test_an_uncentred_private_model_records_every_products_multiplier_and_sensitivity():
    run = run_app(**dict(strategy="dp-power", dataset="dp-haar", dimension=D, rank=2, iteration_rank=3,
                         num_server_rounds=L, num_clients=S, delta=DELTA, epsilon=2.0, row_normalize=True,
                         partitioner="iid", dp_channel="plaintext", dp_sensitivity="row-norm", noise_source="seeded"))
    privacy = run.model["privacy"]
    privacy = privacy if isinstance(privacy, dict) else __import__("json").loads(str(privacy))
    (products,) = privacy["releases"]
    assert products["count"] == L
    assert products["noise_multiplier"] == pytest.approx(run.calibration.sigma, rel=1e-12)
    assert products["sensitivity"] == pytest.approx([r["sensitivity"] for r in run.records[1:]], rel=1e-12)
    assert privacy["epsilon"] == pytest.approx(run.records[-1]["epsilon_spent"], rel=1e-12)


# -- the centred power method, and the model from its last sum ---------------------------------------------------------
def test_a_centred_run_without_noise_is_the_power_method_on_the_centred_covariance(tmp_path):
    from flwr.common import ndarray_to_bytes

    rows = unit_rows(40)
    np.save(tmp_path / "rows.npy", rows)
    run = run_app(**dict(strategy="dp-power", dataset=str(tmp_path / "rows.npy"), dimension=D, rank=2,
                         iteration_rank=3, num_server_rounds=L, num_clients=S, row_normalize=True, center=True,
                         dp_sensitivity="one", dp_channel="plaintext", seed=2))
    n, mu = len(rows), rows.mean(axis=0)
    np.testing.assert_allclose(run.mean, mu, rtol=0, atol=1e-15)  # the mean of unit rows needs no projection
    C = rows.T @ rows - n * np.outer(mu, mu)  # n times the centred covariance
    X = [gaussian_basis(D, 3, np.random.default_rng([2, 0]))]
    for _ in range(L):
        X.append(orth(C @ X[-1]))
    assert len(run.iterates) == L + 2 and len(run.records) == L + 2  # the mean's round leaves X_0 as it is
    for position in (0, -2, -1):  # the server holds Z_0 and the newest two
        np.testing.assert_allclose(run.iterates[position], ([X[0]] + X)[position], rtol=0, atol=1e-12)
    np.testing.assert_allclose(run.last_sum, C @ X[-2], rtol=0, atol=1e-12)
    # the model: the last sum over n, its left singular vectors and (n - 1 convention) its singular values
    U, sv, _ = np.linalg.svd(C @ X[-2] / n, full_matrices=False)
    np.testing.assert_allclose(run.model["explained_variance"], sv[:2] * n / (n - 1), rtol=1e-10)
    np.testing.assert_allclose(np.abs(run.model["components"] @ U[:, :2]), np.eye(2), atol=1e-8)
    np.testing.assert_allclose(run.model["mean"], mu, atol=1e-15)
    # what travelled: X (d x p float64) down to each client; a row sum, then a product, up from each
    down = S * D * 3 * 8
    assert [r["bytes_down"] for r in run.records] == [0] + [down] * (L + 1)
    up_mean, up_product = (len(ndarray_to_bytes(np.zeros(shape))) for shape in ((D,), (D, 3)))
    assert [r["bytes_up"] for r in run.records] == [0, S * up_mean] + [S * up_product] * L


# -- SecAgg+: the clipping range, the quantisation, the share holders --------------------------------------------------
@pytest.mark.parametrize("center, sensitivity, bound", [(False, "row-norm", 1.0), (False, "max-entry", math.sqrt(3)),
                                                         (True, "one", 2.0)])
def test_the_automatic_clipping_range_is_the_largest_row_count_plus_eight_noise_stds(center, sensitivity, bound):
    run = run_app(**dict(strategy="dp-power", dataset="dp-haar", dimension=D, rank=2, iteration_rank=3,
                         num_server_rounds=1, num_clients=3, num_samples=20, delta=DELTA, epsilon=2.0,
                         row_normalize=True, partitioner="iid", dp_channel="secagg", dp_sensitivity=sensitivity,
                         center=center, secagg_clip=0.0, noise_source="seeded"))
    products = bound * run.calibration.sigma / math.sqrt(3)  # the largest per-entry noise std of a product
    mean = 2.0 * run.releases.multipliers["mean"] / math.sqrt(3) if center else 0.0
    assert run.clip == pytest.approx(max(run.sizes.values()) + 8 * max(products, mean), rel=1e-12)
    assert len(run.records) == 2 + center  # the rounds ran through SecAgg+ with that range


def test_the_sum_fits_the_modulus_and_the_tolerance_is_one_quantisation_step_per_client():
    from flwr.common.secure_aggregation.quantization import dequantize, quantize

    clip = 3.0
    top = quantize([np.full(4, clip)], clip, QUANTIZATION_RANGE)[0]
    assert int(top.max()) * MAX_SECAGG_CLIENTS < 2 ** 32  # the modulus the workflow runs with (secure_loop)
    values = np.random.default_rng(0).uniform(-clip, clip, 20000)
    error = np.abs(dequantize(quantize([values], clip, QUANTIZATION_RANGE), clip, QUANTIZATION_RANGE)[0] - values)
    step = secagg_tolerance(clip, 1)
    assert error.max() <= step and error.max() > 0.9 * step  # stochastic rounding moves a value by up to one step
    assert secagg_tolerance(clip, 7) == pytest.approx(7 * step, rel=1e-15)


def test_the_default_share_holders_are_everyone_up_to_seven_then_the_odd_number_nearest_2_log2_s_plus_1():
    for s in range(2, MAX_SECAGG_CLIENTS + 1):
        shares, threshold = num_shares(s, 0)
        if s <= 7:
            assert shares == 1.0, s
            continue
        x = 2 * math.log2(s) + 1
        nearest_odd = min(range(1, s + 2, 2), key=lambda o: abs(o - x))
        assert (shares, threshold) == (nearest_odd, nearest_odd // 2 + 1), s


def test_a_share_count_of_every_client_is_the_fraction_one_flower_accepts_for_two_clients():
    from flwr.server.workflow import SecAggPlusWorkflow

    for s in (2, 3, 9):
        shares, threshold = num_shares(s, s)
        assert shares == 1.0 and isinstance(shares, float)
        SecAggPlusWorkflow(num_shares=shares, reconstruction_threshold=threshold, max_weight=1.0,
                           clipping_range=1.0, quantization_range=QUANTIZATION_RANGE, modulus_range=2 ** 32)


# -- the strategy object -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("source, epsilon, clients, warned", [
    ("seeded", 2.0, 4, True), ("seeded-not-private", 2.0, 4, True), ("seeded", 2.0, 1, False),
    ("seeded", 0.0, 4, False), ("os", 2.0, 4, False), ("seeded", 2.0, 2, True)])
def test_seeded_noise_for_more_than_one_client_is_warned_about(source, epsilon, clients, warned, caplog):
    cfg = config(epsilon=epsilon, num_clients=clients, noise_source=source)
    with caplog.at_level(logging.WARNING, logger="flwr"):
        DPPowerStrategy(cfg, D)
    assert ("the server knows" in caplog.text) is warned


def test_a_new_strategy_has_no_sum_names_its_noise_and_waits_as_long_as_every_strategy():
    import inspect

    from fl_strategies.protocol.base import FederatedStrategy

    private, plain = DPPowerStrategy(config(epsilon=2.0), D), DPPowerStrategy(config(epsilon=0.0), D)
    assert private.last_sum is None and plain.last_sum is None
    assert "Calibration(" in repr(private) and "channel=plaintext" in repr(private)
    assert "no noise" in repr(plain) and "no noise" not in repr(private)
    default = inspect.signature(FederatedStrategy.__init__).parameters["wait_timeout"].default
    assert private.wait_timeout == default == inspect.signature(DPPowerStrategy).parameters["wait_timeout"].default
