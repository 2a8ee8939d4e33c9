"""The dp-power client: ``Y^(i) = M_i^T (M_i X) + N(0, nu^2)`` with noise of its own (DP power-method paper, Alg. 2).

The client computes ``Delta_l`` from the public broadcast ``X`` exactly as the server does, and draws its noise
from its node's secret (``noise-source = "node-secret"``, the default on a SuperNode), the operating system's
entropy (``os``) or, for reproducible simulations, from ``(seed, STREAM_NOISE, partition id, round)``, which the
server could recompute (``seeded``, refused on a SuperNode; :mod:`fl_strategies.privacy.noise`). In a SecAgg+ round it
reports one example (SecAgg+'s weights are then exactly 1, so the server recovers the sum) and refuses to upload a
product with an entry outside the clipping range ``C`` the server announced: clipping would bias the sum. Its reply
metrics hold only its partition id (metrics travel in plaintext).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from flwr.client import NumPyClient
from flwr.common import ConfigRecord, Context

from fl_strategies.privacy.dp_power_noise import client_noise_std, mean_noise_std, privacy_plan, product_sensitivity
from fl_strategies.privacy.noise import STREAM_NOISE, ClientNoise
from fl_strategies.protocol.node_state import secret_in_state
from fl_strategies.settings.registry import settings_for

__all__ = ["DPPowerClient"]

STATE = "dp-power"


class DPPowerClient(NumPyClient):
    """Holds rows ``M_i`` (its share ``A^(i) = M_i^T M_i``) and answers dp-power's fit instructions.

    The rows stay as stored (:class:`fl_strategies.kernels.rows.RowBlocks`: a memory-mapped int8 file, a
    float64 array, or, for a folder of interactions, a scipy sparse matrix, of shape (s_i, n)); the product
    ``M_i^T (M_i X)`` and the row sum run over float64 row blocks, with no ``n x n`` matrix.

    Parameters
    ----------
    data : client_app.data.NodeData
        Its partition id and rows (:meth:`~client_app.data.NodeData.stored_rows`).
    cfg : dict
        Effective run config; the client reads its settings (:func:`fl_strategies.settings.registry.settings_for`)
        and passes the mapping on only to the node's noise source.
    context : flwr.common.Context
        ``context.state`` counts the products released, and the client refuses more than the ``L`` its privacy
        budget was calibrated for.
    """

    def __init__(self, data, cfg: dict[str, Any], context: Context) -> None:
        self.blocks = data.stored_rows()
        self.partition_id, self.cfg, self.context = data.partition_id, cfg, context
        self.settings = s = settings_for(cfg)
        self.s, self.n = self.blocks.num_rows, self.blocks.dimension
        self.calibration, self.releases = privacy_plan(s.epsilon, s.delta, s.dp_calibration, s.num_server_rounds,
                                                       s.center)
        self.noise = ClientNoise(cfg, data.node_config, self.partition_id, secret_in_state(context.state),
                                 self.calibration is not None, STREAM_NOISE)

    def get_properties(self, config):
        """Partition id, row count and dimension (no data); without noise (no ``epsilon``) ``sq-sum``, the sum of
        squares of its rows, for the server's check for degenerate data
        (:meth:`fl_strategies.protocol.base.FederatedStrategy.degenerate_problem`); a private run sends none."""
        squares = {} if self.calibration is not None else {
            "sq-sum": self.blocks.centered_sum_of_squares(np.zeros(self.n))}
        return {"partition-id": self.partition_id, "num-examples": self.s, "dimension": self.n,
                **self.noise.properties(), **squares}

    def _released(self) -> int:
        state = self.context.state  # not .config_records: that builds a view of every record at every message
        return int(state[STATE]["released"]) if STATE in state else 0

    def _upload(self, Y: np.ndarray, config) -> tuple[list, int, dict]:
        """The reply: under SecAgg+ weight 1 and refused outside the clipping range."""
        secure = self.settings.dp_channel == "secagg"
        if secure:
            clip = float(config["secagg-clip"])
            if np.max(np.abs(Y)) > clip:
                raise ValueError(f"partition {self.partition_id}: an entry of the product exceeds the SecAgg+ "
                                 f"clipping range C = {clip:g}; clipping would bias the sum, so nothing is "
                                 "uploaded (set secagg-clip larger)")
        return [Y], (1 if secure else self.s), {"partition-id": self.partition_id}

    def _mean_release(self, config):
        """The centred run's first round: the row sum with this client's share of the mean's noise, once."""
        if "dp-power-mean" in self.context.state:
            raise RuntimeError("privacy budget exhausted: this client released its row sum already")
        S = self.blocks.stats()[0]
        nu = mean_noise_std(self.settings.dp_channel, self.settings.num_clients, self.releases)
        if nu > 0:
            S = S + nu * self.noise.generator(int(config["round"]), self.blocks.rows, nu, "mean").standard_normal(
                S.shape)
            self.context.state["dp-power-mean"] = ConfigRecord({"released": 1})
        return self._upload(S, config)

    def fit(self, parameters, config):
        """One noisy product with the broadcast ``X`` (or, centring, the noisy row sum in round 1)."""
        if config.get("phase") == "mean":
            return self._mean_release(config)
        (X,) = parameters
        p = self.settings.iteration_rank
        if X.shape != (self.n, p) or not np.all(np.isfinite(X)):
            raise ValueError(f"broadcast X has shape {X.shape} or non-finite values; expected ({self.n}, {p})")
        released = self._released()
        if self.calibration is not None and released >= self.calibration.iterations:
            raise RuntimeError(f"privacy budget exhausted: {released} products released, L = "
                               f"{self.calibration.iterations}")
        Y = self.blocks.product(X)
        s = self.settings
        nu = client_noise_std(s.dp_channel, s.num_clients, self.calibration,
                              product_sensitivity(s.center, s.dp_sensitivity, X))
        if nu > 0:
            rng = self.noise.generator(int(config["round"]), X, self.blocks.rows, nu)
            Y += nu * rng.standard_normal(Y.shape)
        self.context.state[STATE] = ConfigRecord({"released": released + 1})
        return self._upload(Y, config)
