"""``covariance``: the exact one-round baseline. Every client sends its ``d x d`` second-moment matrix.

Round 1: each client answers ``A_i = M_i^T M_i / s_i`` (centred with the
global mean under ``center = true``); the server forms
``C = (1/n) sum_i s_i A_i`` and takes its top ``iteration-rank`` eigenpairs
with scipy ``eigh``. The estimate is exact in one round, for ``d^2`` numbers
per client: what a user with a small ``d`` should pick. The iterative
strategies send ``d r`` numbers per round instead; the README's crossover
table (``simulations/experiments/fedpower/covariance_crossover.py``) shows
from which ``d`` they pay off. Every client is needed: a missing one aborts
the run.

Secure and private (``secure-aggregation``, ``epsilon``; :mod:`fl_strategies.privacy.analyze_gauss`): each client
uploads one vector, ``(svec(G_i / c^2), a S_i / c)``: the isometric packing of its Gram matrix ``G_i = M_i^T M_i``
followed, with ``center``, by its weighted row sum, on the scale of unit rows whatever the row bound ``c`` is,
plus (with ``epsilon``) its share of the one Analyze Gauss noise; Flower's SecAgg+ sums the uploads, so the server
learns only their sum and no client's matrix (the row sums do not travel at discovery). The server forms
``C' = G' / n - mu' mu'^T`` in units of ``c`` and takes its eigenvectors; the model holds ``C = c^2 C'`` and
``mu = c mu'``: the private mean, the components and the explained variance are post-processing of the one
release, and the model records the privacy spent. Uploads are clipped to ``[-C, C]`` (``secagg-clip``, in the
upload's units; by default ``max s_i`` times the largest entry a row adds, plus 8 noise std) and quantised as in
``dp-power``; a missing client stops the run. ``noise-std`` is refused (the registry fixes it).

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

from ...privacy import analyze_gauss as ag
from ..base import log, uploaded_bytes
from ...settings.config import ConfigError, secure_covariance
from .dp_power import secagg_tolerance
from .eigenspace import EigenspaceStrategy
from ...kernels.linalg import top_eigenvectors
from ..secure_sum import secure_sum

__all__ = ["CovarianceStrategy", "upload_length", "check_covariance_fits"]


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


def upload_length(d: int, center: bool) -> int:
    """Entries of a secure client's upload: the upper triangle of ``G_i`` and, when centring, the row sum."""
    return ag.upper_size(d) + (d if center else 0)


class CovarianceStrategy(EigenspaceStrategy):
    """Sum the clients' ``d x d`` matrices once and take ``eigh``; the PCA model is exact (no summary exchange)."""

    def __init__(self, cfg: dict[str, Any], dimension: int | None, reference=None, wait_timeout: float = 600.0) -> None:
        super().__init__(cfg, dimension, reference, wait_timeout)
        if dimension:
            check_covariance_fits(dimension, self.m)
        s = self.settings
        self.secure = secure_covariance(cfg)
        self.releases = (ag.covariance_releases(s.epsilon, s.delta, s.dp_calibration, s.center) if s.epsilon > 0
                         else None)
        self.clip = s.secagg_clip
        self.aggregated: set[int] = set()
        self.last_sum: np.ndarray | None = None
        if self.releases is not None and s.noise_source in ("seeded", "seeded-not-private") and self.m > 1:
            log.warning("covariance: noise-source = \"%s\" derives every client's noise from the run seed, which "
                        "the server knows (reproducible experiments only); a deployment must use "
                        "noise-source = \"auto\", \"node-secret\" or \"os\"", s.noise_source)

    def _register(self, answers) -> None:
        """Discovery's bookkeeping, then the memory check with the ``d`` the nodes reported."""
        super()._register(answers)
        check_covariance_fits(self.d, self.m)

    @property
    def num_rounds(self) -> int:  # noqa: D102
        return 1

    @property
    def vector_upload(self) -> bool:
        """Whether the clients upload the packed vector (secure or private) rather than ``A_i`` (d x d)."""
        return self.secure or self.releases is not None

    def __repr__(self) -> str:
        return (f"CovarianceStrategy({self.d_repr}, r={self.r}, m={self.m}, center={self.settings.center}"
                + (", secagg" if self.secure else "") + (f", {self.releases}" if self.releases else "") + ")")

    def initialize_parameters(self, client_manager: ClientManager) -> Parameters:
        """Discovery and, under SecAgg+, the clipping range from the public bound ``s_i c^2`` plus 8 noise std."""
        parameters = super().initialize_parameters(client_manager)
        if self.secure and self.clip == 0:
            nu = ag.noise_std(self.m, self.releases, self.settings.center)
            self.clip = float(max(self.sizes.values()) * ag.upload_entry_bound(self.settings.center) + 8.0 * nu)
        if self.secure:
            log.info("covariance: SecAgg+ clipping range C = %.6g, sum exact to %.3g per entry", self.clip,
                     secagg_tolerance(self.clip, self.m))
        return parameters

    def abort_round(self, server_round: int, reason: str) -> None:
        """Abort the run: no covariance is released from an incomplete sum."""
        self.abort(f"round {server_round}: {reason}; the run stops rather than release an incomplete sum")

    def configure_fit(self, server_round: int, parameters: Parameters,
                      client_manager: ClientManager) -> list[tuple[ClientProxy, FitIns]]:
        """Ask every client for its (centred) ``A_i``."""
        self._pending = {"start": time.perf_counter(), "bytes_down": 0}
        config: dict[str, Scalar] = {"phase": "gram", "round": server_round, **self.center_config()}
        if self.secure:
            config["secagg-clip"] = self.clip
        ins = FitIns(ndarrays_to_parameters([]), config)
        return [(self.proxies[pid], ins) for pid in sorted(self.proxies)]

    def aggregate_fit(self, server_round: int, results: list[tuple[ClientProxy, FitRes]],
                      failures: list) -> tuple[Parameters | None, dict[str, Scalar]]:
        """``C = (1/n) sum_i s_i A_i`` and its top eigenvectors; abort if a client is missing."""
        if self.vector_upload:
            return self._aggregate_sums(server_round, results, failures)
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

    def _aggregate_sums(self, server_round: int, results, failures) -> tuple[Parameters | None, dict[str, Scalar]]:
        """``G`` and ``S`` from SecAgg+ (or, with one client, its own upload) and the model of ``C`` (module
        docstring)."""
        shape = (upload_length(self.d, self.settings.center),)
        self._pending.update(bytes_up=uploaded_bytes(results), rejected=0, failures=len(failures))
        if self.secure:
            total = secure_sum(self, server_round, results, failures, shape)
        else:
            valid, rejected = self.collect_replies(server_round, results, set(self.proxies), [shape])
            self._pending["rejected"] = rejected
            missing = sorted(set(self.proxies) - set(valid))
            total = None if missing else np.sum([valid[pid][0][0] for pid in sorted(valid)], axis=0)
            if missing:
                self.abort_round(server_round, f"no usable upload from partition(s) {missing}")
        if total is None:
            return None, {}
        if not np.all(np.isfinite(total)):
            self.abort_round(server_round, "the sum of the uploads is not finite")
            return None, {}
        self._pending.update(participants=self.m, distinct=self.m)
        self.last_sum = total
        self.aggregated.add(server_round)
        n = self.num_rows
        c = ag.row_bound(self.settings.clip_norm)
        C, mu = ag.covariance_from_upload(total, self.d, n, self.settings.center)
        self.mean = c * mu
        _, Z = top_eigenvectors(C, self.r)
        self.iterates.append(Z)
        self.set_model(Z, (c * c) * (C @ Z), c * c * float(np.trace(C)), n, privacy=self.privacy_record())
        return ndarrays_to_parameters([Z]), {}

    def privacy_record(self) -> dict[str, Any] | None:
        """The privacy spent, for the model (``None`` without ``epsilon``): the one release with its sensitivity
        (in units of the row bound ``c``) and the central noise std per entry in the data's units."""
        if self.releases is None:
            return None
        center = self.settings.center
        c = ag.row_bound(self.settings.clip_norm)
        return {**self.releases.record({ag.release_name(center): ag.covariance_sensitivity(center)}),
                "row_bound": c, "mean_weight": ag.MEAN_WEIGHT if center else 0.0,
                "noise_std": ag.noise_record(c, self.releases, center), "secure_aggregation": self.secure,
                "noise_source": self.noise_source()}

    def round_columns(self, server_round: int) -> dict[str, Any]:
        """The privacy spent after the round (empty without ``epsilon``)."""
        if self.releases is None:
            return {}
        spent = self.releases.epsilon if server_round else 0.0
        return {"epsilon_spent": spent, "delta": self.releases.delta, "noise_source": self.noise_source()}

    def configure_summary(self) -> list:
        """No summary exchange: the server holds ``C`` and built the model in round 1."""
        return []
