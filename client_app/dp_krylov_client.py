"""The dp-krylov client: ``A^(i) Q + N(0, nu^2 / s)`` for a block ``Q`` orthonormal to every block it multiplied.

Its privacy rests on the blocks (:mod:`fl_strategies.privacy.dp_krylov_noise`): the client keeps the blocks it has
multiplied in its node state and refuses a broadcast block that is not orthonormal and orthogonal to them
(:func:`~fl_strategies.privacy.dp_krylov_noise.check_block`), so that a server cannot ask twice about the same
direction. With ``center`` its first upload has one more column, ``a`` times its row sum, with the same noise.
Noise source, SecAgg+ weights and clipping refusal are ``dp-power``'s
(:class:`client_app.dp_power_client.DPPowerClient`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from flwr.common import Array, ArrayRecord, Context

from fl_strategies.privacy import dp_krylov_noise as dk
from fl_strategies.privacy.noise import STREAM_NOISE, ClientNoise
from fl_strategies.protocol.node_state import secret_in_state
from fl_strategies.settings.registry import settings_for

from .dp_power_client import DPPowerClient

__all__ = ["DPKrylovClient"]

STATE = "dp-krylov-blocks"  # an ArrayRecord: the blocks multiplied so far, side by side


class DPKrylovClient(DPPowerClient):
    """Holds rows ``M_i`` and answers dp-krylov's products (module docstring).

    Parameters
    ----------
    data : client_app.data.NodeData
        Its partition id and rows.
    cfg : dict
        Effective run config.
    context : flwr.common.Context
        ``context.state`` keeps the blocks multiplied so far.
    """

    def __init__(self, data, cfg: dict[str, Any], context: Context) -> None:
        self.blocks = data.stored_rows()
        self.partition_id, self.cfg, self.context = data.partition_id, cfg, context
        self.settings = s = settings_for(cfg)
        self.s, self.n = self.blocks.num_rows, self.blocks.dimension
        self.releases = dk.privacy_plan(s.epsilon, s.delta, s.dp_calibration)
        self.calibration = self.releases
        self.noise = ClientNoise(cfg, data.node_config, self.partition_id, secret_in_state(context.state),
                                 self.releases is not None, STREAM_NOISE)

    def _multiplied(self) -> np.ndarray | None:
        record = self.context.state.array_records.get(STATE)
        return None if record is None else record["B"].numpy()

    def fit(self, parameters, config):
        """One noisy product with the broadcast block (with ``center``, the first also the weighted row sum)."""
        (Q,) = parameters
        p = self.settings.iteration_rank
        if Q.shape != (self.n, p) or not np.all(np.isfinite(Q)):
            raise ValueError(f"broadcast block has shape {Q.shape} or non-finite values; expected ({self.n}, {p})")
        previous = self._multiplied()
        dk.check_block(previous, Q)
        s = self.settings
        Y = self.blocks.product(Q)
        if previous is None and s.center:
            Y = np.hstack([Y, dk.MEAN_WEIGHT * self.blocks.stats()[0][:, None]])
        nu = dk.client_noise_std(s.dp_channel, s.num_clients, self.releases, s.center)
        if nu > 0:
            rng = self.noise.generator(int(config["round"]), Q, self.blocks.rows, nu)
            Y = Y + nu * rng.standard_normal(Y.shape)
        B = Q if previous is None else np.hstack([previous, Q])
        self.context.state.array_records[STATE] = ArrayRecord({"B": Array(np.ascontiguousarray(B))})
        return self._upload(Y, config)
