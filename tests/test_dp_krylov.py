"""dp-krylov: the sensitivity of a product on orthonormal blocks, the whole run as one Gaussian, its accounting
against dp-accounting, the clients' block check, and a private run near the central Analyze Gauss limit."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fl_strategies.privacy import accounting
from fl_strategies.privacy import analyze_gauss as ag
from fl_strategies.privacy import dp_krylov_noise as dk
from fl_strategies.kernels.linalg import orth, subspace_distance
from fl_strategies.settings.config import ConfigError, validate_run_config
from simulations.engines import fused_run_config

A = dk.MEAN_WEIGHT


def ball(p):
    """R^d -> the open unit ball, onto (rows of any length <= 1)."""
    norm = np.linalg.norm(p)
    return p * (np.tanh(norm) / norm if norm > 0 else 1.0)


def run_move(x, y, blocks, a):
    """``sqrt(sum_t ||(x x^T - y y^T) Q_t||_F^2 + a^2 ||x - y||^2)``: the whole run's move for one pair."""
    M = np.outer(x, x) - np.outer(y, y)
    return math.sqrt(sum(np.sum((M @ Q) ** 2) for Q in blocks) + a * a * np.sum((x - y) ** 2))


def largest_move(blocks, a, d, rng, starts=12):
    """The largest move over pairs of rows in the unit ball found by L-BFGS-B from random starts."""
    from scipy.optimize import minimize

    def negative(p):
        return -run_move(ball(p[:d]), ball(p[d:]), blocks, a)

    return max(-minimize(negative, rng.standard_normal(2 * d) * rng.uniform(0.1, 3.0), method="L-BFGS-B").fun
               for _ in range(starts))


# -- the sensitivity -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("p", [1, 2, 5])
def test_one_product_on_an_orthonormal_block_moves_at_most_sqrt2_whatever_its_width(p):
    """No pair of rows in the unit ball moves ``A Q`` further than sqrt(2) (dp-power's bound is 2), the optimiser
    reaches it for ``p >= 2`` (two orthogonal unit rows in span(Q)), and for ``p = 1`` stays at most 1."""
    d, rng = 6, np.random.default_rng(p)
    Q = orth(rng.standard_normal((d, p)))
    best = largest_move([Q], 0.0, d, rng)
    U, W = rng.standard_normal((2, 5000, d))
    U /= np.linalg.norm(U, axis=1, keepdims=True)
    W *= rng.uniform(0, 1, (5000, 1)) / np.linalg.norm(W, axis=1, keepdims=True)
    sampled = max(run_move(u, w, [Q], 0.0) for u, w in zip(U, W))
    assert max(best, sampled) <= dk.PRODUCT_SENSITIVITY * (1 + 1e-9)
    if p >= 2:
        assert best >= 0.999 * math.sqrt(2.0)
        worst = run_move(Q[:, 0], Q[:, 1], [Q], 0.0)  # orthogonal unit rows inside span(Q)
        assert worst == pytest.approx(math.sqrt(2.0), rel=1e-12)
    else:
        assert best <= 1.0 + 1e-9


@pytest.mark.parametrize("a,center", [(0.0, False), (A, True)])
def test_the_whole_run_moves_at_most_the_release_sensitivity_in_total(a, center):
    """Over three jointly orthonormal blocks that fill R^d (the worst case), the products' squared moves and the
    weighted row sum's add up to at most ``release_sensitivity`` squared for every pair, and the optimiser reaches
    it: the whole run is one Gaussian mechanism of that sensitivity (the budget of one covariance release)."""
    d, rng = 6, np.random.default_rng(7)
    B = orth(rng.standard_normal((d, d)))
    blocks = [B[:, :2], B[:, 2:4], B[:, 4:]]
    D = dk.release_sensitivity(center)
    best = largest_move(blocks, a, d, rng)
    assert best <= D
    assert best >= 0.999 * D
    assert D == pytest.approx(ag.joint_sensitivity(a), rel=1e-8)
    # three separately worst-case releases would compose to sqrt(3) times it: what the joint blocks save
    assert math.sqrt(sum(largest_move([Q], 0.0, d, rng, starts=4) ** 2 for Q in blocks)) > 1.7 * math.sqrt(2.0)


def test_the_client_noise_is_the_sensitivity_times_the_multiplier_shared_by_the_sites():
    releases = dk.privacy_plan(1.0, 1e-6, "pld")
    sigma = releases.multipliers[dk.RELEASE]
    nu = dk.client_noise_std("secagg", 4, releases, True)
    assert nu == pytest.approx((math.sqrt(2.0) + A * A / math.sqrt(2.0)) * sigma / 2.0, rel=1e-8)
    assert dk.client_noise_std("public", 4, releases, False) == pytest.approx(math.sqrt(2.0) * sigma, rel=1e-8)
    assert dk.client_noise_std("secagg", 4, None, True) == 0.0


def test_the_noise_covers_the_block_tolerance_and_the_default_width_follows_the_rank():
    """The release sensitivity is sqrt(2) (or 1.48) times sqrt(1 + tolerance), never less (mutation testing)."""
    assert dk.release_sensitivity(False) == math.sqrt(2.0) * math.sqrt(1.0 + dk.BLOCK_TOLERANCE)
    assert dk.release_sensitivity(True) == ag.joint_sensitivity(A) * math.sqrt(1.0 + dk.BLOCK_TOLERANCE)
    assert dk.release_sensitivity(False) > math.sqrt(2.0)
    assert [dk.default_block_width(k) for k in (1, 3, 5, 8)] == [10, 10, 14, 20]
    assert dk.privacy_plan(0.0, 1e-6, "pld") is None and dk.privacy_plan(0.0, 1e-6, "paper") is None


def test_the_block_tolerance_is_1e_9_in_the_check_and_in_the_noise():
    """A block whose ``||Q^T Q - I||`` is 1.5e-9 is refused and one at 0.5e-9 accepted; the sensitivity is
    ``sqrt(2 (1 + 1e-9))`` (mutation testing: the tolerance's value, not only its name)."""
    Q = orth(np.random.default_rng(5).standard_normal((30, 4)))
    for gap, accepted in ((0.5e-9, True), (1.5e-9, False)):
        bent = Q.copy()
        bent[:, 0] *= math.sqrt(1.0 + gap)  # ||B^T B - I||_2 = gap (to round-off, ~1e-16)
        if accepted:
            assert dk.check_block(None, bent) == pytest.approx(gap, rel=1e-5)
        else:
            with pytest.raises(ValueError, match="not orthonormal"):
                dk.check_block(None, bent)
    assert dk.release_sensitivity(False) == pytest.approx(math.sqrt(2.0 * (1.0 + 1e-9)), rel=1e-14)


def test_a_large_epsilon_gets_a_multiplier_below_1_on_the_exact_curve():
    """At epsilon = 10 the exact curve's multiplier is 0.541 (below 1: no floor at 1 on the multiplier), and the
    run spends epsilon 10 (mutation testing: ``sigma > 0`` in :func:`privacy_plan`)."""
    releases = dk.privacy_plan(10.0, 1e-6, "paper")
    assert releases.multipliers[dk.RELEASE] == pytest.approx(0.5410868, rel=1e-6)
    assert 10.0 * (1 - 1e-6) <= releases.epsilon <= 10.0


def test_a_target_spent_to_within_1e_9_below_is_accepted():
    """At epsilon = 2 the exact curve's multiplier spends 2 (1 - 9e-10), within 1e-9 of the target: accepted
    (mutation testing: the upper bound of the float64 check is the target itself, plus round-off)."""
    releases = dk.privacy_plan(2.0, 1e-6, "paper")
    assert 2.0 * (1 - 1e-9) < releases.epsilon <= 2.0


def test_a_target_float64_misses_by_more_than_1e_6_is_refused():
    """At epsilon = 3.1e-9 the exact curve in float64 spends 1.7e-6 (relative) less than the target: more than the
    check's 1e-6, so the target is refused as unresolvable (mutation testing: the lower bound's 1e-6)."""
    sigma = accounting.exact_noise_multiplier(3.1e-9, 1e-6, 1)
    assert 1e-6 < 1 - dk.exact_epsilon(sigma, 1e-6) / 3.1e-9 < 2e-6
    with pytest.raises(ValueError, match="float64"):
        dk.privacy_plan(3.1e-9, 1e-6, "paper")


def test_the_privacy_record_names_its_one_release_krylov_products():
    """The model's privacy record lists one release, named ``krylov-products``, counted once."""
    record = dk.privacy_plan(1.0, 1e-6, "paper").record({dk.RELEASE: dk.release_sensitivity(True)})
    assert [(r["name"], r["count"]) for r in record["releases"]] == [("krylov-products", 1)]


# -- the accounting -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("epsilon", [0.5, 1.0, 4.0])
def test_the_run_is_one_gaussian_certified_by_dp_accounting_and_the_exact_curve(epsilon):
    """The calibrated multiplier is certified by an independent PLD accountant on one Gaussian, 1% less noise
    is not, and the exact Gaussian curve (Balle and Wang) agrees: delta(epsilon) <= delta at 1 / sigma."""
    dpa = pytest.importorskip("dp_accounting")
    releases = dk.privacy_plan(epsilon, 1e-6, "pld")
    sigma = releases.multipliers[dk.RELEASE]
    assert releases.epsilon <= epsilon and releases.counts == {dk.RELEASE: 1}

    def pld(multiplier):
        acc = dpa.pld.PLDAccountant(value_discretization_interval=1e-4)
        acc.compose(dpa.GaussianDpEvent(multiplier))
        return acc.get_epsilon(1e-6)

    assert pld(sigma) <= epsilon * (1 + 1e-3)
    assert pld(0.99 * sigma) > epsilon
    assert accounting.gaussian_delta(epsilon, 1.0 / sigma) <= 1e-6 * (1 + 1e-3)
    # RDP (Feldman and Zrnic's filter) needs more noise, zCDP more still
    assert dk.privacy_plan(epsilon, 1e-6, "rdp").multipliers[dk.RELEASE] > sigma
    assert dk.privacy_plan(epsilon, 1e-6, "tight").multipliers[dk.RELEASE] > sigma


@pytest.mark.parametrize("epsilon", [0.3, 1.0, 4.0])
def test_the_default_calibration_is_the_exact_gaussian_curve_and_matches_pld(epsilon):
    """``dp-calibration = "paper"`` (the default) for dp-krylov: the exact curve of one Gaussian, spending the
    target on that curve, within 1e-6 of the PLD accountant's multiplier (no composition to be loose about)."""
    releases = dk.privacy_plan(epsilon, 1e-6, "paper")
    sigma = releases.multipliers[dk.RELEASE]
    assert releases.calibration == "paper" and releases.epsilon <= epsilon
    assert accounting.gaussian_delta(epsilon, 1.0 / sigma) <= 1e-6 * (1 + 1e-6)
    assert accounting.gaussian_delta(epsilon, 1.0 / (0.999 * sigma)) > 1e-6
    assert dk.exact_epsilon(sigma, 1e-6) == pytest.approx(epsilon, rel=1e-6)
    if accounting.available():
        assert sigma == pytest.approx(dk.privacy_plan(epsilon, 1e-6, "pld").multipliers[dk.RELEASE], rel=1e-6)


@pytest.mark.parametrize("sigma", [0.6, 1.0, 3.0])
def test_exact_epsilon_inverts_the_exact_curve_where_its_bisection_can_land_on_the_answer(sigma):
    """For ``delta = delta(e)`` on the exact curve, ``e`` is the smallest epsilon with ``delta(epsilon) <= delta``:
    the bracket starts at [0, 1] and doubles, so every dyadic ``e`` (below 1, or needing one or two doublings) is a
    point the bisection visits and must return exactly, a certified point (``delta(mid) = delta``) being the upper
    end (mutation testing: the doubling's factor and test, the bisection's side)."""
    mu = 1.0 / sigma
    for e in (0.375, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0):
        assert dk.exact_epsilon(sigma, accounting.gaussian_delta(e, mu)) == e


def test_exact_epsilon_is_the_smallest_certified_epsilon_to_1e_12_relative():
    """Against the root of ``delta(epsilon) = delta`` found independently (Brent's method to 1e-15): the answer is
    certified (not below the root) and at most 1e-12 (relative) above it, as its docstring states (mutation
    testing: the bisection's stopping width)."""
    from scipy.optimize import brentq

    for sigma in np.linspace(0.55, 4.0, 12):
        for delta in (1e-3, 1e-6, 1e-9):
            mu = 1.0 / sigma
            root = brentq(lambda e: accounting.gaussian_delta(e, mu) - delta, 0.0, 200.0, xtol=1e-300, rtol=1e-15)
            got = dk.exact_epsilon(sigma, delta)
            assert accounting.gaussian_delta(got, mu) <= delta
            assert root * (1 - 1e-14) <= got <= root * (1 + 1e-12)


def test_the_exact_gaussian_spends_nothing_before_its_release_and_its_curve_after():
    """``ExactGaussian.spent``: 0 with no release counted (none, or a count of 0), and after the one release the
    epsilon of the exact curve at the run's multiplier, which dp-accounting's PLD accountant (pessimistic, 1e-4
    grid) brackets within 0.1% (mutation testing: the default count and the comparison with 0)."""
    releases = dk.privacy_plan(1.0, 1e-6, "paper")
    sigma = releases.multipliers[dk.RELEASE]
    assert releases.spent({}) == 0.0
    assert releases.spent({dk.RELEASE: 0}) == 0.0
    assert releases.spent({dk.RELEASE: 1}) == releases.epsilon == dk.exact_epsilon(sigma, 1e-6)
    assert 1.0 - 1e-8 <= releases.epsilon <= 1.0
    dpa = pytest.importorskip("dp_accounting")
    acc = dpa.pld.PLDAccountant(value_discretization_interval=1e-4)
    acc.compose(dpa.GaussianDpEvent(sigma))
    assert releases.epsilon <= acc.get_epsilon(1e-6) <= releases.epsilon * (1 + 1e-3)


def test_a_target_the_calibration_cannot_meet_is_a_config_error_naming_it():
    with pytest.raises(ConfigError, match="epsilon"):
        validate_run_config(fused_run_config({"strategy": "dp-krylov", "row-normalize": True, "epsilon": 1e-300,
                                              "num-clients": 4}))
    cfg = validate_run_config(fused_run_config({"strategy": "dp-krylov", "row-normalize": True, "num-clients": 4,
                                                "rank": 3, "iteration-rank": 0}))
    assert cfg["iteration-rank"] == 10  # its block width for iteration-rank = 0


def test_without_unit_rows_a_private_run_is_refused():
    with pytest.raises(ConfigError, match="row-normalize"):
        validate_run_config(fused_run_config({"strategy": "dp-krylov", "row-normalize": False, "epsilon": 1.0,
                                              "num-clients": 4, "dp-channel": "plaintext"}))


# -- the blocks ---------------------------------------------------------------------------------------------------
def test_next_blocks_are_orthonormal_together_and_a_client_refuses_any_other():
    rng = np.random.default_rng(3)
    d, p = 30, 5
    Q = dk.initial_block(d, p, rng)
    basis = Q
    for _ in range(4):
        Q = dk.next_block(basis, rng.standard_normal((d, p)) + basis[:, :p], p)
        assert dk.check_block(basis, Q) <= dk.BLOCK_TOLERANCE
        basis = np.hstack([basis, Q])
    assert np.linalg.norm(basis.T @ basis - np.eye(basis.shape[1])) < 1e-12
    with pytest.raises(ValueError, match="not orthonormal"):
        dk.check_block(basis[:, :10], basis[:, 5:10])  # the same directions again
    with pytest.raises(ValueError, match="not orthonormal"):
        dk.check_block(None, 2.0 * basis[:, :5])  # longer columns: a larger move than accounted
    with pytest.raises(ValueError, match="not orthonormal"):
        dk.check_block(None, np.full((d, p), np.nan))
    with pytest.raises(ValueError, match="not orthonormal"):
        dk.check_block(None, (1 + 1e-7) * basis[:, :5])  # 2e-7 longer: beyond the tolerance the noise covers


def test_next_blocks_stay_orthonormal_once_the_krylov_space_holds_the_data():
    """Exact products (no noise) of rank-6 data, blocks of 4: after two blocks the Krylov space holds the data's
    range, each product lies in the span already multiplied, and the next block's directions come from round-off.
    They must still be orthonormal and orthogonal to every block before (to 1e-12), or every client would refuse
    them (mutation testing: the projection of the singular vectors)."""
    rng = np.random.default_rng(11)
    d, p = 40, 4
    X = rng.standard_normal((d, 6))
    C = X @ X.T
    Q = dk.initial_block(d, p, rng)
    basis = Q
    for _ in range(5):
        Q = dk.next_block(basis, C @ Q, p)
        assert dk.check_block(basis, Q, tolerance=1e-12) <= 1e-12
        basis = np.hstack([basis, Q])


def test_next_block_allocates_nothing_of_size_d_by_d():
    """At d = 4,000 the next block (p = 4 after 8 directions) takes memory of the order of ``d (m + p)``, not of a
    ``d x d`` matrix (128 MB): no ``d x d`` anywhere, as a run at genomic width needs (mutation testing: the thin
    SVD)."""
    import tracemalloc

    rng = np.random.default_rng(12)
    d, m, p = 4000, 8, 4
    basis = orth(rng.standard_normal((d, m)))
    Y = rng.standard_normal((d, p))
    tracemalloc.start()
    try:
        Q = dk.next_block(basis, Y, p)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert Q.shape == (d, p)
    assert peak < 20 * d * (m + p) * 8  # 7.7 MB; d x d is 128 MB


def test_the_block_tolerance_is_inclusive():
    """``check_block`` refuses only above its tolerance: exactly orthonormal blocks (``B^T B - I`` exactly 0) pass
    even a tolerance of 0 (mutation testing: ``<=``, not ``<``)."""
    E = np.eye(6)
    assert dk.check_block(None, E[:, :3], tolerance=0.0) == 0.0
    assert dk.check_block(E[:, :3], E[:, 3:], tolerance=0.0) == 0.0
    with pytest.raises(ValueError, match="not orthonormal"):
        dk.check_block(E[:, :3], E[:, 2:4], tolerance=0.0)


def test_rayleigh_ritz_of_exact_products_on_an_invariant_subspace_gives_the_eigenpairs():
    rng = np.random.default_rng(4)
    d, k = 12, 3
    V = orth(rng.standard_normal((d, d)))
    lam = np.linspace(10, 1, d)
    C = V @ np.diag(lam) @ V.T
    basis = orth(np.hstack([V[:, :k], rng.standard_normal((d, 2))]))
    Z, values = dk.rayleigh_ritz(basis, C @ basis, k)
    assert subspace_distance(Z, V[:, :k]) < 1e-10
    np.testing.assert_allclose(values, lam[:k], rtol=1e-10)


# -- a run --------------------------------------------------------------------------------------------------------
def test_a_private_centred_run_is_within_1_5x_of_the_central_limit(tmp_path):
    """4 owners with their own means (d = 40, 8,000 unit rows), epsilon = 1, delta = 1e-6, PLD, defaults (T = 4
    products of 10 columns), in-process with the clients' noise summed in the clear: the model is within 1.5x of
    the central Analyze Gauss mechanism's median over 5 noise draws (dp-power centred: about 4x), the model
    records the one release, and every client refuses a fifth block (the Krylov space is full)."""
    from simulations.engines.local import run_local
    from simulations.experiments.private_pca.central import central_analyze_gauss
    from simulations.experiments.private_pca.owners import centred_pca, owner_rows, write_folder

    blocks = owner_rows(seed=0)
    U = centred_pca(blocks, 3)[1]
    cfg = fused_run_config({"strategy": "dp-krylov", "num-clients": 4, "rank": 3, "row-normalize": True,
                            "center": True, "epsilon": 1.0, "delta": 1e-6, "dp-calibration": "pld",
                            "dp-channel": "plaintext", "num-server-rounds": 4, "iteration-rank": 0, "seed": 0,
                            "dataset": str(write_folder(blocks, tmp_path / "owners"))})
    strategy = run_local(cfg)
    assert strategy.failure is None
    error = subspace_distance(strategy.model["components"].T, U)
    X = np.vstack(blocks)
    central = np.median([subspace_distance(central_analyze_gauss(X, 3, 1.0, 1e-6, np.random.default_rng([0, 9, r])),
                                           U) for r in range(5)])
    assert error <= 1.5 * central
    # every row is the round's Rayleigh-Ritz estimate (not the block sent next, which is orthogonal to it)
    assert strategy.records[-1]["estimate_change_first_k"] < 0.2
    privacy = strategy.model["privacy"]
    assert privacy["epsilon"] <= 1.0 and privacy["releases"][0]["products"] == 4
    assert privacy["releases"][0]["sensitivity"] == pytest.approx(ag.joint_sensitivity(A), rel=1e-8)


def test_a_client_uploads_each_direction_once_and_refuses_a_block_it_already_multiplied(tmp_path):
    """Through the client itself: the first block's upload carries the weighted row sum with the same noise, a
    block orthogonal to the first is answered, and the first block again (or one overlapping it) is refused with
    nothing uploaded: a server cannot average two noisy answers about the same direction."""
    from flwr.common import Context, RecordDict

    from client_app.data import NodeData
    from client_app.dp_krylov_client import DPKrylovClient

    rng = np.random.default_rng(5)
    X = rng.standard_normal((50, 8))
    np.save(tmp_path / "rows.npy", X)
    cfg = validate_run_config(fused_run_config({"strategy": "dp-krylov", "num-clients": 2, "rank": 2,
                                                "iteration-rank": 3, "row-normalize": True, "center": True,
                                                "epsilon": 1.0, "delta": 1e-6, "dp-calibration": "pld",
                                                "dp-channel": "plaintext", "dataset": "nodes", "dimension": 0}))
    data = NodeData(cfg, {"partition-id": 0, "data-path": str(tmp_path / "rows.npy")})
    context = Context(run_id=1, node_id=1, node_config={}, state=RecordDict(), run_config={})
    B = orth(rng.standard_normal((8, 8)))
    client = DPKrylovClient(data, cfg, context)
    (Y,), _, _ = client.fit([B[:, :3]], {"round": 1})
    assert Y.shape == (8, 4)  # A_i Q_0 and a times the row sum, both noisy
    Xn = X / np.linalg.norm(X, axis=1, keepdims=True)
    nu = dk.client_noise_std("plaintext", 2, client.releases, True)
    exact = np.hstack([Xn.T @ (Xn @ B[:, :3]), A * Xn.sum(axis=0)[:, None]])
    assert 0.5 * nu < np.std(Y - exact) < 2.0 * nu
    client = DPKrylovClient(data, cfg, context)  # a new message: a new client object, the same node state
    (Y2,), _, _ = client.fit([B[:, 3:6]], {"round": 2})
    assert Y2.shape == (8, 3)
    for again in (B[:, :3], B[:, 2:5]):
        with pytest.raises(ValueError, match="not orthonormal"):
            DPKrylovClient(data, cfg, context).fit([again], {"round": 3})


@pytest.mark.slow
def test_through_secagg_the_run_gives_the_plaintext_sum_model(tmp_path):
    """dp-channel = "secagg" (the default): each client's share goes through Flower's SecAgg+ (in-process), and
    the model is the plaintext channel's to SecAgg+'s quantisation (the same seeded noise shares, summed)."""
    from simulations.engines.local import run_local
    from simulations.experiments.private_pca.owners import owner_rows, write_folder

    blocks = owner_rows(num_owners=2, num_rows=400, dimension=12, seed=1)
    base = {"strategy": "dp-krylov", "num-clients": 2, "rank": 2, "iteration-rank": 3, "num-server-rounds": 3,
            "row-normalize": True, "center": True, "epsilon": 4.0, "delta": 1e-6, "seed": 3,
            "dataset": str(write_folder(blocks, tmp_path / "owners"))}
    models = {}
    for channel in ("secagg", "plaintext"):
        strategy = run_local(fused_run_config({**base, "dp-channel": channel}))
        assert strategy.failure is None and strategy.secure == (channel == "secagg")
        models[channel] = strategy.model
    assert subspace_distance(models["secagg"]["components"].T, models["plaintext"]["components"].T) < 1e-3
    np.testing.assert_allclose(models["secagg"]["mean"], models["plaintext"]["mean"], atol=1e-4)
