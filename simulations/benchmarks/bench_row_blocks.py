"""What the size of a float64 row block costs: ``M^T (M Z)`` of a memory-mapped int8 genotype file, by block size.

A client streams its stored rows in float64 blocks (:class:`fl_strategies.kernels.rows.RowBlocks`); the block is
its float64 working set, so a smaller one lowers the peak memory by the difference. This times one product
``M^T (M Z)`` (``Z`` of ``--columns`` columns, one BLAS thread as in the in-process engine) of a synthetic int8
genotype file (:mod:`simulations.data.genotypes`) for each block size, the sizes interleaved over ``--repeats``
rounds in one process so that a change of the machine's load hits them alike, and prints the median time of
each and its ratio to the largest block's, with the largest difference from the largest block's product, and
writes it to ``--out`` (default: a new folder, :func:`simulations.benchmarks.out_folder`). Usage::

    python -m simulations.benchmarks.bench_row_blocks [--dimension 100000] [--rows 500] [--columns 4]
        [--block-mib 4 8 16 32] [--repeats 11] [--out simulations/benchmarks/results/bench_row_blocks]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from fl_strategies.files.plain_files import write_file
from simulations.benchmarks import out_folder

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dimension", type=int, default=100_000)
    parser.add_argument("--rows", type=int, default=500)
    parser.add_argument("--columns", type=int, default=4)
    parser.add_argument("--block-mib", type=float, nargs="+", default=[4.0, 8.0, 16.0, 32.0])
    parser.add_argument("--repeats", type=int, default=11)
    parser.add_argument("--out", type=Path, default=None,
                        help="folder of the tables (default: a new bench-runs/bench_row_blocks-<UTC time>; the committed ones only when named)")
    args = parser.parse_args(argv)
    args.out = out_folder("bench_row_blocks", args.out)
    from threadpoolctl import threadpool_limits

    from fl_strategies.kernels.rows import BLOCK_BYTES, RowBlocks
    from simulations.data.genotypes import write_genotype_sites

    sizes = sorted(args.block_mib)
    with tempfile.TemporaryDirectory(prefix="bench-row-blocks-") as tmp:
        (path,) = write_genotype_sites(Path(tmp), [args.rows], args.dimension, seed=0)
        rows = np.load(path, mmap_mode="r")
        Z = np.linalg.qr(np.random.default_rng(0).standard_normal((args.dimension, args.columns)))[0]
        times: dict[float, list[float]] = {mib: [] for mib in sizes}
        products: dict[float, np.ndarray] = {}
        with threadpool_limits(limits=1, user_api="blas"):
            RowBlocks(rows).product(Z)  # the file's pages in the page cache before any timing
            for _ in range(args.repeats):
                for mib in sizes:
                    blocks = RowBlocks(rows, block_bytes=int(mib * 2 ** 20))
                    start = time.perf_counter()
                    products[mib] = blocks.product(Z)
                    times[mib].append(time.perf_counter() - start)
    largest = sizes[-1]
    reference = np.median(times[largest])
    scale = np.max(np.abs(products[largest]))
    stored_mb = args.rows * args.dimension / 1e6
    lines = [f"M^T (M Z) of one int8 file: {args.rows} rows x d = {args.dimension:,} ({stored_mb:.0f} MB as stored), "
             f"Z of {args.columns} columns, one BLAS thread; median of {args.repeats} interleaved "
             f"repeats; the library's block: {BLOCK_BYTES / 2 ** 20:g} MiB", "",
             "| block (MiB) | rows per block | float64 block (MB) | product (s) | time / largest block's | "
             "max rel. difference from the largest block's product |", "|---|---|---|---|---|---|"]
    for mib in sizes:
        per_block = max(1, int(mib * 2 ** 20) // (8 * args.dimension))
        difference = float(np.max(np.abs(products[mib] - products[largest])) / scale)
        lines.append(f"| {mib:g} | {per_block} | {8 * min(per_block, args.rows) * args.dimension / 1e6:.1f} | "
                     f"{np.median(times[mib]):.3f} | {np.median(times[mib]) / reference:.2f} | {difference:.1e} |")
    table = "\n".join(lines)
    print(table)
    args.out.mkdir(parents=True, exist_ok=True)
    write_file(args.out / "bench_row_blocks.md", table + "\n")
    print(f"table in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
