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

The decentralised version with ``s`` clients adds ``N(0, Delta_l^2 sigma^2 / s)`` at each client; the sum seen by
the server has the central noise, so the accounting is the same (Theorem 6.2), provided all ``s`` noises are in
the sum and no client colludes with the server.
"""

from __future__ import annotations

import math

__all__ = ["CALIBRATIONS", "Calibration", "calibrate", "noise_multiplier", "rho_of", "epsilon_of", "max_epsilon"]

CALIBRATIONS = ("paper", "tight")


def max_epsilon(delta: float) -> float:
    """The largest target ``eps`` the paper's calibration meets at ``delta``: ``8 (1 - 1/sqrt 2) log(1/delta)``."""
    return 8.0 * (1.0 - 1.0 / math.sqrt(2.0)) * math.log(1.0 / delta)


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
    calibration : {"paper", "tight"}
        ``paper``: ``sqrt(4 L log(1/delta)) / eps``; ``tight``: ``sqrt(L / (2 rho*))`` (module docstring).

    Returns
    -------
    float
    """
    if calibration == "paper":
        return math.sqrt(4.0 * iterations * math.log(1.0 / delta)) / epsilon
    if calibration == "tight":
        log_term = math.log(1.0 / delta)
        rho = (math.sqrt(log_term + epsilon) - math.sqrt(log_term)) ** 2
        return math.sqrt(iterations / (2.0 * rho))
    raise ValueError(f"calibration must be one of {', '.join(CALIBRATIONS)}; got {calibration!r}")


def rho_of(sigma: float, iterations: int) -> float:
    """zCDP parameter of ``iterations`` Gaussian releases with noise multiplier ``sigma``: ``L / (2 sigma^2)``."""
    return iterations / (2.0 * sigma * sigma)


def epsilon_of(rho: float, delta: float) -> float:
    """``eps' = rho + 2 sqrt(rho log(1/delta))``: the (eps', delta)-DP implied by rho-zCDP (Bun & Steinke 1.3)."""
    return rho + 2.0 * math.sqrt(rho * math.log(1.0 / delta))


class Calibration:
    """Noise multiplier and privacy of one run; built by :func:`calibrate`.

    Attributes
    ----------
    sigma : float
        Central noise multiplier (per-entry std ``Delta_l * sigma`` in the sum the server sees).
    rho : float
        zCDP of the whole run (``L`` releases).
    epsilon : float
        ``eps'`` achieved at ``delta`` after all ``L`` releases (at most the target).
    """

    def __init__(self, sigma: float, iterations: int, delta: float) -> None:
        self.sigma, self.iterations, self.delta = sigma, iterations, delta
        self.rho = rho_of(sigma, iterations)
        self.epsilon = epsilon_of(self.rho, delta)

    def spent(self, releases: int) -> tuple[float, float]:
        """``(rho, eps')`` after the first ``releases`` iterations."""
        rho = rho_of(self.sigma, releases) if releases else 0.0
        return rho, epsilon_of(rho, self.delta)

    def __repr__(self) -> str:
        return f"Calibration(sigma={self.sigma:.6g}, L={self.iterations}, rho={self.rho:.6g}, eps'={self.epsilon:.6g})"


def calibrate(epsilon: float, delta: float, iterations: int, calibration: str = "paper") -> Calibration:
    """Noise multiplier for a target ``(eps, delta)`` over ``L`` iterations, refusing targets it cannot meet.

    Raises
    ------
    ValueError
        If ``eps``, ``delta`` or ``L`` are out of range, or if the achieved ``eps'`` would exceed ``eps``
        (the paper's calibration with ``eps > 8 (1 - 1/sqrt 2) log(1/delta)``; see the module docstring).
    """
    if not (math.isfinite(epsilon) and epsilon > 0):
        raise ValueError(f"epsilon must be a finite number > 0, got {epsilon!r}")
    if not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1), got {delta!r}")
    if iterations < 1:
        raise ValueError(f"the number of iterations L must be >= 1, got {iterations!r}")
    result = Calibration(noise_multiplier(epsilon, delta, iterations, calibration), iterations, delta)
    if result.epsilon > epsilon * (1 + 1e-12):
        raise ValueError(
            f"(epsilon, delta) = ({epsilon:g}, {delta:g}) cannot be met with the {calibration} calibration: it "
            f"would achieve epsilon' = {result.epsilon:.6g} > {epsilon:g}. The paper's sigma meets epsilon only "
            f"when epsilon <= 8 (1 - 1/sqrt 2) ln(1/delta) = {max_epsilon(delta):.4g} (the paper's own condition "
            f"delta <= exp(-epsilon/4) rests on a slip in its eq. 33); lower epsilon or delta, or use "
            "dp-calibration = \"tight\"")
    return result
