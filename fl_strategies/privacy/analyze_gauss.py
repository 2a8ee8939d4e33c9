"""Private covariance: the distributed Analyze Gauss mechanism (Dwork, Talwar, Thakurta, Zhang 2014).

Client ``i`` holds rows ``x`` (``||x|| <= c``: ``c = 1`` under ``row-normalize``, ``c = clip-norm`` under
clipping) and releases, once, one vector: its rows divided by ``c`` (``u = x / c``, ``||u|| <= 1``) summed into
the isometric packing of their Gram matrix and, when centring, ``a`` times their row sum,

    ``v_i = (svec(sum u u^T), a sum u)``,    ``svec(M) = (M_jj, sqrt(2) M_jk for j < k)``, (d (d + 1) / 2 [+ d],)

plus its share of one Gaussian noise: with ``m`` clients each adds ``N(0, nu^2 / m)`` per entry, and Flower's
SecAgg+ sums the uploads, so the server learns only ``sum_i v_i + N(0, nu^2 I)`` (every noise must be in the sum:
a missing client stops the run). ``a`` is :data:`MEAN_WEIGHT`. The server unpacks ``G' = sum u u^T`` and
``S' = sum u`` and forms ``C' = G' / n - mu' mu'^T`` with ``mu' = S' / n``; the model is ``C = c^2 C'`` and
``mu = c mu'`` (post-processing). Every entry of the upload is on the scale of one unit row whatever ``c`` is
(at most ``max(1, a)`` per row): the Gram part and the row sum share SecAgg+'s clipping and quantisation range
without one of them rounding to nothing (the Gram matrix scales as ``c^2``, the row sum as ``c``).

Neighbouring data sets differ in one row, replaced (the row counts ``s_i`` and ``n`` are public metadata: the
server learns them at discovery, and they are not protected; add/remove-one neighbours are not supported).
Sensitivity of the one release (:func:`joint_sensitivity`). Replace ``x`` by ``y``; ``u = x / c``, ``w = y / c``,
``r = ||u|| <= 1``, ``q = ||w|| <= 1``, ``p = u . w``. ``svec`` is an isometry (``||svec(M)|| = ||M||_F``), so

    ``D^2 = ||u u^T - w w^T||_F^2 + a^2 ||u - w||^2 = r^4 + q^4 - 2 p^2 + a^2 (r^2 + q^2 - 2 p)``.

``D^2`` is concave in ``p``, largest at ``p = -a^2 / 2``: ``D^2 <= r^4 + q^4 + a^2 (r^2 + q^2) + a^4 / 2 <= 2 +
2 a^2 + a^4 / 2 = (sqrt(2) + a^2 / sqrt(2))^2``, attained by two unit rows with ``u . w = -a^2 / 2`` (possible
when ``a^2 <= 2``; shorter rows never move the release more). For ``a^2 > 2``, ``p >= -r q`` gives ``D^2 <= a^2
(r + q)^2 + (r^2 - q^2)^2``, increasing in the longer norm and convex in the shorter: at most ``4 a^2`` (``y =
-x``). So the sensitivity is ``sqrt(2) + a^2 / sqrt(2)`` (``2 a`` for ``a^2 > 2``; ``sqrt(2)`` without centring),
in the units of ``c``: ``c^2`` times it for the Gram matrix, ``c`` for the row sum. For unit rows and ``a = 1``
it is ``3 / sqrt(2) = 2.12``. Releasing the Gram matrix (sensitivity ``sqrt(2)``) and the row sum (``2 a``) as
two Gaussian mechanisms composes to one of sensitivity ``sqrt(2 + 4 a^2)``, as if both worst cases could happen
for one pair of rows (they cannot: the Gram matrix moves most for orthogonal rows, the sum for opposite ones);
and the plain upper triangle, whose sensitivity is ``sqrt(2)`` too (two basis vectors), puts ``sqrt(2)`` times
the ``svec`` noise on every off-diagonal entry (so does the paper's Algorithm 1, whose upper triangle is i.i.d.
with the std of the Frobenius sensitivity: ``sqrt(2)`` more off-diagonal noise than that Gaussian mechanism
needs). At ``a = 0.3`` the joint ``svec`` release has 0.96 times the
composed release's noise on the diagonal and the row sum and 0.68 times on the off-diagonal entries.

Calibration: the release is one Gaussian mechanism with noise multiplier ``sigma = nu / D`` (:func:`calibrate`:
for ``dp-calibration = "pld"`` ``dp-accounting``'s privacy-loss distribution, for ``paper`` / ``tight`` its zCDP
``1 / (2 sigma^2)``). :data:`MEAN_WEIGHT` trades the row sum's noise (``nu / a``) against the Gram matrix's
(``nu``), chosen by measurement (``simulations/experiments/private_pca/budget_split.py``).

A row bound ``c`` is usable when the model's scales ``c``, ``c^2`` and the noise and sensitivity in those units
are normal float64 numbers with room for ``2^53`` rows (:func:`check_row_bound`); outside that range the Gram
matrix or its noise would overflow or vanish, and the run is refused before it starts.
"""

from __future__ import annotations

import math
import sys
from typing import Any, Mapping

import numpy as np

from . import accounting, zcdp

__all__ = ["MEAN_WEIGHT", "PrivateReleases", "calibrate", "joint_sensitivity", "covariance_sensitivity",
           "pack_svec", "unpack_svec", "upper_size", "upload_vector", "covariance_from_upload",
           "covariance_from_sums", "covariance_releases", "row_bound", "check_row_bound", "noise_std",
           "noise_record", "upload_entry_bound", "release_name", "row_bound_range"]

MEAN_WEIGHT = 0.3
"""``a``, the row sum's weight in the one release when centring (module docstring): its noise is ``1 / a`` times
the Gram diagonal's."""


def row_bound(clip_norm: float) -> float:
    """``c``, the public bound on a row's L2 norm: ``clip_norm`` (``clip-norm``) when set, else 1
    (``row-normalize``)."""
    return float(clip_norm or 1.0)


def joint_sensitivity(weight: float) -> float:
    """L2 sensitivity of ``(svec(sum u u^T), weight sum u)`` when one row ``u`` of norm <= 1 is replaced.

    ``sqrt(2) + weight^2 / sqrt(2)`` for ``weight^2 <= 2``, else ``2 weight`` (module docstring); ``sqrt(2)`` for
    ``weight = 0`` (the Gram matrix alone).
    """
    a2 = weight * weight
    return math.sqrt(2.0) + a2 / math.sqrt(2.0) if a2 <= 2.0 else 2.0 * weight


def covariance_sensitivity(center: bool) -> float:
    """The sensitivity of the ``covariance`` release: :func:`joint_sensitivity` of :data:`MEAN_WEIGHT` with
    ``center``, of 0 without."""
    return joint_sensitivity(MEAN_WEIGHT if center else 0.0)


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

    A Gaussian composition is again a Gaussian: with shares ``f_j`` (summing to 1) of the privacy (``1 /
    sigma^2``), release ``j`` repeated ``count_j`` times gets the multiplier ``t sqrt(count_j / f_j)``, and the
    whole is one Gaussian of multiplier ``t``, which the calibration finds (``dp-power``'s mean and products).

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
    """The ``covariance`` strategy's one release for a target ``epsilon > 0``: ``gram-and-row-sum`` with
    ``center``, else ``gram`` (module docstring)."""
    return calibrate(epsilon, delta, calibration, {release_name(center): (1.0, 1)})


def release_name(center: bool) -> str:
    """The name of the ``covariance`` release in the model's privacy record."""
    return "gram-and-row-sum" if center else "gram"


def upper_size(d: int) -> int:
    """``d (d + 1) / 2``, the entries of a packed upper triangle."""
    return d * (d + 1) // 2


def pack_svec(G: np.ndarray) -> np.ndarray:
    """``svec(G)``: the upper triangle (diagonal included) of a symmetric ``G`` (d, d), row by row, off-diagonal
    entries times ``sqrt(2)``, shape ``(d (d+1)/2,)``; ``||svec(G)|| = ||G||_F``."""
    i, j = np.triu_indices(G.shape[0])
    return G[i, j] * np.where(i == j, 1.0, math.sqrt(2.0))


def unpack_svec(v: np.ndarray, d: int) -> np.ndarray:
    """The symmetric (d, d) matrix ``G`` with ``pack_svec(G) = v``."""
    i, j = np.triu_indices(d)
    G = np.zeros((d, d))
    G[i, j] = v * np.where(i == j, 1.0, 1.0 / math.sqrt(2.0))
    return G + np.triu(G, 1).T


def upload_vector(gram: np.ndarray, row_sum: np.ndarray | None, bound: float) -> np.ndarray:
    """A client's release without its noise: ``(svec(G_i / c^2), a S_i / c)`` (module docstring).

    Parameters
    ----------
    gram : ndarray of shape (d, d)
        ``G_i = sum x x^T`` over the client's rows (norm <= ``bound``).
    row_sum : ndarray of shape (d,) or None
        ``S_i = sum x`` when centring.
    bound : float
        ``c`` (:func:`row_bound`).

    Returns
    -------
    ndarray of shape (d (d + 1) / 2,) or (d (d + 1) / 2 + d,)
    """
    parts = [pack_svec(gram / (bound * bound))]
    if row_sum is not None:
        parts.append(MEAN_WEIGHT * (row_sum / bound))
    return np.concatenate(parts)


def upload_entry_bound(center: bool) -> float:
    """The largest entry one row of norm <= ``c`` adds to :func:`upload_vector`: ``u_j^2 <= 1``, ``sqrt(2)
    |u_j u_k| <= 1 / sqrt(2)`` and ``a |u_j| <= a``."""
    return max(1.0, MEAN_WEIGHT) if center else 1.0


def covariance_from_upload(total: np.ndarray, d: int, n: int, center: bool) -> tuple[np.ndarray, np.ndarray]:
    """``(C', mu')`` in units of ``c`` (``C = c^2 C'``, ``mu = c mu'``) from the sum of the uploads.

    Parameters
    ----------
    total : ndarray of shape (d (d + 1) / 2,) or (d (d + 1) / 2 + d,)
        ``sum_i`` of the clients' :func:`upload_vector` (plus the noise).
    d, n : int
        Dimension and number of rows (public).
    center : bool
        Whether ``total`` ends with the weighted row sum.
    """
    t = upper_size(d)
    return covariance_from_sums(unpack_svec(total[:t], d), total[t:] / MEAN_WEIGHT if center else None, n)


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


def noise_std(num_clients: int, releases: PrivateReleases | None, center: bool) -> float:
    """``nu / sqrt(m)``: the std each of the ``num_clients`` clients adds to every entry of its upload (the
    central std ``nu = sigma D``, in units of ``c``, over ``sqrt(num_clients)``); 0 without ``epsilon``."""
    if releases is None:
        return 0.0
    return covariance_sensitivity(center) * releases.scale / math.sqrt(num_clients)


def noise_record(bound: float, releases: PrivateReleases, center: bool) -> dict[str, float]:
    """The central noise std per entry, in the data's units: Gram diagonal ``c^2 nu``, off-diagonal ``c^2 nu /
    sqrt(2)`` and, with ``center``, row sum ``c nu / a``."""
    nu = covariance_sensitivity(center) * releases.scale
    stds = {"gram-diagonal": bound * bound * nu, "gram-off-diagonal": bound * bound * nu / math.sqrt(2.0)}
    if center:
        stds["row-sum"] = bound * nu / MEAN_WEIGHT
    return stds


_LOW = sys.float_info.min / sys.float_info.epsilon
"""The smallest magnitude kept with every bit of precision down to ``2^-52`` of it (``2^-970``)."""
_HIGH = sys.float_info.max / 2.0 ** 53
"""The largest magnitude that ``2^53`` rows' worth of it still fits in float64 (``2^971``)."""


def row_bound_range(releases: PrivateReleases | None, center: bool) -> tuple[float, float]:
    """``(lo, hi)``: the row bounds ``c`` for which :func:`check_row_bound` accepts a run.

    ``c^2`` times each of 1 (a unit row's Gram entry), the sensitivity and the noise std of the Gram matrix, and
    with ``center`` ``c`` times 1 and the row sum's noise std, lie in ``[2^-970, 2^971]`` (module docstring).
    """
    D = covariance_sensitivity(center)
    nu = D * releases.scale if releases is not None else 0.0
    quad = [1.0, D] + ([nu] if nu > 0 else [])
    lin = [1.0] + ([nu / MEAN_WEIGHT] if nu > 0 and center else [])
    lo = max(math.sqrt(_LOW / min(quad)), _LOW / min(lin))
    hi = min(math.sqrt(_HIGH / max(quad)), _HIGH / max(lin))
    return lo, hi


def check_row_bound(bound: float, releases: PrivateReleases | None, center: bool) -> None:
    """Refuse a row bound ``c`` whose Gram scale ``c^2``, sensitivity or noise overflows or underflows float64.

    Raises
    ------
    ValueError
        One line naming the range of :func:`row_bound_range`.
    """
    lo, hi = row_bound_range(releases, center)
    if not lo <= bound <= hi:
        raise ValueError(f"{bound!r} is outside [{lo:.3g}, {hi:.3g}]: the Gram matrix scales as c^2 = "
                         f"{bound * bound:.3g}, and with it its sensitivity and noise would "
                         f"{'overflow' if bound > 1 else 'underflow'} float64 (scale the data instead)")
