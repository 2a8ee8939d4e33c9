"""Registry of server strategies: name in configs -> Strategy class."""

from __future__ import annotations

from .faps import FapsStrategy
from .fedpower import FedPowerStrategy

STRATEGIES = {"fedpower": FedPowerStrategy, "power": FedPowerStrategy, "ssi": FedPowerStrategy,
              "localpower": FedPowerStrategy, "faps": FapsStrategy}
