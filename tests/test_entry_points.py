"""Every command-line entry point turns a bad argument into one line naming it (exit 2), never a traceback, and
refuses it before any Flower process starts."""

import subprocess
import sys
import time

import pytest

from simulations.engines import APP_DIR


def _one_line(capsys, fragment):
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert fragment in err, err
    return err


def _no_flower(monkeypatch, module):
    """Fail the test if the entry point would start Flower."""
    def refuse(*args, **kwargs):
        raise AssertionError("Flower was started for a bad argument")

    for name in ("stream_run", "LocalDeployment", "write_node_files"):
        if hasattr(module, name):
            monkeypatch.setattr(module, name, refuse)


@pytest.mark.parametrize("argv, fragment", [
    (["--run-config", "num-clients=200000"], '"num-clients" is 200000 but must be between 1 and the number of rows'),
    (["--run-config", 'num-clients="abc"'], "num-clients must be an integer >= 1, got 'abc'"),
    (["--run-config", "nosuch=1"], "--run-config: unknown run-config key 'nosuch'"),
    (["--run-config", "rnak=3"], "--run-config: unknown run-config key 'rnak'. Did you mean 'rank'?"),
    (["--run-config", "rank=60 iteration-rank=60"], "\"rank\" is 60 but fedpower-model1 needs 1 <= rank < dimension"),
    (["--run-config", 'dataset="missing.npy"'], "'missing.npy': file not found"),
    (["--run-config", "epsilon=-1.0"], "epsilon must be a finite number >= 0"),
    (["--nosuch"], "unrecognized arguments: --nosuch"),
    (["--run-config", "num-clients= rank=3"], "num-clients has no value"),
])
def test_flwr_run_refuses_bad_arguments_in_one_line_before_flower(monkeypatch, capsys, argv, fragment):
    from simulations.engines import flwr_run

    _no_flower(monkeypatch, flwr_run)
    start = time.monotonic()
    try:
        code = flwr_run.main(argv)
    except SystemExit as ex:  # argparse's own refusals
        code = ex.code
    assert code == 2 and time.monotonic() - start < 20
    _one_line(capsys, fragment)


@pytest.mark.parametrize("argv, fragment", [
    (["--run-config", 'num-clients="abc"'], "num-clients must be an integer >= 1, got 'abc'"),
    (["--run-config", "num-clients=200000"], "must be between 1 and the number of rows"),
    (["--run-config", "rnak=3"], "--run-config: unknown run-config key 'rnak'. Did you mean 'rank'?"),
    (["--run-config", "num-clients=500 num-samples=20000"], "at most 200"),
    (["--port", "65528"], "--port 65528: the SuperLink and its 10 SuperNodes need ports 65528 to 65549"),
    (["--port", "80"], "--port 80:"),
    (["--port", "abc"], "argument --port: invalid int value: 'abc'"),
    (["--fault", "9=nan", "--run-config", "num-clients=3"], "--fault '9=nan': expected PID=KIND"),
    (["--data-dir", "/nonexistent", "--run-config", "num-clients=2"], "--data-dir /nonexistent: no such directory"),
])
def test_deploy_refuses_bad_arguments_in_one_line_before_flower(monkeypatch, capsys, argv, fragment):
    from simulations.engines import deploy

    _no_flower(monkeypatch, deploy)
    start = time.monotonic()
    try:
        code = deploy.main(argv)
    except SystemExit as ex:
        code = ex.code
    assert code == 2 and time.monotonic() - start < 20
    _one_line(capsys, fragment)


def test_deploy_port_65528_fails_fast_from_the_command_line():
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "simulations.engines.deploy", "--port", "65528"], cwd=APP_DIR,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and time.monotonic() - start < 30
    assert done.stderr.strip().count("\n") == 0 and "--port 65528" in done.stderr


@pytest.mark.parametrize("argv, fragment", [
    (["{d}", "--nodes", "-1"], "--nodes -1: give a number of SuperNodes in [0, 10000]"),
    (["{d}", "--nodes", "abc"], "argument --nodes: invalid int value: 'abc'"),
    (["{f}"], "is a file, not a directory"),
    (["{d}", "--host", "bad host!"], "--host 'bad host!': not an IP address or a DNS name"),
    ([], "the following arguments are required: DIR"),
])
def test_credentials_refuses_bad_arguments_in_one_line(tmp_path, capsys, argv, fragment):
    from simulations.engines.credentials import main

    (tmp_path / "file").write_text("x")
    argv = [a.format(d=tmp_path / "creds", f=tmp_path / "file") for a in argv]
    try:
        code = main(argv)
    except SystemExit as ex:
        code = ex.code
    assert code == 2
    _one_line(capsys, fragment)
    assert not (tmp_path / "creds").exists()


def test_credentials_with_a_host_name_still_work(tmp_path):
    from simulations.engines.credentials import main

    assert main([str(tmp_path / "c"), "--nodes", "1", "--host", "superlink.example.org", "--host", "10.0.0.2"]) == 0
    assert (tmp_path / "c" / "node_0.pub").is_file()


@pytest.mark.parametrize("module, argv, fragment", [
    ("simulations.experiments.fedmf.fedmf_report", ["{d}"], "results.csv: no such file"),
    ("simulations.experiments.fedmf.fedmf_report", ["{r}"], "results.csv: has no column phase"),
    ("simulations.experiments.fedmf.fedmf_report", ["{r}", "--target", "nan"], "--target nan: must be a finite"),
    ("simulations.experiments.fedmf.fedmf_report", ["{r}", "--target", "x"], "argument --target: invalid float"),
    ("simulations.experiments.fedpower.stragglers_report", ["{d}"], "results.csv: no such file"),
    ("simulations.experiments.fedpower.stragglers_report", ["{r}"], "has no column distinct_participants, round_time"),
    ("simulations.experiments.fedpower.stragglers_report", ["{r}", "--last", "0"], "--last 0: must be at least 1"),
    ("simulations.compare", ["{r}/c.toml", "--engine", "gpu"], "argument --engine: invalid choice: 'gpu'"),
])
def test_report_scripts_refuse_bad_arguments_in_one_line(tmp_path, capsys, module, argv, fragment):
    import importlib

    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "results.csv").write_text("run,strategy,seed,round,subspace_distance\na,power,0,0,1.0\n")
    main = importlib.import_module(module if module != "simulations.compare" else "simulations.compare.cli").main
    argv = [a.format(d=tmp_path / "none", r=tmp_path / "r") for a in argv]
    try:
        code = main(argv)
    except SystemExit as ex:
        code = ex.code
    assert code == 2
    _one_line(capsys, fragment)


def test_flwr_run_makes_relative_paths_absolute_against_where_it_is_run(tmp_path, monkeypatch):
    """Flower's processes resolve paths against the SuperLink's directory: the wrapper sends absolute ones."""
    from simulations.engines.flwr_run import absolute_paths

    monkeypatch.chdir(tmp_path)
    (tmp_path / "rows.npy").write_bytes(b"")
    cfg = {"results-dir": "out", "checkpoint-dir": "/abs/ck", "dataset": "rows.npy", "server-data": ""}
    assert absolute_paths(cfg) == {"results-dir": str(tmp_path / "out"), "dataset": str(tmp_path / "rows.npy")}
    assert absolute_paths({"results-dir": "", "dataset": "fedpower-model1"}) == {}
    (tmp_path / "long-range.txt").write_text("6 25000000 35000000 MHC\n")
    (tmp_path / "hg19").write_text("6 25000000 35000000 MHC\n")  # a build's name: left to exclude-range's check
    for build in ("GRCh37", "hg19"):
        assert absolute_paths({"exclude-range": build}) == {}
    assert absolute_paths({"exclude-range": "long-range.txt"}) == {"exclude-range": str(tmp_path / "long-range.txt")}


def test_a_misspelt_key_gets_the_closest_valid_one_on_every_path():
    """The engines' config (fused_run_config), the ServerApp's validation and compare share one suggestion."""
    from fl_strategies.settings.config import ConfigError, suggest
    from server_app.app import build_strategy
    from simulations.engines import fused_run_config

    assert suggest("rnak", ["rank", "seed"]) == " Did you mean 'rank'?" and suggest("zzzz", ["rank"]) == ""
    with pytest.raises(ConfigError, match=r"unknown run-config key 'rnak'\. Did you mean 'rank'\?"):
        fused_run_config({"rnak": 3})
    with pytest.raises(ConfigError, match=r"unknown run-config key 'rnak'\. Did you mean 'rank'\?"):
        build_strategy({**fused_run_config({}), "rnak": 3})
