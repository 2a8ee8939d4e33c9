"""Files of samples: reading and checking a ``.npy`` / ``.csv`` / ``.npz`` matrix whose rows are samples.

The one reader of user data files, used by a node for its ``data-path`` file
(:mod:`client_app.data`) and by the simulation harness for a ``dataset``
that names a file. A file passes when it holds one 2-D array of real numbers
(no strings, booleans, complex or object arrays), with at least one row and
one column and only finite entries; a ``.csv`` file is comma-separated
without a header; a ``.npz`` file is a scipy sparse matrix (``scipy.sparse.save_npz``); a ``.bed`` file is a
PLINK 1 variant-major genotype file (with its ``.fam`` and ``.bim`` beside it, which give its people and
variants): people are rows, variants columns, the A1 allele counted 0/1/2, memory-mapped and decoded block by
block of variants in the file's order (:class:`~fl_strategies.kernels.rows.BedVariants`); a missing call is
kept (the eigenspace products impute it with the federation's mean, :mod:`fl_strategies.kernels.standardize`); a
``.pgen`` file (PLINK 2, with its ``.pvar`` and ``.psam``) is decoded once into a ``.bed``'s codes and read as one
(:mod:`fl_strategies.files.pgen`).

:func:`open_samples` gives the data as stored (a ``.npy`` file memory-mapped in its own dtype, int8 genotypes
included; a sparse matrix as it is; a ``.bed`` file as :class:`~fl_strategies.kernels.rows.BedVariants`),
checked block by block, for the clients that stream their rows (:mod:`fl_strategies.kernels.rows`); :func:`read_samples` gives a float64 copy. Every refusal is a
``ValueError`` that names the file (prefixed by what the caller calls it, e.g. ``node config data-path``) and,
for a csv, the line and the cell.
"""

from __future__ import annotations

import hashlib
import os
import re
import warnings
from functools import lru_cache
from pathlib import Path

import numpy as np

from ..kernels.rows import BLOCK_BYTES, BedVariants, clip_rows, normalize_rows
from .plain_files import check_input

__all__ = ["clip_rows", "FILE_SUFFIXES", "GENOTYPE_SUFFIXES", "is_data_file", "is_genotype_file", "open_samples",
           "read_samples", "normalize_rows", "FINGERPRINT", "file_fingerprint"]

FILE_SUFFIXES = (".npy", ".csv", ".npz", ".bed", ".pgen")
"""File suffixes accepted as files of samples."""

GENOTYPE_SUFFIXES = (".bed", ".pgen")
"""The PLINK genotype files among them (read as :class:`~fl_strategies.kernels.rows.BedVariants`, their variants
and people in the files beside them: :func:`fl_strategies.files.variants.read_bim`, ``read_fam``)."""


def is_data_file(name: object) -> bool:
    """Whether ``name`` is a string ending in one of :data:`FILE_SUFFIXES` (case-insensitive)."""
    return isinstance(name, str) and name.lower().endswith(FILE_SUFFIXES)


def is_genotype_file(name: object) -> bool:
    """Whether ``name`` (a str or Path) ends in one of :data:`GENOTYPE_SUFFIXES` (case-insensitive)."""
    return isinstance(name, (str, Path)) and str(name).lower().endswith(GENOTYPE_SUFFIXES)


def open_samples(path: str | Path, label: str = "file"):
    """Open and check a ``.npy`` / ``.csv`` / ``.npz`` file of samples, keeping the data as stored.

    Parameters
    ----------
    path : str or Path
        The file; its suffix selects the format.
    label : str
        How error messages name the file (``'"dataset" file'``,
        ``"node config data-path"``); the path follows it.

    Returns
    -------
    ndarray, numpy.memmap or scipy.sparse.csr_matrix of shape (n, d)
        A ``.npy`` file memory-mapped read-only in its stored dtype; a ``.csv`` file as float64; a ``.npz`` file
        as a CSR matrix in its stored dtype. ``n >= 1`` rows, ``d >= 1`` columns, every entry finite (checked
        in row blocks).

    Raises
    ------
    ValueError
        If the suffix is not one of :data:`FILE_SUFFIXES`, the file does not exist, is no regular file (a FIFO,
        a device: named as what it is, :func:`~fl_strategies.files.plain_files.check_input`) or cannot be
        parsed, or the array fails a check of the module docstring.
    """
    path = Path(path)
    where = f"{label} {str(path)!r}"
    if not is_data_file(str(path)):
        raise ValueError(f"{where}: must be a .npy or .csv file (or a scipy sparse .npz, a PLINK .bed or .pgen) "
                         "whose rows are samples")
    check_input(path, where)  # missing, or a FIFO, a device, a directory: named as what it is
    suffix = path.suffix.lower()
    readers = {".npy": _read_npy, ".npz": _read_npz, ".bed": _read_bed, ".pgen": _read_pgen}
    X = readers.get(suffix, _read_csv)(path, where)
    _validate_matrix(X, where)
    return X


def read_samples(path: str | Path, label: str = "file") -> np.ndarray:
    """Read and check a file of samples (:func:`open_samples`) into memory as float64.

    Returns
    -------
    ndarray of shape (n, d), float64
        ``n >= 1`` rows, ``d >= 1`` columns, every entry finite.

    Raises
    ------
    ValueError
        As :func:`open_samples`.
    """
    X = open_samples(path, label)
    return X.toarray().astype(np.float64) if hasattr(X, "toarray") else np.array(X, dtype=np.float64)


FINGERPRINT = "data-fingerprint"
"""Discovery property in which a node reports its data's fingerprint (a checkpoint records it for resume)."""


def file_fingerprint(path: str | Path) -> str:
    """SHA-256 (hex) of the bytes of the file ``path``: what tells the same data from other data on resume.

    Computed once per file version and process (cached on the file's device, inode, size and modification
    time, so a replaced or rewritten file is read again), in blocks of 1 MiB.

    Raises
    ------
    ValueError
        If the file cannot be read (the message names it).
    """
    st = check_input(path, f"data file {str(path)!r}")  # a FIFO would block the read: named as one
    return _fingerprint_cached(os.path.abspath(path), (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns))


@lru_cache(maxsize=64)
def _fingerprint_cached(path: str, version: tuple) -> str:
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as handle:
            while block := handle.read(1 << 20):
                digest.update(block)
    except OSError as ex:
        raise ValueError(f"data file {path!r}: cannot be read: {ex.strerror or ex}") from None
    return digest.hexdigest()


def _read_npy(path: Path, where: str) -> np.ndarray:
    try:
        X = np.load(path, allow_pickle=False, mmap_mode="r")
    except Exception as exc:  # corrupt file, pickled object array, ...
        raise ValueError(f"{where}: is not a readable .npy array: {exc}") from exc
    if not isinstance(X, np.ndarray):
        raise ValueError(f"{where}: does not hold a single array")
    return X


def _read_npz(path: Path, where: str):
    import scipy.sparse

    try:
        X = scipy.sparse.load_npz(path)
    except Exception as exc:  # a numpy savez archive, a corrupt file, ...
        raise ValueError(f"{where}: is not a scipy sparse matrix (scipy.sparse.save_npz): {exc}") from exc
    return X.tocsr()


_BLANK_LINE = re.compile(rb"\n[ \t\r\f\v]*\n")
"""A line of white space alone (or none) between two newlines: what :func:`_lines` does not count."""


def _lines(path: Path) -> int:
    """The lines of ``path`` that are not blank (a ``.fam`` or ``.bim``: one person or variant each): its
    newlines counted in one pass, line by line only where a blank line is there."""
    with open(path, "rb") as handle:
        data = handle.read()
    body = b"\n" + (data[:-1] if data.endswith(b"\n") else data) + b"\n"  # every line between two newlines
    if _BLANK_LINE.search(body) is None:
        return body.count(b"\n") - 1
    return sum(1 for line in data.splitlines() if line.strip())


def _read_bed(path: Path, where: str) -> BedVariants:
    """The ``.bed`` file memory-mapped in its own variant-major order
    (:class:`~fl_strategies.kernels.rows.BedVariants`), its people counted in the ``.fam`` and its variants in the
    ``.bim`` beside it."""
    for companion in (".fam", ".bim"):  # a FIFO there would block the count below
        check_input(path.with_suffix(companion), f"{where}: its {companion}")
    try:
        people, variants = _lines(path.with_suffix(".fam")), _lines(path.with_suffix(".bim"))
    except OSError as exc:
        raise ValueError(f"{where}: is not a readable PLINK .bed file (with its .fam and .bim): {exc}") from None
    width = (people + 3) // 4
    with open(path, "rb") as handle:
        magic = handle.read(3)
    if magic != b"\x6c\x1b\x01":
        raise ValueError(f"{where}: is not a variant-major PLINK 1 .bed file (its first bytes are not 6c 1b 01)")
    if path.stat().st_size != 3 + variants * width:
        raise ValueError(f"{where}: has {path.stat().st_size} bytes, but its .fam ({people} people) and .bim "
                         f"({variants} variants) need {3 + variants * width}")
    if people < 1 or variants < 1:
        raise ValueError(f"{where}: has {people} people and {variants} variants; at least one of each is required")
    raw = np.memmap(path, dtype=np.uint8, mode="r", offset=3, shape=(variants, width))
    X = BedVariants(raw, people)
    if people % 4:  # the padding codes of each variant's last byte are 00 in a well-formed file
        padding = np.uint8((0xFF << (2 * (people % 4))) & 0xFF)
        if np.any(np.asarray(raw[:, -1]) & padding):
            raise ValueError(f"{where}: holds genotype calls beyond the {people} people its .fam lists (is the .fam "
                             "short of people?)")
    return X


def _read_pgen(path: Path, where: str) -> BedVariants:
    """The ``.pgen`` file as the codes of a ``.bed`` (:func:`fl_strategies.files.pgen.read_pgen`)."""
    from .pgen import read_pgen

    return read_pgen(path, where)


def _read_csv(path: Path, where: str) -> np.ndarray:
    bad = _first_non_numeric_cell(path)
    if bad is not None:
        line_no, cell = bad
        raise ValueError(f"{where}: line {line_no}: cell {cell!r} is not a number; the csv must be numeric, "
                         "comma-separated, without a header")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # empty-file warning; checked below
            return np.loadtxt(path, delimiter=",", dtype=np.float64, ndmin=2)
    except ValueError as exc:  # e.g. ragged rows
        raise ValueError(f"{where}: could not be parsed as csv: {exc}") from exc


def _first_non_numeric_cell(path: Path) -> tuple[int, str] | None:
    """Return ``(1-based line number, cell)`` of the first non-numeric cell, or None."""
    with open(path, encoding="utf-8", errors="replace") as handle:
        for line_no, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            for cell in line.rstrip("\r\n").split(","):
                try:
                    float(cell)
                except ValueError:
                    return line_no, cell.strip()
    return None


def _validate_matrix(X: np.ndarray, where: str) -> None:
    """Check a loaded matrix: real numeric, 2-D, non-empty, finite."""
    if X.dtype == np.bool_ or not np.issubdtype(X.dtype, np.number) or np.iscomplexobj(X):
        raise ValueError(f"{where}: has dtype {X.dtype}; a real numeric array is required")
    if X.ndim != 2:
        raise ValueError(f"{where}: has shape {X.shape}; a 2-D array (rows = samples) is required")
    if X.shape[0] < 1 or X.shape[1] < 1:
        raise ValueError(f"{where}: has shape {X.shape}; at least 1 row and 1 column are required")
    if np.issubdtype(X.dtype, np.integer):
        return
    if hasattr(X, "tocsr"):
        bad = ~np.isfinite(X.data)
        if bad.any():
            first_row = int(np.searchsorted(X.indptr, int(np.argmax(bad)), side="right") - 1)
            raise ValueError(f"{where}: has {int(bad.sum())} non-finite entries (NaN/inf), first in row "
                             f"{first_row}; all entries must be finite")
        return
    count, first_row = 0, None
    step = max(1, BLOCK_BYTES // (8 * X.shape[1]))
    for start in range(0, X.shape[0], step):
        nonfinite = ~np.isfinite(X[start:start + step])
        found = int(nonfinite.sum())
        if found and first_row is None:
            first_row = start + int(np.argmax(nonfinite.any(axis=1)))
        count += found
    if count:
        raise ValueError(f"{where}: has {count} non-finite entries (NaN/inf), first in row {first_row}; all entries "
                         "must be finite")
