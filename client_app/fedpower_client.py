"""The FedPower client: decode ``Z``, run the local power iterations, encode ``(Y, Z_prev)``."""

from __future__ import annotations

from typing import Any

import numpy as np
from flwr.client import NumPyClient
from flwr.common import ConfigRecord, Context

from fl_strategies.files.pca import KRYLOV_BASIS, KRYLOV_BLOCK
from fl_strategies.privacy.analyze_gauss import covariance_releases, noise_std, row_bound, upload_vector
from fl_strategies.settings.config import secure_covariance
from fl_strategies.settings.registry import settings_for
from fl_strategies.settings.schedule import round_lengths
from fl_strategies.settings.strategies import fedpower_noise_stds
from fl_strategies.kernels.power import local_power_iterations
from fl_strategies.privacy.noise import STREAM_NOISE, ClientNoise
from fl_strategies.protocol.node_state import secret_in_state

from .pca_replies import discovery_properties, fingerprint_property, summary_reply

__all__ = ["FedPowerClient", "CovarianceClient"]


class FedPowerClient(NumPyClient):
    """Holds the local operator ``A_i = M_i^T M_i / s_i`` and answers FedPower's fit instructions.

    Parameters
    ----------
    data : client_app.data.NodeData
        Its partition id (partition 0 is the reference client) and its
        local operator (:meth:`~client_app.data.NodeData.operator`: products
        ``A_i Z`` from the rows, or from ``M_i^T M_i / s_i`` where cheaper)
        with ``s_i``, the number of records behind it (the privacy
        calibration and the server's weights use it).
    cfg : dict
        Effective run config; the client reads its settings (:func:`fl_strategies.settings.registry.settings_for`)
        and passes the mapping on only to what handles every key (the node's noise source, the discovery replies).
    context : flwr.common.Context
        The node's context; ``context.state`` remembers how many noisy local
        steps the client has performed, and the client refuses to exceed the
        ``T`` its privacy budget was calibrated for.
    """

    def __init__(self, data, cfg: dict[str, Any], context: Context) -> None:
        self.data = data
        self.settings = s = settings_for(cfg)
        T = sum(round_lengths(s.local_steps, s.schedule, total_iterations=s.total_iterations,
                              num_rounds=s.num_server_rounds))
        # products in the run: T local steps (the objective reuses the first of a round's), the summary
        self.products = T + 1
        op = data.operator(self.products, s.iteration_rank)
        self.s, self.d = op.num_rows, op.shape[0]
        self.partition_id, self.cfg, self.context = data.partition_id, cfg, context
        # products' and (centred, with epsilon) row sum's noise: fl_strategies.privacy.fedpower_dp
        self.noise_std, self.mean_noise_std = fedpower_noise_stds(s, T, self.s)
        self.budget = T
        # refuses seeded noise on a SuperNode; draws (once) or reads the node's secret (fl_strategies.privacy.noise)
        self.noise = ClientNoise(cfg, data.node_config, self.partition_id, secret_in_state(context.state),
                                 self.noise_std > 0, STREAM_NOISE)

    def get_properties(self, config):
        """Report what the server needs to plan the run: no data (:func:`discovery_properties`, the noise's); in
        a centred private run the row sum with its noise (:meth:`noisy_row_sum`)."""
        props = {**discovery_properties(self.data, self.cfg, self.d, self.noise_std > 0, config),
                 **self.noise.properties(),
                 **fingerprint_property(self.data, self.cfg, self.noise)}
        if "row-sum" in props and self.mean_noise_std > 0:
            props["row-sum"] = self.noisy_row_sum()
        return props

    def noisy_row_sum(self) -> bytes:
        """``S_i + N(0, nu_mean^2 I)`` (d float64 as bytes), drawn once and kept in the node state: a repeated
        discovery gets the same release, never a fresh one (which would spend the mean's budget again)."""
        state = self.context.state
        if "fedpower-mean" not in state:
            rng = self.noise.generator(0, self.data.row_sum, self.mean_noise_std)  # round 0: before every product
            noisy = self.data.row_sum + self.mean_noise_std * rng.standard_normal(self.d)
            state["fedpower-mean"] = ConfigRecord({"row-sum": noisy.astype("<f8").tobytes()})
        return state["fedpower-mean"]["row-sum"]

    def _steps_done(self) -> int:
        state = self.context.state  # not .config_records: that builds a view of every record at every message
        return int(state["fedpower"]["steps"]) if "fedpower" in state else 0

    def fit(self, parameters, config):
        """Run ``config['local-steps']`` local iterations from the broadcast ``Z`` (or answer the summary)."""
        (Z,) = parameters
        r = self.settings.iteration_rank
        if Z.shape != (self.d, r) or not np.all(np.isfinite(Z)):
            raise ValueError(f"broadcast Z has shape {Z.shape} or non-finite values; expected ({self.d}, {r})")
        if self.mean_noise_std > 0:  # the centred sensitivity holds for a mean in the unit ball only
            norm = float(np.linalg.norm(np.frombuffer(config.get("mean", b""), dtype="<f8")))
            if not norm <= 1.0 + 1e-9:
                raise ValueError(f"the broadcast mean has norm {norm:.6g} > 1: the noise is calibrated for a mean "
                                 "in the unit ball, so this client does not answer")
        A = self.data.operator_for(config, self.products, r)
        if config.get("phase") == "summary":
            return summary_reply(A, Z, self.s, self.noise_std, self.partition_id, config)
        steps = int(config["local-steps"])
        # steps this node counted, or (in a run resumed from a checkpoint, whose node state starts empty) the steps
        # the run had done before this round, whichever is larger
        done = max(self._steps_done(), int(config.get("iteration-offset", 0)))
        if self.noise_std > 0 and done + steps > self.budget:
            raise RuntimeError(f"privacy budget exhausted: {done} + {steps} local steps exceed T = {self.budget}")
        metrics = {"partition-id": self.partition_id}
        AZ = None
        # f_i = tr(Z^T M_i Z) at the received Z, when the server asks for it (its stopping rule or explained
        # variance; krylov's server reads F from its Ritz values and never asks)
        if config.get("objective"):
            if self.noise_std > 0:
                raise RuntimeError("the server asks for the objective tr(Z^T M_i Z) in a noisy run: it would be "
                                   "released without noise, so this client does not answer")
            AZ = A @ Z  # also the first local step's product
            metrics["f"] = float(self.s * np.sum(Z * AZ))
        rng = None
        if self.noise_std > 0:  # node-secret: a function of everything this release depends on
            rng = self.noise.generator(int(config["round"]), Z, A.digest_input, self.noise_std, steps)
        basis = config.get(KRYLOV_BASIS)
        if basis and steps == 1 and AZ is None and rng is None and getattr(A, "keeps_lefts", False):
            # krylov's block on a .bed: the same product, keeping X Q_j for the summary (no read there)
            block = config.get(KRYLOV_BLOCK)
            if not isinstance(block, int) or isinstance(block, bool) or block < 0:
                raise ValueError(f"partition {self.partition_id}: the round's {KRYLOV_BLOCK} is {block!r}, not the "
                                 "index of a block of the server's Krylov basis")
            Y, Z_prev = A.product_keeping(Z, str(basis), block), Z
        else:
            Y, Z_prev = local_power_iterations(A, Z, steps, self.noise_std, rng, first=AZ)
        self.context.state["fedpower"] = ConfigRecord({"steps": done + steps})
        arrays = [Y, Z_prev] if steps > 1 else [Y]
        if AZ is not None and steps > 1:  # G_i = s_i Z^T A_i Z at the received Z: the server's Ritz basis
            arrays.append(self.s * (Z.T @ AZ))
        return arrays, self.s, metrics


class CovarianceClient(FedPowerClient):
    """The ``covariance`` strategy's client: its (centred) ``A_i``, ``d x d``, once; or, secure or private, the
    packed ``G_i = M_i^T M_i`` and its row sum in units of the row bound, with its share of the Analyze Gauss noise
    (:func:`fl_strategies.privacy.analyze_gauss.upload_vector`)."""

    def __init__(self, data, cfg: dict[str, Any], context: Context) -> None:
        super().__init__(data, cfg, context)
        s = self.settings
        self.releases = covariance_releases(s.epsilon, s.delta, s.dp_calibration, s.center) if s.epsilon > 0 else None
        self.secure = secure_covariance(cfg)

    def fit(self, parameters, config):
        """Answer the ``gram`` phase with ``[A_i]``, or with the one packed (noisy) vector."""
        if config.get("phase") != "gram":
            raise ValueError(f"the covariance client answers the gram phase only, got {config.get('phase')!r}")
        if not (self.secure or self.releases is not None):
            A, _ = self.data.covariance_for(config)
            return [np.ascontiguousarray(A)], self.s, {"partition-id": self.partition_id}
        state = self.context.state
        if self.releases is not None and "covariance" in state:
            raise RuntimeError("privacy budget exhausted: this client released its noisy Gram matrix already")
        A, s = self.data.covariance
        center = self.settings.center
        vector = upload_vector(A * s, self.data.row_sum if center else None, row_bound(self.settings.clip_norm))
        nu = noise_std(self.settings.num_clients, self.releases, center)
        if nu > 0:
            rng = self.noise.generator(int(config["round"]), A, nu)
            vector = vector + nu * rng.standard_normal(vector.shape)
            state["covariance"] = ConfigRecord({"released": 1})
        if self.secure:
            clip = float(config["secagg-clip"])
            if np.max(np.abs(vector)) > clip:
                raise ValueError(f"partition {self.partition_id}: an entry of the upload exceeds the SecAgg+ "
                                 f"clipping range C = {clip:g}; clipping would bias the sum, so nothing is "
                                 "uploaded (set secagg-clip larger)")
        return [vector], (1 if self.secure else self.s), {"partition-id": self.partition_id}
