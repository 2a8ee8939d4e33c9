"""The ``fedspectral`` command as a user types it: a subprocess of the console script pyproject.toml declares.

The script is written here as pip writes a console script (``from MODULE import FUNC; sys.exit(FUNC())``) from
the ``[project.scripts]`` entry, so the test checks this checkout's entry point, whatever an older install put in
the environment's ``bin``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fedspectral.cli import COMMANDS

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]


@pytest.fixture(scope="module")
def bin_dir(tmp_path_factory) -> Path:
    """A folder holding every console script of pyproject.toml, as pip would install it."""
    folder = tmp_path_factory.mktemp("bin")
    for name, entry in SCRIPTS.items():
        module, _, func = entry.partition(":")
        script = folder / name
        script.write_text(f"#!{sys.executable}\nimport sys\nfrom {module} import {func}\n"
                          f"if __name__ == '__main__':\n    sys.exit({func}())\n")
        script.chmod(0o755)
    return folder


def command(bin_dir: Path, *args: str, cwd: Path | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run ``args`` (``fedspectral ...``) with the scripts of :func:`bin_dir` first on PATH and this checkout
    first on the import path."""
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run(list(args), cwd=cwd or ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def test_pyproject_declares_the_command_and_keeps_fedspectral_compare():
    assert SCRIPTS["fedspectral"] == "fedspectral.cli:main"
    assert "fedspectral-compare" in SCRIPTS
    wheel = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["hatch"]["build"]["targets"]["wheel"]
    assert "fedspectral" in wheel["packages"]


def test_help_lists_every_command_on_one_line(bin_dir):
    done = command(bin_dir, "fedspectral", "--help")
    assert done.returncode == 0 and done.stderr == ""
    lines = done.stdout.splitlines()
    assert lines[0] == "usage: fedspectral <command> [options]"
    for name, spec in COMMANDS.items():
        (line,) = [line for line in lines if line.startswith(f"  {name} ")]
        assert line.split(None, 1)[1] == spec.summary
    assert list(COMMANDS) == ["run", "compare", "deploy", "supernode", "credentials", "transform"]


def test_no_arguments_prints_the_help_and_exits_2(bin_dir):
    done = command(bin_dir, "fedspectral")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == command(bin_dir, "fedspectral", "--help").stdout


@pytest.mark.parametrize("typed, hint", [("rn", "did you mean 'run'?"), ("--verbose", "unknown option"),
                                         ("plot", "unknown command 'plot'")])
def test_an_unknown_command_is_one_line_exit_2(bin_dir, typed, hint):
    done = command(bin_dir, "fedspectral", typed, "--help")
    assert done.returncode == 2 and done.stdout == ""
    assert len(done.stderr.splitlines()) == 1 and done.stderr.startswith("fedspectral: error: ")
    assert hint in done.stderr and "run, compare, deploy, supernode, credentials, transform" in done.stderr


@pytest.mark.parametrize("name", list(COMMANDS))
def test_each_command_help_shows_its_usage_examples_and_exit_statuses(bin_dir, name):
    done = command(bin_dir, "fedspectral", name, "--help")
    assert done.returncode == 0, done.stderr
    text = done.stdout
    assert text.startswith(f"usage: fedspectral {name} ")
    examples = text.split("\nexamples:\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert examples and examples[0].startswith(f"  fedspectral {name}")
    for before, line in zip(examples, examples[1:]):  # each a command, or its continuation after a backslash
        assert line.startswith(f"  fedspectral {name}") or before.endswith("\\") and line.startswith("      ")
    assert "\nexit status: 0 " in text and " 2 a bad " in " ".join(text.split())
    assert "python -m" not in text  # the examples name the command that was typed


@pytest.mark.parametrize("name", list(COMMANDS))
def test_a_bad_flag_is_one_line_naming_the_command_exit_2(bin_dir, name):
    done = command(bin_dir, "fedspectral", name, "--no-such-flag")
    assert done.returncode == 2 and done.stdout == ""
    assert len(done.stderr.splitlines()) == 1, done.stderr
    assert done.stderr.startswith(f"fedspectral {name}: error: ")
    assert "--no-such-flag" in done.stderr or "required" in done.stderr


def test_a_bad_value_is_refused_before_anything_runs(bin_dir, tmp_path):
    done = command(bin_dir, "fedspectral", "run", "--run-config", "rank=40 iteration-rank=3", cwd=tmp_path)
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1, done.stderr
    assert done.stderr.startswith("fedspectral run: error: --run-config") and "rank" in done.stderr
    done = command(bin_dir, "fedspectral", "credentials", str(tmp_path / "creds"), "--nodes", "-1")
    assert done.returncode == 2 and done.stderr.startswith("fedspectral credentials: error: --nodes -1")
    assert not (tmp_path / "creds").exists()


@pytest.mark.parametrize("module, args", [("simulations.engines.flwr_run", ["--bogus"]),
                                          ("simulations.engines.deploy", ["--bogus"]),
                                          ("simulations.engines.credentials", ["--bogus"]),
                                          ("simulations.compare", ["--bogus"]),
                                          ("client_app.transform", ["--bogus"])])
def test_the_python_m_entry_points_still_run_and_name_themselves(bin_dir, module, args):
    done = command(bin_dir, sys.executable, "-m", module, *args)
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1, done.stderr
    assert done.stderr.startswith(f"python -m {module}: error: ")


def test_compare_then_transform_through_the_command(bin_dir, tmp_path):
    """The comparison file printed in ``fedspectral compare --help`` runs as printed; the model it writes is
    applied by ``fedspectral transform`` exactly as ``(X - mean) @ components.T``."""
    help_text = command(bin_dir, "fedspectral", "compare", "--help").stdout
    example = re.search(r"\n\n((?:    .*\n)+)\n", help_text).group(1)
    (tmp_path / "example.toml").write_text("\n".join(line[4:] for line in example.splitlines()) + "\n")
    done = command(bin_dir, "fedspectral", "compare", "example.toml", "--out", "out", cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr
    results = pd.read_csv(tmp_path / "out" / "results.csv")
    assert sorted(results["seed"].unique()) == [0, 1] and set(results["run"]) == {"fedpower"}
    last = results[results["round"] == results["round"].max()]
    assert (last["subspace_distance"] < 1e-3).all()  # fedpower on Model I converges in its 10 rounds
    (model_file,) = sorted((tmp_path / "out" / "estimates").glob("*seed0.pca.npz"))
    with np.load(model_file) as model:
        components, mean = model["components"], model["mean"]
    X = np.random.default_rng(3).standard_normal((7, components.shape[1]))
    np.save(tmp_path / "rows.npy", X)
    done = command(bin_dir, "fedspectral", "transform", "--model", str(model_file), "--data", "rows.npy",
                   "--out", "scores.npy", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    np.testing.assert_allclose(np.load(tmp_path / "scores.npy"), (X - mean) @ components.T, rtol=0, atol=1e-12)
    again = command(bin_dir, "fedspectral", "transform", "--model", str(model_file), "--data", "rows.npy",
                    "--out", "scores.npy", cwd=tmp_path)  # never written over without --force
    assert again.returncode == 2 and again.stderr.startswith("fedspectral transform: error: --out")


def test_credentials_through_the_command(bin_dir, tmp_path):
    done = command(bin_dir, "fedspectral", "credentials", str(tmp_path / "creds"), "--nodes", "2")
    assert done.returncode == 0, done.stderr
    written = sorted(p.name for p in (tmp_path / "creds").iterdir())
    assert written == ["ca.crt", "ca.key", "node_0", "node_0.pub", "node_1", "node_1.pub", "server.key",
                       "server.pem"]
    assert (tmp_path / "creds" / "node_0").stat().st_mode & 0o777 == 0o600


def test_fedspectral_compare_keeps_working_under_its_old_name(bin_dir, tmp_path):
    done = command(bin_dir, "fedspectral-compare", str(tmp_path / "missing.toml"), "--out", str(tmp_path / "o"))
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1
    assert done.stderr.startswith("fedspectral-compare: error: ") and "missing.toml" in done.stderr


@pytest.mark.ray
@pytest.mark.timeout(300)
def test_fedspectral_run_runs_the_app_in_the_simulation_engine(bin_dir, tmp_path, flower_processes):
    """``fedspectral run`` is ``python -m simulations.engines.flwr_run``: two rounds on 3 simulated SuperNodes,
    exit 0, results written where the relative ``results-dir`` points from the directory it was typed in."""
    from simulations.engines.flwr_run import superlink_running

    if superlink_running():
        pytest.skip("a local SuperLink is already running; this test starts and stops its own")
    done = command(bin_dir, "fedspectral", "run", "--run-config", 'num-server-rounds=2 num-clients=3 results-dir="out"',
                   cwd=tmp_path, timeout=280)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert done.stdout.rstrip().endswith("flwr run status: finished:completed")
    assert pd.read_csv(tmp_path / "out" / "rounds.csv")["round"].tolist() == [0, 1, 2]  # the start and 2 rounds
    assert "Federation `@none/default` (3 simulated SuperNodes)" in done.stdout  # what Flower ran
    assert "changed from 10 to 2" not in done.stdout and "flwr federation simulation-config" not in done.stdout
    assert not superlink_running()


def test_the_run_log_leaves_out_flowers_warning_about_the_default_federation_size(capsys):
    """flwr 1.42's simulation process logs "default simulated SuperNodes changed from 10 to 2" and how to resize
    the federation on every run, also when 10 were asked for; the wrapper echoes every other line."""
    from simulations.engines.flwr_run import stream_run

    logged = ["\x1b[92mINFO \x1b[0m:      Starting Flower Simulation",
              "\x1b[93mWARNING \x1b[0m:   Since flwr 1.32, default simulated SuperNodes changed from 10 to 2.",
              "\x1b[92mINFO \x1b[0m:      Federation `@none/default` (10 simulated SuperNodes)",
              "\x1b[92mINFO \x1b[0m:      To change federation size, use the following command:",
              "\x1b[92mINFO \x1b[0m:      \tflwr federation simulation-config @none/default <superlink> --num-supernodes <N>",
              "Successfully started run 42",
              "a ServerApp line that mentions 2 SuperNodes"]
    program = f"import sys; sys.stdout.write({chr(10).join(logged) + chr(10)!r})"
    assert stream_run([sys.executable, "-c", program], dict(os.environ)) == "42"
    echoed = capsys.readouterr().out.splitlines()
    assert echoed == [logged[0], logged[2], logged[5], logged[6]]


def test_the_apps_never_import_the_user_tools():
    """fl_strategies, client_app and server_app (what the FAB ships) import nothing from ``fedspectral``; the
    tools moved there keep their old module names as the same module objects."""
    import ast
    import importlib

    for package in ("fl_strategies", "client_app", "server_app"):
        for path in (ROOT / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                         else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
                assert not [n for n in names if n == "fedspectral" or n.startswith("fedspectral.")], path
    for old, new in (("simulations.engines.flwr_run", "fedspectral.run"), ("simulations.engines.deploy",
                     "fedspectral.deploy"), ("simulations.engines.credentials", "fedspectral.credentials")):
        assert importlib.import_module(old) is importlib.import_module(new)


def test_the_user_tools_import_nothing_of_simulations_but_its_data_generators():
    """``fedspectral run``, ``deploy`` and ``credentials`` (and the helpers they share, :mod:`fedspectral.run_config`)
    reach ``simulations`` only for the data generators a simulation asks for (``simulations.data``); the shared
    helpers are the same objects under their older names in :mod:`simulations.engines`."""
    import ast

    import fedspectral.run_config as shared
    import simulations.engines as engines

    allowed = ("simulations.data.",)
    for name in ("run", "deploy", "credentials", "run_config", "cli"):
        path = ROOT / "fedspectral" / f"{name}.py"
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            bad = [n for n in names if (n == "simulations" or n.startswith("simulations."))
                   and not n.startswith(allowed)]
            assert not bad, (path, bad)
    for name in ("APP_DIR", "ArgumentError", "parse_run_config", "checked_run_config", "check_node_files",
                 "check_output_dirs", "fused_run_config", "listed"):
        assert getattr(engines, name) is getattr(shared, name)


@pytest.mark.parametrize("app_started, runs, code", [(False, 2, 0), (True, 1, 1)], ids=["before-app", "in-app"])
def test_a_run_whose_simulation_stopped_before_the_serverapp_is_started_again_once(monkeypatch, tmp_path, capsys,
                                                                                    app_started, runs, code):
    """Flower's simulation process can stop before the ServerApp starts (Ray's start-up, under load): ``fedspectral
    run`` starts such a run again, once, and says so; a run that failed inside the app is never repeated."""
    from simulations.engines import flwr_run

    calls = []

    def stream(cmd, env, app_lines=None, run_ids=None):
        calls.append(cmd)
        if app_started or len(calls) > 1:
            app_lines.append("INFO :      fedspectral: PowerStrategy(...)\n")
        return str(len(calls))

    monkeypatch.setattr(flwr_run, "stream_run", stream)
    monkeypatch.setattr(flwr_run, "run_status", lambda run_id, env: "finished:completed" if int(run_id) > 1 and
                        not app_started else "finished:failed")
    monkeypatch.setattr(flwr_run, "superlink_running", lambda *_: True)  # not started here: nothing to stop
    monkeypatch.setattr(flwr_run, "claim_superlink_port", lambda env: None)
    monkeypatch.chdir(tmp_path)
    assert flwr_run.main(["--run-config", "num-server-rounds=2"]) == code
    assert len(calls) == runs
    out, err = capsys.readouterr()
    assert ("failed before the ServerApp started" in err) == (not app_started)
    assert out.rstrip().endswith("flwr run status: " + ("finished:completed" if code == 0 else "finished:failed"))


def test_the_simulation_runs_with_one_openblas_thread_unless_set(monkeypatch):
    """OpenBLAS's thread pool hung the simulation process's ServerApp thread once (see ``simulation_env``); the
    scripted deployment keeps its own division of the cores (``flower_env`` sets no BLAS threads)."""
    from simulations.engines import flwr_run

    monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
    assert flwr_run.simulation_env()["OPENBLAS_NUM_THREADS"] == "1"
    assert "OPENBLAS_NUM_THREADS" not in flwr_run.flower_env()
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "2")
    assert flwr_run.simulation_env()["OPENBLAS_NUM_THREADS"] == "2"


def test_the_simulations_ray_starts_no_idle_workers_unless_the_user_set_it(monkeypatch):
    """``fedspectral run``'s Ray (started in Flower's simulation process, which inherits the environment) does
    not prestart a worker per CPU; a user's own setting is kept, and the scripted deployment (no Ray) sets none."""
    from fedspectral import run

    monkeypatch.delenv("RAY_prestart_worker_first_driver", raising=False)
    assert run.simulation_env()["RAY_prestart_worker_first_driver"] == "0"
    assert "RAY_prestart_worker_first_driver" not in run.flower_env()
    monkeypatch.setenv("RAY_prestart_worker_first_driver", "1")
    assert run.simulation_env()["RAY_prestart_worker_first_driver"] == "1"


def test_the_nodes_bed_products_keep_their_actors_cpus_where_the_run_sets_one_blas_thread(monkeypatch):
    """``OPENBLAS_NUM_THREADS=1`` is set for the ServerApp's thread, and the nodes' Ray actors inherit it; their
    ``.bed`` products still get the CPUs Flower gives each actor (2, at most the machine's), unless the user set
    the product threads or OPENBLAS_NUM_THREADS (then nothing else is set)."""
    from fedspectral import run
    from fl_strategies.kernels.rows import PRODUCT_THREADS_VARIABLE, product_threads

    monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
    monkeypatch.delenv(PRODUCT_THREADS_VARIABLE, raising=False)
    env = run.simulation_env()
    assert run.actor_cpus() == min(2, len(os.sched_getaffinity(0)))
    assert (env["OPENBLAS_NUM_THREADS"], env[PRODUCT_THREADS_VARIABLE]) == ("1", str(run.actor_cpus()))
    for name in ("OPENBLAS_NUM_THREADS", PRODUCT_THREADS_VARIABLE):  # as an actor sees them
        monkeypatch.setenv(name, env[name])
    assert product_threads() == run.actor_cpus()
    monkeypatch.setenv(PRODUCT_THREADS_VARIABLE, "3")
    monkeypatch.delenv("OPENBLAS_NUM_THREADS")
    assert run.simulation_env()[PRODUCT_THREADS_VARIABLE] == "3" and product_threads() == 3
    monkeypatch.delenv(PRODUCT_THREADS_VARIABLE)
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "4")
    assert PRODUCT_THREADS_VARIABLE not in run.simulation_env() and product_threads() == 4
