"""What FedLRGD and FedAve share, server side: the ERM reference, Gamma accounting and results rows.

Both strategies reuse :class:`~fl_strategies.eigenspace.EigenspaceStrategy`'s
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

from .eigenspace import EigenspaceStrategy, log
from .losses import objective, smoothness

__all__ = ["ErmReference", "ErmStrategy", "oracle_epoch"]


@dataclass(frozen=True)
class ErmReference:
    """The server's data and the exact centralised solution, computed by the harness.

    Attributes
    ----------
    loss : str
    mu : float
        ``l2``.
    X0 : ndarray of shape (r, p)
        The server's own samples (features); ``y0`` (r,) their labels.
    X : ndarray of shape (n, p)
        Pooled features (server rows first, then every client's rows); ``y`` (n,).
    theta_star : ndarray of shape (p,)
        Minimiser of ``F`` on the pooled data.
    F_star : float
    """

    loss: str
    mu: float
    X0: np.ndarray
    y0: np.ndarray
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


class ErmStrategy(EigenspaceStrategy):
    """Base class of the federated ERM strategies (the estimate is ``theta`` in ``R^p``).

    Parameters
    ----------
    cfg : dict
    dimension : int
        ``d = p + 1`` columns of the data (label last).
    reference : ErmReference
        Required: the server's own rows live in it.
    """

    def __init__(self, cfg: dict[str, Any], dimension: int, reference: ErmReference | None = None,
                 wait_timeout: float = 600.0) -> None:
        super().__init__(cfg, dimension, reference, wait_timeout)
        if reference is None:
            raise ValueError(f"{type(self).__name__} needs an ErmReference (the server's own samples)")
        self.p = dimension - 1
        self.loss, self.mu = cfg["loss"], cfg["l2"]
        self.phi = cfg["comm-ratio"]
        self.L1 = smoothness(self.loss, self.p, self.mu)
        self.gamma = 0.0  # Gamma of Definition 1 so far
        self.comm_epochs = 0
        self.error: str | None = None  # set when the run had to stop

    @property
    def n(self) -> int:
        """``n = r + sum_c s_c``: server rows plus every client's rows."""
        return self.reference.X0.shape[0] + sum(self.sizes.values())

    def fail(self, message: str) -> None:
        """Stop the run with a clear message (logged at ERROR, kept in ``error``)."""
        self.error, self.stopped = message, True
        log.error("%s", message)

    def evaluate(self, server_round: int, parameters: Parameters) -> tuple[float, dict[str, Scalar]] | None:
        """Record the round's row: ``loss_gap`` of the current ``theta`` and Gamma so far."""
        theta = parameters_to_ndarrays(parameters)[0]
        pend = self._pending if server_round else {}
        gap = self.reference.gap(theta)
        row = {"round": server_round, "loss_gap": gap, "oracle_complexity": self.gamma,
               "communication_epochs": self.comm_epochs,
               "bytes_up": pend.get("bytes_up", 0), "bytes_down": pend.get("bytes_down", 0),
               "participants": pend.get("participants", 0), "rejected": pend.get("rejected", 0),
               "failures": pend.get("failures", 0), "late": pend.get("late", 0),
               "round_time": pend.get("round_time", 0.0), **self.round_columns(server_round),
               "wall_time": time.perf_counter() - pend["start"] if pend else 0.0}
        self._emit(row, theta)
        if server_round:
            log.info("round %d/%d: F - F* = %.3e, Gamma = %.6g", server_round, self.num_rounds, gap, self.gamma)
        return gap, {}
