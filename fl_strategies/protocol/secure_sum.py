"""The server's side of a SecAgg+ round: the sum of the clients' uploads, from Flower's aggregate.

Flower's SecAgg+ returns the weighted *average* of the uploads; clients report one example each and the workflow
runs with ``max_weight = 1``, so every weight is exactly 1 and the sum is the average times the number of
uploads. Every result of a SecAgg+ round carries that same aggregate; replies that differ were not summed by
SecAgg+ (a plain server loop), and are refused. Used by ``dp-power`` (``dp-channel = "secagg"``) and by
``covariance`` (``secure-aggregation``), whose strategies provide ``proxies``, ``m``, ``partition_of`` and
``abort_round``.
"""

from __future__ import annotations

import numpy as np

from .replies import check_array, decode_arrays

__all__ = ["secure_sum"]


def secure_sum(strategy, server_round: int, results: list, failures: list, shape: tuple[int, ...],
               require_all: bool = True) -> np.ndarray | None:
    """``sum_i Y^(i)`` of shape ``shape`` from SecAgg+'s average, or ``None`` after ``strategy.abort_round``
    (a missing client unless ``require_all`` is false, an unknown or repeated one, replies that are not one
    aggregate, an unusable aggregate). Without ``require_all`` the sum is over the clients in ``results``: those
    whose masked upload SecAgg+ summed (a client lost after sharing its keys is not)."""
    pids = [strategy.partition_of(proxy) for proxy, _ in results]
    missing = sorted(set(strategy.proxies) - {p for p in pids if p is not None})
    if (missing and require_all) or not results or None in pids or (require_all and len(results) != strategy.m) \
            or len(set(pids)) != len(pids):
        strategy.abort_round(server_round, f"SecAgg+ summed {len(results)} of s = {strategy.m} products (missing "
                                           f"partition(s) {', '.join(map(str, missing)) or 'none'}; {len(failures)} "
                                           "failure(s))" + (f": {failures[0]}" if failures else ""))
        return None
    first = results[0][1].parameters.tensors
    if any(res.parameters.tensors != first for _, res in results[1:]):  # SecAgg+ gives every result its sum
        strategy.abort_round(server_round, "the replies are not a SecAgg+ aggregate (they differ): this server loop "
                                           "does not run SecAgg+ (use the fedspectral ServerApp, "
                                           "server_app.app.run_server)")
        return None
    arrays = decode_arrays(results[0][1], 1, max_bytes=16 * int(np.prod(shape)) + 4096)
    reason = arrays if isinstance(arrays, str) else check_array(arrays[0], shape, name="SecAgg+ average")
    if reason is not None:
        strategy.abort_round(server_round, f"the SecAgg+ aggregate is unusable: {reason}")
        return None
    return arrays[0].astype(np.float64) * len(results)
