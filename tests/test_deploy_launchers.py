"""The launchers every deployment and ``fedspectral supernode`` start by default (fedspectral/launchers): the fork
server runs Flower's ``flwr-clientapp`` in a process forked from one that has imported Flower, with the launcher's
arguments, streams, environment and exit status; ``supernode.py`` runs Flower's ``flower-supernode`` with
shorter sleeps between its polls while a run is active. Where either does not fit the installed Flower, Flower's
own behaviour is kept with one line; ``--flower-defaults`` keeps it on purpose."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from simulations.engines.deploy import FORKSERVER_VARIABLE, LAUNCHERS_DIR

LAUNCHER = LAUNCHERS_DIR / "flwr-clientapp"
FLOWER = Path(sys.executable).parent / "flwr-clientapp"


@pytest.fixture(scope="module")
def forkserver(tmp_path_factory):
    """A running fork server; its socket path. Stopped (its process group) at the end."""
    path = tmp_path_factory.mktemp("forkserver") / "s.sock"
    server = subprocess.Popen([sys.executable, str(LAUNCHERS_DIR / "forkserver.py"), str(path)],
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
    env["PATH"] = f"{LAUNCHERS_DIR}{os.pathsep}{FLOWER.parent}{os.pathsep}{env.get('PATH', '')}"
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


def test_the_fork_server_imports_nothing_of_the_app_unless_given_its_folder():
    """Without the app's folder, each child imports the app from its run's FAB: the server itself has not."""
    code = ("import runpy, sys; ns = runpy.run_path(sys.argv[1]); print(ns['preload']());"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('client_app', 'server_app', 'fl_strategies', 'simulations')))")
    done = subprocess.run([sys.executable, "-c", code, str(LAUNCHERS_DIR / "forkserver.py")],
                          capture_output=True, text=True, check=True)
    assert done.stdout.split("\n")[:2] == ["{}", "[]"]


def _tiny_app(folder: Path, package: str, version: str = "1") -> Path:
    """An app folder: ``pyproject.toml`` naming ``{package}.app:app`` and the package (``later.py`` is imported
    only when used)."""
    (folder / package).mkdir(parents=True)
    (folder / "pyproject.toml").write_text(f'[tool.flwr.app.components]\nclientapp = "{package}.app:app"\n')
    (folder / package / "__init__.py").write_text("")
    (folder / package / "app.py").write_text(f"app = 'v{version}'\n")
    (folder / package / "later.py").write_text("where = __file__\n")
    return folder


@pytest.fixture
def forkserver_module(monkeypatch):
    """``launchers/forkserver.py`` as a namespace; ``sys.path`` and the test app's modules restored after."""
    import runpy

    monkeypatch.setattr(sys, "path", list(sys.path))
    before = set(sys.modules)
    yield runpy.run_path(str(LAUNCHERS_DIR / "forkserver.py"))
    for name in set(sys.modules) - before:
        if name.startswith("tinyapp"):
            del sys.modules[name]


def test_a_clientapp_keeps_the_app_imported_in_advance_only_when_its_fab_holds_the_same_files(
        forkserver_module, tmp_path):
    import importlib

    server = forkserver_module
    checkout = _tiny_app(tmp_path / "checkout", "tinyapp_same")
    (checkout / "tinyapp_same" / "broken.py").write_text("raise RuntimeError('left to the FAB')\n")
    app = server["preload"](str(checkout))
    assert sorted(app) == ["tinyapp_same", "tinyapp_same.app", "tinyapp_same.later"]  # the whole package
    assert not any(str(tmp_path) in entry for entry in sys.path)
    installed = _tiny_app(tmp_path / "installed", "tinyapp_same")  # the FAB as Flower installed it: same bytes
    assert server["adopt"](app, installed) is None
    module = sys.modules["tinyapp_same.app"]
    assert module.app == "v1" and module.__file__ == str(installed / "tinyapp_same" / "app.py")
    assert sys.modules["tinyapp_same.later"].__file__ == str(installed / "tinyapp_same" / "later.py")
    (installed / "tinyapp_same" / "newer.py").write_text("where = __file__\n")  # only in the FAB
    newer = importlib.import_module("tinyapp_same.newer")  # imported later: from the FAB, as a new process does
    assert newer.where == str(installed / "tinyapp_same" / "newer.py")

    app = server["preload"](str(_tiny_app(tmp_path / "old", "tinyapp_other")))
    other = _tiny_app(tmp_path / "other", "tinyapp_other", version="2")  # the run's FAB has another app.py
    assert server["adopt"](app, other) == "tinyapp_other/app.py differs"
    assert not any(name.startswith("tinyapp_other") for name in sys.modules)
    sys.path.insert(0, str(other))
    assert importlib.import_module("tinyapp_other.app").app == "v2"


def test_an_app_that_does_not_import_leaves_the_fork_server_serving_without_it(forkserver_module, tmp_path,
                                                                                capsys):
    broken = _tiny_app(tmp_path / "broken", "tinyapp_broken")
    (broken / "tinyapp_broken" / "app.py").write_text("raise RuntimeError('no')\n")
    (broken / "tinyapp_broken" / "later.py").write_text("raise RuntimeError('not either')\n")
    assert forkserver_module["preload"](str(broken)) == {}
    assert not any(name.startswith("tinyapp_broken") for name in sys.modules)
    assert "does not import here (RuntimeError: no)" in capsys.readouterr().out


def test_a_fab_is_unpacked_once_per_fork_server_and_flower_home(forkserver_module, tmp_path, monkeypatch):
    server = forkserver_module
    marks = tmp_path / "marks"
    marks.mkdir()
    calls = []

    def flower_install(fab, install_dir, skip_prompt):
        calls.append(fab)
        folder = tmp_path / f"installed-{len(calls)}"
        folder.mkdir()
        return folder

    def install(fab):
        return server["installed_fab"](flower_install, {}, marks, fab, None, True)

    monkeypatch.setenv("FLWR_HOME", str(tmp_path / "home-a"))
    first = install(b"fab one")
    assert install(b"fab one") == first and calls == [b"fab one"]  # the same FAB: Flower's folder, not unpacked
    assert install(b"fab two") != first and len(calls) == 2  # another FAB
    monkeypatch.setenv("FLWR_HOME", str(tmp_path / "home-b"))
    assert install(b"fab one") != first and len(calls) == 3  # another FLWR_HOME: Flower installs it there
    monkeypatch.setenv("FLWR_HOME", str(tmp_path / "home-a"))
    first.rmdir()  # its installation gone: Flower installs it again
    assert install(b"fab one") != first and len(calls) == 4


def test_each_forked_clientapp_draws_its_own_numpy_random_numbers(forkserver_module):
    """numpy's global generator is seeded at import: a child forked from the server gets fresh entropy, as a new
    process would (Flower's SecAgg+ quantization draws from it). Each child starts from the server's state, as
    under a numpy that does not reseed after a fork (the pin allows numpy 1.26)."""
    import numpy as np

    server_state = np.random.get_state()
    draws = []
    for _ in range(2):
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: as _child does before Flower runs
            np.random.set_state(server_state)
            forkserver_module["fresh_random_state"]()
            os.write(write, np.random.bytes(16))
            os._exit(0)
        os.close(write)
        draws.append(os.read(read, 16))
        os.close(read)
        os.waitpid(pid, 0)
    assert draws[0] != draws[1]


def test_a_forked_clientapp_asks_again_for_a_message_still_arriving_after_a_tenth_of_a_second(
        forkserver_module, monkeypatch):
    import flwr.supernode.runtime.run_clientapp as runner

    calls = []
    monkeypatch.setattr(runner, "pull_and_inflate_object_from_tree", lambda *a, **k: calls.append((a, k)))
    forkserver_module["wrap_pull"]()
    runner.pull_and_inflate_object_from_tree("tree", "pull", "confirm", return_type=int)
    runner.pull_and_inflate_object_from_tree("tree", initial_backoff=2.0)
    assert calls == [(("tree", "pull", "confirm"), {"return_type": int, "initial_backoff": 0.1}),
                     (("tree",), {"initial_backoff": 2.0})]  # a caller's own wait is kept
    assert runner.pull_task_input.__module__ == runner.__name__  # what calls it: Flower's, unchanged


def test_the_install_wrapper_fits_the_flower_pyproject_allows_and_refuses_another(forkserver_module, monkeypatch):
    import flwr.supercore.version

    assert forkserver_module["hook_misfit"]() is None
    monkeypatch.setattr(flwr.supercore.version, "package_version", "1.50.0")
    assert forkserver_module["hook_misfit"]() == "written for Flower 1.41.x or 1.42.x, found 1.50.0"


def _launcher_with_flower_loop_restored(monkeypatch):
    """``launchers/supernode.py`` as a namespace; what it changes in Flower's SuperNode loop is undone after the
    test."""
    import runpy

    import flwr.supernode.start_client_internal as loop

    monkeypatch.setattr(loop, "time", loop.time)
    monkeypatch.setattr(loop, "_pull_and_store_message", loop._pull_and_store_message)
    monkeypatch.setattr(loop, "pull_objects", loop.pull_objects)
    return runpy.run_path(str(LAUNCHERS_DIR / "supernode.py")), loop


def test_the_supernode_asks_again_for_a_message_still_arriving_after_a_tenth_of_a_second(monkeypatch):
    """The ServerApp pushes a message before its contents: a SuperNode polling every 0.1 s often sees it in between,
    and Flower's loop then waited 1 s before asking again for the contents."""
    launcher, loop = _launcher_with_flower_loop_restored(monkeypatch)
    calls = []
    monkeypatch.setattr(loop, "pull_objects", lambda *a, **k: calls.append((a, k)) or {})
    assert launcher["shorten_waits"](0.2) is None
    loop.pull_objects(["id"], pull_object_fn=print)  # as Flower's _pull_and_store_message calls it
    loop.pull_objects(["id"], print, initial_backoff=2.0)
    assert calls == [((["id"],), {"pull_object_fn": print, "initial_backoff": 0.1}),
                     ((["id"], print), {"initial_backoff": 2.0})]  # a caller's own wait is kept


def test_the_supernode_launcher_shortens_only_the_two_polls_of_flowers_supernode_loop(monkeypatch):
    launcher, loop = _launcher_with_flower_loop_restored(monkeypatch)
    slept = []
    monkeypatch.setattr("time.sleep", slept.append)
    assert launcher["shorten_waits"](0.2) is None
    for seconds in (3, 0.5, 1.0, 0.01):
        loop.time.sleep(seconds)
    assert slept == [0.2, 0.2, 1.0, 0.01]
    assert loop.time.monotonic is __import__("time").monotonic
    launcher["ShortWaits"](2.0).sleep(0.5)  # a poll longer than 0.5 s leaves the reply's look at 0.5 s
    assert slept[-1] == 0.5


def test_an_idle_supernode_polls_as_flowers_and_a_message_makes_it_poll_often_again(monkeypatch):
    launcher, loop = _launcher_with_flower_loop_restored(monkeypatch)
    clock = [100.0]
    replies = iter([None, 7])
    monkeypatch.setattr(loop, "_pull_and_store_message", lambda **kwargs: next(replies))
    monkeypatch.setattr("time.monotonic", lambda: clock[0])
    slept = []
    monkeypatch.setattr("time.sleep", slept.append)
    assert launcher["shorten_waits"](0.1) is None
    loop.time.sleep(3)  # just started: a run may begin any moment
    clock[0] += launcher["HOT_SECONDS"] + 1
    loop.time.sleep(3)  # a minute without a message: Flower's 3 s
    assert loop._pull_and_store_message(state=None) is None  # the loop's call, its result unchanged
    loop.time.sleep(3)
    assert loop._pull_and_store_message(state=None) == 7  # a message
    loop.time.sleep(3)
    assert slept == [0.1, 3, 3, 0.1]


def test_the_supernode_launcher_fits_the_flower_versions_pyproject_allows():
    import runpy
    import tomllib

    from flwr.supercore.version import package_version

    launcher = runpy.run_path(str(LAUNCHERS_DIR / "supernode.py"))
    (pin,) = [d for d in tomllib.loads((LAUNCHERS_DIR.parents[1] / "pyproject.toml").read_text())["project"][
        "dependencies"] if d.startswith("flwr")]
    assert pin.endswith(">=1.41,<1.43") and launcher["FLOWER_SERIES"] == ("1.41.", "1.42.")
    import flwr.supernode.start_client_internal as loop

    source = __import__("inspect").getsource(loop)
    assert launcher["misfit"](package_version, source) is None  # the installed Flower is changed
    assert "found 1.43.0" in launcher["misfit"]("1.43.0", source)
    assert "no time.sleep(3)" in launcher["misfit"](package_version, source.replace("time.sleep(3)", "sleep(2)"))
    assert "_pull_and_store_message" in launcher["misfit"](package_version, source.replace("run_id = _pull", "_x"))
    assert "does not call pull_objects" in launcher["misfit"](package_version,
                                                              source.replace("= pull_objects(", "= fetch("))


def test_a_flower_the_supernode_launcher_does_not_fit_keeps_its_own_waits_with_one_line(tmp_path):
    """Flower's SuperNode starts unchanged (here: its --help) after one line saying why."""
    script = tmp_path / "supernode.py"
    script.write_text((LAUNCHERS_DIR / "supernode.py").read_text().replace('("1.41.", "1.42.")', '("0.9.",)'))
    done = subprocess.run([sys.executable, str(script), "0.2", "--help"], capture_output=True, text=True)
    own = subprocess.run([str(FLOWER.parent / "flower-supernode"), "--help"], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout == own.stdout
    line, rest = done.stderr.split("\n", 1)
    assert line == (f"supernode.py: written for Flower 0.9.x, found {__import__('flwr').__version__}: Flower's "
                    "own waits are kept (3 s after an empty poll)") and rest == own.stderr


def test_a_fork_server_that_does_not_fit_flower_exits_at_once_and_the_supernodes_start_flowers_clientapp():
    import runpy

    from fedspectral.supernode import start_forkserver

    server = runpy.run_path(str(LAUNCHERS_DIR / "forkserver.py"))
    assert server["misfit"]() is None  # the installed Flower's flwr-clientapp is the function it forks
    assert "not flwr.other:clientapp" in server["misfit"]("flwr.other:clientapp")
    folders = []

    def misfit_server(cmd):
        folders.append(Path(cmd[-1]).parent)
        return subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])

    proc, socket_path, problem = start_forkserver(misfit_server)
    assert socket_path is None and problem == "the ClientApp fork server exited with status 3"
    assert proc.returncode == 3 and not folders[0].exists()


@pytest.mark.deploy  # a fork server (imports Flower: a few seconds)
@pytest.mark.timeout(180)
def test_the_fork_server_stops_with_the_process_that_started_it_and_removes_its_socket(tmp_path):
    folder = tmp_path / "server"
    folder.mkdir()
    path = folder / "s.sock"
    starter = ("import subprocess, sys, time; p = subprocess.Popen([sys.executable, sys.argv[1], sys.argv[2]]); "
               "print(p.pid, flush=True); import pathlib\nwhile not pathlib.Path(sys.argv[2]).exists(): "
               "time.sleep(0.05)")
    done = subprocess.run([sys.executable, "-c", starter, str(LAUNCHERS_DIR / "forkserver.py"), str(path)],
                          capture_output=True, text=True, timeout=150)
    server = int(done.stdout.split()[0])  # its starter has ended once the server served
    deadline = time.monotonic() + 60
    while _running(server) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _running(server) and not folder.exists()


def _running(pid: int) -> bool:
    """Whether process ``pid`` exists and is no zombie."""
    try:
        return "\nState:\tZ" not in Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False


def test_a_local_deployment_starts_warm_clientapps_and_short_polls_by_default(monkeypatch, tmp_path):
    """Without a flag, the SuperNodes start as ``fedspectral supernode`` starts one: through supernode.py with
    the default poll, the fork server's launcher first on their PATH; ``flower-defaults`` is Flower's own."""
    import simulations.engines.deploy as deploy
    from fedspectral.app_bundle import fab_dir
    from fedspectral.supernode import DEFAULT_POLL

    started = []

    class Stub:
        pid = 0

        def poll(self):
            return None

    def start(self, name, cmd):
        started.append((name, cmd, dict(self.env)))
        if name == "clientapp_forkserver":
            Path(cmd[2]).touch()  # it serves
        return Stub()

    monkeypatch.setattr(deploy.LocalDeployment, "_start", start)
    monkeypatch.setattr(deploy.LocalDeployment, "_start_superlink", lambda self, ca: None)
    monkeypatch.setattr(deploy.LocalDeployment, "stop", lambda self: None)
    files = [tmp_path / f"partition_{i}.npy" for i in range(2)]
    with deploy.LocalDeployment(files, tmp_path / "out", port=1) as deployment:
        flwr_run = deployment._run_cmd("", tmp_path / "results", False)
    # Flower builds the FAB from a folder of the FAB's files only, not from the whole checkout
    assert flwr_run[:3] == ["flwr", "run", str(fab_dir(tmp_path / "out" / "flwr-home"))]
    (server, _, _), (node, cmd, env) = started[0], started[1]
    assert server == "clientapp_forkserver" and node == "supernode_0"
    # its app imported in advance: the FAB's files, the folder `flwr run` is given
    assert started[0][1][3] == str(fab_dir(tmp_path / "out" / "flwr-home"))
    assert cmd[1:3] == [str(LAUNCHERS_DIR / "supernode.py"), str(DEFAULT_POLL)]
    assert env["PATH"].split(os.pathsep)[0] == str(LAUNCHERS_DIR) and env[FORKSERVER_VARIABLE].endswith(".sock")
    started.clear()
    with deploy.LocalDeployment(files, tmp_path / "plain", port=1, warm_clientapp=False, supernode_poll=None):
        pass
    assert [name for name, _, _ in started] == ["supernode_0", "supernode_1"]
    assert started[0][1][0] == "flower-supernode" and FORKSERVER_VARIABLE not in started[0][2]


@pytest.mark.parametrize("flags, given", [(["--flower-defaults", "--supernode-poll", "0.2"], "--supernode-poll"),
                                          (["--warm-clientapp", "--flower-defaults"], "--warm-clientapp")])
def test_deploy_refuses_a_fast_flag_with_flower_defaults_in_one_line(capsys, flags, given):
    from simulations.engines.deploy import main

    assert main([*flags, "--out", "/nonexistent/never-created"]) == 2
    err = capsys.readouterr().err
    assert err.strip().endswith(f"{given} and --flower-defaults contradict each other: give one")
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("argv", [["0.01"], ["x"], []])
def test_the_supernode_launcher_refuses_a_poll_outside_its_range_in_one_line(argv):
    done = subprocess.run([sys.executable, str(LAUNCHERS_DIR / "supernode.py"), *argv], capture_output=True,
                          text=True)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1
    assert "poll in seconds, in [0.05, 3.0]" in done.stderr


def test_deploy_refuses_a_supernode_poll_outside_its_range(capsys):
    from simulations.engines.deploy import main

    assert main(["--supernode-poll", "0", "--out", "/nonexistent/never-created"]) == 2
    assert "--supernode-poll 0.0: give seconds in [0.05, 3]" in capsys.readouterr().err


@pytest.mark.deploy  # real processes, about a minute
@pytest.mark.timeout(400)  # every process is stopped in finally blocks; a hang fails the test
def test_a_deployment_with_its_default_launchers_gives_the_same_numbers_and_leaves_nothing_behind(tmp_path):
    import re

    import numpy as np
    import pandas as pd

    from conftest import distances, run_app
    from simulations.engines.deploy import main

    over = "num-clients=3 num-samples=3000 dimension=20 num-server-rounds=3 local-steps=2"
    assert main(["--run-config", over, "--out", str(tmp_path)]) == 0  # warm ClientApps and short polls
    deployed = pd.read_csv(tmp_path / "rounds.csv")
    local = run_app(num_clients=3, num_samples=3000, dimension=20, num_server_rounds=3, local_steps=2)
    np.testing.assert_allclose(deployed["subspace_distance"].to_numpy(), distances(local), rtol=0, atol=1e-12)
    logs = tmp_path / "logs"
    assert "Flower imported, serving" in (logs / "clientapp_forkserver.log").read_text()
    assert "modules of the app in" in (logs / "clientapp_forkserver.log").read_text()  # imported in advance
    node_log = (logs / "supernode_0.log").read_text()
    assert "no fork server" not in node_log and node_log.count("Start `flwr-clientapp` process") >= 3
    assert "forkserver:" not in node_log  # the FAB holds the app imported in advance: kept at every message
    out = subprocess.run(["pgrep", "-f", str(tmp_path)], capture_output=True, text=True).stdout
    assert out.strip() == ""  # every process the deployment started has stopped
    # the fork server too (named by its log line: other deployments may run their own meanwhile), and its folder
    server, socket_path = re.search(r"forkserver (\d+): Flower imported, serving (\S+)",
                                    (logs / "clientapp_forkserver.log").read_text()).groups()
    assert not _running(int(server)) and not Path(socket_path).parent.exists()


def test_the_breakdown_splits_the_last_nodes_round_at_flowers_time_stamps():
    from simulations.benchmarks.bench_deploy_round import PARTS, critical_breakdown, flower_stamps, server_stamps

    texts = ["Receiving: train message", "Start `flwr-clientapp` process", "[flwr-clientapp] Start FAB installation.",
             "[flwr-clientapp] Start `ClientApp` Loading.", "partition 0: node config data-path 'x'",
             "Runtime.PushMessages", "Sending: train message", "Sent successfully"]

    def node(offset):
        lines = []
        for r in (1, 2):
            lines.append(f"INFO 2026-01-01 10:00:00,000:  [RUN 7, ROUND {r}]")
            for k, text in enumerate(texts):  # stage k at 10 r + offset + k / 10 seconds
                ms = round((10 * r + offset + k / 10) * 1000)
                lines.append(f"INFO 2026-01-01 10:00:{ms // 1000:02d},{ms % 1000:03d}:  {text}")
        return flower_stamps(lines)

    server = server_stamps("INFO 2026-01-01 10:00:12,400:  round 1 of 2: 2.01 s (waited 2.00 s for 2 replies, "
                           "server 0.01 s); left: at most 1 round (~2.0 s)")
    (row,) = critical_breakdown([node(0.0), node(1.0)], server)  # the second node replies last
    # previous round's last reply at 11 + 0.7 = 11.7; server line at 12.4; the last node receives at 21.0
    assert row["round"] == 2 and row["server"] == pytest.approx(0.7) and row["poll"] == pytest.approx(8.6)
    assert all(row[part] == pytest.approx(0.1) for part in PARTS[2:])
    assert row["total"] == pytest.approx(21.7 - 11.7) == pytest.approx(sum(row[part] for part in PARTS))


def test_a_local_deployment_unpacks_the_app_in_memory_unless_the_user_chose_a_tmpdir(monkeypatch, tmp_path):
    from simulations.engines.deploy import MEMORY_TMP, LocalDeployment

    monkeypatch.delenv("TMPDIR", raising=False)
    env = LocalDeployment([tmp_path / "partition_0.npy"], tmp_path).env
    assert env.get("TMPDIR") == (str(MEMORY_TMP) if os.access(MEMORY_TMP, os.W_OK) else None)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    assert LocalDeployment([tmp_path / "partition_0.npy"], tmp_path).env["TMPDIR"] == str(tmp_path)


@pytest.mark.deploy  # a SuperNode and its fork server (each imports Flower: 10-30 s under load)
@pytest.mark.timeout(240)
def test_fedspectral_supernode_becomes_flowers_supernode_and_its_fork_server_ends_with_it(tmp_path):
    """``fedspectral supernode ARGS`` starts the fork server, then execs ``supernode.py POLL ARGS`` (same process:
    Flower's signals and exit status); SIGTERM stops the SuperNode, and the fork server ends with it, removing
    its socket's folder."""
    import re

    from fedspectral.deploy import free_port_block
    from fedspectral.supernode import DEFAULT_POLL

    port = free_port_block(4)  # nothing answers there: the SuperNode retries until it is stopped
    log = tmp_path / "supernode.log"
    env = {**os.environ, "FLWR_HOME": str(tmp_path / "flwr-home"), "PATH": f"{FLOWER.parent}{os.pathsep}"
           f"{os.environ.get('PATH', '')}"}
    with log.open("w") as handle:
        node = subprocess.Popen([sys.executable, "-m", "fedspectral", "supernode", "--insecure", "--superlink",
                                 f"127.0.0.1:{port}", "--port", str(port + 1)], env=env, stdout=handle,
                                stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        while "Flower imported, serving" not in log.read_text() or "supernode.py" not in Path(
                f"/proc/{node.pid}/cmdline").read_text():
            assert node.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.2)
        assert Path(f"/proc/{node.pid}/cmdline").read_text().split("\0")[2:4] == [str(DEFAULT_POLL), "--insecure"]
        environ = Path(f"/proc/{node.pid}/environ").read_text().split("\0")
        assert "FLWR_SUPEREXEC_TASK_POLL_INTERVAL=0.1" in environ  # Flower's setting, as deploy gives it
        socket_path = Path(re.search(r"serving (\S+)", log.read_text()).group(1))
        children = subprocess.run(["pgrep", "-P", str(node.pid)], capture_output=True, text=True).stdout.split()
        (server,) = [int(pid) for pid in children if "forkserver.py" in Path(f"/proc/{pid}/cmdline").read_text()]
        node.send_signal(signal.SIGTERM)
        node.wait(timeout=60)
        while (_running(server) or socket_path.parent.exists()) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _running(server) and not socket_path.parent.exists()
    finally:
        try:
            os.killpg(node.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        node.wait()
    left = subprocess.run(["pgrep", "-f", str(tmp_path)], capture_output=True, text=True).stdout
    assert left.strip() == ""


def test_a_supernode_gets_flowers_fast_settings_unless_the_user_chose_their_own(tmp_path):
    from fedspectral.supernode import MEMORY_TMP, SUPEREXEC_POLL_VARIABLE, node_env

    env = node_env({"PATH": "/bin"})
    assert env[SUPEREXEC_POLL_VARIABLE] == "0.1" and env["PATH"] == "/bin"
    assert env.get("TMPDIR") == (str(MEMORY_TMP) if os.access(MEMORY_TMP, os.W_OK) else None)
    own = {SUPEREXEC_POLL_VARIABLE: "2", "TMPDIR": str(tmp_path)}
    assert node_env(own) == own


def test_the_breakdown_splits_each_exchange_of_a_secure_round_at_flowers_time_stamps():
    """A SecAgg+ round is four train messages of one round at every node: each is one exchange, measured from the
    last reply of the exchange before it (the old breakdown followed only a round's first message)."""
    from simulations.benchmarks.bench_deploy_round import (EXCHANGE_PARTS, exchange_breakdown, exchange_table,
                                                           node_exchanges, server_pushes)

    texts = ["Receiving: train message", "Start `flwr-clientapp` process", "Runtime.PushMessages",
             "Sending: train message", "Sent successfully"]

    def stamp(seconds):
        ms = round(seconds * 1000)
        return f"10:{ms // 60000:02d}:{ms // 1000 % 60:02d},{ms % 1000:03d}"

    def node(offset):  # exchange k of round r starts at 10 r + 2 k + 0.5 + offset, one stage every 0.1 s
        lines = ["INFO 2026-01-01 10:00:00,000:  [RUN 7]", "INFO 2026-01-01 10:00:00,500:  Sent successfully"]
        for r in (1, 2, 3):
            for k in range(4):
                lines.append(f"INFO 2026-01-01 {stamp(10 * r + 2 * k)}:  [RUN 7, ROUND {r}]")
                lines += [f"DEBUG 2026-01-01 {stamp(10 * r + 2 * k + 0.5 + offset + j / 10)}:  {text}"
                          for j, text in enumerate(texts)]
        return node_exchanges(lines)

    nodes = [node(0.0), node(0.3)]  # the second node replies last
    assert [len(nodes[0][r]) for r in (1, 2, 3)] == [4, 4, 4]
    pushes = server_pushes([f"DEBUG 2026-01-01 {stamp(10 * r + 2 * k + 0.2)}:  Runtime.PushMessages"
                            for r in (1, 2, 3) for k in range(4)])
    rows = exchange_breakdown(nodes, pushes, last_round=2)
    assert [(row["round"], row["exchange"]) for row in rows] == [(2, 1), (2, 2), (2, 3), (2, 4)]
    first, second = rows[0], rows[1]
    # round 1's last reply at 10 + 6 + 0.5 + 0.3 + 0.4 = 17.2; round 2's first push at 20.2, receive at 20.8
    assert first["server"] == pytest.approx(3.0) and first["poll"] == pytest.approx(0.6)
    assert second["server"] == pytest.approx(22.2 - 21.2) and second["total"] == pytest.approx(23.2 - 21.2)
    assert all(row[part] == pytest.approx(0.1) for row in rows for part in EXCHANGE_PARTS[2:])
    assert all(row["total"] == pytest.approx(sum(row[part] for part in EXCHANGE_PARTS)) for row in rows)
    table = exchange_table(["after"], {"after": [{"exchanges": rows}]})
    assert [line.split(" | ")[1] for line in table[-5:]] == ["setup", "share_keys", "collect_masked_vectors",
                                                              "unmask", "round"]
