"""The one place fedspectral imports private Flower (flwr 1.41-1.42) names.

Flower's public API is what its top-level packages export (``flwr.app``, ``flwr.client``,
``flwr.client.mod``, ``flwr.clientapp``, ``flwr.common``, ``flwr.server``, ``flwr.server.strategy``,
``flwr.server.workflow``, ``flwr.server.client_manager``, ``flwr.server.client_proxy``, ``flwr.serverapp``,
``flwr.simulation``). Everything else (``flwr.server.compat.*``, ``flwr.superlink.*``, ``flwr.supercore.*``,
``flwr.compat.*``, ``flwr.common.constant`` / ``config`` / ``secure_aggregation``, ``flwr.server.workflow``'s
submodules, underscore names) may move or vanish in any release. fedspectral reaches those only through this
package, so a Flower upgrade touches one place: ``tests/test_flower_compat.py`` fails if a module of
``fl_strategies``, ``client_app``, ``server_app`` or ``simulations`` imports a private Flower path itself.

Import the names from here: ``from fl_strategies.protocol.flower_compat import GridClientProxy``. They are
resolved lazily, from one module per area, so importing this package loads no more of Flower than the
module path it replaces did (``InMemoryGrid`` and the Ray engine's internals are heavy).

=================================================  ====================  ==========================================  ==========================================
name (area module)                                 Flower 1.41 path      used by (why)                                public alternative
=================================================  ====================  ==========================================  ==========================================
``recorddict_compat`` (records)                    flwr.compat.common    fit_records, client_app.faults,             none; Message API content instead
                                                   .recorddict_compat    simulations.bench_messages (legacy fit
                                                                         messages in Flower's exact layout)
``check_mapping_from_recordscalartype_to_scalar``  recorddict_compat     fit_records.fitres_from_content (FitRes     none (``dict(record)`` without checks)
(records)                                          ._check_mapping_...   metrics as Flower builds them)
``EXCEPTION_MESSAGE_WRONG_RETURN_TYPE_FIT``        flwr.compat.client    fit_records.fit_reply_content (same error   none
(records)                                          .numpy_client         as Flower's NumPyClient wrapper)
``GridClientProxy`` (legacy_server)                flwr.server.compat    round_exchange (batch a round only for      ``flwr.server.client_proxy.ClientProxy``
                                                   .grid_client_proxy    grid proxies)                               (base class only)
``fit_clients`` (legacy_server)                    flwr.server.server    round_exchange (unchanged fallback)         none (``Server.fit_round`` as a whole)
``InMemoryGrid`` (legacy_server)                   flwr.superlink.grid   round_exchange.send_and_receive (slower     ``flwr.serverapp.Grid`` (no tuning)
                                                   .inmemory_grid        polling in simulation)
``HttpGrid`` (legacy_server)                       flwr.superlink.grid   round_exchange.send_and_receive (pulls a    ``flwr.serverapp.Grid`` (3 s pauses)
                                                   .http_grid            SuperLink every 0.1 s, not 3 s)
``start_grid`` (legacy_server)                     flwr.server.compat    server_app.app (own ``@app.main`` runs the  ``ServerApp(server_fn=...)``
                                                   .app                  legacy Server)
``quicken_reply_pulls`` (grid_pull)                flwr.superlink.grid   round_exchange.prompt_grid (a reply still   none (1 s first wait)
                                                   .http_grid            arriving asked for again after 0.1 s, not
                                                   .pull_objects         1 s; Flower 1.41/1.42, else one line)
``quicken_engine_delivery``,                       flwr.server           round_exchange.prompt_grid (a round's       none (0.1 s between sweeps)
``note_push``, ``wait_for_push``                   .superlink.fleet      messages handed to the nodes as soon as
(engine_delivery)                                  .vce.vce_api          pushed, not at the next 0.1 s sweep;
                                                   .add_messages_to_     Flower 1.41/1.42, else one line);
                                                   queue                 simulations.engines.ray (its sweep)
``use_thread_backend``, ``ThreadBackend``,         flwr.server           client_app.app (a run whose federation      none (Flower 1.42 builds only its
``THREAD_BACKEND``, ``backend_in_use``             .superlink.fleet      config names backend "threads" runs its     RayBackend, whatever the name)
(thread_backend)                                   .vce.vce_api.run_api  ClientApps in the engine's thread, not in
                                                   (wrapped), .start_vce Ray: fedspectral run's default; Flower
                                                   (frame's locals)      1.41/1.42, else one line)
``RECORD_KEY_CONFIGS`` (secagg)                    flwr.common.secure_   client_app.app (tell SecAgg+ stages from    none
                                                   aggregation.secagg…   fit messages), server_app.secure_loop
                                                                         (name the stages in a round's cost line)
``SecAggKey``, ``SecAggStage`` (secagg)            flwr.common.secure_   client_app.secure_rounding (a simulated     none
                                                   aggregation.secagg…   node's rounding seeded per stage),
                                                   (``Key``, ``Stage``)  server_app.secure_loop (as above)
``start_update_client_manager_thread`` (secagg)    flwr.server.compat    server_app.secure_loop (SecAgg+ loop that   ``DefaultWorkflow`` (cannot stop
                                                   .app_utils            can stop between rounds)                    between rounds)
``MAIN_CONFIGS_RECORD``, ``WorkflowKey`` (secagg)  flwr.server.workflow  server_app.secure_loop (round number for    none
                                                   .constant (``Key``)   ``SecAggPlusWorkflow``)
``default_init_params_workflow``,                  flwr.server.workflow  server_app.secure_loop (init / evaluation   ``DefaultWorkflow``
``default_centralized_evaluation_workflow``        .default_workflows    steps around own rounds)
(secagg)
``Run``, ``TaskIdentity`` (engine)                 flwr.supercore.run,   simulations.engines.local / .ray (a Grid's  none
                                                   .task_identity        run; ids ``Message(...)`` reads)
``SUPERLINK_NODE_ID``, ``RUN_ID_NUM_BYTES``,       flwr.common.constant  simulations.engines.local / .ray (what      none
``PARTITION_ID_KEY``, ``NUM_PARTITIONS_KEY``,                            Flower's engines give nodes and replies)
``ErrorCode`` (engine)
``NOOP_FEDERATION_ID``,                            flwr.supercore        simulations.engines.ray (a Run and Ray      none
``DEFAULT_SIMULATION_CONFIG`` (engine)             .constant             start-up as ``flwr run``)
``get_fused_config_from_dir`` (run_config)         flwr.common.config    simulations.engines (run config of          none (``flwr run`` CLI)
                                                                         pyproject.toml + overrides)
``parse_config_args`` (run_config)                 flwr.common.config    simulations.engines.ray, .deploy,           none (``flwr run --run-config``)
                                                                         .flwr_run (``--run-config`` syntax)
``private_run_simulation`` (ray_engine)            flwr.simulation       simulations.engines.ray (simulation with a  ``flwr.simulation.run_simulation``
                                                   .run_simulation       run config)                                 (empty run config) / ``flwr run``
                                                   ._run_simulation
``vce_api`` (ray_engine)                           flwr.server.superlink simulations.engines.ray (patches            none
                                                   .fleet.vce.vce_api    ``add_messages_to_queue``,
                                                                         ``_register_nodes``)
``add_exit_handler`` (process_exit)                flwr.supercore.exit   stop_request (the ServerApp stops between   none (Flower's and Ray's signal
                                                                         rounds when Flower stops its process)       handlers replace our own)
``supernode_argument_parser`` (supernode_cli)      flwr.supernode.cli    fedspectral.supernode (flower-supernode's   none (flower-supernode refuses a bad
                                                   .flower_supernode     arguments refused before anything starts)   argument itself, later)
                                                   (``_parse_args_run_
                                                   supernode``)
``list_run_status`` (control)                      flwr.supercore        fedspectral.run (the run's final status    ``flwr ls --format json`` (a process and
                                                   .control, flwr.cli    from the local SuperLink in one request,   a second or two of imports; the fallback)
                                                   .cli_client_inter-    no ``flwr ls`` process)
                                                   ceptor, flwr.proto
=================================================  ====================  ==========================================  ==========================================

Private names the opt-in deployment launchers import themselves (``fedspectral/launchers``: standalone
scripts that must not import fedspectral, so that a forked ClientApp runs its own run's code; both refuse any
Flower but 1.42 in one line; ``tests/test_flower_compat.py`` checks that each is listed here; both load
``grid_pull.py`` by its path for its one first-wait wrapper, ``with_first_wait``):

* ``flwr.supernode.cli.flwr_clientapp`` (forkserver: ``flwr-clientapp``'s entry point, imported once and run
  unchanged in a forked child per message; public alternative: the ``flwr-clientapp`` command, a new process and
  about 1 s of imports per message).
* ``flwr.supernode.runtime.run_clientapp`` (its ``install_from_fab`` and ``pull_and_inflate_object_from_tree``
  names, wrapped in a forked child) and ``flwr.supercore.version.package_version`` (forkserver: a FAB unpacked
  once per fork server, the app's modules imported in advance kept when the FAB holds the same files, a message
  still arriving asked for again after 0.1 s, not 1 s; any Flower but 1.41/1.42, or a ``run_clientapp`` without
  those calls, keeps Flower's own behaviour, one line; public alternative: none, a new ``flwr-clientapp``
  unpacks the FAB and imports the app at every message, and waits 1 s for a message still arriving).
* ``flwr.supernode.cli.flower_supernode.flower_supernode``, ``flwr.supernode.start_client_internal`` and
  ``flwr.supercore.version.package_version`` (supernode: runs ``flower-supernode`` with its loop module's
  ``time`` replaced by a proxy with shorter waits, and its ``pull_objects`` asking again for a message still
  arriving after 0.1 s, not 1 s; public alternative: none, no option sets the 3 s, 0.5 s and 1 s waits).

Private internals reached through attributes (no import to move; check them on an upgrade too):

* ``vce_api.add_messages_to_queue`` / ``vce_api._register_nodes`` and the in-memory link state's ``lock``,
  ``message_ins_store``, ``_check_stored_messages`` (simulations.engines.ray; falls back to Flower's sweep
  when the state lacks them).
* ``Message.metadata.__dict__["_message_id"]`` (simulations.engines.local.LocalGrid and
  simulations.bench_messages give messages ids as a Grid must; ``Metadata`` has no public setter).
* ``Server._get_initial_parameters`` / ``Server._client_manager`` (fl_strategies.protocol.server_loop.StoppingServer,
  a subclass of the public ``flwr.server.Server`` overriding ``fit``).

Names once imported from private paths that Flower also exports publicly (same objects; imported from the
public path now, not from here): ``flwr.common.log`` (was ``flwr.common.logger.log``), ``flwr.server.History``
(``flwr.server.history``), ``flwr.app.MessageType`` (``flwr.app.message_type``), ``flwr.common.now``
(``flwr.supercore.date``), ``flwr.common.EventType`` (``flwr.supercore.telemetry``).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# name -> area module (``fl_strategies.protocol.flower_compat.<area>``) that imports it from Flower and documents it
_AREA = {
    # legacy fit messages <-> RecordDict
    "recorddict_compat": "records",
    "check_mapping_from_recordscalartype_to_scalar": "records",
    "EXCEPTION_MESSAGE_WRONG_RETURN_TYPE_FIT": "records",
    # legacy server loop over a Grid
    "GridClientProxy": "legacy_server",
    "fit_clients": "legacy_server",
    "InMemoryGrid": "legacy_server",
    "HttpGrid": "legacy_server",
    "start_grid": "legacy_server",
    # a SuperLink's grid fetches a reply's contents
    "quicken_reply_pulls": "grid_pull",
    # the simulation engine hands pushed messages to its nodes
    "quicken_engine_delivery": "engine_delivery",
    "note_push": "engine_delivery",
    "wait_for_push": "engine_delivery",
    # the simulation engine runs the ClientApps in a thread, not Ray, for a run that names the backend
    "THREAD_BACKEND": "thread_backend",
    "ThreadBackend": "thread_backend",
    "use_thread_backend": "thread_backend",
    "backend_in_use": "thread_backend",
    "thread_backend_misfit": "thread_backend",
    "version_misfit": "thread_backend",
    # SecAgg+ rounds
    "RECORD_KEY_CONFIGS": "secagg",
    "SecAggKey": "secagg",
    "SecAggStage": "secagg",
    "start_update_client_manager_thread": "secagg",
    "MAIN_CONFIGS_RECORD": "secagg",
    "WorkflowKey": "secagg",
    "default_init_params_workflow": "secagg",
    "default_centralized_evaluation_workflow": "secagg",
    # what the engines give the apps
    "Run": "engine",
    "TaskIdentity": "engine",
    "SUPERLINK_NODE_ID": "engine",
    "RUN_ID_NUM_BYTES": "engine",
    "PARTITION_ID_KEY": "engine",
    "NUM_PARTITIONS_KEY": "engine",
    "ErrorCode": "engine",
    "NOOP_FEDERATION_ID": "engine",
    "DEFAULT_SIMULATION_CONFIG": "engine",
    # run configs as ``flwr run`` reads them
    "get_fused_config_from_dir": "run_config",
    "parse_config_args": "run_config",
    # Ray simulation engine internals (heavy)
    "private_run_simulation": "ray_engine",
    "vce_api": "ray_engine",
    # a ServerApp process's clean exit when Flower stops it
    "add_exit_handler": "process_exit",
    # the SuperNode's command line (fedspectral supernode checks its arguments first)
    "supernode_argument_parser": "supernode_cli",
    # a run's status from a local SuperLink's Control API (fedspectral run's exit code without flwr ls)
    "list_run_status": "control",
}

__all__ = sorted(_AREA)


def __getattr__(name: str) -> Any:
    """Import ``name`` from its area module on first use (PEP 562)."""
    area = _AREA.get(name)
    if area is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{area}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


if TYPE_CHECKING:  # for type checkers and IDEs; at run time the names are resolved lazily above
    from .engine import (
        DEFAULT_SIMULATION_CONFIG,
        NOOP_FEDERATION_ID,
        NUM_PARTITIONS_KEY,
        PARTITION_ID_KEY,
        RUN_ID_NUM_BYTES,
        SUPERLINK_NODE_ID,
        ErrorCode,
        Run,
        TaskIdentity,
    )
    from .legacy_server import GridClientProxy, HttpGrid, InMemoryGrid, fit_clients, start_grid
    from .grid_pull import quicken_reply_pulls
    from .engine_delivery import note_push, quicken_engine_delivery, wait_for_push
    from .thread_backend import (THREAD_BACKEND, ThreadBackend, backend_in_use, thread_backend_misfit,
                                 use_thread_backend, version_misfit)
    from .process_exit import add_exit_handler
    from .ray_engine import private_run_simulation, vce_api
    from .supernode_cli import supernode_argument_parser
    from .records import (
        EXCEPTION_MESSAGE_WRONG_RETURN_TYPE_FIT,
        check_mapping_from_recordscalartype_to_scalar,
        recorddict_compat,
    )
    from .run_config import get_fused_config_from_dir, parse_config_args
    from .secagg import (
        MAIN_CONFIGS_RECORD,
        RECORD_KEY_CONFIGS,
        SecAggKey,
        SecAggStage,
        WorkflowKey,
        default_centralized_evaluation_workflow,
        default_init_params_workflow,
        start_update_client_manager_thread,
    )
