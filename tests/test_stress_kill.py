"""Stress: two ``compare`` runs and one ``transform`` on the same folders at once, then a kill at a random point.

Every file the user owns (the data folder, a model, a note in the output folder) is intact afterwards, and every
result is complete or absent: ``--out`` holds the previous comparison or the whole new one, the scores file is
a whole array or is not there.
"""

from __future__ import annotations

import hashlib
import os
import random
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from simulations.compare import main as compare_main
from simulations.engines import APP_DIR
from test_compare_files import _complete_results, _snapshot

CONFIG = """
seeds = [0, 1]
[defaults]
dataset = "{data}"
num-clients = 3
rank = 2
iteration-rank = 2
num-server-rounds = {rounds}
[[runs]]
name = "p"
strategy = "fedpower"
[[runs]]
name = "q"
strategy = "power"
"""

_DRAW = random.Random(23)
KILL_TIMES = [round(_DRAW.uniform(lo, hi), 2) for lo, hi in ((0.5, 3.0), (3.0, 8.0), (8.0, 14.0))]
"""Seconds after the start at which everything still running is killed: one random point (seeded, so
reproducible) while the processes start and the transform runs, one early and one late in the comparison."""


def _digest(paths):
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in paths}


def _start(*args):
    env = {**os.environ, "PYTHONPATH": str(APP_DIR)}
    return subprocess.Popen([sys.executable, "-m", *map(str, args)], cwd=APP_DIR, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


@pytest.mark.slow  # three processes per kill time, about 20 s each on two busy cores
@pytest.mark.parametrize("kill_after", KILL_TIMES)
def test_a_kill_at_any_point_leaves_user_files_intact_and_results_whole_or_absent(tmp_path, kill_after):
    data = tmp_path / "data"
    data.mkdir()
    rng = np.random.default_rng(0)
    for i in range(3):
        np.save(data / f"partition_{i}.npy", rng.standard_normal((2000, 8)))
    out = tmp_path / "out"
    out.mkdir()
    (out / "my-notes.txt").write_text("the user's own notes, beside the results")
    (tmp_path / "short.toml").write_text(CONFIG.format(data=data, rounds=3))
    (tmp_path / "long.toml").write_text(CONFIG.format(data=data, rounds=300))
    assert compare_main([str(tmp_path / "short.toml"), "--out", str(out)]) == 0
    model = tmp_path / "model.npz"
    model.write_bytes(next((out / "estimates").glob("*.pca.npz")).read_bytes())
    scores_dir = tmp_path / "scores"
    scores_dir.mkdir()
    owned = [*data.iterdir(), model, out / "my-notes.txt"]
    before_files, before_results = _digest(owned), _snapshot(out)

    procs = [_start("simulations.compare", tmp_path / "long.toml", "--out", out),
             _start("simulations.compare", tmp_path / "long.toml", "--out", out),
             _start("client_app.transform", "--model", model, "--data", data / "partition_0.npy",
                    "--out", scores_dir / "scores.npy")]
    deadline = time.monotonic() + kill_after
    while time.monotonic() < deadline and any(p.poll() is None for p in procs):
        time.sleep(0.05)
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGKILL)
        p.wait(timeout=30)

    assert _digest(owned) == before_files  # nothing the user owns was touched
    after = _snapshot(out)
    if after != before_results:  # else: the previous comparison, as it was
        _complete_results(out, 300)
    assert (out / "my-notes.txt").is_file()
    codes = sorted(p.returncode for p in procs[:2])
    assert 2 in codes or -signal.SIGKILL in codes  # never two comparisons writing one --out at once
    scores = scores_dir / "scores.npy"
    if scores.exists():
        assert np.load(scores).shape == (2000, 2)
    # at most a hidden temporary (and the unlocked lock file) of a killed transform beside it, never a part under
    # the result's name
    assert all(p.name == "scores.npy" or p.name == ".scores.npy.lock"
               or (p.name.startswith(".scores.npy.") and p.name.endswith(".part")) for p in scores_dir.iterdir())
