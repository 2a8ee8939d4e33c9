"""The fedspectral ClientApp: one NumPyClient per algorithm, chosen by the run config."""

from __future__ import annotations

from flwr.client import ClientApp
from flwr.common import Context

from fl_strategies.config import validate_run_config

from .clients import CLIENTS
from .data import load_client_covariance


def client_fn(context: Context):
    """Build the client of the configured strategy on this node's data."""
    cfg = validate_run_config(context.run_config)
    if hasattr(CLIENTS[cfg["strategy"]], "from_context"):  # supervised rows, not a covariance (FedLRGD, FedAve)
        return CLIENTS[cfg["strategy"]].from_context(cfg, context).to_client()
    A, num_rows, pid = load_client_covariance(cfg, context.node_config)
    return CLIENTS[cfg["strategy"]](A, num_rows, pid, cfg, context).to_client()


app = ClientApp(client_fn=client_fn)
