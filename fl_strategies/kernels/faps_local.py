"""FAPS's local maths at a client (eqs. 11-18): the multiplier factor, the masked product, the local subproblem,
and one client round built from them (:func:`faps_client_round`, with its settings in :class:`FapsOptions`).

``M`` is the client's ``A_i A_i^T`` as a (d, d) array or an operator with ``M @ V``
(:class:`~.products.LocalOperator`: products from the rows). The local problem needs products only; its exact
solver uses scipy ``eigh`` on a dense ``M`` and Lanczos (``eigsh``) on an operator, never forming ``H``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.linalg

from .linalg import orth
from .products import top_eigenpairs

__all__ = ["multiplier_factor", "masked_product", "local_subproblem", "FapsOptions", "FapsState", "faps_client_round"]


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


@dataclass(frozen=True)
class FapsOptions:
    """The settings of a client's FAPS round (run-config keys ``penalty-*``, ``inner-*``).

    Attributes
    ----------
    penalty_init : float
        ``c`` of ``beta_0 = c ||A_i||_2^2``.
    penalty_mu, penalty_theta : float
        The penalty rule: every fifth round, ``beta`` grows by ``1 + penalty_theta`` when the distance to the
        received estimate shrank by less than ``1 + penalty_mu``.
    solver : str
        The local subproblem's solver (:func:`local_subproblem`).
    inner_steps : int
        A fixed number of inner iterations; 0 for a tolerance.
    inner_tol : float
        The inner tolerance (with ``inner_steps = 0``).
    inner_min_steps, inner_max_steps : int
        Bounds on the inner iterations (with ``inner_steps = 0``).
    """

    penalty_init: float
    penalty_mu: float
    penalty_theta: float
    solver: str
    inner_steps: int
    inner_tol: float
    inner_min_steps: int
    inner_max_steps: int


class FapsState(dict):
    """A client's private FAPS state: ``X``, ``W`` (d x p), ``beta``, ``dhist`` (list of d_i)."""


def faps_client_round(M: np.ndarray, Z: np.ndarray, state: FapsState | None, options: FapsOptions):
    """One round of FAPS at a client (lines 1-19 of the spec's pseudo-code).

    Parameters
    ----------
    M : ndarray of shape (d, d) or fl_strategies.kernels.products.LocalOperator
        ``A_i A_i^T``, or an operator applying it (products from the client's rows; then the exact solver
        and ``||M||_2`` use Lanczos, scipy ``eigsh``, and no ``d x d`` matrix is formed).
    Z : ndarray of shape (d, p)
        The received estimate ``Z_k``.
    state : FapsState or None
        The state left by the previous round (``None`` in the first). The
        paper's iteration index ``k`` is the number of rounds the client has
        done, ``len(state["dhist"])``.
    options : FapsOptions
        The penalty rule and the inner solver's settings.

    Returns
    -------
    Y : ndarray of shape (d, p)
        The message ``Q_i Z_k``.
    f : float
        ``tr(Z^T M Z)`` for the stopping rule.
    state : FapsState
        The state to keep for the next round.
    steps : int
        Inner iterations used.
    """
    p = Z.shape[1]
    if state is None:  # one-off set-up: beta_0 = c ||A_i||_2^2, X_0 = Z_0, W_0 by (16)
        norm2 = (float(scipy.linalg.eigh(M, eigvals_only=True, subset_by_index=[M.shape[0] - 1] * 2)[0])
                 if isinstance(M, np.ndarray) else M.largest_eigenvalue())
        state = FapsState(X=Z.copy(), W=multiplier_factor(M, Z), beta=options.penalty_init * norm2, dhist=[0.0])
        k = 0
    else:
        k = len(state["dhist"])
    f = float(np.sum(Z * (M @ Z)))
    X, W, beta, dhist = state["X"], state["W"], state["beta"], list(state["dhist"])
    if k >= 1:
        dhist.append(float(np.sqrt(max(0.0, 2.0 * (p - np.linalg.norm(X.T @ Z) ** 2)))))
        if k % 5 == 0 and dhist[k - 5] <= (1.0 + options.penalty_mu) * dhist[k]:
            beta *= 1.0 + options.penalty_theta
    fixed = options.inner_steps
    X, steps = local_subproblem(M, X, W, beta, Z, solver=options.solver,
                                tol=0.0 if fixed else options.inner_tol,
                                min_steps=fixed or options.inner_min_steps,
                                max_steps=fixed or max(options.inner_max_steps, options.inner_min_steps))
    W = multiplier_factor(M, X)
    return masked_product(X, W, beta, Z), f, FapsState(X=X, W=W, beta=beta, dhist=dhist), steps
