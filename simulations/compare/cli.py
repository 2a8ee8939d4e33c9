"""Compare strategies from a config file.

Usage::

    python -m simulations.compare CONFIG.toml [--engine local|ray] [--out DIR]

The file has optional top-level ``title``, ``metric``, ``thresholds`` and
``seeds``, a ``[defaults]`` table of run-config keys, and one ``[[runs]]`` table
per run with a ``name``, a ``strategy``, an optional ``panel`` (runs with the
same panel share a subplot), an optional ``series`` (runs of the same series
share a colour and a legend label across panels; default: the name), optional
``seeds`` and any run-config overrides::

    title = "FedPower on Model I"
    seeds = [0, 1, 2]
    thresholds = [1e-2, 1e-4, 1e-10]

    [defaults]
    dataset = "fedpower-model1"
    num-clients = 20

    [[runs]]
    name = "p=4"
    strategy = "fedpower"
    panel = "local steps"
    local-steps = 4

The whole file is validated before the first job starts (a bad file is one
line ``file:line: message`` naming the key, exit status 2, nothing written).
The seeds are ``seeds`` (a ``seed`` key is refused); the default ``metric``
follows the runs' strategy family (eigenspace: ``subspace_distance``, mf:
``excess_loss``, erm: ``loss_gap``). The command writes ``DIR/results.csv``
(one row per run, seed and round), ``DIR/summary.md``, ``DIR/<metric>.png``,
``DIR/estimates/<slug>-<hash>__seed<k>.npy`` (:func:`estimate_stem`) and, for a noise-free
eigenspace run, its PCA model ``DIR/estimates/<slug>-<hash>__seed<k>.pca.npz``,
through a staging directory that replaces the previous results only when
every job has finished; one process at a time per ``DIR`` (a lock). Files in
``DIR`` that no comparison wrote are left alone, and a ``DIR`` where such a
file has one of those names is refused before anything runs.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import re
import shutil
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

try:
    import matplotlib  # noqa: F401  (the report's plots)
    from tqdm import tqdm
except ModuleNotFoundError as _missing:  # a dependency of the package, missing from this environment
    raise SystemExit(f"simulations.compare needs {_missing.name}, a dependency of fedspectral: pip install "
                     f"fedspectral (or pip install -e . in a clone) installs it") from None

from fl_strategies.settings.config import KEYS, ConfigError, suggest, validate_run_config
from fl_strategies.files.warm_start import check_width, load_start
from fl_strategies.files.harness import find_harness
from fl_strategies.files.folder_lock import OWNER_LOCK, FolderInUse, own_folders
from fl_strategies.protocol.base import RunFailed
from fl_strategies.settings.registry import STRATEGY_NAMES, spec
from fl_strategies.files.plain_files import (UnsafeDestination, check_destination, check_input, open_file, plain_frame,
                                             write_file)

from fl_strategies.settings.command_line import interruption, stop_signals
from simulations.engines import ArgumentParser, fused_run_config
from simulations.compare.report import final_converged, plot_metric, summarize, write_summary_markdown

__all__ = ["ComparisonError", "Job", "OutputDir", "estimate_stem", "load_comparison", "run_comparison", "main"]

TOP_KEYS = ("title", "metric", "thresholds", "seeds", "defaults", "runs")
RUN_KEYS = ("name", "strategy", "panel", "series", "seeds")

MAX_SEEDS = 1000
"""Most seeds a comparison file may list (top level or in one run); more is refused before anything runs."""
MAX_RUNS = 1000
"""Most ``[[runs]]`` tables of a comparison file."""
MAX_NAME = 200
"""Longest run name, panel or series (characters); the title may have twice as many."""
MAX_FILE_BYTES = 16_000_000
"""Largest comparison file read."""
MAX_SEED = 2**32 - 1
"""Largest seed (numpy's generators are seeded with it)."""

REFERENCE_METRICS = ("subspace_distance", "subspace_distance_first_k", "kkt_violation", "singular_value_error")
"""Eigenspace columns measured against the exact reference: empty in a run without one."""
PROGRESS_METRICS = ("estimate_change", "estimate_change_first_k", "iterated_explained_variance",
                    "iterated_explained_variance_ratio", "explained_variance_ratio")
"""Eigenspace columns of a run without an exact reference (node data): its progress, from the server's iterates
and the clients' sums; the explained-variance ones only in a noise-free run."""
METRICS = {
    "eigenspace": REFERENCE_METRICS + ("misalignment", "epsilon_spent", "rho", "objective", "stop_statistic",
                                       "inner_steps") + PROGRESS_METRICS,
    "mf": ("excess_loss", "loss", "log10_excess_loss", "exact_loss", "excess_fixed_v", "kappa_v"),
    "erm": ("loss_gap", "oracle_complexity", "step_size"),
}
"""The metrics each strategy family (:attr:`fl_strategies.settings.registry.StrategySpec.family`) writes; the first is
the default ``metric`` of a file whose runs are all of that family (eigenspace runs without an exact reference:
``estimate_change_first_k``, the change of the kept components)."""
COMMON_METRICS = ("bytes_up", "bytes_down", "participants", "rejected", "failures", "round_time", "wall_time")
"""Columns every strategy writes (plottable too)."""


class ComparisonError(ValueError):
    """A comparison file is malformed; the message gives the file, line and key."""


@dataclass
class Job:
    """One run of one seed: its identity and its full run config."""

    run: str
    strategy: str
    panel: str
    seed: int
    run_config: dict
    series: str = ""
    line: int = 0
    """Line of the run's ``[[runs]]`` table in the comparison file (0: unknown)."""

    @property
    def stem(self) -> str:
        """File-name stem ``<slug>-<hash>__seed<k>``, distinct for distinct run names.

        The slug is the run name with every run of characters other than
        letters, digits and ``.=+-`` replaced by ``_`` (at most 60 characters);
        the hash is the first 8 hex digits of the SHA-256 of the exact name, so
        ``"a/b"``, ``"a_b"`` and ``"a b"`` get three files.
        """
        return estimate_stem(self.run, self.seed)


def estimate_stem(run: str, seed: int) -> str:
    """The file-name stem of a run and seed (:attr:`Job.stem`)."""
    slug = re.sub(r"[^A-Za-z0-9.=+-]+", "_", run).strip("._")[:60] or "run"
    return f"{slug}-{hashlib.sha256(run.encode('utf-8')).hexdigest()[:8]}__seed{seed}"


def _sections(lines: list[str]) -> list[tuple[str, int, int]]:
    """``(header, start, stop)`` of the top level (header ``""``) and of every table of a TOML text."""
    heads = [(i, ln.strip()) for i, ln in enumerate(lines) if re.match(r"\s*\[", ln)]
    out = [("", 0, heads[0][0] if heads else len(lines))]
    for j, (i, head) in enumerate(heads):
        out.append((head, i, heads[j + 1][0] if j + 1 < len(heads) else len(lines)))
    return out


def _line_of(text: str, where: int | str | None, key: str | None) -> int:
    """Line number (1-based) of ``key`` in a part of a comparison file.

    ``where``: the index of a ``[[runs]]`` table, ``"defaults"`` for ``[defaults]``, or ``None`` for the top
    level (the lines before the first table).
    """
    lines = text.splitlines()
    parts = _sections(lines)
    if isinstance(where, int):
        runs = [p for p in parts if p[0].startswith("[[runs]]")]
        _, start, stop = runs[where] if where < len(runs) else ("", 0, len(lines))
    elif where == "defaults":
        _, start, stop = next((p for p in parts if p[0].startswith("[defaults]")), ("", 0, len(lines)))
    else:
        _, start, stop = parts[0]
        if key is not None and key not in "\n".join(lines[start:stop]):  # e.g. [defaults] or [[runs]] itself
            head = next((p for p in parts[1:] if re.match(rf"\[+\s*\"?{re.escape(key)}\b", p[0])), None)
            if head is not None:
                return head[1] + 1
    if key is None:
        return start + 1
    for i in range(start, stop):
        if re.match(rf"\s*[\"']?{re.escape(key)}[\"']?\s*=", lines[i]):
            return i + 1
    return start + 1


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _text_problem(value, what: str, limit: int = MAX_NAME) -> str | None:
    """Why ``value`` cannot be a name, panel, series or title, or ``None``."""
    if not isinstance(value, str):
        return f"{what} must be a string, got {type(value).__name__} {_short(value)}"
    if not value.strip():
        return f"{what} must not be empty"
    if len(value) > limit:
        return f"{what} has {len(value)} characters; at most {limit} are allowed"
    if any(ord(c) < 32 for c in value):
        return f"{what} must not contain control characters (e.g. a newline)"
    return None


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _seeds_problem(seeds) -> str | None:
    """Why ``seeds`` is not a usable list of seeds, or ``None``."""
    if not isinstance(seeds, list) or not seeds:
        return f"seeds must be a non-empty list of integers, got {_short(seeds)}"
    if len(seeds) > MAX_SEEDS:
        return f"seeds lists {len(seeds)} seeds; at most {MAX_SEEDS} are allowed"
    bad = next((s for s in seeds if not isinstance(s, int) or isinstance(s, bool) or not 0 <= s <= MAX_SEED), None)
    if bad is not None:
        return f"seeds must be a non-empty list of integers in [0, {MAX_SEED}], got {_short(bad)}"
    if len(set(seeds)) != len(seeds):
        dup = next(s for i, s in enumerate(seeds) if s in seeds[:i])
        return f"seeds lists seed {dup} twice (each seed would be run and counted twice)"
    return None


SEED_HINT = ("'seed' is not read from a comparison file: list the seeds with seeds = [...] (at the top level, "
             "or in a run for that run only)")


def load_comparison(path: str | Path) -> tuple[dict, list[Job]]:
    """Read and validate a comparison file, all of it, before anything runs.

    Parameters
    ----------
    path : str or Path

    Returns
    -------
    meta : dict
        ``title``, ``metric`` and ``thresholds``.
    jobs : list of Job
        One per run and seed, in file order, each with a validated run config.

    Raises
    ------
    ComparisonError
        With ``file:line:`` and the offending key for a syntax error, an unknown
        key (with the closest valid one), a top-level value of the wrong type
        (``title`` a string, ``metric`` a column the runs write, ``thresholds``
        a list of finite numbers > 0, ``seeds`` a list of at most
        :data:`MAX_SEEDS` distinct integers), ``runs`` that are not tables, a
        missing, duplicate, empty or too long (:data:`MAX_NAME`) name, a
        missing strategy, a ``seed`` key (the seeds are ``seeds``), a value
        that is not a single number, string or boolean, or a run config that
        fails validation.
    """
    path = Path(path)
    if not path.exists():
        raise ComparisonError(f"{path}: no such comparison file")
    try:  # a FIFO or a device is named as what it is
        check_input(path, str(path))
    except ValueError as ex:
        raise ComparisonError(str(ex)) from None
    if path.stat().st_size > MAX_FILE_BYTES:
        raise ComparisonError(f"{path}: {path.stat().st_size} bytes; a comparison file may have at most "
                              f"{MAX_FILE_BYTES}")
    try:
        text = path.read_text(encoding="utf-8")
        doc = tomllib.loads(text)
    except UnicodeDecodeError as ex:
        raise ComparisonError(f"{path}: not a UTF-8 text file ({ex.reason} at byte {ex.start})") from None
    except tomllib.TOMLDecodeError as ex:
        line = re.search(r"at line (\d+)", str(ex))
        raise ComparisonError(f"{path}:{line.group(1) if line else 1}: not valid TOML: {ex}") from None
    except RecursionError:
        raise ComparisonError(f"{path}: nested too deeply to be a comparison file (run-config values are "
                              "single numbers, strings or booleans)") from None

    def fail(msg: str, where: int | str | None = None, key: str | None = None):
        raise ComparisonError(f"{path}:{_line_of(text, where, key)}: {msg}")

    for key in doc:
        if key not in TOP_KEYS:
            value = doc[key]
            if isinstance(value, dict) or (isinstance(value, list) and value and isinstance(value[0], dict)):
                # a misnamed table: only the two tables are candidates (not a run-config key that looks alike)
                hint = suggest(key, ("defaults", "runs")) or " The tables are [defaults] and [[runs]]."
            else:
                hint = suggest(key, TOP_KEYS + tuple(KEYS))
            hint += " (run-config keys go in [defaults] or a [[runs]] table)" if key in KEYS else ""
            if key == "seed":
                hint = f" {SEED_HINT}"
            fail(f"unknown top-level key {_short(key)}.{hint}", None, key)
    problem = _text_problem(doc["title"], "title", 2 * MAX_NAME) if "title" in doc else None
    if problem:
        fail(problem, None, "title")
    if "metric" in doc and not (isinstance(doc["metric"], str) and re.fullmatch(r"[a-z0-9_]{1,60}", doc["metric"])):
        fail(f"metric must be the name of a results column, e.g. 'subspace_distance', got {_short(doc['metric'])}",
             None, "metric")
    thresholds = doc.get("thresholds", [1e-2, 1e-4, 1e-10])
    if (not isinstance(thresholds, list) or len(thresholds) > 20
            or not all(_is_number(t) and math.isfinite(t) and t > 0 for t in thresholds)):
        fail(f"thresholds must be a list of at most 20 finite numbers > 0, got {_short(thresholds)}", None,
             "thresholds")
    seeds_default = doc.get("seeds", [0])
    problem = _seeds_problem(seeds_default)
    if problem:
        fail(problem, None, "seeds")
    defaults = doc.get("defaults", {})
    if not isinstance(defaults, dict):
        fail("'defaults' must be a table ([defaults])", None, "defaults")
    for key, value in defaults.items():
        if key == "seed":
            fail(f"seed in [defaults]: {SEED_HINT}", "defaults", key)
        if key not in KEYS:
            fail(f"unknown run-config key {_short(key)} in [defaults].{suggest(key, KEYS)}", "defaults", key)
        if not isinstance(value, (str, int, float, bool)):
            fail(f"{key} in [defaults] must be a single number, string or boolean, got {type(value).__name__}",
                 "defaults", key)
    runs = doc.get("runs", [])
    if not isinstance(runs, list) or not runs:
        fail("the file defines no [[runs]] table", None, "runs" if "runs" in doc else None)
    if len(runs) > MAX_RUNS:
        fail(f"the file defines {len(runs)} runs; at most {MAX_RUNS} are allowed", None, "runs")
    if not all(isinstance(run, dict) for run in runs):
        fail("runs must be tables ([[runs]] with name = ..., strategy = ...), got "
             f"{_short(next(r for r in runs if not isinstance(r, dict)))}", None, "runs")

    jobs, names, families = [], set(), {}
    measured, noisy = {}, {}  # eigenspace runs: with an exact reference; with noise
    for i, run in enumerate(runs):
        for key in ("name", "strategy"):
            if key not in run:
                fail(f"run #{i + 1} has no {key!r}", i)
        for key in ("name", "panel", "series"):
            problem = _text_problem(run[key], f"run #{i + 1}: {key}") if key in run else None
            if problem:
                fail(problem, i, key)
        name = run["name"]
        if name in names:
            fail(f"duplicate run name {name!r}", i, "name")
        names.add(name)
        if not isinstance(run["strategy"], str) or run["strategy"] not in STRATEGY_NAMES:
            fail(f"run {name!r}: strategy must be one of {', '.join(STRATEGY_NAMES)}, got {_short(run['strategy'])}."
                 f"{suggest(str(run['strategy']), STRATEGY_NAMES)}", i, "strategy")
        overrides = {}
        for key, value in run.items():
            if key in RUN_KEYS:
                continue
            if key == "seed":
                fail(f"run {name!r}: {SEED_HINT}", i, key)
            if key not in KEYS:
                fail(f"run {name!r}: unknown key {_short(key)}.{suggest(key, RUN_KEYS + tuple(KEYS))}", i, key)
            if not isinstance(value, (str, int, float, bool)):
                fail(f"run {name!r}: {key} must be a single number, string or boolean, got {type(value).__name__}",
                     i, key)
            overrides[key] = value
        seeds = run.get("seeds", seeds_default)
        problem = _seeds_problem(seeds)
        if problem:
            fail(f"run {name!r}: {problem}", i, "seeds" if "seeds" in run else None)
        raw = {**defaults, **overrides, "strategy": run["strategy"]}
        try:  # the seed plays no part in validation beyond its range (checked above): validate once per run
            cfg = validate_run_config(fused_run_config({**raw, "seed": seeds[0]}))
        except ConfigError as ex:
            bad = next((k for k in KEYS if str(ex).startswith(k)), None)
            fail(f"run {name!r}: {ex}", i if bad is None or bad in run or bad not in defaults else "defaults",
                 bad if bad in run or bad in defaults else None)
        except ValueError as ex:  # Flower's own check of value types
            fail(f"run {name!r}: {ex}", i)
        families[name] = spec(cfg["strategy"]).family
        if families[name] == "eigenspace":
            measured[name] = _has_reference(cfg)
            noisy[name] = cfg["epsilon"] > 0 or cfg["noise-std"] > 0 or cfg["strategy"] == "dp-power"
        for seed in seeds:
            jobs.append(Job(name, cfg["strategy"], str(run.get("panel", "")), seed, {**raw, "seed": seed},
                            str(run.get("series", name)), _line_of(text, i, None)))
    kinds = sorted(set(families.values()))
    if "metric" in doc:
        metric = doc["metric"]
        wrong = [n for n, fam in families.items() if metric not in METRICS[fam] + COMMON_METRICS]
        if wrong:
            fam = families[wrong[0]]
            fail(f"metric {metric!r} is not written by run {wrong[0]!r} ({fam} strategy); its columns are "
                 f"{', '.join(METRICS[fam] + COMMON_METRICS)}", None, "metric")
        problem = _empty_metric(metric, measured, noisy)
        if problem:
            fail(problem, None, "metric")
    elif len(kinds) > 1:
        fail(f"the runs mix strategy families ({', '.join(kinds)}) with no common accuracy column: set metric to "
             f"one of {', '.join(COMMON_METRICS)}, or compare each family in its own file", None, None)
    elif kinds == ["eigenspace"] and len(set(measured.values())) > 1:
        fail(f"run {next(n for n, m in measured.items() if m)!r} is measured against the exact reference and run "
             f"{next(n for n, m in measured.items() if not m)!r} has none (its data live on the nodes, or "
             "evaluation = \"none\"): they write no common accuracy column; compare them in separate files, or set "
             f"metric to one of {', '.join(COMMON_METRICS)}", None, None)
    elif kinds == ["eigenspace"] and not any(measured.values()):
        metric = "estimate_change_first_k"
    else:
        metric = METRICS[kinds[0]][0]
    meta = {"title": doc.get("title", path.stem), "metric": metric, "thresholds": tuple(float(t) for t in thresholds)}
    return meta, jobs


def _has_reference(cfg: dict) -> bool:
    """Whether an eigenspace run is measured against the exact reference (a harness builds its data, evaluated)."""
    from fl_strategies.files.harness import on_nodes

    return cfg["evaluation"] != "none" and not on_nodes(cfg)


def _empty_metric(metric: str, measured: dict[str, bool], noisy: dict[str, bool]) -> str | None:
    """Why ``metric`` would be empty for some eigenspace run (the message), or ``None``."""
    for name, has_reference in measured.items():
        if metric in REFERENCE_METRICS and not has_reference:
            return (f"metric {metric!r} is empty for run {name!r}: it has no exact reference (its data live on the "
                    "nodes, or evaluation = \"none\"); use metric = \"estimate_change\" (or, noise-free, "
                    "\"iterated_explained_variance_ratio\")")
        if metric in PROGRESS_METRICS and has_reference:
            return (f"metric {metric!r} is written only by runs without an exact reference, and run {name!r} has "
                    "one: use metric = \"subspace_distance\"")
        if metric in PROGRESS_METRICS and "explained_variance" in metric and noisy[name]:
            return (f"metric {metric!r} is empty for run {name!r}: a noisy run sends no explained variance (it "
                    "would be released without noise); use metric = \"estimate_change\"")
    return None


def _check_data(jobs: list[Job], config: str | Path = "") -> None:
    """Build every distinct data set once, as the server will (the harness), and check ranks and client counts; a
    folder of node files is read as ``fedspectral run`` reads it (:func:`fedspectral.run_config.check_folder_files`:
    every file, one kind of file, variant lists that align)."""
    from fedspectral.run_config import check_folder_files
    from fl_strategies.files.harness import is_partition_folder

    seen = set()
    for job in jobs:
        cfg = validate_run_config(fused_run_config(job.run_config))
        key = json.dumps({k: v for k, v in cfg.items() if k != "seed"}, sort_keys=True, default=str)
        if key in seen:  # the data do not depend on the run seed
            continue
        seen.add(key)
        harness = find_harness(cfg)
        try:  # a data set that cannot be loaded (missing file, rank above its dimension, ...) is a ValueError
            start = load_start(cfg)  # init-from: the earlier model, read as the server will
            if harness is None:  # rows on the clients: a folder's files are read as `run` reads them
                if is_partition_folder(cfg["dataset"]):
                    width = check_folder_files(cfg, "dataset")
                    if start is not None:
                        check_width(start, width)
                continue
            data = harness.server_data(cfg, evaluate=False)
            if start is not None:
                check_width(start, data.dimension)
        except (ValueError, MemoryError) as ex:  # ArgumentError of a folder's files too
            where = f"{config}:{job.line or 1}: " if config else ""
            raise ComparisonError(f"{where}run {job.run!r} seed {job.seed}: {str(ex) or type(ex).__name__}") from None


FAILURE_COLUMN = "failure"
"""Column of ``results.csv`` (present only when some run failed): why that run and seed failed, else empty."""


def _check_checkpoint_dirs(jobs: list[Job], config: str | Path = "") -> None:
    """Create and test-write every run's ``checkpoint-dir`` before the first job (one line naming run and key)."""
    from simulations.engines import ArgumentError, check_output_dirs

    from fl_strategies.protocol.checkpoint import check_checkpoint_dir

    for job in jobs:
        try:
            check_output_dirs(job.run_config, "", keys=("checkpoint-dir",))
            if job.run_config.get("checkpoint-dir"):  # the job's own folder in it (_run_job)
                check_checkpoint_dir({**job.run_config, "checkpoint-dir": job_checkpoint_dir(job)})
        except (ArgumentError, ConfigError) as ex:
            where = f"{config}:{job.line or 1}: " if config else ""
            raise ComparisonError(f"{where}run {job.run!r}: {ex}") from None


def job_checkpoint_dir(job: Job) -> str:
    """The ``checkpoint-dir`` a job's run writes: its own folder in the run's (one per run and seed), or ``""``."""
    given = job.run_config.get("checkpoint-dir")
    return str(Path(given) / job.stem) if given else ""


def ancestry_picture(job: Job, model_path: Path, converged: int | None = None) -> bytes | None:
    """A PNG of every site's people in the run's ancestry space (PC1 against PC2 and PC3, plink2's eigenvector
    scale, one colour a partition) when the run's data set is a folder of ``.bed`` files; ``None`` otherwise.
    ``converged``: how many leading PCs the run had converged (its rows' last ``converged_components``), the others'
    axes saying ``(not converged)`` (:func:`~fl_strategies.files.plink_outputs.draw_ancestry`)."""
    import io

    from client_app.data import folder_file
    from fl_strategies.files.data_files import is_genotype_file
    from fl_strategies.files.harness import partition_file
    from fl_strategies.files.pca import load_model, transform
    from fl_strategies.files.plink_outputs import draw_ancestry, plink2_eigenvectors
    from fl_strategies.files.variants import as_variants

    cfg = job.run_config
    files = [partition_file(cfg["dataset"], i) for i in range(cfg["num-clients"])]
    if any(file is None or not is_genotype_file(file) for file in files):
        return None
    model = load_model(model_path)
    if model["components"].shape[0] < 2:
        return None
    vectors, groups = [], []
    for i, file in enumerate(files):
        X = folder_file(str(file), i)  # as the run's in-process client opened it: counted once
        if model.get("variants") is not None:
            X = as_variants(X, file, model["variants"], "dataset folder file")
        vectors.append(plink2_eigenvectors(transform(model, X), model))
        groups += [f"partition {i}"] * len(vectors[-1])
    buffer = io.BytesIO()
    draw_ancestry(buffer, np.vstack(vectors), groups, title=job.run, converged=converged)
    return buffer.getvalue()


def _run_job(job: Job, engine: str, workdir: Path) -> pd.DataFrame:
    """Run one job; its rows, with :data:`FAILURE_COLUMN` set when the run failed after writing rows."""
    out = workdir / job.stem
    failure = None
    overrides = {**job.run_config, "results-dir": str(out)}
    if overrides.get("checkpoint-dir"):  # one checkpoint per run and seed, or they would overwrite each other
        overrides["checkpoint-dir"] = job_checkpoint_dir(job)
    try:  # the ServerApp's RunFailed reaches here from either engine (Flower re-raises it after a Ray run)
        if engine == "local":
            from simulations.engines.local import run_local

            run_local(fused_run_config(overrides))
        else:
            from simulations.engines.ray import run_ray

            run_ray(overrides)
    except RunFailed as ex:
        failure = str(ex)
        if not (out / "rounds.csv").exists():
            raise RuntimeError(f"run {job.run!r} seed {job.seed} failed: {ex}") from None
    csv = out / "rounds.csv"
    if not csv.exists():
        raise RuntimeError(f"run {job.run!r} seed {job.seed} wrote no results (see the log above)")
    rows = pd.read_csv(csv)
    rows.insert(0, "round", rows.pop("round"))
    for col, value in (("series", job.series), ("panel", job.panel), ("seed", job.seed), ("strategy", job.strategy),
                       ("run", job.run)):
        rows.insert(0, col, value)
    if failure is not None:
        rows[FAILURE_COLUMN] = failure
    return rows


LOCK_FILE = OWNER_LOCK
MANIFEST = ".compare-outputs.json"
"""What the last complete comparison wrote into its ``--out`` (replaced as a whole by the next one)."""


def check_out_dir(out: str | Path) -> Path:
    """``out`` as an output directory: refused (:class:`ComparisonError`) if it names a file or cannot be made."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ComparisonError(f"--out {out}: is a file, not a directory")
    parent = next((p for p in (out, *out.parents) if p.exists()), Path("."))
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise ComparisonError(f"--out {out}: {parent} is not a writable directory")
    return out


class OutputDir:
    """An ``--out`` directory taken by one compare process at a time, written through a staging directory.

    On entry it creates ``out`` and takes the owner lock of ``out`` and of the folders ``also`` names (label ->
    folder; the runs' ``checkpoint-dir``) for the whole comparison (:mod:`fl_strategies.files.folder_lock`: a
    second compare, a ``fedspectral run`` or ``deploy`` writing one of them is refused at once with
    :class:`ComparisonError` naming the holder's pid and command), and removes what a killed process left
    (``out/.staging-*``). Outputs are written into :attr:`staging`; :meth:`commit`
    moves them into ``out`` (each by a rename) and removes what the previous comparison wrote there and this
    one did not. Until then the previous complete results stay as they were: a failed or interrupted run
    leaves them untouched. Files that no comparison wrote (not in the manifest, ``.compare-outputs.json``)
    are never touched: an ``out`` where one takes a name this comparison writes (``names``) is refused on
    entry, naming the files. On exit the staging directory is removed and the lock released.
    """

    def __init__(self, out: str | Path, names: tuple[str, ...] = (), also: dict[str, Path] | None = None) -> None:
        self.out = check_out_dir(out)
        self.names = names
        self.also = dict(also or {})
        self.staging = self.out / f".staging-{os.getpid()}"
        self._lock = None

    def recorded(self) -> set[str]:
        """The names the previous comparison wrote in ``out`` (its manifest), empty without one."""
        manifest = self.out / MANIFEST
        try:
            return set(json.loads(manifest.read_text())) if manifest.is_file() else set()
        except (ValueError, TypeError, OSError):
            return set()

    def _refuse_foreign(self) -> None:
        """Refuse an ``out`` where a name this comparison writes is a link, or is taken by a file no comparison
        wrote."""
        for name in (*self.names, MANIFEST):
            if (self.out / name).is_symlink():
                raise ComparisonError(f"--out {self.out}: {name} is a symbolic link; compare never writes through "
                                      "one: remove it or choose another --out")
        ours = self.recorded()
        foreign = [name for name in self.names if name not in ours
                   and ((self.out / name).exists() or (self.out / name).is_symlink())]
        if foreign:
            raise ComparisonError(f"--out {self.out}: holds {', '.join(foreign)}, which no comparison wrote there "
                                  f"(none is listed in {MANIFEST}); compare would replace them: move them or "
                                  "choose another --out")

    def __enter__(self) -> "OutputDir":
        try:
            self.out.mkdir(parents=True, exist_ok=True)
            self._lock = own_folders({"--out": self.out, **self.also})
        except FolderInUse as ex:
            raise ComparisonError(str(ex)) from None
        except UnsafeDestination:
            raise
        except OSError as ex:
            raise ComparisonError(f"--out {self.out}: cannot be used: {ex.strerror or ex}") from None
        try:
            self._refuse_foreign()
        except ComparisonError:
            self.__exit__(None, None, None)
            raise
        for stale in self.out.glob(".staging-*"):
            if stale.is_symlink():
                stale.unlink()
            else:
                shutil.rmtree(stale, ignore_errors=True)
        self.staging.mkdir()
        return self

    def commit(self) -> None:
        """Move everything in :attr:`staging` into ``out``, replacing the previous comparison's outputs."""
        manifest = self.out / MANIFEST
        before = self.recorded()
        names = sorted(p.name for p in self.staging.iterdir())
        trash = self.out / f".staging-{os.getpid()}-old"
        trash.mkdir(exist_ok=True)
        for name in names:  # directories (estimates/) first, results.csv last
            if (self.out / name).is_dir() and not (self.out / name).is_symlink():
                (self.out / name).rename(trash / name)
        for name in sorted(names, key=lambda n: (n == "results.csv", n)):
            os.replace(self.staging / name, self.out / name)
        for name in sorted(before - set(names)):
            target = self.out / name
            if target.is_dir():
                shutil.rmtree(target, ignore_errors=True)
            else:
                target.unlink(missing_ok=True)
        write_file(manifest, json.dumps(names))
        shutil.rmtree(trash, ignore_errors=True)

    def __exit__(self, *exc) -> None:
        shutil.rmtree(self.staging, ignore_errors=True)
        if self._lock is not None:
            self._lock.release()
            self._lock = None


def run_comparison(config: str | Path, engine: str = "local", out: str | Path = "results") -> pd.DataFrame:
    """Run every run and seed of a comparison file and write its results.

    Parameters
    ----------
    config : str or Path
        The comparison file.
    engine : {"local", "ray"}
        In-process engine or Flower's Ray simulation engine.
    out : str or Path
        Output directory (created). One process at a time (:class:`OutputDir`): everything is written to a
        staging directory first and replaces the earlier results only once every job has finished.

    Returns
    -------
    pandas.DataFrame
        The results table also written to ``out/results.csv``.
    """
    meta, jobs = load_comparison(config)
    check_out_dir(out)
    _check_data(jobs, config)
    _check_checkpoint_dirs(jobs, config)
    checkpoints = {f"checkpoint-dir (run {job.run!r} seed {job.seed})": job_checkpoint_dir(job) for job in jobs
                   if job.run_config.get("checkpoint-dir")}
    with OutputDir(out, output_names(meta), also=checkpoints) as target:
        stage = target.staging
        workdir = stage / ".runs"
        (stage / "estimates").mkdir(parents=True)
        frames = []
        bar = tqdm(jobs, desc="runs", unit="run", file=sys.stderr)
        for job in bar:
            bar.set_postfix_str(f"{job.run} seed {job.seed}")
            frames.append(_run_job(job, engine, workdir))
            if FAILURE_COLUMN in frames[-1]:  # a failed run has no result: its estimate is not kept
                continue
            ran, kept = workdir / job.stem, stage / "estimates"
            _take(ran / "estimate.npy", kept / f"{job.stem}.npy")
            if (ran / "pca.npz").exists():  # the PCA model of a noise-free eigenspace run
                _take(ran / "pca.npz", kept / f"{job.stem}.pca.npz")
            plink2 = (ran / "pca.eigenval").exists()
            for suffix in ("eigenval", "eigenvec.allele", "score", "afreq"):  # a run over .bed files: plink2's
                if (ran / f"pca.{suffix}").exists():
                    _take(ran / f"pca.{suffix}", kept / f"{job.stem}.{suffix}")
            for name in ("prune.in", "prune.out"):  # indep-pairwise: plink2's variant lists
                if (ran / name).exists():
                    _take(ran / name, kept / f"{job.stem}.{name}")
            if plink2:
                picture = ancestry_picture(job, kept / f"{job.stem}.pca.npz", final_converged(frames[-1]))
                if picture is not None:
                    write_file(stage / "estimates" / f"{job.stem}.ancestry.png", picture)
        shutil.rmtree(workdir, ignore_errors=True)
        results = pd.concat(frames, ignore_index=True)
        if FAILURE_COLUMN in results:
            results[FAILURE_COLUMN] = results[FAILURE_COLUMN].fillna("")
        write_file(stage / "results.csv", plain_frame(results).to_csv(index=False))
        write_report(results, meta, stage)
        target.commit()
    return results


def _take(source: Path, destination: Path) -> None:
    """Move a run's file ``source`` (in the staging folder's ``.runs``) to ``destination`` (in the staging folder):
    one rename of the file as its run wrote it (whole, synced), not read and written again; a copy where the two
    are on different file systems."""
    check_destination(destination)
    try:
        os.replace(source, destination)
    except OSError:
        write_file(destination, source.read_bytes())


def output_names(meta: dict) -> tuple[str, ...]:
    """The names a comparison writes in ``--out``."""
    return ("estimates", "results.csv", "summary.md", f"{meta['metric']}.png")


def write_report(results: pd.DataFrame, meta: dict, out: Path) -> None:
    """Write ``summary.md`` and ``<metric>.png`` of a results table into ``out``.

    A metric column without a single value is reported as empty in ``summary.md`` (and on stderr) and not
    drawn: no blank figure.
    """
    metric = meta["metric"]
    if metric not in results.columns:
        if metric not in {m for names in METRICS.values() for m in names}:
            raise ComparisonError(f"metric {metric!r} is not a column of the results (columns: "
                                  f"{', '.join(map(str, results.columns))})")
        results = results.assign(**{metric: np.nan})  # a column these runs' strategies do not write
    summary = summarize(results, thresholds=meta["thresholds"], metric=metric)
    empty = pd.to_numeric(results[metric], errors="coerce").isna().all()
    note = (f"No run wrote a value of {metric}: the table's {metric.replace('_', ' ')} cells are empty and no "
            "plot is drawn." if empty else "")
    write_summary_markdown(summary, out / "summary.md", title=meta["title"], metric=metric, note=note)
    if empty:
        print(f"warning: no run wrote a value of {metric}; summary.md says so and no plot is drawn", file=sys.stderr)
    else:
        plot_metric(results, out / f"{metric}.png", metric=metric, title=meta["title"])


def report_only(config: str | Path, out: str | Path) -> pd.DataFrame:
    """Rewrite ``summary.md`` and the plot of ``out`` from its ``results.csv`` (under the ``--out`` lock)."""
    meta, _ = load_comparison(config)
    out = check_out_dir(out)
    csv = out / "results.csv"
    if not csv.is_file():
        raise ComparisonError(f"--report-only: there are no results to report in {out} (no results.csv); run "
                              "the comparison without --report-only first")
    try:
        results = pd.read_csv(csv)
    except (ValueError, OSError) as ex:
        raise ComparisonError(f"--report-only: {csv} cannot be read: {ex}") from None
    missing = [c for c in ("run", "strategy", "seed", "round", "bytes_up", "bytes_down") if c not in results]
    if missing or results.empty:
        raise ComparisonError(f"--report-only: {csv} is not a comparison's results table "
                              f"({'no rows' if results.empty else 'no column ' + ', '.join(missing)})")
    with OutputDir(out, output_names(meta)[2:]) as target:
        write_report(results, meta, target.staging)
        written = {path.name for path in target.staging.iterdir()}
        for path in target.staging.iterdir():
            os.replace(path, out / path.name)
        # the plot of another metric is this comparison's output too
        write_file(out / MANIFEST, json.dumps(sorted(target.recorded() | written)))
    return results


EXAMPLES = """\
examples:
  {prog} simulations/experiments/fedpower/fedpower_model1.toml --out results/fedpower_model1
  {prog} my-comparison.toml --out results/mine --engine ray
  {prog} my-comparison.toml --out results/mine --report-only

  a comparison file (TOML): [defaults] holds run-config keys, each [[runs]] a name, a strategy and overrides:

    seeds = [0, 1]
    [defaults]
    dataset = "fedpower-model1"
    num-clients = 10
    [[runs]]
    name = "fedpower"
    strategy = "fedpower"

  writes OUT/results.csv, OUT/summary.md, OUT/<metric>.png and OUT/estimates/

exit status: 0 every run finished, 1 a run failed (kept in the results, marked FAILED), 2 a bad file or
argument (one line file:line: message, nothing run), 130 (143) stopped by Ctrl-C (SIGTERM): earlier results
unchanged
"""


def main(argv: list[str] | None = None, prog: str = "python -m simulations.compare") -> int:
    """Command-line entry point: exit 0 on success, 2 on a bad file or argument (one line), 1 if a run failed.

    A run that failed (``fedspectral: run FAILED: ...``, e.g. no reply accepted in any round) is kept in the
    results, marked FAILED in ``summary.md`` and named on stderr; the exit status is then 1. ``prog`` is the
    command's name in its usage and error lines (``fedspectral compare`` from :mod:`fedspectral.cli`).
    """
    parser = ArgumentParser(prog=prog, description="Run the runs of a comparison file (strategies, settings, "
                            "seeds) and write a results table,\na summary and plots.",
                            epilog=EXAMPLES.format(prog=prog))
    parser.add_argument("config", metavar="CONFIG.toml", help="comparison file (TOML)")
    parser.add_argument("--engine", choices=("local", "ray"), default="local",
                        help="local: in-process (default); ray: Flower's Ray simulation engine")
    parser.add_argument("--out", default="results", metavar="DIR", help="output directory (default: results)")
    parser.add_argument("--verbose", action="store_true",
                        help="show the server's log: one progress line per round of each run, and the rest")
    parser.add_argument("--report-only", action="store_true",
                        help="do not run anything: rewrite summary.md and the plot from OUT/results.csv")
    args = parser.parse_args(argv)
    if not args.verbose:
        import flwr.common  # noqa: F401  (Flower sets its logger's level on import)

        logging.getLogger("flwr").setLevel(logging.WARNING)
    try:
        with stop_signals():  # SIGTERM and SIGHUP as Ctrl-C: the staging directory and Ray are cleaned up
            if args.report_only:
                results = report_only(args.config, args.out)
            else:
                results = run_comparison(args.config, engine=args.engine, out=args.out)
    except (ComparisonError, ConfigError) as ex:
        print(f"{prog}: error: {ex}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as ex:
        stopped = interruption(ex)
        print(f"{prog}: stopped by {stopped.name}: the earlier results in {args.out} are unchanged",
              file=sys.stderr)
        return stopped.status
    except (RuntimeError, OSError) as ex:
        print(f"{prog}: error: {ex}; the earlier results in {args.out} are unchanged", file=sys.stderr)
        return 1
    print((Path(args.out) / "summary.md").read_text())
    print(f"{len(results)} rows written to {Path(args.out) / 'results.csv'}")
    failed = failed_runs(results)
    for (run, seed), why in failed.items():
        print(f"fedspectral: run FAILED: run {run!r} seed {seed}: {why}", file=sys.stderr)
    return 1 if failed else 0


def failed_runs(results: pd.DataFrame) -> dict[tuple[str, int], str]:
    """``(run, seed) -> why`` for every failed run of a results table (:data:`FAILURE_COLUMN`)."""
    if FAILURE_COLUMN not in results:
        return {}
    rows = results[results[FAILURE_COLUMN].fillna("").astype(str) != ""]
    return {(str(r["run"]), int(r["seed"])): str(r[FAILURE_COLUMN]) for _, r in rows.drop_duplicates(["run", "seed"])
            .iterrows()}


if __name__ == "__main__":
    sys.exit(main())
