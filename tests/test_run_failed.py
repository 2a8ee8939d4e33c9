"""Failure is failure: a run whose every reply was rejected, dropped or late, or whose estimate never moved from
its start, ends as a failed run (``RunFailed``, no PCA model, a non-zero exit), never as a result."""

from __future__ import annotations

import logging
import re

import numpy as np
import pandas as pd
import pytest

from conftest import run_aborted, run_app
from fl_strategies.settings.registry import STRATEGIES
from simulations.compare import main as compare_main

NONE_ACCEPTED = "no client reply was accepted in any of its 4 round(s)"


def _zero_folder(path):
    path.mkdir()
    for i in range(3):
        np.save(path / f"partition_{i}.npy", np.zeros((20, 6)))
    return str(path)


DEGENERATE = "the data of its 3 node(s) are degenerate (sum of squares 0 at every node"

NEEDS = {"dp-power": dict(secagg_clip=1.0), "dp-krylov": dict(secagg_clip=1.0)}
"""What a strategy needs besides its spec's server inputs to run on a folder of node files."""


def _inputs(name: str, tmp_path) -> dict:
    """The run-config overrides a strategy's spec says it needs at the server (its own rows: all zero too)."""
    inputs = STRATEGIES[name].server_inputs
    overrides = dict(NEEDS.get(name, {}))
    if "server-rows" in inputs:
        np.save(tmp_path / "server.npy", np.zeros((10, 6)))
        overrides["server_data"] = str(tmp_path / "server.npy")
    if "singular-values" in inputs:
        overrides.update(mf_sigma_1=1.0, mf_sigma_r=0.5)
    return overrides


@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_every_strategy_fails_on_all_zero_data_naming_it(tmp_path, name, caplog):
    """One rule (the base strategy's) for every registered strategy: all-zero node data leave nothing to
    estimate, so the run is FAILED with that reason and writes no model, whatever the family."""
    caplog.set_level(logging.CRITICAL, logger="flwr")
    strategy = run_aborted(re.escape(DEGENERATE), strategy=name, dataset=_zero_folder(tmp_path / "zero"),
                           num_clients=3, rank=2, num_server_rounds=3, results_dir=str(tmp_path / "out"),
                           **_inputs(name, tmp_path))
    assert strategy.failure.startswith(DEGENERATE)
    assert not (tmp_path / "out" / "pca.npz").exists()


@pytest.mark.parametrize("name", ["fedave", "fedlrgd"])
def test_an_erm_run_whose_optimum_is_its_start_is_a_result(tmp_path, name):
    """Ridge regression on labels all zero: ``theta = 0`` is the optimum and the start, so the estimate never
    moves; the features are not zero, so the run is a result, not a failure."""
    rng = np.random.default_rng(0)
    folder = tmp_path / "labels-zero"
    folder.mkdir()
    for i in range(3):
        np.save(folder / f"partition_{i}.npy", np.c_[rng.standard_normal((20, 5)), np.zeros(20)])
    np.save(tmp_path / "server.npy", np.c_[rng.standard_normal((10, 5)), np.zeros(10)])
    strategy = run_app(strategy=name, dataset=str(folder), server_data=str(tmp_path / "server.npy"), loss="ridge",
                       num_clients=3, num_server_rounds=3)
    assert strategy.failure is None and not strategy.iterates.moved
    assert np.array_equal(strategy.iterates[-1], np.zeros(5))


@pytest.mark.parametrize("overrides, reason", [
    (dict(strategy="fedpower", noise_std=1e308, row_normalize=True), NONE_ACCEPTED + " (40 rejected"),
    (dict(strategy="fedave", dataset="erm-ridge", loss="ridge", step_schedule="const", step_max=1e308),
     NONE_ACCEPTED),
    (dict(strategy="fedpower", dropout=0.999999), NONE_ACCEPTED + " (0 rejected, 40 failed or dropped out"),
    (dict(strategy="fedpower", round_policy="deadline", deadline=1e-9, latency_model="shifted-exp",
          latency_shift=1.0), NONE_ACCEPTED),
], ids=["noise-std-1e308", "fedave-step-1e308", "every-client-dropped", "every-client-late"])
def test_a_run_without_an_accepted_reply_fails(tmp_path, overrides, reason, caplog):
    caplog.set_level(logging.CRITICAL, logger="flwr")
    strategy = run_aborted(re.escape(reason), num_server_rounds=4, results_dir=str(tmp_path / "out"), **overrides)
    assert [row["round"] for row in strategy.records] == [0, 1, 2, 3, 4]  # the rows say what happened
    assert not (tmp_path / "out" / "pca.npz").exists()


def test_a_run_on_all_zero_data_fails_without_a_model(tmp_path, caplog):
    caplog.set_level(logging.CRITICAL, logger="flwr")
    strategy = run_aborted(re.escape(DEGENERATE), strategy="power",
                           dataset=_zero_folder(tmp_path / "zero"), num_clients=3, rank=2, num_server_rounds=4,
                           results_dir=str(tmp_path / "out"))
    assert all(row["participants"] == 3 for row in strategy.records[1:])  # accepted, but carrying nothing
    assert not (tmp_path / "out" / "pca.npz").exists()


def test_a_run_with_some_accepted_replies_is_not_a_failure():
    strategy = run_app(strategy="fedpower", dropout=0.6, clients_per_round=2, num_server_rounds=6)
    participants = [row["participants"] for row in strategy.records[1:]]
    assert 0 in participants and any(participants)  # some rounds lost every client, the run still counts
    assert strategy.failure is None


def test_compare_marks_a_failed_run_and_exits_non_zero(tmp_path, capsys):
    config = tmp_path / "c.toml"
    config.write_text("""
seeds = [0]
[defaults]
num-clients = 3
num-samples = 300
dimension = 8
rank = 2
iteration-rank = 2
num-server-rounds = 3
[[runs]]
name = "good"
strategy = "fedpower"
[[runs]]
name = "drowned"
strategy = "fedpower"
row-normalize = true
noise-std = 1e308
""")
    out = tmp_path / "o"
    assert compare_main([str(config), "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert "fedspectral: run FAILED: run 'drowned' seed 0: " in err
    assert "'good'" not in err
    summary = (out / "summary.md").read_text()
    assert "| drowned **FAILED** |" in summary and "| good |" in summary
    assert "- drowned: seed 0: " in summary
    results = pd.read_csv(out / "results.csv", keep_default_na=False)
    assert set(results.loc[results["run"] == "good", "failure"]) == {""}
    assert all(results.loc[results["run"] == "drowned", "failure"].str.len() > 0)
    estimates = sorted(p.name for p in (out / "estimates").iterdir())
    assert estimates and all(name.startswith("good") for name in estimates)  # no result of the failed run


@pytest.mark.parametrize("error, explained", [(RuntimeError("disk on fire"), False), ("run-failed", True)])
def test_the_run_status_is_the_last_line_of_the_server_log(monkeypatch, error, explained):
    """After ``main`` raised, Flower's ``flwr-serverapp`` logs the exception (with its traceback) and its exit
    message (``flwr/superlink/runtime/run_serverapp.py``, ``flwr/supercore/exit/exit.py``); the status line still
    ends the log, and a failure of ours (``RunFailed``) shows no traceback."""
    import io

    from flwr.common.logger import log as flower_log
    from flwr.supercore.exit.exit_code import EXIT_CODE_HELP, ExitCode

    import server_app.app as server_app
    from fl_strategies.protocol.base import RunFailed

    error = RunFailed("no client reply was accepted in any of its 4 round(s)") if error == "run-failed" else error

    def failing(grid, context):
        raise error

    monkeypatch.setattr(server_app, "run_server", failing)
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    flower = logging.getLogger("flwr")
    flower.addHandler(handler)
    monkeypatch.setattr(flower, "level", logging.INFO)
    try:
        with pytest.raises(type(error)) as info:
            server_app.main(None, None)
        flower_log(logging.ERROR, "%s raised an exception", "ServerApp", exc_info=info.value)  # as Flower does
        code = ExitCode.SERVERAPP_EXCEPTION
        flower_log(logging.ERROR, f"Exit Code: {code}\n{EXIT_CODE_HELP[code]}\n\nFor more information, visit: <x>")
        flower_log(logging.ERROR, "Exit Code: 1\nanother process, later")  # the filter is gone after one message
    finally:
        flower.removeHandler(handler)
    lines = stream.getvalue().splitlines()
    status = f"fedspectral: run FAILED: {'' if explained else 'RuntimeError: '}{error}"
    assert lines[0] == status and lines[-3] == status, lines
    assert lines[-2:] == ["Exit Code: 1", "another process, later"]
    assert ("Traceback (most recent call last):" in lines) is not explained
    assert not any(isinstance(f, server_app.LastWord) for f in flower.filters)


def test_compare_marks_a_faps_run_on_all_zero_data_failed(tmp_path, capsys):
    """The rule reaches the comparison: FAILED in its summary, a non-zero exit."""
    config = tmp_path / "c.toml"
    config.write_text(f"""
seeds = [0]
[defaults]
dataset = "{_zero_folder(tmp_path / 'zero')}"
num-clients = 3
rank = 2
num-server-rounds = 3
[[runs]]
name = "faps-on-zeros"
strategy = "faps"
""")
    out = tmp_path / "o"
    assert compare_main([str(config), "--out", str(out)]) == 1
    assert "fedspectral: run FAILED: run 'faps-on-zeros' seed 0: " + DEGENERATE in capsys.readouterr().err
    assert "| faps-on-zeros **FAILED** |" in (out / "summary.md").read_text()
