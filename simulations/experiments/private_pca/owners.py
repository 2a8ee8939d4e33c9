"""Data of the private-PCA experiments: owners whose rows have their own means, scaled to unit norm.

Owner ``i`` draws ``x = m_i + U diag(sqrt(lam)) z + noise`` (``U`` a fixed ``d x k`` orthonormal basis, ``z``
standard normal, ``m_i`` its own mean) and scales every row to unit L2 norm, as ``row-normalize`` does. The
pooled rows then have a mean far from zero and a centred covariance whose top ``k`` eigenvectors differ from
the uncentred ones: a model that ignores the mean is measurably wrong.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from fl_strategies.files.plain_files import write_file
from fl_strategies.kernels.linalg import top_eigenvectors

__all__ = ["owner_rows", "write_folder", "centred_pca"]


def owner_rows(num_owners: int = 4, num_rows: int = 8000, dimension: int = 40, rank: int = 3,
               seed: int = 0) -> list[np.ndarray]:
    """``num_owners`` blocks of unit rows (equal sizes), shape ``(num_rows / num_owners, dimension)`` each."""
    rng = np.random.default_rng([seed, 22])
    U = np.linalg.qr(rng.standard_normal((dimension, rank)))[0]
    lam = np.linspace(1.0, 0.5, rank)
    common = rng.standard_normal(dimension)
    common *= 1.0 / np.linalg.norm(common)
    blocks = []
    for _ in range(num_owners):
        own = rng.standard_normal(dimension)
        mean = common + 0.6 * own / np.linalg.norm(own)
        s = num_rows // num_owners
        X = mean + (rng.standard_normal((s, rank)) * np.sqrt(lam)) @ U.T + 0.15 * rng.standard_normal((s, dimension))
        blocks.append(X / np.linalg.norm(X, axis=1, keepdims=True))
    return blocks


def write_folder(blocks: list[np.ndarray], folder: str | Path) -> Path:
    """Write ``partition_<i>.npy`` per owner (a ``dataset`` folder: client ``i`` reads only its own file)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for i, X in enumerate(blocks):
        write_file(folder / f"partition_{i}.npy", lambda handle: np.save(handle, X, allow_pickle=False))
    return folder


def centred_pca(blocks: list[np.ndarray], k: int) -> tuple[np.ndarray, np.ndarray]:
    """The exact centred PCA of the pooled rows: ``(mean (d,), top-k eigenvectors (d, k))`` by ``eigh``."""
    X = np.vstack(blocks)
    mu = X.mean(axis=0)
    C = (X - mu).T @ (X - mu) / X.shape[0]
    return mu, top_eigenvectors(C, k)[1]
