"""The same genotypes as int8 ``.npy`` files and as PLINK ``.bed`` files: fedpower's wall time on each, and with
missing calls ``scale = "hwe"`` against ``plink2 --pca`` on the pooled ``.bed``.

Synthetic genotypes (:mod:`simulations.data.genotypes`, several populations, sites of different mixtures) are
written once as ``partition_<i>.npy`` (int8) and once as ``partition_<i>.bed`` (with ``.fam`` / ``.bim``, by
``bed-reader``, the extra ``genotype``). ``simulations.compare`` runs fedpower (``center = true``,
``iteration-rank`` columns, ``--rounds`` rounds of ``--local-steps`` local steps) on each folder in a fresh Python
process, which reports the run's wall time; the ratio ``.bed / int8`` is printed. With ``--missing f > 0`` a
fraction ``f`` of the ``.bed`` calls is set missing and a third run with ``scale = "hwe"`` is compared with
``plink2 --pca`` (``--threads 2``) on the pooled file, where ``plink2`` is installed: per-PC correlation of the
scores (``transform`` of each site's file) with plink2's eigenvectors, and the ratio of the eigenvalues on plink2's
scale (``explained_variance (n - 1) / d``, which carries plink2's diagonal, summed from the sites at the summary;
and, for comparison, ``sigma^2 / d`` of the weighted matrix without it). Usage::

    python -m simulations.benchmarks.bench_genotype_bed [--dimension 20000] [--sites 500 500 500 500]
        [--rounds 10] [--missing 0.01] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

__all__ = ["main"]

MARK = "BENCH-GENOTYPE-BED "


def _config(data: Path, sites: int, args, scale: str) -> str:
    return f'''title = "genotype PCA"
[defaults]
dataset = "{data}"
num-clients = {sites}
rank = {args.rank}
iteration-rank = {args.rank + 2}
num-server-rounds = {args.rounds}
local-steps = {args.local_steps}
center = true
scale = "{scale}"
row-normalize = false
[[runs]]
name = "fedpower"
strategy = "fedpower"
'''


def _worker(data: Path, out: Path, config: str) -> None:
    """One ``compare`` run in this process; prints its wall time."""
    from simulations.compare import run_comparison

    out.mkdir(parents=True, exist_ok=True)
    (out / "c.toml").write_text(config)
    start = time.perf_counter()
    run_comparison(out / "c.toml", out=out / "compare")
    print(MARK + json.dumps({"wall": time.perf_counter() - start}), flush=True)


def _run(data: Path, out: Path, config: str) -> float:
    out.mkdir(parents=True, exist_ok=True)
    (out / "c.toml").write_text(config)
    proc = subprocess.run([sys.executable, "-m", "simulations.benchmarks.bench_genotype_bed", "--worker",
                           str(out / "c.toml"), "--data", str(data), "--out", str(out)],
                          capture_output=True, text=True, check=False)
    lines = [line for line in proc.stdout.splitlines() if line.startswith(MARK)]
    if proc.returncode or not lines:
        raise RuntimeError(f"the run on {data} failed (exit {proc.returncode}): {proc.stderr[-2000:]}")
    return json.loads(lines[-1][len(MARK):])["wall"]


def plink2_agreement(folder: Path, sites: list[np.ndarray], out: Path, k: int) -> dict[str, list[float]]:
    """Per-PC |correlation| of the model's scores with ``plink2 --pca``'s eigenvectors, and the eigenvalue ratios
    (the model's, with plink2's diagonal; and without it), on the pooled ``.bed`` of ``sites``."""
    import bed_reader

    from fl_strategies.files.data_files import open_samples
    from fl_strategies.files.pca import load_model, transform

    (path,) = sorted((out / "compare" / "estimates").glob("*.pca.npz"))
    model = load_model(path)
    scores = np.vstack([transform(model, open_samples(folder / f"partition_{i}.bed")) for i in range(len(sites))])
    G = np.vstack(sites)
    bed_reader.to_bed(out / "pooled.bed", G)
    subprocess.run(["plink2", "--bfile", str(out / "pooled"), "--pca", str(k), "--threads", "2", "--out",
                    str(out / "plink2")], check=True, capture_output=True)
    vectors = np.loadtxt(out / "plink2.eigenvec", skiprows=1, usecols=range(2, 2 + k))
    reference = np.loadtxt(out / "plink2.eigenval")
    n, d = G.shape
    values = model["explained_variance"][:k] * (n - 1) / d
    without = model["singular_values"][:k] ** 2 / d  # the weighted matrix's, without plink2's diagonal
    return {"correlation": [float(abs(np.corrcoef(scores[:, j], vectors[:, j])[0, 1])) for j in range(k)],
            "eigenvalue ratio": (values / reference).tolist(),
            "eigenvalue ratio, without the diagonal": (without / reference).tolist()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dimension", type=int, default=20_000)
    parser.add_argument("--sites", type=int, nargs="+", default=[500, 500, 500, 500])
    parser.add_argument("--populations", type=int, default=4)
    parser.add_argument("--rank", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--local-steps", type=int, default=2)
    parser.add_argument("--missing", type=float, default=0.01)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--data", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        _worker(args.data, args.out, Path(args.worker).read_text())
        return 0
    import bed_reader

    from simulations.data.genotypes import genotype_sites

    root = Path(args.out or tempfile.mkdtemp(prefix="bench_genotype_bed_"))
    npy, bed = root / "npy", root / "bed"
    npy.mkdir(parents=True, exist_ok=True)
    bed.mkdir(parents=True, exist_ok=True)
    sites = list(genotype_sites(args.sites, args.dimension, populations=args.populations, seed=0))
    for i, G in enumerate(sites):
        np.save(npy / f"partition_{i}.npy", G)
        bed_reader.to_bed(bed / f"partition_{i}.bed", G)
    m, shape = len(sites), f"{sum(args.sites)} people x {args.dimension} variants, {len(sites)} sites"
    wall_npy = _run(npy, root / "run-npy", _config(npy, m, args, "false"))
    wall_bed = _run(bed, root / "run-bed", _config(bed, m, args, "false"))
    print(f"{shape}, fedpower {args.rounds} rounds: int8 .npy {wall_npy:.1f} s, .bed {wall_bed:.1f} s, "
          f"ratio .bed / int8 {wall_bed / wall_npy:.2f}")
    if args.missing > 0:
        rng = np.random.default_rng(1)
        missing = root / "missing"
        missing.mkdir(exist_ok=True)
        sites = [G.astype(np.float32) for G in sites]
        for i, G in enumerate(sites):
            G[rng.random(G.shape) < args.missing] = np.nan
            bed_reader.to_bed(missing / f"partition_{i}.bed", G)
        wall = _run(missing, root / "run-hwe", _config(missing, m, args, "hwe"))
        print(f'{shape}, {100 * args.missing:g} % missing calls, scale = "hwe": fedpower {wall:.1f} s')
        if shutil.which("plink2"):
            found = plink2_agreement(missing, [G.astype(np.float64) for G in sites], root / "run-hwe", args.rank)
            print("  plink2 --pca, per PC: 1 - |correlation| " + ", ".join(f"{1 - v:.1e}" for v in found["correlation"])
                  + "; eigenvalue ratio - 1 " + ", ".join(f"{v - 1:+.1e}" for v in found["eigenvalue ratio"])
                  + " (without plink2's diagonal " + ", ".join(f"{v - 1:+.1e}" for v in
                                                              found["eigenvalue ratio, without the diagonal"]) + ")")
        else:
            print("  plink2 is not installed: no comparison")
    return 0


if __name__ == "__main__":
    sys.exit(main())
