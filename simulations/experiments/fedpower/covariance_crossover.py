"""When do the iterative strategies pay off against the exact one-round ``covariance`` strategy?

For each dimension ``d`` the same Model I data (``fedpower-model1``, ``rank`` 4, ``10 d`` rows, 10 clients) is
solved by ``covariance`` (one round, ``d^2`` numbers up per client) and by ``power`` (``d r`` numbers up per
client and round) run until its subspace distance to the exact eigenvectors is at most ``--tol``; the table gives
the rounds and the bytes each sent up (as the results rows count them)::

    python -m simulations.experiments.fedpower.covariance_crossover --out simulations/experiments/fedpower/results/covariance_crossover

writes ``crossover.csv`` and ``crossover.md``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from fl_strategies.files.plain_files import plain_frame, write_file

DEFAULT_DIMENSIONS = (16, 64, 256, 1000, 2000)


def run(dimensions=DEFAULT_DIMENSIONS, tol: float = 1e-6, max_rounds: int = 100) -> pd.DataFrame:
    """One row per dimension: rounds and bytes up of ``covariance`` and of ``power`` down to ``tol``."""
    from simulations.engines import fused_run_config
    from simulations.engines.local import run_local

    rows = []
    for d in dimensions:
        base = {"dataset": "fedpower-model1", "dimension": d, "num-samples": 10 * d, "num-clients": 10, "rank": 4,
                "iteration-rank": 4, "seed": 0, "data-seed": 0, "row-normalize": True}
        cov = run_local(fused_run_config({**base, "strategy": "covariance"}))
        power = run_local(fused_run_config({**base, "strategy": "power", "num-server-rounds": max_rounds}))
        reached = next((r for r in power.records if r["subspace_distance"] <= tol), None)
        rounds = reached["round"] if reached else None
        power_bytes = sum(r["bytes_up"] for r in power.records if rounds is not None and r["round"] <= rounds)
        rows.append({"d": d, "covariance_rounds": 1, "covariance_bytes_up": cov.records[-1]["bytes_up"],
                     "covariance_distance": cov.records[-1]["subspace_distance"], "power_rounds": rounds,
                     "power_bytes_up": power_bytes if rounds is not None else None,
                     "bytes_ratio": (cov.records[-1]["bytes_up"] / power_bytes) if rounds else None})
        print(rows[-1], file=sys.stderr)
    return pd.DataFrame(rows)


def markdown(table: pd.DataFrame) -> str:
    """The table as Markdown (numbers to 3 significant digits, an empty cell for a target not reached)."""
    def cell(v):
        return "" if v is None or v != v else (f"{v:.3g}" if isinstance(v, float) else str(v))
    lines = ["| " + " | ".join(table.columns) + " |", "|" + "---|" * len(table.columns)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in table.itertuples(index=False)]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Command line: write ``crossover.csv`` and ``crossover.md`` to ``--out``."""
    parser = argparse.ArgumentParser(prog="python -m simulations.experiments.fedpower.covariance_crossover")
    parser.add_argument("--dimensions", type=int, nargs="+", default=list(DEFAULT_DIMENSIONS))
    parser.add_argument("--tol", type=float, default=1e-6, help="subspace distance power must reach")
    parser.add_argument("--out", type=Path, default=Path("simulations/experiments/fedpower/results/covariance_crossover"))
    args = parser.parse_args(argv)
    if any(d < 5 for d in args.dimensions) or not 0 < args.tol < 1:
        print("error: --dimensions must be >= 5 and --tol in (0, 1)", file=sys.stderr)
        return 2
    import logging

    import flwr.common  # noqa: F401  (Flower sets its logger's level on import)

    logging.getLogger("flwr").setLevel(logging.WARNING)
    table = run(args.dimensions, args.tol)
    args.out.mkdir(parents=True, exist_ok=True)
    write_file(args.out / "crossover.csv", plain_frame(table).to_csv(index=False))
    text = markdown(table)
    write_file(args.out / "crossover.md", text)
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
