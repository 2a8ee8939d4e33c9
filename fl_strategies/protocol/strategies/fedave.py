"""FedAve: FedPAQ (Reisizadeh et al., Algorithm 1) without quantisation, the FedLRGD paper's baseline.

Epoch ``k = 0..T-1`` (Flower round ``k + 1``): the server samples
``max(1, round(frac-active * m))`` clients without replacement, broadcasts
``theta^(k)`` and ``eta_k``; each runs ``b = local-steps`` single-sample SGD
steps (samples drawn uniformly with replacement) and returns ``theta_{c,b}``;
the server averages the returned parameters weighted by row counts (a plain
average for equal ``s``). With ``server-as-client`` the server runs the same
local SGD on its ``r`` rows as an always-active pseudo-client weighted ``r``
(so FedAve minimises the same ``F`` as FedLRGD; without it the fixed point is
the clients-only minimiser).

Step sizes (``step-schedule``): ``clipped`` (tuned) ``min(step-max, 4/(mu(k b + 1)))``;
``theory-shifted`` (safe) ``4/(mu((k + T0) b + 1))`` with Lemma 3's
``T0 = 4 max{kappa, 4 + 32 kappa^2 (1 - tau)/(tau (m - 1)), 4 m/(mu^2 b)}``;
``const`` ``step-max``. Every epoch adds ``b + phi tau m`` to Gamma.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
from flwr.common import FitIns, FitRes, Parameters, Scalar, ndarrays_to_parameters, parameters_to_ndarrays
from flwr.server.client_manager import ClientManager
from flwr.server.client_proxy import ClientProxy

from ..base import uploaded_bytes
from .erm import ErmStrategy, oracle_epoch
from ...kernels.fedave import warmup_epochs, step_size, local_sgd

__all__ = ["FedAveStrategy"]


class FedAveStrategy(ErmStrategy):
    """Server side of FedAve: ``num-server-rounds`` = T epochs.

    Sampling and stragglers go through :mod:`fl_strategies.settings.participation`
    (``sampling = "auto"``: without replacement); the server averages the
    replies it keeps (a partition drawn twice with replacement counts twice).
    """


    def __init__(self, cfg: dict[str, Any], dimension: int | None, reference=None, wait_timeout: float = 600.0,
                 server_rows: np.ndarray | None = None) -> None:
        super().__init__(cfg, dimension, reference, wait_timeout, server_rows)
        self.b, self.tau = self.settings.local_steps, self.settings.frac_active
        self.active = max(1, int(round(self.tau * self.m)))
        self.T0 = warmup_epochs(self.L1 / self.mu, self.tau, self.m, self.mu, self.b)

    @property
    def num_rounds(self) -> int:  # noqa: D102
        return self.settings.num_server_rounds

    def __repr__(self) -> str:
        c = self.settings
        return (f"FedAveStrategy(loss={self.loss}, p={self.p}, m={self.m}, active={self.active}, b={self.b}, "
                f"{c.step_schedule} step-max={c.step_max:g}, server-as-client={c.server_as_client})")

    def initialize_parameters(self, client_manager: ClientManager) -> Parameters:
        """Discovery; ``theta^(0) = 0``."""
        self._discover(client_manager)
        theta0 = np.zeros(self.p)
        self.iterates = [theta0]
        return ndarrays_to_parameters([theta0])

    def eta(self, server_round: int) -> float:
        """Step size of the epoch run in ``server_round`` (epoch ``k = server_round - 1``)."""
        c = self.settings
        return step_size(c.step_schedule, server_round - 1, b=self.b, mu=self.mu, step_max=c.step_max, T0=self.T0)

    def configure_fit(self, server_round: int, parameters: Parameters,
                      client_manager: ClientManager) -> list[tuple[ClientProxy, FitIns]]:
        """Sample ``tau m`` clients without replacement; send ``theta^(k)``, ``eta_k`` and ``b``."""
        multiplicity = self.participation.sample(server_round, self.active)
        pids = sorted(multiplicity)
        plan = self.participation.plan(server_round, [pid for pid in pids if pid in self.proxies], work=self.b)
        if self.participation.timed:
            pids = plan.kept
        theta = parameters_to_ndarrays(parameters)[0]
        eta = self.eta(server_round)
        self._pending = {"start": time.perf_counter(), "theta": theta, "eta": eta, "asked": pids,
                         "bytes_down": len(pids) * theta.nbytes, "multiplicity": multiplicity,
                         "dropped": len(plan.dropped), "late": len(plan.late), "round_time": plan.round_time}
        fit_ins = FitIns(parameters, {"round": server_round, "eta": eta, "local-steps": self.b})
        if not pids:
            self.end_round_without_clients(server_round, theta, "theta", failures=len(plan.dropped))
        return [(self.proxies[pid], fit_ins) for pid in pids if pid in self.proxies]

    def aggregate_fit(self, server_round: int, results: list[tuple[ClientProxy, FitRes]],
                      failures: list) -> tuple[Parameters | None, dict[str, Scalar]]:
        """Row-count-weighted average of the returned parameters (and the server's pseudo-client)."""
        pend = self._pending
        theta = pend["theta"]
        valid, rejected = self.collect_replies(server_round, results, pend["asked"], [(self.p,)], broadcast=theta)
        thetas = {pid: arrays[0] for pid, (arrays, _) in valid.items()}
        weights = {pid: float(self.sizes[pid]) * pend["multiplicity"][pid] for pid in thetas}
        if self.settings.server_as_client:
            rng = np.random.default_rng([self.settings.seed, 3, -1 % 2 ** 32, server_round])
            thetas[-1] = local_sgd(self.loss, self.X0, self.y0, theta, self.mu, pend["eta"], self.b, rng)
            weights[-1] = float(self.X0.shape[0])
        pend.update(bytes_up=uploaded_bytes(results),
                    rejected=rejected, failures=len(failures) + pend["dropped"],
                    participants=len(thetas) - (-1 in thetas))
        self.gamma += oracle_epoch(self.b, True, self.phi, self.active)
        self.comm_epochs += 1
        if thetas:
            total = sum(weights.values())
            theta = sum(weights[k] * thetas[k] for k in sorted(thetas)) / total
        self.iterates.append(theta)
        return ndarrays_to_parameters([theta]), {}

    def round_columns(self, server_round: int) -> dict[str, Any]:
        """The step size of the round's epoch."""
        return {"step_size": self._pending.get("eta", 0.0) if server_round else 0.0}
