"""The rounds of a strategy whose fit rounds run Flower's SecAgg+ protocol (``dp-power`` with ``dp-channel = secagg``,
``covariance``, ``power``, ``ssi``, ``fedpower``, ``localpower`` and ``krylov`` with ``secure-aggregation``).

Flower's ``SecAggPlusWorkflow`` works only inside its legacy ``DefaultWorkflow`` stack (a ``LegacyContext``).
``DefaultWorkflow`` always runs every round; this loop is the same sequence (initial parameters and evaluation,
then per round the SecAgg+ fit workflow and the server-side evaluation) but ends the run when the strategy sets
``stopped`` or when SecAgg+ halted without calling ``aggregate_fit`` (too few clients answered a stage), runs a
strategy's discovery sums (``discovery_rounds``, numbered up to 0, read again after each: a list that may drop
rounds it reserved, as secure ``indep-pairwise`` does) before round 1 and its summary exchange
(``secure_summary``) as one more SecAgg+ round numbered ``num_rounds + 1`` (with no evaluation), and calls
``strategy.finish()`` at the end, like :class:`fl_strategies.protocol.server_loop.StoppingServer`. With
``outlier-sigma`` (a secure ``power``-family strategy) each fit is followed by an outlier pass of two SecAgg+ rounds
(numbered ``num_rounds + 2 t`` and ``num_rounds + 2 t + 1`` for pass ``t``:
:func:`fl_strategies.protocol.outlier_exchange.secure_outlier_pass`), and the whole fit, discovery included, is run
again after each pass that removed people, as the plain loop does.

After every round 1, 2, ... it logs the plain loop's progress line
(:class:`fl_strategies.protocol.round_progress.RoundProgress`), its seconds split into the wait for the nodes'
replies summed over the round's SecAgg+ stages (:class:`StageTimer`), the replies of the stage that collects the
masked uploads, the server's own time (the rest: SecAgg+'s unmasking, the aggregation, the evaluation), and each
stage's wait and replies, e.g. ``round 3 of 4: 0.43 s (waited 0.41 s for 4 replies, server 0.02 s; stages: setup
0.10 s for 4, share_keys 0.12 s for 4, collect_masked_vectors 0.15 s for 4, unmask 0.04 s for 4); ...``.
"""

from __future__ import annotations

import logging
import timeit

from flwr.common import ConfigRecord, Context
from flwr.server import Grid, LegacyContext, ServerConfig
from flwr.server.workflow import SecAggPlusWorkflow

from fl_strategies.protocol.outlier_exchange import secure_outlier_pass
from fl_strategies.protocol.round_progress import RoundProgress
from fl_strategies.protocol.strategies.dp_power import QUANTIZATION_RANGE, num_shares
from fl_strategies.protocol.flower_compat import (
    MAIN_CONFIGS_RECORD,
    RECORD_KEY_CONFIGS,
    SecAggKey,
    SecAggStage,
    WorkflowKey as Key,
    default_centralized_evaluation_workflow,
    default_init_params_workflow,
    start_update_client_manager_thread,
)

log = logging.getLogger("flwr.fedspectral")

__all__ = ["run_secure_aggregation", "secagg_ranges", "StageTimer"]


class StageTimer:
    """A grid that times its exchanges: ``send_and_receive`` as the wrapped grid's, plus, per call (one SecAgg+
    stage), the stage's name, the seconds it waited and its replies (messages without an error) in ``stages``.
    Everything else is the wrapped grid's.

    Parameters
    ----------
    grid : flwr.server.Grid
    """

    def __init__(self, grid) -> None:
        self.grid = grid
        self.stages: list[tuple[str, float, int]] = []

    def __getattr__(self, name: str):
        return getattr(self.grid, name)

    def send_and_receive(self, messages, *, timeout: float | None = None) -> list:
        """The wrapped grid's ``send_and_receive``, timed; the replies as a list."""
        messages = list(messages)
        stage, began = _stage_of(messages), timeit.default_timer()  # before sending: a grid may consume them
        replies: list = []
        try:
            replies = list(self.grid.send_and_receive(messages, timeout=timeout))
        finally:
            self.stages.append((stage, timeit.default_timer() - began, sum(not reply.has_error() for reply in replies)))
        return replies

    def round_timing(self) -> dict:
        """The timing of :func:`~fl_strategies.protocol.round_progress.cost_text` for the stages since the last
        call: ``stages`` and, as ``replies``, the replies that carried the masked uploads; then starts afresh."""
        stages, self.stages = self.stages, []
        uploads = sum(replies for name, _, replies in stages if name == SecAggStage.COLLECT_MASKED_VECTORS)
        return {"stages": stages, "replies": uploads}


def _stage_of(messages: list) -> str:
    """The SecAgg+ stage the messages ask for (``exchange`` for messages of no stage)."""
    for msg in messages[:1]:
        records = msg.content.config_records
        if RECORD_KEY_CONFIGS in records:
            return str(records[RECORD_KEY_CONFIGS].get(SecAggKey.STAGE, "exchange"))
    return "exchange"


def secagg_ranges(strategy) -> tuple[float, int, int]:
    """SecAgg+'s ``(clipping_range, quantization_range, modulus_range)`` for ``strategy``: its own
    (``secagg_ranges()``, e.g. the exact limbs of :mod:`fl_strategies.privacy.fixed_point`) or ``strategy.clip``
    with :data:`~fl_strategies.protocol.strategies.dp_power.QUANTIZATION_RANGE` levels modulo ``2^32``."""
    own = getattr(strategy, "secagg_ranges", None)
    return own() if own is not None else (strategy.clip, QUANTIZATION_RANGE, 2 ** 32)


def run_secure_aggregation(grid: Grid, context: Context, strategy, num_rounds: int,
                           timeout: float | None = None) -> None:
    """Run ``num_rounds`` SecAgg+ rounds of ``strategy`` over ``grid``.

    Parameters
    ----------
    grid : flwr.server.Grid
    context : flwr.common.Context
        The ServerApp's context.
    strategy : DPPowerStrategy, CovarianceStrategy or SecurePowerStrategy
        Of :mod:`fl_strategies.protocol.strategies.dp_power`, :mod:`~fl_strategies.protocol.strategies.covariance`
        or :mod:`~fl_strategies.protocol.strategies.secure_power` (which gives its own ranges, :func:`secagg_ranges`).
        Provides ``num_shares`` settings via :func:`fl_strategies.protocol.strategies.dp_power.num_shares`, ``clip``
        (after ``initialize_parameters``), ``aggregated`` (the rounds it aggregated) and ``stopped`` / ``abort_round``.
    num_rounds : int
    timeout : float, optional
        Seconds each SecAgg+ stage waits for replies (``round-timeout``; ``None`` = no limit).
    """
    legacy = LegacyContext(context=context, config=ServerConfig(num_rounds=num_rounds, round_timeout=timeout),
                           strategy=strategy)
    thread, f_stop, c_done = start_update_client_manager_thread(grid, legacy.client_manager)
    settings = getattr(strategy, "settings", None)
    iterations = getattr(settings, "outlier_iterations", 0) if getattr(settings, "outlier_sigma", 0) > 0 else 0
    try:
        c_done.wait()
        initial = strategy.initial_state() if iterations else None
        default_init_params_workflow(grid, legacy)  # discovery, X_0, strategy.clip, evaluation of round 0
        shares, threshold = num_shares(strategy.m, strategy.settings.secagg_num_shares)
        clipping, levels, modulus = secagg_ranges(strategy)
        workflow = SecAggPlusWorkflow(num_shares=shares, reconstruction_threshold=threshold, max_weight=1.0,
                                      clipping_range=clipping, quantization_range=levels,
                                      modulus_range=modulus, timeout=timeout)
        cfg = ConfigRecord()
        legacy.state.config_records[MAIN_CONFIGS_RECORD] = cfg
        cfg[Key.START_TIME] = timeit.default_timer()
        passes: list[dict] = []
        for number in range(1, iterations + 2):  # one fit, and one more after each outlier pass that removed people
            if number > 1:
                default_init_params_workflow(grid, legacy)  # discovery again, without the people removed
            _fit_once(grid, legacy, workflow, cfg, num_rounds)
            if number > iterations or strategy.failure is not None or getattr(strategy, "model", None) is None:
                break
            record = secure_outlier_pass(strategy, lambda r: _exchange_round(grid, legacy, workflow, cfg, r), number,
                                         num_rounds + 2 * number)
            if record is not None:
                passes.append(record)
            if record is None or not record["removed"]:
                break
            strategy.restart(initial)
            log.info("outliers: fitting again without the %d removed (pass %d of at most %d)",
                     sum(p["removed"] for p in passes), number, iterations)
        if passes and strategy.model is not None and strategy.failure is None:  # what transform needs at a site
            strategy.model["outlier_passes"] = passes
            strategy.model["outlier_sigma"] = float(settings.outlier_sigma)
    finally:
        f_stop.set()
        thread.join()
        strategy.finish()


def _exchange_round(grid, legacy, workflow, cfg, server_round: int) -> bool:
    """One SecAgg+ round outside the fit (an outlier pass's exchange); whether the strategy formed its sum."""
    strategy = legacy.strategy
    cfg[Key.CURRENT_ROUND] = server_round
    workflow(grid, legacy)
    if server_round not in strategy.aggregated and strategy.failure is None:
        strategy.abort_round(server_round, "SecAgg+ halted before the sum was formed: too few clients answered one of "
                                           "its stages")
    return server_round in strategy.aggregated and strategy.failure is None


def _fit_once(grid, legacy, workflow, cfg, num_rounds: int) -> None:
    """The discovery sums, the rounds and the summary of one fit (after ``default_init_params_workflow``)."""
    strategy = legacy.strategy
    current_round = None
    while True:  # discovery sums, before round 1; the list read again after each (it may shrink: secure_power)
        later = [r for r in getattr(strategy, "discovery_rounds", ()) if current_round is None or r > current_round]
        if not later:
            break
        current_round = later[0]
        cfg[Key.CURRENT_ROUND] = current_round
        workflow(grid, legacy)
        if current_round not in strategy.aggregated and strategy.failure is None:
            strategy.abort_round(current_round, "SecAgg+ halted before the discovery sum was formed: too few "
                                                "clients answered one of its stages")
        if strategy.stopped:
            break
    timer = StageTimer(grid)
    progress = RoundProgress(strategy, num_rounds)
    for current_round in range(1, num_rounds + 1) if not strategy.stopped else ():
        cfg[Key.CURRENT_ROUND] = current_round
        strategy.rounds_run = current_round  # the last round that ran (server_app.app.log_last_round)
        began = timeit.default_timer()
        workflow(timer, legacy)
        if current_round not in strategy.aggregated and not strategy.stopped:
            strategy.abort_round(current_round, "SecAgg+ halted before the sum was formed: too few clients answered "
                                         "one of its stages (a client dropped out, or refused to upload a "
                                         "product outside secagg-clip; see the clients' logs)")
        if strategy.stopped:
            progress.log_round(current_round, timeit.default_timer() - began, timer.round_timing())
            break
        default_centralized_evaluation_workflow(grid, legacy)
        progress.log_round(current_round, timeit.default_timer() - began, timer.round_timing())
    if getattr(strategy, "secure_summary", False) and strategy.failure is None:
        cfg[Key.CURRENT_ROUND] = num_rounds + 1  # the summary exchange, summed by SecAgg+ too
        workflow(grid, legacy)
        if num_rounds + 1 not in strategy.aggregated and strategy.failure is None:
            strategy.abort_round(num_rounds + 1, "SecAgg+ halted before the summary's sum was formed: too few "
                                                 "clients answered one of its stages")
    progress.log_rest()
    strategy.check_progress()
