"""One owner per folder: the lock a command (and a ServerApp) holds on what it writes, for the whole run.

Every folder a run writes (``results-dir``, ``checkpoint-dir``, ``deploy --out``, ``compare --out``) and the file
``transform --out`` writes has one owner at a time. The owner holds an exclusive ``fcntl.flock`` on a lock file in
the folder (:data:`OWNER_LOCK`; for a file, ``.NAME.lock`` beside it) from before it writes anything until it
ended, however it ends: released by :meth:`FolderLock.release` (the file is removed), or by the kernel when the
process dies (a SIGKILL leaves the file, unlocked: the next owner takes it). A second process is refused at once
(never waits) with :class:`FolderInUse`, one line naming the folder and the holder (its pid and command, written
in the lock file), before it has written anything. ``flock`` locks belong to an open file, not to a process: two
owners in one process (a test, a comparison's runs) exclude each other too, and a lock is never inherited by a
program a command starts (the file is opened close-on-exec).

Two locks, because the writer is not always the command's own process
-----------------------------------------------------------------------
``fedspectral run`` and ``deploy`` hand the run to Flower: the ServerApp that writes ``results-dir`` and
``checkpoint-dir`` runs in a process that Flower's SuperLink starts (``flwr-simulation``, ``flwr-serverapp``),
which is no child of the command and whose lock the command cannot hold for it (a lock passes through no
SuperLink). So:

* the **owner lock** (:data:`OWNER_LOCK`, ``.fedspectral.lock``) is held by the command, ``run``, ``deploy``,
  ``compare`` or ``transform``, for its whole life, including the stop of every process it started;
* the **writer lock** (:data:`WRITER_LOCK`, ``.fedspectral-writer.lock``) is held by the ServerApp itself while it
  runs (:func:`server_app.app.build_strategy`, before it removes or writes a file), in whatever process Flower
  runs it: a plain ``flwr run .`` is covered too.

A command takes the owner lock and checks that no writer holds the writer lock (:func:`own_folders`), so two
commands, or a command and a running ``flwr run .``, exclude each other before Flower starts (exit status 2). A
ServerApp takes only the writer lock: it never meets its own command's owner lock, so it cannot deadlock against
(or be refused by) the command that started it; two ServerApps (two plain ``flwr run .``) exclude each other by
the writer lock, and the later one fails before round 1 naming the holder. A comparison's runs are ServerApps in
the comparison's own process: their writer locks (on their own ``results-dir`` and ``checkpoint-dir``) are other
files than the comparison's owner locks (its ``--out``, every run's ``checkpoint-dir``), so they do not meet
either. Left open: a plain ``flwr run .`` started while a command's run is still starting (its ServerApp not yet
running) wins the writer lock, and the command's run then fails before round 1 naming it.
"""

from __future__ import annotations

import fcntl
import os
import sys
import time
from pathlib import Path

from ..settings.errors import ConfigError
from .plain_files import UnsafeDestination, open_file

__all__ = ["OWNER_LOCK", "WRITER_LOCK", "FolderInUse", "FolderLock", "FolderLocks", "holder", "own_folders"]

OWNER_LOCK = ".fedspectral.lock"
"""The lock file of the command that owns a folder for its run."""
WRITER_LOCK = ".fedspectral-writer.lock"
"""The lock file of the ServerApp that writes a folder while it runs."""


class FolderInUse(ConfigError):
    """A folder (or file) is owned by another process; the message names it and the holder, in one line."""


def this_process(what: str | None = None) -> str:
    """``pid N: COMMAND`` for a lock file: ``what``, or this process's command line (at most 200 characters)."""
    if what is None:
        argv = [Path(sys.argv[0]).name if sys.argv and sys.argv[0] else "python", *sys.argv[1:]]
        what = " ".join(argv)
    what = " ".join(what.split())
    return f"pid {os.getpid()}: {what[:200]}"


class FolderLock:
    """An exclusive, non-blocking lock on a folder (or a file) for one owner.

    Parameters
    ----------
    path : str or Path
        The folder (created if missing), or with ``file=True`` the file to be written (its folder must exist).
    label : str
        How messages name it: ``results-dir``, ``--out``, ``checkpoint-dir (run 'a' seed 0)``.
    writer : bool
        Take the ServerApp's :data:`WRITER_LOCK` instead of the command's :data:`OWNER_LOCK`.
    file : bool
        ``path`` is a file: the lock is ``.NAME.lock`` beside it.
    what : str, optional
        The holder's description written in the lock file (default: this process's command line).

    Raises
    ------
    FolderInUse
        From :meth:`acquire`: another owner holds it (the message names the holder).
    fl_strategies.files.plain_files.UnsafeDestination
        The lock file's name is taken by a link, a folder or a device.
    """

    def __init__(self, path: str | Path, label: str, *, writer: bool = False, file: bool = False,
                 what: str | None = None) -> None:
        self.path, self.label, self.file, self.what = Path(path), label, file, what
        folder = self.path.parent if file else self.path
        name = f".{self.path.name}.lock" if file else (WRITER_LOCK if writer else OWNER_LOCK)
        self.lock_path = folder / name
        self._handle = None

    def refusal(self, holder_text: str) -> FolderInUse:
        """The one-line refusal naming the holder."""
        return FolderInUse(f"{self.label} {str(self.path)!r} is in use by {holder_text or 'another process'}; "
                           f"wait for it to end (or stop it), or choose another {self.label.split(' (')[0]}")

    def acquire(self) -> "FolderLock":
        """Take the lock (never waits); :class:`FolderInUse` naming the holder when another owner has it.

        A lock this object holds already is kept (``with`` on a taken lock releases it at the end)."""
        if self._handle is not None:
            return self
        for _ in range(100):
            handle = self._open()
            if not _lock_soon(handle):
                text = handle.read(400).decode("utf-8", "replace").strip()
                handle.close()
                raise self.refusal(text)
            try:  # the holder before may have removed the file between our open and our lock: lock the new one
                same = os.stat(self.lock_path, follow_symlinks=False).st_ino == os.fstat(handle.fileno()).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            handle.close()
        else:  # pragma: no cover (a file removed and created a hundred times in a row)
            raise self.refusal("")
        handle.seek(0)
        handle.truncate()
        handle.write(f"{this_process(self.what)}\n".encode())
        handle.flush()
        self._handle = handle
        return self

    def _open(self):
        """The lock file, open (created if missing, with the folder); :class:`ConfigError` naming the folder if
        it cannot be (as :func:`fl_strategies.settings.config.writable_directory`)."""
        try:
            if not self.file:
                self.path.mkdir(parents=True, exist_ok=True)
            return open_file(self.lock_path)
        except UnsafeDestination:
            raise
        except OSError as ex:
            what = "its folder is not writable" if self.file else "is not a writable directory"
            raise ConfigError(f"{self.label} = {str(self.path)!r} {what}: {type(ex).__name__}: {ex}") from None

    @property
    def held(self) -> bool:
        return self._handle is not None

    def release(self) -> None:
        """Give the lock up and remove its file (idempotent)."""
        handle, self._handle = self._handle, None
        if handle is None:
            return
        try:
            self.lock_path.unlink()  # while still held: nobody locks this file after it has gone
        except OSError:
            pass
        fcntl.flock(handle, fcntl.LOCK_UN)
        handle.close()

    def __enter__(self) -> "FolderLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def _lock_soon(handle) -> bool:
    """Lock ``handle`` exclusively; ``False`` if another owner still holds it after three tries 20 ms apart (a
    :func:`holder` check holds a lock for microseconds)."""
    for attempt in range(3):
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if attempt < 2:
                time.sleep(0.02)
    return False


def holder(path: str | Path, writer: bool = False) -> str | None:
    """Who holds ``path``'s owner (or ``writer``) lock now (``pid N: COMMAND``), or ``None`` if nobody does.

    Nothing is created: a folder without the lock file has no holder.
    """
    lock_path = Path(path) / (WRITER_LOCK if writer else OWNER_LOCK)
    try:
        fd = os.open(lock_path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        text = os.read(fd, 400).decode("utf-8", "replace").strip()
        os.close(fd)
        return text or "another process"
    fcntl.flock(fd, fcntl.LOCK_UN)
    os.close(fd)
    return None


class FolderLocks:
    """Several :class:`FolderLock` taken together (each folder once, in a fixed order) and released together."""

    def __init__(self, locks: list[FolderLock]) -> None:
        self.locks = locks

    def acquire(self) -> "FolderLocks":
        try:
            for lock in self.locks:
                lock.acquire()
        except BaseException:
            self.release()
            raise
        return self

    def release(self) -> None:
        for lock in reversed(self.locks):
            lock.release()

    def __enter__(self) -> "FolderLocks":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def folder_locks(folders: dict[str, str | Path | None], *, writer: bool = False,
                 what: str | None = None) -> FolderLocks:
    """The (not yet taken) locks of ``folders`` (label -> folder; empty ones skipped, one folder once)."""
    seen: dict[Path, FolderLock] = {}
    for label, folder in folders.items():
        if not folder:
            continue
        key = Path(folder).resolve()
        if key not in seen:
            seen[key] = FolderLock(key, label, writer=writer, what=what)
    return FolderLocks([seen[key] for key in sorted(seen)])


def own_folders(folders: dict[str, str | Path | None], what: str | None = None) -> FolderLocks:
    """Take the owner locks of ``folders`` for a command, refusing a folder a ServerApp writes now.

    Returns
    -------
    FolderLocks
        Held; release them (or use them as a context manager) when the command has ended.

    Raises
    ------
    FolderInUse
        One line naming the folder and its holder: another command owns it, or a ServerApp (a plain
        ``flwr run .``) is writing it. Nothing is held then.
    """
    locks = folder_locks(folders, what=what).acquire()
    for lock in locks.locks:
        writing = holder(lock.path, writer=True)
        if writing is not None:
            locks.release()
            raise lock.refusal(f"a running ServerApp ({writing})")
    return locks
