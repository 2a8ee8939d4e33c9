"""Large populations: lazy per-partition data and discovery without messages."""

from __future__ import annotations

import time

import numpy as np
import pytest
from conftest import distances, run_app

from fl_strategies.settings.config import ConfigError, validate_run_config
from simulations.data.datasets import lazy_partition, lazy_partition_sizes, model1_basis
from simulations.engines import fused_run_config
from simulations.data.federated_data import (client_rows, data_shape, federated_dataset, local_covariance,
                                        partition_sizes, reference)

LAZY = {"dataset": "fedpower-model1-lazy", "partitioner": "contiguous", "num-samples": 1003, "num-clients": 7,
        "dimension": 12, "rank": 3, "row-normalize": True}


def cfg(**over):
    return validate_run_config(fused_run_config({**LAZY, **over}))


def test_lazy_partition_alone_equals_its_block_of_the_whole():
    c = cfg()
    data, parts = federated_dataset(c)
    sizes = lazy_partition_sizes(1003, 7)
    assert sizes.tolist() == [144, 144, 143, 143, 143, 143, 143]  # 1003 = 7 * 143 + 2
    assert [p.size for p in parts] == sizes.tolist() == partition_sizes(c).tolist()
    for pid in (0, 3, 6):
        alone = client_rows(c, pid)
        np.testing.assert_array_equal(alone, data.X[parts[pid]])
        A, s = local_covariance(c, pid)
        assert s == sizes[pid]
        np.testing.assert_allclose(A, alone.T @ alone / s, rtol=1e-14)
    assert np.allclose(np.linalg.norm(data.X, axis=1), 1.0)  # row-normalize applies per row, as for the whole


def test_lazy_data_are_model1_with_its_basis():
    """Same spike basis as fedpower-model1; the empirical covariance approaches U U^T + 0.36 I."""
    rows = lazy_partition("fedpower-model1-lazy", 0, num_samples=40_000, dimension=6, rank=2, num_clients=1,
                          seed=5, row_normalize=False)
    U = model1_basis(6, 2, 5)
    np.testing.assert_allclose(rows.T @ rows / rows.shape[0], U @ U.T + 0.36 * np.eye(6), atol=0.03)


def test_streamed_reference_equals_the_reference_of_the_whole_matrix():
    c = cfg(**{"data-seed": 3})
    data, _ = federated_dataset(c)
    X = data.X
    C = X.T @ X / X.shape[0]
    vals, vecs = np.linalg.eigh(C)
    ref = reference(c)
    top = vecs[:, ::-1][:, : c["rank"]]
    # same subspace and eigenvalues as the covariance of the stacked matrix
    np.testing.assert_allclose(np.linalg.svd(top.T @ ref.vectors[:, : c["rank"]], compute_uv=False), 1.0,
                               atol=1e-10)
    assert data_shape(c) == X.shape


def test_lazy_data_refuse_another_partitioner_and_too_many_clients():
    with pytest.raises(ValueError, match='"partitioner".*contiguous'):
        client_rows(cfg(partitioner="iid"), 0)
    with pytest.raises(ValueError, match='"num-clients" is 20.*"num-samples" = 10'):
        lazy_partition_sizes(10, 20)


def _spy(types):
    def fault_fn(msg, pid):
        types.append(msg.metadata.message_type)
        return "ok"
    return fault_fn


@pytest.mark.parametrize("over", [
    {"strategy": "fedpower", "clients-per-round": 3, "noise-std": 0.01, "local-steps": 2},
    {"strategy": "faps"},
    {"strategy": "fedave", "dataset": "erm-logistic", "num-samples": 400, "dimension": 5, "partitioner": "iid",
     "frac-active": 0.5},
])
def test_engine_discovery_sends_nothing_before_round_1_and_gives_the_same_numbers(over):
    common = {**LAZY, "num-server-rounds": 4, **over}
    asked, told = [], []
    a = run_app(fault_fn=_spy(asked), node_ids=[9000 - 7 * i for i in range(7)], **common)
    b = run_app(fault_fn=_spy(told), node_ids=[9000 - 7 * i for i in range(7)], discovery="engine", **common)
    assert asked.count("get_properties") == 7 and told.count("get_properties") == 0
    assert len(b.records) == len(a.records) == 5
    for ra, rb in zip(a.records, b.records):
        assert {k: v for k, v in ra.items() if k != "wall_time"} == {k: v for k, v in rb.items() if k != "wall_time"}
    np.testing.assert_array_equal(a.estimate, b.estimate)
    assert b.sizes == a.sizes and set(b.proxies) == set(range(7))


def test_engine_discovery_without_an_engine_directory_is_a_clear_error():
    from fl_strategies.protocol.strategies.fedpower import FedPowerStrategy

    class Proxy:
        cid, run_id = "5", 987654321

    strategy = FedPowerStrategy(cfg(discovery="engine"), 12)
    with pytest.raises(ConfigError, match="discovery = 'engine'.*discovery = 'ask'"):
        strategy._from_directory([Proxy()], deadline=time.monotonic())


def test_lazy_fedpower_converges_with_engine_discovery():
    s = run_app(**{**LAZY, "num-clients": 50, "num-samples": 50 * 200, "discovery": "engine", "clients-per-round": 5,
                   "num-server-rounds": 15, "schedule": "fixed", "local-steps": 1})
    d = distances(s)
    assert d[-1] < 0.1 * d[0] and d[-1] < 0.15


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.ray
@pytest.mark.timeout(240)
def test_ray_engine_attaches_to_a_running_cluster_with_engine_discovery(tmp_path):
    """`ray start --head` on loopback; the Ray engine attaches to it (address) and gives the in-process numbers.

    Also the Ray path of discovery = "engine" (the node map published from Flower's engine) on lazy data.
    """
    import os
    import signal
    import subprocess
    import sys

    import pandas as pd

    from simulations.engines.ray import run_ray

    import shutil
    import tempfile

    port = _free_port()
    ray_bin = os.path.join(os.path.dirname(sys.executable), "ray")
    # its own temp dir: short (Ray's socket paths must fit 107 characters), and a head whose address is recorded
    # in /tmp/ray/ray_current_cluster would be joined by every other ray.init() on this machine meanwhile
    temp_dir = tempfile.mkdtemp(prefix="r7-", dir="/tmp")
    head = subprocess.Popen([ray_bin, "start", "--head", "--block", "--node-ip-address=127.0.0.1", f"--port={port}",
                             "--num-cpus=2", "--include-dashboard=false", f"--temp-dir={temp_dir}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        over = {**LAZY, "num-clients": 12, "num-samples": 1200, "clients-per-round": 4, "num-server-rounds": 3,
                "discovery": "engine", "noise-std": 1e-3, "seed": 4}
        local = run_app(**over)
        deadline = time.monotonic() + 60
        while True:  # the head is up once the CLI answers
            probe = subprocess.run([ray_bin, "status", f"--address=127.0.0.1:{port}"], capture_output=True)
            if probe.returncode == 0 or time.monotonic() > deadline:
                break
            time.sleep(1)
        assert probe.returncode == 0, probe.stderr.decode()[-500:]
        run_ray({**over, "results-dir": str(tmp_path / "out")}, address=f"127.0.0.1:{port}")
        rows = pd.read_csv(tmp_path / "out" / "rounds.csv")
        assert len(rows) == 4
        np.testing.assert_allclose(rows["subspace_distance"].to_numpy(float),
                                   [r["subspace_distance"] for r in local.records], rtol=0, atol=1e-12)
        np.testing.assert_allclose(np.load(tmp_path / "out" / "estimate.npy"), local.estimate, atol=1e-12)
        assert head.poll() is None  # the cluster outlives the run: the engine only attached to it
    finally:
        os.killpg(head.pid, signal.SIGTERM)  # --block: stops the processes this head started
        try:
            head.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(head.pid, signal.SIGKILL)
        shutil.rmtree(temp_dir, ignore_errors=True)


def test_bench_scale_writes_its_table_with_both_floors(tmp_path):
    """The benchmark script runs end to end (numpy, numpy-rows and in-process engines, each in its own process)."""
    import pandas as pd

    from simulations.benchmarks.bench_scale import main

    assert main(["--clients", "4", "--rows", "30", "--dim", "6", "--rounds", "2", "--engines", "numpy", "numpy-rows",
                 "local", "--out", str(tmp_path)]) == 0
    df = pd.read_csv(tmp_path / "bench_scale.csv").set_index("engine")
    assert sorted(df.index) == ["local", "numpy", "numpy-rows"]
    assert df.loc["numpy", "ratio_to_floor"] == 1.0 and df.loc["numpy-rows", "ratio_to_rows_floor"] == 1.0
    assert (df.per_round_s > 0).all() and (df.peak_mem_gib > 0).all()
    table = (tmp_path / "bench_scale.md").read_text()
    assert "ratio to numpy-rows" in table and table.count("\n| 4 | 30 |") == 3
    assert (tmp_path / "bench_scale.png").stat().st_size > 0


def test_bench_messages_times_both_paths(capsys):
    """The per-stage message benchmark runs Flower's path and fedspectral's on the same clients."""
    from simulations.benchmarks.bench_messages import main

    assert main(["--clients", "3", "--rows", "20", "--dim", "6", "--repeats", "1"]) == 0
    out = capsys.readouterr().out
    assert "| flower |" in out and "| fit_records |" in out and "flower / fit_records:" in out
    with pytest.raises(SystemExit):
        main(["--dim", "3"])
