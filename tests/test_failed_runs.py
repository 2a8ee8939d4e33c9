"""A failed run says so: a summary exchange that misses a partition fails the run naming it (no model, never
``finished:completed`` with no ``pca.npz``); ``fedspectral run`` and ``deploy`` exit 1 when the model their strategy
writes is not there, ``deploy`` naming a SuperNode that stopped; a ``rank`` above the rank of the data and an
``epsilon`` whose noise has no finite variance are refused before round 1, naming the key."""

from __future__ import annotations

import math
import os
import signal
import threading
import time

import numpy as np
import pandas as pd
import pytest

from conftest import run_aborted, run_app, tagged_flower_processes, tagged_processes
from fedspectral.run_config import ArgumentError, checked_run_config, fused_run_config
from fl_strategies.settings.config import ConfigError, validate_run_config


# -- a partition missing from the summary: the run fails, naming it -------------------------------------------------

def test_a_summary_without_a_partitions_reply_fails_the_run_naming_it(tmp_path):
    """Partition 1 answers every round but not the summary (round 4 of 3 + 1): before, the run completed with a
    WARNING and no pca.npz; now it fails naming the partition, and every round's row is still written."""
    def fault(message, pid):
        return "error" if pid == 1 and message.metadata.group_id == "4" else "ok"

    strategy = run_aborted(r"^summary: partition\(s\) 1 did not answer \(2 of 3 answered, 0 rejected, 1 failed\); "
                           r"no PCA model was written$", strategy="power", num_clients=3, num_server_rounds=3,
                           results_dir=str(tmp_path / "out"), fault_fn=fault)
    assert len(strategy.records) == 4
    assert list(pd.read_csv(tmp_path / "out" / "rounds.csv")["round"]) == [0, 1, 2, 3]
    assert not (tmp_path / "out" / "pca.npz").exists()


def test_run_exits_1_when_a_completed_run_left_no_model(tmp_path, monkeypatch, capsys):
    """``fedspectral run``: Flower's ``finished:completed`` with no new pca.npz in results-dir is a failure."""
    from fedspectral import run

    earlier = tmp_path / "out" / "pca.npz"
    monkeypatch.setattr(run, "claim_superlink_port", lambda env: None)
    monkeypatch.setattr(run, "superlink_running", lambda env: True)  # nothing to start or stop
    monkeypatch.setattr(run, "run_status", lambda run_id, env: "finished:completed")

    def flower_run(cmd, env, app_lines=None, run_ids=None):
        app_lines.append("fedspectral: a ServerApp line")
        return "7"

    monkeypatch.setattr(run, "stream_run", flower_run)
    argv = ["--run-config", f'results-dir="{tmp_path / "out"}" overwrite=true']
    assert run.main(argv, prog="fedspectral run") == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"fedspectral run: no PCA model was written: strategy 'fedpower' writes {earlier} at the end of a "
                   "successful run, and none is there"]

    def writes_a_model(cmd, env, app_lines=None, run_ids=None):
        earlier.write_bytes(b"a new model")
        return flower_run(cmd, env, app_lines)

    monkeypatch.setattr(run, "stream_run", writes_a_model)
    assert run.main(argv, prog="fedspectral run") == 0
    monkeypatch.setattr(run, "stream_run", flower_run)  # the file left there is the earlier run's now
    assert run.main(argv, prog="fedspectral run") == 1
    assert "the one there is an earlier run's" in capsys.readouterr().err
    assert run.main(["--run-config", "strategy=\"fedmf\""], prog="fedspectral run") == 0  # writes no model


# -- degenerate requests --------------------------------------------------------------------------------------------

def _six_rows(tmp_path):
    """Two node files of 3 rows each, 20 columns: the rows have rank at most 6 (5 centred)."""
    folder = tmp_path / "nodes"
    folder.mkdir()
    rng = np.random.default_rng(0)
    for i in range(2):
        np.save(folder / f"partition_{i}.npy", rng.standard_normal((3, 20)))
    return str(folder)


@pytest.mark.parametrize("center, most", [(False, 6), (True, 5)])
def test_a_rank_above_the_rank_of_the_data_is_refused_before_and_at_the_server(tmp_path, center, most):
    """rank 10 on 6 rows returned arbitrary components; now refused by run/deploy before Flower starts and by the
    server (which alone knows the row total of nodes' own files) before round 1."""
    over = {"dataset": _six_rows(tmp_path), "num-clients": 2, "rank": 10, "iteration-rank": 10, "center": center}
    message = (f"rank = 10 is above the rank of the data: 6 rows {'centred ' if center else ''}have at most {most} "
               f"independent direction\\(s\\), so components beyond them would be arbitrary; set rank <= {most}")
    with pytest.raises(ArgumentError, match="^--run-config: " + message):
        checked_run_config(over)
    with pytest.raises(ConfigError, match="^" + message):
        run_app(**{key.replace("-", "_"): value for key, value in over.items()})
    run_app(**{key.replace("-", "_"): value for key, value in {**over, "rank": most, "iteration-rank": most}.items()})


@pytest.mark.parametrize("strategy", ["fedpower", "dp-power", "covariance"])
def test_an_epsilon_whose_noise_has_no_finite_variance_is_refused_naming_it_and_the_scale(strategy):
    """epsilon = 1e-300 wrote variances near 1e298; now refused naming epsilon and the noise's scale. An epsilon
    whose noise variance is finite (1e-100: a std near 1e101) is still a run config."""
    raw = fused_run_config({"strategy": strategy, "epsilon": 1e-300, "row-normalize": True})
    with pytest.raises(ConfigError, match=r"^epsilon = 1e-300 \(with delta = .*\) is too small: .* is "
                                          r"[0-9.]+e\+30[0-2], whose variance is not a finite number") as info:
        validate_run_config(raw)
    assert "\n" not in str(info.value) and f"{math.sqrt(1.7976931348623157e308):.3g}" in str(info.value)
    validate_run_config({**raw, "epsilon": 1e-100})


# -- a deployment that lost a SuperNode -----------------------------------------------------------------------------

@pytest.mark.deploy  # real processes, about 110 s (the lost node's rounds wait for round-timeout)
@pytest.mark.timeout(300)
def test_a_deployment_that_lost_a_supernode_exits_1_naming_its_partition(tmp_path, capsys, flower_processes):
    """The SuperNode of partition 1 is killed after round 1: before, ``finished:completed``, exit 0 and no
    pca.npz; now exit 1, its partition named, and the missing model said. No process is left."""
    from fedspectral.deploy import main

    out = tmp_path / "deployment"
    rounds = out / "rounds.csv"
    killed = []

    def kill_partition_1_after_round_1():
        deadline = time.monotonic() + 200
        while time.monotonic() < deadline and not killed:
            if rounds.exists() and len(rounds.read_text().splitlines()) >= 3:  # header, round 0, round 1
                for pid, args in tagged_processes(flower_processes):  # Flower's SuperNode or deploy's launcher
                    if ("flower-supernode" in args or "supernode.py" in args) and "partition-id=1 " in args:
                        os.killpg(pid, signal.SIGKILL)  # its own session: the node and its ClientApps
                        killed.append(pid)
                return
            time.sleep(0.2)

    killer = threading.Thread(target=kill_partition_1_after_round_1, daemon=True)
    killer.start()
    status = main(["--out", str(out), "--run-config", "num-clients=3 num-samples=600 dimension=10 "
                   "num-server-rounds=4 round-timeout=10.0"], prog="fedspectral deploy")
    killer.join(timeout=5)
    captured = capsys.readouterr()
    assert killed and status == 1
    assert "deployment run status: finished:failed" in captured.out
    assert "summary: partition(s) 1 did not answer" in captured.out
    err = captured.err.strip().splitlines()
    assert err[0] == (f"fedspectral deploy: the SuperNode of partition 1 stopped during the run (exit status -9; "
                      f"its log: {out / 'logs' / 'supernode_1.log'})")
    assert err[1].startswith(f"fedspectral deploy: no PCA model was written: strategy 'fedpower' writes "
                             f"{out / 'pca.npz'}")
    assert not (out / "pca.npz").exists()
    assert list(pd.read_csv(rounds)["round"]) == [0, 1, 2, 3, 4]
    assert tagged_flower_processes(flower_processes) == []


def test_rows_of_a_lower_numerical_rank_than_rank_are_reported_in_the_log(tmp_path, caplog):
    """Rows in a plane of 10 columns (12 rows, rank 2): rank = 4 passes the row count, but components 3 and 4 are
    arbitrary directions of no variance; the log says the numerical rank."""
    folder = tmp_path / "plane"
    folder.mkdir()
    rng = np.random.default_rng(3)
    basis = np.linalg.qr(rng.standard_normal((10, 2)))[0]
    for i in range(2):
        np.save(folder / f"partition_{i}.npy", rng.standard_normal((6, 2)) * [3.0, 1.0] @ basis.T)
    with caplog.at_level("WARNING", logger="flwr"):
        run_app(strategy="power", dataset=str(folder), num_clients=2, rank=4,
                iteration_rank=4, num_server_rounds=3, results_dir=str(tmp_path / "out"))
    assert ("PCA model: the data's numerical rank is 2 (explained variance above 1e-12 of the first), below the 4 "
            "component(s) kept: components 3..4 explain no variance") in caplog.text
