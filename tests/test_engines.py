"""The in-process engine and Flower's Ray simulation engine give the same numbers for the same seed."""

import os

import numpy as np
import pandas as pd
import pytest

from conftest import run_app

os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
os.environ.setdefault("FLWR_DISABLE_UPDATE_CHECK", "1")


@pytest.mark.ray
@pytest.mark.timeout(300)
def test_ray_engine_equals_local_engine(tmp_path):
    from simulations.engines.ray import run_ray

    overrides = {"num-clients": 6, "clients-per-round": 4, "local-steps": 3, "num-server-rounds": 4,
                 "noise-std": 1e-3, "seed": 11, "num-samples": 3000, "dimension": 30, "row-normalize": True}
    local = run_app(**overrides)
    run_ray({**overrides, "results-dir": str(tmp_path)})
    ray_rows = pd.read_csv(tmp_path / "rounds.csv")
    local_rows = pd.DataFrame(local.records)
    assert len(ray_rows) == len(local_rows) == 5
    for col in ("subspace_distance", "participants", "distinct_participants", "bytes_up", "bytes_down"):
        np.testing.assert_allclose(ray_rows[col].to_numpy(float), local_rows[col].to_numpy(float),
                                   rtol=0, atol=1e-12, err_msg=col)
    np.testing.assert_allclose(np.load(tmp_path / "estimate.npy"), local.iterates[-1], atol=1e-12)


@pytest.mark.ray
@pytest.mark.timeout(300)
def test_ray_engine_runs_secagg_rounds_like_the_local_engine(tmp_path):
    """dp-power through SecAgg+ on Flower's Ray engine: the same X_0 and seeded noise as in-process, equal up to
    SecAgg+'s stochastic quantisation (the Ray engine runs the app's own ServerApp, SecAgg+ rounds included)."""
    from simulations.engines.ray import run_ray

    overrides = {"strategy": "dp-power", "dataset": "dp-haar", "dimension": 60, "rank": 3, "iteration-rank": 6,
                 "num-clients": 3, "num-server-rounds": 2, "row-normalize": False, "secagg-clip": 1500.0,
                 "epsilon": 4.0, "delta": 1e-6, "noise-source": "seeded"}
    local = run_app(**overrides)
    run_ray({**overrides, "results-dir": str(tmp_path)})
    ray_rows = pd.read_csv(tmp_path / "rounds.csv")
    np.testing.assert_allclose(ray_rows["subspace_distance"].to_numpy(float),
                               [r["subspace_distance"] for r in local.records], rtol=0, atol=1e-4)
    assert ray_rows["epsilon_spent"].iloc[-1] == pytest.approx(local.records[-1]["epsilon_spent"])


@pytest.mark.ray
@pytest.mark.timeout(300)
def test_flwr_run_wrapper_runs_the_app_and_reports_failure(flower_processes):
    """The README's main command (`fedspectral run`): `flwr run .` offline, with the run's status as the exit code.

    Flower's local SuperLink listens on the free port that the ``flower_processes`` fixture (conftest) put in
    ``FLWR_LOCAL_SUPERLINK_HTTP_API_PORT``, not on 39091, so a concurrent test run elsewhere does not meet it."""
    from simulations.engines.flwr_run import local_superlink_port, main, superlink_running

    assert local_superlink_port() != 39091  # the fixture's port
    if superlink_running():
        pytest.skip("a local SuperLink is already running; this test starts and stops its own")
    assert main(["--run-config", "num-server-rounds=2 num-clients=4"]) == 0
    assert main(["--run-config", "rank=40 iteration-rank=3"]) == 2  # invalid: refused before Flower starts
    # a results-dir that cannot be written is refused before Flower starts (one line, exit 2)
    assert main(["--run-config", 'num-server-rounds=1 num-clients=2 results-dir="/proc/fedspectral"']) == 2
    # a run its strategy aborts (dp-power: a product outside secagg-clip halts SecAgg+ in round 1) ends failed
    assert main(["--run-config", 'strategy="dp-power" dataset="dp-haar" dimension=120 rank=4 iteration-rank=8 '
                 'num-server-rounds=2 num-clients=4 delta=1e-6 row-normalize=false secagg-clip=1.0']) == 1
    assert not superlink_running()
    # the wrapper returns once the SuperLink it started and its SuperExec have exited, not just stopped answering
    from conftest import tagged_flower_processes

    assert tagged_flower_processes(flower_processes) == []


def _stop_local_superlink(flwr_home) -> None:
    """Stop the local SuperLink whose state lives in ``flwr_home`` (and the processes it started)."""
    import os
    import signal
    import subprocess
    import time

    ps = subprocess.run(["ps", "-ww", "-eo", "pid=,args="], capture_output=True, text=True).stdout
    links = [int(line.split()[0]) for line in ps.splitlines() if f"{flwr_home}/local-superlink" in line]
    children = [int(line.split()[0]) for line in ps.splitlines()
                if any(f"--parent-pid {pid}" in line for pid in links)]
    for pid in children + links:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    time.sleep(3)
    for pid in children + links:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@pytest.mark.ray
@pytest.mark.timeout(400)
def test_plain_flwr_run_in_a_fresh_copy_finishes_and_says_so(tmp_path):
    """The simulation guide's plain `flwr run .` (docs/simulation.md; no wrapper, only the offline environment
    variables) in a fresh copy of the repository: the run finishes, its log ends with the run's status, and the server named its results path.

    Ports: the local SuperLink that ``flwr run`` starts takes its port from Flower's own variables
    ``FLWR_LOCAL_SUPERLINK_HTTP_API_PORT`` (default 39091) and ``FLWR_LOCAL_CONTROL_API_PORT`` (39093; only
    bound with ``FLWR_INTERNAL_GRPC_CONTROL_API=1`` in flwr 1.41), read from the environment by every ``flwr``
    command (``flwr/cli/constant.py``). The ``flower_processes`` fixture sets both to free ports, and the
    environment below inherits them: a user's plain command is the same, with or without them."""
    import os
    import shutil
    import subprocess
    import sys

    from simulations.engines import APP_DIR
    import re

    from simulations.engines.flwr_run import run_status, superlink_running

    if superlink_running():
        pytest.skip("a local SuperLink is already running; this test starts and stops its own")
    clone = tmp_path / "fedspectral"
    files = subprocess.run(["git", "ls-files"], cwd=APP_DIR, capture_output=True, text=True, check=True).stdout
    for name in files.split("\n"):
        if name and (APP_DIR / name).is_file() and "/results/" not in name:
            (clone / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(APP_DIR / name, clone / name)
    home = tmp_path / "flwr-home"
    env = {**os.environ, "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1", "FLWR_TELEMETRY_ENABLED": "0",
           "FLWR_DISABLE_UPDATE_CHECK": "1", "FLWR_HOME": str(home),
           "PATH": f"{os.path.dirname(sys.executable)}{os.pathsep}{os.environ.get('PATH', '')}"}
    status = None
    try:
        done = subprocess.run(["flwr", "run", ".", "--stream", "--federation-config", "num-supernodes=10",
                               "--run-config", 'num-server-rounds=3 results-dir="out"'], cwd=clone, env=env,
                              capture_output=True, text=True, timeout=300)
        log = done.stdout + done.stderr
        started = re.search(r"Successfully started run (\d+)", log)
        if started and "fedspectral: run completed" not in log:  # the log stream can end early on a loaded machine
            status = run_status(started.group(1), env, wait=180)
    finally:
        _stop_local_superlink(home)
    assert done.returncode == 0, log
    if status is not None:  # the stream was cut: the run's status from the SuperLink instead
        assert status == "finished:completed", log
        return
    assert re.search(r"round 3 of 3: .*; subspace distance", log) and "fedspectral: run completed" in log, log
    assert "fedspectral: results in /" in log  # the absolute path, wherever the SuperLink runs
