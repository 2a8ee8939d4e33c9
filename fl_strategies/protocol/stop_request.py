"""A stop of the process the ServerApp runs in ends the run between two rounds, not in the middle of one.

Flower's ``flwr-simulation`` and ``flwr-serverapp`` processes turn a stop signal into ``flwr_exit``
(``flwr/supercore/exit``): SIGINT in both, SIGTERM in ``flwr-serverapp`` (in ``flwr-simulation`` Ray replaces
that handler by its own, which only ends the main thread: ``fedspectral run`` sends SIGINT). ``flwr_exit`` runs
the registered exit handlers, then ends the process; the ServerApp's thread would go on writing rounds until the
process is ended 5 s later (``FORCE_EXIT_TIMEOUT_SECONDS``), wherever it is. With :func:`install` (called by the
ServerApp in those processes) the first exit handler asks the run to stop (:func:`request`) and waits, at most
:data:`WAIT_SECONDS`, until the ServerApp has left its run (:func:`running`): the server loop
(:class:`fl_strategies.protocol.server_loop.StoppingServer`) raises :class:`RunStopped` before its next round, so
the last round written is the last checkpointed one, no model is written, and the run's folders are released (a
round that does not end in that time is left: :func:`abandon`). Anywhere else (the in-process engines, a
comparison) nothing is installed; an in-process Ray run that is interrupted
(:func:`simulations.engines.ray.run_ray`) calls :func:`abandon`, and its ServerApp's thread then leaves at once
the round it waits in (:func:`check_waiting`), or the process could not end.
"""

from __future__ import annotations

import sys
import threading
from contextlib import contextmanager
from pathlib import Path

__all__ = ["RunStopped", "WAIT_SECONDS", "abandon", "check", "check_waiting", "install", "request", "requested",
           "reset", "running"]

WAIT_SECONDS = 5.0
"""How long Flower's exit waits for the ServerApp to finish the round in flight; then it leaves the round
(:func:`check_waiting`) and the checkpoint of the round before is the one to resume from."""
FLOWER_PROCESSES = ("flwr-simulation", "flwr-serverapp")
"""The programs in which Flower runs a ServerApp as a process of its own."""

_requested = threading.Event()
_idle = threading.Event()
_idle.set()
_installed = False


_abandoned = threading.Event()


class RunStopped(RuntimeError):
    """The process the ServerApp runs in is being stopped; the run ends before its next round."""


def requested() -> bool:
    """Whether a stop of this process was asked for."""
    return _requested.is_set()


def check(server_round: int) -> None:
    """Raise :class:`RunStopped` if a stop was asked for, before ``server_round`` starts."""
    if _requested.is_set():
        raise RunStopped(f"stopped before round {server_round} (Flower stopped the run: Ctrl-C, SIGTERM or flwr "
                         "stop); a run with resume = true continues from its last checkpoint")


def request() -> None:
    """Ask the run to end before its next round (what Flower's exit does through :func:`install`)."""
    _requested.set()


def abandon() -> None:
    """The engine that delivers the messages is gone (an in-process Ray run was interrupted): the ServerApp's
    thread leaves the round it waits in at once (:func:`check_waiting`), not only before its next round."""
    _abandoned.set()
    _requested.set()


def reset() -> None:
    """Forget a stop asked for before (a new in-process run starts)."""
    _abandoned.clear()
    _requested.clear()


def check_waiting() -> None:
    """Raise :class:`RunStopped` while waiting for replies that no engine will deliver any more."""
    if _abandoned.is_set():
        raise RunStopped("stopped while waiting for the round's replies (the simulation was interrupted); a run "
                         "with resume = true continues from its last checkpoint")


@contextmanager
def running():
    """The ServerApp's run: a stop of the process waits for its end (at most :data:`WAIT_SECONDS`)."""
    _idle.clear()
    try:
        yield
    finally:
        _idle.set()


def _on_exit() -> None:
    request()
    if not _idle.wait(timeout=WAIT_SECONDS):  # a round still waits for replies that may never come
        _abandoned.set()
        _idle.wait(timeout=2.0)


def install() -> bool:
    """Register the stop with Flower's exit handlers, once, in a ``flwr-simulation`` or ``flwr-serverapp``
    process; ``True`` if it is registered."""
    global _installed
    if _installed or Path(sys.argv[0] if sys.argv else "").name not in FLOWER_PROCESSES:
        return _installed
    try:
        from fl_strategies.protocol.flower_compat import add_exit_handler
    except ImportError:  # another Flower: its exit ends the process as before
        return False
    add_exit_handler(_on_exit, run_before_force_exit=True)
    _installed = True
    return True
