"""The same app on real flower-superlink / flower-supernode processes (loopback), each node reading its own file."""

import re
import subprocess

import numpy as np
import pandas as pd
import pytest

from conftest import distances, run_aborted, run_app


@pytest.mark.deploy  # real processes, about 45 s
@pytest.mark.timeout(300)  # every process is stopped in finally blocks; a hang fails the test
def test_deployment_gives_the_same_numbers_as_the_in_process_engine(tmp_path):
    from simulations.engines.deploy import main

    over = "num-clients=3 num-samples=3000 dimension=20 num-server-rounds=3 clients-per-round=2 local-steps=2"
    assert main(["--run-config", over, "--out", str(tmp_path)]) == 0
    deployed = pd.read_csv(tmp_path / "rounds.csv")
    local = run_app(num_clients=3, num_samples=3000, dimension=20, num_server_rounds=3, clients_per_round=2,
                    local_steps=2)
    np.testing.assert_allclose(deployed["subspace_distance"].to_numpy(), distances(local), rtol=0, atol=1e-12)
    assert (deployed["participants"].iloc[1:] == 2).all()
    # every process the deployment started has stopped
    out = subprocess.run(["pgrep", "-f", str(tmp_path)], capture_output=True, text=True).stdout
    assert out.strip() == ""


@pytest.mark.deploy  # real processes, about 45 s
@pytest.mark.timeout(300)  # every process is stopped in finally blocks; a hang fails the test
def test_tls_and_supernode_authentication_refuse_an_unregistered_node(tmp_path):
    from fl_strategies.settings.config import validate_run_config
    from simulations.engines.credentials import write_node_keys
    from simulations.engines.deploy import LocalDeployment, write_node_files
    from simulations.engines import fused_run_config

    over = {"num-clients": 2, "num-samples": 2000, "dimension": 20, "num-server-rounds": 2}
    files = write_node_files(validate_run_config(fused_run_config(over)), tmp_path / "data")
    with LocalDeployment(files, tmp_path, secure=True) as deployment:
        intruder_key = write_node_keys(tmp_path / "intruder", 1)[0]
        intruder = deployment.start_node(0, private_key=intruder_key, name="intruder")
        status = deployment.run("num-clients=2 num-samples=2000 dimension=20 num-server-rounds=2", tmp_path)
        intruder.wait(timeout=60)
    assert status == "finished:completed"
    # the same command with a registered key connects (the two nodes above); the unregistered key is refused:
    # Flower's SUPERNODE_CONNECTION_ERROR (305) after FLEET_NODE_ACTIVATION_FAILED (2004); the
    # process's own exit status is 305 or 1 (its SuperExec child's), so the log is checked
    log = (tmp_path / "logs" / "intruder.log").read_text()
    assert intruder.returncode != 0, log[-3000:]
    assert "Exit Code: 305" in log and "Failed to activate SuperNode" in log
    assert len(pd.read_csv(tmp_path / "rounds.csv")) == 3


@pytest.mark.deploy  # real processes, about 90 s each
@pytest.mark.timeout(300)  # every process is stopped in finally blocks; a hang fails the test
@pytest.mark.parametrize("fault", ["killed", "silent"])
def test_a_supernode_killed_or_silent_mid_run_is_counted_and_the_run_goes_on(tmp_path, fault, capsys):
    """FedPower proceeds with the replies it has: the node's rounds time out, count as failures and name the node
    in the server log; the summary exchange, which needs every node, then fails the run (no model).

    ``killed``: SIGKILL to the node's process group; ``silent``: SIGSTOP (the node stays registered but never
    answers).
    """
    import os
    import signal
    import threading
    import time

    from fl_strategies.settings.config import validate_run_config
    from simulations.engines.deploy import LocalDeployment, write_node_files
    from simulations.engines import fused_run_config

    over = {"num-clients": 3, "num-samples": 3000, "dimension": 20, "num-server-rounds": 4}
    files = write_node_files(validate_run_config(fused_run_config(over)), tmp_path / "data")
    rounds = tmp_path / "rounds.csv"
    with LocalDeployment(files, tmp_path) as deployment:
        victim = deployment.processes[-1]  # the SuperNode of partition 2

        def kill_after_round_1():
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                if rounds.exists() and len(rounds.read_text().splitlines()) >= 3:  # header, round 0, round 1
                    os.killpg(victim.pid, signal.SIGKILL if fault == "killed" else signal.SIGSTOP)
                    return
                time.sleep(0.2)

        killer = threading.Thread(target=kill_after_round_1, daemon=True)
        killer.start()
        status = deployment.run("num-clients=3 num-samples=3000 dimension=20 num-server-rounds=4 round-timeout=15.0",
                                tmp_path)
        killer.join(timeout=1)
    assert status == "finished:failed" and not (tmp_path / "pca.npz").exists()  # the summary misses partition 2
    table = pd.read_csv(rounds)
    assert list(table["round"]) == [0, 1, 2, 3, 4]
    assert table.loc[1, "participants"] == 3
    assert (table.loc[3:, "participants"] == 2).all() and (table.loc[3:, "failures"] == 1).all()
    assert np.isfinite(table["subspace_distance"]).all()
    named = re.findall(r"round (\d): node \d+ (?:sent no reply within round-timeout = 15 s|replied with an error)",
                       capsys.readouterr().out)
    assert {"3", "4"} <= set(named)


def _idle(log: str) -> bool:
    """Whether a SuperNode's log shows no message in progress (its last one was answered or ignored)."""
    received = log.rfind("Receiving:")
    done = max(log.rfind("Sent successfully"), log.rfind("Ignoring reply"))
    return received == -1 or done > received


@pytest.mark.deploy  # real processes, about 2 min: one deployment, a killed run and its resumption
@pytest.mark.timeout(480)  # every process is stopped in finally blocks; a hang fails the test
def test_garbage_replies_and_a_killed_serverapp_resumed_from_its_checkpoint(tmp_path, monkeypatch):
    """SuperNodes 1 and 2 reply with NaN / wrong shapes (node-config ``fault``); the ServerApp is SIGKILLed
    after round 2 and a new run with ``resume=true`` runs the rest (and stops at the summary, which needs every
    client: no model from two garbage nodes). Every round rejects the two garbage replies, and the table equals
    an uninterrupted in-process run with the same faults."""
    import os
    import signal
    import time

    from fl_strategies.settings.config import validate_run_config
    from simulations.engines.deploy import LocalDeployment, write_node_files
    from simulations.engines import fused_run_config
    from simulations.engines.local import LocalGrid

    over = {"num-clients": 3, "num-samples": 3000, "dimension": 20, "num-server-rounds": 4, "local-steps": 2}
    text = " ".join(f"{k}={v}" for k, v in over.items()) + f' checkpoint-dir="{tmp_path}"'
    files = write_node_files(validate_run_config(fused_run_config(over)), tmp_path / "data")
    rounds = tmp_path / "rounds.csv"
    with LocalDeployment(files, tmp_path, port=0, node_config={1: 'fault="nan"', 2: 'fault="shape"'}) as dep:
        run_id = dep.start_run(text, tmp_path)
        deadline = time.monotonic() + 240
        while not (rounds.exists() and len(rounds.read_text().splitlines()) >= 4):  # header, rounds 0-2
            assert time.monotonic() < deadline, "round 2 was not written in time"
            time.sleep(0.2)
        # Flower 1.41's SuperNode can hang for good on the next run when the run it was computing a reply for is
        # stopped under it (seen once in five CI runs: its next ClientApp process never gets its message). The
        # fault under test is the ServerApp's death, so the nodes are frozen (SIGSTOP) at a moment when none is
        # inside a reply, the ServerApp is killed, and the nodes go on (SIGCONT) with the run stopped.
        nodes = [(p, tmp_path / "logs" / f"supernode_{i}.log") for i, p in enumerate(dep.processes[1:4])]
        for _ in range(100):
            for proc, _log in nodes:
                os.killpg(proc.pid, signal.SIGSTOP)
            time.sleep(0.3)
            if all(_idle(log.read_text()) for _, log in nodes):
                break
            for proc, _log in nodes:
                os.killpg(proc.pid, signal.SIGCONT)
            time.sleep(0.2 + 0.5 * np.random.default_rng().random())
        victims = dep.serverapp_pids()
        assert victims
        for pid in victims:
            os.kill(pid, signal.SIGKILL)
        killed = rounds.read_text().splitlines()
        first_status = dep.stop_run(run_id)
        for proc, _log in nodes:
            os.killpg(proc.pid, signal.SIGCONT)
        status = dep.run(text + " resume=true", tmp_path)
    assert dep.serverapp_pids() == []  # no ServerApp outlives the deployment
    assert first_status.startswith("finished") and first_status != "finished:completed"
    assert status == "finished:failed"  # every round ran; the model needs every client's summary (two are garbage)
    final = rounds.read_text().splitlines()
    assert final[:3] == killed[:3]  # header, rounds 0 and 1 (checkpointed before round 2 began): kept as written
    table = pd.read_csv(rounds)
    assert list(table["round"]) == [0, 1, 2, 3, 4]
    assert (table.loc[1:, "rejected"] == 2).all() and (table.loc[1:, "participants"] == 1).all()
    assert np.isfinite(table["subspace_distance"]).all()

    init = LocalGrid.__init__  # the same faults in-process, uninterrupted

    def init_with_faults(self, *args, **kwargs):
        init(self, *args, **kwargs)
        for nid, pid in self.partition_of.items():
            self.contexts[nid].node_config["fault"] = {1: "nan", 2: "shape"}.get(pid, "")

    monkeypatch.setattr(LocalGrid, "__init__", init_with_faults)
    local = run_aborted(r"^summary: partition\(s\) 1, 2 did not answer", expect_clean=False,  # faults by design
                        **{k.replace("-", "_"): v for k, v in over.items()})
    np.testing.assert_allclose(table["subspace_distance"].to_numpy(), distances(local), rtol=0, atol=1e-12)
    assert [r["rejected"] for r in local.records[1:]] == list(table.loc[1:, "rejected"])
    out = subprocess.run(["pgrep", "-f", str(tmp_path)], capture_output=True, text=True).stdout
    assert out.strip() == ""


def test_node_files_are_npy_or_csv_and_bad_arguments_are_one_line(tmp_path, capsys):
    """No process is started: ``--data-dir`` takes ``partition_<i>.npy`` or ``.csv`` (not both for one partition),
    ``dataset = "nodes"`` needs it, and ``--noise-secret-dir`` gives each node its own secret file."""
    from simulations.engines.deploy import find_node_files, main, secret_files

    np.save(tmp_path / "partition_0.npy", np.ones((3, 2)))
    (tmp_path / "partition_1.csv").write_text("1,2\n3,4\n")
    assert find_node_files(tmp_path, 2) == [tmp_path / "partition_0.npy", tmp_path / "partition_1.csv"]
    with pytest.raises(ValueError, match=r"num-clients = 3, but the folder holds 2 per-client file\(s\) "
                                         r"\(partition_0 .. partition_1\): set num-clients = 2"):
        find_node_files(tmp_path, 3)
    (tmp_path / "partition_0.csv").write_text("1,2\n")
    with pytest.raises(ValueError, match=r"holds two files for partition 0: 'partition_0\.npy' and "
                                         r"'partition_0\.csv'; keep one"):
        find_node_files(tmp_path, 2)
    assert main(["--run-config", 'dataset="nodes" num-clients=2', "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert 'dataset = "nodes" reads every node\'s own file: give the files with --data-dir' in err
    assert main(["--run-config", 'dataset="nodes" num-clients=2', "--data-dir", str(tmp_path)]) == 2
    assert "holds two files for partition 0" in capsys.readouterr().err
    secrets = secret_files(tmp_path / "secrets", 2)
    assert secrets == {i: f'noise-secret="{tmp_path.resolve() / "secrets" / f"partition_{i}.secret"}"'
                       for i in range(2)}
    assert (tmp_path / "secrets").stat().st_mode & 0o777 == 0o700


def test_node_files_of_another_width_than_the_named_data_set_are_refused_before_any_process(tmp_path, capsys,
                                                                                             monkeypatch):
    """``--data-dir`` with a ``dataset`` other than ``"nodes"``: the server takes ``d`` from that data set and
    would turn every node of another width away at discovery (46 s after the start): refused in one line, exit 2,
    before any process; files of its width (its own partitions) go on to the deployment."""
    import fedspectral.deploy as deploy
    from fedspectral.run_config import checked_run_config, parse_run_config

    started = []

    class Started(Exception):
        pass

    def no_processes(*args, **kwargs):
        started.append(args)
        raise Started

    monkeypatch.setattr(deploy, "LocalDeployment", no_processes)
    words = "dataset=\"fedpower-model1\" num-clients=2"
    own = deploy.write_node_files(checked_run_config(parse_run_config(words)), tmp_path / "own")
    d = np.load(own[0]).shape[1]
    (tmp_path / "wide").mkdir()
    for i in range(2):
        np.save(tmp_path / "wide" / f"partition_{i}.npy", np.ones((40, d + 3)))
    assert deploy.main(["--run-config", words, "--data-dir", str(tmp_path / "wide"), "--out",
                        str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"python -m simulations.engines.deploy: error: --data-dir {tmp_path / 'wide'}: the node files have "
                   f"d = {d + 3} columns, but the run config's dataset = 'fedpower-model1' has d = {d} (the server "
                   "measures the run against it and would turn every node away); for the nodes' own data give "
                   'dataset = "nodes"']
    assert not started and not (tmp_path / "out").exists()
    with pytest.raises(Started):
        deploy.main(["--run-config", words, "--data-dir", str(tmp_path / "own"), "--out", str(tmp_path / "out")])
    assert len(started) == 1

