"""Mutation testing of the modules that protect users, one module at a time against its targeted fast tests.

    python tests/mutation/run.py                  # every module of [tool.mutmut.targets] in pyproject.toml
    python tests/mutation/run.py fl_strategies/privacy/noise.py fl_strategies/protocol/replies.py

For each module, ``mutmut run`` (mutmut 2, the ``mutation`` extra) plants one small change at a time in the
module (in place, restored after each) and runs the module's tests from ``[tool.mutmut.targets]`` under
``nice -n 19`` with the fast-suite markers, stopping at the first failure. A mutant that no test kills
"survives"; at the end every survivor's diff is printed. Each survivor is either killed by a new test or explained
as equivalent (no behaviour changes) in ``tests/mutation/survivors.md``. mutmut keeps its results in
``.mutmut-cache`` (git-ignored): a second run re-tests only what changed.
"""

from __future__ import annotations

import ctypes
import os
import resource
import shlex
import signal
import sqlite3
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MARKERS = "not ray and not deploy and not slow"


def targets() -> dict[str, list[str]]:
    """Module path -> its test files, from pyproject's ``[tool.mutmut.targets]``."""
    with open(ROOT / "pyproject.toml", "rb") as f:
        return dict(tomllib.load(f)["tool"]["mutmut"]["targets"])


def runner(tests: list[str]) -> str:
    """The test command for one module's mutants: its tests only, fast suite, first failure ends it.

    mutmut 2 counts only exit status 1 as a kill; pytest exits with 2 when a mutant breaks the import of a test
    module (a collection error), which mutmut would count as a survivor. Every failing status becomes 1, and the
    tests' time and memory are limited, by this script's ``--pytest`` mode (:func:`pytest_status`). No shell
    wraps it: mutmut's timeout would kill only the shell and then wait for the tests' output for ever.
    """
    return " ".join(["nice", "-n", "19", shlex.quote(sys.executable), shlex.quote(str(Path(__file__).resolve())),
                     "--pytest", "-x", "-q", "-p", "no:cacheprovider", "-m", shlex.quote(MARKERS),
                     *map(shlex.quote, tests)])


def time_limit() -> float | None:
    """Seconds a mutant's tests may run: ``MUTATION_TIME_LIMIT`` when set, else 9 times the unmutated run's time
    that mutmut measured (``.mutmut-cache``), just inside mutmut's own limit of 10 times; ``None`` if unknown."""
    if os.environ.get("MUTATION_TIME_LIMIT"):
        return float(os.environ["MUTATION_TIME_LIMIT"])
    try:
        with sqlite3.connect(f"file:{ROOT / '.mutmut-cache'}?mode=ro", uri=True) as db:
            row = db.execute("select value from MiscData where key = 'baseline_time_elapsed'").fetchone()
    except sqlite3.Error:
        return None
    return 9.0 * float(row[0]) if row else None


def memory_limit() -> int:
    """Bytes of address space a mutant's tests may take: ``MUTATION_MEMORY_LIMIT_GB`` (default 8 GiB)."""
    return int(float(os.environ.get("MUTATION_MEMORY_LIMIT_GB", "8")) * 2**30)


def _child_limits() -> None:  # runs in the pytest child before it starts
    limit = memory_limit()
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    try:  # Linux: the child dies with this process, should mutmut kill it
        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def pytest_status(args: list[str]) -> int:
    """Run pytest on ``args`` in a child process: 0 when it passes, 1 otherwise (mutmut's only kill).

    Otherwise means any failure or error status, and also a child killed by a signal, stopped at
    :func:`time_limit` (an endless loop), or out of its address space (:func:`memory_limit`): a mutant that makes
    the tests loop or allocate without bound is caught by them, and counts as killed (mutmut: "killed", or
    "suspicious" when slow). mutmut's own timeout is not relied on: it kills its process and then races its timer
    thread, and on a fast kill counts the run (status -9) as a survivor; a test process the kernel kills for
    memory (status -9 too) would likewise count as a survivor, and would first take the machine's memory.
    """
    limit = time_limit()
    try:
        done = subprocess.run([sys.executable, "-m", "pytest", *args], preexec_fn=_child_limits, timeout=limit)
    except subprocess.TimeoutExpired:
        os.write(2, f"mutation runner: the tests ran over {limit:.0f} s (an endless loop?): counted as a kill\n"
                 .encode())
        return 1
    if done.returncode < 0:
        os.write(2, f"mutation runner: the tests were killed by signal {-done.returncode}: counted as a kill\n"
                 .encode())
    return 0 if done.returncode == 0 else 1


def tally(module: str) -> str:
    """What ``.mutmut-cache`` holds for ``module``: its mutants, and how many were killed (slowly), timed out,
    survived or are untested (the survivors' diffs are printed at the end)."""
    query = """select Mutant.status, count(*) from Mutant join Line on Mutant.line = Line.id
               join SourceFile on Line.sourcefile = SourceFile.id where SourceFile.filename = ? group by 1"""
    try:
        with sqlite3.connect(f"file:{ROOT / '.mutmut-cache'}?mode=ro", uri=True) as db:
            found = dict(db.execute(query, (module,)).fetchall())
    except sqlite3.Error:
        return "no results in .mutmut-cache"
    names = {"ok_killed": "killed", "ok_suspicious": "killed slowly", "bad_timeout": "timed out",
             "bad_survived": "survived", "untested": "untested"}
    parts = [f"{found[key]} {name}" for key, name in names.items() if found.get(key)]
    return f"{sum(found.values())} mutants: " + ", ".join(parts) if found else "no mutants in .mutmut-cache"


def main(argv: list[str]) -> int:
    if argv[:1] == ["--pytest"]:
        return pytest_status(argv[1:])
    table = targets()
    unknown = [m for m in argv if m not in table]
    if unknown:
        print(f"error: {', '.join(unknown)} not in [tool.mutmut.targets] of pyproject.toml "
              f"(known: {', '.join(table)})", file=sys.stderr)
        return 2
    mutmut = [sys.executable, "-m", "mutmut"]
    status = 0
    for module in argv or list(table):
        print(f"== {module}: {' '.join(table[module])}", flush=True)
        status |= subprocess.call(["nice", "-n", "19", *mutmut, "run", "--paths-to-mutate", module,
                                   "--runner", runner(table[module]), "--simple-output", "--no-progress"], cwd=ROOT)
        print(f"== {module}: {tally(module)}", flush=True)
    survivors = subprocess.run([*mutmut, "result-ids", "survived"], cwd=ROOT, capture_output=True, text=True)
    ids = survivors.stdout.split()
    print(f"== {len(ids)} surviving mutant(s)")
    for mutant in ids:
        subprocess.call([*mutmut, "show", mutant], cwd=ROOT)
    return 1 if status & 1 else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
