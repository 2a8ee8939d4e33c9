"""Edges of the numerical accountants (fl_strategies/privacy/accounting.py) that the mutation run showed
untested: the epsilon of no release, of no noise and of infinite noise, the PLD grid widened for tiny noise, the
bisections' tolerance and the caches. The references are Google's dp-accounting called here and a root of the
exact Gaussian curve found by scipy."""

from __future__ import annotations

import math

import pytest

from fl_strategies.privacy import accounting

dpa = pytest.importorskip("dp_accounting")  # the test extra installs it

INTERVAL = 1e-3  # accounting.PLD_INTERVAL, written out: the test computes independently
TOLERANCE = 1e-8  # accounting.RELATIVE_TOLERANCE, the documented relative width of the bisections
KINDS = ["pld", "rdp"]


def pld_epsilon(sigma: float, releases: int, delta: float, interval: float) -> float:
    acc = dpa.pld.PLDAccountant(value_discretization_interval=interval)
    acc.compose(dpa.SelfComposedDpEvent(dpa.GaussianDpEvent(sigma), releases))
    return acc.get_epsilon(delta)


@pytest.mark.parametrize("kind", KINDS)
def test_no_release_spends_nothing_no_noise_everything_and_infinite_noise_nothing(kind):
    for sigma in (1.0, 0.0, -1.0):
        assert accounting.epsilon(kind, sigma, 0, 1e-5) == 0.0
        assert accounting.epsilon(kind, sigma, -2, 1e-5) == 0.0
    assert accounting.epsilon(kind, 0.0, 3, 1e-5) == math.inf
    assert accounting.epsilon(kind, -0.5, 3, 1e-5) == math.inf
    assert accounting.epsilon(kind, math.inf, 3, 1e-5) == 0.0
    assert 0.0 < accounting.epsilon(kind, 2.0, 3, 1e-5) < math.inf


@pytest.mark.parametrize("sigma, releases", [(0.05, 1), (0.5, 100), (1.0, 4)],
                         ids=["one-release-below-0.1", "per-sqrt-release-below-0.1", "above-0.1"])
def test_the_pld_grid_is_widened_by_the_square_of_how_far_sigma_over_sqrt_t_is_below_0_1(sigma, releases):
    """Below sigma / sqrt(T) = 0.1 the discretisation interval grows as (0.1 sqrt(T) / sigma)^2, so that the
    distribution stays small; the answer is dp-accounting's on that grid and still an upper bound on the exact
    epsilon (Balle & Wang's curve gives at most delta there)."""
    interval = INTERVAL * max(1.0, (0.1 / (sigma / math.sqrt(releases))) ** 2)
    eps = accounting.epsilon("pld", sigma, releases, 1e-5)
    assert eps == pld_epsilon(sigma, releases, 1e-5, interval)
    assert accounting.gaussian_delta(eps, math.sqrt(releases) / sigma) <= 1e-5


TARGETS = [(1.0, 1e-5, 10), (0.3, 1e-6, 1), (8.0, 1e-8, 30)]


@pytest.mark.parametrize("epsilon, delta, releases", TARGETS)
def test_the_exact_noise_multiplier_is_the_root_of_the_gaussian_curve_on_its_safe_side_to_1e_8(epsilon, delta,
                                                                                              releases):
    """``sqrt(T) / mu`` with ``mu`` the root of ``gaussian_delta(epsilon, mu) = delta`` (scipy's brentq, to 1e-15):
    never less noise than the root, and at most the bisection's relative width more."""
    from scipy.optimize import brentq

    log_mu = brentq(lambda x: accounting.gaussian_delta(epsilon, math.exp(x)) / delta - 1.0, -10.0, 5.0,
                    xtol=1e-15, rtol=1e-15)
    root = math.sqrt(releases) / math.exp(log_mu)
    sigma = accounting.exact_noise_multiplier(epsilon, delta, releases)
    assert root * (1 - 1e-14) <= sigma <= root * (1 + TOLERANCE)


def test_the_answers_are_remembered_for_a_client_rebuilt_at_every_message(monkeypatch):
    """The same question twice is answered once (no accountant built, no bisection run the second time): a
    client is rebuilt at every message and asks again."""
    calls, epsilon = [], accounting.epsilon
    for name in ("make_accountant", "gaussian_delta", "epsilon"):
        function = getattr(accounting, name)
        monkeypatch.setattr(accounting, name, lambda *a, f=function: calls.append(a) or f(*a))
    questions = [lambda: epsilon("pld", 1.2345, 7, 1e-5),
                 lambda: accounting.composed_epsilon("pld", ((1.2345, 2), (2.345, 1)), 1e-5),
                 lambda: accounting.exact_noise_multiplier(0.8765, 1e-5, 3),
                 lambda: accounting.noise_multiplier("rdp", 0.8765, 1e-5, 3, 5.0)]
    for ask in questions:
        first = ask()
        asked = len(calls)
        assert asked > 0 and ask() == first and len(calls) == asked


@pytest.mark.parametrize("kind", KINDS)
def test_a_composition_counts_only_releases_made_and_no_noise_spends_everything(kind):
    alone = accounting.epsilon(kind, 1.5, 2, 1e-5)
    assert accounting.composed_epsilon(kind, (), 1e-5) == 0.0
    assert accounting.composed_epsilon(kind, ((1.5, 0), (0.0, 0), (-1.0, -1)), 1e-5) == 0.0
    assert accounting.composed_epsilon(kind, ((1.5, 2), (0.7, 0)), 1e-5) == alone
    # the same releases composed one by one (the PLD discretises each before composing: 1e-7 apart)
    assert accounting.composed_epsilon(kind, ((1.5, 1), (1.5, 1)), 1e-5) == pytest.approx(alone, rel=1e-6)
    assert accounting.composed_epsilon(kind, ((1.5, 1), (1.5, 2)), 1e-5) == pytest.approx(
        accounting.epsilon(kind, 1.5, 3, 1e-5), rel=1e-6)
    assert accounting.composed_epsilon(kind, ((1.5, 2), (0.0, 1)), 1e-5) == math.inf
    assert accounting.composed_epsilon(kind, ((-2.0, 1),), 1e-5) == math.inf


def test_a_composition_of_tiny_noises_is_accounted_on_the_grid_of_the_one_gaussian_it_composes_to():
    """Releases of multipliers ``s_j`` compose to one Gaussian of multiplier ``1 / sqrt(sum c_j / s_j^2)``; below 0.1
    the PLD grid widens for that one, and the answer is dp-accounting's composition on that grid."""
    releases = ((0.05, 1), (0.5, 2))
    effective = 1.0 / math.sqrt(sum(c / s**2 for s, c in releases))
    acc = dpa.pld.PLDAccountant(value_discretization_interval=INTERVAL * (0.1 / effective) ** 2)
    for s, c in releases:
        acc.compose(dpa.SelfComposedDpEvent(dpa.GaussianDpEvent(s), c))
    eps = accounting.composed_epsilon("pld", releases, 1e-5)
    assert eps == acc.get_epsilon(1e-5)
    assert accounting.gaussian_delta(eps, 1.0 / effective) <= 1e-5


@pytest.mark.parametrize("kind", KINDS)
def test_the_composed_scale_is_the_smallest_the_accountant_certifies_and_one_release_kind_is_noise_multiplier(kind):
    """Releases with multipliers ``t w_j``: at ``t`` the composition meets the target, at ``t (1 - 1e-6)`` it does
    not; with one kind of release the problem is :func:`noise_multiplier`'s, and so is the answer (to the
    bisections' tolerance)."""
    weights = ((1.0, 2), (3.0, 1))
    t = accounting.composed_scale(kind, 1.0, 1e-5, weights, 1.0)
    assert accounting.composed_epsilon(kind, tuple((t * w, c) for w, c in weights), 1e-5) <= 1.0
    assert accounting.composed_epsilon(kind, tuple((t * (1 - 1e-6) * w, c) for w, c in weights), 1e-5) > 1.0
    # a start far above the answer is halved down to it
    assert accounting.composed_scale(kind, 1.0, 1e-5, weights, 100.0) == pytest.approx(t, rel=3 * TOLERANCE)
    one = accounting.composed_scale(kind, 1.0, 1e-5, ((1.0, 5),), 2.0)
    assert one == pytest.approx(accounting.noise_multiplier(kind, 1.0, 1e-5, 5, 2.0), rel=3 * TOLERANCE)


def test_a_composed_scale_without_a_positive_finite_start_or_below_the_floor_is_refused():
    for start in (0.0, -1.0, math.inf, math.nan):
        with pytest.raises(ValueError, match="no positive finite noise multiplier"):
            accounting.composed_scale("rdp", 1.0, 1e-5, ((1.0, 1),), start)
    # epsilon 1e4 at one release needs a multiplier far below 0.1, where the guarantee means little
    with pytest.raises(ValueError, match="is too large for dp-calibration = \"pld\": it needs less noise than a "
                                         "multiplier of 0.1"):
        accounting.composed_scale("pld", 1e4, 1e-5, ((1.0, 1),), 1e-3)


def _bounded(function, calls: list, limit: int):
    """``function`` that records each call and raises once it has been called more than ``limit`` times."""

    def wrapped(*args):
        calls.append(args)
        if len(calls) > limit:
            raise RuntimeError(f"the search asked the accountant more than {limit} times")
        return function(*args)

    return wrapped


@pytest.mark.parametrize("start", [0.2, 0.8, 1.6], ids=["twice-the-floor", "eight-times", "sixteen-times"])
def test_a_target_met_at_the_floor_is_refused_from_any_start_above_it(monkeypatch, start):
    """epsilon 1e4 over one release is met at the floor multiplier 0.1; a start of 2^k times the floor halves
    down to the floor exactly, where the search must stop and refuse (each search asks the accountant a few
    dozen times; more than 200 questions means it does not end). Over T releases the floor is 0.1 sqrt(T)."""
    calls: list = []
    monkeypatch.setattr(accounting, "epsilon", _bounded(accounting.epsilon, calls, 200))
    monkeypatch.setattr(accounting, "composed_epsilon", _bounded(accounting.composed_epsilon, calls, 200))
    with pytest.raises(ValueError, match="is too large for dp-calibration = \"pld\": it needs less noise than a "
                                         "multiplier of 0.1"):
        accounting.composed_scale("pld", 1e4, 1e-5, ((1.0, 1),), start)
    with pytest.raises(ValueError, match="is too large for dp-calibration = \"pld\" over 1 releases: it needs "
                                         "less noise than sigma = 0.1 "):
        accounting.noise_multiplier("pld", 1e4, 1e-5, 1, start)
    with pytest.raises(ValueError, match="over 4 releases: it needs less noise than sigma = 0.2 "):
        accounting.noise_multiplier("pld", 1e4, 1e-5, 4, 2 * start)
    assert accounting.epsilon("pld", 0.1, 1, 1e-5) <= 1e4  # the floor itself meets the target


def direct_epsilon(kind: str, sigma: float, releases: int, delta: float) -> float:
    """dp-accounting itself, on the grid the module documents (sigma / sqrt(T) is at least 0.1 here)."""
    acc = dpa.pld.PLDAccountant(value_discretization_interval=INTERVAL) if kind == "pld" else dpa.rdp.RdpAccountant()
    acc.compose(dpa.SelfComposedDpEvent(dpa.GaussianDpEvent(sigma), releases))
    return acc.get_epsilon(delta)


@pytest.mark.parametrize("kind", KINDS)
def test_the_noise_multiplier_is_found_from_a_start_far_below_or_far_above_it(monkeypatch, kind):
    """The search doubles up from a start below the answer and halves down from one above it; either way the
    answer is the smallest multiplier dp-accounting certifies (1e-6 less is not certified), and the search ends."""
    calls: list = []
    monkeypatch.setattr(accounting, "epsilon", _bounded(accounting.epsilon, calls, 300))
    found = [accounting.noise_multiplier(kind, 0.9, 1e-5, 6, start) for start in (0.3, 300.0)]
    for sigma in found:
        assert sigma == pytest.approx(found[0], rel=3 * TOLERANCE)
        assert direct_epsilon(kind, sigma, 6, 1e-5) <= 0.9 < direct_epsilon(kind, sigma * (1 - 1e-6), 6, 1e-5)


def test_a_noise_multiplier_without_a_positive_finite_start_or_beyond_the_accountants_resolution_is_refused(
        monkeypatch):
    calls: list = []
    monkeypatch.setattr(accounting, "epsilon", _bounded(accounting.epsilon, calls, 200))
    for start in (0.0, -1.0, math.inf, math.nan):
        with pytest.raises(ValueError, match=r"is too small: even the zCDP noise multiplier over 3 releases is not a "
                                             r"positive finite number"):
            accounting.noise_multiplier("rdp", 1.0, 1e-5, 3, start)

    # RDP's orders cannot resolve epsilon 1e-9: it certifies only far more noise than the exact Gaussian needs,
    # and the refusal says which of the target's numbers to change for this accountant
    exact = accounting.exact_noise_multiplier(1e-9, 1e-5, 3)
    with pytest.raises(ValueError, match=r"beyond what the rdp accountant resolves over 3 releases: .* times the "
                                         r"exact Gaussian noise .*; use a larger epsilon or dp-calibration"):
        accounting.noise_multiplier("rdp", 1e-9, 1e-5, 3, exact)


def test_only_noise_the_pld_cannot_account_is_unmeasurable(monkeypatch):
    """dp-accounting's PLD overflows at a noise multiplier of 1e-4 per sqrt(release) (on the widened grid) and
    answers at 1e-3; above 0.1 per sqrt(release) the accountant is not asked. Without dp-accounting the epsilon_pld
    column is empty for that reason, and nothing is called unmeasurable."""
    with pytest.raises(OverflowError):
        pld_epsilon(1e-2, 10_000, 1e-5, INTERVAL * (0.1 / 1e-4) ** 2)
    for releases in (1, 4, 10_000):
        root = math.sqrt(releases)
        assert accounting.unmeasurable(1e-4 * root, releases, 1e-5)
        assert not accounting.unmeasurable(1e-3 * root, releases, 1e-5)
        assert not accounting.unmeasurable(0.1 * root, releases, 1e-5)
    monkeypatch.setattr(accounting, "available", lambda: False)
    assert not accounting.unmeasurable(1e-4, 1, 1e-5)


@pytest.mark.parametrize("kind", KINDS)
def test_one_kind_of_release_with_extreme_noise_composes_as_its_epsilon_without_an_exception(kind):
    """Infinite noise spends nothing; a multiplier of 1e200, whose square overflows, is beyond dp-accounting's
    arithmetic (nan, as :func:`epsilon` says): neither raises."""
    with pytest.raises(ArithmeticError):
        direct_epsilon(kind, 1e200, 1, 1e-5)
    assert accounting.composed_epsilon(kind, ((math.inf, 2),), 1e-5) == 0.0
    assert accounting.epsilon(kind, math.inf, 2, 1e-5) == 0.0
    assert accounting.composed_epsilon(kind, ((math.inf, 2), (4.0, 1)), 1e-5) == accounting.epsilon(kind, 4.0, 1, 1e-5)
    assert math.isnan(accounting.composed_epsilon(kind, ((1e200, 1),), 1e-5))
    assert math.isnan(accounting.epsilon(kind, 1e200, 1, 1e-5))
