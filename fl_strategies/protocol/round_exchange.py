"""One round's instructions sent as one batch through the Grid, instead of a thread per client.

Flower's legacy ``Server.fit_round`` hands every ``(ClientProxy, FitIns)`` pair
to a thread pool; each thread converts its instruction to a ``Message``, calls
``grid.send_and_receive`` with that one message and polls for its reply. With
many clients per round that costs a thread hand-off and a polling loop per
client: in the in-process engine the server thread and the worker thread
contend for the interpreter lock on every message, which was most of the
per-message overhead measured by ``simulations/benchmarks/bench_scale.py``.

:func:`fit_in_one_batch` builds the same messages (the layout of Flower's
``recorddict_compat``, through :mod:`fl_strategies.protocol.fit_records`, so clients see
exactly what they saw before) but pushes all of a round's messages at once and waits for every reply or for
``timeout`` (the round timeout, as before; :func:`send_and_receive`). The outcome is what ``flwr.server.server.fit_clients`` returns:

* a reply with status OK goes to ``results`` as ``(proxy, FitRes)``;
* a reply with another status goes to ``failures`` as ``(proxy, FitRes)``;
* an error reply (the ClientApp raised) or no reply before the timeout goes to
  ``failures`` as an exception naming the node.

Replies are matched to proxies by their source node, and ``results`` follows
the order of the instructions (deterministic, unlike the thread pool's order of
completion). Instructions whose proxies are not Flower's ``GridClientProxy`` on
one Grid (a custom ``ClientManager``, tests with stub proxies) go through
Flower's ``fit_clients`` unchanged.
"""

from __future__ import annotations

import logging
import time

from flwr.app import Message, MessageType
from flwr.common import Code, FitIns, FitRes
from flwr.server.client_proxy import ClientProxy

from . import flower_compat, stop_request
from .fit_records import fitins_content, fitres_from_content
from .flower_compat import GridClientProxy, fit_clients, note_push, quicken_engine_delivery, quicken_reply_pulls

__all__ = ["fit_in_one_batch", "send_and_receive", "pause_after_pull", "simulated_grid", "prompt_grid", "PromptGrid",
           "MissingReply", "SUPERLINK_PULL_INTERVAL", "SUPERLINK_MIN_PAUSE", "ENGINE_PULL_SLOWDOWN", "ENGINE_MIN_PAUSE"]

log = logging.getLogger("flwr.fedspectral")


class MissingReply(ValueError):
    """A node sent no reply before the round's timeout (recorded as a failure, like Flower's proxies do)."""


SUPERLINK_PULL_INTERVAL = 0.1
"""Seconds from one of the server's pulls for replies from a SuperLink to the next (Flower's ``HttpGrid`` pauses 3 s
after each). Each pull is one HTTP request to the SuperLink (a few milliseconds of its time): at most ten a second
while the server waits, none otherwise."""
SUPERLINK_MIN_PAUSE = 0.02
"""The least pause after a pull of a SuperLink, however long the pull took."""
ENGINE_PULL_SLOWDOWN = 10.0
"""An engine's grid (``InMemoryGrid``) pauses at least this many times what its last pull took."""
ENGINE_MIN_PAUSE = 0.01
"""The least pause after a pull of an engine's grid (``InMemoryGrid``; Flower's own ``pull_interval`` is 0.1 s). A pull
of a round's few replies takes about 0.05 ms of the link state's lock: the server sees the last reply of a round
within 0.01 s of its arrival instead of 0.05 s on average (measured in ``fedspectral run``, 2,800 x 100,000, four
sites: a round's last reply waited 0.056 s, median of 22 exchanges, for the server's next pull)."""


def flower_grid(grid, *names: str) -> bool:
    """Whether ``grid`` is an instance of one of Flower's grids ``names`` (``"InMemoryGrid"``, ``"HttpGrid"``:
    :mod:`.flower_compat`), without importing their modules for a grid of no class so named (the in-process
    engine's): they import fastapi, SQLAlchemy and alembic, 0.4 s of a run's start that uses neither grid."""
    named = {cls.__name__ for cls in type(grid).__mro__}
    return any(name in named and isinstance(grid, getattr(flower_compat, name)) for name in names)


def simulated_grid(grid) -> bool:
    """Whether the grid's nodes are simulated by an engine (Flower's ``InMemoryGrid``, or a grid that says so with a
    true ``simulated`` attribute, as the in-process engine's does), not real SuperNodes behind a SuperLink."""
    return flower_grid(grid, "InMemoryGrid") or bool(getattr(grid, "simulated", False))


def send_and_receive(grid, messages: list[Message], timeout: float | None) -> list[Message]:
    """``grid.send_and_receive(messages, timeout=timeout)``, with the server's own pauses between pulls.

    Flower's ``InMemoryGrid`` (the simulation's) pulls every ``pull_interval``
    (0.1 s), and each pull checks every message still awaited under the link
    state's lock: with 10,000 messages in flight a pull took a good part of the
    interval and slowed the engine thread that delivers the messages (a Ray
    round of 10,000 clients took 41 s instead of 29 s). For that grid the pause
    after a pull is :data:`ENGINE_MIN_PAUSE` or ten times what the pull took,
    whichever is longer. A SuperLink's grid (``HttpGrid``, a deployment) pauses
    3 s after every pull that leaves a reply missing: a round whose last reply
    arrived just after a pull waited up to 3 s more, during which the SuperNodes
    that had replied first slept through another of their own 3 s polls. It is
    pulled every :data:`SUPERLINK_PULL_INTERVAL` instead, counted from the start
    of one pull to the next (a pull that took long on a loaded machine is no
    reason to wait longer: the replies are in the SuperLink's store, not in this
    process; the pause is at least :data:`SUPERLINK_MIN_PAUSE`). Any other grid uses its own
    ``send_and_receive`` (the in-process engine's answers as it is pushed).

    Returns
    -------
    list of Message
        The replies that arrived before ``timeout`` (all of them with ``None``).
    """
    grid = grid.grid if isinstance(grid, PromptGrid) else grid
    if not flower_grid(grid, "InMemoryGrid", "HttpGrid"):
        return list(grid.send_and_receive(messages, timeout=timeout))
    waiting = set(grid.push_messages(messages))
    if flower_grid(grid, "InMemoryGrid"):
        note_push()  # the engine hands them to the nodes now, not at its next sweep (quicken_engine_delivery)
    end = None if timeout is None else time.monotonic() + timeout
    replies: list[Message] = []
    while waiting:
        stop_request.check_waiting()  # an interrupted in-process engine delivers nothing more
        started = time.monotonic()
        got = list(grid.pull_messages(waiting))
        spent = time.monotonic() - started
        replies.extend(got)
        waiting.difference_update(reply.metadata.reply_to_message_id for reply in got)
        left = None if end is None else end - time.monotonic()
        if not waiting or (left is not None and left <= 0):
            break
        pause = pause_after_pull(grid, spent)
        time.sleep(pause if left is None else min(pause, left))
    return replies


def pause_after_pull(grid, spent: float) -> float:
    """Seconds :func:`send_and_receive` pauses after a pull of ``grid`` that took ``spent`` seconds and left a reply
    missing: for a SuperLink's grid (``HttpGrid``: a pull is an HTTP request to the SuperLink, no slower when pulled
    often) the rest of :data:`SUPERLINK_PULL_INTERVAL` from the pull's start, at least :data:`SUPERLINK_MIN_PAUSE`;
    for an engine's (``InMemoryGrid``: a pull holds the link state's lock) :data:`ENGINE_MIN_PAUSE` or
    :data:`ENGINE_PULL_SLOWDOWN` times ``spent``, whichever is longer."""
    if flower_grid(grid, "HttpGrid"):
        return max(SUPERLINK_PULL_INTERVAL - spent, SUPERLINK_MIN_PAUSE)
    return max(ENGINE_MIN_PAUSE, ENGINE_PULL_SLOWDOWN * spent)


class PromptGrid:
    """A grid whose ``send_and_receive`` is :func:`send_and_receive` over the wrapped one: a SuperLink's grid pulled
    every :data:`SUPERLINK_PULL_INTERVAL`, not after Flower's fixed 3 s pauses. Everything else (``push_messages``,
    ``pull_messages``, ``get_node_ids``, ``run``, ...) is the wrapped grid's.

    The ServerApp hands this to every exchange it does not batch itself: Flower's ``SecAggPlusWorkflow`` (each of
    a SecAgg+ round's four stages calls ``grid.send_and_receive``), the legacy ``GridClientProxy`` of each node
    (discovery's ``get_properties``), Flower's default workflows. Only Flower's public ``Grid`` methods
    ``push_messages`` and ``pull_messages`` are used.

    Parameters
    ----------
    grid : flwr.server.Grid
        Flower's ``HttpGrid`` or ``InMemoryGrid`` (:func:`prompt_grid`).
    """

    def __init__(self, grid) -> None:
        self.grid = grid

    def __getattr__(self, name: str):
        return getattr(self.grid, name)

    def send_and_receive(self, messages, *, timeout: float | None = None) -> list[Message]:
        """Push ``messages``; pull their replies until all arrived or ``timeout`` passed (:func:`send_and_receive`)."""
        return send_and_receive(self.grid, list(messages), timeout)


def prompt_grid(grid):
    """``grid`` as a :class:`PromptGrid` where :func:`send_and_receive` paces it (Flower's ``HttpGrid`` and
    ``InMemoryGrid``); any other grid (the in-process engine's, which answers as it is pushed) unchanged.

    For a SuperLink's grid (``HttpGrid``) the process's reply pulls are also quickened
    (:func:`~fl_strategies.protocol.flower_compat.grid_pull.quicken_reply_pulls`: a reply whose contents are still
    arriving is asked for again after 0.1 s, not Flower's 1 s); for an engine's (``InMemoryGrid``) the engine
    hands the messages :func:`send_and_receive` pushes to the nodes at once, not at its next sweep 0.1 s later
    (:func:`~fl_strategies.protocol.flower_compat.engine_delivery.quicken_engine_delivery`). Where that does not fit
    the installed Flower, one line says so and Flower's wait is kept."""
    if flower_grid(grid, "HttpGrid"):
        problem = quicken_reply_pulls()
        if problem:
            log.info("fedspectral: %s: Flower's own 1 s wait for a reply still arriving is kept", problem)
    elif flower_grid(grid, "InMemoryGrid"):
        problem = quicken_engine_delivery()
        if problem:
            log.info("fedspectral: %s: Flower's engine keeps its 0.1 s between looks for new messages", problem)
    return PromptGrid(grid) if flower_grid(grid, "HttpGrid", "InMemoryGrid") else grid


def fit_in_one_batch(client_instructions: list[tuple[ClientProxy, FitIns]], max_workers: int | None,
                     timeout: float | None, group_id: int, timing: dict | None = None) -> tuple[list, list]:
    """Send one round's fit instructions and collect the replies, as ``flwr.server.server.fit_clients`` does.

    Parameters
    ----------
    client_instructions : list of (ClientProxy, FitIns)
        What ``Strategy.configure_fit`` returned; at most one instruction per node.
    max_workers : int or None
        Threads for Flower's ``fit_clients`` when the proxies cannot be batched.
    timeout : float or None
        Seconds to wait for the replies (``None``: until every node replied).
    group_id : int
        The server round (the messages' group id).
    timing : dict, optional
        Receives ``"waited"``: the seconds spent waiting for the replies (the grid's exchange, or Flower's
        ``fit_clients``), the rest of the call being the server's own work.

    Returns
    -------
    results : list of (ClientProxy, FitRes)
        Replies with status OK, in the order of ``client_instructions``.
    failures : list of (ClientProxy, FitRes) or BaseException
        Replies with another status, error replies and missing replies.
    """
    proxies = [proxy for proxy, _ in client_instructions]
    grids = {id(getattr(proxy, "grid", None)) for proxy in proxies}
    nodes = [getattr(proxy, "node_id", None) for proxy in proxies]
    if (not all(isinstance(proxy, GridClientProxy) for proxy in proxies) or len(grids) != 1
            or len(set(nodes)) != len(nodes)):
        started = time.perf_counter()
        outcome = fit_clients(client_instructions, max_workers=max_workers, timeout=timeout, group_id=group_id)
        if timing is not None:
            timing["waited"] = time.perf_counter() - started
        return outcome
    grid = proxies[0].grid
    messages = [Message(content=fitins_content(ins), message_type=MessageType.TRAIN,
                        dst_node_id=proxy.node_id, group_id=str(group_id) if group_id else "", ttl=timeout)
                for proxy, ins in client_instructions]
    replies: dict[int, Message] = {}
    started = time.perf_counter()
    received = send_and_receive(grid, messages, timeout)
    if timing is not None:
        timing["waited"] = time.perf_counter() - started
    for reply in received:
        replies.setdefault(reply.metadata.src_node_id, reply)  # one message per node was sent
    results: list[tuple[ClientProxy, FitRes]] = []
    failures: list = []
    for proxy in proxies:
        reply = replies.get(proxy.node_id)
        if reply is None:
            failures.append(MissingReply(f"node {proxy.node_id} sent no reply within the round's timeout"))
            log.warning("round %s: node %s sent no reply within %s (its ClientApp did not start or did not "
                        "finish); counted as failed", group_id, proxy.node_id,
                        "the round" if timeout is None else f"round-timeout = {timeout:g} s")
        elif reply.has_error():
            failures.append(ValueError(f"Message contains an Error (reason: {reply.error.reason}). It originated "
                                       "during client-side execution of a message."))
            log.warning("round %s: node %s replied with an error: %s", group_id, proxy.node_id,
                        str(reply.error.reason)[:300])
        else:
            try:
                res = fitres_from_content(reply.content)
            except Exception as ex:  # noqa: BLE001 - a malformed reply is this node's failure, not the server's
                failures.append(ex)
                continue
            (results if res.status.code == Code.OK else failures).append((proxy, res))
    return results, failures
