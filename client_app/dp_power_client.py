"""The dp-power client: ``Y^(i) = M_i^T (M_i X) + N(0, nu^2)`` with noise of its own (DP power-method paper, Alg. 2).

The client computes ``Delta_l`` from the public broadcast ``X`` exactly as the server does, and draws its noise
from the operating system's entropy (``noise-source = "os"``) or, for reproducible experiments, from
``(seed, STREAM_NOISE, partition id, round)``, which the server could recompute: a real deployment must use
``os``. In a SecAgg+ round it reports one example (SecAgg+'s weights are then exactly 1, so the server recovers the
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
from fl_strategies.zcdp import calibrate

from simulations.interaction_data import client_rows, is_interaction_folder

from .data import _partition_id, load_client_rows

__all__ = ["DPPowerClient"]

STATE = "dp-power"


class DPPowerClient(NumPyClient):
    """Holds rows ``M_i`` (its share ``A^(i) = M_i^T M_i``) and answers dp-power's fit instructions.

    Parameters
    ----------
    rows : ndarray or scipy.sparse matrix of shape (s_i, n)
        The client's rows.
    partition_id : int
    cfg : dict
        Effective run config.
    context : flwr.common.Context
        ``context.state`` counts the products released, and the client refuses more than the ``L`` its privacy
        budget was calibrated for.
    """

    def __init__(self, rows: np.ndarray, partition_id: int, cfg: dict[str, Any], context: Context) -> None:
        self.rows, self.partition_id, self.cfg, self.context = rows, partition_id, cfg, context
        self.s, self.n = rows.shape
        self.calibration = (calibrate(cfg["epsilon"], cfg["delta"], cfg["num-server-rounds"], cfg["dp-calibration"])
                            if cfg["epsilon"] > 0 else None)

    @classmethod
    def from_context(cls, cfg: dict[str, Any], context: Context) -> "DPPowerClient":
        """Build the client on this node's rows (``data-path`` file, simulated partition, or its users' sparse rows
        of a folder of interactions, :mod:`simulations.interaction_data`)."""
        if is_interaction_folder(cfg["dataset"]) and "data-path" not in context.node_config:
            pid = _partition_id(cfg, context.node_config)
            rows = client_rows(cfg, pid)
        else:
            rows, pid = load_client_rows(cfg, context.node_config)
            rows = np.ascontiguousarray(rows, dtype=np.float64)
        if rows.shape[0] < 1:
            raise ValueError(f"partition {pid}: the partition has no rows")
        return cls(rows, pid, cfg, context)

    def get_properties(self, config):
        """Partition id, row count and dimension (no data)."""
        return {"partition-id": self.partition_id, "num-examples": self.s, "dimension": self.n}

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
        Y = self.rows.T @ (self.rows @ X)
        nu = client_noise_std(self.cfg, self.calibration, sensitivity(X, self.cfg["dp-sensitivity"]))
        if nu > 0:
            if self.cfg["noise-source"] == "os":
                rng = np.random.default_rng()
            else:
                rng = np.random.default_rng([self.cfg["seed"], STREAM_NOISE, self.partition_id, int(config["round"])])
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
