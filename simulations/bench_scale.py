"""Per-round cost of the engines against the arithmetic they carry (a first measurement for issue 7).

For FedPower with full participation and p = 1 on ``m`` clients, each holding
``rows`` rows of dimension ``d``, it prints the wall time per round of

* ``numpy``: the same arithmetic in a plain loop (``A_i Z`` per client, the
  weighted sum and the QR): the floor;
* ``local``: the in-process engine (Flower's Strategy / NumPyClient path through
  :class:`simulations.engines.local.LocalGrid`);
* ``ray`` (with ``--ray``): Flower's Ray simulation engine (includes Ray's
  start-up in the total, which is printed separately).

and the ratios to the floor. Usage::

    python -m simulations.bench_scale [--clients 10 100 1000] [--rows 100] [--dim 100] [--rounds 5] [--ray]
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time

import numpy as np

from fl_strategies.config import validate_run_config
from fl_strategies.linalg import orth

from .engines import fused_run_config
from .federated_data import local_covariance


def numpy_floor(cfg: dict, rounds: int) -> float:
    """Seconds per round of the bare arithmetic of one FedPower round (p = 1)."""
    m = cfg["num-clients"]
    covs = [local_covariance(cfg, pid) for pid in range(m)]
    Z = orth(np.random.default_rng(0).standard_normal((covs[0][0].shape[0], cfg["iteration-rank"])))
    start = time.perf_counter()
    for _ in range(rounds):
        total = sum(s * (A @ Z) for A, s in covs)
        Z = orth(total)
    return (time.perf_counter() - start) / rounds


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point: prints one table row per population size."""
    parser = argparse.ArgumentParser(prog="python -m simulations.bench_scale", description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, nargs="+", default=[10, 100, 1000])
    parser.add_argument("--rows", type=int, default=100, help="rows per client")
    parser.add_argument("--dim", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--ray", action="store_true", help="also time Flower's Ray engine (slow)")
    args = parser.parse_args(argv)
    import flwr.common  # noqa: F401

    logging.getLogger("flwr").setLevel(logging.WARNING)
    from .engines.local import run_local

    print("| clients | numpy floor (ms/round) | in-process (ms/round) | ratio | Ray (ms/round) | ratio | Ray total (s) |")
    print("|---|---|---|---|---|---|---|")
    for m in args.clients:
        over = {"num-clients": m, "num-samples": m * args.rows, "dimension": args.dim, "rank": 4,
                "iteration-rank": 5, "local-steps": 1, "schedule": "fixed", "num-server-rounds": args.rounds,
                "partitioner": "contiguous"}
        cfg = validate_run_config(fused_run_config(over))
        run_local(fused_run_config({**over, "num-server-rounds": 1}))  # warm the data caches
        floor = numpy_floor(cfg, args.rounds)
        strategy = run_local(fused_run_config(over))
        local = float(np.mean([r["wall_time"] for r in strategy.records[1:]]))
        ray_cells = "| — | — | — |"
        if args.ray:
            import pandas as pd

            from .engines.ray import run_ray

            with tempfile.TemporaryDirectory() as out:
                start = time.perf_counter()
                run_ray({**over, "results-dir": out})
                total = time.perf_counter() - start
                per_round = float(pd.read_csv(f"{out}/rounds.csv")["wall_time"].iloc[1:].mean())
            ray_cells = f"| {1e3 * per_round:.1f} | {per_round / floor:.0f} | {total:.1f} |"
        print(f"| {m} | {1e3 * floor:.2f} | {1e3 * local:.1f} | {local / floor:.0f} {ray_cells}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
