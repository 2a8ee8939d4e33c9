"""``covariance``: the exact one-round baseline. Every client sends its ``d x d`` second-moment matrix.

Round 1: each client answers ``A_i = M_i^T M_i / s_i`` (centred with the
global mean under ``center = true``); the server forms
``C = (1/n) sum_i s_i A_i`` and takes its top ``iteration-rank`` eigenpairs
with scipy ``eigh``. The estimate is exact in one round, for ``d^2`` numbers
per client: what a user with a small ``d`` should pick. The iterative
strategies send ``d r`` numbers per round instead; the README's crossover
table (``simulations/experiments/fedpower/covariance_crossover.py``) shows
from which ``d`` they pay off. Every client is needed: a missing one aborts
the run. No noise (``epsilon``, ``noise-std`` are refused by the registry).

Where ``d^2`` does not fit, the strategy refuses before round 1 (:func:`check_covariance_fits`): the server holds
the ``m`` replies and ``C``, ``8 (m + 2) d^2`` bytes; ``fedpower`` needs ``O(d r)``.
"""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np
from flwr.common import FitIns, FitRes, Parameters, Scalar, ndarrays_to_parameters
from flwr.server.client_manager import ClientManager
from flwr.server.client_proxy import ClientProxy

from .base import uploaded_bytes
from .config import ConfigError
from .eigenspace import EigenspaceStrategy
from .linalg import top_eigenvectors

__all__ = ["CovarianceStrategy", "check_covariance_fits"]


def check_covariance_fits(dimension: int, num_clients: int, memory: int | None = None) -> None:
    """Refuse a ``covariance`` run whose ``d x d`` exchange does not fit in this machine's memory.

    Parameters
    ----------
    dimension, num_clients : int
        ``d`` and ``m``.
    memory : int, optional
        Bytes available (default: the physical memory; unknown on some platforms, then nothing is checked).

    Raises
    ------
    ConfigError
        If ``8 (m + 2) d^2`` bytes (the ``m`` replies, their sum and ``C``) exceed ``memory``.
    """
    if memory is None:
        try:
            memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (AttributeError, ValueError, OSError):
            return
    need = 8 * (num_clients + 2) * dimension * dimension
    if need > memory:
        raise ConfigError(f"strategy = \"covariance\" with d = {dimension} and {num_clients} clients needs about "
                          f"{need / 1e9:.3g} GB for the d x d matrices (8 (m + 2) d^2 bytes) and this machine has "
                          f"{memory / 1e9:.3g} GB; use strategy = \"fedpower\", which exchanges d x r")


class CovarianceStrategy(EigenspaceStrategy):
    """Sum the clients' ``d x d`` matrices once and take ``eigh``; the PCA model is exact (no summary exchange)."""

    def __init__(self, cfg: dict[str, Any], dimension: int | None, reference=None, wait_timeout: float = 600.0) -> None:
        if dimension:
            check_covariance_fits(dimension, cfg["num-clients"])
        super().__init__(cfg, dimension, reference, wait_timeout)

    def _register(self, answers) -> None:
        """Discovery's bookkeeping, then the memory check with the ``d`` the nodes reported."""
        super()._register(answers)
        check_covariance_fits(self.d, self.m)

    @property
    def num_rounds(self) -> int:  # noqa: D102
        return 1

    def __repr__(self) -> str:
        return f"CovarianceStrategy({self.d_repr}, r={self.r}, m={self.m}, center={self.cfg['center']})"

    def configure_fit(self, server_round: int, parameters: Parameters,
                      client_manager: ClientManager) -> list[tuple[ClientProxy, FitIns]]:
        """Ask every client for its (centred) ``A_i``."""
        self._pending = {"start": time.perf_counter(), "bytes_down": 0}
        ins = FitIns(ndarrays_to_parameters([]), {"phase": "gram", "round": server_round, **self.center_config()})
        return [(self.proxies[pid], ins) for pid in sorted(self.proxies)]

    def aggregate_fit(self, server_round: int, results: list[tuple[ClientProxy, FitRes]],
                      failures: list) -> tuple[Parameters | None, dict[str, Scalar]]:
        """``C = (1/n) sum_i s_i A_i`` and its top eigenvectors; abort if a client is missing."""
        valid, rejected = self.collect_replies(server_round, results, set(self.proxies), [(self.d, self.d)])
        self._pending.update(bytes_up=uploaded_bytes(results), rejected=rejected, failures=len(failures),
                             participants=len(valid), distinct=len(valid))
        if len(valid) < len(self.proxies):
            missing = sorted(set(self.proxies) - set(valid))
            self.abort(f"round {server_round}: no usable d x d matrix from partition(s) {missing}; the exact "
                       "covariance needs every client")
            return None, {}
        n = sum(self.sizes[pid] for pid in valid)
        C = sum(self.sizes[pid] * arrays[0] for pid, (arrays, _) in sorted(valid.items())) / n
        C = (C + C.T) / 2.0
        _, Z = top_eigenvectors(C, self.r)
        self.iterates.append(Z)
        self.set_model(Z, C @ Z, float(np.trace(C)), n)
        return ndarrays_to_parameters([Z]), {}

    def configure_summary(self) -> list:
        """No summary exchange: the server holds ``C`` and built the model in round 1."""
        return []
