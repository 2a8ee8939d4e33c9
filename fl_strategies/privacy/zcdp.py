"""Calibration and accounting of the private power method in zero-concentrated DP (DP power-method paper, A.2).

Each of the ``L`` iterations releases ``Y_l = A X_{l-1} + N(0, Delta_l^2 sigma^2)^{n x p}``, a Gaussian
mechanism whose Frobenius-norm sensitivity is ``Delta_l``. By Bun & Steinke (Lemma 2.1) it is
``rho_l = Delta_l^2 / (2 Delta_l^2 sigma^2) = 1 / (2 sigma^2)``-zCDP whatever ``Delta_l`` is, and ``L``
iterations compose adaptively to ``rho = L / (2 sigma^2)``-zCDP, which implies (Prop. 1.3)::

    (eps', delta)-DP  with  eps' = rho + 2 sqrt(rho log(1/delta))   for every delta in (0, 1).

The paper's calibration (its eq. 33) is ``sigma = sqrt(4 L log(1/delta)) / eps``, so
``rho = eps^2 / (8 log(1/delta))`` and

    eps' = eps^2 / (8 log(1/delta)) + eps / sqrt(2).

The paper prints ``+ eps/2`` for the last term, an arithmetic slip (``2 sqrt(eps^2 / 8) = eps / sqrt(2)``), and
therefore states the condition ``delta <= exp(-eps/4)`` for ``eps' <= eps``; the correct condition is
``eps <= 8 (1 - 1/sqrt(2)) log(1/delta)``. Example: ``eps = 30, delta = 1e-5`` passes the paper's condition but
gives ``eps' = 30.985 > 30``; :func:`calibrate` refuses it. For practical targets (``eps <= 10``,
``delta <= 1e-5``) the two conditions agree.

``calibration = "tight"`` (not in the paper) solves ``rho + 2 sqrt(rho log(1/delta)) = eps`` for ``rho`` exactly,
``rho* = (sqrt(log(1/delta) + eps) - sqrt(log(1/delta)))^2``, and sets ``sigma = sqrt(L / (2 rho*))``: the same
``(eps, delta)`` with about half the noise variance at ``eps = 1``.

``calibration = "pld"`` / ``"rdp"`` (not in the paper) asks Google's ``dp-accounting`` (an optional dependency,
:mod:`fl_strategies.privacy.accounting`) for the smallest ``sigma`` whose ``L`` Gaussian releases its privacy-loss-
distribution (Renyi) accountant certifies at ``(eps, delta)``: less noise again (0.58x the tight variance at
``eps = 1, delta = 1e-5, L = 10``), with the spent epsilon reported by the same accountant.

This module holds the one zCDP conversion of the code base (:func:`rho_of`, :func:`epsilon_of`); FedPower's
accounting (:mod:`fl_strategies.privacy.fedpower_dp`, the paper's eq. A.2) is the same conversion and calls it.

The decentralised version with ``s`` clients adds ``N(0, Delta_l^2 sigma^2 / s)`` at each client; the sum seen by
the server has the central noise, so the accounting is the same (Theorem 6.2), provided all ``s`` noises are in
the sum and no client colludes with the server.
"""

from __future__ import annotations

import math

from . import accounting

__all__ = ["CALIBRATIONS", "Calibration", "calibrate", "check_target", "noise_multiplier", "rho_of", "epsilon_of",
           "max_epsilon", "tight_rho", "spent_epsilon", "log_inverse"]

CALIBRATIONS = ("paper", "tight", *accounting.ACCOUNTANTS)


def log_inverse(delta: float) -> float:
    """``log(1/delta)``, finite for every ``delta`` in ``(0, 1)`` (``-log(delta)`` where ``1/delta`` overflows)."""
    try:
        inverse = 1.0 / delta
    except (OverflowError, ZeroDivisionError):
        inverse = math.inf
    return math.log(inverse) if math.isfinite(inverse) else -math.log(delta)


def max_epsilon(delta: float) -> float:
    """The largest target ``eps`` the paper's calibration meets at ``delta``: ``8 (1 - 1/sqrt 2) log(1/delta)``."""
    return 8.0 * (1.0 - 1.0 / math.sqrt(2.0)) * log_inverse(delta)


def tight_rho(epsilon: float, delta: float) -> float:
    """``rho*``: the zCDP whose conversion is exactly ``eps`` at ``delta`` (solves ``rho + 2 sqrt(rho log(1/delta))
    = eps``); for a tiny ``eps`` as ``eps^2 / (sqrt(log(1/delta) + eps) + sqrt(log(1/delta)))^2``, without the
    cancellation of the difference of square roots."""
    log_term = log_inverse(delta)
    rho = (math.sqrt(log_term + epsilon) - math.sqrt(log_term)) ** 2
    if epsilon > 1e-3 * log_term:  # the difference of square roots loses little
        return rho
    return (epsilon / (math.sqrt(log_term + epsilon) + math.sqrt(log_term))) ** 2  # no cancellation


def noise_multiplier(epsilon: float, delta: float, iterations: int, calibration: str = "paper") -> float:
    """``sigma``: the per-entry noise standard deviation is ``Delta_l * sigma`` (a std, not a variance).

    Parameters
    ----------
    epsilon : float
        Target ``eps > 0``.
    delta : float
        Target ``delta`` in ``(0, 1)``.
    iterations : int
        ``L >= 1``, the number of noisy products released.
    calibration : {"paper", "tight", "pld", "rdp"}
        ``paper``: ``sqrt(4 L ln(1/delta)) / eps``; ``tight``: ``sqrt(L / (2 rho*))`` (module docstring);
        ``pld`` / ``rdp``: the smallest ``sigma`` that accountant certifies (:mod:`fl_strategies.privacy.accounting`).

    Returns
    -------
    float
        ``inf`` (or ``0``) when the target is so extreme that the value is not a positive finite float.
    """
    if calibration == "paper":
        return math.sqrt(4.0 * iterations * log_inverse(delta)) / epsilon
    tight = _sqrt_ratio(iterations, 2.0 * tight_rho(epsilon, delta))
    if calibration == "tight":
        return tight
    if calibration in accounting.ACCOUNTANTS:
        return accounting.noise_multiplier(calibration, epsilon, delta, iterations, tight)
    raise ValueError(f"calibration must be one of {', '.join(CALIBRATIONS)}; got {calibration!r}")


def _sqrt_ratio(a: float, b: float) -> float:
    """``sqrt(a / b)`` without overflow or a division by zero (``inf`` for ``b = 0``)."""
    if b <= 0:
        return math.inf
    try:
        return math.sqrt(a / b)
    except OverflowError:
        return math.sqrt(a) / math.sqrt(b)


def rho_of(sigma: float, iterations: int) -> float:
    """zCDP parameter of ``iterations`` Gaussian releases with noise multiplier ``sigma``: ``L / (2 sigma^2)``
    (``inf`` when ``sigma`` is 0 or so small that the value overflows)."""
    sigma = float(sigma)  # a numpy scalar would overflow with a warning instead of an exception
    if iterations == 0:
        return 0.0
    if not sigma > 0:
        return math.inf
    try:
        return iterations / (2.0 * sigma * sigma)
    except (OverflowError, ZeroDivisionError):  # sigma^2 underflows to 0 or the quotient overflows
        return math.inf


def epsilon_of(rho: float, delta: float) -> float:
    """``eps' = rho + 2 sqrt(rho log(1/delta))``: the (eps', delta)-DP implied by rho-zCDP (Bun & Steinke 1.3).

    The single zCDP conversion of the code base: FedPower's eq. A.2 is this with ``rho = T / (2 sigma_g^2)``.
    ``inf`` for ``rho = inf``.
    """
    if not math.isfinite(rho):
        return math.inf
    return rho + 2.0 * math.sqrt(rho * log_inverse(delta))


def spent_epsilon(sigma: float, releases: int, delta: float, accountant: str = "zcdp") -> float:
    """Epsilon after ``releases`` Gaussian releases with multiplier ``sigma``: by the zCDP conversion
    (``zcdp``, the papers' bound) or by ``dp-accounting``'s ``pld`` / ``rdp`` accountant."""
    if accountant == "zcdp":
        return epsilon_of(rho_of(sigma, releases), delta)
    return accounting.epsilon(accountant, float(sigma), int(releases), float(delta))


class Calibration:
    """Noise multiplier and privacy of one run; built by :func:`calibrate`.

    Attributes
    ----------
    sigma : float
        Central noise multiplier (per-entry std ``Delta_l * sigma`` in the sum the server sees).
    calibration : str
        ``paper``, ``tight`` (accounted in zCDP), ``pld`` or ``rdp`` (accounted by that accountant).
    rho : float
        zCDP of the whole run (``L`` releases).
    epsilon : float
        ``eps'`` achieved at ``delta`` after all ``L`` releases (at most the target), by the calibration's own
        accountant.
    """

    def __init__(self, sigma: float, iterations: int, delta: float, calibration: str = "paper") -> None:
        self.sigma, self.iterations, self.delta, self.calibration = sigma, iterations, delta, calibration
        self.accountant = calibration if calibration in accounting.ACCOUNTANTS else "zcdp"
        self.rho = rho_of(sigma, iterations)
        self.epsilon = spent_epsilon(sigma, iterations, delta, self.accountant)

    def spent(self, releases: int) -> tuple[float, float]:
        """``(rho, eps')`` after the first ``releases`` iterations (``eps'`` by the calibration's accountant)."""
        rho = rho_of(self.sigma, releases) if releases else 0.0
        return rho, (spent_epsilon(self.sigma, releases, self.delta, self.accountant) if releases else 0.0)

    def __repr__(self) -> str:
        return (f"Calibration({self.calibration}: sigma={self.sigma:.6g}, L={self.iterations}, rho={self.rho:.6g}, "
                f"eps'={self.epsilon:.6g})")


def check_target(epsilon: float, delta: float) -> None:
    """Refuse a privacy target outside ``epsilon > 0`` (finite) and ``0 < delta < 1``, in one line.

    Raises
    ------
    ValueError
        Naming the value out of range.
    """
    if not (math.isfinite(epsilon) and epsilon > 0):
        raise ValueError(f"epsilon must be a finite number > 0, got {epsilon!r}")
    if not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1), got {delta!r}")


def calibrate(epsilon: float, delta: float, iterations: int, calibration: str = "paper") -> Calibration:
    """Noise multiplier for a target ``(eps, delta)`` over ``L`` iterations, refusing targets it cannot meet.

    Raises
    ------
    ValueError
        If ``eps``, ``delta`` or ``L`` are out of range, if the noise multiplier is not a positive finite number
        (an extreme ``eps``), or if the achieved ``eps'`` would exceed ``eps`` (the paper's calibration with
        ``eps > 8 (1 - 1/sqrt 2) log(1/delta)``; see the module docstring). Each message is one line.
    fl_strategies.privacy.accounting.AccountantUnavailable
        ``pld`` / ``rdp`` without ``dp-accounting``.
    """
    check_target(epsilon, delta)
    if iterations < 1:
        raise ValueError(f"the number of iterations L must be >= 1, got {iterations!r}")
    sigma = noise_multiplier(epsilon, delta, iterations, calibration)
    if not (math.isfinite(sigma) and sigma > 0):
        raise ValueError(f"epsilon = {epsilon!r} (with delta = {delta!r}) is too {'small' if sigma else 'large'} for "
                         f"the {calibration} calibration: its noise multiplier over L = {iterations} releases is "
                         f"{sigma!r}, not a positive finite number")
    result = Calibration(sigma, iterations, delta, calibration)
    if not math.isfinite(result.epsilon):
        raise ValueError(f"epsilon = {epsilon!r} (with delta = {delta!r}) is too large for the {calibration} "
                         f"calibration: its noise (sigma = {sigma:.3g}) is so small that the epsilon spent over "
                         f"L = {iterations} releases is not a finite number")
    if result.epsilon > epsilon * (1 + 1e-12):
        raise ValueError(
            f"(epsilon, delta) = ({epsilon:g}, {delta:g}) cannot be met with the {calibration} calibration: it "
            f"would achieve epsilon' = {result.epsilon:.6g} > {epsilon:g}. The paper's sigma meets epsilon only "
            f"when epsilon <= 8 (1 - 1/sqrt 2) ln(1/delta) = {max_epsilon(delta):.4g} (the paper's own condition "
            f"delta <= exp(-epsilon/4) rests on a slip in its eq. 33); lower epsilon or delta, or use "
            "dp-calibration = \"tight\"")
    return result
