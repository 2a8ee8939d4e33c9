"""Private Flower names of how a SuperLink's grid fetches a reply's contents (``HttpGrid.pull_messages``).

A SuperNode registers its reply with the SuperLink before it uploads the reply's contents. A ServerApp that pulls
in between (it pulls every 0.1 s: :mod:`fl_strategies.protocol.round_exchange`) gets the reply and then asks for its
contents with Flower's ``pull_objects``, which waits 1 s before it asks again for a part not there yet: at four
replies per exchange that happened in about one SecAgg+ exchange in four, a second each time.
:func:`quicken_reply_pulls` makes that first wait :data:`PULL_BACKOFF`; the waits still double after each
try (Flower's cap, tries and time limit kept): a few more requests while a reply is still arriving, no busy wait.

The same first wait is given, by :func:`with_first_wait` (the one wrapper), to the SuperNode's ``pull_objects``
(``fedspectral/launchers/supernode.py``) and a forked ClientApp's ``pull_and_inflate_object_from_tree``
(``fedspectral/launchers/forkserver.py``). Those launchers import nothing of the repository's packages: they load
this file by its path, so it imports only the standard library at its top (Flower inside the functions);
``tests/test_reply_pulls.py`` checks that.
"""

from __future__ import annotations

import inspect

__all__ = ["quicken_reply_pulls"]

FLOWER_SERIES = ("1.41.", "1.42.")
"""The Flower versions whose ``HttpGrid.pull_messages`` this is written for (pyproject's pin)."""
PULL_BACKOFF = 0.1
"""Seconds a ServerApp, a SuperNode or a forked ClientApp first waits before it asks again for a part of a message
still arriving (Flower's: 1 s)."""
PULL_CALL = "pull_objects("
MARK = "_fedspectral_initial_backoff"

# pull_objects : function, module global of ``flwr.superlink.grid.http_grid`` (from
#   ``flwr.supercore.inflatable.inflatable_utils``)
#   What: fetches a pulled reply's contents, retrying a part not yet uploaded after ``initial_backoff`` (1 s),
#   then twice as long each time.
#   Why: quicken_reply_pulls replaces the name in that module with a wrapper giving ``initial_backoff``
#   PULL_BACKOFF (with_first_wait; a caller's own value kept); round_exchange.prompt_grid calls it for a
#   SuperLink's grid.
#   Public alternative: none (``Grid.pull_messages`` has no such option).


def with_first_wait(pull, backoff: float = PULL_BACKOFF):
    """``pull`` (one of Flower's functions that fetch a message's contents and take ``initial_backoff``) with
    ``initial_backoff`` defaulting to ``backoff`` seconds (a caller's own value kept; every other argument passed on);
    ``pull`` itself when it is already such a wrapper."""
    if getattr(pull, MARK, None) is not None:
        return pull

    def pull_promptly(*args, **kwargs):
        kwargs.setdefault("initial_backoff", backoff)
        return pull(*args, **kwargs)

    setattr(pull_promptly, MARK, backoff)
    return pull_promptly


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


def quicken_reply_pulls(backoff: float = PULL_BACKOFF) -> str | None:
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

    http_grid.pull_objects = with_first_wait(flower_pull, backoff)
    return None
