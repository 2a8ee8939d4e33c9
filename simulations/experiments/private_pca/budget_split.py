"""How to split the privacy budget of private covariance between the Gram matrix and the row sum (centring).

``python -m simulations.experiments.private_pca.budget_split`` prints, for a few weights ``a`` of the row sum in
the one release (:data:`fl_strategies.privacy.analyze_gauss.MEAN_WEIGHT`: its noise is ``1 / a`` times the Gram
diagonal's), the median over 20 seeds of sin theta between the centred PCA released by the central Analyze Gauss
mechanism and the exact centred PCA (4 owners, 8,000 unit rows, epsilon = 1, delta = 1e-6), for d = 40 and
d = 200; then the same for centred dp-power (L = 5 products, iteration-rank 6), whose mean is one release
composed with the products.
``--fedpower`` instead runs centred fedpower with ``epsilon`` on the in-process engine (4 owners of 10,000 unit
rows, d = 40, T = 3, iteration-rank 3, PLD; median over 10 seeds of sin theta from the exact centred PCA), the
mean's share set through :data:`fl_strategies.privacy.fedpower_dp.MEAN_SHARE` for each run.
"""

from __future__ import annotations

import sys
import tempfile
from unittest import mock

import numpy as np

from fl_strategies.kernels.linalg import subspace_distance

from .central import central_analyze_gauss, central_centred_dp_power
from .owners import centred_pca, owner_rows, write_folder

SHARES = (0.05, 0.1, 0.2, 0.3, 0.5)
WEIGHTS = (0.1, 0.2, 0.3, 0.5, 1.0)


def main() -> None:
    k = 3
    print("| d | " + " | ".join(f"row-sum weight {a}" for a in WEIGHTS) + " |")
    print("|---|" + "---|" * len(WEIGHTS))
    for d in (40, 200):
        errors = {a: [] for a in WEIGHTS}
        for seed in range(20):
            blocks = owner_rows(dimension=d, rank=k, seed=seed)
            _, U = centred_pca(blocks, k)
            X = np.vstack(blocks)
            for a in WEIGHTS:
                V = central_analyze_gauss(X, k, 1.0, 1e-6, np.random.default_rng([seed, 7]), mean_weight=a)
                errors[a].append(subspace_distance(V, U))
        print(f"| {d} | " + " | ".join(f"{np.median(errors[a]):.4f}" for a in WEIGHTS) + " |")
    print("\ncentred dp-power, mean share:")
    print("| d | " + " | ".join(f"mean share {f}" for f in SHARES) + " |")
    print("|---|" + "---|" * len(SHARES))
    for d in (40, 200):
        errors = {f: [] for f in SHARES}
        for seed in range(20):
            blocks = owner_rows(dimension=d, rank=k, seed=seed)
            _, U = centred_pca(blocks, k)
            X = np.vstack(blocks)
            for f in SHARES:
                V = central_centred_dp_power(X, k, 6, 5, 1.0, 1e-6, np.random.default_rng([seed, 8]), f)
                errors[f].append(subspace_distance(V, U))
        print(f"| {d} | " + " | ".join(f"{np.median(errors[f]):.4f}" for f in SHARES) + " |")


def fedpower_mean_share(seeds: int = 10) -> None:
    """The table of centred fedpower's mean share (module docstring), from real runs of the app."""
    from fl_strategies.privacy import fedpower_dp
    from simulations.engines import fused_run_config
    from simulations.engines.local import run_local

    k = 3
    shares = (0.005, 0.01, 0.02, 0.05, 0.1, 0.2)
    errors = {f: [] for f in shares}
    for seed in range(seeds):
        blocks = owner_rows(num_rows=40000, dimension=40, rank=k, seed=seed)
        _, U = centred_pca(blocks, k)
        with tempfile.TemporaryDirectory() as tmp:
            folder = write_folder(blocks, tmp)
            for f in shares:
                cfg = fused_run_config({"strategy": "fedpower", "dataset": str(folder), "num-clients": 4, "rank": k,
                                        "iteration-rank": k, "local-steps": 1, "num-server-rounds": 3,
                                        "total-iterations": 0, "row-normalize": True, "center": True,
                                        "epsilon": 1.0, "delta": 1e-6, "dp-calibration": "pld", "seed": seed})
                with mock.patch.object(fedpower_dp, "MEAN_SHARE", f):
                    run = run_local(cfg)
                errors[f].append(subspace_distance(run.model["components"].T, U))
    print("| d | " + " | ".join(f"mean share {f}" for f in shares) + " |")
    print("|---|" + "---|" * len(shares))
    print("| 40 | " + " | ".join(f"{np.median(errors[f]):.4f}" for f in shares) + " |")


if __name__ == "__main__":
    fedpower_mean_share() if "--fedpower" in sys.argv[1:] else main()
