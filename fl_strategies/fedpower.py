"""FedPower (Guo et al., Algorithms 2 and 3) and the distributed power method.

One Flower server round is one communication period: the server broadcasts
``Z`` (``d x r``), every selected client runs ``p_j`` local power iterations
``Y <- A_i Z + N(0, nu^2)``, ``Z <- orth(Y)`` (the last ``Y`` left
un-orthonormalised) and returns ``Y`` together with the basis ``Z_prev`` it
multiplied last. The server aligns each ``Y_i`` with the Orthogonal
Procrustes rotation ``D_i = procrustes(Z_prev_i, Z_prev_ref)`` computed from
the *previous bases* (spec pitfall P4), averages and orthonormalises.

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
participation without sampling (Algorithm 2). Note (spec pitfall P11) that
Algorithm 3 with ``K = m`` would sample with replacement and is *not* the
same as full participation; this implementation follows the issue's
definition.

With ``p = 1`` and no noise the method is the distributed power method
(Algorithm 1), which is how the ``power`` baseline runs.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
from flwr.common import (
    FitIns,
    FitRes,
    GetPropertiesIns,
    Parameters,
    Scalar,
    ndarrays_to_parameters,
    parameters_to_ndarrays,
)
from flwr.server.client_manager import ClientManager
from flwr.server.client_proxy import ClientProxy
from flwr.server.strategy import Strategy

from .config import ConfigError, total_iterations
from .linalg import gaussian_basis, orth, procrustes, subspace_distance
from .privacy import achieved_epsilon, noise_multiplier
from .schedule import round_lengths

__all__ = ["local_power_iterations", "FedPowerStrategy", "RoundRecord"]

log = logging.getLogger("flwr.fedspectral")  # shown by Flower's console handler

# Tags that separate the random streams derived from one run seed.
STREAM_INIT, STREAM_SAMPLING, STREAM_NOISE = 0, 1, 2


def local_power_iterations(
    A: np.ndarray, Z: np.ndarray, steps: int, noise_std: float, rng: np.random.Generator | None
) -> tuple[np.ndarray, np.ndarray]:
    """Run ``steps`` noisy power iterations from ``Z`` (lines 6-7 of Algorithm 2).

    Parameters
    ----------
    A : ndarray of shape (d, d)
        The client's local matrix ``A_i = M_i^T M_i / s_i``.
    Z : ndarray of shape (d, r)
        Orthonormal starting basis (the server's broadcast).
    steps : int
        ``p_j >= 1`` local iterations.
    noise_std : float
        ``nu``; fresh ``N(0, nu^2)`` noise is added at *every* step.
    rng : numpy.random.Generator or None
        The client's own generator; may be ``None`` when ``noise_std == 0``.

    Returns
    -------
    Y : ndarray of shape (d, r)
        ``A_i Z_prev + noise`` from the last step, not orthonormalised.
    Z_prev : ndarray of shape (d, r)
        The basis multiplied in the last step (``Z`` itself when ``steps == 1``).
    """
    Z_prev = Z
    for step in range(steps):
        if step:
            Z_prev = orth(Y)
        Y = A @ Z_prev
        if noise_std > 0:
            Y = Y + noise_std * rng.standard_normal(Y.shape)
    return Y, Z_prev


class RoundRecord(dict):
    """One row of the results table (a dict with the column names as keys)."""


class FedPowerStrategy(Strategy):
    """Server side of FedPower / the distributed power method as a Flower Strategy.

    Parameters
    ----------
    cfg : dict
        Effective run configuration (:func:`fl_strategies.config.validate_run_config`).
    dimension : int
        ``d``.
    reference : ndarray of shape (d, k), optional
        The top-k eigenvectors of the pooled matrix, computed by the harness
        from data no client sends; when given every round records
        ``subspace_distance``.
    wait_timeout : float
        Seconds to wait for ``num-clients`` nodes to register.

    Attributes
    ----------
    records : list of dict
        One row per round (round 0 is the initial estimate).
    iterates : list of ndarray
        ``Z`` after each round, ``iterates[0] = Z_0``.
    """

    def __init__(self, cfg: dict[str, Any], dimension: int, reference: np.ndarray | None = None,
                 wait_timeout: float = 600.0) -> None:
        super().__init__()
        self.cfg = cfg
        self.d, self.r, self.k = dimension, cfg["iteration-rank"], cfg["rank"]
        self.m, self.K = cfg["num-clients"], cfg["clients-per-round"]
        self.lengths = round_lengths(cfg["local-steps"], cfg["schedule"],
                                     total_iterations=cfg["total-iterations"], num_rounds=cfg["num-server-rounds"])
        self.T = total_iterations(cfg)
        self.reference = reference
        self.wait_timeout = wait_timeout
        self.timeout = cfg["round-timeout"] or None
        self.records: list[RoundRecord] = []
        self.iterates: list[np.ndarray] = []
        self.proxies: dict[int, ClientProxy] = {}
        self.sizes: dict[int, int] = {}
        self._pending: dict[str, Any] = {}
        self.on_round = None  # optional callable(record, Z) called after every round, e.g. a results writer

    # -- set-up -------------------------------------------------------------------------------------
    @property
    def num_rounds(self) -> int:
        """Communication rounds of the run (``len`` of the schedule)."""
        return len(self.lengths)

    def __repr__(self) -> str:
        c = self.cfg
        return (f"FedPowerStrategy(d={self.d}, k={self.k}, r={self.r}, m={self.m}, K={self.K}, "
                f"p={c['local-steps']}, schedule={c['schedule']}, T={self.T}, alignment={c['alignment']})")

    def initialize_parameters(self, client_manager: ClientManager) -> Parameters:
        """Wait for all clients, learn their partition ids and sizes, and draw ``Z_0``."""
        self._discover(client_manager)
        Z0 = gaussian_basis(self.d, self.r, np.random.default_rng([self.cfg["seed"], STREAM_INIT]))
        self.iterates = [Z0]
        return ndarrays_to_parameters([Z0])

    def _discover(self, client_manager: ClientManager) -> None:
        deadline = time.monotonic() + self.wait_timeout
        while client_manager.num_available() < self.m:
            if time.monotonic() > deadline:
                raise RuntimeError(f"only {client_manager.num_available()} of num-clients = {self.m} nodes "
                                   f"connected within {self.wait_timeout:.0f} s")
            time.sleep(0.2)
        proxies = sorted(client_manager.all().values(), key=lambda p: p.cid)

        def ask(proxy: ClientProxy):
            return proxy, proxy.get_properties(GetPropertiesIns(config={}), timeout=self.timeout, group_id=0)

        with ThreadPoolExecutor(max_workers=8) as pool:
            answers = list(pool.map(ask, proxies))
        for proxy, res in answers:
            props = res.properties
            pid, dim = int(props["partition-id"]), int(props["dimension"])
            if dim != self.d:
                raise ConfigError(f"client with partition-id {pid} has data of dimension {dim}, expected {self.d}")
            if pid in self.proxies:
                raise ConfigError(f"two nodes report partition-id {pid}")
            self.proxies[pid], self.sizes[pid] = proxy, int(props["num-examples"])
        if sorted(self.proxies) != list(range(self.m)):
            raise ConfigError(f"nodes report partition ids {sorted(self.proxies)}; expected 0..{self.m - 1} "
                              f"(num-clients = {self.m})")
        log.info("FedPower: %d clients, %d rows in all, %d rounds, T = %d local iterations",
                 self.m, sum(self.sizes.values()), self.num_rounds, self.T)

    # -- one round ----------------------------------------------------------------------------------
    def _sample(self, server_round: int) -> dict[int, int]:
        """Multiplicity of each partition id in this round's sample."""
        if self.K == self.m:
            return {pid: 1 for pid in range(self.m)}
        rng = np.random.default_rng([self.cfg["seed"], STREAM_SAMPLING, server_round])
        counts = np.bincount(rng.integers(0, self.m, size=self.K), minlength=self.m)
        return {pid: int(c) for pid, c in enumerate(counts) if c}

    def configure_fit(self, server_round: int, parameters: Parameters,
                      client_manager: ClientManager) -> list[tuple[ClientProxy, FitIns]]:
        """Send ``Z`` to the sampled clients and to the reference client."""
        steps = self.lengths[server_round - 1]
        multiplicity = self._sample(server_round)
        targets = sorted(set(multiplicity) | {0})
        config: dict[str, Scalar] = {"local-steps": steps, "round": server_round,
                                     "iteration-offset": sum(self.lengths[: server_round - 1])}
        fit_ins = FitIns(parameters, config)
        Z = parameters_to_ndarrays(parameters)[0]
        self._pending = {"start": time.perf_counter(), "multiplicity": multiplicity, "steps": steps, "Z": Z,
                         "bytes_down": len(targets) * Z.nbytes}
        return [(self.proxies[pid], fit_ins) for pid in targets]

    def _decode(self, res: FitRes, steps: int, Z: np.ndarray) -> tuple[np.ndarray, np.ndarray] | str:
        """``(Y, Z_prev)`` of a reply, or the reason it is rejected."""
        arrays = parameters_to_ndarrays(res.parameters)
        expected = 2 if steps > 1 else 1
        if len(arrays) != expected:
            return f"{len(arrays)} arrays instead of {expected}"
        for a in arrays:
            if a.shape != (self.d, self.r):
                return f"shape {a.shape} instead of {(self.d, self.r)}"
            if not np.issubdtype(a.dtype, np.floating):
                return f"dtype {a.dtype} is not floating point"
            if not np.all(np.isfinite(a)):
                return "non-finite values"
        Y = arrays[0].astype(np.float64)
        Z_prev = arrays[1].astype(np.float64) if steps > 1 else Z
        if steps > 1 and not np.allclose(Z_prev.T @ Z_prev, np.eye(self.r), atol=1e-6):
            return "Z_prev is not orthonormal"
        return Y, Z_prev

    def aggregate_fit(self, server_round: int, results: list[tuple[ClientProxy, FitRes]],
                      failures: list) -> tuple[Parameters | None, dict[str, Scalar]]:
        """Align, average with weights ``c_i s_i`` and orthonormalise (lines 10-12)."""
        pend = self._pending
        pid_of = {proxy.cid: pid for pid, proxy in self.proxies.items()}
        bytes_up = sum(sum(len(t) for t in res.parameters.tensors) for _, res in results)
        replies: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        rejected = 0
        for proxy, res in sorted(results, key=lambda pr: pid_of.get(pr[0].cid, -1)):
            pid = pid_of.get(proxy.cid)
            decoded = self._decode(res, pend["steps"], pend["Z"]) if pid is not None else "unknown node"
            if isinstance(decoded, str):
                rejected += 1
                log.warning("round %d: reply of partition %s rejected: %s", server_round, pid, decoded)
            else:
                replies[pid] = decoded
        sampled = {pid: c for pid, c in pend["multiplicity"].items() if pid in replies}
        Z_new = pend["Z"]
        misalignment = 0.0
        if sampled:
            ref = 0 if 0 in replies else min(replies)
            if ref != 0:
                log.warning("round %d: reference client 0 did not answer; partition %d is the reference",
                            server_round, ref)
            Z_ref = replies[ref][1]
            total = np.zeros((self.d, self.r))
            weight = 0.0
            for pid, c in sampled.items():
                Y, Z_prev = replies[pid]
                if pend["steps"] > 1:  # with one step every Z_prev is the broadcast Z and D = I
                    D = procrustes(Z_prev, Z_ref) if self.cfg["alignment"] == "opt" else np.eye(self.r)
                    Y = Y @ D
                    misalignment = max(misalignment, float(np.linalg.norm(Z_prev @ D - Z_ref, 2)))
                w = c * self.sizes[pid]
                total += w * Y
                weight += w
            Z_new = orth(total / weight)
        else:
            log.warning("round %d: no usable reply from a sampled client; Z is kept", server_round)
        self.iterates.append(Z_new)
        self._pending.update(bytes_up=bytes_up, rejected=rejected, failures=len(failures),
                             participants=sum(sampled.values()), distinct=len(sampled), misalignment=misalignment)
        return ndarrays_to_parameters([Z_new]), {}

    # -- evaluation ---------------------------------------------------------------------------------
    def _epsilon_spent(self, steps: int) -> float | None:
        """Worst-case epsilon over clients after ``steps`` local steps; ``None`` when no noise is added."""
        cfg = self.cfg
        if cfg["noise-std"] > 0:  # explicit nu: the client with the fewest rows spends the most
            sigma_g = cfg["noise-std"] * min(self.sizes.values()) / (2.0 * np.sqrt(self.r))
        elif cfg["epsilon"] > 0:
            sigma_g = noise_multiplier(cfg["epsilon"], cfg["delta"], self.T)
        else:
            return None
        return achieved_epsilon(sigma_g, steps, cfg["delta"])

    def evaluate(self, server_round: int, parameters: Parameters) -> tuple[float, dict[str, Scalar]] | None:
        """Record the round's row; the loss is the subspace distance (NaN without a reference)."""
        Z = parameters_to_ndarrays(parameters)[0]
        pend = self._pending if server_round else {}
        steps = sum(self.lengths[:server_round])
        dist = dist_k = float("nan")
        if self.reference is not None:
            dist = subspace_distance(Z, self.reference)
            dist_k = subspace_distance(Z[:, : self.k], self.reference)
        row = RoundRecord(
            round=server_round, local_iterations=steps, subspace_distance=dist, subspace_distance_first_k=dist_k,
            bytes_up=pend.get("bytes_up", 0), bytes_down=pend.get("bytes_down", 0),
            participants=pend.get("participants", 0), distinct_participants=pend.get("distinct", 0),
            rejected=pend.get("rejected", 0), failures=pend.get("failures", 0),
            misalignment=pend.get("misalignment", 0.0), epsilon_spent=self._epsilon_spent(steps),
            delta=self.cfg["delta"] if (self.cfg["epsilon"] > 0 or self.cfg["noise-std"] > 0) else None,
            wall_time=time.perf_counter() - pend["start"] if pend else 0.0,
        )
        self.records.append(row)
        if self.on_round is not None:
            self.on_round(row, Z)
        if server_round:
            eps = row["epsilon_spent"]
            log.info("round %d/%d: %d local steps, subspace distance %.3e, %s", server_round, self.num_rounds,
                     pend["steps"], dist, "no noise" if eps is None else f"epsilon spent {eps:.3g}")
        return dist, {"subspace_distance": dist}

    # -- no federated evaluation ----------------------------------------------------------------------
    def configure_evaluate(self, server_round, parameters, client_manager):
        """FedPower has no client-side evaluation."""
        return []

    def aggregate_evaluate(self, server_round, results, failures):
        """FedPower has no client-side evaluation."""
        return None, {}
