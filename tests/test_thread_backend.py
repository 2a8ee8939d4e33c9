"""Flower's simulation engine runs the ClientApps in its own thread for a run whose backend is "threads"
(flower_compat.thread_backend, ``fedspectral run``'s default), as Ray's actor would run them."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest
from flwr.app import ConfigRecord, Context, Message, RecordDict


def _context() -> Context:
    return Context(run_id=1, node_id=7, node_config={"partition-id": 0}, state=RecordDict(), run_config={})


def _message() -> Message:
    from flwr.app import Metadata

    metadata = Metadata(run_id=1, message_id="", src_node_id=1, dst_node_id=7, reply_to_message_id="",
                        group_id="", created_at=0.0, ttl=60.0, message_type="query")
    return Message(metadata=metadata, content=RecordDict({"ask": ConfigRecord({"x": 2})}))


def test_it_has_every_method_of_flowers_backend_interface():
    from flwr.server.superlink.fleet.vce.backend import Backend

    from fl_strategies.protocol.flower_compat import ThreadBackend

    missing = sorted(name for name in Backend.__abstractmethods__ | {"num_workers"} if not hasattr(ThreadBackend, name))
    assert missing == []


def test_it_runs_the_app_on_the_message_and_the_nodes_context_as_rays_actor_does():
    from flwr.clientapp.client_app import ClientAppException, LoadClientAppError

    from fl_strategies.protocol.flower_compat import ThreadBackend

    seen = []

    def app(message, context):
        seen.append((message, context))
        context.state["count"] = ConfigRecord({"n": len(seen)})
        x = message.content["ask"]["x"]
        del message.content["ask"]  # as SecAgg+'s client mod edits the content the server sent every node
        if x < 0:
            raise ValueError("a negative x")
        return Message(RecordDict({"out": ConfigRecord({"y": x * 10})}), reply_to=message)

    backend = ThreadBackend({"client_resources": {"num_cpus": 2, "num_gpus": 0.0}, "init_args": {}})
    with pytest.raises(ValueError, match="build"):
        backend.process_message(_message(), _context())
    backend.build(lambda: app)
    assert backend.num_workers == 1 and backend.is_worker_idle()
    message, context = _message(), _context()
    reply, out_context = backend.process_message(message, context)
    assert reply.content["out"]["y"] == 20 and out_context.state["count"]["n"] == 1
    assert seen == [(seen[0][0], out_context)] and backend.is_worker_idle()
    # copies, as Ray's actor gets them: the engine's message (shared by other nodes' messages) is as it was, and
    # the node's context changes only through the context returned
    assert message.content["ask"]["x"] == 2 and "count" not in context.state
    assert seen[0][0].metadata.dst_node_id == 7 and seen[0][0] is not message
    bad = _message()
    bad.content["ask"]["x"] = -1
    with pytest.raises(ClientAppException, match="a negative x"):  # the engine's worker: an error reply
        backend.process_message(bad, out_context)
    assert backend.is_worker_idle() and out_context.state["count"]["n"] == 1 and "ask" in bad.content

    def unloadable():
        raise LoadClientAppError("no app here")

    backend.build(unloadable)
    with pytest.raises(LoadClientAppError, match="no app here"):
        backend.process_message(_message(), context)
    backend.terminate()


def test_resources_it_cannot_reserve_are_named_in_a_warning(caplog):
    import logging

    from fl_strategies.protocol.flower_compat import ThreadBackend

    logger = logging.getLogger("flwr")
    logger.addHandler(caplog.handler)
    try:
        ThreadBackend({"client_resources": {"num_cpus": 2, "num_gpus": 0.0}})
        assert "not reserved" not in caplog.text
        ThreadBackend({"client_resources": {"num_cpus": 1, "num_gpus": 0.5}})
    finally:
        logger.removeHandler(caplog.handler)
    assert "not reserved" in caplog.text and "'num_gpus': 0.5" in caplog.text and "'num_cpus': 1" in caplog.text


def test_the_wrapper_fits_the_flower_pyproject_allows_and_refuses_another():
    """Fails when a Flower release changes what the wrapper relies on: start_vce calling run_api by its module
    name with its backend_name and backend_config in hand, run_api taking (app_fn, backend_fn, ...)."""
    from flwr.supercore.version import package_version

    from fl_strategies.protocol.flower_compat import vce_api
    from fl_strategies.protocol.flower_compat.thread_backend import thread_backend_misfit

    run_api = getattr(vce_api.run_api, "__wrapped__", vce_api.run_api)
    assert thread_backend_misfit(package_version, vce_api.start_vce, run_api) is None
    assert "found 1.43.0" in thread_backend_misfit("1.43.0", vce_api.start_vce, run_api)

    def start_vce(backend_name, backend_config_json_stream):  # no run_api call
        return backend_name

    assert "start_vce" in thread_backend_misfit(package_version, start_vce, run_api)

    def other_run_api(backend_fn, app_fn):
        return None

    assert "run_api" in thread_backend_misfit(package_version, vce_api.start_vce, other_run_api)


@pytest.mark.parametrize("strategy", [{"strategy": "fedpower"},
                                      {"strategy": "krylov", "secure-aggregation": True, "iteration-rank": 5,
                                       "row-normalize": True}])
def test_a_run_naming_threads_runs_in_flowers_engine_without_ray_and_gives_the_in_process_model(tmp_path,
                                                                                                monkeypatch,
                                                                                                strategy):
    """Flower's own simulation engine in this process (its ``_run_simulation``, as ``flwr run``'s simulation
    process calls it) with backend "threads": the ClientApps run here, the model equals the in-process engine's;
    also under SecAgg+, whose setup stage sends one content to every node and whose client mod edits it."""
    from flwr.common import EventType
    from flwr.app import RecordDict as Records

    from client_app.app import app as client_app
    from fl_strategies.protocol.flower_compat import (NOOP_FEDERATION_ID, RUN_ID_NUM_BYTES, SUPERLINK_NODE_ID,
                                                      Run, TaskIdentity, backend_in_use, get_fused_config_from_dir,
                                                      private_run_simulation, use_thread_backend, vce_api)
    from fedspectral.run_config import app_dir
    from server_app.app import app as server_app
    from simulations.engines import fused_run_config
    from simulations.engines.local import run_local

    monkeypatch.setattr(vce_api, "run_api", getattr(vce_api.run_api, "__wrapped__", vce_api.run_api))
    assert use_thread_backend() is None and use_thread_backend() is None  # once: the second call changes nothing
    assert vce_api.run_api.__wrapped__.__module__ == vce_api.__name__
    overrides = {"num-clients": 3, "num-server-rounds": 3, "rank": 3, "seed": 5, **strategy,
                 "results-dir": str(tmp_path / "engine")}
    run_config = get_fused_config_from_dir(app_dir(), dict(overrides))
    run_id = int.from_bytes(os.urandom(RUN_ID_NUM_BYTES), "little") >> 1
    run = Run.create_empty(run_id=run_id)
    run.override_config, run.primary_task_id, run.federation_id = dict(overrides), 1, NOOP_FEDERATION_ID
    TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 1, run_id, SUPERLINK_NODE_ID
    context = Context(run_id=run_id, node_id=0, node_config={}, state=Records(), run_config=run_config)
    private_run_simulation(num_supernodes=3, exit_event=EventType.PYTHON_API_RUN_SIMULATION_LEAVE,
                           client_app=client_app, server_app=server_app, server_app_context=context,
                           app_dir=str(app_dir()), is_app=True, run=run, backend_name="threads",
                           backend_config={"client_resources": {"num_cpus": 2, "num_gpus": 0.0}, "init_args": {}})
    assert backend_in_use() == "threads"
    assert "ray" not in sys.modules or not sys.modules["ray"].is_initialized()
    run_local(fused_run_config({**overrides, "results-dir": str(tmp_path / "local")}))
    engine, local = np.load(tmp_path / "engine" / "pca.npz"), np.load(tmp_path / "local" / "pca.npz")
    np.testing.assert_allclose(engine["components"], local["components"], atol=1e-12)
    np.testing.assert_allclose(engine["explained_variance"], local["explained_variance"], rtol=1e-12)



def _flower_command(monkeypatch, tmp_path, argv):
    """The ``flwr run`` command (and its environment) that ``fedspectral run ARGV`` starts, captured unstarted."""
    import subprocess

    from fedspectral import run

    started = []

    class Started(Exception):
        pass

    def record(args, *rest, **kwargs):
        started.append((list(args), kwargs.get("env") or {}))
        raise Started

    monkeypatch.setattr(subprocess, "Popen", record)
    monkeypatch.chdir(tmp_path)
    try:
        run.main(["--run-config", f'num-clients=2 results-dir="{tmp_path / "out"}"', *argv], prog="fedspectral run")
    except Started:
        pass
    return next((args, env) for args, env in started if args[:2] == ["flwr", "run"])


@pytest.mark.parametrize("argv, backend", [([], "threads"), (["--backend", "ray"], "ray"),
                                           (["--backend", "threads"], "threads")])
def test_fedspectral_run_names_its_backend_in_flowers_federation_config(monkeypatch, tmp_path, argv, backend):
    """The backend reaches Flower's simulation process in the run's federation config (as ``flwr run`` parses
    it), threads by default; Ray's own settings only for Ray."""
    from flwr.supercore.utils import simulation_config_from_json

    from fl_strategies.protocol.flower_compat import parse_config_args

    command, env = _flower_command(monkeypatch, tmp_path, argv)
    federation = [command[i + 1] for i, word in enumerate(command) if word == "--federation-config"]
    parsed = {key.replace("-", "_"): value for key, value in parse_config_args(federation).items()}
    config = simulation_config_from_json(parsed)  # as flwr run builds the run's SimulationConfig
    assert config.backend == backend and config.num_supernodes == 2
    assert ("RAY_prestart_worker_first_driver" in env) == (backend == "ray")


def test_fedspectral_run_refuses_the_thread_backend_on_a_flower_it_was_not_written_for(monkeypatch, tmp_path,
                                                                                         capsys):
    import importlib.metadata
    import subprocess

    from fedspectral import run

    def no_process(*args, **kwargs):
        raise AssertionError("nothing may start")

    monkeypatch.setattr(subprocess, "Popen", no_process)
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "1.43.0" if name == "flwr" else "0")
    monkeypatch.chdir(tmp_path)
    status = run.main(["--run-config", "num-clients=2 results-dir=\"out\""], prog="fedspectral run")
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and len(err) == 1
    assert "--backend threads" in err[0] and "found 1.43.0" in err[0] and "--backend ray" in err[0]


def test_on_the_thread_backend_a_nodes_products_get_every_cpu_of_the_process(monkeypatch):
    """One node at a time runs in the simulation process: its ``.bed`` products get the CPUs the process may run
    on (on Ray, each actor's), and the ServerApp's BLAS one thread, unless the user set them."""
    from fedspectral import run
    from fl_strategies.kernels.rows import PRODUCT_THREADS_VARIABLE

    monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
    monkeypatch.delenv(PRODUCT_THREADS_VARIABLE, raising=False)
    monkeypatch.setattr(run, "usable_cpus", lambda: 6)
    env = run.simulation_env("threads")
    assert env["OPENBLAS_NUM_THREADS"] == "1" and env[PRODUCT_THREADS_VARIABLE] == "6"
    assert run.simulation_env("ray")[PRODUCT_THREADS_VARIABLE] == "2"  # Flower's 2 CPUs an actor
    monkeypatch.setenv(PRODUCT_THREADS_VARIABLE, "3")
    assert run.simulation_env("threads")[PRODUCT_THREADS_VARIABLE] == "3"
