"""The server's per-round cost line: the wait for the replies and its own time, logged once per round."""

from __future__ import annotations

import logging
import re
import time

import pytest

from conftest import RepliedGrid, run_app
from fl_strategies.protocol.round_progress import cost_text

SMALL = dict(num_clients=6, num_samples=1_200, dimension=20, rank=2, iteration_rank=3, row_normalize=True,
             schedule="fixed")
COST = re.compile(r"round (\d+) of \d+: \S+ s \(waited (\S+) s for (\d+) replies, server (\S+) s")


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


STAGES = re.compile(r"round (\d+) of \d+: \S+ s \(waited \S+ s for \d+ replies, server \S+ s; stages: ([^)]*)\)")
SECAGG_STAGES = ["setup", "share_keys", "collect_masked_vectors", "unmask"]


def stage_lines(text: str) -> dict[int, list[tuple[str, float, int]]]:
    """Per round, its stages' ``(name, waited, replies)``."""
    out = {}
    for server_round, stages in STAGES.findall(text):
        parts = [part.rsplit(" ", 4) for part in stages.split(", ")]  # "<name> <wait> s for <replies>"
        out[int(server_round)] = [(name, float(wait), int(replies)) for name, wait, _, _, replies in parts]
    return out


@pytest.mark.parametrize("strategy", ["power", "krylov"])
def test_every_secagg_round_logs_its_wait_across_the_stages_and_server_time(caplog, strategy):
    rounds = 4
    with caplog.at_level(logging.INFO, logger="flwr"):
        began = time.perf_counter()
        result = run_app(strategy=strategy, num_server_rounds=rounds, secure_aggregation="true", **SMALL)
        elapsed = time.perf_counter() - began
    assert result.secure
    lines, stages = cost_lines(caplog.text), stage_lines(caplog.text)
    assert [line[0] for line in lines] == list(stages) == list(range(1, rounds + 1))  # not discovery, summary
    for server_round, waited, replies, server in lines:
        assert [name for name, _, _ in stages[server_round]] == SECAGG_STAGES
        assert all(count == SMALL["num_clients"] for _, _, count in stages[server_round])
        assert replies == result.records[server_round]["participants"] == SMALL["num_clients"]
        # the wait is the stages' (each printed to 0.01 s)
        assert abs(waited - sum(wait for _, wait, _ in stages[server_round])) <= 0.005 * 5
        assert waited >= 0 and server >= 0
    assert sum(w + s for _, w, _, s in lines) <= elapsed + 0.01 * rounds


def test_a_secagg_round_counts_the_uploads_that_reached_the_sum(caplog):
    """Partition 2 shares its keys in round 2, then never uploads: 5 of 6 masked uploads, and the unmask stage
    asks only the 5."""
    from test_secure_power import _collect_stage

    def fault(msg, pid):
        return "drop" if pid == 2 and msg.metadata.group_id == "2" and _collect_stage(msg) else "ok"

    with caplog.at_level(logging.INFO, logger="flwr"):
        run_app(fault_fn=fault, strategy="power", num_server_rounds=3, secure_aggregation="true", **SMALL)
    assert {line[0]: line[2] for line in cost_lines(caplog.text)} == {1: 6, 2: 5, 3: 6}
    assert [count for _, _, count in stage_lines(caplog.text)[2]] == [6, 6, 5, 5]


def test_a_silent_node_is_not_counted_as_a_reply(caplog):
    def drop_two_in_round_2(msg, pid):
        return "drop" if pid in (1, 4) and msg.metadata.group_id == "2" else "ok"

    with caplog.at_level(logging.INFO, logger="flwr"):
        run_app(fault_fn=drop_two_in_round_2, strategy="power", num_server_rounds=3, round_timeout=5.0, **SMALL)
    replies = {line[0]: line[2] for line in cost_lines(caplog.text)}
    assert replies == {1: 6, 2: 4, 3: 6}


def test_the_wait_never_exceeds_the_round(caplog):
    text = "\n".join(f"round {r} of 9: {cost_text(seconds, timing)}" for r, seconds, timing in [
        (7, 1.5, {"waited": 2.0, "replies": 3}), (8, 0.25, {}),
        (9, 1.0, {"stages": [("setup", 0.5, 2), ("unmask", 0.75, 2)], "replies": 2})])
    assert cost_lines(text) == [(7, 1.5, 3, 0.0), (8, 0.0, 0, 0.25), (9, 1.0, 2, 0.0)]
    assert stage_lines(text) == {9: [("setup", 0.5, 2), ("unmask", 0.75, 2)]}


class _Clock:
    """A fake ``time`` for :mod:`fl_strategies.protocol.round_exchange`: pulls take ``pull_seconds``, sleeps
    are recorded and advance the clock."""

    def __init__(self, pull_seconds: float) -> None:
        self.now, self.pull_seconds, self.sleeps = 0.0, pull_seconds, []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def _superlink_grid(clock: _Clock, reply_after: int):
    """A SuperLink's grid (Flower's ``HttpGrid`` class, no connection) whose replies arrive at pull ``reply_after``."""
    from fl_strategies.protocol.flower_compat import HttpGrid

    class Grid(RepliedGrid, HttpGrid):
        def __init__(self) -> None:  # noqa: D107 - no SuperLink behind it
            self.pulls = 0

        def pull_messages(self, message_ids):
            self.pulls += 1
            clock.now += clock.pull_seconds
            return [] if self.pulls < reply_after else self.replies()

        def send_and_receive(self, messages, *, timeout=None):
            raise AssertionError("Flower's send_and_receive pauses 3 s between pulls")

    return Grid()


@pytest.mark.parametrize("pull_seconds, pause", [(0.01, 0.09), (2.0, 0.02)])
def test_a_superlink_is_pulled_every_tenth_of_a_second_however_long_a_pull_took(monkeypatch, pull_seconds, pause):
    """From the start of one pull to the next 0.1 s (Flower's HttpGrid: 3 s after each pull); a slow pull is
    followed by a short pause, not by another at once."""
    from flwr.app import Message, MessageType, RecordDict

    from fl_strategies.protocol import round_exchange

    clock = _Clock(pull_seconds)
    monkeypatch.setattr(round_exchange, "time", clock)
    grid = _superlink_grid(clock, reply_after=4)
    sent = [Message(RecordDict(), dst_node_id=1, message_type=MessageType.TRAIN) for _ in range(3)]
    replies = round_exchange.send_and_receive(grid, sent, timeout=None)
    assert len(replies) == 3 and grid.pulls == 4
    assert clock.sleeps == pytest.approx([pause] * 3)


def test_each_grid_type_has_its_own_pause_after_a_pull():
    """A SuperLink's grid: the rest of 0.1 s from the pull's start, at least 0.02 s; an engine's: 0.01 s (not Flower's
    pull_interval of 0.1 s, which delayed a round's end by 0.05 s on average) or ten times the pull, whichever is
    longer."""
    from fl_strategies.protocol.flower_compat import HttpGrid, InMemoryGrid
    from fl_strategies.protocol.round_exchange import pause_after_pull

    superlink, engine = HttpGrid.__new__(HttpGrid), InMemoryGrid.__new__(InMemoryGrid)
    engine.pull_interval = 0.1
    assert [pause_after_pull(superlink, spent) for spent in (0.01, 2.0)] == pytest.approx([0.09, 0.02])
    assert [pause_after_pull(engine, spent) for spent in (0.0001, 0.003, 0.05)] == pytest.approx([0.01, 0.03, 0.5])


def test_a_superlink_round_ends_at_its_timeout(monkeypatch):
    from flwr.app import Message, MessageType, RecordDict

    from fl_strategies.protocol import round_exchange

    clock = _Clock(0.0)
    monkeypatch.setattr(round_exchange, "time", clock)
    grid = _superlink_grid(clock, reply_after=10**6)
    sent = [Message(RecordDict(), dst_node_id=1, message_type=MessageType.TRAIN)]
    assert round_exchange.send_and_receive(grid, sent, timeout=1.0) == []
    assert sum(clock.sleeps) == pytest.approx(1.0) and grid.pulls == len(clock.sleeps) + 1 >= 11


def test_a_local_deployment_polls_for_tasks_often_and_shares_the_cores(monkeypatch, tmp_path):
    from simulations.engines.deploy import BLAS_THREAD_VARIABLES, LocalDeployment

    for name in ("FLWR_SUPEREXEC_TASK_POLL_INTERVAL", *BLAS_THREAD_VARIABLES):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr("os.cpu_count", lambda: 8)
    env = LocalDeployment([tmp_path / f"partition_{i}.npy" for i in range(4)], tmp_path).env
    assert env["FLWR_SUPEREXEC_TASK_POLL_INTERVAL"] == "0.1"
    assert [env[name] for name in BLAS_THREAD_VARIABLES] == ["2"] * 3
    monkeypatch.setenv("FLWR_SUPEREXEC_TASK_POLL_INTERVAL", "0.5")  # a user's own settings are kept
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "3")
    env = LocalDeployment([tmp_path / f"partition_{i}.npy" for i in range(16)], tmp_path).env
    assert (env["FLWR_SUPEREXEC_TASK_POLL_INTERVAL"], env["OPENBLAS_NUM_THREADS"], env["OMP_NUM_THREADS"]) == \
        ("0.5", "3", "1")


def test_the_app_ships_every_module_it_imports_and_nothing_else():
    import io
    import subprocess
    import zipfile

    from flwr.cli.build import build_fab_from_disk

    from simulations.engines import APP_DIR

    with zipfile.ZipFile(io.BytesIO(build_fab_from_disk(APP_DIR))) as fab:
        shipped = {name for name in fab.namelist() if not name.startswith(".info/")}
    tracked = subprocess.run(["git", "ls-files"], cwd=APP_DIR, capture_output=True, text=True,
                             check=True).stdout.split()
    apps = {name for name in tracked if name.endswith(".py") and name.split("/")[0] in (
        "fl_strategies", "client_app", "server_app")}
    harness = {name for name in tracked if name.endswith(".py") and re.fullmatch(
        r"simulations/([^/]+|data/[^/]+|engines/[^/]+)\.py", name)}
    assert apps and "simulations/harness.py" in harness
    assert shipped == apps | harness | {"pyproject.toml"}


ANSWER_ONE_MESSAGE = """
import sys
import numpy as np
from flwr.app import Context, Message, RecordDict
from flwr.common import FitIns, ndarrays_to_parameters
from fl_strategies.protocol.flower_compat import TaskIdentity, get_fused_config_from_dir
from fl_strategies.protocol.fit_records import fitins_content, fitres_from_content
import client_app.app as clientapp

app_dir, data_path, strategy = sys.argv[1:4]
cfg = get_fused_config_from_dir(app_dir, {"num-clients": 2, "strategy": strategy, "dataset": "nodes",
                                          "dimension": 0})
TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 1, 1, 1
context = Context(run_id=1, node_id=5, node_config={"partition-id": 0, "data-path": data_path}, state=RecordDict(),
                  run_config=cfg)
Z = np.linalg.qr(np.random.default_rng(0).standard_normal((12, int(cfg["iteration-rank"]))))[0]
ins = FitIns(ndarrays_to_parameters([Z]), {"round": 1, "local-steps": 1, "iteration-offset": 0})
message = Message(content=fitins_content(ins), message_type="train", dst_node_id=5, group_id="1")
message.metadata.__dict__["_message_id"] = "m1"
reply = clientapp.app(message, context)
assert not reply.has_error(), reply.error.reason
assert fitres_from_content(reply.content).num_examples == 40
print(" ".join(sorted({name.split(".")[0] for name in sys.modules})))
"""


@pytest.mark.parametrize("strategy", ["fedpower", "power"])
def test_a_clientapp_process_answers_without_the_heavy_packages(tmp_path, strategy):
    """What a SuperNode's new ClientApp process imports to answer an eigenspace round: no scipy, scikit-learn,
    pandas, matplotlib, dp-accounting, Ray or simulation code (each would be imported again at every message)."""
    import os
    import subprocess
    import sys

    import numpy as np

    from simulations.engines import APP_DIR

    np.save(tmp_path / "rows.npy", np.random.default_rng(1).standard_normal((40, 12)))
    done = subprocess.run([sys.executable, "-c", ANSWER_ONE_MESSAGE, str(APP_DIR), str(tmp_path / "rows.npy"),
                           strategy], capture_output=True, text=True, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(APP_DIR)}, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    imported = set(done.stdout.split())
    assert {"client_app", "fl_strategies", "numpy"} <= imported
    assert not imported & {"scipy", "sklearn", "pandas", "matplotlib", "dp_accounting", "ray", "simulations",
                           "threadpoolctl", "bed_reader"}


def test_the_deployment_benchmark_splits_a_round_from_the_supernodes_lines():
    from simulations.benchmarks.bench_deploy_round import node_events, round_parts

    def node(offset):
        lines = []
        for r in (1, 2):
            base = 10.0 * r + offset
            lines += [(base, f"INFO :      [RUN 7, ROUND {r}]"), (base, "INFO :      Receiving: train message (ID: a)"),
                      (base + 0.1, "INFO :      Received successfully"),
                      (base + 1.0, "INFO :      Start `flwr-clientapp` process"),
                      (base + 1.5, f"INFO :      [RUN 7, ROUND {r}]"),
                      (base + 1.5, "INFO :      Sending: train message (ID: b)"),
                      (base + 1.6, "INFO :      Sent successfully")]
        return node_events(lines)

    (row,) = round_parts([node(0.0), node(2.0)])  # the second node answers 2 s later in both rounds
    assert row["round"] == 2 and row["round_s"] == pytest.approx(10.0)
    assert row["critical_pickup"] == pytest.approx(22.0 - 13.6) and row["pickup"] == pytest.approx(21.0 - 13.6)
    assert (row["start"], row["app"]) == (pytest.approx(1.0), pytest.approx(0.5))


def test_a_node_files_statistics_are_read_once_for_all_its_clientapp_processes(tmp_path, monkeypatch):
    """A SuperNode starts a new ClientApp process per message; the row sum and column sums of squares of its file
    (a whole read on the rows path) come from the node state after the first, until the file changes."""
    import os

    import numpy as np
    from flwr.common import RecordDict

    from client_app import data as node_data
    from fl_strategies.kernels.rows import RowBlocks
    from fl_strategies.settings.config import validate_run_config
    from simulations.engines import fused_run_config

    rows = np.random.default_rng(3).standard_normal((300, 7))
    path = tmp_path / "rows.npy"
    np.save(path, rows)
    cfg = validate_run_config(fused_run_config({"dataset": "nodes", "num-clients": 2, "dimension": 0,
                                                "row-normalize": False}))
    state, reads = RecordDict(), []

    def new_process():
        node_data._OPERATORS.clear()
        node_data._read_cached.cache_clear()
        return node_data.NodeData(cfg, {"partition-id": 0, "data-path": str(path)}, state).operator(1, 2)

    first = new_process()
    assert first.path == "rows" and node_data.STATS_KEY in state
    blocks = RowBlocks.blocks
    monkeypatch.setattr(RowBlocks, "blocks", lambda self: reads.append(1) or blocks(self))
    second = new_process()
    np.testing.assert_allclose(second.row_sum, rows.sum(axis=0))
    np.testing.assert_allclose(second.column_squares(), (rows * rows).sum(axis=0))
    assert reads == []
    np.save(path, 2.0 * rows)  # another file version: read again, the state replaced
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    third = new_process()
    assert reads
    np.testing.assert_allclose(third.row_sum, 2.0 * rows.sum(axis=0))
    np.testing.assert_allclose(np.frombuffer(state[node_data.STATS_KEY]["sum"], "<f8"), 2.0 * rows.sum(axis=0))


def test_the_server_apps_other_exchanges_pull_a_superlink_every_tenth_of_a_second_too(monkeypatch):
    """A SecAgg+ stage, a discovery ``get_properties`` and Flower's workflows call ``grid.send_and_receive``
    themselves: through :class:`PromptGrid` they pull as the batched rounds do, never after Flower's 3 s pauses."""
    from flwr.app import Message, MessageType, RecordDict

    import flwr.superlink.grid.http_grid as http_grid

    from fl_strategies.protocol import round_exchange

    monkeypatch.setattr(http_grid, "pull_objects", http_grid.pull_objects)  # prompt_grid changes it: undone after
    clock = _Clock(0.01)
    monkeypatch.setattr(round_exchange, "time", clock)
    grid = _superlink_grid(clock, reply_after=3)
    prompt = round_exchange.prompt_grid(grid)
    assert isinstance(prompt, round_exchange.PromptGrid) and prompt.pulls == 0  # the rest is the grid's
    sent = [Message(RecordDict(), dst_node_id=1, message_type=MessageType.TRAIN) for _ in range(2)]
    assert len(prompt.send_and_receive(sent, timeout=None)) == 2 and grid.pulls == 3
    assert clock.sleeps == pytest.approx([0.09, 0.09])  # 0.1 s from the start of one pull to the next
    other = object()  # a grid that answers as it is pushed (the in-process engine's) keeps its own
    assert round_exchange.prompt_grid(other) is other


@pytest.mark.parametrize("secure", [False, True])
def test_the_server_app_hands_its_loops_a_prompt_grid(monkeypatch, secure):
    from types import SimpleNamespace

    from flwr.server import ServerAppComponents, ServerConfig

    import server_app.app as server
    from fl_strategies.protocol.round_exchange import PromptGrid

    seen = []
    monkeypatch.setattr(server, "run_secure_aggregation", lambda grid, *args: seen.append(grid))
    monkeypatch.setattr(server, "start_grid", lambda grid, server, config: seen.append(grid))
    grid = _superlink_grid(_Clock(0.0), reply_after=1)
    strategy = SimpleNamespace(cfg={"round-timeout": -1}, secure=secure, failure=None)
    components = ServerAppComponents(server=SimpleNamespace(strategy=strategy), config=ServerConfig(num_rounds=1))
    server.run_server(grid, None, components=components)
    assert len(seen) == 1 and isinstance(seen[0], PromptGrid) and seen[0].grid is grid
    assert components.config.round_timeout == strategy.timeout is not None  # a SuperLink's: real nodes' default
