"""Private Flower names the engines (simulations.engines) use to stand in for a SuperLink.

The in-process engine (``simulations.engines.local.LocalGrid``) implements Flower's public ``Grid`` and must
give the ServerApp and ClientApp what Flower's own engines give them: a ``Run``, the process-wide
``TaskIdentity`` (``Message(...)`` reads it), node configs with Flower's partition keys, and error replies
with Flower's codes. The Ray engine (``simulations.engines.ray``) builds a ``Run`` and context the way
``flwr run`` does.
"""

from __future__ import annotations

from flwr.common.constant import (
    NUM_PARTITIONS_KEY,
    PARTITION_ID_KEY,
    RUN_ID_NUM_BYTES,
    SUPERLINK_NODE_ID,
    ErrorCode,
)
from flwr.supercore.constant import DEFAULT_SIMULATION_CONFIG, NOOP_FEDERATION_ID
from flwr.supercore.run import Run
from flwr.supercore.task_identity import TaskIdentity

__all__ = ["DEFAULT_SIMULATION_CONFIG", "ErrorCode", "NOOP_FEDERATION_ID", "NUM_PARTITIONS_KEY",
           "PARTITION_ID_KEY", "RUN_ID_NUM_BYTES", "Run", "SUPERLINK_NODE_ID", "TaskIdentity"]

# Run : class, from ``flwr.supercore.run``
#   What: a run's metadata (run id, override config, federation) a ``Grid`` exposes as ``grid.run``.
#   Why: LocalGrid implements ``Grid.run`` / ``set_run``; the Ray engine passes one to ``_run_simulation``.
#   Public alternative: none (the ``Grid`` ABC's ``run`` property returns this private type).

# TaskIdentity : class, from ``flwr.supercore.task_identity``
#   What: process-wide run / task / node ids that ``Message(...)`` reads when it builds an instruction.
#   Why: outside a running SuperLink nobody sets them; without them ``Message(...)`` raises RuntimeError.
#   Public alternative: none (``flwr run`` / ``run_simulation`` set it internally).

# SUPERLINK_NODE_ID (1), RUN_ID_NUM_BYTES (8), PARTITION_ID_KEY ("partition-id"),
# NUM_PARTITIONS_KEY ("num-partitions"), ErrorCode : from ``flwr.common.constant``
#   What: the server's node id, the size of a run id, the node-config keys Flower's simulation gives each
#   node, the codes of error replies.
#   Why: the engines give nodes and replies exactly what Flower's engines give (clients read
#   ``partition-id`` / ``num-partitions``; strategies read error replies).
#   Public alternative: none in 1.41 (documented values, but only importable from here).

# NOOP_FEDERATION_ID, DEFAULT_SIMULATION_CONFIG : from ``flwr.supercore.constant``
#   What: the federation id of a run without a federation; Flower's default simulation settings (Ray
#   ``init_args`` logging level, ``log_to_driver``).
#   Why: the Ray engine fills its ``Run`` as ``flwr run`` does and starts Ray with Flower's defaults itself.
#   Public alternative: none.
