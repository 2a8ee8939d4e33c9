"""PCA of a synthetic genotype matrix: fedpower on int8 node files against scikit-learn on the pooled rows.

Synthetic genotypes (:mod:`simulations.data.genotypes`: several populations with their own allele frequencies,
0/1/2 in int8, sites holding different mixtures) are written as one int8 ``.npy`` file per site. Each method runs
in a fresh Python process, which reports its wall time (the method alone, after imports and, for scikit-learn,
after loading the pooled rows) and its peak resident memory (``VmHWM``, which counts the pages of a
memory-mapped file the process touched); the same
command on a tiny data set (``d = 64``, 4 x 16 rows) gives the baseline peak (the interpreter and its imports),
which is subtracted. Methods:

* ``fedpower``: ``simulations.compare`` with one fedpower run on the folder of node files (the in-process
  engine; each client memory-maps its file and multiplies ``M_i^T (M_i Z)`` in float64 row blocks),
  ``center = true``;
* ``sklearn-randomized`` / ``sklearn-arpack``: ``sklearn.decomposition.PCA(svd_solver=...)`` on the pooled rows
  as float64 (what scikit-learn needs);

and the accuracy of each against the exact PCA (the eigenvectors of ``X_c X_c^T`` of the centred pooled rows,
``n x n``, mapped back: exact to round-off): ``sin theta`` of the top-``rank`` subspace and the largest relative
error of the explained variances. Prints a markdown table and writes ``bench_genotype.{md,csv}`` to ``--out``
(default: a new folder, :func:`simulations.benchmarks.out_folder`).
Usage::

    python -m simulations.benchmarks.bench_genotype [--dimension 100000] [--sites 500 500 500 500] [--rank 2]
        [--rounds 10] [--out simulations/benchmarks/results/bench_genotype]
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from fl_strategies.files.plain_files import write_file
from simulations.benchmarks import out_folder

__all__ = ["main"]

METHODS = ("fedpower", "sklearn-randomized", "sklearn-arpack")
MARK = "BENCH-GENOTYPE "


def _worker(method: str, data: Path, rank: int, iteration_rank: int, rounds: int, steps: int, out: Path) -> None:
    """Run one method in this process; print its wall time and peak memory, save its components and variances."""
    files = sorted(data.glob("partition_*.npy"), key=lambda p: int(p.stem.split("_")[1]))
    if method == "fedpower":
        from fl_strategies.files.pca import load_model
        from simulations.compare import run_comparison

        config = out / "fedpower.toml"
        write_file(config, f'''title = "genotype PCA"
[defaults]
dataset = "{data}"
num-clients = {len(files)}
rank = {rank}
iteration-rank = {iteration_rank}
num-server-rounds = {rounds}
local-steps = {steps}
center = true
row-normalize = false
[[runs]]
name = "fedpower"
strategy = "fedpower"
''')
        start = time.perf_counter()
        run_comparison(config, out=out / "compare")
        wall = time.perf_counter() - start
        (path,) = sorted((out / "compare" / "estimates").glob("*.pca.npz"))
        model = load_model(path)
        components, variances = model["components"], model["explained_variance"]
    else:
        from sklearn.decomposition import PCA

        X = np.vstack([np.load(p) for p in files]).astype(np.float64)  # scikit-learn's input: pooled float64
        start = time.perf_counter()
        pca = PCA(n_components=rank, svd_solver=method.split("-")[1], random_state=0).fit(X)
        wall = time.perf_counter() - start
        components, variances = pca.components_, pca.explained_variance_
    write_file(out / f"{method}.npz", lambda handle: np.savez(handle, components=components, variances=variances))
    peak = _peak_bytes()
    print(MARK + json.dumps({"method": method, "wall": wall, "peak": peak}), flush=True)


def _peak_bytes() -> int:
    """This process's peak resident memory: ``VmHWM`` of ``/proc/self/status`` (of this program alone; ``ru_maxrss``
    would include the parent's resident memory at the fork on Linux), else ``ru_maxrss``."""
    try:
        with open("/proc/self/status") as handle:
            for line in handle:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # kilobytes on Linux


def _run(method: str, data: Path, args, out: Path) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "simulations.benchmarks.bench_genotype", "--worker", method, "--data", str(data),
           "--rank", str(args.rank), "--iteration-rank", str(args.iteration_rank), "--rounds", str(args.rounds),
           "--local-steps", str(args.local_steps), "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    lines = [line for line in proc.stdout.splitlines() if line.startswith(MARK)]
    if proc.returncode or not lines:
        raise RuntimeError(f"{method} failed (exit {proc.returncode}): {proc.stderr[-2000:]}")
    return json.loads(lines[-1][len(MARK):])


def exact_pca(data: Path, rank: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-``rank`` components (rank, d) and explained variances of the pooled rows, from the n x n Gram matrix."""
    import scipy.linalg

    files = sorted(data.glob("partition_*.npy"), key=lambda p: int(p.stem.split("_")[1]))
    X = np.vstack([np.load(p) for p in files]).astype(np.float64)
    X -= X.mean(axis=0)
    n = X.shape[0]
    values, U = scipy.linalg.eigh(X @ X.T, subset_by_index=[n - rank, n - 1])
    values, U = values[::-1], U[:, ::-1]
    V = (X.T @ U) / np.sqrt(values)
    return V.T, values / (n - 1)


def _sin_theta(A: np.ndarray, B: np.ndarray) -> float:
    Qa, Qb = np.linalg.qr(A.T)[0], np.linalg.qr(B.T)[0]
    return float(np.linalg.norm(Qa - Qb @ (Qb.T @ Qa), 2))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dimension", type=int, default=100_000)
    parser.add_argument("--sites", type=int, nargs="+", default=[500, 500, 500, 500])
    parser.add_argument("--populations", type=int, default=3)
    parser.add_argument("--rank", type=int, default=2)
    parser.add_argument("--iteration-rank", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--local-steps", type=int, default=2)
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    parser.add_argument("--out", type=Path, default=None,
                        help="folder of the tables (default: a new bench-runs/bench_genotype-<UTC time>; the committed ones only when named)")
    parser.add_argument("--worker", choices=METHODS, help=argparse.SUPPRESS)
    parser.add_argument("--data", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        _worker(args.worker, args.data, args.rank, args.iteration_rank, args.rounds, args.local_steps, args.out)
        return 0
    args.out = out_folder("bench_genotype", args.out)
    from simulations.data.genotypes import write_genotype_sites

    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-genotype-") as tmp:
        tmp = Path(tmp)
        write_genotype_sites(tmp / "data", args.sites, args.dimension, populations=args.populations, seed=0)
        write_genotype_sites(tmp / "tiny", [16] * len(args.sites), 64, populations=args.populations, seed=0)
        stored = sum(p.stat().st_size for p in (tmp / "data").glob("*.npy"))
        runs = {method: (_run(method, tmp / "tiny", args, tmp / f"{method}-tiny"),
                         _run(method, tmp / "data", args, tmp / method)) for method in args.methods}
        exact_components, exact_variances = exact_pca(tmp / "data", args.rank)  # after the runs: not in their peak
        for method, (base, run) in runs.items():
            result = np.load(tmp / method / f"{method}.npz")
            rows.append({
                "method": method, "wall_s": run["wall"], "peak_MB": run["peak"] / 1e6,
                "baseline_MB": base["peak"] / 1e6, "above_baseline_MB": (run["peak"] - base["peak"]) / 1e6,
                "above_baseline_over_stored": (run["peak"] - base["peak"]) / stored,
                "sin_theta": _sin_theta(result["components"], exact_components),
                "variance_rel_error": float(np.max(np.abs(result["variances"] / exact_variances - 1))),
            })
    randomized = next((r["wall_s"] for r in rows if r["method"] == "sklearn-randomized"), None)
    header = (f"d = {args.dimension:,}, sites of {', '.join(map(str, args.sites))} people (int8 node files, "
              f"{stored / 1e6:.0f} MB as stored), {args.populations} populations, rank {args.rank}; fedpower: "
              f"iteration-rank {args.iteration_rank}, {args.rounds} rounds of {args.local_steps} local steps, "
              "center = true")
    lines = [header, "", "| method | wall (s) | wall / sklearn randomized | peak above baseline (MB) | "
             "peak above baseline / data as stored | sin theta vs exact | explained variance, max rel. error |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        ratio = f"{r['wall_s'] / randomized:.2f}" if randomized else "—"
        lines.append(f"| {r['method']} | {r['wall_s']:.1f} | {ratio} | {r['above_baseline_MB']:.0f} | "
                     f"{r['above_baseline_over_stored']:.2f} | {r['sin_theta']:.1e} | {r['variance_rel_error']:.1e} |")
    table = "\n".join(lines)
    print(table)
    args.out.mkdir(parents=True, exist_ok=True)
    write_file(args.out / "bench_genotype.md", table + "\n")
    text = io.StringIO(newline="")
    writer = csv.DictWriter(text, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
    write_file(args.out / "bench_genotype.csv", text.getvalue())
    print(f"tables in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
