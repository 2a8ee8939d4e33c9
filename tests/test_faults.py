"""Faulty clients, in-process: garbage replies (client_app/faults.py) and strategies that cannot go on."""

import numpy as np
import pandas as pd
import pytest

from conftest import run_aborted, run_app
from client_app.faults import corrupt

FAPS = dict(strategy="faps", dataset="faps-geometric", row_normalize=False, dimension=30, num_samples=300, xi=1.3,
            partitioner="linear", num_clients=3, rank=2, iteration_rank=2, num_server_rounds=40, stop_tol=1e-6)


@pytest.fixture
def faulty_nodes(monkeypatch):
    """A dict ``{pid: kind}``: the in-process nodes of the runs started next get ``fault = kind`` in their node config."""
    from simulations.engines.local import LocalGrid

    faults = {}
    init = LocalGrid.__init__

    def init_with_faults(self, *args, **kwargs):
        init(self, *args, **kwargs)
        for nid, pid in self.partition_of.items():
            if pid in faults:
                self.contexts[nid].node_config["fault"] = faults[pid]

    monkeypatch.setattr(LocalGrid, "__init__", init_with_faults)
    return faults


def test_corrupt_breaks_values_or_shapes():
    Y, Z = np.ones((5, 2)), np.eye(5, 2)
    nan = corrupt([Y, Z], "nan")
    assert [a.shape for a in nan] == [(5, 2), (5, 2)] and all(np.isnan(a[0, 0]) for a in nan)
    assert np.isfinite(Y).all()  # the honest arrays are not touched
    assert [a.shape for a in corrupt([Y, np.ones(4)], "shape")] == [(5, 1), (3,)]
    with pytest.raises(ValueError, match="fault = 'zero'"):
        corrupt([Y], "zero")


SUMMARY_WITHOUT_1_AND_2 = r"^summary: partition\(s\) 1, 2 did not answer"


def test_garbage_replies_are_rejected_counted_and_never_averaged(faulty_nodes):
    over = dict(num_clients=4, num_samples=2000, dimension=15, num_server_rounds=4, local_steps=2)
    faulty_nodes.update({1: "nan", 2: "shape"})
    garbage = run_aborted(SUMMARY_WITHOUT_1_AND_2, expect_clean=False, **over)  # the rounds go on; the model
    rows = garbage.records[1:]
    assert all(r["rejected"] == 2 and r["participants"] == 2 and r["failures"] == 0 for r in rows)
    assert all(np.isfinite(r["subspace_distance"]) for r in rows)
    faulty_nodes.clear()

    def fail_1_and_2(msg, pid):
        return "error" if pid in (1, 2) and msg.metadata.message_type == "train" else "ok"

    # the same numbers as when partitions 1 and 2 do not answer at all: nothing of theirs was averaged in
    silent = run_aborted(SUMMARY_WITHOUT_1_AND_2, fault_fn=fail_1_and_2, **over)  # needs every client
    np.testing.assert_array_equal(garbage.estimate, silent.estimate)
    assert [r["failures"] for r in silent.records[1:]] == [2] * 4


@pytest.mark.parametrize("fault", ["drop", "error", "nan"])
def test_faps_stops_with_a_clear_message_when_a_client_is_missing(tmp_path, faulty_nodes, fault):
    seen = {}

    def fail_partition_1_in_round_3(msg, pid):
        if msg.metadata.message_type == "train" and pid == 1:
            seen[pid] = seen.get(pid, 0) + 1
            return fault if seen[pid] == 3 and fault != "nan" else "ok"
        return "ok"

    if fault == "nan":
        faulty_nodes[1] = "nan"  # every reply of partition 1 is garbage: the run stops in round 1
    s = run_aborted(fault_fn=fail_partition_1_in_round_3, results_dir=str(tmp_path), **FAPS)
    stop_round = 1 if fault == "nan" else 3
    assert f"FAPS round {stop_round}: no usable reply from partition(s) 1" in s.failure
    assert ("1 rejected" if fault == "nan" else "0 rejected") in s.failure
    # the rows of the rounds before stay, in the strategy and in rounds.csv; no estimate from a partial sum
    assert [r["round"] for r in s.records] == list(range(stop_round))
    assert list(pd.read_csv(tmp_path / "rounds.csv")["round"]) == list(range(stop_round))
    assert len(s.iterates) == stop_round


@pytest.mark.parametrize("bad", ["3=nan", "1=zero", "x"])
def test_deploy_refuses_a_bad_fault_option_before_starting_anything(tmp_path, capsys, bad):
    from simulations.engines.deploy import main

    assert main(["--run-config", "num-clients=3", "--out", str(tmp_path), "--fault", bad]) == 2
    assert f"--fault {bad!r}" in capsys.readouterr().err
    assert not (tmp_path / "logs").exists()


def test_a_server_short_of_nodes_says_so_periodically_and_gives_up_after_its_stated_bound(monkeypatch, caplog):
    """`flwr run .` with Flower's default 2 SuperNodes and num-clients = 10: no silent wait."""
    import logging

    from server_app.app import build_strategy
    from simulations.engines import fused_run_config

    class TwoNodes:
        def num_available(self):
            return 2

    strategy, _ = build_strategy(fused_run_config({"num-clients": 10}))
    strategy.wait_timeout = 1.5
    monkeypatch.setattr(type(strategy), "WAIT_LOG_EVERY", 0.3)
    with caplog.at_level(logging.WARNING, logger="flwr.fedspectral"), pytest.raises(RuntimeError) as info:
        strategy._discover(TwoNodes())
    waiting = [r.getMessage() for r in caplog.records if "waiting for" in r.getMessage()]
    assert len(waiting) >= 1 and waiting[0].startswith("waiting for 10 nodes, 2 connected (giving up in")
    assert "flwr run . --federation-config num-supernodes=10" in waiting[0]
    assert str(info.value).startswith("only 2 of num-clients = 10 nodes connected within 2 s")
    assert "num-supernodes=10" in str(info.value)
