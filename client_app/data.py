"""How a node finds its own data.

* In simulation a node has ``partition-id`` (and ``num-partitions``) in its
  node config and takes that partition of the named data set.
* In deployment a node's config names a local file with ``data-path``
  (``flower-supernode --node-config 'partition-id=0 data-path="rows.npy"'``);
  the file never leaves the node.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from simulations.datasets import load_dataset
from simulations.federated_data import federated_dataset, local_covariance

__all__ = ["load_client_rows", "load_client_covariance"]


def load_client_rows(cfg: Mapping[str, Any], node_config: Mapping[str, Any]) -> tuple[np.ndarray, int]:
    """Rows held by this node and its partition id.

    Parameters
    ----------
    cfg : mapping
        Effective run config.
    node_config : mapping
        The node's config (``partition-id``, optionally ``data-path``).

    Returns
    -------
    rows : ndarray of shape (s_i, d)
    partition_id : int
    """
    if "partition-id" not in node_config:
        raise ValueError("node config has no 'partition-id'; start the SuperNode with "
                         "--node-config 'partition-id=<i> data-path=\"<file>\"'")
    pid = int(node_config["partition-id"])
    if "data-path" in node_config:
        data = load_dataset(str(node_config["data-path"]), num_samples=0, dimension=0, rank=cfg["rank"],
                            num_clients=1, seed=cfg["data-seed"], row_normalize=cfg["row-normalize"])
        return data.X, pid
    if not 0 <= pid < cfg["num-clients"]:
        raise ValueError(f"partition-id {pid} is outside 0..num-clients-1 = {cfg['num-clients'] - 1}")
    data, parts = federated_dataset(cfg)
    return data.X[parts[pid]], pid


def load_client_covariance(cfg: Mapping[str, Any], node_config: Mapping[str, Any]) -> tuple[np.ndarray, int, int]:
    """``A_i = M_i^T M_i / s_i`` of this node, its row count and its partition id.

    In simulation the matrix is cached per process (a Ray actor plays many
    nodes and every message rebuilds the client).

    Returns
    -------
    A : ndarray of shape (d, d)
    num_rows : int
    partition_id : int
    """
    if "data-path" in node_config:
        rows, pid = load_client_rows(cfg, node_config)
        return rows.T @ rows / rows.shape[0], rows.shape[0], pid
    pid = int(node_config.get("partition-id", -1))
    if not 0 <= pid < cfg["num-clients"]:
        load_client_rows(cfg, node_config)  # raises the explanatory error
    A, s = local_covariance(cfg, pid)
    return A, s, pid
