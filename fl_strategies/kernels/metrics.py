"""Accuracy metrics of an eigenspace estimate against the exact reference.

The reference is computed by the harness from the pooled data (which no client
sends): the matrix the run estimates, :func:`pooled_covariance` (``C = (1/n)
X^T X``, ``= A A^T / n`` in the FAPS paper's features-by-samples notation, or
its centred form with ``center = true``), and its leading eigenpairs from
``scipy.linalg.eigh``; or, for wide data, from the pooled rows ``X`` (n, d)
alone by a thin SVD, ``C`` then being the operator ``Q -> X_c^T (X_c Q) / n``
(:class:`PooledRows`, no ``d x d`` array). Every metric here is invariant to
the scale of ``C``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

import numpy as np
import scipy.sparse as sp

from .linalg import orth, subspace_distance, top_eigenvectors
from .standardize import scales

__all__ = ["Reference", "PooledRows", "pooled_covariance", "kkt_violation", "singular_value_error",
           "round_metrics"]


class PooledRows:
    """``C = X_c^T X_c / n`` as an operator of the pooled rows ``X`` (n, d), centred (``X_c = X - mean``) with
    ``center`` and its columns standardised with ``scale`` (:func:`fl_strategies.kernels.standardize.column_scale`):
    ``C @ Q`` and :meth:`trace`, the two things the metrics need, without a ``d x d`` array."""

    def __init__(self, X: np.ndarray, center: bool, scale: str = "false") -> None:
        X = np.asarray(X, dtype=np.float64)
        mean = X.mean(axis=0)
        self.X = X - mean if center else X
        sd = scales(scale, np.mean(self.X * self.X, axis=0), mean, X.shape[0])
        if sd is not None:
            if not center:
                raise ValueError("columns are scaled about the mean: scale needs center")
            self.X = self.X / sd
        self.shape = (X.shape[1], X.shape[1])

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
        The matrix the run estimates (:func:`pooled_covariance`), or, for wide data, it as an operator.
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
    def from_rows(cls, blocks: Iterable, k: int, r: int, *, center: bool, scale: str = "false") -> "Reference":
        """Build the reference from the run's preprocessed rows (see :func:`pooled_covariance`)."""
        return cls.from_covariance(pooled_covariance(blocks, center=center, scale=scale), k, r)

    @classmethod
    def from_thin_svd(cls, X: np.ndarray, k: int, r: int, *, center: bool, scale: str = "false") -> "Reference":
        """The same reference from the pooled rows ``X`` (n, d) by a thin SVD (scipy), without a ``d x d`` array.

        ``X_c = U S V^T`` gives the eigenpairs ``(S^2 / n, V)`` of ``C = X_c^T X_c / n``; O(n^2 d) time, O(n d)
        memory: what wide data (``n < d``) need. With ``r > min(n, d)`` the missing eigenvalues are 0 and their
        vectors complete ``V`` to ``r`` orthonormal columns.
        """
        import scipy.linalg

        C = PooledRows(X, center, scale)
        _, S, Vt = scipy.linalg.svd(C.X, full_matrices=False)
        values, vectors = S[:r] ** 2 / C.X.shape[0], Vt[:r].T
        if vectors.shape[1] < r:
            extra = np.random.default_rng(0).standard_normal((C.X.shape[1], r - vectors.shape[1]))
            extra -= vectors @ (vectors.T @ extra)
            vectors = np.hstack([vectors, np.linalg.qr(extra)[0]])
            values = np.concatenate([values, np.zeros(r - len(values))])
        return cls(C, values, vectors, k)


def pooled_covariance(blocks: Iterable, *, center: bool, scale: str = "false") -> np.ndarray:
    """The second-moment matrix an eigenspace run estimates, from its preprocessed rows.

    The one definition every exact reference uses, so that an accuracy figure
    measures the estimate against what the run computes: with ``center`` the
    covariance about the mean ``mu`` of all rows,
    ``C = (1/n) sum_j (x_j - mu)(x_j - mu)^T`` (scikit-learn's PCA up to the
    factor ``n / (n - 1)``, which changes no eigenvector), else the papers'
    uncentred ``C = (1/n) X^T X``. The rows are those the clients hold, after
    the run's preprocessing (``row-normalize``). With ``scale`` (which needs
    ``center``) the columns are standardised as the run does
    (:mod:`fl_strategies.kernels.standardize`: population standard deviation, 1 for a
    constant column), ``D^{-1} C D^{-1}``: scikit-learn's ``StandardScaler``
    then ``PCA``.

    The blocks are combined as Chan et al.'s pairwise variance does (each
    block centred about its own mean, the means' spread added), so that no
    ``sum x x^T - n mu mu^T`` cancellation loses digits on rows far from 0.

    Parameters
    ----------
    blocks : iterable of ndarray or scipy sparse matrix, each of shape (s_i, d)
        The rows, in any number of blocks (a lazy data set: one partition at a time).
    center : bool
        The run's ``center`` key.
    scale : bool or str
        The run's ``scale`` key (:func:`~fl_strategies.kernels.standardize.scales`).

    Returns
    -------
    ndarray of shape (d, d)

    Raises
    ------
    ValueError
        If there are no rows or the blocks' widths differ.
    """
    n, mean, scatter = 0, None, None
    for M in blocks:
        s = M.shape[0]
        if s == 0:
            continue
        if sp.issparse(M):
            m = np.asarray(M.sum(axis=0)).ravel() / s
            G = np.asarray((M.T @ M).todense(), dtype=np.float64)
            if center:
                G -= s * np.outer(m, m)
        else:
            M = np.asarray(M, dtype=np.float64)
            m = M.mean(axis=0)
            R = M - m if center else M
            G = R.T @ R
        if scatter is None:
            n, mean, scatter = s, m, G
            continue
        if G.shape != scatter.shape:
            raise ValueError(f"row blocks of {scatter.shape[0]} and {G.shape[0]} columns")
        if center:
            gap = m - mean
            scatter += G + np.outer(gap, gap) * (n * s / (n + s))
            mean = mean + gap * (s / (n + s))
        else:
            scatter += G
        n += s
    if scatter is None:
        raise ValueError("no rows to compute the covariance of")
    C = scatter / n
    sd = scales(scale, np.diag(C), mean, n)
    if sd is not None:
        if not center:
            raise ValueError("columns are scaled about the mean: scale needs center")
        C = C / np.outer(sd, sd)
    return C


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
    ``C``, as in the FAPS paper's tables (so the numbers compare with them).
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
