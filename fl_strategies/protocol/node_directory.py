"""What a simulation engine knows about the nodes it created, handed to the server without messages.

With ``discovery = "ask"`` the server sends a ``get_properties`` message to
every node before round 1 to learn its partition id and row count: one round
trip per node, which at 10,000 Ray virtual clients costs minutes. An engine
that created the nodes itself (the in-process :class:`LocalGrid`, the Ray
engine of :mod:`simulations.engines.ray`) already knows which node holds which
partition, and the data generator knows every partition's row count; with
``discovery = "engine"`` it registers that here under the run id, and the
server reads it (:meth:`fl_strategies.protocol.strategies.eigenspace.EigenspaceStrategy._discover`).
Nothing is sent before round 1, and the server's set-up is a dictionary
lookup per node.

The directory lives in the process's memory: it works when the ServerApp
runs in the engine's process (both engines above); ``flwr run`` and real
deployments use ``discovery = "ask"``.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Mapping

__all__ = ["NodeDirectory", "register", "unregister", "lookup"]


@dataclass(frozen=True)
class NodeDirectory:
    """Node ids and partitions of one simulated run.

    Attributes
    ----------
    partition_of : mapping of int to int
        Flower node id -> partition id.
    sizes : mapping of int to int
        Partition id -> row count ``s_i``.
    fingerprints : mapping of int to str
        Partition id -> fingerprint of the file its rows come from (what a node reports with ``discovery =
        "ask"``), where the engine knows one; empty for generated data.
    """

    partition_of: Mapping[int, int]
    sizes: Mapping[int, int]
    fingerprints: Mapping[int, str] = field(default_factory=dict)


_LOCK = threading.Lock()
_BY_RUN: dict[int, NodeDirectory] = {}


def register(run_id: int, directory: NodeDirectory) -> None:
    """Publish the directory of run ``run_id`` (replaces an earlier one)."""
    with _LOCK:
        _BY_RUN[int(run_id)] = directory


def unregister(run_id: int) -> None:
    """Forget the directory of run ``run_id`` (no error if there is none)."""
    with _LOCK:
        _BY_RUN.pop(int(run_id), None)


def lookup(run_id: int) -> NodeDirectory | None:
    """The directory of run ``run_id``, or ``None`` when no engine registered one."""
    with _LOCK:
        return _BY_RUN.get(int(run_id))
