"""Checkpoints and resume (fl_strategies/protocol/checkpoint.py): a killed server continues where it stopped."""

import numpy as np
import pandas as pd
import pytest

from conftest import run_app
from fl_strategies.protocol import checkpoint as ck
from fl_strategies.settings.config import ConfigError
from fl_strategies.files.pca import load_model

FEDPOWER = dict(num_clients=4, num_samples=2000, dimension=15, num_server_rounds=6, clients_per_round=2,
                local_steps=2, row_normalize=True, epsilon=8.0)  # partial participation and seeded noise
SSI = dict(strategy="ssi", dataset="faps-geometric", row_normalize=False, dimension=30, num_samples=300, xi=1.3,
           partitioner="linear", num_clients=3, rank=2, iteration_rank=2, num_server_rounds=300, stop_tol=1e-6)  # stopping rule: rows held a round


class Killed(BaseException):
    """Stands for the ServerApp process being killed (not an Exception: nothing may catch it)."""


def kill_server(monkeypatch, after_round: int, before_save: bool) -> None:
    """Make the server die in round ``after_round``, just after (or just before) its checkpoint is saved."""
    save = ck.Checkpoint.save

    def dying_save(self, server_round, parameters, strategy):
        if before_save and server_round == after_round:
            raise Killed(server_round)
        save(self, server_round, parameters, strategy)
        if server_round == after_round:
            raise Killed(server_round)

    monkeypatch.setattr(ck.Checkpoint, "save", dying_save)


def table(directory) -> pd.DataFrame:
    return pd.read_csv(directory / "rounds.csv").drop(columns="wall_time")


@pytest.mark.parametrize("over, after_round, before_save", [
    (FEDPOWER, 3, False),  # killed between rounds
    (FEDPOWER, 4, True),  # killed after round 4's row was written, before its checkpoint
    (FEDPOWER, 6, False),  # killed after the last round: the noisy run's model comes from the checkpoint
    (SSI, 5, False),  # the stopping rule holds each row one round: the held row is in the checkpoint
], ids=["fedpower", "fedpower-row-without-checkpoint", "fedpower-after-the-last-round", "ssi-stop-tol"])
def test_kill_and_resume_gives_the_uninterrupted_results(tmp_path, monkeypatch, over, after_round, before_save):
    whole = run_app(results_dir=str(tmp_path / "whole"), **over)
    out = tmp_path / "run"
    with monkeypatch.context() as patch:
        kill_server(patch, after_round, before_save)
        with pytest.raises(Killed):
            run_app(results_dir=str(out), checkpoint_dir=str(out), **over)
    before = (out / "rounds.csv").read_text().splitlines()
    resumed = run_app(results_dir=str(out), checkpoint_dir=str(out), resume=True, **over)
    after = (out / "rounds.csv").read_text().splitlines()
    # the rows the checkpoint covers are kept byte for byte (wall_time included): appended, never overwritten
    covered = after_round if before_save else after_round + 1  # header + rows 0 .. last checkpointed round
    if over.get("stop_tol"):
        covered -= 1  # the row of the checkpointed round was still held (not yet written) at the kill
    assert len(before) >= covered and after[: covered + 1] == before[: covered + 1]
    pd.testing.assert_frame_equal(table(out), table(tmp_path / "whole"))
    np.testing.assert_array_equal(resumed.estimate, whole.estimate)
    np.testing.assert_array_equal(np.load(out / "estimate.npy"), np.load(tmp_path / "whole" / "estimate.npy"))
    assert len(resumed.iterates) == len(whole.iterates)
    strip = [{k: v for k, v in r.items() if k != "wall_time"} for r in resumed.records]
    assert strip == [{k: v for k, v in r.items() if k != "wall_time"} for r in whole.records]
    if over.get("stop_tol"):
        assert resumed.stopped and len(resumed.records) < over["num_server_rounds"]
    model, whole_model = load_model(out / "pca.npz"), load_model(tmp_path / "whole" / "pca.npz")
    for key in ("components", "mean", "explained_variance", "privacy"):
        np.testing.assert_array_equal(model[key], whole_model[key])


def test_resume_refuses_what_it_cannot_continue(tmp_path, monkeypatch):
    small = dict(num_clients=3, num_samples=600, dimension=10, num_server_rounds=3)
    with pytest.raises(ConfigError, match="resume = true needs checkpoint-dir"):
        run_app(resume=True, **small)
    with pytest.raises(ConfigError, match="no checkpoint"):
        run_app(checkpoint_dir=str(tmp_path / "none"), resume=True, **small)
    with pytest.raises(ConfigError, match="strategy 'faps' cannot resume: each FAPS client keeps"):
        run_app(**dict(SSI, strategy="faps", checkpoint_dir=str(tmp_path)))
    with pytest.raises(ConfigError, match="fedlrgd' cannot resume"):
        run_app(strategy="fedlrgd", dataset="erm-ridge", checkpoint_dir=str(tmp_path))
    with pytest.raises(ConfigError, match="noise-source = \"os\".*twice"):
        run_app(checkpoint_dir=str(tmp_path), noise_source="os", noise_std=0.01, row_normalize=True, **small)
    with monkeypatch.context() as patch:
        kill_server(patch, 1, False)
        with pytest.raises(Killed):
            run_app(checkpoint_dir=str(tmp_path), **small)
    with pytest.raises(ConfigError, match="another run config \\(num-server-rounds = 3 there, 4 here\\)"):
        run_app(checkpoint_dir=str(tmp_path), resume=True, **dict(small, num_server_rounds=4))
    # round-timeout may change; the run then finishes from the checkpoint
    done = run_app(checkpoint_dir=str(tmp_path), resume=True, round_timeout=30.0, **small)
    assert [r["round"] for r in done.records] == [0, 1, 2, 3]


SMALL = dict(num_clients=3, num_samples=600, dimension=10, num_server_rounds=3)


def _rewrite(path, edit, keep_checksum: bool = False) -> None:
    """Rewrite a checkpoint after ``edit(doc, arrays)``, with a valid checksum (a deliberate, consistent edit)
    or, with ``keep_checksum``, the old one (an edit that does not know about the checksum)."""
    import json

    with np.load(path, allow_pickle=False) as npz:
        arrays = {k: npz[k] for k in npz.files}
    doc = json.loads(str(arrays.pop("state")))
    old = arrays.pop("checksum")
    listed = [arrays[f"a{i}"] for i in range(len(arrays))]
    edit(doc, listed)
    text = json.dumps(doc)
    np.savez(path, state=np.array(text), checksum=old if keep_checksum else np.array(ck._checksum(text, listed)),
             **{f"a{i}": a for i, a in enumerate(listed)})


def _set_round(value):
    return lambda doc, arrays: doc.update(round=value)


def _bad_shape(doc, arrays):
    arrays[doc["parameters"][0]["__array__"]] = np.zeros((10, 7))


@pytest.mark.parametrize("damage, match", [
    (lambda p: p.write_bytes(p.read_bytes()[: len(p.read_bytes()) // 2]), "cannot be read \\(truncated or damaged"),
    (lambda p: p.write_bytes(b""), "cannot be read"),
    (lambda p: p.write_bytes(bytes(b ^ 0xFF if i == len(p.read_bytes()) // 2 else b
                                   for i, b in enumerate(p.read_bytes()))), "cannot be read|fails its checksum"),
    (lambda p: _rewrite(p, _set_round(-5), keep_checksum=True), "fails its checksum"),
    (lambda p: _rewrite(p, _set_round(-5)), "has round -5, outside \\[0, 3\\]"),
    (lambda p: _rewrite(p, _set_round(9)), "has round 9, outside \\[0, 3\\]"),
    (lambda p: _rewrite(p, _set_round(1)), "has rows of rounds"),
    (lambda p: _rewrite(p, _bad_shape), "estimate of shape"),
    (lambda p: _rewrite(p, lambda doc, arrays: doc.update(version=1)), "has format 1, expected 2"),
], ids=["truncated", "empty", "bit-flip", "edited-round", "round-negative", "round-beyond", "round-rows",
        "shape", "version"])
def test_a_damaged_or_tampered_checkpoint_is_refused_with_a_clear_error(tmp_path, damage, match):
    run_app(checkpoint_dir=str(tmp_path), **SMALL)
    path = tmp_path / ck.CHECKPOINT_FILE
    damage(path)
    with pytest.raises(ConfigError, match=match) as info:
        run_app(checkpoint_dir=str(tmp_path), resume=True, **SMALL)
    assert str(path) in str(info.value) and "\n" not in str(info.value)


def test_an_intact_checkpoint_still_resumes(tmp_path):
    run_app(checkpoint_dir=str(tmp_path), **SMALL)
    _rewrite(tmp_path / ck.CHECKPOINT_FILE, lambda doc, arrays: None)  # same content, recomputed checksum
    done = run_app(checkpoint_dir=str(tmp_path), resume=True, **SMALL)
    assert [r["round"] for r in done.records] == [0, 1, 2, 3]


def test_a_failing_checkpoint_write_is_reported_and_the_run_goes_on(tmp_path, monkeypatch, caplog):
    import logging

    savez = np.savez

    def full_disk(fh, **arrays):
        if int(str(arrays["state"]).split('"round": ')[1].split(",")[0]) >= 2:
            raise OSError(28, "No space left on device")
        savez(fh, **arrays)

    over = dict(SMALL, num_server_rounds=4)
    whole = run_app(**over)
    with monkeypatch.context() as patch, caplog.at_level(logging.ERROR, logger="flwr.fedspectral"):
        patch.setattr(ck.np, "savez", full_disk)
        run = run_app(checkpoint_dir=str(tmp_path), **over)
    assert [r["round"] for r in run.records] == [0, 1, 2, 3, 4]
    np.testing.assert_array_equal(run.estimate, whole.estimate)
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 3 and "checkpoint after round 2 could not be written" in errors[0]
    assert "No space left on device" in errors[0] and "the checkpoint of round 1 is kept" in errors[-1]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint.npz"]  # no temporary file left
    resumed = run_app(checkpoint_dir=str(tmp_path), resume=True, **over)  # from round 1
    assert [r["round"] for r in resumed.records] == [0, 1, 2, 3, 4]
    np.testing.assert_array_equal(resumed.estimate, whole.estimate)


def test_rows_of_a_resumed_run_keep_the_columns_its_rounds_csv_was_begun_with(tmp_path, caplog):
    """A run resumed from one begun by a version that wrote other columns: the new rows go under the file's own
    header (a column it lacks left out, with a WARNING; a column the record lacks empty), never shifted."""
    from server_app.results import ResultsWriter

    (tmp_path / "rounds.csv").write_text("round,old_column,objective\n1,x,0.5\n")
    writer = ResultsWriter(tmp_path, keep=True)
    writer({"round": 2, "objective": 0.25, "new_column": 7}, np.zeros((3, 1)))
    writer({"round": 3, "objective": 0.125, "new_column": 8}, np.zeros((3, 1)))
    assert (tmp_path / "rounds.csv").read_text().splitlines() == [
        "round,old_column,objective", "1,x,0.5", "2,,0.25", "3,,0.125"]
    assert sum("new_column not written" in r.getMessage() for r in caplog.records) == 1
    fresh = ResultsWriter(tmp_path / "fresh")
    fresh({"round": 1, "objective": 0.5, "new_column": 7}, np.zeros((3, 1)))
    assert (tmp_path / "fresh" / "rounds.csv").read_text().splitlines() == ["round,objective,new_column",
                                                                             "1,0.5,7"]
