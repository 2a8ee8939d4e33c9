"""On real SuperNodes: PCA of node files the server never sees, as scikit-learn computes it on the pooled rows.

``python -m simulations.engines.deploy`` is run as a user types it (a subprocess, from a directory of its own), with
node files in a directory that only the SuperNodes are told about (``--data-dir``: each node's ``data-path`` in its
node config); the run config names no data path. The in-process twins are in ``tests/test_pca.py`` and
``tests/test_product_boundary.py``.
"""

from __future__ import annotations

import subprocess
import sys
import time

import numpy as np
import pytest
from sklearn.decomposition import PCA

from fl_strategies.kernels.linalg import subspace_distance
from fl_strategies.files.pca import load_model
from test_pca import D, K, node_files

SIZES = (60, 90, 150)  # different row counts per node
RUN_CONFIG = ('dataset="nodes" num-clients=3 center=true row-normalize=false strategy="fedpower" rank=3 '
              'iteration-rank=6 local-steps=1 clients-per-round=3 num-server-rounds=4 results-dir="pca-out"')


def _deploy(data_dir, cwd) -> subprocess.CompletedProcess:
    """``python -m simulations.engines.deploy --data-dir DATA --run-config '...'`` from ``cwd``."""
    return subprocess.run([sys.executable, "-m", "simulations.engines.deploy", "--data-dir", str(data_dir),
                           "--run-config", RUN_CONFIG], cwd=cwd, capture_output=True, text=True, timeout=420)


@pytest.mark.deploy  # real processes: two deployments, about 1.5-3 min on 2 loaded cores
@pytest.mark.timeout(900)  # every process is stopped by the script (and the flower_processes fixture)
def test_pca_of_node_files_on_supernodes_is_scikit_learns_and_an_empty_node_file_fails_the_run(tmp_path):
    """Nodes with 60, 90 and 150 rows of a data set with a non-zero mean (node 1 as a .csv file, the others .npy):
    the written ``pca.npz`` has scikit-learn's components (sin theta < 1e-6), explained variance (1e-6 relative),
    mean (1e-10) and row count. The same command with one node's file empty is refused before any process starts
    (exit 2, one line naming the partition, its file and the reason)."""
    data = tmp_path / "node-files"  # known to the SuperNodes only
    blocks = node_files(data, sizes=SIZES)
    (data / "partition_1.npy").unlink()
    np.savetxt(data / "partition_1.csv", blocks[1], delimiter=",", fmt="%.17g")  # round-trips every float64
    blocks[1] = np.loadtxt(data / "partition_1.csv", delimiter=",")
    X = np.vstack(blocks)
    assert abs(X.mean(axis=0)).max() > 0.5 and str(data) not in RUN_CONFIG
    user = tmp_path / "elsewhere"  # the directory the user runs the command from
    user.mkdir()

    started = time.monotonic()
    done = _deploy(data, user)
    log = done.stdout + done.stderr
    assert done.returncode == 0, log[-4000:]
    print(f"deployment PCA run: {time.monotonic() - started:.0f} s")
    assert "fedspectral: run completed" in log and str(data) not in done.stdout  # the server never saw the path
    model = load_model(user / "pca-out" / "pca.npz")  # a relative results-dir is the user's, not the SuperLink's
    ref = PCA(n_components=K).fit(X)
    sin_theta = subspace_distance(model["components"].T, ref.components_.T)
    variance_error = np.max(np.abs(model["explained_variance"] / ref.explained_variance_ - 1))
    mean_error = np.max(np.abs(model["mean"] - X.mean(axis=0)))
    print(f"sin theta {sin_theta:.2e}, explained variance {variance_error:.2e} relative, mean {mean_error:.2e}")
    assert sin_theta < 1e-6
    np.testing.assert_allclose(model["explained_variance"], ref.explained_variance_, rtol=1e-6)
    np.testing.assert_allclose(model["mean"], X.mean(axis=0), rtol=0, atol=1e-10)
    assert model["n_samples"] == X.shape[0] == sum(SIZES)
    np.testing.assert_allclose(model["components"], ref.components_, rtol=0, atol=1e-6)  # signs included
    assert model["components"].shape == (K, D)

    np.save(data / "partition_2.npy", np.zeros((0, D)))  # node 2's file is now empty
    other = tmp_path / "other-user"  # a fresh results-dir: the first run's results are kept
    other.mkdir()
    started = time.monotonic()
    failed = _deploy(data, other)
    log = failed.stdout + failed.stderr
    print(f"deployment run with an empty node file: {time.monotonic() - started:.0f} s")
    # refused before any process starts, in one line naming the partition, its file and the reason
    assert failed.returncode == 2 and len(failed.stderr.strip().splitlines()) == 1, log[-4000:]
    assert "--data-dir" in log and "partition 2: node file" in log and "partition_2.npy" in log, log[-4000:]
    assert "at least 1 row" in log and not (other / "pca-out").exists(), log[-4000:]
