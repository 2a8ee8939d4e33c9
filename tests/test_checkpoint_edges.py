"""Checkpoint edges the mutation run of fl_strategies/checkpoint.py showed untested: the format number's presence
and the strategy's own round count as the upper bound of a checkpoint's round."""

from __future__ import annotations

import errno
import json
import logging
import os

import numpy as np
import pytest

from fl_strategies import checkpoint as ck
from fl_strategies.config import ConfigError
from test_resume import SMALL
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


def test_a_first_write_that_fails_says_no_checkpoint_is_kept(saved, tmp_path, monkeypatch, caplog):  # noqa: F811
    _, cfg = saved
    checkpoint = ck.Checkpoint(tmp_path, dict(cfg, resume=False))

    def full_disk(fh, **arrays):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(ck.np, "savez", full_disk)
    with caplog.at_level(logging.ERROR, logger="flwr.fedspectral"):
        checkpoint.save(1, [np.eye(3, 2)], _State())
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and errors[0].endswith("the run goes on and no checkpoint is kept for resume")
    assert checkpoint.saved_round is None and not (tmp_path / ck.CHECKPOINT_FILE).exists()
