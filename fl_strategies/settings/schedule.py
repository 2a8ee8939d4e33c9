"""Synchronisation schedules of local power iterations (FedPower, Sec. 3).

A schedule is described by the number of local iterations in each
communication round. With ``p`` local steps:

* ``fixed``: every round performs ``p`` steps, ``I_T^p = {0, p, 2p, ...}``
  (eq. 3.1);
* ``decayed``: round ``j`` (1-based) performs ``max(p - j + 1, 1)`` steps,
  so the sync times are ``p, p + (p-1), ...`` and then every step (eq. 3.11);
* ``halving``: ``p, p // 2, p // 4, ..., 1, 1, ...``, the LocalPower schedule of
  the FAPS paper's experiments (Sec. 5.3; ``lpm_orth`` in the LocalPower code).

The total number of iterations ``T`` is always a synchronisation time: the
last round is shortened when needed, so the output is the server's own
``orth(Y_T)`` and never an unaligned average of local bases.
"""

from __future__ import annotations

__all__ = ["SCHEDULES", "round_lengths"]

SCHEDULES = ("fixed", "decayed", "halving")


def _step(p: int, j: int, schedule: str) -> int:
    if schedule == "fixed":
        return p
    if schedule == "decayed":
        return max(p - j, 1)
    return max(p >> min(j, 62), 1)


def round_lengths(p: int, schedule: str, *, total_iterations: int = 0, num_rounds: int = 0) -> list[int]:
    """Number of local iterations in each communication round.

    Parameters
    ----------
    p : int
        Local iterations between synchronisations (``>= 1``).
    schedule : {"fixed", "decayed", "halving"}
        Schedule family.
    total_iterations : int, optional
        ``T``. When positive, the rounds cover exactly ``T`` iterations (the
        last one shortened so that ``T`` is a sync time).
    num_rounds : int, optional
        Used when ``total_iterations`` is 0: the number of rounds, ``T`` is then
        the sum of the returned lengths.

    Returns
    -------
    list of int
        ``p_j`` for rounds ``j = 1, 2, ...``; ``sum`` is ``T``.

    Examples
    --------
    >>> round_lengths(4, "decayed", total_iterations=10)
    [4, 3, 2, 1]
    >>> round_lengths(4, "fixed", total_iterations=10)
    [4, 4, 2]
    >>> round_lengths(2, "decayed", num_rounds=4)
    [2, 1, 1, 1]
    >>> round_lengths(8, "halving", num_rounds=6)
    [8, 4, 2, 1, 1, 1]
    """
    if p < 1:
        raise ValueError(f"local-steps must be >= 1, got {p}")
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule must be one of {SCHEDULES}, got {schedule!r}")
    if total_iterations > 0:
        lengths, done = [], 0
        while done < total_iterations:
            step = min(_step(p, len(lengths), schedule), total_iterations - done)
            lengths.append(step)
            done += step
        return lengths
    if num_rounds < 1:
        raise ValueError("either total-iterations or num-server-rounds must be positive")
    return [_step(p, j, schedule) for j in range(num_rounds)]
