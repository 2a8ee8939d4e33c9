"""``dp-krylov`` over ``.bed`` genotype sites at genomic width, against a non-private reference on the same people.

``python -m simulations.benchmarks.bench_dp_krylov_bed DATA [--epsilons 4 1] [--plink2 EIGENVEC] [--out DIR]``

``DATA`` is a folder written by ``python -m simulations.data.admixed_bed DATA --people 100000 --variants 20000
--pooled --missing 0 --seed 0`` (four sites ``sites/partition_<i>.bed`` of admixed people, and ``pooled.bed``,
everyone in the same order; no missing call: a private run never imputes). For each epsilon the command runs
``dp-krylov`` with the advised settings (``row-normalize``, ``center``, ``iteration-rank = 0``: blocks of 10
columns, ``num-server-rounds = 10`` products, ``dp-calibration = "paper"``, delta = 1e-6), rank 3, in the
in-process engine (noise shares summed in the clear, ``dp-channel = "plaintext"``: the same sum and noise as
through SecAgg+), each site's rows read from its ``.bed`` as unit rows
(:class:`~fl_strategies.kernels.unit_genotypes.UnitGenotypes`: no ``d x d`` and no ``s x d`` array anywhere).

The reference is the same matrix without noise: the centred unit rows of ``pooled.bed`` (exact mean), its top
components by block Krylov on the pooled file (:data:`REFERENCE_PRODUCTS` products of 10 columns, Rayleigh-Ritz,
the arithmetic of ``dp-krylov`` without noise), their relative residuals ``||C v - lambda v|| / lambda`` stated.
Figures per run: sin theta between the top 1, 2 and 3 components and the reference's, the |r| of each PC's scores
(everyone's, ``U v``) with the reference's, the wall seconds, and the epsilon the run's privacy record states.
With ``--plink2 EIGENVEC`` (``plink2 --bfile DATA/pooled --pca approx 3``: its own scaling of the genotypes) the
|r| of each PC's scores with plink2's as well. Writes ``dp_krylov_bed.md`` and ``.csv`` to ``DIR`` (default
``simulations/benchmarks/results/bench_dp_krylov_bed``).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from fl_strategies.files.data_files import open_samples
from fl_strategies.files.plain_files import write_file
from fl_strategies.kernels.linalg import subspace_distance
from fl_strategies.kernels.unit_genotypes import UnitGenotypes
from fl_strategies.privacy import dp_krylov_noise as dk
from simulations.engines import fused_run_config
from simulations.engines.local import run_local

K = 3
P = 10
DELTA = 1e-6
REFERENCE_PRODUCTS = 8
SETTINGS = {"strategy": "dp-krylov", "rank": K, "row-normalize": True, "center": True, "delta": DELTA,
            "iteration-rank": 0, "num-server-rounds": 10, "dp-channel": "plaintext", "seed": 0}
DEFAULT_OUT = Path(__file__).with_name("results") / "bench_dp_krylov_bed"


def centred_product(U: UnitGenotypes, mu: np.ndarray, Q: np.ndarray) -> np.ndarray:
    """``sum_i (u_i - mu)(u_i - mu)^T Q`` (d, r) on the file."""
    return dk.centre_product(U.product(Q), mu, Q, U.num_rows)


def reference(U: UnitGenotypes) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(components (d, K), eigenvalues (K,) of the centred sum, relative residuals (K,), mean (d,))``."""
    n = U.num_rows
    mu = U.stats()[0] / n
    Q = dk.initial_block(U.dimension, P, np.random.default_rng([0, 1]))
    blocks, products = [], []
    for t in range(REFERENCE_PRODUCTS):
        Y = centred_product(U, mu, Q)
        blocks.append(Q)
        products.append(Y)
        basis = np.hstack(blocks)
        if t < REFERENCE_PRODUCTS - 1:
            Q = dk.next_block(basis, Y, P)
    Z, values = dk.rayleigh_ritz(np.hstack(blocks), np.hstack(products), P)
    V, lam = Z[:, :K], values[:K]
    R = centred_product(U, mu, V) - V * lam
    return V, lam, np.linalg.norm(R, axis=0) / lam, mu


def scores(U: UnitGenotypes, V: np.ndarray) -> np.ndarray:
    """Everyone's scores ``U V`` (n, r) (uncentred: a correlation does not see the shift), one read."""
    return U.bed.left(V) * U.inverse[:, None]


def abs_r(a: np.ndarray, b: np.ndarray) -> list[float]:
    """|Pearson r| of each column of ``a`` with the same column of ``b``."""
    return [abs(float(np.corrcoef(a[:, k], b[:, k])[0, 1])) for k in range(a.shape[1])]


def read_eigenvec(path: Path) -> np.ndarray:
    """plink2's ``.eigenvec``: the PC columns (n, K)."""
    lines = path.read_text().splitlines()
    header = lines[0].split()
    first = next(i for i, name in enumerate(header) if name == "PC1")
    return np.array([[float(x) for x in line.split()[first:first + K]] for line in lines[1:]])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("data", type=Path)
    parser.add_argument("--epsilons", type=float, nargs="+", default=[4.0, 1.0])
    parser.add_argument("--plink2", type=Path, default=None, help="plink2 --pca approx's .eigenvec of pooled.bed")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    pooled = UnitGenotypes(open_samples(str(args.data / "pooled.bed"), "pooled.bed"))
    n, d = pooled.num_rows, pooled.dimension
    sites = sorted((args.data / "sites").glob("partition_*.bed"))
    people = [open_samples(str(f), f.name).num_rows for f in sites]
    start = time.perf_counter()
    V_ref, lam, residual, _ = reference(pooled)
    ref_seconds = time.perf_counter() - start
    S_ref = scores(pooled, V_ref)
    plink = read_eigenvec(args.plink2) if args.plink2 else None
    command = (f"python -m simulations.benchmarks.bench_dp_krylov_bed DATA --epsilons "
               + " ".join(f"{e:g}" for e in args.epsilons) + (" --plink2 EIGENVEC" if plink is not None else ""))
    lines = [f"Produced by `{command}` (DATA: `python -m simulations.data.admixed_bed DATA --people {n} --variants "
             f"{d} --pooled --missing 0 --seed 0`): {len(sites)} `.bed` sites of {', '.join(map(str, people))} "
             f"people, d = {d} variants; dp-krylov rank {K}, its advised settings (blocks of {P} columns, 10 "
             f"products), delta = {DELTA:g}, in-process, noise shares summed in the clear; two shared cores, "
             "timings noisy.\n",
             f"Reference: the same centred unit rows without noise, block Krylov on pooled.bed "
             f"({REFERENCE_PRODUCTS} products of {P} columns, {ref_seconds:.0f} s); its eigenvalues over n "
             + ", ".join(f"{x / n:.3g}" for x in lam) + "; relative residuals "
             + ", ".join(f"{x:.1e}" for x in residual) + ".\n"]
    if plink is not None:
        lines.append("The reference's per-PC |r| with plink2 --pca approx: "
                     + ", ".join(f"{x:.3f}" for x in abs_r(S_ref, plink)) + ".\n")
    lines += ["| epsilon | delta | people | d | sin theta PC1 | PC1-2 | PC1-3 | corr PC1 | PC2 | PC3 | "
              + ("corr plink2 PC1 | PC2 | PC3 | " if plink is not None else "") + "seconds |",
              "|---" * (11 + 3 * (plink is not None)) + "|"]
    csv = ["epsilon,delta,people,d,sin1,sin12,sin123,r1,r2,r3,seconds"]
    for eps in args.epsilons:
        cfg = fused_run_config({**SETTINGS, "num-clients": len(sites), "dataset": str(args.data / "sites"),
                                "epsilon": eps})
        start = time.perf_counter()
        strategy = run_local(cfg)
        seconds = time.perf_counter() - start
        if strategy.failure:
            raise RuntimeError(f"epsilon {eps:g}: {strategy.failure}")
        V = strategy.model["components"].T
        spent = strategy.privacy_record()["epsilon"]
        sines = [subspace_distance(V[:, :k], V_ref[:, :k]) for k in range(1, K + 1)]
        S = scores(pooled, V)
        r = abs_r(S, S_ref)
        cells = [f"{spent:g}", f"{DELTA:g}", f"{n}", f"{d}", *(f"{x:.3f}" for x in sines), *(f"{x:.3f}" for x in r)]
        if plink is not None:
            cells += [f"{x:.3f}" for x in abs_r(S, plink)]
        lines.append("| " + " | ".join(cells + [f"{seconds:.0f}"]) + " |")
        csv.append(",".join([f"{spent:g}", f"{DELTA:g}", str(n), str(d), *(f"{x:.6f}" for x in sines + r),
                             f"{seconds:.1f}"]))
        print(lines[-1], flush=True)
        write_file(args.out / "dp_krylov_bed.md", "\n".join(lines) + "\n")
        write_file(args.out / "dp_krylov_bed.csv", "\n".join(csv) + "\n")


if __name__ == "__main__":
    main()
