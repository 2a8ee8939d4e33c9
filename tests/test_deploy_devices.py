"""The device guide (docs/deployment.md, "On real devices, step by step"), run as typed on loopback.

Every fenced ``bash`` block of that section is run in order, by ``bash``, with only these substitutions: the
SuperLink's address ``superlink.example.org:9091`` and ``--port 9091`` become a free loopback port, ``--host
0.0.0.0`` becomes ``127.0.0.1``, each SuperNode's ``--port 9094`` a free port of its own, ``<i>`` the device's
number and ``<run-id>`` the id of the killed run. The first block (the environment) is run before every other
one, as each shell of the guide has it; ``HOME`` is a directory of the test for the server and one for each of
the three devices, and the environment's ``bin`` directory is first on ``PATH``. The devices hold a third of
scikit-learn's wine rows each (13 columns); the guide's run is killed with its whole server after round 2
(SuperLink, SuperExec and ServerApp, as a reboot would), the SuperLink restarted with the guide's command, and the
guide's resume finishes with the model of an uninterrupted run, scikit-learn's PCA of the pooled rows. Then the
guide's private run (``epsilon``) runs on the same nodes. Last, a run that fails (without ``dataset='nodes'``)
ends its log with its status line.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from sklearn.datasets import load_wine
from sklearn.decomposition import PCA

from conftest import run_app
from fl_strategies.files.pca import load_model
from fl_strategies.kernels.linalg import subspace_distance
from simulations.engines import APP_DIR

GUIDE = APP_DIR / "docs" / "deployment.md"
SECTION = "## On real devices, step by step"
NODES = 3
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def guide_blocks(text: str | None = None) -> list[str]:
    """The fenced ``bash`` blocks of the device guide, in order, without their indentation."""
    text = GUIDE.read_text() if text is None else text
    start = text.index(SECTION)
    end = text.find("\n## ", start + len(SECTION))
    end = len(text) if end < 0 else end
    blocks = []
    for match in re.finditer(r"^( *)```bash\n(.*?)^\1```", text[start:end], flags=re.M | re.S):
        indent = len(match.group(1))
        blocks.append("\n".join(line[indent:] for line in match.group(2).splitlines()) + "\n")
    return blocks


def _port_block(size: int) -> int:
    from simulations.engines.deploy import free_port_block

    return free_port_block(size)


class Guide:
    """Runs the guide's blocks for the server and the devices, each with its own ``HOME``."""

    def __init__(self, root: Path, blocks: list[str]):
        self.root, self.blocks = root, blocks
        base = _port_block(8)
        self.port, self.node_ports = base, [base + 4 + i for i in range(NODES)]
        self.server_home = root / "server"
        self.device_homes = [root / f"device_{i}" for i in range(NODES)]
        for home in [self.server_home, *self.device_homes]:
            home.mkdir()
        self.logs = root / "logs"
        self.logs.mkdir()
        self.processes: dict[str, subprocess.Popen] = {}

    def env(self, home: Path) -> dict[str, str]:
        env = dict(os.environ, HOME=str(home))
        from doc_commands import command_path  # the environment's bin (and `fedspectral`); imported here: it lists this guide

        env["PATH"] = command_path(self.root) + os.pathsep + env.get("PATH", "")
        return env

    def text(self, block: str, device: int | None = None, run_id: str = "") -> str:
        """The block with the loopback ports (and the device's number, the run id) in place of the guide's."""
        text = (block.replace("superlink.example.org:9091", f"127.0.0.1:{self.port}")
                .replace("--port 9091", f"--port {self.port}").replace("--host 0.0.0.0", "--host 127.0.0.1"))
        if device is not None:
            text = text.replace("--port 9094", f"--port {self.node_ports[device]}").replace("<i>", str(device))
        return text.replace("<run-id>", run_id)

    def script(self, block: str, device: int | None = None, run_id: str = "") -> list[str]:
        return ["bash", "-euc", self.blocks[0] + self.text(block, device, run_id)]

    def home(self, device: int | None) -> Path:
        return self.server_home if device is None else self.device_homes[device]

    def run(self, block: str, device: int | None = None, run_id: str = "", timeout: float = 120,
            check: bool = True) -> subprocess.CompletedProcess:
        """Run a block to its end, from this repository (the server) or the device's home."""
        cwd = APP_DIR if device is None else self.home(device)
        done = subprocess.run(self.script(block, device, run_id), env=self.env(self.home(device)), cwd=cwd,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout)
        with (self.logs / "commands.log").open("a") as log:
            log.write(f"$ {self.text(block, device, run_id)}{done.stdout}\n")
        if check:
            assert done.returncode == 0, f"{self.text(block, device, run_id)}\n{done.stdout}"[-4000:]
        return done

    def start(self, name: str, block: str, device: int | None = None) -> subprocess.Popen:
        """Start a block that runs until stopped (the SuperLink, a SuperNode, a streamed run) in its own session."""
        cwd = APP_DIR if device is None else self.home(device)
        log = (self.logs / f"{name}.log").open("a")
        proc = subprocess.Popen(self.script(block, device), env=self.env(self.home(device)), cwd=cwd, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        self.processes[name] = proc
        return proc

    def log(self, name: str) -> str:
        return (self.logs / f"{name}.log").read_text()

    def start_superlink(self, block: str) -> None:
        from simulations.engines.deploy import _healthy

        proc = self.start("superlink", block)
        ca = self.server_home / "fedspectral" / "creds" / "ca.crt"
        deadline = time.monotonic() + 120
        while not _healthy(self.port, ca):
            assert proc.poll() is None and time.monotonic() < deadline, self.log("superlink")[-3000:]
            time.sleep(0.5)

    def server_processes(self) -> list[int]:
        """The SuperLink's SuperExec and ServerApp processes (own sessions; found by the SuperLink's address)."""
        ps = subprocess.run(["ps", "-ww", "-e", "-o", "pid=,args="], capture_output=True, text=True).stdout
        found = []
        for line in ps.splitlines():
            pid, _, args = line.strip().partition(" ")
            if f"127.0.0.1:{self.port} " in args + " " and ("flwr-serverapp" in args or "flower-superexec" in args):
                found.append(int(pid))
        return found

    def crash_server(self) -> None:
        """SIGKILL the SuperLink, its SuperExec and the ServerApp at once, as a crash of the server would."""
        helpers = self.server_processes()
        os.killpg(self.processes["superlink"].pid, signal.SIGKILL)
        for pid in helpers:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.processes.pop("superlink").wait(timeout=30)

    def nodes(self) -> list[tuple[subprocess.Popen, Path]]:
        return [(self.processes[f"supernode_{i}"], self.logs / f"supernode_{i}.log") for i in range(NODES)]

    def freeze_idle_nodes(self) -> None:
        """SIGSTOP the SuperNodes at a moment when none is inside a reply.

        A SuperNode whose run is lost while it computes a reply can hang on the next run (see the guide's
        table of stuck states); the fault under test is the server's crash, so it comes between two replies.
        """
        from test_deploy import _idle

        for _ in range(400):
            for proc, _log in self.nodes():
                os.killpg(proc.pid, signal.SIGSTOP)
            time.sleep(0.3)
            if all(_idle(log.read_text()) for _, log in self.nodes()):
                return
            self.thaw_nodes()  # briefly: a reply under way completes, few rounds do
            time.sleep(0.02 + 0.08 * np.random.default_rng().random())
        raise AssertionError("the SuperNodes were never idle at once")

    def thaw_nodes(self) -> None:
        for proc, _log in self.nodes():
            os.killpg(proc.pid, signal.SIGCONT)

    def stop(self) -> None:
        """Stop every process started here (their sessions), and the SuperLink's helpers."""
        from simulations.engines.flwr_run import terminate

        for proc in self.processes.values():
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + 15
        for proc in self.processes.values():
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        terminate(self.server_processes())


def _rows(path: Path) -> int:
    return len(path.read_text().splitlines()) - 1 if path.exists() else 0


def _wait_for(predicate, seconds: float, what: str, poll: float = 0.5) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(poll)


def test_the_guide_has_the_commands_this_test_runs():
    """The blocks are found in order, and every placeholder the test substitutes is in the guide."""
    blocks = guide_blocks()
    assert len(blocks) == 10, [b.splitlines()[0] for b in blocks]
    assert "FEDSPECTRAL_HOME=" in blocks[0] and "FLWR_HOME=" in blocks[0]
    assert blocks[1].startswith("fedspectral credentials")
    assert blocks[2].startswith("flower-superlink") and "--database" in blocks[2] and "--port 9091" in blocks[2]
    assert "[superlink.fedspectral]" in blocks[3] and "superlink.example.org:9091" in blocks[3]
    assert "flwr supernode register" in blocks[4]
    assert blocks[5].startswith("fedspectral supernode --superlink") and "<i>" in blocks[5]
    assert "--port 9094" in blocks[5]
    assert blocks[6].startswith("flwr run . fedspectral") and "dataset='nodes'" in blocks[6]
    assert blocks[7] == "flwr ls fedspectral\n"
    assert blocks[8].startswith("flwr stop <run-id> fedspectral\n") and "resume=true" in blocks[8]
    assert blocks[8].splitlines()[1] == blocks[6].strip().removesuffix('"') + ' resume=true"'
    assert "epsilon=" in blocks[9] and "'$FEDSPECTRAL_HOME/private'" in blocks[9]
    assert "creds" not in "".join(blocks) or all("$FEDSPECTRAL_HOME/creds" in line for b in blocks
                                                  for line in b.splitlines() if "creds" in line)


@pytest.mark.deploy  # real processes: one SuperLink (started twice), three SuperNodes, three runs; about 4-6 min
@pytest.mark.timeout(1500)  # every process is stopped in the finally block (and by the flower_processes fixture)
def test_the_device_guide_as_typed_survives_a_superlink_restart(tmp_path):
    blocks = guide_blocks()
    env_block, creds, superlink, connection, register, supernode, run, ls, resume, private = blocks
    guide = Guide(tmp_path, blocks)
    wine = load_wine().data
    parts = np.array_split(wine, NODES)
    times = {}
    try:
        started = time.monotonic()
        for home in [guide.server_home, *guide.device_homes]:
            subprocess.run(["bash", "-euc", env_block], env=guide.env(home), check=True)
        guide.run(creds)
        server = guide.server_home / "fedspectral"
        assert (server / "creds" / "node_2").stat().st_mode & 0o777 == 0o600
        guide.start_superlink(superlink)
        guide.run(connection)
        guide.run(register)
        for i, home in enumerate(guide.device_homes):  # the copies the guide asks for, and the device's rows
            device = home / "fedspectral"
            for name in ("ca.crt", f"node_{i}"):
                shutil.copy2(server / "creds" / name, device / name)
            np.save(device / "rows.npy", parts[i])
            guide.start(f"supernode_{i}", supernode, device=i)
        times["setup"] = time.monotonic() - started

        # the guide's run, killed with its whole server after round 2 (the checkpoint holds rounds 0-2)
        started = time.monotonic()
        rounds = server / "results" / "rounds.csv"
        first = guide.start("run", run)
        # polled often and the nodes frozen at once: a round of warm SuperNodes takes a fraction of a second, and
        # the run must not reach its end before the crash
        _wait_for(lambda: _rows(rounds) >= 3 or first.poll() is not None, 600, "round 2 was not written in time",
                  poll=0.02)
        assert first.poll() is None, guide.log("run")[-4000:]
        guide.freeze_idle_nodes()
        guide.crash_server()
        guide.thaw_nodes()
        killed_at = _rows(rounds)
        kept = rounds.read_text().splitlines()[:3]  # header, rounds 0 and 1: checkpointed before round 2 began
        times["run until the crash"] = time.monotonic() - started
        try:
            first.wait(timeout=20)  # flwr run --stream may wait for a SuperLink that is gone: the user's Ctrl-C
        except subprocess.TimeoutExpired:
            os.killpg(first.pid, signal.SIGINT)
            first.wait(timeout=30)
        run_id = re.search(r"Successfully started run (\d+)", guide.log("run")).group(1)
        assert not (server / "results" / "pca.npz").exists()

        # the SuperLink again, with the guide's command: its database knows the keys, the nodes reconnect
        started = time.monotonic()
        guide.start_superlink(superlink)
        listed = guide.run(ls).stdout
        assert run_id in listed, listed
        status = next(line for line in listed.splitlines() if f" {run_id} " in line)
        assert " running " in status, listed  # the database kept the run: it is stopped by the guide's step 7
        done = guide.run(resume, run_id=run_id, timeout=900)
        times["restart and resume"] = time.monotonic() - started
        log = done.stdout
        assert "fedspectral: run completed" in log, log[-4000:]
        assert [p.poll() for name, p in guide.processes.items() if name.startswith("supernode")] == [None] * NODES

        table = pd.read_csv(rounds)
        assert list(table["round"]) == list(range(6)), table
        assert rounds.read_text().splitlines()[:3] == kept  # resumed after the checkpoint, not run again
        model = load_model(server / "results" / "pca.npz")
        ref = PCA(n_components=3).fit(wine)
        sin_theta = subspace_distance(model["components"].T, ref.components_.T)
        assert sin_theta < 1e-6
        np.testing.assert_allclose(model["explained_variance"], ref.explained_variance_, rtol=1e-6)
        np.testing.assert_allclose(model["mean"], wine.mean(axis=0), rtol=0, atol=1e-10)
        assert model["n_samples"] == len(wine)
        # the uninterrupted run of the same run config (the in-process engine, on the same files)
        folder = tmp_path / "uninterrupted"
        folder.mkdir()
        for i, part in enumerate(parts):
            np.save(folder / f"partition_{i}.npy", part)
        run_app(strategy="fedpower", dataset=str(folder), num_clients=NODES, center=True, rank=3, iteration_rank=6,
                local_steps=1, num_server_rounds=5, results_dir=str(folder / "out"))
        whole = load_model(folder / "out" / "pca.npz")
        signs = np.sign(np.sum(model["components"] * whole["components"], axis=1))  # each component up to sign
        np.testing.assert_allclose(signs[:, None] * model["components"], whole["components"], rtol=0, atol=1e-9)
        np.testing.assert_allclose(model["explained_variance"], whole["explained_variance"], rtol=1e-9)

        # the private run on the same nodes: each node's noise from its own secret file
        started = time.monotonic()
        done = guide.run(private, timeout=900)
        times["private run"] = time.monotonic() - started
        log = done.stdout
        assert "fedspectral: run completed" in log, log[-4000:]
        privacy = json.loads(str(load_model(server / "private" / "pca.npz")["privacy"]))
        assert privacy["epsilon_target"] == 1.0 and privacy["noise_source"] == "node-secret", privacy
        for home in guide.device_homes:
            secret = home / "fedspectral" / "noise.secret"
            assert secret.stat().st_size == 32 and secret.stat().st_mode & 0o777 == 0o600
        private_rows = pd.read_csv(server / "private" / "rounds.csv")
        assert (private_rows["epsilon_spent"].iloc[1:] > 0).all()

        # a run that fails (the guide's run without dataset='nodes': the server's default data set is not the
        # nodes' width): its status is the last line of the log the user sees, after Flower's report
        started = time.monotonic()
        failing = f"flwr run . fedspectral --stream --run-config \"num-clients=3 results-dir='{server}/failed'\"\n"
        done = guide.run(failing, timeout=600)
        times["failed run"] = time.monotonic() - started
        lines = [line.strip() for line in ANSI.sub("", done.stdout).splitlines() if line.strip()]
        assert lines[-1].startswith("fedspectral: run FAILED: "), lines[-30:]
        assert "Traceback (most recent call last):" not in lines, lines[-60:]  # ours, and explained in one line
        print(f"the failed run's last line: {lines[-1]}")
        per_round = {"resumed run": pd.read_csv(rounds)["wall_time"].iloc[1:].median(),
                     "private run": private_rows["wall_time"].iloc[1:].median()}
        print(f"killed after row {killed_at}; the killed run after the restart: {status}; times: "
              + ", ".join(f"{key} {value:.0f} s" for key, value in times.items())
              + "; median time per round: " + ", ".join(f"{key} {value:.1f} s" for key, value in per_round.items())
              + f"; sin theta {sin_theta:.1e}")
    finally:
        guide.stop()
