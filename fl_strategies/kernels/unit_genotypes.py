"""A ``.bed`` file's people as unit rows, for the private products, without decoding the file into memory.

With ``row-normalize`` a private strategy's rows are ``u_i = x_i / ||x_i||``, ``x_i`` a person's allele counts
(uncentred, no missing call: a private run refuses them). Decoding every person's row to float64 first takes
``8 s d`` bytes (4 GB for 25,000 people at d = 20,000) at every message; here the file stays memory-mapped and
each product is the weighted one of :class:`~fl_strategies.kernels.rows.BedVariants`:

    ``sum_i u_i u_i^T Z = X^T diag(w) X Z``,  ``w_i = 1 / ||x_i||^2``  (0 for a person without a counted allele),

and the row sum ``sum_i u_i = X^T (1 / ||x_i||)``, each one read of the file (two for a product). The row norms
take one read, the first time a view of the file object is made.
"""

from __future__ import annotations

import weakref
from typing import Iterator

import numpy as np

from .rows import MISSING_CODE, BedVariants

__all__ = ["UnitGenotypes"]

_NORMS: "weakref.WeakKeyDictionary[BedVariants, np.ndarray]" = weakref.WeakKeyDictionary()
"""``||x_i||`` per file object: a node process keeps its file's object (cached per file version) and rebuilds its
client at every message; the norms are read once per object (a subset or aligned copy is another object)."""


class UnitGenotypes:
    """The people of a genotype file as unit rows ``u_i = x_i / ||x_i||`` (module docstring), shape (s, d).

    Parameters
    ----------
    bed : BedVariants
        The file (its people and variant list as the run uses them), without missing calls.

    Attributes
    ----------
    num_rows, dimension : int
        ``s`` and ``d``.
    norms : ndarray of shape (s,)
        ``||x_i||`` of the allele counts.
    rows : ndarray of shape (d, ceil(s / 4)), uint8
        The file's bytes (what a node-secret noise stream digests as "the data").
    """

    sparse, normalize, clip, ndim = False, False, 0.0, 2  # normalize: the rows are unit already, never again

    def __init__(self, bed: BedVariants) -> None:
        if bed.code_counts[:, MISSING_CODE].any():  # a private run never imputes
            raise ValueError("the genotypes have missing calls, which a row-normalised private run cannot impute")
        self.bed = bed
        self.num_rows, self.dimension = bed.num_rows, bed.dimension
        self.shape = (self.num_rows, self.dimension)
        self.rows = bed.rows
        if bed not in _NORMS:
            _NORMS[bed] = np.sqrt(bed.row_squares(np.zeros(self.dimension)))
        self.norms = _NORMS[bed]
        self.inverse = np.divide(1.0, self.norms, out=np.zeros(self.num_rows), where=self.norms > 0)
        self._weighted = bed.weighted(self.inverse * self.inverse)
        self._stats: tuple[np.ndarray, np.ndarray] | None = None

    def product(self, Z: np.ndarray) -> np.ndarray:
        """``sum_i u_i u_i^T Z`` (d, r) for ``Z`` (d, r): two reads of the file, no ``d x d`` or ``s x d`` array."""
        return self._weighted.product(np.asarray(Z, dtype=np.float64))

    def stats(self) -> tuple[np.ndarray, np.ndarray]:
        """``(sum_i u_i, sum_i u_i**2)``, both (d,) float64: one read for the sum, one block of variants at a time
        for the squares."""
        if self._stats is None:
            total = self.bed.right(self.inverse[:, None])[:, 0]
            squares = np.zeros(self.dimension)
            w = self.inverse * self.inverse
            step = max(1, (1 << 24) // (8 * max(self.num_rows, 1)))
            for start in range(0, self.dimension, step):
                counts = self.bed.column_counts(start, start + step).astype(np.float64)
                squares[start:start + counts.shape[0]] = (counts * counts) @ w
            self._stats = (total, squares)
        return self._stats

    def centered_sum_of_squares(self, mean: np.ndarray) -> float:
        """``sum_i ||u_i - mean||^2 = #{i: x_i != 0} - 2 mean . sum_i u_i + s ||mean||^2`` (at least 0)."""
        mean = np.asarray(mean, dtype=np.float64)
        total = self.stats()[0]
        return max(float(np.count_nonzero(self.norms) - 2.0 * mean @ total + self.num_rows * mean @ mean), 0.0)

    def blocks(self) -> Iterator[np.ndarray]:
        """The unit rows as one float64 (s, d) block (``8 s d`` bytes: for the strategies that read rows)."""
        (X,) = self.bed.blocks()
        X *= self.inverse[:, None]
        yield X
