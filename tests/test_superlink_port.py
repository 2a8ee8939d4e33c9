"""Runs side by side: ``flwr_run`` never joins, and never stops, a local SuperLink of another FLWR_HOME."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import pytest

from simulations.engines import ArgumentError
from simulations.engines import flwr_run
from simulations.engines.flwr_run import PORT_VARIABLE, claim_superlink_port, flower_env


@pytest.fixture
def held_port():
    """A port on 127.0.0.1 held by a listening socket (another program)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def test_a_port_held_by_another_program_is_left_for_a_free_one(held_port, monkeypatch):
    monkeypatch.delenv(PORT_VARIABLE, raising=False)
    monkeypatch.setattr(flwr_run, "SUPERLINK_PORT", held_port)
    env = flower_env()
    note = claim_superlink_port(env)
    new = int(env[PORT_VARIABLE])
    assert new != held_port and f"port {held_port} is in use" in note and f"uses port {new}" in note
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", new))  # free


def test_a_held_port_the_user_chose_is_refused_in_one_line(held_port, monkeypatch):
    monkeypatch.setenv(PORT_VARIABLE, str(held_port))
    env = flower_env()
    with pytest.raises(ArgumentError, match=f"{PORT_VARIABLE}={held_port}: that port is in use"):
        claim_superlink_port(env)
    assert env[PORT_VARIABLE] == str(held_port)  # not overridden


def test_a_free_port_is_kept(monkeypatch):
    from simulations.engines.deploy import free_port_block

    monkeypatch.setenv(PORT_VARIABLE, str(free_port_block(1)))
    env = flower_env()
    assert claim_superlink_port(env) is None and env[PORT_VARIABLE] == os.environ[PORT_VARIABLE]


def test_a_free_port_is_kept_without_listing_the_processes(monkeypatch):
    """The port is read first: the process list (a ``ps`` of every process, a fraction of a second of the
    command's start) is only read when something listens there."""
    from simulations.engines.deploy import free_port_block

    def listed(env):
        raise AssertionError("the processes were listed for a free port")

    monkeypatch.setenv(PORT_VARIABLE, str(free_port_block(1)))
    monkeypatch.setattr(flwr_run, "_own_superlinks", listed)
    assert claim_superlink_port(flower_env()) is None


@pytest.mark.deploy  # a real foreign SuperLink and a real flwr run, about 60 s
@pytest.mark.timeout(300)
def test_flwr_run_beside_another_checkouts_superlink_uses_its_own_and_leaves_the_other_running(
        tmp_path, monkeypatch, capsys, flower_processes):
    from simulations.engines.flwr_run import main, superlink_running, terminate

    port = int(os.environ[PORT_VARIABLE])  # the fixture's free port plays Flower's default 39091
    other_home = tmp_path / "other-checkout" / ".flwr"
    other_home.mkdir(parents=True)
    other = subprocess.Popen(
        [os.path.join(os.path.dirname(sys.executable), "flower-superlink"), "--insecure", "--simulation",
         "--host", "127.0.0.1", "--port", str(port), "--database", str(other_home / "state.db")],
        env={**os.environ, "FLWR_HOME": str(other_home),
             "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not superlink_running() and time.monotonic() < deadline:
            time.sleep(0.5)
        assert superlink_running(), "the other checkout's SuperLink did not start"
        monkeypatch.delenv(PORT_VARIABLE)
        monkeypatch.setattr(flwr_run, "SUPERLINK_PORT", port)
        assert main(["--run-config", f'num-server-rounds=1 num-clients=2 results-dir="{tmp_path / "out"}"']) == 0
        assert (tmp_path / "out" / "rounds.csv").is_file()
        err = capsys.readouterr().err
        assert f"port {port} is in use by another program or another FLWR_HOME's local SuperLink: this run's " \
               "local SuperLink uses port" in err, err  # not the other one's, which would take its app and run
        assert other.poll() is None  # the other checkout's SuperLink was neither joined nor stopped
    finally:  # the other SuperLink and the SuperExec it started
        ps = subprocess.run(["ps", "-ww", "-e", "-o", "pid=,args="], capture_output=True, text=True).stdout
        helpers = [int(line.split()[0]) for line in ps.splitlines() if f"--parent-pid {other.pid}" in line]
        terminate([other.pid, *helpers])
        other.wait(timeout=10)
