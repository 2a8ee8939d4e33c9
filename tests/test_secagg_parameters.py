"""SecAgg+ parameters (fl_strategies.protocol.strategies.dp_power.num_shares) against the protocol's requirements, by
computation.

In SecAgg+ every client u splits two secrets among its ``n`` share holders with Shamir's scheme of threshold ``t``:
the seed of its own mask ``b_u`` and the key of its pairwise masks ``sk_u``. In the unmasking stage an honest
holder reveals, for each u, one of the two: ``b_u`` if u's masked input arrived, ``sk_u`` if the server says u
dropped. A server that lies (says some holders' u dropped, others' u arrived) unmasks u's single input only if it
collects ``t`` shares of both, from disjoint holders: impossible exactly when ``2 t > n``, a strict majority.
Fewer than ``t`` shares of a secret reveal nothing of it; ``t`` reconstruct it. Here, for every number of clients
the config accepts and every ``secagg-num-shares``, the parameters Flower's workflow ends up with are computed and
checked, and Shamir's scheme as Flower runs it is exercised on them.
"""

from __future__ import annotations

import itertools
import os

import pytest

from fl_strategies.settings.config import MAX_SECAGG_CLIENTS
from fl_strategies.protocol.strategies.dp_power import num_shares


def _effective(shares: int | float, threshold: int | float, sampled: int) -> tuple[int, int]:
    """The ``(share holders, threshold)`` Flower's SecAggPlusWorkflow sets up for ``sampled`` clients (its setup
    stage: a float number of shares is a fraction of the sampled clients, rounded up to odd; an int is used as
    is; an int threshold is absolute)."""
    if isinstance(shares, float):
        n = round(shares * sampled)
        if n < sampled and n % 2 == 0:
            n += 1
        if n <= 2:
            n = sampled
    else:
        n = shares
    t = max(round(threshold * n), 2) if isinstance(threshold, float) else threshold
    return n, t


def _settings():
    """Every (num-clients, secagg-num-shares) pair the config accepts (0, or 3 .. num-clients)."""
    for s in range(2, MAX_SECAGG_CLIENTS + 1):
        for k in itertools.chain((0,), range(3, s + 1)):
            yield s, k


def test_the_threshold_is_a_strict_majority_of_the_share_holders_for_every_accepted_setting():
    checked = 0
    for s, k in _settings():
        shares, threshold = num_shares(s, k)
        n, t = _effective(shares, threshold, s)
        assert 2 * t > n, f"s = {s}, secagg-num-shares = {k}: t = {t} of n = {n} lets a lying server unmask"
        assert t >= 2, f"s = {s}, secagg-num-shares = {k}: one share holder alone could unmask"
        assert t <= n <= s, f"s = {s}, secagg-num-shares = {k}: t = {t}, n = {n} cannot be reconstructed"
        if k == 0 and n < s:  # SecAgg+ neighbourhoods: an odd number of holders (Flower warns otherwise)
            assert n % 2 == 1, f"s = {s}: {n} share holders by default"
        if k:
            assert n == k, f"s = {s}: secagg-num-shares = {k} asked, {n} share holders set up"
        if n >= 3:  # a holder may drop and the sum is still formed
            assert n - t >= 1, f"s = {s}, secagg-num-shares = {k}: no holder may drop (t = n = {n})"
        checked += 1
    assert checked > 400_000  # every accepted pair was computed


@pytest.mark.parametrize("s", range(2, 60))
def test_fewer_sampled_clients_never_lower_the_majority(s):
    """With all clients' keys shared (up to 7 clients), a round that reaches fewer clients has fewer holders,
    and the threshold (fixed from num-clients) stays above half of them."""
    shares, threshold = num_shares(s, 0)
    for sampled in range(2, s + 1):
        n, t = _effective(shares, threshold, sampled)
        assert 2 * t > n


@pytest.mark.parametrize("s, k", [(2, 0), (3, 0), (5, 0), (7, 0), (8, 0), (20, 0), (100, 0), (9, 9), (12, 4)])
def test_flower_accepts_the_parameters(s, k):
    from flwr.server.workflow import SecAggPlusWorkflow

    shares, threshold = num_shares(s, k)
    SecAggPlusWorkflow(num_shares=shares, reconstruction_threshold=threshold, max_weight=1.0,
                       clipping_range=1.0, quantization_range=2**22, modulus_range=2**32)


@pytest.mark.parametrize("s, k", [(2, 0), (3, 0), (4, 0), (7, 0), (8, 0), (30, 0), (1000, 0), (10, 3), (10, 4),
                                  (16, 16)])
def test_a_server_that_splits_the_holders_recovers_at_most_one_secret(s, k):
    """Shamir's scheme as Flower uses it, on the computed (n, t): t shares reconstruct a secret, t - 1 do not; for
    every split of the n holders into those revealing b_u and those revealing sk_u (a server claiming both that u
    answered and that u dropped), at most one of the two secrets is reconstructed."""
    from flwr.common.secure_aggregation.crypto.shamir import combine_shares, create_shares

    shares, threshold = num_shares(s, k)
    n, t = _effective(shares, threshold, s)
    b_u, sk_u = os.urandom(32), os.urandom(32)
    b_shares, sk_shares = create_shares(b_u, t, n), create_shares(sk_u, t, n)

    def recovers(secret, held) -> bool:
        try:
            return len(held) > 0 and combine_shares(held) == secret
        except ValueError:  # the padding of a wrong reconstruction
            return False

    assert recovers(b_u, b_shares[:t]) and recovers(sk_u, sk_shares[-t:])
    assert not recovers(b_u, b_shares[:t - 1]) and not recovers(sk_u, sk_shares[-(t - 1):])
    for answered in range(n + 1):  # holders 0 .. answered-1 reveal b_u, the others sk_u
        both = recovers(b_u, b_shares[:answered]) and recovers(sk_u, sk_shares[answered:])
        assert not both, f"n = {n}, t = {t}: {answered} holders give b_u, {n - answered} give sk_u: u is unmasked"
