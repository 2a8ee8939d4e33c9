"""Per-round cost of the engines against the arithmetic they carry, for 10 to 10,000 clients.

FedPower with full participation and p = 1 on ``m`` clients of the lazy
Model I data (``fedpower-model1-lazy``, ``rows`` x ``dim`` blocks, engine
discovery). For each ``m`` and each of

* ``numpy``: the same arithmetic in a plain loop (``s_i A_i Z`` per client on
  the same cached ``A_i``, the sum and the QR): the floor;
* ``numpy-rows``: the loop a client without the cached ``d x d`` matrix would
  do, ``M_i^T (M_i Z)`` on its ``rows x dim`` block (the floor when the
  clients hold their blocks, the "1,000 x 100 blocks" of the target); shown
  beside, the ratios are to ``numpy``;
* ``local``: the in-process engine (Flower's Strategy / NumPyClient path through
  :class:`simulations.engines.local.LocalGrid`);
* ``ray``: Flower's Ray simulation engine (:func:`simulations.engines.ray.run_ray`);

it runs a fresh Python process (so that memory is measured per engine) and
records the mean wall time of rounds 2.. (round 1 includes building each
client's ``A_i`` and, for Ray, starting the actors) and the peak resident
memory of the process tree (:class:`simulations.engines.ray.PeakMemory`). It
writes ``bench_scale.csv``, ``bench_scale.md`` (ratios to the floor) and
``bench_scale.png`` to ``--out`` (default: a new folder, :func:`simulations.benchmarks.out_folder`). Usage::

    python -m simulations.benchmarks.bench_scale [--clients 10 100 1000 10000] [--rows 1000] [--max-total-rows 1000000]
        [--dim 100] [--rounds 4]
        [--engines numpy local ray] [--out simulations/benchmarks/results/bench_scale]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from fl_strategies.files.plain_files import plain_frame, write_file
from simulations.benchmarks import out_folder

__all__ = ["main", "measure"]

ENGINES = ("numpy", "numpy-rows", "local", "ray")


def _overrides(m: int, rows: int, dim: int, rounds: int) -> dict:
    return {"num-clients": m, "num-samples": m * rows, "dimension": dim, "rank": 4, "iteration-rank": 5,
            "local-steps": 1, "schedule": "fixed", "num-server-rounds": rounds, "partitioner": "contiguous",
            "dataset": "fedpower-model1-lazy", "discovery": "engine", "clients-per-round": 0, "row-normalize": True}


def _timed_loop(step, dim: int, r: int, rounds: int) -> tuple[list[float], list[float]]:
    """Wall and CPU seconds of ``rounds`` calls ``Z = step(Z)`` from a fixed random ``d x r`` start.

    This thread alone runs the loop, with one BLAS thread, as the in-process engine's rounds do.
    """
    from threadpoolctl import threadpool_limits

    from fl_strategies.kernels.linalg import orth

    Z = orth(np.random.default_rng(0).standard_normal((dim, r)))
    times, cpus = [], []
    with threadpool_limits(limits=1, user_api="blas"):
        for _ in range(rounds):
            t, c = time.perf_counter(), time.thread_time()
            Z = step(Z)
            times.append(time.perf_counter() - t)
            cpus.append(time.thread_time() - c)
    return times, cpus


def measure(engine: str, m: int, rows: int, dim: int, rounds: int) -> dict:
    """Run one engine in this process; seconds per round (rounds 2..) and peak memory of the process tree."""
    import logging

    import flwr.common  # noqa: F401  (sets Flower's logger up before it is quieted)

    from fl_strategies.settings.config import validate_run_config
    from fl_strategies.kernels.linalg import orth

    from simulations.engines import fused_run_config
    from simulations.engines.ray import PeakMemory
    from simulations.data.federated_data import local_covariance

    logging.getLogger("flwr").setLevel(logging.WARNING)
    over = _overrides(m, rows, dim, rounds)
    start = time.perf_counter()
    with PeakMemory(interval=0.2, tree=engine == "ray") as peak:
        if engine == "numpy":
            cfg = validate_run_config(fused_run_config(over))
            covs = [local_covariance(cfg, pid) for pid in range(m)]
            times, cpus = _timed_loop(lambda Z: orth(sum(s * (A @ Z) for A, s in covs)), dim,
                                      cfg["iteration-rank"], rounds)
            cpu_per_round = float(np.mean(cpus[1:] or cpus))
        elif engine == "numpy-rows":
            from simulations.data.federated_data import client_rows

            cfg = validate_run_config(fused_run_config(over))
            blocks = [client_rows(cfg, pid) for pid in range(m)]
            times, cpus = _timed_loop(lambda Z: orth(sum(M.T @ (M @ Z) for M in blocks)), dim,
                                      cfg["iteration-rank"], rounds)
            cpu_per_round = float(np.mean(cpus[1:] or cpus))
        elif engine == "local":
            from simulations.engines.local import run_local

            run_local(fused_run_config({**over, "num-server-rounds": 1}))  # builds the caches (reference, A_i)
            cpu = time.process_time()
            run_local(fused_run_config({**over, "num-server-rounds": 1}))
            cpu_one = time.process_time() - cpu
            cpu = time.process_time()
            strategy = run_local(fused_run_config(over))
            cpu_per_round = (time.process_time() - cpu - cpu_one) / max(rounds - 1, 1)
            times = [r["wall_time"] for r in strategy.records[1:]]
        else:
            import pandas as pd

            from simulations.engines.ray import run_ray

            with tempfile.TemporaryDirectory() as out:
                run_ray({**over, "results-dir": out})
                times = pd.read_csv(f"{out}/rounds.csv")["wall_time"].iloc[1:].tolist()
            cpu_per_round = float("nan")  # spread over Ray's processes
    return {"engine": engine, "clients": m, "rows": rows, "dim": dim, "rounds": rounds,
            "first_round_s": times[0], "per_round_s": float(np.mean(times[1:])) if len(times) > 1 else times[0],
            "cpu_per_round_s": cpu_per_round, "total_s": time.perf_counter() - start,
            "peak_mem_gib": peak.bytes / 2**30}


def _run_child(engine: str, m: int, args) -> dict:
    """``measure`` in a fresh interpreter (its own memory peak and Ray instance)."""
    rows = min(args.rows, args.max_total_rows // m)
    cmd = [sys.executable, "-m", "simulations.benchmarks.bench_scale", "--one", engine, str(m), "--rows", str(rows),
           "--dim", str(args.dim), "--rounds", str(args.rounds)]
    env = {**os.environ, "FLWR_TELEMETRY_ENABLED": "0", "FLWR_DISABLE_UPDATE_CHECK": "1"}
    # its own process group: on a timeout Ray's processes (children of the child) are stopped with it
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=args.timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
        raise RuntimeError(f"{engine} at {m} clients took more than --timeout {args.timeout:g} s") from None
    lines = [ln for ln in stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"{engine} at {m} clients failed:\n{stderr[-2000:]}")
    return json.loads(lines[-1])


def write_outputs(rows: list[dict], out: Path, cmdline: str) -> None:
    """``bench_scale.csv``, ``bench_scale.md`` (per-round ms and ratio to the floor) and ``bench_scale.png``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pandas as pd

    from simulations.compare.report import save_figure

    out.mkdir(parents=True, exist_ok=True)
    df = pd.DataFrame(rows)
    floor = df[df.engine == "numpy"].set_index("clients")["per_round_s"]
    df["ratio_to_floor"] = [r.per_round_s / floor.get(r.clients, np.nan) for r in df.itertuples()]
    cpu_floor = df[df.engine == "numpy"].set_index("clients")["cpu_per_round_s"]
    df["cpu_ratio_to_floor"] = [r.cpu_per_round_s / cpu_floor.get(r.clients, np.nan) for r in df.itertuples()]
    rows_floor = df[df.engine == "numpy-rows"].set_index("clients")["per_round_s"]
    df["ratio_to_rows_floor"] = [r.per_round_s / rows_floor.get(r.clients, np.nan) for r in df.itertuples()]
    df["ms_per_message_over_floor"] = [1e3 * (r.per_round_s - floor.get(r.clients, np.nan)) / r.clients
                                       for r in df.itertuples()]
    write_file(out / "bench_scale.csv", plain_frame(df).to_csv(index=False))
    lines = [f"Produced by `{cmdline}`; FedPower, full participation, p = 1, dimension {rows[0]['dim']}; "
             "wall seconds per round are the mean of rounds 2..; CPU seconds per round (this process; not "
             "measured for Ray, whose work is spread over its processes) are less sensitive to other load on the "
             "machine; memory is the peak RSS of the process tree.", "",
             "| clients | rows per client | engine | ms / round (wall) | ratio to floor | ratio to numpy-rows | "
             "ms / round (CPU) | CPU ratio to floor | ms / message over floor (wall) | first round (s) | "
             "peak memory (GiB) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in df.sort_values(["clients", "engine"]).itertuples():
        over = "—" if r.engine == "numpy" else f"{r.ms_per_message_over_floor:.3f}"
        cpu = "—" if np.isnan(r.cpu_per_round_s) else f"{1e3 * r.cpu_per_round_s:.1f}"
        cpu_ratio = "—" if np.isnan(r.cpu_ratio_to_floor) else f"{r.cpu_ratio_to_floor:.1f}"
        to_rows = "—" if np.isnan(r.ratio_to_rows_floor) else f"{r.ratio_to_rows_floor:.2f}"
        lines.append(f"| {r.clients} | {r.rows} | {r.engine} | {1e3 * r.per_round_s:.1f} | {r.ratio_to_floor:.1f} | "
                     f"{to_rows} | {cpu} | {cpu_ratio} | {over} | {r.first_round_s:.2f} | {r.peak_mem_gib:.2f} |")
    write_file(out / "bench_scale.md", "\n".join(lines) + "\n")
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    for engine, g in df.groupby("engine"):
        g = g.sort_values("clients")
        ax1.loglog(g.clients, 1e3 * g.per_round_s, "o-", label=engine)
        ax2.semilogx(g.clients, g.peak_mem_gib, "o-", label=engine)
    blocks = df.groupby("rows")["clients"].agg(["min", "max"]).sort_values("min")
    rows_note = ", ".join(f"{rows} ({lo}-{hi} clients)" if lo != hi else f"{rows} ({lo})"
                          for rows, (lo, hi) in blocks.iterrows())
    ax1.set(xlabel=f"clients (all participate); rows per client: {rows_note}", ylabel="ms per round",
            title="per-round wall time")
    ax2.set(xlabel="clients", ylabel="GiB", title="peak memory (process tree)")
    ax1.legend()
    fig.tight_layout()
    save_figure(fig, out / "bench_scale.png", dpi=110)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(prog="python -m simulations.benchmarks.bench_scale", description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, nargs="+", default=[10, 100, 1000, 10000])
    parser.add_argument("--rows", type=int, default=1000, help="rows per client")
    parser.add_argument("--max-total-rows", type=int, default=1_000_000,
                        help="rows per client are min(rows, this // clients): the exact reference the server "
                             "computes streams all rows")
    parser.add_argument("--dim", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--engines", nargs="+", default=list(ENGINES), choices=ENGINES)
    parser.add_argument("--timeout", type=float, default=3600.0,
                        help="seconds per (engine, clients) run; one that takes longer is reported and skipped")
    parser.add_argument("--out", type=Path, default=None,
                        help="folder of the tables (default: a new bench-runs/bench_scale-<UTC time>; the committed ones only when named)")
    parser.add_argument("--one", nargs=2, metavar=("ENGINE", "CLIENTS"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(measure(args.one[0], int(args.one[1]), args.rows, args.dim, args.rounds)), flush=True)
        return 0
    args.out = out_folder("bench_scale", args.out)
    rows = []
    cmdline = ("python -m simulations.benchmarks.bench_scale " + " ".join(argv if argv is not None else sys.argv[1:])).strip()
    for m in args.clients:
        for engine in args.engines:
            try:
                row = _run_child(engine, m, args)
            except RuntimeError as ex:  # reported, the others still run
                print(f"{m:>6} clients  {engine:>5}: failed ({str(ex).splitlines()[0]})", flush=True)
                continue
            print(f"{m:>6} clients  {engine:>5}: {1e3 * row['per_round_s']:9.1f} ms/round  "
                  f"first round {row['first_round_s']:.2f} s  peak {row['peak_mem_gib']:.2f} GiB", flush=True)
            rows.append(row)
            write_outputs(rows, args.out, cmdline)  # after every row: a long run is never lost
    print((args.out / "bench_scale.md").read_text())
    print(f"tables in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
