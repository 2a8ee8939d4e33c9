"""SecAgg+ runs reproduce exactly in simulation: Flower's stochastic rounding seeded per node, round and stage
(``client_app.secure_rounding``), with numpy's global generator left as the caller had it."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import run_app
from flwr.app import Message, MessageType, RecordDict
from flwr.common import ConfigRecord
from flwr.common.secure_aggregation.secaggplus_constants import RECORD_KEY_CONFIGS, Key, Stage

import client_app.app as app_module
import client_app.secure_rounding as rounding
from fl_strategies.privacy.noise import STREAM_NOISE
from fl_strategies.protocol.strategies.dp_power import secagg_tolerance
from fl_strategies.protocol.strategies.eigenspace import STREAM_INIT
from fl_strategies.settings.participation import STREAM_LATENCY, STREAM_SAMPLING

# a small dp-power run through SecAgg+ with seeded noise (3 rounds, 4 clients)
SMALL = dict(strategy="dp-power", dataset="dp-haar", dimension=120, rank=4, iteration_rank=8, num_server_rounds=3,
             num_clients=4, delta=1e-6, row_normalize=False, secagg_clip=1500.0, partitioner="iid", epsilon=2.0,
             noise_source="seeded", dp_channel="secagg", seed=5)


def same_global_state(a, b) -> bool:
    return a[0] == b[0] and np.array_equal(a[1], b[1]) and a[2:] == b[2:]


@pytest.mark.usefixtures("every_iterate")
def test_two_runs_through_secagg_are_bit_identical_and_leave_the_global_generator_alone(monkeypatch):
    np.random.seed(1234)
    before = np.random.get_state()
    first = run_app(**SMALL)
    assert same_global_state(np.random.get_state(), before)  # no draw of the run left the global stream moved
    np.random.rand(7)  # a different global state must not matter either
    second = run_app(**SMALL)
    assert len(first.iterates) == len(second.iterates) == SMALL["num_server_rounds"] + 1
    for a, b in zip(first.iterates, second.iterates):
        assert np.array_equal(a, b)
    assert np.array_equal(first.last_sum, second.last_sum)
    assert [r["subspace_distance"] for r in first.records] == [r["subspace_distance"] for r in second.records]

    # the check can fail: Flower's own (unseeded) rounding gives other last digits, and moves the global stream
    one_round = dict(SMALL, num_server_rounds=1)
    seeded = run_app(**one_round)
    monkeypatch.setattr(app_module, "rounding_entropy", lambda *args: None)
    np.random.seed(1234)
    unseeded = run_app(**one_round)
    assert not same_global_state(np.random.get_state(), before)
    diff = np.max(np.abs(unseeded.last_sum - seeded.last_sum))
    assert 0 < diff <= secagg_tolerance(1500.0, 4)  # only the rounding differs: one step per client and entry
    monkeypatch.undo()
    # another run seed rounds differently (and draws other noise and another start)
    assert not np.array_equal(run_app(**dict(SMALL, seed=6)).last_sum, first.last_sum)


def stage_message(stage: str, group_id: str = "3") -> Message:
    content = RecordDict({RECORD_KEY_CONFIGS: ConfigRecord({Key.STAGE: stage})})
    return Message(content, dst_node_id=7, message_type=MessageType.TRAIN, group_id=group_id)


def test_the_seed_names_seed_partition_round_and_stage_and_never_a_supernode():
    cfg = {"seed": 11, "num-clients": 4}
    node = {"partition-id": 2, "num-partitions": 4}
    entropies = {tuple(rounding.rounding_entropy(cfg, node, stage_message(stage, str(rnd))))
                 for stage in Stage.all() for rnd in (1, 2)}
    assert (11, rounding.STREAM_SECAGG_ROUNDING, 2, 2, Stage.all().index(Stage.COLLECT_MASKED_VECTORS)) in entropies
    assert len(entropies) == 2 * len(Stage.all())
    assert rounding.rounding_entropy(cfg, {"partition-id": 3}, stage_message(Stage.SETUP)) != \
        rounding.rounding_entropy(cfg, node, stage_message(Stage.SETUP))
    # a SuperNode (its node config names its data file) keeps Flower's unseeded rounding
    assert rounding.rounding_entropy(cfg, dict(node, **{"data-path": "rows.npy"}), stage_message(Stage.SETUP)) is None
    # an unreadable round or stage: unseeded, and secaggplus_mod judges the message itself
    assert rounding.rounding_entropy(cfg, node, stage_message(Stage.SETUP, group_id="")) is None
    assert rounding.rounding_entropy(cfg, node, stage_message("no-such-stage")) is None
    tags = [STREAM_INIT, STREAM_SAMPLING, STREAM_NOISE, STREAM_LATENCY, rounding.STREAM_SECAGG_ROUNDING]
    assert len(set(tags)) == len(tags)


def test_the_seeded_stream_reaches_secaggplus_only(monkeypatch):
    """A stand-in for ``secaggplus_mod`` that draws before and after the client: its draws are the seeded
    stream's, the client's draws are the caller's stream, and afterwards the caller's stream continues after
    the client's draws; an exception in the stage restores it too."""
    entropy = [3, rounding.STREAM_SECAGG_ROUNDING, 1, 2, 2]
    seen = {}

    def fake_secaggplus(msg, context, call_next):
        seen["before"] = np.random.rand(3)
        reply = call_next(msg, context)
        seen["after"] = np.random.rand(2)
        if msg == "raise":
            raise RuntimeError("stage failed")
        return reply

    def client(msg, context):
        seen["client"] = np.random.rand(4)
        return "reply"

    monkeypatch.setattr(rounding, "secaggplus_mod", fake_secaggplus)
    np.random.seed(99)
    outer = np.random.RandomState(99)
    assert rounding.secaggplus_seeded("msg", None, client, entropy) == "reply"
    seeded = np.random.RandomState(np.random.SeedSequence(entropy).generate_state(4))
    assert np.array_equal(seen["before"], seeded.rand(3)) and np.array_equal(seen["after"], seeded.rand(2))
    assert np.array_equal(seen["client"], outer.rand(4))
    assert same_global_state(np.random.get_state(), outer.get_state())
    first = dict(seen)
    np.random.seed(5)  # the same entropy gives the same rounding draws whatever the caller's state
    state = np.random.get_state()
    with pytest.raises(RuntimeError, match="stage failed"):
        rounding.secaggplus_seeded("raise", None, client, entropy)
    assert np.array_equal(seen["before"], first["before"]) and np.array_equal(seen["after"], first["after"])
    after_client = np.random.RandomState()
    after_client.set_state(state)
    after_client.rand(4)
    assert same_global_state(np.random.get_state(), after_client.get_state())
    # without entropy (a SuperNode) secaggplus_mod runs on the global stream as Flower ships it
    np.random.seed(5)
    rounding.secaggplus_seeded("msg", None, client, None)
    assert np.array_equal(seen["before"], np.random.RandomState(5).rand(3))
