"""Shared helpers: run the app end to end on the in-process engine."""

from __future__ import annotations

import logging

import numpy as np
import pytest

import flwr.common  # noqa: F401  (sets Flower's logger up before we quiet it)

logging.getLogger("flwr").setLevel(logging.WARNING)


def run_app(fault_fn=None, node_ids=None, observer=None, **overrides):
    """Run the ServerApp and ClientApp in-process with run-config overrides; return the strategy."""
    from simulations.engines import fused_run_config
    from simulations.engines.local import run_local

    cfg = fused_run_config({k.replace("_", "-"): v for k, v in overrides.items()})
    return run_local(cfg, fault_fn=fault_fn, node_ids=node_ids, observer=observer)


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
