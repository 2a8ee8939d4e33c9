"""Output files a user can trust: no write through a link, no half-written file, CSV cells that stay data.

:func:`plain_cell` (and :func:`plain_frame` for a table) is the one escaper of
every CSV cell the project writes: a string a spreadsheet would execute as a
formula (it starts with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return
and is not a number) gets a leading ``'``, as the OWASP CSV-injection guidance
says; numbers, and strings such as ``-1.5e-3``, are written as they are. The
csv writer's own quoting takes care of separators and quotes inside a cell.

Every file the project writes goes through this module, so that no write ever follows a symbolic link:

* :func:`write_file` writes a whole file: the destination is looked at with ``lstat`` (a link, a directory, a
  FIFO or a device there is refused with :class:`UnsafeDestination`, one line naming it), the bytes go to a new
  temporary file in the same directory (created with ``O_EXCL | O_NOFOLLOW``) that is renamed over the
  destination once complete, so a kill leaves the old file or the new one, never a part, and a link planted
  between the check and the rename is replaced, never written through. The new file keeps the mode of the file
  it replaces (a new one gets the umask's), or mode ``0o600`` whatever the umask for private content.
* :func:`append_file` appends to a regular file opened with ``O_NOFOLLOW`` (a results table growing by a row).
* :func:`open_file` opens a regular file for writing with ``O_NOFOLLOW`` and keeps it open (a process's log, a
  lock file).
* :func:`make_directory` creates a directory the project writes into and refuses one that is a link.

A write that fails for want of room or for any other reason of the system (a full disk, a quota, an I/O error)
raises :class:`WriteFailed`, one line naming the file and the reason (``No space left on device (ENOSPC)``).
:func:`check_input` is the other side: a file the project is to read (a node's data, a run-config file) is
refused in one line when it is no regular file, named as what it is (a FIFO, a character device, ...).
"""

from __future__ import annotations

import errno
import os
import re
import secrets
import stat
from pathlib import Path
from typing import IO, Any, Callable, Union

__all__ = ["FORMULA_START", "plain_cell", "plain_frame", "same_file", "refuse_overwrite", "UnsafeDestination",
           "WriteFailed", "file_kind", "check_input", "check_destination", "check_below", "write_file",
           "append_file", "open_file", "make_directory"]

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


Content = Union[bytes, str, Callable[[IO[bytes]], None]]
"""What :func:`write_file` writes: bytes, text (UTF-8), or a function that writes to a binary handle."""

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
_KINDS = ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


class UnsafeDestination(OSError):
    """A destination that is no regular file (a symbolic link above all): one line naming it and what to do."""


class WriteFailed(OSError):
    """A file could not be written (a full disk, a quota, an I/O error): ``str()`` is one line naming the file and
    the reason, e.g. ``could not write '/out/rounds.csv': No space left on device (ENOSPC)``.

    ``errno``, ``strerror`` and ``filename`` are the failed call's; nothing of the file was left half-written by
    :func:`write_file` (the temporary file is removed; the old file, if any, is kept).
    """

    def __init__(self, path: str | Path, cause: OSError) -> None:
        super().__init__(cause.errno, cause.strerror or str(cause), str(path))
        code = errno.errorcode.get(cause.errno or 0)
        self.reason = f"{cause.strerror or cause}" + (f" ({code})" if code else "")
        self.line = f"could not write {str(path)!r}: {self.reason}"

    def __str__(self) -> str:
        return self.line


def file_kind(mode: int) -> str | None:
    """What a file of ``st_mode`` ``mode`` is when it is no regular file (``"a FIFO (named pipe)"``, ``"a character
    device"``, ...), else ``None``: the one wording of every refusal of a file that is not a regular one."""
    for test, kind in _KINDS:
        if test(mode):
            return kind
    return None if stat.S_ISREG(mode) else "a special file"



def check_input(path: str | Path, where: str) -> os.stat_result:
    """The ``stat`` of a file to be read (links followed), refused in one line unless it is a regular file.

    A FIFO would block its reader and a device (``/dev/zero``) never ends: each is named as what it is, not
    reported missing.

    Parameters
    ----------
    path : str or Path
    where : str
        How the message names the file (``"partition 1: node file '/data/partition_1.npy'"``).

    Raises
    ------
    ValueError
        ``"<where>: no such file"``, ``"<where>: is a symbolic link to a missing file"``, ``"<where>: is a FIFO
        (named pipe), not a regular file"`` (a directory, a character or block device, a socket), or ``"<where>:
        cannot be read: <reason>"``.
    """
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        dangling = os.path.islink(path)
        raise ValueError(f"{where}: {'is a symbolic link to a missing file' if dangling else 'no such file'}") \
            from None
    except OSError as ex:
        raise ValueError(f"{where}: cannot be read: {ex.strerror or ex}") from None
    kind = file_kind(st.st_mode)
    if kind:
        raise ValueError(f"{where}: is {kind}, not a regular file")
    return st


def _refusal(path: Path, kind: str) -> UnsafeDestination:
    return UnsafeDestination(f"{str(path)!r} is {kind}: refusing to write through it; remove it or choose "
                             "another destination")


def check_destination(path: str | Path) -> os.stat_result | None:
    """The ``lstat`` of ``path`` when it is a regular file, ``None`` when nothing is there.

    Raises
    ------
    UnsafeDestination
        When ``path`` is a symbolic link (whatever it points to), a directory, a FIFO, a device or a socket.
    """
    try:
        st = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):  # nothing there (a file above it is refused on writing)
        return None
    kind = file_kind(st.st_mode)
    if kind:
        raise _refusal(Path(path), kind)
    return st


def check_below(root: str | Path, path: str | Path) -> os.stat_result | None:
    """:func:`check_destination` of ``path``, after refusing a link at any directory between ``root`` and it.

    ``root`` itself (an output the user named) may be a link; what the project creates below it may not.

    Raises
    ------
    UnsafeDestination
        Naming the first link, or file where a directory belongs, on the way, or ``path`` itself.
    """
    root, path = Path(root), Path(path)
    current = root
    for part in path.relative_to(root).parts[:-1]:
        current = current / part
        try:
            st = os.lstat(current)
        except (FileNotFoundError, NotADirectoryError):
            return None
        if not stat.S_ISDIR(st.st_mode):
            raise _refusal(current, file_kind(st.st_mode) or "a file, not a directory")
    return check_destination(path)


def _temporary(path: Path, mode: int) -> tuple[int, Path]:
    """A new file beside ``path`` (``O_EXCL | O_NOFOLLOW``, created with ``mode`` under the umask): its fd and path."""
    while True:
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.part")
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, mode), tmp
        except FileExistsError:
            continue


def write_file(path: str | Path, content: Content, private: bool = False) -> Path:
    """Write ``path`` whole and atomically, never through a link (module docstring).

    Parameters
    ----------
    path : str or Path
        The destination; its directory must exist.
    content : bytes, str or callable
        The bytes, a text (written as UTF-8), or a function called with a binary handle open for writing.
    private : bool
        Mode ``0o600`` whatever the umask (a key, rows of a node, anything derived from them); otherwise the
        mode of the file replaced, or the umask's for a new file.

    Returns
    -------
    Path
        ``path``.

    Raises
    ------
    UnsafeDestination
        ``path`` is a link, a directory, a FIFO, a device or a socket; nothing is written.
    WriteFailed
        The file cannot be written (a full disk, no permission, the directory gone): one line naming ``path``
        and the reason; nothing is left behind and an old file is kept.
    """
    path = Path(path)
    before = check_destination(path)
    try:
        fd, tmp = _temporary(path, 0o600 if private else 0o666)
    except OSError as ex:
        raise WriteFailed(path, ex) from None
    try:
        with os.fdopen(fd, "wb") as handle:
            if private:
                os.fchmod(fd, 0o600)
            elif before is not None:
                os.fchmod(fd, stat.S_IMODE(before.st_mode))
            if callable(content):
                content(handle)
            else:
                handle.write(content.encode("utf-8") if isinstance(content, str) else content)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException as ex:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(ex, OSError) and not isinstance(ex, (UnsafeDestination, WriteFailed)):
            raise WriteFailed(path, ex) from None
        raise
    return path


def open_file(path: str | Path, truncate: bool = False, private: bool = False) -> IO[bytes]:
    """``path`` open for reading and writing (created if missing), never through a link.

    Parameters
    ----------
    path : str or Path
    truncate : bool
        Empty an existing file (a log written afresh).
    private : bool
        Mode ``0o600`` for a new file.

    Raises
    ------
    UnsafeDestination
        ``path`` is a link, a directory, a FIFO, a device or a socket.
    """
    path = Path(path)
    check_destination(path)
    flags = os.O_RDWR | os.O_CREAT | _NOFOLLOW | getattr(os, "O_NONBLOCK", 0) | (os.O_TRUNC if truncate else 0)
    try:
        fd = os.open(path, flags & ~os.O_TRUNC, 0o600 if private else 0o666)
    except OSError as ex:
        if ex.errno == errno.ELOOP:
            raise _refusal(path, "a symbolic link") from None
        raise
    kind = file_kind(os.fstat(fd).st_mode)
    if kind:  # replaced by a FIFO or a device after the check
        os.close(fd)
        raise _refusal(path, kind)
    os.set_blocking(fd, True)
    if truncate:
        os.ftruncate(fd, 0)
    return os.fdopen(fd, "r+b")


def append_file(path: str | Path, data: bytes) -> None:
    """Append ``data`` to the regular file ``path`` (created if missing), never through a link.

    Raises
    ------
    UnsafeDestination
        ``path`` is a link, a directory, a FIFO, a device or a socket.
    WriteFailed
        The data cannot be written (a full disk): one line naming ``path`` and the reason; the file is cut back
        to what it held before (a file created by this call is removed).
    """
    existed = os.path.lexists(path)
    with open_file(path) as handle:  # written unbuffered: closing it writes nothing more
        fd = handle.fileno()
        end = os.lseek(fd, 0, os.SEEK_END)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        except OSError as ex:  # a part of the row may be there: the file is cut back to its whole rows
            try:
                os.ftruncate(fd, end)
                if not existed:  # created here: not left behind empty
                    os.unlink(path)
            except OSError:
                pass
            raise WriteFailed(path, ex) from None


def make_directory(path: str | Path, mode: int = 0o777) -> Path:
    """Create the directory ``path`` (and its parents) if needed; refuse one that is a link or no directory.

    Raises
    ------
    UnsafeDestination
        ``path`` is a symbolic link (even to a directory) or another kind of file.
    """
    path = Path(path)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        path.mkdir(mode=mode, parents=True, exist_ok=True)
        st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafeDestination(f"{str(path)!r} is {file_kind(st.st_mode)}, not a directory: refusing to write "
                                "into it; remove it or choose another destination")
    return path
