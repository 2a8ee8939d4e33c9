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

Every run and seed is validated before the first one starts. The command
writes ``DIR/results.csv`` (one row per run, seed and round),
``DIR/summary.md``, ``DIR/<metric>.png``, ``DIR/estimates/<run>__seed<k>.npy`` and, for a noise-free
eigenspace run, its PCA model ``DIR/estimates/<run>__seed<k>.pca.npz``.
"""

from __future__ import annotations

import argparse
import difflib
import logging
import re
import shutil
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from tqdm import tqdm

from fl_strategies.config import KEYS, ConfigError, validate_run_config
from fl_strategies.harness import find_harness
from fl_strategies.base import RunFailed

from simulations.engines import fused_run_config
from simulations.compare.report import plot_metric, summarize, write_summary_markdown

__all__ = ["Job", "load_comparison", "run_comparison", "main"]

TOP_KEYS = ("title", "metric", "thresholds", "seeds", "defaults", "runs")
RUN_KEYS = ("name", "strategy", "panel", "series", "seeds")


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

    @property
    def stem(self) -> str:
        """File-name stem ``<run>__seed<k>`` with unsafe characters replaced."""
        return f"{re.sub(r'[^A-Za-z0-9._=+-]+', '_', self.run)}__seed{self.seed}"


def _line_of(text: str, run_index: int | None, key: str | None) -> int | None:
    """Line number (1-based) of ``key`` in the ``run_index``-th ``[[runs]]`` table (or at top level)."""
    lines = text.splitlines()
    start, stop = 0, len(lines)
    headers = [i for i, ln in enumerate(lines) if ln.strip().startswith("[[runs]]")]
    if run_index is not None and run_index < len(headers):
        start = headers[run_index]
        stop = headers[run_index + 1] if run_index + 1 < len(headers) else len(lines)
    if key is None:
        return start + 1
    for i in range(start, stop):
        if re.match(rf"\s*\"?{re.escape(key)}\"?\s*=", lines[i]):
            return i + 1
    return start + 1


def load_comparison(path: str | Path) -> tuple[dict, list[Job]]:
    """Read and validate a comparison file.

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
        key (with the closest valid one), a missing name or strategy, a
        duplicate run name, or a run config that fails validation.
    """
    path = Path(path)
    if not path.is_file():
        raise ComparisonError(f"{path}: no such comparison file")
    text = path.read_text()
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as ex:
        raise ComparisonError(f"{path}: not valid TOML: {ex}") from None

    def fail(msg: str, run_index: int | None = None, key: str | None = None):
        raise ComparisonError(f"{path}:{_line_of(text, run_index, key)}: {msg}")

    for key in doc:
        if key not in TOP_KEYS:
            close = difflib.get_close_matches(key, TOP_KEYS + tuple(KEYS), n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            hint += " (run-config keys go in [defaults] or a [[runs]] table)" if key in KEYS else ""
            fail(f"unknown top-level key {key!r}.{hint}", None, key)
    defaults = doc.get("defaults", {})
    if not isinstance(defaults, dict):
        fail("'defaults' must be a table ([defaults])", None, "defaults")
    runs = doc.get("runs", [])
    if not isinstance(runs, list) or not runs:
        fail("the file defines no [[runs]] table")
    seeds_default = doc.get("seeds", [0])
    meta = {"title": doc.get("title", path.stem), "metric": doc.get("metric", "subspace_distance"),
            "thresholds": tuple(doc.get("thresholds", (1e-2, 1e-4, 1e-10)))}
    for key in defaults:
        if key not in KEYS:
            close = difflib.get_close_matches(key, KEYS, n=1)
            fail(f"unknown run-config key {key!r} in [defaults].{' Did you mean %r?' % close[0] if close else ''}",
                 None, key)

    jobs, names = [], set()
    for i, run in enumerate(runs):
        for key in ("name", "strategy"):
            if key not in run:
                fail(f"run #{i + 1} has no {key!r}", i)
        name = str(run["name"])
        if name in names:
            fail(f"duplicate run name {name!r}", i, "name")
        names.add(name)
        overrides = {}
        for key, value in run.items():
            if key in RUN_KEYS:
                continue
            if key not in KEYS:
                close = difflib.get_close_matches(key, RUN_KEYS + tuple(KEYS), n=1)
                fail(f"run {name!r}: unknown key {key!r}.{' Did you mean %r?' % close[0] if close else ''}", i, key)
            overrides[key] = value
        seeds = run.get("seeds", seeds_default)
        if not isinstance(seeds, list) or not seeds or not all(isinstance(s, int) for s in seeds):
            fail(f"run {name!r}: seeds must be a non-empty list of integers", i, "seeds")
        for seed in seeds:
            raw = {**defaults, **overrides, "strategy": run["strategy"], "seed": seed}
            try:
                cfg = validate_run_config(fused_run_config(raw))
            except ConfigError as ex:
                bad = next((k for k in KEYS if str(ex).startswith(k)), None)
                fail(f"run {name!r}: {ex}", i, bad if bad in run else None)
            except ValueError as ex:  # Flower's own check of value types
                fail(f"run {name!r}: {ex}", i)
            jobs.append(Job(name, cfg["strategy"], str(run.get("panel", "")), seed, raw,
                            str(run.get("series", name))))
    return meta, jobs


def _check_data(jobs: list[Job]) -> None:
    """Build every distinct data set once, as the server will (the harness), and check ranks and client counts."""
    for job in jobs:
        cfg = validate_run_config(fused_run_config(job.run_config))
        harness = find_harness(cfg)
        if harness is None:  # rows on the clients (a folder of per-client files): the nodes report them
            continue
        try:  # a data set that cannot be loaded (missing file, rank above its dimension, ...) is a ValueError
            harness.server_data(cfg, evaluate=False)
        except (ValueError, MemoryError) as ex:
            raise ComparisonError(f"run {job.run!r} seed {job.seed}: {str(ex) or type(ex).__name__}") from None


def _run_job(job: Job, engine: str, workdir: Path) -> pd.DataFrame:
    out = workdir / job.stem
    overrides = {**job.run_config, "results-dir": str(out)}
    if engine == "local":
        from simulations.engines.local import run_local

        try:
            run_local(fused_run_config(overrides))
        except RunFailed as ex:
            raise ComparisonError(f"run {job.run!r} seed {job.seed} failed: {ex}") from None
    else:
        from simulations.engines.ray import run_ray

        run_ray(overrides)
    csv = out / "rounds.csv"
    if not csv.exists():
        raise RuntimeError(f"run {job.run!r} seed {job.seed} wrote no results (see the log above)")
    rows = pd.read_csv(csv)
    rows.insert(0, "round", rows.pop("round"))
    for col, value in (("series", job.series), ("panel", job.panel), ("seed", job.seed), ("strategy", job.strategy),
                       ("run", job.run)):
        rows.insert(0, col, value)
    return rows


def run_comparison(config: str | Path, engine: str = "local", out: str | Path = "results") -> pd.DataFrame:
    """Run every run and seed of a comparison file and write its results.

    Parameters
    ----------
    config : str or Path
        The comparison file.
    engine : {"local", "ray"}
        In-process engine or Flower's Ray simulation engine.
    out : str or Path
        Output directory (created; earlier results in it are replaced).

    Returns
    -------
    pandas.DataFrame
        The results table also written to ``out/results.csv``.
    """
    meta, jobs = load_comparison(config)
    _check_data(jobs)
    out = Path(out)
    workdir = out / ".runs"
    shutil.rmtree(workdir, ignore_errors=True)
    (out / "estimates").mkdir(parents=True, exist_ok=True)
    frames = []
    bar = tqdm(jobs, desc="runs", unit="run", file=sys.stderr)
    for job in bar:
        bar.set_postfix_str(f"{job.run} seed {job.seed}")
        frames.append(_run_job(job, engine, workdir))
        shutil.copy(workdir / job.stem / "estimate.npy", out / "estimates" / f"{job.stem}.npy")
        if (workdir / job.stem / "pca.npz").exists():  # the PCA model of a noise-free eigenspace run
            shutil.copy(workdir / job.stem / "pca.npz", out / "estimates" / f"{job.stem}.pca.npz")
    shutil.rmtree(workdir, ignore_errors=True)
    results = pd.concat(frames, ignore_index=True)
    results.to_csv(out / "results.csv", index=False)
    write_report(results, meta, out)
    return results


def write_report(results: pd.DataFrame, meta: dict, out: Path) -> None:
    """Write ``summary.md`` and ``<metric>.png`` of a results table into ``out``."""
    metric = meta["metric"]
    summary = summarize(results, thresholds=meta["thresholds"], metric=metric)
    write_summary_markdown(summary, out / "summary.md", title=meta["title"], metric=metric)
    plot_metric(results, out / f"{metric}.png", metric=metric, title=meta["title"])


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(prog="python -m simulations.compare", description=__doc__.split("\n\n")[0])
    parser.add_argument("config", help="comparison file (TOML)")
    parser.add_argument("--engine", choices=("local", "ray"), default="local",
                        help="local: in-process (default); ray: Flower's Ray simulation engine")
    parser.add_argument("--out", default="results", help="output directory (default: results)")
    parser.add_argument("--verbose", action="store_true", help="show Flower's per-round log")
    parser.add_argument("--report-only", action="store_true",
                        help="do not run anything: rewrite summary.md and the plot from OUT/results.csv")
    args = parser.parse_args(argv)
    if not args.verbose:
        import flwr.common  # noqa: F401  (Flower sets its logger's level on import)

        logging.getLogger("flwr").setLevel(logging.WARNING)
    try:
        if args.report_only:
            meta, _ = load_comparison(args.config)
            results = pd.read_csv(Path(args.out) / "results.csv")
            write_report(results, meta, Path(args.out))
        else:
            results = run_comparison(args.config, engine=args.engine, out=args.out)
    except (ComparisonError, ConfigError) as ex:
        print(f"error: {ex}", file=sys.stderr)
        return 2
    print((Path(args.out) / "summary.md").read_text())
    print(f"{len(results)} rows written to {Path(args.out) / 'results.csv'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
