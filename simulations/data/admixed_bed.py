"""Biobank-size genotypes written straight to PLINK ``.bed`` files: admixed Balding-Nichols with LD blocks.

The model, drawn one LD block of variants at a time (never the whole matrix in memory):

* **Frequencies** (Balding-Nichols): each variant has an ancestral allele frequency ``f ~ U(0.05, 0.95)``;
  ancestral population ``k`` draws its own ``p_k ~ Beta(f (1 - F_k) / F_k, (1 - f)(1 - F_k) / F_k)`` (``F_k``
  its fixation index, :data:`FST`), clipped to ``[0.001, 0.999]``.
* **Admixture**: person ``i`` at site ``s`` has ancestry proportions ``q_i ~ Dirichlet(c m_s)`` (``m_s`` the
  site's mean mix, :data:`SITE_MIXES`; ``c`` the concentration), so the PCs are continuous and the sites differ.
* **LD blocks**: variants come in blocks of ``ld_block``; in each block each of a person's two haplotypes draws
  its local ancestry ``z ~ q_i``, a latent position ``u`` on a circle of 65,536 and a drift ``w`` (uniform in
  ``[-ld_drift, ld_drift]``); at the block's ``t``-th variant it carries the allele counted (the ``.bim``'s A1)
  when ``(u + t w) mod 65,536 < 65,536 p_z``. Neighbouring variants share the draw, so their r^2 is high and
  decays with distance within a block (as ``t |w|`` grows); blocks are independent. Each variant keeps
  frequency ``p_z`` given the ancestry, and a person's two haplotypes are independent (Hardy-Weinberg given
  ``q_i``).
* **Missing calls**: a fraction ``missing`` of the calls of each block, at uniformly drawn positions (a position
  drawn twice counts once: the fraction made missing is returned).

Every draw of block ``b`` comes from ``numpy.random.default_rng([seed, 1, b])`` (the people's from
``[seed, 0]``): the files depend on the seed and the sizes only. All arithmetic is on ``uint16`` / ``uint8``
arrays of one block, and each block is packed to 2-bit codes once for everyone (the sites are contiguous
column slices of the pooled bytes: every site but the last holds a multiple of 4 people).

Usage::

    python -m simulations.data.admixed_bed OUT --people 100000 --variants 100000 [--pooled] [--seed 0]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

__all__ = ["FST", "SITE_MIXES", "admixed_blocks", "draw_people", "main", "pack", "site_sizes", "write_admixed_bed"]

FST = (0.02, 0.05, 0.1)
"""``F`` (Balding-Nichols) of each ancestral population."""
SITE_MIXES = ((0.70, 0.20, 0.10), (0.10, 0.70, 0.20), (0.10, 0.20, 0.70), (0.34, 0.33, 0.33))
"""Mean ancestry proportions of the people at each of the four sites (a Dirichlet's mean)."""
MAGIC = bytes([0x6C, 0x1B, 0x01])
"""A variant-major PLINK 1 ``.bed`` header."""
ONE = 65_536
"""The latent circle: thresholds and positions are ``uint16``."""
PACKED = np.array([sum([3, 2, 0, 1][(i >> s) & 3] << s for s in (0, 2, 4, 6)) for i in range(256)], dtype=np.uint8)
"""``.bed`` byte of four people whose A1 counts (3: missing) are packed 2 bits each, person ``j`` at bits ``2 j``:
counts ``0, 1, 2`` and missing have codes ``11, 10, 00, 01``."""


def site_sizes(people: int, sites: int) -> list[int]:
    """People of each site: equal multiples of 4, the last site takes the rest.

    Parameters
    ----------
    people : int
        In all; at least ``4 sites``.
    sites : int

    Returns
    -------
    list of int
        ``sites`` sizes summing to ``people``.
    """
    base = people // sites // 4 * 4
    return [base] * (sites - 1) + [people - base * (sites - 1)]


def draw_people(people: int, *, mixes=SITE_MIXES, concentration: float = 2.0, seed: int = 0) -> np.ndarray:
    """Ancestry proportions ``q`` of everyone, site after site (:func:`site_sizes`).

    Returns
    -------
    ndarray of shape (people, populations), float64
        Rows on the simplex; site ``s``'s rows drawn from ``Dirichlet(concentration * mixes[s])``.
    """
    rng = np.random.default_rng([seed, 0])
    sizes = site_sizes(people, len(mixes))
    return np.vstack([rng.dirichlet(concentration * np.asarray(mix, dtype=float), size) for mix, size in
                      zip(mixes, sizes)])


def _block(b: int, length: int, cumulative: np.ndarray, *, fst, ld_drift: int, missing: float,
           seed: int) -> tuple[np.ndarray, np.ndarray, int]:
    """LD block ``b`` of ``length`` variants: ``(counts (n, length) uint8 with 3 missing, frequencies
    (populations, length), calls made missing)``. Person-major: a haplotype's thresholds are one row of the
    populations' (a row gather, not an element gather)."""
    rng = np.random.default_rng([seed, 1, b])
    n, populations = cumulative.shape
    f = rng.uniform(0.05, 0.95, length)
    F = np.asarray(fst, dtype=float)[:, None]
    p = np.clip(rng.beta(f * (1 - F) / F, (1 - f) * (1 - F) / F), 0.001, 0.999)  # (populations, length)
    thresholds = np.round(p * ONE).astype(np.uint16)
    u = rng.random((2, n))
    z = np.zeros((2, n), dtype=np.intp)  # local ancestry
    for k in range(populations - 1):
        z += u > cumulative[:, k]
    position = rng.integers(0, ONE, (2, n, 1), dtype=np.uint16)
    drift = rng.integers(-ld_drift, ld_drift + 1, (2, n, 1), dtype=np.int16).view(np.uint16)
    steps = np.arange(length, dtype=np.uint16)
    counts = np.zeros((n, length), dtype=np.uint8)
    for h in range(2):
        latent = drift[h] * steps  # (n, length); wraps: mod 65,536
        latent += position[h]
        counts += latent < thresholds[z[h]]
    holes = rng.integers(0, length * n, int(rng.binomial(length * n, missing)))
    counts.reshape(-1)[holes] = 3
    return counts, p, int(np.count_nonzero(counts == 3))


def admixed_blocks(q: np.ndarray, variants: int, *, fst=FST, ld_block: int = 50, ld_drift: int = 2048,
                   missing: float = 0.01, seed: int = 0):
    """The genotypes, one LD block at a time (person-major: :func:`pack` writes them variant-major).

    Parameters
    ----------
    q : ndarray of shape (n, populations)
        Ancestry proportions (:func:`draw_people`).
    variants : int
        ``d``.
    fst : sequence of float
        ``F_k`` of each population (``populations`` of them, each in ``(0, 1)``).
    ld_block : int
        Variants per LD block.
    ld_drift : int
        Largest drift of a haplotype's latent position per variant (of 65,536).
    missing : float
        Fraction of calls set missing.
    seed : int

    Yields
    ------
    start : int
        The block's first variant.
    counts : ndarray of shape (n, length), uint8
        A1 counts 0, 1, 2 (3: a missing call), person-major.
    frequencies : ndarray of shape (populations, length)
        The populations' allele frequencies drawn.
    missing : int
        Calls made missing in the block.
    """
    cumulative = np.cumsum(q, axis=1)
    for b, start in enumerate(range(0, variants, ld_block)):
        length = min(ld_block, variants - start)
        counts, p, holes = _block(b, length, cumulative, fst=fst, ld_drift=ld_drift, missing=missing,
                                  seed=seed)
        yield start, counts, p, holes


def pack(counts: np.ndarray) -> np.ndarray:
    """``.bed`` bytes (variant-major) of person-major A1 counts, padding with code ``00``.

    Parameters
    ----------
    counts : ndarray of shape (n, v), uint8
        0, 1, 2; 3 for missing.

    Returns
    -------
    ndarray of shape (v, ceil(n / 4)), uint8
        Person ``j`` of a variant in bits ``2 (j % 4)`` of byte ``j // 4``.
    """
    n, v = counts.shape
    if n % 4:
        counts = np.concatenate([counts, np.full((4 - n % 4, v), 2, dtype=np.uint8)])  # code 00
    quads = counts.reshape(-1, 4, v)
    index = quads[:, 0] | quads[:, 1] << 2
    index |= quads[:, 2] << 4
    index |= quads[:, 3] << 6
    return np.ascontiguousarray(PACKED[index].T)


def write_admixed_bed(folder, people: int, variants: int, *, pooled: bool = True, mixes=SITE_MIXES,
                      concentration: float = 2.0, fst=FST, ld_block: int = 50, ld_drift: int = 2048,
                      missing: float = 0.01, seed: int = 0, progress=None) -> dict:
    """Write ``folder/sites/partition_<s>.bed/.bim/.fam`` (one per mix) and, with ``pooled``, ``folder/pooled.*``.

    Also ``folder/admixture.npy`` (the ``q`` drawn, (people, populations) float32, pooled order) and
    ``folder/frequencies.npy`` (the populations' frequencies, (populations, variants) float32).

    Parameters
    ----------
    folder : str or Path
        Created if absent.
    people, variants : int
        ``n`` (at least 4 per site) and ``d``.
    pooled : bool
        Also write everyone's file (for ``plink2``; fedspectral reads the sites').
    mixes, concentration, fst, ld_block, ld_drift, missing, seed
        As :func:`draw_people` and :func:`admixed_blocks`.
    progress : callable or None
        Called with one line of progress (variants written, seconds, an estimate of what is left) about every
        5 % of the variants.

    Returns
    -------
    dict
        ``sites`` (people per site), ``missing`` (fraction of calls made missing), ``seconds``.
    """
    folder = Path(folder)
    sizes = site_sizes(people, len(mixes))
    if min(sizes) < 4 or len(fst) != len(mixes[0]):
        raise ValueError(f"{people} people over {len(mixes)} sites, {len(fst)} populations: need at least 4 people "
                         f"per site and one F per population")
    start_time = time.perf_counter()
    (folder / "sites").mkdir(parents=True, exist_ok=True)
    names = [f"sites/partition_{s}" for s in range(len(sizes))] + (["pooled"] if pooled else [])
    q = draw_people(people, mixes=mixes, concentration=concentration, seed=seed)
    edges = np.concatenate([[0], np.cumsum(sizes)])
    columns = [(edges[s] // 4, -(-edges[s + 1] // 4)) for s in range(len(sizes))] + [(0, -(-people // 4))]
    frequencies = np.empty((len(fst), variants), dtype=np.float32)
    beds = {name: open(folder / f"{name}.bed", "wb") for name in names}
    made_missing, step = 0, max(1, variants // 20)
    try:
        for handle in beds.values():
            handle.write(MAGIC)
        for start, counts, p, holes in admixed_blocks(q, variants, fst=fst, ld_block=ld_block, ld_drift=ld_drift,
                                                      missing=missing, seed=seed):
            packed = pack(counts)
            for name, (lo, hi) in zip(names, columns):
                beds[name].write(np.ascontiguousarray(packed[:, lo:hi]).data)
            frequencies[:, start:start + counts.shape[1]] = p
            made_missing += holes
            done = start + counts.shape[1]
            if progress is not None and (done // step > start // step or done == variants):
                seconds = time.perf_counter() - start_time
                progress(f"admixed genotypes: {done:,} / {variants:,} variants of {people:,} people, {seconds:.0f} s,"
                         f" about {seconds * (variants - done) / done:.0f} s left")
    finally:
        for handle in beds.values():
            handle.close()
    bim = "".join(f"1\tb{j // ld_block}_{j}\t0\t{1000 * (j + 1)}\tA\tG\n" for j in range(variants))
    site_of = np.searchsorted(edges, np.arange(people), side="right") - 1
    for s, name in enumerate(names):
        (folder / f"{name}.bim").write_text(bim)
        who = range(edges[s], edges[s + 1]) if name != "pooled" else range(people)
        (folder / f"{name}.fam").write_text("".join(f"site_{site_of[j]}\tp{j}\t0\t0\t0\t-9\n" for j in who))
    np.save(folder / "admixture.npy", q.astype(np.float32))
    np.save(folder / "frequencies.npy", frequencies)
    return {"sites": sizes, "missing": made_missing / (people * variants),
            "seconds": time.perf_counter() - start_time}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="folder for sites/partition_<i>.bed (and pooled.bed)")
    parser.add_argument("--people", type=int, default=100_000)
    parser.add_argument("--variants", type=int, default=100_000)
    parser.add_argument("--pooled", action="store_true", help="also write pooled.bed (everyone; for plink2)")
    parser.add_argument("--missing", type=float, default=0.01)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.people < 16 or args.variants < 1 or not 0 <= args.missing < 1:
        parser.error("--people must be at least 16, --variants at least 1, --missing in [0, 1)")
    made = write_admixed_bed(args.out, args.people, args.variants, pooled=args.pooled, missing=args.missing,
                             seed=args.seed, progress=lambda line: print(line, file=sys.stderr, flush=True))
    print(json.dumps(made))
    return 0


if __name__ == "__main__":
    sys.exit(main())
