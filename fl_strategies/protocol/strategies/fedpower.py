"""FedPower (Guo et al., Algorithms 2 and 3) and the distributed power method.

One Flower server round is one communication period: the server broadcasts
``Z`` (``d x r``), every selected client runs ``p_j`` local power iterations
``Y <- A_i Z + N(0, nu^2)``, ``Z <- orth(Y)`` (the last ``Y`` left
un-orthonormalised) and returns ``Y`` together with the basis ``Z_prev`` it
multiplied last. The server aligns each ``Y_i`` with the Orthogonal
Procrustes rotation ``D_i = procrustes(Z_prev_i, Z_prev_ref)`` computed from
the *previous bases* (the orthonormal ``Z_prev`` the clients multiplied, not
the un-orthonormalised ``Y_i``), averages and orthonormalises.

Weights. The paper assumes an equal split and averages with ``1/m``. Here the
average is weighted by the client's row count ``s_i`` (times its
multiplicity in the sample), so that with full participation the server
iterates exactly the pooled covariance ``(1/n) M^T M = sum_i (s_i/n) A_i``; for
an equal split this is the paper's rule, and the overall scale of ``Y`` does
not matter to ``orth``.

Partial participation (Algorithm 3): ``K`` partition ids are drawn uniformly
*with replacement* from the strategy's own seeded generator (duplicates count
in the average); the reference client (partition 0, "machine 1") is always
asked as well, and its reply is used for the alignment only unless it was
sampled. If the reference does not answer, the responder with the smallest
partition id takes its place (the paper's Remark 2). ``K = m`` means full
participation without sampling (Algorithm 2). Algorithm 3 with ``K = m``
would sample with replacement and is *not* the same as full participation;
``K = m`` asks every client once, so that the full run is Algorithm 2. Sampling and the straggler model (keep the first K replies, or
those before a deadline, in virtual time) are :mod:`fl_strategies.settings.participation`.

With ``p = 1`` and no noise the method is the distributed power method
(Algorithm 1), which is how the ``power`` baseline runs; the FAPS paper's
baselines are the same strategy: ``ssi`` (``p = 1``) and ``localpower`` (the
``halving`` schedule 8, 4, 2, 1, ... with OPT alignment), with its stopping rule.

Noise (``epsilon`` or ``noise-std``): each client's replies are private on their own
(:mod:`fl_strategies.privacy.fedpower_dp`, also for the private mean of ``center = true``); the run has no exact summary
exchange and writes its model from the last weighted average of the noisy replies
(:meth:`FedPowerStrategy.released_model`).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
from flwr.common import FitIns, FitRes, Parameters, Scalar, ndarrays_to_parameters, parameters_to_ndarrays
from flwr.server.client_manager import ClientManager
from flwr.server.client_proxy import ClientProxy

from ...settings.config import ConfigError
from ...settings.strategies import fedpower_noise_stds
from ..base import log, uploaded_bytes
from .eigenspace import EigenspaceStrategy
from ...kernels.linalg import into_unit_ball, orth, procrustes
from ...privacy import accounting
from ...privacy.fedpower_dp import (ROW_SUM_SENSITIVITY, achieved_epsilon, centred_releases,
                                    epsilon_spent, noise_multiplier)
from ...privacy.zcdp import epsilon_of, rho_of
from ..replies import check_array, check_orthonormal
from ...settings.schedule import round_lengths

__all__ = ["FedPowerStrategy"]


class FedPowerStrategy(EigenspaceStrategy):
    """Server side of FedPower and of the power-method baselines (power, ssi, localpower).

    Parameters
    ----------
    cfg : dict
        Effective run configuration (:func:`fl_strategies.settings.config.validate_run_config`).
    dimension : int
        ``d``.
    reference : fl_strategies.kernels.metrics.Reference, optional
        Exact spectral information of the pooled data (see
        :class:`~fl_strategies.protocol.strategies.eigenspace.EigenspaceStrategy`).
    wait_timeout : float
        Seconds to wait for ``num-clients`` nodes to register.

    Notes
    -----
    Bad input never stops a run. A node that fails discovery is left out (its
    partition then counts in ``failures`` whenever it is sampled; the
    smallest available partition id is the reference). A reply is rejected,
    counted in ``rejected`` and logged at WARNING with its partition and node
    id when it comes from a node the server does not know or a partition not
    asked this round, repeats a partition, claims another partition id or row
    count than the node registered with, or fails :meth:`_check_reply`.
    """

    REPORTS_OBJECTIVE = True  # the clients report f_i = tr(Z^T M_i Z) when asked
    REPORTS_GRAM = True  # G from the summed products (one step) or the clients' s_i Z^T A_i Z (several)

    def __init__(self, cfg: dict[str, Any], dimension: int, reference=None, wait_timeout: float = 600.0) -> None:
        super().__init__(cfg, dimension, reference, wait_timeout)
        s = self.settings
        self.K = s.clients_per_round
        self.lengths = round_lengths(s.local_steps, s.schedule, total_iterations=s.total_iterations,
                                     num_rounds=s.num_server_rounds)
        self.T = sum(self.lengths)
        self.last_sum: np.ndarray | None = None
        # a centred private run: the mean (at discovery) and the T steps, composed (fl_strategies.privacy.fedpower_dp)
        self.releases = (centred_releases(s.epsilon, s.delta, s.dp_calibration, self.T) if s.center and s.epsilon > 0
                         else None)

    @property
    def num_rounds(self) -> int:
        """Communication rounds of the run (``len`` of the schedule)."""
        return len(self.lengths)

    def __repr__(self) -> str:
        s = self.settings
        return (f"FedPowerStrategy({s.strategy}: {self.d_repr}, k={self.k}, r={self.r}, m={self.m}, K={self.K}, "
                f"p={s.local_steps}, schedule={s.schedule}, T={self.T}, alignment={s.alignment})")

    def initialize_parameters(self, client_manager: ClientManager) -> Parameters:
        """Discovery and ``Z_0``; a mean from noisy row sums is projected onto the unit ball (the mean of unit
        rows lies there; post-processing), where the clients' centred sensitivity holds."""
        parameters = super().initialize_parameters(client_manager)
        if self.releases is not None:
            self.mean = into_unit_ball(self.mean)
        return parameters

    # -- one round ----------------------------------------------------------------------------------
    def _sample(self, server_round: int) -> dict[int, int]:
        """Multiplicity of each partition id in this round's sample (:mod:`fl_strategies.settings.participation`)."""
        return self.participation.sample(server_round, self.K)

    def configure_fit(self, server_round: int, parameters: Parameters,
                      client_manager: ClientManager) -> list[tuple[ClientProxy, FitIns]]:
        """Send ``Z`` to the sampled clients and to the reference client.

        Under the straggler model only the sampled partitions whose replies
        the server keeps are asked (a kept partition keeps its multiplicity),
        and the reference client only if it arrives before the round closes;
        otherwise the smallest kept partition is the reference (Remark 2).
        """
        steps = self.lengths[server_round - 1]
        multiplicity = self._sample(server_round)
        # partitions left out at discovery (their node failed) are not asked and count as failures
        available = set(self.proxies)
        plan = self.participation.plan(server_round, set(multiplicity) & available, work=steps,
                                       extra=[min(available)])
        multiplicity = {pid: c for pid, c in multiplicity.items() if pid in plan.kept or pid not in available}
        targets = sorted(set(plan.kept) | set(plan.extra))
        config: dict[str, Scalar] = {**self.center_config(), "local-steps": steps, "round": server_round,
                                     "iteration-offset": sum(self.lengths[: server_round - 1])}
        if self.tracks_objective:
            config["objective"] = True  # f_i = tr(Z^T M_i Z) at this Z, for the stopping rule / explained variance
        fit_ins = FitIns(parameters, config)
        Z = parameters_to_ndarrays(parameters)[0]
        self._pending = {"start": time.perf_counter(), "multiplicity": multiplicity, "steps": steps, "Z": Z,
                         "bytes_down": len(targets) * Z.nbytes, "asked": set(targets),
                         "unavailable": len(set(multiplicity) - available) + len(plan.dropped),
                         "late": len(plan.late), "round_time": plan.round_time}
        if not targets:
            self.end_round_without_clients(server_round, Z, "Z", failures=self._pending["unavailable"], distinct=0,
                                           misalignment=0.0)
        return [(self.proxies[pid], fit_ins) for pid in targets]

    def reply_norm_bound(self, partition_id: int | None) -> float | None:
        """Upper bound on ``||Y_i||_F`` of an honest reply of a partition; ``None`` if there is none.

        With ``row-normalize`` every row of ``M_i`` has unit norm (or is zero),
        so ``A_i = M_i^T M_i / s_i`` is positive semidefinite with
        ``tr(A_i) <= 1``, hence ``||A_i||_2 <= 1`` and, for the orthonormal
        ``Z_prev``, ``||A_i Z_prev||_F <= ||A_i||_2 ||Z_prev||_F = sqrt(r)``.
        The noise ``N`` has ``d r`` iid ``N(0, nu_i^2)`` entries, so
        ``||N||_F`` is about ``nu_i sqrt(d r)`` and exceeds ``8 nu_i sqrt(d r)``
        with probability below ``exp(-24 d r)`` (chi concentration). The bound is
        therefore ``sqrt(r) + 8 nu_i sqrt(d r)`` (plus ``1e-6`` for round-off),
        with ``nu_i = noise-std`` when that is set and otherwise Theorem 6's
        ``nu_i = 2 sqrt(r) sigma_g / s_i``, computed from the row count
        ``s_i`` the client reported, exactly as the client computes its own.
        Without ``row-normalize`` the data's scale is unknown to the server and
        there is no bound (only finiteness is checked). Centred rows are within ``1 + ||mu||`` of 0 and scaled
        columns stretch them by at most ``1 / min(scale)``, so ``sqrt(r)`` becomes
        ``((1 + ||mu||) / min(scale))^2 sqrt(r)``.
        """
        s = self.settings
        if not s.row_normalize:
            return None
        nu = self.client_noise_std(self.sizes[partition_id]) if partition_id in self.sizes else 0.0
        if s.noise_std > 0:
            nu = s.noise_std
        # rows centred by a mean mu: ||x - mu|| <= 1 + ||mu||; columns divided by their scales stretch a row by at
        # most 1 / min(scale); so ||A_i||_2 <= ((1 + ||mu||) / min(scale))^2
        radius = 1.0 + float(np.linalg.norm(self.mean)) if s.center and self.mean is not None else 1.0
        if self.scale is not None:
            radius /= float(np.min(self.scale))
        spectral = radius ** 2
        return float(spectral * np.sqrt(self.r) + 1e-6 + 8.0 * nu * np.sqrt(self.d * self.r))

    def client_noise_std(self, num_rows: int) -> float:
        """``nu_i``, the noise std of the products of a client with ``num_rows`` rows, as the client computes it
        (:func:`fl_strategies.privacy.fedpower_dp.client_noise_stds`); 0 for the power baselines, which add none."""
        return fedpower_noise_stds(self.settings, self.T, num_rows)[0]

    def _check_reply(self, partition_id: int, arrays: list[np.ndarray]) -> str | None:
        """FedPower's own checks of a reply (after shapes and finiteness): ``||Y||_F`` within
        :meth:`reply_norm_bound`, ``Z_prev`` (sent when ``p > 1``) orthonormal."""
        reason = check_array(arrays[0], arrays[0].shape, max_norm=self.reply_norm_bound(partition_id), name="Y")
        if reason is None and len(arrays) > 1:
            reason = check_orthonormal(arrays[1], name="Z_prev")
        return reason

    def intake(self, server_round: int, results: list[tuple[ClientProxy, FitRes]], asked, steps: int,
               Z: np.ndarray) -> tuple[dict[int, tuple[list[np.ndarray], dict[str, float]]], int]:
        """The round's valid replies ``pid -> ([Y, Z_prev (p > 1), G_i (p > 1, objective)], {"f": ...})`` and how
        many were rejected.

        :meth:`collect_replies` with FedPower's shapes (``d x r``; ``G_i = s_i Z^T A_i Z``, ``r x r``, at the
        broadcast ``Z``), the objective ``f`` when tracked, and :meth:`_check_reply`.
        """
        shapes = [(self.d, self.r)] * (2 if steps > 1 else 1) + (
            [(self.r, self.r)] if steps > 1 and self.tracks_objective else [])
        return self.collect_replies(server_round, results, asked, shapes,
                                    ("f",) if self.tracks_objective else (), broadcast=Z,
                                    names=("Y", "Z_prev", "G"), check=self._check_reply)

    def round_gram(self, valid: dict, steps: int, Z: np.ndarray) -> np.ndarray:
        """``G = sum_i s_i Z^T A_i Z`` at the broadcast ``Z`` from every client's reply: ``Z^T sum_i s_i Y_i``
        after one (noise-free) step, whose ``Y_i = A_i Z``; the clients' own ``G_i`` after several."""
        if steps > 1:
            return sum(arrays[2] for arrays, _ in valid.values())
        return Z.T @ sum(self.sizes[pid] * arrays[0] for pid, (arrays, _) in valid.items())

    def aggregate_fit(self, server_round: int, results: list[tuple[ClientProxy, FitRes]],
                      failures: list) -> tuple[Parameters | None, dict[str, Scalar]]:
        """Align, average with weights ``c_i s_i`` and orthonormalise (lines 10-12)."""
        pend = self._pending
        steps = pend["steps"]
        valid, rejected = self.intake(server_round, results, pend["asked"], steps, pend["Z"])
        # (Y, Z_prev); with one step every Z_prev is the broadcast Z
        replies = {pid: (arrays[0], arrays[1] if steps > 1 else pend["Z"]) for pid, (arrays, _) in valid.items()}
        objective = sum(values["f"] for _, values in valid.values()) if self.tracks_objective else 0.0
        sampled = {pid: c for pid, c in pend["multiplicity"].items() if pid in replies}
        pend.update(bytes_up=uploaded_bytes(results), rejected=rejected, failures=len(failures) + pend.get("unavailable", 0),
                    participants=sum(sampled.values()), distinct=len(sampled), misalignment=0.0)
        # F at the broadcast Z is known only when every partition answered once (no sampling, no multiplicity)
        if self.tracks_objective and len(sampled) == self.m and self.check_stop(
                server_round, objective, self.round_gram(valid, steps, pend["Z"])):
            return None, {}
        if not sampled:
            log.warning("round %d: no usable reply from a sampled client; Z is kept", server_round)
            self.iterates.append(pend["Z"])
            return ndarrays_to_parameters([pend["Z"]]), {}
        ref = 0 if 0 in replies else min(replies)
        if ref != 0:  # expected under the straggler model (the reference was late or dropped out)
            (log.info if self.participation.timed else log.warning)(
                "round %d: reference client 0 did not answer; partition %d is the reference", server_round, ref)
        Z_ref = replies[ref][1]
        total, weight, misalignment = np.zeros((self.d, self.r)), 0.0, 0.0
        for pid, c in sampled.items():
            Y, Z_prev = replies[pid]
            if pend["steps"] > 1:  # with one step every Z_prev is the broadcast Z and D = I
                D = procrustes(Z_prev, Z_ref) if self.settings.alignment == "opt" else np.eye(self.r)
                Y = Y @ D
                misalignment = max(misalignment, float(np.linalg.norm(Z_prev @ D - Z_ref, 2)))
            w = c * self.sizes[pid]
            total += w * Y
            weight += w
        with np.errstate(all="ignore"):
            mean = total / weight
        pend["misalignment"] = misalignment
        return self.advance(server_round, mean)

    def advance(self, server_round: int, mean: np.ndarray) -> tuple[Parameters | None, dict[str, Scalar]]:
        """``Z_new = orth(mean)`` from the round's weighted average ``mean`` (d, r) of the products; the broadcast
        ``Z`` is kept when ``mean`` is not finite or zero."""
        pend = self._pending
        if not np.all(np.isfinite(mean)):  # only possible without row-normalize (no norm bound on Y)
            log.warning("round %d: the weighted average of the replies overflows; Z is kept", server_round)
            self.iterates.append(pend["Z"])
            return ndarrays_to_parameters([pend["Z"]]), {}
        if not np.any(mean):  # data without variance along Z: orth would return an arbitrary basis
            log.warning("round %d: the replies sum to zero (the data have no variance along Z); Z is kept",
                        server_round)
            self.iterates.append(pend["Z"])
            return ndarrays_to_parameters([pend["Z"]]), {}
        Z_new = orth(mean)
        self.last_sum = mean  # ~ C Z_ref: the released products' weighted average (post-processing)
        self.iterates.append(Z_new)
        return ndarrays_to_parameters([Z_new]), {}

    # -- the model of a noisy run ------------------------------------------------------------------
    def released_model(self) -> None:
        """The PCA model of a noisy run from the last weighted average of the noisy replies, ``~ C Z``
        (:func:`fl_strategies.files.pca.released_product_model`: post-processing, ratio NaN), with the privacy spent;
        none if no round had a usable reply."""
        if self.last_sum is None or self.stopped:
            return
        n = self.num_rows
        self.set_released_model(self.last_sum, n, self.privacy_record())

    def privacy_record(self) -> dict[str, Any]:
        """What the model records of the privacy spent: per client, after all ``T`` local steps (and the mean)."""
        extra = {"neighbouring": "replace one unit row of a client; per client: each client's releases are private "
                                 "on their own (no secure aggregation); row counts are public",
                 "noise_source": self.noise_source()}
        if self.releases is not None:
            return {**self.releases.record({"mean": ROW_SUM_SENSITIVITY, "products": "4 sqrt(r) / s_i"}), **extra}
        columns = self.privacy_columns(self.T)
        s = self.settings
        return {"epsilon": columns["epsilon_spent"], "epsilon_target": s.epsilon or None,
                "delta": columns["delta"], "calibration": s.dp_calibration if s.noise_std == 0 else "paper",
                "releases": [{"name": "products", "count": self.T, "noise_multiplier": self._noise_multiplier(),
                              "sensitivity": "2 sqrt(r) / s_i"}], **extra}

    # -- results ------------------------------------------------------------------------------------
    def _noise_multiplier(self) -> float | None:
        """``sigma_g`` of the client that spends the most; ``None`` when no noise is added."""
        s = self.settings
        if s.noise_std > 0:  # explicit nu: the client with the fewest rows spends the most
            return float(s.noise_std * min(self.sizes.values()) / (2.0 * np.sqrt(self.r)))
        if s.epsilon > 0:
            return noise_multiplier(s.epsilon, s.delta, self.T, s.dp_calibration)
        return None

    def _epsilon_spent(self, steps: int) -> float | None:
        """Worst-case epsilon over clients after ``steps`` local steps, by the accountant of ``dp-calibration``
        (the paper's zCDP bound for ``paper`` and ``tight``, and with an explicit ``noise-std``); ``None`` when no
        noise is added."""
        sigma_g = self._noise_multiplier()
        if sigma_g is None:
            return None
        calibration = self.settings.dp_calibration if self.settings.noise_std == 0 else "paper"
        return epsilon_spent(sigma_g, steps, self.settings.delta, calibration)

    def privacy_columns(self, steps: int) -> dict[str, Any]:
        """``epsilon_spent`` (the calibration's accountant), ``delta``, and beside them the paper's zCDP bound
        (``epsilon_zcdp``) and ``dp-accounting``'s PLD accountant (``epsilon_pld``, empty without the package)
        for the same noise after ``steps`` local steps; all empty without noise."""
        if self.releases is not None:  # centred: the mean (at discovery) and the steps so far, composed
            counts = {"mean": 1, "products": steps}
            pairs = tuple((self.releases.multipliers[k], v) for k, v in counts.items() if v)
            delta = self.settings.delta
            pld = accounting.composed_epsilon("pld", pairs, delta) if accounting.available() else None
            return {"epsilon_spent": self.releases.spent(counts), "delta": delta,
                    "epsilon_zcdp": epsilon_of(sum(rho_of(sigma, v) for sigma, v in pairs), delta),
                    "epsilon_pld": pld}
        sigma_g = self._noise_multiplier()
        if sigma_g is None:
            return {"epsilon_spent": None, "delta": None, "epsilon_zcdp": None, "epsilon_pld": None}
        delta = self.settings.delta
        pld = accounting.epsilon("pld", sigma_g, steps, delta) if accounting.available() else None
        return {"epsilon_spent": self._epsilon_spent(steps), "delta": delta,
                "epsilon_zcdp": achieved_epsilon(sigma_g, steps, delta),
                "epsilon_pld": pld if pld is not None and np.isfinite(pld) else None}

    def round_columns(self, server_round: int) -> dict[str, Any]:
        """Local iterations so far, the misalignment rho of the aggregation, privacy spent."""
        steps = sum(self.lengths[:server_round])
        return {"local_iterations": steps,
                "misalignment": self._pending.get("misalignment", 0.0) if server_round else 0.0,
                **self.privacy_columns(steps), "noise_source": self.noise_source()}

    # -- checkpoints (fl_strategies.protocol.checkpoint) -------------------------------------------------------

    def resume_problem(self) -> str | None:
        """Refuse OS noise: a round repeated after a crash would carry fresh noise and spend its budget twice."""
        if self.noisy and self.settings.noise_source == "os":
            return ("with noise-source = \"os\" the round in flight at a crash would be repeated with fresh noise, "
                    "spending its privacy budget twice; use noise-source = \"node-secret\" (or \"auto\") with a "
                    "noise-secret file on every node")
        return None

    def state_dict(self) -> dict[str, Any]:
        """The base state and ``last_sum`` (the model of a noisy run is built from it after the last round)."""
        return {**super().state_dict(), "last_sum": self.last_sum}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume only when every node re-draws a repeated round's noise: a node whose noise secret lived in
        the old run's node state (no ``noise-secret`` file) would answer the round in flight with fresh noise."""
        lost = sorted(f"node {cid} (partition {pid})" for cid, pid in self._pid_by_cid.items()
                      if self.node_properties.get(cid, {}).get("noise-persistent") is False
                      and self.noisy)
        if lost:
            raise ConfigError(f"resume: {', '.join(lost)} kept its noise secret in the node state of the old run, "
                              "so the round in flight at the crash would be answered again with fresh noise, "
                              "spending its privacy budget twice; start those SuperNodes with --node-config "
                              "noise-secret=\"<file>\" (a file that survives the run), or start a new run")
        super().load_state_dict(state)
        last = state.get("last_sum")
        self.last_sum = None if last is None else np.asarray(last, dtype=np.float64)
