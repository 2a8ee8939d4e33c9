"""The ``power`` / ``ssi`` client under ``secure-aggregation = true``: its replies as exact fixed-point limbs.

A fit instruction that carries the limb code (``secagg-exponent``, ``secagg-clients``; set by
:class:`fl_strategies.protocol.strategies.secure_power.SecurePowerStrategy`) is answered with one vector, the limbs
(:class:`fl_strategies.privacy.fixed_point.LimbCode`) of

* discovery: ``[t_i, s_i]`` (``discovery-sums``: its row sum and rows), or ``q_i``, the per-column sums of
  squares about the broadcast mean (``discovery-squares``: about its own mean, plus ``s_i (t_i / s_i - mu)^2``);
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
        phase = config.get("phase")
        if phase in ("discovery-sums", "discovery-squares"):
            values = self.discovery_values(phase, config)
        else:
            values = self.fit_values(parameters, config)
        try:
            limbs = code.encode(np.concatenate(values))
        except ValueError as ex:
            raise ValueError(f"partition {self.partition_id}: {ex} (the server's public bound is too small; set "
                             "secagg-clip larger)") from None
        return [limbs.ravel()], 1, {"partition-id": self.partition_id}

    def discovery_values(self, phase: str, config) -> list:
        """``[t_i, [s_i]]`` or ``[q_i]`` (module docstring), shapes (d,) and (1,)."""
        s, t = self.s, self.data.row_sum
        if phase == "discovery-sums":
            return [t, [s]]
        mu = np.frombuffer(config["mean"], dtype="<f8") if "mean" in config else np.zeros(self.d)
        gap = t / s - mu
        return [self.data.column_sq_sums() + s * gap * gap]

    def fit_values(self, parameters, config) -> list:
        """A round's or the summary's values (module docstring) from the plain reply."""
        arrays, s, metrics = super().fit(parameters, config)
        if config.get("phase") == "summary":
            return [s * arrays[0].ravel(), [s, s * metrics["trace"]]]
        return [s * arrays[0].ravel(), [s]] + ([[metrics["f"]]] if "f" in metrics else [])
