"""Reading a secret file (a node's noise secret) so that nothing but a small private file is ever read.

A secret file passes when, looked at with ``lstat`` (a symbolic link is judged as a link, never followed):

* it is a regular file (not a symbolic link, FIFO, device, socket or directory);
* it is owned by the user who reads it (the effective uid);
* its mode is exactly ``0o600``: read and write for the owner, no other permission bit, no setuid, setgid or
  sticky bit;
* it holds exactly the expected number of bytes.

The file is then opened without following links and without blocking, checked again on the open descriptor
(the same file as the ``lstat``, in case it was replaced in between) and read with a bounded read: at most one
byte more than expected, whatever the file claims its size to be. Every refusal is a ``ValueError`` of one line
that names the file and the problem.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from .plain_files import file_kind

__all__ = ["PRIVATE_MODE", "read_secret_file", "create_secret_file"]

PRIVATE_MODE = 0o600
"""The only mode a secret file may have."""

def _problem(st: os.stat_result, size: int, what: str) -> str | None:
    """Why a file with status ``st`` is not a private regular file of ``size`` bytes, or ``None``."""
    kind = file_kind(st.st_mode)  # the one wording of a file that is no regular one
    if kind:
        return f"is {kind}, not a regular file"
    if st.st_uid != os.geteuid():
        return f"is owned by uid {st.st_uid}, not by the user reading it (uid {os.geteuid()})"
    mode = stat.S_IMODE(st.st_mode)
    if mode != PRIVATE_MODE:
        access = [verb for bits, verb in ((0o044, "read"), (0o022, "write"), (0o011, "execute")) if mode & bits]
        who = f"others may {' and '.join(access)} it (mode {mode:04o})" if access else f"has mode {mode:04o}"
        return f"{who}; it must be exactly 0600, private to its owner (chmod 600)"
    if st.st_size != size:
        return f"holds {st.st_size} bytes, not {what}"
    return None


def read_secret_file(path: str | Path, size: int, label: str, what: str = "") -> bytes:
    """The ``size`` bytes of the secret file ``path``, after the checks of the module docstring.

    Parameters
    ----------
    path : str or Path
    size : int
        The exact number of bytes the file must hold.
    label : str
        How messages name the file (e.g. ``"node config noise-secret"``); the path follows it.
    what : str
        What a file of the right size holds, for the message about a wrong size (default: ``"<size>"``).

    Raises
    ------
    ValueError
        One line naming the file and the problem: missing, not a regular file, another owner, a mode other than
        0600, another size, or unreadable.
    """
    where, what = f"{label} {str(path)!r}", what or str(size)
    try:
        before = os.lstat(path)
    except OSError as ex:
        raise ValueError(f"{where}: cannot be read: {ex.strerror or ex}") from None
    problem = _problem(before, size, what)
    if problem:
        raise ValueError(f"{where}: {problem}")
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError as ex:
        raise ValueError(f"{where}: cannot be read: {ex.strerror or ex}") from None
    try:
        now = os.fstat(fd)
        if (now.st_dev, now.st_ino) != (before.st_dev, before.st_ino):
            raise ValueError(f"{where}: was replaced while it was being read")
        problem = _problem(now, size, what)
        if problem:
            raise ValueError(f"{where}: {problem}")
        chunks, left = [], size + 1  # one byte more than expected tells a file that grew
        while left > 0:
            chunk = os.read(fd, left)
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    except OSError as ex:
        raise ValueError(f"{where}: cannot be read: {ex.strerror or ex}") from None
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) != size:
        raise ValueError(f"{where}: holds {len(data)} bytes, not {what}")
    return data


def create_secret_file(path: str | Path, secret: bytes, label: str) -> bool:
    """Create ``path`` holding ``secret``, mode 0600 from its first byte; ``False`` if something is there already.

    Never follows a symbolic link and never writes into an existing file (whatever it is: the caller then reads
    it with :func:`read_secret_file`, which judges it).

    Raises
    ------
    ValueError
        One line naming the file, when it cannot be created.
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags, PRIVATE_MODE)
    except FileExistsError:
        return False
    except OSError as ex:
        raise ValueError(f"{label} {str(path)!r}: cannot create it: {ex.strerror or ex}") from None
    with os.fdopen(fd, "wb") as f:
        os.fchmod(fd, PRIVATE_MODE)  # a umask may have taken the owner's bits away
        f.write(secret)
    return True
