"""The simulation engine hands a ServerApp's pushed messages to its nodes at once (flower_compat.engine_delivery)."""

from __future__ import annotations

import ast
import inspect
import queue
import threading

import pytest

from conftest import RepliedGrid


def _flower_sources() -> tuple[str, str]:
    """The source of Flower's own ``add_messages_to_queue`` and ``run_api`` (read from the module's file: the
    function itself may have been replaced in this process)."""
    from fl_strategies.protocol.flower_compat import vce_api

    text = inspect.getsource(vce_api)
    functions = {node.name: ast.get_source_segment(text, node) for node in ast.parse(text).body
                 if isinstance(node, ast.FunctionDef)}
    return functions["add_messages_to_queue"], functions["run_api"]


def test_the_change_fits_the_flower_pyproject_allows_and_refuses_another():
    """Fails when a Flower release changes what the change replaces: its engine's sweep of every node with a 0.1 s
    wait, started by its module name; another version or another sweep is refused with a reason, nothing changed."""
    from flwr.supercore.version import package_version

    from fl_strategies.protocol.flower_compat.engine_delivery import engine_delivery_misfit

    sweep, run_api = _flower_sources()
    assert engine_delivery_misfit(package_version, sweep, run_api) is None
    assert "found 1.43.0" in engine_delivery_misfit("1.43.0", sweep, run_api)
    assert "0.1 s" in engine_delivery_misfit(package_version, sweep.replace("f_stop.wait(0.1)", "f_stop.wait(1)"),
                                             run_api)
    assert "run_api" in engine_delivery_misfit(package_version, sweep, run_api.replace("target=add_messages", "x="))


def test_flowers_sweep_is_replaced_and_another_replacement_kept(monkeypatch):
    from fl_strategies.protocol.flower_compat import engine_delivery, quicken_engine_delivery, vce_api

    flower = engine_delivery._flower_sweep or vce_api.add_messages_to_queue
    assert flower.__module__ == vce_api.__name__
    monkeypatch.setattr(vce_api, "add_messages_to_queue", flower)
    assert quicken_engine_delivery() is None and vce_api.add_messages_to_queue is engine_delivery.prompt_sweep
    assert quicken_engine_delivery() is None and vce_api.add_messages_to_queue is engine_delivery.prompt_sweep

    def own_sweep(state, queue, nodes_mapping, f_stop):  # e.g. simulations.engines.ray's linear sweep
        raise AssertionError

    monkeypatch.setattr(vce_api, "add_messages_to_queue", own_sweep)
    assert quicken_engine_delivery() is None and vce_api.add_messages_to_queue is own_sweep


class _State:
    """A link state holding each node's messages (``get_message_ins`` hands out one per node and call)."""

    def __init__(self) -> None:
        self.lock, self.stored = threading.Lock(), {1: [], 2: []}

    def store(self, node_id: int, message: str) -> None:
        with self.lock:
            self.stored[node_id].append(message)

    def get_message_ins(self, node_id: int, limit: int):
        with self.lock:
            taken, self.stored[node_id] = self.stored[node_id][:limit], self.stored[node_id][limit:]
        return taken


def test_a_pushed_message_reaches_the_nodes_queue_without_waiting_for_the_next_sweep(monkeypatch):
    """With a minute between sweeps, messages still arrive: each push noted starts a sweep at once (Flower's engine
    waited up to 0.1 s for its next one); after the stop the thread ends."""
    from fl_strategies.protocol.flower_compat import engine_delivery, note_push

    monkeypatch.setattr(engine_delivery, "SWEEP_PAUSE", 60.0)
    state, delivered, f_stop = _State(), queue.Queue(), threading.Event()
    sweeper = threading.Thread(target=engine_delivery.prompt_sweep, args=(state, delivered, {1: 0, 2: 1}, f_stop))
    sweeper.start()
    try:
        for node_id, message in ((1, "a"), (2, "b"), (1, "c")):
            state.store(node_id, message)
            note_push()
            assert delivered.get(timeout=30) == message  # 30 s: only a failure's limit (a sweep waits 60 s)
    finally:
        f_stop.set()
        note_push()
        sweeper.join(timeout=30)
    assert not sweeper.is_alive() and delivered.empty()


def test_a_server_push_to_an_engines_grid_is_noted(monkeypatch):
    """``send_and_receive`` notes each push to an engine's grid (a SuperLink's grid has no engine to tell)."""
    from flwr.app import Message, MessageType, RecordDict

    from fl_strategies.protocol import round_exchange
    from fl_strategies.protocol.flower_compat import InMemoryGrid, TaskIdentity

    for name in ("_task_id", "_run_id", "_node_id"):  # Message(...) reads them, as a simulation's process sets them
        monkeypatch.setattr(TaskIdentity, name, 1)
    notes = []
    monkeypatch.setattr(round_exchange, "note_push", lambda: notes.append(len(grid.sent)))

    class Grid(RepliedGrid, InMemoryGrid):
        def __init__(self) -> None:  # noqa: D107 - no link state behind it
            self.sent = []

        def pull_messages(self, message_ids):
            return self.replies()

    grid = Grid()
    sent = [Message(RecordDict(), dst_node_id=1, message_type=MessageType.TRAIN) for _ in range(3)]
    assert len(round_exchange.send_and_receive(grid, sent, timeout=None)) == 3
    assert notes == [3]


def test_prompt_grid_quickens_an_engines_delivery_and_says_so_where_it_does_not_fit(monkeypatch, caplog):
    from fl_strategies.protocol import round_exchange
    from fl_strategies.protocol.flower_compat import InMemoryGrid

    calls = []
    monkeypatch.setattr(round_exchange, "quicken_engine_delivery", lambda: calls.append(1) or "written for X")
    engine = InMemoryGrid.__new__(InMemoryGrid)
    with caplog.at_level("INFO", logger="flwr.fedspectral"):
        assert isinstance(round_exchange.prompt_grid(engine), round_exchange.PromptGrid)
    assert calls == [1]
    assert "written for X: Flower's engine keeps its 0.1 s between looks for new messages" in caplog.text


if __name__ == "__main__":  # pragma: no cover
    pytest.main([__file__])


def test_the_simulation_process_quickens_the_sweep_when_it_loads_the_client_app():
    """Flower's simulation engine loads the ClientApp in its main thread before it starts its sweep (``start_vce``
    before ``run_api``), while the ServerApp's ``prompt_grid`` runs in another thread that may come later: importing
    ``client_app.app`` where the engine's module is loaded makes the replacement; elsewhere (a SuperNode's ClientApp
    process) it imports nothing of the engine."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    check = ("import sys\n"
             "if sys.argv[1] == 'engine':\n"
             "    import flwr.server.superlink.fleet.vce.vce_api as v\n"
             "import client_app.app\n"
             "from fl_strategies.protocol.flower_compat import engine_delivery as e\n"
             "v = sys.modules.get('flwr.server.superlink.fleet.vce.vce_api')\n"
             "print(None if v is None else v.add_messages_to_queue is e.prompt_sweep)\n")
    for where, expected in (("engine", "True"), ("node", "None")):
        done = subprocess.run([sys.executable, "-c", check, where], cwd=root, capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip().splitlines()[-1] == expected
