"""A backend for Flower's simulation engine that runs the nodes' ClientApps in a thread of its process, not Ray.

Flower's simulation engine (``flwr run`` of a simulation, its ``flwr-simulation`` process) registers its nodes in
an in-memory link state, runs the ServerApp in one thread and hands each node's messages to a *backend* that runs
the ClientApp on them (``vce_api.run_api``: ``backend.build(app_fn)``, then ``backend.process_message(message,
context)`` from ``backend.num_workers`` worker threads). Flower 1.41/1.42 define the ``Backend`` interface
(``flwr.server.superlink.fleet.vce.backend.Backend``) and carry a backend's name from the federation config
(``flwr run --federation-config 'backend="NAME"'``) to ``start_vce``, but build only ``RayBackend``, whatever the
name. Ray costs a run on a small machine seconds of start (its cluster, then one actor process that imports the
app again) and of ``ray.shutdown``, and about 600 MB (its processes and the actor's second interpreter), and each
message is serialised to the actor and back (``bench_run_overhead``: 25.5 s and 1,776 MB on Ray against 17.4 s and
1,163 MB here, for 2,800 people x 100,000 variants in four ``.bed`` sites).

:class:`ThreadBackend` runs the ClientApp in the engine's worker thread, in the simulation process, one message at
a time (the nodes one after the other, as Ray's one actor on a 2-CPU machine and the in-process engine serve
them), exactly as Ray's actor runs it (``ClientAppActor.run``: load the app, call it on copies of the message and
the node's context, as Ray's pickling gives them; an exception becomes ``ClientAppException``, so the ServerApp
gets the same error reply). Everything else is Flower's own engine: its link state, node registration, contexts,
message sweep and grid.

:func:`use_thread_backend` makes the engine build it for a run whose federation config names
:data:`THREAD_BACKEND`: it wraps ``vce_api.run_api`` (a module global that ``start_vce`` looks up when it calls it,
after it loaded the ClientApp) and reads the run's backend name and config from ``start_vce``'s frame, its
caller. ``client_app.app`` calls it when Flower's engine loads the ClientApp, in the engine's main thread before
``run_api``. A run with any other name (``"ray"``, Flower's default) gets Flower's ``RayBackend`` unchanged, and a
Flower this does not fit keeps its own behaviour (``client_app.app`` logs why, :func:`thread_backend_misfit`;
``fedspectral run`` refuses ``--backend threads`` on a Flower of another version, :func:`version_misfit`).

What it does not give: a ClientApp that crashes its process (a segfault, ``os._exit``) takes the whole simulation
with it (in Ray it takes its actor); the nodes never run in parallel (in Ray, one actor per
``client-resources-num-cpus`` of the machine's CPUs; the products of one node use the process's CPUs here,
``fl_strategies.kernels.rows.product_threads``); GPU resources are not reserved.

This module imports only the standard library at its top (Flower inside the functions).
"""

from __future__ import annotations

import copy
import inspect
import json
import sys

__all__ = ["THREAD_BACKEND", "ThreadBackend", "use_thread_backend", "thread_backend_misfit", "version_misfit",
           "backend_in_use"]

THREAD_BACKEND = "threads"
"""The federation config's ``backend`` that runs the ClientApps in a thread (``fedspectral run``'s default)."""
FLOWER_SERIES = ("1.41.", "1.42.")
"""The Flower versions whose ``start_vce`` and ``run_api`` this is written for (pyproject's pin)."""
FLOWER_CALL = "run_api("
"""How ``start_vce`` starts the engine: ``run_api(app_fn, backend_fn, ...)`` by its module name."""
START_LOCALS = ("backend_name", "backend_config")
"""``start_vce``'s locals read when it calls ``run_api``: the federation config's backend name and config."""
MARK = "_fedspectral_thread_backend"

# vce_api.run_api : function, module global of ``flwr.server.superlink.fleet.vce.vce_api``
#   What: the simulation engine's main loop: builds the backend from ``backend_fn`` and serves the nodes.
#   Why: use_thread_backend wraps it so that a run whose federation config names THREAD_BACKEND gets a
#   ThreadBackend from ``backend_fn``, not Flower's RayBackend; reads ``backend_name`` / ``backend_config`` from
#   its caller ``start_vce``'s frame (not passed to run_api). Public alternative: none (Flower builds only Ray).
# Backend : class ``flwr.server.superlink.fleet.vce.backend.Backend`` (the interface ThreadBackend implements)
# ClientAppException, LoadClientAppError : ``flwr.clientapp.client_app`` (the errors Ray's actor raises)

_in_use: list[str] = []  # the backend each run of this process was given (THREAD_BACKEND or Flower's name)


def backend_in_use() -> str | None:
    """The backend name of this process's latest simulation run that :func:`use_thread_backend` saw, else None."""
    return _in_use[-1] if _in_use else None


class ThreadBackend:
    """Flower's simulation ``Backend`` interface, the ClientApp run in the engine's worker thread.

    The interface (``build``, ``num_workers``, ``is_worker_idle``, ``process_message``, ``terminate``) without
    Flower's abstract base class, so that this module loads no Flower on import (``client_app.app`` tells Flower's
    simulation process by its loaded engine module).

    Parameters
    ----------
    backend_config : dict
        The engine's backend config (``client_resources``, ``init_args``, ``actor``). None of it applies to a
        thread: a node's resources other than Flower's defaults are named in one warning line.
    """

    def __init__(self, backend_config: dict) -> None:
        self.app_fn = None
        self.busy = 0
        unused = {key: value for key, value in (backend_config.get("client_resources") or {}).items()
                  if (key, value) not in DEFAULT_RESOURCES}
        if unused:
            from logging import WARNING

            from flwr.common import log

            log(WARNING, "simulation backend %r runs one ClientApp at a time in the simulation process: the client "
                "resources %s are not reserved (backend \"ray\" reserves them)", THREAD_BACKEND, unused)

    def build(self, app_fn) -> None:
        """Keep ``app_fn``, Flower's loader of the ClientApp (loaded once already by ``start_vce``)."""
        self.app_fn = app_fn

    @property
    def num_workers(self) -> int:
        """One: the nodes' messages are served one after the other."""
        return 1

    def is_worker_idle(self) -> bool:
        """Whether the one worker is free."""
        return self.busy == 0

    def process_message(self, message, context):
        """Run the ClientApp on ``message`` with the node's ``context``; return the reply and the context.

        As Ray's ``ClientAppActor.run`` on what Ray unpickles: the app gets copies of ``message`` and
        ``context`` (bytes, e.g. arrays' buffers, are shared, not copied: they cannot change), the reply and the
        copied context are returned; an error loading the app is raised as it is, any other exception as
        ``ClientAppException`` (the engine's worker turns both into an error reply and keeps the node's context
        as it was).
        """
        from flwr.clientapp.client_app import ClientAppException, LoadClientAppError

        if self.app_fn is None:
            raise ValueError("call the backend's build() before processing messages")
        # copies, as Ray's pickling gives its actor: SecAgg+'s setup sends one content object to every node and
        # its client mod edits it; a node's context changes are kept only when the app returns (the engine's
        # worker stores the returned context, and none on an exception)
        message, context = copy.deepcopy(message), copy.deepcopy(context)
        self.busy += 1
        try:
            app = self.app_fn()
            reply = app(message=message, context=context)
        except LoadClientAppError:
            raise
        except Exception as ex:  # pylint: disable=broad-exception-caught
            raise ClientAppException(str(ex)) from ex
        finally:
            self.busy -= 1
        return reply, context

    def terminate(self) -> None:
        """Nothing to stop: no process was started."""


DEFAULT_RESOURCES = (("num_cpus", 2), ("num_cpus", 2.0), ("num_gpus", 0), ("num_gpus", 0.0))
"""A node's resources as Flower sets them by default (``DEFAULT_SIMULATION_CONFIG``): nothing to warn about."""


def version_misfit(version: str) -> str | None:
    """Why Flower ``version`` is not one this is written for, or ``None`` (``fedspectral run`` asks before it
    starts: the simulation process checks the rest, :func:`thread_backend_misfit`)."""
    if not version.startswith(FLOWER_SERIES):
        return f"written for Flower {' or '.join(s + 'x' for s in FLOWER_SERIES)}, found {version}"
    return None


def thread_backend_misfit(version: str, start_vce, run_api) -> str | None:
    """Why the wrapper does not fit this Flower (its version, ``start_vce`` and ``run_api``), or ``None``."""
    if version_misfit(version):
        return version_misfit(version)
    try:
        source = inspect.getsource(start_vce)
    except (OSError, TypeError):
        return "the source of Flower's start_vce cannot be read"
    names = start_vce.__code__.co_varnames + start_vce.__code__.co_cellvars  # its locals, closures' too
    if FLOWER_CALL not in source or not all(name in names for name in START_LOCALS):
        return "Flower's start_vce does not call run_api with its backend_name and backend_config in hand"
    if list(inspect.signature(run_api).parameters)[:2] != ["app_fn", "backend_fn"]:
        return "Flower's run_api does not take (app_fn, backend_fn, ...)"
    return None


def use_thread_backend() -> str | None:
    """Make this process's simulation engine build a :class:`ThreadBackend` for a run that names it.

    Wraps ``vce_api.run_api`` once (a second call does nothing). A run whose federation config names another
    backend runs as before.

    Returns
    -------
    str or None
        ``None`` when done (or done before); otherwise why it does not fit the installed Flower, and nothing
        changed (a run naming :data:`THREAD_BACKEND` then gets Flower's Ray backend: Flower builds no other).
    """
    from flwr.server.superlink.fleet.vce import vce_api
    from flwr.supercore.version import package_version

    current = vce_api.run_api
    if getattr(current, MARK, False):
        return None
    problem = thread_backend_misfit(package_version, vce_api.start_vce, current)
    if problem:
        return problem
    start_code = vce_api.start_vce.__code__

    def run_api(app_fn, backend_fn, *args, **kwargs):
        caller = sys._getframe(1)  # pylint: disable=protected-access
        name = caller.f_locals.get("backend_name") if caller.f_code is start_code else None
        if name == THREAD_BACKEND:
            config = caller.f_locals.get("backend_config")
            config = json.loads(config) if isinstance(config, str) else dict(config or {})
            backend_fn = lambda: ThreadBackend(config)  # noqa: E731
        _in_use.append(str(name or "ray"))
        return current(app_fn, backend_fn, *args, **kwargs)

    setattr(run_api, MARK, True)
    run_api.__wrapped__ = current
    vce_api.run_api = run_api
    return None
