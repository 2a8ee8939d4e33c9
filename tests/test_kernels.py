"""Linear-algebra kernels, schedules and privacy calibration against hand-computed values."""

import math

import numpy as np
import pytest
import scipy.linalg
from scipy.stats import ortho_group

from fl_strategies.kernels.linalg import orth, procrustes, subspace_distance, tall_norm2, top_eigenvectors
from fl_strategies.privacy.fedpower_dp import achieved_epsilon, noise_multiplier, noise_std, sensitivity
from fl_strategies.settings.schedule import round_lengths
from fl_strategies.kernels.power import local_power_iterations


def test_orth_is_orthonormal_with_positive_diagonal_and_unique():
    rng = np.random.default_rng(0)
    Y = rng.standard_normal((30, 5))
    Q = orth(Y)
    np.testing.assert_allclose(Q.T @ Q, np.eye(5), atol=1e-14)
    R = Q.T @ Y
    assert np.all(np.diag(R) > 0)
    np.testing.assert_allclose(np.triu(R), R, atol=1e-12)
    # the same span with columns mixed by an upper-triangular positive matrix gives the same Q
    T = np.triu(rng.uniform(0.5, 1.5, (5, 5)))
    np.testing.assert_allclose(orth(Y @ T), Q, atol=1e-12)


def test_orth_of_a_genomic_width_block_is_numpy_s_to_round_off():
    """From :data:`SCIPY_QR_SIZE` entries ``orth`` factorises with scipy (faster on a tall block): the same basis
    and signs as numpy's QR, to round-off; below it numpy's own."""
    from fl_strategies.kernels import linalg

    rng = np.random.default_rng(4)
    for shape in [(linalg.SCIPY_QR_SIZE // 8, 8), (50_000, 3)]:
        Y = rng.standard_normal(shape)
        Q = orth(Y)
        assert (Y.size >= linalg.SCIPY_QR_SIZE) == (shape[1] == 8)
        reference, R = np.linalg.qr(Y)
        np.testing.assert_allclose(Q, reference * np.where(np.diag(R) < 0, -1.0, 1.0), atol=1e-13)
        np.testing.assert_allclose(Q.T @ Q, np.eye(shape[1]), atol=1e-13)


def test_procrustes_recovers_a_rotation():
    rng = np.random.default_rng(1)
    Z = orth(rng.standard_normal((20, 4)))
    R = ortho_group.rvs(4, random_state=2)
    D = procrustes(Z @ R, Z)  # argmin ||(Z R) D - Z||  is  D = R^T
    np.testing.assert_allclose(D, R.T, atol=1e-12)
    np.testing.assert_allclose(Z @ R @ D, Z, atol=1e-12)


def test_subspace_distance_known_angle_and_r_greater_than_k():
    d = 10
    e = np.eye(d)
    theta = 0.3
    U = e[:, :2]
    Z = np.column_stack([e[:, 0], math.cos(theta) * e[:, 1] + math.sin(theta) * e[:, 2]])
    assert subspace_distance(Z, U) == pytest.approx(math.sin(theta), abs=1e-15)
    # r > k: a basis that contains U_k is at distance 0 (the projection distance would be 1)
    Z3 = np.column_stack([e[:, 1], e[:, 5], e[:, 0]])
    assert subspace_distance(Z3, U) < 1e-15
    # resolution down to machine precision, not sqrt(eps)
    tiny = 1e-12
    Zt = np.column_stack([e[:, 0], math.cos(tiny) * e[:, 1] + math.sin(tiny) * e[:, 2]])
    assert subspace_distance(Zt, U) == pytest.approx(tiny, rel=1e-3)


@pytest.mark.parametrize("scale", [1.0, 1e-9, 1e-14, 1e-200, 1e200])
def test_tall_norm2_is_the_largest_singular_value_to_round_off(scale):
    rng = np.random.default_rng(7)
    R = rng.standard_normal((5000, 6)) @ np.diag([3.0, 1.0, 0.5, 0.2, 1e-3, 0.0]) * scale
    assert tall_norm2(R) == pytest.approx(np.linalg.svd(R, compute_uv=False)[0], rel=1e-14)
    assert tall_norm2(np.zeros((5, 2))) == 0.0 and tall_norm2(np.zeros((0, 3))) == 0.0


def test_top_eigenvectors_match_numpy():
    rng = np.random.default_rng(3)
    X = rng.standard_normal((200, 12))
    A = X.T @ X
    vals, vecs = top_eigenvectors(A, 3)
    w, V = np.linalg.eigh(A)
    np.testing.assert_allclose(vals, w[::-1][:3], rtol=1e-12)
    assert subspace_distance(vecs, V[:, ::-1][:, :3]) < 1e-12


@pytest.mark.parametrize("p, schedule, T, expected", [
    (1, "fixed", 10, [1] * 10),
    (2, "fixed", 10, [2] * 5),
    (2, "decayed", 10, [2] + [1] * 8),        # sync times {2,3,...,10}: 9 communications
    (4, "fixed", 10, [4, 4, 2]),               # {4, 8} plus T = 10 forced in (T is always a sync time)
    (4, "decayed", 10, [4, 3, 2, 1]),          # {4, 7, 9, 10}
])
def test_schedules_match_the_spec_examples(p, schedule, T, expected):
    assert round_lengths(p, schedule, total_iterations=T) == expected


def test_schedule_from_number_of_rounds():
    assert round_lengths(3, "decayed", num_rounds=5) == [3, 2, 1, 1, 1]
    assert round_lengths(3, "fixed", num_rounds=2) == [3, 3]


@pytest.mark.parametrize("eps, sigma_g, achieved, nu_model1, nu_model2", [
    (0.5, 54.289, 0.2517, 2.428e-3, 0.1536),
    (1.0, 27.145, 0.5068, 1.214e-3, 0.0768),
    (10.0, 2.7145, 5.679, 1.214e-4, 7.678e-3),
])
def test_theorem6_calibration_matches_the_spec_table(eps, sigma_g, achieved, nu_model1, nu_model2):
    """T = 10, delta = 1e-4; Model I: r = 5, s = n/m = 1e5; Model II: r = 2, s = 1000."""
    assert noise_multiplier(eps, 1e-4, 10) == pytest.approx(sigma_g, rel=1e-4)
    assert achieved_epsilon(noise_multiplier(eps, 1e-4, 10), 10, 1e-4) == pytest.approx(achieved, rel=1e-3)
    assert achieved_epsilon(noise_multiplier(eps, 1e-4, 10), 10, 1e-4) <= eps
    assert noise_std(eps, 1e-4, 10, 5, 100_000) == pytest.approx(nu_model1, rel=1e-3)
    assert noise_std(eps, 1e-4, 10, 2, 1000) == pytest.approx(nu_model2, rel=1e-3)


def test_hand_computed_noise_std():
    # eps = 2, delta = 0.01, T = 4, r = 1, s = 50:
    # sqrt(T/eps) = 1.41421; 2 sqrt(2 T log 100)/eps = sqrt(8 * 4.60517) = 6.06971 -> sigma_g = 6.06971
    # nu = 2 * 1 / 50 * 6.06971 = 0.242788
    assert noise_std(2.0, 0.01, 4, 1, 50) == pytest.approx(0.2427885, rel=1e-6)
    # the other branch wins for large eps: eps = 100, T = 100 -> sqrt(1) = 1 > 2 sqrt(200 log 100)/100 = 0.6070
    assert noise_multiplier(100.0, 0.01, 100) == pytest.approx(1.0)


def test_sensitivity_bound_holds_for_a_one_row_swap():
    """||A_i z - A_i' z|| <= 2 / s for unit rows and unit z (spec check 2)."""
    rng = np.random.default_rng(4)
    s, d = 40, 8
    worst = 0.0
    for _ in range(300):
        M = rng.standard_normal((s, d))
        M /= np.linalg.norm(M, axis=1, keepdims=True)
        M2 = M.copy()
        M2[rng.integers(s)] = -M[rng.integers(s)]
        z = rng.standard_normal(d)
        z /= np.linalg.norm(z)
        worst = max(worst, np.linalg.norm((M.T @ M - M2.T @ M2) @ z / s))
    assert worst <= sensitivity(1, s) + 1e-15


def test_local_noise_has_the_requested_std_and_is_added_every_step():
    d, r, nu = 60, 5, 0.37
    Z = orth(np.random.default_rng(5).standard_normal((d, r)))
    Y, Z_prev = local_power_iterations(np.zeros((d, d)), Z, 1, nu, np.random.default_rng(6))
    assert Y.std() == pytest.approx(nu, rel=0.05)
    assert Z_prev is Z
    # with A = I, after 3 steps Y = Z_prev + noise, and Z_prev = orth(previous Y)
    Y3, Z3 = local_power_iterations(np.eye(d), Z, 3, nu, np.random.default_rng(7))
    assert (Y3 - Z3).std() == pytest.approx(nu, rel=0.05)
    assert subspace_distance(Z3, Z) > 0.1  # the noise of earlier steps moved the basis


def test_power_iterations_without_noise_are_orthogonal_iteration():
    rng = np.random.default_rng(8)
    X = rng.standard_normal((100, 15))
    A = X.T @ X / 100
    Z = orth(rng.standard_normal((15, 3)))
    Y, Z_prev = local_power_iterations(A, Z, 4, 0.0, None)
    expected = Z
    for _ in range(3):
        expected = orth(A @ expected)
    np.testing.assert_allclose(Z_prev, expected, atol=1e-13)
    np.testing.assert_allclose(Y, A @ expected, atol=1e-13)
    assert scipy.linalg.norm(Y) > 0
