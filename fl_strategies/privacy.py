"""Gaussian-mechanism calibration and accounting for FedPower (Theorem 6).

Each local power step releases ``Y = A_i Z + N(0, nu^2)^{d x r}`` with
``A_i = M_i^T M_i / s_i`` built from ``s_i`` rows of unit L2 norm. Replacing
one row changes ``A_i z`` by at most ``2 / s_i`` for a unit vector ``z``, so
the L2 sensitivity of ``vec(A_i Z)`` is ``Delta = 2 sqrt(r) / s_i``
(``= 2 sqrt(r) m / n`` for the paper's equal split). With
``nu = Delta * sigma_g`` one step is ``(alpha, alpha / (2 sigma_g^2))``-RDP;
``T`` steps compose to ``(alpha, T alpha / (2 sigma_g^2))``-RDP and, at the
best ``alpha``, to ``(eps, delta)``-DP with (paper, eq. A.2)::

    eps = T / (2 sigma_g^2) + sqrt(2 T log(1/delta)) / sigma_g.

Theorem 6 asks each of the two terms to be at most ``eps / 2``::

    sigma_g = max( sqrt(T / eps), 2 sqrt(2 T log(1/delta)) / eps ),

which is conservative by about a factor 2 in ``eps``; the epsilon actually
achieved is reported by :func:`achieved_epsilon`. Eq. A.2 is the zCDP
conversion ``rho + 2 sqrt(rho log(1/delta))`` with ``rho = T / (2 sigma_g^2)``:
it is computed by :mod:`fl_strategies.zcdp`, the code base's one conversion.

``dp-calibration`` chooses ``sigma_g`` (:func:`noise_multiplier`): ``paper``
(Theorem 6), ``tight`` (the exact zCDP conversion) or ``pld`` / ``rdp`` (the
smallest ``sigma_g`` that ``dp-accounting``'s accountant certifies for the
``T`` releases, :mod:`fl_strategies.accounting`); :func:`epsilon_spent` is
the epsilon by the calibration's own accountant. The guarantee is record-level
and per client, against an honest-but-curious server; it holds for every
client whatever ``p``, ``K`` or the alignment, because every local step is
counted (not only the communicated ones).
"""

from __future__ import annotations

import math

from . import zcdp

__all__ = ["noise_multiplier", "noise_std", "achieved_epsilon", "epsilon_spent", "sensitivity"]


def noise_multiplier(epsilon: float, delta: float, total_iterations: int, calibration: str = "paper") -> float:
    """``sigma_g`` for ``T`` Gaussian steps at target ``(eps, delta)``.

    Parameters
    ----------
    epsilon : float
        Target ``eps > 0``.
    delta : float
        Target ``delta`` in ``(0, 1)``.
    total_iterations : int
        ``T``, the number of noisy local steps each client performs.
    calibration : {"paper", "tight", "pld", "rdp"}
        ``paper``: Theorem 6's max rule; the others as in :func:`fl_strategies.zcdp.noise_multiplier` (the same
        composition of ``T`` Gaussian mechanisms).

    Returns
    -------
    float
        ``sigma_g``, the noise standard deviation in units of the sensitivity.
    """
    if not epsilon > 0:
        raise ValueError(f"epsilon must be > 0, got {epsilon}")
    if not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1), got {delta}")
    T = total_iterations
    if calibration != "paper":
        return zcdp.noise_multiplier(epsilon, delta, T, calibration)
    return max(math.sqrt(T / epsilon), 2.0 * math.sqrt(2.0 * T * zcdp.log_inverse(delta)) / epsilon)


def sensitivity(rank: int, num_rows: int) -> float:
    """L2 sensitivity ``2 sqrt(r) / s`` of ``vec(A_i Z)`` for unit-norm rows.

    Parameters
    ----------
    rank : int
        ``r``, the number of columns of ``Z``.
    num_rows : int
        ``s_i``, the number of rows held by the client.
    """
    return 2.0 * math.sqrt(rank) / num_rows


def noise_std(epsilon: float, delta: float, total_iterations: int, rank: int, num_rows: int,
              calibration: str = "paper") -> float:
    """Per-entry noise standard deviation ``nu`` of Theorem 6 (or of another ``dp-calibration``).

    ``nu = 2 sqrt(r) sigma_g / s_i`` (``= (2 sqrt(r) m / n) sigma_g`` for an
    equal split). Note that the paper calls ``nu`` a variance; it is used as
    the standard deviation (spec pitfall P1).

    Returns
    -------
    float
    """
    return sensitivity(rank, num_rows) * noise_multiplier(epsilon, delta, total_iterations, calibration)


def achieved_epsilon(sigma_g: float, steps: int, delta: float) -> float:
    """Epsilon spent after ``steps`` Gaussian steps by the paper's bound (eq. A.2, the zCDP conversion).

    Parameters
    ----------
    sigma_g : float
        Noise standard deviation divided by the sensitivity; ``0`` means no
        noise, hence ``inf``.
    steps : int
        Number of noisy steps performed so far (``0`` spends nothing).
    delta : float
        The ``delta`` of the guarantee.

    Returns
    -------
    float
        ``T / (2 sigma_g^2) + sqrt(2 T log(1/delta)) / sigma_g``; ``inf`` when
        ``sigma_g`` is so small that the value is not a finite float (never an
        exception).
    """
    if steps == 0:
        return 0.0
    return zcdp.spent_epsilon(sigma_g, steps, delta, "zcdp")


def epsilon_spent(sigma_g: float, steps: int, delta: float, calibration: str = "paper") -> float:
    """Epsilon spent after ``steps`` steps by the accountant of ``calibration``: the zCDP bound for ``paper`` and
    ``tight``, ``dp-accounting``'s PLD or RDP accountant for ``pld`` and ``rdp``."""
    if steps == 0:
        return 0.0
    return zcdp.spent_epsilon(sigma_g, steps, delta, calibration if calibration in ("pld", "rdp") else "zcdp")
