"""The fedspectral ServerApp: builds the strategy named in the run config.

The server holds no data. What it measures the estimates against, and the
inputs some algorithms need at the server, come from (in this order):

* the run config: ``server-data`` (FedLRGD / FedAve: the server's own
  samples), ``mf-sigma-1`` / ``mf-sigma-r`` (the MF baselines' step sizes);
* in a simulation, the harness that builds the run's data set
  (:mod:`fl_strategies.files.harness`): the dimension, the exact reference
  (``evaluation``) and the same inputs. It is looked up through an entry
  point, never imported by name; with ``dataset = "nodes"`` there is none and
  ``d`` comes from the nodes.

It validates the whole run configuration and keeps it as a mapping where every key is handled: the results and
``pca.npz`` record it, and the checkpoint compares it; the strategy reads its typed settings
(:mod:`fl_strategies.settings.strategies`).
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from flwr.common import Context
from flwr.server import Grid, ServerApp, ServerAppComponents, ServerConfig
from flwr.server.client_manager import SimpleClientManager

from fl_strategies.settings.config import (ConfigError, check_unread_keys, default_run_config, effective_config,
                                          round_timeout)
from fl_strategies.files.data_files import read_samples
from fl_strategies.files.plain_files import WriteFailed
from fl_strategies.files.folder_lock import FolderLocks, folder_locks
from fl_strategies.protocol.base import RunFailed
from fl_strategies.files.harness import ServerData, find_harness, on_nodes
from fl_strategies.settings.registry import load_class, spec
from fl_strategies.protocol import stop_request
from fl_strategies.protocol.checkpoint import checkpoint_for
from fl_strategies.protocol.round_exchange import prompt_grid, simulated_grid
from fl_strategies.protocol.server_loop import StoppingServer
from fl_strategies.protocol.flower_compat import start_grid

from .results import ResultsWriter
from .secure_loop import run_secure_aggregation

log = logging.getLogger("flwr.fedspectral")  # shown by Flower's console handler


def build_strategy(run_config) -> tuple:
    """Validate the config, gather the server's inputs and reference, and build the strategy.

    Returns
    -------
    strategy : flwr.server.strategy.Strategy
    num_rounds : int
    """
    cfg, overridden = effective_config(run_config)
    defaults = default_run_config()
    if not defaults:
        log.warning("fedspectral: no pyproject.toml beside the package: keys the strategy does not read are not "
                    "checked")
    unread = check_unread_keys(run_config, defaults)  # ConfigError under strict = true
    if unread:
        log.warning("fedspectral: %s", unread)
    if overridden:
        log.info("strategy %s fixes %s", cfg["strategy"], ", ".join(
            f"{key} = {fixed!r} (run config: {given!r})" for key, (given, fixed) in overridden.items()))
    data = server_data(cfg)
    what = spec(cfg["strategy"])
    inputs = {}
    if "server-rows" in what.server_inputs:
        inputs["server_rows"] = (read_samples(cfg["server-data"], "server-data") if cfg["server-data"]
                                 else data.server_rows if data is not None else None)
    if "singular-values" in what.server_inputs:
        inputs["singular_values"] = None if data is None else data.singular_values
    strategy = load_class(what.server)(cfg, None if data is None else data.dimension,
                                       reference=None if data is None else data.reference, **inputs)
    # the folders this run writes are its own until it ends (run_server releases them), or the ServerApp of
    # another run (a second `flwr run .`) is refused here, before anything is removed or written
    strategy.folders = writer_locks(cfg).acquire()
    try:
        if cfg["results-dir"]:
            writer = ResultsWriter(cfg["results-dir"], keep=cfg["resume"], overwrite=cfg["overwrite"])
            strategy.on_round = writer
            strategy.on_model = lambda model: writer.write_model(model, cfg)
            log.info("fedspectral: results in %s", Path(cfg["results-dir"]).resolve())
    except BaseException:
        strategy.folders.release()
        raise
    log.info("fedspectral: %r", strategy)
    return strategy, strategy.num_rounds


def writer_locks(cfg) -> FolderLocks:
    """The ServerApp's writer locks (not taken yet) of the run's ``results-dir`` and ``checkpoint-dir``
    (:mod:`fl_strategies.files.folder_lock`), naming the run in the lock file."""
    return folder_locks({"results-dir": cfg["results-dir"], "checkpoint-dir": cfg["checkpoint-dir"]}, writer=True,
                        what=f"the ServerApp of a fedspectral run ({Path(sys.argv[0]).name if sys.argv else ''})")


def release_folders(strategy) -> None:
    """Give up the folders :func:`build_strategy` took for ``strategy`` (idempotent)."""
    folders = getattr(strategy, "folders", None)
    if folders is not None:
        folders.release()


def server_data(cfg) -> ServerData | None:
    """What the simulation harness that builds the run's data set gives the server, or ``None``.

    Raises
    ------
    ConfigError
        If ``evaluation = "reference"`` and no harness builds the data set,
        if ``dataset`` names a data set that no installed harness builds, or
        (from the harness) if the data set cannot be built.
    """
    harness = find_harness(cfg)
    if harness is None:
        if not on_nodes(cfg):
            raise ConfigError(f"dataset = {cfg['dataset']!r} is a simulation data set, but no simulation harness "
                              "is installed to build it; on real nodes use dataset = \"nodes\" (each node's "
                              "data-path file)")
        if cfg["evaluation"] == "reference":
            raise ConfigError(f'evaluation = "reference" needs the pooled data, which the server does not have with '
                              f'dataset = {cfg["dataset"]!r} (the rows live with the clients): use evaluation = '
                              '"none" (or "auto")')
        return None
    try:
        return harness.server_data(cfg, evaluate=cfg["evaluation"] != "none")
    except ConfigError:
        raise
    except ValueError as ex:
        raise ConfigError(str(ex)) from ex


def server_fn(context: Context) -> ServerAppComponents:
    """The strategy named in the run config, in Flower's server loop with a stopping rule.

    The strategy holds the writer locks of its folders (:func:`build_strategy`); :func:`run_server` releases
    them when the run ends, and they are released here if no server is made.
    """
    strategy, num_rounds = build_strategy(context.run_config)
    timeout = round_timeout(strategy.cfg["round-timeout"], real_nodes=False)  # run_server sets its grid's
    try:
        checkpoint = checkpoint_for(strategy)
    except BaseException:
        release_folders(strategy)
        raise
    server = StoppingServer(client_manager=SimpleClientManager(), strategy=strategy, checkpoint=checkpoint)
    return ServerAppComponents(server=server, config=ServerConfig(num_rounds=num_rounds, round_timeout=timeout))


def run_server(grid: Grid, context: Context, observer=None, components: ServerAppComponents | None = None):
    """Run the configured strategy over ``grid`` and return it after the run.

    Strategies whose rounds need Flower's SecAgg+ protocol (``strategy.secure``) run through
    :func:`server_app.secure_loop.run_secure_aggregation`; all others through Flower's legacy server loop
    (:class:`fl_strategies.protocol.server_loop.StoppingServer`). Either gets ``grid`` as a
    :class:`~fl_strategies.protocol.round_exchange.PromptGrid` where that paces it (a SuperLink's grid is pulled
    every 0.1 s by every exchange: the SecAgg+ stages, discovery, the rounds).

    Parameters
    ----------
    grid : flwr.server.Grid
    context : flwr.common.Context
    observer : callable, optional
        Installed as the strategy's ``observer`` (sees every reply as the server received it).
    components : flwr.server.ServerAppComponents, optional
        What :func:`server_fn` returned for this context, if the caller built it already.

    Raises
    ------
    RunFailed
        After a run that a strategy aborted (its rows are written); Flower then reports the run as failed.
    """
    components = components or server_fn(context)
    strategy = components.server.strategy
    try:
        strategy.observer = observer
        set_round_timeout(strategy, components.config, real_nodes=not simulated_grid(grid))
        grid = prompt_grid(grid)  # every exchange pulls its replies as they arrive (no 3 s pauses of Flower's)
        if getattr(strategy, "secure", False):
            run_secure_aggregation(grid, context, strategy, components.config.num_rounds,
                                   components.config.round_timeout)
        else:
            start_grid(grid=grid, server=components.server, config=components.config)
    finally:  # the run's folders are free again, however it ended
        release_folders(strategy)
    if getattr(strategy, "failure", None):
        raise RunFailed(strategy.failure, strategy)
    log_last_round(strategy, components.config.num_rounds)
    return strategy


def log_last_round(strategy, num_rounds: int) -> None:
    """After a run its stopping rule ended early, say in which round (``rounds_run``, set by the server loops), after
    Flower's own summary line ("Run finished N round(s)", which counts the ``num-server-rounds`` allowed, not the
    rounds run)."""
    ran = getattr(strategy, "rounds_run", None)
    if not getattr(strategy, "stopped", False) or getattr(strategy, "failure", None) or not ran:
        return
    records = getattr(strategy, "records", None) or [{}]
    model = records[-1].get("round")  # the estimate the model is built from
    stop_tol = getattr(strategy, "stop_tol", 0.0) or 0.0
    log.info("fedspectral: the run stopped in round %d of num-server-rounds = %d (%s): %d round(s) ran%s", ran,
             num_rounds, f"stopping rule, stop-tol = {stop_tol:g}" if stop_tol > 0 else "the strategy's stopping rule",
             ran, "" if model is None else f", the model is round {model}'s estimate")


def set_round_timeout(strategy, config: ServerConfig, real_nodes: bool) -> None:
    """Give the run's round timeout (:func:`fl_strategies.settings.config.round_timeout`) to the server loop and to
    the strategy's discovery; log the default's value on real SuperNodes, and a run without any limit there."""
    seconds = strategy.cfg["round-timeout"]
    config.round_timeout = strategy.timeout = round_timeout(seconds, real_nodes)
    if real_nodes and seconds == -1:
        log.info("round-timeout: %g s a round (the default on real SuperNodes; round-timeout = 0 for no limit): a "
                 "node that does not reply by then is named and counted as failed", config.round_timeout)
    elif real_nodes and config.round_timeout is None:
        log.warning("round-timeout = 0: a round waits for every node without limit; a node whose ClientApp never "
                    "starts stops the run here")


class LastWord(logging.Filter):
    """A filter of Flower's logger that keeps ``line`` the last line of the ServerApp's log.

    Flower logs a ServerApp's exception after the app returned (``ServerApp raised an exception`` with its
    traceback, then ``Exit Code: ...`` and a help text): this filter appends ``line`` to that exit message, and,
    when ``explained`` (a failure of ours whose line says everything: :class:`RunFailed`, :class:`ConfigError`),
    drops the traceback. It removes itself after the exit message.

    Parameters
    ----------
    line : str
        The run's status line.
    explained : bool
        Whether to drop the traceback of the exception's record.
    """

    def __init__(self, line: str, explained: bool) -> None:
        super().__init__()
        self.line, self.explained = line, explained

    def filter(self, record: logging.LogRecord) -> bool:
        message = str(record.msg)
        if self.explained and record.exc_info and message.endswith("raised an exception"):
            record.exc_info, record.exc_text = None, None
        elif message.startswith("Exit Code:"):
            record.msg, record.args = f"{record.getMessage()}\n{self.line}", ()
            logging.getLogger("flwr").removeFilter(self)
        return True


def _failed(line: str, explained: bool) -> None:
    """Log the run's status ``line`` now, and again as the last line after Flower's report of the exception."""
    log.error(line)
    flower = logging.getLogger("flwr")
    for old in [f for f in flower.filters if isinstance(f, LastWord)]:
        flower.removeFilter(old)
    flower.addFilter(LastWord(line, explained))


app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Flower's entry point; its last log line says whether the run completed (``flwr run`` exits 0 either way).

    A results file that cannot be written (``rounds.csv``, ``pca.npz``: a full disk) ends the run with one line
    naming the file and the reason (:class:`~fl_strategies.files.plain_files.WriteFailed`), no traceback; a
    checkpoint that cannot be written is logged and the run goes on
    (:meth:`fl_strategies.protocol.checkpoint.Checkpoint.save`).

    When Flower stops the process (Ctrl-C, SIGTERM, ``flwr stop``), the run ends before its next round and says
    so (:mod:`fl_strategies.protocol.stop_request`).
    """
    stop_request.install()
    try:
        with stop_request.running():
            run_server(grid, context)
    except stop_request.RunStopped as ex:  # the command that stopped it says so: one line there, not here
        log.info("fedspectral: run STOPPED: %s", ex)
        raise
    except (RunFailed, ConfigError, WriteFailed) as ex:  # WriteFailed: a full disk, naming the file
        _failed(f"fedspectral: run FAILED: {ex}", explained=True)
        raise
    except Exception as ex:
        _failed(f"fedspectral: run FAILED: {type(ex).__name__}: {ex}", explained=False)
        raise
    log.info("fedspectral: run completed")
