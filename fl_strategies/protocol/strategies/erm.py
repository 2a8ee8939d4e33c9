"""What FedLRGD and FedAve share, server side: the ERM reference, Gamma accounting and results rows.

Both strategies reuse :class:`~fl_strategies.protocol.base.FederatedStrategy`'s
discovery (partition ids and row counts before round 1), its results machinery
(``records``, ``on_round``, ``finish``) and its server-loop hooks
(``stopped``); the estimate is a parameter vector ``theta`` (p,) instead of a
basis.

Rows: ``round``, ``loss_gap`` = ``F(theta) - F*`` on the pooled data (server
rows and every client's rows), ``oracle_complexity`` = Gamma of Definition 1
counted so far, ``communication_epochs``, traffic and participation columns.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np
from flwr.common import Parameters, Scalar, parameters_to_ndarrays

from ...settings.config import ConfigError
from ...settings.registry import settings_for
from ..base import FederatedStrategy
from ...kernels.losses import objective, smoothness, split_xy

__all__ = ["ErmReference", "ErmStrategy", "oracle_epoch"]


@dataclass(frozen=True)
class ErmReference:
    """The exact centralised solution on the pooled data, computed by a simulation harness (the evaluator).

    Attributes
    ----------
    loss : str
    mu : float
        ``l2``.
    X : ndarray of shape (n, p)
        Pooled features (server rows first, then every client's rows); ``y`` (n,).
    theta_star : ndarray of shape (p,)
        Minimiser of ``F`` on the pooled data.
    F_star : float
    """

    loss: str
    mu: float
    X: np.ndarray
    y: np.ndarray
    theta_star: np.ndarray
    F_star: float

    def gap(self, theta: np.ndarray) -> float:
        """``F(theta) - F*``."""
        return objective(self.loss, self.X, self.y, theta, self.mu) - self.F_star


def oracle_epoch(gradients: int, communicates: bool, comm_ratio: float, active: int) -> float:
    """One epoch's term of Definition 1: ``b_t + 1{communication} phi tau m``.

    Parameters
    ----------
    gradients : int
        ``b_t``, gradients computed by each active client (or by the server).
    communicates : bool
    comm_ratio : float
        ``phi``.
    active : int
        ``tau m``, the number of clients that upload.
    """
    return float(gradients) + (comm_ratio * active if communicates else 0.0)


class ErmStrategy(FederatedStrategy):
    """Base class of the federated ERM strategies (the estimate is ``theta`` in ``R^p``).

    Parameters
    ----------
    cfg : dict
    dimension : int or None
        ``d = p + 1`` columns of the data (label last); ``None``: the width of ``server_rows``.
    reference : ErmReference, optional
        The evaluator: without it ``loss_gap`` is empty.
    server_rows : ndarray of shape (r', p + 1)
        Required: the server's own samples (label last); the first
        ``server-samples`` rows are used (``X0``, ``y0``).
    """

    RANDOM_START = False  # theta = 0, the optimum of labels all zero

    def __init__(self, cfg: dict[str, Any], dimension: int | None, reference: ErmReference | None = None,
                 wait_timeout: float = 600.0, server_rows: np.ndarray | None = None) -> None:
        settings = settings_for(cfg)  # its server rows are checked before the base class is built
        r = settings.server_samples
        if server_rows is None:
            raise ConfigError(f"strategy {settings.strategy} needs the server's own samples: set server-data to a "
                              ".npy/.csv file on the server (label in the last column)")
        if server_rows.ndim != 2 or server_rows.shape[0] < r or server_rows.shape[1] < 2:
            raise ConfigError(f"server-samples = {r} needs a server data set of at least {r} rows and 2 columns "
                              f"(features, label last), got shape {server_rows.shape}")
        if dimension is not None and dimension != server_rows.shape[1]:
            raise ConfigError(f"the server's samples have {server_rows.shape[1]} columns, the run's data {dimension}")
        super().__init__(cfg, server_rows.shape[1], reference, wait_timeout)
        self.X0, self.y0 = split_xy(np.asarray(server_rows[:r], dtype=np.float64))
        self.p = self.d - 1
        self.loss, self.mu = self.settings.loss, self.settings.l2
        self.phi = self.settings.comm_ratio
        self.L1 = smoothness(self.loss, self.p, self.mu)
        self.gamma = 0.0  # Gamma of Definition 1 so far
        self.comm_epochs = 0
        self.progress_notes: dict[str, Any] = {}  # the round's measures, in the server's progress line

    @property
    def n(self) -> int:
        """``n = r + sum_c s_c``: server rows plus every client's rows."""
        return self.X0.shape[0] + self.num_rows

    def evaluate(self, server_round: int, parameters: Parameters) -> tuple[float, dict[str, Scalar]] | None:
        """Record the round's row: ``loss_gap`` of the current ``theta`` and Gamma so far."""
        theta = parameters_to_ndarrays(parameters)[0]
        pend = self._pending if server_round else {}
        gap = None if self.reference is None else self.reference.gap(theta)
        row = {"round": server_round, "loss_gap": gap, "oracle_complexity": self.gamma,
               "communication_epochs": self.comm_epochs,
               "bytes_up": pend.get("bytes_up", 0), "bytes_down": pend.get("bytes_down", 0),
               "participants": pend.get("participants", 0), "rejected": pend.get("rejected", 0),
               "failures": pend.get("failures", 0), "late": pend.get("late", 0),
               "round_time": pend.get("round_time", 0.0), **self.round_columns(server_round),
               "wall_time": time.perf_counter() - pend["start"] if pend else 0.0}
        self._emit(row, theta)
        if server_round:
            gap_text = "n/a" if gap is None else f"{gap:.3e}"
            self.progress_notes["estimate"] = f"F - F* = {gap_text}, Gamma = {self.gamma:.6g}"
        return (float("nan") if gap is None else gap), {}
