"""What ``fedspectral run`` costs over the in-process engine on genotype sites: seconds by phase, memory together.

Writes four ``.bed`` sites (admixed Balding-Nichols genotypes with LD blocks, :mod:`simulations.data.admixed_bed`),
then runs the same strategy on them three times, each a fresh command in a subprocess:

* ``in-process``: :func:`simulations.engines.local.run_local` on the run config of the file below (the in-process
  engine that ``compare`` uses: one process, the nodes served one after the other);
* ``run``: ``fedspectral run --run-config FILE.toml`` (the real command: Flower's local SuperLink and its
  simulation process, the nodes' ClientApps in that process's thread, its default ``--backend threads``), with a
  ``FLWR_HOME`` of its own;
* ``ray``: the same with ``--backend ray`` (Flower's Ray backend: Ray's processes and one actor).

For each: the wall time of the whole command, and for ``run`` its phases read from the time each streamed line
arrived: to Flower's ``Successfully started run`` (the SuperLink's start, the FAB built and sent), to the
ServerApp's first line (the simulation process, imports), to its last line (the rounds, with Ray's and its
actors' start where it runs, and the data's opening), and to the command's exit (the run's end, the SuperLink
stopped). Memory:
every 0.2 s (their proportional sets every second: :data:`PSS_SECONDS`), the processes of the command's tree
together with those below its local SuperLink (started detached, found by its ``FLWR_HOME``) are read from
``/proc``; the peaks of the sum of their resident sets (RSS: shared pages
counted once per process) and of their proportional sets (PSS: ``/proc/<pid>/smaps_rollup``, shared pages split
among the processes mapping them, so the sum is the memory the tree holds) are reported, with the number of
processes, and the load average before and after.

Usage::

    python -m simulations.benchmarks.bench_run_overhead [--people 2800] [--variants 100000] [--out DIR]
        [--only local|run|ray]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def _children() -> dict[int, list[int]]:
    """``{ppid: [pid, ...]}`` of every process now."""
    out: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                ppid = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            out.setdefault(ppid, []).append(int(entry))
    return out


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def tree(roots: list[int], marker: str | None = None) -> list[int]:
    """``roots`` and their descendants, with (``marker``) every process whose command line holds ``marker``
    (the detached SuperLink of this benchmark's ``FLWR_HOME``) and its descendants."""
    kids = _children()
    if marker:
        roots = roots + [int(e) for e in os.listdir("/proc") if e.isdigit() and marker in _cmdline(int(e))]
    found, todo = set(), list(roots)
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.add(pid)
            todo += kids.get(pid, [])
    return sorted(found)


def _kb(path: str, key: str) -> int:
    try:
        for line in Path(path).read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


SAMPLE_SECONDS = 0.2
"""Seconds between two samples of the processes' resident sets (``/proc/<pid>/status``: about 0.03 ms a process)."""
PSS_SECONDS = 1.0
"""Seconds between two samples of their proportional sets: ``/proc/<pid>/smaps_rollup`` walks a process's page
tables, 37 ms of this process's CPU for `fedspectral run`'s 13 processes during its rounds (3 ms for the in-process
engine's one): every 0.2 s that was a fifth of a core, taken from the command measured on 2 cores."""


def memory_mb(pids: list[int], pss: bool = True) -> tuple[float, float, dict[str, float]]:
    """Sum of RSS and of PSS (MB; 0 without ``pss``) of ``pids``, and PSS by program name."""
    rss = total = 0
    by_name: dict[str, float] = {}
    for pid in pids:
        r, p = _kb(f"/proc/{pid}/status", "VmRSS"), _kb(f"/proc/{pid}/smaps_rollup", "Pss") if pss else 0
        rss, total = rss + r, total + p
        if pss:
            name = _name(_cmdline(pid))
            by_name[name] = by_name.get(name, 0.0) + p / 1024
    return rss / 1024, total / 1024, by_name


def _name(cmdline: str) -> str:
    """A short name for a process of the tree (Ray's and Flower's programs by their role)."""
    words = cmdline.split()
    for key in ("ray::ClientAppActor", "ray::IDLE", "gcs_server", "raylet", "dashboard", "runtime_env",
                "log_monitor", "monitor.py", "flower-superlink", "flower-superexec", "flwr-simulation",
                "flwr run", "fedspectral run", "simulations.compare", "ray::"):
        if key in cmdline:
            return key
    return Path(words[0]).name if words else "?"


def measured(command: list[str], env: dict, marker: str | None = None) -> dict:
    """Run ``command``; its wall time, the arrival time of each output line, and the peak memory of its tree."""
    start = time.perf_counter()
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=ROOT)
    lines: list[tuple[float, str]] = []

    def drain():
        for line in proc.stdout:
            lines.append((time.perf_counter() - start, line.rstrip("\n")))

    reader = threading.Thread(target=drain)
    reader.start()
    peak = {"rss_mb": 0.0, "pss_mb": 0.0, "processes": 0, "pss_by_name": {}}
    next_pss = 0.0
    while proc.poll() is None:
        pids = [p for p in tree([proc.pid], marker)]
        with_pss = time.perf_counter() >= next_pss
        if with_pss:
            next_pss = time.perf_counter() + PSS_SECONDS
        rss, pss, by_name = memory_mb(pids, pss=with_pss)
        peak["rss_mb"] = max(peak["rss_mb"], rss)
        if pss > peak["pss_mb"]:
            peak["pss_mb"], peak["pss_by_name"] = pss, {k: round(v, 1) for k, v in sorted(by_name.items())}
        peak["processes"] = max(peak["processes"], len(pids))
        time.sleep(SAMPLE_SECONDS)
    wall = time.perf_counter() - start
    reader.join()
    left = [p for p in tree([], marker)] if marker else []
    if proc.returncode:
        raise RuntimeError(f"{' '.join(command[:3])} failed ({proc.returncode}):\n"
                           + "\n".join(text for _, text in lines[-40:]))
    return {"wall": wall, "lines": lines, "left_behind": left, **peak}


def phases(lines: list[tuple[float, str]], wall: float) -> dict:
    """Seconds of a ``fedspectral run`` by phase, from the arrival times of its lines."""
    started = next((t for t, text in lines if "Successfully started run" in text), float("nan"))
    app = [t for t, text in lines if "fedspectral: " in text]
    first, last = (app[0], app[-1]) if app else (float("nan"), float("nan"))
    return {"to_run_started": started, "to_app_first_line": first - started, "app": last - first,
            "app_end_to_exit": wall - last}


def loadavg() -> list[str]:
    """The 1, 5 and 15 minute load averages now."""
    return Path("/proc/loadavg").read_text().split()[:3]


def configs(data: Path, out: Path, args) -> Path:
    """``fedspectral run``'s run-config file (the in-process engine reads it too)."""
    keys = {"dataset": f'"{data / "sites"}"', "num-clients": 4, "strategy": '"krylov"', "rank": args.rank,
            "iteration-rank": args.iteration_rank, "num-server-rounds": args.rounds,
            "stop-tol": f"{args.stop_tol:g}", "center": "true", "scale": '"hwe"', "row-normalize": "false"}
    body = "".join(f"{k} = {v}\n" for k, v in keys.items())
    run = out / "run.toml"
    run.write_text(f"{body}results-dir = \"{out / 'run-results'}\"\noverwrite = true\n")
    return run


def rounds_seconds(results: Path) -> tuple[int, float]:
    """Rounds run and the sum of their wall times (``rounds.csv`` of a results-dir)."""
    import csv

    with open(results / "rounds.csv", newline="") as handle:
        rows = [row for row in csv.DictReader(handle) if int(row["round"]) > 0]
    return len(rows), sum(float(row["wall_time"]) for row in rows)


ONLY = {"local": "in-process engine", "run": "fedspectral run", "ray": "fedspectral run --backend ray"}
"""``--only``'s choices and the command each names."""
LOGS = {"in-process engine": "in-process", "fedspectral run": "fedspectral", "fedspectral run --backend ray": "ray"}
"""The log file's name of each command's output (``NAME.log`` in the output folder, each line with its second)."""


def markdown(result: dict) -> str:
    rows = ["| command | wall (s) | rounds | seconds in rounds | peak PSS together (MB) | peak RSS summed (MB) | "
            "processes | load average before -> after |", "|---|---|---|---|---|---|---|---|"]
    for name, r in result["commands"].items():
        rows.append(f"| {name} | {r['wall']:.1f} | {r['rounds']} | {r['round_seconds']:.1f} | {r['pss_mb']:.0f} | "
                    f"{r['rss_mb']:.0f} | {r['processes']} | {' '.join(r['load_before'])} -> "
                    f"{' '.join(r['load_after'])} |")
    for name, r in result["commands"].items():
        if "phases" in r:
            rows += ["", f"`{name}` by phase (s): "
                     + ", ".join(f"{k.replace('_', ' ')} {v:.1f}" for k, v in r["phases"].items()), "",
                     f"Peak PSS of `{name}` by process (MB): "
                     + ", ".join(f"{k} {v}" for k, v in r["pss_by_name"].items())]
    rows += ["", f"Sites' `.bed` files together: {result['bed_mb']:.0f} MB; {result['data']}"]
    return "\n".join(rows) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--people", type=int, default=2_800)
    parser.add_argument("--variants", type=int, default=100_000)
    parser.add_argument("--rank", type=int, default=4)
    parser.add_argument("--iteration-rank", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=30, help="at most; stop-tol may stop sooner")
    parser.add_argument("--stop-tol", type=float, default=1e-6)
    parser.add_argument("--data", type=Path, default=None, help="reuse the sites written there by a former run")
    parser.add_argument("--only", choices=tuple(ONLY), default=None, help="time one command only")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    out = (args.out or ROOT / "bench-runs" / f"bench_run_overhead-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}")
    out = out.absolute()
    out.mkdir(parents=True, exist_ok=True)
    data = (args.data or out / "data").absolute()
    if not (data / "sites" / "partition_3.bed").exists():
        from simulations.data.admixed_bed import write_admixed_bed

        made = write_admixed_bed(data, args.people, args.variants, pooled=False)
        print(f"wrote {data / 'sites'}: {made}", flush=True)
    run_toml = configs(data, out, args)
    env = {**os.environ, "FLWR_HOME": str(out / "flwr-home"), "PYTHONUNBUFFERED": "1"}
    env.pop("FLWR_LOCAL_SUPERLINK_HTTP_API_PORT", None)
    local = (f"from fedspectral.run_config import parse_run_config; from simulations.engines import fused_run_config;"
             f" from simulations.engines.local import run_local; cfg = parse_run_config({str(run_toml)!r}); "
             f"cfg['results-dir'] = {str(out / 'local-results')!r}; run_local(fused_run_config(cfg))")
    run = [str(BIN / "fedspectral"), "run", "--run-config", str(run_toml)]
    commands = {"in-process engine": ([str(BIN / "python"), "-c", local], None),
                "fedspectral run": (run, str(out / "flwr-home")),
                "fedspectral run --backend ray": (run + ["--backend", "ray"], str(out / "flwr-home"))}
    result = {"data": f"{args.people:,} people x {args.variants:,} variants, four sites, krylov rank {args.rank} of "
                      f"iteration-rank {args.iteration_rank}, scale = hwe, stop-tol {args.stop_tol:g}",
              "bed_mb": sum(f.stat().st_size for f in (data / "sites").glob("*.bed")) / 1e6, "commands": {}}
    for name, (command, marker) in commands.items():
        if args.only and name != ONLY[args.only]:
            continue
        before = loadavg()
        r = measured(command, env, marker)
        r["load_before"], r["load_after"] = before, loadavg()
        if marker:
            r["phases"] = phases(r["lines"], r["wall"])
        r["rounds"], r["round_seconds"] = rounds_seconds(out / ("run-results" if marker else "local-results"))
        (out / f"{LOGS[name]}.log").write_text("\n".join(f"{t:8.2f} {text}" for t, text in r.pop("lines")))
        result["commands"][name] = r
        print(f"{name}: {r['wall']:.1f} s, peak PSS {r['pss_mb']:.0f} MB, RSS summed {r['rss_mb']:.0f} MB, "
              f"{r['processes']} processes, left behind {r['left_behind']}", flush=True)
    (out / "bench_run_overhead.json").write_text(json.dumps(result, indent=1))
    if len(result["commands"]) > 1:
        text = markdown(result)
        (out / "bench_run_overhead.md").write_text(text)
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
