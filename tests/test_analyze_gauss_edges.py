"""Edges of the private covariance's calibration (fl_strategies/privacy/analyze_gauss.py) that the mutation run showed
untested: the row bound's default, the epsilon a calibration reports as spent, and the target's range."""

from __future__ import annotations

import math
import sys

import numpy as np
import pytest

from fl_strategies.privacy import analyze_gauss as ag
from fl_strategies.privacy import zcdp

SHARES = {"gram": (0.9, 1), "row-sum": (0.1, 1)}  # two releases sharing one target


def test_the_row_bound_is_the_clip_norm_when_set_else_one():
    assert ag.row_bound(0.0) == 1.0
    assert ag.row_bound(2.5) == 2.5


@pytest.mark.parametrize("calibration", ["paper", "tight"])
def test_the_spent_epsilon_counts_every_release_made_and_only_those(calibration):
    """The calibrated composition spends at most the target (``tight`` converts zCDP exactly, so all of it),
    one release alone spends less but more than nothing, a third release more, and no release nothing."""
    epsilon = 0.7
    releases = ag.calibrate(epsilon, 1e-5, calibration, SHARES)
    assert 0.0 < releases.epsilon <= epsilon * (1 + 1e-12)
    if calibration == "tight":
        assert releases.epsilon == pytest.approx(epsilon, rel=1e-9)
    assert releases.spent({"gram": 1, "row-sum": 1}) == releases.epsilon
    alone = releases.spent({"gram": 1, "row-sum": 0})
    assert 0.0 < alone < releases.epsilon
    assert releases.spent({"gram": 2, "row-sum": 1}) > releases.epsilon
    assert releases.spent({"gram": 0, "row-sum": 0}) == releases.spent({}) == 0.0
    assert all(f"{name}: sigma=" in repr(releases) for name in SHARES)


@pytest.mark.parametrize("epsilon", [0.0, -1.0, float("inf"), float("nan")])
def test_a_target_epsilon_that_is_not_finite_and_positive_is_refused(epsilon):
    with pytest.raises(ValueError, match="epsilon must be a finite number > 0"):
        ag.calibrate(epsilon, 1e-5, "tight", SHARES)


@pytest.mark.parametrize("delta", [0.0, 1.0, 1.5])
def test_a_delta_outside_the_open_unit_interval_is_refused(delta):
    with pytest.raises(ValueError, match=r"delta must be in \(0, 1\)"):
        ag.calibrate(1.0, delta, "tight", SHARES)


@pytest.mark.parametrize("shares", [{"gram": (1.0, 1), "row-sum": (0.0, 1)}, {"gram": (1.5, 1), "row-sum": (-0.5, 1)},
                                    {"gram": (0.8, 1), "row-sum": (0.1, 1)}], ids=["zero", "negative", "short"])
def test_shares_that_are_not_positive_or_do_not_sum_to_one_are_refused(shares):
    with pytest.raises(ValueError, match="the privacy shares must be > 0 and sum to 1"):
        ag.calibrate(1.0, 1e-5, "tight", shares)


@pytest.mark.parametrize("calibration", ["paper", "tight"])
def test_paper_and_tight_scale_is_their_own_one_gaussian_multiplier(calibration):
    """A composition of Gaussians is one Gaussian: its multiplier is the calibration's for a single release."""
    releases = ag.calibrate(0.7, 1e-5, calibration, SHARES)
    assert releases.scale == zcdp.noise_multiplier(0.7, 1e-5, 1, calibration)


@pytest.mark.parametrize("epsilon", [1e-300, 1e308], ids=["noise-overflows", "noise-underflows"])
def test_a_target_whose_noise_multiplier_is_not_a_positive_finite_number_is_refused(epsilon):
    """tight's one-Gaussian multiplier for these targets is inf and 0: no noise can be added with it."""
    with pytest.raises(ValueError, match="cannot be met with the tight calibration: its noise multiplier is"):
        ag.calibrate(epsilon, 1e-5, "tight", SHARES)


@pytest.mark.parametrize("epsilon", [3.0, 7.0, 20.0, 55.0])
def test_a_large_target_gets_a_multiplier_below_one_and_spends_the_target_to_round_off(epsilon):
    """tight converts zCDP exactly: the spent epsilon is the target up to round-off on either side (1e-12), and a
    large target's multiplier is below 1."""
    releases = ag.calibrate(epsilon, 1e-5, "tight", SHARES)
    assert releases.epsilon == pytest.approx(epsilon, rel=1e-12)
    if epsilon >= 20.0:
        assert 0.0 < releases.scale < 1.0


@pytest.mark.parametrize("epsilon", [50.0, 1e300])
def test_a_calibration_that_would_spend_more_than_the_target_is_refused(epsilon):
    """The paper's bound spends ``eps^2 / (8 ln(1/delta)) + eps / sqrt(2)``: more than ``eps`` once ``eps`` exceeds
    ``(8 - 4 sqrt(2)) ln(1/delta)`` (27 at delta = 1e-5), 1.25 times it at 50 (and overflows at 1e300)."""
    spent = epsilon * epsilon / (8 * math.log(1e5)) + epsilon / math.sqrt(2)
    with pytest.raises(ValueError, match=rf"cannot be met with the paper calibration: it would spend epsilon' = "
                                         rf"{spent:.6g};"):
        ag.calibrate(epsilon, 1e-5, "paper", SHARES)


@pytest.mark.parametrize("center", [True, False])
def test_the_covariance_release_is_one_gaussian_of_the_whole_target(center):
    """The Gram matrix and (with centring) the row sum are one release: its multiplier is the calibration's for a
    single Gaussian, and it spends the whole target."""
    releases = ag.covariance_releases(0.9, 1e-6, "tight", center)
    one = zcdp.noise_multiplier(0.9, 1e-6, 1, "tight")
    name = "gram-and-row-sum" if center else "gram"
    assert releases.counts == {name: 1} and ag.release_name(center) == name
    assert releases.calibration == "tight" and releases.delta == 1e-6 and releases.target == 0.9
    assert releases.multipliers == {name: pytest.approx(one, rel=1e-12)} and releases.scale == pytest.approx(one)
    assert releases.epsilon == pytest.approx(0.9, rel=1e-12)


@pytest.mark.parametrize("center", [True, False])
def test_the_covariance_from_the_sums_is_numpys_of_the_rows(center):
    """Centred: ``np.cov`` with divisor ``n`` and the rows' mean; uncentred: the second moment ``X^T X / n`` and a
    zero mean."""
    X = np.random.default_rng(3).standard_normal((40, 5)) + np.arange(5)
    C, mu = ag.covariance_from_sums(X.T @ X, X.sum(axis=0) if center else None, len(X))
    if center:
        np.testing.assert_allclose(C, np.cov(X, rowvar=False, bias=True), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(mu, X.mean(axis=0), rtol=1e-12)
    else:
        np.testing.assert_allclose(C, X.T @ X / len(X), rtol=1e-12)
        np.testing.assert_array_equal(mu, np.zeros(5))


@pytest.mark.parametrize("num_clients", [1, 4, 9])
@pytest.mark.parametrize("center", [False, True])
def test_the_clients_noise_stds_sum_to_the_central_std_of_the_release(num_clients, center):
    """Each of ``m`` clients adds ``N(0, nu^2)`` to every entry of its upload, so the sum carries ``sqrt(m) nu``:
    the joint sensitivity (``sqrt(2) + a^2 / sqrt(2)``, ``sqrt(2)`` without centring) times the multiplier, in
    units of the row bound; without ``epsilon`` no noise at all."""
    releases = ag.covariance_releases(0.8, 1e-5, "tight", center)
    a = ag.MEAN_WEIGHT if center else 0.0
    D = math.sqrt(2.0) + a * a / math.sqrt(2.0)
    assert ag.noise_std(num_clients, releases, center) * math.sqrt(num_clients) == pytest.approx(
        D * releases.scale, rel=1e-12)
    assert ag.noise_std(num_clients, None, center) == 0.0
    # in the data's units: c^2 nu on the Gram diagonal, c^2 nu / sqrt(2) off it, c nu / a on the row sum
    stds = ag.noise_record(0.5, releases, center)
    nu = D * releases.scale
    assert stds["gram-diagonal"] == pytest.approx(0.25 * nu) and stds["gram-off-diagonal"] == pytest.approx(
        0.25 * nu / math.sqrt(2.0))
    assert stds.get("row-sum") == (pytest.approx(0.5 * nu / a) if center else None)


def test_svec_is_an_isometry_and_the_upload_is_in_units_of_the_row_bound():
    rng = np.random.default_rng(4)
    A = rng.standard_normal((5, 5))
    G = A + A.T
    v = ag.pack_svec(G)
    assert v.shape == (ag.upper_size(5),) == (15,)
    np.testing.assert_allclose(np.linalg.norm(v), np.linalg.norm(G), rtol=1e-14)
    np.testing.assert_allclose(ag.unpack_svec(v, 5), G, rtol=1e-14)
    X = rng.standard_normal((30, 5))
    for c in (1e-12, 1.0, 1e6):
        up = ag.upload_vector((c * X).T @ (c * X), (c * X).sum(axis=0), c)
        np.testing.assert_allclose(up, ag.upload_vector(X.T @ X, X.sum(axis=0), 1.0), rtol=1e-12)
        C, mu = ag.covariance_from_upload(up, 5, 30, center=True)
        np.testing.assert_allclose(C, np.cov(X, rowvar=False, bias=True), rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(mu, X.mean(axis=0), rtol=1e-12)
    assert np.abs(ag.upload_vector(np.outer(X[0], X[0]), X[0], np.linalg.norm(X[0]))).max() <= ag.upload_entry_bound(
        True)


@pytest.mark.parametrize("epsilon", [None, 1.0, 1e-3])
@pytest.mark.parametrize("center", [False, True])
def test_the_row_bound_range_keeps_the_gram_scale_its_sensitivity_and_noise_normal(epsilon, center):
    """At both ends of the accepted range ``c^2``, the sensitivity and the noise std in the data's units are normal
    float64 numbers with room for 2^53 rows; just outside, one of them is not, and the bound is refused."""
    releases = ag.covariance_releases(epsilon, 1e-6, "tight", center) if epsilon else None
    lo, hi = ag.row_bound_range(releases, center)
    assert 1e-150 < lo < 1e-140 and 1e140 < hi < 1e150
    for c in (lo * (1 + 1e-9), 1.0, hi * (1 - 1e-9)):
        ag.check_row_bound(c, releases, center)
        values = [c * c, c * c * ag.covariance_sensitivity(center), c]
        if releases is not None:
            values += list(ag.noise_record(c, releases, center).values())
        assert all(sys.float_info.min <= v and v * 2.0 ** 53 < sys.float_info.max for v in values), (c, values)
    for c in (lo * 0.99, hi * 1.01, 1e-200, 1e200, float("inf"), float("nan"), 0.0):
        with pytest.raises(ValueError, match=r"is outside \[.*\]: the Gram matrix scales as c\^2"):
            ag.check_row_bound(c, releases, center)
