"""Summaries, Markdown tables and plots for federated-PCA comparisons.

The functions in this module consume a *tidy* results frame with one row per
``(run, seed, round)`` and at least the columns

``run`` (str)
    Identifier of one configuration (strategy + hyper-parameters).
``strategy`` (str)
    Name of the federated algorithm used by the run.
``seed`` (int)
    Random seed of the repetition.
``round`` (int)
    Communication round; ``0`` is the initial estimate before any
    communication.
metric column (float, default ``subspace_distance``)
    Error of the current estimate, ``>= 0``; may be NaN when not computable.
``bytes_up``, ``bytes_down`` (int)
    Bytes sent client -> server and server -> client during the round.
``panel`` (str, optional)
    Runs sharing a panel value are drawn in the same subplot.  A missing
    column or empty / missing values mean a single panel named ``""``.

Public functions
----------------
rounds_to_reach
    First round at which one seed of one run reaches a threshold.
summarize
    One summary row per run (final error, rounds to thresholds, bytes).
write_summary_markdown
    Render the output of :func:`summarize` as a Markdown pipe table.
plot_metric
    Median-over-seeds convergence curves with min/max bands (PNG).
"""

from __future__ import annotations

import math
import textwrap
from pathlib import Path
from typing import Iterable, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from fl_strategies.files.plain_files import write_file  # noqa: E402

__all__ = [
    "final_converged",
    "rounds_to_reach",
    "summarize",
    "write_summary_markdown",
    "plot_metric",
    "save_figure",
]

#: Smallest value drawn on the log axis; zeros and tinier values are clipped.
LOG_FLOOR = 1e-16
RATIO = "explained_variance_ratio"
"""The results column of a PCA model's explained-variance ratio (its kept components, summed; last row)."""
FINAL_RATIO = "final_explained_variance_ratio"
CONVERGED = "converged_components"
"""The results column of a run without an exact reference: how many leading kept components (``rank``) moved by
at most ``CONVERGED_CHANGE`` (sin theta) in the round (:meth:`~fl_strategies.protocol.strategies.eigenspace.
EigenspaceStrategy.converged_columns`); ``converged_change``: how far they moved."""
CONVERGED_CHANGE_COLUMN = "converged_change"
FINAL_CONVERGED, FINAL_CONVERGED_CHANGE = "final_converged_components", "final_converged_change"

#: Maximum number of subplots per row in :func:`plot_metric`.
MAX_PANELS_PER_ROW = 3
#: Placeholder used in Markdown tables for missing / unreached values.
MISSING = "—"
#: Prefix of the "rounds to reach a threshold" columns of :func:`summarize`.
ROUNDS_TO_PREFIX = "rounds_to_"


# --------------------------------------------------------------------------- #
# Summaries
# --------------------------------------------------------------------------- #
def rounds_to_reach(
    df_run_seed: pd.DataFrame, threshold: float, metric: str = "subspace_distance"
) -> float:
    """First communication round at which the metric drops to a threshold.

    Parameters
    ----------
    df_run_seed : pandas.DataFrame
        Rows of a single ``(run, seed)`` pair, with columns ``round`` and
        `metric`.  Row order does not matter.
    threshold : float
        Target value; a round qualifies when ``metric <= threshold``.
    metric : str, default "subspace_distance"
        Name of the metric column.

    Returns
    -------
    float
        The smallest ``round`` whose metric is ``<= threshold``, as a float,
        or ``np.nan`` if the threshold is never reached.  NaN metric values
        never qualify.
    """
    values = pd.to_numeric(df_run_seed[metric], errors="coerce")
    reached = df_run_seed.loc[values.le(threshold), "round"]
    if reached.empty:
        return float("nan")
    return float(reached.min())


def _threshold_column(threshold: float) -> str:
    """Name of the summary column holding rounds to reach `threshold`."""
    return f"{ROUNDS_TO_PREFIX}{threshold:g}"


def final_converged(rows: pd.DataFrame) -> int | None:
    """How many leading PCs one run (one seed's rows) had converged at its last row (:data:`CONVERGED`, the last
    row as :func:`_final_values` takes it); ``None`` where not known (no such column, or no value: a run against an
    exact reference)."""
    if CONVERGED not in rows.columns or rows.empty:
        return None
    count = pd.to_numeric(_final_values(rows, CONVERGED), errors="coerce").iloc[-1]
    return None if pd.isna(count) else int(count)


def _final_values(df_run: pd.DataFrame, metric: str) -> pd.Series:
    """Metric at each seed's last row, indexed by seed.

    The last row is the one of the last round and, among rows of one round
    (fedmf's local solve writes one row per local ``iteration``), the last
    iteration; ties keep file order (a stable sort), so the choice never
    depends on the sorting algorithm.
    """
    keys = ["round", "iteration"] if "iteration" in df_run.columns else ["round"]
    order = df_run.assign(_pos=np.arange(len(df_run)))
    for key in keys:
        order[key] = pd.to_numeric(order[key], errors="coerce").fillna(-np.inf)
    last = order.sort_values(keys + ["_pos"], kind="stable").groupby("seed", sort=True).tail(1)
    return last.set_index("seed")[metric].astype(float)


def _median_rounds_to(
    df_run: pd.DataFrame, threshold: float, metric: str
) -> float:
    """Median over seeds of :func:`rounds_to_reach`; NaN if any seed misses."""
    per_seed = [
        rounds_to_reach(group, threshold, metric)
        for _, group in df_run.groupby("seed", sort=True)
    ]
    if not per_seed or any(math.isnan(r) for r in per_seed):
        return float("nan")
    return float(np.median(per_seed))


def _median_total_bytes(df_run: pd.DataFrame) -> float:
    """Median over seeds of the total ``bytes_up + bytes_down``."""
    traffic = df_run["bytes_up"].astype(float) + df_run["bytes_down"].astype(float)
    per_seed = traffic.groupby(df_run["seed"]).sum()
    return float(per_seed.median())


def _summarize_run(
    run: str, df_run: pd.DataFrame, thresholds: Sequence[float], metric: str
) -> dict:
    """Summary row (as a dict) for the rows of one run."""
    finals = _final_values(df_run, metric)
    row = {
        "run": run,
        "strategy": df_run["strategy"].iloc[0],
        "seeds": int(df_run["seed"].nunique()),
        "rounds": float(df_run.groupby("seed")["round"].max().median()),
        "final_median": float(finals.median()),
        "final_min": float(finals.min()),
        "final_max": float(finals.max()),
    }
    for t in thresholds:
        row[_threshold_column(t)] = _median_rounds_to(df_run, t, metric)
    row["total_bytes"] = _median_total_bytes(df_run)
    if RATIO in df_run.columns:
        row[FINAL_RATIO] = float(pd.to_numeric(_final_values(df_run, RATIO), errors="coerce").median())
    if CONVERGED in df_run.columns:  # the leading PCs every seed has converged, and the most any of them moved
        counts = pd.to_numeric(_final_values(df_run, CONVERGED), errors="coerce")
        row[FINAL_CONVERGED] = float(counts.min()) if counts.notna().all() else float("nan")
        changes = pd.to_numeric(_final_values(df_run, CONVERGED_CHANGE_COLUMN), errors="coerce")
        row[FINAL_CONVERGED_CHANGE] = float(changes.max()) if row[FINAL_CONVERGED] > 0 else float("nan")
    if "failure" in df_run:
        row["failed"] = _failed_seeds(df_run)
    return row


def _failed_seeds(df_run: pd.DataFrame) -> str:
    """``"seed 0: why; seed 2: why"`` for the seeds of a run that failed (column ``failure``), else ``""``."""
    rows = df_run[df_run["failure"].fillna("").astype(str) != ""].drop_duplicates("seed")
    return "; ".join(f"seed {seed}: {why}" for seed, why in zip(rows["seed"], rows["failure"]))


def summarize(
    df: pd.DataFrame,
    thresholds: Iterable[float] = (1e-2, 1e-4, 1e-10),
    metric: str = "subspace_distance",
) -> pd.DataFrame:
    """Summarize a tidy results frame with one row per run.

    Parameters
    ----------
    df : pandas.DataFrame
        Tidy results (see the module docstring for the columns).
    thresholds : iterable of float, default (1e-2, 1e-4, 1e-10)
        Targets for the "rounds to reach" columns.
    metric : str, default "subspace_distance"
        Name of the metric column.

    Returns
    -------
    pandas.DataFrame
        One row per run, in order of first appearance in `df`, with columns

        ``run``, ``strategy``
            Identifiers (``strategy`` is taken from the run's first row).
        ``seeds``
            Number of distinct seeds.
        ``rounds``
            Median over seeds of each seed's last ``round`` (runs with a
            stopping rule end at different rounds).
        ``final_median``, ``final_min``, ``final_max``
            Median / min / max over seeds of the metric at each seed's last
            round (NaN values are skipped).
        ``rounds_to_{t:g}`` for each threshold ``t``
            Median over seeds of :func:`rounds_to_reach`.  The value is NaN
            if **any** seed never reaches the threshold, so a finite number
            always means "every seed got there".
        ``total_bytes``
            Median over seeds of the sum of ``bytes_up + bytes_down`` over all
            rounds.
        ``final_explained_variance_ratio``
            Only when some run wrote ``explained_variance_ratio`` (a run
            without an exact reference that wrote a PCA model): median over
            seeds of its final value, the share of the variance the model's
            kept components explain.
        ``final_converged_components``, ``final_converged_change``
            Only when some run wrote ``converged_components`` (a run without
            an exact reference): the fewest over seeds, at each seed's last
            row, of the leading kept components that moved by at most
            ``CONVERGED_CHANGE`` in that round, and the most any seed's moved
            (``converged_change``; NaN when none converged).
        ``failed``
            Only when the results have a ``failure`` column: ``"seed 0: why; ..."``
            for the seeds whose run failed, else ``""``.
    """
    thresholds = tuple(thresholds)
    df = df.reset_index(drop=True)  # duplicate indices (e.g. from concat) are fine
    if RATIO in df.columns and pd.to_numeric(df[RATIO], errors="coerce").isna().all():
        df = df.drop(columns=RATIO)  # no run has a model's ratio: no column for it
    if CONVERGED in df.columns and pd.to_numeric(df[CONVERGED], errors="coerce").isna().all():
        df = df.drop(columns=CONVERGED)  # measured against a reference, or an older results.csv
    rows = [
        _summarize_run(run, df_run, thresholds, metric)
        for run, df_run in df.groupby("run", sort=False)
    ]
    columns = (
        ["run", "strategy", "seeds", "rounds", "final_median", "final_min", "final_max"]
        + [_threshold_column(t) for t in thresholds]
        + ["total_bytes"]
        + ([FINAL_RATIO] if RATIO in df.columns else [])
        + ([FINAL_CONVERGED, FINAL_CONVERGED_CHANGE] if CONVERGED in df.columns else [])
        + (["failed"] if "failure" in df else [])
    )
    return pd.DataFrame(rows, columns=columns)


# --------------------------------------------------------------------------- #
# Markdown
# --------------------------------------------------------------------------- #
def _is_missing(value) -> bool:
    """True for None and float NaN."""
    return value is None or (isinstance(value, float) and math.isnan(value))


def _fmt_float(value) -> str:
    """Scientific notation with two digits after the point, e.g. ``3.70e-05``."""
    return MISSING if _is_missing(value) else f"{float(value):.2e}"


def _fmt_rounds(value) -> str:
    """Rounds as an integer (one decimal if a median falls between rounds)."""
    if _is_missing(value):
        return MISSING
    value = float(value)
    return f"{value:.0f}" if value.is_integer() else f"{value:.1f}"


def _fmt_bytes(value) -> str:
    """Human-readable byte count with decimal units (B, kB, MB, GB, TB)."""
    if _is_missing(value):
        return MISSING
    value = float(value)
    if abs(value) < 1e3:
        return f"{value:.0f} B"
    for unit, scale in (("kB", 1e3), ("MB", 1e6), ("GB", 1e9)):
        if abs(value) < scale * 1e3:
            return f"{value / scale:.1f} {unit}"
    return f"{value / 1e12:.1f} TB"


def _fmt_final(row: pd.Series) -> str:
    """Final metric as ``median [min, max]``."""
    if _is_missing(row["final_median"]):
        return MISSING
    return (
        f"{_fmt_float(row['final_median'])} "
        f"[{_fmt_float(row['final_min'])}, {_fmt_float(row['final_max'])}]"
    )


def _escape_cell(text) -> str:
    """Make a value safe for a Markdown table cell."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def _threshold_columns(summary: pd.DataFrame) -> list[str]:
    """The ``rounds_to_*`` columns of a summary, in their order."""
    return [c for c in summary.columns if c.startswith(ROUNDS_TO_PREFIX)]


def _markdown_header(summary: pd.DataFrame, metric: str) -> list[str]:
    """Human-readable header cells of the summary table."""
    label = metric.replace("_", " ")
    thresholds = [
        f"rounds to {c[len(ROUNDS_TO_PREFIX):]}" for c in _threshold_columns(summary)
    ]
    return (
        ["run", "strategy", "seeds", "rounds", f"final {label}"]
        + (["PCs converged"] if FINAL_CONVERGED in summary.columns else [])
        + thresholds
        + ["total bytes"]
        + (["final explained variance ratio"] if FINAL_RATIO in summary.columns else [])
    )


def _markdown_row(row: pd.Series, threshold_cols: Sequence[str]) -> list[str]:
    """Formatted cells for one summary row."""
    return (
        [
            _escape_cell(row["run"]) + (" **FAILED**" if row.get("failed") else ""),
            _escape_cell(row["strategy"]),
            _fmt_rounds(row["seeds"]),
            _fmt_rounds(row["rounds"]),
            _fmt_final(row),
        ]
        + ([_fmt_converged(row)] if FINAL_CONVERGED in row.index else [])
        + [_fmt_rounds(row[c]) for c in threshold_cols]
        + [_fmt_bytes(row["total_bytes"])]
        + ([MISSING if _is_missing(row[FINAL_RATIO]) else f"{row[FINAL_RATIO]:.4f}"]
           if FINAL_RATIO in row.index else [])
    )


def _fmt_converged(row: pd.Series) -> str:
    """``PC1-2 (moved 3.05e-12)``, ``PC1 (...)``, ``none`` or ``—`` (not known)."""
    count = row[FINAL_CONVERGED]
    if _is_missing(count):
        return MISSING
    if count < 1:
        return "none"
    named = "PC1" if count == 1 else f"PC1-{count:.0f}"
    return f"{named} (moved {_fmt_float(row[FINAL_CONVERGED_CHANGE])})"


def _pipe_line(cells: Sequence[str]) -> str:
    """One GitHub-style table line."""
    return "| " + " | ".join(cells) + " |"


def write_summary_markdown(
    summary: pd.DataFrame, path, title: str, metric: str, note: str = ""
) -> None:
    """Write the output of :func:`summarize` as a Markdown file.

    Parameters
    ----------
    summary : pandas.DataFrame
        Frame returned by :func:`summarize`.
    path : str or os.PathLike
        Destination file; parent directories are created if needed.
    title : str
        Text of the level-1 heading.
    metric : str
        Name of the metric that was summarized (used in the prose and header).
    note : str, optional
        A paragraph written after the prose (e.g. that no run wrote the metric).

    Notes
    -----
    Floats are written in scientific notation (``3.70e-05``), rounds as
    integers, byte counts with decimal units (kB, MB, ...), and ``—`` marks a
    threshold that was not reached (or a value that is not available).
    """
    label = metric.replace("_", " ")
    threshold_cols = _threshold_columns(summary)
    lines = [
        f"# {title}",
        "",
        f"Final {label}: median [min, max] over seeds at the last round; "
        "rounds to t: median over seeds of the first round with "
        f"{label} <= t (\u201c{MISSING}\u201d where some seed never reached it); "
        "total bytes: median over seeds of uploaded + downloaded bytes."
        + (" Final explained variance ratio: median over seeds of the share of the variance the PCA model's kept "
           "components explain." if FINAL_RATIO in summary.columns else "")
        + (_converged_note(metric) if FINAL_CONVERGED in summary.columns else ""),
        "",
    ]
    if note:
        lines += [note, ""]
    header = _markdown_header(summary, metric)
    lines.append(_pipe_line(header))
    lines.append(_pipe_line(["---"] * len(header)))
    for _, row in summary.iterrows():
        lines.append(_pipe_line(_markdown_row(row, threshold_cols)))
    failed = [row for _, row in summary.iterrows() if row.get("failed")]
    if failed:  # a failed run has no result: its numbers are those of its start
        lines += ["", "**FAILED** runs (no result; their numbers are those of the start):", ""]
        lines += [f"- {_escape_cell(row['run'])}: {_escape_cell(row['failed'])}" for row in failed]
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_file(path, "\n".join(lines) + "\n")


def _converged_note(metric: str) -> str:
    """The prose of the ``PCs converged`` column (and of ``estimate_change_first_k`` beside it)."""
    from fl_strategies.protocol.strategies.eigenspace import CONVERGED_CHANGE

    return (
        f" PCs converged: the leading kept components that moved by at most {CONVERGED_CHANGE:g} (sin theta of "
        "the leading ones together, Ritz vectors or the estimate's leading columns) in the last round, in every "
        "seed, and the most any seed's moved."
        + (" Estimate change first k is that sin theta of all k kept components (k = rank) at once: where the "
           "k-th eigenvalue is in a bulk of near-equal ones (genotypes past their few clear PCs), their subspace "
           "keeps turning and the column stays large while the leading PCs are exact; PCs converged tells them "
           "apart." if metric == "estimate_change_first_k" else "")
    )


# --------------------------------------------------------------------------- #
# Plots
# --------------------------------------------------------------------------- #
def _panel_labels(df: pd.DataFrame) -> pd.Series:
    """Panel of every row as a string; missing column / values become ``""``."""
    if "panel" not in df.columns:
        return pd.Series("", index=df.index)
    return df["panel"].fillna("").astype(str)


def _seed_bands(df_run: pd.DataFrame, metric: str) -> pd.DataFrame:
    """Median, min and max over seeds per round, clipped for a log axis.

    Returns a frame indexed by round with columns ``median``, ``low``,
    ``high``; rounds where every seed is NaN are dropped. A seed that stopped
    early (a stopping rule) keeps its final value in later rounds: its result
    does not change any more, and dropping it would make the median jump.
    """
    values = df_run[metric].astype(float).clip(lower=LOG_FLOOR)
    table = values.groupby([df_run["round"], df_run["seed"]]).mean().unstack("seed")
    last = df_run.groupby("seed")["round"].max()
    for seed in table.columns:  # carry each seed's final value forward past its last round
        after = table.index > last[seed]
        table.loc[after, seed] = table.loc[table.index <= last[seed], seed].ffill().iloc[-1]
    bands = pd.DataFrame(
        {
            "median": table.median(axis=1, skipna=True),
            "low": table.min(axis=1, skipna=True),
            "high": table.max(axis=1, skipna=True),
        }
    )
    return bands.dropna(subset=["median"]).sort_index()


def _run_colors(df: pd.DataFrame, panels: pd.Series) -> dict:
    """Colour per run, consistent across panels.

    Runs are coloured by strategy when no panel holds two runs of the same
    strategy (so a strategy keeps its colour everywhere), else by run.
    """
    cycle = plt.rcParams["axes.prop_cycle"].by_key().get("color", ["C0"])
    if "series" in df.columns:  # explicit series: one colour per series, across panels
        runs = df[["run", "series"]].drop_duplicates("run")
        order = {k: i for i, k in enumerate(pd.unique(runs["series"]))}
        return {run: cycle[order[key] % len(cycle)] for run, key in zip(runs["run"], runs["series"])}
    runs = (
        df[["run", "strategy"]].assign(panel=panels.to_numpy()).drop_duplicates("run")
    )
    by_strategy = not runs.duplicated(["panel", "strategy"]).any()
    keys = runs["strategy"] if by_strategy else runs["run"]
    order = {k: i for i, k in enumerate(pd.unique(keys))}
    return {
        run: cycle[order[key] % len(cycle)] for run, key in zip(runs["run"], keys)
    }


def _plot_run(ax, bands: pd.DataFrame, label: str, color) -> None:
    """Median line with markers and a min-max band for one run."""
    x = bands.index.to_numpy(dtype=float)
    markevery = max(1, len(x) // 25)
    ax.fill_between(
        x, bands["low"], bands["high"], color=color, alpha=0.18, linewidth=0
    )
    ax.plot(
        x,
        bands["median"],
        color=color,
        marker="o",
        markersize=3.5,
        markevery=markevery,
        linewidth=1.4,
        label=label,
    )


def _plot_panel(ax, df_panel: pd.DataFrame, metric: str, colors: dict) -> None:
    """All runs of one panel on one axis (log y, grid, legend)."""
    for run, df_run in df_panel.groupby("run", sort=False):
        bands = _seed_bands(df_run, metric)
        label = str(df_run["series"].iloc[0]) if "series" in df_run.columns else str(run)
        if not bands.empty:
            _plot_run(ax, bands, label, colors[run])
    ax.set_yscale("log")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(True, which="major", alpha=0.3)
    ax.grid(True, which="minor", axis="y", alpha=0.08)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize="small", loc="best", framealpha=0.85)


def _make_axes(n_panels: int):
    """Figure and flat list of axes: a grid with at most 3 panels per row."""
    ncols = min(max(n_panels, 1), MAX_PANELS_PER_ROW)
    nrows = math.ceil(max(n_panels, 1) / ncols)
    fig, axes = plt.subplots(
        nrows,
        ncols,
        figsize=(5.0 * ncols, 3.8 * nrows),
        sharey=True,
        squeeze=False,
    )
    return fig, axes


def save_figure(fig, path, dpi: int = 120) -> Path:
    """Write the matplotlib figure ``fig`` to ``path`` (its suffix names the format) and close it.

    The file is written by :func:`fl_strategies.files.plain_files.write_file`: never through a link.
    """
    path = Path(path)
    try:
        return write_file(path, lambda handle: fig.savefig(handle, dpi=dpi, format=path.suffix.lstrip(".") or "png"))
    finally:
        plt.close(fig)


def plot_metric(
    df: pd.DataFrame,
    path,
    metric: str = "subspace_distance",
    title: str = "",
    ylabel: str | None = None,
) -> None:
    """Plot convergence curves (median over seeds with min-max bands) to a PNG.

    Parameters
    ----------
    df : pandas.DataFrame
        Tidy results (see the module docstring).  If a ``panel`` column is
        present, runs sharing a panel value share a subplot; otherwise all runs
        are drawn in one subplot.
    path : str or os.PathLike
        Destination PNG file; parent directories are created if needed.
    metric : str, default "subspace_distance"
        Column drawn on the y axis (log scale).
    title : str, default ""
        Figure title (omitted when empty).  Non-empty panel names are used as
        subplot titles.
    ylabel : str, optional
        y-axis label; defaults to `metric` with underscores replaced by spaces.

    Notes
    -----
    Values below ``1e-16`` (including exact zeros) are clipped to ``1e-16`` so
    that the log axis works; NaN values are skipped.  Subplots are laid out in
    rows of at most three with a shared y axis; the figure is saved at 120 dpi
    and closed.
    """
    df = df.reset_index(drop=True)  # duplicate indices (e.g. from concat) are fine
    panels = _panel_labels(df)
    panel_names = list(pd.unique(panels))
    title = textwrap.fill(title, 55 * min(len(panel_names), MAX_PANELS_PER_ROW))
    colors = _run_colors(df, panels)
    fig, axes = _make_axes(len(panel_names))
    flat = axes.ravel()
    ncols = axes.shape[1]
    for i, name in enumerate(panel_names):
        ax = flat[i]
        _plot_panel(ax, df[panels == name], metric, colors)
        if name:
            ax.set_title(name, fontsize="medium")
        ax.set_xlabel("communication rounds")
        if i % ncols == 0:
            ax.set_ylabel(ylabel if ylabel is not None else metric.replace("_", " "))
    for ax in flat[len(panel_names):]:
        ax.set_visible(False)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    save_figure(fig, path, dpi=120)
