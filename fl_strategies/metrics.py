"""Accuracy metrics of an eigenspace estimate against the exact reference.

The reference is computed by the harness from the pooled data (which no client
sends): the pooled covariance ``C = (1/n) X^T X`` (``= A A^T / n`` in the FAPS
paper's features-by-samples notation) and its leading eigenpairs from
``scipy.linalg.eigh``; or, for wide data, from the pooled rows ``X`` (n, d)
alone by a thin SVD, ``C`` then being the operator ``Q -> X^T (X Q) / n``
(:class:`PooledRows`, no ``d x d`` array). Every metric here is invariant to
the scale of ``C``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .linalg import orth, subspace_distance, top_eigenvectors

__all__ = ["Reference", "PooledRows", "kkt_violation", "singular_value_error", "round_metrics"]


class PooledRows:
    """``C = X^T X / n`` as an operator of the pooled rows ``X`` (n, d): ``C @ Q`` and :meth:`trace`."""

    def __init__(self, X: np.ndarray) -> None:
        self.X = np.asarray(X, dtype=np.float64)
        self.shape = (self.X.shape[1], self.X.shape[1])

    def __matmul__(self, Q: np.ndarray) -> np.ndarray:
        return self.X.T @ (self.X @ Q) / self.X.shape[0]

    def trace(self) -> float:
        return float(np.sum(self.X * self.X) / self.X.shape[0])


def _trace(C) -> float:
    return float(np.trace(C)) if isinstance(C, np.ndarray) else C.trace()


@dataclass(frozen=True)
class Reference:
    """Exact spectral information of the pooled covariance.

    Attributes
    ----------
    covariance : ndarray of shape (d, d) or PooledRows
        ``C = (1/n) X^T X``.
    values : ndarray of shape (r,)
        Its ``r`` largest eigenvalues, descending.
    vectors : ndarray of shape (d, r)
        The matching eigenvectors.
    k : int
        Target rank: ``vectors[:, :k]`` is the subspace to estimate.
    """

    covariance: Any
    values: np.ndarray
    vectors: np.ndarray
    k: int

    @classmethod
    def from_covariance(cls, C: np.ndarray, k: int, r: int) -> "Reference":
        """Build the reference from ``C`` with scipy ``eigh`` (top ``r`` eigenpairs)."""
        values, vectors = top_eigenvectors(C, r)
        return cls(C, values, vectors, k)

    @classmethod
    def from_rows(cls, X: np.ndarray, k: int, r: int) -> "Reference":
        """Build the reference from the pooled rows ``X`` (n, d) by a thin SVD (scipy), without a ``d x d`` array.

        ``X = U S V^T`` gives the eigenpairs ``(S^2 / n, V)`` of ``C = X^T X / n``; O(n^2 d) time, O(n d) memory.
        With ``r > min(n, d)`` the missing eigenvalues are 0 and their vectors complete ``V`` to ``r`` columns.
        """
        import scipy.linalg

        X = np.asarray(X, dtype=np.float64)
        _, S, Vt = scipy.linalg.svd(X, full_matrices=False)
        values, vectors = S[:r] ** 2 / X.shape[0], Vt[:r].T
        if vectors.shape[1] < r:
            extra = np.random.default_rng(0).standard_normal((X.shape[1], r - vectors.shape[1]))
            extra -= vectors @ (vectors.T @ extra)
            vectors = np.hstack([vectors, np.linalg.qr(extra)[0]])
            values = np.concatenate([values, np.zeros(r - len(values))])
        return cls(PooledRows(X), values, vectors, k)


def kkt_violation(Z: np.ndarray, C: np.ndarray) -> float:
    """Scaled KKT violation ``||(I - Q Q^T) C Q||_F / tr(C)`` with ``Q = orth(Z)``.

    The FAPS paper's metric (Sec. 5): the Frobenius norm of the Riemannian
    gradient divided by ``||A||_F^2 = tr(A A^T)``.
    """
    Q = orth(Z)
    CQ = C @ Q
    return float(np.linalg.norm(CQ - Q @ (Q.T @ CQ)) / _trace(C))


def singular_value_error(Z: np.ndarray, C: np.ndarray, values: np.ndarray) -> float:
    """Relative error of the Ritz singular values, ``||s - s*||_2 / ||s*||_2``.

    ``s = sqrt(eig(Q^T C Q))`` (descending, ``Q = orth(Z)``) and
    ``s* = sqrt(values)``: singular values of the data, not eigenvalues of
    ``C``, as in the FAPS paper's tables (spec pitfall P5).
    """
    Q = orth(Z)
    QCQ = Q.T @ C @ Q if isinstance(C, np.ndarray) else Q.T @ (C @ Q)
    ritz = np.sqrt(np.clip(np.linalg.eigvalsh(QCQ)[::-1], 0, None))
    exact = np.sqrt(np.clip(values[: Q.shape[1]], 0, None))
    return float(np.linalg.norm(ritz - exact) / np.linalg.norm(exact))


def round_metrics(Z: np.ndarray, reference: Reference | None) -> dict[str, float | None]:
    """All accuracy metrics of one estimate (``None`` without a reference)."""
    if reference is None:
        return {"subspace_distance": None, "subspace_distance_first_k": None, "kkt_violation": None,
                "singular_value_error": None}
    U_k = reference.vectors[:, : reference.k]
    return {
        "subspace_distance": subspace_distance(Z, U_k),
        "subspace_distance_first_k": subspace_distance(Z[:, : reference.k], U_k),
        "kkt_violation": kkt_violation(Z, reference.covariance),
        "singular_value_error": singular_value_error(Z, reference.covariance, reference.values),
    }
