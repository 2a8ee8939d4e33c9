"""The consortium trial: ancestry PCA over four sites' ``.bed`` files, as a consortium runs it, against
plink2 on the pooled file.

Genotypes: msprime under stdpopsim's ``OutOfAfrica_3G09`` demography, as :func:`bench_plink2.simulate` makes
them (four sites of different ancestry mixes), without missing calls; then each site's calls go missing at
random at a rate of its own (:data:`MISSING`), and each site leaves a random 10 % of its people out of the fit
(``partition_<i>.keep`` lists the other 90 %). Everyone is also written as ``pooled.bed`` with ``kept.keep``
(the union of the sites' ``.keep`` files).

Trial A (the sites as simulated), one ``fedspectral run`` (Flower's simulation engine, the four sites as
SuperNodes) with ``center = true``, ``scale = "hwe"``, ``maf-min``, ``geno-max``, ``indep-pairwise = "50 5
0.2"``, ``strategy = "krylov"``, then ``fedspectral transform`` of each site's file to its ``.eigenvec``;
against plink2 on the pooled file:

* ``prune.in`` against ``plink2 --bfile pooled --keep kept.keep --maf --geno --indep-pairwise 50 5 0.2`` (and,
  to show that ``--keep`` matters to plink2's pruning, how many variants plink2 keeps otherwise without it);
* PC1-2 (and the others asked for) of the fitted people: ``|r|`` against exact ``plink2 --bfile pooled --keep
  kept.keep --extract <plink2's prune.in> --pca allele-wts``;
* the people left out: ``|r|`` against plink2's projection (``--score`` with plink2's ``.eigenvec.allele`` and
  ``--read-freq`` of its fit), and against plink2 ``--score`` with the run's own ``pca.eigenvec.allele``;
* plink2 against itself: its projection of its own fitted people against its ``.eigenvec`` (how far plink2's
  projection is from its eigenvectors with missing calls).

Trial B (sites on different arrays): the same people and ``.keep`` files, but site 1 lacks a block of
:data:`BLOCK` consecutive variants, site 2's ``.bim`` (and ``.bed``) lists its variants in a shuffled order, and
site 3 has A1/A2 exchanged at every third variant (its calls counted on the other allele). The same run config;
against plink2 on the pooled file restricted to the variants all sites hold (``--extract shared.txt``): the same
comparisons.

Trial C (``secure``): trial A's sites and run config with ``secure-aggregation = true`` and smartpca's outlier
removal (``outlier-sigma = 6`` on the run's four PCs, :data:`SECURE_CONFIG`): the server learns only SecAgg+ sums
(the counts and allele sums of the frequencies and the filters, the pruning's pair sums, the outliers' score
moments, the products). The same comparisons, and the number of people the sites removed as outliers.

Usage::

    python -m simulations.benchmarks.ancestry_trial [--people 2400] [--variants 30000] [--out DIR] [--data DIR]
    python -m simulations.benchmarks.ancestry_trial --write-sites sites --people 400 --variants 4000

Prints the figures and writes ``ancestry_trial.md`` and ``ancestry_trial.json`` to ``--out``. With
``--write-sites DIR`` it only writes the four sites' files (the guide's data) and stops.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from simulations.benchmarks import out_folder
from simulations.benchmarks.bench_plink2 import MAGIC, encode_bed, simulate

__all__ = ["MISSING", "BLOCK", "main"]

MISSING = (0.002, 0.01, 0.02, 0.03)
"""Rate of missing calls at each of the four sites (at random)."""
LEFT_OUT = 0.10
"""Share of each site's people left out of the fit (absent from its ``.keep``)."""
BLOCK = 3000
"""Consecutive variants site 1 lacks in trial B (at most a tenth of them)."""
TARGET_FITTED, TARGET_LEFT_OUT = 0.99999, 0.9999
"""The issue's targets for ``|r|`` of PC1-2."""


SECURE_CONFIG = "secure-aggregation=true outlier-sigma=6 outlier-pcs=4"
"""What trial C adds to the run config."""


def run_config(data: Path, out: Path, args, extra: str = "") -> str:
    """The run config of the trials (the guide's, docs/ancestry.md), ``extra`` added (trial C's)."""
    return (f'dataset="{data}" num-clients=4 strategy="krylov" rank={args.rank} iteration-rank={args.iteration_rank} '
            f'num-server-rounds={args.rounds} stop-tol=1e-6 center=true scale="hwe" row-normalize=false '
            f'maf-min={args.maf_min} geno-max={args.geno_max} indep-pairwise="50 5 0.2" results-dir="{out}"'
            + (f" {extra}" if extra else ""))


# -- the files -----------------------------------------------------------------------------------------------------
def read_bed(prefix: Path) -> np.ndarray:
    """A ``.bed`` written by :func:`encode_bed` as A1 counts (people, variants), int8, -1 missing."""
    n = sum(1 for _ in open(f"{prefix}.fam"))
    raw = np.fromfile(f"{prefix}.bed", dtype=np.uint8)[3:]
    per = -(-n // 4)
    raw = raw.reshape(-1, per)
    codes = np.stack([(raw >> s) & 3 for s in (0, 2, 4, 6)], axis=-1).reshape(raw.shape[0], -1)[:, :n]
    table = np.array([2, -1, 1, 0], dtype=np.int8)  # 00 -> 2 A1, 01 missing, 10 -> 1, 11 -> 0
    return table[codes].T.copy()


def write_plink(prefix: Path, dosage: np.ndarray, fam: list[str], bim: list[str]) -> None:
    """``prefix.bed/.bim/.fam`` of ``dosage`` (people, variants), int8 A1 counts, -1 missing."""
    with open(f"{prefix}.bed", "wb") as handle:
        handle.write(MAGIC)
        for start in range(0, dosage.shape[1], 4096):
            handle.write(encode_bed(dosage[:, start:start + 4096].T))
    Path(f"{prefix}.fam").write_text("".join(fam))
    Path(f"{prefix}.bim").write_text("".join(bim))


def write_keep(path: Path, fam: list[str], chosen: np.ndarray) -> None:
    path.write_text("".join(" ".join(fam[j].split()[:2]) + "\n" for j in np.flatnonzero(chosen)))


def with_missing_calls(raw: Path, rng: np.random.Generator) -> tuple[list, list, list]:
    """The four sites of :func:`simulate`'s folder ``raw``, each with its rate of missing calls (:data:`MISSING`).

    Returns
    -------
    tuple
        ``(sites, fams, bim)``: each site's A1 counts (people, variants) as int8 with -1 missing, each site's
        ``.fam`` lines, the ``.bim`` lines all sites share.
    """
    sites, fams = [], []
    for i in range(4):
        prefix = raw / "sites" / f"partition_{i}"
        dosage = read_bed(prefix)
        dosage[rng.random(dosage.shape) < MISSING[i]] = -1
        sites.append(dosage)
        fams.append(Path(f"{prefix}.fam").read_text().splitlines(keepends=True))
    return sites, fams, (raw / "pooled.bim").read_text().splitlines(keepends=True)


def write_sites(folder: Path, people: int, variants: int, seed: int = 0, segment: float = 5e4) -> None:
    """Only the four sites' files, ``folder/partition_<i>.bed/.bim/.fam``, with their missing calls and no
    ``.keep`` (the data of the guide docs/ancestry.md).

    The variants come from many short independent segments (``segment`` bases each), so that a site's KING
    kinship (``plink2 --king-cutoff``) has enough unlinked variants to tell unrelated people apart; the segments
    are laid out over chromosomes 1-22 in turn, each 10 segment lengths after the last (plink2 reads chromosome
    codes above 22 as X, Y, XY and MT).
    """
    import tempfile

    with tempfile.TemporaryDirectory() as raw:
        info = simulate(Path(raw), people, variants, missing=0.0, seed=seed, segment=segment)
        sites, fams, bim = with_missing_calls(Path(raw), np.random.default_rng([seed, 45]))
    laid_out = []
    for line in bim:
        f = line.split("\t")
        k = int(f[0]) - 1
        f[0], f[3] = str(k * 22 // info["segments"] + 1), str(int(f[3]) + k * 10 * int(segment))
        laid_out.append("\t".join(f))
    bim = laid_out
    folder.mkdir(parents=True, exist_ok=True)
    for i, dosage in enumerate(sites):
        write_plink(folder / f"partition_{i}", dosage, fams[i], bim)


def make_sites(folder: Path, people: int, variants: int, seed: int) -> dict:
    """The simulated genotypes (``folder/raw``, kept for later runs) and trial A's and B's folders."""
    raw = folder / "raw"
    if not (raw / "simulation.json").exists():  # written last: a simulation cut short is made again
        started = time.perf_counter()
        info = simulate(raw, people, variants, missing=0.0, seed=seed)
        info["seconds"] = time.perf_counter() - started
        (raw / "simulation.json").write_text(json.dumps(info))
    info = json.loads((raw / "simulation.json").read_text())
    rng = np.random.default_rng([seed, 45])
    sites, fams, bim = with_missing_calls(raw, rng)
    kept = []
    for dosage in sites:
        chosen = np.ones(len(dosage), bool)
        chosen[rng.choice(len(dosage), int(round(LEFT_OUT * len(dosage))), replace=False)] = False
        kept.append(chosen)
    a, b = folder / "sites", folder / "arrays"
    for path in (a, b):
        path.mkdir(parents=True, exist_ok=True)
    pooled_fam = [line for fam in fams for line in fam]
    write_plink(folder / "pooled", np.vstack(sites), pooled_fam, bim)
    write_keep(folder / "kept.keep", pooled_fam, np.concatenate(kept))
    d = len(bim)
    block = np.arange(d // 3, d // 3 + min(BLOCK, d // 10))
    order = rng.permutation(d)
    for i in range(4):
        write_plink(a / f"partition_{i}", sites[i], fams[i], bim)
        dosage, lines = sites[i], list(bim)
        if i == 1:  # a site on another array: a block of variants never genotyped
            keep = np.setdiff1d(np.arange(d), block)
            dosage, lines = dosage[:, keep], [bim[j] for j in keep]
        if i == 2:  # its .bim in another order
            dosage, lines = dosage[:, order], [bim[j] for j in order]
        if i == 3:  # A1 and A2 exchanged at every third variant
            dosage = dosage.copy()
            swap = np.arange(0, d, 3)
            part = dosage[:, swap]
            dosage[:, swap] = np.where(part < 0, part, 2 - part)
            for j in swap:
                f = lines[j].split("\t")
                f[4], f[5] = f[5].strip(), f[4] + "\n"
                lines[j] = "\t".join(f)
        write_plink(b / f"partition_{i}", dosage, fams[i], lines)
        for path in (a, b):
            write_keep(path / f"partition_{i}.keep", fams[i], kept[i])
    shared = [bim[j].split("\t")[1] for j in np.setdiff1d(np.arange(d), block)]
    (folder / "shared.txt").write_text("\n".join(shared) + "\n")
    info.update(people=sum(len(s) for s in sites), variants=d, kept=[int(k.sum()) for k in kept],
                site_people=[len(s) for s in sites],
                missing=[float((s < 0).mean()) for s in sites])
    return info


# -- the programs --------------------------------------------------------------------------------------------------
def plink2(*args) -> None:
    subprocess.run(["plink2", *map(str, args), "--threads", "2"], check=True, capture_output=True)


def fedspectral(*args) -> float:
    """``fedspectral ARGS`` (the environment's command); its wall time (s)."""
    command = Path(sys.executable).parent / "fedspectral"
    started = time.perf_counter()
    done = subprocess.run([str(command), *map(str, args)], capture_output=True, text=True)
    if done.returncode != 0:
        said = (done.stdout + done.stderr)[-4000:]
        raise RuntimeError(f"fedspectral {' '.join(map(str, args))[:200]} failed:\n{said}")
    return time.perf_counter() - started


def read_eigenvec(path: Path) -> dict[tuple[str, str], np.ndarray]:
    rows = {}
    for line in Path(path).read_text().splitlines()[1:]:
        f = line.split()
        rows[(f[0], f[1])] = np.array(f[2:], dtype=float)
    return rows


def read_sscore(path: Path, k: int) -> dict[tuple[str, str], np.ndarray]:
    lines = Path(path).read_text().splitlines()
    head = lines[0].lstrip("#").split()
    cols = [head.index(f"PC{j + 1}_AVG") for j in range(k)]
    first = 0 if head[0] == "FID" else None
    rows = {}
    for line in lines[1:]:
        f = line.split()
        key = (f[0], f[1]) if first == 0 else ("0", f[0])
        rows[key] = np.array([f[c] for c in cols], dtype=float)
    return rows


def correlations(ours: dict, theirs: dict, people: list, k: int) -> list[float]:
    a = np.array([ours[p][:k] for p in people])
    b = np.array([theirs[p][:k] for p in people])
    return [float(abs(np.corrcoef(a[:, j], b[:, j])[0, 1])) for j in range(k)]


def trial(name: str, folder: Path, sites: Path, out: Path, args, extract: Path | None, extra: str = "") -> dict:
    """One ``fedspectral run`` over ``sites`` (its run config with ``extra``) and each site's ``transform``, against
    plink2 on the pooled file (its fit without the people the sites removed as outliers, when they removed any)."""
    work = out / name
    if work.exists():
        shutil.rmtree(work)
    (work / "plink2").mkdir(parents=True)
    k = args.rank
    run_seconds = fedspectral("run", "--run-config", run_config(sites, work / "run", args, extra))
    model = work / "run" / "pca.npz"
    ours_in = (work / "run" / "prune.in").read_text().split()
    ours_out = (work / "run" / "prune.out").read_text().split()
    ours: dict = {}
    refused: dict[int, str] = {}
    transform_seconds = 0.0
    for i in range(4):
        transform_seconds += fedspectral("transform", "--model", model, "--data", sites / f"partition_{i}.bed",
                                         "--out", work / f"site{i}.eigenvec")
        ours.update(read_eigenvec(work / f"site{i}.eigenvec"))
        try:
            plink2("--bfile", sites / f"partition_{i}", "--read-freq", work / "run" / "pca.afreq", "--score",
                   work / "run" / "pca.eigenvec.allele", 1, 4, "header-read", "no-mean-imputation",
                   "variance-standardize", "--score-col-nums", f"5-{k + 4}", "--out", work / f"site{i}")
        except subprocess.CalledProcessError:  # e.g. a .bim whose chromosomes are not contiguous
            log = (work / f"site{i}.log").read_text()
            refused[i] = " ".join(log[log.find("Error"):].split("\n\n")[0].split()) if "Error" in log else "failed"
    outliers = [line for i in range(4) if (work / f"site{i}.outliers").exists()
                for line in (work / f"site{i}.outliers").read_text().splitlines() if line.strip()]
    removed = len(outliers)  # outlier-sigma: the people the sites removed, whom plink2's fit leaves out too
    (work / "outliers.txt").write_text("".join(line + "\n" for line in outliers))
    pooled, keep = folder / "pooled", folder / "kept.keep"
    restrict = ["--extract", extract] if extract else []
    filters = ["--maf", args.maf_min, "--geno", args.geno_max]
    fit = ["--keep", keep] + (["--remove", work / "outliers.txt"] if removed else [])
    plink2("--bfile", pooled, *fit, *restrict, *filters, "--indep-pairwise", 50, 5, 0.2,
           "--out", work / "plink2" / "prune")
    plink2("--bfile", pooled, *restrict, *filters, "--indep-pairwise", 50, 5, 0.2, "--out", work / "plink2" / "all")
    theirs_in = (work / "plink2" / "prune.prune.in").read_text().split()
    without_keep = (work / "plink2" / "all.prune.in").read_text().split()
    started = time.perf_counter()
    plink2("--bfile", pooled, *fit, "--extract", work / "plink2" / "prune.prune.in", "--freq", "--pca", k,
           "allele-wts", "vcols=ref,alt", "--out", work / "plink2" / "pca")
    plink2_seconds = time.perf_counter() - started
    plink2("--bfile", pooled, "--read-freq", work / "plink2" / "pca.afreq", "--score",
           work / "plink2" / "pca.eigenvec.allele", 1, 4, "header-read", "no-mean-imputation", "variance-standardize",
           "--score-col-nums", f"5-{k + 4}", "--out", work / "plink2" / "projection")
    by_our_weights: dict = {}
    for i in range(4):
        if i not in refused:
            by_our_weights.update(read_sscore(work / f"site{i}.sscore", k))
    fitted_plink2 = read_eigenvec(work / "plink2" / "pca.eigenvec")
    projected = read_sscore(work / "plink2" / "projection.sscore", k)
    kept_people = set(fitted_plink2)
    left_out = [p for p in ours if p not in kept_people]
    fitted = [p for p in ours if p in kept_people]
    rounds = sum(1 for _ in open(work / "run" / "rounds.csv")) - 1 if (work / "run" / "rounds.csv").exists() else None
    eigenval = np.loadtxt(work / "run" / "pca.eigenval", ndmin=1)
    eigenval_plink2 = np.loadtxt(work / "plink2" / "pca.eigenval", ndmin=1)
    weights_diff = max(float(np.max(np.abs(by_our_weights[p] - ours[p][:k]))) for p in by_our_weights)
    return {
        "prune_in_equal": ours_in == theirs_in, "prune_in_set_equal": set(ours_in) == set(theirs_in),
        "prune_in": len(ours_in), "prune_out": len(ours_out), "plink2_prune_in": len(theirs_in),
        "only_ours": len(set(ours_in) - set(theirs_in)), "only_plink2": len(set(theirs_in) - set(ours_in)),
        "plink2_prune_in_without_keep": len(without_keep),
        "differ_without_keep": len(set(without_keep) ^ set(theirs_in)),
        "fitted": len(fitted), "left_out": len(left_out), "outliers_removed": removed,
        "r_fitted": correlations(ours, fitted_plink2, fitted, k),
        "r_left_out": correlations(ours, projected, left_out, k),
        "r_plink2_own_projection": correlations(fitted_plink2, projected, fitted, k),
        "our_weights_max_abs_difference": weights_diff,
        "plink2_score_refused": {f"site {i}": message for i, message in refused.items()},
        "eigenval_ratio_minus_1": (eigenval[:k] / eigenval_plink2[:k] - 1).tolist(),
        "rounds": rounds, "run_seconds": run_seconds, "transform_seconds": transform_seconds,
        "plink2_pca_seconds": plink2_seconds,
    }


def table(results: dict, info: dict, args, command: str) -> str:
    k = args.rank
    day = time.strftime('%Y-%m-%d', time.gmtime())
    lines = [f"# The consortium trial: the ancestry workflow against plink2 ({day})", "",
             f"`{command}`", "",
             f"{info['people']} people x {info['variants']} variants ({info['model']}, {info['segments']} segment(s)), "
             f"four sites of {', '.join(map(str, info['site_people']))} people with "
             f"{', '.join(f'{m:.1%}' for m in info['missing'])} missing calls; "
             f"{', '.join(map(str, info['kept']))} of them in the fit (.keep). Run config: "
             f"`{run_config(Path('sites'), Path('out'), args)}` (trial `secure`: with `{SECURE_CONFIG}`). "
             "plink2: `--bfile pooled --keep kept.keep --maf "
             f"{args.maf_min} --geno {args.geno_max} --indep-pairwise 50 5 0.2`, then `--extract prune.in --pca {k} "
             "allele-wts` (exact) and `--score` of everyone with its `.eigenvec.allele`; where the sites removed "
             "outliers, plink2's fit also `--remove`s their `.outliers` (the run re-prunes without them too).", "",
             "| trial | prune.in (ours / plink2) | equal, in order | plink2 without --keep: prune.in (differ) | "
             "rounds | 1 - |r| fitted, PC1..PCk | 1 - |r| left out (plink2's projection) | "
             "plink2's projection of its fitted people: 1 - |r| against its .eigenvec | "
             "plink2 --score with pca.eigenvec.allele, max abs diff | eigenvalue / plink2's - 1 | run (s) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, r in results.items():
        lines.append(
            f"| {name} | {r['prune_in']} / {r['plink2_prune_in']} | {r['prune_in_equal']} | "
            f"{r['plink2_prune_in_without_keep']} ({r['differ_without_keep']}) | {r['rounds']} | "
            + ", ".join(f"{1 - x:.1e}" for x in r["r_fitted"]) + " | "
            + ", ".join(f"{1 - x:.1e}" for x in r["r_left_out"]) + " | "
            + ", ".join(f"{1 - x:.1e}" for x in r["r_plink2_own_projection"])
            + f" | {r['our_weights_max_abs_difference']:.1e} | "
            + ", ".join(f"{x:+.1e}" for x in r["eigenval_ratio_minus_1"]) + f" | {r['run_seconds']:.0f} |")
    verdict = [f"- {name}: plink2 --score refused the file of {site}: {message}"
               for name, r in results.items() for site, message in r["plink2_score_refused"].items()]
    for name, r in results.items():
        ok = (r["prune_in_equal"], min(r["r_fitted"][:2]) >= TARGET_FITTED, min(r["r_left_out"][:2]) >= TARGET_LEFT_OUT)
        verdict.append(f"- {name}: prune.in equal to plink2's: {ok[0]}; PC1-2 fitted |r| >= {TARGET_FITTED}: {ok[1]}; "
                       f"PC1-2 left out |r| >= {TARGET_LEFT_OUT}: {ok[2]}"
                       + (f"; outliers removed by the sites: {r['outliers_removed']}" if name == "secure" else ""))
    return "\n".join(lines + [""] + verdict) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--people", type=int, default=2400)
    parser.add_argument("--variants", type=int, default=30000)
    parser.add_argument("--rank", type=int, default=4)
    parser.add_argument("--iteration-rank", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--maf-min", type=float, default=0.01)
    parser.add_argument("--geno-max", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data", help="keep the genotypes here (and use them again)")
    parser.add_argument("--out")
    parser.add_argument("--trials", nargs="+", default=["sites", "arrays", "secure"],
                        choices=["sites", "arrays", "secure"])
    parser.add_argument("--write-sites", metavar="DIR", help="only write the four sites' files (missing calls, "
                        "no .keep) to DIR as partition_<i>.bed/.bim/.fam, and stop")
    args = parser.parse_args(argv)
    if args.write_sites:
        write_sites(Path(args.write_sites), args.people, args.variants, args.seed)
        print(f"wrote {args.write_sites}/partition_0..3.bed ({args.people} people x {args.variants} variants)")
        return 0
    if shutil.which("plink2") is None:
        print("ancestry_trial: plink2 is not installed", file=sys.stderr)
        return 2
    out = out_folder("ancestry_trial", args.out)
    out.mkdir(parents=True, exist_ok=True)
    folder = Path(args.data) if args.data else out / "data"
    started = time.perf_counter()
    info = make_sites(folder.resolve(), args.people, args.variants, args.seed)
    print(f"genotypes: {info['people']} x {info['variants']}, {time.perf_counter() - started:.0f} s", flush=True)
    results = {}
    for name in args.trials:
        extract = folder.resolve() / "shared.txt" if name == "arrays" else None
        sites = folder.resolve() / ("sites" if name == "secure" else name)
        extra = SECURE_CONFIG if name == "secure" else ""
        results[name] = trial(name, folder.resolve(), sites, out.resolve() / "work", args, extract, extra)
        print(name, json.dumps(results[name]), flush=True)
    command = "python -m simulations.benchmarks.ancestry_trial " + " ".join(argv if argv is not None else sys.argv[1:])
    text = table(results, info, args, command.strip())
    (out / "ancestry_trial.md").write_text(text)
    (out / "ancestry_trial.json").write_text(json.dumps({"simulation": info, "results": results}, indent=1) + "\n")
    if not args.data:
        shutil.rmtree(folder, ignore_errors=True)
    shutil.rmtree(out / "work", ignore_errors=True) if os.environ.get("ANCESTRY_TRIAL_KEEP") is None else None
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
