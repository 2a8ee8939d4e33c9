"""The fedspectral ServerApp: builds the strategy named in the run config.

In simulation the server's harness regenerates the pooled data from the run
config to compute the exact reference eigenvectors (scipy ``eigh``), which
are used only to *measure* the estimate; no client sends its data.
"""

from __future__ import annotations

import logging
import os

from flwr.common import Context
from flwr.server import Grid, ServerApp, ServerAppComponents, ServerConfig

from fl_strategies.config import ConfigError, check_against_data, validate_run_config
from fl_strategies.dp_power import DPRunStopped
from fl_strategies.registry import STRATEGIES
from fl_strategies.checkpoint import checkpoint_for
from fl_strategies.server_loop import StoppingServer
from flwr.server.client_manager import SimpleClientManager
from fl_strategies.fedmf import MF_STRATEGIES
from fl_strategies.flower_compat import start_grid
from simulations.federated_data import data_shape, erm_reference, mf_reference, reference
from simulations.interaction_data import interaction_reference, interaction_rows, is_interaction_folder

from .results import ResultsWriter
from .secure_loop import run_secure_aggregation

log = logging.getLogger("flwr.fedspectral")  # shown by Flower's console handler

ERM_STRATEGIES = ("fedlrgd", "fedave")  # federated ERM: erm_reference instead of reference


def check_memory(cfg) -> None:
    """Refuse a generated data set that cannot fit in this machine's memory, before anything is allocated.

    The run holds the ``n x d`` data and ``d x d`` matrices (the pooled
    covariance, each client's ``A_i``); a typo such as ``dimension = 1e9``
    would otherwise get the process killed by the operating system. Files and
    bundled sets (``dimension = 0``) are not estimated.

    Raises
    ------
    ConfigError
        If ``8 (n d + 3 d^2)`` bytes exceed the physical memory.
    """
    d = cfg["dimension"]
    rows = cfg["num-clients"] * d if cfg["dataset"] == "fedpower-model2" else cfg["num-samples"]
    need = 8 * (rows * d + 3 * d * d)
    try:
        have = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):  # not available on this platform
        return
    if need > have:
        raise ConfigError(f"num-samples = {cfg['num-samples']}, dimension = {d} (dataset {cfg['dataset']!r}) need "
                          f"about {need / 1e9:.3g} GB of memory for the data and the d x d matrices; this machine "
                          f"has {have / 1e9:.3g} GB")


def build_strategy(run_config) -> tuple:
    """Validate the config, load the reference and build the strategy.

    Returns
    -------
    strategy : flwr.server.strategy.Strategy
    num_rounds : int
    """
    cfg = validate_run_config(run_config)
    check_memory(cfg)
    dimension, ref = _reference(cfg)
    strategy = STRATEGIES[cfg["strategy"]](cfg, dimension, reference=ref)
    if cfg["results-dir"]:
        strategy.on_round = ResultsWriter(cfg["results-dir"], keep=cfg["resume"])
    log.info("fedspectral: %r", strategy)
    return strategy, strategy.num_rounds


def _reference(cfg) -> tuple:
    """The dimension the strategy works in and the exact reference the harness measures it against.

    Eigenspace strategies: eigenpairs of the pooled covariance; fedmf: the SVD of the pooled matrix; FedLRGD and
    FedAve: the server's rows and F* (supervised rows, the label in the last column). Errors become
    ``ConfigError`` naming the data set.
    """
    if cfg["strategy"] in ERM_STRATEGIES:  # supervised data, server rows and F* instead of eigenvectors
        try:
            ref = erm_reference(cfg)
        except (ValueError, MemoryError) as ex:
            raise ConfigError(f"the data of {cfg['strategy']} cannot be loaded: {ex}") from ex
        return ref.X.shape[1] + 1, ref
    if is_interaction_folder(cfg["dataset"]):  # user-item interactions (dp-power): sparse rows, the top items
        try:
            rows = interaction_rows(cfg)
            check_against_data(cfg, rows.shape[1], rows.shape[0])
            return rows.shape[1], interaction_reference(cfg)
        except (ValueError, OSError, MemoryError) as ex:
            raise ConfigError(f"the interactions in {cfg['dataset']!r} cannot be used: {ex}") from ex
    try:  # the data set named by the config: its errors name the key at fault
        n, d = data_shape(cfg)  # a lazy data set is not generated here
    except ValueError as ex:
        raise ConfigError(str(ex)) from ex
    except MemoryError:
        raise ConfigError(f"the data set {cfg['dataset']!r} (num-samples = {cfg['num-samples']}, dimension = "
                          f"{cfg['dimension']}) does not fit in memory") from None
    check_against_data(cfg, d, n)
    try:
        return d, (mf_reference if cfg["strategy"] in MF_STRATEGIES else reference)(cfg)  # fedmf: SVD of S
    except (ValueError, MemoryError) as ex:
        raise ConfigError(f"the exact reference (eigenvectors of (1/n) X^T X) of the data set {cfg['dataset']!r} "
                          f"cannot be computed ({type(ex).__name__}: {ex}); data too large in magnitude can be "
                          "rescaled or used with row-normalize = true") from ex


def server_fn(context: Context) -> ServerAppComponents:
    """The strategy named in the run config, in Flower's server loop with a stopping rule."""
    strategy, num_rounds = build_strategy(context.run_config)
    timeout = strategy.cfg["round-timeout"] or None
    server = StoppingServer(client_manager=SimpleClientManager(), strategy=strategy,
                            checkpoint=checkpoint_for(strategy))
    return ServerAppComponents(server=server, config=ServerConfig(num_rounds=num_rounds, round_timeout=timeout))


def run_server(grid: Grid, context: Context, observer=None, components: ServerAppComponents | None = None):
    """Run the configured strategy over ``grid`` and return it after the run.

    Strategies whose rounds need Flower's SecAgg+ protocol (``strategy.secure``) run through
    :func:`server_app.secure_loop.run_secure_aggregation`; all others through Flower's legacy server loop
    (:class:`fl_strategies.server_loop.StoppingServer`).

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
    fl_strategies.dp_power.DPRunStopped
        After a run that had to stop early (its rows are written).
    """
    components = components or server_fn(context)
    strategy = components.server.strategy
    strategy.observer = observer
    if getattr(strategy, "secure", False):
        run_secure_aggregation(grid, context, strategy, components.config.num_rounds,
                               components.config.round_timeout)
    else:
        start_grid(grid=grid, server=components.server, config=components.config)
    if getattr(strategy, "stop_reason", None):
        raise DPRunStopped(strategy.stop_reason)
    return strategy


app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Flower's entry point."""
    run_server(grid, context)
