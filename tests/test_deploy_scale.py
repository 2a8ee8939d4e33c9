"""``scale = true`` and ``init-from`` on real SuperNodes: the column sums travel as node properties, the scales with
every instruction, and a relative ``init-from`` is the user's file (the in-process twins: ``tests/test_standardize.py``,
``tests/test_warm_start.py``)."""

from __future__ import annotations

import shutil
import subprocess
import sys

import numpy as np
import pytest
from sklearn.decomposition import PCA
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from conftest import run_app
from fl_strategies.kernels.linalg import subspace_distance
from fl_strategies.files.pca import load_model
from test_standardize import CONSTANT, D, K, unit_files


@pytest.mark.deploy  # real processes: one deployment, about 1-1.5 min on 2 loaded cores
@pytest.mark.timeout(600)
def test_scaled_pca_on_supernodes_started_from_an_earlier_model(tmp_path):
    data = tmp_path / "node-files"
    X = np.vstack(unit_files(data))
    earlier = tmp_path / "earlier"
    run_app(strategy="covariance", dataset=str(data), num_clients=3, rank=K, iteration_rank=K, num_server_rounds=1,
            center=True, scale=True, row_normalize=False, results_dir=str(earlier))
    user = tmp_path / "elsewhere"
    user.mkdir()
    shutil.copy(earlier / "pca.npz", user / "start.npz")
    run_config = ('dataset="nodes" num-clients=3 center=true scale=true row-normalize=false strategy="fedpower" '
                  f'rank={K} iteration-rank={K} local-steps=1 num-server-rounds=3 init-from="start.npz" '
                  'results-dir="out"')
    done = subprocess.run([sys.executable, "-m", "simulations.engines.deploy", "--data-dir", str(data),
                           "--run-config", run_config], cwd=user, capture_output=True, text=True, timeout=420)
    log = done.stdout + done.stderr
    assert done.returncode == 0, log[-4000:]
    assert "init-from: Z_0 from the 3 component(s) of" in log and "scale = true" in log, log[-4000:]
    model = load_model(user / "out" / "pca.npz")
    ref = make_pipeline(StandardScaler(), PCA(n_components=K)).fit(X)
    scaler, pca = ref.named_steps["standardscaler"], ref.named_steps["pca"]
    assert model["scale"][CONSTANT] == 1.0
    np.testing.assert_allclose(model["scale"], scaler.scale_, rtol=1e-8, atol=0)
    assert subspace_distance(model["components"].T, pca.components_.T) < 1e-8  # started at the answer, kept it
    np.testing.assert_allclose(model["explained_variance"], pca.explained_variance_, rtol=1e-8)
