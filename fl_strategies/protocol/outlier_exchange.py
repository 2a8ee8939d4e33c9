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
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
from flwr.common import FitIns, ndarrays_to_parameters, parameters_to_ndarrays

from ..kernels.outliers import MIN_PEOPLE, federation_moments, outlier_pcs
from ..settings.config import column_scaling
from .round_exchange import fit_in_one_batch

__all__ = ["outlier_pass", "PASS_KEYS"]

log = logging.getLogger("flwr.fedspectral")

PASS_KEYS = ("components", "mean", "scale", "score_mean", "score_sd", "removed")
"""What a pass records: the components the sites scored with (p, d), the model's mean and scale (d,), the
federation's mean and sd of the scores (p,), and how many people it removed in all (the per-site counts are logged
only)."""


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


def outlier_pass(strategy, max_workers, timeout, number: int, server_round: int) -> dict[str, Any] | None:
    """Pass ``number`` after a fit: the sites' score sums, the federation's moments, the sites' flags.

    Returns
    -------
    dict or None
        The pass's record (:data:`PASS_KEYS`, ``pcs``, ``n``), ``None`` when no pass was made (fewer than 3
        people, no components, or the run was aborted).
    """
    model, settings = strategy.model, strategy.settings
    n = strategy.num_rows
    p = outlier_pcs(settings.outlier_pcs, model["components"].shape[0], n)
    if n < MIN_PEOPLE or p < 1:
        return None
    components = np.ascontiguousarray(model["components"][:p], dtype=np.float64)
    scale = np.asarray(model.get("scale", np.ones(components.shape[1])), dtype=np.float64)
    config = {"outlier-mean": np.asarray(model["mean"], "<f8").tobytes(),
              "outlier-scale": scale.astype("<f8").tobytes(), "outlier-scaling": column_scaling(settings.scale)}
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
    sigma = float(settings.outlier_sigma)
    config.update({"score-mean": mean.astype("<f8").tobytes(), "score-sd": sd.astype("<f8").tobytes(),
                   "outlier-sigma": sigma})
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
    return {"components": components, "mean": np.asarray(model["mean"], dtype=np.float64), "scale": scale,
            "score_mean": mean, "score_sd": sd, "removed": removed, "pcs": p, "n": total}
