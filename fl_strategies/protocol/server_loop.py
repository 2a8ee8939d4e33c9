"""The server loop of the eigenspace strategies: Flower's loop, plus a stopping rule.

Flower's ``Server.fit`` runs a fixed number of rounds. Algorithms with a
convergence test (the FAPS paper's rule (27), used by ``faps``, ``ssi`` and
``localpower``) set ``strategy.stopped`` in ``aggregate_fit``; this server then
ends the run, runs the strategy's summary exchange (the PCA model), and calls
``strategy.finish()`` so the strategy can write its last results row.

With a :class:`~fl_strategies.protocol.checkpoint.Checkpoint` it saves the state after
every round, and a run with ``resume = true`` starts after the checkpointed
round instead of at round 1 (the nodes are discovered again first). When Flower stops the process it runs in
(Ctrl-C, SIGTERM, ``flwr stop``), it ends before its next round (:mod:`fl_strategies.protocol.stop_request`).

Each round's instructions go out in one batch through the Grid
(:func:`fl_strategies.protocol.round_exchange.fit_in_one_batch`) rather than one
thread per client as in Flower's ``Server.fit_round``; the strategy sees the
same ``results`` and ``failures``.

After every round it logs one INFO line (:class:`fl_strategies.protocol.round_progress.RoundProgress`): the round's
seconds and where they went (the wait for the nodes' replies, the server's own time: building the instructions,
aggregating, recording the round), how far the estimate moved, and what is left.
"""

from __future__ import annotations

import timeit
from logging import DEBUG, INFO

from flwr.common import log, ndarrays_to_parameters, parameters_to_ndarrays
from flwr.server import History, Server

from . import stop_request
from .outlier_exchange import outlier_pass
from .round_progress import RoundProgress
from .round_exchange import MissingReply, fit_in_one_batch

__all__ = ["StoppingServer"]


class StoppingServer(Server):
    """``flwr.server.Server`` that stops when ``strategy.stopped`` is true.

    Parameters
    ----------
    checkpoint : fl_strategies.protocol.checkpoint.Checkpoint, optional
        Saved after every round; with ``checkpoint.resumed`` the run continues
        from it.
    **kwargs
        Those of ``flwr.server.Server`` (``client_manager``, ``strategy``).
    """

    def __init__(self, *, checkpoint=None, **kwargs) -> None:
        super().__init__(**kwargs)
        self.checkpoint = checkpoint

    def fit(self, num_rounds: int, timeout: float | None) -> tuple[History, float]:
        """Run up to ``num_rounds`` rounds of fit + evaluate; stop early if the strategy says so. With
        ``outlier-sigma`` the whole fit is run again after each outlier pass that removed somebody, up to
        ``outlier-iterations`` times (:mod:`fl_strategies.protocol.outlier_exchange`)."""
        start = timeit.default_timer()
        settings = getattr(self.strategy, "settings", None)
        iterations = getattr(settings, "outlier_iterations", 0) if getattr(settings, "outlier_sigma", 0) > 0 else 0
        initial = self.strategy.initial_state() if iterations else None
        passes: list[dict] = []
        for number in range(1, iterations + 2):
            history = self._fit_once(num_rounds, timeout)
            strategy = self.strategy
            if number > iterations or getattr(strategy, "failure", None) or getattr(strategy, "model", None) is None:
                break
            record = outlier_pass(strategy, self.max_workers, timeout, number, num_rounds + 1)
            if record is not None:
                passes.append(record)
            if record is None or not record["removed"]:
                break
            strategy.restart(initial)
            log(INFO, "outliers: fitting again without the %d removed (pass %d of at most %d)",
                sum(p["removed"] for p in passes), number, iterations)
        if passes and self.strategy.model is not None:  # what transform needs to list a site's removed people
            self.strategy.model["outlier_passes"] = passes
            self.strategy.model["outlier_sigma"] = float(settings.outlier_sigma)
        finish = getattr(self.strategy, "finish", None)
        if finish is not None:
            finish()
        return history, timeit.default_timer() - start

    def _fit_once(self, num_rounds: int, timeout: float | None) -> History:
        """Discovery, the rounds and the summary exchange (the model), without :meth:`finish`."""
        history = History()
        self.parameters = self._get_initial_parameters(server_round=0, timeout=timeout)
        first = 1
        resumed = self.checkpoint.resumed if self.checkpoint is not None else None
        if resumed is not None:  # the nodes are known again: restore the state after the checkpointed round
            self.strategy.load_state_dict(resumed["strategy"])
            self.parameters = ndarrays_to_parameters(resumed["parameters"])
            first = resumed["round"] + 1
            log(INFO, "resuming after round %s", resumed["round"])
            restore = getattr(getattr(self.strategy, "on_round", None), "restore", None)
            if restore is not None:  # a results-dir without the rows of the checkpointed rounds gets them back
                restore(self.strategy.records, self.strategy.iterates)
        else:
            self.strategy.evaluate(0, parameters=self.parameters)
            self._save(0)
        progress = RoundProgress(self.strategy, num_rounds)
        for current_round in range(first, num_rounds + 1):
            stop_request.check(current_round)  # Flower is stopping this process: end between two rounds
            began, timing = timeit.default_timer(), {}
            self.strategy.rounds_run = current_round  # the last round that ran (server_app.app.log_last_round)
            # only the aggregate is kept: the round's replies (their serialised arrays, d x r each) are freed now,
            # not held through the next round
            aggregated = (self.fit_round(server_round=current_round, timeout=timeout, timing=timing) or (None,))[0]
            if getattr(self.strategy, "stopped", False):
                progress.log_round(current_round, timeit.default_timer() - began, timing)
                log(INFO, "run stopped in round %s: %s", current_round,
                    getattr(self.strategy, "failure", None) or "stopping rule met")
                break
            if aggregated:
                self.parameters = aggregated
            self.strategy.evaluate(current_round, parameters=self.parameters)
            self._save(current_round)
            progress.log_round(current_round, timeit.default_timer() - began, timing)
        check = getattr(self.strategy, "check_progress", None)
        if check is not None:  # a run without a result is a failure, and writes no model
            check()
        self.summary(num_rounds + 1, timeout)  # before finish(): the summary completes the held last row
        progress.log_rest()
        return history

    def fit_round(self, server_round: int, timeout: float | None, timing: dict | None = None):
        """One round of ``configure_fit``, the exchange and ``aggregate_fit`` (as Flower's, batched).

        ``timing``, if given, receives ``"waited"`` (seconds spent waiting for the replies) and ``"replies"``
        (how many arrived: results and failures that are replies, not missing ones).
        """
        client_instructions = self.strategy.configure_fit(server_round=server_round, parameters=self.parameters,
                                                          client_manager=self._client_manager)
        if not client_instructions:
            log(INFO, "configure_fit: no clients selected, cancel")
            return None
        log(DEBUG, "configure_fit: strategy sampled %s clients (out of %s)", len(client_instructions),
            self._client_manager.num_available())
        results, failures = fit_in_one_batch(client_instructions, self.max_workers, timeout, server_round,
                                             timing=timing)
        if timing is not None:
            timing["replies"] = len(results) + sum(not isinstance(f, MissingReply) for f in failures)
        # DEBUG: the round's progress line (round_progress) counts the replies; a failure is a WARNING of its own
        log(DEBUG, "aggregate_fit: received %s results and %s failures", len(results), len(failures))
        parameters_aggregated, metrics_aggregated = self.strategy.aggregate_fit(server_round, results, failures)
        return parameters_aggregated, metrics_aggregated, (results, failures)

    def summary(self, server_round: int, timeout: float | None) -> None:
        """The strategy's summary exchange after the last round, if it has one (the PCA model)."""
        configure = getattr(self.strategy, "configure_summary", None)
        instructions = configure() if configure is not None else []
        if instructions:
            results, failures = fit_in_one_batch(instructions, self.max_workers, timeout, server_round)
            self.strategy.aggregate_summary(results, failures)

    def _save(self, server_round: int) -> None:
        if self.checkpoint is not None:
            self.checkpoint.save(server_round, parameters_to_ndarrays(self.parameters), self.strategy)
