"""Accuracy metrics of an eigenspace estimate against the exact reference.

The reference is computed by the harness from the pooled data (which no client
sends): the pooled covariance ``C = (1/n) X^T X`` (``= A A^T / n`` in the FAPS
paper's features-by-samples notation) and its leading eigenpairs from
``scipy.linalg.eigh``. Every metric here is invariant to the scale of ``C``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .linalg import orth, subspace_distance, top_eigenvectors

__all__ = ["Reference", "kkt_violation", "singular_value_error", "round_metrics"]


@dataclass(frozen=True)
class Reference:
    """Exact spectral information of the pooled covariance.

    Attributes
    ----------
    covariance : ndarray of shape (d, d)
        ``C = (1/n) X^T X``.
    values : ndarray of shape (r,)
        Its ``r`` largest eigenvalues, descending.
    vectors : ndarray of shape (d, r)
        The matching eigenvectors.
    k : int
        Target rank: ``vectors[:, :k]`` is the subspace to estimate.
    """

    covariance: np.ndarray
    values: np.ndarray
    vectors: np.ndarray
    k: int

    @classmethod
    def from_covariance(cls, C: np.ndarray, k: int, r: int) -> "Reference":
        """Build the reference from ``C`` with scipy ``eigh`` (top ``r`` eigenpairs)."""
        values, vectors = top_eigenvectors(C, r)
        return cls(C, values, vectors, k)


def kkt_violation(Z: np.ndarray, C: np.ndarray) -> float:
    """Scaled KKT violation ``||(I - Q Q^T) C Q||_F / tr(C)`` with ``Q = orth(Z)``.

    The FAPS paper's metric (Sec. 5): the Frobenius norm of the Riemannian
    gradient divided by ``||A||_F^2 = tr(A A^T)``.
    """
    Q = orth(Z)
    CQ = C @ Q
    return float(np.linalg.norm(CQ - Q @ (Q.T @ CQ)) / np.trace(C))


def singular_value_error(Z: np.ndarray, C: np.ndarray, values: np.ndarray) -> float:
    """Relative error of the Ritz singular values, ``||s - s*||_2 / ||s*||_2``.

    ``s = sqrt(eig(Q^T C Q))`` (descending, ``Q = orth(Z)``) and
    ``s* = sqrt(values)``: singular values of the data, not eigenvalues of
    ``C``, as in the FAPS paper's tables (spec pitfall P5).
    """
    Q = orth(Z)
    ritz = np.sqrt(np.clip(np.linalg.eigvalsh(Q.T @ C @ Q)[::-1], 0, None))
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
