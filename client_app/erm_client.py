"""Clients of the federated ERM strategies: FedLRGD (weights kept in the node state) and FedAve (local SGD).

Both hold supervised rows ``[x, y]`` (label in the last column): the node's
``data-path`` file in a deployment; in simulation the harness's split (the
server keeps the first ``server-samples`` rows).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from flwr.client import NumPyClient
from flwr.common import Array, ArrayRecord, Context

from fl_strategies.kernels.fedave import local_sgd
from fl_strategies.kernels.fedlrgd import client_weights
from fl_strategies.kernels.losses import split_xy
from fl_strategies.settings.registry import settings_for
__all__ = ["ErmClient", "FedLrgdClient", "FedAveClient"]

STATE = "fedlrgd-arrays"  # one RecordDict namespace: only an ArrayRecord under this key


class ErmClient(NumPyClient):
    """A client holding ``s`` supervised rows.

    Parameters
    ----------
    data : client_app.data.NodeData
        Its partition id and rows, shape (s, p + 1).
    cfg : dict
        Effective run config (``loss``, ``l2``, ``seed``).
    context : flwr.common.Context
    """

    def __init__(self, data, cfg: dict[str, Any], context: Context) -> None:
        rows = data.rows
        self.X, self.y = split_xy(rows)
        self.s, self.d = rows.shape
        self.partition_id, self.context = data.partition_id, context
        self.settings = settings_for(cfg)

    def get_properties(self, config):
        """Partition id, row count, width ``d = p + 1`` and ``sq-sum``, the sum of squares of the features (no
        row; the server's check for degenerate data: :meth:`fl_strategies.protocol.base.FederatedStrategy.degenerate_problem`)."""
        return {"partition-id": self.partition_id, "num-examples": self.s, "dimension": self.d,
                "sq-sum": float(np.vdot(self.X, self.X))}


class FedLrgdClient(ErmClient):
    """Round 1 (``phase = "weights"``): compute ``V_c`` (p, r) from the pivots and ``G^{-1}``, keep it in
    ``context.state``; every round send column ``column`` of it (one p-vector)."""

    def fit(self, parameters, config):
        """Send ``V_c[:, column]``."""
        p = self.d - 1
        if config.get("phase") == "weights":
            pivots, Ginv = parameters
            r = pivots.shape[0]
            if pivots.shape != (r, p) or Ginv.shape != (p, r, r):
                raise ValueError(f"broadcast pivots {pivots.shape} / G^-1 {Ginv.shape} do not fit p = {p}")
            V = client_weights(self.settings.loss, self.X, self.y, pivots.astype(np.float64),
                               Ginv.astype(np.float64), self.settings.l2)
            self.context.state.array_records[STATE] = ArrayRecord({"V": Array(V)})
        record = self.context.state.array_records.get(STATE)
        if record is None:
            raise ValueError(f"partition {self.partition_id}: asked for a column before the weights were computed")
        V = record["V"].numpy()
        k = int(config["column"])
        return [np.ascontiguousarray(V[:, k])], self.s, {}


class FedAveClient(ErmClient):
    """``local-steps`` single-sample SGD steps from the broadcast ``theta`` with step ``eta``."""

    def fit(self, parameters, config):
        """Return ``theta_{c,b}``."""
        (theta,) = parameters
        rng = np.random.default_rng([self.settings.seed, 3, self.partition_id, int(config["round"])])
        out = local_sgd(self.settings.loss, self.X, self.y, theta.astype(np.float64), self.settings.l2,
                        float(config["eta"]), int(config["local-steps"]), rng)
        return [out], self.s, {}
