"""Private Flower names of the Ray simulation engine (heavy: importing them loads ``flwr.simulation``).

``flwr.simulation.run_simulation`` is public but passes an empty run config; fedspectral's Ray engine
(``simulations.engines.ray``) needs the run config of ``pyproject.toml`` plus overrides, and patches two
internals of the engine's message delivery for large populations. Kept apart from the other areas so that
only the Ray engine pays for the import.
"""

from __future__ import annotations

from flwr.server.superlink.fleet.vce import vce_api
from flwr.simulation.run_simulation import _run_simulation

__all__ = ["private_run_simulation", "vce_api"]

private_run_simulation = _run_simulation
"""``flwr.simulation.run_simulation._run_simulation`` (underscore name).

What: the function behind ``run_simulation`` and ``flwr run``'s simulation: runs a ServerApp and
``num_supernodes`` virtual ClientApps on the Ray backend with a given ``Run`` and server ``Context``.
Why: simulations.engines.ray runs a simulation in-process with a real run config (imported there ``as
_run_simulation``). Public alternative: ``flwr.simulation.run_simulation`` (empty ``run_config``, logs
DEPRECATED) or ``flwr run .`` in a subprocess (what simulations.flwr_run does).
"""

# vce_api : module ``flwr.server.superlink.fleet.vce.vce_api``
#   What: the simulation engine's node registration and message delivery loop.
#   Why: simulations.engines.ray replaces, for the duration of one run, ``vce_api.add_messages_to_queue``
#   (Flower's sweep is O(nodes x stored messages); fedspectral's is linear; it reads the in-memory link
#   state's ``lock``, ``message_ins_store`` and ``_check_stored_messages``) and wraps
#   ``vce_api._register_nodes`` (to publish the node -> partition map, ``discovery = "engine"``).
#   Public alternative: none (nodes then have to be asked for their partition, and large populations are
#   slower).
