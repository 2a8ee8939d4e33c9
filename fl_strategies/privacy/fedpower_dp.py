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
it is computed by :mod:`fl_strategies.privacy.zcdp`, the code base's one conversion.

``dp-calibration`` chooses ``sigma_g`` (:func:`noise_multiplier`): ``paper``
(Theorem 6), ``tight`` (the exact zCDP conversion) or ``pld`` / ``rdp`` (the
smallest ``sigma_g`` that ``dp-accounting``'s accountant certifies for the
``T`` releases, :mod:`fl_strategies.privacy.accounting`); :func:`epsilon_spent` is
the epsilon by the calibration's own accountant. The guarantee is record-level
and per client, against an honest-but-curious server; it holds for every
client whatever ``p``, ``K`` or the alignment, because every local step is
counted (not only the communicated ones). There is no secure aggregation on
this path: each client's reply reaches the server in the clear and is private
on its own.

Centring (``center = true`` with ``epsilon``). The mean is one more release
of each client: at discovery it sends its row sum ``S_i`` plus
``N(0, (2 sigma_mean)^2)`` (replacing one unit row moves ``S_i`` by at most 2),
in the clear like its products and private on its own under the same threat
model; the server takes ``mu = sum_i S_i / n`` projected onto the unit ball
(post-processing). The client then iterates its rows centred by the released
``mu``: with ``||x|| <= 1`` and ``||mu|| <= 1``, ``u = x - mu`` has
``||u|| <= 2``, and replacing ``u`` by ``v`` changes ``A_i Z`` by
``(u u^T - v v^T) Z / s_i``, whose Frobenius norm is at most
``||u u^T - v v^T||_2 sqrt(r) / s_i <= max(||u||^2, ||v||^2) sqrt(r) / s_i``
(``w^T (u u^T - v v^T) w`` lies in ``[-||v||^2, ||u||^2]`` for unit ``w``):
``Delta = 4 sqrt(r) / s_i`` (:func:`sensitivity` with ``centred``; the paper's
triangle bound would give 8), attained for ``r = 1``. It keeps Theorem 6's form;
for ``r >= 3`` the rank-two ``u u^T - v v^T`` would allow ``4 sqrt(2) / s_i``
(and ``sqrt(2) / s_i`` uncentred), a refinement not used here. The mean and the ``T`` steps are calibrated
together (:func:`centred_releases`: one accountant, the mean's share of
``1 / sigma^2`` :data:`MEAN_SHARE`); the row counts are public.
"""

from __future__ import annotations

import math

from . import analyze_gauss as ag
from . import zcdp

__all__ = ["noise_multiplier", "noise_std", "achieved_epsilon", "epsilon_spent", "sensitivity", "MEAN_SHARE",
           "ROW_SUM_SENSITIVITY", "centred_releases", "client_noise_stds"]

MEAN_SHARE = 0.01
"""The mean's share of the privacy (``1 / sigma^2``) in a centred private fedpower run, measured
(``python -m simulations.experiments.private_pca.budget_split --fedpower``): the error falls from share 0.2 to
0.02 and is flat below (within 0.3 % from 0.01 to 0.005)."""
ROW_SUM_SENSITIVITY = 2.0
"""L2 sensitivity of a client's row sum when one unit row is replaced."""


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
        ``paper``: Theorem 6's max rule; the others as in :func:`fl_strategies.privacy.zcdp.noise_multiplier` (the same
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


def sensitivity(rank: int, num_rows: int, centred: bool = False) -> float:
    """L2 sensitivity of ``vec(A_i Z)`` for unit-norm rows: ``2 sqrt(r) / s`` (Theorem 6), or ``4 sqrt(r) / s``
    for rows centred by a mean in the unit ball (module docstring, Centring).

    Parameters
    ----------
    rank : int
        ``r``, the number of columns of ``Z``.
    num_rows : int
        ``s_i``, the number of rows held by the client.
    centred : bool
        Whether the client's rows are centred by the released mean.
    """
    return (4.0 if centred else 2.0) * math.sqrt(rank) / num_rows


def centred_releases(epsilon: float, delta: float, calibration: str, total_iterations: int) -> ag.PrivateReleases:
    """The mean (once) and the ``T`` products of a centred fedpower run with ``epsilon``, calibrated together
    (:func:`fl_strategies.privacy.analyze_gauss.calibrate`, the mean's share :data:`MEAN_SHARE`)."""
    return ag.calibrate(epsilon, delta, calibration,
                        {"mean": (MEAN_SHARE, 1), "products": (1.0 - MEAN_SHARE, total_iterations)})


def client_noise_stds(explicit_std: float, epsilon: float, delta: float, calibration: str, rank: int, center: bool,
                      total_iterations: int, num_rows: int) -> tuple[float, float]:
    """``(nu, nu_mean)``: per-entry noise std of a client's products and of its row sum (0 when none is added).

    ``explicit_std`` (``noise-std``) when set; with ``epsilon`` Theorem 6's ``nu`` (:func:`noise_std`) for
    ``rank`` columns, or in a centred run the multipliers of :func:`centred_releases` times the centred
    sensitivity and :data:`ROW_SUM_SENSITIVITY`.
    """
    if explicit_std > 0:
        return float(explicit_std), 0.0
    if not epsilon > 0:
        return 0.0, 0.0
    r = rank
    if not center:
        return noise_std(epsilon, delta, total_iterations, r, num_rows, calibration), 0.0
    releases = centred_releases(epsilon, delta, calibration, total_iterations)
    return (sensitivity(r, num_rows, centred=True) * releases.multipliers["products"],
            ROW_SUM_SENSITIVITY * releases.multipliers["mean"])


def noise_std(epsilon: float, delta: float, total_iterations: int, rank: int, num_rows: int,
              calibration: str = "paper") -> float:
    """Per-entry noise standard deviation ``nu`` of Theorem 6 (or of another ``dp-calibration``).

    ``nu = 2 sqrt(r) sigma_g / s_i`` (``= (2 sqrt(r) m / n) sigma_g`` for an
    equal split). The paper calls ``nu`` a variance; here it is the standard
    deviation of the Gaussian noise drawn.

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
