"""Checkpoint edges the mutation run of fl_strategies/protocol/checkpoint.py showed untested: the format number's
presence and the strategy's own round count as the upper bound of a checkpoint's round."""

from __future__ import annotations

import errno
import json
import logging
import os

import numpy as np
import pytest

from fl_strategies.protocol import checkpoint as ck
from fl_strategies.settings.config import ConfigError
from conftest import run_app
from test_resume import SMALL, Killed, kill_server
from test_resume_guards import _copy, _open, _write, saved  # noqa: F401  (saved is a fixture)


@pytest.mark.parametrize("change", ["no format number", "an older format", "not a table"])
def test_a_document_of_another_format_is_refused_naming_it(saved, tmp_path, change):  # noqa: F811
    """A file of another layout is refused even when its checksum is valid (anyone can compute one)."""
    path, cfg = _copy(saved, tmp_path)
    text, _, arrays = _open(path)
    doc = json.loads(text)
    if change == "no format number":
        del doc["version"]
    elif change == "an older format":
        doc["version"] = ck.FORMAT_VERSION - 1
    else:
        doc = [doc]
    text = json.dumps(doc)
    _write(path, text, ck._checksum(text, arrays), arrays)
    found = ck.FORMAT_VERSION - 1 if change == "an older format" else None
    with pytest.raises(ConfigError, match=f"has format {found}, expected {ck.FORMAT_VERSION}"):
        ck.Checkpoint(tmp_path, cfg, num_rounds=SMALL["num_server_rounds"])


def test_the_round_is_bounded_by_the_strategys_round_count_not_only_the_config(saved, tmp_path):  # noqa: F811
    """A strategy may run fewer rounds than ``num-server-rounds`` (e.g. a shorter schedule): a checkpoint past
    its last round is refused."""
    path, cfg = _copy(saved, tmp_path)
    done = ck.Checkpoint(tmp_path, cfg, num_rounds=SMALL["num_server_rounds"]).resumed["round"]
    assert done == cfg["num-server-rounds"] >= 1
    with pytest.raises(ConfigError, match=rf"has round {done}, outside \[0, {done - 1}\]"):
        ck.Checkpoint(tmp_path, cfg, num_rounds=done - 1)


class _Pickled:
    """An object whose unpickling creates the directory ``marker``: loading it would run code."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return os.mkdir, (self.marker,)


def test_a_checkpoint_holding_a_pickled_object_is_refused_without_running_it(saved, tmp_path):  # noqa: F811
    path, cfg = _copy(saved, tmp_path)
    text, checksum, arrays = _open(path)
    marker = tmp_path / "ran"
    arrays[0] = np.array([_Pickled(marker)], dtype=object)
    _write(path, text, checksum, arrays)
    with pytest.raises(ConfigError, match="cannot be read"):
        ck.Checkpoint(tmp_path, cfg, num_rounds=SMALL["num_server_rounds"])
    assert not marker.exists()


class _State:
    """The one method of a strategy that :meth:`Checkpoint.save` calls."""

    def state_dict(self):
        return {"records": []}


def test_a_failed_write_names_the_checkpoint_that_is_kept(saved, tmp_path, monkeypatch, caplog):  # noqa: F811
    """None before the first write succeeds; after it, the last round written."""
    _, cfg = saved
    checkpoint = ck.Checkpoint(tmp_path, dict(cfg, resume=False))
    savez = ck.np.savez

    def full_disk(fh, **arrays):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with caplog.at_level(logging.ERROR, logger="flwr.fedspectral"):
        monkeypatch.setattr(ck.np, "savez", full_disk)
        checkpoint.save(1, [np.eye(3, 2)], _State())
        assert checkpoint.saved_round is None and not (tmp_path / ck.CHECKPOINT_FILE).exists()
        monkeypatch.setattr(ck.np, "savez", savez)
        checkpoint.save(2, [np.eye(3, 2)], _State())
        assert checkpoint.saved_round == 2 and (tmp_path / ck.CHECKPOINT_FILE).exists()
        monkeypatch.setattr(ck.np, "savez", full_disk)
        checkpoint.save(3, [np.eye(3, 2)], _State())
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 2
    assert errors[0].endswith("the run goes on and no checkpoint is kept for resume")
    assert errors[1].endswith("the run goes on and the checkpoint of round 2 is kept for resume")


def test_a_run_killed_in_its_first_round_resumes_from_the_checkpoint_of_round_0(tmp_path, monkeypatch):
    """The server saves the state after round 0 (the first evaluation); a kill in round 1 resumes from it."""
    with monkeypatch.context() as patch, pytest.raises(Killed):
        kill_server(patch, 0, before_save=False)
        run_app(checkpoint_dir=str(tmp_path), **SMALL)
    cfg = dict(run_app(**SMALL).cfg, resume=True, **{"checkpoint-dir": str(tmp_path)})
    assert ck.Checkpoint(tmp_path, cfg, num_rounds=SMALL["num_server_rounds"]).resumed["round"] == 0


def _forge(path, change) -> None:
    """Apply ``change(doc)`` and write the checkpoint with a valid checksum, as a forger would."""
    text, _, arrays = _open(path)
    doc = json.loads(text)
    change(doc)
    text = json.dumps(doc)
    _write(path, text, ck._checksum(text, arrays), arrays)


FORGED = [
    ("round-true", lambda d: d.update(round=True), "has round True"),
    ("round-float", lambda d: d.update(round=float(d["round"])), r"has round \d\.0"),
    ("no-parameters", lambda d: d.update(parameters=[]), "holds no parameters"),
    ("no-held-row", lambda d: d["strategy"].pop("held"), "holds no strategy state"),
    ("two-rows-missing", lambda d: d["strategy"].update(records=d["strategy"]["records"][:-2]),
     "has rows of rounds"),
    ("a-negative-count-after-text-and-nan", lambda d: d["strategy"]["records"].__setitem__(
        1, {"note": None, "spent": float("nan"), "extra_bytes": -1, **d["strategy"]["records"][1]}),
     r"extra_bytes = -1, outside \[0, inf\)"),
    ("distance-between-one-and-two", lambda d: d["strategy"]["records"][1].update(subspace_distance=1.5),
     r"subspace_distance = 1.5, outside \[0, 1\]"),
    ("sizes-text-partition", lambda d: d["strategy"].update(sizes=[["0", 200], [1, 200], [2, 200]]),
     "malformed partition sizes"),
    ("sizes-partition-at-the-client-count", lambda d: d["strategy"].update(sizes=[[0, 200], [1, 200], [3, 200]]),
     "malformed partition sizes"),
    ("estimates-not-a-list", lambda d: d["strategy"].update(iterates={}), "holds no rows or estimates"),
    ("fewer-estimates-counted-than-held", lambda d: d["strategy"].update(iterate_count=1),
     r"holds 3 estimate\(s\) standing for 1"),
    ("no-estimates", lambda d: d["strategy"].update(iterates=[], iterate_count=0, iterate_first_moved=None),
     r"holds 0 estimate\(s\) standing for 0"),
    ("estimate-count-not-an-int", lambda d: d["strategy"].update(iterate_count="9"),
     r"standing for '9'"),
    ("first-moved-beyond-the-count", lambda d: d["strategy"].update(iterate_first_moved=99),
     r"holds the first moved estimate 99, not a position in 1 \.\. \d+"),
    ("held-row-without-its-estimate", lambda d: d["strategy"].update(held=[{}]), "malformed held row"),
    ("a-key-missing-from-the-saved-config", lambda d: d["config"].pop("seed"), "seed = None there"),
    ("an-estimate-that-is-not-an-array", lambda d: d["strategy"]["iterates"].__setitem__(1, [[1.0, 0.0]]),
     "holds an estimate of shape None"),
    ("fingerprints-none", lambda d: d["strategy"].update(fingerprints=None), "malformed data fingerprints"),
    ("fingerprints-an-empty-table", lambda d: d["strategy"].update(fingerprints={}), "malformed data fingerprints"),
    ("fingerprint-empty", lambda d: d["strategy"].update(fingerprints=[[0, ""]]), "malformed data fingerprints"),
    ("fingerprint-of-129-characters", lambda d: d["strategy"].update(fingerprints=[[0, "f" * 129]]),
     "malformed data fingerprints"),
    ("fingerprint-three-items", lambda d: d["strategy"].update(fingerprints=[[0, "ab", "cd"]]),
     "malformed data fingerprints"),
    ("fingerprint-of-a-partition-twice", lambda d: d["strategy"].update(fingerprints=[[0, "ab"], [0, "ab"]]),
     "malformed data fingerprints"),
]



def _records(d) -> list:
    return d["strategy"]["records"]


def _held_last_row(d, round_shown=None) -> None:
    """The last row moved to the held row (as under a stopping rule), with its round shown as ``round_shown``."""
    row = _records(d).pop()
    d["strategy"]["held"] = [dict(row, round=row["round"] if round_shown is None else round_shown),
                             d["strategy"]["iterates"][-1]]


CROSS_FIELD = [  # each field well formed on its own; together they are not one run's state
    ("rows-stop-at-round-2-count-says-6", lambda d: (_records(d).pop(), d["strategy"].update(iterate_count=6)),
     r"has 3 row\(s\) and an iterate count of 6 for round 3 \(both must be 4\)"),
    ("rows-one-short-without-a-held-row", lambda d: _records(d).pop(),
     r"has 3 row\(s\) and an iterate count of 4 for round 3"),
    ("count-one-short", lambda d: d["strategy"].update(iterate_count=3), r"an iterate count of 3 for round 3"),
    ("a-held-row-besides-every-row", lambda d: d["strategy"].update(held=[_records(d)[-1], d["parameters"][0]]),
     r"has 4 row\(s\) and a held row and an iterate count of 4 for round 3"),
    ("held-row-of-an-earlier-round", lambda d: _held_last_row(d, round_shown=2),
     "holds a held row of round 2 for round 3"),
    ("parameters-an-earlier-estimate", lambda d: d.update(parameters=[d["strategy"]["iterates"][1]]),
     "holds parameters or a held estimate that differ from its newest estimate"),
    ("held-estimate-an-earlier-one", lambda d: (_held_last_row(d), d["strategy"]["held"].__setitem__(
        1, d["strategy"]["iterates"][1])), "holds parameters or a held estimate that differ"),
    ("never-moved-though-its-estimates-differ", lambda d: d["strategy"].update(iterate_first_moved=None),
     r"holds the first moved estimate None but the estimate\(s\) at \[2, 3\]"),
    ("first-moved-after-an-estimate-that-moved", lambda d: d["strategy"].update(iterate_first_moved=3),
     r"holds the first moved estimate 3 but the estimate\(s\) at \[2, 3\]"),
    ("fewer-partitions-than-participants", lambda d: d["strategy"].update(
        sizes=d["strategy"]["sizes"][:2], fingerprints=d["strategy"]["fingerprints"][:2]),
     r"more distinct participants than its 2 partition size\(s\)"),
]


@pytest.mark.parametrize("change, match", [c[1:] for c in CROSS_FIELD], ids=[c[0] for c in CROSS_FIELD])
def test_a_forged_state_whose_fields_disagree_is_refused(saved, tmp_path, change, match):  # noqa: F811
    """Re-checksummed edits that keep every field well formed but break what one field says of another."""
    path, cfg = _copy(saved, tmp_path)
    _forge(path, change)
    with pytest.raises(ConfigError, match=match) as info:
        ck.Checkpoint(tmp_path, cfg, num_rounds=SMALL["num_server_rounds"])
    assert "\n" not in str(info.value)


def test_a_resume_from_rows_that_stop_before_the_iterate_count_is_refused_before_round_1(saved, tmp_path,
                                                                                         caplog):  # noqa: F811
    """The whole app: one ConfigError naming the disagreement, and no row written to results-dir."""
    path, cfg = _copy(saved, tmp_path)
    _forge(path, CROSS_FIELD[0][1])
    out = tmp_path / "out"
    with pytest.raises(ConfigError, match=CROSS_FIELD[0][2]):
        run_app(checkpoint_dir=str(tmp_path), resume=True, results_dir=str(out), **SMALL)
    assert not (out / "rounds.csv").exists()

@pytest.mark.parametrize("change, match", [c[1:] for c in FORGED], ids=[c[0] for c in FORGED])
def test_a_forged_state_of_the_wrong_kind_is_refused(saved, tmp_path, change, match):  # noqa: F811
    path, cfg = _copy(saved, tmp_path)
    _forge(path, change)
    with pytest.raises(ConfigError, match=match):
        ck.Checkpoint(tmp_path, cfg, num_rounds=SMALL["num_server_rounds"])


def test_a_changed_config_names_at_most_five_keys(saved, tmp_path):  # noqa: F811
    path, cfg = _copy(saved, tmp_path)
    changed = sorted(k for k, v in cfg.items() if isinstance(v, int) and not isinstance(v, bool)
                     and k not in ck.SAME_KEYS_EXEMPT)[:6]
    assert len(changed) == 6
    _forge(path, lambda d: d["config"].update({k: d["config"][k] + 1 for k in changed}))
    with pytest.raises(ConfigError, match="another run config") as info:
        ck.Checkpoint(tmp_path, cfg, num_rounds=SMALL["num_server_rounds"])
    assert str(info.value).count(" there, ") == 5


def test_estimates_of_another_width_than_the_iteration_rank_are_refused(saved, tmp_path):  # noqa: F811
    """Every estimate one column short, still orthonormal and all of one shape: only the rank check sees it."""
    path, cfg = _copy(saved, tmp_path)
    text, _, arrays = _open(path)
    r = cfg["iteration-rank"]
    assert r >= 2
    arrays = [a[:, :-1] if a.ndim == 2 and a.shape[1] == r else a for a in arrays]
    _write(path, text, ck._checksum(text, arrays), arrays)
    with pytest.raises(ConfigError, match=rf"holds an estimate of shape \(\d+, {r - 1}\); this run iterates {r}"):
        ck.Checkpoint(tmp_path, cfg, num_rounds=SMALL["num_server_rounds"])


def test_a_row_at_the_largest_subspace_distance_is_accepted(saved, tmp_path):  # noqa: F811
    """A distance of exactly 1 (orthogonal subspaces) is one a run can write."""
    path, cfg = _copy(saved, tmp_path)
    _forge(path, lambda d: d["strategy"]["records"][1].update(subspace_distance=1.0))
    resumed = ck.Checkpoint(tmp_path, cfg, num_rounds=SMALL["num_server_rounds"]).resumed
    assert resumed["strategy"]["records"][1]["subspace_distance"] == 1.0


def test_fingerprints_of_one_to_128_characters_are_well_formed(saved, tmp_path):  # noqa: F811
    """The format check takes any fingerprint of 1 to 128 characters (whether it is the node's is checked when the
    nodes report theirs)."""
    path, cfg = _copy(saved, tmp_path)
    fingerprints = [[0, "a"], [1, "f" * 128]]
    _forge(path, lambda d: d["strategy"].update(fingerprints=fingerprints))
    resumed = ck.Checkpoint(tmp_path, cfg, num_rounds=SMALL["num_server_rounds"]).resumed
    assert resumed["strategy"]["fingerprints"] == fingerprints


def test_the_first_moved_estimate_is_a_position_below_the_estimate_count(saved, tmp_path):  # noqa: F811
    """Position ``count`` is past the last estimate the run made: refused, naming the positions allowed."""
    path, cfg = _copy(saved, tmp_path)
    strat = json.loads(_open(path)[0])["strategy"]
    count = strat.get("iterate_count", len(strat["iterates"]))
    assert count >= 2
    _forge(path, lambda d: d["strategy"].update(iterate_count=count, iterate_first_moved=count))
    with pytest.raises(ConfigError, match=rf"first moved estimate {count}, not a position in 1 \.\. {count - 1};"):
        ck.Checkpoint(tmp_path, cfg, num_rounds=SMALL["num_server_rounds"])


def test_a_partition_of_one_row_is_well_formed_and_one_of_none_is_not(saved, tmp_path):  # noqa: F811
    """A node may hold a single row; a partition without rows is never one a run could have counted."""
    path, cfg = _copy(saved, tmp_path)
    sizes = [[0, 1], [1, 200], [2, 200]]
    _forge(path, lambda d: d["strategy"].update(sizes=sizes))
    resumed = ck.Checkpoint(tmp_path, cfg, num_rounds=SMALL["num_server_rounds"]).resumed
    assert resumed["strategy"]["sizes"] == sizes
    _forge(path, lambda d: d["strategy"].update(sizes=[[0, 0], [1, 200], [2, 200]]))
    with pytest.raises(ConfigError, match="malformed partition sizes"):
        ck.Checkpoint(tmp_path, cfg, num_rounds=SMALL["num_server_rounds"])


@pytest.mark.parametrize("name", ["extra", "a99"])
def test_a_checkpoint_with_an_array_save_did_not_name_fails_its_checksum_whatever_checksum_it_holds(
        saved, tmp_path, name):  # noqa: F811
    """save() names the arrays a0, a1, ...; another array (any stored checksum, "invalid" included) is an altered
    file. The same file without it resumes."""
    path, cfg = _copy(saved, tmp_path)
    text, checksum, arrays = _open(path)
    for stored in ("invalid", checksum, ""):
        np.savez(path, state=np.array(text), checksum=np.array(stored), **{f"a{i}": a for i, a in enumerate(arrays)},
                 **{name: np.zeros(2)})
        with pytest.raises(ConfigError, match="fails its checksum"):
            ck.Checkpoint(tmp_path, cfg, num_rounds=SMALL["num_server_rounds"])
    _write(path, text, checksum, arrays)
    assert ck.Checkpoint(tmp_path, cfg, num_rounds=SMALL["num_server_rounds"]).resumed is not None


def test_an_orthonormal_estimate_of_another_shape_than_the_parameters_is_refused(saved, tmp_path):  # noqa: F811
    """One earlier estimate with one row more, still finite float64 with orthonormal columns: only the shape check
    sees it."""
    path, cfg = _copy(saved, tmp_path)
    text, _, arrays = _open(path)
    i = json.loads(text)["strategy"]["iterates"][1]["__array__"]
    d, r = arrays[i].shape
    arrays[i] = np.eye(d + 1, r)
    _write(path, text, ck._checksum(text, arrays), arrays)
    with pytest.raises(ConfigError, match=rf"holds an estimate of shape \({d + 1}, {r}\), not \({d}, {r}\)"):
        ck.Checkpoint(tmp_path, cfg, num_rounds=SMALL["num_server_rounds"])
