"""One progress line per round, from the server: its seconds, how far the estimate moved, and what is left.

After every round the server loops (:class:`~fl_strategies.protocol.server_loop.StoppingServer`,
:mod:`server_app.secure_loop`) log one INFO line through :meth:`RoundProgress.log_round`, e.g. ::

    round 4 of 40: 0.63 s (waited 0.60 s for 4 replies, server 0.03 s); change of the estimate (sin theta)
    1.480e-01; round 3's 2 kept components moved 1.319e-03 (sin theta, Ritz), 1 of 4 leading converged (moved
    <= 0.001); |F_k - F_k-1| / F_k = 7.58e-07 (stop-tol 1e-07); left: at most 36 rounds (~23 s), about 1 round to
    stop-tol (< 1 s)

(one line in the log). The parts:

* the round's wall seconds and where they went: the wait for the nodes' replies (summed over the SecAgg+ stages of
  a secure round, each listed) and the server's own time (the rest);
* what the strategy measured in the round (:attr:`progress_notes` of the eigenspace strategies): the subspace
  distance to an exact reference, or without one the change of the estimate, the change of the kept components
  (``estimate_change_first_k``: known one round late where it comes from the Ritz basis, hence "round 3's"),
  the privacy spent; and, with ``stop-tol``, the quantity the stopping rule compares with it (``F``'s relative
  change between successive estimates);
* what is left: at most ``num-server-rounds - t`` rounds, times the mean seconds of the rounds so far; with
  ``stop-tol``, the rounds until the stopping rule's quantity reaches ``stop-tol`` at the rate it shrank by
  over the last rounds (:func:`rounds_to_tolerance`), or "unknown" when it does not shrink.

All of it is what the server already learns (its own iterates, the summed ``F``; the same numbers as the rows of
``rounds.csv``), in a secure run too: nothing a node sent alone.
"""

from __future__ import annotations

import logging
import math
from typing import Any, Sequence

__all__ = ["RoundProgress", "rounds_to_tolerance", "cost_text", "about", "PROGRESS_LOGGER"]

#: The lines' logger, a child of Flower's (whose console handler shows them; ``compare`` only with ``--verbose``):
#: ``logging.getLogger(PROGRESS_LOGGER).setLevel(logging.WARNING)`` silences them alone.
PROGRESS_LOGGER = "flwr.fedspectral.progress"
log = logging.getLogger(PROGRESS_LOGGER)

#: How many of the last changes give the rate (their geometric mean ratio).
RATE_WINDOW = 3


def rounds_to_tolerance(changes: Sequence[float], tol: float, window: int = RATE_WINDOW) -> int | None:
    """The rounds until a geometrically shrinking change reaches ``tol``, from the rate it shrank by lately.

    Parameters
    ----------
    changes : sequence of float, shape (t,)
        The change after each round so far, oldest first (e.g. ``|F_k - F_{k-1}| / F_k``).
    tol : float
        The tolerance (``stop-tol``); 0 or less means none.
    window : int
        The rate is the geometric mean of the last ``window`` ratios ``c_j / c_{j-1}`` (fewer when fewer rounds).

    Returns
    -------
    int or None
        0 when the last change is already at most ``tol``; else the smallest ``n`` with ``c_t * rate^n <= tol``;
        None when there is no tolerance, fewer than two changes, or the rate is not below 1 (stalled, growing).
    """
    if tol <= 0 or not changes:
        return None
    last = float(changes[-1])
    if last <= tol:
        return 0
    steps = min(window, len(changes) - 1)
    if steps < 1 or not float(changes[-1 - steps]) > 0:
        return None
    rate = (last / float(changes[-1 - steps])) ** (1.0 / steps)
    if not 0 < rate < 1:
        return None
    return max(1, math.ceil(math.log(tol / last) / math.log(rate) - 1e-9))


def about(seconds: float) -> str:
    """``seconds`` as a person reads a wait: ``< 1 s``, ``~2.5 s``, ``~40 s``, ``~12.5 min``, ``~3.1 h``."""
    if seconds < 1:
        return "< 1 s"
    if seconds < 10:
        return f"~{seconds:.1f} s"
    if seconds < 120:
        return f"~{seconds:.0f} s"
    return f"~{seconds / 60:.1f} min" if seconds < 7200 else f"~{seconds / 3600:.1f} h"


def cost_text(seconds: float, timing: dict) -> str:
    """Where a round's ``seconds`` went, e.g. ``0.43 s (waited 0.41 s for 4 replies, server 0.02 s)``.

    ``timing``: ``"waited"`` and ``"replies"`` (:func:`~fl_strategies.protocol.round_exchange.fit_in_one_batch`),
    or for a round of several exchanges (SecAgg+'s) ``"stages"``, a list of ``(name, waited, replies)``: the wait
    is their sum, and each follows, e.g. ``(waited 0.41 s for 4 replies, server 0.02 s; stages: setup 0.10 s for 4,
    unmask 0.04 s for 4)``. The wait is at most the round; a round that sent nothing waited 0 s for 0 replies.
    """
    stages = timing.get("stages", ())
    waited = sum(float(wait) for _, wait, _ in stages) if stages else float(timing.get("waited", 0.0))
    waited = min(max(waited, 0.0), seconds)
    detail = ("; stages: " + ", ".join(f"{name} {wait:.2f} s for {int(replies)}" for name, wait, replies in stages)
              ) if stages else ""
    return (f"{seconds:.2f} s (waited {waited:.2f} s for {int(timing.get('replies', 0))} replies, server "
            f"{max(seconds - waited, 0.0):.2f} s{detail})")


class RoundProgress:
    """The progress lines of one fit: the rounds' seconds and the stopping rule's quantity so far.

    Parameters
    ----------
    strategy : object
        The run's strategy; read: ``stop_tol``, ``stopped``, and ``progress_notes`` (a dict the strategy fills
        during a round: ``"estimate"`` and ``"kept"`` texts, ``"stop_statistic"`` a float), emptied after each line.
    num_rounds : int
        ``num-server-rounds``.
    """

    def __init__(self, strategy: Any, num_rounds: int) -> None:
        self.strategy, self.num_rounds = strategy, num_rounds
        self.seconds: list[float] = []
        self.statistics: list[float] = []
        self._take_notes()  # anything noted before round 1 (discovery) is not a round's

    def _take_notes(self) -> dict:
        notes = getattr(self.strategy, "progress_notes", None)
        if notes is None:
            return {}
        taken = dict(notes)
        notes.clear()
        return taken

    def line(self, server_round: int, seconds: float, timing: dict) -> str:
        """The line of round ``server_round``, which took ``seconds`` (``timing``: :func:`cost_text`)."""
        self.seconds.append(max(seconds, 0.0))
        notes = self._take_notes()
        stop_tol = float(getattr(self.strategy, "stop_tol", 0.0) or 0.0)
        parts = [f"round {server_round} of {self.num_rounds}: {cost_text(seconds, timing)}"]
        parts += [notes[key] for key in ("estimate", "kept") if notes.get(key)]
        statistic = notes.get("stop_statistic")
        if stop_tol > 0 and statistic is not None:
            self.statistics.append(float(statistic))
            parts.append(f"|F_k - F_k-1| / F_k = {statistic:.2e} (stop-tol {stop_tol:g})")
        parts.append("left: " + self.left(server_round, stop_tol))
        return "; ".join(parts)

    def left(self, server_round: int, stop_tol: float) -> str:
        """What is left after round ``server_round``: at most the rounds to ``num-server-rounds`` and, with
        ``stop-tol``, the estimate of :func:`rounds_to_tolerance`, each with its seconds at the mean round's."""
        if getattr(self.strategy, "stopped", False):
            return "none (the run stops in this round)"
        rounds = self.num_rounds - server_round
        if rounds <= 0:
            return "none (num-server-rounds reached)"
        mean = sum(self.seconds) / len(self.seconds)
        text = f"at most {rounds} round{'s' * (rounds != 1)} ({about(rounds * mean)})"
        if stop_tol <= 0:
            return text
        estimate = rounds_to_tolerance(self.statistics, stop_tol)
        if estimate is None:
            return text + ", to stop-tol unknown (no steady decrease yet)"
        if estimate > rounds:
            return text + ", stop-tol not within them at the current rate"
        return text + f", about {estimate} round{'s' * (estimate != 1)} to stop-tol ({about(estimate * mean)})"

    def log_round(self, server_round: int, seconds: float, timing: dict) -> None:
        """Log :meth:`line` at INFO."""
        log.info("%s", self.line(server_round, seconds, timing))

    def log_rest(self) -> None:
        """After the summary exchange: what it measured of the last estimate (the kept components' change known
        one round late), if anything."""
        notes = self._take_notes()
        if notes.get("kept"):
            log.info("after the last round (summary exchange): %s", notes["kept"])
