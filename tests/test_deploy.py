"""The same app on real flower-superlink / flower-supernode processes (loopback), each node reading its own file."""

import subprocess

import numpy as np
import pandas as pd
import pytest

from conftest import distances, run_app


@pytest.mark.deploy  # real processes, about 45 s
def test_deployment_gives_the_same_numbers_as_the_in_process_engine(tmp_path):
    from simulations.deploy import main

    over = "num-clients=3 num-samples=3000 dimension=20 num-server-rounds=3 clients-per-round=2 local-steps=2"
    assert main(["--run-config", over, "--out", str(tmp_path), "--port", "19391"]) == 0
    deployed = pd.read_csv(tmp_path / "rounds.csv")
    local = run_app(num_clients=3, num_samples=3000, dimension=20, num_server_rounds=3, clients_per_round=2,
                    local_steps=2)
    np.testing.assert_allclose(deployed["subspace_distance"].to_numpy(), distances(local), rtol=0, atol=1e-12)
    assert (deployed["participants"].iloc[1:] == 2).all()
    # every process the deployment started has stopped
    out = subprocess.run(["pgrep", "-f", "flower-super.*19391|--superlink 127.0.0.1:19391"], capture_output=True,
                         text=True).stdout
    assert out.strip() == ""
