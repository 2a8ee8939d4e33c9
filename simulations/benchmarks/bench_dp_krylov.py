"""Private PCA against the central limit: ``dp-krylov``, ``dp-power`` and ``covariance`` at several epsilon and d.

``python -m simulations.benchmarks.bench_dp_krylov [--dims 40 200] [--epsilons 0.5 1 4] [--seeds 5] [--out DIR]``
runs each strategy in the in-process engine on 4 owners whose rows have their own means (8,000 unit rows,
:mod:`simulations.experiments.private_pca.owners`), centred privately (``center = true``), delta = 1e-6, and
writes ``dp_krylov.md`` (and ``.csv``) to ``DIR`` (default ``simulations/benchmarks/results/bench_dp_krylov``):
per ``(d, epsilon)`` the median over the seeds of sin theta between each method's ``rank = 3`` components and
the exact centred PCA, its ratio to the central Analyze Gauss mechanism on the same rows (the limit: one trusted
curator; median of 5 noise draws per seed, :mod:`simulations.experiments.private_pca.central`), the median wall
time of a run and the kilobytes each client uploads. The clients' noise shares are summed in the clear
(``dp-channel = "plaintext"``; ``covariance`` refuses that and runs its one SecAgg+ round): the same sum and
the same central noise as
through SecAgg+, without its key exchange (SecAgg+'s cost is measured in ``bench_secure_power``).

Settings. ``dp-krylov``: its defaults (``iteration-rank = 0``: blocks of 10 columns; ``num-server-rounds = 10``
products, at most ``d // 10``; ``dp-calibration = "paper"``, the exact curve of its one Gaussian); ``dp-power``:
the private PCA guide's (L = 5 products, ``iteration-rank = 6``, ``dp-sensitivity = "one"``, PLD);
``covariance``: PLD.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from fl_strategies.files.plain_files import write_file
from fl_strategies.kernels.linalg import subspace_distance
from simulations.engines import fused_run_config
from simulations.engines.local import run_local
from simulations.experiments.private_pca.central import central_analyze_gauss
from simulations.experiments.private_pca.owners import centred_pca, owner_rows, write_folder

K = 3
DELTA = 1e-6
COMMON = {"num-clients": 4, "rank": K, "row-normalize": True, "center": True, "delta": DELTA}
METHODS = {
    "dp-krylov": {"strategy": "dp-krylov", "iteration-rank": 0, "num-server-rounds": 10, "dp-channel": "plaintext"},
    "dp-power": {"strategy": "dp-power", "iteration-rank": 6, "num-server-rounds": 5, "dp-sensitivity": "one",
                 "dp-calibration": "pld", "dp-channel": "plaintext"},
    "covariance": {"strategy": "covariance", "dp-calibration": "pld"},
}
DEFAULT_OUT = Path(__file__).with_name("results") / "bench_dp_krylov"


def run(method: str, folder: str, epsilon: float, seed: int) -> tuple[np.ndarray, float, float]:
    """``(components (d, K), seconds, kilobytes uploaded per client)`` of one private run."""
    cfg = fused_run_config({**COMMON, **METHODS[method], "dataset": folder, "epsilon": epsilon, "seed": seed})
    start = time.perf_counter()
    strategy = run_local(cfg)
    seconds = time.perf_counter() - start
    if strategy.failure:
        raise RuntimeError(f"{method}: {strategy.failure}")
    up = sum(row["bytes_up"] for row in strategy.records) / cfg["num-clients"] / 1e3
    return strategy.model["components"].T, seconds, up


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dims", type=int, nargs="+", default=[40, 200])
    parser.add_argument("--epsilons", type=float, nargs="+", default=[0.5, 1.0, 4.0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    command = ("python -m simulations.benchmarks.bench_dp_krylov --dims " + " ".join(map(str, args.dims))
               + " --epsilons " + " ".join(f"{e:g}" for e in args.epsilons) + f" --seeds {args.seeds}")
    lines = [f"Produced by `{command}`: 4 owners with their own means, 8,000 unit rows, rank 3, delta = {DELTA:g}, "
             f"centred privately; median over {args.seeds} seeds of sin theta from the exact centred PCA, its "
             "ratio to the central Analyze Gauss mechanism (x), the median wall seconds of a run (in-process, "
             "noise shares summed in the clear) and the KB each client uploads.\n",
             "| d | epsilon | central Analyze Gauss | dp-krylov | x | s | KB | dp-power | x | s | KB | "
             "covariance | x | s | KB |", "|---" * 15 + "|"]
    csv = ["d,epsilon,method,seed,sin_theta,seconds,kb_up"]

    def emit() -> None:
        write_file(args.out / "dp_krylov.md", "\n".join(lines) + "\n")
        write_file(args.out / "dp_krylov.csv", "\n".join(csv) + "\n")

    with tempfile.TemporaryDirectory() as tmp:
        for d in args.dims:
            data = []
            for seed in range(args.seeds):
                blocks = owner_rows(dimension=d, rank=K, seed=seed)
                data.append((blocks, str(write_folder(blocks, f"{tmp}/d{d}s{seed}")), centred_pca(blocks, K)[1]))
            for eps in args.epsilons:
                err = {name: [] for name in (*METHODS, "central")}
                secs = {name: [] for name in METHODS}
                kb = {name: 0.0 for name in METHODS}
                for seed, (blocks, folder, U) in enumerate(data):
                    X = np.vstack(blocks)
                    err["central"].append(np.median([subspace_distance(central_analyze_gauss(
                        X, K, eps, DELTA, np.random.default_rng([seed, 9, r])), U) for r in range(5)]))
                    for name in METHODS:
                        V, seconds, kb[name] = run(name, folder, eps, seed)
                        err[name].append(subspace_distance(V, U))
                        secs[name].append(seconds)
                        csv.append(f"{d},{eps:g},{name},{seed},{err[name][-1]:.6f},{seconds:.3f},{kb[name]:.1f}")
                c = float(np.median(err["central"]))
                cells = [f"{d}", f"{eps:g}", f"{c:.4f}"]
                for name in METHODS:
                    m = float(np.median(err[name]))
                    cells += [f"{m:.4f}", f"{m / c:.2f}", f"{np.median(secs[name]):.1f}", f"{kb[name]:.0f}"]
                lines.append("| " + " | ".join(cells) + " |")
                print(lines[-1], flush=True)
                emit()


if __name__ == "__main__":
    main()
