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

__all__ = ["BLOCK_BYTES", "RowBlocks", "BedVariants", "normalize_rows", "clip_rows"]

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


_CODES = np.stack([(np.arange(256) >> (2 * k)) & 3 for k in range(4)], axis=1).astype(np.uint8)
"""The four 2-bit codes of every byte of a ``.bed`` file, first person in the low bits: (256, 4)."""

BED_COUNTS = np.array([2.0, np.nan, 1.0, 0.0])
"""Allele count of each 2-bit code (``00`` homozygous A1, ``01`` missing, ``10`` heterozygous, ``11`` homozygous
A2): the A1 allele counted, as ``bed-reader`` and ``plink --recode A`` count it."""

_BYTE_CODES = np.ascontiguousarray(_CODES).view(np.uint32).ravel()
"""A byte's four codes as one uint32 (its four bytes the codes): decoding is one ``np.take`` per byte."""

_BYTE_COUNTS = np.ascontiguousarray(np.nan_to_num(BED_COUNTS, nan=0.0).astype(np.int8)[_CODES]).view(np.uint32).ravel()
"""A byte's four allele counts (int8, a missing call 0) as one uint32."""

MISSING_CODE = 1
"""The 2-bit code of a missing call."""

_FLIPPED_BYTES = np.ascontiguousarray(np.where((_CODES == 0) | (_CODES == 3), 3 - _CODES, _CODES)
                                      @ (1 << (2 * np.arange(4)))).astype(np.uint8)
"""Each byte with its homozygous codes exchanged (``00`` and ``11``): the calls of the other allele, (256,)."""

_HAS_MISSING = (_CODES == MISSING_CODE).any(axis=1)
"""Whether a byte holds a missing call's code: (256,) bool."""


def _missing_calls(raw: np.ndarray, people: int) -> tuple[np.ndarray, np.ndarray]:
    """``(variant, person)`` indices of the missing calls in ``raw`` (b, ceil(people / 4)) bytes of a ``.bed``:
    only the bytes holding one are expanded to their four codes."""
    where = np.flatnonzero(_HAS_MISSING[raw])
    variant, byte = np.divmod(where, raw.shape[1])
    slot = np.nonzero(_CODES[raw.ravel()[where]] == MISSING_CODE)
    person = 4 * byte[slot[0]] + slot[1]
    keep = person < people
    return variant[slot[0]][keep], person[keep]


def _scatter(index: np.ndarray, values: np.ndarray, length: int) -> np.ndarray:
    """``out[index[k]] += values[k]`` from zeros: (length, r) for ``values`` (m, r) (a ``bincount`` per column)."""
    return np.stack([np.bincount(index, weights=values[:, j], minlength=length) for j in range(values.shape[1])],
                    axis=1)


class BedVariants:
    """A PLINK 1 ``.bed`` file (people x variants) read in its own variant-major order, block by block.

    The file is memory-mapped as bytes; a block of variants ``J`` is decoded from its 2-bit codes into float64
    allele counts ``g`` (:data:`BED_COUNTS`, a missing call 0). The products are those of ``X``, the values
    ``(g - mean) / scale`` with a missing call given 0: mean imputation with the ``mean`` the caller passes (the
    federation's, ``2 p``), as ``plink2 --pca`` imputes, applied by algebra inside :meth:`left` and :meth:`right`
    (the missing calls as sparse indices). Without a mean ``X`` holds the allele counts, a missing call 0. Every
    product reads the file in file order, one block of about ``block_bytes`` float64 at a time: memory
    O(block + s r + d r).

    Parameters
    ----------
    raw : ndarray of shape (d, ceil(s / 4)), uint8
        The file's bytes after its 3-byte header, one row per variant (a read-only memory map).
    num_rows : int
        ``s``, people (the ``.fam``'s lines).
    block_bytes : int
        Target size of one float64 block of decoded variants.

    Attributes
    ----------
    num_rows, dimension : int
        ``s`` and ``d``.
    code_counts : ndarray of shape (d, 4), int64
        How many people carry each 2-bit code at each variant (counted once, when the file is opened).
    person_calls : ndarray of shape (s,), int64
        Each person's non-missing calls.
    row_weights : ndarray of shape (s,) or None
        ``omega``: the products are those of ``X^T diag(omega) X`` (:meth:`weighted`); ``None``: all ones.
    """

    sparse, normalize, clip, ndim, dtype = False, False, 0.0, 2, np.dtype(np.int8)
    centers_inside = True
    """Whether this class centres and scales inside its products (missing calls need it): see
    :class:`~.products.LocalOperator`."""

    def __init__(self, raw: np.ndarray, num_rows: int, block_bytes: int = BLOCK_BYTES) -> None:
        self.rows = raw
        self.num_rows, self.dimension = int(num_rows), int(raw.shape[0])
        self.shape = (self.num_rows, self.dimension)
        self.block = max(1, int(block_bytes) // (8 * max(self.num_rows, 1)))
        self.columns: np.ndarray | None = None
        self.flip: np.ndarray | None = None
        self.row_weights: np.ndarray | None = None
        self._weighted_counts: np.ndarray | None = None
        self._count_codes()

    def _count_codes(self) -> None:
        """:attr:`code_counts` and :attr:`person_calls`, in one read of the file."""
        counts = np.zeros((self.dimension, 4), dtype=np.int64)
        missing = np.zeros(self.num_rows, dtype=np.int64)
        for columns, codes in self._codes():
            for code in range(4):
                counts[columns, code] = np.count_nonzero(codes == code, axis=1)
            missing += np.count_nonzero(codes == MISSING_CODE, axis=0)
        self.code_counts, self.person_calls = counts, self.dimension - missing

    def aligned(self, columns: np.ndarray, flip: np.ndarray, dimension: int) -> "BedVariants":
        """The same file as the columns of another variant list (a shallow copy; one read to count its codes).

        Parameters
        ----------
        columns : ndarray of shape (d_file,), int
            Each of the file's variants' column in the list, -1 for a variant the list leaves out.
        flip : ndarray of shape (d_file,), bool
            The variants whose alleles the list names the other way round (A1 and A2 exchanged): their calls are
            counted as ``2 - g`` when decoded (a missing call stays missing).
        dimension : int
            ``d``, the list's length; every column in ``0 .. d - 1`` is one variant of the file.
        """
        other = object.__new__(BedVariants)
        other.__dict__.update(self.__dict__)
        other.columns, other.flip = np.asarray(columns, dtype=np.int64), np.asarray(flip, dtype=bool)
        other.dimension, other.shape = int(dimension), (self.num_rows, int(dimension))
        other.row_weights, other._weighted_counts = None, None
        other._count_codes()
        return other

    def weighted(self, row_weights: np.ndarray) -> "BedVariants":
        """The same file with every person's row weighted by ``omega`` (s,) in the Gram matrix: ``X^T diag(omega)
        X`` (a shallow copy; the file is not read again)."""
        other = object.__new__(BedVariants)
        other.__dict__.update(self.__dict__)
        other.row_weights, other._weighted_counts = np.asarray(row_weights, dtype=np.float64), None
        return other

    def missingness_weights(self) -> np.ndarray:
        """``omega_i = (d / c_i)^2`` with ``c_i`` person ``i``'s non-missing calls (0 without a call), (s,).

        ``plink2 --pca`` divides each entry of its relationship matrix by the variants both people have called,
        ``N_ij``; with ``N_ij ~ c_i c_j / d`` that is the rows weighted by ``d / c_i``: the weights make the
        products those of plink2's matrix to first order in the missing rate (all ones without missing calls).
        """
        calls = self.person_calls.astype(np.float64)
        return np.divide(self.dimension, calls, out=np.zeros(self.num_rows), where=calls > 0) ** 2

    @property
    def nbytes(self) -> int:
        """Bytes of the file's genotype codes."""
        return int(self.rows.nbytes)

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        """The allele counts as an (s, d) float64 array, NaN for a missing call (the whole file in memory)."""
        X = np.empty(self.shape)
        for columns, codes in self._codes():
            X[:, columns] = BED_COUNTS[codes].T
        return X if dtype is None else X.astype(dtype)

    def _raw_blocks(self) -> Iterator[tuple[slice | np.ndarray, np.ndarray]]:
        """``(columns, raw)`` of consecutive variant blocks in file order: ``raw`` (b, ceil(s / 4)) the bytes of the
        block's variants that :attr:`columns` keeps, a flipped variant's codes exchanged (``00`` and ``11``: ``g``
        becomes ``2 - g``, a missing call stays missing), and ``columns`` their columns (a slice without a list)."""
        file_variants = self.rows.shape[0]
        for start in range(0, file_variants, self.block):
            raw = np.asarray(self.rows[start:start + self.block])
            stop = start + raw.shape[0]
            if self.columns is None:
                yield slice(start, stop), raw
                continue
            keep = self.columns[start:stop] >= 0
            raw, flip = raw[keep], self.flip[start:stop][keep]
            if flip.any():
                raw[flip] = _FLIPPED_BYTES[raw[flip]]
            yield self.columns[start:stop][keep], raw

    def _codes(self) -> Iterator[tuple[slice | np.ndarray, np.ndarray]]:
        """``(columns, codes)`` of consecutive variant blocks in file order; ``codes`` (b, s) uint8 in 0..3."""
        for columns, raw in self._raw_blocks():
            yield columns, np.take(_BYTE_CODES, raw).view(np.uint8).reshape(raw.shape[0], -1)[:, :self.num_rows]

    def _counts_blocks(self) -> Iterator[tuple[slice | np.ndarray, np.ndarray, tuple[np.ndarray, np.ndarray] | None]]:
        """``(columns, G_J, missing)`` of consecutive variant blocks in file order: ``G_J`` (b, s) float64 the
        allele counts with a missing call 0 (a buffer the next block overwrites), ``missing`` the (variant in
        block, person) indices of the missing calls, or ``None`` when the block has none."""
        buffer = None
        for columns, raw in self._raw_blocks():
            b = raw.shape[0]
            if buffer is None:
                buffer = _scratch((min(self.block, self.rows.shape[0]), self.num_rows))
            out = buffer[:b]
            np.copyto(out, np.take(_BYTE_COUNTS, raw).view(np.int8).reshape(b, -1)[:, :self.num_rows],
                      casting="unsafe")
            missing = None
            if self.code_counts[columns, MISSING_CODE].any():
                missing = _missing_calls(raw, self.num_rows)
            yield columns, out, missing

    @staticmethod
    def _shifts(columns, mean, scale) -> tuple[np.ndarray | None, np.ndarray | None]:
        """``(1 / scale, mean / scale)`` at ``columns`` (``None`` for what is not given)."""
        inverse = None if scale is None else 1.0 / np.asarray(scale[columns])
        shift = None if mean is None else np.asarray(mean[columns]) * (1.0 if inverse is None else inverse)
        return inverse, shift

    def left(self, Z: np.ndarray, mean: np.ndarray | None = None, scale: np.ndarray | None = None) -> np.ndarray:
        """``X Z`` with ``X`` (s, d) the people x variants of the class docstring, ``Z`` (d, r); (s, r).

        ``X_J = D_J^{-1} (G_J - mu_J 1^T) o O_J`` (``O``: the calls made) is never formed: ``X_J^T Z_J = G_J^T
        (D_J^{-1} Z_J) - 1 (m_J^T Z_J) + Miss_J^T (m_J o Z_J)`` with ``m = mu / scale`` and ``Miss`` the missing calls.
        """
        Z = np.asarray(Z, dtype=np.float64)
        Z2 = Z.reshape(Z.shape[0], -1)
        out, offset = np.zeros((self.num_rows, Z2.shape[1])), np.zeros(Z2.shape[1])
        for columns, block, missing in self._counts_blocks():
            inverse, shift = self._shifts(columns, mean, scale)
            ZJ = Z2[columns]
            out += block.T @ (ZJ if inverse is None else ZJ * inverse[:, None])
            if shift is not None:
                offset += shift @ ZJ
                if missing is not None:
                    out += _scatter(missing[1], shift[missing[0], None] * ZJ[missing[0]], self.num_rows)
        out -= offset
        return out.reshape((self.num_rows,) + Z.shape[1:])

    def right(self, Y: np.ndarray, mean: np.ndarray | None = None, scale: np.ndarray | None = None) -> np.ndarray:
        """``X^T Y`` for ``Y`` (s, r): shape (d, r) (as :meth:`left`: ``X_J Y = D_J^{-1} G_J Y - m_J (1^T Y) +
        m_J o (Miss_J Y)``)."""
        Y = np.asarray(Y, dtype=np.float64)
        Y2 = Y.reshape(Y.shape[0], -1)
        total = Y2.sum(axis=0)
        out = np.zeros((self.dimension, Y2.shape[1]))
        for columns, block, missing in self._counts_blocks():
            inverse, shift = self._shifts(columns, mean, scale)
            part = block @ Y2
            if inverse is not None:
                part *= inverse[:, None]
            if shift is not None:
                part -= np.multiply.outer(shift, total)
                if missing is not None:
                    part += shift[:, None] * _scatter(missing[0], Y2[missing[1]], block.shape[0])
            out[columns] = part
        return out.reshape((self.dimension,) + Y.shape[1:])

    def product(self, Z: np.ndarray, mean: np.ndarray | None = None, scale: np.ndarray | None = None) -> np.ndarray:
        """``X^T diag(omega) (X Z)``, shape of ``Z`` (d, r): two reads of the file (:meth:`left`, then
        :meth:`right`)."""
        Y = self.left(Z, mean, scale)
        if self.row_weights is not None:
            Y *= self.row_weights.reshape((-1,) + (1,) * (Y.ndim - 1))
        return self.right(Y, mean, scale)

    def row_squares(self, mean: np.ndarray, scale: np.ndarray | None = None) -> np.ndarray:
        """``||x_i||^2`` of every person's row of ``X`` (class docstring: ``(g - mean) / scale``, a missing call 0),
        unweighted, shape (s,): one read of the file, a (variant, code) table per block."""
        out = np.zeros(self.num_rows)
        for columns, codes in self._codes():
            table = BED_COUNTS[None, :] - np.asarray(mean[columns])[:, None]
            if scale is not None:
                table = table / np.asarray(scale[columns])[:, None]
            table = np.nan_to_num(table * table, nan=0.0)  # the missing code's column is NaN: 0
            out += np.take_along_axis(table, codes.astype(np.intp), axis=1).sum(axis=0)
        return out

    def missingness_diagonal(self, Z: np.ndarray, mean: np.ndarray, scale: np.ndarray | None = None
                             ) -> tuple[np.ndarray, float]:
        """What ``plink2 --pca``'s diagonal adds to the matrix the weighted products stand for, at a basis ``Z``.

        plink2 divides ``x_i . x_j`` by ``N_ij``, the variants both people called; the weights of
        :meth:`missingness_weights` divide by ``c_i c_j / d``, which is ``N_ij`` to first order off the diagonal
        but not on it (``N_ii = c_i``). The difference is the diagonal ``delta_i = ||x_i||^2 (1 / c_i - d / c_i^2)``
        (:meth:`row_squares`). Its first-order effect on an eigenvalue of component ``v = Z g`` is
        ``g^T S g`` over the squared norm of the weighted scores, with this site's part of

        ``S = sum_i delta_i omega_i (x_i Z)^T (x_i Z)``,  ``omega_i = (d / c_i)^2``,

        and on the trace ``sum_i delta_i`` (:func:`fl_strategies.files.pca.pca_model`).

        Parameters
        ----------
        Z : ndarray of shape (d, r)
        mean, scale : ndarray of shape (d,)
            The broadcast mean and scale (``scale`` ``None``: ones).

        Returns
        -------
        S : ndarray of shape (r, r)
        delta : float
            ``sum_i delta_i`` over this site's people (0 for a person without a call, and without missing calls).
        """
        calls, d = self.person_calls.astype(np.float64), float(self.dimension)
        inverse = np.divide(1.0, calls, out=np.zeros(self.num_rows), where=calls > 0)
        delta = self.row_squares(mean, scale) * (inverse - d * inverse * inverse)
        Y = self.left(Z, mean, scale)
        return (Y * (delta * self.missingness_weights())[:, None]).T @ Y, float(delta.sum())

    def call_counts(self) -> np.ndarray:
        """Non-missing calls per variant, shape (d,) float64."""
        return (self.num_rows - self.code_counts[:, MISSING_CODE]).astype(np.float64)

    def stats(self) -> tuple[np.ndarray, np.ndarray]:
        """``(allele sums, sums of squares)`` over the non-missing calls, both (d,) float64 (unweighted)."""
        c = self.code_counts
        return (2.0 * c[:, 0] + c[:, 2]).astype(np.float64), (4.0 * c[:, 0] + c[:, 2]).astype(np.float64)

    def _counts(self, weighted: bool) -> np.ndarray:
        """The code counts (d, 4), or with ``weighted`` each person counted ``omega_i`` times (one read, cached)."""
        if not weighted or self.row_weights is None:
            return self.code_counts.astype(np.float64)
        if self._weighted_counts is None:
            counts = np.zeros((self.dimension, 4))
            for columns, codes in self._codes():
                for code in range(4):
                    counts[columns, code] = (codes == code) @ self.row_weights
            self._weighted_counts = counts
        return self._weighted_counts

    def centered_column_squares(self, mean: np.ndarray, weighted: bool = False) -> np.ndarray:
        """``sum (g - mean)^2`` per variant over its non-missing calls, shape (d,), from the code counts (no
        cancellation); with ``weighted`` each person's term times ``omega_i`` (the diagonal of the products)."""
        c = self._counts(weighted)
        return c[:, 0] * (2.0 - mean) ** 2 + c[:, 2] * (1.0 - mean) ** 2 + c[:, 3] * mean ** 2

    def own_mean(self) -> np.ndarray:
        """Each variant's mean allele count over this file's non-missing calls (0 where it has none), (d,)."""
        total, calls = self.stats()[0], self.call_counts()
        return np.divide(total, calls, out=np.zeros(self.dimension), where=calls > 0)

    def centered_sum_of_squares(self, mean: np.ndarray) -> float:
        """:meth:`centered_column_squares` summed over the variants."""
        return float(self.centered_column_squares(mean).sum())

    def gram(self) -> np.ndarray:
        """``X^T X`` of the allele counts (missing calls 0), shape (d, d)."""
        (X,) = self.blocks()
        return X.T @ X

    def blocks(self) -> Iterator[np.ndarray]:
        """The allele counts as one float64 (s, d) block, for the strategies that read rows (O(s d) memory);
        refused with missing calls, which only the eigenspace products impute."""
        if self.code_counts[:, MISSING_CODE].any():
            raise ValueError("the genotypes have missing calls, which only the eigenspace strategies' products "
                             "impute; this strategy reads the rows themselves")
        X = np.empty(self.shape)
        for columns, block, _ in self._counts_blocks():
            X[:, columns] = block.T
        yield X
