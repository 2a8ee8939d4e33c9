"""Writes a run's results as it goes: ``rounds.csv`` (one row per round) and ``estimate.npy``."""

from __future__ import annotations

import csv
import logging
import math
import numbers
from pathlib import Path

import numpy as np

from fl_strategies.settings.config import RESULT_FILES, ConfigError, check_results_dir, writable_directory
from fl_strategies.files.pca import save_model
from fl_strategies.files.plain_files import plain_cell

__all__ = ["ResultsWriter", "csv_cell"]

log = logging.getLogger("flwr.fedspectral")


def csv_cell(value):
    """``value`` as written to a results table: ``None`` and non-finite numbers become an empty cell, a string
    a spreadsheet would execute is escaped (:func:`fl_strategies.files.plain_files.plain_cell`)."""
    if value is None:
        return ""
    if isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_)) and not math.isfinite(value):
        return ""
    return plain_cell(value)


class ResultsWriter:
    """Append each round's record to ``DIR/rounds.csv`` and keep ``DIR/estimate.npy`` current.

    Parameters
    ----------
    directory : str or Path
        Created if needed. Without ``keep`` one holding an earlier run's
        results (:data:`fl_strategies.settings.config.RESULT_FILES`) is refused unless
        ``overwrite``, which removes them first.
    keep : bool
        Append to an existing ``rounds.csv`` (a resumed run,
        :mod:`fl_strategies.protocol.checkpoint`): before the first row is written, the
        rows of that round and later ones are dropped (the killed run wrote them
        after its last checkpoint; the resumed run writes them again), every
        earlier row is kept as it is.
    overwrite : bool
        The run config's ``overwrite``.

    Raises
    ------
    ConfigError
        If the directory cannot be created or written to, or holds results
        it may not replace (checked here, so before round 1).

    Notes
    -----
    No cell of ``rounds.csv`` is ever a non-finite number: ``None`` (e.g.
    ``epsilon_spent`` and ``delta`` without noise, the accuracy columns without
    a reference) and any NaN or infinity are written as an empty cell, the
    latter with a WARNING since the strategies never produce one.
    """

    def __init__(self, directory: str | Path, keep: bool = False, overwrite: bool = False) -> None:
        if not keep:
            check_results_dir({"results-dir": str(directory), "overwrite": overwrite, "resume": keep})
        self.dir = writable_directory(directory, "results-dir")
        self.csv_path = self.dir / "rounds.csv"
        self._trim_pending = keep
        if not keep:  # overwrite: nothing of the earlier run stays beside the new results
            for name in RESULT_FILES:
                try:
                    (self.dir / name).unlink(missing_ok=True)
                except OSError as ex:
                    raise ConfigError(f"results-dir = {str(directory)!r}: the old {name} cannot be removed: "
                                      f"{type(ex).__name__}: {ex}") from None

    def __call__(self, record: dict, estimate: np.ndarray) -> None:
        """Write one round: ``record`` as a CSV row, ``estimate`` (d, r) as the current estimate."""
        if self._trim_pending:
            self._trim_pending = False
            self._drop_rows_from(record.get("round"))
        self._append(record)
        self._save_estimate(estimate)

    def _append(self, record: dict) -> None:
        new = not self.csv_path.exists()
        with self.csv_path.open("a", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=list(record))
            if new:
                writer.writeheader()
            row = {key: csv_cell(value) for key, value in record.items()}
            blanked = [key for key, value in record.items() if value is not None and row[key] == ""
                       and not isinstance(value, str)]
            if blanked:
                log.warning("round %s: non-finite %s written as empty cell(s)", record.get("round"),
                            ", ".join(blanked))
            writer.writerow(row)

    def _save_estimate(self, estimate: np.ndarray) -> None:
        tmp = self.dir / "estimate.tmp.npy"
        np.save(tmp, estimate)
        tmp.replace(self.dir / "estimate.npy")

    def write_model(self, model: dict, run_config: dict) -> None:
        """Write the run's PCA model to ``pca.npz`` (:func:`fl_strategies.files.pca.save_model`)."""
        path = save_model(self.dir / "pca.npz", model, run_config,
                          privacy=model.get("privacy") or {"epsilon": 0.0, "note": "no noise"})
        log.info("PCA model written to %s", path.resolve())

    def restore(self, records: list[dict], iterates: list[np.ndarray]) -> None:
        """A resumed run: write the checkpoint's rows if ``rounds.csv`` does not have them.

        Without a ``rounds.csv`` (a new results-dir, e.g. each job of a comparison) the rows the checkpoint
        holds are written first, so the resumed run's table starts at round 0, not after the checkpoint; an
        existing file is kept as it is (:meth:`_drop_rows_from` trims it at the first new row).
        """
        if not self._trim_pending or not records or self.csv_path.exists():
            return
        log.info("resume: %d row(s) of the checkpoint written to %s", len(records), self.csv_path)
        for record in records:
            self._append(record)
        self._save_estimate(iterates[len(records) - 1])

    def _drop_rows_from(self, first_round) -> None:
        """Drop the rows of ``first_round`` and later rounds from an existing ``rounds.csv`` (atomically)."""
        if not self.csv_path.exists() or not isinstance(first_round, numbers.Integral):
            return
        with self.csv_path.open(newline="") as fh:
            rows = list(csv.reader(fh))
        if not rows:
            return
        header, body = rows[0], rows[1:]
        col = header.index("round") if "round" in header else None
        kept = [row for row in body if col is None or not row[col].lstrip("-").isdigit()
                or int(row[col]) < first_round]
        if len(kept) == len(body):
            return
        log.warning("resume: %d row(s) of round %s and later in %s were written after the last checkpoint; "
                    "they are written again", len(body) - len(kept), first_round, self.csv_path)
        tmp = self.dir / "rounds.tmp.csv"
        with tmp.open("w", newline="") as fh:
            csv.writer(fh).writerows([header, *kept])
        tmp.replace(self.csv_path)
