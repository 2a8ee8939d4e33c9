"""User-item interactions (the LightGCN files of the Gowalla split) as the clients' data of ``dp-power``.

``dataset`` names a folder holding ``train.txt`` (and ``valid.txt`` / ``test.txt``; every line
``user item item ...``, read by :func:`simulations.data.gowalla.load_interactions`). The run keeps the ``dimension``
most popular items (``1 <= dimension <= 5000``: the harness measures the estimate against the dense item-item
matrix, and the full 40,981 items would need 13 GB), scales every user's row to unit norm
(``r~_u = r_u / sqrt(deg_u)``, computed by the user alone: the spec's recommender variant (c)) and spreads the
users over ``num-clients`` clients with :func:`simulations.data.gowalla.split_users` (seed ``data-seed``); client ``c``
holds the sparse rows of its users, its additive share of ``A = R~^T R~`` is ``R~_c^T R~_c``. A user with none
of the kept items keeps an empty row.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import scipy.sparse as sp

from fl_strategies.kernels.metrics import Reference

__all__ = ["MAX_ITEMS", "is_interaction_folder", "interaction_rows", "client_rows", "interaction_reference"]

MAX_ITEMS = 5000


def is_interaction_folder(name: Any) -> bool:
    """Whether ``dataset`` names a folder of LightGCN interaction files (one with ``train.txt``)."""
    return isinstance(name, str) and bool(name.strip()) and (Path(name) / "train.txt").is_file()


def _check(cfg: Mapping[str, Any]) -> None:
    if cfg["strategy"] != "dp-power":
        raise ValueError(f'"dataset" {cfg["dataset"]!r} is a folder of user-item interactions, which only '
                         "dp-power reads")
    if not 1 <= cfg["dimension"] <= MAX_ITEMS:
        raise ValueError(f'"dimension" is {cfg["dimension"]} but a folder of interactions needs 1 <= dimension <= '
                         f"{MAX_ITEMS}: the number of most popular items kept")


@lru_cache(maxsize=2)
def _rows(path: str, dimension: int) -> sp.csr_matrix:
    from simulations.data.gowalla import load_interactions, normalised_rows

    R = load_interactions(path)
    if dimension > R.shape[1]:
        raise ValueError(f'"dimension" is {dimension} but {path!r} has only {R.shape[1]} items')
    degree = np.asarray(R.sum(axis=0)).ravel()
    keep = np.sort(np.argsort(-degree, kind="stable")[:dimension])  # most popular items, ties by id
    return normalised_rows(R[:, keep], "user")


def interaction_rows(cfg: Mapping[str, Any]) -> sp.csr_matrix:
    """All users' unit rows over the kept items, shape ``(users, dimension)``, and checks of the config."""
    _check(cfg)
    return _rows(str(Path(cfg["dataset"]).resolve()), int(cfg["dimension"]))


def client_rows(cfg: Mapping[str, Any], partition_id: int) -> sp.csr_matrix:
    """The sparse rows of the users of one client, shape ``(s_c, dimension)`` (cached: a client is rebuilt at
    every message)."""
    interaction_rows(cfg)  # the config checks
    return _client_rows(str(Path(cfg["dataset"]).resolve()), int(cfg["dimension"]), cfg["num-clients"],
                        cfg["data-seed"], partition_id)


@lru_cache(maxsize=1024)
def _client_rows(path: str, dimension: int, num_clients: int, seed: int, partition_id: int) -> sp.csr_matrix:
    return _rows(path, dimension)[_split(path, dimension, num_clients, seed)[partition_id]]


@lru_cache(maxsize=2)
def _split(path: str, dimension: int, num_clients: int, seed: int) -> list[np.ndarray]:
    from simulations.data.gowalla import split_users

    return split_users(_rows(path, dimension).shape[0], num_clients, seed)


def interaction_reference(cfg: Mapping[str, Any]) -> Reference:
    """Exact top eigenpairs of ``(1/users) R~^T R~`` (:func:`fl_strategies.kernels.metrics.pooled_covariance`, scipy
    ``eigh``), the harness's reference."""
    return Reference.from_rows([interaction_rows(cfg)], cfg["rank"], cfg["iteration-rank"],
                               center=bool(cfg.get("center", False)))
