"""Spec checks 4 and 5 of the low-rank MF paper on controlled spectra (centralised kernels; fedmf's V is the same).

Usage::

    python -m simulations.experiments.fedmf.fedmf_checks [--seeds 40]

Prints, for ``alpha = 0, 1, 2`` and the median over seeds of one Gaussian
sketch each: the gap of the exact solution to the SVD optimum,
``F(U_hat, V) - eps_min``, on the step spectrum (n = 2000, d = 200, r = 5,
singular values 1 then xi, xi = 0.1 and 0.01), and ``kappa(V)`` with the gap on
the decaying spectrum ``sigma_k = 100 / k`` (r = 20).
"""

from __future__ import annotations

import argparse

import numpy as np

from fl_strategies.kernels.mf import MFReference, condition_number, exact_u, mf_loss, power_product, sketch_matrix
from simulations.data.datasets import load_dataset

__all__ = ["gaps", "figure2", "main"]


def gaps(name: str, r: int, noise: float, seeds: int, alphas=(0, 1, 2), n: int = 2000, d: int = 200):
    """Median over seeds of ``F(U_hat, V) - eps_min`` and of ``kappa(V)`` for each alpha.

    Returns
    -------
    gap, kappa : ndarray of shape (len(alphas),)
    """
    g, k = [], []
    for seed in range(seeds):
        S = load_dataset(name, num_samples=n, dimension=d, rank=r, num_clients=1, seed=seed, row_normalize=False,
                         mf_noise=noise).X
        eps_min = MFReference.from_matrix(S, r).eps_min
        V = S.T @ sketch_matrix(seed, 0, 0, n, r)
        row_g, row_k = [], []
        for a in range(max(alphas) + 1):
            if a in alphas:
                row_g.append(mf_loss(S, exact_u(S, V), V) - eps_min)
                row_k.append(condition_number(V))
            V = power_product(S, V)
        g.append(row_g)
        k.append(row_k)
    return np.median(g, axis=0), np.median(k, axis=0)


def figure2(out, draws: int = 50, T: int = 1000) -> dict:
    """The paper's Figure 2: log10 F after T GD steps and of the exact solution against kappa(V)^-2.

    Synthetic data at the paper's size (n = 5000, d = 200, r = 5), noise 0 and 1e-6, alpha = 0 and 1, ``draws``
    single sketches each, GD without momentum, step 1 / sigma_max(V)^2. Writes the figure to ``out``.

    Returns
    -------
    dict
        ``(noise, alpha) -> (inv_kappa2, log10 F_T, log10 F_exact)`` arrays of shape (draws,), and ``eps_min``
        per noise.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from simulations.compare.report import save_figure

    from fl_strategies.kernels.mf import initial_u

    result = {}
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for ax, noise in zip(axes, (0.0, 1e-6)):
        S = load_dataset("mf-synthetic", num_samples=5000, dimension=200, rank=5, num_clients=1, seed=0,
                         row_normalize=False, mf_noise=noise).X
        eps_min = MFReference.from_matrix(S, 5).eps_min
        result[("eps_min", noise)] = eps_min
        for alpha, colour in ((0, "C0"), (1, "C1")):
            rows = []
            for j in range(draws):
                V = S.T @ sketch_matrix(j, 0, 0, S.shape[0], 5)
                for _ in range(alpha):
                    V = power_product(S, V)
                sv = np.linalg.svd(V, compute_uv=False)
                G, B, U = V.T @ V, S @ V, initial_u(j, 0, S.shape[0], 5)
                for _ in range(T):
                    U = U - (U @ G - B) / sv[0] ** 2
                rows.append(((sv[-1] / sv[0]) ** 2, np.log10(mf_loss(S, U, V)),
                             np.log10(max(mf_loss(S, exact_u(S, V), V), 1e-300))))
            rows = np.array(sorted(rows))
            result[(noise, alpha)] = rows.T
            ax.plot(rows[:, 0], rows[:, 2], "-", color=colour, label=f"alpha={alpha}, exact")
            ax.plot(rows[:, 0], rows[:, 1], "--", color=colour, label=f"alpha={alpha}, GD T={T}")
        if eps_min > 0:
            ax.axhline(np.log10(eps_min), color="green", label="eps_min")
        ax.set_xlabel("kappa(V)^-2")
        ax.set_ylabel("log10 F")
        ax.set_title(f"synthetic, noise {noise:g}")
        ax.legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, out, dpi=110)
    return result


def main(argv: list[str] | None = None) -> int:
    """Print the two tables."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=40)
    parser.add_argument("--figure2", default="", help="also write the Figure 2 sweep (50 draws) to this PNG")
    args = parser.parse_args(argv)
    if args.figure2:
        res = figure2(args.figure2)
        for noise in (0.0, 1e-6):
            for alpha in (0, 1):
                k2, gd, exact = res[(noise, alpha)]
                print(f"Figure 2, noise {noise:g}, alpha = {alpha}: kappa^-2 in [{k2.min():.2g}, {k2.max():.2g}] "
                      f"(median {np.median(k2):.2g}); log10 F exact median {np.median(exact):.2f}, after GD "
                      f"median {np.median(gd):.2f} [{gd.min():.2f}, {gd.max():.2f}]")
            print(f"  log10 eps_min = {np.log10(max(res[('eps_min', noise)], 1e-300)):.2f}")
    print(f"median over {args.seeds} seeds; alpha = 0, 1, 2")
    for xi in (0.1, 0.01):
        g, _ = gaps("mf-step", 5, xi, args.seeds)
        print(f"step spectrum xi = {xi}: F(U_hat) - eps_min = " + " -> ".join(f"{v:.2g}" for v in g))
    g, k = gaps("mf-decay", 20, 0.0, args.seeds)
    print("decaying spectrum 100/k, r = 20: kappa(V) = " + " -> ".join(f"{v:.3g}" for v in k)
          + "; F(U_hat) - eps_min = " + " -> ".join(f"{v:.3g}" for v in g))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
