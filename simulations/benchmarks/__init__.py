"""Benchmarks: scripts that print and plot what the engines cost (timings are machine-dependent).

Each writes its tables to ``--out`` when given, and otherwise to a new folder
``bench-runs/<benchmark>-<UTC time>`` under the current directory (:func:`out_folder`): the tables committed in
``simulations/benchmarks/results/`` are rewritten only when ``--out`` names them.
"""

from __future__ import annotations

import time
from pathlib import Path

__all__ = ["RUNS", "out_folder"]

RUNS = Path("bench-runs")
"""Where a benchmark run without ``--out`` writes, relative to the current directory (ignored by git)."""


def out_folder(name: str, out: str | Path | None) -> Path:
    """The folder a benchmark writes to: ``out`` when given, else a new ``RUNS/<name>-<UTC time>[-<i>]``.

    Parameters
    ----------
    name : str
        The benchmark's name (e.g. ``"bench_genotype"``).
    out : str or Path or None
        ``--out`` as given, ``None`` when it was not.

    Returns
    -------
    Path
        Not created here; a default folder does not exist yet.
    """
    if out is not None:
        return Path(out)
    stem = f"{name}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}"
    path, i = RUNS / stem, 1
    while path.exists():
        path, i = RUNS / f"{stem}-{i}", i + 1
    return path
