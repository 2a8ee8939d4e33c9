"""Private Flower names of the legacy server loop (``Server`` + ``GridClientProxy`` over a ``Grid``).

fedspectral runs its strategies in Flower's legacy loop (a ``flwr.server.Server`` subclass,
:class:`fl_strategies.protocol.server_loop.StoppingServer`) but sends a round's fit instructions in one batch through
the ``Grid`` (:mod:`fl_strategies.protocol.round_exchange`) instead of one thread per ``GridClientProxy``.
"""

from __future__ import annotations

from flwr.server.compat.app import start_grid
from flwr.server.compat.grid_client_proxy import GridClientProxy
from flwr.server.server import fit_clients

__all__ = ["GridClientProxy", "HttpGrid", "InMemoryGrid", "fit_clients", "start_grid"]

# GridClientProxy : class, from ``flwr.server.compat.grid_client_proxy``
#   What: the ``ClientProxy`` the legacy loop gets for each node of a ``Grid`` (has ``.grid``, ``.node_id``).
#   Why: round_exchange.fit_in_one_batch batches a round only when every proxy is one (it then talks to
#   their grid directly).
#   Public alternative: ``flwr.server.client_proxy.ClientProxy`` (the base class; does not tell a grid
#   proxy from others); or the Message API, where strategies send through the ``Grid`` themselves.

# fit_clients : function, from ``flwr.server.server``
#   What: Flower's per-round fit fan-out (one thread per proxy) used by ``Server.fit_round``.
#   Why: round_exchange falls back to it, unchanged, when the proxies cannot be batched.
#   Public alternative: none (``Server.fit_round`` does the whole round, strategy calls included).

# InMemoryGrid : class, from ``flwr.superlink.grid.inmemory_grid``
#   What: the ``Grid`` the simulation engine gives the ServerApp.
#   Why: round_exchange.send_and_receive paces its pulls itself (every 0.01 s, or ten times a pull's length:
#   its own 0.1 s ``pull_interval`` delayed every round, and its polling slowed the engine at 10,000 messages);
#   other grids keep their own ``send_and_receive``.
#   Public alternative: ``flwr.serverapp.Grid`` (the ABC; ``send_and_receive`` without the tuning).

# HttpGrid : class, from ``flwr.superlink.grid.http_grid``
#   What: the ``Grid`` a ServerApp started by a SuperLink gets (a deployment).
#   Why: round_exchange.send_and_receive pulls it every 0.1 s; its own ``send_and_receive`` pauses 3 s
#   after every pull that leaves a reply missing. The ServerApp wraps it (round_exchange.PromptGrid) so that
#   Flower's own exchanges (SecAgg+ stages, discovery's get_properties) pull that way too, through the public
#   ``push_messages`` / ``pull_messages``.
#   Public alternative: ``flwr.serverapp.Grid`` (the ABC; ``send_and_receive`` with Flower's 3 s pause).

# start_grid : function, from ``flwr.server.compat.app``
#   What: runs a legacy ``Server`` (strategy + ``ServerConfig``) over a ``Grid``; what
#   ``ServerApp(server_fn=...)`` calls.
#   Why: server_app.app runs its ``@app.main()`` itself (to choose the SecAgg+ loop or this one and to
#   install an observer) and then hands the legacy server to Flower.
#   Public alternative: ``ServerApp(server_fn=...)`` returning ``ServerAppComponents`` (no own main).


def __getattr__(name: str):
    """``HttpGrid`` and ``InMemoryGrid`` imported on first use (PEP 562): their modules import fastapi, SQLAlchemy
    and alembic (0.4 s), which a run of the in-process engine never needs (round_exchange.flower_grid)."""
    if name == "HttpGrid":
        from flwr.superlink.grid.http_grid import HttpGrid

        return HttpGrid
    if name == "InMemoryGrid":
        from flwr.superlink.grid.inmemory_grid import InMemoryGrid

        return InMemoryGrid
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
