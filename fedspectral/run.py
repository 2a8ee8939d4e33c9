"""Run the app with ``flwr run .`` offline, check that the run succeeded, and clean up.

``flwr run .`` in Flower 1.41/1.42 needs four things that are easy to get
wrong on a machine without internet; this wrapper does them:

* it sets ``FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1`` (else the local
  SuperLink tries to install the app's dependencies with uv),
  ``FLWR_TELEMETRY_ENABLED=0``, ``FLWR_DISABLE_UPDATE_CHECK=1`` and
  ``FLWR_HOME`` (a checkout's ``.flwr/``; an installed package's in the user's cache,
  :mod:`fedspectral.app_bundle`) unless they are already set;
* it runs the app directory :func:`fedspectral.run_config.app_dir` names (the checkout, or the one assembled
  from an installed package), from any directory, and builds its FAB from a folder of the FAB's files only
  (:func:`fedspectral.app_bundle.fab_dir`: Flower reads every file under the folder it is given);
* it validates the run config (and checks it against its data) before
  Flower starts, so a bad value is one line, not a failed run;
* it asks for as many simulated SuperNodes as the run config has clients
  (Flower's default is 2), names the backend that runs their ClientApps (``--backend``, :data:`BACKENDS`:
  ``threads``, fedspectral's, in a thread of the simulation process, by default; ``ray``, Flower's, in Ray
  actors), and leaves out Flower's warning that the default changed from 10 to 2, which
  flwr 1.42 prints whatever was asked (:data:`MISLEADING_LINES`);
* it makes relative paths (``results-dir``, ``checkpoint-dir``, a ``dataset``
  or ``server-data`` file, an ``init-from`` model) absolute against the directory it is run from
  (Flower's processes would resolve them against the SuperLink's);
* ``flwr run`` exits 0 even when the run failed, so the run's final status is
  read back from the SuperLink (as ``flwr ls`` shows it: :func:`local_run_status`) and turned into the exit
  code;
* the local SuperLink that ``flwr run`` starts outlives it; the wrapper stops
  it again (unless it was already running before, or ``--keep-superlink``);
* ``results-dir`` and ``checkpoint-dir`` are this command's from before Flower starts until it ended: a second
  ``fedspectral run`` (or ``compare``, ``deploy``) on one of them, or one a ServerApp writes now, is refused in one
  line naming the holder (:mod:`fl_strategies.files.folder_lock`);
* Ctrl-C, SIGTERM or SIGHUP stop the run, not only this command: the simulation process below the local
  SuperLink it started gets SIGTERM (its ServerApp ends before its next round, and Ray is stopped with it:
  :func:`stop_simulations`), then that SuperLink and every process below it are stopped
  (:func:`stop_superlink`); on a SuperLink it did not start (or kept) the run is stopped with ``flwr stop``
  (:func:`stop_flower_run`). One line says so, the exit status is 128 + the signal's number, and a run with
  ``resume = true`` continues from the checkpoint;
* the simulation runs with ``OPENBLAS_NUM_THREADS=1`` unless set, the nodes' ``.bed`` products with the CPUs of
  their Ray actor (:func:`simulation_env`), and a run whose
  simulation process stopped before the ServerApp logged a line is started again, once, with a line saying so
  (:data:`APP_LINE`).

Ports: Flower's local SuperLink listens on one HTTP port, 39091, unless
``FLWR_LOCAL_SUPERLINK_HTTP_API_PORT`` says otherwise (``flwr/cli/constant.py``
of flwr 1.41; ``FLWR_LOCAL_CONTROL_API_PORT``, default 39093, names the Control
API's legacy gRPC address, which it only binds with ``FLWR_INTERNAL_GRPC_CONTROL_API=1``).
Every ``flwr`` command reads them from its environment, so two projects (or two
test runs) on one machine each get their own local SuperLink by setting them
to different free ports; the wrapper follows the variable (:func:`local_superlink_port`).
When the port is held by anything but this ``FLWR_HOME``'s SuperLink (another
checkout's run), the wrapper takes a free port for its own SuperLink, or, when
the user set the variable, refuses in one line (:func:`claim_superlink_port`);
it only ever stops the SuperLink of its own ``FLWR_HOME`` on its port.

Usage (``fedspectral run``, or the module names ``fedspectral.run`` and ``simulations.engines.flwr_run``)::

    fedspectral run [--run-config 'key=value ...' | --run-config FILE.toml] [--backend threads|ray]
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from fedspectral.app_bundle import AppBundleError, default_flower_home, fab_dir
from fedspectral.outcome import missing_model, model_stamp
from fedspectral.run_config import (OUTPUT_KEYS, ArgumentError, ArgumentParser, app_dir, check_output_dirs,
                                    checked_run_config, config_word, flower_run_config, parse_run_config)
from fl_strategies.files.folder_lock import own_folders
from fl_strategies.settings.errors import ConfigError
from fl_strategies.files.plain_files import UnsafeDestination
from fl_strategies.settings.command_line import interruption, stop_signals

SUPERLINK_PORT = 39091  # Flower's local SuperLink (flwr/cli/local_superlink.py), unless the variable below is set
PORT_VARIABLE = "FLWR_LOCAL_SUPERLINK_HTTP_API_PORT"
"""Flower's environment variable for the local SuperLink's port (``flwr/cli/constant.py``)."""
CONTROL_PORT_VARIABLE = "FLWR_LOCAL_CONTROL_API_PORT"
"""Flower's environment variable for the local Control API's legacy gRPC port (default 39093)."""


def local_superlink_port(env: dict[str, str] | None = None) -> int:
    """The port of Flower's local SuperLink for the environment ``env`` (default: this process's)."""
    return int((os.environ if env is None else env).get(PORT_VARIABLE) or SUPERLINK_PORT)


def flower_env() -> dict[str, str]:
    """The environment ``flwr`` needs offline (existing settings are kept).

    ``FLWR_HOME`` defaults to :func:`fedspectral.app_bundle.default_flower_home` (the checkout's ``.flwr/``, or
    ``flwr-home/`` in the user's cache for an installed package); a relative one the user set is taken against
    the directory the command runs from, as the run config's paths are (``flwr`` runs in the app's directory).
    """
    env = dict(os.environ)
    env.setdefault("FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION", "1")
    env.setdefault("FLWR_TELEMETRY_ENABLED", "0")
    env.setdefault("FLWR_DISABLE_UPDATE_CHECK", "1")
    env["FLWR_HOME"] = str(Path(env.get("FLWR_HOME") or default_flower_home()).expanduser().absolute())
    bindir = str(Path(sys.executable).parent)  # flwr needs flower-superlink on PATH
    env["PATH"] = bindir + os.pathsep + env.get("PATH", "")
    return env


def simulation_env(backend: str = "ray") -> dict[str, str]:
    """:func:`flower_env` for a run in the simulation engine on ``backend`` (:data:`BACKENDS`), with
    ``OPENBLAS_NUM_THREADS`` 1 unless set.

    The simulation process runs the ServerApp in a thread beside Flower's Ray engine thread, and OpenBLAS's own
    thread pool there was seen to spin forever in a small product at the ServerApp's start (a CI run hung 14 min
    in ``R.T @ R`` of the 1797 x 64 digits reference; py-spy: OpenBLAS ``inner_thread``). The server's products
    are small. The nodes' ClientApps (in Ray's actors, or in that process's thread) inherit the variable, and a
    ``.bed`` product takes its threads from it (:func:`fl_strategies.kernels.rows.product_threads`): where it is
    set here, the products get the CPUs of the worker that runs a node through
    :data:`~fl_strategies.kernels.rows.PRODUCT_THREADS_VARIABLE` (in Ray, the CPUs Flower gives each actor,
    :func:`actor_cpus`; in the thread backend, which serves one node at a time, every CPU this process may run
    on), unless the user set that one. A user's ``OPENBLAS_NUM_THREADS`` is theirs: then neither is set.

    On Ray, Ray starts no idle workers when Flower's simulation starts it (:data:`RAY_SETTINGS`), unless the user
    set the variable.
    """
    from fl_strategies.kernels.rows import PRODUCT_THREADS_VARIABLE

    env = flower_env()
    if not env.get("OPENBLAS_NUM_THREADS"):
        env["OPENBLAS_NUM_THREADS"] = "1"
        env.setdefault(PRODUCT_THREADS_VARIABLE, str(actor_cpus() if backend == "ray" else usable_cpus()))
    if backend == "ray":
        for name, value in RAY_SETTINGS.items():
            env.setdefault(name, value)
    return env


BACKENDS = {
    "threads": "the nodes' ClientApps run one at a time in a thread of Flower's simulation process (no Ray: its "
               "start and stop, copies of each message and processes are saved)",
    "ray": "the nodes' ClientApps run in Ray actors (Flower's default; one per 2 CPUs, each its own process)",
}
"""The simulation backends ``fedspectral run --backend`` takes (the federation config's ``backend`` Flower is
given), the first the default: ``threads`` is fedspectral's
(:mod:`fl_strategies.protocol.flower_compat.thread_backend`), ``ray`` Flower's own."""


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity where the system tells it)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


RAY_SETTINGS = {"RAY_prestart_worker_first_driver": "0"}
"""Ray's settings for the simulation that ``fedspectral run`` starts (Ray reads ``RAY_<setting>`` from the
environment of the process that calls ``ray.init``: Flower's simulation process, below the local SuperLink that
inherits them; Flower's federation config passes only ``num-cpus``, ``num-gpus``, ``logging-level`` and
``log-to-driver`` to ``ray.init``).

``prestart_worker_first_driver`` off: Ray's raylet no longer starts one idle worker per CPU when the simulation
process connects (two Python processes importing Ray on 2 CPUs, beside the one actor Flower then starts, which
did not use them); the actor starts as before and runs the same code. Measured with ``bench_run_overhead``
(2,800 x 100,000, four sites, 3 rounds, load average 3 to 5 on 2 cores): 13 processes instead of 15, and the
actor's first line 7.6 and 10.1 s after the ServerApp's first instead of 9.6 and 13.8 s."""


def actor_cpus() -> int:
    """The CPUs of one simulated node's Ray actor as ``fedspectral run`` starts Flower's simulation: Flower's
    default ``client-resources-num-cpus`` (2 in flwr 1.42, ``DEFAULT_SIMULATION_CONFIG``), at most the CPUs this
    process may run on (Ray starts as many actors as those CPUs fill: one on 2 CPUs, which serves the nodes one
    after the other, as the in-process engine does)."""
    from fl_strategies.protocol.flower_compat import DEFAULT_SIMULATION_CONFIG

    return max(1, min(int(DEFAULT_SIMULATION_CONFIG.client_resources_num_cpus), usable_cpus()))


def superlink_running(env: dict[str, str] | None = None) -> bool:
    """Whether a local SuperLink answers on its health endpoint (the port of ``env``, default this process's)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{local_superlink_port(env)}/health", timeout=1):
            return True
    except OSError:
        return False


def stop_superlink(env: dict[str, str] | None = None) -> None:
    """Stop the local SuperLink that ``flwr run`` started for ``env`` and every process it started; return once
    they exited.

    That is its SuperExec, the simulation process (``flwr-simulation``) of a run still going, and that one's Ray
    processes (GCS, raylet, workers): every descendant of the SuperLink, and of a SuperExec whose parent it was,
    found before the first signal (a killed parent's children are re-parented and could not be found after).
    Only the SuperLink on that port whose state lives in that ``FLWR_HOME`` is stopped: another project's
    local SuperLink is left alone. SIGTERM first (Flower's processes then exit within 5 s); what still runs after
    15 s gets SIGKILL.
    """
    env = flower_env() if env is None else env
    links, processes = _own_superlinks(env)
    helpers = [pid for pid, args in processes if "flower-superexec" in args
               and any(f"--parent-pid {link} " in args + " " for link in links)]
    terminate(descendants(links + helpers), term_wait=15.0)


def stop_simulations(env: dict[str, str]) -> None:
    """Stop the simulation processes (``flwr-simulation``) below the local SuperLink of ``env`` and their Ray
    processes; return once they exited.

    SIGINT, as Flower's own stop does (its SIGTERM handler is replaced by Ray's, which leaves the ServerApp's
    thread running): Flower's exit handler then asks the ServerApp to end before its next round
    (:mod:`fl_strategies.protocol.stop_request`), reports the run's end to the SuperLink and stops Ray. What
    still runs after 12 s (the simulation process, or a Ray process it left) gets SIGTERM, then SIGKILL.
    """
    links, processes = _own_superlinks(env)
    helpers = [pid for pid, args in processes if "flower-superexec" in args
               and any(f"--parent-pid {link} " in args + " " for link in links)]
    names = dict(processes)
    simulations = [pid for pid in descendants(links + helpers) if "flwr-simulation" in names.get(pid, "")]
    below = descendants(simulations)  # Ray's processes, found before their parent exits
    terminate(simulations, term_wait=12.0, first=signal.SIGINT)
    terminate(below)


def descendants(pids: list[int]) -> list[int]:
    """``pids`` and every process below them (children, their children, ...), read from ``/proc`` now."""
    parent = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    parent[int(entry)] = int(fh.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    found, frontier = list(dict.fromkeys(pids)), list(pids)
    while frontier:
        node = frontier.pop()
        for pid, ppid in parent.items():
            if ppid == node and pid not in found:
                found.append(pid)
                frontier.append(pid)
    return found


def stop_flower_run(run_id: str, env: dict[str, str], connection: str | None = None, wait: float = 20.0,
                    until_finished: bool = True) -> str:
    """``flwr stop`` a run on the SuperLink of ``env`` and (``until_finished``) wait until it has finished; its
    final status (``"unknown"`` when not waited for).

    Flower's simulation (or ServerApp) process of the run exits on that (within about 10 s), and so do its Ray
    processes. Every write of a run is whole (the checkpoint by a rename, a row of ``rounds.csv`` by one
    append): what it wrote up to then is consistent, and a run with ``resume = true`` continues from its last
    checkpoint.
    """
    try:
        subprocess.run(["flwr", "stop", run_id, *([connection] if connection else [])], env=env, cwd=app_dir(),
                       capture_output=True, text=True, timeout=wait)
    except subprocess.TimeoutExpired:
        return "unknown"
    return run_status(run_id, env, wait=wait, connection=connection) if until_finished else "unknown"


def _own_superlinks(env: dict[str, str]) -> tuple[list[int], list[tuple[int, str]]]:
    """The pids of the local SuperLink(s) on ``env``'s port whose state lives in ``env``'s ``FLWR_HOME``, and
    ``(pid, command line)`` of every process (from ``ps``)."""
    port = local_superlink_port(env)
    home = Path(env["FLWR_HOME"]).expanduser()
    databases = {str(home / "local-superlink" / "state.db"),  # as flwr passes it (relative: to app_dir())
                 str(app_dir() / home / "local-superlink" / "state.db")}
    ps = subprocess.run(["ps", "-ww", "-e", "-o", "pid=,args="], capture_output=True, text=True).stdout
    processes = [(int(pid), args) for pid, _, args in (line.strip().partition(" ") for line in ps.splitlines())]
    links = [pid for pid, args in processes if "flower-superlink" in args and f"--port {port} " in args + " "
             and databases & set(args.split()) and pid != os.getpid()]
    return links, processes


def _listening(port: int) -> bool:
    """Whether a program accepts connections on ``127.0.0.1:port`` (a closed port in TIME_WAIT does not)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(2.0)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def claim_superlink_port(env: dict[str, str]) -> str | None:
    """Make sure ``env``'s local SuperLink port is this ``FLWR_HOME``'s to use; return a line to print, if any.

    The port is kept when this ``FLWR_HOME``'s SuperLink already listens there, or when it is free. When
    something else holds it (another checkout's local SuperLink, any other program), ``flwr run`` would attach
    to that SuperLink and lose its run when it stops: then the port comes from :data:`PORT_VARIABLE` only if the
    user set it (refused, :class:`ArgumentError`: a setting is never overridden), else a free port is taken
    for this run (``env`` is updated, with the Control API's port two above it unless the user set that one).
    """
    from fedspectral.deploy import free_port_block

    port = local_superlink_port(env)
    if not _listening(port) or _own_superlinks(env)[0]:  # a free port is kept without reading every process
        return None
    if os.environ.get(PORT_VARIABLE):
        raise ArgumentError(f"{PORT_VARIABLE}={port}: that port is in use by another program or another "
                            f"FLWR_HOME's local SuperLink, whose run this one would join; set a free port or "
                            f"unset {PORT_VARIABLE} (a free one is then taken)")
    new = free_port_block(4)
    env[PORT_VARIABLE] = str(new)
    if not os.environ.get(CONTROL_PORT_VARIABLE):  # a user's own setting is kept
        env[CONTROL_PORT_VARIABLE] = str(new + 2)
    return (f"port {port} is in use by another program or another FLWR_HOME's local SuperLink: this run's local "
            f"SuperLink uses port {new} ({PORT_VARIABLE})")


def terminate(pids: list[int], term_wait: float = 5.0, kill_wait: float = 5.0,
              first: signal.Signals = signal.SIGTERM) -> None:
    """Send ``first`` (SIGTERM) to every process of ``pids``; SIGKILL those still running after ``term_wait`` s
    (with another ``first``, SIGTERM after ``term_wait`` s and SIGKILL after another 5 s); wait for them."""
    steps = [(first, term_wait), (signal.SIGKILL, kill_wait)]
    if first != signal.SIGTERM:
        steps.insert(1, (signal.SIGTERM, 5.0))
    for sig, wait in steps:
        if not any(_running(pid) for pid in pids):
            return
        for pid in pids:
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and any(_running(pid) for pid in pids):
            time.sleep(0.1)


def _running(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie (an exited child nobody has reaped yet)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def run_status(run_id: str, env: dict[str, str], wait: float = 30.0, connection: str | None = None) -> str:
    """Final status of a run (e.g. ``finished:completed``), polling until it has finished.

    ``connection`` names the SuperLink connection of ``$FLWR_HOME/config.toml``, read with ``flwr ls``; without
    it, the local SuperLink of ``env`` is asked directly first (:func:`local_run_status`: one request, no
    ``flwr`` process, which costs a second or two of imports at every run's end), and ``flwr ls`` (its default
    connection) only where that SuperLink does not answer or does not know the run.
    """
    deadline = time.monotonic() + wait
    status = "unknown"
    while time.monotonic() < deadline:
        status = local_run_status(run_id, env) if connection is None else "unknown"
        if status == "unknown":
            cmd = ["flwr", "ls", *([connection] if connection else []), "--format", "json", "--run-id", run_id]
            out = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=app_dir()).stdout
            try:
                status = str(json.loads(out)["runs"][0]["status"])
            except (ValueError, KeyError, IndexError):
                status = "unknown"
        if status.startswith("finished"):
            break
        time.sleep(1)
    return status


def local_run_status(run_id: str, env: dict[str, str]) -> str:
    """The status of run ``run_id`` on the local SuperLink of ``env`` as ``flwr ls`` shows it (``status`` or
    ``status:sub-status``, e.g. ``finished:failed``); ``"unknown"`` when the SuperLink does not answer or does not
    know the run.

    One ``ListRuns`` request to its Control API with Flower's own client, as ``flwr ls`` makes it
    (``flwr/cli/ls.py``, ``flwr/cli/run_utils.py`` of flwr 1.42: the CLI's client header, no account
    authentication on a local SuperLink); unlike ``flwr ls``, it never starts a SuperLink where none runs.
    """
    from fl_strategies.protocol.flower_compat import list_run_status

    status = list_run_status(f"127.0.0.1:{local_superlink_port(env)}", int(run_id))
    return "unknown" if status is None else status


MISLEADING_LINES = re.compile(r"Since flwr 1\.32, default simulated SuperNodes changed from 10 to 2\."
                              r"|To change federation size, use the following command:"
                              r"|\sflwr federation simulation-config \S+ <superlink> --num-supernodes <N>")
"""Lines of Flower's simulation process (``flwr/simulation/app.py`` of flwr 1.42) that :func:`stream_run` drops.

Flower logs them at the start of every simulation whatever its size, also when ``--federation-config
num-supernodes=N`` asked for ``N``: the warning reads as if 2 SuperNodes ran, and the hint names a command this
wrapper makes unnecessary (it asks for ``num-clients`` SuperNodes). The line that follows them in the log,
``Federation `...` (N simulated SuperNodes)``, is kept: it states how many ran."""


APP_LINE = re.compile(r"fedspectral: ")
"""A line the ServerApp logs (every one of its lines starts so; the first names the strategy): the app started."""


def stream_run(cmd: list[str], env: dict[str, str], app_lines: list[str] | None = None,
               run_ids: list[str] | None = None) -> str | None:
    """Run a ``flwr run ... --stream`` command, echo its output, and return the run id it started.

    ``app_lines``, when given, receives the streamed lines the ServerApp logged (:data:`APP_LINE`): empty after a
    run whose simulation process stopped before the app started. ``run_ids``, when given, receives the run id as
    soon as Flower prints it (an interrupted caller can stop that run).

    Flower's misleading lines about the federation's size (:data:`MISLEADING_LINES`) are not echoed.

    Interrupted (Ctrl-C, a test's timeout, any exception), the ``flwr run`` process is ended before the
    exception goes on: a run that hangs (e.g. a crashed Ray worker in the simulation) never blocks its caller,
    which stops the SuperLink.
    """
    run_id = None
    proc = subprocess.Popen(cmd, env=env, cwd=app_dir(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        for line in proc.stdout:
            if not MISLEADING_LINES.search(line):
                sys.stdout.write(line)
            if app_lines is not None and APP_LINE.search(line):
                app_lines.append(line)
            match = re.search(r"Successfully started run (\d+)", line)
            run_id = match.group(1) if match else run_id
            if match and run_ids is not None:
                run_ids.append(run_id)
        proc.wait()
    except BaseException:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        raise
    finally:
        proc.stdout.close()
    return run_id


PATH_KEYS = ("results-dir", "checkpoint-dir", "dataset", "server-data", "init-from", "exclude-range")


def absolute_paths(cfg: dict) -> dict[str, str]:
    """The run config's relative paths made absolute against the current directory.

    ``results-dir`` and ``checkpoint-dir`` always (they are created); ``dataset``, ``server-data``, ``init-from``
    and ``exclude-range`` when they name an existing file or folder here (else ``dataset`` names a generator;
    ``exclude-range``'s build names, :data:`~fl_strategies.files.ranges.BUILDS`, are left for its own check, which
    refuses one that is also a file here).
    """
    from fl_strategies.files.ranges import BUILDS

    out = {}
    for key in PATH_KEYS:
        value = str(cfg.get(key) or "")
        if not value or Path(value).is_absolute() or (key == "exclude-range" and value.lower() in BUILDS):
            continue
        if key in ("results-dir", "checkpoint-dir") or Path(value).exists():
            out[key] = str(Path(value).resolve())
    return out


EXAMPLES = """\
examples:
  {prog}
  {prog} --run-config 'num-clients=10 num-server-rounds=5 rank=4'
  {prog} --run-config 'dataset="mydata" num-clients=3 center=true results-dir="out"'
  {prog} --run-config my-run.toml
  {prog} --run-config my-run.toml --backend ray

  (mydata holds one file per client, partition_<i>.npy or .csv; out receives rounds.csv and pca.npz)

exit status: 0 the run finished, 1 it failed (Flower's final status is printed last; also a run that wrote no
pca.npz to its results-dir where its strategy writes one), 2 a bad argument or run config, or a results-dir /
checkpoint-dir in use (one line, before Flower starts), 130 (143) stopped by Ctrl-C (SIGTERM): the run and every
process it started are stopped, resume = true continues it
"""


def main(argv: list[str] | None = None, prog: str = "python -m simulations.engines.flwr_run") -> int:
    """Command-line entry point; returns 0 only if the run finished successfully (2: a bad argument, one line).

    ``prog`` is the command's name in its usage and error lines (``fedspectral run`` from :mod:`fedspectral.cli`).
    """
    parser = ArgumentParser(prog=prog, description="Run the app in Flower's simulation engine (`flwr run .` offline), "
                            "check that the run succeeded,\nand stop the local SuperLink.",
                            epilog=EXAMPLES.format(prog=prog))
    parser.add_argument("--run-config", default="", metavar="CONFIG",
                        help="'key=value ...' or a TOML file: overrides of pyproject.toml's run config, as "
                        "for `flwr run --run-config`")
    parser.add_argument("--backend", choices=list(BACKENDS), default=next(iter(BACKENDS)),
                        help="where Flower's simulation engine runs the nodes' ClientApps: "
                        + "; ".join(f"{name}: {text}" for name, text in BACKENDS.items())
                        + f" (default: {next(iter(BACKENDS))})")
    parser.add_argument("--keep-superlink", action="store_true", help="leave the local SuperLink running")
    args = parser.parse_args(argv)
    with stop_signals() as signals:  # SIGTERM and SIGHUP stop the run as Ctrl-C does
        try:
            return _run(args, parser.prog, signals)
        except KeyboardInterrupt as ex:  # before Flower started: nothing to stop
            print(f"{parser.prog}: interrupted ({interruption(ex).name}) before the run started; nothing was "
                  "started", file=sys.stderr)
            return interruption(ex).status


def _run(args, prog: str, signals) -> int:
    """:func:`main` after its arguments were parsed, with the stop signals raising :class:`Interrupted`."""
    try:  # the fused run config is validated (and checked against its data) before Flower starts anything
        cfg = checked_run_config(parse_run_config(args.run_config))
        flower_text = flower_run_config(args.run_config)  # a TOML file as its words: Flower takes no file beside ours
        check_output_dirs(cfg)  # results-dir, checkpoint-dir: created and test-written here, one line if not
        # the folders are this command's until it ends, and a ServerApp (a plain `flwr run .`) writing one is refused
        folders = own_folders({key: cfg[key] for key in OUTPUT_KEYS}, what=f"{prog} {args.run_config}".strip())
    except (ArgumentError, ConfigError, UnsafeDestination) as ex:
        print(f"{prog}: error: {ex}", file=sys.stderr)
        return 2
    from fl_strategies.files.variants import forget_parsed

    forget_parsed()  # the checks' parsed variant lists: this process waits for Flower from here on
    with folders:
        return _run_flower(args, prog, signals, cfg, flower_text)


def _run_flower(args, prog: str, signals, cfg: dict, flower_text: str) -> int:
    """Start the run in Flower and report its status; on a stop signal, stop it and everything it started.
    ``flower_text``: the user's ``--run-config`` as Flower is given it
    (:func:`~fedspectral.run_config.flower_run_config`)."""
    num_clients = int(cfg["num-clients"])
    if args.backend == "threads":  # fedspectral's backend fits the Flower it was written for: else one line
        from importlib.metadata import version

        from fl_strategies.protocol.flower_compat.thread_backend import version_misfit

        problem = version_misfit(version("flwr"))
        if problem:
            print(f"{prog}: error: --backend threads: {problem}; use --backend ray", file=sys.stderr)
            return 2
    env = simulation_env(args.backend)
    try:  # never join (and later lose) another FLWR_HOME's local SuperLink
        note = claim_superlink_port(env)
    except ArgumentError as ex:
        print(f"{prog}: error: {ex}", file=sys.stderr)
        return 2
    if note:
        print(f"{prog}: {note}", file=sys.stderr)
    try:  # only the FAB's files: Flower reads every file under the folder it builds from (a checkout's .venv too)
        fab = fab_dir(Path(env["FLWR_HOME"]))
    except AppBundleError as ex:
        print(f"{prog}: error: {ex}", file=sys.stderr)
        return 2
    started_here = not superlink_running(env)
    cmd = ["flwr", "run", str(fab), "--stream", "--federation-config",
           f'num-supernodes={num_clients} backend="{args.backend}"']
    if flower_text:
        cmd += ["--run-config", flower_text]
    absolute = absolute_paths(cfg)
    if absolute:  # Flower's processes resolve relative paths against the SuperLink's directory, not this one
        try:  # each path one word for Flower's parser, also with a quote in it
            cmd += ["--run-config", " ".join(config_word(key, value) for key, value in absolute.items())]
        except ArgumentError as ex:
            print(f"{prog}: error: --run-config: {ex}", file=sys.stderr)
            return 2
    results = absolute.get("results-dir") or cfg["results-dir"]
    before = model_stamp(results)  # an earlier run's pca.npz is not this run's result
    status = "not started"
    run_ids: list[str] = []
    stopped = None
    try:
        for attempt in (1, 2):
            app_lines: list[str] = []
            run_id = stream_run(cmd, env, app_lines, run_ids)
            if run_id is not None:
                status = run_status(run_id, env)
            if status != "finished:failed" or app_lines or attempt == 2:
                break
            # Flower's simulation process sometimes stops before the ServerApp starts (seen under load: Ray's
            # start-up in Flower's engine thread ends after its GCS, with no raylet); nothing of the app has run
            # and nothing was written, so the run is started again, once, and the user is told.
            print(f"{prog}: run {run_id} failed before the ServerApp started (Flower's simulation process "
                  f"stopped; its SuperLink's log: {Path(env['FLWR_HOME']) / 'local-superlink' / 'superlink.log'}); "
                  "starting it again, once", file=sys.stderr)
    except KeyboardInterrupt as ex:  # Ctrl-C, SIGTERM, SIGHUP: the run is stopped, not left running
        stopped = interruption(ex)
        with signals.deferred():  # a second Ctrl-C does not interrupt the stop
            if started_here:  # its simulation process is found below this SuperLink: stopped directly
                stop_simulations(env)
            if run_ids and not (started_here and not args.keep_superlink):
                stop_flower_run(run_ids[-1], env)
            if started_here and not args.keep_superlink:
                stop_superlink(env)
    finally:
        if stopped is None and started_here and not args.keep_superlink:
            with signals.deferred():
                stop_superlink(env)
    if stopped is not None:
        print(f"{prog}: stopped by {stopped.name}: " + (f"run {run_ids[-1]}" if run_ids else "the run")
              + " and the processes it started were stopped" + (
                  f"; resume = true continues it from {Path(cfg['checkpoint-dir']) / 'checkpoint.npz'}"
                  if cfg["checkpoint-dir"] else ""), file=sys.stderr)
        return stopped.status
    print(f"flwr run status: {status}")
    missing = missing_model(cfg, results, before) if status == "finished:completed" else None
    if missing:  # Flower's status says the ServerApp returned; the result it should have left is not there
        print(f"{prog}: {missing}", file=sys.stderr)
    return 0 if status == "finished:completed" and not missing else 1


if __name__ == "__main__":
    sys.exit(main())
