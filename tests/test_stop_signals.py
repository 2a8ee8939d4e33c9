"""Stopped means stopped: Ctrl-C or SIGTERM of `fedspectral run` / `deploy` stops every process the
command started, says so in one line, and leaves a checkpoint that `resume = true` continues exactly."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pandas as pd
import pytest

import conftest
from conftest import run_app

ROUNDS = 400
"""Long enough that the run is still going when it is stopped: a round takes about 0.01 s on the thread backend
(0.15 s on Ray), ``flwr run --stream`` hands on the run's lines every 0.5 s, and the ServerApp stops within a round
or two of the signal; the resumed rest runs on the thread backend (a checkpoint of a Ray run continued there)."""


def tagged_processes(tag: str) -> list[str]:
    """The command lines of every process (Flower's, Ray's, any) whose environment carries this test's tag."""
    return [args[:160] for _, args in conftest.tagged_processes(tag)]


def _interruptible() -> None:
    """In the child before it runs the command: Ctrl-C's default action, as a terminal's foreground command has it.
    A command started in the background of a shell without job control (``cmd &`` in a script, as a CI runner may
    start the tests) inherits SIGINT ignored, and Python then never raises KeyboardInterrupt: the test would see a
    run that Ctrl-C cannot stop, which is the shell's doing, not the command's."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _wait_for(path, text: str, proc: subprocess.Popen, timeout: float = 240.0) -> None:
    deadline = time.monotonic() + timeout
    while text not in path.read_text(errors="replace"):
        assert proc.poll() is None, f"the command ended before {text!r}: {path.read_text()[-2000:]}"
        assert time.monotonic() < deadline, f"no {text!r} in {timeout} s"
        time.sleep(0.5)


@pytest.mark.ray
@pytest.mark.timeout(600)
@pytest.mark.parametrize("sig, backend", [(signal.SIGINT, "threads"), (signal.SIGTERM, "ray")],
                         ids=["ctrl-c", "sigterm-ray"])
def test_a_stopped_run_leaves_no_process_and_resume_continues_it_exactly(sig, backend, tmp_path, monkeypatch,
                                                                         flower_processes):
    """Both backends: the ClientApps in the simulation process's thread (the default), and in Ray's actors."""
    monkeypatch.setenv("FLWR_HOME", str(tmp_path / "flwr-home"))
    out = tmp_path / "out"
    config = (f"num-clients=2 num-server-rounds={ROUNDS} seed=3 results-dir=\"{out}\" checkpoint-dir=\"{out}\"")
    log = tmp_path / "log"
    with open(log, "w") as sink:  # a terminal's Ctrl-C reaches the whole foreground group: here the new session
        proc = subprocess.Popen([sys.executable, "-m", "fedspectral", "run", "--run-config", config, "--backend",
                                 backend],
                                stdout=sink, stderr=subprocess.PIPE, text=True, start_new_session=True,
                                preexec_fn=_interruptible)
    try:
        _wait_for(log, "round 1 of ", proc)
        if sig == signal.SIGINT:
            os.killpg(proc.pid, sig)
        else:
            proc.send_signal(sig)
        _, err = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + sig
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert f"stopped by {signal.Signals(sig).name}: run " in err and "resume = true continues it from" in err
    assert tagged_processes(flower_processes) == []  # SuperLink, SuperExec, flwr-simulation, Ray: all gone
    written = pd.read_csv(out / "rounds.csv")
    assert 1 <= written["round"].max() < ROUNDS  # it was stopped, not run to its end
    assert not (out / "pca.npz").exists()

    from fedspectral.run import main

    assert main(["--run-config", config + " resume=true"]) == 0
    assert tagged_processes(flower_processes) == []
    resumed = pd.read_csv(out / "rounds.csv")
    assert resumed["round"].tolist() == list(range(ROUNDS + 1))  # every round once
    whole = run_app(num_clients=2, num_server_rounds=ROUNDS, seed=3)
    np.testing.assert_allclose(resumed["subspace_distance"], [r["subspace_distance"] for r in whole.records],
                               rtol=0, atol=1e-12)
    np.testing.assert_allclose(np.load(out / "estimate.npy"), whole.iterates[-1], atol=1e-12)


@pytest.mark.deploy
@pytest.mark.timeout(600)
def test_ctrl_c_of_deploy_stops_every_process_in_one_line(tmp_path, flower_processes):
    out = tmp_path / "dep"
    log = tmp_path / "log"
    with open(log, "w") as sink:
        proc = subprocess.Popen([sys.executable, "-m", "fedspectral", "deploy", "--out", str(out), "--run-config",
                                 f"num-clients=2 num-server-rounds={ROUNDS}"],
                                stdout=sink, stderr=subprocess.PIPE, text=True, start_new_session=True,
                                preexec_fn=_interruptible)
    try:
        _wait_for(log, "round 1 of ", proc, timeout=400)
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith("fedspectral deploy: stopped by SIGINT: the deployment's SuperLink, SuperNodes and "
                          "ServerApp were stopped")
    assert tagged_processes(flower_processes) == []
    assert not (out / ".fedspectral.lock").exists()  # released


def test_a_stop_of_the_serverapps_process_ends_the_run_between_rounds_and_resume_continues_it(tmp_path):
    """What Flower's exit handler asks (stop_request.install): no round after the stop, no model, the folders
    released, and the checkpoint continues the run exactly (in-process, no Ray)."""
    from fl_strategies.files.folder_lock import holder
    from fl_strategies.protocol import stop_request

    out = tmp_path / "out"
    over = dict(num_clients=3, num_server_rounds=8, seed=4, results_dir=str(out), checkpoint_dir=str(out))

    def stop_in_round_3(server_round, pid, Z, arrays):
        if server_round == 3:
            stop_request.request()

    try:
        with pytest.raises(stop_request.RunStopped, match="stopped before round 4"):
            run_app(observer=stop_in_round_3, **over)
    finally:
        stop_request.reset()
    assert pd.read_csv(out / "rounds.csv")["round"].tolist() == [0, 1, 2, 3]  # round 3 finished, none after
    assert not (out / "pca.npz").exists() and holder(out, writer=True) is None
    resumed = run_app(resume=True, **over)
    whole = run_app(**{**over, "results_dir": str(tmp_path / "whole"), "checkpoint_dir": ""})
    np.testing.assert_array_equal(resumed.iterates[-1], whole.iterates[-1])
    table = [pd.read_csv(d / "rounds.csv").drop(columns="wall_time") for d in (out, tmp_path / "whole")]
    pd.testing.assert_frame_equal(*table)
