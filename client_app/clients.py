"""Registry of client implementations: strategy name -> NumPyClient class."""

from __future__ import annotations

from .dp_power_client import DPPowerClient
from .erm_client import FedAveClient, FedLrgdClient
from .faps_client import FapsClient
from .fedmf_client import FedMFClient
from .fedpower_client import FedPowerClient

CLIENTS = {"fedpower": FedPowerClient, "power": FedPowerClient, "ssi": FedPowerClient,
           "localpower": FedPowerClient, "faps": FapsClient}
CLIENTS.update(fedlrgd=FedLrgdClient, fedave=FedAveClient)
CLIENTS.update({"fedmf": FedMFClient, "mf-altgd": FedMFClient, "mf-simgd": FedMFClient})
CLIENTS["dp-power"] = DPPowerClient
