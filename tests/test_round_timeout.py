"""A deployment never waits for ever: a finite default round timeout on real SuperNodes, an explicit
``round-timeout`` kept as set (0 = no limit), and a node that sends no reply named in the server log."""

from __future__ import annotations

import logging

import numpy as np
import pytest
from flwr.client import ClientApp, NumPyClient
from flwr.common import FitIns, ndarrays_to_parameters
from flwr.server import ServerConfig

from conftest import run_app
from fl_strategies.protocol.flower_compat import InMemoryGrid
from fl_strategies.protocol.round_exchange import fit_in_one_batch, simulated_grid
from fl_strategies.settings.config import DEPLOYED_ROUND_TIMEOUT, default_run_config, round_timeout
from server_app.app import set_round_timeout
from simulations.engines.local import LocalGrid
from test_fit_records import _proxies


@pytest.mark.parametrize("seconds, real_nodes, expected", [
    (-1.0, True, DEPLOYED_ROUND_TIMEOUT),
    (-1.0, False, None),
    (0.0, True, None),
    (0.0, False, None),
    (15.0, True, 15.0),
    (15.0, False, 15.0),
    (1e6, True, 1e6),
])
def test_the_default_is_finite_only_on_real_nodes_and_a_set_value_is_kept(seconds, real_nodes, expected):
    assert round_timeout(seconds, real_nodes) == expected


def test_the_default_run_config_leaves_the_choice_to_the_nodes():
    assert default_run_config()["round-timeout"] == -1.0
    assert 0 < DEPLOYED_ROUND_TIMEOUT < float("inf")


def test_only_engines_grids_are_simulated():
    assert simulated_grid(LocalGrid(ClientApp(client_fn=lambda c: None), 1, {}))
    assert simulated_grid(InMemoryGrid.__new__(InMemoryGrid))
    assert not simulated_grid(object())  # any other grid (a SuperLink's): real SuperNodes


class _Strategy:
    def __init__(self, seconds):
        self.cfg, self.timeout = {"round-timeout": seconds}, None


@pytest.mark.parametrize("seconds, expected, level", [(-1.0, DEPLOYED_ROUND_TIMEOUT, logging.INFO),
                                                      (0.0, None, logging.WARNING), (30.0, 30.0, None)])
def test_real_nodes_get_the_default_and_an_explicit_value_unchanged(seconds, expected, level, caplog):
    """The server loop's and the discovery's limit are one value; the default and a limit of 0 are logged."""
    strategy, config = _Strategy(seconds), ServerConfig(num_rounds=3, round_timeout=None)
    with caplog.at_level(logging.INFO, logger="flwr.fedspectral"):
        set_round_timeout(strategy, config, real_nodes=True)
    assert config.round_timeout == strategy.timeout == expected
    said = [r for r in caplog.records if "round-timeout" in r.getMessage()]
    assert [r.levelno for r in said] == ([] if level is None else [level])


def test_a_run_on_nodes_the_engine_does_not_simulate_waits_a_finite_time(monkeypatch):
    """The whole ServerApp: on a grid that is not a simulation's, the default gives a finite limit to the rounds
    and to discovery; on the in-process engine's, none."""
    assert run_app(num_clients=3, num_server_rounds=1).timeout is None
    monkeypatch.setattr(LocalGrid, "simulated", False)
    assert run_app(num_clients=3, num_server_rounds=1).timeout == DEPLOYED_ROUND_TIMEOUT
    assert run_app(num_clients=3, num_server_rounds=1, round_timeout=0.0).timeout is None


class _Echo(NumPyClient):
    def __init__(self, pid):
        self.pid = pid

    def fit(self, parameters, config):
        if self.pid == 2:
            raise RuntimeError("bad data")
        return [parameters[0]], 1, {}


def test_a_node_without_a_reply_is_named_in_the_server_log(caplog):
    """A node whose ClientApp never replies (dropped: it did not start) and one that failed are each named."""
    capp = ClientApp(client_fn=lambda c: _Echo(int(c.node_config["partition-id"])).to_client())
    grid = LocalGrid(capp, 3, {}, fault_fn=lambda msg, pid: "drop" if pid == 1 else "ok", node_ids=[70, 80, 90])
    ins = FitIns(ndarrays_to_parameters([np.ones(2)]), {"round": 4})
    with caplog.at_level(logging.WARNING, logger="flwr.fedspectral"):
        results, failures = fit_in_one_batch([(p, ins) for p in _proxies(grid)], max_workers=1, timeout=5.0,
                                             group_id=4)
    assert len(results) == 1 and len(failures) == 2
    said = [r.getMessage() for r in caplog.records]
    assert any(m.startswith("round 4: node 80 sent no reply within round-timeout = 5 s (its ClientApp did not "
                            "start or did not finish)") for m in said)
    assert any(m.startswith("round 4: node 90 replied with an error: ") and "bad data" in m for m in said)
    assert not any("node 70" in m for m in said)
