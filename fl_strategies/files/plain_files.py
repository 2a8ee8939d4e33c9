"""Output files a user can trust: a single file written without damaging what is there, CSV cells that stay data.

:func:`plain_cell` (and :func:`plain_frame` for a table) is the one escaper of
every CSV cell the project writes: a string a spreadsheet would execute as a
formula (it starts with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return
and is not a number) gets a leading ``'``, as the OWASP CSV-injection guidance
says; numbers, and strings such as ``-1.5e-3``, are written as they are. The
csv writer's own quoting takes care of separators and quotes inside a cell.

:func:`write_new_file` is the one writer of a single output file a command
hands to its user (``client_app.transform``'s scores): the bytes go to a
temporary file of mode ``0o600`` in the target's directory, which is renamed
over the target only once complete, so a kill at any point leaves either the
old file or the new one, never a part. The mode stays ``0o600`` whatever the
umask: the output is derived from a node's private rows.
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path
from typing import IO, Any, Callable

__all__ = ["FORMULA_START", "plain_cell", "plain_frame", "same_file", "refuse_overwrite", "write_new_file"]

FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
"""First characters that make a spreadsheet read a cell as a formula (OWASP, CSV injection)."""

_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")


def plain_cell(value: Any) -> Any:
    """``value`` for a CSV cell: a string that a spreadsheet would execute gets a leading ``'``; else unchanged.

    Examples
    --------
    >>> plain_cell("=1+2"), plain_cell("-1.5e-3"), plain_cell("@SUM(A1)"), plain_cell(-2.0), plain_cell("power")
    ("'=1+2", '-1.5e-3', "'@SUM(A1)", -2.0, 'power')
    """
    if isinstance(value, str) and value.startswith(FORMULA_START) and not _NUMBER.fullmatch(value):
        return "'" + value
    return value


def plain_frame(frame):
    """A copy of a pandas DataFrame with :func:`plain_cell` applied to every cell of its non-numeric columns."""
    out = frame.copy()
    for column in out.columns:
        if getattr(out[column].dtype, "kind", "O") not in "biufcmM":  # not numbers, booleans or times
            out[column] = out[column].map(plain_cell)
    out.columns = [plain_cell(str(c)) if isinstance(c, str) else c for c in out.columns]
    return out


def same_file(a: str | Path, b: str | Path) -> bool:
    """Whether ``a`` and ``b`` name one file (through links, ``..`` or hard links); False if either is missing."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.realpath(a) == os.path.realpath(b)


def refuse_overwrite(out: str | Path, label: str, inputs: dict[str, str | Path], force: bool) -> None:
    """Refuse an output path that is one of the command's inputs, or that exists without ``force``.

    Parameters
    ----------
    out : str or Path
        The output path.
    label : str
        How messages name the output (``"--out"``).
    inputs : dict of str to path
        Each input's label (``"--data"``) and path; ``out`` may never be one of them, ``force`` or not.
    force : bool
        Whether an existing ``out`` (that is no input) may be replaced.

    Raises
    ------
    ValueError
        One line naming ``out`` and, where it is an input, that input.
    """
    for name, path in inputs.items():
        if same_file(out, path):
            raise ValueError(f"{label} {str(out)!r} is the {name} file {str(path)!r}: refusing to write over an "
                             f"input; choose another {label}")
    if os.path.lexists(out) and not force:
        raise ValueError(f"{label} {str(out)!r} already exists: choose a new path, or pass --force to replace it")


def write_new_file(out: str | Path, write: Callable[[IO[bytes]], None]) -> Path:
    """Write ``out`` atomically with mode ``0o600``: ``write(handle)`` fills a temporary file that is renamed.

    Parameters
    ----------
    out : str or Path
        The target; its directory must exist. A link at ``out`` is replaced, its target left alone.
    write : callable
        Called with a binary file handle open for writing.

    Returns
    -------
    Path
        ``out``.
    """
    out = Path(out)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".part", dir=out.parent or ".")
    try:
        with os.fdopen(fd, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, out)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return out
