"""FAPS: federated PCA by consensus on subspaces (Wang, Liu, Zhang, Algorithm 1 / Sec. 5.2).

Each client ``i`` holds ``M_i = A_i A_i^T`` (``d x d``; ``A_i`` is its
features-by-samples block, ``M_i = X_i^T X_i`` for our rows-are-samples data)
and keeps private state across rounds: its basis ``X_i`` (``d x p``), the
low-rank multiplier factor ``W_i`` (``Lambda_i = X_i W_i^T + W_i X_i^T``), its
penalty ``beta_i`` and the history of its consensus violation ``d_i``. In round
``k`` it receives ``Z_k`` and

1. updates ``beta_i`` by rule (25) (``beta_i <- (1 + theta) beta_i`` when ``d_i``
   fell by less than a factor ``1 + mu`` over the last 5 rounds; ``d_i^(0) = 0``,
   so this always fires once at ``k = 5``);
2. solves the local subproblem (11): the ``p``-dominant eigenspace of
   ``H_i = M_i + Lambda_i + beta_i Z Z^T`` (positive semidefinite), either by
   warm-started subspace iterations with the relative-change rule (26) or
   exactly;
3. updates the multiplier by (15)-(16): ``W_i = -(I - X_i X_i^T) M_i X_i``;
4. sends ``Y_i = beta_i X_i X_i^T Z - X_i W_i^T Z - W_i X_i^T Z`` (``= Q_i Z``,
   eq. 18) and the scalar ``f_i = tr(Z^T M_i Z)`` for the stopping rule (27).

The server sets ``Z_{k+1} = orth(sum_i Y_i)``: an *unweighted* sum as in the
paper's algorithm (no weights by row count). ``X_i`` and ``beta_i`` never leave the client, which is what keeps
the server from solving for ``M_i`` (Proposition 5); the scalar ``f_i`` does
leak one linear functional of ``M_i`` per round (spec P6).

Deviations (documented in the README): ``Z_0`` is the shared Gaussian start of
every eigenspace strategy rather than Uniform[-1, 1] (the same span
distribution for the purpose of a paired comparison); the inner loop is capped
at ``inner-max-steps`` (the paper gives no cap).

The first round is degenerate, and the paper does not say so. With
``X_i = Z_0`` and ``W_i`` from (16), ``H_i Z_0 = Z_0 (Z_0^T M_i Z_0 + beta_i I)``:
``span(Z_0)`` is an invariant subspace of ``H_i`` but not its dominant one
(Table 4 problem, client 0: top eigenvalue 0.0024 inside it, ``||A_0||^2 =
0.035``). Subspace iterations started on an invariant subspace leave it only
through round-off, which they amplify: rule (26) ends round 0 after about
60 inner iterations (57-65 per client), at a subspace decided by round-off
(two runs whose ``M_i`` differ by ``2.5e-16`` relative had ``Z_1`` apart by a
principal angle of sine 0.40). With the default inner rule the number
of rounds to the stopping rule therefore varies by a factor of about 2 under
round-off-level changes; a fixed number of inner steps or exact local solves
do not have this problem. The implementation follows the paper (and, with the
spec's ``Z_0`` on the spec's instance, reproduces its re-simulation: 208
rounds against 209); the README says what this means for Table 4.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
from flwr.common import FitIns, FitRes, Parameters, Scalar, ndarrays_to_parameters, parameters_to_ndarrays
from flwr.server.client_manager import ClientManager
from flwr.server.client_proxy import ClientProxy

from ..base import uploaded_bytes
from .eigenspace import EigenspaceStrategy
from ...kernels.linalg import orth
from ..replies import scalar_metric

__all__ = ["FapsStrategy"]


class FapsStrategy(EigenspaceStrategy):
    """Server side of FAPS: broadcast ``Z``, sum the masked products, orthonormalise, test rule (27).

    FAPS needs every client every round (the sum of masked products, and each
    client's state): the straggler model may only report the round time
    (``dropout`` and a ``round-policy`` other than ``all`` are refused).
    """

    REPORTS_OBJECTIVE = True  # the clients report f_i = tr(Z^T A_i A_i^T Z) every round

    def __init__(self, cfg: dict[str, Any], dimension: int, reference=None, wait_timeout: float = 600.0) -> None:
        super().__init__(cfg, dimension, reference, wait_timeout)

    @property
    def num_rounds(self) -> int:  # noqa: D102
        return self.settings.num_server_rounds

    def __repr__(self) -> str:
        c = self.settings
        inner = "exact" if c.inner_solver == "exact" else (
            f"{c.inner_steps} inner steps" if c.inner_steps else f"inner-tol {c.inner_tol:g}")
        return f"FapsStrategy({self.d_repr}, p={self.r}, m={self.m}, {inner}, stop-tol={c.stop_tol:g})"

    def configure_fit(self, server_round: int, parameters: Parameters,
                      client_manager: ClientManager) -> list[tuple[ClientProxy, FitIns]]:
        """Every client gets ``Z_k`` (FAPS needs all of them every round)."""
        Z = parameters_to_ndarrays(parameters)[0]
        plan = self.participation.plan(server_round, range(self.m))
        self._pending = {"start": time.perf_counter(), "Z": Z, "bytes_down": self.m * Z.nbytes,
                         "round_time": plan.round_time}
        fit_ins = FitIns(parameters, {"round": server_round, **self.center_config()})
        return [(self.proxies[pid], fit_ins) for pid in range(self.m)]

    def aggregate_fit(self, server_round: int, results: list[tuple[ClientProxy, FitRes]],
                      failures: list) -> tuple[Parameters | None, dict[str, Scalar]]:
        """``Z_{k+1} = orth(sum_i Y_i)``, unless rule (27) fires or a client is missing."""
        pend = self._pending
        Z = pend["Z"]
        valid, rejected = self.collect_replies(server_round, results, range(self.m), [(self.d, self.r)],
                                               ("f",), broadcast=Z)
        replies = {pid: arrays[0] for pid, (arrays, _) in valid.items()}
        objective = sum(values["f"] for _, values in valid.values())
        steps = []
        for proxy, res in results:  # a diagnostic of the accepted replies: an unusable value counts as 0
            if self.partition_of(proxy) in valid:
                inner = scalar_metric(res, "inner-steps")
                steps.append(0.0 if isinstance(inner, str) else inner)
        pend.update(bytes_up=uploaded_bytes(results),
                    rejected=rejected, failures=len(failures), participants=len(replies), distinct=len(replies),
                    inner_steps=float(np.mean(steps)) if steps else 0.0)
        if len(replies) < self.m:
            # The sum of masked products is meaningless without every client, and the clients that answered
            # have already advanced their private state past this round: the run cannot go on correctly.
            missing = sorted(set(range(self.m)) - set(replies))
            self.abort(f"FAPS round {server_round}: no usable reply from partition(s) "
                       f"{', '.join(map(str, missing))} ({rejected} rejected, {len(failures)} failed); FAPS sums "
                       "every client's masked product and cannot proceed without one, so the run stops")
            return None, {}
        if self.check_stop(server_round, objective):
            return None, {}
        Z_new = orth(sum(replies[pid] for pid in sorted(replies)))
        self.iterates.append(Z_new)
        return ndarrays_to_parameters([Z_new]), {}

    def round_columns(self, server_round: int) -> dict[str, Any]:
        """Mean number of inner iterations over the clients in this round."""
        return {"inner_steps": self._pending.get("inner_steps", 0.0) if server_round else 0.0}
