"""In-process engine: Flower's ``Grid`` implemented by calling the ClientApp directly.

No Ray, no network, deterministic: every instruction is answered at once by
the same ``ClientApp`` object the Ray engine and the SuperNodes run, with a
separate ``Context`` (and so node state) per node. Used by the tests and for
wide parameter sweeps.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Iterable
from uuid import uuid4

from flwr.app import Context, Error, Message, RecordDict
from flwr.serverapp import Grid
from threadpoolctl import threadpool_limits

from fl_strategies.protocol import node_directory
from fl_strategies.protocol.flower_compat import (
    NUM_PARTITIONS_KEY,
    PARTITION_ID_KEY,
    SUPERLINK_NODE_ID,
    ErrorCode,
    Run,
    TaskIdentity,
)

from . import engine_directory

__all__ = ["LocalGrid", "run_local"]

FaultFn = Callable[[Message, int], str]


class LocalGrid(Grid):
    """A ``Grid`` whose nodes are in-process calls of a ``ClientApp``.

    Parameters
    ----------
    client_app : flwr.client.ClientApp
    num_nodes : int
        Node ``i`` gets ``partition-id = i``.
    run_config : dict
        The fused run config every node sees.
    fault_fn : callable, optional
        ``fault_fn(message, partition_id) -> "ok" | "drop" | "error"``, to
        inject stragglers (a dropped message gets no reply) and failures.
    node_ids : list of int, optional
        The ids of the nodes (default ``1000 + i``); any order, to mimic
        Flower's random ids.
    """

    simulated = True
    """Its nodes are simulated (:func:`fl_strategies.protocol.round_exchange.simulated_grid`): the default
    ``round-timeout`` sets no limit."""

    def __init__(self, client_app, num_nodes: int, run_config: dict, fault_fn: FaultFn | None = None,
                 run_id: int = 1, node_ids: list[int] | None = None) -> None:
        self._run = Run.create_empty(run_id=run_id)
        TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 1, run_id, SUPERLINK_NODE_ID
        self.client_app, self.fault_fn = client_app, fault_fn
        self.node_ids = list(node_ids) if node_ids is not None else [1000 + i for i in range(num_nodes)]
        self.partition_of = {nid: i for i, nid in enumerate(self.node_ids)}
        self.contexts = {
            nid: Context(run_id=run_id, node_id=nid,
                         node_config={PARTITION_ID_KEY: i, NUM_PARTITIONS_KEY: num_nodes},
                         state=RecordDict(), run_config=dict(run_config))
            for nid, i in self.partition_of.items()
        }
        self._replies: dict[str, Message] = {}
        # the server may ask its nodes from several threads (discovery's get_properties); the nodes of this
        # engine share one process, so they answer one at a time: one node's float64 working set at a time
        self._client_lock = threading.Lock()

    def set_run(self, run: Run) -> None:  # noqa: D102
        self._run = run

    @property
    def run(self) -> Run:  # noqa: D102
        return self._run

    def create_message(self, content, message_type, dst_node_id, group_id, ttl=None):  # noqa: D102
        return Message(content, dst_node_id, message_type, ttl=ttl, group_id=group_id)

    def get_node_ids(self) -> Iterable[int]:  # noqa: D102
        return list(self.node_ids)

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        """Deliver each message and store the node's reply (or an error reply)."""
        messages = list(messages)
        # Flower's legacy loop builds a content per node and the ClientApp may edit it, so it is not copied; a
        # content shared by several messages (SecAgg+'s setup stage sends one to every node, and its client mod
        # edits it) is copied for each
        counts: dict[int, int] = {}
        for msg in messages:
            counts[id(msg.content)] = counts.get(id(msg.content), 0) + 1
        ids = []
        for msg in messages:
            mid = uuid4().hex
            msg.metadata.__dict__["_message_id"] = mid
            ids.append(mid)
            nid = msg.metadata.dst_node_id
            action = self.fault_fn(msg, self.partition_of[nid]) if self.fault_fn else "ok"
            if action == "drop":
                continue
            if action == "error":
                reply = Message(Error(code=ErrorCode.CLIENT_APP_RAISED_EXCEPTION, reason="injected"), reply_to=msg)
            else:
                try:
                    shared = counts[id(msg.content)] > 1
                    with self._client_lock:
                        reply = self.client_app(copy.deepcopy(msg) if shared else msg, self.contexts[nid])
                except Exception as ex:  # a failing client becomes an error reply, as in Flower
                    reply = Message(Error(code=ErrorCode.CLIENT_APP_RAISED_EXCEPTION, reason=repr(ex)),
                                    reply_to=msg)
            reply.metadata.__dict__["_message_id"] = uuid4().hex
            self._replies[mid] = reply
        return ids

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:  # noqa: D102
        return [self._replies.pop(i) for i in message_ids if i in self._replies]

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> Iterable[Message]:
        """Push and pull at once: replies are computed synchronously."""
        return self.pull_messages(self.push_messages(messages))


def run_local(run_config: dict, fault_fn: FaultFn | None = None, node_ids: list[int] | None = None,
              observer=None):
    """Run the ServerApp against the ClientApp in this process.

    Parameters
    ----------
    run_config : dict
        A fused run config (:func:`simulations.engines.fused_run_config`).
    fault_fn, node_ids
        See :class:`LocalGrid`.
    observer : callable, optional
        Installed as the strategy's ``observer``: sees every reply as the server
        received it (see :class:`fl_strategies.protocol.strategies.eigenspace.EigenspaceStrategy`).

    Returns
    -------
    strategy : flwr.server.strategy.Strategy
        The strategy after the run: ``records`` holds its rows, ``iterates`` its start and newest estimates.
    """
    from client_app.app import app as client_app
    from server_app.app import release_folders, run_server, server_fn

    # the ServerApp validates the config (ConfigError) before any node exists, so num-clients is sane below
    context = Context(run_id=1, node_id=0, node_config={}, state=RecordDict(), run_config=run_config)
    components = server_fn(context)
    m = int(run_config["num-clients"])
    try:
        grid = LocalGrid(client_app, m, run_config, fault_fn=fault_fn, node_ids=node_ids)
    except BaseException:  # run_server, which releases the run's folders, is not reached
        release_folders(components.server.strategy)
        raise
    # Replies are computed synchronously, one client at a time, in this thread. OpenBLAS's own threads
    # contend with it on such small products (on 2 cores a round ran 3-4x slower than with one BLAS thread,
    # measured when the server still used a worker thread per client), so the rounds use one. The server's steps
    # too: at 3,000 x 188,000 krylov's basis step took 1.7 s over 9 rounds on one thread and 2.1 s with the
    # process's two (the thread count switched at every node's call; the whole run 17.9 s against 19.2 s).
    if run_config.get("discovery") == "engine":  # the server reads the node -> partition map, asks nothing
        node_directory.register(grid.run.run_id, engine_directory(run_config, grid.partition_of))
    try:
        with threadpool_limits(limits=1, user_api="blas"):
            return run_server(grid, context, observer=observer, components=components)
    finally:
        node_directory.unregister(grid.run.run_id)
