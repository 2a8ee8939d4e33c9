"""The FedLRGD vs FedAve crossover (spec section 8, E3): federated oracle complexity Gamma to reach eps.

For every feature dimension ``p`` (``d = p + 1``), seed, target ``eps`` and
communication ratio ``phi`` it finds

* FedLRGD: ``min over r`` of ``r^2 + r s + r S_r(eps) + phi m r``, where
  ``S_r(eps)`` is the first GD step after which ``F - F*`` stays <= eps (up to
  ``60 kappa`` steps), on nested server samples (the first ``r`` of one pool);
* FedAve (server as pseudo-client, tau = 1, clipped schedule): ``min over (b, step-max)`` of
  ``T(eps) (b + phi m)``, with ``T(eps)`` the first epoch after which the
  **mean over seeds** of ``F - F*`` stays <= eps (up to ``max-epochs``).

It runs the strategies' own kernels (:mod:`fl_strategies.kernels.fedlrgd`,
:func:`fl_strategies.kernels.fedave.local_sgd`'s update with the clients' random
streams), which the tests check against the Flower runs; the whole grid in
Flower rounds would take hours. Usage::

    python -m simulations.experiments.fedlrgd.fedlrgd_crossover simulations/experiments/fedlrgd/fedlrgd_crossover.toml --out DIR

writes ``DIR/results.csv`` (one row per p, eps, phi and algorithm),
``DIR/summary.md`` and ``DIR/oracle_complexity.png`` (Gamma against eps).
"""

from __future__ import annotations

import argparse
import tomllib
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.special import expit

from fl_strategies.protocol.strategies.eigenspace import STREAM_INIT
from fl_strategies.settings.participation import sample_partitions
from fl_strategies.kernels.fedave import step_size
from fl_strategies.kernels.fedlrgd import client_weights, draw_pivots, inexact_gd, invert, server_matrices
from fl_strategies.kernels.losses import minimise, objective, smoothness
from fl_strategies.files.plain_files import plain_frame, write_file

__all__ = ["make_data", "fedlrgd_curve", "fedave_curve", "first_stay_below", "run"]



def make_data(p: int, m: int, s: int, pool: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Spec section 8 data: ``x ~ U[0,1]^p``, ``w* ~ U[-1,1]^p``, ``y = sigmoid(w*^T x + 0.25 xi)``.

    Returns
    -------
    Xs : ndarray of shape (pool, p)
        Server pool (FedLRGD with rank r uses the first r rows); ``ys`` (pool,).
    Xc : ndarray of shape (m, s, p)
        Client rows; ``yc`` (m, s).
    """
    rng = np.random.default_rng([seed, 404])
    w = rng.uniform(-1.0, 1.0, size=p)
    X = rng.uniform(0.0, 1.0, size=(pool + m * s, p))
    y = expit(X @ w + 0.25 * rng.standard_normal(X.shape[0]))
    return X[:pool], y[:pool], X[pool:].reshape(m, s, p), y[pool:].reshape(m, s)


def first_stay_below(gaps: np.ndarray, eps: float) -> int | None:
    """First index after which ``gaps`` stays <= eps (suffix max), or ``None``."""
    suffix = np.maximum.accumulate(gaps[::-1])[::-1]
    hits = np.nonzero(suffix <= eps)[0]
    return int(hits[0]) if hits.size else None


def fedlrgd_curve(Xs, ys, Xc, yc, r: int, mu: float, steps: int, seed: int, mode: str, rcond: float) -> np.ndarray:
    """Gap ``F(theta^(S)) - F*`` for ``S = 0..steps`` of FedLRGD with the first ``r`` server rows, shape (steps+1,)."""
    p = Xs.shape[1]
    X0, y0 = Xs[:r], ys[:r]
    X = np.vstack([X0, Xc.reshape(-1, p)])
    y = np.concatenate([y0, yc.ravel()])
    F_star = objective("logistic", X, y, minimise("logistic", X, y, mu), mu)
    pivots = draw_pivots(np.random.default_rng([seed, STREAM_INIT]), r, p)  # as FedLrgdStrategy
    Ginv, _ = invert(server_matrices("logistic", X0, y0, pivots, mu), mode, rcond)
    A = sum(client_weights("logistic", Xc[c], yc[c], pivots, Ginv, mu) for c in range(Xc.shape[0])).T
    with np.errstate(all="ignore"):  # a too-inexact estimate can make GD diverge: its gaps become inf/NaN
        thetas = inexact_gd("logistic", X0, y0, A, X.shape[0], np.zeros(p), mu, 1.0 / smoothness("logistic", p, mu),
                            steps)
        t = thetas @ X.T
        F = (y * np.logaddexp(0.0, -t) + (1 - y) * np.logaddexp(0.0, t)).mean(axis=1) + 0.5 * mu * np.sum(thetas ** 2, 1)
    return F - F_star


def fedave_curve(Xs, ys, Xc, yc, r: int, mu: float, b: int, step_max: float, epochs: int, seed: int,
                 frac_active: float = 1.0) -> np.ndarray:
    """Gap after each epoch ``0..epochs`` of FedAve, the server's first ``r`` rows as pseudo-client.

    Every client's SGD indices come from ``default_rng([seed, 3, c, round])`` and
    the server's from ``default_rng([seed, 3, 2**32 - 1, round])``, as in
    :class:`client_app.erm_client.FedAveClient` and
    :class:`fl_strategies.protocol.strategies.fedave.FedAveStrategy` (clipped schedule).

    Returns
    -------
    ndarray of shape (epochs + 1,)
    """
    m, s, p = Xc.shape
    Xall = np.vstack([Xc.reshape(-1, p), Xs[:r]])
    yall = np.concatenate([yc.ravel(), ys[:r]])
    F_star = objective("logistic", Xall, yall, minimise("logistic", Xall, yall, mu), mu)
    sizes = np.array([s] * m + [r])
    offsets = np.concatenate([np.arange(m) * s, [m * s]])
    active = max(1, int(round(frac_active * m)))
    theta = np.zeros(p)
    gaps = np.empty(epochs + 1)
    gaps[0] = objective("logistic", Xall, yall, theta, mu) - F_star
    for k in range(epochs):
        rnd = k + 1
        pids = sorted(sample_partitions(seed, rnd, m, active, replace=False))  # FedAve's draw
        who = np.array(pids + [m])
        idx = np.stack([np.random.default_rng([seed, 3, c if c < m else 2 ** 32 - 1, rnd]).integers(0, sizes[c], b)
                        for c in who]) + offsets[who, None]
        eta = step_size("clipped", k, b=b, mu=mu, step_max=step_max)
        th = np.repeat(theta[None, :], who.size, axis=0)
        for t in range(b):
            Xj, yj = Xall[idx[:, t]], yall[idx[:, t]]
            res = expit(np.einsum("ij,ij->i", Xj, th)) - yj
            th = th - eta * (res[:, None] * Xj + mu * th)
        w = sizes[who].astype(float)
        theta = (w[:, None] * th).sum(axis=0) / w.sum()
        gaps[k + 1] = objective("logistic", Xall, yall, theta, mu) - F_star
    return gaps


def _lrgd_job(args):
    p, seed, r, c = args
    Xs, ys, Xc, yc = make_data(p, c["m"], c["s"], max(c["ranks"]), seed)
    kappa = smoothness("logistic", p, c["l2"]) / c["l2"]
    return (p, seed, r), fedlrgd_curve(Xs, ys, Xc, yc, r, c["l2"], int(np.ceil(c["gd-factor"] * kappa)), seed,
                                       c["g-inverse"], c["pinv-rcond"])


def _ave_job(args):
    p, seed, b, eta, c = args
    Xs, ys, Xc, yc = make_data(p, c["m"], c["s"], max(c["ranks"]), seed)
    return (p, seed, b, eta), fedave_curve(Xs, ys, Xc, yc, c["fedave-server-samples"], c["l2"], b, eta,
                                           c["max-epochs"], seed)


def run(c: dict, workers: int = 2) -> pd.DataFrame:
    """Run the grid of config ``c`` and return one row per (p, eps, phi, algorithm)."""
    lrgd_jobs = [(p, seed, r, c) for p in c["p"] for seed in range(c["seeds"]) for r in c["ranks"]]
    ave_jobs = [(p, seed, b, eta, c) for p in c["p"] for seed in range(c["seeds"]) for b in c["local-steps"]
                for eta in c["step-max"]]
    with ProcessPoolExecutor(workers) as pool:
        lrgd = dict(pool.map(_lrgd_job, lrgd_jobs))
        ave = dict(pool.map(_ave_job, ave_jobs))
    m, s, rows = c["m"], c["s"], []
    for p in c["p"]:
        for eps in c["eps"]:
            for phi in c["phi"]:
                per_seed = []
                for seed in range(c["seeds"]):
                    best = None
                    for r in c["ranks"]:
                        S = first_stay_below(lrgd[(p, seed, r)], eps)
                        if S is not None:
                            g = r * r + r * s + r * S + phi * m * r
                            if best is None or g < best[0]:
                                best = (g, r, S)
                    per_seed.append(best)
                ok = [x for x in per_seed if x is not None]
                med = np.median([x[0] for x in ok]) if len(ok) == len(per_seed) else np.nan
                rows.append({"algorithm": "fedlrgd", "p": p, "d": p + 1, "eps": eps, "phi": phi, "gamma": med,
                             "gamma_max": max(x[0] for x in ok) if len(ok) == len(per_seed) else np.nan,
                             "comm_epochs": float(np.median([x[1] for x in ok])) if ok else np.nan,
                             "setting": "; ".join(f"r={x[1]} S={x[2]}" if x else "-" for x in per_seed)})
                best = None
                for b in c["local-steps"]:
                    for eta in c["step-max"]:
                        mean_gap = np.mean([ave[(p, seed, b, eta)] for seed in range(c["seeds"])], axis=0)
                        T = first_stay_below(mean_gap, eps)
                        if T is not None:
                            g = T * (b + phi * m)
                            if best is None or g < best[0]:
                                best = (g, b, eta, T)
                rows.append({"algorithm": "fedave", "p": p, "d": p + 1, "eps": eps, "phi": phi,
                             "gamma": best[0] if best else np.nan, "gamma_max": np.nan,
                             "comm_epochs": best[3] if best else np.nan,
                             "setting": f"b={best[1]} step-max={best[2]} T={best[3]}" if best else
                             f"> {c['max-epochs']} epochs"})
    return pd.DataFrame(rows)


def report(df: pd.DataFrame, out: Path, title: str) -> None:
    """Write ``summary.md`` (ratio table) and ``oracle_complexity.png`` (Gamma against eps)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from simulations.compare.report import save_figure

    ps = sorted(df.p.unique())
    fig, axes = plt.subplots(1, len(ps), figsize=(4.2 * len(ps), 3.8), sharey=True)
    colors = dict(zip(sorted(df.phi.unique()), ["C0", "C1", "C2", "C3", "C4", "C5"]))
    for ax, p in zip(np.atleast_1d(axes), ps):
        for phi, col in colors.items():
            for alg, style in (("fedlrgd", "-o"), ("fedave", "--s")):
                sub = df[(df.p == p) & (df.phi == phi) & (df.algorithm == alg)].sort_values("eps")
                ax.loglog(sub.eps, sub.gamma, style, color=col, ms=3,
                          label=f"{'FedLRGD' if alg == 'fedlrgd' else 'FedAve'}, phi={phi:g}")
        ax.invert_xaxis()
        ax.set_title(f"d = {p + 1} (p = {p})")
        ax.set_xlabel("target eps (F - F*)")
        ax.grid(True, which="both", alpha=0.3)
    np.atleast_1d(axes)[0].set_ylabel("federated oracle complexity Gamma")
    np.atleast_1d(axes)[-1].legend(fontsize=6, ncol=2)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    save_figure(fig, out / "oracle_complexity.png", dpi=120)

    lines = [f"# {title}", "", "Gamma(FedLRGD) / Gamma(FedAve) (median over seeds for FedLRGD; FedAve on the "
             "seed-mean gap; < 1: FedLRGD needs fewer; inf: FedLRGD does not reach eps; 0: FedAve does not)", ""]
    eps_list = sorted(df.eps.unique(), reverse=True)
    lines += ["| d | phi | " + " | ".join(f"eps={e:g}" for e in eps_list) + " |",
              "|---|---|" + "---|" * len(eps_list)]
    for p in ps:
        for phi in sorted(df.phi.unique()):
            cells = []
            for e in eps_list:
                a = df[(df.p == p) & (df.phi == phi) & (df.eps == e) & (df.algorithm == "fedlrgd")].gamma.iloc[0]
                f = df[(df.p == p) & (df.phi == phi) & (df.eps == e) & (df.algorithm == "fedave")].gamma.iloc[0]
                cells.append("n/a" if np.isnan(a) and np.isnan(f) else "inf" if np.isnan(a) else
                             "0" if np.isnan(f) else f"{a / f:.3g}")
            lines.append(f"| {p + 1} | {phi:g} | " + " | ".join(cells) + " |")
    lines += ["", "Communication epochs (FedLRGD: the chosen r, median over seeds; FedAve: T) at phi = "
              f"{max(df.phi.unique()):g}:", "", "| d | algorithm | " + " | ".join(f"eps={e:g}" for e in eps_list)
              + " |", "|---|---|" + "---|" * len(eps_list)]
    phi = max(df.phi.unique())
    for p in ps:
        for alg in ("fedlrgd", "fedave"):
            sub = df[(df.p == p) & (df.phi == phi) & (df.algorithm == alg)]
            cells = [f"{v:g}" if not np.isnan(v) else "-" for v in
                     (sub[sub.eps == e].comm_epochs.iloc[0] for e in eps_list)]
            lines.append(f"| {p + 1} | {alg} | " + " | ".join(cells) + " |")
    write_file(out / "summary.md", "\n".join(lines) + "\n")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("config")
    ap.add_argument("--out", required=True)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args(argv)
    c = tomllib.loads(Path(args.config).read_text())
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    df = run(c, args.workers)
    write_file(out / "results.csv", plain_frame(df).to_csv(index=False))
    report(df, out, c.get("title", "FedLRGD vs FedAve"))
    print((out / "summary.md").read_text())


if __name__ == "__main__":
    main()
