"""FedPower's local power iterations at a client (lines 6-7 of Algorithm 2), on any ``A`` with ``A @ Z``."""

from __future__ import annotations

import numpy as np

from .linalg import orth

__all__ = ["local_power_iterations"]


def local_power_iterations(
    A, Z: np.ndarray, steps: int, noise_std: float, rng: np.random.Generator | None,
    first: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Run ``steps`` noisy power iterations from ``Z`` (lines 6-7 of Algorithm 2).

    Parameters
    ----------
    A : ndarray of shape (d, d) or fl_strategies.kernels.products.LocalOperator
        The client's local matrix ``A_i = M_i^T M_i / s_i`` (anything with ``A @ Z``).
    Z : ndarray of shape (d, r)
        Orthonormal starting basis (the server's broadcast).
    steps : int
        ``p_j >= 1`` local iterations.
    noise_std : float
        ``nu``; fresh ``N(0, nu^2)`` noise is added at *every* step.
    rng : numpy.random.Generator or None
        The client's own generator; may be ``None`` when ``noise_std == 0``.
    first : ndarray of shape (d, r), optional
        ``A @ Z`` when the caller has it already (the objective ``f_i`` needs it): the first step uses it
        instead of a product of its own (noise is still added).

    Returns
    -------
    Y : ndarray of shape (d, r)
        ``A_i Z_prev + noise`` from the last step, not orthonormalised.
    Z_prev : ndarray of shape (d, r)
        The basis multiplied in the last step (``Z`` itself when ``steps == 1``).
    """
    Z_prev = Z
    for step in range(steps):
        if step:
            Z_prev = orth(Y)
        Y = first if step == 0 and first is not None else A @ Z_prev
        if noise_std > 0:
            Y = Y + noise_std * rng.standard_normal(Y.shape)
    return Y, Z_prev
