"""The server loop of the eigenspace strategies: Flower's loop, plus a stopping rule.

Flower's ``Server.fit`` runs a fixed number of rounds. Algorithms with a
convergence test (the FAPS paper's rule (27), used by ``faps``, ``ssi`` and
``localpower``) set ``strategy.stopped`` in ``aggregate_fit``; this server then
ends the run, and calls ``strategy.finish()`` so the strategy can write its last
results row.
"""

from __future__ import annotations

import timeit
from logging import INFO

from flwr.common.logger import log
from flwr.server import Server
from flwr.server.history import History

__all__ = ["StoppingServer"]


class StoppingServer(Server):
    """``flwr.server.Server`` that stops when ``strategy.stopped`` is true."""

    def fit(self, num_rounds: int, timeout: float | None) -> tuple[History, float]:
        """Run up to ``num_rounds`` rounds of fit + evaluate; stop early if the strategy says so."""
        history = History()
        self.parameters = self._get_initial_parameters(server_round=0, timeout=timeout)
        self.strategy.evaluate(0, parameters=self.parameters)
        start = timeit.default_timer()
        for current_round in range(1, num_rounds + 1):
            res_fit = self.fit_round(server_round=current_round, timeout=timeout)
            if getattr(self.strategy, "stopped", False):
                log(INFO, "stopping rule met in round %s", current_round)
                break
            if res_fit is not None and res_fit[0]:
                self.parameters = res_fit[0]
            self.strategy.evaluate(current_round, parameters=self.parameters)
        finish = getattr(self.strategy, "finish", None)
        if finish is not None:
            finish()
        return history, timeit.default_timer() - start
