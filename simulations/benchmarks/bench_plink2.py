"""Federated ancestry PCA over four sites' PLINK ``.bed`` files against ``plink2 --pca`` on the pooled file.

Genotypes are simulated with msprime under stdpopsim's ``OutOfAfrica_3G09`` demography (YRI, CEU, CHB; only the
model's demography and mutation rate: a uniform recombination rate of 1e-8 per base, no genetic map, so nothing
is downloaded), in independent segments of ``--segment`` bases until ``--variants`` biallelic variants of pooled
minor allele frequency at least ``--maf`` are collected. Without stdpopsim, msprime's own three-population island
model (sizes 10,000, migration 1e-4 per generation, the same mutation rate) stands in, and the table says so.
Four sites hold different ancestry mixes (:data:`MIXES`); a fraction ``--missing`` of all calls is set missing at
random; each site's people are written as ``sites/partition_<i>.bed`` (with ``.bim`` / ``.fam``; the folder
``compare`` reads) and everyone as ``pooled.bed``, by the 2-bit encoder here, one block of variants at a time.
With ``--data DIR`` the files are kept, and a later run with the same simulation settings uses them again
(``DIR/simulation.json``).

In one run, each in its own process and one after the other:

* **fedspectral**: ``simulations.compare`` over the four site files (``center = true``, ``scale = "hwe"``,
  ``--strategy`` with ``--rank`` kept of ``--iteration-rank`` columns, at most ``--rounds`` rounds, ``stop-tol``
  on the kept components), BLAS at 2 threads; then ``client_app``'s ``transform`` of each site's file for the
  scores (timed apart: ``plink2 --pca`` writes its scores as part of its run);
* ``plink2 --pca approx <rank>`` on the pooled file, ``--threads 2``, ``--plink2-runs`` times with each BLAS
  found, in turns, the fastest run of each in the table (:func:`blas_choices`: Debian's reference BLAS, which
  ``apt-get install plink2`` brings, and OpenBLAS when ``libopenblas0-pthread`` is installed; plink2's approx runs
  up to 1.8x faster with OpenBLAS on this machine, and its time with OpenBLAS varies most between runs), and
  exact ``plink2 --pca <2 rank>`` with the last of them (only up to ``--exact-max-people``: its time grows as
  people^2 x variants; its result is kept with ``--data`` and used again by a later run on the same file, the
  table saying when it was computed);
* each site's pass alone (the in-process engine runs all four sites and the server in one process): a fresh
  process opens the site's ``.bed`` and computes one product ``A_i Z`` of ``iteration-rank`` columns, centred
  and scaled as in the run; its resident memory before it opens the file and its peak (``ru_maxrss``; both count
  the touched pages of the memory-mapped file).

Wall time is that of each process, CPU time its user and system time with those of the children it waited for
(``wait4``: less sensitive to other load on the machine), peak memory the largest ``VmHWM`` of it and its
descendants (polled every 0.1 s). Accuracy: per PC, ``|r|`` of the
fedspectral scores (and of plink2 approx's eigenvectors) with exact plink2's eigenvectors (without exact plink2,
with plink2 approx's). A PC is above the
noise when exact plink2's eigenvalue exceeds :data:`NOISE_FACTOR` times its eigenvalue ``2 rank`` (exact plink2 is
asked for ``2 rank`` PCs; its cost is that of the genetic relationship matrix either way): linkage within the
simulated segments lifts the bulk well above the Marchenko-Pastur edge of independent variants, and PCs inside
the bulk, with gaps of a few percent, are not determined to 1e-5 by any method (plink2 approx's included).
Usage::

    python -m simulations.benchmarks.bench_plink2 [--people 20000] [--variants 100000] [--rank 4] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from simulations.benchmarks import out_folder

__all__ = ["MIXES", "main", "simulate", "encode_bed"]

MARK = "BENCH-PLINK2 "
MIXES = ((0.70, 0.20, 0.10), (0.10, 0.70, 0.20), (0.10, 0.20, 0.70), (0.34, 0.33, 0.33))
"""Share of YRI, CEU and CHB ancestry of the people at each of the four sites."""
MAGIC = bytes([0x6C, 0x1B, 0x01])
"""A variant-major PLINK 1 ``.bed`` header."""
NOISE_FACTOR = 1.5
"""A PC is above the noise when exact plink2's eigenvalue exceeds this times its eigenvalue ``2 rank``."""
CODES = np.array([3, 2, 0, 1], dtype=np.uint8)
"""2-bit code of an A1 count ``0, 1, 2`` and of a missing call (-1, index 3): ``11, 10, 00, 01``."""


def encode_bed(dosage: np.ndarray) -> bytes:
    """Variants (v, n) of A1 counts 0/1/2 (-1: missing) as ``.bed`` bytes, variant-major, padding codes 00.

    Parameters
    ----------
    dosage : ndarray of shape (v, n), int8

    Returns
    -------
    bytes
        ``v * ceil(n / 4)`` bytes; person ``j`` of a variant in bits ``2 (j % 4)`` of byte ``j // 4``.
    """
    v, n = dosage.shape
    codes = np.zeros((v, -(-n // 4) * 4), dtype=np.uint8)
    codes[:, :n] = CODES[dosage.astype(np.int64) % 4]
    codes = codes.reshape(v, -1, 4)
    return (codes[..., 0] | codes[..., 1] << 2 | codes[..., 2] << 4 | codes[..., 3] << 6).tobytes()


def site_counts(people: int) -> list[list[int]]:
    """People of each population (YRI, CEU, CHB) at each of the four sites of about ``people / 4`` each."""
    per_site = [people // 4 + (i < people % 4) for i in range(4)]
    counts = []
    for size, mix in zip(per_site, MIXES):
        row = [int(round(size * share)) for share in mix[:2]]
        counts.append(row + [size - sum(row)])
    return counts


def _demography():
    """``(demography, population names, mutation rate, description)``: stdpopsim's OutOfAfrica_3G09, else an
    msprime island model of three populations."""
    import msprime

    try:
        import stdpopsim

        model = stdpopsim.get_species("HomSap").get_demographic_model("OutOfAfrica_3G09")
        return model.model, ["YRI", "CEU", "CHB"], model.mutation_rate, "stdpopsim HomSap OutOfAfrica_3G09"
    except ImportError:
        demography = msprime.Demography.island_model([10_000] * 3, migration_rate=1e-4)
        return (demography, [p.name for p in demography.populations], 2.35e-8,
                "msprime island model, 3 populations of 10,000, migration 1e-4")


def simulate(folder: Path, people: int, variants: int, *, maf: float = 0.01, missing: float = 0.01,
             segment: float = 5e6, seed: int = 0, block: int = 2048) -> dict:
    """Write ``sites/partition_<i>.bed/.bim/.fam`` (four sites) and ``pooled.bed/.bim/.fam`` to ``folder``.

    Parameters
    ----------
    folder : Path
        Created if absent.
    people : int
        People in all (diploid), split over the sites as :func:`site_counts`.
    variants : int
        Variants kept (biallelic, pooled minor allele frequency at least ``maf``, before missing calls).
    maf : float
        Smallest pooled minor allele frequency kept.
    missing : float
        Fraction of all calls set missing, independently at random.
    segment : float
        Bases of each independent msprime segment (a chromosome of its own in the ``.bim``).
    seed : int
        Every draw derives from it.
    block : int
        Variants encoded at a time.

    Returns
    -------
    dict
        ``model`` (the demography), ``segments``, ``sites`` (people per site and population), ``missing`` (the
        fraction of calls made missing).
    """
    import msprime

    folder.mkdir(parents=True, exist_ok=True)
    demography, names, rate, description = _demography()
    counts = site_counts(people)
    totals = [sum(row[p] for row in counts) for p in range(3)]
    rng = np.random.default_rng([seed, 1])
    (folder / "sites").mkdir(exist_ok=True)
    sites = [f"sites/partition_{i}" for i in range(4)] + ["pooled"]
    beds = {name: open(folder / f"{name}.bed", "wb") for name in sites}
    bims = {name: open(folder / f"{name}.bim", "w") for name in sites}
    for handle in beds.values():
        handle.write(MAGIC)
    order, fam = None, {name: [] for name in sites}
    kept, segments, made_missing = 0, 0, 0
    pending: list[np.ndarray] = []
    lines: list[str] = []

    def flush():
        nonlocal made_missing
        dosage = np.stack(pending)  # (v, n) in site order
        holes = rng.random(dosage.shape) < missing
        made_missing += int(holes.sum())
        dosage[holes] = -1
        start = 0
        for i, row in enumerate(counts):
            size = sum(row)
            beds[sites[i]].write(encode_bed(dosage[:, start:start + size]))
            start += size
        beds["pooled"].write(encode_bed(dosage))
        for handle in bims.values():
            handle.writelines(lines)
        pending.clear()
        lines.clear()

    while kept < variants:
        ts = msprime.sim_ancestry(samples=dict(zip(names, totals)), demography=demography, sequence_length=segment,
                                  recombination_rate=1e-8, ploidy=2, random_seed=int(rng.integers(1, 2**31)))
        ts = msprime.sim_mutations(ts, rate=rate, model=msprime.BinaryMutationModel(),
                                   random_seed=int(rng.integers(1, 2**31)))
        segments += 1
        if order is None:  # individuals in site order: each site takes its share of every population, in turn
            nodes = np.array([ind.nodes for ind in ts.individuals()])
            population = ts.tables.nodes.population[nodes[:, 0]]
            pools = [list(np.flatnonzero(population == p)) for p in range(3)]
            order = []
            for i, row in enumerate(counts):
                for p, c in enumerate(row):
                    chosen, pools[p] = pools[p][:c], pools[p][c:]
                    order += chosen
                    fam[sites[i]] += [f"site_{i}\t{names[p]}_{j}\t0\t0\t0\t-9\n" for j in chosen]
            fam["pooled"] = [line for i in range(4) for line in fam[sites[i]]]
            left, right = nodes[order, 0], nodes[order, 1]
        for variant in ts.variants(copy=False):
            g = variant.genotypes
            dosage = (g[left] + g[right]).astype(np.int8)
            frequency = dosage.mean() / 2
            if min(frequency, 1 - frequency) < maf:
                continue
            pending.append(dosage)
            position = int(variant.site.position) + 1
            lines.append(f"{segments}\tseg{segments}_{position}\t0\t{position}\tT\tC\n")
            kept += 1
            if len(pending) == block:
                flush()
            if kept == variants:
                break
    if pending:
        flush()
    for name in sites:
        beds[name].close()
        bims[name].close()
        (folder / f"{name}.fam").write_text("".join(fam[name]))
    return {"model": description, "segments": segments, "sites": counts, "missing": made_missing / (people * variants)}


# -- the processes ---------------------------------------------------------------------------------------------
def _tree_peak_mb(pid: int) -> float:
    """The largest ``VmHWM`` (MB) among ``pid`` and its descendants now (0 for those already gone)."""
    peak, todo = 0.0, [pid]
    while todo:
        p = todo.pop()
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    peak = max(peak, int(line.split()[1]) / 1024)
            for task in Path(f"/proc/{p}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except (OSError, ValueError):
            continue
    return peak


def _measured(command: list[str], env: dict | None = None) -> dict:
    """Run ``command`` as a child; its wall time (s), peak resident memory (MB) and the lines it marked.

    The peak is the largest ``VmHWM`` of the process and its descendants (``/usr/bin/plink2`` is a shell script
    that starts the binary as its child), read every 0.1 s until it exits: ``ru_maxrss`` of a child would be at
    least this process's resident memory when it forked.
    """
    start = time.perf_counter()
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **(env or {})})
    out_chunks, err_chunks = [], []

    def drain(stream, chunks):
        for line in stream:
            chunks.append(line)

    readers = [threading.Thread(target=drain, args=(proc.stdout, out_chunks)),
               threading.Thread(target=drain, args=(proc.stderr, err_chunks))]
    for reader in readers:
        reader.start()
    peak, cpu = 0.0, float("nan")
    while True:  # wait4: the child's CPU time (with that of the children it waited for, plink2's binary)
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            proc.returncode = os.waitstatus_to_exitcode(status)
            cpu = usage.ru_utime + usage.ru_stime
            break
        peak = max(peak, _tree_peak_mb(proc.pid))
        time.sleep(0.1)
    wall = time.perf_counter() - start
    for reader in readers:
        reader.join()
    if proc.returncode:
        raise RuntimeError(f"{' '.join(command[:4])} ... failed (exit {proc.returncode}): "
                           f"{''.join(err_chunks)[-3000:]}")
    marked = [json.loads(line[len(MARK):]) for line in out_chunks if line.startswith(MARK)]
    return {"wall": wall, "cpu": cpu, "peak_mb": peak, "marked": marked}


def _config(data: Path, args, stop_tol: float) -> str:
    """The ``compare`` config of a fedspectral run over the sites in ``data`` with ``stop_tol``."""
    return f'''title = "ancestry PCA"
[defaults]
dataset = "{data}"
num-clients = 4
rank = {args.rank}
iteration-rank = {args.iteration_rank}
num-server-rounds = {args.rounds}
local-steps = {args.local_steps}
schedule = "fixed"
stop-tol = {stop_tol:g}
center = true
scale = "hwe"
row-normalize = false
[[runs]]
name = "{args.strategy}"
strategy = "{args.strategy}"
'''


def _fedspectral_worker(config: Path, out: Path) -> None:
    """The ``compare`` run (in this process)."""
    from simulations.compare import run_comparison

    start = time.perf_counter()
    run_comparison(config, out=out)
    print(MARK + json.dumps({"compare": time.perf_counter() - start}), flush=True)


def _transform_worker(model_path: Path, data: Path, out: Path) -> None:
    """Every site's scores, ``transform`` of its ``.bed``, stacked in site order (``scores.npy``)."""
    from fl_strategies.files.data_files import open_samples
    from fl_strategies.files.pca import load_model, transform

    model = load_model(model_path)
    scores = [transform(model, open_samples(data / "sites" / f"partition_{i}.bed")) for i in range(4)]
    np.save(out / "scores.npy", np.vstack(scores))


def _site_worker(model_path: Path, bed: Path, columns: int) -> None:
    """One site's pass alone: open its ``.bed``, one product ``A_i Z`` of ``columns`` columns, centred and scaled
    with the model's mean and scale; peak resident memory (MB) after opening and after the pass."""
    import resource

    from fl_strategies.files.data_files import open_samples
    from fl_strategies.files.pca import load_model
    from fl_strategies.kernels.products import LocalOperator

    model = load_model(model_path)
    Z = np.linalg.qr(np.random.default_rng(0).standard_normal((model["mean"].shape[0], columns)))[0]
    before = _status_mb("VmRSS")  # imports, the model and Z: before the file is opened
    X = open_samples(bed)
    X.code_counts  # its codes counted as the node does at discovery (a BedVariants counts them on first use)
    op = LocalOperator.from_rows(X).centered(model["mean"], model["scale"])
    opened = _status_mb("VmRSS")
    try:  # the high-water mark from here on (Linux: 5 > clear_refs resets VmHWM to the current RSS)
        Path("/proc/self/clear_refs").write_text("5")
        reset = True
    except OSError:
        reset = False
    start = time.perf_counter()
    op @ Z
    wall = time.perf_counter() - start
    peak = _status_mb("VmHWM") if reset else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    whole = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # opening (counting the codes) and the pass
    print(MARK + json.dumps({"before_mb": before, "opened_mb": opened, "peak_mb": peak, "whole_peak_mb": whole,
                             "pass": wall}), flush=True)


def _status_mb(key: str) -> float:
    """``/proc/self/status``'s ``key`` (``VmRSS``, ``VmHWM``) in MB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def blas_choices() -> dict[str, str | None]:
    """The BLAS / LAPACK libraries ``plink2`` can run with: ``{name: LD_LIBRARY_PATH}``.

    Debian's ``plink2`` links ``libblas.so.3`` and ``liblapack.so.3``, which the alternatives system points at
    the reference implementation (``libblas3``, ``liblapack3``: what ``apt-get install plink2`` brings) or, once
    installed, at OpenBLAS (``libopenblas0-pthread``). Both are named here when present, so that each can be
    chosen whatever the alternatives say; elsewhere, plink2's own: ``{"as installed": None}``.
    """
    found: dict[str, str | None] = {}
    for name, parts in (("reference BLAS", ("blas", "lapack")), ("OpenBLAS", ("openblas-pthread",))):
        for arch in sorted(Path("/usr/lib").glob("*-linux-gnu")):
            if all((arch / part).is_dir() for part in parts) and (arch / parts[0] / "libblas.so.3").exists():
                found[name] = ":".join(str(arch / part) for part in parts)
                break
    return found or {"as installed": None}


def _plink2(pooled: Path, out: Path, rank: int, approx: bool, library: str | None = None, tag: str = "") -> dict:
    """``plink2 --pca [approx] rank`` on the pooled file, 2 threads, with the BLAS at ``library`` (an
    ``LD_LIBRARY_PATH``; ``None``: plink2's own): wall, peak memory, eigenvectors, eigenvalues."""
    name = ("approx" if approx else "exact") + tag
    env = None if library is None else {"LD_LIBRARY_PATH": library}
    found = _measured(["plink2", "--bfile", str(pooled), "--pca", *(["approx"] if approx else []), str(rank),
                       "--threads", "2", "--out", str(out / f"plink2-{name}")], env)
    found["vectors"] = np.loadtxt(out / f"plink2-{name}.eigenvec", skiprows=1, usecols=range(2, 2 + rank), ndmin=2)
    found["values"] = np.loadtxt(out / f"plink2-{name}.eigenval", ndmin=1)
    return found


def _fastest_approx(pooled: Path, out: Path, rank: int, libraries: dict[str, str | None], runs: int
                    ) -> dict[str, dict]:
    """``plink2 --pca approx`` ``runs`` times with each BLAS of ``libraries`` (in turns: reference, OpenBLAS,
    reference, ...): per BLAS its fastest run (:func:`_plink2`), with every run's wall time in ``walls`` (plink2
    with OpenBLAS varied from 10.9 s to 20.4 s between quiet runs of the same command: its fastest is the bar)."""
    found: dict[str, list[dict]] = {blas: [] for blas in libraries}
    for _ in range(runs):
        for blas, library in libraries.items():
            found[blas].append(_plink2(pooled, out, rank, approx=True, library=library,
                                       tag="-" + blas.replace(" ", "-")))
    return {blas: {**min(done, key=lambda run: run["wall"]), "walls": [run["wall"] for run in done]}
            for blas, done in found.items()}


def _exact_plink2(data: Path, rank: int, blas: str, library: str | None) -> dict:
    """Exact ``plink2 --pca rank`` on ``data/pooled.bed`` with ``blas``, kept in ``data/plink2-exact-<blas>/``: a
    later run on the same file (its size and time stamp) with the same rank uses the kept eigenvectors, and its
    table says when they were computed (exact plink2 is deterministic, and takes tens of minutes at 20,000
    people). ``cached`` is that time, ``None`` when run now."""
    folder = data / f"plink2-exact-{blas.replace(' ', '-')}"
    record = folder / "run.json"
    stat = (data / "pooled.bed").stat()
    key = {"rank": rank, "bed_bytes": stat.st_size, "bed_mtime": stat.st_mtime, "blas": blas}
    if record.is_file():
        kept = json.loads(record.read_text())
        if kept.get("key") == key:
            found = {**kept["measured"], "cached": kept["when"]}
            found["vectors"] = np.loadtxt(folder / "plink2-exact.eigenvec", skiprows=1, usecols=range(2, 2 + rank),
                                          ndmin=2)
            found["values"] = np.loadtxt(folder / "plink2-exact.eigenval", ndmin=1)
            return found
    folder.mkdir(exist_ok=True)
    found = _plink2(data / "pooled", folder, rank, approx=False, library=library)
    measured = {key_: found[key_] for key_ in ("wall", "cpu", "peak_mb")}
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    record.write_text(json.dumps({"key": key, "measured": measured, "when": when}) + "\n")
    return {**found, "cached": None}


def correlations(scores: np.ndarray, vectors: np.ndarray) -> list[float]:
    """``|r|`` of each column of ``scores`` with the same column of ``vectors``."""
    return [float(abs(np.corrcoef(scores[:, j], vectors[:, j])[0, 1])) for j in range(vectors.shape[1])]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--people", type=int, default=20_000, help="people in all, over four sites")
    parser.add_argument("--variants", type=int, default=100_000)
    parser.add_argument("--maf", type=float, default=0.01)
    parser.add_argument("--missing", type=float, default=0.01)
    parser.add_argument("--segment", type=float, default=5e6, help="bases of each msprime segment")
    parser.add_argument("--rank", type=int, default=4)
    parser.add_argument("--iteration-rank", type=int, default=8)
    parser.add_argument("--strategy", default="krylov", choices=("krylov", "power", "fedpower"))
    parser.add_argument("--local-steps", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=30, help="at most; stop-tol may stop sooner")
    parser.add_argument("--stop-tol", type=float, nargs="+", default=[1e-9],
                        help="the stopping rule's tolerance; more than one: a fedspectral run for each, in the same "
                             "run of the benchmark (the first is the main row: its transform and site passes)")
    parser.add_argument("--plink2-runs", type=int, default=1,
                        help="plink2 --pca approx this many times with each BLAS; the table gives the fastest")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data", type=Path, default=None,
                        help="where the .bed files go (default: a temporary folder, removed at the end); kept, "
                             "and used again by a later run with the same simulation settings")
    parser.add_argument("--exact-max-people", type=int, default=20_000,
                        help="exact plink2 --pca only up to this many people (its time grows as people^2 x "
                             "variants); above it the PCs are compared with plink2 approx's")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--worker", nargs="+", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.plink2_runs < 1:
        parser.error(f"--plink2-runs {args.plink2_runs}: at least 1")
    if args.worker:
        kind, *rest = args.worker
        if kind == "fedspectral":
            _fedspectral_worker(Path(rest[0]), Path(rest[1]))
        elif kind == "transform":
            _transform_worker(Path(rest[0]), Path(rest[1]), Path(rest[2]))
        else:
            _site_worker(Path(rest[0]), Path(rest[1]), int(rest[2]))
        return 0
    if shutil.which("plink2") is None:
        parser.error("plink2 is not installed")
    out = out_folder("bench_plink2", args.out)
    out.mkdir(parents=True, exist_ok=True)
    data = args.data or Path(tempfile.mkdtemp(prefix="bench_plink2_"))
    try:
        return _bench(args, data, out)
    finally:
        if args.data is None:
            shutil.rmtree(data, ignore_errors=True)


def _simulated(args, data: Path) -> tuple[dict, float]:
    """``(simulate's summary, its seconds)``: the files in ``data`` when an earlier run with the same settings wrote
    them (its ``simulation.json``), else simulated now."""
    settings = {"people": args.people, "variants": args.variants, "maf": args.maf, "missing": args.missing,
                "segment": args.segment, "seed": args.seed}
    record = data / "simulation.json"
    if record.is_file():
        kept = json.loads(record.read_text())
        if kept.get("settings") == settings:
            return kept["made"], kept["seconds"]
    start = time.perf_counter()
    made = simulate(data, args.people, args.variants, maf=args.maf, missing=args.missing, segment=args.segment,
                    seed=args.seed)
    seconds = time.perf_counter() - start
    record.write_text(json.dumps({"settings": settings, "made": made, "seconds": seconds}))
    return made, seconds


def _bench(args, data: Path, out: Path) -> int:
    made, simulated = _simulated(args, data)
    work = data / "work"  # the runs' own outputs: temporary with the data
    work.mkdir(exist_ok=True)
    me = [sys.executable, "-m", "simulations.benchmarks.bench_plink2", "--worker"]
    threads = {"OPENBLAS_NUM_THREADS": "2", "OMP_NUM_THREADS": "2", "MKL_NUM_THREADS": "2"}

    def fedspectral(folder: Path, tol: float) -> tuple[dict, Path, dict]:
        """``(the compare run measured, its model, its transform measured)`` with ``tol``, in ``folder``."""
        (folder / "c.toml").write_text(_config(data / "sites", args, tol))
        run = _measured(me + ["fedspectral", str(folder / "c.toml"), str(folder / "compare")], threads)
        (path,) = sorted((folder / "compare" / "estimates").glob("*.pca.npz"))
        return run, path, _measured(me + ["transform", str(path), str(data), str(folder)], threads)

    fed, model_path, scored = fedspectral(work, args.stop_tol[0])
    rounds = _rounds(work / "compare")
    more = []  # the other stop-tols: their own fedspectral run and scores
    for tol in args.stop_tol[1:]:
        folder = work / f"stop-tol-{tol:g}"
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir()
        run, _, _ = fedspectral(folder, tol)
        more.append({"stop_tol": tol, "rounds": _rounds(folder / "compare"), "wall": run["wall"], "cpu": run["cpu"],
                     "peak_mb": run["peak_mb"], "scores": np.load(folder / "scores.npy")})
    libraries = blas_choices()
    approxes = _fastest_approx(data / "pooled", work, args.rank, libraries, args.plink2_runs)
    first = next(iter(libraries))  # the reference BLAS where present: what apt-get install plink2 brings
    approx = approxes[first]
    exact, exact_blas = None, list(libraries)[-1]  # OpenBLAS where present: the fastest
    if args.people <= args.exact_max_people:  # the bulk's level: eigenvalue 2 rank
        exact = _exact_plink2(data, 2 * args.rank, exact_blas, libraries[exact_blas])
    site_passes = []
    for i in range(4):  # each site's pass alone, in a process of its own
        site = _measured(me + ["site", str(model_path), str(data / "sites" / f"partition_{i}.bed"),
                               str(args.iteration_rank)], threads)
        site_passes.append({"site": i, **site["marked"][-1], "process_peak_mb": site["peak_mb"]})
    scores = np.load(work / "scores.npy")
    n, d = args.people, args.variants
    reference = exact if exact is not None else approx
    edge = NOISE_FACTOR * exact["values"][2 * args.rank - 1] if exact is not None else float("nan")
    above = [bool(v > edge) for v in exact["values"][: args.rank]] if exact is not None else [True] * args.rank
    result = {
        "people": n, "variants": d, "sites": made["sites"], "model": made["model"], "segments": made["segments"],
        "missing": made["missing"], "simulation_s": simulated, "rank": args.rank,
        "iteration_rank": args.iteration_rank, "strategy": args.strategy, "local_steps": args.local_steps,
        "stop_tol": args.stop_tol[0],
        "rounds": rounds, "fedspectral_s": fed["wall"], "fedspectral_peak_mb": fed["peak_mb"],
        "transform_s": scored["wall"], "transform_peak_mb": scored["peak_mb"],
        "plink2_approx_s": approx["wall"], "plink2_approx_peak_mb": approx["peak_mb"],
        "plink2_runs": args.plink2_runs,
        "plink2_approx_walls": {blas: found["walls"] for blas, found in approxes.items()},
        "cpu_s": {"fedspectral": fed["cpu"], "transform": scored["cpu"], "plink2_approx": approx["cpu"],
                  "plink2_exact": None if exact is None else exact["cpu"]},
        "plink2_exact_s": None if exact is None else exact["wall"],
        "plink2_exact_peak_mb": None if exact is None else exact["peak_mb"], "reference": "exact" if exact else "approx",
        "plink2_blas": first, "plink2_exact_blas": None if exact is None else exact_blas,
        "plink2_exact_cached": None if exact is None else exact["cached"],
        "plink2_approx_other": {blas: {"wall": found["wall"], "cpu": found["cpu"], "peak_mb": found["peak_mb"],
                                       "correlation": correlations(found["vectors"], reference["vectors"][:, : args.rank])}
                                for blas, found in approxes.items() if blas != first},
        "bed_bytes": [(data / "sites" / f"partition_{i}.bed").stat().st_size for i in range(4)],
        "bed_mb": [(data / "sites" / f"partition_{i}.bed").stat().st_size / 2**20 for i in range(4)],
        "site_passes": site_passes,
        "exact_eigenvalues": reference["values"][: args.rank].tolist(), "noise_level": float(edge),
        "above_noise": above, "threads": 2,
        "correlation_fedspectral": correlations(scores[:, : args.rank], reference["vectors"][:, : args.rank]),
        "correlation_approx": correlations(approx["vectors"], reference["vectors"][:, : args.rank]),
        "fedspectral_other": [{**{k: v for k, v in run.items() if k != "scores"},
                               "correlation": correlations(run["scores"][:, : args.rank],
                                                           reference["vectors"][:, : args.rank])} for run in more],
        "load": os.getloadavg(),
    }
    (out / "bench_plink2.json").write_text(json.dumps(result, indent=2) + "\n")
    table = markdown(result)
    (out / "bench_plink2.md").write_text(table)
    print(table)
    return 0


def _rounds(folder: Path) -> int:
    """Rounds the fedspectral run made (its results' last round)."""
    import pandas as pd

    return int(pd.read_csv(folder / "results.csv")["round"].max())


def _spread(r: dict, blas: str | None) -> str:
    """``"; fastest of 3: 10.9, 14.0, 20.4 s"`` for a BLAS run more than once, else ``""``."""
    walls = r.get("plink2_approx_walls", {}).get(blas, [])
    return f"; fastest of {len(walls)}: {', '.join(f'{w:.1f}' for w in walls)} s" if len(walls) > 1 else ""


def markdown(r: dict) -> str:
    """The benchmark's table (markdown) from its results."""
    mb = 2**20
    d, rank = r["variants"], r["iteration_rank"]
    dr_mb = d * rank * 8 / mb
    exact = r["reference"] == "exact"
    also = "".join(f"; {run['rounds']} at stop-tol {run['stop_tol']:g}" for run in r.get("fedspectral_other", []))
    header = (f"{r['people']:,} people x {r['variants']:,} variants (MAF >= 1 %, {100 * r['missing']:.2f} % missing "
              f"calls), four sites of {', '.join(str(sum(s)) for s in r['sites'])} people (YRI/CEU/CHB "
              f"{'; '.join('/'.join(map(str, s)) for s in r['sites'])}), {r['model']}, {r['segments']} segments "
              f"of msprime; fedspectral: {r['strategy']}, scale = \"hwe\", center, rank {r['rank']} of "
              f"iteration-rank {r['iteration_rank']}"
              f"{', ' + str(r['local_steps']) + ' local steps' if r['strategy'] == 'fedpower' else ''}, "
              f"{r['rounds']} rounds (stop-tol {r.get('stop_tol', 1e-9):g}"
              f"{also}"
              f"); 2 threads each; load average "
              f"{r['load'][0]:.1f} at the end (1 min; {r['load'][2]:.1f} over 15 min)\n\n")
    fed_total = r["fedspectral_s"] + r["transform_s"]
    cpu = r["cpu_s"]
    other_runs = r.get("fedspectral_other", [])
    tag = f", stop-tol {r.get('stop_tol', 1e-9):g}, {r['rounds']} rounds" if other_runs else ""
    rows = [
        (f"fedspectral (4 sites, in-process engine{tag})", r["fedspectral_s"], cpu["fedspectral"],
         r["fedspectral_peak_mb"], r["correlation_fedspectral"]),
        ("fedspectral + transform of every site", fed_total, cpu["fedspectral"] + cpu["transform"],
         max(r["fedspectral_peak_mb"], r["transform_peak_mb"]), r["correlation_fedspectral"]),
        *[(f"fedspectral (4 sites, in-process engine, stop-tol {run['stop_tol']:g}, {run['rounds']} rounds)",
           run["wall"], run["cpu"], run["peak_mb"], run["correlation"]) for run in other_runs],
        (f"plink2 --pca approx (pooled, {r.get('plink2_blas', 'as installed')}{_spread(r, r.get('plink2_blas'))})",
         r["plink2_approx_s"], cpu["plink2_approx"], r["plink2_approx_peak_mb"], r["correlation_approx"]),
    ]
    for blas, other in r.get("plink2_approx_other", {}).items():
        rows.append((f"plink2 --pca approx (pooled, {blas}{_spread(r, blas)})", other["wall"], other["cpu"],
                     other["peak_mb"], other["correlation"]))
    if exact:
        cached = r.get("plink2_exact_cached")
        rows.append((f"plink2 --pca (exact, pooled, {r.get('plink2_exact_blas') or 'as installed'}"
                     f"{'; its run of ' + cached + ', kept with the data' if cached else ''})", r["plink2_exact_s"],
                     cpu["plink2_exact"], r["plink2_exact_peak_mb"], [1.0] * r["rank"]))
    against = "exact plink2" if exact else "plink2 approx"
    lines = ["| method | wall (s) | wall / plink2 approx | CPU (s) | CPU / plink2 approx | peak RSS of the process (MB) | "
             + " | ".join(f"PC{j + 1} 1 - abs(r){'' if above else ' (noise)'}" for j, above in
                          enumerate(r["above_noise"])) + " |",
             "|---|---|---|---|---|---|" + "---|" * r["rank"]]
    for name, wall, seconds, peak, corr in rows:
        lines.append(f"| {name} | {wall:.1f} | {wall / r['plink2_approx_s']:.2f} | {seconds:.1f} | "
                     f"{seconds / cpu['plink2_approx']:.2f} | {peak:.0f} | "
                     + " | ".join(f"{1 - c:.1e}" for c in corr) + " |")
    if not exact:
        lines.append(f"| plink2 --pca (exact, pooled) | not run: {r['people']:,} people is over --exact-max-people; "
                     f"1 - abs(r) above is against plink2 approx | | | | |" + " |" * r["rank"])
    sites = ["", "Each site alone, in a fresh process: open its `.bed` (count its codes) and compute one product "
             "`A_i Z` of iteration-rank columns, centred and scaled; peak resident memory (`ru_maxrss`, which counts "
             "the touched pages of the memory-mapped file) against the process's before it opened the file (imports, "
             f"the model and `Z`); `d r` float64 = {dr_mb:.1f} MB:", "",
             "| site | people | `.bed` (MB) | RSS before opening (MB) | peak (MB) | added (MB) | "
             "added - `.bed` (MB) | (added - `.bed`) / (`d r` float64) | pass (s) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for site in r["site_passes"]:
        bed = r["bed_bytes"][site["site"]] / mb
        added = site["whole_peak_mb"] - site["before_mb"]
        sites.append(f"| {site['site']} | {sum(r['sites'][site['site']])} | {bed:.1f} | {site['before_mb']:.0f} | "
                     f"{site['whole_peak_mb']:.0f} | {added:.0f} | {added - bed:.1f} | {(added - bed) / dr_mb:.2f} | "
                     f"{site['pass']:.1f} |")
    fed_ok = all(1 - c <= 1e-5 for c, above in zip(r["correlation_fedspectral"], r["above_noise"]) if above)
    if exact:
        values = (f"Exact plink2 eigenvalues {', '.join(f'{v:.3g}' for v in r['exact_eigenvalues'])}; above the "
                  f"noise: over {NOISE_FACTOR:g} x eigenvalue {2 * r['rank']} = {r['noise_level']:.3g}. Per-PC "
                  f"|r| with exact plink2 >= 0.99999 above the noise: {'yes' if fed_ok else 'no'}")
    else:
        values = (f"plink2 approx eigenvalues {', '.join(f'{v:.3g}' for v in r['exact_eigenvalues'])} (no exact "
                  f"reference at this size)")
    others = "".join(f"; against plink2 approx with {blas} {r['fedspectral_s'] / other['wall']:.2f} (CPU "
                     f"{cpu['fedspectral'] / other['cpu']:.2f})" for blas, other in r.get("plink2_approx_other", {}).items())
    footer = (f"\n{values}; wall time fedspectral / plink2 approx ({r.get('plink2_blas', 'as installed')}) "
              f"{r['fedspectral_s'] / r['plink2_approx_s']:.2f} (CPU {cpu['fedspectral'] / cpu['plink2_approx']:.2f}) "
              f"(with transform {fed_total / r['plink2_approx_s']:.2f}){others}. Simulation "
              f"{r['simulation_s']:.0f} s (not timed above). The ratio columns are against the first plink2 approx "
              f"row.\n")
    return header + "\n".join(lines) + "\n" + "\n".join(sites) + "\n" + footer


if __name__ == "__main__":
    sys.exit(main())
