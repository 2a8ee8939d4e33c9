"""Private Flower names of how a SuperLink's grid fetches a reply's contents (``HttpGrid.pull_messages``).

A SuperNode registers its reply with the SuperLink before it uploads the reply's contents. A ServerApp that pulls
in between (it pulls every 0.1 s: :mod:`fl_strategies.protocol.round_exchange`) gets the reply and then asks for its
contents with Flower's ``pull_objects``, which waits 1 s before it asks again for a part not there yet: at four
replies per exchange that happened in about one SecAgg+ exchange in four, a second each time.
:func:`quicken_reply_pulls` makes that first wait :data:`REPLY_PULL_BACKOFF`; the waits still double after each
try (Flower's cap, tries and time limit kept): a few more requests while a reply is still arriving, no busy wait.
"""

from __future__ import annotations

import inspect

__all__ = ["quicken_reply_pulls"]

FLOWER_SERIES = ("1.41.", "1.42.")
"""The Flower versions whose ``HttpGrid.pull_messages`` this is written for (pyproject's pin)."""
REPLY_PULL_BACKOFF = 0.1
"""Seconds the ServerApp first waits before it asks again for a part of a reply still arriving (Flower's: 1 s)."""
PULL_CALL = "pull_objects("
MARK = "_fedspectral_initial_backoff"

# pull_objects : function, module global of ``flwr.superlink.grid.http_grid`` (from
#   ``flwr.supercore.inflatable.inflatable_utils``)
#   What: fetches a pulled reply's contents, retrying a part not yet uploaded after ``initial_backoff`` (1 s),
#   then twice as long each time.
#   Why: quicken_reply_pulls replaces the name in that module with a wrapper giving ``initial_backoff``
#   REPLY_PULL_BACKOFF (a caller's own value kept); round_exchange.prompt_grid calls it for a SuperLink's grid.
#   Public alternative: none (``Grid.pull_messages`` has no such option).


def reply_pull_misfit(version: str, pull_messages_source: str, pull_objects) -> str | None:
    """Why the change does not fit this Flower (its version, ``HttpGrid.pull_messages``'s source and the module's
    ``pull_objects``), or ``None``."""
    if not version.startswith(FLOWER_SERIES):
        return f"written for Flower {' or '.join(s + 'x' for s in FLOWER_SERIES)}, found {version}"
    if PULL_CALL not in pull_messages_source:
        return "Flower's HttpGrid.pull_messages does not call pull_objects"
    try:
        parameters = inspect.signature(pull_objects).parameters
    except (TypeError, ValueError):
        parameters = {}
    if "initial_backoff" not in parameters:
        return "Flower's pull_objects has no initial_backoff"
    return None


def quicken_reply_pulls(backoff: float = REPLY_PULL_BACKOFF) -> str | None:
    """Make this process's ``HttpGrid`` ask again for a reply's missing part after ``backoff`` seconds first.

    Returns
    -------
    str or None
        ``None`` when done (or done before); otherwise why it does not fit the installed Flower, and nothing
        changed.
    """
    import flwr.superlink.grid.http_grid as http_grid
    from flwr.supercore.version import package_version

    flower_pull = http_grid.pull_objects
    if getattr(flower_pull, MARK, None) is not None:
        return None
    problem = reply_pull_misfit(package_version, inspect.getsource(http_grid.HttpGrid.pull_messages), flower_pull)
    if problem:
        return problem

    def pull_objects(*args, **kwargs):
        kwargs.setdefault("initial_backoff", backoff)
        return flower_pull(*args, **kwargs)

    setattr(pull_objects, MARK, backoff)
    http_grid.pull_objects = pull_objects
    return None
