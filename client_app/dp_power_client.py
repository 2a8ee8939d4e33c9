"""The dp-power client: ``Y^(i) = M_i^T (M_i X) + N(0, nu^2)`` with noise of its own (DP power-method paper, Alg. 2).

The client computes ``Delta_l`` from the public broadcast ``X`` exactly as the server does, and draws its noise
from its node's secret (``noise-source = "node-secret"``, the default on a SuperNode), the operating system's
entropy (``os``) or, for reproducible simulations, from ``(seed, STREAM_NOISE, partition id, round)``, which the
server could recompute (``seeded``, refused on a SuperNode; :mod:`fl_strategies.noise`). In a SecAgg+ round it reports one example (SecAgg+'s weights are then exactly 1, so the server recovers the
sum) and refuses to upload a product with an entry outside the clipping range ``C`` the server announced:
clipping would bias the sum. Its reply metrics hold only its partition id (metrics travel in plaintext).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from flwr.client import NumPyClient
from flwr.common import ConfigRecord, Context

from fl_strategies.dp_power import client_noise_std
from fl_strategies.dp_sensitivity import sensitivity
from fl_strategies.eigenspace import STREAM_NOISE
from fl_strategies.noise import ClientNoise
from fl_strategies.zcdp import calibrate

__all__ = ["DPPowerClient"]

STATE = "dp-power"


class DPPowerClient(NumPyClient):
    """Holds rows ``M_i`` (its share ``A^(i) = M_i^T M_i``) and answers dp-power's fit instructions.

    Parameters
    ----------
    data : client_app.data.NodeData
        Its partition id and local operator: ``M_i^T (M_i X)`` from its rows as stored (an ndarray, or for a
        folder of interactions a scipy sparse matrix of shape (s_i, n)), or from ``M_i^T M_i`` where cheaper.
    cfg : dict
        Effective run config.
    context : flwr.common.Context
        ``context.state`` counts the products released, and the client refuses more than the ``L`` its privacy
        budget was calibrated for.
    """

    def __init__(self, data, cfg: dict[str, Any], context: Context) -> None:
        self.op = data.operator(cfg["num-server-rounds"], cfg["iteration-rank"])
        self.partition_id, self.cfg, self.context = data.partition_id, cfg, context
        self.s, self.n = self.op.num_rows, self.op.shape[0]
        self.calibration = (calibrate(cfg["epsilon"], cfg["delta"], cfg["num-server-rounds"], cfg["dp-calibration"])
                            if cfg["epsilon"] > 0 else None)
        self.noise = ClientNoise(cfg, data.node_config, self.partition_id, context.state,
                                 self.calibration is not None, STREAM_NOISE)

    def get_properties(self, config):
        """Partition id, row count and dimension (no data)."""
        return {"partition-id": self.partition_id, "num-examples": self.s, "dimension": self.n,
                **self.noise.properties()}

    def _released(self) -> int:
        state = self.context.state  # not .config_records: that builds a view of every record at every message
        return int(state[STATE]["released"]) if STATE in state else 0

    def fit(self, parameters, config):
        """One noisy product with the broadcast ``X``."""
        (X,) = parameters
        p = self.cfg["iteration-rank"]
        if X.shape != (self.n, p) or not np.all(np.isfinite(X)):
            raise ValueError(f"broadcast X has shape {X.shape} or non-finite values; expected ({self.n}, {p})")
        released = self._released()
        if self.calibration is not None and released >= self.calibration.iterations:
            raise RuntimeError(f"privacy budget exhausted: {released} products released, L = "
                               f"{self.calibration.iterations}")
        Y = self.op.product(X)
        nu = client_noise_std(self.cfg, self.calibration, sensitivity(X, self.cfg["dp-sensitivity"]))
        if nu > 0:
            rng = self.noise.generator(int(config["round"]), X, self.op.rows.rows if self.op.rows is not None
                                       else self.op.gram, nu)
            Y += nu * rng.standard_normal(Y.shape)
        self.context.state[STATE] = ConfigRecord({"released": released + 1})
        secure = self.cfg["dp-channel"] == "secagg"
        if secure:
            clip = float(config["secagg-clip"])
            if np.max(np.abs(Y)) > clip:
                raise ValueError(f"partition {self.partition_id}: an entry of the product exceeds the SecAgg+ "
                                 f"clipping range C = {clip:g}; clipping would bias the sum, so nothing is "
                                 "uploaded (set secagg-clip larger)")
        return [Y], (1 if secure else self.s), {"partition-id": self.partition_id}
