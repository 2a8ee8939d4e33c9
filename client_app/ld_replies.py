"""A node's side of federated LD pruning (``indep-pairwise``, :mod:`fl_strategies.protocol.ld_exchange`).

Asked ``ld-map``, the node sends the chromosome and position of every variant of the run's list (from its own
``.bim``); asked ``ld-sums-start`` with ``ld-spans``, it sends the pair sums of those first variants over its
founders in the fit (:func:`fl_strategies.kernels.ld_prune.pair_sums`; plink2's rule, whatever ``nonfounders``
says: :meth:`client_app.data.NodeData.founders_among`) and each one's
:data:`~fl_strategies.kernels.ld_prune.VARIANT_SUMS`: counts and sums, never a row.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

from fl_strategies.files.variants import decode_variants
from fl_strategies.kernels.ld_prune import pair_sums, variant_sums
from fl_strategies.kernels.rows import BedVariants

__all__ = ["asks_ld", "ld_reply", "ld_sums"]


def asks_ld(config: dict[str, Any]) -> bool:
    """Whether the server's request is one of pruning's."""
    return bool(config.get("ld-map")) or "ld-sums-start" in config


def ld_reply(data, config: dict[str, Any]) -> dict[str, Any]:
    """The node's answer to ``ld-map`` or ``ld-sums-start`` (module docstring); a ``ValueError`` naming the
    partition when its data are no ``.bed`` or the request does not fit them."""
    bim = getattr(data, "bim", None)
    where = f"partition {data.partition_id}"
    if bim is None:
        raise ValueError(f"{where}: the server asks for LD pruning's sums, but the node's data are no .bed file")
    listed = data.run_variants
    if config.get("ld-map"):
        place = {vid: (chrom, pos) for chrom, vid, pos, _, _ in bim}
        ids = [vid for _, vid, _, _, _ in bim] if listed is None else [v[0] for v in decode_variants(listed)]
        twice = sorted(vid for vid, count in Counter(vid for _, vid, _, _, _ in bim).items() if count > 1
                       and vid in set(ids))
        if twice:
            raise ValueError(f"{where}: its .bim lists variant ID(s) {', '.join(twice[:5])} more than once; LD "
                             "pruning needs unique IDs, as plink2 --indep-pairwise (plink2 --set-all-var-ids and/or "
                             "--rm-dup may help)")
        return {"partition-id": data.partition_id,
                "ld-map": "".join(f"{place[vid][0]}\t{place[vid][1]}\n" for vid in ids).encode("utf-8")}
    pairs, vsums = ld_sums(data, int(config["ld-sums-start"]), config.get("ld-spans", b""))
    return {"partition-id": data.partition_id, "ld-pair-sums": pairs.astype("<i8").tobytes(),
            "ld-variant-sums": vsums.astype("<i8").tobytes()}


def ld_sums(data, start: int, spans: bytes) -> tuple[np.ndarray, np.ndarray]:
    """The node's pair sums (P, 6) and variant sums (b, 5), int64, of the pairs of first variants ``start ..
    start + b - 1`` (``spans``: their int64 :func:`~fl_strategies.kernels.ld_prune.pair_spans`); what it sends in
    the clear (:func:`ld_reply`) or, under SecAgg+, as limbs
    (:class:`client_app.secure_power_client.SecurePowerClient`). A ``ValueError`` naming the partition when the
    request does not fit its data.

    Who counts (module docstring of :mod:`fl_strategies.kernels.ld_prune`): the pair sums and the first three
    variant sums over the founders among the people in the fit, the last two (plink2's allele frequency) over the
    same founders, or every person in the fit with ``nonfounders = true``. A person outside the fit (a ``.keep``'s,
    an outlier removed) never counts.
    """
    where = f"partition {data.partition_id}"
    if getattr(data, "bim", None) is None:
        raise ValueError(f"{where}: the server asks for LD pruning's sums, but the node's data are no .bed file")
    X = data.stored_rows()
    if not isinstance(X, BedVariants):
        raise ValueError(f"{where}: LD pruning reads the .bed's calls, not rows scaled by row-normalize or clip-norm")
    spans = np.frombuffer(spans, dtype="<i8")
    stop = start + spans.size
    if not 0 <= start < stop <= X.dimension or np.any(spans < 0) or np.any(np.arange(start, stop) + spans >=
                                                                           X.dimension):
        raise ValueError(f"{where}: the server's LD request (variants {start}..{stop - 1}) does not fit its "
                         f"{X.dimension} variants")
    full = np.zeros(X.dimension, dtype=np.int64)
    full[start:stop] = spans
    founders = data.founders_among(X)

    def read(a: int, b: int) -> np.ndarray:  # the founders' allele counts (b - a, founders)
        counts = X.column_counts(a, b)
        return counts if founders is None else counts[:, founders]

    everyone = X.column_counts(start, stop)
    ld = variant_sums(everyone if founders is None else everyone[:, founders])
    frequency = ld if founders is None or not data.cfg.get("nonfounders", False) else variant_sums(everyone)
    return pair_sums(read, full, start, stop), np.hstack([ld, frequency[:, :2]])
