"""``krylov`` with ``secure-aggregation = true``: the Krylov basis from SecAgg+ sums, exact.

A ``krylov`` round needs what a ``power`` round needs, ``C Q_{j-1} = sum_i s_i A_i Q_{j-1} / n`` for a broadcast
block (:mod:`fl_strategies.protocol.strategies.krylov`), so the secure power machinery carries it unchanged
(:class:`~fl_strategies.protocol.strategies.secure_power.SecurePowerStrategy`): the SecAgg+ discovery sums (mean,
``scale``, call counts), each round's upload ``[vec(s_i A_i Q_{j-1}), s_i]`` as exact fixed-point limbs from the
power client (:class:`client_app.secure_power_client.SecurePowerClient`), and the summary exchange. Only the
step from a round's sum differs: the Krylov step (:meth:`KrylovStrategy.extend`) instead of the power step.

The server's sum is the exact sum of the clients' fixed-point values, within ``m 2^-(f+1)`` of the float64 sum the
plain ``krylov`` forms, so the two runs' bases, Ritz estimates and stopping statistics agree to round-off and they
take the same rounds.

Drop-outs. A block from a subset's products would break the Krylov relation. A client lost after it shared its
keys is left out of the sum by SecAgg+; the sum then carries fewer than ``m`` uploads and fewer than ``n`` rows,
and the round is repeated as a plain ``krylov`` round with a missing reply is: the block is broadcast again, the
estimate kept, the sum never used. Below SecAgg+'s threshold no sum is formed and the run fails with one line
(:func:`server_app.secure_loop.run_secure_aggregation`); the discovery sums and the summary need every client.
"""

from __future__ import annotations

import numpy as np
from flwr.common import Parameters, Scalar

from .krylov import KrylovStrategy
from .secure_power import SecurePowerStrategy

__all__ = ["SecureKrylovStrategy"]


class SecureKrylovStrategy(SecurePowerStrategy, KrylovStrategy):
    """:class:`KrylovStrategy` whose sums, with ``secure-aggregation = true``, go through SecAgg+ as exact limbs
    (module docstring); without it, the plain ``krylov`` unchanged."""

    def advance_from_sum(self, server_round: int, values: np.ndarray,
                         summed: int) -> tuple[Parameters | None, dict[str, Scalar]]:
        """The Krylov step from the decoded sum ``[vec(sum_i s_i A_i Q_{j-1}), sum_i s_i]``, or the round repeated
        when the sum lacks a client.

        Parameters
        ----------
        server_round : int
        values : ndarray of shape (d r + 1,)
        summed : int
            The clients whose uploads SecAgg+ summed.
        """
        n = self.num_rows
        rows = float(values[self.d * self.r])
        if summed < self.m or rows != n:
            return self.repeat_block(server_round, f"the SecAgg+ sum holds {summed} of {self.m} clients' products "
                                                   f"({rows:.0f} of {n} rows)")
        return self.extend(server_round, values[: self.d * self.r].reshape(self.d, self.r) / rows, n)
