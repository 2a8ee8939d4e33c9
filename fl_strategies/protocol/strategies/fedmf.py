"""Federated low-rank matrix factorisation: ``fedmf`` and the Table 2 baselines ``mf-altgd``, ``mf-simgd``.

``fedmf`` (Philippenko, Scaman, Massoulie, AAAI 2025; spec ``lowrank_mf.md``)
runs ``alpha + 2`` Flower rounds:

====================  =========================  =====================================  ==========================
round                 server -> client           client                                 server
====================  =========================  =====================================  ==========================
1 ``sketch``          nothing                    ``Y_ij = S_i^T Phi_ij``, j < m          ``Y_j = sum_i Y_ij``; keep
                                                                                         the ``Y_j`` of least kappa
2 .. alpha+1 ``power`` ``V``                      ``S_i^T S_i V``                         ``V = sum_i``
alpha+2 ``solve``     ``V`` (``orth(V)`` for     local GD / Nesterov on ``U_i``, or      ``F_t = sum_i F_i(U_t)``
                      ``u-solver = orth``)       the closed form; sends its losses      (rows t = 0 .. T)
====================  =========================  =====================================  ==========================

Sums are unweighted and taken in partition order (spec P1, deterministic).
Every client is needed in every round (spec P11): if one is missing or its
reply is rejected, the run stops with an ERROR and no result. The paper's
communication count is ``alpha + 1`` (the solve round carries only metrics
up). ``U_i`` is never sent. The estimate of the run is ``V`` (d x r).

The baselines update ``V`` every iteration, one communication each: ``U_i``
lives in the node state. Round ``k`` broadcasts ``V_{k-1}``; the client reports
``F_i(U_{k-1}, V_{k-1})`` (the loss after ``k - 1`` iterations), takes a step
and sends its ``d x r`` gradient part. The server writes the row of iteration
``k - 1`` and stops once ``log10(F - eps_min) <= target-log-excess`` (the
authors' code's rule; the round that detects it is not counted) or after
``num-server-rounds`` iterations (without a reference, ``eps_min`` is unknown
and they run all of them). Their step sizes need ``sigma_1(S)`` (and
``sigma_r``) of the pooled matrix, as in the authors' code (spec P15): an
input of the strategy, ``mf-sigma-1`` / ``mf-sigma-r``, or in a simulation the
harness's singular values of the data set.
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np
from flwr.common import FitIns, FitRes, Parameters, Scalar, ndarrays_to_parameters
from flwr.server.client_manager import ClientManager
from flwr.server.client_proxy import ClientProxy

from ...settings.config import ConfigError
from ..base import FederatedStrategy, log, uploaded_bytes
from ...kernels.mf import (MFReference, condition_number, select_sketch, theorem1_bound, wk_constants, wk_init,
                            yd_constants)
from ...kernels.linalg import orth

__all__ = ["FedMFStrategy", "MFBaselineStrategy", "ROW_COLUMNS", "MF_STRATEGIES"]

MF_STRATEGIES = ("fedmf", "mf-altgd", "mf-simgd")

ROW_COLUMNS = ("round", "phase", "iteration", "communications", "loss", "excess_loss", "log10_excess_loss",
               "exact_loss", "excess_fixed_v", "theorem1_bound", "kappa_v", "eps_min", "predicted_iterations", "bytes_up", "bytes_down",
               "participants", "rejected", "failures", "wall_time")


class _MFBase(FederatedStrategy):
    """Discovery (from :class:`FederatedStrategy`), reply collection and results rows of the MF strategies."""

    def __init__(self, cfg: dict[str, Any], dimension: int, reference: MFReference | None = None,
                 wait_timeout: float = 600.0) -> None:
        super().__init__(cfg, dimension, None, wait_timeout)
        self.mf_reference = reference
        self.V: np.ndarray | None = None
        self._rows: list[dict] = []

    @property
    def eps_min(self) -> float | None:
        return None if self.mf_reference is None else self.mf_reference.eps_min

    def initialize_parameters(self, client_manager: ClientManager) -> Parameters:
        """Wait for all clients and learn their partition ids and sizes; nothing is broadcast yet."""
        self._discover(client_manager)
        return ndarrays_to_parameters([])

    def row(self, server_round: int, phase: str, **values) -> dict:
        """A results row with every column of :data:`ROW_COLUMNS` (missing values are ``None``)."""
        row = dict.fromkeys(ROW_COLUMNS)
        row.update(round=server_round, phase=phase, eps_min=self.eps_min, bytes_up=0, bytes_down=0, participants=0,
                   rejected=0, failures=0, wall_time=0.0)
        row.update(values)
        loss = row["loss"]
        if loss is not None and self.eps_min is not None:
            row["excess_loss"] = loss - self.eps_min
            row["log10_excess_loss"] = math.log10(row["excess_loss"]) if row["excess_loss"] > 0 else None
        return row

    def _send(self, server_round: int, arrays: list[np.ndarray], config: dict) -> list[tuple[ClientProxy, FitIns]]:
        self._pending = {"start": time.perf_counter(), "bytes_down": self.m * sum(a.nbytes for a in arrays)}
        ins = FitIns(ndarrays_to_parameters(arrays), {"round": server_round, **config})
        return [(self.proxies[pid], ins) for pid in range(self.m)]

    def _collect(self, server_round: int, results: list[tuple[ClientProxy, FitRes]], failures: list,
                 shapes: list[tuple[int, ...]], metrics: tuple[str, ...] = ()
                 ) -> dict[int, tuple[list[np.ndarray], dict[str, float]]] | None:
        """Validated replies by partition id, or ``None`` (run stopped) if any partition is missing."""
        replies, rejected = self.collect_replies(server_round, results, range(self.m), shapes, metrics,
                                                 broadcast=self.V)
        self._pending.update(bytes_up=uploaded_bytes(results),
                             rejected=rejected, failures=len(failures), participants=len(replies))
        if len(replies) < self.m:
            missing = sorted(set(range(self.m)) - set(replies))
            self.abort(f"round {server_round}: no usable reply from partition(s) {missing}; {type(self).__name__} "
                       "needs every client every round (a missing block changes S): the run stops without a result")
            self._rows.append(self.row(server_round, "failed", **self._traffic()))
            return None
        return replies

    def _traffic(self) -> dict:
        p = self._pending
        return {"bytes_up": p.get("bytes_up", 0), "bytes_down": p.get("bytes_down", 0),
                "participants": p.get("participants", 0), "rejected": p.get("rejected", 0),
                "failures": p.get("failures", 0), "wall_time": time.perf_counter() - p["start"]}

    def evaluate(self, server_round: int, parameters: Parameters) -> tuple[float, dict[str, Scalar]] | None:
        """Write the rows the round produced; the loss is the last row's ``F`` (NaN if none)."""
        rows, self._rows = self._rows, []
        for row in rows:
            self._write(row, self.V if self.V is not None else np.zeros((self.d, self.r)))
        last = next((r["loss"] for r in reversed(rows) if r["loss"] is not None), None)
        return (float("nan") if last is None else float(last)), {}

    def finish(self) -> None:
        """Write rows held when the run stopped."""
        self.evaluate(-1, ndarrays_to_parameters([]))

    @property
    def estimate(self) -> np.ndarray:
        """``V`` (d, r), the result of the run."""
        return self.V


class FedMFStrategy(_MFBase):
    """``fedmf``: power-initialised ``V`` (alpha + 1 communications), then local GD on ``U_i``."""

    def __init__(self, cfg: dict[str, Any], dimension: int, reference: MFReference | None = None,
                 wait_timeout: float = 600.0) -> None:
        super().__init__(cfg, dimension, reference, wait_timeout)
        s = self.settings
        self.alpha = s.power_steps
        self.num_sketches = s.num_sketches
        self.T = 0 if s.u_solver == "exact" else s.local_iterations
        self.kappas: list[float] = []
        self.chosen: int | None = None
        self.losses: np.ndarray | None = None
        self.exact_loss: float | None = None

    @property
    def num_rounds(self) -> int:  # noqa: D102
        return self.alpha + 2

    def initialize_parameters(self, client_manager: ClientManager) -> Parameters:
        """Discovery; the row of round 0 (no V yet)."""
        params = super().initialize_parameters(client_manager)
        self._rows = [self.row(0, "init")]
        return params

    def __repr__(self) -> str:
        c = self.settings
        return (f"FedMFStrategy({self.d_repr}, r={self.r}, N={self.m}, alpha={self.alpha}, m={self.num_sketches}, "
                f"{c.u_solver}, T={self.T}, momentum={c.momentum})")

    def configure_fit(self, server_round: int, parameters: Parameters,
                      client_manager: ClientManager) -> list[tuple[ClientProxy, FitIns]]:
        """Sketch, power or solve instructions to every client."""
        if server_round == 1:
            return self._send(server_round, [], {"phase": "sketch"})
        if server_round <= self.alpha + 1:
            return self._send(server_round, [self.V], {"phase": "power"})
        if self.settings.u_solver == "orth":  # Remark 4: V^T V = I, gamma = 1
            self.V = orth(self.V)
        return self._send(server_round, [self.V], {"phase": "solve"})

    def aggregate_fit(self, server_round: int, results: list[tuple[ClientProxy, FitRes]],
                      failures: list) -> tuple[Parameters | None, dict[str, Scalar]]:
        """Sum the sketches / power products, or the clients' loss trajectories."""
        d, r = self.d, self.r
        if server_round == 1:
            replies = self._collect(server_round, results, failures, [(d, r)] * self.num_sketches)
            if replies is None:
                return None, {}
            sums = [sum(replies[pid][0][j] for pid in range(self.m)) for j in range(self.num_sketches)]
            self.chosen, self.kappas = select_sketch(sums)
            self.V = sums[self.chosen]
            log.info("sketch: kappa of the %d draws %s; kept draw %d", self.num_sketches,
                     ", ".join(f"{k:.3g}" for k in self.kappas), self.chosen)
            self._rows.append(self.row(server_round, "sketch", communications=1, kappa_v=self.kappas[self.chosen],
                                       **self._traffic()))
        elif server_round <= self.alpha + 1:
            replies = self._collect(server_round, results, failures, [(d, r)])
            if replies is None:
                return None, {}
            self.V = sum(replies[pid][0][0] for pid in range(self.m))
            self._rows.append(self.row(server_round, "power", communications=server_round,
                                       kappa_v=condition_number(self.V), **self._traffic()))
        else:
            replies = self._collect(server_round, results, failures, [(self.T + 1,)], ("loss-exact",))
            if replies is None:
                return None, {}
            self.losses = sum(replies[pid][0][0] for pid in range(self.m))
            self.exact_loss = sum(replies[pid][1]["loss-exact"] for pid in range(self.m))
            kappa = condition_number(self.V)
            t = np.arange(self.T + 1)
            momentum = self.settings.momentum if self.settings.u_solver != "exact" else "exact"
            bound = theorem1_bound(kappa, t, self.losses[0] - self.exact_loss, momentum)
            traffic = self._traffic()
            for i in t:
                self._rows.append(self.row(
                    server_round, "solve", iteration=int(i), communications=self.alpha + 1,
                    loss=float(self.losses[i]), exact_loss=self.exact_loss,
                    excess_fixed_v=float(self.losses[i] - self.exact_loss),
                    theorem1_bound=None if bound is None else float(bound[i]), kappa_v=kappa,
                    **(traffic if i == 0 else {"wall_time": traffic["wall_time"]})))
        return ndarrays_to_parameters([self.V]), {}


class MFBaselineStrategy(_MFBase):
    """``mf-altgd`` (Ward & Kolda 2023) and ``mf-simgd`` (Ye & Du 2021): ``V`` updated every communication."""

    def __init__(self, cfg: dict[str, Any], dimension: int | None, reference: MFReference | None = None,
                 wait_timeout: float = 600.0, singular_values: np.ndarray | None = None) -> None:
        super().__init__(cfg, dimension, reference, wait_timeout)
        s = self.settings
        self.simultaneous = s.strategy == "mf-simgd"
        self.sigma1, self.sigma_r = self._sigmas(singular_values)
        self.cap = s.num_server_rounds
        self.target = s.target_log_excess
        self.init_std = 0.0
        self.eta = wk_constants(self.sigma1)[0]  # mf-simgd: replaced by Ye & Du's step once n is known
        self.predicted_iterations: float | None = None

    def _sigmas(self, singular_values: np.ndarray | None) -> tuple[float, float | None]:
        """``(sigma_1, sigma_r)`` from ``mf-sigma-1`` / ``mf-sigma-r``, else from the harness's singular values."""
        s = self.settings
        given = [("mf-sigma-1", s.mf_sigma_1)] + ([("mf-sigma-r", s.mf_sigma_r)] if self.simultaneous else [])
        values = []
        for i, (key, value) in enumerate(given):
            if value > 0:
                values.append(value)
            elif singular_values is not None:
                values.append(float(singular_values[0 if i == 0 else self.r - 1]))
            else:
                raise ConfigError(f"strategy {s.strategy} needs {key} (a singular value of the pooled matrix, "
                                  "for its step size): set it, or run on a data set the simulation harness builds")
        return values[0], (values[1] if self.simultaneous else None)

    def _discover(self, client_manager: ClientManager) -> None:
        super()._discover(client_manager)
        if self.simultaneous:  # n is known now
            n = self.num_rows
            self.init_std, self.eta, self.predicted_iterations = yd_constants(
                self.sigma1, self.sigma_r, self.r, n, self.d, self.target)
            log.info("mf-simgd: eta = %.3g, Ye & Du's predicted iteration count %.3g", self.eta,
                     self.predicted_iterations)

    @property
    def num_rounds(self) -> int:  # noqa: D102
        return self.cap + 1

    def __repr__(self) -> str:
        return (f"MFBaselineStrategy({self.settings.strategy}, {self.d_repr}, r={self.r}, N={self.m}, "
                f"eta={self.eta:.3g}, "
                f"cap={self.cap}, target={self.target:g})")

    def configure_fit(self, server_round: int, parameters: Parameters,
                      client_manager: ClientManager) -> list[tuple[ClientProxy, FitIns]]:
        """Broadcast ``V_{k-1}`` with the step size (and the init scale in round 1)."""
        if server_round == 1:
            if self.simultaneous:
                rng = np.random.default_rng([self.settings.seed, 12, 1])
                self.V = rng.normal(0.0, self.init_std, (self.d, self.r))
            else:
                self.V = wk_init(self.settings.seed, self.d, self.r, self.sigma1)[1]
        config = {"phase": "simgd" if self.simultaneous else "altgd", "eta": self.eta, "sigma1": self.sigma1}
        if self.simultaneous:
            config["init-std"] = self.init_std
        return self._send(server_round, [self.V], config)

    def aggregate_fit(self, server_round: int, results: list[tuple[ClientProxy, FitRes]],
                      failures: list) -> tuple[Parameters | None, dict[str, Scalar]]:
        """Row of iteration ``k - 1``; stop at the target, else ``V_k = V_{k-1} - eta sum_i G_i``."""
        replies = self._collect(server_round, results, failures, [(self.d, self.r)], ("f",))
        if replies is None:
            return None, {}
        loss = sum(replies[pid][1]["f"] for pid in range(self.m))
        row = self.row(server_round - 1, "iterate", iteration=server_round - 1, communications=server_round - 1,
                       loss=loss, kappa_v=condition_number(self.V),
                       predicted_iterations=self.predicted_iterations, **self._traffic())
        self._rows.append(row)
        excess = row["log10_excess_loss"]
        reached = row["excess_loss"] is not None and (excess is None or excess <= self.target)
        if reached or server_round > self.cap:
            self.stopped = True
            return None, {}
        self.V = self.V - self.eta * sum(replies[pid][0][0] for pid in range(self.m))
        return ndarrays_to_parameters([self.V]), {}
