"""How ``dp-krylov``'s products, block width and accounting were chosen, in numpy (central noise, no engine).

``python -m simulations.experiments.private_pca.dp_krylov_design [--dims 40 200] [--seeds 5]`` runs the algorithm
of :mod:`fl_strategies.privacy.dp_krylov_noise` on 4 owners with their own means (8,000 unit rows, rank 3,
delta = 1e-6) at epsilon 1 and 4 for ``T`` products of ``p`` columns, with two accountings: ``one Gaussian`` (the
whole run at the release sensitivity, the strategy's) and ``split`` (each product a worst-case Gaussian of
sensitivity sqrt(2), the first with the row sum at 1.48, composed: the budget split evenly over the ``T``
products), and prints the median over the seeds (3 noise draws each) of sin theta from the exact centred PCA with
its ratio to the central Analyze Gauss mechanism's.
"""

from __future__ import annotations

import argparse
import math

import numpy as np

from fl_strategies.kernels.linalg import subspace_distance
from fl_strategies.privacy import dp_krylov_noise as dk

from .central import central_analyze_gauss, gaussian_multiplier
from .owners import centred_pca, owner_rows

K = 3
DELTA = 1e-6
GRID = ((2, 10), (3, 6), (3, 10), (4, 10), (5, 10), (8, 10), (5, 16))


def private_krylov(X: np.ndarray, epsilon: float, rng: np.random.Generator, T: int, p: int,
                   split: bool) -> np.ndarray:
    """Top-``K`` components (d, K) of centred dp-krylov run centrally with ``T`` products of ``p`` columns."""
    n, d = X.shape
    t = gaussian_multiplier(epsilon, DELTA)  # one Gaussian at epsilon
    D = dk.release_sensitivity(True)
    first = t * math.sqrt(T) * D if split else t * D  # split: each of T releases gets 1/T of 1/sigma^2
    later = t * math.sqrt(T) * dk.PRODUCT_SENSITIVITY if split else t * D
    Q = dk.initial_block(d, p, rng)
    mu = dk.project_mean((X.sum(axis=0) + rng.standard_normal(d) * first / dk.MEAN_WEIGHT) / n)
    blocks, products = [], []
    for i in range(T):
        Y = X.T @ (X @ Q) + rng.standard_normal(Q.shape) * (first if i == 0 else later)
        Y = dk.centre_product(Y, mu, Q, n)
        blocks.append(Q)
        products.append(Y)
        if i < T - 1:
            Q = dk.next_block(np.hstack(blocks), Y, p)
    return dk.rayleigh_ritz(np.hstack(blocks), np.hstack(products), K)[0]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dims", type=int, nargs="+", default=[40, 200])
    parser.add_argument("--seeds", type=int, default=5)
    args = parser.parse_args(argv)
    print("| d | epsilon | T | p | central | one Gaussian | x | split | x |")
    print("|---|---|---|---|---|---|---|---|---|")
    for d in args.dims:
        data = []
        for seed in range(args.seeds):
            blocks = owner_rows(dimension=d, rank=K, seed=seed)
            data.append((np.vstack(blocks), centred_pca(blocks, K)[1]))
        for eps in (1.0, 4.0):
            central = np.median([np.median([subspace_distance(central_analyze_gauss(
                X, K, eps, DELTA, np.random.default_rng([s, 9, r])), U) for r in range(3)])
                for s, (X, U) in enumerate(data)])
            for T, p in GRID:
                if T * p > d:
                    continue
                med = {split: np.median([np.median([subspace_distance(private_krylov(
                    X, eps, np.random.default_rng([s, 7, r]), T, p, split), U) for r in range(3)])
                    for s, (X, U) in enumerate(data)]) for split in (False, True)}
                print(f"| {d} | {eps:g} | {T} | {p} | {central:.4f} | {med[False]:.4f} | {med[False] / central:.2f} | "
                      f"{med[True]:.4f} | {med[True] / central:.2f} |", flush=True)


if __name__ == "__main__":
    main()
