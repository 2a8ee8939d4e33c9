"""Wall time of ``power`` with and without ``secure-aggregation`` (timings are machine-dependent).

For each set-up (``m`` clients of the Model I data, ``d`` columns, ``r = 5``, ``rounds`` rounds; the secure run also
makes the discovery sum and the summary SecAgg+ exchanges) and each engine

* ``local``: the in-process engine (:func:`simulations.engines.local.run_local`), the best of ``--repeat`` runs;
* ``ray``: Flower's Ray simulation engine (:func:`simulations.engines.ray.run_ray`), one run in a fresh process
  each (Ray's start-up included, as a user sees it);

it prints the plain and the secure wall time, their ratio, and the sin theta between the two runs' components.
Usage::

    python -m simulations.benchmarks.bench_secure_power [--engines local ray] [--clients 4 8] [--dim 60 200]
        [--rounds 20] [--repeat 2]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

__all__ = ["main"]


def _overrides(m: int, dim: int, rounds: int, secure: bool) -> dict:
    return {"strategy": "power", "num-clients": m, "num-samples": 1000 * m, "dimension": dim, "rank": 3,
            "iteration-rank": 5, "num-server-rounds": rounds, "row-normalize": True, "center": True,
            "secure-aggregation": "true" if secure else "false"}


def _local(overrides: dict, repeat: int) -> tuple[float, object]:
    from simulations.engines import fused_run_config
    from simulations.engines.local import run_local

    best, strategy = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        strategy = run_local(fused_run_config(overrides))
        best = min(best, time.perf_counter() - start)
    return best, strategy.model["components"]


def _ray(overrides: dict) -> tuple[float, object]:
    import numpy as np

    with tempfile.TemporaryDirectory() as tmp:
        cfg = dict(overrides, **{"results-dir": tmp})
        code = ("import sys, json; from simulations.engines.ray import run_ray; "
                f"run_ray(json.loads(sys.argv[1]))")
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", code, __import__("json").dumps(cfg)], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wall = time.perf_counter() - start
        with np.load(Path(tmp) / "pca.npz") as model:
            return wall, model["components"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engines", nargs="+", default=["local"], choices=("local", "ray"))
    parser.add_argument("--clients", nargs="+", type=int, default=[4, 8])
    parser.add_argument("--dim", nargs="+", type=int, default=[60, 200])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args(argv)
    from fl_strategies.kernels.linalg import subspace_distance

    print("| engine | m | d | rounds | plain (s) | secure (s) | secure / plain | sin theta |")
    print("|---|---|---|---|---|---|---|---|")
    for engine in args.engines:
        for m in args.clients:
            for dim in args.dim:
                runs = {}
                for secure in (False, True):
                    overrides = _overrides(m, dim, args.rounds, secure)
                    runs[secure] = _local(overrides, args.repeat) if engine == "local" else _ray(overrides)
                (plain, P), (secure, S) = runs[False], runs[True]
                print(f"| {engine} | {m} | {dim} | {args.rounds} | {plain:.2f} | {secure:.2f} | "
                      f"{secure / plain:.2f} | {subspace_distance(S.T, P.T):.1e} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
