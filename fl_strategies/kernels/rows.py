"""A client's rows as stored, streamed in float64 row blocks.

The rows ``M_i`` (shape (s_i, d)) stay in the dtype they were stored in (int8 genotypes, float32, ...), in memory,
memory-mapped from a ``.npy`` file, or as a scipy sparse matrix; every computation converts one block of rows at a
time to float64, so the float64 working set is one block (about :data:`BLOCK_BYTES`) whatever the file's size.
A float64 ndarray already in memory is used as one block, without a copy.
"""

from __future__ import annotations

import mmap
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Iterator

import numpy as np

from . import bed_tables

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


def _scratch(shape: tuple[int, int], dtype=np.float64) -> np.ndarray:
    """An uninitialised array (float64 unless ``dtype``) in its own anonymous memory map, unmapped when the array
    is freed.

    A block buffer is tens of MB; from ``malloc`` it would come from the calling thread's arena, and glibc keeps
    freed arena memory resident, so every thread that ever streamed a file (the server asks its nodes from a
    thread pool at discovery) would hold one buffer's worth of pages for the rest of the process.
    """
    size = np.dtype(dtype).itemsize * shape[0] * shape[1]
    if size == 0:
        return np.empty(shape, dtype=dtype)
    return np.frombuffer(mmap.mmap(-1, size), dtype=dtype).reshape(shape)


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

_COUNTING = threading.Lock()
"""Held while a :class:`BedVariants` counts its codes on first use (:data:`BedVariants.COUNTED`)."""

_CALL_COUNTS = np.array([2, -1, 1, 0], dtype=np.int8)
"""Allele count of each 2-bit code as int8, a missing call -1 (:meth:`BedVariants.column_counts`)."""

_FLIPPED_BYTES = np.ascontiguousarray(np.where((_CODES == 0) | (_CODES == 3), 3 - _CODES, _CODES)
                                      @ (1 << (2 * np.arange(4)))).astype(np.uint8)
"""Each byte with its homozygous codes exchanged (``00`` and ``11``): the calls of the other allele, (256,)."""

PRODUCT_BLOCK_BYTES = 1 << 22
"""Target size of one decoded float64 block of a product (4 MiB). At 5,000 people x 100,000 variants (two threads,
``left`` then ``right`` with 8 columns) a pair of passes took 1.4x (1 MiB), 1.0x (2 MiB) and 1.0x (4 MiB) the time
of 4 MiB blocks: fewer, larger blocks spend less time in Python between the decoding and the product."""

RIGHT_PEOPLE_BYTES = 1 << 19
"""Bytes of the tables of a right product's chunk of people (:meth:`BedVariants._right_tables`): 512 KiB, 32 bytes
of a variant (128 people) at ``r = 8``, in a core's cache. At 750 and 5,000 people a site, 256 KiB and 512 KiB
ran alike, 128 KiB and 1 MiB slower."""

RIGHT_BLOCK_VARIANTS = 4096
"""Variants of a right product's block (:meth:`BedVariants._right_tables`): each table is built once per block
(336 row additions against the block's 4,096 look-ups); 2,048 to 8,192 ran alike at 750 and 5,000 people a site,
16,384 slower at 5,000."""

_CODE_COUNTS = np.stack([np.count_nonzero(_CODES == code, axis=1) for code in range(4)], axis=1).astype(np.int64)
"""How many of a byte's four codes are ``00``, ``01``, ``10``, ``11``: (256, 4)."""

_PACKED_CODE_COUNTS = np.ascontiguousarray(_CODE_COUNTS.astype(np.uint8)).view(np.uint32).ravel()
"""How many of a byte's four people carry code ``00``, ``01``, ``10``, ``11``, as four 8-bit lanes of one uint32:
(256,)."""

_PACKED_MISSING = np.ascontiguousarray((_CODES == MISSING_CODE).astype(np.uint8)).view(np.uint32).ravel()
"""Which of a byte's four people have a missing call (1 or 0), as four 8-bit lanes of one uint32: (256,)."""


PRODUCT_THREADS_VARIABLE = "FEDSPECTRAL_PRODUCT_THREADS"
"""Environment variable that sets :func:`product_threads` before the BLAS variables (``fedspectral run`` sets it to
the CPUs of the worker that runs a simulated node, each Ray actor's or the simulation process's, when it sets
``OPENBLAS_NUM_THREADS=1`` for the ServerApp's thread: :func:`fedspectral.run.simulation_env`)."""


def product_threads() -> int:
    """Threads of a ``.bed`` product (:meth:`BedVariants.left`, :meth:`BedVariants.right`): :data:`PRODUCT_THREADS_
    VARIABLE` when set, else as many as the BLAS library starts with, ``OPENBLAS_NUM_THREADS`` (else
    ``OMP_NUM_THREADS``, ``MKL_NUM_THREADS``) when set, else the CPUs this process may run on. Each thread decodes
    and multiplies its own blocks with one BLAS thread (the in-process engine limits BLAS to one thread for the rest
    of a round: :func:`simulations.engines.local.run_local`).
    """
    for name in (PRODUCT_THREADS_VARIABLE, "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        value = os.environ.get(name, "").strip()
        if value.isdigit() and int(value) > 0:
            return int(value)
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def _worker_count(threads: int | None, jobs: int) -> int:
    """Threads for ``jobs`` pieces of work: ``threads`` (``None``: :func:`product_threads`), at least one and at most
    ``jobs``."""
    return max(1, min(product_threads() if threads is None else int(threads), jobs))


def _run_workers(work, threads: int) -> list:
    """``[work(0), ..., work(threads - 1)]``, one thread each (in this thread when ``threads`` is 1), in worker
    order whatever the threads' timing; a worker's exception is raised here."""
    if threads == 1:
        return [work(0)]
    with ThreadPoolExecutor(threads) as pool:
        return [done.result() for done in [pool.submit(work, w) for w in range(threads)]]


def _release_freed_memory() -> None:
    """Give the memory freed in the threads' ``malloc`` arenas back to the system (glibc's ``malloc_trim``; nothing
    elsewhere). Opening a file leaves many small freed blocks there (the missing calls of each block of variants,
    moved into one array), which glibc would otherwise keep resident for the rest of the node's run: about 12 MB
    at 5,000 people x 100,000 variants with 1 % missing calls."""
    try:
        import ctypes

        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _missing_calls(raw: np.ndarray, dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """``(per variant, people)`` of the missing calls (code ``01``) in ``raw`` (b, ceil(s / 4)), the bytes of ``b``
    variants: how many each variant has, int64 (b,), and who, ``dtype``, variant by variant. A padding code is
    ``00``: never taken for a missing call."""
    flags = np.right_shift(raw, 1)  # the low bit of each missing code: low bit set, high bit clear
    np.invert(flags, out=flags)
    np.bitwise_and(flags, raw, out=flags)
    np.bitwise_and(flags, 0x55, out=flags)
    at = np.flatnonzero(flags)
    rows, places = np.divmod(at, raw.shape[1])
    bits = flags.reshape(-1)[at]
    variants, people = [], []
    for slot in range(4):
        hit = (bits >> (2 * slot)) & 1 == 1
        variants.append(rows[hit])
        people.append(4 * places[hit] + slot)
    variants, people = np.concatenate(variants), np.concatenate(people)
    return np.bincount(variants, minlength=raw.shape[0]), people[np.argsort(variants, kind="stable")].astype(dtype)


class BedVariants:
    """A PLINK 1 ``.bed`` file (people x variants) read in its own variant-major order, block by block.

    The file is memory-mapped as bytes. The products are those of ``X``, the values ``(g - mean) / scale`` of the
    allele counts ``g`` (:data:`BED_COUNTS`) with a missing call given 0: mean imputation with the ``mean`` the
    caller passes (the federation's, ``2 p``), as ``plink2 --pca`` imputes. Without a mean ``X`` holds the allele
    counts, a missing call 0. A product (:meth:`left`, :meth:`right`) reads the file once in file order, decoding
    one block of variants at a time to allele counts (one table of the 256 byte values) into a buffer of about
    :data:`PRODUCT_BLOCK_BYTES` per thread, with each missing call set to its variant's mean; the centring and the
    scale are applied to the other factor and as a rank-one term. With numba (:attr:`compiled`) neither product
    decodes: both look up tables of the codes (:mod:`.bed_tables`). Memory: the mapped file's pages, 2 bytes per
    missing call (4 above 65,536 people: where they are, found with the code counts, :attr:`missing_ptr`), and
    O(threads block + s r + d r).

    Parameters
    ----------
    raw : ndarray of shape (d, ceil(s / 4)), uint8
        The file's bytes after its 3-byte header, one row per variant (a read-only memory map).
    num_rows : int
        People in the file (the ``.fam``'s lines).
    block_bytes : int
        Target size of one float64 block of decoded allele counts when whole columns are read (counting codes,
        :meth:`blocks`).

    Attributes
    ----------
    num_rows, dimension : int
        ``s`` and ``d``: the people of the products (all the file's, or those :meth:`subset` keeps) and variants.
    people : ndarray of shape (s,), int64, or None
        The file's people (positions in the ``.fam``, ascending) the products, counts and rows are of
        (:meth:`subset`); ``None``: all of them.
    code_counts : ndarray of shape (d, 4), int64
        How many people carry each 2-bit code at each variant (counted once, in one read of the file, when first
        asked for: :data:`COUNTED`).
    person_calls : ndarray of shape (s,), int64
        Each person's non-missing calls.
    missing_ptr : ndarray of shape (d_file + 1,), int64
        The missing calls of the file's variant ``j`` (in file order, before any :meth:`aligned` list) are people
        ``missing_people[missing_ptr[j]:missing_ptr[j + 1]]`` (positions in the file, whatever :meth:`subset`).
    missing_people : ndarray of shape (missing calls,), uint16 (int32 above 65,536 people)
    row_weights : ndarray of shape (s,) or None
        ``omega``: the products are those of ``X^T diag(omega) X`` (:meth:`weighted`); ``None``: all ones.
    product_block : int
        Variants decoded at a time in a product (about :data:`PRODUCT_BLOCK_BYTES` of float64).
    right_block : int
        Variants of a block of a compiled right product (:data:`RIGHT_BLOCK_VARIANTS`).
    threads : int or None
        Threads of a product; ``None``: :func:`product_threads`.
    """

    sparse, normalize, clip, ndim, dtype = False, False, 0.0, 2, np.dtype(np.int8)
    compiled = bed_tables.available()
    """Whether the products run numba's compiled kernels (:mod:`.bed_tables`, where numba can be imported): the
    left products and row squares (:meth:`_left_tables`) and the right products (:meth:`_right_tables`) by table
    look-up; else numpy's decode (:meth:`_passes`)."""
    centers_inside = True
    """Whether this class centres and scales inside its products (missing calls need it): see
    :class:`~.products.LocalOperator`."""

    def __init__(self, raw: np.ndarray, num_rows: int, block_bytes: int = BLOCK_BYTES) -> None:
        self.rows = raw
        self.num_rows, self.dimension = int(num_rows), int(raw.shape[0])
        self.file_rows = self.num_rows  # the file's people, whatever subset() keeps
        self.people: np.ndarray | None = None
        self.shape = (self.num_rows, self.dimension)
        self.block = max(1, int(block_bytes) // (8 * max(self.num_rows, 1)))
        self.product_block = max(1, PRODUCT_BLOCK_BYTES // (32 * max(int(raw.shape[1]), 1)))
        self.right_block = RIGHT_BLOCK_VARIANTS
        self.threads: int | None = None
        self.columns: np.ndarray | None = None
        self.flip: np.ndarray | None = None
        self.row_weights: np.ndarray | None = None

    COUNTED = ("code_counts", "person_calls", "missing_ptr", "missing_people")
    """What :meth:`_count_codes` finds in one read of the file: on first use, not when the file is opened (a check
    that opens a file for its shape does not read it)."""

    def __getattr__(self, name: str):
        """:data:`COUNTED` on first use (:meth:`_count_codes`); any other missing attribute is an AttributeError."""
        if name in BedVariants.COUNTED and "rows" in self.__dict__:
            with _COUNTING:  # one count, whichever thread asks first
                if name not in self.__dict__:
                    self._count_codes()
            return self.__dict__[name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def _count_codes(self) -> None:
        """:attr:`code_counts` and :attr:`person_calls`, in one read of the file split over :func:`product_threads`
        threads: per variant, the four code counts of each byte (:data:`_PACKED_CODE_COUNTS`, four 8-bit lanes in
        one uint32) summed 63 bytes at a time without a lane overflowing; per person, the missing flags of each
        byte's four people (:data:`_PACKED_MISSING`) summed over at most 255 variants at a time; a last byte's
        padding codes are left out (with numba, :func:`.bed_tables.count_block` and
        :func:`.bed_tables.missing_people` do the same in compiled loops, 4x faster at 750 people). Of a
        :meth:`subset`, the codes of the people it leaves out are counted apart and taken off. The first time,
        on the file itself (before any :meth:`aligned` list or :meth:`subset`), also where its missing calls are
        (:attr:`missing_ptr`, :attr:`missing_people`, over all its people)."""
        s, d_file, width = self.file_rows, self.rows.shape[0], self.rows.shape[1]
        locate = "missing_ptr" not in self.__dict__  # the file's own missing calls: found once, on the file itself
        out = np.ones(s, dtype=bool)
        out[self.chosen()] = False
        out = np.flatnonzero(out)  # the people a subset leaves out (none without one)
        full = s // 4  # bytes of four people; a last partial byte is decoded
        counts = np.zeros((self.dimension, 4), dtype=np.int64)
        # about 4 MiB of uint32 a block, at most 255 variants
        step = max(1, min(255, PRODUCT_BLOCK_BYTES // (4 * max(width, 1))))
        starts = list(range(0, d_file, step))
        threads = _worker_count(self.threads, len(starts))
        chunks = np.arange(0, full, 63)
        people_dtype = np.uint16 if s <= np.iinfo(np.uint16).max + 1 else np.int32  # 2 bytes a missing call

        compiled = self.compiled

        def work(worker: int) -> tuple[np.ndarray, list]:
            missing = np.zeros(4 * width, dtype=np.int64)
            found = []
            packed = None if compiled else _scratch((step, width), np.uint32)  # mapped, not this thread's malloc
            block_counts, bytes_with = np.empty((step, 4), dtype=np.int64), np.empty(width, dtype=np.int64)
            for start in starts[worker::threads]:
                columns, raw = self._raw_range(start, start + step)
                b = raw.shape[0]
                if b == 0:
                    continue
                if compiled:  # one compiled loop a block: the same counts, without the uint32 block
                    bed_tables.count_block(raw, s, _PACKED_CODE_COUNTS, _PACKED_MISSING, block_counts[:b], missing)
                    counts[columns] = block_counts[:b]
                else:
                    if full:
                        np.take(_PACKED_CODE_COUNTS, raw[:, :full], out=packed[:b, :full])
                        lanes = np.add.reduceat(packed[:b, :full], chunks, axis=1, dtype=np.uint32)
                        counts[columns] = lanes.view(np.uint8).reshape(b, -1, 4).sum(axis=1, dtype=np.int64)
                    if full < width:
                        codes = _CODES[raw[:, full], : s - 4 * full]
                        counts[columns] += np.stack([np.count_nonzero(codes == code, axis=1) for code in range(4)],
                                                    axis=1)
                if out.size:
                    codes = _CODES[raw[:, out // 4], out % 4]
                    counts[columns] -= np.stack([np.count_nonzero(codes == code, axis=1) for code in range(4)],
                                                axis=1)
                if not compiled:
                    flags = np.take(_PACKED_MISSING, raw, out=packed[:b]).sum(axis=0, dtype=np.uint32)  # b <= 255
                    missing += flags.view(np.uint8).astype(np.int64)
                if locate and compiled:  # the file itself (no list, no subset): its missing calls are code 01's
                    per_variant = block_counts[:b, MISSING_CODE].copy()
                    people = np.empty(int(per_variant.sum()), dtype=people_dtype)
                    bed_tables.missing_people(raw, _PACKED_MISSING, bytes_with, people)
                    found.append((start, per_variant, people))
                elif locate:
                    found.append((start, *_missing_calls(raw, people_dtype)))
            return missing, found

        parts = _run_workers(work, threads)
        missing = sum(part[0] for part in parts)[:s]
        if self.people is not None:
            missing = missing[self.people]
        self.code_counts, self.person_calls = counts, self.dimension - missing
        if locate:
            found = sorted((f for part in parts for f in part[1]), key=lambda f: f[0])  # in file order
            parts = None
            self.missing_ptr = np.zeros(d_file + 1, dtype=np.int64)
            for start, per_variant, _ in found:
                self.missing_ptr[start + 1: start + 1 + per_variant.size] = per_variant
            np.cumsum(self.missing_ptr, out=self.missing_ptr)
            self.missing_people = np.empty(int(self.missing_ptr[-1]), dtype=people_dtype)
            while found:  # each block's people moved into place and let go: no second copy of them all at once
                start, per_variant, people = found.pop(0)
                self.missing_people[self.missing_ptr[start]: self.missing_ptr[start] + people.size] = people
        _release_freed_memory()

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
        self.missing_ptr  # the file's own missing calls, found in its own order before any list (_count_codes)
        other = object.__new__(BedVariants)
        other.__dict__.update(self.__dict__)
        other.columns, other.flip = np.asarray(columns, dtype=np.int64), np.asarray(flip, dtype=bool)
        other.dimension, other.shape = int(dimension), (self.num_rows, int(dimension))
        other.row_weights = None
        other._count_codes()
        return other

    def weighted(self, row_weights: np.ndarray) -> "BedVariants":
        """The same file with every person's row weighted by ``omega`` (s,) in the Gram matrix: ``X^T diag(omega)
        X`` (a shallow copy; the file is not read again)."""
        self.code_counts  # counted here once, shared with the copy (COUNTED)
        other = object.__new__(BedVariants)
        other.__dict__.update(self.__dict__)
        other.row_weights = np.asarray(row_weights, dtype=np.float64)
        return other

    def subset(self, people: np.ndarray) -> "BedVariants":
        """The same file restricted to some of its people (a shallow copy; one read to count their codes).

        Every product, count and row of the copy is of those people alone, as if the file held only them: the
        code counts (so the allele frequencies), each person's calls, :attr:`num_rows`, the decoded rows
        (:meth:`blocks`, ``__array__``) and the products (each decoded block's columns of those people, taken after
        its missing calls are imputed: :meth:`_passes`). Composes with :meth:`aligned` either way round.

        Parameters
        ----------
        people : ndarray of shape (s,), int
            Positions in the file (the ``.fam``'s lines, from 0), ascending and distinct, at least one.
        """
        people = np.asarray(people, dtype=np.int64).ravel()
        if people.size == 0 or np.any(np.diff(people) <= 0) or people[0] < 0 or people[-1] >= self.file_rows:
            raise ValueError(f"a subset of the file's {self.file_rows} people must be distinct positions in "
                             "0 .. people - 1, ascending, at least one")
        self.missing_ptr  # the file's own missing calls, found in its own order before any list (_count_codes)
        other = object.__new__(BedVariants)
        other.__dict__.update(self.__dict__)
        other.people = None if people.size == self.file_rows else people
        other.num_rows = int(people.size)
        other.shape = (other.num_rows, self.dimension)
        other.row_weights = None
        other._count_codes()
        return other

    def chosen(self) -> slice | np.ndarray:
        """The columns of a decoded block (one per person of the file and padding) that are :attr:`people`."""
        return slice(0, self.file_rows) if self.people is None else self.people

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

    def _raw_range(self, start: int, stop: int) -> tuple[slice | np.ndarray, np.ndarray]:
        """``(columns, raw)`` of the file's variants ``start .. stop - 1``: ``raw`` (b, ceil(s / 4)) the bytes of those
        :attr:`columns` keeps, a flipped variant's codes exchanged (``00`` and ``11``: ``g`` becomes ``2 - g``, a
        missing call stays missing), and ``columns`` their columns (a slice without a list)."""
        raw = np.asarray(self.rows[start:stop])
        stop = start + raw.shape[0]
        if self.columns is None:
            return slice(start, stop), raw
        keep = self.columns[start:stop] >= 0
        raw, flip = raw[keep], self.flip[start:stop][keep]
        if flip.any():
            raw[flip] = _FLIPPED_BYTES[raw[flip]]
        return self.columns[start:stop][keep], raw

    def _raw_blocks(self) -> Iterator[tuple[slice | np.ndarray, np.ndarray]]:
        """:meth:`_raw_range` of consecutive blocks of :attr:`block` variants in file order."""
        for start in range(0, self.rows.shape[0], self.block):
            yield self._raw_range(start, start + self.block)

    def _codes(self) -> Iterator[tuple[slice | np.ndarray, np.ndarray]]:
        """``(columns, codes)`` of consecutive variant blocks in file order; ``codes`` (b, s) uint8 in 0..3."""
        for columns, raw in self._raw_blocks():
            yield columns, np.take(_BYTE_CODES, raw).view(np.uint8).reshape(raw.shape[0], -1)[:, self.chosen()]

    def _counts_blocks(self) -> Iterator[tuple[slice | np.ndarray, np.ndarray]]:
        """``(columns, G_J)`` of consecutive variant blocks in file order: ``G_J`` (b, s) float64 the allele counts
        with a missing call 0 (a buffer the next block overwrites)."""
        buffer = None
        for columns, raw in self._raw_blocks():
            b = raw.shape[0]
            if buffer is None:
                buffer = _scratch((min(self.block, self.rows.shape[0]), self.num_rows))
            out = buffer[:b]
            np.copyto(out, np.take(_BYTE_COUNTS, raw).view(np.int8).reshape(b, -1)[:, self.chosen()],
                      casting="unsafe")
            yield columns, out

    def _passes(self, step, fill: np.ndarray | None, threads: int | None = None) -> None:
        """``step(worker, columns, D_J)`` for every block ``J`` of the file (about :data:`PRODUCT_BLOCK_BYTES`
        decoded), ``D_J`` (b, s) float64 the variants' allele counts with each missing call given ``fill`` of its
        column (``None``: 0): one ``np.take`` of the 256 byte values' four counts (:data:`_BYTE_COUNTS`, the same
        table for every variant), a cast to float64, and the block's missing calls (found when the file was
        opened, :attr:`missing_ptr`) set to their column's ``fill``, then the columns of :attr:`people` alone
        (a :meth:`subset`); each byte of the memory-mapped file read once, never a whole decoded copy. Centring
        and scaling are the callers' (:meth:`left`, :meth:`right`): with ``fill`` the mean, ``(D_J - mean) /
        scale`` is ``X_J``, a missing call 0. Worker ``w`` of ``threads``
        (default :attr:`threads`, else :func:`product_threads`) takes blocks ``w, w + threads, ...`` of
        :attr:`product_block` variants in file order, with one BLAS thread each when there are several."""
        d_file, width, chosen = self.rows.shape[0], self.rows.shape[1], self.chosen()
        b = max(1, min(d_file, self.product_block))
        threads = _worker_count(self.threads if threads is None else threads, -(-d_file // b))
        kept = None if self.columns is None else self.columns >= 0
        before = None if kept is None else np.concatenate([[0], np.cumsum(kept)])  # kept file variants before each

        def work(worker: int) -> None:
            packed = _scratch((b, width), np.uint32)  # mapped, as the decoded block: no arena keeps it
            decoded = _scratch((b, 4 * width))
            for start in range(worker * b, d_file, threads * b):
                stop = min(start + b, d_file)
                columns, raw = self._raw_range(start, start + b)
                k = raw.shape[0]
                if k == 0:
                    continue
                np.take(_BYTE_COUNTS, raw, out=packed[:k])
                block = decoded[:k]
                np.copyto(block, packed[:k].view(np.int8).reshape(k, 4 * width), casting="unsafe")
                lo, hi = self.missing_ptr[start], self.missing_ptr[stop]
                if fill is not None and hi > lo:
                    people = self.missing_people[lo:hi]
                    rows = np.repeat(np.arange(stop - start), np.diff(self.missing_ptr[start:stop + 1]))
                    if kept is not None:
                        keep = kept[start + rows]  # a dropped variant's calls are not in the block
                        rows, people = before[start + rows[keep]] - before[start], people[keep]
                    np.put(block, rows * (4 * width) + people, fill[columns][rows])
                step(worker, columns, block[:, chosen])  # a subset's people: a copy of their columns

        if threads == 1:
            work(0)
            return
        from threadpoolctl import threadpool_limits

        with threadpool_limits(limits=1, user_api="blas"):
            _run_workers(work, threads)

    def _left(self, Z: np.ndarray, mean: np.ndarray | None, scale: np.ndarray | None, threads: int | None,
              squares: bool = False) -> tuple[np.ndarray, np.ndarray | None]:
        """``(X Z, row squares or None)`` in one read of the file (:meth:`left`, :meth:`row_squares`).

        ``X Z = D (Z / scale) - 1 (mean^T (Z / scale))`` with ``D`` the counts, a missing call ``mean``
        (:meth:`_passes`): each worker adds ``D_J^T (Z / scale)_J`` of its blocks into its own sum, and the
        workers' sums are added in worker order (the same numbers whatever the threads' timing). ``squares``:
        ``||x_i||^2``, the block ``(D_J - mean_J) / scale_J`` squared and summed over its variants.
        """
        Zs = Z if scale is None else Z / np.asarray(scale, dtype=np.float64)[:, None]
        s, r = self.num_rows, Z.shape[1]
        if self.compiled:
            out, total = self._left_tables(Zs, mean, scale, threads, squares)
            if mean is not None:
                out -= np.asarray(mean, dtype=np.float64) @ Zs
            return out, total
        sums: dict[int, np.ndarray] = {}
        parts: dict[int, np.ndarray] = {}
        norms: dict[int, np.ndarray] = {}

        def step(worker, columns, DJ):
            if worker not in sums:
                sums[worker], parts[worker], norms[worker] = np.zeros((s, r)), np.empty((s, r)), np.zeros(s)
            if r:  # np.dot: it lets go of the GIL for these shapes, where the @ of numpy 2.4 does not
                np.dot(DJ.T, Zs[columns], out=parts[worker])
                sums[worker] += parts[worker]
            if squares:
                if mean is not None:
                    DJ -= mean[columns][:, None]
                if scale is not None:
                    DJ /= scale[columns][:, None]
                norms[worker] += np.einsum("ji,ji->i", DJ, DJ)

        self._passes(step, None if mean is None else np.asarray(mean, dtype=np.float64), threads)
        out, total = np.zeros((s, r)), np.zeros(s)
        for worker in sorted(sums):
            out += sums[worker]
            total += norms[worker]
        if mean is not None:
            out -= np.asarray(mean, dtype=np.float64) @ Zs
        return out, (total if squares else None)

    def _left_tables(self, Zs: np.ndarray, mean: np.ndarray | None, scale: np.ndarray | None, threads: int | None,
                     squares: bool) -> tuple[np.ndarray, np.ndarray | None]:
        """``(D Zs with each missing call its column's mean (0 without one), row squares or None)`` of
        :meth:`_left` with the compiled table kernel (:mod:`.bed_tables`): no decoded block.

        Per block of :attr:`product_block` variants (as :meth:`_passes`), each variant's four codes add ``g Zs_j``
        (its allele count ``g``, ``2 - g`` when flipped, a missing call 0), and with ``squares`` also ``((g -
        mean_j) / scale_j)^2`` in one more column (a missing call 0) (:func:`.bed_tables.left_block`); then every
        missing call adds ``mean_j Zs_j`` (:func:`.bed_tables.add_missing`). Worker ``w`` of ``threads`` sums
        blocks ``w, w + threads, ...`` into its own rows; the workers' sums are added in worker order. A
        :meth:`subset` keeps its people's rows.
        """
        d_file, width = self.rows.shape
        r = Zs.shape[1]
        wide = r + (1 if squares else 0)
        b = max(1, min(d_file, self.product_block))
        threads = _worker_count(self.threads if threads is None else threads, -(-d_file // b))
        mean = None if mean is None else np.asarray(mean, dtype=np.float64)
        scale = None if scale is None else np.asarray(scale, dtype=np.float64)
        fill = None if mean is None or r == 0 else mean[:, None] * Zs  # what a missing call adds, (d, r)
        centre = np.zeros(self.dimension) if mean is None else mean
        inverse = np.ones(self.dimension) if scale is None else 1.0 / scale
        Zs = np.ascontiguousarray(Zs)
        no_flip = np.zeros(b, dtype=bool)

        def work(worker: int) -> np.ndarray:
            out = np.zeros((4 * width, wide))
            table = np.empty((2, 256, wide))
            for start in range(worker * b, d_file, threads * b):
                raw = np.ascontiguousarray(self.rows[start:start + b])
                k = raw.shape[0]
                if self.columns is None:
                    columns, flip = np.arange(start, start + k), no_flip[:k]
                else:
                    columns, flip = self.columns[start:start + k], self.flip[start:start + k]
                bed_tables.left_block(raw, columns, flip, Zs, centre, inverse, squares, out, table)
                if fill is not None:
                    bed_tables.add_missing(self.missing_ptr, self.missing_people, start, start + k, columns, fill,
                                           out)
            return out

        sums = _run_workers(work, threads)
        total = sums[0]
        for part in sums[1:]:
            total += part
        total = total[self.chosen()]
        return np.ascontiguousarray(total[:, :r]), (total[:, r].copy() if squares else None)

    def _right_tables(self, Y: np.ndarray, fill: np.ndarray | None, threads: int | None) -> np.ndarray:
        """``D Y`` (d, r) of :meth:`right` with the compiled table kernels (:mod:`.bed_tables`): no decoded block.

        ``Y`` (s, r) is laid out over the file's people (zero rows for those a :meth:`subset` leaves out and for
        the padding); per :data:`RIGHT_PEOPLE_BYTES` of table, each byte of a person group gets a table of the 256
        values' sums of its four people's rows (:func:`.bed_tables.right_block`), so a variant costs a look-up per
        byte instead of a decode and ``4 r`` multiply-adds per byte; then the flipped variants and the missing
        calls' ``fill`` (:func:`.bed_tables.right_missing`). Worker ``w`` of ``threads`` takes the ``w``-th of
        equal runs of the file's variants, in blocks of :attr:`right_block` variants (the tables are built once per
        block), and writes its own rows of the result.
        """
        d_file, width = self.rows.shape
        r = Y.shape[1]
        wide = -(-r // 8) * 8  # the kernel sums eight columns at a time
        Y4 = np.zeros((4 * width, wide))
        Y4[self.chosen(), :r] = Y
        total = Y4.sum(axis=0)
        chunk = max(1, RIGHT_PEOPLE_BYTES // (256 * 8 * wide))
        threads = _worker_count(self.threads if threads is None else threads, d_file)
        columns = np.arange(d_file) if self.columns is None else self.columns
        flips = np.zeros(d_file, dtype=bool) if self.flip is None else self.flip
        fills = np.zeros(d_file) if fill is None else np.where(columns >= 0, fill[np.maximum(columns, 0)], 0.0)
        out = np.zeros((self.dimension, wide))
        edges = np.linspace(0, d_file, threads + 1).astype(np.int64)

        def work(worker: int) -> None:
            tables = np.empty((256 * chunk, wide))
            for start in range(edges[worker], edges[worker + 1], self.right_block):
                stop = min(start + self.right_block, edges[worker + 1])
                raw = np.ascontiguousarray(self.rows[start:stop])
                bed_tables.right_block(raw, columns[start:stop], Y4, chunk, out, tables)
                bed_tables.right_missing(self.missing_ptr, self.missing_people, start, stop, columns[start:stop],
                                         flips[start:stop], fills[start:stop], Y4, total, out)

        _run_workers(work, threads)
        return out if wide == r else np.ascontiguousarray(out[:, :r])

    def left(self, Z: np.ndarray, mean: np.ndarray | None = None, scale: np.ndarray | None = None,
             threads: int | None = None) -> np.ndarray:
        """``X Z`` with ``X`` (s, d) the people x variants of the class docstring, ``Z`` (d, r); (s, r).

        One read of the file in variant blocks ``J``: ``X Z = sum_J X_J^T Z_J``, with the centring and the scale
        applied to ``Z`` and as one rank-one term rather than to every decoded value (:meth:`_left`).
        """
        Z = np.asarray(Z, dtype=np.float64)
        out, _ = self._left(Z.reshape(Z.shape[0], -1), mean, scale, threads)
        return out.reshape((self.num_rows,) + Z.shape[1:])

    def right(self, Y: np.ndarray, mean: np.ndarray | None = None, scale: np.ndarray | None = None,
              threads: int | None = None) -> np.ndarray:
        """``X^T Y`` for ``Y`` (s, r): shape (d, r); one read of the file, ``D Y`` (the counts, a missing call
        ``mean``: by table look-up with numba, :meth:`_right_tables`, else per decoded variant block,
        :meth:`_passes`), then ``(D Y - mean 1^T Y) / scale``."""
        Y = np.asarray(Y, dtype=np.float64)
        Y2 = np.ascontiguousarray(Y.reshape(Y.shape[0], -1))
        fill = None if mean is None else np.asarray(mean, dtype=np.float64)
        if self.compiled and Y2.shape[1]:
            out = self._right_tables(Y2, fill, threads)
        else:
            out = np.zeros((self.dimension, Y2.shape[1]))

            def step(worker, columns, DJ):
                out[columns] = np.dot(DJ, Y2)  # np.dot: it lets go of the GIL (see _left)

            self._passes(step, fill, threads)
        if mean is not None:
            out -= np.asarray(mean, dtype=np.float64)[:, None] * Y2.sum(axis=0)
        if scale is not None:
            out /= np.asarray(scale, dtype=np.float64)[:, None]
        return out.reshape((self.dimension,) + Y.shape[1:])

    def product(self, Z: np.ndarray, mean: np.ndarray | None = None, scale: np.ndarray | None = None) -> np.ndarray:
        """``X^T diag(omega) (X Z)``, shape of ``Z`` (d, r): two reads of the file (:meth:`left`, then
        :meth:`right`)."""
        Y = self.left(Z, mean, scale)
        if self.row_weights is not None:
            Y *= self.row_weights.reshape((-1,) + (1,) * (Y.ndim - 1))
        return self.right(Y, mean, scale)

    def left_with_squares(self, Z: np.ndarray, mean: np.ndarray | None, scale: np.ndarray | None,
                          squares: bool = True) -> tuple[np.ndarray, np.ndarray | None]:
        """``(X Z, ||x_i||^2 of every person or None)``, shapes (s, r) and (s,), in one read of the file: :meth:`left`
        (the same numbers) and, with ``squares``, :meth:`row_squares` (unweighted)."""
        Z = np.asarray(Z, dtype=np.float64)
        return self._left(Z.reshape(Z.shape[0], -1), mean, scale, None, squares=squares)

    def row_squares(self, mean: np.ndarray, scale: np.ndarray | None = None) -> np.ndarray:
        """``||x_i||^2`` of every person's row of ``X`` (class docstring: ``(g - mean) / scale``, a missing call 0),
        unweighted, shape (s,): one read of the file."""
        return self._left(np.zeros((self.dimension, 0)), mean, scale, None, squares=True)[1]

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
        Z = np.asarray(Z, dtype=np.float64)
        Y, squares = self._left(Z.reshape(Z.shape[0], -1), mean, scale, None, squares=True)  # one read
        return self._diagonal_parts(Y, squares)

    def _diagonal_parts(self, Y: np.ndarray, squares: np.ndarray) -> tuple[np.ndarray, float]:
        """:meth:`missingness_diagonal` from ``Y = X Z`` (s, r) and the row squares ``||x_i||^2`` (s,)."""
        calls, d = self.person_calls.astype(np.float64), float(self.dimension)
        inverse = np.divide(1.0, calls, out=np.zeros(self.num_rows), where=calls > 0)
        delta = squares * (inverse - d * inverse * inverse)
        return (Y * (delta * self.missingness_weights())[:, None]).T @ Y, float(delta.sum())


    def summary(self, Z: np.ndarray, mean: np.ndarray | None, scale: np.ndarray | None, diagonal: bool,
                product: bool = True, left: tuple[np.ndarray, np.ndarray] | None = None,
                ) -> tuple[np.ndarray | None, float, tuple[np.ndarray, float] | None]:
        """What the summary exchange asks of a site, in two reads of the file instead of five (none with ``left`` and
        without ``product``).

        Returns ``(X^T diag(omega) X Z, sum_i omega_i ||x_i||^2, parts)``: the product (:meth:`product`), the
        trace of ``X^T diag(omega) X`` (what :meth:`centered_column_squares` sums, weighted), and with
        ``diagonal`` :meth:`missingness_diagonal`'s ``(S, sum delta)`` (else ``None``). One left pass gives ``Y = X
        Z`` and the row squares (:meth:`_left`), from which the trace and the diagonal's parts follow; one right
        pass the product.

        Parameters
        ----------
        Z : ndarray of shape (d, r)
        mean, scale : ndarray of shape (d,) or None
        diagonal : bool
        product : bool
            ``False``: no right pass, ``None`` for the product (the server knows it: ``product-known``).
        left : tuple of ndarray, optional
            ``(X Z, row squares)``, shapes (s, r) and (s,), where the site has them without a read (a ``krylov``
            site's kept blocks: :meth:`~fl_strategies.kernels.products.LocalOperator.kept_left`): no left pass.
        """
        Z = np.asarray(Z, dtype=np.float64)
        Y, squares = left if left is not None else self.left_with_squares(Z, mean, scale)
        parts = self._diagonal_parts(Y, squares) if diagonal else None
        weights = np.ones(self.num_rows) if self.row_weights is None else self.row_weights
        CZ = self.right(Y * weights[:, None], mean, scale).reshape(Z.shape) if product else None
        return CZ, float(weights @ squares), parts

    def column_counts(self, start: int, stop: int) -> np.ndarray:
        """The allele counts of columns ``start .. stop - 1`` (of the run's list where :meth:`aligned` gave one),
        variant-major: (stop - start, s) int8 over :attr:`people` (a ``.keep``'s), a missing call -1 (a flipped
        variant counted ``2 - g``)."""
        stop = min(int(stop), self.dimension)
        if self.columns is None:
            raw = np.asarray(self.rows[start:stop])
        else:
            rows = np.full(self.dimension, -1, dtype=np.int64)
            held = np.flatnonzero(self.columns >= 0)
            rows[self.columns[held]] = held
            wanted = rows[start:stop]
            raw = np.asarray(self.rows[wanted])
            flip = self.flip[wanted]
            if flip.any():
                raw[flip] = _FLIPPED_BYTES[raw[flip]]
        codes = np.take(_BYTE_CODES, raw).view(np.uint8).reshape(raw.shape[0], -1)[:, self.chosen()]
        return _CALL_COUNTS[codes]

    def call_counts(self) -> np.ndarray:
        """Non-missing calls per variant, shape (d,) float64."""
        return (self.num_rows - self.code_counts[:, MISSING_CODE]).astype(np.float64)

    def stats(self) -> tuple[np.ndarray, np.ndarray]:
        """``(allele sums, sums of squares)`` over the non-missing calls, both (d,) float64 (unweighted)."""
        c = self.code_counts
        return (2.0 * c[:, 0] + c[:, 2]).astype(np.float64), (4.0 * c[:, 0] + c[:, 2]).astype(np.float64)

    def centered_column_squares(self, mean: np.ndarray) -> np.ndarray:
        """``sum (g - mean)^2`` per variant over its non-missing calls, shape (d,), from the code counts (no
        cancellation), unweighted."""
        c = self.code_counts.astype(np.float64)
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
        for columns, block in self._counts_blocks():
            X[:, columns] = block.T
        yield X
