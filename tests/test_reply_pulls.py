"""A reply still arriving at the SuperLink is asked for again after 0.1 s, not Flower's 1 s (the ServerApp's
``HttpGrid``, :mod:`fl_strategies.protocol.flower_compat.grid_pull`; the SuperNode's loop:
``fedspectral/launchers/supernode.py``, tests/test_deploy_launchers.py). In-process: Flower's own ``pull_objects``
runs, only its waits are recorded (no timing)."""

from __future__ import annotations

import logging
import threading
import types

import pytest

import flwr.superlink.grid.http_grid as http_grid
import flwr.supercore.inflatable.inflatable_utils as inflatable
from fl_strategies.protocol import round_exchange
from fl_strategies.protocol.flower_compat import HttpGrid, grid_pull


@pytest.fixture
def waits(monkeypatch):
    """The seconds each of Flower's ``pull_objects`` retries waited (its ``early_stop.wait``), recorded, not slept;
    what this test changes in Flower's ``http_grid`` is undone after it."""
    monkeypatch.setattr(http_grid, "pull_objects", inflatable.pull_objects)  # Flower's own, whatever ran before
    recorded = []

    class Event(threading.Event):
        def wait(self, timeout=None):
            recorded.append(timeout)
            return self.is_set()

    monkeypatch.setattr(inflatable, "threading", types.SimpleNamespace(**{**vars(threading), "Event": Event}))
    return recorded


def _pull_a_reply_still_arriving() -> dict:
    """The grid's ``pull_objects`` for one object that the SuperLink has only at the third ask."""
    asks = []

    def pull_object(object_id):
        asks.append(object_id)
        if len(asks) < 3:
            raise inflatable.ObjectUnavailableError(object_id)
        return b"content"

    return http_grid.pull_objects(["id"], pull_object)


def test_flowers_grid_waits_a_second_before_asking_again_for_a_reply_still_arriving(waits):
    assert _pull_a_reply_still_arriving() == {"id": b"content"}
    assert len(waits) == 2 and 0.8 <= waits[0] <= 1.2  # what the change is for: Flower's first wait


def test_a_prompt_grid_asks_again_after_a_tenth_of_a_second_and_then_twice_as_long(waits):
    grid = HttpGrid.__new__(HttpGrid)  # no SuperLink needed: only the type matters
    assert isinstance(round_exchange.prompt_grid(grid), round_exchange.PromptGrid)
    assert _pull_a_reply_still_arriving() == {"id": b"content"}
    assert len(waits) == 2 and 0.08 <= waits[0] <= 0.12 and 0.16 <= waits[1] <= 0.24
    wrapped = http_grid.pull_objects
    assert grid_pull.quicken_reply_pulls() is None and http_grid.pull_objects is wrapped  # once per process


def test_a_callers_own_first_wait_is_kept(waits):
    assert grid_pull.quicken_reply_pulls(0.1) is None
    asks = iter([inflatable.ObjectUnavailableError("id"), b"x"])

    def pull_object(_):
        value = next(asks)
        if isinstance(value, Exception):
            raise value
        return value

    assert http_grid.pull_objects(["id"], pull_object, initial_backoff=2.0) == {"id": b"x"}
    assert len(waits) == 1 and waits[0] >= 1.6


def test_the_change_fits_the_flower_pyproject_allows_and_refuses_another(waits, monkeypatch, caplog):
    import inspect

    import flwr.supercore.version

    source = inspect.getsource(HttpGrid.pull_messages)
    assert grid_pull.reply_pull_misfit(flwr.supercore.version.package_version, source, http_grid.pull_objects) is None
    assert grid_pull.reply_pull_misfit("1.43.0", source, http_grid.pull_objects) == (
        "written for Flower 1.41.x or 1.42.x, found 1.43.0")
    assert "does not call pull_objects" in grid_pull.reply_pull_misfit(
        "1.42.0", source.replace("pull_objects(", "fetch("), http_grid.pull_objects)
    assert "no initial_backoff" in grid_pull.reply_pull_misfit("1.42.0", source, lambda ids, fn: {})

    monkeypatch.setattr(flwr.supercore.version, "package_version", "1.43.0")
    flower_pull = http_grid.pull_objects
    with caplog.at_level(logging.INFO, logger="flwr.fedspectral"):
        round_exchange.prompt_grid(HttpGrid.__new__(HttpGrid))
    assert http_grid.pull_objects is flower_pull  # nothing changed: Flower's 1 s
    assert [r.getMessage() for r in caplog.records if "reply still arriving" in r.getMessage()] == [
        "fedspectral: written for Flower 1.41.x or 1.42.x, found 1.43.0: Flower's own 1 s wait for a reply still "
        "arriving is kept"]


def test_the_launchers_use_this_one_wrapper_loaded_by_its_path_importing_no_package_of_the_repository(tmp_path):
    """``fedspectral/launchers`` import nothing of the repository's packages (a forked ClientApp runs its own run's
    code): they load grid_pull.py by its path, which therefore imports only the standard library."""
    import subprocess
    import sys

    from simulations.engines.deploy import LAUNCHERS_DIR

    code = ("import json, runpy, sys\n"
            f"supernode = runpy.run_path({str(LAUNCHERS_DIR / 'supernode.py')!r})['flower_pulls']()\n"
            f"forkserver = runpy.run_path({str(LAUNCHERS_DIR / 'forkserver.py')!r})['PULLS']\n"
            "print(json.dumps([supernode.__file__, forkserver.__file__, supernode.PULL_BACKOFF, sorted(\n"
            "    m for m in sys.modules if m.partition('.')[0] in ('fl_strategies', 'fedspectral', 'client_app',\n"
            "                                                   'server_app', 'simulations', 'flwr', 'numpy'))]))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, check=True)
    supernode_file, forkserver_file, backoff, imported = __import__("json").loads(done.stdout)
    assert supernode_file == forkserver_file == grid_pull.__file__ and backoff == grid_pull.PULL_BACKOFF == 0.1
    assert imported == []


def test_the_one_wrapper_wraps_once_and_keeps_every_argument():
    calls = []

    def pull(*args, **kwargs):
        calls.append((args, kwargs))

    once = grid_pull.with_first_wait(pull)
    assert grid_pull.with_first_wait(once) is once
    once("tree", "fn", return_type=int)
    once("tree", initial_backoff=2.0)
    assert calls == [(("tree", "fn"), {"return_type": int, "initial_backoff": 0.1}),
                     (("tree",), {"initial_backoff": 2.0})]  # a caller's own wait is kept
