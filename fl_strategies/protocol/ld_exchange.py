"""Federated LD pruning at discovery: the server's side of ``indep-pairwise`` (:mod:`fl_strategies.kernels.ld_prune`).

After the variant lists are aligned and ``maf-min`` / ``geno-max`` applied (plink2 applies ``--maf`` / ``--geno``
before ``--indep-pairwise``), the server

1. asks the lowest partition for the chromosome and position of every variant of the run's list (``ld-map``:
   ``chromosome\\tposition`` per line; the pooled file's ``.bim`` is that site's, as the alignment orders it);
2. derives the pairs each variant is compared with (:func:`~fl_strategies.kernels.ld_prune.pair_spans`) and asks
   every node, block by block of first variants (at most :data:`MAX_PAIRS` pairs a message), for their sums
   (``ld-sums-start``, ``ld-spans``: int64 bytes; the reply ``ld-pair-sums`` (P, 6) and ``ld-variant-sums``
   (b, 5), int64 bytes): counts and sums of integers over the node's founders in the fit (and the frequencies'
   people: :data:`~fl_strategies.kernels.ld_prune.VARIANT_SUMS`), which add up over nodes;
3. pools them, applies plink2's rule (:func:`~fl_strategies.kernels.ld_prune.indep_pairwise`) and returns the
   variants kept (``prune.in``) and removed (``prune.out``); the caller sends the kept list to every node as the
   run's variants (``variant-align``).

What a node reveals beyond the alignment: per pair of nearby variants the counts and sums above (never a row).
With ``secure-aggregation = true`` step 2's sums go through SecAgg+ instead (the server learns only the pooled
sums: :mod:`fl_strategies.protocol.strategies.secure_power`); step 1's map is sent in the clear in both runs: the
chromosome and position of variants whose IDs and alleles the server already holds (public map data, the same at
every site that holds the variant, no person's data).
"""

from __future__ import annotations

import logging
from typing import Any, Callable

import numpy as np

from ..kernels.ld_prune import (VARIANT_SUMS, PruneWindow, indep_pairwise, ld_exceeds, pair_index, pair_spans,
                                sex_chromosomes, subcontigs)
from ..settings.config import ConfigError

__all__ = ["MAX_PAIRS", "chunks", "variant_map", "federated_prune", "decode_map", "prune_spans", "prune_decision"]

log = logging.getLogger(__name__)

MAX_PAIRS = 1 << 18
"""Pairs per message at most (6 int64 each: 12 MiB)."""

FEWEST_FOUNDERS = 50
"""plink2 refuses to measure LD over fewer founders (unless ``--bad-ld``); here a run below it is warned."""


def decode_map(data: bytes, d: int) -> tuple[list[str], np.ndarray]:
    """``(chromosomes, positions)`` of an ``ld-map`` of ``d`` lines; a ``ValueError`` for another shape."""
    rows = [line.split("\t") for line in data.decode("utf-8").splitlines()]
    if len(rows) != d or any(len(row) != 2 or not row[1].lstrip("-").isdigit() for row in rows):
        raise ValueError(f"its ld-map is not {d} lines of chromosome and position")
    return [row[0] for row in rows], np.array([int(row[1]) for row in rows], dtype=np.int64)


def chunks(spans: np.ndarray, most: int = MAX_PAIRS) -> list[tuple[int, int]]:
    """Consecutive ranges ``(a, b)`` of first variants covering all of them, each with at most ``most`` pairs (or
    one variant)."""
    offset = pair_index(spans)
    out, a, d = [], 0, len(spans)
    while a < d:
        b = int(np.searchsorted(offset, offset[a] + most, side="right")) - 1
        b = min(max(b, a + 1), d)
        out.append((a, b))
        a = b
    return out


def _int64(props: Any, key: str, shape: tuple[int, int], who: str) -> np.ndarray:
    value = props.get(key) if hasattr(props, "get") else None
    if not isinstance(value, bytes) or len(value) != 8 * shape[0] * shape[1]:
        raise ConfigError(f"{who} sent no {key} of {shape[0]} x {shape[1]} integers "
                          f"({props if isinstance(props, str) else 'indep-pairwise'})")
    return np.frombuffer(value, dtype="<i8").reshape(shape)


def variant_map(first: Any, ask: Callable[[dict, list], list[tuple[Any, Any]]], d: int) \
        -> tuple[list[str], np.ndarray]:
    """``(chromosomes, positions)`` of the run's ``d`` variants from the ``.bim`` of node ``first`` (the lowest
    partition): its ``ld-map``; a ``ConfigError`` in one line when it sends none that fits."""
    [(_, props)] = ask({"ld-map": True}, [first])
    value = props.get("ld-map") if hasattr(props, "get") else None
    if not isinstance(value, bytes):
        raise ConfigError(f"node {first.cid} sent no ld-map ({props if isinstance(props, str) else ''})")
    try:
        return decode_map(value, d)
    except ValueError as ex:
        raise ConfigError(f"node {first.cid}: {ex}") from None


def federated_prune(variants: list[tuple[str, str, str]], proxies: list, chromosomes: list[str],
                    positions: np.ndarray, ask: Callable[[dict, list], list[tuple[Any, Any]]],
                    window: PruneWindow) -> tuple[np.ndarray, list[str], list[str]]:
    """Prune the run's ``variants`` over the nodes ``proxies`` (module docstring).

    Parameters
    ----------
    variants : list of (ID, A1, A2)
        The run's variants (after the filters), d of them.
    proxies : list
        The usable nodes.
    chromosomes, positions : list of str, ndarray of int, shape (d,)
        The variants' chromosomes and positions (:func:`variant_map`).
    ask : callable
        ``ask(config, proxies) -> [(proxy, properties or reason)]``.
    window : PruneWindow

    Returns
    -------
    keep : ndarray of shape (d,), bool
        The variants in ``prune.in``.
    prune_in, prune_out : list of str
        Their IDs, and the removed ones', in the run's order (chromosome 0 in neither, as plink2).
    """
    d = len(variants)
    spans = prune_spans(chromosomes, positions, window)
    vsums = np.zeros((d, len(VARIANT_SUMS)), dtype=np.int64)
    exceeds = []
    parts = chunks(spans)
    for a, b in parts:
        config = {"ld-sums-start": int(a), "ld-spans": spans[a:b].astype("<i8").tobytes()}
        pairs = int(spans[a:b].sum())
        total = np.zeros((pairs, 6), dtype=np.int64)
        for proxy, props in ask(config, proxies):
            total += _int64(props, "ld-pair-sums", (pairs, 6), f"node {proxy.cid}")
            vsums[a:b] += _int64(props, "ld-variant-sums", (b - a, len(VARIANT_SUMS)), f"node {proxy.cid}")
        exceeds.append(ld_exceeds(total, window.r2))
    return prune_decision(variants, chromosomes, positions, window, spans, vsums, exceeds,
                          f"over {len(proxies)} node(s)", len(parts))


def prune_spans(chromosomes: list[str], positions: np.ndarray, window: PruneWindow) -> np.ndarray:
    """:func:`~fl_strategies.kernels.ld_prune.pair_spans`, (d,) int64; a ``ConfigError`` in one line for a map the
    window cannot read (a kb window over unsorted positions) or variants on chromosomes X, Y or MT, which plink2
    prunes with its males' calls haploid (:func:`~fl_strategies.kernels.ld_prune.sex_chromosomes`)."""
    sex = sex_chromosomes(chromosomes)
    if sex:
        count = sum(str(c) in sex for c in chromosomes)
        raise ConfigError(f"indep-pairwise = '{window}': {count} variant(s) on chromosome(s) {', '.join(sex)}, which "
                          "plink2 prunes with males' calls haploid and fedspectral does not: leave them out of the run "
                          "(exclude-range with a line per chromosome, e.g. 'X 0 999999999 chrX', or plink2 --autosome "
                          "at each site), as ancestry PCA does")
    try:
        subcontigs(chromosomes, positions, window)
    except ValueError as ex:
        raise ConfigError(f"indep-pairwise = '{window}': {ex}") from None
    return pair_spans(chromosomes, positions, window)


def prune_decision(variants: list[tuple[str, str, str]], chromosomes: list[str], positions: np.ndarray,
                   window: PruneWindow, spans: np.ndarray, vsums: np.ndarray, exceeds: list[np.ndarray],
                   source: str, messages: int) -> tuple[np.ndarray, list[str], list[str]]:
    """plink2's rule on the federation's pooled sums (the plain exchange's, :func:`federated_prune`, or the SecAgg+
    sums of :class:`~fl_strategies.protocol.strategies.secure_power.SecurePowerStrategy`), logged.

    Parameters
    ----------
    variants : list of (ID, A1, A2), chromosomes, positions : shape (d,)
    window : PruneWindow
    spans : ndarray of shape (d,)
        :func:`prune_spans`.
    vsums : ndarray of shape (d, 5), int
        The pooled ``ld-variant-sums`` (:data:`~fl_strategies.kernels.ld_prune.VARIANT_SUMS`).
    exceeds : list of ndarray of bool
        Per message, in order, whether each of its pairs is in LD (:func:`~fl_strategies.kernels.ld_prune.ld_exceeds`
        of the pooled pair sums).
    source : str
        Where the sums came from, for the log; ``messages``: how many exchanges carried them.

    Returns
    -------
    keep, prune_in, prune_out : as :func:`federated_prune`.
    """
    d = len(variants)
    founders = int(vsums[:, 0].max(initial=0))  # the most founders with a call at one variant
    if founders < 2:
        raise ConfigError(f"indep-pairwise = '{window}': at most {founders} founder(s) with a call at any variant "
                          "among the people in the fit; LD is measured over founders (father and mother 0 in the "
                          ".fam), as plink2 --indep-pairwise measures it")
    if founders < FEWEST_FOUNDERS:
        log.warning("indep-pairwise %s: LD measured over at most %d founder(s) with a call per variant; plink2 "
                    "refuses fewer than %d (unless --bad-ld)", window, founders, FEWEST_FOUNDERS)
    pieces = subcontigs(chromosomes, positions, window)
    removed = indep_pairwise(vsums[:, :3], np.concatenate(exceeds) if exceeds else np.zeros(0, dtype=bool), spans,
                             pieces, window, positions, frequency=vsums[:, 3:5])
    chr0 = np.array([c == "0" for c in chromosomes], dtype=bool)
    keep = ~removed & ~chr0
    ids = [vid for vid, _, _ in variants]
    prune_in = [ids[j] for j in np.flatnonzero(keep)]
    prune_out = [ids[j] for j in np.flatnonzero(removed)]
    log.info("indep-pairwise %s %s: %d of %d variants kept (prune.in), %d removed (prune.out)%s; "
             "%d pair(s) in %d message(s) per node", window, source, len(prune_in), d, len(prune_out),
             f", {int(chr0.sum())} on chromosome 0 left out" if chr0.any() else "", int(spans.sum()), messages)
    return keep, prune_in, prune_out
