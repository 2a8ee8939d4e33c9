"""What every federated eigenspace strategy adds to :class:`fl_strategies.protocol.base.FederatedStrategy`.

* **Initial estimate.** ``Z_0 = orth(N(0,1)^{d x r})`` from the run seed: every
  strategy of a comparison starts from the same ``Z_0`` (paired starts); with
  ``init-from`` an earlier model's components, completed at random from the same
  seed (:mod:`fl_strategies.files.warm_start`).
* **Results.** One row per round: accuracy against the exact reference
  (:mod:`fl_strategies.kernels.metrics`; empty without one), traffic, participation and
  what the subclass adds.
* **Progress without a reference.** With no exact reference (data on the
  nodes) every row has ``estimate_change`` (sin theta between successive
  estimates, all ``iteration-rank`` columns) and ``estimate_change_first_k``, the change of the kept components
  (below), with ``converged_components`` and ``converged_change`` (:meth:`EigenspaceStrategy.converged_columns`:
  how many leading kept components have converged, which a kept subspace still turning in a bulk of near-equal
  eigenvalues hides) and, in a noise-free run of a strategy whose clients can report
  ``f_i`` (FedPower's and FAPS's), ``iterated_explained_variance`` = ``F / n`` =
  ``tr(Z^T C Z)`` of the row's whole estimate (all ``iteration-rank`` columns)
  and ``iterated_explained_variance_ratio`` = that over ``tr(C)``
  (``total_variance``, from the nodes' ``sq-sum`` at discovery): the clients
  report ``f_i`` every round, so the rows are held one round as under the
  stopping rule, and the last row takes its value from the summary exchange.
  ``explained_variance_ratio`` means what it means in ``pca.npz``: the ratio
  of the components the model keeps (``rank``, or chosen by
  ``variance-target``), summed; only the summary exchange gives it, so only
  the last row has it. Under noise neither ``f_i`` nor ``sq-sum`` is sent
  (they would be released without noise) and these columns are empty.
* **The kept components** (``rank`` of ``iteration-rank``). The first ``rank`` columns of a power iterate are
  not its best ``rank``-dimensional part (their order is that of the QR factorisation), and the trailing columns
  converge at the slower rate ``lambda_{r+1} / lambda_r``. Where the server learns ``G = Z^T (sum_i s_i A_i) Z``
  (``r x r``) of an estimate ``Z`` (:attr:`EigenspaceStrategy.REPORTS_GRAM`: the power methods, from the summed
  products of a one-step round, or from each client's ``s_i Z^T A_i Z`` of a round of several local steps), it
  rotates ``Z`` to its Ritz basis (Rayleigh-Ritz, :func:`fl_strategies.kernels.linalg.ritz_pairs`):
  ``estimate_change_first_k`` is ``sin theta`` between the first ``rank`` Ritz vectors of consecutive estimates,
  the stopping rule's ``F`` is the sum of the ``rank`` largest Ritz values (``tr(G)``, the clients' summed
  ``f_i``, when ``rank = iteration-rank``), and the log says how many leading components have converged (the
  largest ``j`` whose leading ``j``-dimensional Ritz subspace moved by at most :data:`CONVERGED_CHANGE` in the
  round). ``G`` of an estimate is known one round later, so the column is filled in the held row (the last row
  from the summary exchange). Without ``G`` (FAPS, whose clients report ``f_i`` only; noisy runs) the column is
  the change of the first ``rank`` columns and ``F`` is the whole ``sum_i f_i``.
* **Stopping rule** (FAPS paper, eq. 27). With ``stop-tol > 0`` clients also
  report ``f_i = tr(Z^T M_i Z)`` at the estimate they received; the run stops
  once ``|F_k - F_{k-1}| <= stop-tol * F_k`` with ``F`` the kept components' (above). ``F_k``
  is known one round after ``Z_k`` was sent, so each row is written one round
  late (it then carries its own ``objective`` and ``stop_statistic``); when the
  rule fires the newest estimate is discarded and ``Z_k`` is the result, so the
  number of rows is the paper's iteration count (the round that detected
  convergence is not counted, as in the paper).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
from flwr.common import FitIns, FitRes, Parameters, Scalar, ndarrays_to_parameters, parameters_to_ndarrays
from flwr.server.client_manager import ClientManager
from flwr.server.client_proxy import ClientProxy

from ..base import FederatedStrategy, log, uploaded_bytes
from ...kernels.linalg import gaussian_basis, leading_changes, leading_column_changes, ritz_pairs, subspace_distance
from ...kernels.metrics import round_metrics
from ...privacy.noise import run_noise_source
from ...files.pca import MISSINGNESS_DIAGONAL, PRODUCT_KNOWN, choose_rank, pca_model, released_product_model
from ...settings.participation import STREAM_SAMPLING
from ...settings.config import column_scaling
from ...settings.strategies import PcaSettings
from ...files.warm_start import check_width, initial_basis, load_start

__all__ = ["EigenspaceStrategy", "CONVERGED_CHANGE", "STREAM_INIT", "STREAM_SAMPLING"]

# Tags that separate the random streams derived from one run seed.
# the random streams of a run's seed: STREAM_INIT (0) here, STREAM_SAMPLING (1) in fl_strategies.settings.participation,
# STREAM_NOISE (2) in fl_strategies.privacy.noise
STREAM_INIT = 0

#: A leading ``j``-dimensional Ritz subspace has converged when it moves by at most this (sin theta) in a round.
CONVERGED_CHANGE = 1e-3


NUMERICAL_RANK_TOLERANCE = 1e-12
"""A component whose explained variance is at most this share of the first's counts as beyond the data's numerical
rank (rounding of a zero eigenvalue of ``C`` in float64 is about ``1e-16`` of the largest)."""


class EigenspaceStrategy(FederatedStrategy):
    """Base class of the strategies that estimate a ``d x r`` orthonormal basis (``reference``: a
    :class:`fl_strategies.kernels.metrics.Reference`)."""

    #: whether the strategy's clients can report ``f_i = tr(Z^T M_i Z)`` at the estimate they receive
    REPORTS_OBJECTIVE = False
    #: whether the server learns ``G = Z^T (sum_i s_i A_i) Z`` of the estimate whenever the clients report ``f_i``
    REPORTS_GRAM = False
    #: whether every estimate is orthonormal to round-off as the server makes it (Ritz vectors), so that the estimate's
    #: change needs no QR of it (:func:`~fl_strategies.kernels.linalg.subspace_distance`'s ``orthonormal``)
    ORTHONORMAL_ESTIMATES = False

    @property
    def noisy(self) -> bool:
        """Whether the clients add privacy noise (``epsilon`` or ``noise-std``): nothing exact is then released."""
        return self.settings.epsilon > 0 or self.settings.noise_std > 0

    @property
    def tracks_objective(self) -> bool:
        """Whether the clients report ``f_i`` every round: under a stopping rule, or, for the explained variance,
        in a noise-free run with no exact reference (data on the nodes)."""
        return self.stop_tol > 0 or (self.REPORTS_OBJECTIVE and self.reference is None and not self.noisy)

    @property
    def ritz_progress(self) -> bool:
        """Whether the kept components' change and ``F`` come from the Ritz bases (the server learns ``G``)."""
        return self.REPORTS_GRAM and self.tracks_objective

    @property
    def holds_rows(self) -> bool:
        """Rows wait for the next round's ``F`` whenever the clients report it (:attr:`tracks_objective`)."""
        return self.tracks_objective

    def __init__(self, cfg: dict[str, Any], dimension: int | None, reference: Any = None,
                 wait_timeout: float = 600.0) -> None:
        super().__init__(cfg, dimension, reference, wait_timeout)
        self._ritz_basis: np.ndarray | None = None  # the previous estimate's Ritz basis (kept_progress)
        self._ritz_round: int | None = None  # the round of the estimate it belongs to
        #: what a round measured, for the server's progress line (:mod:`fl_strategies.protocol.round_progress`)
        self.progress_notes: dict[str, Any] = {}
        self.start_model = load_start(cfg)  # init-from: refused here, before any node is asked, if unusable
        if self.start_model is not None and self.d is not None:
            check_width(self.start_model, self.d)  # the width, when the harness knows d before discovery

    def initialize_parameters(self, client_manager: ClientManager) -> Parameters:
        """Wait for all clients, learn their partition ids and sizes, and draw ``Z_0`` (or, with ``init-from``,
        start from the earlier model: :mod:`fl_strategies.files.warm_start`)."""
        self._discover(client_manager)
        return ndarrays_to_parameters([self.starting_basis()])

    def starting_basis(self) -> np.ndarray:
        """``Z_0`` (d, r) in the run's dimension, the first of :attr:`iterates`: Gaussian from the run's seed, or
        with ``init-from`` from the earlier model. Drawn again when the dimension changes after discovery (variant
        filters from SecAgg+ sums: :class:`~.secure_power.SecurePowerStrategy`)."""
        rng = np.random.default_rng([self.settings.seed, STREAM_INIT])
        if self.start_model is not None:
            Z0 = initial_basis(self.start_model, self.d, self.r, rng)
            log.info("init-from: Z_0 from the %d component(s) of %s%s", min(len(self.start_model["components"]),
                     self.r), self.start_model["path"], "" if len(self.start_model["components"]) >= self.r else
                     f", completed to iteration-rank = {self.r} columns at random")
        else:
            Z0 = gaussian_basis(self.d, self.r, rng)
        self.iterates = [Z0]
        return Z0

    def noise_source(self) -> str | None:
        """Where the run's noise comes from (:func:`fl_strategies.privacy.noise.run_noise_source`); ``None`` without."""
        reported = {cid: props for cid, props in self.node_properties.items() if cid in self._pid_by_cid}
        return run_noise_source(self.cfg, reported)

    # -- stopping rule ------------------------------------------------------------------------------
    def check_stop(self, server_round: int, objective: float, gram: np.ndarray | None = None) -> bool:
        """Record ``F`` of the estimate broadcast in ``server_round`` and apply rule (27).

        Parameters
        ----------
        server_round : int
            The round whose clients evaluated ``F`` on the broadcast estimate
            ``Z_{server_round - 1}``.
        objective : float
            ``sum_i f_i`` (all ``iteration-rank`` columns).
        gram : ndarray of shape (r, r), optional
            ``G = sum_i s_i Z^T A_i Z`` at the same estimate: the rule then uses the kept components' ``F`` and
            the held row gets their change (:meth:`kept_progress`).

        Returns
        -------
        bool
            True when the rule fires (``self.stopped`` is then set).
        """
        kept = objective if gram is None else self.kept_progress(gram)
        if self.k == self.r:  # tr(G): the same sum as the clients reported it (no round-off of an eigensolver)
            kept = objective
        previous, self._last_objective = self._last_objective, kept
        statistic = None if previous is None else abs(kept - previous) / max(abs(kept), 1e-300)
        if statistic is not None:
            self.progress_notes["stop_statistic"] = statistic
        if self._held is not None:
            if self.stop_tol > 0:
                self._held[0].update(objective=kept, stop_statistic=statistic)
            self._fill_explained_variance(self._held[0], objective / max(self.num_rows, 1))
        if self.stop_tol > 0 and statistic is not None and statistic <= self.stop_tol:
            self.stopped = True
            log.info("stopping rule (27): |F_k - F_k-1| / F_k = %.2e <= %.1e after %d rounds%s",
                     statistic, self.stop_tol, server_round - 1,
                     "" if self.k == self.r or gram is None else f" (F of the {self.k} kept components)")
        return self.stopped

    def kept_progress(self, gram: np.ndarray) -> float:
        """The kept components' ``F`` from ``G = Z^T (sum_i s_i A_i) Z`` of the held row's estimate ``Z``, and
        their change since the previous estimate in the held row (``estimate_change_first_k``), with
        ``converged_components``: the largest ``j <= rank`` whose leading ``j`` Ritz vectors moved by at most
        :data:`CONVERGED_CHANGE` (sin theta), and ``converged_change``: how far they moved (empty for ``j = 0``).

        Parameters
        ----------
        gram : ndarray of shape (r, r)
            ``G`` at the held row's estimate.

        Returns
        -------
        float
            The sum of the ``rank`` largest Ritz values (``tr(G)`` when ``rank = iteration-rank``).
        """
        if self._held is None:
            return float(np.sum(np.linalg.eigvalsh((gram + gram.T) / 2.0)[::-1][: self.k]))
        row, Z = self._held
        values, basis = ritz_pairs(Z, gram)
        if "estimate_change_first_k" not in row or self._ritz_round == row["round"]:
            # measured against a reference (no such column), or the held row's G again (the summary after a stop)
            return float(np.sum(values[: self.k]))
        previous, self._ritz_basis, self._ritz_round = self._ritz_basis, basis, row["round"]
        if previous is not None:
            changes = leading_changes(basis, previous)
            row["estimate_change_first_k"] = float(changes[self.k - 1])
            converged = max((j for j in range(1, self.r + 1) if changes[j - 1] <= CONVERGED_CHANGE), default=0)
            row.update(self.converged_columns(changes))
            self.progress_notes["kept"] = (
                f"round {row['round']}'s {self.k} kept components moved {changes[self.k - 1]:.3e} (sin theta, "
                f"Ritz), {converged} of {self.r} leading converged (moved <= {CONVERGED_CHANGE:g})")
        return float(np.sum(values[: self.k]))

    def converged_columns(self, changes: np.ndarray | None) -> dict[str, Any]:
        """A row's ``converged_components``, the largest ``j <= rank`` whose leading ``j`` components moved by at
        most :data:`CONVERGED_CHANGE` (sin theta) since the previous estimate, and ``converged_change``, how far
        they moved (``None`` for ``j = 0``), from ``changes`` (:func:`~fl_strategies.kernels.linalg.leading_changes`;
        ``None``: not known yet, both ``None``)."""
        if changes is None:
            return {"converged_components": None, "converged_change": None}
        kept = max((j for j in range(1, self.k + 1) if changes[j - 1] <= CONVERGED_CHANGE), default=0)
        return {"converged_components": kept, "converged_change": float(changes[kept - 1]) if kept else None}

    def _fill_explained_variance(self, row: dict, explained: float) -> None:
        """Set a held row's ``iterated_explained_variance`` (``tr(Z^T C Z)``) and its ratio to ``total_variance``."""
        if "iterated_explained_variance" in row:
            row["iterated_explained_variance"] = explained
            total = self.total_variance
            row["iterated_explained_variance_ratio"] = explained / total if total else None

    # -- results ------------------------------------------------------------------------------------
    def evaluate(self, server_round: int, parameters: Parameters) -> tuple[float, dict[str, Scalar]] | None:
        """Record the round's row; the loss is the subspace distance (NaN without a reference)."""
        Z = parameters_to_ndarrays(parameters)[0]
        pend = self._pending if server_round else {}
        row = {"round": server_round, **round_metrics(Z, self.reference),
               "bytes_up": pend.get("bytes_up", 0), "bytes_down": pend.get("bytes_down", 0),
               "participants": pend.get("participants", 0), "distinct_participants": pend.get("distinct", 0),
               "rejected": pend.get("rejected", 0), "failures": pend.get("failures", 0),
               "late": pend.get("late", 0), "round_time": pend.get("round_time", 0.0),
               **self.round_columns(server_round),
               "wall_time": time.perf_counter() - pend["start"] if pend else 0.0}
        if self.stop_tol > 0:
            row.update(objective=None, stop_statistic=None)
        if self.reference is None:  # progress a user can judge without pooled data: the server's own iterates
            previous = self.iterates[-2] if server_round and len(self.iterates) >= 2 else None  # restored on resume
            plain = self.ORTHONORMAL_ESTIMATES
            row["estimate_change"] = None if previous is None else subspace_distance(Z, previous, plain)
            # the kept components and which leading ones converged: from the Ritz bases once G is known
            # (kept_progress), else from the first k columns (the last change: subspace_distance of all k)
            changes = (None if previous is None or self.ritz_progress else
                       leading_column_changes(Z[:, : self.k], previous[:, : self.k]))
            row["estimate_change_first_k"] = None if changes is None else float(changes[-1])
            row.update(self.converged_columns(changes))
            if self.tracks_objective:  # F / n, once the next round's clients report F at this Z
                row.update(iterated_explained_variance=None, iterated_explained_variance_ratio=None,
                           explained_variance_ratio=None)
        self._emit(row, Z)
        if server_round:
            dist = row["subspace_distance"]
            eps = row.get("epsilon_spent")
            change = row.get("estimate_change")
            change_k = row.get("estimate_change_first_k")
            parts = ([] if dist is None else [f"subspace distance {dist:.3e}"]) + (
                [] if change is None else [f"change of the estimate (sin theta) {change:.3e}"]) + (
                [] if change_k is None or self.k == self.r else [f"of its first {self.k} columns {change_k:.3e}"]) + (
                [] if eps is None else [f"epsilon spent {eps:.3g} (delta {row['delta']:g}), noise "
                                        f"{row.get('noise_source')}"])
            self.progress_notes["estimate"] = ", ".join(parts)  # in the round's progress line (round_progress)
        dist = row["subspace_distance"]
        return (float("nan") if dist is None else dist), {}

    # -- centring and the summary exchange: the PCA model (fl_strategies.files.pca) ------------------------------
    def center_config(self) -> dict[str, Scalar]:
        """``{"mean": bytes}`` (d float64) for every instruction when centring, with ``"scale"`` (d float64) when
        scaling (:mod:`fl_strategies.kernels.standardize`), else ``{}``."""
        config: dict[str, Scalar] = {}
        if self.settings.center and self.mean is not None:
            config["mean"] = self.mean.astype("<f8").tobytes()
        if self.scale is not None:
            config["scale"] = self.scale.astype("<f8").tobytes()
        return config

    def configure_summary(self) -> list[tuple[ClientProxy, FitIns]]:
        """After the last round: the final estimate to every client, which answers ``A_i Z`` and ``tr(A_i)``.

        Only for the strategies that write a PCA model (``spec.pca``), after a
        run that was not aborted and adds no noise (the summary is exact); a
        noisy run builds its model from its releases instead (:meth:`released_model`).
        """
        if not self.spec.pca or self.failure or not self.proxies or not self.iterates:
            return []
        if self.noisy:  # no exact summary: the model from what the rounds released
            self.released_model()
            return []
        # the result: the held last row's estimate (the summary runs before finish() writes it), else the last row's
        self._summary_Z = self._held[1] if self._held is not None else self.estimate
        self._summary_CZ = self.known_product(self._summary_Z)
        config = {"phase": "summary", **self.center_config()}
        if self.plink2_diagonal:
            config[MISSINGNESS_DIAGONAL] = True
        if self._summary_CZ is not None:  # the sites send tr(A_i) (and the diagonal) alone: no right pass
            config[PRODUCT_KNOWN] = True
            config.update(self.summary_coordinates(self._summary_Z))
        ins = FitIns(ndarrays_to_parameters([self._summary_Z]), config)
        return [(self.proxies[pid], ins) for pid in sorted(self.proxies)]

    def known_product(self, Z: np.ndarray) -> np.ndarray | None:
        """``C Z`` (d, r) at the summary's estimate ``Z`` where the server holds it without the sites' products
        (then the summary asks them for ``tr(A_i)`` and plink2's diagonal alone, :data:`PRODUCT_KNOWN`), else
        ``None``: here always ``None`` (``krylov`` overrides it)."""
        return None

    def summary_coordinates(self, Z: np.ndarray) -> dict[str, Scalar]:
        """Summary-config entries with which the sites answer without a left pass (``krylov``: the estimate's
        coordinates in its basis, whose blocks' left products the sites kept); here none."""
        return {}

    @property
    def plink2_diagonal(self) -> bool:
        """Whether the summary asks every site for its part of plink2's diagonal
        (:meth:`~fl_strategies.kernels.rows.BedVariants.missingness_diagonal`): a run over ``.bed`` files with
        missing calls, ``center`` and ``scale = "hwe"`` (plink2's PCA), whose eigenvalues are then plink2's."""
        calls = getattr(self, "calls", None)  # the SecAgg+ sum of the call counts
        missing = bool(self._call_counts) or (calls is not None and bool(np.any(calls < self.num_rows)))
        return (self.variants is not None and missing and isinstance(self.settings, PcaSettings)
                and self.settings.center and column_scaling(self.settings.scale) == "hwe")

    def aggregate_summary(self, results: list[tuple[ClientProxy, FitRes]], failures: list) -> dict[str, Any] | None:
        """The PCA model from the summary replies (every registered client must answer, else the run fails naming
        the partitions that did not, :meth:`abort`); ``on_model`` gets it at the end of a run that did not fail
        (:meth:`finish`)."""
        Z, known = self._summary_Z, getattr(self, "_summary_CZ", None)
        diagonal = self.plink2_diagonal
        products = [(self.d, self.r)] if known is None else []  # the sites' A_i Z unless the server knows C Z
        valid, rejected = self.collect_replies(len(self.records), results, set(self.proxies),
                                               products + [(self.r, self.r)] * diagonal,
                                               ("trace",) + ("diagonal",) * diagonal, broadcast=Z)
        if len(valid) < len(self.proxies):  # the model is of every client's rows, or there is none: a failed run
            silent = sorted(set(self.proxies) - set(valid))
            self.abort(f"summary: partition(s) {', '.join(map(str, silent))} did not answer ({len(valid)} of "
                       f"{len(self.proxies)} answered, {rejected} rejected, {len(failures)} failed); no PCA model "
                       "was written")  # after the last round, whose row is held: finish() still writes it
            return None
        n = sum(self.sizes[pid] for pid in valid)
        CZ = known if known is not None else sum(self.sizes[pid] * arrays[0] for pid, (arrays, _) in valid.items()) / n
        total = sum(self.sizes[pid] * values["trace"] for pid, (_, values) in valid.items()) / n
        plink2 = None
        if diagonal:
            plink2 = (sum(arrays[-1] for arrays, _ in valid.values()),
                      sum(values["diagonal"] for _, values in valid.values()))
        return self.summary_model(Z, CZ, total, n, uploaded_bytes(results) + len(valid) * Z.nbytes, plink2)

    def summary_model(self, Z: np.ndarray, CZ: np.ndarray, total: float, n: int, summary_bytes: int,
                      diagonal: tuple[np.ndarray, float] | None = None) -> dict[str, Any]:
        """The PCA model of the summary exchange from ``C Z`` (d, r) and ``tr(C)`` at the final estimate ``Z``
        (d, r) over ``n`` rows, with plink2's ``diagonal`` summed over the sites where it was asked for
        (:func:`~fl_strategies.files.pca.pca_model`); the held last row gets its explained variance from the same
        sums."""
        last = self._held[0] if self._held is not None and self._held[1] is Z else None
        if last is not None:  # the last row's explained variance and kept components' change, from the same sums
            self._fill_explained_variance(last, float(np.sum(Z * CZ)))
            if self.ritz_progress:
                self.kept_progress(n * (Z.T @ CZ))
        model = self.set_model(Z, CZ, total, n, summary_bytes=summary_bytes, diagonal=diagonal)
        if last is not None and "explained_variance_ratio" in last:  # the kept components', as in pca.npz
            last["explained_variance_ratio"] = float(model["explained_variance_ratio"].sum())
        return model

    def released_model(self) -> None:
        """A noisy run's model from what its rounds released (:meth:`set_released_model`); none by default."""

    def set_released_model(self, Y: np.ndarray, n: int, privacy: dict[str, Any] | None) -> dict[str, Any]:
        """The model of a run without a summary exchange from its last released product ``Y ~ C Z`` (d, r),
        post-processing only (:func:`fl_strategies.files.pca.released_product_model`; ratio NaN: ``tr(C)`` is not
        released)."""
        Z, CZ = released_product_model(Y)
        return self.set_model(Z, CZ, float("nan"), n, privacy=privacy)

    def set_model(self, Z: np.ndarray, CZ: np.ndarray, total: float, n: int, summary_bytes: int = 0,
                  privacy: dict[str, Any] | None = None, diagonal: tuple[np.ndarray, float] | None = None
                  ) -> dict[str, Any]:
        """The run's PCA model (``k = rank``, or chosen by ``variance-target``); ``on_model`` receives it at the end
        of a run that did not fail (:meth:`finish`).

        ``CZ`` is ``C Z`` and ``total`` is ``tr(C)`` for the pooled (centred) second-moment matrix ``C``;
        ``privacy`` is what a private run spent (recorded in the model), ``None`` for a noise-free one.
        """
        model = pca_model(Z, CZ, total, n, self.mean if self.mean is not None else np.zeros(self.d), self.r,
                          scale=self.scale, diagonal=diagonal)
        if diagonal is not None:
            of_c = model["singular_values"] ** 2 / max(n - 1, 1)  # C's eigenvalues, as explained variance
            log.info("plink2's diagonal for missing calls (N_ii = c_i; the sites' parts summed at the summary): the "
                     "explained variance is plink2's, %s relative to C's", np.array2string(
                         np.divide(model["explained_variance"], of_c, out=np.ones_like(of_c), where=of_c > 0) - 1,
                         precision=3))
        k = self.k
        target = self.settings.variance_target if isinstance(self.settings, PcaSettings) else 0.0
        if target > 0:
            k = choose_rank(model["explained_variance_ratio"], target)
            if model["explained_variance_ratio"].sum() < target:
                log.warning("variance-target = %g is not reached by the %d columns iterated (explained-variance "
                            "ratio %.4g, a lower bound): all %d are kept; a larger iteration-rank may reach it",
                            target, self.r, model["explained_variance_ratio"].sum(), self.r)
        self.model = {key: (value[:k] if isinstance(value, np.ndarray) and key not in ("mean", "scale") else value)
                      for key, value in model.items()}
        self.model["summary_bytes"] = summary_bytes
        if self.variants is not None:  # a run over .bed files: the variants of the components' columns
            self.model["variants"] = self.variants
            if self.prune is not None:  # indep-pairwise: the variants kept (the model's) and removed
                self.model.update(self.prune)
        if privacy is not None:
            self.model["privacy"] = privacy
        ratio = float(self.model["explained_variance_ratio"].sum())
        if np.isfinite(ratio):
            log.info("PCA model: %d component(s) explain %.4g of the variance (%d rows)", k, ratio, n)
            variance = self.model["explained_variance"]
            numerical = int(np.sum(variance > NUMERICAL_RANK_TOLERANCE * max(float(variance[0]), 0.0)))
            if numerical < k:  # rows of lower rank than asked: the components beyond it are arbitrary directions
                log.warning("PCA model: the data's numerical rank is %d (explained variance above %g of the "
                            "first), below the %d component(s) kept: components %d..%d explain no variance and are "
                            "arbitrary directions; a smaller rank keeps only the meaningful ones", numerical,
                            NUMERICAL_RANK_TOLERANCE, k, numerical + 1, k)
        else:
            log.info("PCA model: %d component(s), explained variance %s (%d rows; total variance not released)", k,
                     np.array2string(self.model["explained_variance"], precision=4), n)
        return self.model
