"""The argument parser of every fedspectral command line: a bad argument is one line, exit status 2.

Used by the ``fedspectral`` command's subcommands (:mod:`fedspectral.cli`) and by their ``python -m`` entry
points, which name themselves as ``prog`` (``fedspectral run: error: ...`` or
``python -m simulations.engines.flwr_run: error: ...``), and the way they stop on a signal: SIGTERM and SIGHUP
as Ctrl-C (:class:`StopSignals`, :class:`Interrupted`).
"""

from __future__ import annotations

import argparse
import signal
import threading

__all__ = ["ArgumentParser", "Interrupted", "StopSignals", "interruption", "stop_signals"]


class ArgumentParser(argparse.ArgumentParser):
    """``argparse.ArgumentParser`` whose refusal of a bad argument is one line (``prog: error: argument ...``).

    The description and the epilog (a command's examples and exit statuses) are printed as written
    (``RawDescriptionHelpFormatter``) unless another ``formatter_class`` is given.
    """

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str):  # noqa: D102
        self.exit(2, f"{self.prog}: error: {message}\n")


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
"""The signals that stop a command the way Ctrl-C does (:func:`stop_signals`)."""


class Interrupted(KeyboardInterrupt):
    """A stop signal arrived (Ctrl-C's SIGINT, SIGTERM, SIGHUP): raised where the command is, like Ctrl-C.

    Attributes
    ----------
    signum : int
        The signal; :attr:`name` is its name and :attr:`status` the exit status it gives (``128 + signum``).
    """

    def __init__(self, signum: int = signal.SIGINT) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = int(signum)

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name

    @property
    def status(self) -> int:
        return 128 + self.signum


def interruption(ex: BaseException) -> Interrupted:
    """``ex`` (a ``KeyboardInterrupt``) as an :class:`Interrupted` (a plain one is Ctrl-C's SIGINT)."""
    return ex if isinstance(ex, Interrupted) else Interrupted(signal.SIGINT)


class StopSignals:
    """While active, SIGINT, SIGTERM and SIGHUP raise :class:`Interrupted` in the main thread.

    A command then stops the same way whether Ctrl-C was pressed or it was sent SIGTERM (a ``kill``, a job
    scheduler, a test's timeout): its ``finally`` blocks stop what it started and release what it holds. Only the
    first signal is raised: a further one (a second Ctrl-C) does not interrupt the stop, nor one inside
    :meth:`deferred`; it is only remembered (:attr:`pending`). A SIGINT that was ignored when the command
    started (a background job of a shell script) stays ignored.
    Outside the main thread nothing is installed.
    """

    def __init__(self) -> None:
        self._previous: dict[int, object] = {}
        self._deferring = False
        self.pending: int | None = None

    def _handle(self, signum, frame) -> None:
        if self._deferring or self.pending is not None:  # the command is stopping already
            self.pending = signum
            return
        self.pending = signum
        raise Interrupted(signum)

    def __enter__(self) -> "StopSignals":
        if threading.current_thread() is not threading.main_thread():
            return self
        for sig in STOP_SIGNALS:
            previous = signal.getsignal(sig)
            if sig == signal.SIGINT and previous is signal.SIG_IGN:
                continue
            self._previous[sig] = previous
            signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)
        self._previous = {}

    def deferred(self):
        """A context in which a stop signal is remembered (:attr:`pending`) instead of raised."""
        owner = self

        class _Deferred:
            def __enter__(self):
                owner._deferring = True
                return owner

            def __exit__(self, *exc):
                owner._deferring = False

        return _Deferred()


def stop_signals() -> StopSignals:
    """:class:`StopSignals` for ``with``: SIGTERM and SIGHUP stop the command as Ctrl-C does."""
    return StopSignals()
