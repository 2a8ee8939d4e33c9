"""Flower's Ray simulation engine, driven in-process with a run config.

This is what ``flwr run .`` does in simulation, minus the SuperLink: each
virtual SuperNode runs the same ``ClientApp`` in a Ray actor, the ``ServerApp``
runs in this process. Results come back through ``results-dir`` (the server
writes ``rounds.csv`` and ``estimate.npy`` there), exactly as in a ``flwr run``.

Flower offers no public call that runs a simulation with a run config
(``run_simulation`` passes an empty one), so this uses the private
``flwr.simulation.run_simulation._run_simulation`` of flwr 1.41-1.42; the
dependency range in ``pyproject.toml`` pins what it was checked against.
"""

from __future__ import annotations

from flwr.app import Context, RecordDict
from flwr.common.constant import RUN_ID_NUM_BYTES, SUPERLINK_NODE_ID
from flwr.supercore.constant import NOOP_FEDERATION_ID
from flwr.supercore.run import Run
from flwr.supercore.task_identity import TaskIdentity

from . import APP_DIR

__all__ = ["run_ray"]


def run_ray(overrides: dict, num_cpus_per_client: float = 1.0) -> None:
    """Run one simulation on Flower's Ray engine.

    Parameters
    ----------
    overrides : dict
        Run-config overrides of the ``pyproject.toml`` defaults; must set
        ``results-dir`` to get results back.
    num_cpus_per_client : float
        Ray CPUs reserved per virtual client (with 1 on a 2-core machine, two
        clients run at once).
    """
    from flwr.common.config import get_fused_config_from_dir
    from flwr.simulation.run_simulation import _run_simulation
    from flwr.supercore.telemetry import EventType

    from client_app.app import app as client_app
    from server_app.app import app as server_app

    run_config = get_fused_config_from_dir(APP_DIR, dict(overrides))
    run_id = int.from_bytes(__import__("os").urandom(RUN_ID_NUM_BYTES), "little") >> 1
    run = Run.create_empty(run_id=run_id)
    run.override_config = dict(overrides)
    run.primary_task_id = 1
    run.federation_id = NOOP_FEDERATION_ID
    TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 1, run_id, SUPERLINK_NODE_ID
    context = Context(run_id=run_id, node_id=0, node_config={}, state=RecordDict(), run_config=run_config)
    _run_simulation(
        num_supernodes=int(run_config["num-clients"]),
        exit_event=EventType.PYTHON_API_RUN_SIMULATION_LEAVE,
        client_app=client_app,
        server_app=server_app,
        server_app_context=context,
        app_dir=str(APP_DIR),
        is_app=True,
        run=run,
        backend_config={"client_resources": {"num_cpus": num_cpus_per_client, "num_gpus": 0.0}},
    )
