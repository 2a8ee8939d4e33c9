"""The data of a simulated federation: one data set split into partitions.

Both sides of a simulation call :func:`federated_dataset` with the same run
config: a client takes its own partition, the server's harness takes the
pooled matrix to compute the exact reference (the top-k eigenvectors of
the matrix the run estimates, :func:`fl_strategies.kernels.metrics.pooled_covariance`:
``(1/n) M^T M``, centred with ``center = true``), which no client ever sends. The result is cached per
process, so a Ray actor that plays many clients builds the data once.

**Large populations.** With a lazy data set (``fedpower-model1-lazy``,
:data:`simulations.data.datasets.LAZY_DATASETS`) nothing here builds the whole
matrix: a client generates its own partition from ``(data-seed, partition
id)`` (:func:`client_rows`; its ``A_i`` is cached per process), the
partition sizes are arithmetic (:func:`partition_sizes`), and the server's
reference accumulates the covariance one partition at a time (``O(d^2)``
memory). :func:`federated_dataset` still stacks the blocks, for
small runs and tests (the partition built alone equals the block of the
whole).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Mapping

import numpy as np

from fl_strategies.kernels.products import GRAM_FLOOR_BYTES
from fl_strategies.kernels.linalg import top_eigenvectors
from fl_strategies.kernels.metrics import Reference, pooled_covariance
from fl_strategies.settings.config import column_scaling

from simulations.data.datasets import LAZY_DATASETS, Dataset, lazy_partition, lazy_partition_sizes, load_dataset, sized
from simulations.data.erm_data import erm_reference as build_erm_reference, erm_split
from simulations.data.partitioners import partition

__all__ = ["federated_dataset", "local_covariance", "reference", "pooled_reference", "mf_reference", "client_rows",
           "partition_sizes", "data_shape"]

ESTIMATOR_KEYS = ("center", "scale")
"""The run-config keys that choose the matrix a run estimates from its rows (:func:`reference`)."""

DATA_KEYS = ("dataset", "num-samples", "dimension", "rank", "num-clients", "data-seed", "row-normalize",
             "partitioner", "dirichlet-alpha", "xi", "kappa", "mf-noise")


def _values(cfg: Mapping[str, Any]) -> tuple:
    """The data keys of ``cfg`` (a generator's size resolved by :func:`sized`): the cache key of the data."""
    c = sized(cfg)
    return tuple(c[k] for k in DATA_KEYS)


def federated_dataset(cfg: Mapping[str, Any]) -> tuple[Dataset, list[np.ndarray]]:
    """Load the data set named by ``cfg`` and split it over ``num-clients`` partitions.

    Parameters
    ----------
    cfg : mapping
        Validated run config; only the keys in :data:`DATA_KEYS` are read.

    Returns
    -------
    data : Dataset
        ``data.X`` has shape (n, d).
    parts : list of ndarray
        ``parts[i]`` holds the row indices of partition ``i``.
    """
    return _cached(_values(cfg))


@lru_cache(maxsize=4)
def _cached(values: tuple) -> tuple[Dataset, list[np.ndarray]]:
    c = dict(zip(DATA_KEYS, values))
    _check_lazy(c)
    data = load_dataset(c["dataset"], num_samples=c["num-samples"], dimension=c["dimension"], rank=c["rank"],
                        num_clients=c["num-clients"], seed=c["data-seed"], row_normalize=c["row-normalize"],
                        xi=c["xi"], kappa=c["kappa"], mf_noise=c["mf-noise"])
    parts = partition(c["partitioner"], data.X.shape[0], c["num-clients"], labels=data.labels,
                      groups=data.groups, alpha=c["dirichlet-alpha"], seed=c["data-seed"])
    return data, parts


def local_covariance(cfg: Mapping[str, Any], partition_id: int) -> tuple[np.ndarray, int]:
    """``A_i = M_i^T M_i / s_i`` of one partition and its row count ``s_i`` (cached).

    Returns
    -------
    A : ndarray of shape (d, d)
    num_rows : int
    """
    return _cached_covariance(_values(cfg), partition_id)


@lru_cache(maxsize=16384)  # every partition a worker plays at 10,000 clients: A_i is never rebuilt in a run
def _cached_covariance(values: tuple, partition_id: int) -> tuple[np.ndarray, int]:
    rows = _rows(values, partition_id)
    return rows.T @ rows / rows.shape[0], rows.shape[0]


def client_rows(cfg: Mapping[str, Any], partition_id: int) -> np.ndarray:
    """Rows ``M_i`` of one partition, shape (s_i, d); a lazy data set generates only these."""
    return _rows(_values(cfg), partition_id)


def _rows(values: tuple, partition_id: int) -> np.ndarray:
    c = dict(zip(DATA_KEYS, values))
    if c["dataset"] in LAZY_DATASETS:
        _check_lazy(c)
        return lazy_partition(c["dataset"], partition_id, num_samples=c["num-samples"], dimension=c["dimension"],
                              rank=c["rank"], num_clients=c["num-clients"], seed=c["data-seed"],
                              row_normalize=c["row-normalize"])
    data, parts = _cached(values)
    return data.X[parts[partition_id]]


def _check_lazy(c: Mapping[str, Any]) -> None:
    if c["dataset"] in LAZY_DATASETS and c["partitioner"] != "contiguous":
        raise ValueError(f'"partitioner" is {c["partitioner"]!r} but the lazy data set {c["dataset"]!r} defines its '
                         'own blocks: set partitioner = "contiguous"')


def partition_sizes(cfg: Mapping[str, Any]) -> np.ndarray:
    """Row count ``s_i`` of every partition, shape (num-clients,), without generating a lazy data set.

    For FedLRGD / FedAve (``erm-*`` data and their split) the counts of
    :func:`simulations.data.erm_data.erm_split`.
    """
    cfg = sized(cfg)
    if cfg["strategy"] in ("fedlrgd", "fedave"):
        return np.array([rows.shape[0] for rows in erm_split(cfg)[1]], dtype=np.int64)
    if cfg["dataset"] in LAZY_DATASETS:
        _check_lazy(cfg)
        return lazy_partition_sizes(cfg["num-samples"], cfg["num-clients"])
    _, parts = federated_dataset(cfg)
    return np.array([p.size for p in parts], dtype=np.int64)


def data_shape(cfg: Mapping[str, Any]) -> tuple[int, int]:
    """``(n, d)`` of the pooled data (a lazy data set is not generated).

    Raises
    ------
    ValueError
        If the data set cannot be loaded (the message names the key).
    """
    cfg = sized(cfg)
    if cfg["dataset"] in LAZY_DATASETS:
        _check_lazy(cfg)
        lazy_partition_sizes(cfg["num-samples"], cfg["num-clients"])  # checks the counts
        client_rows({**cfg, "num-samples": cfg["num-clients"]}, 0)  # checks dimension and rank on one row
        return int(cfg["num-samples"]), int(cfg["dimension"])
    data, _ = federated_dataset(cfg)
    return data.X.shape


def reference(cfg: Mapping[str, Any]) -> Reference:
    """Exact spectral reference of the run: the matrix it estimates and its top eigenpairs (cached).

    The matrix is :func:`fl_strategies.kernels.metrics.pooled_covariance` of all
    rows, after the run's preprocessing, with the run's :data:`ESTIMATOR_KEYS`
    (``center``, ``scale``); its top ``iteration-rank`` eigenpairs come from scipy ``eigh``,
    or, for wide data (``n < d``) whose ``d x d`` matrix would exceed
    ``GRAM_FLOOR_BYTES``, from a thin SVD of the rows (no ``d x d`` array).
    """
    estimator = (bool(cfg.get("center", False)), column_scaling(cfg.get("scale", False)))  # ESTIMATOR_KEYS
    return _cached_reference(_values(cfg), cfg["rank"], cfg["iteration-rank"], estimator)


@lru_cache(maxsize=4)
def _cached_reference(values: tuple, k: int, r: int, estimator: tuple) -> Reference:
    c = dict(zip(DATA_KEYS, values))
    options = {key.replace("-", "_"): value for key, value in zip(ESTIMATOR_KEYS, estimator)}
    if c["dataset"] in LAZY_DATASETS:  # one partition at a time: O(d^2) memory
        blocks = (_rows(values, i) for i in range(c["num-clients"]))
    else:
        X = _cached(values)[0].X
        if X.shape[0] < X.shape[1] and 8 * X.shape[1] ** 2 > GRAM_FLOOR_BYTES:  # wide: a thin SVD, no d x d
            return Reference.from_thin_svd(X, k, r, **options)
        blocks = [X]
    return Reference.from_rows(blocks, k, r, **options)


def mf_reference(cfg: Mapping[str, Any]):
    """Singular values of the pooled ``S`` (n, d) for fedmf and its baselines (``eps_min``, ``sigma_1``; cached).

    Returns
    -------
    fl_strategies.kernels.mf.MFReference
    """
    return _cached_mf_reference(_values(cfg), cfg["rank"])


@lru_cache(maxsize=4)
def _cached_mf_reference(values: tuple, r: int):
    from fl_strategies.kernels.mf import MFReference

    data, _ = _cached(values)
    return MFReference.from_matrix(data.X, r)


def erm_reference(cfg: Mapping[str, Any]):
    """Server rows and ``F*`` (centralised solver on the pooled rows) for FedLRGD / FedAve.

    See :func:`simulations.data.erm_data.erm_reference`; the split differs from
    :func:`federated_dataset`: the server keeps the first ``server-samples`` rows.
    """
    return build_erm_reference(cfg)


def pooled_reference(X: np.ndarray, k: int, center: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-k eigenpairs of the pooled covariance of ``X``
    (:func:`fl_strategies.kernels.metrics.pooled_covariance`).

    Parameters
    ----------
    X : ndarray of shape (n, d)
    k : int
    center : bool

    Returns
    -------
    values : ndarray of shape (k,)
    vectors : ndarray of shape (d, k)
    """
    return top_eigenvectors(pooled_covariance([X], center=center), k)
