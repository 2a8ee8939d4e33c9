"""The in-process engine's run does not import Flower's SuperLink grids (``fl_strategies/protocol/round_exchange.py``:
``flower_grid``; ``flower_compat/legacy_server.py`` imports ``HttpGrid`` and ``InMemoryGrid`` on first use): their
modules import fastapi, SQLAlchemy and alembic, about 0.4 s of every ``compare`` start; Flower's grids are still
told apart exactly."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from flwr.client import ClientApp

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("flwr.superlink.grid.inmemory_grid", "flwr.superlink.grid.http_grid", "fastapi", "sqlalchemy", "alembic")


def test_an_in_process_run_leaves_flowers_superlink_grids_unimported():
    code = f"""
import sys
from simulations.compare import cli
from simulations.engines.local import LocalGrid, run_local
from server_app import app
from fl_strategies.protocol import round_exchange
from flwr.client import ClientApp
grid = LocalGrid(ClientApp(client_fn=lambda c: None), 1, {{}})
assert round_exchange.simulated_grid(grid) and round_exchange.prompt_grid(grid) is grid
assert round_exchange.send_and_receive(grid, [], None) == []
print(sorted(m for m in {HEAVY!r} if m in sys.modules))
"""
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_flowers_grids_are_told_apart_exactly():
    from fl_strategies.protocol.flower_compat import HttpGrid, InMemoryGrid
    from fl_strategies.protocol.round_exchange import PromptGrid, flower_grid, prompt_grid, simulated_grid
    from simulations.engines.local import LocalGrid

    engine, superlink = InMemoryGrid.__new__(InMemoryGrid), HttpGrid.__new__(HttpGrid)

    class Derived(InMemoryGrid):
        pass

    class InMemoryGridLookalike:  # a class of the same name, not Flower's
        pass

    InMemoryGridLookalike.__name__ = "InMemoryGrid"
    assert flower_grid(engine, "InMemoryGrid") and not flower_grid(engine, "HttpGrid")
    assert flower_grid(superlink, "InMemoryGrid", "HttpGrid") and not flower_grid(superlink, "InMemoryGrid")
    assert flower_grid(Derived.__new__(Derived), "InMemoryGrid") and simulated_grid(Derived.__new__(Derived))
    assert not flower_grid(InMemoryGridLookalike(), "InMemoryGrid", "HttpGrid")
    assert isinstance(prompt_grid(engine), PromptGrid) and not simulated_grid(superlink)
    local = LocalGrid(ClientApp(client_fn=lambda c: None), 1, {})
    assert not flower_grid(local, "InMemoryGrid", "HttpGrid") and prompt_grid(local) is local
