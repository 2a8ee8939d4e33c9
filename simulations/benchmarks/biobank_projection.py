"""UK Biobank's shape on paper: the federated run's time and memory projected from ``bench_biobank``'s measurements.

Nothing here is run at that size: the table is arithmetic on what :mod:`simulations.benchmarks.bench_biobank`
measured at its largest size (its ``bench_biobank.json``), under assumptions the table states:

* **a site's round is linear in its genotypes**: the seconds of one site's product per round are
  ``c * n_i * d`` with ``c`` the measured seconds per genotype and round (the fedspectral run's wall time over its
  rounds and its sites' ``n_i d``: the in-process engine runs the sites one after the other on the same 2 cores,
  so each site-round is that run's round over the sites; the run's fixed costs, opening the files and the
  discovery, are spread over its rounds); ``c`` of the sizes measured is printed to show how constant it is;
* **each site on its own machine like this one** (2 cores, its ``.bed`` on local disk, the page cache able to
  hold it), so the sites' products of a round run at the same time: a round is the slowest site's product plus
  a fixed overhead per round (``--round-overhead``: the deployment's seconds per round of Flower's messaging
  beside the work, measured by ``bench_deploy_round``) plus the round's messages at ``--bandwidth`` (``Z`` down
  and ``A_i Z`` up, ``d x r`` float64 each);
* **the rounds measured** at the largest size (``stop-tol`` on the kept components; real data with more
  structure above the bulk may need more or fewer), and the sites' people equal;
* a site's memory: its ``.bed`` (``ceil(n_i / 4) d`` bytes, memory-mapped) plus the measured per-site extra in
  units of ``d r`` float64, scaled to the new ``d``.

ProPCA's "about thirty minutes" for the top five PCs of 488,363 people x 146,671 variants is the published figure
(Agrawal et al. 2020, PLoS Genetics 16: e1008773), on their hardware, one pooled file: it is a scale, not a
race on the same machine.

Usage::

    python -m simulations.benchmarks.biobank_projection [--results FILE] [--round-overhead S] [--bandwidth MBIT]
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

__all__ = ["main", "per_genotype_seconds", "project"]

RESULTS = Path(__file__).parent / "results" / "bench_biobank" / "bench_biobank.json"
UKB_PEOPLE, UKB_VARIANTS = 488_363, 146_671
PROPCA_MINUTES = 30.0


def _fedspectral(entry: dict) -> dict:
    """The size's fedspectral row (the compare run, without the transform)."""
    return next(m for m in entry["methods"] if m["method"].startswith("fedspectral") and "transform" not in m["method"])


def per_genotype_seconds(entry: dict) -> float:
    """``c``: the run's wall seconds per round, per genotype of the federation (``people x variants``)."""
    return _fedspectral(entry)["wall"] / entry["rounds"] / (entry["people"] * entry["variants"])


def project(entry: dict, people: int, variants: int, sites: int, round_overhead: float,
            bandwidth_mbit: float) -> dict:
    """The projected run of ``people x variants`` in ``sites`` equal sites from one measured size.

    Returns
    -------
    dict
        ``site_round`` (s, one site's product), ``messages`` (s per round), ``round`` (s), ``rounds``, ``total``
        (s), ``bed_gb`` and ``site_gb`` (a site's ``.bed`` and its projected peak, GB).
    """
    c = per_genotype_seconds(entry)
    n_i = math.ceil(people / sites)
    site_round = c * n_i * variants
    r = entry["iteration_rank"]
    messages = 2 * variants * r * 8 * 8 / (bandwidth_mbit * 1e6)
    rounds = entry["rounds"]
    round_s = site_round + round_overhead + messages
    extra_per_dr = max(p["peak_mb"] - p["before_mb"] - p["bed_mb"] for p in entry["site_passes"]) * 2**20 / (
        entry["variants"] * r * 8)
    bed = math.ceil(n_i / 4) * variants
    return {"sites": sites, "people_per_site": n_i, "site_round": site_round, "messages": messages,
            "round": round_s, "rounds": rounds, "total": rounds * round_s, "bed_gb": bed / 1e9,
            "site_gb": (bed + extra_per_dr * variants * r * 8) / 1e9}


def markdown(entries: list[dict], rows: list[dict], largest: dict, round_overhead: float, bandwidth: float) -> str:
    """The table and its assumptions."""
    cs = ", ".join(f"{e['people']:,} x {e['variants']:,}: {per_genotype_seconds(e):.2e}" for e in entries)
    lines = [f"Projected from bench_biobank's {largest['people']:,} x {largest['variants']:,} run of {largest['when']} "
             f"({largest['rounds']} rounds, {largest['strategy']}, rank {largest['rank']} of iteration-rank "
             f"{largest['iteration_rank']}, stop-tol {largest['stop_tol']:g}; load {largest['load_start'][0]:.1f} / "
             f"{largest['load_end'][0]:.1f} at its start / end). Seconds per genotype and round (c), per size "
             f"measured: {cs}. Per round: the slowest site's product, {round_overhead:g} s of Flower's messaging "
             f"(`--round-overhead`), and `Z` down and `A_i Z` up at {bandwidth:g} Mbit/s (`--bandwidth`). Each site "
             "on its own 2-core machine like the one measured; equal sites.", "",
             f"| UK Biobank's shape ({UKB_PEOPLE:,} x {UKB_VARIANTS:,}) | people per site | a site's product per "
             "round (s) | messages per round (s) | round (s) | rounds | total (min) | a site's `.bed` (GB) | a "
             "site's peak memory (GB) | ProPCA, published (min) |", "|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        lines.append(f"| {row['sites']} sites | {row['people_per_site']:,} | {row['site_round']:.1f} | "
                     f"{row['messages']:.2f} | {row['round']:.1f} | {row['rounds']} | {row['total'] / 60:.1f} | "
                     f"{row['bed_gb']:.2f} | {row['site_gb']:.2f} | about {PROPCA_MINUTES:.0f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", type=Path, default=RESULTS, help="a bench_biobank.json")
    parser.add_argument("--round-overhead", type=float, default=2.6, metavar="S",
                        help="seconds of Flower's messaging per deployed round beside the work (default 2.6: "
                             "bench_deploy_round's fastest committed variant)")
    parser.add_argument("--bandwidth", type=float, default=100.0, metavar="MBIT", help="each site's link, Mbit/s")
    parser.add_argument("--sites", type=int, nargs="+", default=[4, 20])
    parser.add_argument("--out", type=Path, default=None, help="write the table here as well (markdown)")
    args = parser.parse_args(argv)
    if args.round_overhead < 0 or args.bandwidth <= 0 or min(args.sites) < 1:
        parser.error("--round-overhead must be >= 0, --bandwidth > 0, --sites >= 1")
    try:
        entries = sorted(json.loads(args.results.read_text()), key=lambda e: e["people"] * e["variants"])
    except (OSError, ValueError) as err:
        parser.error(f"--results {args.results}: {err}")
    largest = entries[-1]
    rows = [project(largest, UKB_PEOPLE, UKB_VARIANTS, s, args.round_overhead, args.bandwidth) for s in args.sites]
    text = markdown(entries, rows, largest, args.round_overhead, args.bandwidth)
    print(text, end="")
    if args.out is not None:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
