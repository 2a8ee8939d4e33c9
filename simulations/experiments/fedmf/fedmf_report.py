"""Table 2 and the convergence figure of the low-rank MF paper from a comparison's ``results.csv``.

Usage::

    python -m simulations.experiments.fedmf.fedmf_report DIR [--target -5.5]

``DIR/results.csv`` is written by :mod:`simulations.compare` on a config of
``fedmf`` / ``mf-altgd`` / ``mf-simgd`` runs. Writes

* ``DIR/table2.md``: per run, over seeds (median [min, max]): the
  communications when ``log10(F - eps_min) <= target`` is first reached (for
  ``fedmf`` the ``alpha + 1`` communications plus the local iterations it
  took; ``—`` if never), the final ``log10(F - eps_min)``, the exact solution's
  ``log10(F(U_hat, V) - eps_min)`` and ``kappa(V)``;
* ``DIR/convergence.png``: ``log10 F`` against the local iteration (fedmf) or
  the communication (baselines), median over seeds, one panel per ``panel``,
  with ``log10 eps_min`` (green) and each fedmf run's exact solution (dotted).
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

__all__ = ["table2", "plot_convergence", "main"]


def _first_reach(df: pd.DataFrame, target: float) -> tuple[float, float]:
    """(communications, iteration) of the first row with ``log10_excess_loss <= target``, NaN if never."""
    hit = df[pd.to_numeric(df["log10_excess_loss"], errors="coerce") <= target]
    if hit.empty:
        return np.nan, np.nan
    row = hit.sort_values(["round", "iteration"]).iloc[0]
    return float(row["communications"]), float(row["iteration"])


def _fmt(values: list[float], digits: str = ".3g") -> str:
    v = np.array([x for x in values if np.isfinite(x)])
    if v.size == 0:
        return "—"
    med = f"{np.median(v):{digits}}"
    return med if v.min() == v.max() else f"{med} [{v.min():{digits}}, {v.max():{digits}}]"


def table2(results: pd.DataFrame, target: float) -> pd.DataFrame:
    """One row per run: communications and iterations to the target, final and exact excess, kappa(V)."""
    out = []
    for run, df_run in results.groupby("run", sort=False):
        comms, iters, final, exact, kappa, reached = [], [], [], [], [], 0
        for _, df in df_run.groupby("seed"):
            df = df[df["phase"].isin(["solve", "iterate"])].sort_values(["round", "iteration"])
            c, it = _first_reach(df, target)
            reached += np.isfinite(c)
            comms.append(c)
            iters.append(it)
            last = df.iloc[-1]
            final.append(float(last["log10_excess_loss"]) if pd.notna(last["log10_excess_loss"]) else np.nan)
            if pd.notna(last["exact_loss"]):
                exact.append(float(np.log10(max(last["exact_loss"] - last["eps_min"], 1e-300))))
            kappa.append(float(last["kappa_v"]))
        strategy = df_run["strategy"].iloc[0]
        predicted = pd.to_numeric(df_run["predicted_iterations"], errors="coerce").dropna()
        out.append({"run": run, "strategy": strategy, "seeds": df_run["seed"].nunique(), "reached": reached,
                    "communications": _fmt(comms, ".0f"),
                    "local iterations": _fmt(iters, ".0f") if strategy == "fedmf" else "",
                    "final log10(F - eps_min)": _fmt(final, ".2f"),
                    "exact log10(F(U_hat) - eps_min)": _fmt(exact, ".2f") if exact else "",
                    "kappa(V)": _fmt(kappa, ".3g") if strategy == "fedmf" else "",
                    "predicted (Ye & Du)": f"{predicted.iloc[0]:.2g}" if len(predicted) else ""})
    return pd.DataFrame(out)


def plot_convergence(results: pd.DataFrame, path: Path, title: str = "") -> None:
    """``log10 F`` against iterations, median over seeds; panels by ``panel``."""
    panels = list(dict.fromkeys(results["panel"].fillna("").astype(str)))
    fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 4.5), squeeze=False)
    for ax, panel in zip(axes[0], panels):
        df_p = results[results["panel"].fillna("").astype(str) == panel]
        for i, (run, df_run) in enumerate(df_p.groupby("run", sort=False)):
            df = df_run[df_run["phase"].isin(["solve", "iterate"])]
            curve = df.groupby("iteration")["loss"].median()
            line, = ax.plot(curve.index, np.log10(curve.values), label=run, color=f"C{i}",
                            ls="--" if "GD" in run and "Nesterov" not in run else "-")
            if df["exact_loss"].notna().any():
                ax.axhline(np.log10(df["exact_loss"].median()), color=line.get_color(), ls=":", lw=1)
        eps = results["eps_min"].dropna()
        if len(eps):
            ax.axhline(np.log10(eps.median()), color="green", lw=1.5, label="eps_min (SVD)")
        ax.set_xlabel("local iteration (fedmf) / communication (baselines)")
        ax.set_ylabel("log10 F")
        ax.set_title(panel)
        ax.legend(fontsize=7)
    fig.suptitle(title)
    fig.tight_layout()
    save_figure(fig, path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    parser = ArgumentParser(prog="python -m simulations.experiments.fedmf.fedmf_report",
                            description=__doc__.split("\n")[0])
    parser.add_argument("dir", type=Path)
    parser.add_argument("--target", type=float, default=-5.5, help="log10(F - eps_min) to reach")
    parser.add_argument("--title", default="")
    args = parser.parse_args(argv)
    try:
        if not np.isfinite(args.target):
            raise ArgumentError(f"--target {args.target}: must be a finite number (a log10 of the excess loss)")
        results = read_results(args.dir, ("run", "strategy", "seed", "round", "phase", "iteration", "communications",
                                          "loss", "log10_excess_loss", "exact_loss", "eps_min", "kappa_v",
                                          "predicted_iterations", "panel"))
    except ArgumentError as ex:
        print(f"{parser.prog}: error: {ex}", file=sys.stderr)
        return 2
    table = table2(results, args.target)
    header = f"# {args.title or args.dir.name}\n\nTarget: log10(F - eps_min) <= {args.target:g}; median [min, max] over seeds.\n\n"
    cols = list(table.columns)
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(str(v) for v in row) + " |" for row in table.itertuples(index=False)]
    write_file(args.dir / "table2.md", header + "\n".join(lines) + "\n")
    plot_convergence(results, args.dir / "convergence.png", args.title)
    print(header + "\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
