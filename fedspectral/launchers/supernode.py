"""Flower's ``flower-supernode`` with shorter waits while a run is active: what ``fedspectral supernode`` and
``fedspectral deploy`` start by default.

Flower 1.42's SuperNode sleeps 3 s after every poll of the SuperLink that found no message, and looks for its
ClientApp's reply, and then for its contents, every 0.5 s (``flwr/supernode/start_client_internal.py``,
lines 263, 470 and 506); Flower offers no option or variable for either. Every round of a deployment waits about
3 s for it: the node whose reply completes a round polls right after sending it, finds nothing (the server has
not seen that reply yet) and sleeps. This launcher runs Flower's own ``flower-supernode`` (same arguments, same
code) after one change, made in this process only: the name ``time`` in that module becomes a proxy of the
``time`` module whose ``sleep(3)`` sleeps ``POLL`` seconds for :data:`HOT_SECONDS` after the last message the
SuperNode received (and after its start), Flower's 3 s otherwise, and whose ``sleep(0.5)`` sleeps ``min(0.5,
POLL)``; every other sleep and every other function of ``time`` is the module's own. The loop's
``_pull_and_store_message`` is wrapped to note when a message arrived (its result is returned unchanged). The
cost: a SuperNode in a run asks the SuperLink for a message every ``POLL`` seconds (one HTTP request) instead of
every 3 s; an idle one polls as Flower's does.

And the loop's ``pull_objects`` (the message's contents fetched from the SuperLink) first waits 0.1 s
(``PULL_BACKOFF`` of ``fl_strategies/protocol/flower_compat/grid_pull.py``, whose ``with_first_wait`` this launcher
loads by its path: :func:`flower_pulls`), not Flower's 1 s, before it asks again for a part the SuperLink does not have
yet: the ServerApp pushes a message before its contents, and a SuperNode polling every 0.1 s often sees it in
between (about one message in twenty; a SecAgg+ round of four exchanges then waited a whole second more). The
waits still double after each try (0.1, 0.2, 0.4 s, ...; Flower's cap, tries and time limit are kept): a few more
requests for a message still arriving, no busy wait.

The change is made only where it is known to mean what is said above: a Flower outside
:data:`FLOWER_SERIES` (pyproject's ``flwr`` pin) or a loop without those two sleeps and that function keeps
Flower's own waits, with one line on stderr saying so, and the SuperNode runs as ``flower-supernode`` would.

Usage::

    python fedspectral/launchers/supernode.py POLL_SECONDS [flower-supernode arguments ...]
"""

from __future__ import annotations

import inspect
import sys
import time

FLOWER_SERIES = ("1.41.", "1.42.")
"""The Flower versions this launcher changes (pyproject's pin ``flwr>=1.41,<1.43``)."""
EMPTY_POLL_SLEEP, REPLY_POLL_SLEEP = 3, 0.5
"""The sleeps of Flower's SuperNode loop (seconds) this launcher shortens."""
POLL_RANGE = (0.05, 3.0)
HOT_SECONDS = 60.0
"""How long after the SuperNode's start or its last message its empty polls are followed by ``POLL`` seconds
(then by Flower's 3 s again)."""
PULL_FUNCTION = "_pull_and_store_message"
OBJECTS_FUNCTION = "pull_objects"
"""What the loop's ``_pull_and_store_message`` fetches a message's contents with (Flower 1.41, 1.42)."""


class ShortWaits:
    """The ``time`` module, except that ``sleep(3)`` sleeps ``poll`` within ``hot`` seconds of the last
    :meth:`received` (or of this object's creation) and ``sleep(0.5)`` sleeps ``min(0.5, poll)``."""

    def __init__(self, poll: float, hot: float = HOT_SECONDS) -> None:
        self.poll, self.hot = poll, hot
        self.last_message = time.monotonic()

    def __getattr__(self, name: str):
        return getattr(time, name)

    def received(self) -> None:
        """A message arrived: the next :data:`HOT_SECONDS` are a run's."""
        self.last_message = time.monotonic()

    def sleep(self, seconds: float) -> None:
        if seconds == EMPTY_POLL_SLEEP and time.monotonic() - self.last_message < self.hot:
            seconds = self.poll
        elif seconds == REPLY_POLL_SLEEP:
            seconds = min(seconds, self.poll)
        time.sleep(seconds)


def misfit(version: str, source: str) -> str | None:
    """Why the change does not fit this Flower (its version and the loop module's source), or ``None``."""
    if not version.startswith(FLOWER_SERIES):
        return f"written for Flower {' or '.join(s + 'x' for s in FLOWER_SERIES)}, found {version}"
    if f"time.sleep({EMPTY_POLL_SLEEP})" not in source or f"time.sleep({REPLY_POLL_SLEEP})" not in source:
        return f"Flower's SuperNode loop has no time.sleep({EMPTY_POLL_SLEEP}) and time.sleep({REPLY_POLL_SLEEP})"
    if f"run_id = {PULL_FUNCTION}(" not in source:
        return f"Flower's SuperNode loop does not call {PULL_FUNCTION}"
    if f"= {OBJECTS_FUNCTION}(" not in source:
        return f"Flower's SuperNode loop does not call {OBJECTS_FUNCTION}"
    return None


def flower_pulls():
    """``fl_strategies/protocol/flower_compat/grid_pull.py`` (:func:`with_first_wait`, ``PULL_BACKOFF``), loaded by
    its path under a name of its own: the standard library only, and no package of the repository imported."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "fl_strategies" / "protocol" / "flower_compat" / "grid_pull.py"
    spec = importlib.util.spec_from_file_location("_fedspectral_grid_pull", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def shorten_waits(poll: float) -> str | None:
    """Give Flower's SuperNode loop :class:`ShortWaits`; ``None``, or (nothing changed) why it does not fit."""
    from flwr.supercore.version import package_version
    import flwr.supernode.start_client_internal as loop

    problem = misfit(package_version, inspect.getsource(loop))
    if problem:
        return problem
    waits = ShortWaits(poll)
    pull = getattr(loop, PULL_FUNCTION)

    def pull_and_note(*args, **kwargs):
        run_id = pull(*args, **kwargs)
        if run_id is not None:
            waits.received()
        return run_id

    pull_objects_promptly = flower_pulls().with_first_wait(getattr(loop, OBJECTS_FUNCTION))
    loop.time = waits
    setattr(loop, PULL_FUNCTION, pull_and_note)
    setattr(loop, OBJECTS_FUNCTION, pull_objects_promptly)
    return None


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
    problem = shorten_waits(poll)
    if problem:
        print(f"supernode.py: {problem}: Flower's own waits are kept (3 s after an empty poll)", file=sys.stderr,
              flush=True)
    from flwr.supernode.cli.flower_supernode import flower_supernode

    sys.argv = ["flower-supernode", *argv[1:]]
    flower_supernode()


if __name__ == "__main__":
    import os

    here = os.path.dirname(os.path.abspath(__file__))  # nothing is imported from this folder
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    main(sys.argv[1:])
