"""Numerical privacy accountants for ``T`` Gaussian releases: Google's ``dp-accounting`` (PLD and RDP).

Both strategies with noise release, per client, ``T`` Gaussian mechanisms whose noise standard deviation is
``sigma`` times the L2 sensitivity of the release (FedPower: ``T`` local steps, ``sigma = sigma_g``, sensitivity
``2 sqrt(r) / s_i``; dp-power: ``L`` products, ``sigma`` the central multiplier, sensitivity ``Delta_l``). The
paper calibrations bound the privacy of that composition through zCDP (:mod:`fl_strategies.privacy.zcdp`); the
accountants here measure it more tightly:

* ``pld``: privacy loss distributions (``dp_accounting.pld.PLDAccountant``, pessimistic discretisation with
  value interval :data:`PLD_INTERVAL`): the composition's ``(epsilon, delta)`` curve up to that discretisation,
  always on the safe side;
* ``rdp``: Renyi DP (``dp_accounting.rdp.RdpAccountant``, its default orders and conversion).

:func:`noise_multiplier` finds the smallest ``sigma`` whose composition the accountant certifies at the target
``(epsilon, delta)``, by bisection on ``log sigma`` to a relative width of :data:`RELATIVE_TOLERANCE` (the
accountant's epsilon decreases with ``sigma``); :func:`epsilon` is the accountant's epsilon after ``steps``
releases. Both are cached (a client is rebuilt at every message).

Each calibration is checked against the exact answer: ``T`` Gaussian releases with multiplier ``sigma`` compose
to one Gaussian mechanism with ``mu = sqrt(T) / sigma`` (a Gaussian privacy loss), whose ``(epsilon, delta)``
curve is known in closed form (Balle & Wang 2018, Theorem 8; :func:`gaussian_delta`). Where an accountant's
noise exceeds the exact noise for the target by more than :data:`TRUST_FACTOR`, its answer is not a measurement
of the run but of its own numerical limits (PLD truncates tail mass near ``1e-15``, so a smaller ``delta`` is
met only by a huge ``sigma``; RDP's fixed orders cannot resolve a tiny ``epsilon`` and report ``0``), and the
target is refused (:func:`noise_multiplier`).

``dp-accounting`` is an optional dependency (``pip install "fedspectral[privacy]"``; it pins ``attrs < 24`` and
``dm-tree``): without it ``dp-calibration = "pld"`` / ``"rdp"`` is refused with a message naming the extra, the
paper calibrations work as before and the ``epsilon_pld`` column is empty.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Callable

__all__ = ["ACCOUNTANTS", "EXTRA", "PLD_INTERVAL", "MIN_EFFECTIVE_SIGMA", "TRUST_FACTOR", "available",
           "make_accountant", "composed_epsilon", "composed_scale", "epsilon", "noise_multiplier", "gaussian_delta",
           "exact_noise_multiplier", "unmeasurable", "AccountantUnavailable"]

ACCOUNTANTS = ("pld", "rdp")
EXTRA = "pip install \"fedspectral[privacy]\" (or pip install dp-accounting)"
PLD_INTERVAL = 1e-3
"""Value-discretisation interval of the PLD accountant (``dp-accounting``'s default is ``1e-4``): ten times faster
at a cost below ``1e-6`` in epsilon at the targets we use, and still a certified upper bound."""
MIN_EFFECTIVE_SIGMA = 0.1
"""Smallest ``sigma / sqrt(T)`` the PLD calibration considers (epsilon far above 100): below it the privacy loss
spans so wide a range that the discretised distribution would need gigabytes."""
RELATIVE_TOLERANCE = 1e-8
TRUST_FACTOR = 1.5
"""Most noise, relative to the exact Gaussian noise for the target, that an accountant's calibration may add
before its answer is refused as beyond its numerical limits (RDP's looseness at ordinary targets is about 10 %)."""


class AccountantUnavailable(ValueError):
    """``dp-calibration = "pld"`` or ``"rdp"`` without the ``dp-accounting`` package."""


def available() -> bool:
    """Whether ``dp-accounting`` can be imported."""
    try:
        import dp_accounting  # noqa: F401
    except ImportError:
        return False
    return True


def _dp_accounting():
    try:
        import dp_accounting
    except ImportError:
        raise AccountantUnavailable("dp-calibration = \"pld\" and \"rdp\" need the dp-accounting package, an "
                                    f"optional dependency: {EXTRA}") from None
    return dp_accounting


def make_accountant(kind: str, sigma: float = 1.0, steps: int = 1):
    """A fresh ``dp-accounting`` accountant of ``kind`` (``pld`` with :data:`PLD_INTERVAL`, widened for a tiny
    ``sigma / sqrt(steps)`` so that the distribution stays small; ``rdp`` with its defaults)."""
    dpa = _dp_accounting()
    if kind == "pld":
        effective = sigma / math.sqrt(max(steps, 1))
        interval = PLD_INTERVAL * max(1.0, (MIN_EFFECTIVE_SIGMA / effective) ** 2)
        return dpa.pld.PLDAccountant(value_discretization_interval=interval)
    if kind == "rdp":
        return dpa.rdp.RdpAccountant()
    raise ValueError(f"accountant must be one of {', '.join(ACCOUNTANTS)}; got {kind!r}")


@lru_cache(maxsize=4096)
def epsilon(kind: str, sigma: float, steps: int, delta: float) -> float:
    """The accountant's epsilon at ``delta`` after ``steps`` Gaussian releases with noise multiplier ``sigma``.

    ``0`` for no release, ``inf`` for ``sigma <= 0``, ``nan`` when the accountant cannot compute it (a noise
    multiplier so extreme that its arithmetic overflows, e.g. ``sigma = 1e300``): never an exception.
    """
    if steps <= 0:
        return 0.0
    if not sigma > 0:
        return math.inf
    if not math.isfinite(sigma):
        return 0.0
    dpa = _dp_accounting()
    try:
        acc = make_accountant(kind, sigma, steps)
        acc.compose(dpa.SelfComposedDpEvent(dpa.GaussianDpEvent(sigma), int(steps)))
        return float(acc.get_epsilon(delta))
    except (ArithmeticError, ValueError):
        return math.nan


def gaussian_delta(eps: float, mu: float) -> float:
    """Exact ``delta(eps)`` of a Gaussian mechanism with ``mu = sensitivity / std`` (Balle & Wang 2018, Thm 8).

    ``delta = Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2)``, evaluated in logarithms so that it stays exact
    down to ``1e-300``. ``T`` releases with multiplier ``sigma`` are one such mechanism with
    ``mu = sqrt(T) / sigma``.
    """
    from scipy.special import log_ndtr

    a = float(log_ndtr(-eps / mu + mu / 2.0))
    b = eps + float(log_ndtr(-eps / mu - mu / 2.0))
    if not b < a:
        return 0.0
    return math.exp(a + math.log1p(-math.exp(b - a)))


@lru_cache(maxsize=256)
def exact_noise_multiplier(target_epsilon: float, delta: float, steps: int) -> float:
    """The smallest ``sigma`` whose ``steps`` Gaussian releases are exactly ``(target_epsilon, delta)``-DP.

    Bisection on ``log mu`` of :func:`gaussian_delta` (increasing in ``mu``) to :data:`RELATIVE_TOLERANCE`.
    """
    lo, hi = 1e-300, 1.0
    while gaussian_delta(target_epsilon, hi) <= delta and hi < 1e300:
        lo, hi = hi, hi * 2.0
    while hi / lo - 1.0 > RELATIVE_TOLERANCE:
        mid = math.sqrt(lo * hi)
        if gaussian_delta(target_epsilon, mid) <= delta:
            lo = mid
        else:
            hi = mid
    return math.sqrt(steps) / lo


def unmeasurable(sigma: float, steps: int, delta: float) -> bool:
    """Whether a run's noise is too small for the PLD accountant to measure (its ``epsilon_pld`` would be empty).

    Only noise below :data:`MIN_EFFECTIVE_SIGMA` per ``sqrt(steps)`` is measured (above it the accountant always
    answers); False without ``dp-accounting`` (the column is empty then for another reason).
    """
    if not available() or sigma / math.sqrt(max(steps, 1)) >= MIN_EFFECTIVE_SIGMA:
        return False
    return not math.isfinite(epsilon("pld", float(sigma), int(steps), float(delta)))


def smallest_certified(certified: Callable[[float], bool], start: float, floor: float, no_finite: str,
                       too_large: str) -> float:
    """The smallest noise multiplier ``certified`` accepts, to :data:`RELATIVE_TOLERANCE` (from above).

    Doubles from ``max(start, floor)`` until certified, halves until not (never below ``floor``), then bisects
    geometrically; the answer is always a certified value.

    Raises
    ------
    ValueError
        ``no_finite`` when no finite multiplier (below 1e300) is certified; ``too_large`` when ``floor`` itself is.
    """
    hi = max(start, floor)
    while not certified(hi):
        hi *= 2.0
        if not math.isfinite(hi) or hi > 1e300:
            raise ValueError(no_finite)
    lo = hi / 2.0
    while certified(lo):
        if lo <= floor:
            raise ValueError(too_large)
        hi, lo = lo, max(lo / 2.0, floor)
    while hi / lo - 1.0 > RELATIVE_TOLERANCE:
        mid = math.sqrt(lo * hi)
        if certified(mid):
            hi = mid
        else:
            lo = mid
    return hi


@lru_cache(maxsize=256)
def noise_multiplier(kind: str, target_epsilon: float, delta: float, steps: int, start: float) -> float:
    """The smallest ``sigma`` (to :data:`RELATIVE_TOLERANCE`) whose ``steps`` releases the accountant certifies
    at ``(target_epsilon, delta)``: ``epsilon(kind, sigma, steps, delta) <= target_epsilon``.

    Parameters
    ----------
    start : float
        A first guess (the zCDP "tight" multiplier, which the accountants usually certify).

    Raises
    ------
    ValueError
        When the target needs ``sigma / sqrt(steps)`` below :data:`MIN_EFFECTIVE_SIGMA` (epsilon far above 100),
        no finite ``sigma`` meets it, or the accountant's ``sigma`` exceeds the exact one
        (:func:`exact_noise_multiplier`) by more than :data:`TRUST_FACTOR` (a target beyond its limits).
    AccountantUnavailable
        Without ``dp-accounting``.
    """
    _dp_accounting()
    if not (math.isfinite(start) and start > 0):
        raise ValueError(f"epsilon = {target_epsilon:g} at delta = {delta:g} is too small: even the zCDP noise "
                         f"multiplier over {steps} releases is not a positive finite number ({start!r})")
    floor = MIN_EFFECTIVE_SIGMA * math.sqrt(steps)

    def certified(sigma: float) -> bool:
        return epsilon(kind, sigma, steps, delta) <= target_epsilon

    hi = smallest_certified(
        certified, start, floor,
        no_finite=f"no finite noise meets epsilon = {target_epsilon:g} at delta = {delta:g} over {steps} releases "
                  f"with the {kind} accountant",
        too_large=f"epsilon = {target_epsilon:g} is too large for dp-calibration = \"{kind}\" over {steps} releases: "
                  f"it needs less noise than sigma = {floor:.4g} (sigma / sqrt(T) = {MIN_EFFECTIVE_SIGMA}), where "
                  "the guarantee means little; use a smaller epsilon or the tight calibration")
    exact = exact_noise_multiplier(target_epsilon, delta, steps)
    if hi > TRUST_FACTOR * exact:
        raise ValueError(f"(epsilon, delta) = ({target_epsilon:g}, {delta:g}) is beyond what the {kind} accountant "
                         f"resolves over {steps} releases: it certifies only sigma = {hi:.4g}, {hi / exact:.3g} "
                         f"times the exact Gaussian noise {exact:.4g}, and would report epsilon = "
                         f"{epsilon(kind, hi, steps, delta):.3g}; use a larger "
                         f"{'delta (pld: at least about 1e-15)' if kind == 'pld' else 'epsilon'} or "
                         "dp-calibration = \"tight\"")
    return hi


@lru_cache(maxsize=1024)
def composed_epsilon(kind: str, multipliers: tuple[tuple[float, int], ...], delta: float) -> float:
    """The accountant's epsilon at ``delta`` after Gaussian releases of different noise multipliers.

    Parameters
    ----------
    multipliers : tuple of (sigma, count)
        Each ``count`` releases with noise multiplier ``sigma`` (noise std over L2 sensitivity), all composed in
        one accountant.

    Returns
    -------
    float
        ``0`` for no release or only infinite noise, ``inf`` if a ``sigma <= 0``; ``nan`` when the accountant
        cannot compute it (as :func:`epsilon`); never an exception but :class:`AccountantUnavailable`.
    """
    releases = [(float(s), int(c)) for s, c in multipliers if c > 0]
    if not releases:
        return 0.0
    if any(not s > 0 for s, _ in releases):
        return math.inf
    releases = [(s, c) for s, c in releases if s < math.inf]  # infinite noise reveals nothing
    if not releases:
        return 0.0
    dpa = _dp_accounting()
    # the one Gaussian they compose to; above about 1e154 the squares overflow and it is taken as infinite
    total = sum(c / (s * s) for s, c in releases)
    effective = 1.0 / math.sqrt(total) if total > 0 else math.inf
    try:
        acc = make_accountant(kind, effective, 1)
        for s, c in releases:
            acc.compose(dpa.SelfComposedDpEvent(dpa.GaussianDpEvent(s), c))
        return float(acc.get_epsilon(delta))
    except (ArithmeticError, ValueError):
        return math.nan


def composed_scale(kind: str, target_epsilon: float, delta: float, weights: tuple[tuple[float, int], ...],
                   start: float) -> float:
    """The smallest ``t`` (to :data:`RELATIVE_TOLERANCE`) with ``composed_epsilon(kind, ((t w, count), ...),
    delta) <= target_epsilon``: the releases' multipliers are ``t`` times their ``weights``.

    Raises
    ------
    ValueError
        When no finite ``t`` meets the target, or the target needs less noise than the PLD can represent.
    """
    _dp_accounting()

    def certified(t: float) -> bool:
        return composed_epsilon(kind, tuple((t * w, c) for w, c in weights), delta) <= target_epsilon

    if not (math.isfinite(start) and start > 0):
        raise ValueError(f"epsilon = {target_epsilon:g} at delta = {delta:g}: no positive finite noise multiplier")
    floor = MIN_EFFECTIVE_SIGMA
    return smallest_certified(
        certified, start, floor,
        no_finite=f"no finite noise meets epsilon = {target_epsilon:g} at delta = {delta:g} with the {kind} "
                  "accountant",
        too_large=f"epsilon = {target_epsilon:g} is too large for dp-calibration = \"{kind}\": it needs less noise "
                  f"than a multiplier of {floor:g}, where the guarantee means little")
