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

__all__ = ["extend_projection", "next_block", "rayleigh_ritz"]

#: ``|Q^T B|`` at most this (a few hundred units of round-off) needs no further pass of Gram-Schmidt: the usual
#: case, where the second pass before the QR already made ``R`` orthogonal to ``Q`` and the QR of a
#: well-conditioned ``R`` keeps it so; a nearly dependent ``R`` or the random columns of a deflation exceed it
ORTHOGONALITY_TOL = 1e-13

#: a column whose residual after reorthogonalisation is below this fraction of the product's norm carries no
#: new direction (the Krylov space is exhausted along it) and is replaced by a random one
DEFLATION_TOL = 1e-10


def next_block(Q: np.ndarray, W: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """The next Krylov block: ``W`` orthonormalised against ``span(Q)``.

    Parameters
    ----------
    Q : ndarray of shape (d, j r)
        Orthonormal basis so far (``j`` blocks).
    W : ndarray of shape (d, r)
        ``C Q_{j-1}``, the product of the newest block.
    rng : numpy.random.Generator
        Source of the random directions that replace deflated columns.

    Returns
    -------
    ndarray of shape (d, r)
        Orthonormal, orthogonal to ``Q`` to round-off; requires ``(j + 1) r <= d``.
    """
    scale = max(float(np.linalg.norm(W)), np.finfo(float).tiny)
    R = W
    for _ in range(2):  # twice is enough (Kahan, Parlett)
        R = R - Q @ (Q.T @ R)
    norms = np.linalg.norm(R, axis=0)
    deflated = norms <= DEFLATION_TOL * scale
    if np.any(deflated):  # no new direction along these columns: continue with random ones
        R = R.copy()
        R[:, deflated] = rng.standard_normal((R.shape[0], int(deflated.sum())))
    B = orth(R)
    for _ in range(2):  # QR of a nearly dependent block, and the random columns, need another pass
        C = Q.T @ B
        if np.abs(C).max(initial=0.0) <= ORTHOGONALITY_TOL:  # B is orthogonal to Q to round-off already
            break
        B = orth(B - Q @ C)
    return B


def rayleigh_ritz(Q: np.ndarray, CQ: np.ndarray, r: int, H: np.ndarray | None = None
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
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

    Returns
    -------
    values : ndarray of shape (r,)
        Ritz values (eigenvalues of ``Q^T C Q``), descending.
    Z : ndarray of shape (d, r)
        Ritz vectors ``Q V``, orthonormal.
    CZ : ndarray of shape (d, r)
        ``C Z = CQ V``, without another product.
    """
    values, V = ritz_rotation(Q.T @ CQ if H is None else H)
    V = V[:, :r]
    return values[:r], Q @ V, CQ @ V


def extend_projection(H: np.ndarray | None, Q: np.ndarray, CQ: np.ndarray, width: int) -> np.ndarray:
    """``Q^T C Q`` (m, m) from that of the basis without its last ``width`` columns, ``H`` (m - width, m - width):
    only the blocks of the new columns are computed (``2 d m width`` operations instead of ``d m^2``).

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
        return Q.T @ CQ
    old = m - width
    out = np.empty((m, m))
    out[:old, :old] = H
    out[:, old:] = Q.T @ CQ[:, old:]
    out[old:, :old] = Q[:, old:].T @ CQ[:, :old]
    return out
