"""Writes a run's results as it goes: ``rounds.csv`` (one row per round) and ``estimate.npy``."""

from __future__ import annotations

import csv
import io
import logging
import math
import numbers
from pathlib import Path

import numpy as np

from fl_strategies.settings.config import (RESULT_FILES, ConfigError, check_results_dir, column_scaling,
                                           writable_directory)
from fl_strategies.files.pca import prune_text, save_model
from fl_strategies.files.plink_outputs import (afreq_text, allele_score_command, eigenval_text,
                                               eigenvec_allele_text, score_text)
from fl_strategies.files.plain_files import UnsafeDestination, append_file, check_destination, plain_cell, write_file

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
        self._warned_columns = False
        if keep:
            self._refuse_links(directory)
        else:  # overwrite: nothing of the earlier run stays beside the new results
            for name in RESULT_FILES:
                try:
                    (self.dir / name).unlink(missing_ok=True)
                except OSError as ex:
                    raise ConfigError(f"results-dir = {str(directory)!r}: the old {name} cannot be removed: "
                                      f"{type(ex).__name__}: {ex}") from None

    def _refuse_links(self, directory: str | Path) -> None:
        """Refuse a results file that is a link (a resumed run writes into the files it finds)."""
        for name in RESULT_FILES:
            try:
                check_destination(self.dir / name)
            except UnsafeDestination as ex:
                raise ConfigError(f"results-dir = {str(directory)!r}: {ex}") from None

    def __call__(self, record: dict, estimate: np.ndarray) -> None:
        """Write one round: ``record`` as a CSV row, ``estimate`` (d, r) as the current estimate."""
        if self._trim_pending:
            self._trim_pending = False
            self._drop_rows_from(record.get("round"))
        self._append(record)
        self._save_estimate(estimate)

    def _append(self, record: dict) -> None:
        """Append ``record`` as a row of ``rounds.csv``, under the file's own header when it has one (a run
        resumed from one begun by another version may have other columns: a column the header lacks is left out,
        with one WARNING, and a column the record lacks is left empty), else under a new header of its keys."""
        text = io.StringIO(newline="")
        header = self._header()
        writer = csv.DictWriter(text, fieldnames=list(record) if header is None else header, restval="",
                                extrasaction="ignore")
        if header is None:
            writer.writeheader()
        else:
            left_out = [key for key in record if key not in header]
            if left_out and not self._warned_columns:
                self._warned_columns = True
                log.warning("%s was begun with other columns (a run resumed from another version): %s not "
                            "written to it", self.csv_path, ", ".join(left_out))
        row = {key: csv_cell(value) for key, value in record.items()}
        blanked = [key for key, value in record.items() if value is not None and row[key] == ""
                   and not isinstance(value, str)]
        if blanked:
            log.warning("round %s: non-finite %s written as empty cell(s)", record.get("round"),
                        ", ".join(blanked))
        writer.writerow(row)
        append_file(self.csv_path, text.getvalue().encode("utf-8"))

    def _header(self) -> list[str] | None:
        """The column names of the existing ``rounds.csv`` (its first line), ``None`` when there is none yet."""
        try:
            with self.csv_path.open(newline="") as fh:
                return next(csv.reader(fh), None)
        except FileNotFoundError:
            return None

    def _save_estimate(self, estimate: np.ndarray) -> None:
        write_file(self.dir / "estimate.npy", lambda handle: np.save(handle, estimate, allow_pickle=False))

    def write_model(self, model: dict, run_config: dict) -> None:
        """Write the run's PCA model to ``pca.npz`` (:func:`fl_strategies.files.pca.save_model`); for a run over
        ``.bed`` files with ``center = true`` and ``scale = "hwe"`` (plink2's PCA) also ``pca.eigenval``,
        ``pca.eigenvec.allele``, ``pca.score`` and ``pca.afreq`` (:mod:`fl_strategies.files.plink_outputs`)."""
        path = save_model(self.dir / "pca.npz", model, run_config,
                          privacy=model.get("privacy") or {"epsilon": 0.0, "note": "no noise"})
        log.info("PCA model written to %s", path.resolve())
        if model.get("prune_in") is not None:  # indep-pairwise: plink2's two lists beside the model
            for key, name in (("prune_in", "prune.in"), ("prune_out", "prune.out")):
                write_file(self.dir / name, prune_text(model[key]))
            log.info("indep-pairwise's variant lists written beside it: prune.in (%d), prune.out (%d)",
                     len(model["prune_in"]), len(model["prune_out"]))
        if model.get("variants") is not None and run_config.get("center") and \
                column_scaling(run_config.get("scale", False)) == "hwe":  # plink2 --pca's model: what plink2 reads
            write_file(self.dir / "pca.eigenval", eigenval_text(model))
            write_file(self.dir / "pca.eigenvec.allele", eigenvec_allele_text(model))
            write_file(self.dir / "pca.score", score_text(model))
            write_file(self.dir / "pca.afreq", afreq_text(model))
            log.info("plink2 files written beside it: pca.eigenval, pca.score, and pca.eigenvec.allele with pca.afreq "
                     "for %s (PCk_AVG: the .eigenvec values)",
                     " ".join(allele_score_command("SITE", "pca", len(model["explained_variance"]), "SITE")))

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
        text = io.StringIO(newline="")
        csv.writer(text).writerows([header, *kept])
        write_file(self.csv_path, text.getvalue())
