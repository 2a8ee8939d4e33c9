"""FAPS's local maths at a client (eqs. 11-18): the multiplier factor, the masked product, the local subproblem.

``M`` is the client's ``A_i A_i^T`` as a (d, d) array or an operator with ``M @ V``
(:class:`~.products.LocalOperator`: products from the rows). The local problem needs products only; its exact
solver uses scipy ``eigh`` on a dense ``M`` and Lanczos (``eigsh``) on an operator, never forming ``H``.
"""

from __future__ import annotations

import numpy as np
import scipy.linalg

from .linalg import orth
from .products import top_eigenpairs

__all__ = ["multiplier_factor", "masked_product", "local_subproblem"]


def multiplier_factor(M: np.ndarray, X: np.ndarray) -> np.ndarray:
    """``W = -(I - X X^T) M X`` (eq. 16); the multiplier is ``Lambda = X W^T + W X^T`` (eq. 15).

    Parameters
    ----------
    M : ndarray of shape (d, d)
    X : ndarray of shape (d, p), orthonormal

    Returns
    -------
    ndarray of shape (d, p)
    """
    MX = M @ X
    return -(MX - X @ (X.T @ MX))


def _h_product(M, X, W, beta, Z, V):
    """``H V`` with ``H = M + X W^T + W X^T + beta Z Z^T``, never forming ``H``."""
    return M @ V + X @ (W.T @ V) + W @ (X.T @ V) + beta * (Z @ (Z.T @ V))


def masked_product(X: np.ndarray, W: np.ndarray, beta: float, Z: np.ndarray) -> np.ndarray:
    """``Y = Q Z`` with ``Q = beta X X^T - Lambda`` (eq. 18), from the factors only.

    Returns
    -------
    ndarray of shape (d, p)
    """
    XtZ = X.T @ Z
    return beta * (X @ XtZ) - X @ (W.T @ Z) - W @ XtZ


def local_subproblem(M, X, W, beta, Z, *, solver="ssi", tol=1e-2, min_steps=1, max_steps=100):
    """Approximate ``argmax_{X^T X = I} tr(X^T H X)`` (eqs. 11-12).

    Parameters
    ----------
    M, X, W, beta, Z
        The client's matrix, current basis and multiplier factor, penalty and
        the received estimate.
    solver : {"ssi", "exact"}
        ``ssi``: subspace iterations on ``H`` warm-started from ``X``, stopped
        by rule (26) ``||V_new - V||_F <= tol ||V_new||_F`` once at least
        ``min_steps`` were done, and after ``max_steps`` at the latest.
        ``exact``: the dominant eigenvectors of ``H`` (scipy ``eigh``; when ``M`` is an operator on rows, Lanczos
        ``eigsh`` on ``V -> H V``, exact to round-off, without forming ``H``).

    Returns
    -------
    X_new : ndarray of shape (d, p)
    steps : int
        Inner iterations performed (0 for the exact solver).
    """
    if solver == "exact":
        d, p = X.shape
        dense = M if isinstance(M, np.ndarray) else M.dense() if M.path == "gram" else None
        if dense is None:  # rows only: Lanczos on H V = M V + X (W^T V) + W (X^T V) + beta Z (Z^T V), no d x d
            _, vecs = top_eigenpairs(M, p, extra=lambda V: X @ (W.T @ V) + W @ (X.T @ V) + beta * (Z @ (Z.T @ V)))
            return vecs, 0
        H = dense + X @ W.T + W @ X.T + beta * (Z @ Z.T)
        _, vecs = scipy.linalg.eigh((H + H.T) / 2, subset_by_index=[d - p, d - 1], driver="evx")
        return vecs[:, ::-1], 0
    V = X
    for step in range(1, max_steps + 1):
        V_new = orth(_h_product(M, X, W, beta, Z, V))
        done = step >= min_steps and np.linalg.norm(V_new - V) <= tol * np.linalg.norm(V_new)
        V = V_new
        if done:
            break
    return V, step
