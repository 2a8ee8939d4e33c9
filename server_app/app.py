"""The fedspectral ServerApp: builds the strategy named in the run config.

In simulation the server's harness regenerates the pooled data from the run
config to compute the exact reference eigenvectors (scipy ``eigh``), which
are used only to *measure* the estimate; no client sends its data.
"""

from __future__ import annotations

import logging

from flwr.common import Context
from flwr.server import ServerApp, ServerAppComponents, ServerConfig

from fl_strategies.config import check_against_data, validate_run_config
from fl_strategies.registry import STRATEGIES
from simulations.federated_data import federated_dataset, reference_eigenvectors

from .results import ResultsWriter

log = logging.getLogger("flwr.fedspectral")  # shown by Flower's console handler


def build_strategy(run_config) -> tuple:
    """Validate the config, load the reference and build the strategy.

    Returns
    -------
    strategy : flwr.server.strategy.Strategy
    num_rounds : int
    """
    cfg = validate_run_config(run_config)
    data, _ = federated_dataset(cfg)
    n, d = data.X.shape
    check_against_data(cfg, d, n)
    _, U_k = reference_eigenvectors(cfg)
    strategy = STRATEGIES[cfg["strategy"]](cfg, d, reference=U_k)
    if cfg["results-dir"]:
        strategy.on_round = ResultsWriter(cfg["results-dir"])
    log.info("fedspectral: %r", strategy)
    return strategy, strategy.num_rounds


def server_fn(context: Context) -> ServerAppComponents:
    """Flower's entry point: the strategy and the number of rounds."""
    strategy, num_rounds = build_strategy(context.run_config)
    timeout = strategy.cfg["round-timeout"] or None
    return ServerAppComponents(strategy=strategy, config=ServerConfig(num_rounds=num_rounds, round_timeout=timeout))


app = ServerApp(server_fn=server_fn)
