"""LD pruning as ``plink2 --indep-pairwise`` computes it, from sums that add up over sites.

plink2 (2.0, ``IndepPairwise`` in ``plink2_ld.cc``) measures a pair of variants ``i``, ``j`` over the people who
called both: with ``n`` those people, ``x``, ``y`` their allele counts,

    cov = n sum(x y) - sum(x) sum(y),   v_x = n sum(x^2) - sum(x)^2,   v_y = n sum(y^2) - sum(y)^2

(the sums over those ``n`` people only) and the pair is in LD when ``cov^2 > t v_x v_y`` with ``t`` the r^2
threshold times ``1 + 2^-44``; a pair without a common call never is. The six sums (:data:`PAIR_SUMS`) are integers
and add up over sites, so a site sends them (:func:`pair_sums`) and the server pools them; the allele coding does
not matter (``2 - g`` or ``g - 1`` give the same integers ``cov^2``, ``v_x``, ``v_y``).

The windows (:func:`subcontigs`, :func:`pair_spans`): each chromosome in file order (chromosome ``0`` is left out,
in neither ``prune.in`` nor ``prune.out``), split in a kb window wherever two neighbouring variants lie more than the
window apart; a piece of one variant is kept unexamined. A window of ``W`` variants moves by the step; a kb window
holds the variants within ``W`` bp of its first and moves by as little as adds one variant at its end (plink2
requires step 1 there). Every pair a window can hold is within :func:`pair_spans` of its first variant.

The greedy rule (:func:`indep_pairwise`), per window, repeated until a pass removes nothing: every variant still in
the window, in order, is compared with the later ones it has not yet been compared with; at the first pair in LD
the one with the higher major-allele frequency (the lower MAF) is removed, the later one on a tie (within a
relative ``2^-44``), and the pass moves on to the next variant. A variant constant over its calls (or without a
call) is removed as soon as it enters a window. Removed variants stay removed.

Who counts, as plink2 (checked against plink2 v2.00a3.5): the r^2 of every pair and the test for a constant variant
are over the founders among the people in the fit (father and mother ``0`` in the ``.fam``; a ``.fam`` without
parents makes everyone a founder), whatever ``--nonfounders`` says; the major-allele frequency that decides which of
a pair goes is plink2's allele frequency (:data:`VARIANT_SUMS`): the founders' by default, every person's in the
fit with ``--nonfounders`` (``nonfounders = true``). plink2 refuses LD pruning over fewer than 50 founders unless
``--bad-ld``; fewer than two leave nothing to measure.

Chromosomes X, Y and MT are not pruned here (:func:`sex_chromosomes`): plink2 counts a male's X call as haploid (his
heterozygous calls missing, each woman's calls weighing twice his), Y over males alone and MT as haploid, from the
sexes in the ``.fam``. Chromosome XY (the pseudo-autosomal region) is diploid there and is pruned as an autosome.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from dataclasses import dataclass

import numpy as np

from ..files.ranges import chromosome_code

__all__ = ["PAIR_SUMS", "VARIANT_SUMS", "SEX_CHROMOSOMES", "SMALL_EPSILON", "PruneWindow", "parse_indep_pairwise",
           "sex_chromosomes", "subcontigs", "pair_spans", "pair_index", "pair_sums", "variant_sums", "ld_exceeds",
           "major_frequency", "indep_pairwise"]

PAIR_SUMS = ("calls", "sum_i", "sumsq_i", "sum_j", "sumsq_j", "dot")
"""The six sums per pair, over the people who called both: their number, ``sum x``, ``sum x^2`` of the first,
``sum y``, ``sum y^2`` of the second and ``sum x y``."""

VARIANT_SUMS = ("calls", "sum", "sumsq", "frequency_calls", "frequency_sum")
"""The five sums per variant a site sends beside the pair sums: its calls, ``sum g`` and ``sum g^2`` over the people
the r^2 counts (the founders in the fit), then its calls and ``sum g`` over the people plink2's allele frequencies
count (the founders, or everyone in the fit with ``nonfounders = true``)."""

SEX_CHROMOSOMES = ("X", "Y", "MT")
"""The chromosomes plink2 prunes as haploid in part or whole, as :func:`~fl_strategies.files.ranges.chromosome_code`
names them (``23``, ``chrX``, ... are ``X``; ``M`` and ``26`` ``MT``). ``XY`` (``25``), the pseudo-autosomal region,
is diploid there: an autosome."""

SMALL_EPSILON = 2.0 ** -44
"""plink2's ``kSmallEpsilon``: the r^2 threshold is raised by this share, and frequencies within it tie."""


@dataclass(frozen=True)
class PruneWindow:
    """``--indep-pairwise``'s arguments: ``size`` variants (or bp with ``kb``), ``step`` variants, ``r2``."""

    size: int
    step: int
    r2: float
    kb: bool = False

    def __str__(self) -> str:
        size = f"{self.size / 1000:g}kb" if self.kb else str(self.size)
        return f"{size} {self.step} {self.r2:g}"


_NUMBER = re.compile(r"^[0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?$")


def parse_indep_pairwise(text: str) -> PruneWindow | None:
    """The window of an ``indep-pairwise`` value as plink2 reads its arguments, ``None`` for ``""`` (off).

    ``"50 5 0.2"`` (window in variants, step, r^2), ``"500kb 1 0.2"`` or ``"500 kb 1 0.2"`` (window in kb: the
    step, if given, must be 1), ``"50 0.2"`` (step 1). A ``ValueError`` says what is wrong: a window below 2
    variants (or 2 bp), a step not in ``1 .. window``, an r^2 outside ``[0, 1)``.
    """
    words = str(text).split()
    if not words:
        return None
    kb = False
    if words[0].lower().endswith("kb"):
        kb, words = True, [words[0][:-2]] + words[1:]
    elif len(words) > 1 and words[1].lower() == "kb":
        kb, words = True, [words[0]] + words[2:]
    if len(words) not in (2, 3):
        raise ValueError(f"'{text}' is not plink2's '<window>[kb] [<step>] <r^2>' (e.g. '50 5 0.2' or '500kb 1 0.2')")
    if not _NUMBER.match(words[0]):
        raise ValueError(f"'{words[0]}' is no window size")
    if kb:
        size = int(float(words[0]) * 1000 * (1 + SMALL_EPSILON))
    else:
        if not words[0].isdigit():
            raise ValueError(f"'{words[0]}' is no whole number of variants")
        size = int(words[0])
    if size < 2:
        raise ValueError("the window must hold at least 2 variants" + (" (2 bp)" if kb else ""))
    step = 1
    if len(words) == 3:
        if not words[1].isdigit() or int(words[1]) < 1:
            raise ValueError(f"'{words[1]}' is no step of 1 or more variants")
        step = int(words[1])
        if kb and step != 1:
            raise ValueError("the step must be 1 with a window in kb (plink2's rule)")
        if not kb and step > size:
            raise ValueError(f"the step {step} is larger than the window {size}")
    try:
        r2 = float(words[-1])
    except ValueError:
        raise ValueError(f"'{words[-1]}' is no r^2 threshold") from None
    if not 0 <= r2 < 1:
        raise ValueError(f"the r^2 threshold {words[-1]} is not in [0, 1)")
    return PruneWindow(size, step, r2, kb)


def sex_chromosomes(chromosomes) -> list[str]:
    """The chromosome names of ``chromosomes`` (in the order met) that are :data:`SEX_CHROMOSOMES`: what pruning
    here does not do as plink2 does (module docstring)."""
    return [name for name in dict.fromkeys(str(c) for c in chromosomes) if chromosome_code(name) in SEX_CHROMOSOMES]


def subcontigs(chromosomes, positions, window: PruneWindow) -> list[tuple[int, int]]:
    """The ranges ``(start, stop)`` of variants pruned together (module docstring), pieces of one variant and
    chromosome ``0`` left out.

    Parameters
    ----------
    chromosomes : sequence of str, shape (d,)
        Each variant's chromosome code; a chromosome's variants must be consecutive.
    positions : array of int, shape (d,)
        Base-pair positions (used with a kb window only; then sorted within each chromosome).
    window : PruneWindow
    """
    chromosomes = [str(c) for c in chromosomes]
    positions = np.asarray(positions, dtype=np.int64)
    out, start, seen = [], 0, set()
    for stop in range(1, len(chromosomes) + 1):
        if stop < len(chromosomes) and chromosomes[stop] == chromosomes[start]:
            continue
        name = chromosomes[start]
        if name in seen:
            raise ValueError(f"chromosome {name}'s variants are not consecutive")
        seen.add(name)
        if name != "0":
            pieces = [start, stop]
            if window.kb:
                gaps = np.diff(positions[start:stop])
                if np.any(gaps < 0):
                    raise ValueError(f"chromosome {name}'s positions are not sorted (a kb window needs them sorted)")
                pieces = [start] + list(start + 1 + np.flatnonzero(gaps > window.size)) + [stop]
            out += [(a, b) for a, b in zip(pieces[:-1], pieces[1:]) if b - a > 1]
        start = stop
    return out


def pair_spans(chromosomes, positions, window: PruneWindow) -> np.ndarray:
    """How many later variants each variant is paired with, (d,) int64: those a window can hold with it (the
    next ``size - 1`` of its piece, or those within ``size`` bp of it); 0 outside every piece."""
    positions = np.asarray(positions, dtype=np.int64)
    spans = np.zeros(len(positions), dtype=np.int64)
    for start, stop in subcontigs(chromosomes, positions, window):
        index = np.arange(start, stop)
        if window.kb:
            last = np.searchsorted(positions[start:stop], positions[start:stop] + window.size, side="right") + start
        else:
            last = np.minimum(index + window.size, stop)
        spans[start:stop] = last - index - 1
    return spans


def pair_index(spans: np.ndarray) -> np.ndarray:
    """``offset`` (d + 1,): the pairs of variant ``i`` are ``offset[i] .. offset[i + 1] - 1``, with ``j = i + 1,
    i + 2, ...`` in order (the layout of :func:`pair_sums`)."""
    return np.concatenate([[0], np.cumsum(spans)]).astype(np.int64)


def variant_sums(counts: np.ndarray) -> np.ndarray:
    """Per variant ``(calls, sum g, sum g^2)`` over its calls, (b, 3) int64, from ``counts`` (b, s) int8 allele
    counts variant-major, a missing call -1."""
    g = counts.astype(np.int64)
    called = g >= 0
    g[~called] = 0
    return np.stack([called.sum(1), g.sum(1), (g * g).sum(1)], axis=1)


def pair_sums(read, spans: np.ndarray, start: int, stop: int, block: int | None = None) -> np.ndarray:
    """The :data:`PAIR_SUMS` of the pairs of variants ``start .. stop - 1`` (:func:`pair_index` order), (P, 6)
    int64, computed block by block as products of the calls' indicator, counts and squares.

    Parameters
    ----------
    read : callable
        ``read(a, b)`` gives variants ``a .. b - 1`` as (b - a, s) int8 allele counts, a missing call -1
        (:meth:`~fl_strategies.kernels.rows.BedVariants.column_counts`).
    spans : ndarray of shape (d,)
        :func:`pair_spans`.
    start, stop : int
        The first variants of the pairs.
    block : int, optional
        First variants per product (default: the longest span, at least 64: a product then computes about twice
        the pairs it keeps).
    """
    spans = np.asarray(spans, dtype=np.int64)
    block = block or max(64, int(spans[start:stop].max(initial=0)))
    parts = []
    for a in range(start, stop, block):
        b = min(a + block, stop)
        if not spans[a:b].any():
            continue
        reach = int(np.max(np.arange(a, b) + spans[a:b])) + 1
        g = read(a, reach).astype(np.float64)
        called = (g >= 0).astype(np.float64)
        g[g < 0] = 0.0
        sq = g * g
        n = b - a
        left = np.concatenate([called[:n], g[:n], sq[:n]]) @ called.T  # (3 n, e): calls, sum_i, sumsq_i
        right = called[:n] @ np.concatenate([g, sq]).T  # (n, 2 e): sum_j, sumsq_j
        dot = g[:n] @ g.T
        rows = np.repeat(np.arange(n), spans[a:b])
        cols = rows + 1 + (np.arange(rows.size) - np.repeat(pair_index(spans[a:b])[:-1], spans[a:b]))
        e = reach - a
        parts.append(np.stack([left[rows, cols], left[n + rows, cols], left[2 * n + rows, cols],
                               right[rows, cols], right[rows, e + cols], dot[rows, cols]], axis=1))
    out = np.concatenate(parts) if parts else np.zeros((0, 6))
    return np.rint(out).astype(np.int64)


def ld_exceeds(sums: np.ndarray, r2: float) -> np.ndarray:
    """Whether each pair is in LD, (P,) bool: ``cov^2 > t v_x v_y`` as plink2 evaluates it (module docstring),
    ``sums`` (P, 6) int64 the pooled :data:`PAIR_SUMS`."""
    n, si, qi, sj, qj, dot = (np.asarray(sums, dtype=np.int64)[:, k] for k in range(6))
    cov = (dot * n - si * sj).astype(np.float64)
    vi = (qi * n - si * si).astype(np.float64)
    vj = (qj * n - sj * sj).astype(np.float64)
    return cov * cov > r2 * (1 + SMALL_EPSILON) * vi * vj


def major_frequency(vsums: np.ndarray) -> np.ndarray:
    """The major allele's frequency over the calls, (d,), from ``(calls, sum g, ...)`` per variant (:func:`variant_sums`
    pooled); 1 without a call."""
    calls, total = vsums[:, 0].astype(np.float64), vsums[:, 1].astype(np.float64)
    p = np.divide(total, 2 * calls, out=np.ones(len(calls)), where=calls > 0)
    return np.maximum(p, 1 - p)


def indep_pairwise(vsums: np.ndarray, exceeds: np.ndarray, spans: np.ndarray, pieces: list[tuple[int, int]],
                   window: PruneWindow, positions=None, frequency=None) -> np.ndarray:
    """The variants ``--indep-pairwise`` removes (module docstring), (d,) bool.

    Parameters
    ----------
    vsums : ndarray of shape (d, 3)
        :func:`variant_sums` over the people the r^2 counts (a constant variant is removed on entry).
    exceeds : ndarray of shape (P,), bool
        :func:`ld_exceeds` of every pair in :func:`pair_index` order.
    spans : ndarray of shape (d,)
        :func:`pair_spans`.
    pieces : list of (start, stop)
        :func:`subcontigs`.
    window : PruneWindow
    positions : array of int, shape (d,), optional
        Base-pair positions (a kb window).
    frequency : ndarray of shape (d, 2), optional
        Calls and allele sums of the people plink2's allele frequencies count (the last two of
        :data:`VARIANT_SUMS`), whose major-allele frequency decides which of a pair goes; default ``vsums``'.
    """
    vsums = np.asarray(vsums, dtype=np.int64)
    constant = (vsums[:, 0] * vsums[:, 2] - vsums[:, 1] ** 2 == 0).tolist()
    major = major_frequency(vsums if frequency is None else np.asarray(frequency, dtype=np.int64))
    state = _Greedy(bytearray(len(vsums)), np.asarray(exceeds, dtype=bool).tobytes(),
                    (pair_index(spans)[:-1] - np.arange(len(vsums)) - 1).tolist(), major.tolist())
    bp = None if positions is None else np.asarray(positions, dtype=np.int64)
    for start, stop in pieces:
        unchecked = list(range(start + 1, stop + 1))  # by index minus start: the first later variant not yet met
        if window.kb:
            end = start + 1
            while end < stop and bp[end] <= bp[start] + window.size:
                end += 1
        else:
            end = min(start + window.size, stop)
        first, loaded = start, start
        while True:
            for v in range(loaded, end):
                state.removed[v] |= constant[v]
            loaded = end
            state.window(first, end, start, unchecked)
            if end == stop:
                break
            if window.kb:
                least = bp[end] - window.size
                first += 1
                while bp[first] < least:
                    first += 1
                while True:
                    end += 1
                    if end == stop or bp[end] > bp[first] + window.size:
                        break
            else:
                first += window.step
                end = min(first + window.size, stop)
    return np.frombuffer(bytes(state.removed), dtype=np.uint8).astype(bool)


@dataclass
class _Greedy:
    """The greedy rule's state in plain Python objects (one window is a short loop): ``removed`` (d,) flags,
    ``exceeds`` (P,) bytes, ``base[i]`` with pair ``(i, j)`` at ``base[i] + j``, ``major`` (d,)."""

    removed: bytearray
    exceeds: bytes
    base: list
    major: list

    def window(self, first: int, end: int, start: int, unchecked: list) -> None:
        """One window ``first .. end - 1``: passes until one removes nothing (``removed`` and ``unchecked``, the
        first later variant each has not met, by index minus ``start``, updated in place)."""
        removed, exceeds, major = self.removed, self.exceeds, self.major
        members = [v for v in range(first, end) if not removed[v]]
        count = len(members)
        changed = True
        while changed:
            changed = False
            for a in range(count):
                i = members[a]
                if removed[i]:
                    continue
                k = bisect_left(members, unchecked[i - start], a + 1)
                while k < count and removed[members[k]]:
                    k += 1
                if k == count:
                    continue
                base = self.base[i]
                while k < count:
                    j = members[k]
                    if not removed[j] and exceeds[base + j]:
                        changed = True
                        if major[i] > major[j] * (1 + SMALL_EPSILON):
                            removed[i] = 1
                        else:
                            removed[j] = 1
                            k += 1
                            while k < count and removed[members[k]]:
                                k += 1
                            unchecked[i - start] = members[k] if k < count else end
                        break
                    k += 1
                else:
                    unchecked[i - start] = end
