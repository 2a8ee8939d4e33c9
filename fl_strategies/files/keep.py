"""Who enters the fit at a site: a plink ``--keep`` file beside its genotype file.

A site fits on some of its people by placing ``<stem>.keep`` beside its genotype file ``<stem>.bed`` (the same
folder and name, suffix ``.keep``: ``partition_0.keep`` beside ``partition_0.bed`` (or ``.pgen``, whose people are
its ``.psam``'s) in a dataset folder, ``site.keep`` beside the ``data-path = "site.bed"`` of a deployed node). Only
the people it lists enter the allele frequencies, the scaling and the fit; a site without one fits on all its
people. ``transform`` reads no ``.keep``: it scores every person of the file with the model.

The format is plink2's ``--keep`` (checked against plink2 v2.00a3.5):

* whitespace-separated, one person a line, blank lines skipped, columns after the IDs ignored;
* a first line ``#FID IID ...`` is a header (two ID columns), ``#IID ...`` a header with the IID alone;
* without a header, a first line of one column means every line holds an IID alone, otherwise ``FID IID``;
* an IID alone stands for FID ``0``, as plink2 reads it;
* a person the ``.fam`` (``.psam``) does not list is left out, as plink2 leaves them (silently there; here their
  number is logged as a warning); a ``.keep`` that keeps nobody of the file is refused.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

__all__ = ["KEEP_SUFFIX", "GENOTYPE_SUFFIXES", "keep_file", "read_keep", "kept_people", "samples_of", "founders_of",
           "site_keep"]

KEEP_SUFFIX = ".keep"
"""The suffix of a site's list of the people who enter the fit, beside its genotype file."""


GENOTYPE_SUFFIXES = (".bed", ".pgen")
"""The genotype files whose people have IDs (:func:`samples_of`), which a ``.keep`` may choose from."""


def keep_file(data_path: str | Path) -> Path | None:
    """The ``.keep`` beside a genotype file (the same name with suffix :data:`KEEP_SUFFIX`); ``None`` without one,
    or for a file without sample IDs (a ``.npy``, ``.csv`` or ``.npz``: no ``.keep`` applies)."""
    if not str(data_path).lower().endswith(GENOTYPE_SUFFIXES):
        return None
    path = Path(data_path).with_suffix(KEEP_SUFFIX)
    return path if path.exists() else None


def samples_of(data_path: str | Path) -> list[tuple[str, str]] | None:
    """``(FID, IID)`` of a genotype file's people in file order (a ``.bed``'s ``.fam``); ``None`` for a file
    without sample IDs (``.npy``, ``.csv``, ``.npz``), which a ``.keep`` does not apply to. A reader of another
    genotype format adds its suffix to :data:`GENOTYPE_SUFFIXES` and its sample file here."""
    if str(data_path).lower().endswith(GENOTYPE_SUFFIXES):
        from .variants import read_fam

        return read_fam(data_path)
    return None


def founders_of(data_path: str | Path) -> np.ndarray | None:
    """Which of a genotype file's people are founders, plink2's rule: a ``.fam`` line whose father and mother
    (its third and fourth fields) are both ``0``, whether or not the parents named are in the file (checked against
    plink2 v2.00a3.5); a ``.pgen``'s ``.psam`` the same by its ``PAT`` and ``MAT`` columns (everyone without them);
    (s_file,) bool, ``None`` for a file without sample IDs (:func:`samples_of`)."""
    if str(data_path).lower().endswith(".pgen"):
        from .pgen import read_psam

        return np.array([pat == "0" and mat == "0" for pat, mat in read_psam(data_path, parents=True)], dtype=bool)
    if not str(data_path).lower().endswith(".bed"):
        return None
    with open(Path(data_path).with_suffix(".fam"), encoding="utf-8") as handle:
        fields = [line.split() for line in handle if line.strip()]
    return np.array([len(f) < 4 or (f[2] == "0" and f[3] == "0") for f in fields], dtype=bool)


def site_keep(data_path: str | Path) -> tuple[Path, np.ndarray, int, int] | None:
    """The ``.keep`` beside a genotype file and what it keeps: ``(keep, people, unknown, people in the file)``
    (:func:`kept_people`); ``None`` without a ``.keep`` or for a file without sample IDs (:func:`samples_of`)."""
    keep = keep_file(data_path)
    samples = None if keep is None else samples_of(data_path)
    if samples is None:
        return None
    people, unknown = kept_people(keep, samples)
    return keep, people, unknown, len(samples)


def read_keep(path: str | Path) -> list[tuple[str, str]]:
    """The ``(FID, IID)`` a ``.keep`` lists, in its order (module docstring); a ``ValueError`` naming the file
    and line for a header it does not know or a line without the columns its format needs."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as ex:
        raise ValueError(f"{str(path)!r}: cannot be read as a text file: {ex}") from None
    lines = [(number, line.split()) for number, line in enumerate(text.splitlines(), start=1) if line.strip()]
    if not lines:
        return []
    columns = 2 if len(lines[0][1]) >= 2 else 1
    if lines[0][1][0].startswith("#"):
        header = lines[0][1][0].upper()
        if header not in ("#FID", "#IID"):
            raise ValueError(f"{str(path)!r}: line {lines[0][0]}: a header must start with #FID or #IID (plink2's "
                             f"--keep format), not {lines[0][1][0]!r}")
        columns = 2 if header == "#FID" else 1
        lines = lines[1:]
    out = []
    for number, fields in lines:
        if len(fields) < columns:
            raise ValueError(f"{str(path)!r}: line {number}: one column where the file's format (FID IID) needs two")
        out.append((fields[0], fields[1]) if columns == 2 else ("0", fields[0]))
    return out


def kept_people(path: str | Path, samples: Sequence[tuple[str, str]]) -> tuple[np.ndarray, int]:
    """Which of a file's people a ``.keep`` keeps.

    Parameters
    ----------
    path : str or Path
        The ``.keep`` (:func:`read_keep`).
    samples : sequence of (FID, IID), length s_file
        The file's people in file order (its ``.fam``).

    Returns
    -------
    people : ndarray of shape (s,), int64
        Their positions in the file, ascending (file order, whatever the ``.keep``'s order).
    unknown : int
        The ``.keep``'s people the file does not list (left out, as plink2 leaves them).

    Raises
    ------
    ValueError
        One line naming the file when it keeps nobody of the file (or :func:`read_keep` refuses it).
    """
    listed = set(read_keep(path))
    people = np.array([i for i, person in enumerate(samples) if tuple(person[:2]) in listed], dtype=np.int64)
    unknown = len(listed - {tuple(person[:2]) for person in samples})
    if people.size == 0:
        raise ValueError(f"{str(path)!r}: keeps none of the file's {len(samples)} people ({len(listed)} listed, "
                         f"{unknown} of them not in the file): remove it to fit on all, or list FID IID of the "
                         "people to fit on")
    return people, unknown
