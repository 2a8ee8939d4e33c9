"""Variant quality control from the federation's per-variant counts: plink2's ``--geno`` and ``--maf``.

The server knows, from what the nodes send at discovery, every variant's non-missing calls ``c`` (summed
``call-count``, or the row counts where a node has no missing call) and its A1 allele sum ``t`` (summed
``row-sum``), over ``n`` people in all. From them, as plink2 defines its filters:

* the missing-call rate ``1 - c / n``; ``--geno g`` drops a variant whose rate is greater than ``g`` (a rate equal
  to ``g`` is kept; plink2 ``--help geno``: "missing call frequencies greater than a threshold");
* the allele frequency over the calls ``p = t / (2 c)`` and the minor (non-major) allele frequency
  ``min(p, 1 - p)``; ``--maf f`` drops a variant whose MAF is lower than ``f`` (equal kept). A variant without a
  call has no frequency and is dropped by any ``f > 0``.

Both statistics are per variant and over every person, so neither filter changes what the other sees: the kept set
is the same in either order. The counts are reported as plink2 logs them, ``--geno`` first, then ``--maf`` among the
variants ``--geno`` kept.
"""

from __future__ import annotations

import numpy as np

__all__ = ["minor_allele_frequency", "missing_rate", "variant_filter"]


def missing_rate(calls: np.ndarray, n: int) -> np.ndarray:
    """``(n - c) / n`` per variant, shape (d,), from the non-missing calls ``calls`` (d,) over ``n`` people (the
    missing calls counted exactly first, so a rate equal to a threshold is not lost to rounding)."""
    return (float(n) - np.asarray(calls, dtype=np.float64)) / float(n)


def minor_allele_frequency(calls: np.ndarray, allele_sums: np.ndarray) -> np.ndarray:
    """``min(p, 1 - p)`` with ``p = t / (2 c)`` per variant, shape (d,); NaN for a variant without a call."""
    calls = np.asarray(calls, dtype=np.float64)
    p = np.divide(np.asarray(allele_sums, dtype=np.float64), 2.0 * calls, out=np.full(calls.shape, np.nan),
                  where=calls > 0)
    return np.minimum(p, 1.0 - p)


def variant_filter(calls: np.ndarray, allele_sums: np.ndarray, n: int, maf_min: float = 0.0,
                   geno_max: float = 1.0) -> tuple[np.ndarray, int, int]:
    """Which variants pass ``--geno geno_max`` and ``--maf maf_min`` (module docstring).

    Parameters
    ----------
    calls : ndarray of shape (d,)
        Every variant's non-missing calls over all sites.
    allele_sums : ndarray of shape (d,)
        Every variant's A1 allele count over those calls (0, 1 or 2 per call).
    n : int
        People in all.
    maf_min, geno_max : float
        The thresholds; ``0`` and ``1`` drop nothing (a variant without a call is kept by ``maf_min = 0``).

    Returns
    -------
    keep : ndarray of shape (d,), bool
        The variants kept.
    dropped_geno : int
        Variants whose missing-call rate is above ``geno_max``.
    dropped_maf : int
        Variants that ``geno_max`` keeps and whose MAF is below ``maf_min``.
    """
    by_geno = missing_rate(calls, n) <= geno_max if geno_max < 1 else np.ones(np.shape(calls), dtype=bool)
    if maf_min > 0:
        maf = minor_allele_frequency(calls, allele_sums)
        by_maf = np.greater_equal(maf, maf_min, where=~np.isnan(maf), out=np.zeros(maf.shape, dtype=bool))
    else:
        by_maf = np.ones(np.shape(calls), dtype=bool)
    keep = by_geno & by_maf
    return keep, int(np.sum(~by_geno)), int(np.sum(by_geno & ~by_maf))
