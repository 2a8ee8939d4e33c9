"""Rounds and wall time with and without ``secure-aggregation`` (timings are machine-dependent).

Set-ups (``--setups``):

* ``model1``: ``power`` over the Model I data, ``m`` clients (``--clients``) of 1,000 rows, ``d`` columns
  (``--dim``), rank 3, ``r = 5``, ``center``, row-normalised;
* ``fedpower``: the same with ``fedpower`` (4 local steps, decayed; the secure form aligns on the clients);
* ``genotypes``: ``power`` over four ``.bed`` sites (``--geno-sites`` people, by default 300, 250, 350, 300;
  ``--geno-dim`` variants, 3 populations) with 1 % missing calls and ``scale = "hwe"``, rank 2, ``r = 2``,
  ``secagg-clip`` 1e12;

each for ``--rounds`` rounds (the secure run also makes its discovery sums, the row counts, the row sums and the
sums of squares, and the summary as SecAgg+ exchanges, in the ``SecAgg+ exchanges`` column), on each engine
(``--engines``):

* ``local``: the in-process engine (:func:`simulations.engines.local.run_local`), the best of ``--repeat`` runs;
* ``ray``: Flower's Ray simulation engine (:func:`simulations.engines.ray.run_ray`), one run in a fresh process
  each (Ray's start-up included, as a user sees it);
* ``deploy``: a SuperLink and ``m`` SuperNodes on loopback (``python -m simulations.engines.deploy``), one run
  each, the processes' start-up included (``model1`` and ``fedpower`` only: its node files are ``.npy``).

It prints and writes (``secure_power.md`` and ``.csv`` in ``--out``, by default a new folder, see
:func:`simulations.benchmarks.out_folder`) the plain and the secure wall time, their ratio, the sin theta between
the two runs' components and the largest relative difference of their explained variances. Usage::

    python -m simulations.benchmarks.bench_secure_power [--engines local ray deploy] [--setups model1 genotypes]
        [--clients 4 8] [--dim 60 200] [--geno-dim 400] [--geno-sites 300 250 350 300] [--rounds 20] [--repeat 2]
        [--out FOLDER]
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from fl_strategies.files.plain_files import write_file

from . import out_folder

__all__ = ["main", "SETUPS"]

SETUPS = ("model1", "fedpower", "genotypes")
"""The set-ups (module docstring)."""

GENOTYPE_SITES = (300, 250, 350, 300)
"""People per site of the ``genotypes`` set-up."""


def _overrides(setup: str, m: int, dim: int, rounds: int, secure: bool, data: Path | None) -> dict:
    if setup == "genotypes":
        over = {"strategy": "power", "dataset": str(data), "num-clients": m, "rank": 2,
                "iteration-rank": 2, "center": True, "scale": "hwe", "row-normalize": False}
        if secure:
            over["secagg-clip"] = 1e12
    else:
        over = {"strategy": "power", "num-clients": m, "num-samples": 1000 * m, "dimension": dim, "rank": 3,
                "iteration-rank": 5, "row-normalize": True, "center": True}
        if setup == "fedpower":
            over.update({"strategy": "fedpower", "local-steps": 4, "schedule": "decayed"})
    return dict(over, **{"num-server-rounds": rounds, "secure-aggregation": "true" if secure else "false"})


def write_genotype_sites(folder: Path, dim: int, missing: float = 0.01, seed: int = 11,
                         sites: tuple[int, ...] = GENOTYPE_SITES) -> Path:
    """``.bed`` sites of ``sites`` people and ``dim`` variants with ``missing`` of the calls missing, as
    ``folder/partition_<i>.bed``; returns ``folder``."""
    import bed_reader

    from simulations.data.genotypes import genotype_sites

    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    for i, G in enumerate(genotype_sites(sites, dim, populations=3, seed=seed)):
        G = G.astype(np.float32)
        G[rng.random(G.shape) < missing] = np.nan
        bed_reader.to_bed(folder / f"partition_{i}.bed", G)
    return folder


def _local(overrides: dict, repeat: int) -> tuple[float, dict]:
    from simulations.engines import fused_run_config
    from simulations.engines.local import run_local

    best, strategy = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        strategy = run_local(fused_run_config(overrides))
        best = min(best, time.perf_counter() - start)
    return best, strategy.model


def _model(folder: Path) -> dict:
    with np.load(folder / "pca.npz") as model:
        return {key: model[key] for key in ("components", "explained_variance")}


def _ray(overrides: dict) -> tuple[float, dict]:
    with tempfile.TemporaryDirectory() as tmp:
        cfg = dict(overrides, **{"results-dir": tmp})
        code = "import sys, json; from simulations.engines.ray import run_ray; run_ray(json.loads(sys.argv[1]))"
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", code, json.dumps(cfg)], check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        wall = time.perf_counter() - start
        return wall, _model(Path(tmp))


def _run_config(overrides: dict) -> str:
    """``overrides`` as ``flwr run --run-config`` text."""
    def value(v):
        return str(v).lower() if isinstance(v, bool) else json.dumps(v) if isinstance(v, str) else repr(v)
    return " ".join(f"{key}={value(v)}" for key, v in overrides.items())


def _deploy(overrides: dict) -> tuple[float, dict]:
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "simulations.engines.deploy", "--run-config", _run_config(overrides),
                        "--out", tmp], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wall = time.perf_counter() - start
        return wall, _model(Path(tmp))


def compare(plain: dict, secure: dict) -> tuple[float, float]:
    """``(sin theta, max relative difference of the explained variances)`` of two PCA models."""
    from fl_strategies.kernels.linalg import subspace_distance

    a, b = np.asarray(plain["explained_variance"]), np.asarray(secure["explained_variance"])
    return (subspace_distance(np.asarray(secure["components"]).T, np.asarray(plain["components"]).T),
            float(np.max(np.abs(a - b) / np.abs(a))))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engines", nargs="+", default=["local"], choices=("local", "ray", "deploy"))
    parser.add_argument("--setups", nargs="+", default=["model1"], choices=SETUPS)
    parser.add_argument("--clients", nargs="+", type=int, default=[4, 8])
    parser.add_argument("--dim", nargs="+", type=int, default=[60, 200])
    parser.add_argument("--geno-dim", type=int, default=400)
    parser.add_argument("--geno-sites", nargs="+", type=int, default=list(GENOTYPE_SITES),
                        help="people per .bed site of the genotypes set-up")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--out", default=None, help="folder of the tables (default: a new one, bench-runs/...)")
    args = parser.parse_args(argv)
    folder = out_folder("bench_secure_power", args.out)
    folder.mkdir(parents=True, exist_ok=True)
    header = ["engine", "set-up", "strategy", "m", "d", "rounds", "SecAgg+ exchanges", "plain (s)", "secure (s)",
              "secure / plain", "sin theta", "explained variance, max rel. diff."]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    rows = []
    print("\n".join(lines), flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        data = write_genotype_sites(Path(tmp) / "bed", args.geno_dim,
                                    sites=tuple(args.geno_sites)) if "genotypes" in args.setups else None
        for engine in args.engines:
            for setup in args.setups:
                if engine == "deploy" and setup == "genotypes":
                    continue
                shapes = ([(len(args.geno_sites), args.geno_dim)] if setup == "genotypes"
                          else [(m, dim) for m in args.clients for dim in args.dim])
                for m, dim in shapes:
                    runs = {}
                    for secure in (False, True):
                        over = _overrides(setup, m, dim, args.rounds, secure, data)
                        runs[secure] = (_local(over, args.repeat) if engine == "local" else
                                        _ray(over) if engine == "ray" else _deploy(over))
                    (plain, P), (secure, S) = runs[False], runs[True]
                    sin, rel = compare(P, S)
                    exchanges = args.rounds + 4  # discovery: the row counts, the sums, the squares; the summary
                    row = [engine, setup, over["strategy"], m, dim, args.rounds, exchanges, f"{plain:.2f}",
                           f"{secure:.2f}", f"{secure / plain:.2f}", f"{sin:.1e}", f"{rel:.1e}"]
                    rows.append(row)
                    lines.append("| " + " | ".join(map(str, row)) + " |")
                    print(lines[-1], flush=True)
    command = "python -m simulations.benchmarks.bench_secure_power " + shlex.join(
        argv if argv is not None else sys.argv[1:])
    write_file(folder / "secure_power.md", command + "\n\n" + "\n".join(lines) + "\n")
    table = io.StringIO()
    writer = csv.writer(table, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    write_file(folder / "secure_power.csv", table.getvalue())
    return 0


if __name__ == "__main__":
    sys.exit(main())
