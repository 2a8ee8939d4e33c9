"""The node-state store of a node's noise secret (fl_strategies/protocol/node_state.py).

A node without a ``noise-secret`` file keeps the secret it drew in its Flower node state for the run. The secret
must be drawn once per node and never again (a new secret mid-run gives the server two independent noise streams
for one node, whose difference it could study), must be returned exactly as drawn, must stay the node's own (one
node's state never gives another node's secret) and must be kept as nothing but one ``ConfigRecord`` under
``STATE_KEY``.
"""

from __future__ import annotations

import os

import numpy as np
from flwr.common import ConfigRecord, RecordDict

from fl_strategies.privacy.noise import STREAM_NOISE, ClientNoise
from fl_strategies.protocol.node_state import STATE_KEY, secret_in_state


class Draws:
    """A way to draw a secret that counts its calls and returns a new random secret each time."""

    def __init__(self) -> None:
        self.drawn: list[bytes] = []

    def __call__(self) -> bytes:
        self.drawn.append(os.urandom(32))
        return self.drawn[-1]


def test_the_secret_is_drawn_once_and_returned_as_drawn_for_the_whole_run():
    state, draw = RecordDict(), Draws()
    first = secret_in_state(state)(draw)
    # the client is rebuilt at every message: a new store on the same state
    later = [secret_in_state(state)(draw) for _ in range(3)] + [secret_in_state(state)(Draws())]
    assert len(draw.drawn) == 1 and first == draw.drawn[0]
    assert all(secret == first for secret in later)


def test_each_nodes_state_keeps_its_own_secret():
    states, draws = [RecordDict() for _ in range(3)], [Draws() for _ in range(3)]
    secrets = [secret_in_state(s)(d) for s, d in zip(states, draws)]
    assert secrets == [d.drawn[0] for d in draws] and len(set(secrets)) == 3
    # asking again, in another order, gives each node its own secret and draws nothing
    assert [secret_in_state(s)(Draws()) for s in reversed(states)] == secrets[::-1]
    assert all(len(d.drawn) == 1 for d in draws)


def test_the_state_holds_one_config_record_of_the_secrets_hex_digits_and_nothing_else():
    state = RecordDict()
    secret = bytes([0, 0, 255, 16]) + bytes(range(28))  # leading zero bytes survive the hex round trip
    assert secret_in_state(state)(lambda: secret) == secret
    assert list(state.keys()) == [STATE_KEY]
    record = state[STATE_KEY]
    assert isinstance(record, ConfigRecord) and dict(record) == {"secret": secret.hex()}


def test_a_secret_already_in_the_state_is_used_without_drawing():
    state = RecordDict({STATE_KEY: ConfigRecord({"secret": bytes(range(32)).hex()})})
    draw = Draws()
    assert secret_in_state(state)(draw) == bytes(range(32)) and not draw.drawn


def test_a_nodes_secret_noise_repeats_within_its_state_and_differs_across_nodes(tmp_path):
    """Through the client's noise source: rebuilt at every message on one node state, a release draws the same
    noise (the same secret); two nodes (two states) with equal inputs draw unrelated noise."""
    node_config = {"data-path": str(tmp_path / "rows.npy")}

    def draws(state: RecordDict) -> np.ndarray:
        noise = ClientNoise({"noise-source": "node-secret", "seed": 0}, node_config, 0, secret_in_state(state),
                            True, STREAM_NOISE)
        return noise.generator(3, np.eye(4, 2), np.eye(4), 0.5, 2).standard_normal((4096,))

    one, other = RecordDict(), RecordDict()
    np.testing.assert_array_equal(draws(one), draws(one))
    assert abs(np.corrcoef(draws(one), draws(other))[0, 1]) < 6.0 / np.sqrt(4096)
