"""Private block Krylov (``dp-krylov``): its sensitivity, its accounting and its post-processing, in numpy.

The method. Every product multiplies a block with orthonormal columns that is orthogonal to every block before it:
the server broadcasts ``Q_0 = orth(N(0, 1)^{d x p})`` (public seed), the clients return their shares of
``Y_1 = A Q_0 + G_1`` (``A = sum x x^T`` over every row), and for ``t = 1 .. T - 1`` the server sends the next
block ``Q_t``: the top ``p`` left singular vectors of the centred ``Y_t`` with ``span(Q_0 .. Q_{t-1})``
projected out (:func:`next_block`). So ``B = [Q_0 .. Q_{T-1}]`` (``d x T p``, ``T p <= d``) has orthonormal
columns and spans the noisy block Krylov space ``[Q_0, A Q_0, A^2 Q_0, ...]``; the kept releases are
``[Y_1 .. Y_T] = A B + G``, and the model is Rayleigh-Ritz on them (:func:`rayleigh_ritz`): the top eigenvectors of
``H = sym(B^T (A B + G))`` mapped back by ``B``, post-processing of the releases. With ``center`` the first
release carries ``a`` times the row sums beside ``A Q_0`` (``a = MEAN_WEIGHT``); the server takes
``mu = S / n`` (into the unit ball) and centres every product, ``Y - n mu (mu^T Q)`` (post-processing).

Sensitivity. Rows have norm at most 1 (``row-normalize``); neighbouring data sets differ in one row ``x``
replaced by ``y`` (row counts are public). With ``M = x x^T - y y^T`` (symmetric, rank <= 2), for any ``Q``
with orthonormal columns (``||Q||_2 = 1``, any width ``p``)

    ``||M Q||_F <= ||M||_F ||Q||_2 = ||M||_F``,   ``||M||_F^2 = r^4 + q^4 - 2 (x.y)^2 <= 2``  (``r, q <= 1``),

so one product moves by at most ``sqrt(2)`` (:data:`PRODUCT_SENSITIVITY`; attained by two orthogonal unit rows
in ``span(Q)``, whatever ``p`` and ``d``): ``dp-power`` bounds the same step by the triangle inequality, 2. The
first release with the weighted row sum moves by ``sqrt(||M Q_0||_F^2 + a^2 ||x - y||^2) <= sqrt(2) + a^2 /
sqrt(2)`` (:func:`release_sensitivity`; the bound of :func:`fl_strategies.privacy.analyze_gauss.joint_sensitivity`,
whose derivation applies since ``||M Q_0||_F <= ||M||_F``).

The whole run is one Gaussian mechanism. For one pair ``(x, y)`` the products' displacements add up in
squares over the jointly orthonormal blocks: ``sum_t ||M Q_t||_F^2 = ||M B||_F^2 <= ||M||_F^2``, so, with the
same noise ``nu = D sigma`` on every product entry (``nu / a`` on the row sum),

    ``sum_t (||M Q_t||_F^2 + [t = 0] a^2 ||x - y||^2) / nu^2 <= D^2 / nu^2 = 1 / sigma^2``  (``D``: the
    :func:`release_sensitivity`),

for every realisation of the (adaptively chosen) blocks. The blocks depend on earlier noisy releases only (public),
so each step's parameter for the pair is fixed before the step, and each pair's privacy losses form a fully
adaptive composition of Gaussian mechanisms whose squared parameters sum to at most ``1 / sigma^2`` almost surely:
by the individual filter for Gaussian differential privacy (Koskela, Tobaben, Honkela, ICLR 2023, after Feldman and
Zrnic 2021 for Renyi DP) the run is ``(1 / sigma)``-GDP, i.e. it has the privacy profile of ONE Gaussian mechanism
of multiplier ``sigma`` whatever ``T``: the budget of the private ``covariance`` release, of which ``dp-krylov``
with ``B = I`` is the same mechanism. :func:`privacy_plan` calibrates that one Gaussian (``dp-calibration``:
``pld`` the PLD accountant of one Gaussian; ``paper``, the default, the exact curve of one Gaussian (Balle and
Wang's analytic Gaussian mechanism, :class:`ExactGaussian`: the calibration the GDP filter gives, without
``dp-accounting``); ``rdp`` its Renyi curve (Feldman and Zrnic's filter); ``tight`` zCDP). This holds only if the
blocks really are orthonormal and orthogonal to each other: every client checks the broadcast block against the
ones it multiplied before (:func:`check_block`) and refuses a block that is not, and the noise covers the tolerance
(:data:`BLOCK_TOLERANCE`: ``||M B||_F^2 <= ||M||_F^2 ||B||_2^2`` with ``||B||_2^2 <= 1 + ||B^T B - I||_2``).

Noise split across the sites: each of ``s`` clients adds ``N(0, nu^2 / s)`` per entry to its share and the
shares are summed (through SecAgg+ with ``dp-channel = "secagg"``), so the sum carries the central noise, as
``dp-power`` does (:func:`client_noise_std`).
"""

from __future__ import annotations

import math

import numpy as np

from ..kernels.linalg import into_unit_ball, orth
from . import accounting, zcdp
from . import analyze_gauss as ag

__all__ = ["PRODUCT_SENSITIVITY", "MEAN_WEIGHT", "BLOCK_TOLERANCE", "RELEASE", "release_sensitivity",
           "privacy_plan", "client_noise_std", "initial_block", "next_block", "check_block", "centre_product",
           "rayleigh_ritz", "project_mean", "default_block_width", "exact_epsilon", "ExactGaussian"]

PRODUCT_SENSITIVITY = math.sqrt(2.0)
"""L2 sensitivity of ``A Q`` for ``Q`` with orthonormal columns when one row of norm <= 1 is replaced."""

MEAN_WEIGHT = ag.MEAN_WEIGHT
"""``a``, the row sum's weight beside the first product when centring (its noise is ``nu / a``)."""

BLOCK_TOLERANCE = 1e-9
"""Largest ``||B^T B - I||_2`` a client accepts for the blocks it has multiplied (module docstring)."""

RELEASE = "krylov-products"
"""The name of the one composed release in the model's privacy record."""

project_mean = into_unit_ball


def default_block_width(rank: int) -> int:
    """``p`` for ``iteration-rank = 0``: ``max(2 rank + 4, 10)``, the width measured best at rank 3
    (``simulations/experiments/private_pca/dp_krylov_design.py``); a wider block costs no privacy (the
    sensitivity does not grow with ``p``), only upload."""
    return max(2 * rank + 4, 10)


def release_sensitivity(center: bool, weight: float = MEAN_WEIGHT) -> float:
    """``D``: ``sqrt(2) + a^2 / sqrt(2)`` with the row sum beside the first product, ``sqrt(2)`` without
    (``(1 + BLOCK_TOLERANCE)`` times it: the blocks a client accepts are orthonormal to that tolerance)."""
    D = ag.joint_sensitivity(weight) if center else PRODUCT_SENSITIVITY
    return D * math.sqrt(1.0 + BLOCK_TOLERANCE)


def privacy_plan(epsilon: float, delta: float, calibration: str) -> ag.PrivateReleases | None:
    """The one Gaussian the whole run composes to (module docstring), calibrated by ``calibration``
    (``dp-calibration``) for ``(epsilon, delta)``; ``None`` without ``epsilon``.

    Raises
    ------
    ValueError
        A target the calibration cannot meet (one line).
    """
    if not epsilon > 0:
        return None
    if calibration != "paper":
        return ag.calibrate(epsilon, delta, calibration, {RELEASE: (1.0, 1)})
    zcdp.check_target(epsilon, delta)
    sigma = accounting.exact_noise_multiplier(epsilon, delta, 1)
    if not (math.isfinite(sigma) and sigma > 0):
        raise ValueError(f"epsilon = {epsilon!r} (with delta = {delta!r}) cannot be met: the noise multiplier of the "
                         f"exact Gaussian curve is {sigma!r}")
    releases = ExactGaussian({RELEASE: sigma}, {RELEASE: 1}, sigma, delta, "paper", epsilon)
    if not epsilon * (1 - 1e-6) <= releases.epsilon <= epsilon * (1 + 1e-9):  # float64 cannot resolve the curve
        raise ValueError(f"epsilon = {epsilon!r} (with delta = {delta!r}) cannot be met with the exact Gaussian "
                         f"curve in float64 (it spends epsilon' = {releases.epsilon:.6g}); use a larger epsilon")
    return releases


def exact_epsilon(sigma: float, delta: float) -> float:
    """The smallest ``epsilon`` with ``delta(epsilon) <= delta`` on the exact curve of one Gaussian of multiplier
    ``sigma`` (:func:`fl_strategies.privacy.accounting.gaussian_delta`), by bisection to 1e-12 relative."""
    mu = 1.0 / sigma
    lo, hi = 0.0, 1.0
    while accounting.gaussian_delta(hi, mu) > delta:
        lo, hi = hi, 2.0 * hi
    while hi - lo > 1e-12 * hi:
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if accounting.gaussian_delta(mid, mu) > delta else (lo, mid)
    return hi


class ExactGaussian(ag.PrivateReleases):
    """The run's one Gaussian calibrated on its exact ``(epsilon, delta)`` curve (``dp-calibration = "paper"``:
    Balle and Wang's analytic Gaussian mechanism, which is what ``(1 / sigma)``-GDP means; no ``dp-accounting``)."""

    def spent(self, counts) -> float:
        """Epsilon at ``delta`` on the exact curve (0 before the release)."""
        return exact_epsilon(self.multipliers[RELEASE], self.delta) if counts.get(RELEASE, 0) > 0 else 0.0


def client_noise_std(channel: str, num_clients: int, releases: ag.PrivateReleases | None, center: bool) -> float:
    """Per-entry noise std a client adds to its product share (``nu / sqrt(s)``; ``nu`` for ``dp-channel =
    "public"``); its row sum's is this over :data:`MEAN_WEIGHT` (it uploads ``a`` times the sum). 0 without noise."""
    if releases is None:
        return 0.0
    share = 1.0 if channel == "public" else math.sqrt(num_clients)
    return release_sensitivity(center) * releases.multipliers[RELEASE] / share


def initial_block(d: int, p: int, rng: np.random.Generator) -> np.ndarray:
    """``Q_0 = orth(N(0, 1)^{d x p})`` (d, p) from the public run seed."""
    return orth(rng.standard_normal((d, p)))


def next_block(basis: np.ndarray, Y: np.ndarray, p: int) -> np.ndarray:
    """The next block (d, p): top ``p`` left singular vectors of ``Y`` (d, p) with ``span(basis)`` (d, m)
    projected out twice (so that it is orthogonal to ``basis`` to round-off), re-orthonormalised."""
    R = Y - basis @ (basis.T @ Y)
    R = R - basis @ (basis.T @ R)
    U = np.linalg.svd(R, full_matrices=False)[0][:, :p]
    U = U - basis @ (basis.T @ U)
    return orth(U)


def check_block(previous: np.ndarray | None, Q: np.ndarray, tolerance: float = BLOCK_TOLERANCE) -> float:
    """``||B^T B - I||_2`` for ``B = [previous, Q]``; raises ``ValueError`` above ``tolerance`` (module docstring).

    Parameters
    ----------
    previous : ndarray of shape (d, m) or None
        The blocks multiplied before, side by side.
    Q : ndarray of shape (d, p)
        The broadcast block.
    """
    B = Q if previous is None else np.hstack([previous, Q])
    gap = float(np.linalg.norm(B.T @ B - np.eye(B.shape[1]), 2)) if np.all(np.isfinite(B)) else math.inf
    if not gap <= tolerance:
        raise ValueError(f"the broadcast block is not orthonormal and orthogonal to the blocks before it "
                         f"(||B^T B - I|| = {gap:.3g} > {tolerance:g}); its product would not be private as "
                         "accounted, so nothing is uploaded")
    return gap


def centre_product(Y: np.ndarray, mu: np.ndarray, Q: np.ndarray, n: int) -> np.ndarray:
    """``Y - n mu (mu^T Q)`` (d, p): ``(A - n mu mu^T) Q`` plus the noise, for ``Y = A Q + G``."""
    return Y - n * np.outer(mu, mu @ Q)


def rayleigh_ritz(basis: np.ndarray, products: np.ndarray, r: int) -> tuple[np.ndarray, np.ndarray]:
    """Ritz pairs of the released products: ``(Z (d, r), values (r,))``, descending.

    ``basis`` (d, m) is ``B``, ``products`` (d, m) the (centred) ``A B + G``; ``H = (B^T Y + Y^T B) / 2`` and
    ``Z = B W`` for its top ``r`` eigenvectors ``W``.
    """
    H = basis.T @ products
    H = 0.5 * (H + H.T)
    values, W = np.linalg.eigh(H)
    order = np.argsort(values)[::-1][:r]
    return basis @ W[:, order], values[order]
