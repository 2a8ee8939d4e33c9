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

from contextlib import contextmanager

from flwr.app import Context, RecordDict

from fl_strategies.protocol import node_directory, stop_request
from fl_strategies.protocol.flower_compat import (NOOP_FEDERATION_ID, RUN_ID_NUM_BYTES, SUPERLINK_NODE_ID, Run,
                                                  TaskIdentity)

from . import app_dir, engine_directory

__all__ = ["run_ray"]


def run_ray(overrides: dict, num_cpus_per_client: float = 1.0, address: str | None = None) -> None:
    """Run one simulation on Flower's Ray engine.

    Parameters
    ----------
    overrides : dict
        Run-config overrides of the ``pyproject.toml`` defaults; must set
        ``results-dir`` to get results back.
    num_cpus_per_client : float
        Ray CPUs reserved per virtual client (with 1 on a 2-core machine, two
        clients run at once).
    address : str, optional
        Attach to this running Ray cluster (``ray start --head`` prints it,
        e.g. ``"127.0.0.1:6379"``, or ``"auto"``) instead of starting a private
        one; passed to ``ray.init`` (also in Flower's backend ``init_args``).
        Without it Ray itself honours the ``RAY_ADDRESS`` environment
        variable. The cluster's CPUs then decide how many virtual clients run
        at once, and its worker processes must be able to import this project
        (the driver's ``PYTHONPATH`` is passed in the runtime environment).

    The ServerApp is fedspectral's own (SecAgg+ rounds included); its training
    rounds go out in one batch (:mod:`fl_strategies.protocol.round_exchange`).
    """
    from client_app.app import app as client_app
    from fl_strategies.protocol.flower_compat import get_fused_config_from_dir
    from server_app.app import app as server_app

    run_config = get_fused_config_from_dir(app_dir(), dict(overrides))
    run_id = int.from_bytes(__import__("os").urandom(RUN_ID_NUM_BYTES), "little") >> 1
    run = Run.create_empty(run_id=run_id)
    run.override_config = dict(overrides)
    run.primary_task_id = 1
    run.federation_id = NOOP_FEDERATION_ID
    TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 1, run_id, SUPERLINK_NODE_ID
    context = Context(run_id=run_id, node_id=0, node_config={}, state=RecordDict(), run_config=run_config)
    init_args = {"address": address} if address else {}
    stop_request.reset()
    started = _init_ray(init_args)
    try:
        _run(run_id, run_config, client_app, server_app, context, run, num_cpus_per_client, init_args)
    except BaseException:  # Ctrl-C, SIGTERM: Flower's engine stops, and the ServerApp's thread must too
        stop_request.abandon()
        raise
    finally:
        if started:
            import ray

            ray.shutdown()


def _init_ray(init_args: dict) -> bool:
    """Start (or attach to) Ray in the main thread, before the ServerApp thread exists; True if started here.

    Flower's backend would call ``ray.init`` later, from its engine thread,
    while the ServerApp thread may already be computing (the harness's exact
    reference is BLAS work): a ``fork`` of Ray's GCS server then deadlocked
    against OpenBLAS's threads (seen at 10,000 clients). Flower skips its own
    ``ray.init`` when Ray is initialised; the arguments are Flower's defaults
    (``PYTHONPATH`` for the workers, WARNING logs, no dashboard).
    """
    import os
    import sys

    import ray

    from fl_strategies.protocol.flower_compat import DEFAULT_SIMULATION_CONFIG

    if ray.is_initialized():
        return False
    pythonpath = os.pathsep.join(sys.path)
    if os.environ.get("PYTHONPATH"):
        pythonpath = f"{pythonpath}{os.pathsep}{os.environ['PYTHONPATH']}"
    os.environ["PYTHONPATH"] = pythonpath
    args = {"include_dashboard": False, "logging_level": DEFAULT_SIMULATION_CONFIG.init_args_logging_level,
            "log_to_driver": DEFAULT_SIMULATION_CONFIG.init_args_log_to_driver, **init_args}
    import signal

    handler = signal.getsignal(signal.SIGTERM)
    ray.init(runtime_env={"env_vars": {"PYTHONPATH": pythonpath}}, **args)
    if callable(handler):  # a command's own (SIGTERM as Ctrl-C): Ray's would end the process with exit status 1
        signal.signal(signal.SIGTERM, handler)  # and no word; run_ray's ray.shutdown stops Ray's processes
    return True


def _run(run_id, run_config, client_app, server_app, context, run, num_cpus_per_client, init_args) -> None:
    from flwr.common import EventType

    from fl_strategies.protocol.flower_compat import private_run_simulation as _run_simulation

    with _publish_directory(run_id, run_config), _one_pass_message_sweep():
        _run_simulation(
            num_supernodes=int(run_config["num-clients"]),
            exit_event=EventType.PYTHON_API_RUN_SIMULATION_LEAVE,
            client_app=client_app,
            server_app=server_app,
            server_app_context=context,
            app_dir=str(app_dir()),
            is_app=True,
            run=run,
            backend_config={"client_resources": {"num_cpus": num_cpus_per_client, "num_gpus": 0.0},
                            "init_args": init_args},
        )


@contextmanager
def _one_pass_message_sweep():
    """Replace Flower's message sweep by one that is linear in the pending messages (flwr 1.41-1.42).

    Every 0.1 s Flower's engine thread (``vce_api.add_messages_to_queue``)
    calls ``state.get_message_ins(node_id, limit=1)`` for *every* node, and
    each call scans (and validates) every stored message: a sweep costs
    ``nodes x stored messages`` checks. At 10,000 nodes that made a round of
    100 messages take seconds and a round of 10,000 messages (full
    participation) effectively never finish. This sweep looks at the stored
    messages once, takes the first undelivered one of each node (``limit=1``
    per node and sweep, as Flower), validates them with the same
    ``_check_stored_messages`` and marks them delivered, as
    ``get_message_ins`` does. A link state without these internals keeps
    Flower's sweep.
    """
    from flwr.common import now

    from fl_strategies.protocol.flower_compat import vce_api, wait_for_push

    original = vce_api.add_messages_to_queue

    def sweep(state, queue, nodes_mapping, f_stop):
        if not all(hasattr(state, a) for a in ("lock", "message_ins_store", "_check_stored_messages")):
            return original(state, queue, nodes_mapping, f_stop)
        known = set(nodes_mapping)
        while not f_stop.is_set():
            taken = []
            with state.lock:
                ids = {mid for mid, msg in state.message_ins_store.items()
                       if msg.metadata.delivered_at == "" and msg.metadata.dst_node_id in known}
                if ids:
                    state._check_stored_messages(ids)  # drops expired / invalid messages, as get_message_ins
                    nodes_served = set()
                    for mid in list(state.message_ins_store):
                        msg = state.message_ins_store.get(mid)
                        if mid in ids and msg is not None and msg.metadata.dst_node_id not in nodes_served:
                            nodes_served.add(msg.metadata.dst_node_id)
                            taken.append(msg)
                    stamp = now().isoformat()
                    for msg in taken:
                        msg.metadata.delivered_at = stamp
            for msg in taken:
                queue.put(msg)
            wait_for_push(f_stop)  # 0.1 s, or less after a ServerApp's push (round_exchange.send_and_receive)

    vce_api.add_messages_to_queue = sweep
    try:
        yield
    finally:
        vce_api.add_messages_to_queue = original


@contextmanager
def _publish_directory(run_id: int, run_config: dict):
    """With ``discovery = "engine"``: publish the node -> partition map Flower's engine creates.

    Flower's simulation engine registers node ``i`` (random node id) for
    partition ``i`` in ``vce_api._register_nodes`` and keeps the map to
    itself; this wraps that private function of flwr 1.41-1.42 for the
    duration of the run, so the ServerApp (same process) reads the map from
    :mod:`fl_strategies.protocol.node_directory` instead of asking every node.
    """
    if run_config.get("discovery") != "engine":
        yield
        return
    from fl_strategies.protocol.flower_compat import vce_api

    original = vce_api._register_nodes

    def register_nodes(num_nodes, state_factory):
        mapping = original(num_nodes=num_nodes, state_factory=state_factory)
        node_directory.register(run_id, engine_directory(run_config, mapping))
        return mapping

    vce_api._register_nodes = register_nodes
    try:
        yield
    finally:
        vce_api._register_nodes = original
        node_directory.unregister(run_id)


class PeakMemory:
    """Peak resident memory of this process and all its descendants (Ray's raylet, GCS and workers), sampled.

    ``with PeakMemory() as peak: ...`` then ``peak.bytes``. The sum of the
    resident set sizes is sampled every ``interval`` seconds (shared pages
    counted once per process, so it is an upper bound of the machine's use);
    ``tree=False`` samples this process alone.
    """

    def __init__(self, interval: float = 0.5, tree: bool = True) -> None:
        self.interval, self.tree, self.bytes = interval, tree, 0
        self._stop = None

    def _sample(self) -> int:
        """Sum of ``VmRSS`` over this process and (``tree``) its descendants (Linux ``/proc``)."""
        import os

        if not self.tree:  # one file: cheap enough not to disturb CPU-time measurements
            with open("/proc/self/status") as f:
                return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS"))

        parent, rss = {}, {}
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/status") as f:
                    fields = dict(line.split(":", 1) for line in f if ":" in line)
            except OSError:  # ended meanwhile
                continue
            parent[int(entry)] = int(fields.get("PPid", "0"))
            rss[int(entry)] = int(fields.get("VmRSS", "0 kB").split()[0]) * 1024
        tree, frontier = {os.getpid()}, [os.getpid()]
        while frontier:
            node = frontier.pop()
            children = [pid for pid, ppid in parent.items() if ppid == node and pid not in tree]
            tree.update(children)
            frontier.extend(children)
        return sum(rss.get(pid, 0) for pid in tree)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.bytes = max(self.bytes, self._sample())

    def __enter__(self) -> "PeakMemory":
        import threading

        self._stop = threading.Event()
        self.bytes = self._sample()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def main(argv: list[str] | None = None) -> int:
    """``python -m simulations.engines.ray --run-config 'k=v ...' [--address A]``: one run, timed.

    Prints the wall time (Ray start-up included), the mean per-round time
    from ``rounds.csv``, the peak resident memory of this process tree and
    the final subspace distance.
    """
    import argparse
    import logging
    import tempfile
    import time

    import pandas as pd

    from . import ArgumentError, parse_run_config

    parser = argparse.ArgumentParser(prog="python -m simulations.engines.ray", description=main.__doc__.split("\n")[0])
    parser.add_argument("--run-config", default="", help="TOML overrides, e.g. 'num-clients=1000 strategy=\"faps\"'")
    parser.add_argument("--address", default=None, help="attach to this Ray cluster (default: start one)")
    parser.add_argument("--cpus-per-client", type=float, default=1.0)
    args = parser.parse_args(argv)
    try:  # every word heard (a word that is not key=value is refused, not dropped)
        overrides = parse_run_config(args.run_config)
    except ArgumentError as ex:
        print(f"{parser.prog}: error: {ex}", file=__import__("sys").stderr)
        return 2
    logging.getLogger("flwr").setLevel(logging.WARNING)
    with tempfile.TemporaryDirectory() as tmp:
        overrides.setdefault("results-dir", tmp)
        start = time.perf_counter()
        with PeakMemory() as peak:
            run_ray(overrides, num_cpus_per_client=args.cpus_per_client, address=args.address)
        wall = time.perf_counter() - start
        rows = pd.read_csv(f"{overrides['results-dir']}/rounds.csv")
    last = rows.iloc[-1]
    metric = next((c for c in ("subspace_distance", "loss_gap") if c in rows), None)
    print(f"rounds: {len(rows) - 1}  wall time: {wall:.1f} s  per round: {rows['wall_time'].iloc[1:].mean():.3f} s "
          f"(round 1: {rows['wall_time'].iloc[1]:.1f} s)  peak memory (process tree RSS): {peak.bytes / 2**30:.2f} GiB"
          + (f"  final {metric}: {last[metric]:.3e}" if metric else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
