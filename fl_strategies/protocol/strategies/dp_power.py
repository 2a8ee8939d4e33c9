"""The differentially private, decentralised randomized power method (Nicolas et al. 2024, Algorithm 2).

One Flower round is one power iteration ``l = 1 .. L`` (``L = num-server-rounds``). The server broadcasts the
orthonormal ``X_{l-1}`` (``n x p``, ``p = iteration-rank``); client ``i`` holds an additive share
``A^(i) = M_i^T M_i`` of ``A = sum_i A^(i)`` (its rows ``M_i``) and returns ``Y^(i) = A^(i) X_{l-1} + G^(i)`` with
fresh Gaussian noise of its own; the server forms ``Y = sum_i Y^(i)`` and ``X_l = orth(Y)`` (Householder QR, so
that the basis, and with it Hardt & Price's basis-dependent sensitivity, is a deterministic function of ``Y``).

Noise. ``Delta_l`` (:func:`fl_strategies.privacy.dp_sensitivity.sensitivity`, config key ``dp-sensitivity``) is a
function of the public ``X_{l-1}``, computed by every client and by the server alike; ``sigma`` comes from the zCDP
calibration (:mod:`fl_strategies.privacy.zcdp`) of the target ``(epsilon, delta)`` over ``L`` releases. The per-entry
noise std of a client is (config key ``dp-channel``)

* ``secagg``: ``Delta_l sigma / sqrt(s)`` for ``s = num-clients`` clients, summed by Flower's SecAgg+ so that the
  server sees only the sum, whose noise is the central ``N(0, Delta_l^2 sigma^2)`` (Theorem 6.2);
* ``plaintext``: the same noise summed in the clear. With one client this *is* the central algorithm
  (Algorithm 1); with more it is a test mode: each client's release then carries only ``sigma/sqrt(s)``;
* ``public``: ``Delta_l sigma`` at every client, no SecAgg (the public-channel baseline of Balcan et al.: each
  release private on its own, total noise variance ``s`` times the central one).

Missing clients. Every one of the ``s`` noises must be in the sum, or the released ``Y`` is less private than
accounted for (its noise share is missing from the sum), and a missing share also biases ``A``. A round with fewer than ``s`` valid
products therefore **stops the run** with an error naming the round and the missing partitions; the rows written
so far stay. (SecAgg+'s reconstruction lets a round survive a client that drops *after* uploading its masked
vector: its product and noise are in the sum.)

Sum from SecAgg+. Flower's SecAgg+ returns the weighted *average* of the uploads; clients report one example each
and the workflow runs with ``max_weight = 1``, so every weight is exactly 1 and the sum is the average times the
number of uploads. Uploads are clipped to ``[-C, C]`` (``secagg-clip``) and stochastically rounded to ``2^22``
levels: the sum is exact to about ``2 C s / 2^22`` per entry (see :func:`secagg_tolerance`). A client whose
product exceeds ``C`` refuses to upload (clipping would bias the sum and void the analysis), which stops the run.
Quantising Gaussian noise is not covered by the paper's proof (it defers to Kairouz et al. 2021); at this step
the effect is far below the noise.

Centring (``center = true``). Flower round 1 releases the mean instead of a product: each client uploads its
row sum plus its share of ``N(0, (2 sigma_mean)^2)`` (replacing one unit row moves a row sum by at most 2), summed
like the products; the server takes ``mu = S / n`` (projected onto the unit ball, which holds every mean of unit
rows: post-processing) and the ``L`` product rounds follow. The clients keep sending the uncentred products
``A^(i) X + G^(i)``; the server centres their sum itself, ``Y - n mu (mu^T X)`` (``sum (x - mu)(x - mu)^T =
A - n mu mu^T`` for the released ``mu``: post-processing again), so that the iterations follow the centred
covariance. Under ``epsilon`` the mean and the products are accounted together, for one unit row replaced
(row counts are public): the products' sensitivity is then 2 (``||(x x^T - y y^T) X||_F <= 2`` for orthonormal
``X``, ``dp-sensitivity = "one"``, required) and the mean's 2, their multipliers split the privacy with
:data:`~fl_strategies.privacy.dp_power_noise.MEAN_SHARE` for the mean
(:func:`~fl_strategies.privacy.dp_power_noise.privacy_plan`). The model (``pca.npz``) is built from the last centred
sum ``Y_L / n ~ C X_{L-1}``: its left singular vectors are the components, its singular values the explained
variance (post-processing); ``tr(C)`` is not released, so the explained-variance ratio is NaN.

The model. Every run writes one (:func:`fl_strategies.files.pca.released_product_model`): without ``center`` from the
last uncentred sum ``Y_L / n ~ (1/n) A X_{L-1}``, with mean zero (``centered = False`` in ``pca.npz``: the
uncentred PCA, which ``transform`` applies as it is). Under noise the model records the privacy spent: the ``L``
products, their noise multiplier and each round's ``Delta_l``.

Output and metrics. ``X_L`` with all ``p`` columns; the accuracy metric is ``||(I - X X^T) U_k||_2`` (column
``subspace_distance``). Each row also reports ``delta_a`` and ``delta_b`` of the broadcast iterate, the
sensitivity used, the per-client noise std, and the ``(rho, epsilon_spent)`` after that round at ``delta``.
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np
from flwr.common import FitIns, FitRes, Parameters, Scalar, ndarrays_to_parameters, parameters_to_ndarrays
from flwr.server.client_manager import ClientManager
from flwr.server.client_proxy import ClientProxy

from ...privacy.dp_sensitivity import delta_a, delta_b
from ..base import log, uploaded_bytes
from .eigenspace import EigenspaceStrategy
from ...kernels.linalg import orth
from ..secure_sum import secure_sum
from ...privacy import accounting
from ...privacy.dp_power_noise import (CENTRED_SENSITIVITY, client_noise_std, mean_noise_std, privacy_plan,
                                       product_sensitivity, project_mean)
from ...privacy.zcdp import epsilon_of, rho_of, spent_epsilon

__all__ = ["DPPowerStrategy", "num_shares", "secagg_tolerance", "QUANTIZATION_RANGE"]


QUANTIZATION_RANGE = 2 ** 22
"""Levels of SecAgg+'s stochastic quantisation of ``[-C, C]`` (Flower's default)."""


def num_shares(num_clients: int, requested: int) -> tuple[int | float, int | float]:
    """SecAgg+'s ``(num_shares, reconstruction_threshold)`` for ``s = num_clients`` clients and ``requested``
    (``secagg-num-shares``) shares.

    ``secagg-num-shares = 0``: every client holds a share of every other (``1.0``) up to 7 clients, else the odd
    number nearest ``2 log2(s) + 1`` (Bell et al.'s O(log s) neighbourhoods); the threshold is half the shares plus
    one (at least 2), so that a share holder who drops can be tolerated while no minority can unmask.
    """
    s = num_clients
    shares = requested
    if shares == 0:
        if s <= 7:
            return 1.0, max(2, s // 2 + 1)
        shares = int(2 * math.log2(s) + 1) | 1
    shares = min(shares, s)
    return (1.0 if shares >= s else shares), max(2, shares // 2 + 1)


def secagg_tolerance(clip: float, num_clients: int) -> float:
    """Worst-case per-entry error of a SecAgg+ sum: one quantisation step ``2 C / 2^22`` per client."""
    return 2.0 * clip / QUANTIZATION_RANGE * num_clients


class DPPowerStrategy(EigenspaceStrategy):
    """Server side of ``dp-power`` (module docstring).

    Parameters
    ----------
    cfg : dict
        Effective run configuration (:func:`fl_strategies.settings.config.validate_run_config`).
    dimension : int
        ``n``, the size of ``A``.
    reference : fl_strategies.kernels.metrics.Reference, optional
        Exact eigenvectors of ``A`` (measurement only).
    wait_timeout : float
        Seconds to wait for ``num-clients`` nodes to register.

    Attributes
    ----------
    calibration : fl_strategies.privacy.zcdp.Calibration or None
        ``None`` when ``epsilon = 0`` (the non-private power method).
    secure : bool
        True when the sum is formed by SecAgg+ (``dp-channel = "secagg"``); the ServerApp then runs the rounds
        through Flower's ``SecAggPlusWorkflow``.
    clip : float
        SecAgg+'s clipping range ``C`` (set after discovery).
    last_sum : ndarray of shape (n, p) or None
        The sum ``Y`` the server formed in the latest round (before ``orth``).
    """

    def __init__(self, cfg: dict[str, Any], dimension: int, reference=None, wait_timeout: float = 600.0) -> None:
        super().__init__(cfg, dimension, reference, wait_timeout)
        s = self.settings
        self.L = s.num_server_rounds
        self.calibration, self.releases = privacy_plan(s.epsilon, s.delta, s.dp_calibration, self.L, s.center)
        self.centred = bool(s.center)
        self.secure = s.dp_channel == "secagg"
        self.clip = s.secagg_clip
        self.aggregated: set[int] = set()
        self.last_sum: np.ndarray | None = None
        self.sensitivities: list[float] = []  # Delta_l of each product released so far
        if self.calibration is not None and s.noise_source in ("seeded", "seeded-not-private") and self.m > 1:
            log.warning("dp-power: noise-source = \"%s\" derives every client's noise from the run seed, which "
                        "the server knows (reproducible experiments only); a deployment must use "
                        "noise-source = \"auto\", \"node-secret\" or \"os\"", s.noise_source)

    @property
    def num_rounds(self) -> int:
        """``L``, one round per noisy power iteration, after the mean's round when centring."""
        return self.L + int(self.centred)

    def products_before(self, server_round: int) -> int:
        """Products released in rounds ``1 .. server_round``."""
        return max(0, server_round - int(self.centred))

    def __repr__(self) -> str:
        c = self.settings
        return (f"DPPowerStrategy(n={self.d}, k={self.k}, p={self.r}, s={self.m}, L={self.L}, "
                f"channel={c.dp_channel}, sensitivity={c.dp_sensitivity}, {self.calibration or 'no noise'})")

    def initialize_parameters(self, client_manager: ClientManager) -> Parameters:
        """Discovery, ``X_0 = orth(N(0,1)^{n x p})`` from the (public) run seed, and SecAgg+'s clip range."""
        parameters = super().initialize_parameters(client_manager)
        if self.secure and self.clip == 0:
            # |(A^(i) X)_jk| <= ||A^(i)||_2 <= tr(A^(i)) = s_i for unit rows; the noise exceeds 8 std w.p. 1e-15
            channel = self.settings.dp_channel
            nu = max(client_noise_std(channel, self.m, self.calibration, self.sensitivity_bound()),
                     mean_noise_std(channel, self.m, self.releases))  # |row sum entries| <= s_i too
            self.clip = float(max(self.sizes.values()) + 8.0 * nu)
        if self.secure:
            log.info("dp-power: SecAgg+ clipping range C = %.6g, sum exact to %.3g per entry", self.clip,
                     secagg_tolerance(self.clip, self.m))
        return parameters

    def sensitivity_bound(self) -> float:
        """Largest ``Delta_l`` any iterate can have: ``sqrt(p)`` for ``max-entry``, 2 when centring, else 1."""
        if self.centred:
            return CENTRED_SENSITIVITY
        return math.sqrt(self.r) if self.settings.dp_sensitivity == "max-entry" else 1.0

    # -- one round ----------------------------------------------------------------------------------
    def configure_fit(self, server_round: int, parameters: Parameters,
                      client_manager: ClientManager) -> list[tuple[ClientProxy, FitIns]]:
        """Send ``X_{l-1}`` to every client (all ``s`` noises must be in the sum)."""
        X = parameters_to_ndarrays(parameters)[0]
        phase = "mean" if self.centred and server_round == 1 else "product"
        Delta = (product_sensitivity(self.centred, self.settings.dp_sensitivity, X) if phase == "product"
                 else CENTRED_SENSITIVITY)
        config: dict[str, Scalar] = {"round": server_round, "phase": phase}
        if self.secure:
            config["secagg-clip"] = self.clip
        targets = sorted(self.proxies)
        self._pending = {"start": time.perf_counter(), "X": X, "asked": set(targets), "Delta": Delta, "phase": phase,
                         "bytes_down": len(targets) * X.nbytes,
                         "round_time": self.participation.plan(server_round, targets).round_time}
        return [(self.proxies[pid], FitIns(parameters, config)) for pid in targets]

    def abort_round(self, server_round: int, reason: str) -> None:
        """Abort the run in this round: no estimate is released from an incompletely noised sum."""
        self.abort(f"round {server_round}: {reason}; the run stops rather than release a sum with missing noise "
                   f"(results of rounds 0..{server_round - 1} are kept)")

    def noisy_sum(self, server_round: int, results: list[tuple[ClientProxy, FitRes]], failures: list,
                  shape: tuple[int, ...], broadcast: np.ndarray | None) -> np.ndarray | None:
        """The sum of every client's noisy share of ``shape`` (SecAgg+'s with ``dp-channel = "secagg"``), or
        ``None`` after aborting the run: a client missing or rejected (its noise would be missing from the sum),
        or a sum that is not finite.

        Parameters
        ----------
        shape : tuple of int
            Each share's shape (``(d,)`` for a mean, ``(d, p)`` or ``(d, p + 1)`` for a product).
        broadcast : ndarray or None
            The block the shares multiplied (checked against each plaintext reply), ``None`` for a mean.
        """
        pend = self._pending
        if self.secure:
            total = self._secure_sum(server_round, results, failures, shape)
            if total is None:
                return None
        else:
            replies, rejected = self.collect_replies(server_round, results, pend["asked"], [shape],
                                                     broadcast=broadcast)
            missing = sorted(pend["asked"] - set(replies))
            if missing:
                self.abort_round(server_round, f"no valid product from partition(s) {', '.join(map(str, missing))} "
                                         f"({len(failures)} failure(s), {rejected} rejected)")
                return None
            total = np.sum([replies[pid][0][0] for pid in sorted(replies)], axis=0)
        pend.update(participants=self.m, distinct=self.m, rejected=0, failures=len(failures))
        if not np.all(np.isfinite(total)):
            self.abort_round(server_round, "the sum of the products is not finite")
            return None
        self.aggregated.add(server_round)
        return total

    def aggregate_fit(self, server_round: int, results: list[tuple[ClientProxy, FitRes]],
                      failures: list) -> tuple[Parameters | None, dict[str, Scalar]]:
        """Sum the ``s`` noisy products (or take SecAgg+'s sum) and orthonormalise; stop if one is missing."""
        pend = self._pending
        pend["bytes_up"] = uploaded_bytes(results)
        mean_round = pend["phase"] == "mean"
        shape = (self.d,) if mean_round else (self.d, self.r)
        total = self.noisy_sum(server_round, results, failures, shape, None if mean_round else pend["X"])
        if total is None:
            return None, {}
        n = self.num_rows
        if mean_round:  # the private mean; the estimate is unchanged
            self.mean = project_mean(total / n)
            self.iterates.append(pend["X"])
            return ndarrays_to_parameters([pend["X"]]), {}
        if self.centred:  # sum (x - mu)(x - mu)^T X = A X - n mu (mu^T X): post-processing of the released sum
            total = total - n * np.outer(self.mean, self.mean @ pend["X"])
        X_new = orth(total)
        self.last_sum = total
        self.iterates.append(X_new)
        self.sensitivities.append(pend["Delta"])
        if server_round == self.num_rounds:
            self.set_released_model(total / n, n, self.privacy_record())
        return ndarrays_to_parameters([X_new]), {}

    def privacy_record(self) -> dict[str, Any] | None:
        """What the model records of the privacy spent (``None`` without noise): the composed releases of a
        centred run, or the ``L`` products of an uncentred one with the sensitivity of each round."""
        extra = {"channel": self.settings.dp_channel, "noise_source": self.noise_source()}
        if self.releases is not None:
            return {**self.releases.record({"mean": CENTRED_SENSITIVITY, "products": CENTRED_SENSITIVITY}), **extra}
        c = self.calibration
        if c is None:
            return None
        return {"epsilon": self.privacy_columns(self.L)["epsilon_spent"], "epsilon_target": self.settings.epsilon,
                "delta": c.delta, "calibration": c.calibration,
                "neighbouring": f"dp-sensitivity = {self.settings.dp_sensitivity}; row counts are public",
                "releases": [{"name": "products", "count": self.L, "noise_multiplier": c.sigma,
                              "sensitivity": list(self.sensitivities)}], **extra}

    def _secure_sum(self, server_round: int, results, failures, shape) -> np.ndarray | None:
        """``sum_i Y^(i)`` from SecAgg+'s average (:func:`fl_strategies.protocol.secure_sum.secure_sum`)."""
        return secure_sum(self, server_round, results, failures, shape)

    # -- results ------------------------------------------------------------------------------------
    def round_columns(self, server_round: int) -> dict[str, Any]:
        """Sensitivities of the broadcast iterate, the noise, and the privacy spent after the round."""
        if not server_round:
            return {"delta_a": None, "delta_b": None, "sensitivity": None, "client_noise_std": None,
                    **self.privacy_columns(0), "noise_source": self.noise_source()}
        X = self._pending["X"]
        Delta = self._pending["Delta"]
        channel = self.settings.dp_channel
        nu = (mean_noise_std(channel, self.m, self.releases) if self._pending.get("phase") == "mean"
              else client_noise_std(channel, self.m, self.calibration, Delta))
        return {"delta_a": delta_a(X), "delta_b": delta_b(X), "sensitivity": Delta, "client_noise_std": nu,
                **self.privacy_columns(server_round), "noise_source": self.noise_source()}

    def privacy_columns(self, releases: int) -> dict[str, Any]:
        """``rho``, ``epsilon_spent`` (by the calibration's accountant) and ``delta`` after ``releases`` products,
        and beside them the paper's zCDP bound (``epsilon_zcdp``) and ``dp-accounting``'s PLD accountant
        (``epsilon_pld``, empty without the package) for the same noise; all empty without noise."""
        c = self.calibration
        if c is None:
            return {"rho": None, "epsilon_spent": None, "delta": None, "epsilon_zcdp": None, "epsilon_pld": None}
        if self.releases is not None:  # centred: the mean (round 1) and the products, composed
            counts = {"mean": min(releases, 1), "products": self.products_before(releases)}
            pairs = [(self.releases.multipliers[k], v) for k, v in counts.items() if v]
            rho = sum(rho_of(sigma, v) for sigma, v in pairs)
            pld = (accounting.composed_epsilon("pld", tuple(pairs), c.delta) if pairs and accounting.available()
                   else 0.0 if not pairs else None)
            return {"rho": rho, "epsilon_spent": self.releases.spent(counts), "delta": c.delta,
                    "epsilon_zcdp": epsilon_of(rho, c.delta) if pairs else 0.0, "epsilon_pld": pld}
        rho, eps = c.spent(releases)
        pld = accounting.epsilon("pld", c.sigma, releases, c.delta) if accounting.available() else None
        return {"rho": rho, "epsilon_spent": eps, "delta": c.delta, "epsilon_zcdp": spent_epsilon(c.sigma, releases,
                c.delta) if releases else 0.0, "epsilon_pld": pld if pld is not None and math.isfinite(pld) else None}
