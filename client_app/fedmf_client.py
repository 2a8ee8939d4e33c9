"""The client of ``fedmf``, ``mf-altgd`` and ``mf-simgd``: holds its rows ``S_i`` and, for the baselines, ``U_i``."""

from __future__ import annotations

from typing import Any

import numpy as np
from flwr.client import NumPyClient
from flwr.common import Array, ArrayRecord, Context

from fl_strategies.settings.registry import settings_for
from fl_strategies.kernels.mf import (STREAM_BASELINE, altgd_step, exact_u, initial_u, local_gd, mf_loss,
                                         power_product, simgd_step, sketch, wk_init)

__all__ = ["FedMFClient"]

U_STATE = "fedmf-u"  # ArrayRecord key in context.state (the baselines' private U_i)


class FedMFClient(NumPyClient):
    """Answers the sketch, power and solve rounds of ``fedmf`` and the baselines' steps.

    Parameters
    ----------
    data : client_app.data.NodeData
        Its partition id and rows ``S_i`` (n_i, d).
    cfg : dict
        Effective run config.
    context : flwr.common.Context
        ``context.state`` keeps ``U_i`` between the baselines' rounds; it is never sent.
    """

    def __init__(self, data, cfg: dict[str, Any], context: Context) -> None:
        self.S = np.asarray(data.rows, dtype=np.float64)
        self.n, self.d = self.S.shape
        self.partition_id, self.context = data.partition_id, context
        self.settings = settings_for(cfg)
        self.r = self.settings.rank

    def get_properties(self, config):
        """Report what the server needs to plan the run: no row; ``sq-sum`` (the sum of squares of ``S_i``) for the
        server's check for degenerate data (:meth:`fl_strategies.protocol.base.FederatedStrategy.degenerate_problem`)."""
        return {"partition-id": self.partition_id, "num-examples": self.n, "dimension": self.d,
                "sq-sum": float(np.vdot(self.S, self.S))}

    def _received_v(self, parameters) -> np.ndarray:
        (V,) = parameters
        if V.shape != (self.d, self.r) or not np.all(np.isfinite(V)):
            raise ValueError(f"broadcast V has shape {V.shape} or non-finite values; expected ({self.d}, {self.r})")
        return V.astype(np.float64)

    def fit(self, parameters, config):
        """One round of the phase named in ``config['phase']``."""
        phase, s = config["phase"], self.settings
        metrics: dict[str, Any] = {"partition-id": self.partition_id}
        if phase == "sketch":
            return sketch(self.S, s.seed, self.partition_id, s.num_sketches, self.r), self.n, metrics
        V = self._received_v(parameters)
        if phase == "power":
            return [power_product(self.S, V)], self.n, metrics
        if phase == "solve":
            U_hat = exact_u(self.S, V)
            metrics["loss-exact"] = mf_loss(self.S, U_hat, V)
            if s.u_solver == "exact":
                return [np.array([metrics["loss-exact"]])], self.n, metrics
            U0 = initial_u(s.seed, self.partition_id, self.n, self.r)
            _, losses = local_gd(self.S, V, U0, s.local_iterations, s.momentum)
            return [losses], self.n, metrics
        if phase in ("altgd", "simgd"):
            eta = float(config["eta"])
            stored = self.context.state.array_records.get(U_STATE)
            if stored is not None:
                U = stored["U"].numpy()
            elif phase == "altgd":
                U = self.S @ wk_init(s.seed, self.d, self.r, float(config["sigma1"]))[0]
            else:
                rng = np.random.default_rng([s.seed, STREAM_BASELINE, 2, self.partition_id])
                U = rng.normal(0.0, float(config["init-std"]), (self.n, self.r))
            metrics["f"] = mf_loss(self.S, U, V)
            U, G = (altgd_step if phase == "altgd" else simgd_step)(self.S, U, V, eta)
            self.context.state.array_records[U_STATE] = ArrayRecord({"U": Array(np.ascontiguousarray(U))})
            return [G], self.n, metrics
        raise ValueError(f"unknown phase {phase!r}")
