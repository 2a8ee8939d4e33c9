"""Federated ancestry PCA at biobank size: four sites' ``.bed`` files against ``plink2 --pca approx`` on the pooled
file.

Genotypes come from :mod:`simulations.data.admixed_bed` (admixed Balding-Nichols frequencies of three ancestral
populations with ``F`` 0.02, 0.05, 0.1, Dirichlet ancestry proportions per person around each site's mix, LD
blocks of 50 variants, 1 % missing calls), written straight to four site files and, for plink2 only, a pooled
one. For each size given (``--size PEOPLExVARIANTS``, in order), in one run and each in its own process, with
the pieces of :mod:`simulations.benchmarks.bench_plink2` (its processes, its workers, its plink2 runs):

* **fedspectral**: ``simulations.compare`` over the four site files (``center = true``, ``scale = "hwe"``,
  ``--strategy`` with ``--rank`` kept of ``--iteration-rank`` columns, ``stop-tol`` on the kept components), BLAS
  at 2 threads; then ``transform`` of each site's file for the scores (timed apart);
* ``plink2 --pca approx <rank>`` on the pooled file, ``--threads 2``, with each BLAS found (reference BLAS and
  OpenBLAS, :func:`~simulations.benchmarks.bench_plink2.blas_choices`); exact ``plink2 --pca`` only up to
  ``--exact-max-people`` (its time grows as people^2 x variants; at 100,000 people it is not affordable here);
* each site's pass alone in a fresh process: its peak resident memory against its ``.bed`` and ``d r``.

Accuracy: ``1 - |r|`` of each PC of fedspectral (and of plink2 approx with each BLAS) against exact plink2 where it
ran, otherwise against plink2 approx with the last BLAS (OpenBLAS where present); and ``R^2`` of each drawn
ancestry proportion on PC1-2 (a linear fit with intercept): three populations make two PCs of structure, the
rest is the LD-inflated bulk, not determined to 1e-5 by any method.

Results go to ``--out`` (default a new ``bench-runs/bench_biobank-<UTC time>``): ``bench_biobank.json`` holds one
entry per size, and a later run into the same folder replaces the sizes it runs and keeps the others;
``bench_biobank.md`` is made from all of them. Data go to ``--data`` (a temporary folder by default), one folder
per size, removed after that size's runs unless ``--keep-data``.
Usage::

    python -m simulations.benchmarks.bench_biobank --size 10000x10000 --size 20000x20000 [--data DIR] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from simulations.benchmarks import out_folder
from simulations.benchmarks.bench_plink2 import (_config, _exact_plink2, _measured, _plink2, _rounds, blas_choices,
                                                 correlations)
from simulations.data.admixed_bed import FST, site_sizes, write_admixed_bed

__all__ = ["admixture_fit", "main", "markdown", "parse_size"]

NAME = "bench_biobank"
WORKER = [sys.executable, "-m", "simulations.benchmarks.bench_plink2", "--worker"]
"""bench_plink2's workers: the compare run, the transform of every site, one site's pass."""
THREADS = {"OPENBLAS_NUM_THREADS": "2", "OMP_NUM_THREADS": "2", "MKL_NUM_THREADS": "2"}


def parse_size(text: str) -> tuple[int, int]:
    """``"PEOPLExVARIANTS"`` (e.g. ``100000x100000``) as ``(people, variants)``; at least 16 people, 1 variant."""
    try:
        people, variants = (int(part) for part in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--size {text!r}: expected PEOPLExVARIANTS, e.g. 100000x100000") from None
    if people < 16 or variants < 1:
        raise argparse.ArgumentTypeError(f"--size {text!r}: at least 16 people and 1 variant")
    return people, variants


def admixture_fit(scores: np.ndarray, q: np.ndarray) -> list[float]:
    """``R^2`` of each column of ``q`` (ancestry proportions) on the columns of ``scores`` with an intercept.

    Parameters
    ----------
    scores : ndarray of shape (n, k)
    q : ndarray of shape (n, populations)

    Returns
    -------
    list of float
        One per population.
    """
    design = np.column_stack([np.ones(len(scores)), scores])
    fitted = design @ np.linalg.lstsq(design, q, rcond=None)[0]
    return [float(1 - ((q[:, k] - fitted[:, k]) ** 2).sum() / ((q[:, k] - q[:, k].mean()) ** 2).sum())
            for k in range(q.shape[1])]


def _generated(data: Path, people: int, variants: int, seed: int) -> dict:
    """The generator's summary: the files in ``data`` when an earlier run with the same settings wrote them
    (``data/generator.json``), else written now."""
    settings = {"people": people, "variants": variants, "seed": seed}
    record = data / "generator.json"
    if record.is_file():
        kept = json.loads(record.read_text())
        if kept.get("settings") == settings:
            return kept["made"]
    made = write_admixed_bed(data, people, variants, pooled=True, seed=seed,
                             progress=lambda line: print(line, file=sys.stderr, flush=True))
    record.write_text(json.dumps({"settings": settings, "made": made}) + "\n")
    return made


def run_size(args, people: int, variants: int, data: Path) -> dict:
    """Every measurement of one size (the files in ``data``, written first when absent)."""
    made = _generated(data, people, variants, args.seed)
    load_start = os.getloadavg()
    work = data / "work"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    (work / "c.toml").write_text(_config(data / "sites", args, args.stop_tol))
    fed = _measured(WORKER + ["fedspectral", str(work / "c.toml"), str(work / "compare")], THREADS)
    (model_path,) = sorted((work / "compare" / "estimates").glob("*.pca.npz"))
    scored = _measured(WORKER + ["transform", str(model_path), str(data), str(work)], THREADS)
    libraries = blas_choices()
    approxes = {blas: _plink2(data / "pooled", work, args.rank, approx=True, library=library,
                              tag="-" + blas.replace(" ", "-"))
                for blas, library in libraries.items()}
    last = list(libraries)[-1]  # OpenBLAS where present: the fastest
    exact = None
    if people <= args.exact_max_people:
        exact = _exact_plink2(data, args.rank, last, libraries[last])
    sites = []
    for i in range(len(made["sites"])):
        site = _measured(WORKER + ["site", str(model_path), str(data / "sites" / f"partition_{i}.bed"),
                                   str(args.iteration_rank)], THREADS)
        sites.append({"site": i, "people": made["sites"][i], **site["marked"][-1], "process_peak_mb": site["peak_mb"],
                      "bed_mb": (data / "sites" / f"partition_{i}.bed").stat().st_size / 2**20})
    scores = np.load(work / "scores.npy")[:, : args.rank]
    q = np.load(data / "admixture.npy").astype(float)
    reference = exact if exact is not None else approxes[last]
    vectors = reference["vectors"][:, : args.rank]
    methods = [{"method": "fedspectral (4 sites, in-process engine)", "wall": fed["wall"], "cpu": fed["cpu"],
                "peak_mb": fed["peak_mb"], "one_minus_r": [1 - c for c in correlations(scores, vectors)],
                "admixture_r2": admixture_fit(scores[:, :2], q)},
               {"method": "fedspectral + transform of every site", "wall": fed["wall"] + scored["wall"],
                "cpu": fed["cpu"] + scored["cpu"], "peak_mb": max(fed["peak_mb"], scored["peak_mb"]),
                "one_minus_r": [1 - c for c in correlations(scores, vectors)],
                "admixture_r2": admixture_fit(scores[:, :2], q)}]
    for blas, found in approxes.items():
        methods.append({"method": f"plink2 --pca approx (pooled, {blas})", "blas": blas, "wall": found["wall"],
                        "cpu": found["cpu"], "peak_mb": found["peak_mb"],
                        "one_minus_r": [1 - c for c in correlations(found["vectors"][:, : args.rank], vectors)],
                        "admixture_r2": admixture_fit(found["vectors"][:, :2], q)})
    if exact is not None:
        cached = exact["cached"]
        methods.append({"method": f"plink2 --pca (exact, pooled, {last}"
                                  f"{'; its run of ' + cached + ', kept with the data' if cached else ''})",
                        "wall": exact["wall"], "cpu": exact["cpu"], "peak_mb": exact["peak_mb"],
                        "one_minus_r": [0.0] * args.rank, "admixture_r2": admixture_fit(vectors[:, :2], q)})
    return {"people": people, "variants": variants, "sites": made["sites"], "missing": made["missing"],
            "generator_s": made["seconds"], "rank": args.rank, "iteration_rank": args.iteration_rank,
            "strategy": args.strategy, "stop_tol": args.stop_tol, "rounds": _rounds(work / "compare"),
            "reference": f"exact plink2 ({last})" if exact is not None else f"plink2 approx ({last})",
            "ratio_to": list(libraries), "methods": methods, "site_passes": sites,
            "pooled_bed_mb": (data / "pooled.bed").stat().st_size / 2**20,
            "load_start": load_start, "load_end": os.getloadavg(),
            "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}


def markdown(results: list[dict]) -> str:
    """The benchmark's tables (markdown): one row per size and method, then each site's pass."""
    first = results[0]
    fst = ", ".join(f"{f:g}" for f in FST)
    lines = [f"Admixed Balding-Nichols genotypes (`simulations/data/admixed_bed.py`: 3 ancestral populations, F "
             f"{fst}; Dirichlet ancestry per person around each site's mix; LD blocks of 50 variants; 1 % missing "
             f"calls), four sites; fedspectral: {first['strategy']}, scale = \"hwe\", center, rank {first['rank']} "
             f"of iteration-rank {first['iteration_rank']}, stop-tol {first['stop_tol']:g}; 2 threads each. "
             f"**The machine (2 cores) was shared with other jobs during these runs**: the load average (1 min) "
             f"at the start and end of each size is in the last column. `1 - |r|` per PC is against the reference "
             f"named in the size's first row (exact plink2 where affordable); R^2 is that of each drawn ancestry "
             f"proportion on PC1-2 (linear, with intercept); three populations make two PCs of structure, PC3 "
             f"and later lie in the bulk.", "",
             "| size (people x variants) | method | wall (s) | wall / plink2 approx (" + " / ".join(first["ratio_to"])
             + ") | CPU (s) | peak RSS of the process (MB) | " + " | ".join(f"PC{j + 1} 1 - abs(r)" for j in
                                                                          range(first["rank"]))
             + " | R^2 of ancestry on PC1-2 | rounds; reference; load at start / end |",
             "|---|---|---|---|---|---|" + "---|" * first["rank"] + "---|---|"]
    for r in results:
        approx = {m["blas"]: m for m in r["methods"] if "blas" in m}
        for i, m in enumerate(r["methods"]):
            ratios = " / ".join(f"{m['wall'] / approx[blas]['wall']:.2f}" for blas in r["ratio_to"])
            note = (f"{r['rounds']} rounds; vs {r['reference']}; load {r['load_start'][0]:.1f} / "
                    f"{r['load_end'][0]:.1f}" if i == 0 else "")
            lines.append(f"| {r['people']:,} x {r['variants']:,} | {m['method']} | {m['wall']:.1f} | {ratios} | "
                         f"{m['cpu']:.1f} | {m['peak_mb']:.0f} | "
                         + " | ".join(f"{v:.1e}" for v in m["one_minus_r"])
                         + f" | {' / '.join(f'{v:.3f}' for v in m['admixture_r2'])} | {note} |")
        if not any(m["method"].startswith("plink2 --pca (exact") for m in r["methods"]):
            lines.append(f"| {r['people']:,} x {r['variants']:,} | plink2 --pca (exact) | not run: over "
                         f"--exact-max-people | | | |" + " |" * first["rank"] + " | |")
    lines += ["", "Each site alone, in a fresh process (bench_plink2's site pass): open its `.bed` and compute one "
              "product `A_i Z` of iteration-rank columns, centred and scaled; peak resident memory (`ru_maxrss`, "
              "which counts the touched pages of the memory-mapped file) against the process's before it opened "
              "the file (imports, the model and `Z`):", "",
              "| size | site | people | `.bed` (MB) | RSS before opening (MB) | peak (MB) | added - `.bed` (MB) | "
              "`d r` float64 (MB) | (added - `.bed`) / (`d r`) | pass (s) |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        dr = r["variants"] * r["iteration_rank"] * 8 / 2**20
        for s in r["site_passes"]:
            extra = s["whole_peak_mb"] - s["before_mb"] - s["bed_mb"]
            lines.append(f"| {r['people']:,} x {r['variants']:,} | {s['site']} | {s['people']:,} | {s['bed_mb']:.1f} | "
                         f"{s['before_mb']:.0f} | {s['whole_peak_mb']:.0f} | {extra:.1f} | {dr:.1f} | "
                         f"{extra / dr:.2f} | {s['pass']:.1f} |")
    lines += ["", "Generator seconds (not timed above; four site files and the pooled one, written once) and when "
              "each size's runs ended: "
              + "; ".join(f"{r['people']:,} x {r['variants']:,}: {r['generator_s']:.0f} s (ended {r['when']})"
                          for r in results) + "."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=parse_size, action="append", required=True,
                        help="PEOPLExVARIANTS, e.g. 100000x100000; repeat for several, run in order")
    parser.add_argument("--rank", type=int, default=4)
    parser.add_argument("--iteration-rank", type=int, default=8)
    parser.add_argument("--strategy", default="krylov", choices=("krylov", "power", "fedpower"))
    parser.add_argument("--local-steps", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=40, help="at most; stop-tol may stop sooner")
    parser.add_argument("--stop-tol", type=float, default=1e-6)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--exact-max-people", type=int, default=10_000,
                        help="exact plink2 --pca only up to this many people (its time grows as people^2 x "
                             "variants); above it the PCs are compared with plink2 approx's")
    parser.add_argument("--data", type=Path, default=None,
                        help="where each size's files go, as DATA/<people>x<variants> (default: a temporary "
                             "folder); reused by a later run with the same settings when kept")
    parser.add_argument("--keep-data", action="store_true", help="keep each size's files after its runs")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.rank < 2 or args.iteration_rank < args.rank:
        parser.error("--rank must be at least 2 (PC1-2 are compared) and --iteration-rank at least --rank")
    if shutil.which("plink2") is None:
        parser.error("plink2 is not installed")
    out = out_folder(NAME, args.out)
    out.mkdir(parents=True, exist_ok=True)
    root = args.data or Path(tempfile.mkdtemp(prefix="bench_biobank_"))
    record = out / f"{NAME}.json"
    results = json.loads(record.read_text()) if record.is_file() else []
    try:
        for people, variants in args.size:
            data = root / f"{people}x{variants}"
            try:
                found = run_size(args, people, variants, data)
            finally:
                if not args.keep_data:
                    shutil.rmtree(data, ignore_errors=True)
            results = [r for r in results if (r["people"], r["variants"]) != (people, variants)] + [found]
            results.sort(key=lambda r: (r["people"] * r["variants"], r["people"]))
            record.write_text(json.dumps(results, indent=2) + "\n")
            table = markdown(results)
            (out / f"{NAME}.md").write_text(table)
            print(table, flush=True)
    finally:
        if args.data is None:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
