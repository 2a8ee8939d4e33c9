"""Edges of the private covariance's calibration (fl_strategies/privacy/analyze_gauss.py) that the mutation run showed
untested: the row bound's default, the epsilon a calibration reports as spent, and the target's range."""

from __future__ import annotations

import pytest

from fl_strategies.privacy import analyze_gauss as ag
from fl_strategies.privacy import zcdp

SHARES = {"gram": (1.0 - ag.MEAN_SHARE, 1), "row-sum": (ag.MEAN_SHARE, 1)}


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
