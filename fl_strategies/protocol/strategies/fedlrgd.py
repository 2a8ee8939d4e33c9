"""FedLRGD: federated low-rank gradient descent (Jadbabaie, Makur, Shah, Algorithm 1).

The server holds ``r`` samples. Before round 1 (paper epoch 1) it draws ``r``
pivots ``theta^(k)`` iid Uniform[-1, 1]^p, evaluates its samples' gradients at
them, ``G[i, j, k] = g_i(x^(0,j); theta^(k))`` (rows = server samples, columns
= pivots) and inverts every ``G^(i)`` (``g-inverse``: ``inv``, the literal
inverse, or ``pinv``, a truncated pseudo-inverse with relative cut-off
``pinv-rcond`` for ill-conditioned ``G``). Round 1 broadcasts the pivots and
``G^{-1}``; every client computes its ``r s`` gradients once, forms
``V_c[i, :] = H_c[i, :] G^(i)^{-1}`` (``H_c[i, k] = sum_j g_i(x^(c,j); theta^(k))``),
keeps ``V_c`` in its node state and uploads column ``k`` of it in round
``k = 1..r`` (one p-vector per epoch). The server **sums** the columns over all
clients into ``A`` (r, p); a missing or rejected client stops the run. After
round ``r`` it runs ``S`` steps of inexact GD alone with step ``1/L1``:
``gradhat(theta) = (1/n) sum_k (1 + A[k]) * grad f(x^(0,k); theta)``.

Gamma (Definition 1) = ``r^2 + r s + r S + phi m r``.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
from flwr.common import FitIns, FitRes, Parameters, Scalar, ndarrays_to_parameters, parameters_to_ndarrays
from flwr.server.client_manager import ClientManager
from flwr.server.client_proxy import ClientProxy

from ..base import log, uploaded_bytes
from .eigenspace import STREAM_INIT
from .erm import ErmStrategy, oracle_epoch
from ...kernels.fedlrgd import draw_pivots, server_matrices, invert, inexact_gd

__all__ = ["FedLrgdStrategy"]


class FedLrgdStrategy(ErmStrategy):
    """Server side of FedLRGD: ``server-samples`` = r Flower rounds, then ``gd-iterations`` = S GD steps.

    Attributes
    ----------
    pivots : ndarray of shape (r, p)
    Ginv : ndarray of shape (p, r, r)
    cond : ndarray of shape (p,)
        Condition numbers of the ``G^(i)``.
    A : ndarray of shape (r, p)
        Column sums received so far.
    trajectory : ndarray of shape (S + 1, p)
        The GD iterates (after the last round).

    Notes
    -----
    The sums need every client: the straggler model may only report the round
    time (``dropout`` and a ``round-policy`` other than ``all`` are refused).
    """


    def __init__(self, cfg: dict[str, Any], dimension: int | None, reference=None, wait_timeout: float = 600.0,
                 server_rows: np.ndarray | None = None) -> None:
        super().__init__(cfg, dimension, reference, wait_timeout, server_rows)
        self.rank = self.X0.shape[0]
        self.S = self.settings.gd_iterations
        self.A = np.zeros((self.rank, self.p))
        self.trajectory: np.ndarray | None = None

    @property
    def num_rounds(self) -> int:  # noqa: D102
        return self.rank

    def __repr__(self) -> str:
        return (f"FedLrgdStrategy(loss={self.loss}, p={self.p}, r={self.rank}, m={self.m}, S={self.S}, "
                f"g-inverse={self.settings.g_inverse})")

    def initialize_parameters(self, client_manager: ClientManager) -> Parameters:
        """Discovery, then paper epoch 1: pivots, ``G`` (r^2 gradients) and its inverses; ``theta^(0) = 0``."""
        self._discover(client_manager)
        rng = np.random.default_rng([self.settings.seed, STREAM_INIT])
        self.pivots = draw_pivots(rng, self.rank, self.p)
        G = server_matrices(self.loss, self.X0, self.y0, self.pivots, self.mu)
        self.Ginv, self.cond = invert(G, self.settings.g_inverse, self.settings.pinv_rcond)
        self.gamma += oracle_epoch(self.rank * self.rank, False, self.phi, self.m)
        log.info("FedLRGD: cond(G^(i)) in [%.3g, %.3g]", self.cond.min(), self.cond.max())
        theta0 = np.zeros(self.p)
        self.iterates = [theta0]
        return ndarrays_to_parameters([theta0])

    def configure_fit(self, server_round: int, parameters: Parameters,
                      client_manager: ClientManager) -> list[tuple[ClientProxy, FitIns]]:
        """Round 1: pivots and ``G^{-1}`` to every client; round k: ask for column k - 1 of ``V_c``."""
        arrays = [self.pivots, self.Ginv] if server_round == 1 else []
        phase = "weights" if server_round == 1 else "send"
        plan = self.participation.plan(server_round, range(self.m))  # only the round time: every client is kept
        self._pending = {"start": time.perf_counter(), "theta": parameters_to_ndarrays(parameters)[0],
                         "bytes_down": self.m * sum(a.nbytes for a in arrays), "round_time": plan.round_time}
        fit_ins = FitIns(ndarrays_to_parameters(arrays), {"phase": phase, "column": server_round - 1})
        return [(self.proxies[pid], fit_ins) for pid in sorted(self.proxies)]

    def aggregate_fit(self, server_round: int, results: list[tuple[ClientProxy, FitRes]],
                      failures: list) -> tuple[Parameters | None, dict[str, Scalar]]:
        """**Sum** column ``k`` over all clients; after round r run the S inexact GD steps."""
        pend = self._pending
        valid, rejected = self.collect_replies(server_round, results, range(self.m), [(self.p,)],
                                               broadcast=pend["theta"])
        replies = {pid: arrays[0] for pid, (arrays, _) in valid.items()}
        pend.update(bytes_up=uploaded_bytes(results),
                    rejected=rejected, failures=len(failures), participants=len(replies))
        missing = sorted(set(range(self.m)) - set(replies))
        if missing:
            self.abort(f"FedLRGD round {server_round}: no usable reply from partition(s) "
                      f"{', '.join(map(str, missing))} ({rejected} rejected, {len(failures)} failed); the gradient "
                      "estimate needs the summed weights of every client, so the run stops")
            return None, {}
        self.A[server_round - 1] = sum(replies[pid] for pid in sorted(replies))
        s_max = max(self.sizes.values())
        self.gamma += oracle_epoch(self.rank * s_max if server_round == 1 else 0, True, self.phi, self.m)
        self.comm_epochs += 1
        theta = pend["theta"]
        if server_round == self.rank:  # paper epoch r + 2: the server alone
            self.trajectory = inexact_gd(self.loss, self.X0, self.y0, self.A, self.n, theta, self.mu, 1.0 / self.L1,
                                         self.S)
            theta = self.trajectory[-1]
            self.gamma += oracle_epoch(self.rank * self.S, False, self.phi, self.m)
        self.iterates.append(theta)
        return ndarrays_to_parameters([theta]), {}

    def round_columns(self, server_round: int) -> dict[str, Any]:
        """GD iterations done so far (S after the last round)."""
        return {"gd_iterations": self.S if server_round == self.rank and self.trajectory is not None else 0}
