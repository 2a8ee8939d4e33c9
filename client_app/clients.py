"""Registry of client implementations: strategy name -> NumPyClient class."""

from __future__ import annotations

from .fedpower_client import FedPowerClient

CLIENTS = {"fedpower": FedPowerClient, "power": FedPowerClient}
