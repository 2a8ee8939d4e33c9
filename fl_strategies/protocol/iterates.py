"""The server's estimates of a run, kept in ``O(1)`` arrays: ``Z_0`` and the newest few.

A strategy's estimate after round ``t`` is a ``d x r`` array (``theta`` of length ``p`` for the ERM baselines).
The server needs only a bounded number of them: the newest (the next broadcast, the result), the one before (a
row's ``estimate_change`` and, under a stopping rule, the held row's estimate) and ``Z_0`` (the check that a run
moved at all). Keeping every round's estimate would cost ``O(d r T)`` at the server and in each checkpoint; at
genomic width (``d = 10^5``) that is 3.2 MB a round at ``r = 4``. :class:`Iterates` keeps ``Z_0`` and the newest
``keep`` estimates, counts them all, and records the first position whose estimate differs from ``Z_0``.

Indexing follows the positions of a full list (``iterates[0]`` is ``Z_0``, ``iterates[-1]`` the newest, ``len``
the number of estimates so far); an estimate that is no longer kept raises an ``IndexError`` naming the window.
An analysis that compares every round's estimate sets ``keep = None`` (every estimate is kept).
"""

from __future__ import annotations

from typing import Any, Iterator, Sequence

import numpy as np

__all__ = ["Iterates"]


class Iterates:
    """``Z_0``, the newest ``keep`` estimates, and how many there were.

    Parameters
    ----------
    estimates : sequence of ndarray, optional
        Estimates at positions ``0 .. len - 1`` (a full list), or, with ``count``, ``Z_0`` followed by the
        estimates at positions ``count - len(estimates) + 1 .. count - 1``.
    keep : int or None
        How many of the newest estimates (besides ``Z_0``) are kept; ``None``: all of them.
    count : int, optional
        The number of estimates the sequence stands for (a checkpoint's :meth:`state`).
    first_moved : int or None, optional
        With ``count``: the first position whose estimate differs from ``Z_0`` (``None``: none does).
    """

    def __init__(self, estimates: Sequence[np.ndarray] = (), keep: int | None = 2, count: int | None = None,
                 first_moved: int | None = None) -> None:
        if keep is not None and keep < 1:
            raise ValueError(f"keep must be >= 1 or None, got {keep!r}")
        self.keep = keep
        self.first: np.ndarray | None = None
        self._newest: list[np.ndarray] = []  # the estimates at positions count - len(_newest) .. count - 1 (>= 1)
        self.count = 0
        self.first_moved: int | None = None
        if count is None:
            for Z in estimates:
                self.append(Z)
            return
        estimates = list(estimates)
        if not 0 <= len(estimates) <= count or (count > 0) != bool(estimates):
            raise ValueError(f"{len(estimates)} estimates cannot stand for {count}")
        if first_moved is not None and not 1 <= first_moved < count:
            raise ValueError(f"first_moved = {first_moved!r} is not a position in 1 .. {count - 1}")
        self.count, self.first_moved = count, first_moved
        if estimates:
            self.first = estimates[0]
            self._newest = estimates[1:]
            self._trim()

    def _trim(self) -> None:
        if self.keep is not None and len(self._newest) > self.keep:
            del self._newest[: len(self._newest) - self.keep]

    def append(self, Z: np.ndarray) -> None:
        """Add the estimate at position ``len(self)``; the oldest kept one beyond ``keep`` is dropped."""
        if self.count == 0:
            self.first = Z
        else:
            if self.first_moved is None and not np.array_equal(Z, self.first):
                self.first_moved = self.count
            self._newest.append(Z)
            self._trim()
        self.count += 1

    def __len__(self) -> int:
        return self.count

    @property
    def moved(self) -> bool:
        """Whether any estimate after ``Z_0`` differs from it."""
        return self.first_moved is not None

    @property
    def oldest_kept(self) -> int:
        """The first position kept besides ``0``."""
        return self.count - len(self._newest)

    def __getitem__(self, index: int) -> np.ndarray:
        if not isinstance(index, (int, np.integer)):
            raise TypeError(f"estimates are indexed by position (an int), not {type(index).__name__}")
        position = int(index) + self.count if index < 0 else int(index)
        if not 0 <= position < self.count:
            raise IndexError(f"estimate {index} of {self.count}")
        if position == 0:
            return self.first
        if position < self.oldest_kept:
            raise IndexError(f"estimate {position} of {self.count} is not kept: the server keeps Z_0 and the "
                             f"newest {self.keep} (positions {self.oldest_kept} .. {self.count - 1})")
        return self._newest[position - self.oldest_kept]

    def __iter__(self) -> Iterator[np.ndarray]:
        if self.count > 1 and self.oldest_kept > 1:
            raise TypeError(f"only Z_0 and the newest {self.keep} of {self.count} estimates are kept; iterate over "
                            "them with keep = None")
        return iter(([self.first] if self.count else []) + self._newest)

    def truncate(self, count: int) -> None:
        """Drop the newest estimates so that ``count`` remain (the estimate at ``count - 1`` must be kept)."""
        if count >= self.count:
            return
        if count < 1 or (count > 1 and count - 1 < self.oldest_kept):
            raise IndexError(f"cannot keep {count} of {self.count} estimates: position {count - 1} is not kept")
        del self._newest[max(count - self.oldest_kept, 0):]
        self.count = count
        if self.first_moved is not None and self.first_moved >= count:
            self.first_moved = None

    def state(self) -> dict[str, Any]:
        """What a checkpoint stores: ``estimates`` (``Z_0`` then the kept newest), ``count`` and ``first_moved``."""
        return {"estimates": ([self.first] if self.count else []) + self._newest, "count": self.count,
                "first_moved": self.first_moved}
