"""Registry of server strategies: name in configs -> Strategy class."""

from __future__ import annotations

from .dp_power import DPPowerStrategy
from .faps import FapsStrategy
from .fedave import FedAveStrategy
from .fedmf import FedMFStrategy, MFBaselineStrategy
from .fedlrgd import FedLrgdStrategy
from .fedpower import FedPowerStrategy

STRATEGIES = {"fedpower": FedPowerStrategy, "power": FedPowerStrategy, "ssi": FedPowerStrategy,
              "localpower": FedPowerStrategy, "faps": FapsStrategy}
STRATEGIES.update(fedlrgd=FedLrgdStrategy, fedave=FedAveStrategy)
STRATEGIES.update({"fedmf": FedMFStrategy, "mf-altgd": MFBaselineStrategy, "mf-simgd": MFBaselineStrategy})
STRATEGIES["dp-power"] = DPPowerStrategy
