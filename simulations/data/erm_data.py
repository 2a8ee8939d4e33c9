"""Supervised data for federated ERM (FedLRGD, FedAve): who holds which rows, and the exact reference.

A supervised data set is a matrix whose rows are samples ``[x, y]``: ``p``
features and the label in the **last column** (``dimension`` = ``d = p + 1``),
so labels travel with their rows through every partitioner. The generators
``erm-logistic`` and ``erm-ridge`` (:func:`generate`) draw ``x ~ U[0,1]^p``
and a fixed ``w* ~ U[-1,1]^p``; ``y = sigmoid(w*^T x + 0.25 xi)`` (a soft
label in (0, 1)) or ``y = w*^T x + 0.1 xi``, ``xi ~ N(0,1)``. A ``.npy`` /
``.csv`` path in ``dataset`` is used as is.

Split: the server holds the first ``server-samples`` rows (r); the remaining
``n - r`` rows are split over ``num-clients`` by the configured partitioner
(without class labels: ``label`` and ``group`` are not available).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Mapping

import numpy as np

from fl_strategies.protocol.strategies.erm import ErmReference
from fl_strategies.kernels.losses import minimise, objective, split_xy

from simulations.data.datasets import load_dataset, sized
from simulations.data.erm_rows import ERM_DATASETS, generate
from simulations.data.partitioners import partition

__all__ = ["ERM_DATASETS", "generate", "erm_split", "erm_client_rows", "erm_reference"]

ERM_KEYS = ("dataset", "num-samples", "dimension", "num-clients", "data-seed", "partitioner", "dirichlet-alpha",
            "server-samples")


def _rows(c: Mapping[str, Any]) -> np.ndarray:
    if c["dataset"] in ERM_DATASETS:
        return generate(c["dataset"], c["num-samples"], c["dimension"], c["data-seed"])
    return load_dataset(c["dataset"], num_samples=c["num-samples"], dimension=c["dimension"], rank=1,
                        num_clients=c["num-clients"], seed=c["data-seed"], row_normalize=False).X


def erm_split(cfg: Mapping[str, Any]) -> tuple[np.ndarray, list[np.ndarray]]:
    """The server's rows and every client's rows (cached per process).

    Returns
    -------
    server : ndarray of shape (r, d)
    clients : list of ndarray
        ``clients[c]`` has shape (s_c, d).

    Raises
    ------
    ValueError
        If the data cannot give ``r`` server rows and at least one row per client.
    """
    return _cached(tuple(sized(cfg)[k] for k in ERM_KEYS))


@lru_cache(maxsize=8)
def _cached(values: tuple) -> tuple[np.ndarray, list[np.ndarray]]:
    c = dict(zip(ERM_KEYS, values))
    rows = _rows(c)
    r, m = c["server-samples"], c["num-clients"]
    if rows.shape[0] < r + m:
        raise ValueError(f"the data set has {rows.shape[0]} rows: at least server-samples + num-clients = {r + m} "
                         "are needed")
    rest = rows[r:]
    parts = partition(c["partitioner"], rest.shape[0], m, labels=None, groups=None, alpha=c["dirichlet-alpha"],
                      seed=c["data-seed"])
    return rows[:r], [rest[idx] for idx in parts]


def erm_client_rows(cfg: Mapping[str, Any], partition_id: int) -> np.ndarray:
    """Rows of one client, shape (s_c, d)."""
    return erm_split(cfg)[1][partition_id]


def erm_reference(cfg: Mapping[str, Any]) -> ErmReference:
    """``F*`` on the pooled data (server rows and every client's) from a centralised solver (cached per process)."""
    return _cached_reference(tuple(sized(cfg)[k] for k in ERM_KEYS), cfg["loss"], cfg["l2"])


@lru_cache(maxsize=8)
def _cached_reference(values: tuple, loss: str, mu: float) -> ErmReference:
    server, clients = _cached(values)
    X, y = split_xy(np.vstack([server, *clients]))
    theta = minimise(loss, X, y, mu)
    return ErmReference(loss=loss, mu=mu, X=X, y=y, theta_star=theta,
                        F_star=objective(loss, X, y, theta, mu))
