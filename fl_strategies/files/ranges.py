"""Ranges of base pairs in plink's ``--exclude range`` format, and the variants inside them.

One range a line, whitespace-separated: chromosome, first and last position (both included), then an optional label;
blank lines and lines starting with ``#`` are skipped (plink2 itself reads a ``#`` line as a range on no chromosome,
and stops at one of fewer than three words: the shipped lists have none). Chromosome codes are compared as plink2
compares them: ``chr1`` is ``1``, ``23`` is ``X``, ``24`` ``Y``, ``25`` ``XY``, ``26`` and ``M`` are ``MT``.

The long-range LD regions of each genome build travel with the package (``long_range_ld/GRCh37.txt`` and
``GRCh38.txt``, their sources in each file's header); :func:`range_file` resolves ``exclude-range``: a build's name
(``GRCh37`` / ``hg19``, ``GRCh38`` / ``hg38``, any case) names the shipped list, anything else is a file path.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np

__all__ = ["BUILDS", "chromosome_code", "range_file", "read_ranges", "in_ranges"]

BUILDS = {"grch37": "GRCh37", "hg19": "GRCh37", "grch38": "GRCh38", "hg38": "GRCh38"}
"""The names ``exclude-range`` accepts for a shipped list (lower case) and the list's build."""

SHIPPED = Path("fl_strategies", "files", "long_range_ld")
"""Where the shipped lists are, relative to the folder that holds the package."""

_BUILD_LIKE = re.compile(r"(grch|hg|ncbi)\d+", re.IGNORECASE)

_ALIASES = {"23": "X", "24": "Y", "25": "XY", "26": "MT", "M": "MT"}


def chromosome_code(name: str) -> str:
    """The chromosome's code as plink2 normalises it (module docstring)."""
    code = str(name).strip()
    if code[:3].lower() == "chr":
        code = code[3:]
    code = code.upper() if code.isalpha() else code.lstrip("0") or "0"
    return _ALIASES.get(code, code)


def range_file(value: str) -> Path:
    """The file ``exclude-range = value`` names: the shipped list of a build's name, else ``value`` as a path.

    The rule: a build's name (:data:`BUILDS`) is the shipped list, a value with a ``/`` or any other value a file
    path; a file called like a build is named ``./GRCh37``. A bare build name while a file of that name exists in
    the current folder is refused (which one was meant?), as is a build name fedspectral ships no list for
    (``hg18``, ``GRCh36``). The ServerApp imports this module from the FAB, which carries no ``.txt`` file
    (Flower packs only its own file types): the list is then found in the installed package, beside
    ``fl_strategies`` in site-packages or the checkout, both on ``sys.path``.

    Raises
    ------
    ValueError
        One line: the ambiguous or unknown build name, or the shipped list missing from the installation.
    """
    build = BUILDS.get(value.lower())
    if build is None:
        if _BUILD_LIKE.fullmatch(value):
            raise ValueError(f"fedspectral ships long-range LD lists for GRCh37 (hg19) and GRCh38 (hg38) only, not "
                             f"{value}; name a file of ranges for that build (a file called {value}: './{value}')")
        return Path(value)
    if Path(value).exists():
        raise ValueError(f"names the shipped {build} list and a file {value} in {Path.cwd()}: write './{value}' "
                         f"for the file, or rename it")
    name = f"{build}.txt"
    for root in [Path(__file__).resolve().parents[2], *(Path(entry) for entry in sys.path if entry)]:
        if (root / SHIPPED / name).is_file():
            return root / SHIPPED / name
    raise ValueError(f"the shipped {build} list ({(SHIPPED / name).as_posix()}) is not in this installation: "
                     "reinstall fedspectral, or name a file")


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
