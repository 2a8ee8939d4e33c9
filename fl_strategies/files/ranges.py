"""Ranges of base pairs in plink's ``--exclude range`` format, and the variants inside them.

One range a line, whitespace-separated: chromosome, first and last position (both included), then an optional
label; blank lines and lines starting with ``#`` are skipped. Chromosome codes are compared as plink2 compares
them: ``chr1`` is ``1``, ``23`` is ``X``, ``24`` ``Y``, ``25`` ``XY``, ``26`` and ``M`` are ``MT``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

__all__ = ["chromosome_code", "read_ranges", "in_ranges"]

_ALIASES = {"23": "X", "24": "Y", "25": "XY", "26": "MT", "M": "MT"}


def chromosome_code(name: str) -> str:
    """The chromosome's code as plink2 normalises it (module docstring)."""
    code = str(name).strip()
    if code[:3].lower() == "chr":
        code = code[3:]
    code = code.upper() if code.isalpha() else code.lstrip("0") or "0"
    return _ALIASES.get(code, code)


def read_ranges(path: str | Path) -> list[tuple[str, int, int]]:
    """``(chromosome, first, last)`` of every range in the file; a ``ValueError`` naming the file and line for a
    line that is not a range (or an unreadable file)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as ex:
        raise ValueError(f"{str(path)!r} cannot be read: {ex}") from None
    out = []
    for number, line in enumerate(text.splitlines(), start=1):
        fields = line.split()
        if not fields or fields[0].startswith("#"):
            continue
        if len(fields) < 3 or not fields[1].isdigit() or not fields[2].isdigit() or int(fields[1]) > int(fields[2]):
            raise ValueError(f"{str(path)!r} line {number} is not 'chromosome first-bp last-bp [label]'")
        out.append((chromosome_code(fields[0]), int(fields[1]), int(fields[2])))
    return out


def in_ranges(chromosomes, positions, ranges: list[tuple[str, int, int]]) -> np.ndarray:
    """Whether each variant lies in one of ``ranges``, (d,) bool, from its chromosome and position."""
    codes = np.array([chromosome_code(c) for c in chromosomes])
    positions = np.asarray(positions, dtype=np.int64)
    inside = np.zeros(len(positions), dtype=bool)
    for chrom, first, last in ranges:
        inside |= (codes == chrom) & (positions >= first) & (positions <= last)
    return inside
