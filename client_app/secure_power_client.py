"""The ``power``, ``ssi``, ``fedpower``, ``localpower`` and ``krylov`` client under ``secure-aggregation = true``:
its replies as exact fixed-point limbs (``krylov``'s clients are ``power``'s).

A fit instruction that carries the limb code (``secagg-exponent``, ``secagg-clients``; set by
:class:`fl_strategies.protocol.strategies.secure_power.SecurePowerStrategy`) is answered with one vector, the limbs
(:class:`fl_strategies.privacy.fixed_point.LimbCode`) of

* discovery over ``.bed`` / ``.pgen`` genotypes, in one exchange (``discovery-counts``): ``[s_i, t_i, c_i, Q_i]``
  (with ``center``; else ``[s_i, Q_i]``), ``Q_i`` the per-variant sums of squared allele counts over the calls, and
  over a ``.bed`` with ``nonfounders = false`` the founders' allele sums and calls too: whole numbers, the
  server centres ``Q`` itself; then the pair sums of ``indep-pairwise`` per chunk (below), and round 1 carries the
  variants the server's filters kept;
* discovery over other data: ``[s_i]``, its row count (``discovery-rows``; it never reports one in the clear), then
  ``[t_i, c_i, s_i]`` (``discovery-sums``: its row sum, its non-missing calls per column, ``s_i`` in
  every column unless its genotypes have missing calls, and its rows; over a ``.bed`` with ``nonfounders = false``
  also its founders' allele sums and calls, its own sums again where every person is a founder), then with
  ``indep-pairwise`` its pair sums and variant sums per chunk (``discovery-ld``:
  :func:`client_app.ld_replies.ld_sums`, integers), or ``q_i``, the per-column sums of squares
  about the broadcast mean over the calls (``discovery-squares``: about its own mean, plus
  ``c_i (t_i / c_i - mu)^2``; where the server's variant filters drop variants it sends the kept list with this
  exchange, and the client reads its ``.bed`` as those variants from then on);
* a round: ``[vec(s_i Y_i D_i), s_i]`` and, when the server asked for the objective, ``f_i``; ``D_i = I`` after
  one local step (``power``, ``ssi``), else with ``alignment = "opt"`` (``fedpower``, ``localpower``) the client's
  own Procrustes rotation ``procrustes(Z_prev_i, Z)`` of the basis it multiplied last onto the broadcast ``Z``:
  the alignment the plain server makes against the reference client's ``Z_prev``, made here against a basis
  every client holds, so that the server needs only the sum;
* the summary: ``[vec(s_i A_i Z), s_i, s_i tr(A_i)]``, then ``[vec(S_i), sum delta]`` where the server asks for
  plink2's diagonal (:func:`client_app.pca_replies.summary_reply`);

with weight 1 (SecAgg+'s weights are then exactly 1) and metrics holding only the partition id (metrics travel in
plaintext). A value beyond the code's range is refused, never clipped: the client raises and uploads nothing.
Every other instruction is the plain :class:`client_app.fedpower_client.FedPowerClient`'s.
"""

from __future__ import annotations

import numpy as np

from fl_strategies.kernels.linalg import procrustes
from fl_strategies.kernels.standardize import between_sum_of_squares
from fl_strategies.privacy.fixed_point import LimbCode

from .fedpower_client import FedPowerClient
from .ld_replies import ld_sums

__all__ = ["SecurePowerClient", "DISCOVERY_PHASES"]

DISCOVERY_PHASES = ("discovery-counts", "discovery-rows", "discovery-sums", "discovery-ld", "discovery-squares")
"""The phases of the SecAgg+ discovery exchanges
(:attr:`fl_strategies.protocol.strategies.secure_power.SecurePowerStrategy.discovery_phases`)."""


class SecurePowerClient(FedPowerClient):
    """:class:`~client_app.fedpower_client.FedPowerClient` whose SecAgg+ replies are limbs of exact sums."""

    def fit(self, parameters, config):
        """The plain reply, or under SecAgg+ its values as one vector of limbs (module docstring)."""
        if "secagg-exponent" not in config:
            return super().fit(parameters, config)
        code = LimbCode(int(config["secagg-clients"]), int(config["secagg-exponent"]))
        phase = config.get("phase")
        if phase in DISCOVERY_PHASES:
            values = self.discovery_values(phase, config)
        else:
            if isinstance(config.get("variant-align"), bytes):  # round 1 after discovery-counts: the kept variants
                self._align(config["variant-align"])
            values = self.fit_values(parameters, config)
        try:
            limbs = code.encode(np.concatenate(values))
        except ValueError:  # the reason goes to the server: it names the public range, never the site's value
            raise ValueError(f"partition {self.partition_id}: a value to upload is not finite or exceeds the "
                             f"fixed-point range {code.max_value:.6g} of the server's public bound; nothing is "
                             "uploaded (set secagg-clip larger)") from None
        return [limbs.ravel()], 1, {"partition-id": self.partition_id}

    def _align(self, variants: bytes) -> None:
        """Read the node's genotypes as the server's ``variants`` (encoded list) from now on."""
        self.data.align(variants)
        self.d = self.data.operator().shape[0]

    def discovery_values(self, phase: str, config) -> list:
        """``[[s_i]]``, ``[t_i, c_i, [s_i]]``, ``[q_i]`` or over genotypes ``[[s_i], t_i, c_i, Q_i]`` (module
        docstring), shapes (1,), (d,), (d,), (1,) and (d,)."""
        s = self.s
        if phase == "discovery-rows":
            return [[float(s)]]
        if phase == "discovery-counts":  # genotypes: every count at once, whole numbers
            squares = self.data.allele_squares
            if not self.settings.center:
                return [[float(s)], squares]
            t, counts = self.data.row_sum, self.data.call_counts
            calls = np.full(self.d, float(s)) if counts is None else counts
            if getattr(self.data, "bim", None) is None or self.settings.nonfounders:
                return [[float(s)], t, calls, squares]
            return [[float(s)], t, calls, squares] + list(self.data.founder_sums or (t, calls))
        t = self.data.row_sum
        counts = self.data.call_counts
        calls = np.full(self.d, float(s)) if counts is None else counts
        if phase == "discovery-sums":
            if getattr(self.data, "bim", None) is None or self.settings.nonfounders:
                return [t, calls, [s]]
            founders = self.data.founder_sums  # None where every person in the fit is a founder: its own sums
            return [t, calls, [s]] + list(founders if founders is not None else (t, calls))
        if phase == "discovery-ld":  # the pair sums of indep-pairwise, in the kept variants' columns
            if isinstance(config.get("variant-align"), bytes):
                self._align(config["variant-align"])
            pairs, sums = ld_sums(self.data, int(config["ld-sums-start"]), config["ld-spans"])
            return [pairs.ravel().astype(np.float64), sums.ravel().astype(np.float64)]
        if isinstance(config.get("variant-align"), bytes):  # the variants maf-min / geno-max keep, from now on
            self._align(config["variant-align"])
            t, counts = self.data.row_sum, self.data.call_counts
            calls = np.full(self.d, float(s)) if counts is None else counts
        mu = np.frombuffer(config["mean"], dtype="<f8") if "mean" in config else np.zeros(self.d)
        return [self.data.column_sq_sums() + between_sum_of_squares([calls], [t], mu)]

    def fit_values(self, parameters, config) -> list:
        """A round's or the summary's values (module docstring) from the plain reply; after more than one local
        step with ``alignment = "opt"`` the round's ``Y_i`` aligned to the broadcast ``Z``."""
        arrays, s, metrics = super().fit(parameters, config)
        if config.get("phase") == "summary":
            diagonal = [arrays[1].ravel(), [metrics["diagonal"]]] if len(arrays) > 1 else []
            return [s * arrays[0].ravel(), [s, s * metrics["trace"]]] + diagonal
        Y = arrays[0]
        if len(arrays) > 1 and self.settings.alignment == "opt":  # arrays = [Y_i, Z_prev_i]
            Y = Y @ procrustes(arrays[1], parameters[0])
        return [s * Y.ravel(), [s]] + ([[metrics["f"]]] if "f" in metrics else [])
