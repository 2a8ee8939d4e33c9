"""The variants of a PLINK ``.bed`` file (its ``.bim``; a ``.pgen``'s ``.pvar``), and how sites whose lists differ
are aligned.

Before round 1 every site holding a ``.bed`` sends a digest of its variant list (:func:`variant_digest`: SHA-256
of each variant's chromosome, ID, position and alleles A1 / A2, in file order). Where all digests agree the sites
hold the same variants in the same order and nothing else is exchanged but one site's IDs and alleles, which the
model records. Where they differ every site sends its IDs and alleles (:func:`encode_variants`; never the
chromosome, position or any genotype) and the server computes the list all sites use (:func:`align_variants`):

* the order is the lowest partition's; another site's variants are found by ID;
* a variant is kept when every site lists its ID exactly once with the same two alleles; a site that names them
  the other way round (A1 and A2 exchanged) counts ``2 - g`` for it when its calls are decoded
  (:meth:`~fl_strategies.kernels.rows.BedVariants.aligned`), a missing call staying missing;
* every other variant (missing at some site, listed twice at a site, alleles that differ otherwise) is dropped
  at every site and counted;
* strand-ambiguous variants (alleles A/T or C/G, whose complements are the same pair, so that a strand flip cannot
  be told from an allele swap) are kept only where every site lists them in the same order (A1/A2 as the lowest
  partition's); one listed the other way round at some site is dropped at every site and counted
  (``ambiguous-dropped``), as meta-analysis QC and array merges drop them. ``drop-ambiguous = true`` drops every
  strand-ambiguous variant whatever the order (common before merging data from different arrays), also when the
  sites' lists agree. No strand flip is attempted for other variants either: the sites must report alleles on the
  same strand (the same reference build), and a site whose A/G variant reads T/C elsewhere loses that variant as a
  mismatch;
* the run is refused when the variants kept are fewer than :data:`MIN_SHARED` of some site's (a site whose
  variants have no ID, ``.``, is named: such lists cannot be aligned). A command (``run``, ``deploy``) makes the
  same alignment of the sites' files before any Flower process starts.
"""

from __future__ import annotations

import hashlib
import io
import os
import threading
import time
from collections import Counter, OrderedDict
from pathlib import Path

import numpy as np

__all__ = ["MIN_SHARED", "variant_list_path", "read_bim", "forget_parsed", "file_variants", "read_fam",
           "variant_digest", "list_digest", "encode_variants", "decode_variants", "align_variants", "site_alignment",
           "as_variants", "AMBIGUOUS", "is_ambiguous", "duplicate_ids", "check_unique_ids"]

MIN_SHARED = 0.5
"""The smallest share of a site's variants that every site must hold for a run over aligned variant lists."""

AMBIGUOUS = ({"A", "T"}, {"C", "G"})
"""The allele pairs whose strand the alleles alone do not tell."""

NO_ID = (".", "")
"""Variant IDs that name no variant (plink writes ``.`` for a variant without one): lists aligned by ID cannot
use them."""


def variant_list_path(path: str | Path) -> Path:
    """The variant list of a genotype file: the ``.pvar`` beside a ``.pgen``, else the ``.bim`` beside it (a
    ``.bed``); what :func:`read_bim` reads."""
    return Path(path).with_suffix(".pvar" if str(path).lower().endswith(".pgen") else ".bim")


def read_bim(bed_path: str | Path) -> list[tuple[str, str, str, str, str]]:
    """The ``.bim`` beside a ``.bed``: ``(chromosome, ID, position, A1, A2)`` per variant, in file order; for a
    ``.pgen`` its ``.pvar``, ALT as A1 (:func:`fl_strategies.files.pgen.read_pvar`); the file is
    :func:`variant_list_path`'s.

    A ``.bim`` is parsed once per process for each content (:data:`_PARSED`): the file is read whole (a changed
    file is parsed again, whatever its size and time say), and a text parsed before, the same file asked for again
    or another site's copy of the same list, gives the list parsed then (a new list of the same tuples). A compare
    run over 188,000 variants in four sites asked for them nine times: 0.6 s. A file not changed for
    :data:`SETTLED_NS` when it was read is not read again while its path, device, inode, size, modification and
    change times stay the same (:data:`_STAMPS`; a file changed since has a later change time, which no one can set
    back)."""
    listing = variant_list_path(bed_path)
    if listing.suffix == ".pvar":
        from .pgen import read_pvar

        return read_pvar(bed_path)
    return list(_parsed_bim(listing)[0])


def file_variants(bed_path: str | Path) -> list[tuple[str, str, str]]:
    """``(ID, A1, A2)`` per variant of a genotype file (:func:`read_bim`'s, in file order): what a site's list is
    aligned by; a ``.bim`` parsed before gives the list made then (a new list of the same tuples)."""
    return list(_derived(bed_path, 1, lambda rows: [(vid, a1, a2) for _, vid, _, a1, a2 in rows]))


def list_digest(bed_path: str | Path, bim: list[tuple[str, str, str, str, str]] | None = None) -> str:
    """:func:`variant_digest` of the genotype file's variant list (:func:`read_bim`'s); of a ``.bim``, computed
    once per parsed content (the sites of a simulation holding copies of one list: 34 ms each at 188,000
    variants); of another list (a ``.pvar``, not kept parsed) from ``bim`` when given (the list the caller read)."""
    return _derived(bed_path, 2, variant_digest, bim)


def _variant_id_repeats(bed_path: str | Path) -> str:
    """:func:`duplicate_ids` of the variant IDs of the genotype file's list; of a ``.bim``, once per parsed
    content."""
    return _derived(bed_path, 3, lambda rows: duplicate_ids([vid for _, vid, _, _, _ in rows]))


def _derived(bed_path: str | Path, slot: int, compute, bim: list[tuple[str, str, str, str, str]] | None = None):
    """``compute(rows)`` of the genotype file's variant list (``rows``: :func:`read_bim`'s). Of a ``.bim``, found
    once per parsed content and kept in slot ``slot`` of its :data:`_PARSED` entry (the sites' threads asking at
    once: one computes while the others wait, under the entry's own lock, so that other lists do not wait); of
    another list (a ``.pvar``, not kept parsed) from ``bim`` when given (the list the caller read), else read."""
    listing = variant_list_path(bed_path)
    if listing.suffix == ".pvar":
        return compute(read_bim(bed_path) if bim is None else bim)
    entry = _parsed_bim(listing)
    with entry[4]:
        if entry[slot] is None:
            entry[slot] = compute(entry[0])
    return entry[slot]


def _parsed_bim(listing: Path) -> list:
    """The entry of :data:`_PARSED` for the ``.bim`` ``listing``: ``[rows, variants, digest, repeated IDs, lock]``,
    the middle three ``None`` until asked for (:func:`_derived`)."""
    stamp = _stamp(listing)
    if stamp is not None:
        with _PARSED_LOCK:
            key = _STAMPS.get(stamp[1:])
            entry = None if key is None else _PARSED.get(key)
            if entry is not None:
                _PARSED.move_to_end(key)
                return entry
    with open(listing, "rb") as handle:
        data = handle.read()
    key = hashlib.blake2b(data, digest_size=32).digest()  # the text itself is not kept
    if stamp is not None and stamp[-1] <= stamp[0] - SETTLED_NS:  # stat'ed before the read, unchanged for a while
        with _PARSED_LOCK:
            if len(_STAMPS) >= _STAMPS_KEPT:
                _STAMPS.clear()
            _STAMPS[stamp[1:]] = key
    with _PARSED_LOCK:
        entry = _PARSED.get(key)
        if entry is not None:
            _PARSED.move_to_end(key)
            return entry
    entry = [_parse_bim(data, listing), None, None, None, threading.Lock()]
    with _PARSED_LOCK:
        _PARSED[key] = entry
        while len(_PARSED) > _PARSED_KEPT:
            _PARSED.popitem(last=False)
    return entry


_PARSED: OrderedDict[bytes, list] = OrderedDict()
"""The ``.bim`` texts :func:`read_bim` parsed, by their BLAKE2b digest (256 bits), most recent last (at most
:data:`_PARSED_KEPT`): ``[rows, variants, digest, repeated IDs]``, :func:`file_variants`', :func:`list_digest`'s
and :func:`check_unique_ids`' (``None`` until asked for). What the
process keeps: about 290 bytes a variant (53 MB at 188,000 variants, with the IDs and alleles) for each distinct
list."""
_PARSED_KEPT = 4
_PARSED_LOCK = threading.Lock()

_STAMPS: dict[tuple, bytes] = {}
"""A settled ``.bim``'s ``(path, device, inode, size, mtime ns, ctime ns)`` to its text's key in :data:`_PARSED`
(at most :data:`_STAMPS_KEPT`, then forgotten all at once)."""
_STAMPS_KEPT = 64
SETTLED_NS = 2_000_000_000
"""Nanoseconds a ``.bim``'s latest modification or change must lie before the moment it is read for its stamp to
stand for its text (:func:`read_bim`): a file written again within a clock tick of a read keeps its times, one
changed later gets a later change time."""


def _stamp(listing: Path) -> tuple | None:
    """``(now ns, path, device, inode, size, mtime ns, ctime ns, latest of the two)`` of the file, ``None`` where it
    cannot be stat'ed (the read names the problem)."""
    now = time.time_ns()
    try:
        st = os.stat(listing)
    except OSError:
        return None
    return (now, str(listing), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns,
            max(st.st_mtime_ns, st.st_ctime_ns))


def forget_parsed() -> None:
    """Let go of the variant lists :func:`read_bim` keeps (:data:`_PARSED`): for a process that has checked its
    files and has no more use for them (``fedspectral run`` while Flower runs)."""
    with _PARSED_LOCK:
        _PARSED.clear()
        _STAMPS.clear()


def _parse_bim(data: bytes, listing: Path) -> list[tuple[str, str, str, str, str]]:
    """The variants of a ``.bim``'s bytes, read as a UTF-8 text file is read (universal newlines); a
    ``ValueError`` naming ``listing`` and the line that has not six fields."""
    rows = []
    for line in io.TextIOWrapper(io.BytesIO(data), encoding="utf-8"):
        fields = line.split()
        if fields:
            if len(fields) != 6:
                raise ValueError(f"{listing}: line {len(rows) + 1} has {len(fields)} fields, not 6")
            rows.append((fields[0], fields[1], fields[3], fields[4], fields[5]))
    return rows


def read_fam(bed_path: str | Path) -> list[tuple[str, str]]:
    """The ``.fam`` beside a ``.bed``: ``(FID, IID)`` per person, in file order; for a ``.pgen`` its ``.psam``
    (:func:`fl_strategies.files.pgen.read_psam`)."""
    if str(bed_path).lower().endswith(".pgen"):
        from .pgen import read_psam

        return read_psam(bed_path)
    with open(Path(bed_path).with_suffix(".fam"), encoding="utf-8") as handle:
        return [tuple(line.split()[:2]) for line in handle if line.strip()]


def variant_digest(bim: list[tuple[str, str, str, str, str]]) -> str:
    """SHA-256 (hex) of a variant list: every variant's chromosome, ID, position, A1 and A2, in order."""
    digest = hashlib.sha256()
    if bim:  # one text, one update: the digest of the lines fed one at a time
        digest.update(("\n".join(map("\t".join, bim)) + "\n").encode("utf-8"))
    return digest.hexdigest()


def encode_variants(variants: list[tuple[str, str, str]]) -> bytes:
    """``(ID, A1, A2)`` per variant as bytes, one ``ID\\tA1\\tA2`` line each (what a site reveals)."""
    return "".join(f"{vid}\t{a1}\t{a2}\n" for vid, a1, a2 in variants).encode("utf-8")


def decode_variants(data: bytes) -> list[tuple[str, str, str]]:
    """The inverse of :func:`encode_variants`; a ``ValueError`` for a line that is not three fields."""
    out = []
    for number, line in enumerate(data.decode("utf-8").splitlines(), start=1):
        fields = line.split("\t")
        if len(fields) != 3:
            raise ValueError(f"variant line {number} is not ID, A1 and A2")
        out.append(tuple(fields))
    return out


def is_ambiguous(a1: str, a2: str) -> bool:
    """Whether alleles ``a1`` / ``a2`` are strand-ambiguous (A/T or C/G, either case)."""
    return {a1.upper(), a2.upper()} in AMBIGUOUS


def duplicate_ids(ids, limit: int = 5) -> str:
    """The IDs listed more than once in ``ids`` (in first-seen order), ``""`` when none: up to ``limit`` named,
    then how many more, e.g. ``"rs7 (2 times), rs9 (3 times)"``; IDs in :data:`NO_ID` are not counted."""
    ids = list(ids)
    counts = Counter(ids)  # counted in C; the IDs that name no variant are taken out after
    if len(counts) == len(ids):  # every ID once: nothing to name
        return ""
    for unnamed in NO_ID:
        counts.pop(unnamed, None)
    twice = [(i, k) for i, k in counts.items() if k > 1]
    named = ", ".join(f"{' '.join(i) if isinstance(i, tuple) else i} ({k} times)" for i, k in twice[:limit])
    return named + (f" and {len(twice) - limit} more" if len(twice) > limit else "")


def check_unique_ids(bed_path: str | Path, label: str = "file",
                     bim: list[tuple[str, str, str, str, str]] | None = None, people_only: bool = False) -> None:
    """Refuse a genotype file whose ``.bim`` / ``.pvar`` lists a variant ID twice, or whose ``.fam`` / ``.psam``
    lists a person (FID IID) twice: variants are aligned by ID and people kept by ID, which a repeated ID leaves
    ambiguous (plink2 allows repeated variant IDs in some commands; ``.`` IDs are not counted here).

    ``bim``, when given, is the file's variant list as :func:`read_bim` returned it (a caller that read it already
    saves a second read: 100,000 variants take about 0.5 s); without it a ``.bim``'s IDs are counted once per
    parsed content; ``people_only``: the people alone (a caller that checked the same variant list already).

    Raises
    ------
    ValueError
        One line: ``label``, the path, what is repeated and the IDs (:func:`duplicate_ids`).
    """
    checks = [("people (FID IID)", lambda: duplicate_ids(read_fam(bed_path)))]
    if not people_only:
        checks.insert(0, ("variant IDs", lambda: _variant_id_repeats(bed_path) if bim is None
                          else duplicate_ids([vid for _, vid, _, _, _ in bim])))
    for what, repeats in checks:
        twice = repeats()
        if twice:
            raise ValueError(f"{label} {str(bed_path)!r} lists {what} more than once: {twice}; each must be listed "
                             "once (plink2 --rm-dup force-first or --set-all-var-ids for variants; one line per "
                             "person)")


def align_variants(lists: dict[int, list[tuple[str, str, str]]], drop_ambiguous: bool = False) \
        -> tuple[list[tuple[str, str, str]], dict]:
    """The variant list every site uses (module docstring), and what was dropped or flipped.

    Parameters
    ----------
    lists : dict of int to list of (ID, A1, A2)
        Each site's variants by partition id, in its file order.
    drop_ambiguous : bool
        ``drop-ambiguous``: drop every strand-ambiguous variant, not only those listed in another order.

    Returns
    -------
    variants : list of (ID, A1, A2)
        The variants kept, in the lowest partition's order, with its alleles.
    report : dict
        ``missing`` (IDs not at every site), ``duplicated``, ``mismatched`` (other alleles), ``ambiguous`` (kept
        strand-ambiguous variants), ``ambiguous-dropped`` (strand-ambiguous variants dropped: listed in another
        order at some site, or all of them with ``drop_ambiguous``), ``flipped`` (partition id to the variants it
        counts the other way round).

    Raises
    ------
    ValueError
        One line when fewer than :data:`MIN_SHARED` of some site's variants are kept.
    """
    per_site = [Counter(vid for vid, _, _ in variants) for variants in lists.values()]
    duplicated = {vid for found in per_site for vid, times in found.items() if times > 1}
    missing = {vid for vid in set().union(*per_site) - duplicated if any(vid not in found for found in per_site)}
    alleles = [{vid: (a1, a2) for vid, a1, a2 in variants} for variants in lists.values()]
    report = {"missing": len(missing), "duplicated": len(duplicated), "mismatched": 0, "ambiguous": 0,
              "ambiguous-dropped": 0, "flipped": {pid: 0 for pid in lists}}
    kept = []
    for vid, a1, a2 in lists[min(lists)]:
        if vid in duplicated or vid in missing:
            continue
        if a1 == a2 or any(set(found[vid]) != {a1, a2} for found in alleles):
            report["mismatched"] += 1
            continue
        swapped = [found[vid] != (a1, a2) for found in alleles]
        if is_ambiguous(a1, a2):
            if drop_ambiguous or any(swapped):  # a swap cannot be told from a strand flip: not aligned
                report["ambiguous-dropped"] += 1
                continue
            report["ambiguous"] += 1
        for pid, flipped in zip(lists, swapped):
            report["flipped"][pid] += flipped
        kept.append((vid, a1, a2))
    if len(kept) < MIN_SHARED * max(len(variants) for variants in lists.values()):
        sizes = ", ".join(f"partition {pid}: {len(variants)}" for pid, variants in sorted(lists.items()))
        unnamed = {pid: sum(vid in NO_ID for vid, _, _ in variants) for pid, variants in sorted(lists.items())}
        hint = "" if not any(unnamed.values()) else (
            "; variants without an ID ('.') cannot be told apart (" + ", ".join(
                f"partition {pid}: {k}" for pid, k in unnamed.items() if k) + "): give every variant an ID, e.g. "
            "plink2 --set-all-var-ids '@:#:$r:$a' at every site")
        raise ValueError(f"the sites share {len(kept)} variants (same ID and alleles), fewer than {MIN_SHARED:g} of "
                         f"a site's ({sizes}; {report['missing']} not at every site, {report['mismatched']} with "
                         f"other alleles, {report['duplicated']} listed twice at a site"
                         + (f", {report['ambiguous-dropped']} strand-ambiguous dropped" if report['ambiguous-dropped']
                            else "") + "): refusing to run on so few"
                         + hint)
    return kept, report


def site_alignment(own: list[tuple[str, str, str]], variants: list[tuple[str, str, str]]) \
        -> tuple[np.ndarray, np.ndarray]:
    """Where a site's variants go in the list every site uses.

    Parameters
    ----------
    own : list of (ID, A1, A2), length d_file
        The site's variants in file order.
    variants : list of (ID, A1, A2), length d
        The list (:func:`align_variants`).

    Returns
    -------
    columns : ndarray of shape (d_file,), int64
        Each file variant's column in the list, -1 where the list leaves it out.
    flip : ndarray of shape (d_file,), bool
        The file variants whose A1 is the list's A2.

    Raises
    ------
    ValueError
        When a variant of the list is not in the file with the same two alleles.
    """
    where = {vid: (column, a1, a2) for column, (vid, a1, a2) in enumerate(variants)}
    columns, flip = np.full(len(own), -1, dtype=np.int64), np.zeros(len(own), dtype=bool)
    for index, (vid, a1, a2) in enumerate(own):
        found = where.get(vid)
        if found is not None and {a1, a2} == {found[1], found[2]}:
            columns[index], flip[index] = found[0], a1 != found[1]
    if np.unique(columns[columns >= 0]).size != len(variants):
        raise ValueError(f"the file holds {np.unique(columns[columns >= 0]).size} of the run's {len(variants)} "
                         "variants (same ID and alleles)")
    return columns, flip


def as_variants(X, path: str | Path, variants: list[tuple[str, str, str]], label: str = "file"):
    """A ``.bed`` (:class:`~fl_strategies.kernels.rows.BedVariants`) as the columns of ``variants`` (a model's: found
    by ID, A1/A2 exchanged flipped when decoded), unless its ``.bim`` lists exactly those; ``label`` names ``path``
    in a refusal."""
    own = file_variants(path)
    if own == list(variants):
        return X
    try:
        columns, flip = site_alignment(own, variants)
    except ValueError as ex:
        raise ValueError(f"{label} {str(path)!r}: {ex}") from None
    return X.aligned(columns, flip, len(variants))
