"""The mutation runner's test command (tests/mutation/run.py --pytest): what mutmut counts as a kill."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

RUNNER = Path(__file__).resolve().parent / "mutation" / "run.py"


def _status(tmp_path: Path, body: str, limit: str = "20") -> int:
    (tmp_path / "test_case.py").write_text(body)
    env = dict(os.environ, MUTATION_TIME_LIMIT=limit, MUTATION_MEMORY_LIMIT_GB="2")
    return subprocess.run([sys.executable, str(RUNNER), "--pytest", "-q", "-p", "no:cacheprovider", "test_case.py"],
                          cwd=tmp_path, env=env, capture_output=True, timeout=120).returncode


@pytest.mark.parametrize("body, status", [
    ("def test_ok():\n    assert True\n", 0),
    ("def test_fails():\n    assert False\n", 1),
    ("import no_such_module_anywhere\n\ndef test_x():\n    pass\n", 1),  # pytest's status 2: still a kill
    ("import time\n\ndef test_loops():\n    while True:\n        time.sleep(0.05)\n", 1),  # stopped at the limit
    # a mutant that allocates without bound: out of the child's address space, not the machine's memory
    ("import numpy as np\n\ndef test_allocates():\n    assert np.ones(2**32).sum() > 0\n", 1),
    ("import os, signal\n\ndef test_killed():\n    os.kill(os.getpid(), signal.SIGKILL)\n", 1),  # status -9
])
def test_any_failure_a_loop_a_memory_blowup_and_a_kill_are_status_1_and_a_pass_is_0(tmp_path, body, status):
    # only the endless loop needs a short limit; the others get one that a loaded machine's pytest start-up
    # cannot reach, so that a pass is never stopped at the limit and counted as a kill
    limit = "3" if "while True" in body else "60"
    assert _status(tmp_path, body, limit=limit) == status


def test_the_tally_counts_one_modules_mutants_by_status(tmp_path, monkeypatch):
    """The line printed after each module, read from a cache laid out as mutmut 2's (SourceFile, Line, Mutant)."""
    import sqlite3

    monkeypatch.syspath_prepend(str(RUNNER.parent))
    import run

    monkeypatch.setattr(run, "ROOT", tmp_path)
    assert run.tally("a.py") == "no results in .mutmut-cache"
    with sqlite3.connect(tmp_path / ".mutmut-cache") as db:
        db.executescript("""
            create table SourceFile (id integer primary key, filename text);
            create table Line (id integer primary key, sourcefile integer);
            create table Mutant (id integer primary key, line integer, status text);
            insert into SourceFile values (1, 'a.py'), (2, 'b.py');
            insert into Line values (1, 1), (2, 2);
            insert into Mutant values (1, 1, 'ok_killed'), (2, 1, 'ok_killed'), (3, 1, 'bad_survived'),
                                      (4, 1, 'bad_timeout'), (5, 2, 'bad_survived');
        """)
    assert run.tally("a.py") == "4 mutants: 2 killed, 1 timed out, 1 survived"
    assert run.tally("c.py") == "no mutants in .mutmut-cache"
