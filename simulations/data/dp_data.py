"""Synthetic matrices of the DP power-method notes (spec ``dp_power.md`` Sec. 6.3), as rows.

The paper has no utility experiment; the notes propose a planted spectrum on ``n = dimension`` items::

    lambda = linspace(1000, 800, k)  followed by  300 * 0.98^i,  i = 0 .. n - k - 1,

with ``A = U diag(lambda) U^T`` and ``U``

* ``dp-haar``: Haar-distributed (QR of a Gaussian matrix with the sign fix), incoherent: ``mu_0 ~ 0.15`` at
  ``n = 1000``;
* ``dp-coherent``: the top-``k`` eigenvectors are the first ``k`` unit vectors ``e_1 .. e_k``, the rest Haar on
  their complement (``mu_0 = 1``).

The data set is the ``n x n`` matrix ``B = diag(sqrt(lambda)) U^T``, whose rows are split over the clients: client
``i`` holds rows ``B_i`` and its additive share ``A^(i) = B_i^T B_i``, so that ``sum_i A^(i) = B^T B = A`` exactly
(the paper's decentralised model, Sec. 6, with row blocks). The rows are shuffled by ``seed`` so that a
contiguous split does not give one client the whole top eigenspace.
"""

from __future__ import annotations

import numpy as np

__all__ = ["PLANTED_NAMES", "planted_spectrum", "planted_rows"]

PLANTED_NAMES = ("dp-haar", "dp-coherent")


def planted_spectrum(dimension: int, rank: int) -> np.ndarray:
    """``lambda`` of shape ``(dimension,)``: ``linspace(1000, 800, rank)`` then ``300 * 0.98^i``."""
    if not 1 <= rank < dimension:
        raise ValueError(f'"rank" is {rank} but the planted spectrum needs 1 <= rank < dimension = {dimension}')
    return np.concatenate([np.linspace(1000.0, 800.0, rank), 300.0 * 0.98 ** np.arange(dimension - rank)])


def _haar(rng: np.random.Generator, n: int) -> np.ndarray:
    Q, R = np.linalg.qr(rng.standard_normal((n, n)))
    return Q * np.sign(np.diag(R))  # the sign fix makes Q Haar-distributed


def planted_rows(name: str, dimension: int, rank: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The rows ``B`` of a planted matrix and its eigenvectors.

    Parameters
    ----------
    name : {"dp-haar", "dp-coherent"}
    dimension : int
        ``n``, the size of ``A`` (config key ``dimension``; 2 <= n <= 5000).
    rank : int
        ``k``, the number of top eigenvalues in ``linspace(1000, 800, k)`` (config key ``rank``).
    seed : int
        Seed of ``U`` and of the row order.

    Returns
    -------
    B : ndarray of shape (n, n)
        Rows in a seeded order; ``B^T B = U diag(lambda) U^T``.
    U : ndarray of shape (n, n)
        Eigenvectors, columns in the order of ``planted_spectrum(n, k)``.
    """
    if not 2 <= dimension <= 5000:
        raise ValueError(f'"dimension" is {dimension} but {name} needs 2 <= dimension <= 5000 (it builds n x n '
                         "matrices)")
    lam = planted_spectrum(dimension, rank)
    rng = np.random.default_rng(seed)
    if name == "dp-haar":
        U = _haar(rng, dimension)
    elif name == "dp-coherent":
        U = np.zeros((dimension, dimension))
        U[:rank, :rank] = np.eye(rank)
        U[rank:, rank:] = _haar(rng, dimension - rank)
    else:
        raise ValueError(f"unknown planted data set {name!r}; use one of {', '.join(PLANTED_NAMES)}")
    B = np.sqrt(lam)[:, None] * U.T
    return B[rng.permutation(dimension)], U
