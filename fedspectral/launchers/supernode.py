"""Flower's ``flower-supernode`` with shorter waits: the opt-in launcher of ``deploy --supernode-poll SECONDS``.

Flower 1.42's SuperNode sleeps 3 s after every poll of the SuperLink that found no message, and looks for its
ClientApp's reply, and then for its contents, every 0.5 s (``flwr/supernode/start_client_internal.py``,
lines 263, 470 and 506); Flower offers no
option or variable for either. Every round of a deployment waits about 3 s for it: the node whose reply
completes a round polls right after sending it, finds nothing (the server has not seen that reply yet) and
sleeps. This launcher runs Flower's own ``flower-supernode`` (same arguments, same code) after one change, made
in this process only: the name ``time`` in that module becomes a proxy of the ``time`` module whose
``sleep(3)`` sleeps ``POLL`` seconds and ``sleep(0.5)`` sleeps ``min(0.5, POLL)``; every other sleep and
every other function of ``time`` is the module's own. The cost: an idle SuperNode asks the SuperLink for a
message every ``POLL`` seconds (one HTTP request) instead of every 3 s.

It refuses (one line, exit status 2) a Flower other than 1.42 or a module without those two sleeps: the change
is made only where it is known to mean what is said above.

Usage::

    python fedspectral/launchers/supernode.py POLL_SECONDS [flower-supernode arguments ...]
"""

from __future__ import annotations

import inspect
import sys
import time

FLOWER_SERIES = "1.42."
EMPTY_POLL_SLEEP, REPLY_POLL_SLEEP = 3, 0.5
"""The sleeps of Flower's SuperNode loop (seconds) this launcher shortens."""
POLL_RANGE = (0.05, 3.0)


class ShortWaits:
    """The ``time`` module, except that ``sleep(3)`` sleeps ``poll`` and ``sleep(0.5)`` sleeps ``min(0.5, poll)``."""

    def __init__(self, poll: float) -> None:
        self.poll = poll

    def __getattr__(self, name: str):
        return getattr(time, name)

    def sleep(self, seconds: float) -> None:
        if seconds == EMPTY_POLL_SLEEP:
            seconds = self.poll
        elif seconds == REPLY_POLL_SLEEP:
            seconds = min(seconds, self.poll)
        time.sleep(seconds)


def shorten_waits(poll: float) -> None:
    """Give Flower's SuperNode loop :class:`ShortWaits`; ``SystemExit`` (one line) when that loop is not the one
    this was written for."""
    from flwr.supercore.version import package_version
    import flwr.supernode.start_client_internal as loop

    if not package_version.startswith(FLOWER_SERIES):
        raise SystemExit(f"supernode.py: written for Flower {FLOWER_SERIES}x, found {package_version}; start "
                         "flower-supernode itself")
    source = inspect.getsource(loop)
    if f"time.sleep({EMPTY_POLL_SLEEP})" not in source or f"time.sleep({REPLY_POLL_SLEEP})" not in source:
        raise SystemExit("supernode.py: Flower's SuperNode loop has no time.sleep(3) and time.sleep(0.5); start "
                         "flower-supernode itself")
    loop.time = ShortWaits(poll)


def main(argv: list[str]) -> None:
    """``argv``: the poll in seconds, then ``flower-supernode``'s arguments."""
    try:
        poll = float(argv[0])
        if not POLL_RANGE[0] <= poll <= POLL_RANGE[1]:
            raise ValueError
    except (IndexError, ValueError):
        print(f"supernode.py: the first argument is the poll in seconds, in [{POLL_RANGE[0]}, {POLL_RANGE[1]}]; "
              f"got {argv[:1]}", file=sys.stderr)
        raise SystemExit(2) from None
    try:
        shorten_waits(poll)
    except SystemExit as ex:
        print(ex, file=sys.stderr)
        raise SystemExit(2) from None
    from flwr.supernode.cli.flower_supernode import flower_supernode

    sys.argv = ["flower-supernode", *argv[1:]]
    flower_supernode()


if __name__ == "__main__":
    import os

    here = os.path.dirname(os.path.abspath(__file__))  # nothing is imported from this folder
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    main(sys.argv[1:])
