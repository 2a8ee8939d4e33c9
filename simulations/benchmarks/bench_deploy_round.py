"""Seconds per round of the scripted deployment (SuperLink + SuperNodes on loopback), two versions of the code.

Runs the README's deployment command, ``python -m simulations.engines.deploy --run-config 'num-clients=N
num-server-rounds=R'``, once per repeat for each variant, interleaved (``before after``, then ``after before``,
...), so that both see the same load on the machine:

* ``before``: the code of the git revision ``--before`` (default ``main``), extracted with ``git archive``;
* ``after``: this checkout.

Each run gets a fresh output folder and is started with the same environment (no ``FLWR_SUPEREXEC_*`` setting:
each variant's ``deploy`` decides). Per round it reports the server's ``wall_time`` (``rounds.csv``: from the
round's instructions to its estimate), and from the SuperNodes' logs, read as they are written and
timestamped here:

* ``pickup``: from the previous round's last reply (the last SuperNode's ``Sent successfully``) to the moment
  a SuperNode received the round's message: the server's wait for that reply and its own work, and the
  SuperNode's 3 s poll;
* ``start``: from ``Receiving`` to the ClientApp process's first line (``Start `flwr-clientapp` process``): the
  SuperExec's task poll, the process start and Flower's imports;
* ``app``: from there to the SuperNode's ``Sending``: the app installed and imported, the data opened, the work,
  the reply handed to the SuperNode (which looks for it every 0.5 s);

each the mean over the rounds after the first and the nodes, and ``critical``, the same three parts of the node
whose reply came last in each round. The load average is recorded before and after each run. The table goes to
``--out`` (default: a new folder, :func:`simulations.benchmarks.out_folder`); the deployments' own files stay in
a temporary folder that is removed at the end (``--keep`` keeps it). Usage::

    python -m simulations.benchmarks.bench_deploy_round [--before REV] [--nodes 4] [--rounds 6] [--repeats 2]
                                                        [--run-config TEXT] [--after-flags TEXT] [--out DIR]

Each ``--after-flags TEXT`` adds a variant ``after TEXT``: this checkout with more ``deploy`` options (e.g.
``--flower-defaults``, Flower's SuperNode and ClientApp as installed, or ``--supernode-poll 0.2``, which the
``before`` code may not know). ``--breakdown`` runs every process at Flower's
DEBUG level and adds a table of where each exchange of a round went for the node whose reply came last
(:data:`EXCHANGE_PARTS`; a SecAgg+ round is four exchanges, named by stage, and their sum) from Flower's own time
stamps, and for rounds of one exchange (plain) the finer :data:`PARTS` of that node's round.
"""

from __future__ import annotations

import argparse
import csv
import io
import os
import re
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from pathlib import Path

from simulations.benchmarks import out_folder

__all__ = ["main", "node_events", "round_parts", "flower_stamps", "server_stamps", "critical_breakdown",
           "node_exchanges", "server_pushes", "exchange_breakdown", "exchange_table"]

APP_DIR = Path(__file__).resolve().parents[2]
EVENTS = {"receive": "Receiving: train message", "start": "Start `flwr-clientapp` process",
          "send": "Sending: train message", "sent": "Sent successfully"}
ROUND = re.compile(r"\[RUN \d+, ROUND (\d+)\]")


class LogTail(threading.Thread):
    """Reads the SuperNodes' log files as they grow and timestamps every new line (``time.monotonic``)."""

    def __init__(self, files: list[Path]) -> None:
        super().__init__(daemon=True)
        self.files, self.lines = files, {i: [] for i in range(len(files))}
        self.done = threading.Event()

    def run(self) -> None:
        offsets = [0] * len(self.files)
        pending = [""] * len(self.files)
        while not self.done.is_set():
            now = time.monotonic()
            for i, path in enumerate(self.files):
                try:
                    with open(path, "rb") as handle:
                        handle.seek(offsets[i])
                        chunk = handle.read()
                except OSError:
                    continue
                offsets[i] += len(chunk)
                text = pending[i] + chunk.decode("utf-8", "replace")
                *complete, pending[i] = text.split("\n")
                self.lines[i].extend((now, line) for line in complete)
            time.sleep(0.02)


def node_events(lines: list[tuple[float, str]]) -> dict[int, dict[str, float]]:
    """``{round: {event: time}}`` of one SuperNode's train messages (events of :data:`EVENTS`)."""
    out: dict[int, dict[str, float]] = {}
    current = None
    for stamp, line in lines:
        match = ROUND.search(line)
        if match:
            current = int(match.group(1))
            continue
        for name, text in EVENTS.items():
            if text in line and current is not None:
                if name == "sent" and "send" not in out.get(current, {}):
                    continue
                out.setdefault(current, {}).setdefault(name, stamp)
    return out


def round_parts(nodes: list[dict[int, dict[str, float]]]) -> list[dict[str, float]]:
    """Per round after the first: the mean ``pickup``, ``start`` and ``app`` seconds over the nodes, the same of
    the node that replied last (``critical_*``) and ``round`` (last reply to last reply)."""
    rounds = sorted(set.intersection(*(set(n) for n in nodes))) if nodes else []
    complete = [r for r in rounds if all(set(EVENTS) <= set(n[r]) for n in nodes)]
    rows = []
    for previous, r in zip(complete, complete[1:]):
        if r != previous + 1:
            continue
        last = max(n[previous]["sent"] for n in nodes)
        parts = [{"pickup": n[r]["receive"] - last, "start": n[r]["start"] - n[r]["receive"],
                  "app": n[r]["send"] - n[r]["start"], "sent": n[r]["sent"]} for n in nodes]
        critical = max(parts, key=lambda p: p["sent"])
        row = {"round": r, "round_s": critical["sent"] - last}
        for key in ("pickup", "start", "app"):
            row[key] = statistics.fmean(p[key] for p in parts)
            row[f"critical_{key}"] = critical[key]
        rows.append(row)
    return rows


STAGES = (("receive", "Receiving: train message"), ("start", "Start `flwr-clientapp` process"),
          ("fab", "[flwr-clientapp] Start FAB installation."), ("load", "[flwr-clientapp] Start `ClientApp` Loading."),
          ("data", ": node config data-path"), ("push", "Runtime.PushMessages"),
          ("send", "Sending: train message"), ("sent", "Sent successfully"))
"""Events of a message in a SuperNode's log at Flower's DEBUG level (``FLWR_LOG_LEVEL=DEBUG``), in order: the
SuperNode's pull, the ClientApp process's first line (after Flower's imports), its FAB installation, the
app's loading, the app's first line (its data opened), its reply handed to the SuperNode, the SuperNode's
``Sending`` (it looks for replies every 0.5 s) and ``Sent``."""
PARTS = ("server", "poll", "process", "task_input", "fab", "app_import", "work", "reply_poll", "send")
"""The parts of a round for the node whose reply came last: from the last reply of the previous round to the
server's round line (its pull and work), to this node's ``Receiving`` (the SuperNode's 3 s sleep and the
message's fetch), then between consecutive :data:`STAGES`."""
STAMP = re.compile(r"(\d\d):(\d\d):(\d\d),(\d{3})")
#: The server's line after round r: ``round r of T: 2.93 s (waited 2.91 s ...`` (``round r: waited 2.91 s ...`` in
#: revisions before the progress line), its round the group.
SERVER_LINE = re.compile(r"round (\d+)(?: of \d+)?: (?:[\d.]+ s \()?waited")


def flower_stamps(lines: list[str]) -> dict[int, dict[str, float]]:
    """``{round: {stage: seconds after midnight}}`` from one SuperNode log's own time stamps (DEBUG level)."""
    out: dict[int, dict[str, float]] = {}
    current = None
    for line in lines:
        match = ROUND.search(line)
        if match:
            current = int(match.group(1))
            continue
        stamp = STAMP.search(line)
        if current is None or stamp is None:
            continue
        h, m, sec, ms = (int(x) for x in stamp.groups())
        for name, text in STAGES:
            if text in line:
                out.setdefault(current, {}).setdefault(name, h * 3600 + m * 60 + sec + ms / 1000)
    return out


def critical_breakdown(nodes: list[dict[int, dict[str, float]]], server: dict[int, float]) -> list[dict]:
    """Per round after the first, the :data:`PARTS` of the node whose reply came last (seconds).

    ``server`` maps a round to the time (seconds after midnight) of the server's line of that round
    (:data:`SERVER_LINE`)."""
    complete = [r for r in sorted(set.intersection(*(set(n) for n in nodes)))
                if all(len(n[r]) == len(STAGES) for n in nodes)]
    rows = []
    for previous, r in zip(complete, complete[1:]):
        if r != previous + 1 or previous not in server:
            continue
        last = max(n[previous]["sent"] for n in nodes)
        node = max(nodes, key=lambda n: n[r]["sent"])[r]
        times = [last, server[previous], *(node[name] for name, _ in STAGES)]
        rows.append({"round": r, **{part: b - a for part, a, b in zip(PARTS, times, times[1:])},
                     "total": node["sent"] - last})
    return rows


EXCHANGE_STAGES = (("receive", "Receiving: train message"), ("start", "Start `flwr-clientapp` process"),
                   ("push", "Runtime.PushMessages"), ("send", "Sending: train message"), ("sent", "Sent successfully"))
"""Events of every train message in a SuperNode's log at DEBUG level, in order, present for each message of a
round (a SecAgg+ round is four train messages of the same round: its stages)."""
EXCHANGE_PARTS = ("server", "poll", "process", "app", "reply_poll", "send")
"""The parts of one exchange (one message to every node and their replies) for the node whose reply came last:
from the last reply of the previous exchange to the ServerApp's push of this one (``Runtime.PushMessages`` in the
SuperLink's log: its pull of that reply, the reply's contents fetched, its own work), to this node's ``Receiving``
(its poll), to its ClientApp process's first line (the SuperExec's task poll, the fork), to the ClientApp's reply
handed to the SuperNode (the message and app fetched, the app loaded, the work), to the SuperNode's ``Sending``
(its look for replies), to ``Sent``."""
SECAGG_EXCHANGES = ("setup", "share_keys", "collect_masked_vectors", "unmask")
"""The names of a SecAgg+ round's four exchanges, in Flower's order."""
RUN_LINE = re.compile(r"\[RUN \d+(?:, ROUND (\d+))?\]")


def _seconds(stamp: re.Match) -> float:
    h, m, sec, ms = (int(x) for x in stamp.groups())
    return h * 3600 + m * 60 + sec + ms / 1000


def node_exchanges(lines: list[str]) -> dict[int, list[dict[str, float]]]:
    """``{round: [{stage: seconds after midnight}, ...]}``: each train message of a round in one SuperNode's log
    (DEBUG level), in the order received, with its :data:`EXCHANGE_STAGES` (a ``Receiving`` starts a message)."""
    out: dict[int, list[dict[str, float]]] = {}
    current = None
    for line in lines:
        match = RUN_LINE.search(line)
        if match:
            current = int(match.group(1)) if match.group(1) else None
            continue
        stamp = STAMP.search(line)
        if current is None or stamp is None:
            continue
        for name, text in EXCHANGE_STAGES:
            if text in line:
                if name == "receive":
                    out.setdefault(current, []).append({})
                if out.get(current):
                    out[current][-1].setdefault(name, _seconds(stamp))
    return out


def server_pushes(lines: list[str]) -> list[float]:
    """The times (seconds after midnight) of the ServerApp's pushes of messages, from the SuperLink's log (DEBUG)."""
    return sorted(_seconds(stamp) for line in lines if "Runtime.PushMessages" in line
                  and (stamp := STAMP.search(line)))


def exchange_breakdown(nodes: list[dict[int, list[dict[str, float]]]], pushes: list[float],
                       last_round: int | None = None) -> list[dict]:
    """Per exchange of every round after the first, the :data:`EXCHANGE_PARTS` of the node whose reply came last.

    Parameters
    ----------
    nodes : list of dict
        :func:`node_exchanges` of each SuperNode.
    pushes : list of float
        :func:`server_pushes`.
    last_round : int, optional
        The run's last round (``num-server-rounds``): later ones (a secure run's summary) are left out.

    Returns
    -------
    list of dict
        ``round``, ``exchange`` (1, 2, ... within the round), each part and ``total`` (seconds; the parts add up to
        it), for the rounds in which every node has the same number of complete messages.
    """
    rows = []
    previous_last = None
    for r in sorted(set.intersection(*(set(n) for n in nodes))) if nodes else []:
        counts = {len(n[r]) for n in nodes}
        if len(counts) != 1 or not all(len(m) == len(EXCHANGE_STAGES) for n in nodes for m in n[r]):
            previous_last = None
            continue
        for k in range(counts.pop()):
            messages = [n[r][k] for n in nodes]
            first_receive = min(m["receive"] for m in messages)
            node = max(messages, key=lambda m: m["sent"])
            push = max((t for t in pushes if t <= first_receive), default=None)
            if (1 < r <= (last_round or r) and previous_last is not None and push is not None
                    and push >= previous_last):
                times = [previous_last, push, *(node[name] for name, _ in EXCHANGE_STAGES)]
                rows.append({"round": r, "exchange": k + 1,
                             **{part: b - a for part, a, b in zip(EXCHANGE_PARTS, times, times[1:])},
                             "total": node["sent"] - previous_last})
            previous_last = node["sent"]
    return rows


def server_stamps(log: str) -> dict[int, float]:
    """``{round: seconds after midnight}`` of the server's round lines, :data:`SERVER_LINE` (DEBUG level: time
    stamped)."""
    out = {}
    for line in log.splitlines():
        stamp, match = STAMP.search(line), re.search(SERVER_LINE, line)
        if stamp and match:
            h, m, sec, ms = (int(x) for x in stamp.groups())
            out[int(match.group(1))] = h * 3600 + m * 60 + sec + ms / 1000
    return out


def extract(rev: str, into: Path) -> Path:
    """The files of git revision ``rev`` of this repository, in ``into``."""
    archive = subprocess.run(["git", "-C", str(APP_DIR), "archive", "--format=tar", rev], check=True,
                             capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return into


def run_once(source: Path, work: Path, nodes: int, rounds: int, extra: str, flags: list[str] = (),
             breakdown: bool = False) -> dict:
    """One deployment of the code in ``source`` (``flags``: more ``deploy`` options); its rounds, node events, log
    and load averages; with ``breakdown``, Flower logs at DEBUG level and the run's :func:`critical_breakdown`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLWR_SUPEREXEC_") and k != "FLWR_LOG_LEVEL"}
    if breakdown:
        env["FLWR_LOG_LEVEL"] = "DEBUG"
    env["PYTHONPATH"] = str(source)
    env["FLWR_HOME"] = str(work / "flwr-cli-home")
    cmd = [sys.executable, "-m", "simulations.engines.deploy", "--run-config",
           f"num-clients={nodes} num-server-rounds={rounds} {extra}".strip(), "--out", str(work / "out"), *flags]
    tail = LogTail([work / "out" / "logs" / f"supernode_{i}.log" for i in range(nodes)])
    tail.start()
    load = os.getloadavg()[0]
    began = time.monotonic()
    done = subprocess.run(cmd, cwd=source, env=env, capture_output=True, text=True)
    elapsed = time.monotonic() - began
    time.sleep(0.1)
    tail.done.set()
    tail.join()
    with open(work / "node-lines.txt", "w") as handle:  # every SuperNode line, timestamped (seconds from start)
        for i, lines in tail.lines.items():
            handle.writelines(f"{stamp - began:9.3f} node {i} {line}\n" for stamp, line in lines)
    with open(work / "out" / "rounds.csv", newline="") as handle:
        table = [row for row in csv.DictReader(handle) if int(row["round"]) > 0]
    if done.returncode != 0 or len(table) != rounds:
        raise RuntimeError(f"deployment in {work} failed (exit {done.returncode}): {done.stderr[-2000:]}")
    critical, exchanges = [], []
    if breakdown:
        logs = [(work / "out" / "logs" / f"supernode_{i}.log").read_text(errors="replace").splitlines()
                for i in range(nodes)]
        critical = critical_breakdown([flower_stamps(lines) for lines in logs], server_stamps(done.stdout))
        superlink = (work / "out" / "logs" / "superlink.log").read_text(errors="replace").splitlines()
        exchanges = exchange_breakdown([node_exchanges(lines) for lines in logs], server_pushes(superlink),
                                       rounds)
    return {"wall": [float(row["wall_time"]) for row in table], "elapsed": elapsed, "critical": critical,
            "exchanges": exchanges,
            "parts": round_parts([node_events(tail.lines[i]) for i in range(nodes)]),
            "log": done.stdout, "load": (load, os.getloadavg()[0])}


def summary(variant: str, runs: list[dict]) -> dict:
    """One table row: medians over every round of every run of a variant."""
    walls = [w for run in runs for w in run["wall"]]
    parts = [p for run in runs for p in run["parts"]]
    row = {"variant": variant, "runs": len(runs), "rounds": len(walls),
           "s_per_round_median": statistics.median(walls), "s_per_round_mean": statistics.fmean(walls),
           "run_s_mean": statistics.fmean(run["elapsed"] for run in runs)}
    for key in ("pickup", "start", "app", "critical_pickup", "critical_start", "critical_app"):
        row[key] = statistics.fmean(p[key] for p in parts) if parts else float("nan")
    return row


def exchange_table(variants: list[str], runs: dict[str, list[dict]]) -> list[str]:
    """The Markdown lines of the per-exchange breakdown: per variant and exchange of a round (SecAgg+'s stages by
    name when a round has four), the mean :data:`EXCHANGE_PARTS` over rounds 2.. of every run."""
    lines = ["", "Where each exchange of a round goes, for the node whose reply came last (rounds 2.., mean seconds; "
             "a plain round is one exchange, a SecAgg+ round four): `server`: the last reply of the previous "
             "exchange to the ServerApp's push of this one (its pull, the reply fetched, its work); `poll`: to the "
             "SuperNode's `Receiving`; `process`: to the ClientApp process's first line (the SuperExec's task poll, "
             "the fork); `app`: to its reply handed to the SuperNode (message and app fetched, app loaded, work); "
             "`reply_poll`: to the SuperNode's `Sending`; `send`: to `Sent`.", "",
             "| variant | exchange | count | " + " | ".join(EXCHANGE_PARTS) + " | total |",
             "|---|---|---|" + "---|" * (len(EXCHANGE_PARTS) + 1)]
    for variant in variants:
        rows = [row for run in runs[variant] for row in run["exchanges"]]
        count = max((row["exchange"] for row in rows), default=0)
        for k in range(1, count + 1):
            chosen = [row for row in rows if row["exchange"] == k]
            name = SECAGG_EXCHANGES[k - 1] if count == len(SECAGG_EXCHANGES) else str(k)
            lines.append(f"| {variant} | {name} | {len(chosen)} | " + " | ".join(
                f"{statistics.fmean(row[key] for row in chosen):.2f}" for key in (*EXCHANGE_PARTS, "total")) + " |")
        if count > 1:  # the whole round: the sum of its exchanges' means
            means = [{key: statistics.fmean(row[key] for row in rows if row["exchange"] == k)
                      for key in (*EXCHANGE_PARTS, "total")} for k in range(1, count + 1)]
            lines.append(f"| {variant} | round | {len(rows) // count} | " + " | ".join(
                f"{sum(mean[key] for mean in means):.2f}" for key in (*EXCHANGE_PARTS, "total")) + " |")
    return lines


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(prog="python -m simulations.benchmarks.bench_deploy_round",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", default="main", help="git revision of the code to compare with (default main)")
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--run-config", default="", help="more run-config overrides for both variants")
    parser.add_argument("--out", default=None, help="folder for the table (default: a new folder under bench-runs/)")
    parser.add_argument("--keep", action="store_true", help="keep the deployments' folders (logs, timestamped "
                        "SuperNode lines in node-lines.txt) and say where")
    parser.add_argument("--only", choices=("before", "after"), help="run one variant only (no comparison)")
    parser.add_argument("--breakdown", action="store_true", help="Flower's DEBUG log level in every process (its "
                        "time-stamped lines; the logging itself costs time) and a table of the parts of a round for "
                        "the node whose reply came last")
    parser.add_argument("--after-flags", action="append", default=[], help="more options of the deploy command "
                        "for this checkout, e.g. '--flower-defaults': each given value is one more variant, "
                        "`after FLAGS`, run in every repeat next to `before` and `after`")
    args = parser.parse_args(argv)
    out = out_folder("bench_deploy_round", args.out)
    out.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="bench_deploy_round-runs-"))
    revision = subprocess.run(["git", "-C", str(APP_DIR), "rev-parse", "--short", args.before], capture_output=True,
                              text=True).stdout.strip()
    try:
        flags = {"before": [], "after": [], **{f"after {text}": text.split() for text in args.after_flags}}
        sources = {v: APP_DIR for v in flags}
        sources["before"] = extract(args.before, scratch / "before-src")
        variants = list(flags)
        runs: dict[str, list[dict]] = {v: [] for v in variants}
        rows = []
        for k in range(args.repeats):
            order = variants if k % 2 == 0 else variants[::-1]
            for variant in [v for v in order if args.only in (None, v.split()[0])]:
                run = run_once(sources[variant], scratch / f"{variants.index(variant)}-{k}", args.nodes,
                               args.rounds, args.run_config, flags[variant], args.breakdown)
                runs[variant].append(run)
                print(f"{variant} #{k}: " + " ".join(f"{w:.2f}" for w in run["wall"]) + f" s per round; load "
                      f"{run['load'][0]:.2f} -> {run['load'][1]:.2f}", flush=True)
                for r, wall in enumerate(run["wall"], start=1):
                    part = next((p for p in run["parts"] if p["round"] == r), {})
                    rows.append({"variant": variant, "repeat": k, "round": r, "wall_time": wall,
                                 "load_before": run["load"][0], "load_after": run["load"][1], **part})
                cost = [line for line in run["log"].splitlines() if re.search(SERVER_LINE, line)]
                if cost:
                    print("  " + "\n  ".join(line.split(":", 1)[-1].strip() for line in cost), flush=True)
        table = [summary(v, runs[v]) for v in variants if runs[v]]
    finally:
        if args.keep:
            print(f"deployments kept in {scratch}")
        else:
            shutil.rmtree(scratch, ignore_errors=True)
    keys = sorted({key for row in rows for key in row}, key=lambda key: list(rows[0]).index(key)
                  if key in rows[0] else 99)
    with open(out / "bench_deploy_round.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=keys)
        writer.writeheader()
        writer.writerows(rows)
    loads = [row["load_before"] for row in rows] + [row["load_after"] for row in rows]
    lines = [f"`before`: {args.before} ({revision}); `after`: this checkout. "
             f"Produced by `python -m simulations.benchmarks.bench_deploy_round --before {args.before} --nodes "
             f"{args.nodes} --rounds {args.rounds} --repeats {args.repeats}"
             + (f" --run-config '{args.run_config}'" if args.run_config else "")
             + "".join(f" --after-flags='{text}'" for text in args.after_flags)
             + (" --breakdown" if args.breakdown else "") + "`; load average (1 min) "
             f"{min(loads):.1f} to {max(loads):.1f} on {os.cpu_count()} cores; seconds per round are the server's "
             "`wall_time` (median and mean over every round of every run), the parts are means over rounds 2.. "
             "(all nodes; `critical`: the node whose reply came last).", "",
             "| variant | runs | rounds | s / round (median) | s / round (mean) | run (s) | pickup | start | app "
             "| critical pickup | critical start | critical app |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in table:
        lines.append(f"| {row['variant']} | {row['runs']} | {row['rounds']} | {row['s_per_round_median']:.2f} | "
                     f"{row['s_per_round_mean']:.2f} | {row['run_s_mean']:.1f} | {row['pickup']:.2f} | "
                     f"{row['start']:.2f} | {row['app']:.2f} | {row['critical_pickup']:.2f} | "
                     f"{row['critical_start']:.2f} | {row['critical_app']:.2f} |")
    lines += [""] + [f"{row['variant']} / {table[0]['variant']} (median s per round): "
                     f"{row['s_per_round_median'] / table[0]['s_per_round_median']:.2f}" for row in table[1:]]
    single = [variant for variant in variants if max(
        (row["exchange"] for run in runs[variant] for row in run["exchanges"]), default=1) == 1]
    if args.breakdown and any(run["critical"] for variant in single for run in runs[variant]):
        lines += ["", "Where a round's seconds go, for the node whose reply came last (Flower's own time stamps at "
                  "DEBUG level; mean over rounds 2.. of every run, seconds): `server`: last reply of the previous "
                  "round to the server's round line (its pull, its work); `poll`: to the SuperNode's "
                  "`Receiving` (its 3 s sleep after an empty poll); `process`: to the ClientApp process's first "
                  "line (the SuperExec's task poll, the process start, Flower's imports); `task_input`: its task "
                  "and message fetched; `fab`: the app (FAB) unpacked and checked; `app_import`: the app imported "
                  "and the node's data opened; `work`: the reply computed and handed to the SuperNode; "
                  "`reply_poll`: until the SuperNode sends it (it looks every 0.5 s); `send`: the reply sent.", "",
                  "| variant | rounds | " + " | ".join(PARTS) + " | total |",
                  "|---|---|" + "---|" * (len(PARTS) + 1)]
        for variant in single:  # a round of several exchanges (SecAgg+): the table below only
            rows_ = [row for run in runs[variant] for row in run["critical"]]
            if rows_:
                lines.append(f"| {variant} | {len(rows_)} | " + " | ".join(
                    f"{statistics.fmean(row[key] for row in rows_):.2f}" for key in (*PARTS, "total")) + " |")
    if args.breakdown:
        lines += exchange_table(variants, runs)
    (out / "bench_deploy_round.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"written: {out / 'bench_deploy_round.csv'}, {out / 'bench_deploy_round.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
