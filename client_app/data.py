"""How a node finds its own data, and the checks that data must pass.

* In simulation a node has ``partition-id`` (and ``num-partitions``) in its
  node config and takes that partition of the named data set
  (:mod:`simulations.federated_data`): with a lazy data set
  (``fedpower-model1-lazy``) it generates only its own rows from
  ``(data-seed, partition-id)``; either way the result is cached in the worker
  process (a Ray actor plays many nodes and rebuilds the client at every
  message, but never its data).
* In deployment a node's config names a local file with ``data-path``
  (``flower-supernode --node-config 'partition-id=0 data-path="rows.npy"'``);
  the file never leaves the node.

A node whose data are unusable fails when its client is built, with a
``ValueError`` that names its partition id and the file (``data-path``) or the
config key at fault; the server leaves such a node out of the run before round
1 and goes on with the others. Checks:

* ``partition-id`` is an integer in ``0 .. num-clients - 1``;
* a ``data-path`` file exists, is a ``.npy`` / ``.csv`` file of real numbers
  (no strings, booleans, complex or object arrays), 2-D, with only finite
  entries (the checks of :func:`simulations.datasets.load_dataset`);
* its width is the run's dimension ``d`` whenever the run config fixes it
  (``dimension > 0``, or 64 for ``digits``); otherwise the server compares the
  width the node reports with ``d`` and leaves out a node that differs;
* the partition has at least one row. Fewer rows than ``iteration-rank`` are
  accepted: ``A_i`` then has rank ``s_i < r``, but the algorithm stays well
  defined (``orth`` of a rank-deficient ``Y`` is still an orthonormal basis,
  and the server weights the client by ``s_i``), and with one local step the
  server still iterates exactly the pooled covariance, so refusing the
  partition would silently change the result;
* ``A_i = M_i^T M_i / s_i`` is finite (data of huge magnitude without
  ``row-normalize`` would overflow it);
* with ``row-normalize`` every row has unit norm (or is zero), so
  ``tr(A_i) <= 1``: the assumption of the privacy calibration. A deployment
  file is normalised on the node like simulated data; ``row-normalize = false``
  with ``epsilon`` or ``noise-std`` set is refused by the run-config
  validation, which every client runs on the run's config before it touches
  its data.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from simulations.datasets import DIGITS_SHAPE, FILE_SUFFIXES, load_dataset, normalize_rows
from simulations.federated_data import DATA_KEYS, client_rows, local_covariance

__all__ = ["load_client_rows", "load_client_covariance", "check_local_matrix"]


def _partition_id(cfg: Mapping[str, Any], node_config: Mapping[str, Any]) -> int:
    """The node's ``partition-id``, checked against ``num-clients``."""
    if "partition-id" not in node_config:
        raise ValueError("node config has no 'partition-id'; start the SuperNode with "
                         "--node-config 'partition-id=<i> data-path=\"<file>\"'")
    value = node_config["partition-id"]
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"node config partition-id must be an integer, got {value!r}")
    pid = int(value)
    if not 0 <= pid < cfg["num-clients"]:
        raise ValueError(f"node config partition-id = {pid} is outside 0..num-clients-1 = {cfg['num-clients'] - 1}")
    return pid


def _expected_dimension(cfg: Mapping[str, Any]) -> int | None:
    """``d`` of the run when the run config alone fixes it, else ``None`` (the server checks it)."""
    if cfg["dimension"] > 0:
        return cfg["dimension"]
    return DIGITS_SHAPE[1] if cfg["dataset"] == "digits" else None


def _load_data_path(cfg: Mapping[str, Any], pid: int, path: str) -> np.ndarray:
    where = f"partition {pid}: node config data-path {path!r}"
    if not path.lower().endswith(FILE_SUFFIXES):
        raise ValueError(f"{where}: must be a .npy or .csv file whose rows are samples")
    if not Path(path).is_file():
        raise ValueError(f"{where}: no such file")
    try:  # dtype, shape, emptiness and finiteness are checked by load_dataset
        X = load_dataset(path, num_samples=0, dimension=0, rank=cfg["rank"], num_clients=1, seed=cfg["data-seed"],
                         row_normalize=False).X
    except ValueError as ex:
        message = str(ex).replace(f'"dataset" file {path!r}', "the file").replace('"dataset" ', "")
        raise ValueError(f"{where}: {message}") from None
    expected = _expected_dimension(cfg)
    if expected is not None and X.shape[1] != expected:
        raise ValueError(f"{where}: has {X.shape[1]} columns, but the run's data have dimension d = {expected}")
    if cfg["row-normalize"]:  # scaled by the largest entry first, so that no row norm overflows
        scale = np.max(np.abs(X), axis=1, keepdims=True)
        X = normalize_rows(X / np.where(scale > 0, scale, 1.0))
    return X


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

    Raises
    ------
    ValueError
        If the node's data fail a check of the module docstring; the message
        names the partition id and the file or key.
    """
    pid = _partition_id(cfg, node_config)
    if "data-path" in node_config:
        return _load_data_path(cfg, pid, str(node_config["data-path"])), pid
    return client_rows(cfg, pid), pid


def check_local_matrix(A: np.ndarray, num_rows: int, cfg: Mapping[str, Any], where: str) -> None:
    """Check a client's ``A_i = M_i^T M_i / s_i`` before it is used; ``where`` names partition and source.

    Raises
    ------
    ValueError
        If there are no rows, ``A_i`` has non-finite entries, or (with
        ``row-normalize``) ``tr(A_i) > 1``, i.e. the rows are not unit-norm.
    """
    if num_rows < 1:
        raise ValueError(f"{where}: the partition has no rows")
    if not np.all(np.isfinite(A)):
        raise ValueError(f"{where}: M^T M / s has non-finite entries (the data are too large in magnitude); "
                         "rescale them or set row-normalize = true")
    if cfg["row-normalize"] and np.trace(A) > 1.0 + 1e-9:
        raise ValueError(f"{where}: rows are not of unit norm (tr(M^T M / s) = {np.trace(A):.6g} > 1), which the "
                         "privacy calibration assumes")


def load_client_covariance(cfg: Mapping[str, Any], node_config: Mapping[str, Any]) -> tuple[np.ndarray, int, int]:
    """``A_i = M_i^T M_i / s_i`` of this node, its row count and its partition id.

    In simulation the matrix is cached per process (a Ray actor plays many
    nodes and every message rebuilds the client).

    Returns
    -------
    A : ndarray of shape (d, d)
    num_rows : int
    partition_id : int

    Raises
    ------
    ValueError
        If the node's data fail a check of the module docstring.
    """
    pid = _partition_id(cfg, node_config)
    if "data-path" in node_config:
        rows, _ = load_client_rows(cfg, node_config)
        with np.errstate(all="ignore"):
            A = rows.T @ rows / max(rows.shape[0], 1)
        check_local_matrix(A, rows.shape[0], cfg, f"partition {pid}: node config data-path "
                                                  f"{str(node_config['data-path'])!r}")
        return A, rows.shape[0], pid
    A, s = _checked_covariance(tuple(cfg[k] for k in DATA_KEYS), pid)
    return A, s, pid


@lru_cache(maxsize=16384)  # as local_covariance's cache: the check runs once per partition and process, not per message
def _checked_covariance(values: tuple, pid: int) -> tuple[np.ndarray, int]:
    cfg = dict(zip(DATA_KEYS, values))
    A, s = local_covariance(cfg, pid)
    check_local_matrix(A, s, cfg, f"partition {pid} of dataset {cfg['dataset']!r}")
    return A, s
