"""A node's noise secret kept in its Flower node state (``context.state``) for the run.

Without a ``noise-secret`` file in its node config, a node keeps the secret it drew in the node state, where it
lasts for the run (Flower rebuilds the client object at every message but keeps the state). The state holds
Flower records only, so the secret is stored as a ``ConfigRecord`` of its hex digits; the noise itself
(:class:`fl_strategies.privacy.noise.ClientNoise`) sees only the callable :func:`secret_in_state` returns.
"""

from __future__ import annotations

from typing import Callable

from flwr.common import ConfigRecord, RecordDict

__all__ = ["STATE_KEY", "secret_in_state"]

STATE_KEY = "noise-secret"
"""The node-state key of the secret's ``ConfigRecord``."""


def secret_in_state(state: RecordDict) -> Callable[[Callable[[], bytes]], bytes]:
    """The node state's secret store: called with a way to draw a secret, it returns the secret the state holds,
    storing a freshly drawn one first when it holds none."""

    def stored(draw: Callable[[], bytes]) -> bytes:
        if STATE_KEY not in state:
            state[STATE_KEY] = ConfigRecord({"secret": draw().hex()})
        return bytes.fromhex(str(state[STATE_KEY]["secret"]))

    return stored
