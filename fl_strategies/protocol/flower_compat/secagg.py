"""Private Flower names for the SecAgg+ rounds (dp-power) on the legacy Strategy API.

fedspectral drives Flower's public ``SecAggPlusWorkflow`` round by round itself
(:func:`server_app.secure_loop.run_secure_aggregation`) instead of through ``DefaultWorkflow``, so that a
run can stop between rounds (privacy budget spent, too few clients) and evaluate after each round. That
loop is ``DefaultWorkflow.__call__`` taken apart, and needs the pieces below, which Flower keeps private.
The client side recognises a SecAgg+ stage message by its record key, and reads its stage.
"""

from __future__ import annotations

from flwr.common.secure_aggregation.secaggplus_constants import RECORD_KEY_CONFIGS
from flwr.common.secure_aggregation.secaggplus_constants import Key as SecAggKey
from flwr.common.secure_aggregation.secaggplus_constants import Stage as SecAggStage
from flwr.server.compat.app_utils import start_update_client_manager_thread
from flwr.server.workflow.constant import MAIN_CONFIGS_RECORD
from flwr.server.workflow.constant import Key as WorkflowKey
from flwr.server.workflow.default_workflows import (
    default_centralized_evaluation_workflow,
    default_init_params_workflow,
)

__all__ = ["MAIN_CONFIGS_RECORD", "RECORD_KEY_CONFIGS", "SecAggKey", "SecAggStage", "WorkflowKey",
           "default_centralized_evaluation_workflow", "default_init_params_workflow",
           "start_update_client_manager_thread"]

# RECORD_KEY_CONFIGS : str ("secaggplus_configs"), from ``flwr.common.secure_aggregation.secaggplus_constants``
#   What: the key of the ConfigRecord every SecAgg+ stage message carries.
#   Why: client_app.app.is_secagg_stage tells a SecAgg+ stage from a plain fit message, so that only the
#   former goes through ``secaggplus_mod``.
#   Public alternative: none in 1.41 (``secaggplus_mod`` is public, its message layout is not).

# SecAggKey : class (``Key``) and SecAggStage : class (``Stage``), from
# ``flwr.common.secure_aggregation.secaggplus_constants``
#   What: the key of a stage message's stage name (``SecAggKey.STAGE``, "stage") and the stage names in protocol
#   order (``SecAggStage.all()``: setup, share_keys, collect_masked_vectors, unmask).
#   Why: client_app.secure_rounding seeds a simulated node's stochastic rounding per stage, and reads the stage
#   before ``secaggplus_mod`` pops it from the message. Renamed so they are not confused with ``WorkflowKey``.
#   Public alternative: none (the stage layout is internal to ``secaggplus_mod``).

# start_update_client_manager_thread : function, from ``flwr.server.compat.app_utils``
#   What: the thread that keeps a legacy ``ClientManager`` in step with ``grid.get_node_ids()``.
#   Why: the SecAgg+ loop needs the legacy client manager filled, as ``DefaultWorkflow`` does.
#   Public alternative: ``DefaultWorkflow(fit_workflow=SecAggPlusWorkflow(...))`` (starts it itself, but runs
#   all rounds with no way to stop between them).

# MAIN_CONFIGS_RECORD : str ("config") and WorkflowKey : class (``Key``), from ``flwr.server.workflow.constant``
#   What: where the workflows keep the current round and start time in ``LegacyContext.state``
#   (``WorkflowKey.CURRENT_ROUND``, ``WorkflowKey.START_TIME``). Exported as ``WorkflowKey`` so it is not
#   confused with SecAgg+'s own ``Key`` (``flwr.common.secure_aggregation.secaggplus_constants.Key``);
#   server_app.secure_loop imports it ``as Key``.
#   Why: ``SecAggPlusWorkflow`` reads the round from there.
#   Public alternative: none (``DefaultWorkflow`` writes them itself).

# default_init_params_workflow, default_centralized_evaluation_workflow : functions, from
# ``flwr.server.workflow.default_workflows``
#   What: the first step (initial parameters, evaluation of round 0) and the per-round server-side
#   evaluation of ``DefaultWorkflow``.
#   Why: the SecAgg+ loop runs them around its own rounds.
#   Public alternative: ``DefaultWorkflow`` (all-or-nothing, see above).
