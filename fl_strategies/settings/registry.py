"""What each strategy is, in one place: name in configs -> :class:`StrategySpec`.

A spec names the strategy's server class and client class as import paths
(``"module:Class"``), so that a client process never imports a server
strategy and the ServerApp never imports a client; the settings the algorithm
fixes whatever the run config says; and what it tolerates: noise,
participation, stragglers, missing partitions, checkpoints. The run-config
validation (:mod:`fl_strategies.settings.config`), the strategy base classes, the
ServerApp and the ClientApp all read it here.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from functools import cache
from importlib import import_module
from typing import Any, Callable, Mapping

from . import strategies as st

__all__ = ["StrategySpec", "STRATEGIES", "STRATEGY_NAMES", "PROMISE_KEYS", "spec", "load_class", "settings_for",
           "fixed_keys", "read_keys", "readers"]


@dataclass(frozen=True)
class StrategySpec:
    """One strategy of the run config's ``strategy`` key.

    Attributes
    ----------
    name : str
    server : str
        ``"module:Class"`` of its ``flwr.server.strategy.Strategy``.
    client : str
        ``"module:Class"`` of its ``flwr.client.NumPyClient``; built as
        ``Client(client_app.data.NodeData, cfg, context)``.
    settings : type
        Its settings class (:mod:`fl_strategies.settings.strategies`): every run-config key its code reads,
        typed; :func:`settings_for` builds it. The keys it reads in the sense of :func:`read_keys` are derived
        from it.
    family : {"eigenspace", "mf", "erm"}
        What it estimates, and so what its reference and results columns are:
        a ``d x r`` basis (subspace distance), a factorisation (excess loss) or
        ERM parameters (loss gap).
    fixed : callable
        ``fixed(cfg) -> {key: value}``: settings the algorithm imposes
        whatever the run config says (e.g. ``power`` has one local step). A
        fixed value that differs from the run config's is refused for the
        :data:`PROMISE_KEYS` and logged at the start of the run for the others.
    noise : bool
        Whether it adds privacy noise (``epsilon``, ``noise-std``).
    stragglers : {"partial", "all", "none"}
        Which straggler settings it honours (:mod:`fl_strategies.settings.participation`).
    sampling : {"with-replacement", "without-replacement"}
        Its own sampling rule (``sampling = "auto"``).
    partial_ok : bool
        Whether the run can go on without some partitions (a node left out at
        discovery).
    checkpoints : bool
        Whether a run can resume from a checkpoint (all state at the server).
    pca : bool
        Whether it estimates principal components and writes a PCA model
        (``pca.npz``; ``center``, ``variance-target``) through the noise-free
        summary exchange after its last round (:mod:`fl_strategies.files.pca`).
    server_inputs : tuple of str
        What it needs at the server besides the clients' replies:
        ``"server-rows"`` (its own samples: ``server-data``) or
        ``"singular-values"`` (``mf-sigma-1``, ``mf-sigma-r``).
    """

    name: str
    server: str
    client: str
    settings: type
    family: str = "eigenspace"
    fixed: Callable[[dict], dict] = lambda c: {}
    noise: bool = False
    stragglers: str = "none"
    sampling: str = "without-replacement"
    partial_ok: bool = False
    checkpoints: bool = False
    pca: bool = False
    server_inputs: tuple[str, ...] = ()


PROMISE_KEYS = ("epsilon", "noise-std", "clients-per-round", "frac-active")
"""Keys whose value, when a strategy would override it, is refused: ignoring them would weaken what the run
promises (privacy: ``epsilon``, ``noise-std``; participation: ``clients-per-round``, ``frac-active``)."""


def _no_noise_all_clients(c: dict) -> dict:
    return {"epsilon": 0.0, "noise-std": 0.0, "clients-per-round": c["num-clients"]}


def _power_baseline(**settings) -> Callable[[dict], dict]:
    """What a noise-free power-method baseline fixes: no noise, every client, ``total-iterations`` from the
    rounds, plus ``settings`` (``iteration-rank = "rank"`` fixes it to the run's ``rank``)."""

    def fixed(c: dict) -> dict:
        own = {key: (c["rank"] if value == "rank" else value) for key, value in settings.items()}
        return {**_no_noise_all_clients(c), "total-iterations": 0, **own}

    return fixed


def _mf_fixed(c: dict) -> dict:
    return {**_no_noise_all_clients(c), "iteration-rank": c["rank"], "row-normalize": False, "stop-tol": 0.0,
            "total-iterations": 0}


_SECURE_POWER = "fl_strategies.protocol.strategies.secure_power:SecurePowerStrategy"
_SECURE_POWER_CLIENT = "client_app.secure_power_client:SecurePowerClient"
_MF_CLIENT = "client_app.fedmf_client:FedMFClient"
_MF_BASELINE = "fl_strategies.protocol.strategies.fedmf:MFBaselineStrategy"

STRATEGIES: dict[str, StrategySpec] = {s.name: s for s in [
    StrategySpec("fedpower", _SECURE_POWER, _SECURE_POWER_CLIENT, st.FedPowerSettings, pca=True, noise=True,
                 stragglers="partial", sampling="with-replacement", partial_ok=True, checkpoints=True),
    StrategySpec("power", _SECURE_POWER, _SECURE_POWER_CLIENT, st.SecurePowerSettings, pca=True, stragglers="partial",
                 sampling="with-replacement", partial_ok=True, checkpoints=True,
                 fixed=_power_baseline(**{"local-steps": 1, "schedule": "fixed", "alignment": "none"})),
    StrategySpec("ssi", _SECURE_POWER, _SECURE_POWER_CLIENT, st.SecurePowerSettings, pca=True, stragglers="partial",
                 sampling="with-replacement", partial_ok=True, checkpoints=True,
                 fixed=_power_baseline(**{"local-steps": 1, "schedule": "fixed", "alignment": "none",
                                          "iteration-rank": "rank"})),
    StrategySpec("localpower", _SECURE_POWER, _SECURE_POWER_CLIENT, st.SecurePowerSettings, pca=True,
                 stragglers="partial", sampling="with-replacement", partial_ok=True, checkpoints=True,
                 fixed=_power_baseline(**{"schedule": "halving", "alignment": "opt", "iteration-rank": "rank"})),
    # krylov: every client in every round (a block from a subset's products is a product with another operator)
    StrategySpec("krylov", "fl_strategies.protocol.strategies.secure_krylov:SecureKrylovStrategy", _SECURE_POWER_CLIENT,
                 st.KrylovSettings, pca=True, stragglers="all", checkpoints=True,
                 fixed=_power_baseline(**{"local-steps": 1, "schedule": "fixed", "alignment": "none"})),
    StrategySpec("faps", "fl_strategies.protocol.strategies.faps:FapsStrategy", "client_app.faps_client:FapsClient",
                 st.FapsSettings, stragglers="all", pca=True,
                 fixed=lambda c: {**_no_noise_all_clients(c), "iteration-rank": c["rank"]}),
    StrategySpec("fedlrgd", "fl_strategies.protocol.strategies.fedlrgd:FedLrgdStrategy",
                 "client_app.erm_client:FedLrgdClient", st.FedLrgdSettings,
                 family="erm", stragglers="all", server_inputs=("server-rows",),
                 fixed=lambda c: {**_no_noise_all_clients(c), "rank": 1, "iteration-rank": 1, "row-normalize": False,
                                  "stop-tol": 0.0, "frac-active": 1.0, "total-iterations": 0}),
    StrategySpec("fedave", "fl_strategies.protocol.strategies.fedave:FedAveStrategy",
                 "client_app.erm_client:FedAveClient", st.FedAveSettings,
                 family="erm", stragglers="partial", server_inputs=("server-rows",),
                 fixed=lambda c: {**_no_noise_all_clients(c), "rank": 1, "iteration-rank": 1, "row-normalize": False,
                                  "stop-tol": 0.0, "total-iterations": 0, "schedule": "fixed"}),
    StrategySpec("fedmf", "fl_strategies.protocol.strategies.fedmf:FedMFStrategy", _MF_CLIENT, st.FedMFSettings,
                 family="mf", fixed=_mf_fixed),
    StrategySpec("mf-altgd", _MF_BASELINE, _MF_CLIENT, st.MFAltGDSettings, family="mf", fixed=_mf_fixed,
                 server_inputs=("singular-values",)),
    StrategySpec("mf-simgd", _MF_BASELINE, _MF_CLIENT, st.MFSimGDSettings, family="mf", fixed=_mf_fixed,
                 server_inputs=("singular-values",)),
    StrategySpec("covariance", "fl_strategies.protocol.strategies.covariance:CovarianceStrategy",
                 "client_app.fedpower_client:CovarianceClient", st.CovarianceSettings, pca=True, noise=True,
                 fixed=lambda c: {"noise-std": 0.0, "clients-per-round": c["num-clients"], "num-server-rounds": 1, "local-steps": 1,
                                  "schedule": "fixed", "alignment": "none", "total-iterations": 0, "stop-tol": 0.0}),
    StrategySpec("dp-power", "fl_strategies.protocol.strategies.dp_power:DPPowerStrategy",
                 "client_app.dp_power_client:DPPowerClient", st.DPPowerSettings,
                 noise=True, stragglers="all",
                 fixed=lambda c: {"noise-std": 0.0, "clients-per-round": c["num-clients"], "local-steps": 1,
                                  "schedule": "fixed", "alignment": "none", "total-iterations": 0, "stop-tol": 0.0}),
    StrategySpec("dp-krylov", "fl_strategies.protocol.strategies.dp_krylov:DPKrylovStrategy",
                 "client_app.dp_krylov_client:DPKrylovClient", st.DPKrylovSettings,
                 noise=True, stragglers="all",
                 fixed=lambda c: {"noise-std": 0.0, "clients-per-round": c["num-clients"], "local-steps": 1,
                                  "schedule": "fixed", "alignment": "none", "total-iterations": 0, "stop-tol": 0.0}),
]}

STRATEGY_NAMES = tuple(STRATEGIES)


def spec(name: str) -> StrategySpec:
    """The spec of strategy ``name`` (a validated run config's ``strategy``)."""
    return STRATEGIES[name]


def load_class(path: str) -> Any:
    """The class named by ``"module:Class"``, imported on first use."""
    module, _, attr = path.partition(":")
    return getattr(import_module(module), attr)


def settings_for(cfg: Mapping[str, Any]) -> st.Settings:
    """The typed settings of a validated effective run config: its strategy's class
    (:attr:`StrategySpec.settings`), built once; every later read goes through it.

    Raises
    ------
    ConfigError
        If ``cfg`` lacks a key the class declares.
    """
    return spec(cfg["strategy"]).settings.from_config(cfg)


@cache
def fixed_keys(name: str) -> frozenset[str]:
    """The keys strategy ``name`` fixes (:attr:`StrategySpec.fixed`): which keys it sets does not depend on
    the run config's values, so any values will do."""
    return frozenset(spec(name).fixed(defaultdict(int)))


@cache
def read_keys(name: str) -> frozenset[str]:
    """The run-config keys strategy ``name`` reads: its settings class's fields except the keys it fixes (those
    it reads, but the run config cannot change them)."""
    return frozenset(st.declared_keys(spec(name).settings).values()) - fixed_keys(name)


def readers(key: str) -> tuple[str, ...]:
    """The strategies that read ``key``, in the order of :data:`STRATEGIES`; ``()`` when every strategy does."""
    names = tuple(name for name in STRATEGY_NAMES if key in read_keys(name))
    return () if names == STRATEGY_NAMES else names
