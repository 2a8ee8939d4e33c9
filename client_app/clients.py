"""Registry of client implementations: strategy name -> NumPyClient class."""

from __future__ import annotations

from .faps_client import FapsClient
from .fedpower_client import FedPowerClient

CLIENTS = {"fedpower": FedPowerClient, "power": FedPowerClient, "ssi": FedPowerClient,
           "localpower": FedPowerClient, "faps": FapsClient}
