"""The ``--warm-clientapp`` launcher of the scripted deployment: Flower's ``flwr-clientapp`` run in a process
forked from one that has imported Flower, with the launcher's arguments, streams, environment and exit status."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from simulations.engines.deploy import FORKSERVER_VARIABLE, WARM_CLIENTAPP_DIR

LAUNCHER = WARM_CLIENTAPP_DIR / "flwr-clientapp"
FLOWER = Path(sys.executable).parent / "flwr-clientapp"


@pytest.fixture
def forkserver(tmp_path):
    """A running fork server; its socket path. Stopped (its process group) at the end."""
    path = tmp_path / "s.sock"
    server = subprocess.Popen([sys.executable, str(WARM_CLIENTAPP_DIR / "forkserver.py"), str(path)],
                              start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 120
        while not path.exists():
            assert server.poll() is None and time.monotonic() < deadline, server.stdout.read()
            time.sleep(0.05)
        assert oct(path.stat().st_mode & 0o777) == "0o600"
        yield path
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)


def _env(socket_path=None):
    env = {k: v for k, v in os.environ.items() if k != FORKSERVER_VARIABLE}
    env["PATH"] = f"{WARM_CLIENTAPP_DIR}{os.pathsep}{FLOWER.parent}{os.pathsep}{env.get('PATH', '')}"
    if socket_path is not None:
        env[FORKSERVER_VARIABLE] = str(socket_path)
    return env


@pytest.mark.parametrize("args", [["--help"], ["--insecure"], ["--token", "x", "--bogus"]])
def test_the_launcher_answers_as_flowers_own_flwr_clientapp(forkserver, args):
    own = subprocess.run([str(FLOWER), *args], capture_output=True, text=True, env=_env())
    forked = subprocess.run(["flwr-clientapp", *args], capture_output=True, text=True, env=_env(forkserver))
    assert (forked.returncode, forked.stdout, forked.stderr) == (own.returncode, own.stdout, own.stderr)
    assert own.returncode == (0 if args == ["--help"] else 2)


def test_without_a_fork_server_the_launcher_runs_flowers_flwr_clientapp(tmp_path):
    own = subprocess.run([str(FLOWER), "--help"], capture_output=True, text=True, env=_env())
    unset = subprocess.run(["flwr-clientapp", "--help"], capture_output=True, text=True, env=_env())
    gone = subprocess.run(["flwr-clientapp", "--help"], capture_output=True, text=True,
                          env=_env(tmp_path / "nothing.sock"))
    assert unset.stdout == gone.stdout == own.stdout and unset.returncode == gone.returncode == 0
    assert "no fork server at" in gone.stderr and unset.stderr == ""


def test_a_signal_to_the_launcher_reaches_the_clientapp(forkserver):
    # no Runtime API answers on this port: the ClientApp retries until it is stopped
    launcher = subprocess.Popen(["flwr-clientapp", "--insecure", "--token", "x", "--runtime-api-address",
                                 "127.0.0.1:9"], env=_env(forkserver), stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
    time.sleep(2)
    assert launcher.poll() is None
    launcher.send_signal(signal.SIGTERM)
    launcher.wait(timeout=60)
    assert launcher.returncode != 0


def test_the_fork_server_imports_nothing_of_the_app():
    """Each child imports the app from its run's FAB: the server itself must not have imported it."""
    code = ("import runpy, sys; ns = runpy.run_path(sys.argv[1]); ns['preload']();"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('client_app', 'server_app', 'fl_strategies', 'simulations')))")
    done = subprocess.run([sys.executable, "-c", code, str(WARM_CLIENTAPP_DIR / "forkserver.py")],
                          capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
