"""The server's side of the outlier passes: smartpca's loop around the whole fit, in one Flower run.

After a fit (its summary exchange has set ``strategy.model``), :func:`outlier_pass` sends the model's top ``p``
components (``p = min(outlier-pcs, k, n - 1)``, :func:`~fl_strategies.kernels.outliers.outlier_pcs`) to every site
twice (:mod:`client_app.outlier_replies`): first each site answers its count, the sum and the sum of squares of its
people's scores on them, from which the server forms the federation's mean and standard deviation of each PC's
scores (divisor ``n``, as smartpca); then it sends those, each site flags its people beyond ``outlier-sigma`` sd on
any of the PCs, drops them from its fit from then on (node state, as a ``.keep`` drops people) and answers how many.
The server logs each site's count, never learns who, and records the pass (:data:`PASS_KEYS`: the model the sites
scored with and the federation's moments, what ``transform`` needs to list a site's removed people again at the
site: :func:`fl_strategies.kernels.outliers.site_outliers`). When somebody left, the strategy starts again from its
state before discovery (:meth:`~fl_strategies.protocol.base.FederatedStrategy.restart`): discovery's sums, the mean,
the scale and every round are redone without them. The loop stops after ``outlier-iterations`` removals or at the
first pass that removes nobody, as smartpca's (:class:`~fl_strategies.protocol.server_loop.StoppingServer`).

With ``secure-aggregation = true`` :func:`secure_outlier_pass` sends the same two instructions through SecAgg+
(:func:`server_app.secure_loop.run_secure_aggregation`): the server learns the federation's count, score sums and
sums of squares, and the total number flagged, never a site's; each site logs its own count in its own log.
"""

from __future__ import annotations

import logging
from typing import Any, Callable

import numpy as np
from flwr.common import FitIns, ndarrays_to_parameters, parameters_to_ndarrays

from ..kernels.outliers import MIN_PEOPLE, federation_moments, outlier_pcs
from ..settings.config import column_scaling
from .round_exchange import fit_in_one_batch

__all__ = ["outlier_pass", "secure_outlier_pass", "PASS_KEYS"]

log = logging.getLogger("flwr.fedspectral")

PASS_KEYS = ("components", "mean", "scale", "score_mean", "score_sd", "removed", "variants")
"""What a pass records: the components the sites scored with (p, d_t), the model's mean and scale (d_t,), the
federation's mean and sd of the scores (p,), how many people it removed in all (the per-site counts are logged
only), and over ``.bed`` data the fit's variants (``d_t`` of them: the variant filters and pruning run again in
every fit, over the people left, so a pass's variants may differ from the final model's)."""


def _exchange(strategy, phase: str, components: np.ndarray, config: dict[str, Any], max_workers, timeout,
              server_round: int) -> dict[int, Any] | None:
    """One instruction to every registered site; ``{partition id: FitRes}``, or ``None`` after aborting the run
    (a site that did not answer, or answered something else)."""
    ins = FitIns(ndarrays_to_parameters([components]), {"phase": phase, **config})
    results, failures = fit_in_one_batch([(strategy.proxies[pid], ins) for pid in sorted(strategy.proxies)],
                                         max_workers, timeout, server_round)
    pids = {proxy.cid: pid for pid, proxy in strategy.proxies.items()}
    replies = {pids[proxy.cid]: res for proxy, res in results if proxy.cid in pids}
    if len(replies) < len(strategy.proxies):
        reasons = "; ".join(f[1].status.message if isinstance(f, tuple) else str(f) for f in failures)
        silent = sorted(set(strategy.proxies) - set(replies))
        strategy.abort(f"outliers ({phase}): partition(s) {', '.join(map(str, silent))} did not answer"
                       + (f": {reasons}" if reasons else ""))
        return None
    return replies


def _pass_inputs(strategy) -> tuple[int, np.ndarray, np.ndarray, dict[str, Any]] | None:
    """``(p, components (p, d), scale (d,), config)`` of the pass after the fit just made: what every site scores
    with; ``None`` when no pass is made (fewer than 3 people, no components)."""
    model, settings = strategy.model, strategy.settings
    n = strategy.num_rows
    p = outlier_pcs(settings.outlier_pcs, model["components"].shape[0], n)
    if n < MIN_PEOPLE or p < 1:
        return None
    components = np.ascontiguousarray(model["components"][:p], dtype=np.float64)
    scale = np.asarray(model.get("scale", np.ones(components.shape[1])), dtype=np.float64)
    config = {"outlier-mean": np.asarray(model["mean"], "<f8").tobytes(),
              "outlier-scale": scale.astype("<f8").tobytes(), "outlier-scaling": column_scaling(settings.scale)}
    return p, components, scale, config


def _flags_config(config: dict[str, Any], mean: np.ndarray, sd: np.ndarray, sigma: float) -> dict[str, Any]:
    """The second instruction's config: the first's, the federation's moments (p,) and ``outlier-sigma``."""
    return {**config, "score-mean": mean.astype("<f8").tobytes(), "score-sd": sd.astype("<f8").tobytes(),
            "outlier-sigma": sigma}


def _record(strategy, components, scale, mean, sd, removed: int, p: int, total: int) -> dict[str, Any]:
    variants = getattr(strategy, "variants", None)  # the fit's own (the filters and pruning ran over its people)
    return {"components": components, "mean": np.asarray(strategy.model["mean"], dtype=np.float64), "scale": scale,
            "score_mean": mean, "score_sd": sd, "removed": removed, "pcs": p, "n": total,
            "variants": None if variants is None else list(variants)}


def outlier_pass(strategy, max_workers, timeout, number: int, server_round: int) -> dict[str, Any] | None:
    """Pass ``number`` after a fit: the sites' score sums, the federation's moments, the sites' flags.

    Returns
    -------
    dict or None
        The pass's record (:data:`PASS_KEYS`, ``pcs``, ``n``), ``None`` when no pass was made (fewer than 3
        people, no components, or the run was aborted).
    """
    prepared = _pass_inputs(strategy)
    if prepared is None:
        return None
    p, components, scale, config = prepared
    replies = _exchange(strategy, "outlier-scores", components, config, max_workers, timeout, server_round)
    if replies is None:
        return None
    parts = []
    for pid, res in replies.items():
        arrays = parameters_to_ndarrays(res.parameters)
        if len(arrays) != 2 or any(a.shape != (p,) or not np.all(np.isfinite(a)) for a in arrays):
            strategy.abort(f"outliers: partition {pid} sent score sums that are not two finite ({p},) arrays")
            return None
        parts.append((int(res.num_examples), arrays[0], arrays[1]))
    total, mean, sd = federation_moments(parts)
    sigma = float(strategy.settings.outlier_sigma)
    config = _flags_config(config, mean, sd, sigma)
    replies = _exchange(strategy, "outlier-flags", components, config, max_workers, timeout, server_round)
    if replies is None:
        return None
    counts = {pid: int(res.metrics.get("outliers", -1)) for pid, res in sorted(replies.items())}
    if any(count < 0 for count in counts.values()):
        strategy.abort("outliers: a site answered the flags without its count")
        return None
    removed = sum(counts.values())
    log.info("outliers, pass %d: %d of %d people beyond %g sd on the top %d PC(s) (per site: %s)", number, removed,
             total, sigma, p, ", ".join(f"partition {pid} {count}" for pid, count in counts.items()))
    return _record(strategy, components, scale, mean, sd, removed, p, total)


def secure_outlier_pass(strategy, run_round: Callable[[int], bool], number: int,
                        server_round: int) -> dict[str, Any] | None:
    """Pass ``number`` under SecAgg+ (``secure-aggregation = true``): the same two instructions, each answered
    through a SecAgg+ round (:meth:`~fl_strategies.protocol.strategies.secure_power.SecurePowerStrategy.
    secure_exchange`), so that the server learns the federation's sums only, never a site's.

    * ``outlier-scores``: each site uploads ``[s_i, sum of scores (p,), sum of squared scores (p,)]``; the server
      gets ``n`` and the pooled sums, hence the moments as in the plain pass. Public bound:
      ``n max(1, R, R^2)`` with ``R`` the bound on a person's scores that the genotypes' bound gives under the
      broadcast mean, scale and orthonormal components (:meth:`~fl_strategies.protocol.strategies.secure_power.
      SecurePowerStrategy.score_bound`: ``|y_j| <= R``, ``y_j^2 <= R^2``, ``s_i <= n``);
    * ``outlier-flags``: each site flags its people, drops them from its fit (as in the plain pass), logs its own
      count in its own log and uploads ``[its count]`` (bound ``n``); the server logs the federation's total only.

    Fixed point: each value is rounded to a step ``2^-f <= 2^(2 - bL) B`` (``bL >= 63`` bits, 87 for 4 clients),
    so the pooled sums are within ``m 2^-(f+1)`` of the plain run's float64 sums; the counts are whole numbers and
    exact. ``run_round(r)`` runs SecAgg+ round ``r`` and says whether the strategy formed its sum; the rounds are
    ``server_round`` and ``server_round + 1``.

    Returns
    -------
    dict or None
        As :func:`outlier_pass`; ``None`` when no pass was made or the run was aborted.
    """
    prepared = _pass_inputs(strategy)
    if prepared is None:
        return None
    p, components, scale, config = prepared
    n = strategy.num_rows
    R = strategy.score_bound()
    if R is None:
        strategy.abort("outliers: secure-aggregation needs the public bound of genotype rows (PLINK .bed/.pgen "
                       "sites, neither row-normalize nor clip-norm) to bound the sites' score sums")
        return None
    parameters = ndarrays_to_parameters([components])
    strategy.secure_exchange(FitIns(parameters, {"phase": "outlier-scores", **config}), 1 + 2 * p,
                             float(n) * max(1.0, R, R * R))
    values = strategy.exchange_sum() if run_round(server_round) else None
    if values is None:
        return None
    if values[0] != n:
        strategy.abort_round(server_round, f"outliers: the SecAgg+ sum of the sites' people is {values[0]!r}, "
                                           f"not the n = {n} of their row counts' sum")
        return None
    total, mean, sd = federation_moments([(n, values[1: 1 + p], values[1 + p:])])
    sigma = float(strategy.settings.outlier_sigma)
    strategy.secure_exchange(FitIns(parameters, {"phase": "outlier-flags", **_flags_config(config, mean, sd, sigma)}),
                             1, float(n))
    values = strategy.exchange_sum() if run_round(server_round + 1) else None
    if values is None:
        return None
    removed = float(values[0])
    if removed != round(removed) or not 0 <= removed < n:
        strategy.abort_round(server_round + 1, f"outliers: the SecAgg+ sum of the sites' counts is {removed!r}, not "
                                               f"a whole number in [0, {n})")
        return None
    removed = int(removed)
    log.info("outliers, pass %d: %d of %d people beyond %g sd on the top %d PC(s) (the SecAgg+ sum of the sites' "
             "counts; each site logs its own)", number, removed, total, sigma, p)
    return _record(strategy, components, scale, mean, sd, removed, p, total)
