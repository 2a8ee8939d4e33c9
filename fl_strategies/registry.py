"""Registry of server strategies: name in configs -> Strategy class."""

from __future__ import annotations

from .fedpower import FedPowerStrategy

STRATEGIES = {"fedpower": FedPowerStrategy, "power": FedPowerStrategy}
