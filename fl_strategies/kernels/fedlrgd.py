"""FedLRGD's maths (plain numpy): pivots, the server's gradient matrices and their inverses, a client's weights
and the server's inexact gradient descent.

Called by the FedLRGD clients (:func:`client_weights`) and by the server strategy
(:mod:`fl_strategies.protocol.strategies.fedlrgd`) for everything else.
"""

from __future__ import annotations

import numpy as np

from .losses import per_sample_grads

__all__ = ["draw_pivots", "server_matrices", "invert", "client_weights", "gradient_estimate", "inexact_gd",
           "fedlrgd_gamma"]


def draw_pivots(rng: np.random.Generator, r: int, p: int) -> np.ndarray:
    """``r`` pivots iid Uniform[-1, 1]^p (distinct almost surely), shape (r, p)."""
    return rng.uniform(-1.0, 1.0, size=(r, p))


def server_matrices(loss: str, X0: np.ndarray, y0: np.ndarray, pivots: np.ndarray, mu: float) -> np.ndarray:
    """``G[i, j, k] = g_i(x^(0,j); pivot k)`` (eq. 34): ``r^2`` gradient evaluations.

    Parameters
    ----------
    X0 : ndarray of shape (r, p)
    y0 : ndarray of shape (r,)
    pivots : ndarray of shape (r, p)

    Returns
    -------
    ndarray of shape (p, r, r)
        Rows index server samples, columns index pivots.
    """
    return np.ascontiguousarray(per_sample_grads(loss, X0, y0, pivots, mu).transpose(2, 0, 1))


def invert(G: np.ndarray, mode: str = "inv", rcond: float = 1e-10) -> tuple[np.ndarray, np.ndarray]:
    """``G^(i)^{-1}`` for every coordinate ``i``, and the condition numbers.

    Parameters
    ----------
    G : ndarray of shape (p, r, r)
    mode : {"inv", "pinv"}
        ``inv``: ``numpy.linalg.inv`` (the paper); ``pinv``: singular values
        below ``rcond * sigma_max`` are dropped (a stabilised, truncated
        pseudo-inverse).
    rcond : float

    Returns
    -------
    Ginv : ndarray of shape (p, r, r)
    cond : ndarray of shape (p,)
        2-norm condition number of each ``G^(i)``.
    """
    cond = np.linalg.cond(G)
    if mode == "inv":
        return np.linalg.inv(G), cond
    if mode == "pinv":
        return np.linalg.pinv(G, rcond=rcond), cond
    raise ValueError(f"unknown g-inverse {mode!r}; expected inv or pinv")


def client_weights(loss: str, X: np.ndarray, y: np.ndarray, pivots: np.ndarray, Ginv: np.ndarray,
                   mu: float) -> np.ndarray:
    """A client's summed interpolation weights ``V_c`` (eqs. 35-39): ``r s`` gradient evaluations.

    Parameters
    ----------
    X : ndarray of shape (s, p)
    y : ndarray of shape (s,)
    pivots : ndarray of shape (r, p)
    Ginv : ndarray of shape (p, r, r)

    Returns
    -------
    ndarray of shape (p, r)
        ``V[i, :] = H[i, :] @ Ginv[i]`` with ``H[i, k] = sum_j g_i(x_j; pivot k)``.
    """
    H = per_sample_grads(loss, X, y, pivots, mu).sum(axis=0).T  # (p, r)
    return np.einsum("ik,ikl->il", H, Ginv)


def gradient_estimate(loss: str, X0: np.ndarray, y0: np.ndarray, A: np.ndarray, n: int, theta: np.ndarray,
                      mu: float) -> np.ndarray:
    """``gradhat(theta) = (1/n) sum_k (1 + A[k]) * grad f(x^(0,k); theta)`` (eq. 41): ``r`` gradients.

    Parameters
    ----------
    X0 : ndarray of shape (r, p)
    y0 : ndarray of shape (r,)
    A : ndarray of shape (r, p)
        ``A[k, i] = sum_c V_c[i, k]``.
    n : int
        ``r + sum_c s_c``.
    theta : ndarray of shape (p,)

    Returns
    -------
    ndarray of shape (p,)
    """
    Gs = per_sample_grads(loss, X0, y0, theta[None, :], mu)[:, 0, :]  # (r, p)
    return np.sum((1.0 + A) * Gs, axis=0) / n


def inexact_gd(loss: str, X0: np.ndarray, y0: np.ndarray, A: np.ndarray, n: int, theta0: np.ndarray, mu: float,
               step: float, steps: int) -> np.ndarray:
    """``S`` steps ``theta <- theta - step * gradhat(theta)`` (eq. 42).

    Returns
    -------
    ndarray of shape (S + 1, p)
        Every iterate, ``theta^(0)`` first.
    """
    out = np.empty((steps + 1, theta0.size))
    out[0] = theta = np.asarray(theta0, dtype=np.float64)
    for t in range(1, steps + 1):
        theta = theta - step * gradient_estimate(loss, X0, y0, A, n, theta, mu)
        out[t] = theta
    return out


def fedlrgd_gamma(r: int, s: int, S: int, comm_ratio: float, m: int) -> float:
    """Closed form ``Gamma(FedLRGD) = r^2 + r s + r S + phi m r`` (Theorem 2)."""
    return float(r * r + r * s + r * S + comm_ratio * m * r)
