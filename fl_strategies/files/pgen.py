"""PLINK 2 ``.pgen`` genotype files (with their ``.pvar`` and ``.psam``), read as a ``.bed`` is.

A ``.pgen`` is decoded once, when it is opened, through ``pgenlib`` (plink2's own reader: hard calls, the ALT
allele counted 0/1/2, a missing call -9) into the 2-bit codes of a PLINK 1 ``.bed`` (variant-major, first person in
the low bits), and from then on read by :class:`~fl_strategies.kernels.rows.BedVariants` like a ``.bed``: the same
products, missing calls, variant alignment, QC and plink2 outputs. The ALT allele is the counted one (a ``.bed``'s
A1: ``plink2 --make-bed`` writes ALT as A1, ``--make-pgen`` reads A1 as ALT), so the same genotypes give the same
model in either format, and the variants' ``(chromosome, ID, position, A1, A2)`` are ``(#CHROM, ID, POS, ALT,
REF)`` of the ``.pvar``. Dosages are not read (the hard calls, as ``plink2 --make-bed`` writes them); a variant
with more than one ALT allele is refused (``plink2 --max-alleles 2`` drops them).

Where the codes live: up to :data:`MEMORY_BYTES` (``s d / 4`` bytes) in memory; above it in a temporary file of
the system's temporary folder (``TMPDIR``; mode 600, removed from the folder as soon as it is created, so nothing is
left behind whatever happens to the process) that is memory-mapped, so that the system can page the codes out as
it pages a ``.bed`` file.
"""

from __future__ import annotations

import mmap
import os
import tempfile
from pathlib import Path

import numpy as np

from ..kernels.rows import BedVariants

__all__ = ["MEMORY_BYTES", "read_pgen", "read_pvar", "read_psam"]

MEMORY_BYTES = 1 << 26
"""The largest 2-bit code array (bytes: people / 4 x variants) kept in memory; a larger one goes to a temporary
file (module docstring). 64 MiB: 5,000 people x 50,000 variants."""

_BED_CODE = np.full(256, 1, dtype=np.uint8)
"""The ``.bed`` 2-bit code of each pgenlib int8 call (as a byte): ALT counts 2 -> ``00``, 1 -> ``10``, 0 -> ``11``,
a missing call (-9) -> ``01``."""
_BED_CODE[[0, 1, 2]] = [3, 2, 0]

_PAIR_CODE = (_BED_CODE[np.arange(1 << 16) & 0xFF] | (_BED_CODE[np.arange(1 << 16) >> 8] << 2)).astype(np.uint8)
"""The two 2-bit codes (4 bits, the first person low) of two int8 calls read as one little-endian uint16: (65536,)."""

_READ_BYTES = 1 << 24
"""The int8 calls decoded at a time (16 MiB)."""


def _beside(path: Path, suffix: str, where: str) -> Path:
    """The file ``suffix`` beside the ``.pgen`` (a ``ValueError`` naming it when it is not there)."""
    other = path.with_suffix(suffix)
    if not other.is_file():
        raise ValueError(f"{where}: has no {suffix} beside it ({str(other)!r}); a .pgen needs its .pvar and .psam "
                         "(plink2 --make-pgen writes all three)")
    return other


def read_pvar(pgen_path: str | Path) -> list[tuple[str, str, str, str, str]]:
    """The ``.pvar`` beside a ``.pgen``: ``(chromosome, ID, position, A1, A2)`` per variant, in file order, with the
    ALT allele (the one counted) as A1 and REF as A2, as ``plink2 --make-bed`` writes the ``.bim``.

    A ``.pvar`` with a ``#CHROM`` header line is read by its column names (``##`` lines skipped); one without is
    read as a ``.bim`` (six columns). A ``ValueError`` names the file and line of a variant with more than one ALT
    allele or missing columns.
    """
    path = Path(pgen_path).with_suffix(".pvar")
    rows: list[tuple[str, str, str, str, str]] = []
    columns = None
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            fields = line.split()
            if not fields or line.startswith("##"):
                continue
            if columns is None and fields[0].startswith("#"):
                names = [name.upper() for name in fields]
                missing = [name for name in ("#CHROM", "POS", "ID", "REF", "ALT") if name not in names]
                if missing:
                    raise ValueError(f"{path}: line {number}: the header has no {' or '.join(missing)} column")
                columns = [names.index(name) for name in ("#CHROM", "ID", "POS", "ALT", "REF")]
                continue
            if columns is None:  # no header: the .bim's columns (chromosome, ID, cM, position, A1 = ALT, A2 = REF)
                columns = [0, 1, 3, 4, 5]
            if len(fields) <= max(columns):
                raise ValueError(f"{path}: line {number} has {len(fields)} fields, fewer than its header's")
            chrom, vid, pos, alt, ref = (fields[c] for c in columns)
            if "," in alt:
                raise ValueError(f"{path}: line {number}: variant {vid} has {alt.count(',') + 1} ALT alleles "
                                 f"({alt}); only biallelic variants are read (plink2 --max-alleles 2 drops the others)")
            rows.append((chrom, vid, pos, alt, ref))
    return rows


def read_psam(pgen_path: str | Path, parents: bool = False) -> list[tuple[str, str]]:
    """The ``.psam`` beside a ``.pgen``: ``(FID, IID)`` per person, in file order (``(PAT, MAT)`` with ``parents``).

    A ``#FID`` header line gives both IDs; a ``#IID`` one only IIDs, whose FID is ``0`` (what ``plink2
    --make-bed`` writes in the ``.fam``); a file without a header is read as a ``.fam`` (FID, IID, PAT, MAT first).
    A header without ``PAT`` / ``MAT`` columns gives parents ``0`` (unknown: a founder, as plink2 reads it).
    """
    path = Path(pgen_path).with_suffix(".psam")
    people: list[tuple[str, str]] = []
    columns = None  # FID, IID, PAT, MAT positions (-1: absent)
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            fields = line.split()
            if not fields or line.startswith("##"):
                continue
            if columns is None and fields[0].startswith("#"):
                names = [name.upper() for name in fields]
                if "IID" not in names and names[0] != "#IID":
                    raise ValueError(f"{path}: line {number}: the header has no IID column")
                columns = tuple(names.index(name) if name in names else -1 for name in ("#FID", "IID", "PAT", "MAT"))
                if names[0] == "#IID":
                    columns = (-1, 0) + columns[2:]
                continue
            if columns is None:  # no header: as a .fam
                columns = (0, 1, 2, 3)
            wanted = columns[2:] if parents else columns[:2]
            if len(fields) <= max(columns[:2]) or len(fields) <= max(wanted):
                raise ValueError(f"{path}: line {number} has {len(fields)} fields, fewer than its header's")
            people.append(tuple(fields[c] if c >= 0 else "0" for c in wanted))
    return people


def _codes_buffer(shape: tuple[int, int]) -> np.ndarray:
    """A writable uint8 array for the 2-bit codes: in memory up to :data:`MEMORY_BYTES`, else memory-mapped from a
    removed temporary file (module docstring)."""
    size = shape[0] * shape[1]
    if size <= MEMORY_BYTES:
        return np.empty(shape, dtype=np.uint8)
    handle, name = tempfile.mkstemp(prefix="fedspectral-pgen-", suffix=".codes")  # mode 600
    try:
        os.unlink(name)
        os.ftruncate(handle, size)
        mapped = mmap.mmap(handle, size)
    finally:
        os.close(handle)  # the mapping keeps the file's pages until the array is freed
    return np.frombuffer(mapped, dtype=np.uint8).reshape(shape)


def _reason(exc: Exception) -> str:
    """pgenlib's message (bytes in its exceptions) as one line of text."""
    reason = exc.args[0] if exc.args else ""
    if isinstance(reason, bytes):
        reason = reason.decode("utf-8", "replace")
    return " ".join(str(reason).split()) or type(exc).__name__


def _pgenlib():
    try:
        import pgenlib
    except ImportError:
        raise ValueError("reading a .pgen needs the Python package pgenlib, which is not installed: "
                         "pip install pgenlib (a dependency of fedspectral: pip install -e . installs it)") from None
    return pgenlib


def read_pgen(path: Path, where: str) -> BedVariants:
    """The ``.pgen`` at ``path`` as a :class:`~fl_strategies.kernels.rows.BedVariants` of its ``.bed`` codes
    (module docstring): people (the ``.psam``'s lines) x variants (the ``.pvar``'s), read once.

    Parameters
    ----------
    path : Path
        The ``.pgen``; its ``.pvar`` and ``.psam`` beside it.
    where : str
        How a refusal names the file.

    Raises
    ------
    ValueError
        One line naming the file: no ``.pvar`` / ``.psam`` beside it, no ``pgenlib``, a file ``pgenlib`` cannot
        read, counts that disagree with the ``.pvar`` / ``.psam``, a multiallelic variant.
    """
    _beside(path, ".pvar", where)
    _beside(path, ".psam", where)
    pgenlib = _pgenlib()
    try:
        people, variants = len(read_psam(path)), len(read_pvar(path))
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{where}: its .pvar or .psam cannot be read: {exc}") from None
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None
    if people < 1 or variants < 1:
        raise ValueError(f"{where}: has {people} people and {variants} variants; at least one of each is required")
    try:
        reader = pgenlib.PgenReader(bytes(path), raw_sample_ct=people)
    except Exception as exc:  # pgenlib raises RuntimeError for a file it cannot read
        raise ValueError(f"{where}: is not a readable PLINK 2 .pgen file (with {people} people in its .psam): "
                         f"{_reason(exc)}") from None
    try:
        if reader.get_variant_ct() != variants:
            raise ValueError(f"{where}: holds {reader.get_variant_ct()} variants, but its .pvar lists {variants}")
        width = (people + 3) // 4
        try:
            raw = _codes_buffer((variants, width))
        except OSError as exc:
            raise ValueError(f"{where}: no room for its {variants * width} bytes of decoded calls in the temporary "
                             f"folder {tempfile.gettempdir()!r} (set TMPDIR): {exc.strerror or exc}") from None
        step = min(variants, max(1, _READ_BYTES // people))
        calls = np.full((step, 4 * width), 2, dtype=np.int8)  # a last byte's padding calls: code 00
        unpadded = None if people % 4 == 0 else np.empty((step, people), dtype=np.int8)
        for start in range(0, variants, step):
            b = min(step, variants - start)
            if unpadded is None:
                reader.read_range(start, start + b, calls[:b])
            else:
                reader.read_range(start, start + b, unpadded[:b])
                calls[:b, :people] = unpadded[:b]
            pairs = _PAIR_CODE[calls[:b].view("<u2")]  # (b, 2 width): two people's codes a nibble
            out = raw[start:start + b]
            np.left_shift(pairs[:, 1::2], 4, out=out)
            out |= pairs[:, 0::2]
    except ValueError:
        raise
    except Exception as exc:
        raise ValueError(f"{where}: cannot be read: {_reason(exc)}") from None
    finally:
        reader.close()
    raw.flags.writeable = False
    return BedVariants(raw, people)
