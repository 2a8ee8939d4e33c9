"""FedLRGD and FedAve: exactness on ridge, pivot exactness, partition invariance, Gamma accounting."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.optimize
from conftest import run_aborted, run_app

from fl_strategies.kernels.fedave import local_sgd, step_size, warmup_epochs
from fl_strategies.kernels.fedlrgd import (client_weights, draw_pivots, fedlrgd_gamma, gradient_estimate, inexact_gd,
                                         invert, server_matrices)
from fl_strategies.kernels.losses import full_gradient, minimise, objective, per_sample_grads, smoothness, split_xy
from simulations.data.erm_data import generate

# n - r = 400 rows over m = 5 clients: s = 80 each
RIDGE = dict(strategy="fedlrgd", dataset="erm-ridge", loss="ridge", l2=0.1, dimension=4, num_samples=404,
             num_clients=5, server_samples=4, gd_iterations=3000, g_inverse="inv", comm_ratio=100.0)


def _problem(name="erm-ridge", p=3, n=300, r=4, m=5, seed=0):
    rows = generate(name, n, p + 1, seed)
    X, y = split_xy(rows)
    return X[:r], y[:r], [(X[r:][i::m], y[r:][i::m]) for i in range(m)], X, y


def _estimator(loss, X0, y0, clients, pivots, mu, mode="inv", rcond=1e-10):
    Ginv, _ = invert(server_matrices(loss, X0, y0, pivots, mu), mode, rcond)
    A = sum(client_weights(loss, Xc, yc, pivots, Ginv, mu) for Xc, yc in clients).T  # (r, p)
    return A


def test_per_sample_grads_match_finite_differences():
    rng = np.random.default_rng(1)
    X, y = rng.uniform(size=(6, 3)), rng.uniform(size=6)
    thetas = rng.uniform(-1, 1, size=(4, 3))
    for loss in ("logistic", "ridge"):
        G = per_sample_grads(loss, X, y, thetas, 0.3)
        for j in range(6):
            for k in range(4):
                fd = scipy.optimize.approx_fprime(thetas[k], lambda t: objective(loss, X[j:j + 1], y[j:j + 1], t, 0.3),
                                                  1e-7)
                np.testing.assert_allclose(G[j, k], fd, atol=1e-5)
        np.testing.assert_allclose(G[:, 0].mean(axis=0), full_gradient(loss, X, y, thetas[0], 0.3), atol=1e-14)


@pytest.mark.parametrize("loss", ["logistic", "ridge"])
def test_minimiser_matches_scipy(loss):
    X0, y0, clients, X, y = _problem("erm-logistic" if loss == "logistic" else "erm-ridge")
    theta = minimise(loss, X, y, 0.1)
    res = scipy.optimize.minimize(lambda t: objective(loss, X, y, t, 0.1), np.zeros(3),
                                  jac=lambda t: full_gradient(loss, X, y, t, 0.1), method="BFGS",
                                  options={"gtol": 1e-12})
    np.testing.assert_allclose(theta, res.x, atol=1e-7)
    assert np.linalg.norm(full_gradient(loss, X, y, theta, 0.1)) < 1e-12


def test_ridge_gradient_estimate_is_exact_with_rank_p_plus_1():
    p = 3
    X0, y0, clients, X, y = _problem(p=p, r=p + 1)
    pivots = draw_pivots(np.random.default_rng(5), p + 1, p)
    A = _estimator("ridge", X0, y0, clients, pivots, 0.1)
    for theta in np.random.default_rng(6).uniform(-2, 2, size=(20, p)):
        g = full_gradient("ridge", X, y, theta, 0.1)
        gh = gradient_estimate("ridge", X0, y0, A, X.shape[0], theta, 0.1)
        assert np.linalg.norm(gh - g) <= 1e-10 * np.linalg.norm(g)
    # one rank short: no longer exact (the test can fail)
    A3 = _estimator("ridge", X0[:p], y0[:p], clients, pivots[:p], 0.1)
    theta = np.ones(p)
    g = full_gradient("ridge", X, y, theta, 0.1)
    assert np.linalg.norm(gradient_estimate("ridge", X0[:p], y0[:p], A3, X.shape[0], theta, 0.1) - g) > 1e-3


def test_pinv_stays_exact_when_g_is_singular():
    p = 3
    X0, y0, clients, X, y = _problem(p=p, r=p + 4)
    pivots = draw_pivots(np.random.default_rng(5), p + 4, p)
    _, cond = invert(server_matrices("ridge", X0, y0, pivots, 0.1), "pinv")
    assert cond.min() > 1e12  # r > p + 1: G has rank p + 1
    A = _estimator("ridge", X0, y0, clients, pivots, 0.1, mode="pinv")
    theta = np.array([0.3, -0.7, 1.1])
    g = full_gradient("ridge", X, y, theta, 0.1)
    assert np.linalg.norm(gradient_estimate("ridge", X0, y0, A, X.shape[0], theta, 0.1) - g) <= 1e-7 * np.linalg.norm(g)


def test_logistic_estimate_is_exact_at_every_pivot():
    p, r = 2, 5
    X0, y0, clients, X, y = _problem("erm-logistic", p=p, r=r)
    pivots = draw_pivots(np.random.default_rng(2), r, p)
    A = _estimator("logistic", X0, y0, clients, pivots, 0.1)
    far = np.array([0.9, -0.9])
    for theta in pivots:
        g = full_gradient("logistic", X, y, theta, 0.1)
        gh = gradient_estimate("logistic", X0, y0, A, X.shape[0], theta, 0.1)
        assert np.linalg.norm(gh - g) <= 1e-8 * np.linalg.norm(g)
    # away from the pivots the interpolation is only approximate (not an identity)
    err = np.linalg.norm(gradient_estimate("logistic", X0, y0, A, X.shape[0], far, 0.1)
                         - full_gradient("logistic", X, y, far, 0.1))
    assert err > 1e-12


def test_fedlrgd_run_reaches_the_ridge_minimiser_and_counts_gamma():
    s = run_app(**RIDGE)
    assert s.failure is None and len(s.records) == 5  # rounds 0..r
    theta_star = s.reference.theta_star
    Xc = s.reference.X
    np.testing.assert_allclose(Xc.T @ Xc / Xc.shape[0] @ theta_star + 0.1 * theta_star,
                               Xc.T @ s.reference.y / Xc.shape[0], atol=1e-12)  # the closed form itself
    assert np.linalg.norm(s.estimate - theta_star) <= 1e-10 * np.linalg.norm(theta_star)
    assert s.records[-1]["loss_gap"] <= 1e-14
    r, S, m = 4, 3000, 5
    assert set(s.sizes.values()) == {80}
    assert s.records[-1]["oracle_complexity"] == fedlrgd_gamma(r, 80, S, 100.0, m) == r * r + r * 80 + r * S + 100 * m * r
    assert [row["communication_epochs"] for row in s.records] == [0, 1, 2, 3, 4]
    # the Flower path reproduces the pure-numpy simulator
    ref = s.reference
    theta_sim = inexact_gd("ridge", s.X0, s.y0, s.A, ref.X.shape[0], np.zeros(3), 0.1, 1 / smoothness("ridge", 3, 0.1),
                           S)[-1]
    np.testing.assert_allclose(s.estimate, theta_sim, rtol=0, atol=1e-14)


def test_fedlrgd_result_does_not_depend_on_the_partition():
    base = dict(RIDGE, strategy="fedlrgd", dataset="erm-logistic", loss="logistic", server_samples=6,
                gd_iterations=200, g_inverse="pinv")
    a = run_app(**base)
    b = run_app(**dict(base, partitioner="contiguous", num_clients=7))
    assert a.failure is None and b.failure is None
    np.testing.assert_allclose(a.A, b.A, rtol=1e-11, atol=1e-11)
    np.testing.assert_allclose(a.estimate, b.estimate, rtol=1e-10, atol=1e-12)
    assert a.records[-1]["oracle_complexity"] != b.records[-1]["oracle_complexity"]  # m differs


def test_fedlrgd_stops_when_a_client_is_missing():
    seen = {}

    def drop_partition_2_in_round_3(msg, pid):
        if msg.metadata.message_type == "train" and pid == 2:
            seen[pid] = seen.get(pid, 0) + 1
            return "drop" if seen[pid] == 3 else "ok"
        return "ok"

    s = run_aborted(fault_fn=drop_partition_2_in_round_3, **RIDGE)
    assert "round 3" in s.failure and "partition(s) 2" in s.failure
    assert len(s.records) == 3  # rounds 0, 1, 2; no estimate from incomplete sums


def test_fedave_gamma_sampling_and_convergence():
    cfg = dict(RIDGE, strategy="fedave", num_server_rounds=40, local_steps=10, frac_active=0.6, step_max=0.1,
               comm_ratio=10.0)
    s = run_app(**cfg)
    T, b, active = 40, 10, 3
    assert [row["participants"] for row in s.records[1:]] == [active] * T
    assert s.records[-1]["oracle_complexity"] == T * (b + 10.0 * active)
    gaps = [row["loss_gap"] for row in s.records]
    assert gaps[-1] < 1e-2 * gaps[0]
    # deterministic given the seed
    np.testing.assert_array_equal(run_app(**cfg).estimate, s.estimate)


def test_fedave_one_round_is_the_weighted_average_of_local_sgd():
    cfg = dict(RIDGE, strategy="fedave", num_server_rounds=1, local_steps=5, step_schedule="const", step_max=0.05)
    s = run_app(**cfg)
    ref = s.reference
    from simulations.data.erm_data import erm_split
    from fl_strategies.settings.config import validate_run_config
    from simulations.engines import fused_run_config
    full = validate_run_config(fused_run_config({k.replace("_", "-"): v for k, v in cfg.items()}))
    _, clients = erm_split(full)
    outs = [80 * local_sgd("ridge", *split_xy(rows), np.zeros(3), 0.1, 0.05, 5,
                           np.random.default_rng([0, 3, c, 1])) for c, rows in enumerate(clients)]
    outs.append(4 * local_sgd("ridge", s.X0, s.y0, np.zeros(3), 0.1, 0.05, 5,
                              np.random.default_rng([0, 3, -1 % 2 ** 32, 1])))
    np.testing.assert_allclose(s.estimate, sum(outs) / 404, atol=1e-15)


def test_step_schedules():
    mu, b = 0.1, 10
    assert step_size("clipped", 0, b=b, mu=mu, step_max=0.2) == 0.2
    assert step_size("clipped", 100, b=b, mu=mu, step_max=0.2) == pytest.approx(4 / (mu * 1001))
    assert step_size("const", 7, b=b, mu=mu, step_max=0.3) == 0.3
    kappa, m = (2 / 2 + mu) / mu, 50
    T0 = warmup_epochs(kappa, 1.0, m, mu, b)
    assert T0 == 4 * max(kappa, 4.0, 4 * m / (mu ** 2 * b))
    L1 = kappa * mu
    assert step_size("theory-shifted", 0, b=b, mu=mu, step_max=1.0, T0=T0) <= 1 / (L1 * b)  # the safe variant


def test_too_many_server_samples_is_a_config_error():
    from fl_strategies.settings.config import ConfigError
    from server_app.app import build_strategy
    from simulations.engines import fused_run_config

    cfg = fused_run_config({k.replace("_", "-"): v for k, v in dict(RIDGE, server_samples=402).items()})
    with pytest.raises(ConfigError, match="server-samples"):
        build_strategy(cfg)


def test_client_weights_are_computed_once_and_kept_in_the_node_state():
    calls = []
    import fl_strategies.kernels.fedlrgd as core
    import client_app.erm_client as erm_client

    original = erm_client.client_weights

    def counting(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    erm_client.client_weights = counting
    try:
        s = run_app(**RIDGE)
    finally:
        erm_client.client_weights = original
    assert s.failure is None and len(calls) == 5  # once per client (m = 5), not once per round
    assert core.client_weights is original


def test_lemma2_inexact_gd_bound_holds_along_a_logistic_run():
    p, r, mu = 2, 4, 0.1
    X0, y0, clients, X, y = _problem("erm-logistic", p=p, r=r)
    pivots = draw_pivots(np.random.default_rng(3), r, p)
    A = _estimator("logistic", X0, y0, clients, pivots, mu)
    n, L1 = X.shape[0], smoothness("logistic", p, mu)
    S = 200
    thetas = inexact_gd("logistic", X0, y0, A, n, np.zeros(p), mu, 1 / L1, S)
    F_star = objective("logistic", X, y, minimise("logistic", X, y, mu), mu)
    gaps = np.array([objective("logistic", X, y, t, mu) for t in thetas]) - F_star
    errs = np.array([np.sum((gradient_estimate("logistic", X0, y0, A, n, t, mu)
                             - full_gradient("logistic", X, y, t, mu)) ** 2) for t in thetas])
    q = 1 - mu / L1
    assert errs.max() > 1e-12  # r = 4 is an approximation here, the bound is not trivial
    for s_ in range(1, S + 1):
        rhs = q ** s_ * gaps[0] + sum(q ** (s_ - g) * errs[g - 1] for g in range(1, s_ + 1)) / (2 * L1)
        assert gaps[s_] <= rhs + 1e-14
