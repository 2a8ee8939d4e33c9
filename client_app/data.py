"""How a node finds its own data (:class:`NodeData`), and the checks that data must pass.

One data source per node, chosen by its node config:

* ``data-path`` names a local ``.npy`` / ``.csv`` file whose rows are samples
  (``flower-supernode --node-config 'partition-id=0 data-path="rows.npy"'``):
  read by :func:`fl_strategies.data_files.read_samples`; the file never
  leaves the node. This is the deployment's source, and the only one with
  ``dataset = "nodes"``.
* Otherwise the run is a simulation and the node takes partition
  ``partition-id`` of the run's data set from the simulation harness that
  claims it (:func:`fl_strategies.harness.find_harness`): generated from
  ``(data-seed, partition-id)``, cached in the worker process.

A node whose data are unusable fails when its client is built, with a
``ValueError`` that names its partition id and the file (``data-path``) or the
config key at fault; the server leaves such a node out of the run before round
1 and goes on with the others. Checks:

* ``partition-id`` is an integer in ``0 .. num-clients - 1``;
* a ``data-path`` file exists, is a ``.npy`` / ``.csv`` file of real numbers,
  2-D, with only finite entries (:mod:`fl_strategies.data_files`);
* its width is the run's dimension ``d`` whenever the run config fixes it
  (``dimension > 0`` with a simulation data set; with ``dataset = "nodes"``
  the generators' ``dimension`` plays no part); otherwise the server compares
  the width the node reports with ``d`` (with ``dataset = "nodes"``: the
  nodes must agree) and leaves out a node that differs;
* the partition has at least one row. Fewer rows than ``iteration-rank`` are
  accepted: ``A_i`` then has rank ``s_i < r``, but the algorithm stays well
  defined (``orth`` of a rank-deficient ``Y`` is still an orthonormal basis,
  and the server weights the client by ``s_i``), and with one local step the
  server still iterates exactly the pooled covariance, so refusing the
  partition would silently change the result;
* ``A_i = M_i^T M_i / s_i`` is finite (data of huge magnitude without
  ``row-normalize`` would overflow it);
* with ``clip-norm = c`` every row longer than ``c`` is scaled down to ``c`` (others are kept), before
  anything is computed from the rows;
* with ``row-normalize`` every row has unit norm (or is zero), so
  ``tr(A_i) <= 1``: the assumption of the privacy calibration. A deployment
  file is normalised on the node like simulated data; ``row-normalize = false``
  with ``epsilon`` or ``noise-std`` set is refused by the run-config
  validation, which every client runs on the run's config before it touches
  its data.
"""

from __future__ import annotations

import weakref
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from fl_strategies.data_files import clip_rows, normalize_rows, read_samples
from fl_strategies.harness import find_harness, on_nodes, partition_file

__all__ = ["NodeData", "partition_id", "load_client_rows", "load_client_covariance", "check_local_matrix"]


def partition_id(cfg: Mapping[str, Any], node_config: Mapping[str, Any]) -> int:
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


class NodeData:
    """One node's data: its partition id, and on first use its rows ``M_i`` or its ``A_i = M_i^T M_i / s_i``.

    Every client class is built as ``Client(NodeData, cfg, context)`` and reads
    what it needs: :attr:`rows` (dp-power, fedmf, FedLRGD, FedAve) or
    :attr:`covariance` (FedPower and its baselines, FAPS).

    Parameters
    ----------
    cfg : mapping
        Effective run config.
    node_config : mapping
        The node's config (``partition-id``, optionally ``data-path``).
    """

    def __init__(self, cfg: Mapping[str, Any], node_config: Mapping[str, Any]) -> None:
        self.cfg, self.node_config = cfg, node_config
        self.partition_id = partition_id(cfg, node_config)
        self._rows = self._covariance = self._centered = None

    @classmethod
    def of(cls, partition_id: int, *, rows=None, covariance: tuple[np.ndarray, int] | None = None) -> "NodeData":
        """Data given directly (tests, notebooks): ``rows`` (s_i, d) and/or ``covariance`` ``(A_i, s_i)``."""
        data = cls.__new__(cls)
        data.cfg, data.node_config, data.partition_id = {}, {}, int(partition_id)
        data._rows, data._covariance, data._centered = rows, covariance, None
        return data

    @property
    def source(self) -> str:
        """The source as error messages name it."""
        folder_file = partition_file(self.cfg.get("dataset"), self.partition_id)
        if "data-path" not in self.node_config and folder_file is not None:
            return f"partition {self.partition_id}: dataset folder file {str(folder_file)!r}"
        if "data-path" in self.node_config:
            return f"partition {self.partition_id}: node config data-path {str(self.node_config['data-path'])!r}"
        return f"partition {self.partition_id} of dataset {self.cfg.get('dataset')!r}"

    @property
    def rows(self):
        """``M_i``, shape (s_i, d): an ndarray (a scipy sparse matrix for a folder of interactions)."""
        if self._rows is None:
            folder_file = partition_file(self.cfg["dataset"], self.partition_id)
            if "data-path" in self.node_config:
                self._rows = _file_rows(self.cfg, self.partition_id, str(self.node_config["data-path"]))
            elif folder_file is not None:  # a folder of per-client files: this client's own file only
                self._rows = _file_rows(self.cfg, self.partition_id, str(folder_file), "dataset folder file")
            else:
                self._rows = _harness(self.cfg, self.partition_id).client_rows(self.cfg, self.partition_id)
            if self._rows.shape[0] < 1:
                raise ValueError(f"partition {self.partition_id}: the partition has no rows")
            if self.cfg.get("clip-norm", 0.0) > 0:  # rows longer than c scaled down to c (the privacy bound)
                self._rows = clip_rows(self._rows.toarray() if hasattr(self._rows, "toarray") else self._rows,
                                       self.cfg["clip-norm"])
        return self._rows

    @property
    def row_sum(self) -> np.ndarray:
        """``sum`` of the rows, shape (d,) (what centring sends at discovery)."""
        return np.asarray(self.rows.sum(axis=0), dtype=np.float64).ravel()

    def sum_of_squares(self, centered: bool) -> float:
        """``sum_j ||x_j||^2`` over the rows, or about their own mean ``m_i`` when ``centered``.

        What a node reports as ``sq-sum`` at discovery (the total variance of reference-free progress);
        ``s_i tr(A_i)``, and with ``centered`` the rows' deviations summed directly (no cancellation).
        """
        A, s = self.covariance
        if not centered:
            return float(s * np.trace(A))
        rows = self.rows
        m = self.row_sum / s
        if hasattr(rows, "toarray"):  # sparse rows: the identity sum ||x - m||^2 = sum ||x||^2 - s ||m||^2
            return max(float(s * np.trace(A) - s * m @ m), 0.0)
        return float(np.sum((np.asarray(rows, dtype=np.float64) - m) ** 2))

    def column_sq_sums(self) -> np.ndarray:
        """``sum_j (x_j - m_i)^2`` per column about the rows' own mean ``m_i``, shape (d,).

        What a node reports as ``col-sq-sum`` at discovery with ``scale = true``
        (:mod:`fl_strategies.standardize`): the deviations summed directly, a block of rows at a time (no
        cancellation, no copy of the rows); sparse rows by the identity ``sum x^2 - s m^2``.
        """
        rows, s = self.rows, self.rows.shape[0]
        m = self.row_sum / s
        if hasattr(rows, "toarray"):
            return np.clip(np.asarray(rows.multiply(rows).sum(axis=0), dtype=np.float64).ravel() - s * m * m,
                           0.0, None)
        total = np.zeros(rows.shape[1])
        for start in range(0, s, _BLOCK_ROWS):
            block = np.asarray(rows[start:start + _BLOCK_ROWS], dtype=np.float64) - m
            total += np.einsum("ij,ij->j", block, block)
        return total

    def covariance_for(self, config: Mapping[str, Any]) -> tuple[np.ndarray, int]:
        """``(A_i, s_i)``, centred with the global mean when the server sends one (``config["mean"]``), and with
        its columns scaled when it sends their scales (``config["scale"]``, ``scale = true``).

        ``(M_i - 1 mu^T)^T (M_i - 1 mu^T) / s_i = A_i - m_i mu^T - mu m_i^T + mu mu^T`` with the client's row
        mean ``m_i``; scaled, ``D^{-1} (...) D^{-1}`` with ``D = diag(scale)``; cached per mean and scale.
        """
        A, s = self.covariance
        mean, scale = config.get("mean"), config.get("scale")
        if mean is None and scale is None:
            return A, s
        d = A.shape[0]
        for name, value in (("mean", mean), ("scale", scale)):
            if value is not None and (not isinstance(value, bytes) or len(value) != 8 * d):
                raise ValueError(f"{self.source}: the broadcast {name} is not {d} float64 numbers")
        if scale is not None and mean is None:
            raise ValueError(f"{self.source}: the server sent column scales without the mean they are about")
        if self._centered is None or self._centered[0] != (mean, scale):
            mu = np.frombuffer(mean, dtype="<f8").astype(np.float64)
            m = self.row_sum / s
            centered = A - np.outer(m, mu) - np.outer(mu, m) + np.outer(mu, mu)
            if scale is not None:
                inverse = 1.0 / np.frombuffer(scale, dtype="<f8").astype(np.float64)
                if not np.all(np.isfinite(inverse) & (inverse > 0)):
                    raise ValueError(f"{self.source}: the broadcast scale has entries that are not finite and > 0")
                centered = centered * np.outer(inverse, inverse)
            self._centered = ((mean, scale), centered)
        return self._centered[1], s

    @property
    def covariance(self) -> tuple[np.ndarray, int]:
        """``(A_i = M_i^T M_i / s_i, s_i)``, checked by :func:`check_local_matrix` once per matrix and process."""
        if self._covariance is None:
            if "data-path" in self.node_config or on_nodes(self.cfg) or self.cfg.get("clip-norm", 0.0) > 0:
                rows = self.rows
                with np.errstate(all="ignore"):
                    A, s = rows.T @ rows / max(rows.shape[0], 1), rows.shape[0]
            else:
                A, s = _harness(self.cfg, self.partition_id).client_covariance(self.cfg, self.partition_id)
            if _CHECKED.get(id(A)) is None or _CHECKED[id(A)]() is not A:
                check_local_matrix(A, s, self.cfg, self.source)
                _CHECKED[id(A)] = weakref.ref(A, lambda _, key=id(A): _CHECKED.pop(key, None))
            self._covariance = (A, s)
        return self._covariance


_BLOCK_ROWS = 4096
"""Rows per block of a pass over a node's rows (bounds the temporary copy to ``_BLOCK_ROWS x d`` float64)."""

_CHECKED: dict[int, weakref.ref] = {}
"""Matrices that passed :func:`check_local_matrix` in this process (a harness caches ``A_i``: check it once)."""


def _harness(cfg: Mapping[str, Any], pid: int):
    harness = find_harness(cfg)
    if harness is None:
        raise ValueError(f"partition {pid}: the node config has no data-path, and no simulation harness provides "
                         f"dataset {cfg['dataset']!r}; start the SuperNode with --node-config "
                         "'partition-id=<i> data-path=\"<file>\"'")
    return harness


def _file_rows(cfg: Mapping[str, Any], pid: int, path: str, what: str = "node config data-path") -> np.ndarray:
    """The rows of a ``data-path`` file, checked and (with ``row-normalize``) normalised; cached per file version."""
    try:
        stat = Path(path).stat()
        version = (stat.st_mtime_ns, stat.st_size)
    except OSError:
        version = None  # read_samples names the problem
    X = _read_cached(path, version, cfg["row-normalize"], f"partition {pid}: {what}")
    if not on_nodes(cfg) and cfg["dimension"] > 0 and X.shape[1] != cfg["dimension"]:
        raise ValueError(f"partition {pid}: {what} {path!r}: has {X.shape[1]} columns, but the "
                         f"run's data have dimension d = {cfg['dimension']}")
    return X


@lru_cache(maxsize=64)  # a client is rebuilt at every message; a changed file (mtime, size) is read again
def _read_cached(path: str, version, row_normalize: bool, label: str) -> np.ndarray:
    X = read_samples(path, label)
    if row_normalize:  # scaled by the largest entry first, so that no row norm overflows
        scale = np.max(np.abs(X), axis=1, keepdims=True)
        X = normalize_rows(X / np.where(scale > 0, scale, 1.0))
    X.setflags(write=False)
    return X


def load_client_rows(cfg: Mapping[str, Any], node_config: Mapping[str, Any]) -> tuple[np.ndarray, int]:
    """Rows held by this node and its partition id: ``(M_i of shape (s_i, d), partition id)``.

    Raises
    ------
    ValueError
        If the node's data fail a check of the module docstring; the message
        names the partition id and the file or key.
    """
    data = NodeData(cfg, node_config)
    return data.rows, data.partition_id


def load_client_covariance(cfg: Mapping[str, Any], node_config: Mapping[str, Any]) -> tuple[np.ndarray, int, int]:
    """``(A_i of shape (d, d), s_i, partition id)`` of this node.

    Raises
    ------
    ValueError
        If the node's data fail a check of the module docstring.
    """
    data = NodeData(cfg, node_config)
    A, s = data.covariance
    return A, s, data.partition_id


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
    bound = cfg.get("clip-norm", 0.0)
    if bound > 0 and np.trace(A) > bound * bound * (1.0 + 1e-9):
        raise ValueError(f"{where}: rows are longer than clip-norm = {bound:g} (tr(M^T M / s) = {np.trace(A):.6g})")
    if cfg["row-normalize"] and np.trace(A) > 1.0 + 1e-9:
        raise ValueError(f"{where}: rows are not of unit norm (tr(M^T M / s) = {np.trace(A):.6g} > 1), which the "
                         "privacy calibration assumes")
