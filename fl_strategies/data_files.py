"""Files of samples: reading and checking a ``.npy`` / ``.csv`` matrix whose rows are samples.

The one reader of user data files, used by a node for its ``data-path`` file
(:mod:`client_app.data`) and by the simulation harness for a ``dataset``
that names a file. A file passes when it holds one 2-D array of real numbers
(no strings, booleans, complex or object arrays), with at least one row and
one column and only finite entries; a ``.csv`` file is comma-separated
without a header. Every refusal is a ``ValueError`` that names the file
(prefixed by what the caller calls it, e.g. ``node config data-path``) and,
for a csv, the line and the cell.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np

__all__ = ["clip_rows", "FILE_SUFFIXES", "is_data_file", "read_samples", "normalize_rows"]

FILE_SUFFIXES = (".npy", ".csv")
"""File suffixes accepted as files of samples."""


def is_data_file(name: object) -> bool:
    """Whether ``name`` is a string ending in one of :data:`FILE_SUFFIXES` (case-insensitive)."""
    return isinstance(name, str) and name.lower().endswith(FILE_SUFFIXES)


def read_samples(path: str | Path, label: str = "file") -> np.ndarray:
    """Read and check a ``.npy`` / ``.csv`` file of samples.

    Parameters
    ----------
    path : str or Path
        The file; its suffix selects the format.
    label : str
        How error messages name the file (``'"dataset" file'``,
        ``"node config data-path"``); the path follows it.

    Returns
    -------
    ndarray of shape (n, d), float64
        ``n >= 1`` rows, ``d >= 1`` columns, every entry finite.

    Raises
    ------
    ValueError
        If the suffix is not ``.npy`` / ``.csv``, the file does not exist or
        cannot be parsed, or the array fails a check of the module docstring.
    """
    path = Path(path)
    where = f"{label} {str(path)!r}"
    if not is_data_file(str(path)):
        raise ValueError(f"{where}: must be a .npy or .csv file whose rows are samples")
    if not path.is_file():
        raise ValueError(f"{where}: no such file")
    X = _read_npy(path, where) if str(path).lower().endswith(".npy") else _read_csv(path, where)
    _validate_matrix(X, where)
    return X.astype(np.float64)


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


def _read_npy(path: Path, where: str) -> np.ndarray:
    try:
        X = np.load(path, allow_pickle=False)
    except Exception as exc:  # corrupt file, pickled object array, ...
        raise ValueError(f"{where}: is not a readable .npy array: {exc}") from exc
    if not isinstance(X, np.ndarray):
        raise ValueError(f"{where}: does not hold a single array")
    return X


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
    nonfinite = ~np.isfinite(X)
    count = int(nonfinite.sum())
    if count:
        first_row = int(np.argmax(nonfinite.any(axis=1)))
        raise ValueError(f"{where}: has {count} non-finite entries (NaN/inf), first in row {first_row}; all entries "
                         "must be finite")
