"""A local deployment: one SuperLink and N SuperNodes on loopback, each node reading its own data file.

This runs the app exactly as on real devices: separate ``flower-superlink``
and ``flower-supernode`` processes talking over HTTP, every SuperNode reading
its rows from the file named by ``data-path`` in its ``--node-config`` (the
file never leaves the node). It writes the node files (the partitions of the
configured data set) unless ``--data-dir`` names existing ones, runs the
strategy of the run config with ``flwr run``, streams the log, collects the
results table in ``OUT/rounds.csv`` (and the estimate in ``OUT/estimate.npy``),
and stops every process it started, also on failure or Ctrl-C.

Usage::

    python -m simulations.deploy [--run-config 'key=value ...'] [--out OUT] [--data-dir DIR]

The server regenerates the configured data set only to *measure* the estimate
against the exact reference, as the simulation harness does.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np

from fl_strategies.config import validate_run_config

from .engines import APP_DIR, fused_run_config
from .federated_data import federated_dataset
from .flwr_run import flower_env, run_status, stream_run

__all__ = ["LocalDeployment", "write_node_files", "main"]

CONNECTION = "fedspectral-deployment"


def write_node_files(cfg: dict, directory: Path) -> list[Path]:
    """Save partition ``i`` of the configured data set as ``directory/partition_<i>.npy``.

    Returns
    -------
    list of Path
        One file per client, in partition order.
    """
    directory.mkdir(parents=True, exist_ok=True)
    data, parts = federated_dataset(cfg)
    paths = []
    for pid, rows in enumerate(parts):
        path = directory / f"partition_{pid}.npy"
        np.save(path, data.X[rows])
        paths.append(path)
    return paths


def _group_alive(pgid: int) -> bool:
    """Whether any process of the process group ``pgid`` is still running (zombies aside)."""
    try:
        out = subprocess.run(["ps", "-o", "stat=", "-g", str(pgid)], capture_output=True, text=True).stdout
    except OSError:
        return False
    return any(not state.startswith("Z") for state in out.split())


def _healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1):
            return True
    except OSError:
        return False


class LocalDeployment:
    """Start a SuperLink and one SuperNode per data file; stop them all on exit.

    Parameters
    ----------
    files : list of Path
        ``files[i]`` is the data file of the node with ``partition-id = i``.
    workdir : Path
        Logs go to ``workdir/logs``; ``workdir/flwr-home`` is ``FLWR_HOME``.
    port : int
        The SuperLink's HTTP port (Fleet, Control and Runtime APIs); the
        SuperNodes use ``port + 10 + i`` for their own runtime API.
    """

    def __init__(self, files: list[Path], workdir: Path, port: int = 19091) -> None:
        self.files, self.workdir, self.port = files, workdir, port
        self.processes: list[subprocess.Popen] = []
        self.env = flower_env()
        self.env["FLWR_HOME"] = str(workdir / "flwr-home")

    def _start(self, name: str, cmd: list[str]) -> subprocess.Popen:
        log = open(self.workdir / "logs" / f"{name}.log", "w")  # noqa: SIM115 (closed with the process)
        proc = subprocess.Popen(cmd, env=self.env, stdout=log, stderr=subprocess.STDOUT, cwd=self.workdir,
                                start_new_session=True)
        self.processes.append(proc)
        return proc

    def __enter__(self) -> "LocalDeployment":
        (self.workdir / "logs").mkdir(parents=True, exist_ok=True)
        home = Path(self.env["FLWR_HOME"])
        home.mkdir(parents=True, exist_ok=True)
        (home / "config.toml").write_text(
            f'[superlink.{CONNECTION}]\naddress = "127.0.0.1:{self.port}"\ninsecure = true\n')
        if _healthy(self.port):
            raise RuntimeError(f"something already answers on 127.0.0.1:{self.port}; choose another --port")
        try:
            self._start("superlink", ["flower-superlink", "--insecure", "--host", "127.0.0.1", "--port",
                                      str(self.port), "--disable-runtime-dependency-installation"])
            deadline = time.monotonic() + 60
            while not _healthy(self.port):
                if time.monotonic() > deadline or self.processes[0].poll() is not None:
                    raise RuntimeError(f"the SuperLink did not start; see {self.workdir / 'logs' / 'superlink.log'}")
                time.sleep(0.5)
            n = len(self.files)
            for pid, path in enumerate(self.files):
                node_config = f'partition-id={pid} num-partitions={n} data-path="{path.resolve()}"'
                self._start(f"supernode_{pid}", ["flower-supernode", "--insecure", "--superlink",
                                                 f"127.0.0.1:{self.port}", "--port", str(self.port + 10 + pid),
                                                 "--node-config", node_config])
        except BaseException:
            self.stop()
            raise
        return self

    def run(self, run_config: str, results_dir: Path) -> str:
        """``flwr run`` the app on this deployment; returns the run's final status."""
        cmd = ["flwr", "run", str(APP_DIR), CONNECTION, "--stream", "--run-config", f'results-dir="{results_dir}"']
        if run_config:
            cmd += ["--run-config", run_config]
        run_id = stream_run(cmd, self.env)
        return "not started" if run_id is None else run_status(run_id, self.env, wait=60, connection=CONNECTION)

    def stop(self) -> None:
        """Terminate every process started here (their whole process groups), then kill what remains."""
        for proc in self.processes:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        for proc in self.processes:
            while _group_alive(proc.pid) and time.monotonic() < deadline:
                proc.poll()  # reap the leader once it exits
                time.sleep(0.1)
            if _group_alive(proc.pid):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        self.processes = []

    def __exit__(self, *exc) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns 0 only if the run finished successfully."""
    parser = argparse.ArgumentParser(prog="python -m simulations.deploy", description=__doc__.split("\n\n")[0])
    parser.add_argument("--run-config", default="", help="overrides, as for `flwr run --run-config`")
    parser.add_argument("--out", default="results/deployment", help="results, logs and node files")
    parser.add_argument("--data-dir", default="", help="existing node files partition_<i>.npy (default: "
                        "write the partitions of the configured data set to OUT/node-data)")
    parser.add_argument("--port", type=int, default=19091, help="the SuperLink's port (default 19091)")
    args = parser.parse_args(argv)

    from flwr.common.config import parse_config_args

    overrides = parse_config_args([args.run_config]) if args.run_config else {}
    cfg = validate_run_config(fused_run_config(overrides))
    out = Path(args.out).resolve()
    if args.data_dir:
        files = [Path(args.data_dir) / f"partition_{i}.npy" for i in range(cfg["num-clients"])]
        missing = [str(f) for f in files if not f.is_file()]
        if missing:
            print(f"error: missing node files: {', '.join(missing)}", file=sys.stderr)
            return 2
    else:
        files = write_node_files(cfg, out / "node-data")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a kill of this script still stops its processes
    with LocalDeployment(files, out, port=args.port) as deployment:
        status = deployment.run(args.run_config, out)
    print(f"deployment run status: {status}; results in {out / 'rounds.csv'}")
    return 0 if status == "finished:completed" else 1


if __name__ == "__main__":
    sys.exit(main())
