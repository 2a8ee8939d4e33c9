"""Private covariance: the distributed Analyze Gauss mechanism (Dwork, Talwar, Thakurta, Zhang 2014).

Client ``i`` holds rows ``x`` (``||x|| <= c``: ``c = 1`` under ``row-normalize``, ``c = clip-norm`` under
clipping) and releases, once, the upper triangle of its Gram matrix ``G_i = sum x x^T`` and, when centring, its
row sum ``S_i = sum x``, each plus its share of Gaussian noise; Flower's SecAgg+ sums the uploads, so that the
server learns only ``G = sum_i G_i + E`` (``E`` symmetric, upper-triangle entries i.i.d. ``N(0, nu_G^2)``) and
``S = sum_i S_i + N(0, nu_S^2 I)``. With ``s`` clients each adds ``N(0, nu^2 / s)``: the sum carries exactly the
central noise (every noise must be in the sum: a missing client stops the run).

Neighbouring data sets differ in one row, replaced (the row counts ``s_i`` and ``n`` are public metadata: the
server learns them at discovery, and they are not protected). Replacing ``x`` by ``y`` changes the upper
triangle of ``G`` by at most ``sqrt(2) c^2`` in L2 norm (``||triu(x x^T - y y^T)||_F^2 <= (||x x^T - y y^T||_F^2
+ sum_j (x_j^2 - y_j^2)^2) / 2 <= 2 c^4``) and ``S`` by at most ``2 c``. The two releases are Gaussian
mechanisms with noise multipliers ``sigma_G = nu_G / (sqrt(2) c^2)`` and ``sigma_S = nu_S / (2 c)``, composed in
one accountant (:func:`calibrate`): for ``dp-calibration = "pld"`` ``dp-accounting``'s privacy-loss distribution
of both, for ``paper`` / ``tight`` their zCDP ``1 / (2 sigma_G^2) + 1 / (2 sigma_S^2)``.

Budget split. A Gaussian composition is again a Gaussian: with shares ``f_j`` (summing to 1) of the privacy
(``1 / sigma^2``), release ``j`` repeated ``count_j`` times gets the multiplier ``t sqrt(count_j / f_j)``, and the
whole is one Gaussian of multiplier ``t``, which the calibration finds. :data:`MEAN_SHARE` is the row sum's share
under centring, chosen by measurement (``simulations/experiments/private_pca/budget_split.py``).

The server forms ``C = G / n - mu mu^T`` with ``mu = S / n`` (``C = G / n`` without centring) and takes its
eigenvectors: every statistic of the model (components, mean, explained variance) is post-processing of the two
releases and costs no privacy.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np

from . import accounting, zcdp

__all__ = ["MEAN_SHARE", "PrivateReleases", "calibrate", "gram_sensitivity", "sum_sensitivity", "pack_upper",
           "unpack_upper", "upper_size", "covariance_from_sums", "covariance_releases", "row_bound", "noise_stds"]

MEAN_SHARE = 0.1
"""The row sum's share of the privacy (``1 / sigma^2``) when centring (module docstring, Budget split)."""


def row_bound(clip_norm: float) -> float:
    """``c``, the public bound on a row's L2 norm: ``clip_norm`` (``clip-norm``) when set, else 1
    (``row-normalize``)."""
    return float(clip_norm or 1.0)


def gram_sensitivity(bound: float) -> float:
    """L2 sensitivity ``sqrt(2) c^2`` of the upper triangle of ``sum x x^T`` when one row of norm <= c is replaced."""
    return math.sqrt(2.0) * bound * bound


def sum_sensitivity(bound: float) -> float:
    """L2 sensitivity ``2 c`` of ``sum x`` when one row of norm <= c is replaced."""
    return 2.0 * bound


class PrivateReleases:
    """The Gaussian releases of one run, calibrated together; built by :func:`calibrate`.

    Attributes
    ----------
    multipliers : dict of str to float
        Noise multiplier (noise std over L2 sensitivity) of each named release.
    counts : dict of str to int
        How many times each release is made.
    scale : float
        ``t``, the multiplier of the one Gaussian the releases compose to.
    epsilon : float
        Epsilon spent at ``delta`` by the calibration's accountant (at most the target).
    """

    def __init__(self, multipliers: dict[str, float], counts: dict[str, int], scale: float, delta: float,
                 calibration: str, target: float) -> None:
        self.multipliers, self.counts, self.scale = multipliers, counts, scale
        self.delta, self.calibration, self.target = delta, calibration, target
        self.epsilon = self.spent(counts)

    def spent(self, counts: Mapping[str, int]) -> float:
        """Epsilon at ``delta`` after ``counts[name]`` releases of each name, by the calibration's accountant."""
        pairs = tuple((self.multipliers[name], int(c)) for name, c in counts.items() if c > 0)
        if not pairs:
            return 0.0
        if self.calibration in accounting.ACCOUNTANTS:
            return accounting.composed_epsilon(self.calibration, pairs, self.delta)
        return zcdp.epsilon_of(sum(zcdp.rho_of(sigma, c) for sigma, c in pairs), self.delta)

    def record(self, sensitivities: Mapping[str, float]) -> dict[str, Any]:
        """What a model records of its privacy: target and spent epsilon, delta, calibration, every release."""
        return {"epsilon": self.epsilon, "epsilon_target": self.target, "delta": self.delta,
                "calibration": self.calibration, "neighbouring": "replace one row; row counts are public",
                "releases": [{"name": name, "count": self.counts[name], "noise_multiplier": self.multipliers[name],
                              "sensitivity": sensitivities.get(name)} for name in self.multipliers]}

    def __repr__(self) -> str:
        parts = ", ".join(f"{name}: sigma={m:.4g} x{self.counts[name]}" for name, m in self.multipliers.items())
        return f"PrivateReleases({self.calibration}: {parts}; eps'={self.epsilon:.4g}, delta={self.delta:g})"


def calibrate(epsilon: float, delta: float, calibration: str, shares: Mapping[str, tuple[float, int]]
              ) -> PrivateReleases:
    """Noise multipliers of named Gaussian releases that together meet ``(epsilon, delta)``.

    Parameters
    ----------
    epsilon, delta : float
        The target.
    calibration : {"paper", "tight", "pld", "rdp"}
        ``paper`` / ``tight``: the zCDP calibration of one Gaussian
        (:func:`fl_strategies.privacy.zcdp.noise_multiplier`, exact for a composition, whose zCDP adds up); ``pld`` /
        ``rdp``: the smallest scale the accountant certifies for the composition of every release.
    shares : mapping of str to (float, int)
        ``name -> (share, count)``: the release's share of the privacy (shares sum to 1) and how many times it
        is made.

    Raises
    ------
    ValueError
        A target the calibration cannot meet (one line).
    fl_strategies.privacy.accounting.AccountantUnavailable
        ``pld`` / ``rdp`` without ``dp-accounting``.
    """
    zcdp.check_target(epsilon, delta)
    total = sum(share for share, _ in shares.values())
    if any(not share > 0 for share, _ in shares.values()) or abs(total - 1.0) > 1e-9:
        raise ValueError(f"the privacy shares must be > 0 and sum to 1, got {dict(shares)}")
    weights = {name: math.sqrt(count / share) for name, (share, count) in shares.items()}
    start = zcdp.noise_multiplier(epsilon, delta, 1, "tight" if calibration in accounting.ACCOUNTANTS else calibration)
    if calibration in accounting.ACCOUNTANTS:
        pairs = tuple((weights[name], count) for name, (_, count) in shares.items())
        scale = accounting.composed_scale(calibration, epsilon, delta, pairs, start)
    elif calibration in ("paper", "tight"):
        scale = start
    else:
        raise ValueError(f"calibration must be one of {', '.join(zcdp.CALIBRATIONS)}; got {calibration!r}")
    if not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"epsilon = {epsilon!r} (with delta = {delta!r}) cannot be met with the {calibration} "
                         f"calibration: its noise multiplier is {scale!r}")
    result = PrivateReleases({name: scale * w for name, w in weights.items()},
                             {name: count for name, (_, count) in shares.items()}, scale, delta, calibration, epsilon)
    if not result.epsilon <= epsilon * (1 + 1e-12):
        raise ValueError(f"(epsilon, delta) = ({epsilon:g}, {delta:g}) cannot be met with the {calibration} "
                         f"calibration: it would spend epsilon' = {result.epsilon:.6g}; lower epsilon or delta, or "
                         "use dp-calibration = \"tight\" or \"pld\"")
    return result


def covariance_releases(epsilon: float, delta: float, calibration: str, center: bool) -> PrivateReleases:
    """The ``covariance`` strategy's releases for a target ``epsilon > 0``: ``gram`` and, with ``center``,
    ``row-sum`` (its share :data:`MEAN_SHARE`)."""
    shares = {"gram": (1.0 - MEAN_SHARE, 1), "row-sum": (MEAN_SHARE, 1)} if center else {"gram": (1.0, 1)}
    return calibrate(epsilon, delta, calibration, shares)


def upper_size(d: int) -> int:
    """``d (d + 1) / 2``, the entries of a packed upper triangle."""
    return d * (d + 1) // 2


def pack_upper(G: np.ndarray) -> np.ndarray:
    """The upper triangle (diagonal included) of a symmetric ``G`` (d, d), row by row: shape ``(d (d+1)/2,)``."""
    return G[np.triu_indices(G.shape[0])]


def unpack_upper(v: np.ndarray, d: int) -> np.ndarray:
    """The symmetric (d, d) matrix whose upper triangle :func:`pack_upper` packed into ``v``."""
    G = np.zeros((d, d))
    G[np.triu_indices(d)] = v
    return G + np.triu(G, 1).T


def covariance_from_sums(G: np.ndarray, S: np.ndarray | None, n: int) -> tuple[np.ndarray, np.ndarray]:
    """``(C, mu)``: ``C = G / n - mu mu^T`` with ``mu = S / n`` (``mu = 0``, ``C = G / n`` when ``S`` is ``None``).

    Parameters
    ----------
    G : ndarray of shape (d, d)
        ``sum x x^T`` over all rows (noisy under privacy).
    S : ndarray of shape (d,) or None
        ``sum x`` over all rows, when centring.
    n : int
        Number of rows (public).
    """
    if S is None:
        return G / n, np.zeros(G.shape[0])
    mu = S / n
    return G / n - np.outer(mu, mu), mu


def noise_stds(clip_norm: float, num_clients: int, releases: PrivateReleases | None) -> tuple[float, float]:
    """``(nu_G, nu_S)``: the per-entry noise std each of the ``num_clients`` clients adds to its Gram triangle
    and row sum (the central std over ``sqrt(num_clients)``; rows bounded by :func:`row_bound` of
    ``clip_norm``); ``(0, 0)`` without ``epsilon``."""
    if releases is None:
        return 0.0, 0.0
    c, share = row_bound(clip_norm), math.sqrt(num_clients)
    nu_g = gram_sensitivity(c) * releases.multipliers["gram"] / share
    nu_s = sum_sensitivity(c) * releases.multipliers["row-sum"] / share if "row-sum" in releases.multipliers else 0.0
    return nu_g, nu_s
