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
achieved is reported by :func:`achieved_epsilon`. The guarantee is record-level
and per client, against an honest-but-curious server; it holds for every
client whatever ``p``, ``K`` or the alignment, because every local step is
counted (not only the communicated ones).
"""

from __future__ import annotations

import math

__all__ = ["noise_multiplier", "noise_std", "achieved_epsilon", "sensitivity"]


def noise_multiplier(epsilon: float, delta: float, total_iterations: int) -> float:
    """Theorem 6's ``sigma_g`` for ``T`` Gaussian steps at target ``(eps, delta)``.

    Parameters
    ----------
    epsilon : float
        Target ``eps > 0``.
    delta : float
        Target ``delta`` in ``(0, 1)``.
    total_iterations : int
        ``T``, the number of noisy local steps each client performs.

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
    return max(math.sqrt(T / epsilon), 2.0 * math.sqrt(2.0 * T * math.log(1.0 / delta)) / epsilon)


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


def noise_std(epsilon: float, delta: float, total_iterations: int, rank: int, num_rows: int) -> float:
    """Per-entry noise standard deviation ``nu`` of Theorem 6.

    ``nu = 2 sqrt(r) sigma_g / s_i`` (``= (2 sqrt(r) m / n) sigma_g`` for an
    equal split). Note that the paper calls ``nu`` a variance; it is used as
    the standard deviation (spec pitfall P1).

    Returns
    -------
    float
    """
    return sensitivity(rank, num_rows) * noise_multiplier(epsilon, delta, total_iterations)


def achieved_epsilon(sigma_g: float, steps: int, delta: float) -> float:
    """Epsilon actually spent after ``steps`` Gaussian steps (eq. A.2).

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
    sigma_g = float(sigma_g)  # a numpy scalar would overflow with a warning instead of an exception
    if not sigma_g > 0:
        return math.inf
    try:
        first = steps / (2.0 * sigma_g**2)
    except (OverflowError, ZeroDivisionError):  # sigma_g**2 overflows (term -> 0) or underflows to 0 (-> inf)
        first = 0.0 if sigma_g > 1 else math.inf
    return first + math.sqrt(2.0 * steps * math.log(1.0 / delta)) / sigma_g
