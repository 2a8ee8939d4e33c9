"""Losses for federated ERM (FedLRGD / FedAve): smooth in the parameter and in the data.

A sample is a row ``[x, y]`` of a supervised data set: ``p`` features and the
label in the last column (``d = p + 1``, the paper's convention that ``d``
counts the label). The parameter is ``theta`` in ``R^p`` (no intercept).

``logistic``
    The paper's soft-label l2-regularised cross-entropy (App. A, eq. 66):
    ``f = y log(1 + e^{-t}) + (1 - y) log(1 + e^{t}) + (mu/2) ||theta||^2``
    with ``t = theta^T x``, ``y`` in [0, 1]; gradient ``(sigmoid(t) - y) x + mu theta``.
``ridge``
    ``f = 1/2 (theta^T x - y)^2 + (mu/2) ||theta||^2``; gradient
    ``(theta^T x - y) x + mu theta``. Each partial derivative has exact rank
    ``p + 1`` as a function of (sample, parameter), so FedLRGD with ``r = p + 1``
    is exact.

``mu`` is the run-config key ``l2``. Every function is vectorised: per-sample
gradients at many parameters at once, float64 throughout.
"""

from __future__ import annotations

import numpy as np
from scipy.special import expit

__all__ = ["LOSSES", "split_xy", "per_sample_grads", "objective", "full_gradient", "smoothness", "minimise"]

LOSSES = ("logistic", "ridge")


def split_xy(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Features and labels of rows whose last column is the label.

    Parameters
    ----------
    rows : ndarray of shape (n, p + 1)

    Returns
    -------
    X : ndarray of shape (n, p)
    y : ndarray of shape (n,)
    """
    rows = np.asarray(rows, dtype=np.float64)
    if rows.ndim != 2 or rows.shape[1] < 2:
        raise ValueError(f"supervised rows need at least 2 columns (features, label), got shape {rows.shape}")
    return rows[:, :-1], rows[:, -1]


def _residual(loss: str, Z: np.ndarray, y: np.ndarray) -> np.ndarray:
    if loss == "logistic":
        return expit(Z) - y[:, None]
    if loss == "ridge":
        return Z - y[:, None]
    raise ValueError(f"unknown loss {loss!r}; expected one of {', '.join(LOSSES)}")


def per_sample_grads(loss: str, X: np.ndarray, y: np.ndarray, thetas: np.ndarray, mu: float) -> np.ndarray:
    """Gradients of every sample's loss at every parameter.

    Parameters
    ----------
    loss : {"logistic", "ridge"}
    X : ndarray of shape (n, p)
    y : ndarray of shape (n,)
    thetas : ndarray of shape (P, p)
    mu : float

    Returns
    -------
    ndarray of shape (n, P, p)
        ``out[j, k, i] = g_i(x_j; theta_k)``.
    """
    thetas = np.atleast_2d(thetas)
    R = _residual(loss, X @ thetas.T, y)  # (n, P)
    return R[:, :, None] * X[:, None, :] + mu * thetas[None, :, :]


def objective(loss: str, X: np.ndarray, y: np.ndarray, theta: np.ndarray, mu: float) -> float:
    """``F(theta) = (1/n) sum_j f(x_j; theta)``.

    Parameters
    ----------
    X : ndarray of shape (n, p)
    y : ndarray of shape (n,)
    theta : ndarray of shape (p,)
    """
    t = X @ theta
    if loss == "logistic":
        data = y * np.logaddexp(0.0, -t) + (1.0 - y) * np.logaddexp(0.0, t)
    elif loss == "ridge":
        data = 0.5 * (t - y) ** 2
    else:
        raise ValueError(f"unknown loss {loss!r}; expected one of {', '.join(LOSSES)}")
    return float(np.mean(data) + 0.5 * mu * theta @ theta)


def full_gradient(loss: str, X: np.ndarray, y: np.ndarray, theta: np.ndarray, mu: float) -> np.ndarray:
    """``grad F(theta)``, shape (p,)."""
    r = _residual(loss, (X @ theta)[:, None], y)[:, 0]
    return X.T @ r / X.shape[0] + mu * theta


def smoothness(loss: str, p: int, mu: float) -> float:
    """Uniform smoothness constant ``L1`` of ``f`` for features in ``[0, 1]^p`` (the paper's data box).

    ``logistic``: the paper's ``(d - 1)/2 + mu = p/2 + mu`` (eq. 68, valid, 2x loose);
    ``ridge``: ``max ||x||^2 + mu = p + mu``.
    """
    if loss == "logistic":
        return p / 2.0 + mu
    if loss == "ridge":
        return p + mu
    raise ValueError(f"unknown loss {loss!r}; expected one of {', '.join(LOSSES)}")


def minimise(loss: str, X: np.ndarray, y: np.ndarray, mu: float, tol: float = 1e-13) -> np.ndarray:
    """The minimiser ``theta*`` of ``F`` to ``||grad F|| <= tol`` (closed form for ridge, Newton for logistic).

    Parameters
    ----------
    X : ndarray of shape (n, p)
    y : ndarray of shape (n,)

    Returns
    -------
    ndarray of shape (p,)
    """
    n, p = X.shape
    if loss == "ridge":
        return np.linalg.solve(X.T @ X / n + mu * np.eye(p), X.T @ y / n)
    if loss != "logistic":
        raise ValueError(f"unknown loss {loss!r}; expected one of {', '.join(LOSSES)}")
    theta = np.zeros(p)
    for _ in range(100):  # F is mu-strongly convex with a Lipschitz Hessian: Newton converges quadratically
        g = full_gradient(loss, X, y, theta, mu)
        if np.linalg.norm(g) <= tol:
            break
        s = expit(X @ theta)
        H = (X * (s * (1 - s))[:, None]).T @ X / n + mu * np.eye(p)
        theta = theta - np.linalg.solve(H, g)
    return theta
