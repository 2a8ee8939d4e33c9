"""The central Analyze Gauss mechanism (what a trusted curator holding every row would release), in numpy.

One Gaussian release of ``(svec(sum x x^T), a sum x)`` for unit rows and the replace-one relation, at its joint
sensitivity ``sqrt(2) + a^2 / sqrt(2)`` (:func:`fl_strategies.privacy.analyze_gauss.joint_sensitivity`;
``sqrt(2)`` without centring): symmetric noise with std ``sigma D`` on the diagonal, ``sigma D / sqrt(2)`` off it,
and ``sigma D / a`` on the row sum. The noise multiplier ``sigma`` of the one Gaussian is found by
``dp-accounting``'s own ``calibrate_dp_mechanism`` with its PLD accountant, independently of fedspectral's
calibration.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from fl_strategies.kernels.linalg import top_eigenvectors
from fl_strategies.privacy.analyze_gauss import MEAN_WEIGHT, joint_sensitivity

__all__ = ["gaussian_multiplier", "central_analyze_gauss", "central_centred_dp_power"]


@lru_cache(maxsize=64)
def gaussian_multiplier(epsilon: float, delta: float) -> float:
    """The smallest noise multiplier of one Gaussian mechanism that ``dp-accounting``'s PLD certifies."""
    import dp_accounting
    from dp_accounting import mechanism_calibration

    return float(mechanism_calibration.calibrate_dp_mechanism(
        lambda: dp_accounting.pld.PLDAccountant(value_discretization_interval=1e-4),
        dp_accounting.GaussianDpEvent, epsilon, delta,
        mechanism_calibration.LowerEndpointAndGuess(0.1, 2.0), tol=1e-6))


def central_analyze_gauss(X: np.ndarray, k: int, epsilon: float, delta: float, rng: np.random.Generator,
                          center: bool = True, mean_weight: float = MEAN_WEIGHT) -> np.ndarray:
    """Top-``k`` eigenvectors (d, k) of the centred (or uncentred) covariance released by Analyze Gauss with the
    row sum weighted by ``mean_weight`` (module docstring); ``X`` (n, d) has rows of norm <= 1."""
    n, d = X.shape
    weight = mean_weight if center else 0.0
    nu = gaussian_multiplier(epsilon, delta) * joint_sensitivity(weight)
    Z = rng.standard_normal((d, d)) * nu
    E = np.triu(Z, 1) / math.sqrt(2.0)
    G = X.T @ X + E + E.T + np.diag(np.diag(Z))
    C = G / n
    if center:
        mu = (X.sum(axis=0) + rng.standard_normal(d) * nu / weight) / n
        C = C - np.outer(mu, mu)
    return top_eigenvectors(C, k)[1]


def central_centred_dp_power(X: np.ndarray, k: int, p: int, L: int, epsilon: float, delta: float,
                             rng: np.random.Generator, mean_share: float) -> np.ndarray:
    """Top-``k`` components (d, k) of centred dp-power run centrally: a noisy mean, then ``L`` noisy products
    ``G X + N(0, (2 sigma)^2)`` centred by the server (``- n mu mu^T X``), sensitivities 2 (one unit row
    replaced), multipliers from fedspectral's composed calibration
    (:func:`fl_strategies.privacy.analyze_gauss.calibrate`) with ``mean_share`` of the privacy for the mean."""
    from fl_strategies.privacy.analyze_gauss import calibrate
    from fl_strategies.privacy.dp_power_noise import project_mean
    from fl_strategies.kernels.linalg import orth

    n, d = X.shape
    releases = calibrate(epsilon, delta, "pld", {"mean": (mean_share, 1), "products": (1.0 - mean_share, L)})
    mu = project_mean((X.sum(axis=0) + 2.0 * releases.multipliers["mean"] * rng.standard_normal(d)) / n)
    Z = orth(rng.standard_normal((d, p)))
    for _ in range(L):
        Y = X.T @ (X @ Z) + 2.0 * releases.multipliers["products"] * rng.standard_normal((d, p))
        Y -= n * np.outer(mu, mu @ Z)
        Z = orth(Y)
    return np.linalg.svd(Y, full_matrices=False)[0][:, :k]
