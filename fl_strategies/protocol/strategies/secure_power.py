"""``power``, ``ssi``, ``fedpower`` and ``localpower`` with ``secure-aggregation = true``: the server learns only
sums, and they are exact.

``fedpower`` and ``localpower`` run ``p_t`` local steps per round; their plain server aligns each site's reply with
the Procrustes rotation of its ``Z_prev_i`` onto the reference client's. Under SecAgg+ each client aligns its own
``Y_i`` onto the broadcast ``Z`` before it is summed (:class:`client_app.secure_power_client.SecurePowerClient`),
so the rounds below hold for them as for ``power`` (``Y_i`` is then the aligned reply); it converges as the
server's alignment does (``simulations/benchmarks/secure_fedpower_alignment.py``).

Every exchange in which a plain run gets each site's own reply goes through Flower's SecAgg+
(:func:`server_app.secure_loop.run_secure_aggregation`) instead:

* **each round**: client ``i`` uploads ``[vec(s_i Y_i), s_i, f_i]`` (``Y_i = A_i Z``; ``f_i = s_i tr(Z^T A_i Z)``
  only when the server tracks the objective), so the server gets ``sum_i s_i A_i Z``, the rows behind it and ``F``,
  never one site's product; ``Z_new = orth(sum_i s_i Y_i / sum_i s_i)`` as in the plain run;
* **discovery** (SecAgg+ exchanges before round 1, numbered up to 0; the plain discovery then carries only the
  partition id and ``d``, and for ``.bed`` sites the variant list's digest, no row count): first ``[s_i]``, whose
  sum is ``n`` (``discovery-rows``, exact integers under the public bound :data:`ROWS_BOUND`: every later bound
  depends on ``n`` only, never on a site's ``s_i``); with ``center`` ``[t_i, c_i, s_i]`` (row sum, non-missing
  calls per column: ``s_i`` in every column unless a ``.bed`` site has missing calls), whose sum gives the mean
  ``mu = sum_i t_i / sum_i c_i`` (over ``.bed`` data with ``nonfounders = false`` also ``[ft_i, fc_i]``, the
  founders' allele sums and calls, the site's own sums where everyone is a founder: ``mu`` from their sums,
  plink2's founders rule); with ``indep-pairwise``, per chunk of first variants, the pair sums and variant sums
  (``discovery-ld``: integers, :mod:`~fl_strategies.protocol.ld_exchange`), from whose sums the server prunes
  (:meth:`SecurePowerStrategy.prune_later`); then ``q_i = sum_calls (x - mu)^2`` per column (the client's own
  sums of squares about its own mean plus ``c_i (t_i / c_i - mu)^2``, as Chan et al.'s pairwise update), whose sum over
  ``sum_i c_i`` is the variance that gives ``scale`` and ``tr(C)`` as the plain discovery's
  :func:`~fl_strategies.kernels.standardize.pooled_variance` does (:meth:`~..base.FederatedStrategy.standardize`);
  over ``.bed`` / ``.pgen`` genotypes, whose values are all whole numbers, the row counts, the row sums and the
  sums of squares travel in one exchange instead (``discovery-counts``: ``[s_i, t_i, c_i, Q_i]`` and the founders'
  sums, ``Q_i`` the raw sums of squared allele counts, under the public :data:`COUNTS_BOUND`), the server centres
  ``sum_i Q_i`` at ``mu`` exactly (:func:`exact_squares`), and round 1 carries the variants the filters kept: one
  exchange (plus the pair sums' with ``indep-pairwise``) instead of three;
* **the summary** (one more SecAgg+ exchange after the last round, no row of its own): ``[vec(s_i A_i Z),
  s_i, s_i tr(A_i)]`` at the final ``Z`` (and, over ``.bed`` files with missing calls and ``scale = "hwe"``,
  ``[vec(S_i), sum delta]``, the site's part of plink2's diagonal:
  :meth:`~fl_strategies.kernels.rows.BedVariants.missingness_diagonal`), from which the PCA model is built as in
  the plain run;
* **the outlier passes** (``outlier-sigma``; after a fit, two more SecAgg+ exchanges each:
  :func:`~fl_strategies.protocol.outlier_exchange.secure_outlier_pass` through :meth:`SecurePowerStrategy.
  secure_exchange`): ``[s_i, sum of scores (p,), sum of squared scores (p,)]``, then ``[flagged count]``, with the
  public bound of :meth:`SecurePowerStrategy.score_bound`; the fit is then run again from discovery.

Exactness. Each upload travels as fixed-point limbs that Flower's quantiser passes unchanged
(:mod:`fl_strategies.privacy.fixed_point`): the server's sum is the exact sum of the clients' fixed-point values,
within ``m 2^-(f+1)`` of the float sum, ``2^-f <= 2^(2 - bL) B`` for the public bound ``B`` below and
``bL >= 63`` bits (87 for 4 clients). The plain run sums the same float64 products in float64, so the two runs'
estimates agree to float64 round-off in every round.

The scale. ``B`` is public: ``secagg-clip`` when set; over PLINK genotypes without ``row-normalize`` or ``clip-norm``
``n R^2 r`` with ``R^2`` the bound on a row's (weighted) squared norm that allele counts in ``[0, 2]`` give with the
broadcast mean and scale (:meth:`SecurePowerStrategy.genotype_row_bound`; the summary with plink2's diagonal a wider
one, :meth:`SecurePowerStrategy.summary_bound`), so that genotypes need no ``secagg-clip``; else (rows of norm at
most ``c``: 1 with ``row-normalize``,
``clip-norm`` when set; centred ones within ``c + ||mu||`` of 0, scaled ones within ``(c + ||mu||) / min scale``)
``n ((c + ||mu||) / min scale)^2 r``
(``scale`` 1 without ``scale``; ``mu`` 0 before the mean is known), which bounds every entry of ``s_i A_i Z`` (``s_i ||A_i||_2 sqrt(r)``),
``f_i``, ``s_i tr(A_i)``, ``s_i``, ``t_i`` and ``q_i``; ``n`` is the total row count and ``mu`` and ``scale`` the
broadcast ones, all known to every client. No scale is derived from what a site's upload holds; a client whose value exceeds ``B``
uploads nothing (it is never clipped), and its round goes on as one where it dropped out.

Drop-outs. A client lost after it shared its keys is removed from the sum by SecAgg+ (its masks are reconstructed
from the threshold of shares): the round's sum then holds the other sites' products and their rows ``sum s_i``,
as a plain round without that reply. Below the threshold SecAgg+ forms no sum and the run fails with one line.
The summary needs every client (the model is of all the data).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
from flwr.common import FitIns, FitRes, Parameters, Scalar, ndarrays_to_parameters, parameters_to_ndarrays
from flwr.server.client_manager import ClientManager
from flwr.server.client_proxy import ClientProxy

from ...kernels.standardize import pooled_mean
from ...privacy.analyze_gauss import row_bound
from ...privacy.fixed_point import LimbCode, limb_code
from ...files.variants import encode_variants
from ...kernels.ld_prune import VARIANT_SUMS, ld_exceeds
from ..ld_exchange import MAX_PAIRS, prune_decision, prune_spans
from ...settings.config import (SECURE_BOUND_NEEDED, ConfigError, check_against_data, secure_power,
                                variant_qc)
from ..base import log, uploaded_bytes
from ..secure_sum import secure_sum
from .fedpower import FedPowerStrategy

__all__ = ["SecurePowerStrategy", "SECAGG_EXPONENT", "SECAGG_CLIENTS", "ROWS_BOUND", "COUNTS_BOUND", "exact_squares"]

ROWS_BOUND = 2.0 ** 52
"""The public bound on one site's row count in the ``discovery-rows`` sum (an integer below it is exact in
float64 and in every limb code of up to :data:`~fl_strategies.settings.config.MAX_SECAGG_CLIENTS` clients)."""

COUNTS_BOUND = 4.0 * ROWS_BOUND
"""The public bound on every value of a genotype site's ``discovery-counts`` upload: its row count (below
:data:`ROWS_BOUND`), its calls and allele sums (at most ``2 s_i``) and sums of squared allele counts (at most
``4 s_i``) per variant, all whole numbers, exact in every limb code of this bound."""

SECAGG_EXPONENT = "secagg-exponent"
"""Fit-config key of the fixed-point exponent ``f`` (:class:`fl_strategies.privacy.fixed_point.LimbCode`)."""

SECAGG_CLIENTS = "secagg-clients"
"""Fit-config key of ``m``, the clients whose limbs are summed (it fixes the limb width)."""


class SecurePowerStrategy(FedPowerStrategy):
    """:class:`FedPowerStrategy` for ``power``, ``ssi``, ``fedpower`` and ``localpower``; with
    ``secure-aggregation = true`` every sum goes through SecAgg+ as exact fixed-point limbs (module docstring).
    Without it, the plain strategy unchanged. ``krylov`` is this machinery with the Krylov step from each round's sum
    (:class:`~fl_strategies.protocol.strategies.secure_krylov.SecureKrylovStrategy`, :meth:`advance_from_sum`)."""

    def __init__(self, cfg: dict[str, Any], dimension: int, reference=None, wait_timeout: float = 600.0) -> None:
        super().__init__(cfg, dimension, reference, wait_timeout)
        self.secure = secure_power(cfg)
        self.aggregated: set[int] = set()
        self.code: LimbCode | None = None
        self.round_sum: np.ndarray | None = None  # the last round's decoded sum: [sum_i s_i Y_i, sum_i s_i(, F)]
        self.calls: np.ndarray | None = None  # non-missing calls per column over all sites (d,): n without missing
        self.rows_total: int | None = None  # n, from the SecAgg+ sum of the row counts (sizes stays empty)
        self._variant_align: bytes | None = None  # the variants maf-min / geno-max keep, sent to the nodes
        self._first_basis: np.ndarray | None = None  # Z_0 drawn again in their dimension, for round 1
        self._ld: dict[str, Any] | None = None  # indep-pairwise from SecAgg+ sums: map, window, chunks, pooled sums
        self._exchange: dict[str, Any] | None = None  # an exchange outside the fit (an outlier pass's): secure_exchange
        self._raw_sums: tuple[np.ndarray, ...] | None = None  # discovery-counts: (squares, allele sums, calls) (d,)
        self._align_first_round = False  # round 1 sends the kept variants (no discovery-squares exchange sends them)

    def __repr__(self) -> str:
        return super().__repr__()[:-1] + (", secagg)" if self.secure else ")")

    # -- SecAgg+ set-up (server_app.secure_loop) ---------------------------------------------------------
    def initialize_parameters(self, client_manager: ClientManager) -> Parameters:
        """Discovery and ``Z_0``; under SecAgg+ the limb code from the public bound (module docstring)."""
        parameters = super().initialize_parameters(client_manager)
        if self.secure and not (self.settings.secagg_clip > 0 or self.settings.row_normalize
                                or self.settings.clip_norm > 0 or self.variants is not None):
            raise ConfigError(SECURE_BOUND_NEEDED)  # dataset = "nodes": only the nodes knew their data are no .bed
        if self.secure:  # the row counts first (over genotypes with the other counts): integers, exact
            self.code = limb_code(COUNTS_BOUND if self.merges_discovery else ROWS_BOUND, self.m)
            log.info("%s: SecAgg+ with %d limbs of %d bits per value; the row counts first (each below 2^52), then "
                     "a fixed-point step from public bounds that depend only on n", self.settings.strategy,
                     self.code.limbs, self.code.limb_bits)
        return parameters

    @property
    def rows_public(self) -> bool:
        """No row count in the clear under SecAgg+: ``n`` comes from the ``discovery-rows`` sum."""
        return not self.secure

    @property
    def num_rows(self) -> int:
        """``n``: the nodes' row counts, or under SecAgg+ their secure sum (0 before it is formed)."""
        return super().num_rows if not self.secure else (self.rows_total or 0)

    def discovery_bound(self) -> float:
        """The public bound of the discovery sums: ``max(B, 4 n)``. ``B`` bounds them for rows of norm at most
        ``c``; ``4 n`` bounds genotypes' (allele counts in ``[0, 2]``): a call count ``c_i <= s_i <= n``, an
        allele sum ``t_i <= 2 c_i`` and a sum of squares about a mean in ``[0, 2]`` ``q_i <= 4 c_i``."""
        return max(self.upload_bound(), 4.0 * self.num_rows)

    def upload_bound(self) -> float:
        """``B``, the public bound on every value a client uploads (module docstring); over genotypes without
        ``secagg-clip``, ``row-normalize`` or ``clip-norm``, ``n R^2 r`` with :meth:`genotype_row_bound`'s ``R^2``."""
        n = float(self.num_rows)
        if self.settings.secagg_clip > 0:
            return max(self.settings.secagg_clip, n)
        genotypes = self.genotype_row_bound()
        if genotypes is not None:
            return n * genotypes * self.r
        radius = row_bound(self.settings.clip_norm) + (float(np.linalg.norm(self.mean)) if self.mean is not None
                                                       else 0.0)
        if self.scale is not None:
            radius /= float(np.min(self.scale))
        return n * radius * radius * self.r

    def genotype_row_bound(self) -> float | None:
        """``R^2``, the public bound on a genotype row's weighted squared norm ``omega_i ||x_i||^2``, from the
        broadcast mean and scale alone; ``None`` unless the data are ``.bed`` / ``.pgen`` genotypes (the server
        holds their variant list) with neither ``row-normalize`` nor ``clip-norm``.

        An allele count lies in ``[0, 2]``; centred and scaled, entry ``j`` of a row lies within
        ``b_j = max(mu_j, 2 - mu_j) / scale_j`` of 0 (``2 / scale_j`` before the mean is known; a missing call is
        0 after centring), so ``||x_i||^2 <= sum_j b_j^2``. With plink2's missingness weights
        ``omega_i = (d / c_i)^2`` (``scale = "hwe"`` with missing calls) a row of ``c_i`` calls has
        ``omega_i ||x_i||^2 <= d^2 max_j b_j^2 / c_i <= d^2 max_j b_j^2``.
        """
        if self.variants is None or self.settings.row_normalize or self.settings.clip_norm > 0:
            return None
        b = np.full(self.d, 2.0) if self.mean is None else np.maximum(np.abs(self.mean), np.abs(2.0 - self.mean))
        if self.scale is not None:
            b = b / self.scale
        if self.plink2_diagonal:
            return float(self.d) ** 2 * float(np.max(b)) ** 2
        return float(b @ b)

    def summary_bound(self) -> float:
        """The public bound on the summary's values: ``B``, and with plink2's diagonal over genotypes (its
        ``vec(S_i)`` sums ``|delta_i| omega_i ||x_i Z||^2 <= d^3 max_j b_j^4`` a person, ``|delta_i| =
        ||x_i||^2 |1 / c_i - d / c_i^2| <= d max_j b_j^2``) ``n d R^2 max_j b_j^2`` if larger, in the terms of
        :meth:`genotype_row_bound`."""
        bound = self.upload_bound()
        if self.plink2_diagonal and self.settings.secagg_clip == 0 and self.genotype_row_bound() is not None:
            bmax2 = self.genotype_row_bound() / float(self.d) ** 2
            bound = max(bound, float(self.num_rows) * float(self.d) ** 3 * bmax2 * bmax2)
        return bound

    # -- discovery sums ----------------------------------------------------------------------------------
    @property
    def merges_discovery(self) -> bool:
        """Whether the row counts, row sums and sums of squares travel in one SecAgg+ exchange
        (``discovery-counts``): over ``.bed`` / ``.pgen`` genotypes, whose values are all whole numbers below the
        public :data:`COUNTS_BOUND`, so that no sum waits for ``n`` (the fixed-point step) or for the mean (the
        sums of squares are raw, centred at the server exactly: :func:`exact_squares`)."""
        return self.variants is not None

    @property
    def discovery_phases(self) -> list[str]:
        """The SecAgg+ discovery exchanges: the row counts, the row sums (with ``center``), the pair sums of
        ``indep-pairwise`` (one exchange per chunk, as many as reserved: :meth:`prune_later`), then the sums of
        squares; over genotypes (:attr:`merges_discovery`) the first, second and last are one, ``discovery-counts``."""
        ld = ["discovery-ld"] * (self._ld["reserved"] if self._ld is not None else 0)
        if self.merges_discovery:
            return ["discovery-counts"] + ld
        return ["discovery-rows"] + (["discovery-sums"] if self.settings.center else []) + ld + ["discovery-squares"]

    @property
    def discovery_rounds(self) -> list[int]:
        """Their SecAgg+ round numbers, up to 0 (none without SecAgg+); once the pair sums' chunks are known (after
        the variant filters), the reserved pruning rounds beyond them are no longer listed (the loop skips them)."""
        if not self.secure:
            return []
        phases = self.discovery_phases
        rounds = list(range(1 - len(phases), 1))
        if self._ld is None or self._ld.get("chunks") is None:
            return rounds
        first = rounds[phases.index("discovery-ld")]
        return [r for r, phase in zip(rounds, phases) if phase != "discovery-ld" or r - first < len(self._ld["chunks"])]

    def _phase(self, server_round: int) -> str:
        """The discovery exchange of SecAgg+ round ``server_round`` (<= 0)."""
        phases = self.discovery_phases
        return phases[server_round - (1 - len(phases))]

    def prune_later(self, chromosomes: list[str], positions: np.ndarray, window) -> bool:
        """Under SecAgg+ ``indep-pairwise`` prunes from SecAgg+ sums of the pair sums, after the secure variant
        filters (plink2 applies ``--maf`` / ``--geno`` first): keep the map and reserve the exchanges. Every chunk
        holds the pairs of at most ``MAX_PAIRS // longest span`` first variants, so that the filters, which only
        shorten the spans, never need more chunks than reserved here."""
        if not self.secure:
            return False
        spans = prune_spans(chromosomes, positions, window)
        per = max(1, MAX_PAIRS // max(1, int(spans.max(initial=0))))
        self._ld = {"chromosomes": list(chromosomes), "positions": np.asarray(positions), "window": window,
                    "per": per, "reserved": max(1, -(-len(spans) // per)), "chunks": None}
        return True

    @property
    def sends_founders(self) -> bool:
        """Whether ``discovery-sums`` carries the founders' allele sums and calls too (``.bed`` data with
        ``nonfounders = false``: plink2's founders rule; a site whose people are all founders sends its own sums
        again, so that no site says whether its ``.fam`` has parents)."""
        return self.variants is not None and not self.settings.nonfounders

    def _configure_discovery(self, server_round: int) -> list[tuple[ClientProxy, FitIns]]:
        phase = self._phase(server_round)
        self._pending = {"start": time.perf_counter(), "phase": phase}
        config = {"phase": phase, **self.center_config()}
        if phase == "discovery-ld":
            index = server_round - (1 - len(self.discovery_phases)) - self.discovery_phases.index("discovery-ld")
            a, b = self._ld["chunks"][index]
            self._pending["chunk"] = index
            config.update({"ld-sums-start": int(a), "ld-spans": self._ld["spans"][a:b].astype("<i8").tobytes()})
            if index == 0 and self._variant_align is not None:
                config["variant-align"] = self._variant_align  # the variants the filters keep, from now on
        if phase == "discovery-squares" and self._variant_align is not None:
            config["variant-align"] = self._variant_align  # the variants the filters (and pruning) keep
        ins = FitIns(ndarrays_to_parameters([]), config)
        return [(self.proxies[pid], ins) for pid in sorted(self.proxies)]

    def _keep_variants(self, keep: np.ndarray) -> None:
        """Make the variants of ``keep`` (d,) bool the run's: the mean, calls (and the raw sums of
        ``discovery-counts``) cut to them, the list sent with the next exchange (round 1's after a merged discovery),
        ``Z_0`` drawn again in their dimension."""
        self.variants = [variant for variant, kept in zip(self.variants, keep) if kept]
        self.d, self.calls, self.mean = len(self.variants), self.calls[keep], self.mean[keep]
        if self._raw_sums is not None:
            self._raw_sums = tuple(values[keep] for values in self._raw_sums)
        self._align_first_round = self.merges_discovery
        self._variant_align = encode_variants(self.variants)
        self._first_basis = self.starting_basis()
        if self._held is not None:  # round 0's row (written before these sums) stands for the new Z_0
            self._held = (self._held[0], self._first_basis)
        if self._ld is not None and self._ld.get("chunks") is None:  # the map follows the filters' variants
            self._ld["chromosomes"] = [c for c, kept in zip(self._ld["chromosomes"], keep) if kept]
            self._ld["positions"] = self._ld["positions"][keep]

    def _start_pruning(self) -> None:
        """The chunks of the pair sums over the variants the filters kept (at most the reserved number)."""
        ld = self._ld
        ld["spans"] = prune_spans(ld["chromosomes"], ld["positions"], ld["window"])
        ld["chunks"] = [(a, min(a + ld["per"], self.d)) for a in range(0, self.d, ld["per"])]
        ld["vsums"], ld["exceeds"] = np.zeros((self.d, len(VARIANT_SUMS)), dtype=np.int64), []

    def _aggregate_pairs(self, server_round: int, values: np.ndarray, a: int, b: int) -> None:
        """One chunk's SecAgg+ sum ``[vec(pair sums) (P, 6), vec(variant sums) (b - a, 5)]``; after the last,
        plink2's rule (:func:`~fl_strategies.protocol.ld_exchange.prune_decision`) and the kept variants."""
        ld = self._ld
        whole = np.rint(values)
        if np.any(whole != values) or np.any(whole < 0):
            self.abort_round(server_round, "the SecAgg+ sum of the pair sums is not whole numbers >= 0")
            return
        whole = whole.astype(np.int64)
        pairs = int(ld["spans"][a:b].sum())
        ld["exceeds"].append(ld_exceeds(whole[: 6 * pairs].reshape(pairs, 6), ld["window"].r2))
        ld["vsums"][a:b] = whole[6 * pairs:].reshape(b - a, len(VARIANT_SUMS))
        if len(ld["exceeds"]) < len(ld["chunks"]):
            return
        try:
            keep, prune_in, prune_out = prune_decision(
                self.variants, ld["chromosomes"], ld["positions"], ld["window"], ld["spans"], ld["vsums"],
                ld["exceeds"], f"over {self.m} node(s), from the SecAgg+ sums of their pair sums", len(ld["chunks"]))
        except ConfigError as ex:
            self.abort_round(server_round, str(ex))
            return
        if len(prune_in) < self.r:
            self.abort_round(server_round, f"indep-pairwise = '{self.settings.indep_pairwise}' keeps "
                                           f"{len(prune_in)} of the {self.d} variants, fewer than iteration-rank = "
                                           f"{self.r}: raise its r^2 threshold")
            return
        self.prune = {"prune_in": prune_in, "prune_out": prune_out}
        if not keep.all():
            self._keep_variants(keep)
        if self.merges_discovery:  # the variance of the kept variants, from discovery-counts' raw sums
            self._squares_sum(self._centred_raw_squares())

    def _aggregate_discovery(self, server_round: int, results, failures) -> None:
        """``n`` (``discovery-rows``), the mean and the call counts (``discovery-sums``), or ``scale`` and
        ``tr(C)`` (``discovery-squares``), from the sums."""
        phase = self._pending["phase"]
        d, n = self.d, self.num_rows
        if phase == "discovery-ld":
            a, b = self._ld["chunks"][self._pending["chunk"]]
            size = 6 * int(self._ld["spans"][a:b].sum()) + len(VARIANT_SUMS) * (b - a)
        elif phase == "discovery-counts":
            size = 1 + d + ((4 if self.sends_founders else 2) * d if self.settings.center else 0)
        else:
            size = {"discovery-rows": 1, "discovery-sums": (4 if self.sends_founders else 2) * d + 1}.get(phase, d)
        values = self._decoded(server_round, results, failures, size, require_all=True)
        if values is None:
            return
        if phase == "discovery-ld":
            self._aggregate_pairs(server_round, values, a, b)
            return
        if phase == "discovery-counts":
            self._aggregate_counts(server_round, values)
            return
        self._aggregate_phase(server_round, phase, values)

    def _aggregate_counts(self, server_round: int, values: np.ndarray) -> None:
        """``discovery-counts``: ``[s, (t (d), c (d),) squares (d,) (, founders' allele sums (d), calls (d))]``,
        taken as ``discovery-rows``, ``discovery-sums`` and (once the variants are final: after the pair sums'
        exchanges with ``indep-pairwise``) ``discovery-squares`` would be."""
        d = self.d
        squares = values[1 + 2 * d: 1 + 3 * d] if self.settings.center else values[1: 1 + d]
        if np.any(squares != np.round(squares)) or np.any(squares < 0):
            self.abort_round(server_round, "the SecAgg+ sums of the squared allele counts are not whole numbers >= 0")
            return
        if not self._aggregate_phase(server_round, "discovery-rows", values[:1]):
            return
        n = float(self.num_rows)
        t, c = (values[1: 1 + d], values[1 + d: 1 + 2 * d]) if self.settings.center else (np.zeros(d), np.full(d, n))
        self._raw_sums = (squares, t, c)
        if self.settings.center and not self._aggregate_phase(
                server_round, "discovery-sums", np.concatenate([t, c, values[:1], values[1 + 3 * d:]])):
            return
        if self._ld is None or self._ld.get("chunks") is None:  # else after the last pair sums (_aggregate_pairs)
            self._squares_sum(self._centred_raw_squares())

    def _centred_raw_squares(self) -> np.ndarray:
        """``q = sum_calls (x - mu)^2`` per variant from ``discovery-counts``' raw sums at the run's mean ``mu``
        (:func:`exact_squares`)."""
        squares, t, c = self._raw_sums
        self._raw_sums = None
        return exact_squares(squares, t, c, self.mean)

    def _aggregate_phase(self, server_round: int, phase: str, values: np.ndarray) -> bool:
        """``n`` (``discovery-rows``), the mean and the call counts (``discovery-sums``), or ``scale`` and ``tr(C)``
        (``discovery-squares``), from their sums; whether the run goes on."""
        d, n = self.d, self.num_rows
        if phase == "discovery-rows":
            total = float(values[0])
            if total != round(total) or total < 1:
                self.abort_round(server_round, f"the SecAgg+ sum of the row counts is {total!r}, not a whole number "
                                               ">= 1")
                return False
            self.rows_total = int(total)
            log.info("%r: %d clients, %d rows in all (the SecAgg+ sum of their row counts)", self, self.m,
                     self.rows_total)
            try:
                check_against_data(self.cfg, self.d, self.rows_total)
            except ConfigError as ex:
                self.abort_round(server_round, str(ex))
                return False
            if not self.merges_discovery:  # the next exchange's step; discovery-counts carried every count already
                self.code = limb_code(self.discovery_bound(), self.m)
                log.info("SecAgg+ discovery sums: fixed-point step 2^%d (public bound %.6g): exact to %.3g",
                         -self.code.exponent, self.discovery_bound(), self.code.tolerance())
            return True
        if phase == "discovery-sums":
            calls = values[d: 2 * d]
            if values[2 * d] != n or np.any((calls < 0) | (calls > n)) or np.any(calls != np.round(calls)):
                self.abort_round(server_round, f"the clients' rows sum to {values[2 * d]:.0f} and their calls to "
                                               f"{calls.min():.0f}..{calls.max():.0f} per column, not the n = {n} "
                                               "of their row counts' sum")
                return False
            frequency = None  # plink2's founders rule: (calls, allele sums) of the founders, where they differ
            if self.sends_founders:
                totals, counts = values[2 * d + 1: 3 * d + 1], values[3 * d + 1:]
                if np.any(counts != np.round(counts)) or np.any((counts < 0) | (counts > calls)) or \
                        np.any((totals < 0) | (totals > 2 * counts)):
                    self.abort_round(server_round, "the SecAgg+ sums of the founders' calls and allele sums are not "
                                                   "whole numbers within the calls' sums")
                    return False
                if not (np.array_equal(counts, calls) and np.array_equal(totals, values[:d])):
                    frequency = (counts, totals)
                    log.info("allele frequencies from the founders alone (plink2's default; nonfounders = true takes "
                             "every person's), from the SecAgg+ sums of the founders' calls and allele sums")
            self.calls = calls
            self.mean = pooled_mean(*([[frequency[0]], [frequency[1]]] if frequency else [[calls], [values[:d]]]))
            try:
                keep = None if not variant_qc(self.cfg) else self.variants_kept(
                    calls, values[:d], n, f"{self.m} node(s), from the SecAgg+ sums of their call counts and allele "
                    "sums", frequency)
            except ConfigError as ex:
                self.abort_round(server_round, str(ex))
                return False
            if keep is not None:  # the nodes read the kept variants from the next exchange on; Z_0 drawn again
                self._keep_variants(keep)
                calls = self.calls
            if self._ld is not None:
                try:
                    self._start_pruning()
                except ConfigError as ex:
                    self.abort_round(server_round, str(ex))
                    return False
            self.code = limb_code(self.discovery_bound(), self.m)
            log.info("center = true: the mean of %d rows, from the SecAgg+ sum of the clients' row sums", n)
            if np.any(calls < n):
                log.info("missing genotype calls: %.4g %% of the calls missing, %d variant(s) without a call (from the "
                         "SecAgg+ sum of the clients' call counts); each missing call imputed with the variant's mean "
                         "(0 after centring)", 100.0 * (1.0 - float(np.sum(calls)) / (n * d)), int(np.sum(calls == 0)))
            return True
        self._squares_sum(values)
        return True

    def _squares_sum(self, values: np.ndarray) -> None:
        """``scale`` and ``tr(C)`` from ``sum_i q_i`` (d,), the sums of squares about the mean over the calls; then
        the fixed-point step of the rounds."""
        d, n = self.d, self.num_rows
        calls = self.calls if self.calls is not None else np.full(d, float(n))
        variance = pooled_mean([calls], [values])  # sum_i q_i / sum_i c_i: the pooled variance over the calls
        if self.scales_columns:
            self.standardize(variance, calls, "the SecAgg+ sums of the clients' row sums and sums of squares")
        else:
            self.total_variance = float(np.sum(values) / n)
        self.code = limb_code(self.upload_bound(), self.m)

    def secagg_ranges(self) -> tuple[float, int, int]:
        """SecAgg+'s ``(clipping_range, quantization_range, modulus_range)``: its quantiser is the identity on
        the limbs."""
        return self.code.clipping_range, self.code.quantization_range, self.code.modulus

    @property
    def secure_summary(self) -> bool:
        """Whether the summary exchange runs as one more SecAgg+ round (after the last round, no row)."""
        return self.secure

    def known_product(self, Z: np.ndarray) -> np.ndarray | None:
        """``None`` under SecAgg+, whose summary's layout holds every site's ``s_i A_i Z`` (module docstring); the
        plain strategy's otherwise."""
        return None if self.secure_summary else super().known_product(Z)

    def abort_round(self, server_round: int, reason: str) -> None:
        """Abort the run: no estimate or model from a sum SecAgg+ did not form."""
        self.abort(f"round {server_round}: {reason}; the run stops rather than use a wrong sum")

    def _secure_config(self) -> dict[str, Scalar]:
        return {SECAGG_EXPONENT: self.code.exponent, SECAGG_CLIENTS: self.m}

    def _values(self, extra: int) -> int:
        """Values per upload: ``d r`` products and ``extra`` scalars."""
        return self.d * self.r + extra

    # -- exchanges outside the fit (the outlier passes: fl_strategies.protocol.outlier_exchange) -------------
    def score_bound(self) -> float | None:
        """``R``, the public bound on one person's scores under the model just fitted: ``sqrt(sum_j y_j^2) <= R``
        over its components (the ``p`` an outlier pass sends are among them), from :meth:`genotype_row_bound`'s
        ``R^2`` (the broadcast mean and scale alone); ``None`` where that has none (no genotypes).

        A person's scores are ``y = sqrt(omega_i) V x_i`` (:func:`~fl_strategies.files.pca.transform`: ``x_i`` the
        centred and scaled row, a missing call 0; ``omega_i = (d / c_i)^2`` with ``scale = "hwe"`` over missing
        calls, else 1) with ``V`` (p, d) of orthonormal rows, so ``||y||^2 = omega_i ||V x_i||^2 <= omega_i
        ||x_i||^2 <= R^2``. Hence each score ``|y_j| <= R`` and ``y_j^2 <= R^2``: a site's score sums are within
        ``s_i R <= n R``, its sums of squares within ``n R^2``, its count of people within ``n``."""
        squared = self.genotype_row_bound()
        return None if squared is None else float(np.sqrt(squared))

    def secure_exchange(self, ins: FitIns, size: int, bound: float) -> None:
        """Make the next SecAgg+ round an exchange outside the fit: every client gets ``ins`` (plus the limb code of
        the public ``bound`` on each of its ``size`` values) and every client must be in the sum, whose decoded
        values :meth:`exchange_sum` returns. The fit's own state is left as it was."""
        self._exchange = {"ins": ins, "size": int(size), "code": limb_code(bound, self.m), "sum": None}

    def exchange_sum(self) -> np.ndarray | None:
        """The decoded sum of the last :meth:`secure_exchange` (``None`` if SecAgg+ formed none); the exchange ends."""
        exchange, self._exchange = self._exchange, None
        return None if exchange is None else exchange["sum"]

    def _configure_exchange(self) -> list[tuple[ClientProxy, FitIns]]:
        ins = self._exchange["ins"]
        ins.config.update({SECAGG_EXPONENT: self._exchange["code"].exponent, SECAGG_CLIENTS: self.m})
        return [(self.proxies[pid], ins) for pid in sorted(self.proxies)]

    def _aggregate_exchange(self, server_round: int, results, failures) -> None:
        self._exchange["sum"] = self._decoded(server_round, results, failures, self._exchange["size"],
                                              require_all=True, code=self._exchange["code"])

    # -- one round --------------------------------------------------------------------------------------
    def configure_fit(self, server_round: int, parameters: Parameters,
                      client_manager: ClientManager) -> list[tuple[ClientProxy, FitIns]]:
        """The plain instructions, plus the limb code under SecAgg+; after the last round, the summary."""
        if not self.secure:
            return super().configure_fit(server_round, parameters, client_manager)
        if self._exchange is not None:
            return self._configure_exchange()
        if server_round <= 0:
            instructions = self._configure_discovery(server_round)
        elif server_round > self.num_rounds:
            instructions = self.configure_summary()
            self._pending = {"start": time.perf_counter()}
            self.code = limb_code(self.summary_bound(), self.m)  # plink2's diagonal may need a wider range
        else:
            if self._first_basis is not None:  # Z_0 in the dimension the variant filters left
                parameters, self._first_basis = ndarrays_to_parameters([self._first_basis]), None
            instructions = super().configure_fit(server_round, parameters, client_manager)
            if self._align_first_round:  # the kept variants, after a merged discovery (no discovery-squares)
                for _, ins in instructions[:1]:
                    ins.config["variant-align"] = self._variant_align
                self._align_first_round = False
        for _, ins in instructions[:1]:  # one FitIns object is shared by every client
            ins.config.update(self._secure_config())
        return instructions

    def aggregate_fit(self, server_round: int, results: list[tuple[ClientProxy, FitRes]],
                      failures: list) -> tuple[Parameters | None, dict[str, Scalar]]:
        """``Z_new = orth(sum_i s_i Y_i / sum_i s_i)`` from the SecAgg+ sum (module docstring)."""
        if not self.secure:
            return super().aggregate_fit(server_round, results, failures)
        if self._exchange is not None:
            self._aggregate_exchange(server_round, results, failures)
            return None, {}
        if server_round <= 0:
            self._aggregate_discovery(server_round, results, failures)
            return None, {}
        if server_round > self.num_rounds:
            self._aggregate_summary(server_round, results, failures)
            return None, {}
        values = self._decoded(server_round, results, failures, self._values(1 + self.tracks_objective),
                               require_all=False)
        if values is None:
            return None, {}
        self.round_sum = values
        self._pending.update(bytes_up=uploaded_bytes(results), rejected=0, failures=len(failures),
                             participants=len(results), distinct=len(results), misalignment=0.0)
        return self.advance_from_sum(server_round, values, len(results))

    def advance_from_sum(self, server_round: int, values: np.ndarray,
                         summed: int) -> tuple[Parameters | None, dict[str, Scalar]]:
        """The round's step from its decoded SecAgg+ sum: the stopping rule, then
        ``Z_new = orth(sum_i s_i Y_i / sum_i s_i)`` (module docstring).

        Parameters
        ----------
        server_round : int
        values : ndarray of shape (d r + 1,) or (d r + 2,)
            ``[vec(sum_i s_i Y_i), sum_i s_i(, F)]``.
        summed : int
            The clients whose uploads are in the sum.
        """
        product, rows = values[: self.d * self.r].reshape(self.d, self.r), values[self.d * self.r]
        if self.tracks_objective and summed == self.m and self.check_stop(server_round, float(values[-1]),
                                                                          self._pending["Z"].T @ product):
            return None, {}
        with np.errstate(all="ignore"):
            mean = product / rows
        return self.advance(server_round, mean)

    def _decoded(self, server_round: int, results, failures, size: int, require_all: bool,
                 code: LimbCode | None = None) -> np.ndarray | None:
        """The decoded sum of ``size`` values from SecAgg+'s aggregate under ``code`` (default the fit's,
        :attr:`code`), or ``None`` after :meth:`abort_round`."""
        code = self.code if code is None else code
        L = code.limbs
        total = secure_sum(self, server_round, results, failures, (L * size,), require_all=require_all)
        if total is None:
            return None
        try:
            values = code.decode(total.reshape(L, size))
        except ValueError as ex:
            self.abort_round(server_round, f"the SecAgg+ sum is not a sum of limbs: {ex}")
            return None
        self.aggregated.add(server_round)
        return values

    def _aggregate_summary(self, server_round: int, results, failures) -> None:
        """The PCA model from ``[sum_i s_i A_i Z, n, sum_i s_i tr(A_i)]`` (every client must be in the sum)."""
        diagonal = self.plink2_diagonal  # then [vec(S_i), sum delta] too
        extra = self.r * self.r + 1 if diagonal else 0
        values = self._decoded(server_round, results, failures, self._values(2) + extra, require_all=True)
        if values is None:
            return
        Z = self._summary_Z
        dr = self.d * self.r
        n = float(values[dr])
        CZ = values[:dr].reshape(self.d, self.r) / n
        plink2 = (values[dr + 2: dr + 2 + self.r * self.r].reshape(self.r, self.r), float(values[-1])) \
            if diagonal else None
        self.summary_model(Z, CZ, float(values[dr + 1]) / n, int(round(n)),
                           uploaded_bytes(results) + len(results) * Z.nbytes, plink2)


def exact_squares(squares: np.ndarray, sums: np.ndarray, calls: np.ndarray, mean: np.ndarray) -> np.ndarray:
    """``sum (x - mu)^2 = Q - 2 mu T + C mu^2`` per column from whole-number sums, in exact rational arithmetic
    and rounded once (no cancellation, whatever ``mu``).

    Parameters
    ----------
    squares, sums, calls : ndarray of shape (d,)
        ``Q``, ``T``, ``C``: the sums over the non-missing calls of ``x^2``, of ``x`` and of 1 (whole numbers).
    mean : ndarray of shape (d,)
        ``mu``, float64 (each an exact binary fraction ``a / b``).

    Returns
    -------
    ndarray of shape (d,)
        ``(Q b^2 - 2 T a b + C a^2) / b^2``, the float64 nearest to the exact value.
    """
    pairs = [float(mu).as_integer_ratio() for mu in mean]
    a = np.array([p[0] for p in pairs], dtype=object)
    b = np.array([p[1] for p in pairs], dtype=object)
    Q, T, C = (np.array([int(v) for v in values], dtype=object) for values in (squares, sums, calls))
    exact = (Q * b * b - 2 * T * a * b + C * a * a) / (b * b)  # Python ints: true division rounds once
    return np.asarray(exact, dtype=np.float64).reshape(len(mean))
