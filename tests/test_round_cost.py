"""The server's per-round cost line: the wait for the replies and its own time, logged once per round."""

from __future__ import annotations

import logging
import re
import time

import pytest

from conftest import run_app
from fl_strategies.protocol.server_loop import log_round_cost

SMALL = dict(num_clients=6, num_samples=1_200, dimension=20, rank=2, iteration_rank=3, row_normalize=True,
             schedule="fixed")
COST = re.compile(r"round (\d+): waited (\S+) s for (\d+) replies, server (\S+) s")


def cost_lines(text: str) -> list[tuple[int, float, int, float]]:
    return [(int(r), float(w), int(n), float(s)) for r, w, n, s in COST.findall(text)]


@pytest.mark.parametrize("strategy", ["fedpower", "power"])
def test_every_round_logs_its_wait_and_server_time(caplog, strategy):
    rounds = 4
    with caplog.at_level(logging.INFO, logger="flwr"):
        began = time.perf_counter()
        result = run_app(strategy=strategy, num_server_rounds=rounds, **SMALL)
        elapsed = time.perf_counter() - began
    lines = cost_lines(caplog.text)
    assert [line[0] for line in lines] == list(range(1, rounds + 1))
    for server_round, waited, replies, server in lines:
        assert waited >= 0 and server >= 0
        assert replies == result.records[server_round]["participants"] == SMALL["num_clients"]
    # each line's two numbers are the parts of its round (printed to 0.01 s), and the rounds are part of the run
    assert sum(w + s for _, w, _, s in lines) <= elapsed + 0.01 * rounds


def test_a_silent_node_is_not_counted_as_a_reply(caplog):
    def drop_two_in_round_2(msg, pid):
        return "drop" if pid in (1, 4) and msg.metadata.group_id == "2" else "ok"

    with caplog.at_level(logging.INFO, logger="flwr"):
        run_app(fault_fn=drop_two_in_round_2, strategy="power", num_server_rounds=3, round_timeout=5.0, **SMALL)
    replies = {line[0]: line[2] for line in cost_lines(caplog.text)}
    assert replies == {1: 6, 2: 4, 3: 6}


def test_the_wait_never_exceeds_the_round(caplog):
    with caplog.at_level(logging.INFO, logger="flwr"):
        log_round_cost(7, 1.5, {"waited": 2.0, "replies": 3})
        log_round_cost(8, 0.25, {})
    assert cost_lines(caplog.text) == [(7, 1.5, 3, 0.0), (8, 0.0, 0, 0.25)]
