"""The pooled mean and per-column spread of all clients' rows from per-client sums: centring and ``scale``.

Each client sends, once at discovery, its row count ``s_i``, its row sum
``t_i = sum_j x_j`` (d,) and, for ``scale = true``, its per-column sum of
squared deviations about its own mean ``q_i = sum_j (x_j - m_i)^2`` (d,),
``m_i = t_i / s_i``. The server combines them as Chan, Golub and LeVeque's
pairwise variance does,

``n var = sum_i q_i + sum_i s_i (m_i - mu)^2``,  ``mu = sum_i t_i / n``,

free of the cancellation of ``sum x^2 - n mu^2`` (its accuracy is then that of
the float64 row sums, which the mean is formed from as well). The scale is the population
standard deviation (``ddof = 0``) with constant columns given scale 1, as
:class:`sklearn.preprocessing.StandardScaler` computes ``scale_``. A client then
works on ``(x - mu) / scale``: its centred second-moment matrix ``A_i`` becomes
``D^{-1} A_i D^{-1}`` with ``D = diag(scale)``.

Genotypes with missing calls count per column: ``s_i`` is then each client's
non-missing calls per variant ``c_i`` (d,), every sum is over non-missing
calls, and ``mu`` is twice the federation's allele frequency ``p``; a missing call becomes
``mu`` (0 after centring), as ``plink2 --pca`` imputes. ``scale = "hwe"`` divides every variant by
``sqrt(2 p (1 - p))`` (:func:`hwe_scale`; Patterson, Price and Reich 2006) instead of its standard deviation.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

__all__ = ["pooled_mean", "between_sum_of_squares", "pooled_variance", "constant_columns", "column_scale",
           "hwe_scale", "scales", "SCALINGS"]


def _ratio(top, bottom) -> np.ndarray:
    """``top / bottom`` elementwise, 0 where ``bottom`` is 0 (a variant without a call)."""
    top = np.asarray(top, dtype=np.float64)
    bottom = np.broadcast_to(np.asarray(bottom, dtype=np.float64), top.shape)
    return np.divide(top, bottom, out=np.zeros_like(top), where=bottom > 0)


def pooled_mean(sizes: Sequence, row_sums: Sequence[np.ndarray]) -> np.ndarray:
    """``mu = sum_i t_i / sum_i s_i``, shape (d,), from the clients' row counts and row sums (d,) each.

    A size may be a (d,) array of non-missing calls per column; a column without a call gets mean 0.
    """
    return _ratio(sum(row_sums), sum(sizes))


def between_sum_of_squares(sizes: Sequence[int], row_sums: Sequence[np.ndarray], mean: np.ndarray) -> np.ndarray:
    """``sum_i s_i (m_i - mu)^2`` per column, shape (d,): what the clients' own means add to their sums of squares.

    Parameters
    ----------
    sizes : sequence of int or of ndarray of shape (d,)
        ``s_i``, or the non-missing calls per column ``c_i``.
    row_sums : sequence of ndarray of shape (d,)
        ``t_i``, in the order of ``sizes``.
    mean : ndarray of shape (d,)
        ``mu``, the pooled mean.
    """
    total = np.zeros_like(np.asarray(mean, dtype=np.float64))
    for s, t in zip(sizes, row_sums):
        gap = _ratio(t, s) - mean
        total += s * gap * gap
    return total


def pooled_variance(sizes: Sequence[int], row_sums: Sequence[np.ndarray], column_sq_sums: Sequence[np.ndarray],
                    mean: np.ndarray) -> np.ndarray:
    """Population variance (``ddof = 0``) of every column over all clients' rows, shape (d,).

    Parameters
    ----------
    sizes, row_sums : as :func:`between_sum_of_squares`.
    column_sq_sums : sequence of ndarray of shape (d,)
        ``q_i``: each client's per-column sum of squared deviations about its own mean.
    mean : ndarray of shape (d,)
        ``mu``.
    """
    within = sum(np.asarray(q, dtype=np.float64) for q in column_sq_sums)
    return _ratio(within + between_sum_of_squares(sizes, row_sums, mean), sum(sizes))


def constant_columns(variance: np.ndarray, mean: np.ndarray, n_samples: int) -> np.ndarray:
    """Which columns are constant up to rounding, shape (d,) bool.

    A column counts as constant when its variance is within the rounding error of a two-pass variance,
    ``var <= n eps var + (n mu eps)^2`` (Chan, Golub and LeVeque), the rule of scikit-learn's ``StandardScaler``.
    """
    variance = np.asarray(variance, dtype=np.float64)
    eps = np.finfo(np.float64).eps
    return variance <= n_samples * eps * variance + (n_samples * np.asarray(mean, dtype=np.float64) * eps) ** 2


def column_scale(variance: np.ndarray, mean: np.ndarray, n_samples: int) -> np.ndarray:
    """``sqrt(variance)``, with 1 for the :func:`constant_columns`, shape (d,): ``StandardScaler.scale_``.

    A constant column keeps its (centred, ~0) values instead of being divided by ~0.
    """
    scale = np.sqrt(np.clip(np.asarray(variance, dtype=np.float64), 0.0, None))
    scale[constant_columns(variance, mean, n_samples)] = 1.0
    return scale


def hwe_scale(mean: np.ndarray) -> np.ndarray:
    """``sqrt(2 p (1 - p))`` per variant with ``p = mean / 2`` the allele frequency, shape (d,).

    A monomorphic variant (``p`` 0 or 1, or no call) gets scale 1: its centred calls are all 0, so it adds nothing
    to the products.
    """
    p = np.asarray(mean, dtype=np.float64) / 2.0
    variance = 2.0 * p * (1.0 - p)
    return np.where(variance > 0, np.sqrt(np.clip(variance, 0.0, None)), 1.0)


SCALINGS = ("false", "true", "hwe")
"""The ``scale`` setting's choices, as :func:`fl_strategies.settings.config.column_scaling` gives them."""


def scales(kind: str, variance: np.ndarray, mean: np.ndarray, n_samples) -> np.ndarray | None:
    """The columns' scales of the run's ``scale`` setting ``kind``, shape (d,), or ``None`` (no scaling).

    ``kind`` is ``"false"`` (``None``), ``"true"`` (:func:`column_scale` of ``variance``) or ``"hwe"``
    (:func:`hwe_scale` of ``mean``): the setting as the caller normalised it
    (:func:`fl_strategies.settings.config.column_scaling`, which also reads an older boolean).
    """
    if not isinstance(kind, str) or kind not in SCALINGS:
        raise ValueError(f"scale must be one of {', '.join(SCALINGS)} (a setting normalised by column_scaling), "
                         f"got {kind!r}")
    if kind == "false":
        return None
    if kind == "hwe":
        return hwe_scale(mean)
    return column_scale(variance, mean, n_samples)
