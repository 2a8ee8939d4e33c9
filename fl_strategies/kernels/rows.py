"""A client's rows as stored, streamed in float64 row blocks.

The rows ``M_i`` (shape (s_i, d)) stay in the dtype they were stored in (int8 genotypes, float32, ...), in memory,
memory-mapped from a ``.npy`` file, or as a scipy sparse matrix; every computation converts one block of rows at a
time to float64, so the float64 working set is one block (about :data:`BLOCK_BYTES`) whatever the file's size.
A float64 ndarray already in memory is used as one block, without a copy.
"""

from __future__ import annotations

import mmap
from typing import Iterator

import numpy as np

__all__ = ["BLOCK_BYTES", "RowBlocks", "normalize_rows", "clip_rows"]

BLOCK_BYTES = 1 << 24
"""Target size of one float64 row block (16 MiB): the float64 working set of a pass over the rows. A product
``M^T (M Z)`` of an int8 file is no slower than with 32 MiB blocks at d = 100,000 (20 rows a block) and faster at
d = 30,000; 8 MiB blocks were 1.0-1.1x and 4 MiB blocks 1.4-1.5x the time of 32 MiB ones at d = 100,000
(``simulations/benchmarks/bench_row_blocks.py``)."""


def normalize_rows(X: np.ndarray) -> np.ndarray:
    """Scale each row to unit L2 norm, leaving all-zero rows at zero.

    Parameters
    ----------
    X : ndarray of shape (n, d)
        Input matrix (not modified).

    Returns
    -------
    ndarray of shape (n, d), float64
        New matrix whose nonzero rows have norm 1.
    """
    X = np.asarray(X, dtype=np.float64)
    norms = np.linalg.norm(X, axis=1, keepdims=True)
    out = np.zeros_like(X)
    np.divide(X, norms, out=out, where=norms > 0)
    return out


def clip_rows(X: np.ndarray, bound: float) -> np.ndarray:
    """Scale the rows longer than ``bound`` down to L2 norm ``bound``; shorter rows are kept as they are.

    Parameters
    ----------
    X : ndarray of shape (n, d)
        Input matrix (not modified).
    bound : float
        ``c > 0``, the largest row norm kept.

    Returns
    -------
    ndarray of shape (n, d), float64
    """
    X = np.asarray(X, dtype=np.float64)
    norms = np.linalg.norm(X, axis=1, keepdims=True)
    return X * np.minimum(1.0, bound / np.where(norms > 0, norms, 1.0))


def unit_rows(X: np.ndarray) -> np.ndarray:
    """Rows of unit norm, scaled by their largest entry first so that no row norm overflows; float64 (n, d)."""
    X = np.asarray(X, dtype=np.float64)
    scale = np.max(np.abs(X), axis=1, keepdims=True)
    return normalize_rows(X / np.where(scale > 0, scale, 1.0))


def _scratch(shape: tuple[int, int]) -> np.ndarray:
    """An uninitialised float64 array in its own anonymous memory map, unmapped when the array is freed.

    A block buffer is tens of MB; from ``malloc`` it would come from the calling thread's arena, and glibc keeps
    freed arena memory resident, so every thread that ever streamed a file (the server asks its nodes from a
    thread pool at discovery) would hold one buffer's worth of pages for the rest of the process.
    """
    size = 8 * shape[0] * shape[1]
    if size == 0:
        return np.empty(shape)
    return np.frombuffer(mmap.mmap(-1, size), dtype=np.float64).reshape(shape)


class RowBlocks:
    """Rows ``M`` (s, d) as stored, read in float64 blocks; optionally each row scaled to unit norm.

    Parameters
    ----------
    rows : ndarray, numpy.memmap or scipy.sparse matrix of shape (s, d)
        Real entries, any dtype; never copied as a whole.
    normalize : bool
        Scale every nonzero row to unit norm (:func:`unit_rows`), block by block.
    clip : float
        With ``clip > 0`` every row longer than ``clip`` is scaled down to it (:func:`clip_rows`), block by block.
    block_bytes : int
        Target size of one float64 block.
    """

    def __init__(self, rows, normalize: bool = False, block_bytes: int = BLOCK_BYTES, clip: float = 0.0) -> None:
        self.rows = rows
        self.sparse = hasattr(rows, "tocsr")
        if self.sparse:
            self.rows = rows.tocsr()
        self.normalize = bool(normalize)
        self.clip = float(clip)
        self.num_rows, self.dimension = (int(n) for n in rows.shape)
        whole = (not self.sparse and isinstance(rows, np.ndarray) and not isinstance(rows, np.memmap)
                 and rows.dtype == np.float64 and not self.normalize and self.clip <= 0)
        self.block = self.num_rows if whole else max(1, int(block_bytes) // (8 * max(self.dimension, 1)))
        self._stats: tuple[np.ndarray, np.ndarray] | None = None

    @property
    def nbytes(self) -> int:
        """Bytes the rows occupy as stored."""
        if self.sparse:
            return int(self.rows.data.nbytes + self.rows.indices.nbytes + self.rows.indptr.nbytes)
        return int(self.rows.nbytes)

    def blocks(self) -> Iterator[np.ndarray]:
        """Consecutive row blocks in float64 (clipped with ``clip``), covering all rows once (:meth:`_blocks`)."""
        if self.clip <= 0:
            yield from self._blocks()
            return
        for block in self._blocks():
            yield clip_rows(block.toarray() if hasattr(block, "toarray") else block, self.clip)

    def _blocks(self) -> Iterator[np.ndarray]:
        """Consecutive row blocks in float64 (a scipy CSR matrix for sparse rows), covering all rows once.

        A block converted from another dtype lives in a buffer that the next block overwrites: use it before
        asking for the next.
        """
        buffer = None  # one float64 buffer per pass, refilled block by block (no fresh pages per block)
        for start in range(0, self.num_rows, self.block):
            block = self.rows[start:start + self.block]
            if not self.sparse and not self.normalize and not (isinstance(block, np.ndarray)
                                                               and block.dtype == np.float64
                                                               and not isinstance(block, np.memmap)):
                if buffer is None:
                    buffer = _scratch((min(self.block, self.num_rows), self.dimension))
                out = buffer[:block.shape[0]]
                np.copyto(out, block, casting="unsafe")
                yield out
                continue
            if self.sparse:
                block = block.astype(np.float64)
                if self.normalize:
                    norms = np.sqrt(np.asarray(block.multiply(block).sum(axis=1))).ravel()
                    block = block.multiply(1.0 / np.where(norms > 0, norms, 1.0)[:, None]).tocsr()
                yield block
            elif self.normalize:
                yield unit_rows(block)
            else:
                yield np.asarray(block, dtype=np.float64)

    def stats(self) -> tuple[np.ndarray, np.ndarray]:
        """``(row_sum, col_sq)``: the sum of the rows and each column's sum of squares, both (d,) float64."""
        if self._stats is None:
            total, squares = np.zeros(self.dimension), np.zeros(self.dimension)
            owned = self._owns_blocks()
            with np.errstate(all="ignore"):  # overflow shows as a non-finite sum, which the caller reports
                for block in self.blocks():
                    total += np.asarray(block.sum(axis=0)).ravel()
                    if self.sparse:
                        squares += np.asarray(block.multiply(block).sum(axis=0)).ravel()
                    elif owned:  # square the scratch block in place: no second block-sized array
                        squares += np.multiply(block, block, out=block).sum(axis=0)
                    else:
                        squares += (block * block).sum(axis=0)
            self._stats = (total, squares)
        return self._stats

    def product(self, Z: np.ndarray) -> np.ndarray:
        """``M^T (M Z)``, shape (d, r), never forming ``M^T M``."""
        out = None
        for block in self.blocks():
            part = block.T @ (block @ Z)
            out = part if out is None else out + part
        return np.asarray(out)

    def gram(self) -> np.ndarray:
        """``M^T M``, shape (d, d)."""
        out = None
        for block in self.blocks():
            part = block.T @ block
            part = part.toarray() if hasattr(part, "toarray") else part
            out = part if out is None else out + part
        return out

    def centered_column_squares(self, mean: np.ndarray) -> np.ndarray:
        """``sum_j (x_j - mean)^2`` per column, shape (d,) (sparse rows: ``col_sq - 2 mean * sum + s mean^2``,
        clipped at 0)."""
        if self.sparse:
            total, squares = self.stats()
            return np.clip(squares - 2.0 * mean * total + self.num_rows * mean * mean, 0.0, None)
        out = np.zeros(self.dimension)
        for block in self.blocks():
            deviation = block - mean
            out += np.einsum("ij,ij->j", deviation, deviation)
        return out

    def centered_sum_of_squares(self, mean: np.ndarray) -> float:
        """``sum_j ||x_j - mean||^2`` over the rows (sparse rows: ``sum ||x||^2 - 2 mean.sum + s ||mean||^2``)."""
        if self.sparse:
            total, squares = self.stats()
            return max(float(squares.sum() - 2.0 * mean @ total + self.num_rows * mean @ mean), 0.0)
        owned = self._owns_blocks()

        def part(block: np.ndarray) -> float:
            if owned:  # centre and square the scratch block in place: no second block-sized array
                np.subtract(block, mean, out=block)
                return np.sum(np.square(block, out=block))
            return np.sum((block - mean) ** 2)

        return float(sum(part(block) for block in self.blocks()))

    def _owns_blocks(self) -> bool:
        """Whether the dense blocks of :meth:`blocks` are this object's scratch (float64 copies converted from
        another dtype or a memory map, normalised or clipped rows), which a caller may overwrite, rather than views
        of the caller's own float64 ndarray."""
        plain_float64 = (isinstance(self.rows, np.ndarray) and not isinstance(self.rows, np.memmap)
                         and self.rows.dtype == np.float64)
        return not self.sparse and (self.normalize or self.clip > 0 or not plain_float64)
