"""Randomised block Krylov iteration (Musco and Musco 2015) with Rayleigh-Ritz, as a federated strategy.

The clients compute what they compute for ``power``: the sum over sites of ``A_i Q`` for a broadcast
``Q`` (``d x r``), one product per round (the power client, unchanged). The server keeps the Krylov basis
``Q = [Q_0, Q_1, ..., Q_{j-1}]`` (``Q_0 = Z_0``; each block orthonormal to the previous ones,
:func:`fl_strategies.kernels.krylov.next_block`) and ``C Q``, the products the clients returned for its
blocks, with ``C = sum_i (s_i / n) A_i`` as for ``power``. Round ``j``:

1. broadcast ``Q_{j-1}``; every client returns ``A_i Q_{j-1}``; the server sums them into ``C Q_{j-1}``;
2. the estimate of the round is the top ``r = iteration-rank`` Ritz vectors of ``C`` on ``span(Q)``
   (:func:`fl_strategies.kernels.krylov.rayleigh_ritz`): ``Q^T C Q`` comes from the kept products, so the
   Rayleigh-Ritz step costs no exchange, and every row of the results is a Ritz estimate;
3. the next block is ``C Q_{j-1}`` orthonormalised against ``Q``.

After ``j`` rounds the estimate is the Rayleigh-Ritz approximation on the block Krylov space of degree ``j - 1``,
which needs ``O(log d / sqrt(gap))`` rounds against the power method's ``O(log d / gap)``.

Memory and ``q``. The server holds ``Q`` and ``C Q``: ``2 d r q`` floats for ``q`` blocks. The basis grows by
one block per round up to ``q = krylov-blocks`` blocks (0: ``num-server-rounds``, i.e. no restart), and to one
block fewer than ``d`` columns. When it is full the iteration restarts from its leading ``r * floor(q / 2)`` Ritz
vectors (a thick restart: their products ``C Z = C Q V`` are known, so the restart costs no round); the next
block is computed from the whole basis before the restart, so the kept vectors, their products and the next
block continue the same Krylov relation.

What it tolerates. A block built from the products of a subset of the clients is a product with another
operator, and the Krylov relation ``C Q`` of the kept blocks would no longer hold: every client must answer
every round (no sampling, no drop-outs, no round closed early, no partition missing at discovery; refused
before round 1). A round in
which a client fails or its reply is rejected is repeated: its block is broadcast again and the estimate kept.
The stopping rule (``stop-tol``) needs no client report: ``F = n * (sum of the leading k = rank Ritz values)``
is ``tr(Z_k^T M^T M Z_k)`` of the round's kept components ``Z_k`` (the model's), and the run stops, keeping that
estimate, once ``|F_k - F_{k-1}| <= stop-tol * F_k`` (the kept components' ``F``, as for the power strategies
with ``iteration-rank > rank``). The ``r - k`` columns beyond the kept ones are oversampling: their Ritz values
(on genotypes the bulk of the spectrum, eigenvalues a few per cent apart) settle long after the kept ones and
would hold the run for rounds that change nothing it keeps. Measured on admixed genotypes (4,000 x 10,000, ``k = 4`` of ``r = 8``, ``stop-tol = 1e-6``): ``F`` over
all eight stops at round 24, over the kept four at round 17, with PC1-2 within 1e-9 of ``eigh`` at both. No privacy noise (the Krylov relation needs exact products); with
``secure-aggregation = true`` the sums go through SecAgg+ as exact limbs
(:mod:`fl_strategies.protocol.strategies.secure_krylov`: :meth:`KrylovStrategy.extend` from each round's sum).
Checkpoints hold the basis, its products and the next block (:meth:`KrylovStrategy.state_dict`). The summary
exchange after the last round asks the sites for ``tr(A_i)`` (and plink2's diagonal) but no product: the model's
estimate is ``Z = Q V`` of a basis whose products are kept, so ``C Z = C Q V`` (:meth:`KrylovStrategy.known_product`).
Each round tells the sites the basis's id and the block's index (:data:`~fl_strategies.files.pca.KRYLOV_BASIS`,
:data:`~fl_strategies.files.pca.KRYLOV_BLOCK`): a ``.bed`` site keeps ``X Q_j`` (``s x r``) and, with the first
block, its people's row squares, and the summary sends ``V`` (:meth:`KrylovStrategy.summary_coordinates`), so the
site's ``X Z = [X Q_0 ... X Q_{q-1}] V`` needs no read of its file (one read where it kept nothing).
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import numpy as np
from flwr.common import FitIns, FitRes, Parameters, Scalar, ndarrays_to_parameters, parameters_to_ndarrays
from flwr.server.client_manager import ClientManager
from flwr.server.client_proxy import ClientProxy

from ...files.pca import KRYLOV_BASIS, KRYLOV_BLOCK, KRYLOV_COORDINATES
from ...kernels.krylov import basis_times, extend_projection, next_block, rayleigh_ritz
from ..base import log, uploaded_bytes
from .fedpower import FedPowerStrategy

__all__ = ["KrylovStrategy", "STREAM_KRYLOV"]

#: the random stream (of the run seed) that replaces deflated directions of the Krylov basis
STREAM_KRYLOV = 3

#: bytes of address space each of the buffers of ``Q`` and ``C Q`` reserves at first (:meth:`KrylovStrategy._append`):
#: the whole basis up to this size (2,700 columns at 50,000 variants, 700 at 188,000), touched only as it fills
RESERVED_BYTES = 1 << 30


class KrylovStrategy(FedPowerStrategy):
    """Server of ``krylov``: block Krylov basis, Rayleigh-Ritz estimate each round (module docstring).

    Parameters are those of :class:`~fl_strategies.protocol.strategies.fedpower.FedPowerStrategy`.

    Attributes
    ----------
    Q : ndarray of shape (d, j r)
        The Krylov basis whose products are known.
    CQ : ndarray of shape (d, j r)
        ``C Q``.
    block : ndarray of shape (d, r)
        The block broadcast next.
    max_blocks : int
        ``q``: blocks kept before a thick restart.
    restarts : int
    """

    REPORTS_OBJECTIVE = False
    ORTHONORMAL_ESTIMATES = True  # Ritz vectors Q V: orthonormal Q (Gram-Schmidt twice), orthogonal V (eigh)

    def __init__(self, cfg: dict[str, Any], dimension: int, reference=None, wait_timeout: float = 600.0) -> None:
        super().__init__(cfg, dimension, reference, wait_timeout)
        q = self.settings.krylov_blocks
        self.max_blocks = q if q > 0 else self.num_rounds
        self.Q: np.ndarray | None = None
        self.CQ: np.ndarray | None = None
        self.block: np.ndarray | None = None
        self.restarts = 0
        self.products = 0
        self.basis_id: str | None = None  # KRYLOV_BASIS: the sites keep X Q_j of its blocks for the summary
        self.ritz_values: np.ndarray | None = None
        self._objective: float | None = None
        self._buffers: tuple[np.ndarray, np.ndarray] | None = None  # Q and C Q's storage (_append)
        self._projection: np.ndarray | None = None  # Q^T C Q of the basis (extend_projection)
        # the newest estimates' coordinates in the basis: (estimate, restarts when it was made, V with Z = Q[:, :m] V)
        self._coordinates: list[tuple[np.ndarray, int, np.ndarray]] = []

    def __repr__(self) -> str:
        return (f"KrylovStrategy({self.d_repr}, k={self.k}, r={self.r}, m={self.m}, q={self.max_blocks}, "
                f"rounds={self.num_rounds})")

    @property
    def tracks_objective(self) -> bool:
        """Never asked of the clients: the Ritz values give ``F`` of the estimate (module docstring)."""
        return False

    @property
    def holds_rows(self) -> bool:
        """Rows are written at once: the objective of a round's estimate is known in that round."""
        return False

    def capacity(self) -> int:
        """Blocks the basis may hold: ``q``, and one block fewer than ``d`` columns (room for the next block)."""
        return max(1, min(self.max_blocks, self.d // self.r - 1))

    def kept_at_restart(self) -> int:
        """Ritz vectors a restart keeps: half the basis's blocks (at least one), ``r`` columns each."""
        return self.r * max(1, self.capacity() // 2)

    # -- one round ----------------------------------------------------------------------------------
    def configure_fit(self, server_round: int, parameters: Parameters,
                      client_manager: ClientManager) -> list[tuple[ClientProxy, FitIns]]:
        """Send the next Krylov block to every client (the first round: ``Z_0``)."""
        if self.block is None:
            self.block = parameters_to_ndarrays(parameters)[0]
        if self.basis_id is None:  # a new basis (a fit, a resumed run): its own id, kept when round 1 is repeated
            self.basis_id = uuid.uuid4().hex  # (the sites keep block 0 and its row squares from the first time)
        config: dict[str, Scalar] = {**self.center_config(), "local-steps": 1, "round": server_round,
                                     "iteration-offset": server_round - 1}
        if not getattr(self, "secure", False):  # a SecAgg+ summary asks for no product: nothing to keep
            config.update({KRYLOV_BASIS: self.basis_id,
                           KRYLOV_BLOCK: 0 if self.Q is None else self.Q.shape[1] // self.r})
        targets = sorted(self.proxies)
        plan = self.participation.plan(server_round, targets)  # every client is kept: the round's virtual time
        self._pending = {"start": time.perf_counter(), "steps": 1, "Z": self.block, "round_time": plan.round_time,
                         "bytes_down": len(targets) * self.block.nbytes, "asked": set(targets),
                         "multiplicity": {pid: 1 for pid in targets}}
        ins = FitIns(ndarrays_to_parameters([self.block]), config)
        return [(self.proxies[pid], ins) for pid in targets]

    def aggregate_fit(self, server_round: int, results: list[tuple[ClientProxy, FitRes]],
                      failures: list) -> tuple[Parameters | None, dict[str, Scalar]]:
        """Sum the products into ``C Q_{j-1}``, extend the basis, Rayleigh-Ritz; repeat the block if one is
        missing."""
        pend = self._pending
        valid, rejected = self.intake(server_round, results, pend["asked"], 1, pend["Z"])
        pend.update(bytes_up=uploaded_bytes(results), rejected=rejected, failures=len(failures),
                    participants=len(valid), distinct=len(valid), misalignment=0.0)
        if len(valid) < len(self.proxies):
            return self.repeat_block(server_round, f"{len(valid)} of {len(self.proxies)} clients answered "
                                                   f"({rejected} rejected, {len(failures)} failed)")
        n = sum(self.sizes[pid] for pid in valid)
        W = sum(self.sizes[pid] * arrays[0] for pid, (arrays, _) in valid.items()) / n
        return self.extend(server_round, W, n)

    def _append(self, Z: np.ndarray, W: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The basis and its products with the block ``Z`` and its product ``W`` appended: views of two
        column-major buffers, so that each round copies one block, not the whole basis.

        The buffers reserve the basis's whole capacity at once where it is at most :data:`RESERVED_BYTES` each
        (address space only: a page is first touched when the basis reaches it), else they grow by doubling; a
        restart's basis (new arrays) is copied into the same buffers, not into new ones. Growing copies the basis
        into fresh memory, whose first touch cost more than the copy itself (at 188,000 variants 0.1 to 0.7 s over
        9 rounds, measured on a loaded machine).
        """
        m, r = (0 if self.Q is None else self.Q.shape[1]), Z.shape[1]
        bufs = self._buffers
        if bufs is None or bufs[0].shape != (self.d, bufs[0].shape[1]) or bufs[0].shape[1] < m + r:
            reserve = RESERVED_BYTES // (8 * self.d)
            size = max(m + r, min(max(2 * (m + r), reserve), self.capacity() * self.r))
            bufs = self._buffers = (np.empty((self.d, size), order="F"), np.empty((self.d, size), order="F"))
        if m and not np.shares_memory(self.Q, bufs[0]):  # grown, or a restart's Ritz vectors and their products
            bufs[0][:, :m], bufs[1][:, :m] = self.Q, self.CQ
        bufs[0][:, m:m + r], bufs[1][:, m:m + r] = Z, W
        return bufs[0][:, :m + r], bufs[1][:, :m + r]

    def repeat_block(self, server_round: int, why: str) -> tuple[Parameters, dict[str, Scalar]]:
        """A round whose sum lacks a client: its block is asked again next round and the estimate kept."""
        log.warning("round %d: %s; a Krylov block needs every product, so the block is asked again and the "
                    "estimate kept", server_round, why)
        current = self.iterates[-1]
        self.iterates.append(current)
        return ndarrays_to_parameters([current]), {}

    def extend(self, server_round: int, W: np.ndarray, n: int) -> tuple[Parameters | None, dict[str, Scalar]]:
        """One Krylov step from ``W = C Q_{j-1}`` (every client's product, ``n`` rows): extend the basis,
        Rayleigh-Ritz, the next block (module docstring).

        Parameters
        ----------
        server_round : int
        W : ndarray of shape (d, r)
            ``sum_i s_i A_i Q_{j-1} / n`` over every client.
        n : int
            The rows of all clients.

        Returns
        -------
        tuple
            The round's estimate (``d x r``) as parameters, and no metrics; ``None`` after an abort.
        """
        pend = self._pending
        if not np.all(np.isfinite(W)):
            self.abort(f"round {server_round}: the sum of the products overflows float64")
            return None, {}
        self.products += 1
        Q, CQ = self._append(pend["Z"], W)
        width = W.shape[1]
        H = self._projection = extend_projection(self._projection, Q, CQ, width)
        rng = np.random.default_rng([self.settings.seed, STREAM_KRYLOV, server_round])
        # full: a thick restart, except in the last round, which needs no next block (the estimate is the same
        # Ritz vectors): the summary then still has the broadcast blocks (summary_coordinates)
        full = Q.shape[1] // self.r >= self.capacity() and server_round < self.num_rounds
        # the next block from the whole basis, before a restart discards part of it (when there is room); its
        # first pass of Gram-Schmidt is Q^T W, the new columns of H
        block = next_block(Q, W, rng, H[:, -width:]) if Q.shape[1] + self.r <= self.d else None
        # C Z only for a restart, which keeps it as the products of the new basis
        values, Z, CZ, V = rayleigh_ritz(Q, CQ, self.kept_at_restart() if full else self.r, H, products=full)
        V = V[:, : self.r]
        if full:  # thick restart from the leading Ritz vectors, whose products C Z are known: no extra round
            Q, CQ = Z, CZ
            self._projection = None
            self.restarts += 1
            self.basis_id = uuid.uuid4().hex  # its first columns are Ritz vectors, no broadcast blocks
            log.info("round %d: Krylov basis full (%d blocks); restart %d from %d Ritz vectors", server_round,
                     self.capacity(), self.restarts, Z.shape[1])
            V = np.eye(Z.shape[1], self.r)  # the estimate: the new basis's first r columns
        self.block = block if block is not None else next_block(Q, W, rng)
        self.Q, self.CQ = Q, CQ
        self.ritz_values, Z = values[: self.r], Z[:, : self.r]
        self._check_stop(n)
        self.iterates.append(Z)
        self._coordinates = self._coordinates[-1:] + [(Z, self.restarts, V)]  # the summary's is one of the two
        return ndarrays_to_parameters([Z]), {}

    def known_product(self, Z: np.ndarray) -> np.ndarray | None:
        """``C Z = CQ V`` for a round's estimate ``Z = Q V`` while the basis still holds it (no restart since the
        round that made it: the basis only grew), so the summary asks the sites for no product (one pass over
        ``C Q``); ``None`` for another ``Z`` (a checkpoint's, a restarted basis's).

        ``C Q`` holds the clients' products of the basis's blocks, so ``CQ V`` is their product at ``Z`` to
        round-off, as the sites' ``sum_i s_i A_i Z / n`` would be."""
        for estimate, restarts, V in self._coordinates:
            if estimate is Z and restarts == self.restarts and self.CQ is not None:
                return basis_times(self.CQ[:, : V.shape[0]], V)
        return None

    def summary_coordinates(self, Z: np.ndarray) -> dict[str, Scalar]:
        """The estimate's coordinates ``V`` in the basis (``Z = Q V``) and the basis's id, where the basis is still
        made of the broadcast blocks (no thick restart in this fit): each ``.bed`` site then has ``X Z = [X Q_0
        ... X Q_{q-1}] V`` from the blocks it kept and reads its file no more (:data:`~fl_strategies.files.pca.
        KRYLOV_COORDINATES`); ``{}`` otherwise."""
        for estimate, restarts, V in self._coordinates:
            if estimate is Z and restarts == self.restarts == 0 and self.basis_id is not None:
                return {KRYLOV_BASIS: self.basis_id,
                        KRYLOV_COORDINATES: np.ascontiguousarray(V, dtype="<f8").tobytes()}
        return {}

    def _check_stop(self, n: int) -> None:
        """Rule (27) on ``F = n * (sum of the leading k Ritz values)``, the objective of the round's kept components
        (module docstring)."""
        objective = float(n * np.sum(self.ritz_values[: self.k]))
        previous, self._objective = self._objective, objective
        statistic = None if previous is None else abs(objective - previous) / max(abs(objective), 1e-300)
        self._pending.update(objective=objective, stop_statistic=statistic)
        if statistic is not None:
            self.progress_notes["stop_statistic"] = statistic
        if self.stop_tol > 0 and statistic is not None and statistic <= self.stop_tol:
            self.stopped = True
            log.info("stopping rule (27): |F_k - F_k-1| / F_k = %.2e <= %.1e", statistic, self.stop_tol)

    def round_columns(self, server_round: int) -> dict[str, Any]:
        """Products so far (``local_iterations``), restarts, and, with ``stop-tol``, the objective."""
        pend = self._pending if server_round else {}
        return {"local_iterations": self.products if server_round else 0, "misalignment": 0.0,
                "krylov_restarts": self.restarts if server_round else 0,
                **({"objective": pend.get("objective"), "stop_statistic": pend.get("stop_statistic")}
                   if self.stop_tol > 0 else {})}

    def _emit(self, row: dict, Z: np.ndarray) -> None:
        """The row with its own objective (``evaluate`` blanks it for the held rows of other strategies)."""
        if self.stop_tol > 0 and row.get("round"):
            row.update(objective=self._pending.get("objective"), stop_statistic=self._pending.get("stop_statistic"))
        super()._emit(row, Z)

    # -- checkpoints (fl_strategies.protocol.checkpoint) -------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The base state and the Krylov state: ``Q``, ``C Q``, ``Q^T C Q``, the next block, the counters, the last
        ``F``."""
        return {**super().state_dict(), "krylov": {
            "Q": self.Q, "CQ": self.CQ, "block": self.block, "restarts": self.restarts, "products": self.products,
            "objective": self._objective, "projection": self._projection}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`."""
        super().load_state_dict(state)
        saved = state["krylov"]
        self.Q, self.CQ, self.block = (None if saved[key] is None else np.asarray(saved[key], dtype=np.float64)
                                       for key in ("Q", "CQ", "block"))
        self.restarts, self.products = int(saved["restarts"]), int(saved["products"])
        projection = saved.get("projection")  # Q^T C Q as the run kept it (a checkpoint before it: recomputed)
        self._buffers = None
        self._coordinates = []
        self.basis_id = None  # the sites kept no block of the saved basis: a new id at the next round
        self._projection = None if projection is None else np.asarray(projection, dtype=np.float64)
        self._objective = saved["objective"]
