"""How to split the privacy budget of private covariance between the Gram matrix and the row sum (centring).

``python -m simulations.experiments.private_pca.budget_split`` prints, for a few shares of the row sum, the
median over 20 seeds of sin theta between the centred PCA released by the central Analyze Gauss mechanism and the
exact centred PCA (4 owners, 8,000 unit rows, epsilon = 1, delta = 1e-6), for d = 40 and d = 200; then the same
for centred dp-power (L = 5 products, iteration-rank 6), whose mean is one release composed with the products.
"""

from __future__ import annotations

import numpy as np

from fl_strategies.linalg import subspace_distance

from .central import central_analyze_gauss, central_centred_dp_power
from .owners import centred_pca, owner_rows

SHARES = (0.05, 0.1, 0.2, 0.3, 0.5)


def main() -> None:
    k = 3
    print("| d | " + " | ".join(f"row-sum share {f}" for f in SHARES) + " |")
    print("|---|" + "---|" * len(SHARES))
    for d in (40, 200):
        errors = {f: [] for f in SHARES}
        for seed in range(20):
            blocks = owner_rows(dimension=d, rank=k, seed=seed)
            _, U = centred_pca(blocks, k)
            X = np.vstack(blocks)
            for f in SHARES:
                V = central_analyze_gauss(X, k, 1.0, 1e-6, np.random.default_rng([seed, 7]), mean_share=f)
                errors[f].append(subspace_distance(V, U))
        print(f"| {d} | " + " | ".join(f"{np.median(errors[f]):.4f}" for f in SHARES) + " |")
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


if __name__ == "__main__":
    main()
