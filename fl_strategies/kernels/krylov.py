"""Randomised block Krylov iteration with Rayleigh-Ritz (Musco and Musco 2015), at the server.

The server holds an orthonormal basis ``Q = [Q_0, ..., Q_{j-1}]`` of the block Krylov space
``span{Z_0, C Z_0, ..., C^{j-1} Z_0}`` together with ``C Q`` (each block's product is what the clients
returned for it), so the Rayleigh-Ritz projection ``Q^T C Q`` costs no exchange. The next block is the
newest product ``C Q_{j-1}`` orthonormalised against the whole basis (block Lanczos with full
reorthogonalisation: two passes of block Gram-Schmidt, since plain powers lose the directions of small gaps
to round-off).
"""

from __future__ import annotations

import numpy as np

from .linalg import orth, ritz_rotation

__all__ = ["basis_times", "basis_transpose_times", "extend_projection", "next_block", "rayleigh_ritz"]

#: ``|Q^T B|`` at most this (a few hundred units of round-off) needs no further pass of Gram-Schmidt: the usual
#: case, where the second pass before the QR already made ``R`` orthogonal to ``Q`` and the QR of a
#: well-conditioned ``R`` keeps it so; a nearly dependent ``R`` or the random columns of a deflation exceed it
ORTHOGONALITY_TOL = 1e-13

#: a column whose residual after reorthogonalisation is below this fraction of the product's norm carries no
#: new direction (the Krylov space is exhausted along it) and is replaced by a random one
DEFLATION_TOL = 1e-10


def basis_times(Q: np.ndarray, S: np.ndarray) -> np.ndarray:
    """``Q S`` for a tall basis ``Q`` (d, m) and a small ``S`` (m, c), column-major like ``Q``.

    One pass over ``Q``, formed as ``(S^T Q^T)^T``: OpenBLAS's kernel for a long output row is about twice as fast
    as the one numpy's ``Q @ S`` reaches at genomic ``d`` (188,000 x 72 times 72 x 8 on one thread: 12 ms against
    23 ms, measured with numpy 2.4's OpenBLAS 0.3.31); the same sums, to round-off.
    """
    return (S.T @ Q.T).T


def basis_transpose_times(Q: np.ndarray, R: np.ndarray) -> np.ndarray:
    """``Q^T R`` (m, c) for a tall basis ``Q`` (d, m) and a tall ``R`` (d, c): one pass over ``Q``, formed as
    ``(R^T Q)^T`` (12 ms against 17 ms for numpy's ``Q.T @ R`` at 188,000 x 72 and ``c = 8``, as
    :func:`basis_times`)."""
    return (R.T @ Q).T


def next_block(Q: np.ndarray, W: np.ndarray, rng: np.random.Generator,
               projection: np.ndarray | None = None) -> np.ndarray:
    """The next Krylov block: ``W`` orthonormalised against ``span(Q)``.

    Parameters
    ----------
    Q : ndarray of shape (d, j r)
        Orthonormal basis so far (``j`` blocks).
    W : ndarray of shape (d, r)
        ``C Q_{j-1}``, the product of the newest block.
    rng : numpy.random.Generator
        Source of the random directions that replace deflated columns.
    projection : ndarray of shape (j r, r), optional
        ``Q^T W`` when the caller has it (the new columns of ``Q^T C Q``, :func:`extend_projection`): the first
        pass of Gram-Schmidt then does not read ``Q`` for it.

    Returns
    -------
    ndarray of shape (d, r)
        Orthonormal, orthogonal to ``Q`` to round-off; requires ``(j + 1) r <= d``.
    """
    scale = max(float(np.linalg.norm(W)), np.finfo(float).tiny)
    R = W
    for done in range(2):  # twice is enough (Kahan, Parlett)
        S = projection if done == 0 and projection is not None else basis_transpose_times(Q, R)
        R = R - basis_times(Q, S)
    norms = np.linalg.norm(R, axis=0)
    deflated = norms <= DEFLATION_TOL * scale
    if np.any(deflated):  # no new direction along these columns: continue with random ones
        R = R.copy()
        R[:, deflated] = rng.standard_normal((R.shape[0], int(deflated.sum())))
    B = orth(R)
    for _ in range(2):  # QR of a nearly dependent block, and the random columns, need another pass
        C = basis_transpose_times(Q, B)
        if np.abs(C).max(initial=0.0) <= ORTHOGONALITY_TOL:  # B is orthogonal to Q to round-off already
            break
        B = orth(B - basis_times(Q, C))
    return B


def rayleigh_ritz(Q: np.ndarray, CQ: np.ndarray, r: int, H: np.ndarray | None = None, products: bool = True
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray]:
    """The top ``r`` Ritz pairs of ``C`` on ``span(Q)``.

    Parameters
    ----------
    Q : ndarray of shape (d, m)
        Orthonormal basis, ``m >= r``.
    CQ : ndarray of shape (d, m)
        ``C Q``.
    r : int
        Number of Ritz pairs.
    H : ndarray of shape (m, m), optional
        ``Q^T C Q`` when the caller keeps it (:func:`extend_projection`); computed here otherwise.
    products : bool
        Whether to form ``C Z`` (a pass over ``C Q``); ``False``: ``None`` in its place (a round that keeps only
        the Ritz vectors, not a restart).

    Returns
    -------
    values : ndarray of shape (r,)
        Ritz values (eigenvalues of ``Q^T C Q``), descending.
    Z : ndarray of shape (d, r)
        Ritz vectors ``Q V``, orthonormal.
    CZ : ndarray of shape (d, r) or None
        ``C Z = CQ V``, without another product; ``None`` unless ``products``.
    V : ndarray of shape (m, r)
        The Ritz vectors' coordinates in ``Q``: ``Z = Q V`` (``C Z = CQ V`` whenever it is needed later).
    """
    values, V = ritz_rotation(basis_transpose_times(Q, CQ) if H is None else H)
    V = np.ascontiguousarray(V[:, :r])
    return values[:r], basis_times(Q, V), (basis_times(CQ, V) if products else None), V


def extend_projection(H: np.ndarray | None, Q: np.ndarray, CQ: np.ndarray, width: int) -> np.ndarray:
    """``Q^T C Q`` (m, m) from that of the basis without its last ``width`` columns, ``H`` (m - width, m - width):
    only the new columns ``Q^T C Q_new`` are computed (``2 d m width`` operations instead of ``d m^2``, one pass
    over ``Q``), and the new rows are their transpose (``C`` is symmetric: ``Q_new^T C Q_old = (Q_old^T C
    Q_new)^T`` up to the round-off of the products; :func:`~fl_strategies.kernels.linalg.ritz_rotation`
    symmetrises the two in any case). The last ``width`` columns are ``Q^T C Q_new``, what
    :func:`next_block` takes as its ``projection``.

    Parameters
    ----------
    H : ndarray of shape (m - width, m - width) or None
        ``Q_old^T C Q_old``; ``None``: all of ``Q^T C Q`` is computed.
    Q, CQ : ndarray of shape (d, m)
        The basis, its last ``width`` columns new, and its products.
    width : int
    """
    m = Q.shape[1]
    if H is None or H.shape[0] != m - width:
        return basis_transpose_times(Q, CQ)
    old = m - width
    out = np.empty((m, m))
    out[:old, :old] = H
    out[:, old:] = basis_transpose_times(Q, CQ[:, old:])
    out[old:, :old] = out[:old, old:].T
    return out
