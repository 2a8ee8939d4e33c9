"""Datasets for fedspectral simulations.

Every dataset is a matrix ``X`` of shape ``(n, d)`` whose rows are samples,
optionally with per-row class ``labels`` and per-row ``groups`` (the natural
owner of a row, used by the ``"group"`` partitioner).

Available datasets (config key ``"dataset"``):

``"fedpower-model1"``
    Model I of the FedPower paper: a spiked covariance model
    ``Sigma = U U^T + 0.36 I`` with ``U = orth(G)``, ``G_ij ~ N(0.5, 1)``.
``"fedpower-model1-lazy"``
    Model I generated one partition at a time, for large populations: the
    basis ``U`` is that of ``"fedpower-model1"`` (:func:`model1_basis`), and
    the rows of partition ``i`` come from ``default_rng([seed, 1, i])`` alone,
    so a client builds its own rows without the rest of the data set
    (:func:`lazy_partition`). Partition ``i`` has the ``i``-th block size of
    ``np.array_split`` of ``num-samples`` rows into ``num-clients`` blocks; the
    whole matrix is the blocks stacked in partition order (the partitioner
    must be ``"contiguous"``). Its rows differ from ``"fedpower-model1"``'s
    (other random streams), its distribution is the same.
``"fedpower-model2"``
    Model II of the FedPower paper: a multi-layer stochastic block model,
    one layer (a ``d x d`` adjacency matrix) per client, stacked vertically.
``"digits"``
    scikit-learn's bundled 8x8 handwritten digits (1797 x 64, labels 0..9).
``"faps-geometric"``, ``"faps-arithmetic"``
    The FAPS paper's synthetic matrices (eqs. 23-24): ``A = U Sigma V^T`` with
    ``U`` (d x d) and ``V`` (n x d) orthonormalised iid Uniform[-1, 1]
    matrices; rows are the samples, ``X = A^T = V Sigma U^T``. Geometric:
    ``Sigma_ii = xi^(1-i)``; arithmetic (Sec. 5.6):
    ``Sigma_ii = 1 - (i-1)/(d-1) (1 - 1/kappa)``.
``"<path>.npy"`` / ``"<path>.csv"``
    A user file whose rows are samples.

After loading, rows are scaled to unit L2 norm when ``row_normalize``
(config key ``"row-normalize"``) is true; all-zero rows stay zero.
"""

from __future__ import annotations

import difflib
import math
import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from fl_strategies.files.data_files import FILE_SUFFIXES, normalize_rows, read_samples

from simulations.data.erm_rows import generate as generate_erm_rows

DATASET_NAMES = ("fedpower-model1", "fedpower-model1-lazy", "fedpower-model2", "digits", "faps-geometric", "faps-arithmetic",
                 "mf-synthetic", "mf-step", "mf-decay", "erm-logistic", "erm-ridge", "dp-haar", "dp-coherent")
"""Built-in dataset names accepted by :func:`load_dataset` (``erm-*``: :func:`simulations.data.erm_rows.generate`)."""

GENERATOR_SIZE = {"num-samples": 10_000, "dimension": 50}
"""The size of a generated data set whose ``num-samples`` / ``dimension`` is 0 (the run config's default: a file
or a bundled set then keeps all its rows and its width, so neither key needs setting for one)."""


def sized(cfg: Mapping[str, Any]) -> Mapping[str, Any]:
    """``cfg`` with :data:`GENERATOR_SIZE` where a generator's ``num-samples`` / ``dimension`` is 0.

    The one place that gives 0 its meaning for a generated data set; files,
    folders and bundled sets (``digits``) are returned unchanged (0 = all
    rows / their width).
    """
    if cfg["dataset"] not in DATASET_NAMES or cfg["dataset"] == "digits":
        return cfg
    zeros = {key: value for key, value in GENERATOR_SIZE.items() if cfg.get(key) == 0}
    return {**cfg, **zeros} if zeros else cfg


MODEL1_NOISE_STD = 0.6
"""Noise standard deviation of Model I (so ``Sigma = U U^T + 0.36 I``)."""

MODEL1_LOADING_MEAN = 0.5
"""Mean of the iid Gaussian entries of ``G`` in Model I (variance 1)."""

SBM_BASE = np.array([[0.25, 0.1], [0.1, 0.25]])
"""Base connectivity matrix ``W`` of Model II."""

SBM_SCALES = (0.8, 0.6)
"""Model II scales: ``B = 0.8 W`` for the first ``ceil(L/2)`` layers, else ``0.6 W``."""

DIGITS_SHAPE = (1797, 64)
"""Shape of scikit-learn's bundled digits data."""



@dataclass(frozen=True)
class Dataset:
    """A data matrix with optional per-row annotations.

    Attributes
    ----------
    X : np.ndarray, shape (n, d), float64
        Data matrix; rows are samples.
    labels : np.ndarray of shape (n,), int64, or None
        Class label of each row, if the dataset has labels.
    groups : np.ndarray of shape (n,), int64, or None
        Natural owner of each row (Model II: the layer index), or None.
    name : str
        Dataset name as given in the config (key ``"dataset"``).
    """

    X: np.ndarray
    labels: np.ndarray | None
    groups: np.ndarray | None
    name: str

    def __post_init__(self) -> None:
        if self.X.ndim != 2:
            raise ValueError(f"Dataset.X must be 2-D, got shape {self.X.shape}")
        n = self.X.shape[0]
        for field, values in (("labels", self.labels), ("groups", self.groups)):
            if values is not None and values.shape != (n,):
                raise ValueError(
                    f"Dataset.{field} must have shape ({n},) to match X, "
                    f"got {values.shape}"
                )


# ---------------------------------------------------------------------------
# Public entry point
# ---------------------------------------------------------------------------


def load_dataset(
    name: str,
    *,
    num_samples: int,
    dimension: int,
    rank: int,
    num_clients: int,
    seed: int,
    row_normalize: bool,
    xi: float = 1.01,
    kappa: float = 100.0,
    mf_noise: float = 0.0,
) -> Dataset:
    """Load or generate a dataset by name.

    Parameters
    ----------
    name : str
        Config key ``"dataset"``: one of :data:`DATASET_NAMES` or a path
        ending in ``.npy`` / ``.csv``.
    num_samples : int
        Config key ``"num-samples"``. Model I: the number of rows ``n >= 1``.
        Digits and user files: ``0`` keeps all rows, otherwise the first
        ``num_samples`` rows of a seeded permutation are kept (in permuted
        order). Ignored by Model II, which always has ``num_clients * d`` rows.
    dimension : int
        Config key ``"dimension"``. Models I and II: the number of columns
        ``d``. Digits and user files: ``0`` (use the data's own width) or
        exactly the data's column count.
    rank : int
        Config key ``"rank"``. Model I: spike rank ``k``, ``1 <= k < d``.
        Not used by the other datasets.
    num_clients : int
        Config key ``"num-clients"``. Model II: the number of layers ``L``.
        Not used by the other datasets.
    seed : int
        Seed for ``np.random.default_rng``; all randomness comes from it.
    row_normalize : bool
        Config key ``"row-normalize"``: scale every row to unit L2 norm (the
        FAPS generators define their spectrum before it: use false there).
    mf_noise : float
        Config key ``"mf-noise"``: the noise std of ``mf-synthetic``, the tail
        singular value of ``mf-step`` (see :func:`_load_mf`).
    xi, kappa : float
        Config keys ``"xi"`` and ``"kappa"``: the spectra of the FAPS
        generators (``num_samples`` is their ``m >= dimension``).

    Returns
    -------
    Dataset
        ``X`` has shape ``(n, d)`` and dtype float64.

    Raises
    ------
    ValueError
        On an unknown name, an invalid parameter or an unreadable file; the
        message names the offending config key.
    """
    if not isinstance(name, str):
        raise ValueError(f'"dataset" must be a string, got {name!r}')
    if name == "fedpower-model1":
        X, labels, groups = _load_model1(num_samples, dimension, rank, seed)
    elif name in LAZY_DATASETS:  # the blocks stacked: only for small sizes; clients use lazy_partition
        n, m = _as_int("num-samples", num_samples), _as_int("num-clients", num_clients)
        X = np.vstack([lazy_partition(name, i, num_samples=n, dimension=dimension, rank=rank, num_clients=m,
                                      seed=seed, row_normalize=False) for i in range(m)])
        labels = groups = None
    elif name == "fedpower-model2":
        X, labels, groups = _load_model2(dimension, num_clients, seed)
    elif name == "digits":
        X, labels, groups = _load_digits(num_samples, dimension, seed)
    elif name in ("faps-geometric", "faps-arithmetic"):
        X, labels, groups = _load_faps(name, num_samples, dimension, seed, xi, kappa)
    elif name in ("mf-synthetic", "mf-step", "mf-decay"):
        X, labels, groups = _load_mf(name, num_samples, dimension, rank, seed, mf_noise)
    elif name in ("erm-logistic", "erm-ridge"):  # supervised rows [x, y] for FedLRGD / FedAve
        X, labels, groups = generate_erm_rows(name, num_samples, dimension, seed), None, None
    elif name in ("dp-haar", "dp-coherent"):  # planted spectra of the DP power-method notes
        from simulations.data.dp_data import planted_rows

        X, labels, groups = planted_rows(name, dimension, rank, seed)[0], None, None
    elif name.lower().endswith(FILE_SUFFIXES):
        X, labels, groups = _load_file(name, num_samples, dimension, seed)
    else:
        raise ValueError(_unknown_dataset_message(name))
    if row_normalize:
        X = normalize_rows(X)
    return Dataset(X=X, labels=labels, groups=groups, name=name)


# ---------------------------------------------------------------------------
# Model I: spiked covariance
# ---------------------------------------------------------------------------


def model1_basis(dimension: int, rank: int, seed: int) -> np.ndarray:
    """Return the Model I spike basis ``U = orth(G)`` used for ``seed``.

    This is exactly the basis :func:`load_dataset` uses for
    ``"fedpower-model1"`` with the same ``dimension``, ``rank`` and ``seed``.

    Parameters
    ----------
    dimension : int
        Ambient dimension ``d``.
    rank : int
        Spike rank ``k``, ``1 <= k < d``.
    seed : int
        Seed for ``np.random.default_rng``.

    Returns
    -------
    np.ndarray, shape (d, k)
        Orthonormal columns spanning the spike subspace.
    """
    _check_model1_shape(dimension, rank)
    return _model1_basis(np.random.default_rng(seed), dimension, rank)


def _model1_basis(rng: np.random.Generator, d: int, k: int) -> np.ndarray:
    """Draw ``G`` (d, k) with iid N(0.5, 1) entries and orthonormalise it."""
    G = rng.normal(MODEL1_LOADING_MEAN, 1.0, size=(d, k))
    U, _ = np.linalg.qr(G)
    return U


def _check_model1_shape(dimension: int, rank: int) -> None:
    dimension = _as_int("dimension", dimension)
    rank = _as_int("rank", rank)
    if dimension < 2:
        raise ValueError(
            f'"dimension" is {dimension} but fedpower-model1 needs dimension >= 2'
        )
    if not 1 <= rank < dimension:
        raise ValueError(
            f'"rank" is {rank} but fedpower-model1 needs 1 <= rank < dimension '
            f"(dimension is {dimension})"
        )


def _load_model1(num_samples, dimension, rank, seed):
    """Generate Model I rows ``x = U g + 0.6 z``; returns ``(X, None, None)``."""
    _check_model1_shape(dimension, rank)
    n = _as_int("num-samples", num_samples)
    if n < 1:
        raise ValueError(f'"num-samples" is {n} but fedpower-model1 needs >= 1 rows')
    rng = np.random.default_rng(seed)
    U = _model1_basis(rng, dimension, rank)
    g = rng.standard_normal((n, rank))
    z = rng.standard_normal((n, dimension))
    X = g @ U.T + MODEL1_NOISE_STD * z
    return X, None, None


# ---------------------------------------------------------------------------
# Lazy data sets: one partition at a time, from (seed, partition id)
# ---------------------------------------------------------------------------

LAZY_DATASETS = ("fedpower-model1-lazy",)
"""Data sets whose partitions are generated alone (:func:`lazy_partition`)."""


def lazy_partition_sizes(num_samples: int, num_clients: int) -> np.ndarray:
    """Row counts of the partitions of a lazy data set (the block sizes of ``np.array_split``).

    Parameters
    ----------
    num_samples : int
        ``n``, config key ``"num-samples"``.
    num_clients : int
        ``m``, config key ``"num-clients"``; ``1 <= m <= n``.

    Returns
    -------
    ndarray of shape (m,), int64
        ``n // m + 1`` for the first ``n % m`` partitions, ``n // m`` for the others.

    Raises
    ------
    ValueError
        If ``m < 1`` or ``m > n`` (some partition would be empty), naming the keys.
    """
    n, m = _as_int("num-samples", num_samples), _as_int("num-clients", num_clients)
    if not 1 <= m <= n:
        raise ValueError(f'"num-clients" is {m} but a lazy data set needs 1 <= num-clients <= "num-samples" = {n}')
    return np.where(np.arange(m) < n % m, n // m + 1, n // m).astype(np.int64)


def lazy_partition(name: str, partition_id: int, *, num_samples: int, dimension: int, rank: int,
                   num_clients: int, seed: int, row_normalize: bool) -> np.ndarray:
    """The rows of one partition of a lazy data set, generated without the others.

    Cost: ``O(s_i d)`` time and memory (plus the ``d x k`` basis), whatever
    the number of clients.

    Parameters
    ----------
    name : str
        One of :data:`LAZY_DATASETS`.
    partition_id : int
        ``0 <= i < num_clients``.
    num_samples, dimension, rank, num_clients, seed, row_normalize
        As for :func:`load_dataset`.

    Returns
    -------
    ndarray of shape (s_i, d)
        ``s_i = lazy_partition_sizes(num_samples, num_clients)[i]``.
    """
    if name not in LAZY_DATASETS:
        raise ValueError(f'"dataset" {name!r} is not generated per partition; lazy data sets: '
                         f"{', '.join(LAZY_DATASETS)}")
    n, m = _as_int("num-samples", num_samples), _as_int("num-clients", num_clients)
    if not 1 <= m <= n:
        lazy_partition_sizes(n, m)  # raises, naming the keys
    i = _as_int("partition-id", partition_id)
    if not 0 <= i < m:
        raise ValueError(f"partition-id {i} is outside 0..num-clients-1 = {m - 1}")
    d, k = _as_int("dimension", dimension), _as_int("rank", rank)
    U = _cached_model1_basis(d, k, _as_int("data-seed", seed))
    rng = np.random.default_rng([seed, 1, i])
    s = n // m + (1 if i < n % m else 0)  # = lazy_partition_sizes(n, m)[i], in O(1)
    X = rng.standard_normal((s, k)) @ U.T + MODEL1_NOISE_STD * rng.standard_normal((s, d))
    return normalize_rows(X) if row_normalize else X


@lru_cache(maxsize=4)
def _cached_model1_basis(dimension: int, rank: int, seed: int) -> np.ndarray:
    return model1_basis(dimension, rank, seed)


def faps_singular_values(name: str, dimension: int, xi: float, kappa: float) -> np.ndarray:
    """Singular values of the FAPS generators, descending, shape ``(dimension,)``."""
    i = np.arange(dimension, dtype=np.float64)
    if name == "faps-geometric":
        if not xi > 1:
            raise ValueError(f'"xi" is {xi} but faps-geometric needs xi > 1')
        return xi ** (-i)
    if not kappa > 1:
        raise ValueError(f'"kappa" is {kappa} but faps-arithmetic needs kappa > 1')
    return 1.0 - i / max(dimension - 1, 1) * (1.0 - 1.0 / kappa)


def _load_faps(name, num_samples, dimension, seed, xi, kappa):
    """``X = V Sigma U^T`` (eqs. 23-24 transposed: rows are samples); returns ``(X, None, None)``."""
    d = _as_int("dimension", dimension)
    m = _as_int("num-samples", num_samples)
    if d < 2 or m < d:
        raise ValueError(f'{name} needs "dimension" >= 2 and "num-samples" >= "dimension"; got {d} and {m}')
    sigma = faps_singular_values(name, d, xi, kappa)
    rng = np.random.default_rng(seed)
    U, _ = np.linalg.qr(rng.uniform(-1.0, 1.0, (d, d)))
    V, _ = np.linalg.qr(rng.uniform(-1.0, 1.0, (m, d)))
    return (V * sigma) @ U.T, None, None


def _load_mf(name, num_samples, dimension, rank, seed, noise):
    """Generators of the low-rank MF paper (spec ``lowrank_mf.md`` 5.1, checks 4-5); returns ``(S, None, None)``.

    * ``mf-synthetic``: ``S = U_X V_X^T + E`` with ``U_X`` (n x rank), ``V_X``
      (d x rank) Haar-orthonormal (QR of Gaussians), all ``rank`` singular values
      1, and ``E`` iid N(0, noise^2) (the paper's synthetic set: n = 5000,
      d = 200, rank = 5, noise 0 or 1e-6);
    * ``mf-step``: singular values ``1`` (``rank`` of them), then ``noise``;
    * ``mf-decay``: singular values ``100 / k``, k = 1 .. min(n, d).
    """
    n, d, k = _as_int("num-samples", num_samples), _as_int("dimension", dimension), _as_int("rank", rank)
    if n < 1 or d < 1 or not 1 <= k <= min(n, d):
        raise ValueError(f'{name} needs "num-samples" >= 1, "dimension" >= 1 and 1 <= "rank" <= min(n, d); got '
                         f"{n}, {d} and {k}")
    if not (math.isfinite(noise) and noise >= 0):
        raise ValueError(f'"mf-noise" must be a finite number >= 0, got {noise}')
    rng = np.random.default_rng(seed)
    if name == "mf-synthetic":
        U, _ = np.linalg.qr(rng.standard_normal((n, k)))
        V, _ = np.linalg.qr(rng.standard_normal((d, k)))
        S = U @ V.T
        return (S + rng.normal(0.0, noise, (n, d)) if noise > 0 else S), None, None
    p = min(n, d)
    sigma = (np.where(np.arange(p) < k, 1.0, noise) if name == "mf-step"
             else 100.0 / np.arange(1, p + 1, dtype=np.float64))
    U, _ = np.linalg.qr(rng.standard_normal((n, p)))
    V, _ = np.linalg.qr(rng.standard_normal((d, p)))
    return (U * sigma) @ V.T, None, None


# ---------------------------------------------------------------------------
# Model II: multi-layer stochastic block model
# ---------------------------------------------------------------------------


def sbm_layers(num_layers: int, dimension: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Draw the raw (un-normalised) Model II adjacency layers.

    Parameters
    ----------
    num_layers : int
        Number of layers ``L`` (config key ``"num-clients"``), ``L >= 1``.
    dimension : int
        Number of nodes ``d`` (config key ``"dimension"``), ``d >= 2``.
    seed : int
        Seed for ``np.random.default_rng``.

    Returns
    -------
    layers : np.ndarray, shape (L, d, d), float64
        Symmetric 0/1 adjacency matrices with zero diagonal. Layer ``l`` has
        ``[M_l]_ij ~ Bernoulli(B_{g_i g_j})`` for ``i < j`` (mirrored), with
        ``B = 0.8 W`` for ``l < ceil(L/2)`` and ``B = 0.6 W`` otherwise,
        ``W = [[0.25, 0.1], [0.1, 0.25]]``.
    communities : np.ndarray, shape (d,), int64
        Community (0 or 1) of each node: a random balanced split shared by
        all layers (``d // 2`` nodes in community 1).
    """
    L = _as_int("num-clients", num_layers)
    d = _as_int("dimension", dimension)
    if L < 1:
        raise ValueError(f'"num-clients" is {L} but fedpower-model2 needs >= 1 layers')
    if d < 2:
        raise ValueError(f'"dimension" is {d} but fedpower-model2 needs >= 2 nodes')
    rng = np.random.default_rng(seed)
    communities = np.zeros(d, dtype=np.int64)
    communities[rng.permutation(d)[: d // 2]] = 1
    first_half = math.ceil(L / 2)
    layers = np.empty((L, d, d), dtype=np.float64)
    for layer in range(L):
        scale = SBM_SCALES[0] if layer < first_half else SBM_SCALES[1]
        layers[layer] = _sbm_layer(rng, scale * SBM_BASE, communities)
    return layers, communities


def _sbm_layer(rng: np.random.Generator, B: np.ndarray, communities: np.ndarray) -> np.ndarray:
    """One symmetric 0/1 adjacency matrix (d, d) with zero diagonal."""
    probs = B[np.ix_(communities, communities)]
    upper = np.triu(rng.random(probs.shape) < probs, k=1)
    return (upper | upper.T).astype(np.float64)


def _load_model2(dimension, num_clients, seed):
    """Stack the Model II layers; labels = node community, groups = layer."""
    layers, communities = sbm_layers(num_clients, dimension, seed)
    L, d, _ = layers.shape
    X = layers.reshape(L * d, d)
    labels = np.tile(communities, L)
    groups = np.repeat(np.arange(L, dtype=np.int64), d)
    return X, labels, groups


# ---------------------------------------------------------------------------
# Digits and user files
# ---------------------------------------------------------------------------


def _load_digits(num_samples, dimension, seed):
    """scikit-learn digits as float64, optionally subsampled."""
    from sklearn.datasets import load_digits

    dimension = _as_int("dimension", dimension)
    if dimension not in (0, DIGITS_SHAPE[1]):
        raise ValueError(
            f'"dimension" is {dimension} but digits has {DIGITS_SHAPE[1]} columns; '
            f"use 0 or {DIGITS_SHAPE[1]}"
        )
    bunch = load_digits()
    X = np.asarray(bunch.data, dtype=np.float64)
    labels = np.asarray(bunch.target, dtype=np.int64)
    rows = _subsample_rows(X.shape[0], num_samples, seed, "digits")
    if rows is None:
        return X, labels, None
    return X[rows], labels[rows], None


def _subsample_rows(n: int, num_samples, seed: int, what: str) -> np.ndarray | None:
    """Indices of the first ``num_samples`` of a seeded permutation, or None for all."""
    k = _as_int("num-samples", num_samples)
    if k == 0:
        return None
    if not 1 <= k <= n:
        raise ValueError(
            f'"num-samples" is {k} but {what} has {n} rows; use 0 (all rows) '
            f"or a value between 1 and {n}"
        )
    return np.random.default_rng(seed).permutation(n)[:k]


def _load_file(name: str, num_samples, dimension, seed):
    """Load a user ``.npy`` / ``.csv`` file (:func:`fl_strategies.files.data_files.read_samples`), optionally
    subsample."""
    if not os.path.exists(name):  # a FIFO or a device is named as what it is by read_samples
        raise ValueError(
            f'"dataset" is {name!r}: file not found (FileNotFoundError); give an '
            f"existing .npy/.csv path or one of {', '.join(DATASET_NAMES)}"
        )
    X = read_samples(name, '"dataset" file')
    dimension = _as_int("dimension", dimension)
    if dimension not in (0, X.shape[1]):
        raise ValueError(
            f'"dimension" is {dimension} but {name!r} has {X.shape[1]} columns; '
            f"use 0 or {X.shape[1]}"
        )
    rows = _subsample_rows(X.shape[0], num_samples, seed, repr(name))
    if rows is not None:
        X = X[rows]
    return X, None, None


# ---------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------


def _as_int(key: str, value) -> int:
    """Return ``value`` as an int, or raise a ValueError naming ``key``."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f'"{key}" must be an integer, got {value!r}')
    return int(value)


def _unknown_dataset_message(name: str) -> str:
    message = (
        f'"dataset" is {name!r}, which is not a known dataset; use one of '
        f"{', '.join(DATASET_NAMES)} or a path ending in .npy or .csv"
    )
    close = difflib.get_close_matches(name, DATASET_NAMES, n=1)
    if close:
        message += f" (did you mean {close[0]!r}?)"
    return message
