"""Synthetic supervised rows ``[x, y]`` of the ``erm-*`` data sets (FedLRGD / FedAve).

Apart from :mod:`simulations.data.erm_data` (splits and the ERM reference), so that
:mod:`simulations.data.datasets` can generate them without importing that module, which imports it.
"""

from __future__ import annotations

import numpy as np
from scipy.special import expit

__all__ = ["ERM_DATASETS", "generate"]

ERM_DATASETS = ("erm-logistic", "erm-ridge")


def generate(name: str, num_samples: int, dimension: int, seed: int) -> np.ndarray:
    """Rows ``[x, y]`` of a synthetic supervised data set.

    Parameters
    ----------
    name : {"erm-logistic", "erm-ridge"}
    num_samples : int
        ``n``.
    dimension : int
        ``d = p + 1 >= 2``.
    seed : int

    Returns
    -------
    ndarray of shape (n, d)
    """
    if dimension < 2:
        raise ValueError(f'"dimension" of {name} must be at least 2 (features and a label), got {dimension}')
    if num_samples < 1:
        raise ValueError(f'"num-samples" of {name} must be at least 1, got {num_samples}')
    rng = np.random.default_rng([seed, 404])
    p = dimension - 1
    w = rng.uniform(-1.0, 1.0, size=p)
    X = rng.uniform(0.0, 1.0, size=(num_samples, p))
    noise = rng.standard_normal(num_samples)
    y = expit(X @ w + 0.25 * noise) if name == "erm-logistic" else X @ w + 0.1 * noise
    return np.column_stack([X, y])
