"""The ``power`` / ``ssi`` client under ``secure-aggregation = true``: its replies as exact fixed-point limbs.

A fit instruction that carries the limb code (``secagg-exponent``, ``secagg-clients``; set by
:class:`fl_strategies.protocol.strategies.secure_power.SecurePowerStrategy`) is answered with one vector, the limbs
(:class:`fl_strategies.privacy.fixed_point.LimbCode`) of

* a round: ``[vec(s_i Y_i), s_i]`` and, when the server asked for the objective, ``f_i``;
* the summary: ``[vec(s_i A_i Z), s_i, s_i tr(A_i)]``;

with weight 1 (SecAgg+'s weights are then exactly 1) and metrics holding only the partition id (metrics travel in
plaintext). A value beyond the code's range is refused, never clipped: the client raises and uploads nothing.
Every other instruction is the plain :class:`client_app.fedpower_client.FedPowerClient`'s.
"""

from __future__ import annotations

import numpy as np

from fl_strategies.privacy.fixed_point import LimbCode

from .fedpower_client import FedPowerClient

__all__ = ["SecurePowerClient"]


class SecurePowerClient(FedPowerClient):
    """:class:`~client_app.fedpower_client.FedPowerClient` whose SecAgg+ replies are limbs of exact sums."""

    def fit(self, parameters, config):
        """The plain reply, or under SecAgg+ its values as one vector of limbs (module docstring)."""
        if "secagg-exponent" not in config:
            return super().fit(parameters, config)
        code = LimbCode(int(config["secagg-clients"]), int(config["secagg-exponent"]))
        arrays, s, metrics = super().fit(parameters, config)
        if config.get("phase") == "summary":
            values = [s * arrays[0].ravel(), [s, s * metrics["trace"]]]
        else:
            values = [s * arrays[0].ravel(), [s]] + ([[metrics["f"]]] if "f" in metrics else [])
        try:
            limbs = code.encode(np.concatenate(values))
        except ValueError as ex:
            raise ValueError(f"partition {self.partition_id}: {ex} (the server's public bound is too small; set "
                             "secagg-clip larger)") from None
        return [limbs.ravel()], 1, {"partition-id": self.partition_id}
