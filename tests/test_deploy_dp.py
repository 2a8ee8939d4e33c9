"""dp-power with Flower's SecAgg+ on real flower-superlink / flower-supernode processes (loopback)."""

import subprocess

import numpy as np
import pandas as pd
import pytest

from conftest import distances, run_app

DP = {"strategy": "dp-power", "dataset": "dp-haar", "num-clients": 3, "dimension": 60, "rank": 3,
      "iteration-rank": 6, "num-server-rounds": 2, "row-normalize": False, "secagg-clip": 1500.0, "epsilon": 4.0,
      "delta": 1e-6, "noise-source": "seeded-not-private"}  # the simulation's noise, on purpose


@pytest.mark.deploy  # real processes; each SecAgg+ round is four message exchanges, about 60-90 s in all
@pytest.mark.timeout(400)  # every process is stopped in finally blocks; a hang fails the test
def test_secagg_rounds_on_real_supernodes_match_the_in_process_engine(tmp_path):
    from simulations.engines.deploy import main

    over = " ".join(f"{k}={v!r}".replace("'", '"') if isinstance(v, str) else f"{k}={str(v).lower()}"
                    for k, v in DP.items())
    assert main(["--run-config", over, "--out", str(tmp_path)]) == 0
    deployed = pd.read_csv(tmp_path / "rounds.csv")
    local = run_app(**{k.replace("-", "_"): v for k, v in DP.items()})
    # the same X_0, the same (seeded) noise, SecAgg+ in both: equal up to its stochastic quantisation
    np.testing.assert_allclose(deployed["subspace_distance"].to_numpy(), distances(local), rtol=0, atol=1e-4)
    assert len(deployed) == 3 and deployed["epsilon_spent"].iloc[-1] == pytest.approx(local.records[-1]["epsilon_spent"])
    out = subprocess.run(["pgrep", "-f", str(tmp_path)], capture_output=True, text=True).stdout
    assert out.strip() == ""
