"""Shared helpers: run the app end to end on the in-process engine."""

from __future__ import annotations

import logging

import numpy as np
import pytest

import flwr.common  # noqa: F401  (sets Flower's logger up before we quiet it)

logging.getLogger("flwr").setLevel(logging.WARNING)


def failures_and_rejected(strategy) -> tuple[int, int]:
    """``(sum of failures, sum of rejected)`` over the strategy's result rows (0 for a column it lacks)."""
    records = getattr(strategy, "records", None) or []
    return (int(sum(r.get("failures") or 0 for r in records)), int(sum(r.get("rejected") or 0 for r in records)))


def assert_no_failures(strategy) -> None:
    """No client failed and no reply was rejected in any round."""
    failures, rejected = failures_and_rejected(strategy)
    assert (failures, rejected) == (0, 0), f"{failures} failure(s) and {rejected} rejected reply(ies) in the run"


def run_app(fault_fn=None, node_ids=None, observer=None, expect_clean=None, **overrides):
    """Run the ServerApp and ClientApp in-process with run-config overrides; return the strategy.

    Unless the test is about failures (``fault_fn`` or ``dropout`` given, or ``expect_clean=False``), the run must
    end with no failure and no rejected reply: a bug that makes every client fail leaves many numbers unchanged.
    """
    from simulations.engines import fused_run_config
    from simulations.engines.local import run_local

    cfg = fused_run_config({k.replace("_", "-"): v for k, v in overrides.items()})
    strategy = run_local(cfg, fault_fn=fault_fn, node_ids=node_ids, observer=observer)
    if expect_clean is None:  # a test about failures injects them (fault_fn) or draws them (dropout)
        expect_clean = fault_fn is None and not overrides.get("dropout")
    if expect_clean:
        assert_no_failures(strategy)
    return strategy


def run_aborted(match: str = "", **overrides):
    """Run the app expecting its strategy to abort: the ServerApp raises ``RunFailed``; return the strategy."""
    from fl_strategies.base import RunFailed

    with pytest.raises(RunFailed, match=match) as info:
        run_app(**overrides)
    strategy = info.value.strategy
    assert strategy.stopped and strategy.failure == str(info.value)
    return strategy


def distances(strategy) -> np.ndarray:
    """Subspace distance after each round (index 0 = initial estimate)."""
    return np.array([r["subspace_distance"] for r in strategy.records])


@pytest.fixture
def app():
    return run_app
