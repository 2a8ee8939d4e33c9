"""Outliers as smartpca removes them, from sums: each site flags its own people, the server learns counts.

smartpca's rule (eigensoft's ``smartpca.c`` and ``ridoutlier`` in ``smartsubs.c``, default ``outliermode: 0``;
its README: ``numoutlieriter`` 5, ``numoutlierevec`` 10, ``outliersigmathresh`` 6.0):

* after a fit on the ``n`` people still in it, for each of the top ``p = min(numoutlierevec, n - 1)`` PCs (here
  also at most the ``k`` components the model has: :func:`outlier_pcs`), the people's scores ``y`` on it are
  centred on their mean and divided by their standard deviation about that mean with divisor ``n`` (not
  ``n - 1``): ``z = (y - mean(y)) / sqrt(sum((y - mean(y))^2) / n)``. The scale of a PC's scores cancels, so
  plink2's eigenvectors, scikit-learn's scores and smartpca's unit eigenvectors flag the same people;
* a person with ``|z| > sigma`` (strictly) on any of those PCs is removed; with fewer than 3 people none is;
* the fit is run again without them; after at most ``numoutlieriter`` removals (``numoutlieriter + 1`` fits) or
  as soon as a pass removes nobody (the fit of that pass is then the final one), the loop stops.

Federated, the mean and standard deviation of a PC's scores are sums over sites (:func:`score_sums`: each site's
count, sum and sum of squares of its people's scores on the top PCs: counts and sums, never rows), and the
threshold goes back to every site, which flags its own people (:func:`flagged`) and reports how many; the list
stays at the site. :func:`outlier_passes` is the loop over any fit, :func:`site_outliers` a site's list
recomputed from what the passes recorded (each pass's model and the federation's moments), and
:func:`pooled_outliers` smartpca's rule on one pooled score matrix (the reference the tests compare with).
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Sequence

import numpy as np

__all__ = ["SMARTPCA_SIGMA", "outlier_pcs", "score_sums", "federation_moments", "flagged", "pooled_outliers",
           "outlier_passes", "site_outliers"]

log = logging.getLogger("flwr.fedspectral")

SMARTPCA_SIGMA = 6.0
"""smartpca's ``outliersigmathresh`` default."""

MIN_PEOPLE = 3
"""smartpca removes nobody from a fit of fewer people (``ridoutlier``: ``if (n < 3) return 0``)."""


def outlier_pcs(requested: int, k: int, n: int) -> int:
    """The PCs the rule looks at: smartpca's ``min(numoutlierevec, n - 1)``, and at most the model's ``k``
    components (a federated model has no others; ask ``rank >= outlier-pcs`` for smartpca's count)."""
    return max(0, min(int(requested), int(k), int(n) - 1))


def score_sums(scores: np.ndarray) -> tuple[int, np.ndarray, np.ndarray]:
    """A site's part of the federation's moments: ``(s_i, sum of scores (p,), sum of squared scores (p,))`` of
    its people's ``scores`` (s_i, p)."""
    scores = np.asarray(scores, dtype=np.float64)
    return scores.shape[0], scores.sum(axis=0), (scores ** 2).sum(axis=0)


def federation_moments(parts: Sequence[tuple[int, np.ndarray, np.ndarray]]) -> tuple[int, np.ndarray, np.ndarray]:
    """``(n, mean (p,), sd (p,))`` of the pooled scores from the sites' :func:`score_sums`: the mean over all
    ``n`` people and the standard deviation about it with divisor ``n``, as smartpca's (``sum(y^2)/n - mean^2``,
    never below 0)."""
    n = int(sum(part[0] for part in parts))
    if n < 1:
        raise ValueError("no people to take the moments of")
    mean = sum(part[1] for part in parts) / n
    variance = sum(part[2] for part in parts) / n - mean ** 2
    return n, mean, np.sqrt(np.maximum(variance, 0.0))


def flagged(scores: np.ndarray, mean: np.ndarray, sd: np.ndarray, sigma: float) -> np.ndarray:
    """Which of a site's people (rows of ``scores``, (s_i, p)) lie beyond ``sigma`` standard deviations ``sd``
    (p,) of the federation's ``mean`` (p,) on any PC (strictly, as smartpca); a PC of zero spread flags nobody.
    (s_i,) bool."""
    scores = np.asarray(scores, dtype=np.float64)
    if scores.shape[1] == 0:
        return np.zeros(scores.shape[0], dtype=bool)
    spread = np.where(sd > 0, sd, np.inf)
    return np.any(np.abs(scores - mean) / spread > sigma, axis=1)


def pooled_outliers(scores: np.ndarray, sigma: float) -> np.ndarray:
    """smartpca's rule on one pooled score matrix (n, p) (the reference): (n,) bool of the people it removes."""
    scores = np.asarray(scores, dtype=np.float64)
    if scores.shape[0] < MIN_PEOPLE:
        return np.zeros(scores.shape[0], dtype=bool)
    centred = scores - scores.mean(axis=0)
    sd = np.sqrt((centred ** 2).sum(axis=0) / scores.shape[0])
    return np.any(np.abs(centred) / np.where(sd > 0, sd, np.inf) > sigma, axis=1)


def outlier_passes(fit: Callable[[list[np.ndarray]], dict[str, Any]],
                   scores: Callable[[int, dict[str, Any], np.ndarray], np.ndarray],
                   people: Sequence[np.ndarray], sigma: float, iterations: int = 5, pcs: int = 10
                   ) -> tuple[dict[str, Any], list[np.ndarray], list[dict[str, Any]]]:
    """smartpca's loop over a federated fit: fit, each site flags its people, the flagged leave, fit again.

    Parameters
    ----------
    fit : callable
        ``fit(people)``: the model (``components`` (k, d), ``n_samples``, ...) of a fit on ``people[i]`` (indices
        into site ``i``'s people) at every site.
    scores : callable
        ``scores(i, model, people_i)``: site ``i``'s people's scores (s_i, k) under ``model`` (at the site).
    people : sequence of (s_i,) int arrays
        Who enters the first fit at each site (all its people, or its ``.keep``).
    sigma, iterations, pcs : float, int, int
        ``outlier-sigma`` (> 0), ``outlier-iterations`` (removal passes at most), ``outlier-pcs``.

    Returns
    -------
    model : dict
        The final fit, on the people left.
    people : list of (s_i',) int arrays
        Who is left at each site.
    passes : list of dict
        Per removal pass: ``model`` (the pass's fit), ``pcs`` (used), ``n``, ``mean`` (p,), ``sd`` (p,) (the
        federation's, from sums) and ``counts`` (per site: what the server learns); what :func:`site_outliers`
        needs to recompute a site's list.
    """
    people = [np.asarray(p, dtype=np.int64) for p in people]
    passes: list[dict[str, Any]] = []
    model = fit(people)
    for iteration in range(1, int(iterations) + 1):
        n = sum(p.size for p in people)
        p = outlier_pcs(pcs, model["components"].shape[0], n)
        if n < MIN_PEOPLE or p < 1:
            break
        site_scores = [scores(i, model, kept)[:, :p] for i, kept in enumerate(people)]
        n, mean, sd = federation_moments([score_sums(y) for y in site_scores])
        flags = [flagged(y, mean, sd, sigma) for y in site_scores]
        counts = [int(f.sum()) for f in flags]
        passes.append({"model": model, "pcs": p, "n": n, "mean": mean, "sd": sd, "counts": counts})
        log.info("outliers, pass %d: %s of %d people beyond %g sd on the top %d PC(s) (per site: %s)", iteration,
                 sum(counts), n, sigma, p, ", ".join(map(str, counts)))
        if not any(counts):
            break
        people = [kept[~f] for kept, f in zip(people, flags)]
        model = fit(people)
    return model, people, passes


def site_outliers(scores: Callable[[dict[str, Any], np.ndarray], np.ndarray], people: np.ndarray,
                  passes: Sequence[dict[str, Any]], sigma: float) -> np.ndarray:
    """One site's removed people recomputed from the recorded ``passes`` (:func:`outlier_passes`): each pass's
    model scores the site's people still in the fit (``scores(model, people)``, (s, k)), the federation's recorded
    ``mean`` and ``sd`` flag them; (m,) int, the removed people's indices, in the order they left."""
    people = np.asarray(people, dtype=np.int64)
    removed = []
    for record in passes:
        y = scores(record["model"], people)[:, :record["pcs"]]
        flags = flagged(y, record["mean"], record["sd"], sigma)
        removed.append(people[flags])
        people = people[~flags]
    return np.concatenate(removed) if removed else np.zeros(0, dtype=np.int64)
