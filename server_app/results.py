"""Writes a run's results as it goes: ``rounds.csv`` (one row per round) and ``estimate.npy``."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

__all__ = ["ResultsWriter"]


class ResultsWriter:
    """Append each round's record to ``DIR/rounds.csv`` and keep ``DIR/estimate.npy`` current.

    Parameters
    ----------
    directory : str or Path
        Created if needed; an existing ``rounds.csv`` is replaced.
    """

    def __init__(self, directory: str | Path) -> None:
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.csv_path = self.dir / "rounds.csv"
        self.csv_path.unlink(missing_ok=True)

    def __call__(self, record: dict, estimate: np.ndarray) -> None:
        """Write one round: ``record`` as a CSV row, ``estimate`` (d, r) as the current estimate."""
        new = not self.csv_path.exists()
        with self.csv_path.open("a", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=list(record))
            if new:
                writer.writeheader()
            writer.writerow(record)
        tmp = self.dir / "estimate.tmp.npy"
        np.save(tmp, estimate)
        tmp.replace(self.dir / "estimate.npy")
