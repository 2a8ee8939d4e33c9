"""Which private PCA to use: private ``covariance``, centred ``dp-power`` and ``fedpower`` with noise, measured.

``python -m simulations.experiments.private_pca.compare_methods [--dims 20 100 500 2000] [--seeds 3] [--out FILE]``
runs each strategy in the in-process engine on 4 owners whose rows have their own means (8,000 unit rows,
:mod:`.owners`), PLD-calibrated at epsilon in {0.3, 1, 3} and delta = 1e-6, and prints the median over the seeds
of sin theta between the ``rank = 3`` components each run gives and the exact centred PCA, next to the central
Analyze Gauss mechanism on the same rows (:mod:`.central`), with the kilobytes each client uploads. Every method
centres privately (``center = true``): ``fedpower``'s mean is its noisy row sums at discovery (1 % of its
budget; those d float64 are counted with its uploads). dp-power: L = 5 products, ``iteration-rank = 6``;
fedpower: T = 3 rounds of one local step, ``iteration-rank = 3``, the settings of ``budget_split --fedpower``
(each of its noisy steps spends budget and adds noise in proportion to ``sqrt(iteration-rank)``, so few short
steps). The table is printed and written, row by row as each is measured, to ``--out`` (``compare_methods.md``
next to this file by default).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np

from fl_strategies.files.plain_files import write_file
from fl_strategies.kernels.linalg import subspace_distance
from simulations.engines import fused_run_config
from simulations.engines.local import run_local

from .central import central_analyze_gauss
from .owners import centred_pca, owner_rows, write_folder

K = 3
EPSILONS = (0.3, 1.0, 3.0)
COMMON = {"num-clients": 4, "rank": K, "row-normalize": True, "delta": 1e-6, "dp-calibration": "pld"}
METHODS = {
    "covariance": {"strategy": "covariance", "center": True},
    "dp-power": {"strategy": "dp-power", "center": True, "iteration-rank": 6, "num-server-rounds": 5,
                 "dp-sensitivity": "one"},
    "fedpower": {"strategy": "fedpower", "center": True, "iteration-rank": K, "num-server-rounds": 3,
                 "local-steps": 1},
}


def run(method: str, folder: str, epsilon: float, seed: int) -> tuple[np.ndarray, float]:
    """``(components (d, K), kilobytes uploaded per client)`` of one private run."""
    cfg = fused_run_config({**COMMON, **METHODS[method], "dataset": folder, "epsilon": epsilon, "seed": seed})
    strategy = run_local(cfg)
    if strategy.failure:
        raise RuntimeError(f"{method}: {strategy.failure}")
    up = sum(row["bytes_up"] for row in strategy.records) / cfg["num-clients"] / 1e3
    if method == "fedpower":  # its noisy row sum goes up at discovery, outside the rounds' records
        up += 8 * strategy.d / 1e3
    if strategy.model is not None:
        return strategy.model["components"].T, up
    return strategy.iterates[-1][:, :K], up


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dims", type=int, nargs="+", default=[20, 100, 500, 2000])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("compare_methods.md"))
    args = parser.parse_args(argv)
    written: list[str] = []

    def emit(line: str) -> None:
        print(line, flush=True)
        written.append(line + "\n")
        write_file(args.out, "".join(written))

    emit(f"Median sin theta over {args.seeds} seeds from the exact centred PCA (compare_methods.py, "
         f"dims {' '.join(map(str, args.dims))}).\n")
    emit("| d | epsilon | covariance | dp-power (centred) | fedpower (centred) | central Analyze Gauss | "
         "KB up per client: covariance / dp-power / fedpower |")
    emit("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for d in args.dims:
            data = []
            for seed in range(args.seeds):
                blocks = owner_rows(dimension=d, rank=K, seed=seed)
                data.append((blocks, str(write_folder(blocks, f"{tmp}/d{d}s{seed}")), centred_pca(blocks, K)[1]))
            for eps in EPSILONS:
                errors = {name: [] for name in (*METHODS, "central")}
                sent = {name: 0.0 for name in METHODS}
                for seed, (blocks, folder, U) in enumerate(data):
                    for name in METHODS:
                        V, sent[name] = run(name, folder, eps, seed)
                        errors[name].append(subspace_distance(V, U))
                    V = central_analyze_gauss(np.vstack(blocks), K, eps, 1e-6, np.random.default_rng([seed, 9]))
                    errors["central"].append(subspace_distance(V, U))
                med = {name: np.median(v) for name, v in errors.items()}
                emit(f"| {d} | {eps:g} | {med['covariance']:.3f} | {med['dp-power']:.3f} | {med['fedpower']:.3f} | "
                     f"{med['central']:.3f} | {sent['covariance']:.0f} / {sent['dp-power']:.0f} / "
                     f"{sent['fedpower']:.0f} |")


if __name__ == "__main__":
    main()
