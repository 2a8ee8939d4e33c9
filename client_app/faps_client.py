"""The FAPS client: keeps its basis, multiplier and penalty in the node state; sends ``Q_i Z``."""

from __future__ import annotations

from typing import Any

import numpy as np
from flwr.client import NumPyClient
from flwr.common import Array, ArrayRecord, ConfigRecord, Context

from fl_strategies.kernels.faps_local import FapsOptions, FapsState, faps_client_round

from fl_strategies.settings.registry import settings_for
from fl_strategies.settings.strategies import FapsSettings

from .pca_replies import discovery_properties, summary_reply

__all__ = ["FapsClient", "faps_options"]

ARRAYS, SCALARS = "faps-arrays", "faps-scalars"  # one RecordDict namespace for all record types


def faps_options(settings: FapsSettings) -> FapsOptions:
    """The options of a client's FAPS round (:mod:`fl_strategies.kernels.faps_local`), from its settings."""
    s = settings
    return FapsOptions(penalty_init=s.penalty_init, penalty_mu=s.penalty_mu, penalty_theta=s.penalty_theta,
                       solver=s.inner_solver, inner_steps=s.inner_steps, inner_tol=s.inner_tol,
                       inner_min_steps=s.inner_min_steps, inner_max_steps=s.inner_max_steps)


class FapsClient(NumPyClient):
    """Holds ``M_i = A_i A_i^T`` (as an operator) and its private FAPS state between rounds.

    Parameters
    ----------
    data : client_app.data.NodeData
        Its partition id and local operator: the normalised covariance
        ``M_i^T M_i / s_i`` (the FAPS matrix is ``s_i`` times it: the paper
        sums unnormalised Gram matrices) and its row count.
    cfg : dict
        Effective run config.
    context : flwr.common.Context
        ``context.state`` keeps ``X_i``, ``W_i``, ``beta_i`` and the ``d_i``
        history across rounds (Flower rebuilds the client object for every
        message); nothing of it is ever sent.
    """

    def __init__(self, data, cfg: dict[str, Any], context: Context) -> None:
        self.data = data
        self.settings = s = settings_for(cfg)
        inner = s.inner_steps or max(s.inner_max_steps, s.inner_min_steps)
        # products in the run: per round the inner iterations, the multiplier, the message and the objective
        self.products = s.num_server_rounds * (inner + 3) + 1
        op = data.operator(self.products, s.iteration_rank)
        self.s, self.d = op.num_rows, op.shape[0]
        self.partition_id, self.cfg, self.context = data.partition_id, cfg, context

    def get_properties(self, config):
        """Report what the server needs to plan the run: no data (:func:`discovery_properties`; FAPS adds no noise)."""
        return discovery_properties(self.data, self.cfg, self.d, noisy=False, config=config)

    def _load(self) -> FapsState | None:
        state = self.context.state  # not .array_records / .config_records: views of every record at every message
        if ARRAYS not in state:
            return None
        arrays, scalars = state[ARRAYS], state[SCALARS]
        return FapsState(X=arrays["X"].numpy(), W=arrays["W"].numpy(), beta=float(scalars["beta"]),
                         dhist=list(scalars["dhist"]))

    def _save(self, state: FapsState) -> None:
        self.context.state[ARRAYS] = ArrayRecord({"X": Array(state["X"]), "W": Array(state["W"])})
        self.context.state[SCALARS] = ConfigRecord({"beta": state["beta"], "dhist": [float(v) for v in state["dhist"]]})

    def fit(self, parameters, config):
        """One FAPS round from the broadcast ``Z``."""
        (Z,) = parameters
        p = self.settings.iteration_rank
        if Z.shape != (self.d, p) or not np.all(np.isfinite(Z)):
            raise ValueError(f"broadcast Z has shape {Z.shape} or non-finite values; expected ({self.d}, {p})")
        A = self.data.operator_for(config, self.products, p)
        if config.get("phase") == "summary":
            return summary_reply(A, Z, self.s, 0.0, self.partition_id, config)
        # s_i A_i, the paper's unnormalised Gram, with the same mean and column scales as A_i
        M = self.data.operator().centered(A.mean, A.scale, weight=float(self.s))
        Y, f, state, steps = faps_client_round(M, Z.astype(np.float64), self._load(), faps_options(self.settings))
        self._save(state)
        return [Y], self.s, {"f": f, "inner-steps": steps}
