"""Private Flower names of how the simulation engine hands a ServerApp's messages to its nodes.

Flower's simulation engine (``flwr run`` of a simulation, ``flwr.simulation``) runs a thread that sweeps the link
state for new messages and queues them for the nodes' ClientApps, then waits 0.1 s before it sweeps again
(``vce_api.add_messages_to_queue``). A round's messages, pushed by the ServerApp just after a sweep, waited up to
0.1 s for the next one: 0.042 to 0.047 s a round (medians of 22 exchanges in ``fedspectral run``, 2,800 x 100,000,
four sites), beside a round's 0.6 s of products. :func:`quicken_engine_delivery` replaces that thread's function
with one that sweeps the same way but also as soon as the ServerApp has pushed messages (:func:`note_push`, called
by :func:`fl_strategies.protocol.round_exchange.send_and_receive`): a message pushed by other code still waits at most
0.1 s, as before. ``simulations.engines.ray``'s own linear sweep waits the same way (:func:`wait_for_push`).
In ``flwr run``'s simulation process the replacement is made when the engine loads the ClientApp
(``client_app.app``, in the process's main thread before the engine starts its sweep); the ServerApp's
``prompt_grid`` makes it too (the in-process and test engines), and logs a Flower it does not fit.

This module imports only the standard library at its top (Flower inside the functions).
"""

from __future__ import annotations

import inspect
import threading

__all__ = ["quicken_engine_delivery", "note_push", "wait_for_push"]

FLOWER_SERIES = ("1.41.", "1.42.")
"""The Flower versions whose ``vce_api.add_messages_to_queue`` and ``run_api`` this is written for (pyproject's pin)."""
SWEEP_PAUSE = 0.1
"""Seconds Flower's engine thread waits between two sweeps of the link state (kept where no push is noted)."""
FLOWER_SWEEP = ("state.get_message_ins(node_id=node_id, limit=1)", "f_stop.wait(0.1)")
"""What Flower's ``add_messages_to_queue`` does (its source holds both): a message per node and sweep, then 0.1 s."""
FLOWER_START = "target=add_messages_to_queue"
"""How Flower's ``run_api`` starts the sweep (the module global, looked up when the engine starts)."""
MARK = "_fedspectral_prompt_sweep"

# add_messages_to_queue : function, module global of ``flwr.server.superlink.fleet.vce.vce_api``
#   What: the engine thread's loop that moves each node's next message from the link state to the queue its
#   ClientApps are served from, then waits 0.1 s (``f_stop.wait(0.1)``).
#   Why: quicken_engine_delivery replaces it (before ``run_api`` starts the thread) with the same sweep that also
#   runs as soon as the ServerApp pushed (note_push); round_exchange.prompt_grid calls it for an engine's grid.
#   Public alternative: none (no option sets the 0.1 s).

_pushed = threading.Event()
_flower_sweep = None  # Flower's add_messages_to_queue, once replaced


def note_push() -> None:
    """Say that messages were just stored in an engine's link state: the engine's next sweep runs now."""
    _pushed.set()


def wait_for_push(f_stop: threading.Event, timeout: float | None = None) -> None:
    """Wait until a push is noted (:func:`note_push`) or ``timeout`` seconds (:data:`SWEEP_PAUSE`) passed; not at all
    when ``f_stop`` is set already (a stop during the wait ends it at most ``timeout`` later). A push noted before
    this returns is seen by the sweep that follows (the note is cleared before it)."""
    if not f_stop.is_set():
        _pushed.wait(SWEEP_PAUSE if timeout is None else timeout)
    _pushed.clear()


def engine_delivery_misfit(version: str, sweep_source: str, run_api_source: str) -> str | None:
    """Why the change does not fit this Flower (its version, ``add_messages_to_queue``'s and ``run_api``'s source),
    or ``None``."""
    if not version.startswith(FLOWER_SERIES):
        return f"written for Flower {' or '.join(s + 'x' for s in FLOWER_SERIES)}, found {version}"
    if not all(part in sweep_source for part in FLOWER_SWEEP):
        return "Flower's add_messages_to_queue does not sweep each node every 0.1 s"
    if FLOWER_START not in run_api_source:
        return "Flower's run_api does not start add_messages_to_queue by its module name"
    return None


def prompt_sweep(state, queue, nodes_mapping, f_stop: threading.Event) -> None:
    """Flower's ``add_messages_to_queue`` (each node's next message from ``state`` to ``queue``, until ``f_stop``),
    waiting for the next sweep with :func:`wait_for_push` instead of 0.1 s."""
    while not f_stop.is_set():
        for node_id in nodes_mapping.keys():
            for message in state.get_message_ins(node_id=node_id, limit=1):
                queue.put(message)
        wait_for_push(f_stop)


setattr(prompt_sweep, MARK, True)


def quicken_engine_delivery() -> str | None:
    """Make this process's simulation engine sweep for messages as soon as a ServerApp pushed them.

    Only Flower's own ``add_messages_to_queue`` is replaced (not another replacement, e.g. the Ray engine's linear
    sweep in ``simulations.engines.ray``, which waits for pushes itself); an engine already started keeps its
    thread's function.

    Returns
    -------
    str or None
        ``None`` when done (or not needed); otherwise why it does not fit the installed Flower, and nothing changed.
    """
    from flwr.server.superlink.fleet.vce import vce_api
    from flwr.supercore.version import package_version

    current = vce_api.add_messages_to_queue
    if getattr(current, MARK, False) or getattr(current, "__module__", None) != vce_api.__name__:
        return None
    problem = engine_delivery_misfit(package_version, inspect.getsource(current), inspect.getsource(vce_api.run_api))
    if problem:
        return problem
    global _flower_sweep
    _flower_sweep = current
    vce_api.add_messages_to_queue = prompt_sweep
    return None
