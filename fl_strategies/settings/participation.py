"""Who takes part in a round, and when their replies arrive: one mechanism for every strategy.

**Sampling.** :meth:`Participation.sample` draws the partition ids asked in a
round from ``default_rng([seed, STREAM_SAMPLING, round])``: ``count`` ids
uniformly *with replacement* (FedPower's Algorithm 3; duplicates are kept as
multiplicities) or *without replacement* (FedAve / FedPAQ). ``count = m``
means everyone, without a draw. Key ``sampling``: ``auto`` is the strategy's
own rule (FedPower with, FedAve without replacement).

**Stragglers in virtual time.** Each (round, partition) draws its latency
from ``default_rng([seed, STREAM_LATENCY, round, partition])``, always in
this order (so the dropout draw and the compute draw do not depend on the
other settings: common random numbers for paired comparisons)::

    u ~ U[0, 1)                       the client drops out of the round iff u < dropout
    compute = w * latency-shift + latency-scale * X
    upload  ~ Exponential(mean latency-upload)     (0 when latency-upload = 0)
    latency = (compute + upload) * (slow-factor if the device is slow else 1)

with ``w`` the round's local work units (FedPower: its local steps; FedAve:
``local-steps`` SGD steps; one for FAPS and FedLRGD) and ``X``:

* ``shifted-exp``: ``Gamma(w, 1)`` (Erlang), i.e. ``w`` successive gradient
  computations of time ``latency-shift + latency-scale * Exp(1)`` each, the
  shifted-exponential model of the FedLRGD paper (Sec. 2.2: shift = scale = 1,
  a client's epoch takes ``b + Erlang(b, 1)``);
* ``pareto``: the sum of ``w`` Lomax (Pareto II) draws of shape
  ``latency-tail`` (``alpha``; heavy-tailed, infinite variance for
  ``alpha <= 2``, infinite mean for ``alpha <= 1``);
* ``none``: 0 (only the upload time, if any).

The paper's upload model is an M/M/1 queue at the server; here uploads are
independent exponentials (no queueing). Whether a device is slow is a property
of the device, fixed for the whole run: partition ``i`` is slow iff
``default_rng([seed, STREAM_DEVICE, i]).random() < slow-fraction``.

**Server policies** (``round-policy``). A dropped client is reported to the
server as failed at once (as Flower reports a lost node); the others reply at
their latency. The server

* ``all``: keeps every reply; the round closes at the last arrival;
* ``first-k``: keeps the ``first-k`` earliest replies (ties broken by
  partition id); the round closes at the ``first-k``-th arrival (at the last
  one if fewer replied);
* ``deadline``: keeps the replies that arrive by ``deadline``; the round
  closes at ``deadline``, or at the last arrival if every client that did not
  drop out arrived before it.

``round_time`` (a column of every results row) is that closing time, in the
units of the latency model (the FedLRGD paper's unit is the shift of one
gradient computation). It is *virtual*: the simulation asks only the kept
clients (the late replies would be discarded anyway) and does not wait. In a
deployment the real limit is ``round-timeout`` (Flower's ``round_timeout``,
seconds of wall time): the server aggregates what arrived by then, whatever
the virtual model says; the two are independent and can be combined.

**Who tolerates what** (``stragglers`` of the strategy's spec, :mod:`fl_strategies.settings.registry`):
``partial`` (FedPower, FedAve: any setting), ``all`` (FAPS, FedLRGD: they need
every client every round, so the latency model may only report the round time;
``dropout`` and a ``round-policy`` other than ``all`` are refused with a
``ConfigError`` before round 1 rather than aggregating a biased sum), ``none``
(the fedmf family: no straggler setting at all).

It reads the whole run configuration (not a strategy's settings), as the validation does: refusing the
straggler settings a strategy does not honour means reading keys that strategy does not declare.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

import numpy as np

from .errors import ConfigError

__all__ = ["STREAM_SAMPLING", "STREAM_LATENCY", "STREAM_DEVICE", "SAMPLING", "LATENCY_MODELS", "ROUND_POLICIES",
           "sample_partitions", "RoundPlan", "Participation", "check_participation"]

# Stream tags of the run seed: 0 init (protocol.strategies.eigenspace), 1 sampling, 2 noise (privacy.noise),
# 3 FedAve SGD, 10-12 fedmf (kernels.mf).
STREAM_SAMPLING = 1
STREAM_LATENCY, STREAM_DEVICE = 20, 21

SAMPLING = ("auto", "with-replacement", "without-replacement")
LATENCY_MODELS = ("none", "shifted-exp", "pareto")
ROUND_POLICIES = ("all", "first-k", "deadline")
SUPPORT_LEVELS = ("partial", "all", "none")


def sample_partitions(seed: int, server_round: int, m: int, count: int, replace: bool) -> dict[int, int]:
    """The partition ids asked in a round, with their multiplicity, in increasing order.

    Parameters
    ----------
    seed : int
        The run seed.
    server_round : int
        Flower's round number (1-based).
    m : int
        Number of partitions ``0 .. m-1``.
    count : int
        How many to draw; ``count >= m`` means every partition once, without a draw.
    replace : bool
        Draw with replacement (multiplicities may exceed 1) or without.

    Returns
    -------
    dict of int to int
        ``partition id -> multiplicity`` (sorted by partition id).
    """
    if count >= m:
        return {pid: 1 for pid in range(m)}
    rng = np.random.default_rng([seed, STREAM_SAMPLING, server_round])
    if replace:
        counts = np.bincount(rng.integers(0, m, size=count), minlength=m)
        return {pid: int(c) for pid, c in enumerate(counts) if c}
    return {int(pid): 1 for pid in sorted(rng.choice(m, size=count, replace=False))}


@dataclass
class RoundPlan:
    """What the straggler model decides for one round.

    Attributes
    ----------
    kept : list of int
        Partitions whose replies the server keeps, increasing.
    late : list of int
        Partitions that replied after the round closed (discarded).
    dropped : list of int
        Partitions that dropped out (reported as failures).
    round_time : float
        Virtual time at which the server closes the round.
    arrivals : dict of int to float
        Virtual arrival time of every asked partition (``inf`` when dropped).
    extra : list of int
        Partitions of ``extra`` (e.g. FedPower's reference client) that arrived
        by ``round_time``.
    """

    kept: list[int]
    late: list[int] = field(default_factory=list)
    dropped: list[int] = field(default_factory=list)
    round_time: float = 0.0
    arrivals: dict[int, float] = field(default_factory=dict)
    extra: list[int] = field(default_factory=list)


class Participation:
    """Seeded sampling and the virtual-time straggler model of one run.

    Parameters
    ----------
    cfg : mapping
        Effective run configuration (keys ``seed``, ``num-clients``,
        ``sampling``, ``latency-*``, ``slow-*``, ``dropout``, ``round-policy``,
        ``first-k``, ``deadline``).
    default_sampling : {"with-replacement", "without-replacement"}
        The strategy's own rule, used when ``sampling = "auto"``.
    """

    def __init__(self, cfg: Mapping[str, Any], default_sampling: str = "without-replacement") -> None:
        self.seed, self.m = cfg["seed"], cfg["num-clients"]
        mode = cfg["sampling"]
        self.replace = (default_sampling if mode == "auto" else mode) == "with-replacement"
        self.model = cfg["latency-model"]
        self.shift, self.scale, self.tail = cfg["latency-shift"], cfg["latency-scale"], cfg["latency-tail"]
        self.upload = cfg["latency-upload"]
        self.slow_fraction, self.slow_factor = cfg["slow-fraction"], cfg["slow-factor"]
        self.dropout = cfg["dropout"]
        self.policy, self.first_k, self.deadline = cfg["round-policy"], cfg["first-k"], cfg["deadline"]

    @property
    def timed(self) -> bool:
        """Whether latencies are drawn at all (any latency, dropout or policy setting)."""
        return (self.model != "none" or self.upload > 0 or self.dropout > 0 or self.policy != "all")

    def sample(self, server_round: int, count: int) -> dict[int, int]:
        """:func:`sample_partitions` with this run's seed, ``m`` and replacement rule."""
        return sample_partitions(self.seed, server_round, self.m, count, self.replace)

    def is_slow(self, partition_id: int) -> bool:
        """Whether a device is slow (fixed for the run)."""
        if self.slow_fraction <= 0:
            return False
        return bool(np.random.default_rng([self.seed, STREAM_DEVICE, partition_id]).random() < self.slow_fraction)

    def latency(self, server_round: int, partition_id: int, work: int = 1) -> float:
        """Virtual latency of a partition's reply in a round; ``inf`` if it drops out.

        Parameters
        ----------
        work : int
            Local work units of the round (``w`` of the module docstring), ``>= 1``.
        """
        rng = np.random.default_rng([self.seed, STREAM_LATENCY, server_round, partition_id])
        u = rng.random()
        if self.model == "shifted-exp":
            x = rng.gamma(work, 1.0)
        elif self.model == "pareto":
            x = float(rng.pareto(self.tail, size=work).sum())
        else:
            x = 0.0
        upload = rng.exponential(self.upload) if self.upload > 0 else 0.0
        if u < self.dropout:
            return float("inf")
        compute = work * self.shift + self.scale * x if self.model != "none" else 0.0
        return float((compute + upload) * (self.slow_factor if self.is_slow(partition_id) else 1.0))

    def plan(self, server_round: int, asked: Iterable[int], work: int = 1, extra: Iterable[int] = ()) -> RoundPlan:
        """Apply the latency model and the server policy to the partitions asked in a round.

        Parameters
        ----------
        asked : iterable of int
            The distinct partitions that take part in the race.
        work : int
            Local work units of the round.
        extra : iterable of int
            Partitions asked besides (FedPower's reference client): kept in
            ``extra`` when they arrive by the closing time, never counted by
            the policy.

        Returns
        -------
        RoundPlan
            Without any straggler setting (:attr:`timed` false) everyone is
            kept and ``round_time = 0``.
        """
        asked = sorted(set(asked))
        extra = sorted(set(extra) - set(asked))
        if not self.timed:
            return RoundPlan(kept=asked, arrivals={p: 0.0 for p in asked}, extra=extra)
        arrivals = {p: self.latency(server_round, p, work) for p in asked + extra}
        dropped = [p for p in asked if arrivals[p] == float("inf")]
        order = sorted((arrivals[p], p) for p in asked if p not in dropped)
        last = order[-1][0] if order else 0.0
        if self.policy == "first-k":
            kept = [p for _, p in order[: self.first_k]]
            close = order[min(self.first_k, len(order)) - 1][0] if order else 0.0
        elif self.policy == "deadline":
            kept = [p for t, p in order if t <= self.deadline]
            close = self.deadline if len(kept) < len(order) else min(self.deadline, last)
        else:
            kept, close = [p for _, p in order], last
        kept_set = set(kept)
        late = sorted(p for _, p in order if p not in kept_set)
        return RoundPlan(kept=sorted(kept), late=late, dropped=dropped, round_time=float(close), arrivals=arrivals,
                         extra=[p for p in extra if arrivals[p] <= close])

    def check_support(self, level: str, strategy: str) -> None:
        """Refuse the settings a strategy cannot honour (``level`` of :data:`SUPPORT_LEVELS`).

        Raises
        ------
        ConfigError
            Naming the key and the strategy.
        """
        if level == "partial":
            return
        why = {"all": f"{strategy} needs the reply of every client in every round (a missing one would bias its "
                      "sum), so",
               "none": f"{strategy} does not use the straggler model, so"}[level]
        if self.dropout > 0:
            raise ConfigError(f"dropout must be 0 for {strategy}: {why} no client may drop out (got {self.dropout})")
        if self.policy != "all":
            raise ConfigError(f"round-policy must be 'all' for {strategy}: {why} the server cannot close a round "
                              f"early (got {self.policy!r})")
        if level == "none" and (self.model != "none" or self.upload > 0 or self.slow_fraction > 0):
            raise ConfigError(f"latency-model must be 'none' (and latency-upload, slow-fraction 0) for {strategy}: "
                              f"{why} it reports no round time")


def check_participation(cfg: Mapping[str, Any]) -> None:
    """The relations between the participation keys (their ranges are in :data:`fl_strategies.settings.config.KEYS`).

    Raises
    ------
    ConfigError
        ``first-k`` set without ``round-policy = "first-k"`` (or missing with
        it, or above ``num-clients``), the same for ``deadline``, or a
        ``first-k``/``deadline`` policy without any latency (every reply
        would arrive at time 0).
    """
    policy = cfg["round-policy"]
    if policy == "first-k":
        if not 1 <= cfg["first-k"] <= cfg["num-clients"]:
            raise ConfigError(f"first-k must be an integer in [1, num-clients = {cfg['num-clients']}] with "
                              f"round-policy = 'first-k', got {cfg['first-k']}")
    elif cfg["first-k"]:
        raise ConfigError(f"first-k = {cfg['first-k']} is only used with round-policy = 'first-k' (round-policy is "
                          f"{policy!r}); set it to 0")
    if policy == "deadline":
        if cfg["deadline"] <= 0:
            raise ConfigError(f"deadline must be a number > 0 with round-policy = 'deadline', got {cfg['deadline']}")
    elif cfg["deadline"]:
        raise ConfigError(f"deadline = {cfg['deadline']} is only used with round-policy = 'deadline' (round-policy "
                          f"is {policy!r}); set it to 0")
    if policy != "all" and cfg["latency-model"] == "none" and cfg["latency-upload"] == 0:
        raise ConfigError(f"round-policy = {policy!r} needs a latency: set latency-model (shifted-exp, pareto) or "
                          "latency-upload > 0, otherwise every reply arrives at time 0")
