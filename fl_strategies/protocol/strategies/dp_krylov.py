"""``dp-krylov``: private block Krylov with Rayleigh-Ritz on the kept noisy products.

One Flower round is one product. Round ``t`` broadcasts the block ``Q_{t-1}`` (``d x p``, ``p = iteration-rank``,
by default ``max(2 rank + 4, 10)``); every client returns its share ``A^(i) Q_{t-1}`` plus its share of the noise
(``nu / sqrt(s)`` per entry, :func:`~fl_strategies.privacy.dp_krylov_noise.client_noise_std`), summed in the clear
or by SecAgg+ as ``dp-power``'s (``dp-channel``); with ``center`` the first round's upload has one more column,
``a`` times the client's row sum (:data:`~fl_strategies.privacy.dp_krylov_noise.MEAN_WEIGHT`). The server centres
each sum (``Y - n mu (mu^T Q)``, ``mu`` the released mean), keeps it, and sends the next block: the top ``p``
directions of the sum outside the blocks so far (:func:`~fl_strategies.privacy.dp_krylov_noise.next_block`).
Every round's estimate is the Rayleigh-Ritz basis of all kept products
(:func:`~fl_strategies.privacy.dp_krylov_noise.rayleigh_ritz`); the last is the model (``pca.npz``: components,
explained variance from the Ritz values over ``n``, ratio NaN; post-processing).

Rounds. ``T = num-server-rounds`` products, at most ``d // p`` (the blocks are orthonormal together: ``T p <= d``);
a run that asks for more stops after ``d // p`` with a warning. The privacy does not depend on ``T``: the whole
run is one Gaussian mechanism of sensitivity ``sqrt(2) + a^2 / sqrt(2)`` (``sqrt(2)`` without centring), the
derivation in :mod:`fl_strategies.privacy.dp_krylov_noise`; every client checks that each block it multiplies is
orthonormal and orthogonal to the ones before and refuses one that is not. As in ``dp-power``, a missing client
stops the run (its noise share would be missing from the sum), and so does a product outside SecAgg+'s range.
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np
from flwr.common import FitIns, FitRes, Parameters, Scalar, ndarrays_to_parameters
from flwr.server.client_manager import ClientManager
from flwr.server.client_proxy import ClientProxy

from ...privacy import accounting
from ...privacy import dp_krylov_noise as dk
from ...privacy.zcdp import epsilon_of, rho_of
from ..base import log, uploaded_bytes
from .dp_power import DPPowerStrategy, secagg_tolerance
from .eigenspace import EigenspaceStrategy, STREAM_INIT

__all__ = ["DPKrylovStrategy"]


class DPKrylovStrategy(DPPowerStrategy):
    """Server side of ``dp-krylov`` (module docstring; the SecAgg+ sum and the abort rule are ``dp-power``'s).

    Attributes
    ----------
    releases : fl_strategies.privacy.analyze_gauss.PrivateReleases or None
        The one Gaussian the run composes to (``None`` without ``epsilon``).
    blocks : list of ndarray of shape (d, p)
        The blocks multiplied so far.
    products : list of ndarray of shape (d, p)
        Their centred noisy sums.
    """

    def __init__(self, cfg: dict[str, Any], dimension: int, reference=None, wait_timeout: float = 600.0) -> None:
        EigenspaceStrategy.__init__(self, cfg, dimension, reference, wait_timeout)
        s = self.settings
        self.L = s.num_server_rounds
        self.releases = dk.privacy_plan(s.epsilon, s.delta, s.dp_calibration)
        self.calibration = self.releases  # "is there noise" for the inherited checks
        self.centred = bool(s.center)
        self.secure = s.dp_channel == "secagg"
        self.clip = s.secagg_clip
        self.aggregated: set[int] = set()
        self.last_sum: np.ndarray | None = None
        self.sensitivities: list[float] = []
        self.blocks: list[np.ndarray] = []
        self.products: list[np.ndarray] = []
        self.next_block: np.ndarray | None = None
        if self.releases is not None and s.noise_source in ("seeded", "seeded-not-private") and self.m > 1:
            log.warning("dp-krylov: noise-source = \"%s\" derives every client's noise from the run seed, which "
                        "the server knows (reproducible experiments only); a deployment must use "
                        "noise-source = \"auto\", \"node-secret\" or \"os\"", s.noise_source)

    @property
    def num_rounds(self) -> int:
        """``T``: one round per product (the mean travels with the first)."""
        return self.L

    def products_before(self, server_round: int) -> int:
        """Products released in rounds ``1 .. server_round``."""
        return max(0, server_round)

    def __repr__(self) -> str:
        c = self.settings
        return (f"DPKrylovStrategy(d={self.d}, k={self.k}, p={self.r}, s={self.m}, T={self.L}, "
                f"channel={c.dp_channel}, {self.releases or 'no noise'})")

    def noise_std(self) -> float:
        """Per-entry noise std of one client's share
        (:func:`~fl_strategies.privacy.dp_krylov_noise.client_noise_std`)."""
        s = self.settings
        return dk.client_noise_std(s.dp_channel, self.m, self.releases, self.centred)

    def initialize_parameters(self, client_manager: ClientManager) -> Parameters:
        """Discovery, ``Q_0`` from the public seed, ``T`` capped at ``d // p``, and SecAgg+'s clip range."""
        EigenspaceStrategy.initialize_parameters(self, client_manager)
        Q0 = dk.initial_block(self.d, self.r, np.random.default_rng([self.settings.seed, STREAM_INIT]))
        self.iterates = [Q0]
        self.next_block = Q0
        most = self.d // self.r
        if self.L > most:
            log.warning("dp-krylov: num-server-rounds = %d products of %d columns do not fit in d = %d: the run "
                        "stops after %d (T p <= d; the privacy does not depend on T)", self.L, self.r, self.d, most)
        if self.secure and self.clip == 0:
            # |(A^(i) Q)_jk| <= ||A^(i)||_2 <= s_i and |a S_i| <= s_i for unit rows; 8 noise std: w.p. 1e-15
            self.clip = float(max(self.sizes.values()) + 8.0 * self.noise_std())
        if self.secure:
            log.info("dp-krylov: SecAgg+ clipping range C = %.6g, sum exact to %.3g per entry", self.clip,
                     secagg_tolerance(self.clip, self.m))
        return ndarrays_to_parameters([Q0])

    def sensitivity_bound(self) -> float:
        """The one release's sensitivity (:func:`~fl_strategies.privacy.dp_krylov_noise.release_sensitivity`)."""
        return dk.release_sensitivity(self.centred)

    # -- one round ----------------------------------------------------------------------------------
    def configure_fit(self, server_round: int, parameters: Parameters,
                      client_manager: ClientManager) -> list[tuple[ClientProxy, FitIns]]:
        """Send the next block ``Q_{t-1}`` to every client (all ``s`` noises must be in the sum)."""
        Q = self.next_block
        config: dict[str, Scalar] = {"round": server_round, "phase": "product"}
        if self.secure:
            config["secagg-clip"] = self.clip
        targets = sorted(self.proxies)
        self._pending = {"start": time.perf_counter(), "X": Q, "asked": set(targets), "phase": "product",
                         "Delta": self.sensitivity_bound(), "bytes_down": len(targets) * Q.nbytes,
                         "round_time": self.participation.plan(server_round, targets).round_time}
        return [(self.proxies[pid], FitIns(ndarrays_to_parameters([Q]), config)) for pid in targets]

    def upload_shape(self, server_round: int) -> tuple[int, int]:
        """``(d, p + 1)`` in a centred run's first round (the weighted row sum as the last column), else ``(d, p)``."""
        return self.d, self.r + int(self.centred and server_round == 1)

    def aggregate_fit(self, server_round: int, results: list[tuple[ClientProxy, FitRes]],
                      failures: list) -> tuple[Parameters | None, dict[str, Scalar]]:
        """Sum the ``s`` noisy shares (or take SecAgg+'s sum), centre, keep, Rayleigh-Ritz, and the next block."""
        pend = self._pending
        pend["bytes_up"] = uploaded_bytes(results)
        total = self.noisy_sum(server_round, results, failures, self.upload_shape(server_round), pend["X"])
        if total is None:
            return None, {}
        n, Q = self.num_rows, pend["X"]
        if total.shape[1] > self.r:  # the weighted row sum: the private mean (post-processing)
            self.mean = dk.project_mean(total[:, -1] / (dk.MEAN_WEIGHT * n))
            total = total[:, :-1]
        if self.centred:
            total = dk.centre_product(total, self.mean, Q, n)
        self.blocks.append(Q)
        self.products.append(total)
        self.last_sum = total
        self.sensitivities.append(pend["Delta"])
        basis = np.hstack(self.blocks)
        Z, values = dk.rayleigh_ritz(basis, np.hstack(self.products), self.r)
        self.iterates.append(Z)
        last = server_round >= self.num_rounds or basis.shape[1] + self.r > self.d
        if last:
            self.set_model(Z, Z * np.maximum(values, 0.0) / n, float("nan"), n, privacy=self.privacy_record())
            self.stopped = server_round < self.num_rounds
            self.next_block = Q
        else:
            self.next_block = dk.next_block(basis, total, self.r)
        return ndarrays_to_parameters([self.next_block]), {}

    def privacy_record(self) -> dict[str, Any] | None:
        """The one composed release (``None`` without noise), with the products released."""
        if self.releases is None:
            return None
        record = self.releases.record({dk.RELEASE: dk.release_sensitivity(self.centred)})
        record["neighbouring"] = ("replace one row of norm <= 1; row counts are public; every product on a block "
                                  "orthonormal to the ones before (one Gaussian: individual GDP filter)")
        record["releases"][0]["products"] = len(self.products)
        return {**record, "channel": self.settings.dp_channel, "noise_source": self.noise_source()}

    # -- results ------------------------------------------------------------------------------------
    def evaluate(self, server_round: int, parameters: Parameters):
        """Record the round's row for the round's estimate (the Rayleigh-Ritz basis), not the block sent next."""
        return super().evaluate(server_round, ndarrays_to_parameters([self.iterates[-1]]))

    def round_columns(self, server_round: int) -> dict[str, Any]:
        """The release's sensitivity, the noise, and the privacy spent after the round (all of it from round 1)."""
        if not server_round:
            return {"delta_a": None, "delta_b": None, "sensitivity": None, "client_noise_std": None,
                    **self.privacy_columns(0), "noise_source": self.noise_source()}
        return {"delta_a": None, "delta_b": None, "sensitivity": self._pending["Delta"],
                "client_noise_std": self.noise_std(), **self.privacy_columns(server_round),
                "noise_source": self.noise_source()}

    def privacy_columns(self, releases: int) -> dict[str, Any]:
        """``rho``, ``epsilon_spent``, ``delta``, ``epsilon_zcdp`` and ``epsilon_pld`` of the one Gaussian (the
        bound holds for the whole run from its first product on); all empty without noise."""
        r = self.releases
        if r is None:
            return {"rho": None, "epsilon_spent": None, "delta": None, "epsilon_zcdp": None, "epsilon_pld": None}
        if not releases:
            return {"rho": 0.0, "epsilon_spent": 0.0, "delta": r.delta, "epsilon_zcdp": 0.0, "epsilon_pld": 0.0}
        sigma = r.multipliers[dk.RELEASE]
        rho = rho_of(sigma, 1)
        pld = accounting.epsilon("pld", sigma, 1, r.delta) if accounting.available() else None
        return {"rho": rho, "epsilon_spent": r.epsilon, "delta": r.delta, "epsilon_zcdp": epsilon_of(rho, r.delta),
                "epsilon_pld": pld if pld is not None and math.isfinite(pld) else None}
