"""The error floor and round time of a straggler comparison, against FedPower's sampling term.

Usage::

    python -m simulations.experiments.fedpower.stragglers_report DIR [--last 10]

``DIR/results.csv`` is written by :mod:`simulations.compare` on
``simulations/experiments/fedpower/fedpower_stragglers.toml`` (or any comparison of
FedPower runs). Per run, over seeds, it reports

* ``kept``: mean number of distinct clients whose replies were aggregated per
  round (``distinct_participants``), ``K``;
* ``round time``: mean virtual round time (``round_time``);
* ``floor``: median over seeds of the median subspace distance over the last
  ``--last`` rounds;
* ``floor / s(K)`` with ``s(K) = sqrt((m - K) / (K (m - 1)))``, the standard
  deviation factor of the mean of ``K`` of ``m`` terms drawn without
  replacement. Theorem 9's sampling term ``I_3`` grows like
  ``sqrt(log(dT)/K)`` (it is stated for draws with replacement, where the
  factor is ``1/sqrt(K)``); when ``I_3`` dominates the floor, this ratio is
  about constant across runs.

Writes ``DIR/stragglers.md`` (the table) and ``DIR/floor_vs_kept.png`` (floor
against ``K`` and against the round time, with ``c s(K)`` for the median
ratio ``c`` of the first-K runs).
"""

from __future__ import annotations

import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from fl_strategies.files.plain_files import write_file  # noqa: E402
from simulations.compare.report import save_figure  # noqa: E402
from simulations.engines import ArgumentError, ArgumentParser, read_results  # noqa: E402

__all__ = ["sampling_factor", "floor_table", "main"]


def sampling_factor(K: np.ndarray | float, m: int) -> np.ndarray:
    """``s(K) = sqrt((m - K) / (K (m - 1)))``: the std factor of a without-replacement mean of K of m."""
    K = np.asarray(K, dtype=float)
    return np.sqrt(np.clip(m - K, 0.0, None) / (K * max(m - 1, 1)))


def floor_table(df: pd.DataFrame, m: int, last: int = 10) -> pd.DataFrame:
    """One row per run (in order of appearance): kept, round time, floor, floor / s(K).

    Parameters
    ----------
    df : DataFrame
        ``results.csv`` of a comparison (columns ``run``, ``seed``, ``round``,
        ``subspace_distance``, ``distinct_participants``, ``round_time``).
    m : int
        ``num-clients``.
    last : int
        Rounds over which each seed's floor is the median.
    """
    rows = []
    for run, d in df[df["round"] > 0].groupby("run", sort=False):
        floors = [g.sort_values("round")["subspace_distance"].iloc[-last:].median() for _, g in d.groupby("seed")]
        K = d["distinct_participants"].mean()
        floor = float(np.median(floors))
        s = float(sampling_factor(K, m))
        rows.append({"run": run, "kept": K, "round_time": d["round_time"].mean(), "floor": floor,
                     "ratio": floor / s if s > 0 else np.nan})
    return pd.DataFrame(rows)


def _markdown(table: pd.DataFrame, last: int) -> str:
    lines = [f"| run | clients kept per round | mean round time | floor (median of the last {last} rounds) | "
             "floor / s(K) |", "| --- | --- | --- | --- | --- |"]
    for r in table.itertuples():
        ratio = "—" if not np.isfinite(r.ratio) else f"{r.ratio:.3f}"
        lines.append(f"| {r.run} | {r.kept:.2f} | {r.round_time:.2f} | {r.floor:.2e} | {ratio} |")
    return "\n".join(lines) + "\n"


def _plot(table: pd.DataFrame, m: int, path: Path) -> None:
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    partial = table[table["kept"] < m - 1e-9]
    first_k = partial[partial["run"].str.startswith("first K")]
    c = float(np.median((first_k if len(first_k) else partial)["ratio"]))
    K = np.linspace(max(1.0, partial["kept"].min() * 0.9), m - 0.5, 200)
    axes[0].plot(K, c * sampling_factor(K, m), "k--", lw=1, label=f"{c:.3f} s(K)")
    for r in partial.itertuples():
        axes[0].loglog(r.kept, r.floor, "o")
        axes[0].annotate(r.run, (r.kept, r.floor), fontsize=7, xytext=(3, 3), textcoords="offset points")
        axes[1].semilogy(r.round_time, r.floor, "o")
        axes[1].annotate(r.run, (r.round_time, r.floor), fontsize=7, xytext=(3, 3), textcoords="offset points")
    axes[0].set(xlabel="distinct clients kept per round, K", ylabel="floor of the subspace distance",
                title="floor against K (sampling term)")
    axes[0].legend()
    axes[1].set(xlabel="mean virtual round time", ylabel="floor of the subspace distance",
                title="accuracy against round time")
    for ax in axes:
        ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    save_figure(fig, path, dpi=120)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    ap = ArgumentParser(prog="python -m simulations.experiments.fedpower.stragglers_report",
                        description=__doc__.split("\n\n")[0])
    ap.add_argument("dir", type=Path, help="output directory of simulations.compare")
    ap.add_argument("--last", type=int, default=10, help="rounds over which the floor is the median")
    ap.add_argument("--num-clients", type=int, default=0, help="m (default: the largest number of clients kept)")
    args = ap.parse_args(argv)
    try:
        if args.last < 1:
            raise ArgumentError(f"--last {args.last}: must be at least 1 round")
        if args.num_clients < 0:
            raise ArgumentError(f"--num-clients {args.num_clients}: must be >= 0 (0: from the results)")
        df = read_results(args.dir, ("run", "round", "subspace_distance", "distinct_participants", "round_time"))
    except ArgumentError as ex:
        print(f"{ap.prog}: error: {ex}", file=sys.stderr)
        return 2
    m = args.num_clients or int(df["distinct_participants"].max())
    table = floor_table(df, m, args.last)
    text = _markdown(table, args.last)
    write_file(args.dir / "stragglers.md", text)
    _plot(table, m, args.dir / "floor_vs_kept.png")
    print(text, end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
