"""On real SuperNodes: noise only its client knows, and a private run killed and resumed.

The in-process twins (nodes with a ``data-path`` in their node config, as a SuperNode has) are in
``tests/test_noise_source.py``; here the nodes are ``flower-supernode`` processes of
:class:`simulations.engines.deploy.LocalDeployment`, each reading its own file.
"""

from __future__ import annotations

import stat
import time

import numpy as np
import pandas as pd
import pytest

from test_noise_source import _blocks

PRIVATE = ('dataset="nodes" num-clients=3 strategy="fedpower" rank=2 iteration-rank=2 local-steps=1 '
           'schedule="fixed" epsilon=1.0 delta=1e-4 row-normalize=true seed=0')  # default noise-source: "auto"
TIMING = ["wall_time"]
"""The columns of ``rounds.csv`` that measure time, not the run."""


def _node_files(folder) -> list:
    """Node ``i``'s rows (unit-norm, planted rank-2 spike; 800, 600 and 1000 rows) in ``folder/partition_<i>.npy``."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, block in enumerate(_blocks()):
        np.save(folder / f"partition_{i}.npy", block)
        paths.append(folder / f"partition_{i}.npy")
    return paths


def _rows(directory) -> pd.DataFrame:
    return pd.read_csv(directory / "rounds.csv")


RECORDING_SERVER = '''"""fedspectral's ServerApp, saving every reply it receives to results-dir/replies.npz (tests only)."""

from pathlib import Path

import numpy as np
from flwr.serverapp import ServerApp

from server_app.app import run_server

app = ServerApp()


@app.main()
def main(grid, context):
    seen = []
    try:
        run_server(grid, context, observer=lambda rnd, pid, Z, arrays: seen.append((rnd, pid, Z.copy(), arrays[0].copy())))
    finally:
        if seen:
            np.savez(Path(context.run_config["results-dir"]) / "replies.npz", round=[s[0] for s in seen],
                     partition=[s[1] for s in seen], Z=np.stack([s[2] for s in seen]), Y=np.stack([s[3] for s in seen]))
'''


def _recording_app(folder):
    """A copy of this repository's Flower app whose ServerApp also saves what it receives (``RECORDING_SERVER``).

    The product is unchanged (the same ``run_server``, with the observer the in-process tests use); only the
    copy's ``pyproject.toml`` names the recording ServerApp (and ships it: ``fab-include``).
    """
    import shutil
    import subprocess

    from simulations.engines import APP_DIR

    names = subprocess.run(["git", "ls-files"], cwd=APP_DIR, capture_output=True, text=True, check=True).stdout
    for name in names.split("\n"):
        if name and (APP_DIR / name).is_file() and "/results/" not in name:
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(APP_DIR / name, folder / name)
    (folder / "recording_server.py").write_text(RECORDING_SERVER)
    pyproject = (folder / "pyproject.toml").read_text()
    assert 'serverapp = "server_app.app:app"' in pyproject and "fab-include = [" in pyproject
    pyproject = pyproject.replace('serverapp = "server_app.app:app"', 'serverapp = "recording_server:app"')
    # the app bundle holds only the files fab-include names: the recording ServerApp is one more
    (folder / "pyproject.toml").write_text(pyproject.replace("fab-include = [", 'fab-include = ["recording_server.py", '))
    return folder


@pytest.mark.deploy  # real processes: one deployment, four runs of two rounds, about 3-5 min on 2 loaded cores
@pytest.mark.timeout(900)  # every process is stopped in finally blocks (and by the flower_processes fixture)
def test_private_runs_on_supernodes_draw_new_noise_the_server_cannot_remove(tmp_path):
    """Two runs with the same run config and seed, epsilon = 1 and the default ``noise-source`` on SuperNodes without
    secret files: the nodes draw a new secret in each run's node state, so the noisy estimates differ, and every
    noisy row says ``node-secret``. The same two runs with ``noise-source = "seeded-not-private"`` give the same
    estimate to the bit (so the first check can fail).

    Playing the server (``test_noise_source._best_reconstruction``, on the replies the ServerApp received, saved by
    a recording copy of the app): with node-secret noise its best guess of every ``A_i Z`` errs by at least half
    the noise-to-signal ratio (where that ratio is in (0.1, 1), see the in-process twin), with the seeded noise
    by less than 1e-10."""
    from simulations.engines.deploy import LocalDeployment
    from test_noise_source import _best_reconstruction

    files = _node_files(tmp_path / "data")
    blocks = [np.load(f) for f in files]
    app = _recording_app(tmp_path / "app")
    config = PRIVATE + " num-server-rounds=2"
    out = {}
    started = time.monotonic()
    with LocalDeployment(files, tmp_path / "deployment", app_dir=app) as deployment:
        for name, extra in [("private-1", ""), ("private-2", ""), ("seeded-1", 'noise-source="seeded-not-private"'),
                            ("seeded-2", 'noise-source="seeded-not-private"')]:
            out[name] = tmp_path / name
            status = deployment.run([config, extra], out[name])
            assert status == "finished:completed", f"{name}: {status}"
    print(f"four deployment runs: {time.monotonic() - started:.0f} s")
    estimates = {name: np.load(directory / "estimate.npy") for name, directory in out.items()}
    for name, directory in out.items():
        rows = _rows(directory)
        source = "node-secret" if name.startswith("private") else "seeded-not-private"
        assert list(rows["round"]) == [0, 1, 2] and set(rows["noise_source"].iloc[1:]) == {source}, rows
        assert rows["epsilon_spent"].iloc[-1] > 0
    gap = np.max(np.abs(estimates["private-1"] - estimates["private-2"]))
    print(f"max |private-1 - private-2| = {gap:.3e}")
    assert not np.allclose(estimates["private-1"], estimates["private-2"], rtol=0, atol=1e-6)
    np.testing.assert_array_equal(estimates["seeded-1"], estimates["seeded-2"])
    assert not np.allclose(estimates["private-1"], estimates["seeded-1"], rtol=0, atol=1e-6)

    cfg = {"num-server-rounds": 2, "epsilon": 1.0, "delta": 1e-4}
    for name, directory in out.items():
        saved = np.load(directory / "replies.npz")
        replies = list(zip(saved["round"], saved["partition"], saved["Z"], saved["Y"]))
        assert len(replies) == 2 * len(blocks)
        attack = _best_reconstruction(blocks, replies, cfg)
        print(name, "best relative error / noise-to-signal:", ", ".join(f"{b:.2g}/{r:.2g}" for b, r in attack))
        if name.startswith("private"):
            meaningful = [(best, ratio) for best, ratio in attack if 0.1 < ratio < 1.0]
            assert len(meaningful) >= 2, attack
            assert all(best >= 0.5 * ratio for best, ratio in meaningful), attack
        else:
            assert all(best < 1e-10 for best, _ in attack), attack


@pytest.mark.deploy  # real processes: two deployments, an uninterrupted run, a killed one and its resumption
@pytest.mark.timeout(900)  # every process is stopped in finally blocks (and by the flower_processes fixture)
def test_a_private_deployment_killed_after_round_2_resumes_to_the_uninterrupted_results(tmp_path):
    """Node secrets in ``noise-secret`` files (node config, as ``deploy.py --noise-secret-dir`` sets it): a private
    FedPower run with checkpoints is killed after round 2 together with the whole deployment (SIGKILL to the
    SuperLink, the SuperNodes, the ServerApp), a new deployment on the same node files and secret files resumes
    it, and the result equals an uninterrupted run's: every column of ``rounds.csv`` but the timing ones, and the
    estimate, to the bit."""
    from simulations.engines.deploy import LocalDeployment, secret_files

    files = _node_files(tmp_path / "data")
    secrets = secret_files(tmp_path / "secrets", len(files))
    config = PRIVATE + " num-server-rounds=4 clients-per-round=2"
    whole, run = tmp_path / "whole", tmp_path / "run"
    checkpoint = f'checkpoint-dir="{run}"'
    started = time.monotonic()
    with LocalDeployment(files, tmp_path / "deployment-1", node_config=secrets) as deployment:
        assert deployment.run(config, whole) == "finished:completed"
        first = time.monotonic()
        deployment.start_run([config, checkpoint], run)
        rounds = run / "rounds.csv"
        deadline = time.monotonic() + 400
        while not (rounds.exists() and len(rounds.read_text().splitlines()) >= 4):  # header, rounds 0-2
            assert time.monotonic() < deadline, "round 2 was not written in time"
            time.sleep(0.2)
        deployment.kill()  # the whole deployment at once, as a crash of the machine
        killed = rounds.read_text().splitlines()
    assert len(killed) in (4, 5), killed  # killed after round 2 (round 3 at the latest)
    secret_paths = sorted((tmp_path / "secrets").iterdir())
    assert len(secret_paths) == 3 and all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in secret_paths)
    assert len({p.read_bytes() for p in secret_paths}) == 3
    resumed_at = time.monotonic()
    with LocalDeployment(files, tmp_path / "deployment-2", node_config=secrets) as deployment:
        status = deployment.run([config, checkpoint, "resume=true"], run)
    print(f"uninterrupted run {first - started:.0f} s (with start-up), killed run {resumed_at - first:.0f} s, "
          f"resumed deployment {time.monotonic() - resumed_at:.0f} s")
    assert status == "finished:completed"
    resumed, reference = _rows(run), _rows(whole)
    assert list(resumed["round"]) == [0, 1, 2, 3, 4] and set(resumed["noise_source"].iloc[1:]) == {"node-secret"}
    assert rounds.read_text().splitlines()[:3] == killed[:3]  # header, rounds 0 and 1: kept as written
    pd.testing.assert_frame_equal(resumed.drop(columns=TIMING), reference.drop(columns=TIMING))
    np.testing.assert_array_equal(np.load(run / "estimate.npy"), np.load(whole / "estimate.npy"))
