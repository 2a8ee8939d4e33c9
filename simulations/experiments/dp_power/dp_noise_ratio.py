"""The DP power method paper's Figs 1-2: r(k, n) = E[Delta^a_0] / E[Delta^b_0] at initialisation.

``X^0`` is the Q factor of an ``n x k`` standard Gaussian matrix (a Haar-distributed
orthonormal basis; here ``k`` is the number of columns, the spec's ``p``). For each
``(n, k)`` and ``runs`` draws it records ``Delta^a_0 = sqrt(k) max_ij |X^0_ij|`` and
``Delta^b_0 = max_i ||X^0_{i:}||_2`` (:mod:`fl_strategies.privacy.dp_sensitivity`), and the
empirical ratio of their means beside the paper's Approximation 5.1
(:func:`approx_5_1`, spec section 6.1).

The Q factor is computed with CholeskyQR2 (:func:`cholesky_qr2`): LAPACK's Householder
QR is pathologically slow on the 2-core machine (spec P18), and the Gram matrix of a
Gaussian ``n x k`` with ``k <= n / 2`` is well conditioned (condition number of ``G``
at most ``(sqrt n + sqrt k) / (sqrt n - sqrt k) ~ 6``), so two passes give columns
orthonormal to rounding. Its Q equals Householder QR's with the signs that make
``diag(R) > 0`` (the convention of :func:`fl_strategies.kernels.linalg.orth`), which matters
for the basis-dependent ``Delta^a``.

Usage::

    python -m simulations.experiments.dp_power.dp_noise_ratio [--quick | --full] [--runs 5] [--seed 0] [--out DIR]

* default: n in {8000, 12000}, k in {64, 128, 256, 512, 1024, 2048, 3008, 4000}
  (the spec's reproduction grid), 5 runs each; about 7 minutes on 2 idle cores (33 minutes
  measured on a shared, loaded machine);
* ``--quick``: k in {64, 256, 1024}, under a minute;
* ``--full``: the paper's grid k = 64, 128, ..., 3968 (62 values) plus 4000; about
  11 times the default (estimated from the sum of k^2; not run).

Writes ``DIR/results.csv`` (one row per n and k), ``DIR/summary.md`` and
``DIR/ratio.png`` (default ``DIR = simulations/experiments/dp_power/results/dp_noise_ratio``).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import pandas as pd
import scipy.linalg
from scipy.linalg.blas import dtrsm

from fl_strategies.privacy.dp_sensitivity import delta_a, delta_b
from fl_strategies.files.plain_files import plain_frame, write_file

__all__ = [
    "DEFAULT_KS",
    "QUICK_KS",
    "FULL_KS",
    "NS",
    "cholesky_qr2",
    "haar_iterate",
    "approx_5_1",
    "empirical_ratio",
    "run",
    "main",
]

NS = (8000, 12000)
DEFAULT_KS = (64, 128, 256, 512, 1024, 2048, 3008, 4000)
QUICK_KS = (64, 256, 1024)
FULL_KS = tuple(range(64, 4000, 64)) + (4000,)
DEFAULT_OUT = Path("simulations/experiments/dp_power/results/dp_noise_ratio")
_MIN_DIAG_RATIO = 1e-7


def cholesky_qr2(G: np.ndarray) -> np.ndarray:
    """Q factor of a thin QR by two passes of Cholesky QR.

    One pass: ``W = X^T X = R^T R`` (Cholesky), ``X <- X R^{-1}``. The second pass
    repairs the loss of orthogonality of the first (about ``cond(G)^2 * eps``).

    Parameters
    ----------
    G : ndarray of shape (n, k)
        Full column rank, ``n >= k``, not too ill-conditioned (``cond(G) < ~1e7``).

    Returns
    -------
    Q : ndarray of shape (n, k)
        ``Q^T Q = I_k`` to rounding, ``G = Q R`` with ``R`` upper triangular and
        ``diag(R) > 0``.

    Raises
    ------
    ValueError
        If ``G`` is not 2-D with ``n >= k`` or its Gram matrix is not positive
        definite (rank deficient or too ill-conditioned for Cholesky QR).
    """
    G = np.asarray(G, dtype=np.float64)
    if G.ndim != 2 or G.shape[0] < G.shape[1] or G.shape[1] == 0:
        raise ValueError(f"cholesky_qr2 needs an n x k matrix with n >= k >= 1, got shape {G.shape}")
    X = np.array(G, order="F", copy=True)
    for _ in range(2):
        W = X.T @ X
        try:
            R = scipy.linalg.cholesky(W, lower=False, check_finite=False)
        except np.linalg.LinAlgError as err:
            raise ValueError(
                "cholesky_qr2: the Gram matrix is not positive definite "
                "(G is rank deficient or too ill-conditioned for Cholesky QR)"
            ) from err
        diag = np.abs(np.diag(R))
        if not np.all(np.isfinite(diag)) or diag.min() <= _MIN_DIAG_RATIO * diag.max():
            # cond(G) >= max / min of diag(R): beyond ~1e7 two passes no longer orthonormalise.
            raise ValueError(
                "cholesky_qr2: the Gram matrix is not positive definite "
                "(G is rank deficient or too ill-conditioned for Cholesky QR)"
            )
        X = dtrsm(1.0, R, X, side=1, lower=0, overwrite_b=1)  # X <- X R^{-1}
    return X


def haar_iterate(n: int, k: int, rng: np.random.Generator) -> np.ndarray:
    """The power method's start ``X^0 = Q(Omega)``, ``Omega ~ N(0, 1)^{n x k}``.

    Parameters
    ----------
    n, k : int
        Rows and columns, ``n >= k >= 1``.
    rng : numpy.random.Generator
        Source of ``Omega``.

    Returns
    -------
    X0 : ndarray of shape (n, k)
        Orthonormal columns (Haar distributed on the Stiefel manifold).
    """
    # Drawn as k x n and transposed: a Fortran-ordered n x k view, no copy for dtrsm.
    return cholesky_qr2(rng.standard_normal((k, n)).T)


def approx_5_1(k: int | np.ndarray, n: int | np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The paper's Approximation 5.1 of ``E[Delta^a_0]``, ``E[Delta^b_0]`` and their ratio.

    With ``mu = n / (n - 2)`` and ``s2 = 2 n^2 (n - 1) / ((n - 2)^2 (n - 4))`` (mean and
    variance of ``F(1, n)``; ``X^0_ij^2 ~ F(1, n) / n`` treated as Gaussian) and the
    maximum of ``m`` Gaussians taken as ``sigma sqrt(2 log m) + mean``::

        E[Delta^a]^2 ~= sqrt(2 s2 log(k n) k^2 / n^2) + k mu / n
        E[Delta^b]^2 ~= sqrt(2 s2 log(n) k / n^2) + k mu / n

    Parameters
    ----------
    k : int or ndarray
        Number of columns of ``X^0`` (the iteration rank p).
    n : int or ndarray
        Number of rows, ``n > 4``.

    Returns
    -------
    e_a, e_b, ratio : ndarray (broadcast shape of ``k`` and ``n``)
        ``E[Delta^a_0]``, ``E[Delta^b_0]`` and ``r_theory = e_a / e_b``.
    """
    k = np.asarray(k, dtype=np.float64)
    n = np.asarray(n, dtype=np.float64)
    if np.any(n <= 4) or np.any(k < 1):
        raise ValueError("approx_5_1 needs n > 4 and k >= 1")
    mu = n / (n - 2)
    s2 = 2 * n**2 * (n - 1) / ((n - 2) ** 2 * (n - 4))
    e_a = np.sqrt(np.sqrt(2 * s2 * np.log(k * n) * k**2 / n**2) + k * mu / n)
    e_b = np.sqrt(np.sqrt(2 * s2 * np.log(n) * k / n**2) + k * mu / n)
    return e_a, e_b, e_a / e_b


def empirical_ratio(n: int, k: int, runs: int = 5, seed: int = 0) -> dict:
    """Monte-Carlo ``E[Delta^a_0]``, ``E[Delta^b_0]`` and their ratio over ``runs`` starts.

    Run ``t`` draws ``Omega`` from ``numpy.random.default_rng([seed, n, k, t])``, so each
    cell is reproducible on its own, whatever grid it belongs to.

    Parameters
    ----------
    n, k : int
        Shape of ``X^0`` (``n >= k``).
    runs : int
        Number of independent starts ``t``.
    seed : int
        Base seed (>= 0).

    Returns
    -------
    dict
        ``n``, ``k``, ``runs``, ``mean_delta_a``, ``mean_delta_b``, ``r_emp`` (ratio of the
        means, the paper's eq. 18), ``r_emp_min`` / ``r_emp_max`` (range of the per-run
        ratios), ``r_theory`` and ``seconds``.
    """
    if runs < 1:
        raise ValueError(f"runs must be >= 1, got {runs}")
    if n < k:
        raise ValueError(f"need n >= k, got n = {n}, k = {k}")
    t0 = time.perf_counter()
    da, db = np.empty(runs), np.empty(runs)
    for t in range(runs):
        X = haar_iterate(n, k, np.random.default_rng([seed, n, k, t]))
        da[t], db[t] = delta_a(X), delta_b(X)
        del X
    per_run = da / db
    _, _, r_theory = approx_5_1(k, n)
    return {
        "n": n,
        "k": k,
        "runs": runs,
        "mean_delta_a": float(da.mean()),
        "mean_delta_b": float(db.mean()),
        "r_emp": float(da.mean() / db.mean()),
        "r_emp_min": float(per_run.min()),
        "r_emp_max": float(per_run.max()),
        "r_theory": float(r_theory),
        "seconds": time.perf_counter() - t0,
    }


def _summary(df: pd.DataFrame, runs: int, seed: int, grid: str) -> str:
    lines = [
        "# r(k, n) = E[Delta^a_0] / E[Delta^b_0] at initialisation (DP power method, Figs 1-2)",
        "",
        f"X^0 = CholeskyQR2 Q factor of an n x k Gaussian; {runs} runs per cell, seed {seed}; grid: {grid}.",
        "r_emp is the ratio of the means (eq. 18), [min, max] the range of the per-run ratios;",
        "r_theory is Approximation 5.1.",
        "",
        "| n | k | E[Delta^a_0] | E[Delta^b_0] | r_emp | per-run range | r_theory (Approx 5.1) |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in df.itertuples():
        lines.append(
            f"| {row.n} | {row.k} | {row.mean_delta_a:.3f} | {row.mean_delta_b:.3f} | {row.r_emp:.2f} | "
            f"[{row.r_emp_min:.2f}, {row.r_emp_max:.2f}] | {row.r_theory:.2f} |"
        )
    above = bool((df.r_emp > df.r_theory).all())
    lines += [
        "",
        f"r_emp > r_theory in every cell: {above}. "
        f"Delta^a_0 > 1 (worse than the trivial bound 1) from k = "
        + ", ".join(
            f"{int(g.k[g.mean_delta_a > 1].min())} at n = {n}" if (g.mean_delta_a > 1).any() else f"never at n = {n}"
            for n, g in df.groupby("n")
        )
        + ".",
        "",
    ]
    return "\n".join(lines)


def _plot(df: pd.DataFrame, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from simulations.compare.report import save_figure

    ns = sorted(df.n.unique())
    fig, axes = plt.subplots(1, len(ns), figsize=(5.5 * len(ns), 4), sharey=True, squeeze=False)
    for ax, n in zip(axes[0], ns):
        g = df[df.n == n].sort_values("k")
        ax.plot(g.k, g.r_emp, "o-", color="tab:blue", label="empirical E[Δa]/E[Δb]")
        ax.fill_between(g.k, g.r_emp_min, g.r_emp_max, color="tab:blue", alpha=0.2, label="per-run range")
        ax.plot(g.k, g.r_theory, "s-", color="tab:green", label="Approximation 5.1")
        ax.set_title(f"n = {n}")
        ax.set_xlabel("k (columns of X^0)")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("r(k, n)")
    axes[0][0].legend()
    fig.tight_layout()
    save_figure(fig, path, dpi=120)


def run(
    ns: tuple[int, ...] = NS,
    ks: tuple[int, ...] = DEFAULT_KS,
    runs: int = 5,
    seed: int = 0,
    out: Path | None = DEFAULT_OUT,
    grid: str = "default",
    verbose: bool = False,
) -> pd.DataFrame:
    """Empirical and theoretical r(k, n) over a grid; optionally write the results.

    Parameters
    ----------
    ns, ks : tuple of int
        Rows and column counts (every ``k <= n``).
    runs, seed : int
        Passed to :func:`empirical_ratio`.
    out : Path or None
        Directory for ``results.csv``, ``summary.md`` and ``ratio.png``; ``None`` writes nothing.
    grid : str
        Name of the grid, for the summary.
    verbose : bool
        Print one line per cell.

    Returns
    -------
    pandas.DataFrame
        One row per ``(n, k)``, columns as :func:`empirical_ratio`'s keys.
    """
    rows = []
    for n in ns:
        for k in ks:
            row = empirical_ratio(n, k, runs=runs, seed=seed)
            rows.append(row)
            if verbose:
                print(
                    f"n={n:6d} k={k:5d}  E[Da]={row['mean_delta_a']:.3f}  E[Db]={row['mean_delta_b']:.3f}  "
                    f"r_emp={row['r_emp']:.2f}  r_theory={row['r_theory']:.2f}  ({row['seconds']:.1f} s)",
                    flush=True,
                )
    df = pd.DataFrame(rows)
    if out is not None:
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        write_file(out / "results.csv", plain_frame(df.drop(columns="seconds")).to_csv(index=False,
                                                                                        float_format="%.6g"))
        write_file(out / "summary.md", _summary(df, runs, seed, grid))
        _plot(df, out / "ratio.png")
    return df


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true", help=f"k in {QUICK_KS} (under a minute)")
    mode.add_argument("--full", action="store_true", help="the paper's grid k = 64, 128, ..., 3968 and 4000")
    parser.add_argument("--runs", type=int, default=5, help="starts per (n, k) (paper: 5)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    if args.runs < 1 or args.seed < 0:
        parser.error("--runs must be >= 1 and --seed >= 0")
    ks, grid = DEFAULT_KS, "default (the spec's reproduction grid)"
    if args.quick:
        ks, grid = QUICK_KS, "quick"
    elif args.full:
        ks, grid = FULL_KS, "full (the paper's k = 64..3968 step 64, and 4000)"
    t0 = time.perf_counter()
    df = run(NS, ks, runs=args.runs, seed=args.seed, out=args.out, grid=grid, verbose=True)
    print((args.out / "summary.md").read_text())
    print(f"{len(df)} cells in {time.perf_counter() - t0:.0f} s; wrote {args.out}/results.csv, summary.md, ratio.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
