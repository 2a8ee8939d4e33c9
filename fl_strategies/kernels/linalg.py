"""Numerical kernels shared by the server and the clients.

Every algorithm in :mod:`fl_strategies` builds on these few functions, so each
piece of linear algebra lives in exactly one place.
"""

from __future__ import annotations

import numpy as np

__all__ = ["orth", "tall_norm2", "procrustes", "subspace_distance", "ritz_rotation", "ritz_pairs", "leading_changes",
           "leading_column_changes",
           "top_eigenvectors", "gaussian_basis", "into_unit_ball"]


SCIPY_QR_SIZE = 1 << 18
"""Entries of a block from which :func:`orth` factorises with scipy (a genomic-width block, e.g. 32,768 x 8);
below it with numpy, so that a small node's process does not import scipy (0.3 s) for a QR of microseconds."""


def orth(Y: np.ndarray) -> np.ndarray:
    """Orthonormal basis of the column space of ``Y`` with a unique sign convention.

    The Q factor of the thin QR factorisation ``Y = Q R``, with the signs chosen
    so that ``diag(R) >= 0`` (``sign(0)`` is taken as ``+1``). This makes the
    basis a deterministic function of ``Y``, which plain averaging of local
    bases implicitly relies on (two clients with the same span must return the
    same basis, or their average is not a basis of that span).

    Parameters
    ----------
    Y : ndarray of shape (d, r)
        Matrix with ``d >= r``.

    Returns
    -------
    Q : ndarray of shape (d, r)
        ``Q.T @ Q = I_r`` and ``span(Q) = span(Y)`` when ``Y`` has full column rank.
    """
    if np.size(Y) >= SCIPY_QR_SIZE:  # scipy's economic QR, the same LAPACK factorisation as numpy's "reduced"
        import scipy.linalg  # one, 2.5x faster on a tall block (188,000 x 8: 14 ms against 35 ms); NaN propagate

        Q, R = scipy.linalg.qr(Y, mode="economic", check_finite=False)
    else:
        Q, R = np.linalg.qr(Y, mode="reduced")
    signs = np.where(np.diag(R) < 0, -1.0, 1.0)
    return Q * signs


def procrustes(Z: np.ndarray, Z_ref: np.ndarray) -> np.ndarray:
    """Orthogonal Procrustes rotation aligning ``Z`` to ``Z_ref``.

    Solves ``D = argmin_{D in O(r)} ||Z D - Z_ref||_F``: with the SVD
    ``Z.T @ Z_ref = W1 diag(s) W2^T``, the minimiser is ``D = W1 @ W2^T``
    (FedPower, eq. 3.2; swapping the arguments gives the transpose, the wrong
    rotation).

    Parameters
    ----------
    Z, Z_ref : ndarray of shape (d, r)
        Orthonormal bases.

    Returns
    -------
    D : ndarray of shape (r, r)
        Orthogonal matrix.
    """
    W1, _, W2t = np.linalg.svd(Z.T @ Z_ref)
    return W1 @ W2t


def subspace_distance(Z: np.ndarray, U_k: np.ndarray, orthonormal: bool = False) -> float:
    """Sine of the largest principal angle between ``U_k`` and ``span(Z)``.

    Computes ``sin theta_k(Z, U_k) = ||(I - Q Q^T) U_k||_2`` with
    ``Q = orth(Z)`` (FedPower, Theorem 1). With ``r > k`` this is the
    distance of the true k-dimensional eigenspace from the estimated
    r-dimensional one; ``||Q Q^T - U_k U_k^T||_2`` would be identically 1
    there (an ``r``-dimensional projector minus a ``k``-dimensional one has
    norm 1). The residual is formed explicitly, so the result is
    accurate down to about ``1e-16`` rather than ``1e-8`` (which is what
    ``sqrt(1 - cos^2)`` would give).

    Parameters
    ----------
    Z : ndarray of shape (d, r)
        Estimate; need not be orthonormal.
    U_k : ndarray of shape (d, k)
        Orthonormal reference basis, ``k <= r``.
    orthonormal : bool
        ``Z`` is orthonormal to round-off already (Ritz vectors of an orthonormal basis): used as it is, without
        the QR (at genomic ``d`` the QR is most of the cost); the distance is then accurate down to ``Z``'s own
        departure from orthonormality (a few units of ``1e-16`` times ``sqrt(d r)``).

    Returns
    -------
    float
        In ``[0, 1]``.
    """
    Q = Z if orthonormal else orth(Z)
    residual = U_k - Q @ (Q.T @ U_k)
    return float(min(1.0, tall_norm2(residual)))


def tall_norm2(R: np.ndarray) -> float:
    """The spectral norm of a tall ``R`` (d, k), ``k << d``: the square root of the largest eigenvalue of the small
    Gram ``R^T R`` (k, k), accurate to round-off relative to the norm itself (the Gram is formed from ``R``, not
    from a difference of Grams), and an order of magnitude faster than the SVD of ``R`` at genomic ``d``."""
    R = np.asarray(R, dtype=np.float64)
    size = float(np.abs(R).max(initial=0.0))
    if size == 0.0 or not np.isfinite(size):
        return 0.0 if size == 0.0 else float(np.linalg.norm(R, 2))
    R = R / size  # no overflow or underflow in the Gram
    return size * float(np.sqrt(max(float(np.linalg.eigvalsh(R.T @ R)[-1]), 0.0)))


def ritz_rotation(gram: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The eigenpairs of a projected matrix ``gram = Z^T C Z``, in descending order: the one Rayleigh-Ritz step
    of the project (:func:`ritz_pairs`, :func:`fl_strategies.kernels.krylov.rayleigh_ritz`).

    Parameters
    ----------
    gram : ndarray of shape (m, m)
        ``Z^T C Z`` for an orthonormal ``Z`` (up to a positive factor; symmetrised here).

    Returns
    -------
    values : ndarray of shape (m,)
        Ritz values, descending (in the units of ``gram``).
    U : ndarray of shape (m, m)
        Orthogonal; column ``j`` belongs to ``values[j]``, so the Ritz vectors are ``Z U``.
    """
    values, U = np.linalg.eigh((gram + gram.T) / 2.0)
    return values[::-1], U[:, ::-1]


def ritz_pairs(Z: np.ndarray, gram: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rayleigh-Ritz on the basis ``Z``: the Ritz values and vectors of ``C`` in ``span(Z)``, in descending order.

    ``gram = Z^T C Z`` (``r x r``, any positive multiple of it: the clients' summed ``s_i Z^T A_i Z``) is
    diagonalised, ``gram = U diag(values) U^T``, and the Ritz basis is ``Z U``. Unlike the columns of a power
    iterate, whose order is that of ``orth`` (QR), the leading ``k`` Ritz vectors are the best ``k``-dimensional
    estimate within ``span(Z)``, so their change from round to round is the change of the kept components.

    Parameters
    ----------
    Z : ndarray of shape (d, r)
        Orthonormal basis.
    gram : ndarray of shape (r, r)
        ``Z^T C Z`` up to a positive factor (symmetrised here).

    Returns
    -------
    values : ndarray of shape (r,)
        Ritz values, descending (in the units of ``gram``).
    basis : ndarray of shape (d, r)
        Ritz vectors ``Z U``, in the order of ``values``.
    """
    values, U = ritz_rotation(gram)
    return values, Z @ U


def leading_changes(basis: np.ndarray, previous: np.ndarray) -> np.ndarray:
    """``sin theta`` between the leading ``j`` columns of two ordered bases, for ``j = 1, ..., r``.

    Parameters
    ----------
    basis, previous : ndarray of shape (d, r)
        Orthonormal bases ordered by importance (Ritz bases, :func:`ritz_pairs`).

    Returns
    -------
    ndarray of shape (r,)
        Entry ``j - 1`` is :func:`subspace_distance` of the first ``j`` columns.
    """
    return np.array([subspace_distance(basis[:, :j], previous[:, :j]) for j in range(1, basis.shape[1] + 1)])


def leading_column_changes(Z: np.ndarray, previous: np.ndarray) -> np.ndarray:
    """:func:`leading_changes` of two estimates' leading columns, from one ``d x k`` residual: ``O(d k^2)``, not
    ``O(d k^3)``; the last entry is :func:`subspace_distance` of all ``k`` columns, computed as it computes it.

    With ``Q = orth(Z)`` (QR: its leading ``j`` columns span ``Z``'s leading ``j``), ``M = Q^T previous`` and the
    explicit residual ``R = previous - Q M`` (orthogonal to ``Q``), the residual of the leading ``j`` columns is
    ``R[:, :j] + Q[:, j:] M[j:, :j]``, whose Gram is ``(R^T R)[:j, :j] + M[j:, :j]^T M[j:, :j]``: each
    ``sin theta`` is accurate to round-off, as :func:`subspace_distance`'s.

    Parameters
    ----------
    Z : ndarray of shape (d, k)
        An estimate whose columns are ordered by importance (a power iterate's QR order, Ritz vectors).
    previous : ndarray of shape (d, k)
        The previous estimate, orthonormal columns in the same order (as :func:`subspace_distance`'s ``U_k``).

    Returns
    -------
    ndarray of shape (k,)
        Entry ``j - 1`` is :func:`subspace_distance` of the first ``j`` columns.
    """
    Q = orth(Z)
    M = Q.T @ previous
    R = previous - Q @ M
    k = Q.shape[1]
    gram = R.T @ R
    changes = np.empty(k)
    for j in range(1, k):
        below = M[j:, :j]
        changes[j - 1] = min(1.0, float(np.sqrt(max(np.linalg.eigvalsh(gram[:j, :j] + below.T @ below)[-1], 0.0))))
    changes[k - 1] = min(1.0, tall_norm2(R))
    return changes


def top_eigenvectors(A: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Leading eigenpairs of a symmetric matrix, largest first.

    Parameters
    ----------
    A : ndarray of shape (d, d)
        Symmetric matrix.
    k : int
        Number of eigenpairs, ``1 <= k <= d``.

    Returns
    -------
    values : ndarray of shape (k,)
        Eigenvalues in descending order.
    vectors : ndarray of shape (d, k)
        Corresponding orthonormal eigenvectors.
    """
    import scipy.linalg

    d = A.shape[0]
    values, vectors = scipy.linalg.eigh(A, subset_by_index=[d - k, d - 1])
    return values[::-1], vectors[:, ::-1]


def gaussian_basis(d: int, r: int, rng: np.random.Generator) -> np.ndarray:
    """Random orthonormal ``d x r`` basis ``orth(N(0, 1)^{d x r})``.

    Parameters
    ----------
    d, r : int
        Shape, ``d >= r``.
    rng : numpy.random.Generator
        Source of the Gaussian draws.

    Returns
    -------
    ndarray of shape (d, r)
    """
    return orth(rng.standard_normal((d, r)))


def into_unit_ball(v: np.ndarray) -> np.ndarray:
    """``v`` scaled into the unit ball (unchanged when ``||v|| <= 1``): where the mean of unit rows lies."""
    norm = float(np.linalg.norm(v))
    return v / norm if norm > 1.0 else v
