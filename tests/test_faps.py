"""FAPS and its baselines (SSI, LocalPower): exact algebra, convergence to eigh, what the server can learn."""

import numpy as np
import pytest
import scipy.linalg
from scipy.stats import ortho_group

from conftest import run_app
from client_app.faps_client import faps_options
from fl_strategies.settings.registry import settings_for
from fl_strategies.kernels.faps_local import faps_client_round, local_subproblem, masked_product, multiplier_factor
from fl_strategies.kernels.linalg import orth, subspace_distance
from fl_strategies.settings.config import validate_run_config
from simulations.engines import fused_run_config

SMALL = dict(dataset="faps-geometric", row_normalize=False, dimension=60, num_samples=1200, xi=1.05,
             partitioner="linear", num_clients=4, rank=4, iteration_rank=4, num_server_rounds=3000, stop_tol=1e-10)


def faps_cfg(**over):
    return validate_run_config(fused_run_config({"strategy": "faps", **{k.replace("_", "-"): v
                                                                        for k, v in over.items()}}))


def random_psd(n, m, rng):
    A = rng.standard_normal((n, m))
    return A @ A.T


def test_low_rank_multiplier_algebra_c1():
    rng = np.random.default_rng(0)
    n, p = 30, 4
    M = random_psd(n, 50, rng)
    X = orth(rng.standard_normal((n, p)))
    W = multiplier_factor(M, X)
    Lam = X @ W.T + W @ X.T
    assert np.allclose(Lam, Lam.T) and np.linalg.matrix_rank(Lam) <= 2 * p
    P = X @ X.T
    Pp = np.eye(n) - P
    assert np.linalg.norm(M + Lam - (P @ M @ P + Pp @ M @ Pp)) <= 1e-12 * np.linalg.norm(M)
    # KKT system (7) at the consensus stationary point X_i = Z = U_p of sum_i M_i
    Ms = [random_psd(n, 40, rng) for _ in range(3)]
    _, U = scipy.linalg.eigh(sum(Ms), subset_by_index=[n - p, n - 1])
    lams = [U @ multiplier_factor(Mi, U).T + multiplier_factor(Mi, U) @ U.T for Mi in Ms]
    assert np.linalg.norm(sum(lams) @ U) <= 1e-10 * np.linalg.norm(sum(Ms))
    for Mi, Li in zip(Ms, lams):
        Gamma = -U.T @ Mi @ U
        assert np.linalg.norm(Mi @ U + U @ Gamma + Li @ U) <= 1e-10 * np.linalg.norm(Mi)


def test_message_is_the_mask_times_z_c2_and_consensus_gives_a_gradient_step_c3():
    rng = np.random.default_rng(1)
    n, p, beta = 25, 3, 0.7
    M = random_psd(n, 40, rng)
    X, Z = orth(rng.standard_normal((n, p))), orth(rng.standard_normal((n, p)))
    W = multiplier_factor(M, X)
    P, Pp = X @ X.T, np.eye(n) - X @ X.T
    Q = beta * P + Pp @ M @ P + P @ M @ Pp  # Prop. 5 / eq. (20)
    Y = masked_product(X, W, beta, Z)
    assert np.linalg.norm(Y - Q @ Z) <= 1e-12 * np.linalg.norm(Q @ Z)
    # C3: if X_i = Z for every client, sum_i Y_i = (sum beta_i) Z + (I - Z Z^T) (sum M_i) Z
    Ms, betas = [random_psd(n, 30, rng) for _ in range(3)], [0.5, 1.0, 2.0]
    total = sum(masked_product(Z, multiplier_factor(Mi, Z), b, Z) for Mi, b in zip(Ms, betas))
    Msum = sum(Ms)
    expected = sum(betas) * Z + (Msum @ Z - Z @ (Z.T @ Msum @ Z))
    assert np.linalg.norm(total - expected) <= 1e-12 * np.linalg.norm(expected)


def test_exact_local_solve_is_the_dominant_eigenspace_and_ssi_approaches_it():
    rng = np.random.default_rng(2)
    n, p = 40, 3
    M = random_psd(n, 60, rng)
    X, Z = orth(rng.standard_normal((n, p))), orth(rng.standard_normal((n, p)))
    W, beta = multiplier_factor(M, X), 5.0
    H = M + X @ W.T + W @ X.T + beta * Z @ Z.T
    _, U = scipy.linalg.eigh(H, subset_by_index=[n - p, n - 1])
    X_exact, steps = local_subproblem(M, X, W, beta, Z, solver="exact")
    assert steps == 0 and subspace_distance(X_exact, U) < 1e-10
    X_ssi, steps = local_subproblem(M, X, W, beta, Z, solver="ssi", tol=0.0, min_steps=300, max_steps=300)
    assert steps == 300 and subspace_distance(X_ssi, U) < 1e-6
    _, steps = local_subproblem(M, X, W, beta, Z, solver="ssi", tol=1e-2, max_steps=100)
    assert 1 <= steps < 100


def test_penalty_rule_fires_only_every_fifth_round():
    rng = np.random.default_rng(3)
    n, p = 30, 3
    M = random_psd(n, 50, rng)
    cfg = faps_cfg(rank=p)
    Z = orth(rng.standard_normal((n, p)))
    state, betas = None, []
    for k in range(16):
        Y, f, state, _ = faps_client_round(M, Z, state, faps_options(settings_for(cfg)))
        assert f == pytest.approx(np.trace(Z.T @ M @ Z), rel=1e-12)  # the objective at the received Z
        Z = orth(Y)
        betas.append(state["beta"])
        assert len(state["dhist"]) == k + 1
    beta0 = 0.15 * np.linalg.eigvalsh(M)[-1]
    assert betas[0] == pytest.approx(beta0)
    changes = [k for k in range(1, 16) if betas[k] != betas[k - 1]]
    assert set(changes) <= {5, 10, 15} and 5 in changes  # d_i^(0) = 0: the rule always fires at k = 5
    assert betas[5] == pytest.approx(1.1 * beta0)


@pytest.mark.parametrize("strategy, extra", [
    ("ssi", {}), ("localpower", {"local_steps": 8}), ("faps", {}), ("faps", {"inner_steps": 3}),
    ("faps", {"inner_solver": "exact"}),
])
def test_all_reach_the_stopping_tolerance_and_agree_with_eigh(strategy, extra):
    s = run_app(strategy=strategy, **SMALL, **extra)
    last = s.records[-1]
    assert s.stopped and len(s.records) - 1 < 3000
    # rule (27) fires at the first statistic <= stop-tol, and that is the last row's
    assert last["stop_statistic"] <= 1e-10
    assert all(r["stop_statistic"] is None or r["stop_statistic"] > 1e-10 for r in s.records[:-1])
    assert all(r["stop_statistic"] is not None for r in s.records[1:])
    assert last["kkt_violation"] < 2e-6  # the paper's tables: ~2e-6 scaled KKT
    assert last["singular_value_error"] < 1.1e-7  # and ~1e-7 relative error
    assert last["subspace_distance"] < 1e-2


def test_faps_with_one_client_finds_its_dominant_subspace():
    """With d = 1 the consensus constraint is void: FAPS must find the top-p eigenspace of A A^T.

    At consensus (X_1 = Z) its global step is orth(Z + grad / beta_1), a Riemannian gradient-ascent step
    (spec identity D5, checked in test_message_is_the_mask_times_z_c2_and_consensus_gives_a_gradient_step_c3).
    """
    s = run_app(strategy="faps", **dict(SMALL, num_clients=1, partitioner="contiguous"))
    assert s.stopped
    assert s.records[-1]["singular_value_error"] < 1e-8
    assert s.records[-1]["kkt_violation"] < 2e-6


def test_localpower_is_ssi_once_q_reaches_one():
    """C10: q = 8, 4, 2, 1, ...; from round 4 on each client sends exactly A_i Z and no basis."""
    seen = {}
    lp = run_app(strategy="localpower", local_steps=8, **dict(SMALL, num_server_rounds=8, stop_tol=0.0),
                 observer=lambda rnd, pid, Z, arrays: seen.__setitem__((rnd, pid), (Z, arrays)))
    assert [r["local_iterations"] for r in lp.records[1:6]] == [8, 12, 14, 15, 16]
    from simulations.data.federated_data import local_covariance

    cfg = validate_run_config(fused_run_config({"strategy": "localpower", **{k.replace("_", "-"): v
                                                                             for k, v in SMALL.items()}}))
    for rnd in range(1, 9):
        for pid in range(4):
            Z, arrays = seen[(rnd, pid)]
            assert len(arrays) == (2 if rnd <= 3 else 1)
            if rnd > 3:
                A, _ = local_covariance(cfg, pid)
                np.testing.assert_allclose(arrays[0], A @ Z, rtol=0, atol=1e-14)


def attack(pairs):
    """The server's least-squares estimate of M_1 from its (Z, Y) pairs: Phi = [Y...] pinv([Z...])."""
    Zc = np.hstack([z for z, _ in pairs])
    Yc = np.hstack([y for _, y in pairs])
    return Yc @ np.linalg.pinv(Zc)


def test_server_recovers_a_client_gram_matrix_from_ssi_but_not_from_faps():
    """Propositions 2 and 5 (spec check C5): n = 200, p = 20, so n / p = 10 rounds suffice against SSI."""
    over = dict(dataset="faps-geometric", row_normalize=False, dimension=200, num_samples=4000, xi=1.01,
                partitioner="contiguous", num_clients=4, rank=20, iteration_rank=20, num_server_rounds=60)
    from simulations.data.federated_data import local_covariance

    cfg = validate_run_config(fused_run_config({k.replace("_", "-"): v for k, v in over.items()}))
    target = local_covariance(cfg, 0)[0]

    def errors(strategy):
        pairs = []
        run_app(strategy=strategy, **over,
                observer=lambda rnd, pid, Z, arrays: pid == 0 and pairs.append((Z, arrays[0])))
        scale = lambda Phi: np.vdot(Phi, target) / np.vdot(Phi, Phi) if strategy == "faps" else 1.0  # noqa
        out = []
        for k in range(1, len(pairs) + 1):
            Phi = attack(pairs[:k])
            out.append(np.linalg.norm(scale(Phi) * Phi - target) / np.linalg.norm(target))
        return np.array(out)

    ssi = errors("ssi")
    assert ssi[9] <= 1e-4 and ssi[8] >= 100 * ssi[9]  # exact once the Z's span R^n (k = n / p = 10)
    faps = errors("faps")
    assert faps.min() > 0.5  # even given the best scale, the masked products never reveal M_1


def test_three_inner_steps_halve_the_rounds_of_ssi_on_a_reduced_table4_problem():
    """Paired starts, 5 seeds, the Table-4 structure (xi = 1.01, p = 10, d = 8, m_i proportional to i) at
    n = 200 features, m = 7200 samples (the full-size comparison is simulations/experiments/faps/faps_table4.toml).

    Measured: FAPS-in3 / SSI = 0.42, 0.39, 0.36, 0.40, 0.42 at the (27) stop.
    """
    over = dict(dataset="faps-geometric", row_normalize=False, dimension=200, num_samples=7200, xi=1.01,
                partitioner="linear", num_clients=8, rank=10, iteration_rank=10, num_server_rounds=3000,
                stop_tol=1e-10)
    ratios = []
    for seed in range(5):
        ssi = run_app(strategy="ssi", seed=seed, **over)
        faps = run_app(strategy="faps", inner_steps=3, seed=seed, **over)
        assert ssi.stopped and faps.stopped
        assert faps.records[-1]["singular_value_error"] < 1.1e-7 and ssi.records[-1]["singular_value_error"] < 1.1e-7
        ratios.append((len(faps.records) - 1) / (len(ssi.records) - 1))
    assert np.median(ratios) <= 0.5, ratios


def test_first_round_starts_on_an_invariant_subspace_that_is_not_dominant():
    """Round 0 is degenerate (module docstring): with X = Z_0 and W by (16), H Z_0 = Z_0 (Z_0^T M Z_0 + beta I),
    so span(Z_0) is invariant under H; it is not H's dominant subspace, and the inner iterations only leave it
    through round-off."""
    rng = np.random.default_rng(5)
    n, p = 60, 3
    M = random_psd(n, 80, rng)
    Z0 = orth(rng.standard_normal((n, p)))
    W, beta = multiplier_factor(M, Z0), 0.15 * np.linalg.eigvalsh(M)[-1]
    H = M + Z0 @ W.T + W @ Z0.T + beta * Z0 @ Z0.T
    np.testing.assert_allclose(H @ Z0, Z0 @ (Z0.T @ M @ Z0 + beta * np.eye(p)), atol=1e-10 * np.linalg.norm(M))
    top = scipy.linalg.eigh(H, subset_by_index=[n - p, n - 1])[1]
    assert subspace_distance(Z0, top) > 0.5  # invariant, not dominant
    # in exact arithmetic subspace iterations from Z_0 never leave span(Z_0); in floating point the round-off
    # component along the dominant directions grows by the eigenvalue ratio at every step until it takes over
    early, _ = local_subproblem(M, Z0, W, beta, Z0, solver="ssi", tol=0.0, min_steps=5, max_steps=5)
    late, _ = local_subproblem(M, Z0, W, beta, Z0, solver="ssi", tol=0.0, min_steps=400, max_steps=400)
    assert subspace_distance(early, Z0) < 1e-10 and subspace_distance(late, Z0) > 0.5
