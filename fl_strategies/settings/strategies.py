"""Each strategy's settings: one frozen dataclass of typed fields, built once from the validated run config.

A field is a run-config key in snake case (``local_steps`` is ``local-steps``). A strategy's class declares
every key its code reads, so a key it does not declare is an ``AttributeError`` wherever it is read: the
end-to-end tests of each strategy prove the declaration complete. The class is named in the strategy's
:class:`fl_strategies.settings.registry.StrategySpec` (``settings``), and
:func:`fl_strategies.settings.registry.settings_for` builds it from the effective run config
(:func:`fl_strategies.settings.config.validate_run_config`).

Which strategies *read* a key (the run-config table's "read by", and the keys
:func:`fl_strategies.settings.config.unread_keys` names) is derived from these declarations:
the fields of the strategy's class minus the keys the strategy fixes (``StrategySpec.fixed``). A fixed key is
declared when the code reads it (``power`` runs FedPower's code with ``local-steps = 1``), yet the user cannot
change what it does. A key that neither the strategy reads nor it fixes is not declared, and code shared
with strategies that do read it asks for the group (``isinstance(settings, NoiseSettings)``).

Adding a key: its :class:`fl_strategies.settings.config.Key` in ``KEYS`` (type, range, documentation), its
default in ``pyproject.toml``, and a field in the classes of the strategies that read it (a common key: in
:class:`Settings`).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from functools import cache
from typing import Any, Mapping

from ..privacy.fedpower_dp import client_noise_stds
from .errors import ConfigError

__all__ = ["Settings", "PcaSettings", "NoiseSettings", "StragglerSettings", "CheckpointSettings", "SecAggSettings", "SecurePowerSettings",
           "ErmSettings", "PowerSettings", "FedPowerSettings", "KrylovSettings", "FapsSettings", "CovarianceSettings",
           "DPPowerSettings", "FedLrgdSettings", "FedAveSettings", "MFSettings", "FedMFSettings",
           "MFAltGDSettings", "MFSimGDSettings", "key_of", "declared_keys", "fedpower_noise_stds"]


def key_of(field_name: str) -> str:
    """The run-config key of a settings field: ``local_steps`` -> ``local-steps``."""
    return field_name.replace("_", "-")


@dataclass(frozen=True, kw_only=True)
class Settings:
    """The keys every strategy reads: the data, the run and where its results go."""

    strategy: str
    dataset: str
    partitioner: str
    dirichlet_alpha: float
    num_clients: int
    seed: int
    data_seed: int
    num_samples: int
    dimension: int
    xi: float
    kappa: float
    mf_noise: float
    results_dir: str
    overwrite: bool
    round_timeout: float
    evaluation: str
    discovery: str
    strict: bool

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any]) -> "Settings":
        """The settings of a validated effective run config.

        Raises
        ------
        ConfigError
            Naming the declared keys ``cfg`` lacks (a config that did not pass the validation).
        """
        names = declared_keys(cls)
        missing = [key for key in names.values() if key not in cfg]
        if missing:
            raise ConfigError(f"{cls.__name__} needs run-config key(s) {', '.join(missing)}, missing from the "
                              "configuration given")
        return cls(**{name: cfg[key] for name, key in names.items()})


@dataclass(frozen=True, kw_only=True)
class PcaSettings:
    """The strategies that write a PCA model (``pca.npz``): rank, row scaling, centring, components kept."""

    rank: int
    row_normalize: bool
    clip_norm: float
    center: bool
    scale: str | bool  # "false", "true" or "hwe" (settings.config.column_scaling)
    variance_target: float
    maf_min: float
    geno_max: float
    indep_pairwise: str
    exclude_range: str
    nonfounders: bool
    drop_ambiguous: bool
    outlier_sigma: float
    outlier_iterations: int
    outlier_pcs: int


@dataclass(frozen=True, kw_only=True)
class NoiseSettings:
    """The strategies that add privacy noise calibrated to ``(epsilon, delta)``."""

    epsilon: float
    delta: float
    noise_source: str
    dp_calibration: str


@dataclass(frozen=True, kw_only=True)
class StragglerSettings:
    """The strategies that honour the straggler model (:mod:`fl_strategies.settings.participation`)."""

    latency_model: str
    latency_shift: float
    latency_scale: float
    latency_tail: float
    latency_upload: float
    slow_fraction: float
    slow_factor: float
    dropout: float
    round_policy: str
    first_k: int
    deadline: float


@dataclass(frozen=True, kw_only=True)
class CheckpointSettings:
    """The strategies whose whole state lives at the server, so that a run can resume."""

    checkpoint_dir: str
    resume: bool


@dataclass(frozen=True, kw_only=True)
class SecAggSettings:
    """The strategies that can send their sums through Flower's SecAgg+."""

    secagg_clip: float
    secagg_num_shares: int


@dataclass(frozen=True, kw_only=True)
class ErmSettings:
    """FedLRGD and FedAve: the loss and the server's own samples."""

    loss: str
    l2: float
    server_samples: int
    comm_ratio: float
    server_data: str
    rank: int  # fixed (1) by both, as are iteration-rank and stop-tol: read by the code every strategy shares
    iteration_rank: int
    stop_tol: float


# -- one class per strategy (the registry names it) ---------------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class PowerSettings(Settings, PcaSettings, StragglerSettings, CheckpointSettings):
    """``power``, ``ssi``, ``localpower``: FedPower's code without noise (``epsilon``, ``noise-std`` and the
    schedule's keys are fixed by each baseline, ``local-steps`` by power and ssi)."""

    iteration_rank: int
    num_server_rounds: int
    total_iterations: int
    local_steps: int
    schedule: str
    alignment: str
    clients_per_round: int
    sampling: str
    stop_tol: float
    init_from: str
    epsilon: float
    noise_std: float


@dataclass(frozen=True, kw_only=True)
class SecurePowerSettings(PowerSettings, SecAggSettings):
    """``power``, ``ssi``, ``localpower``: the power baselines' keys and SecAgg+ (``secure-aggregation``)."""

    secure_aggregation: str


@dataclass(frozen=True, kw_only=True)
class FedPowerSettings(SecurePowerSettings, NoiseSettings):
    """``fedpower``: the power baselines' keys, SecAgg+ and its privacy noise."""


@dataclass(frozen=True, kw_only=True)
class KrylovSettings(SecurePowerSettings):
    """``krylov``: the power baseline's keys (its clients are the power clients), SecAgg+ and the Krylov basis's
    size."""

    krylov_blocks: int


@dataclass(frozen=True, kw_only=True)
class FapsSettings(Settings, PcaSettings, StragglerSettings):
    """``faps``: the penalty method's outer and inner iterations."""

    iteration_rank: int
    num_server_rounds: int
    clients_per_round: int
    stop_tol: float
    init_from: str
    inner_solver: str
    inner_tol: float
    inner_steps: int
    inner_min_steps: int
    inner_max_steps: int
    penalty_init: float
    penalty_theta: float
    penalty_mu: float
    epsilon: float
    noise_std: float


@dataclass(frozen=True, kw_only=True)
class CovarianceSettings(Settings, PcaSettings, NoiseSettings, SecAggSettings):
    """``covariance``: one round of (noisy, secure) Gram matrices."""

    iteration_rank: int
    secure_aggregation: str
    num_server_rounds: int
    clients_per_round: int
    stop_tol: float
    noise_std: float
    local_steps: int  # fixed to one step of one round: its client is FedPower's, which counts the steps
    schedule: str
    total_iterations: int


@dataclass(frozen=True, kw_only=True)
class DPPowerSettings(Settings, NoiseSettings, SecAggSettings, StragglerSettings):
    """``dp-power``: the noisy power method of Hardt & Price with Balcan et al.'s federated channel."""

    rank: int
    iteration_rank: int
    num_server_rounds: int
    row_normalize: bool
    center: bool
    dp_sensitivity: str
    dp_channel: str
    clients_per_round: int
    stop_tol: float
    noise_std: float


@dataclass(frozen=True, kw_only=True)
class DPKrylovSettings(Settings, NoiseSettings, SecAggSettings, StragglerSettings):
    """``dp-krylov``: private block Krylov, every product on a block orthonormal to the ones before
    (:mod:`fl_strategies.privacy.dp_krylov_noise`)."""

    rank: int
    iteration_rank: int
    num_server_rounds: int
    row_normalize: bool
    center: bool
    dp_channel: str
    clients_per_round: int
    stop_tol: float
    noise_std: float


@dataclass(frozen=True, kw_only=True)
class FedLrgdSettings(Settings, ErmSettings, StragglerSettings):
    """``fedlrgd``: low-rank gradient descent (``rank`` and the noise are fixed)."""

    gd_iterations: int
    g_inverse: str
    pinv_rcond: float


@dataclass(frozen=True, kw_only=True)
class FedAveSettings(Settings, ErmSettings, StragglerSettings):
    """``fedave``: federated averaging of local SGD."""

    num_server_rounds: int
    local_steps: int
    frac_active: float
    step_schedule: str
    step_max: float
    server_as_client: bool
    sampling: str


@dataclass(frozen=True, kw_only=True)
class MFSettings(Settings):
    """What the matrix-factorisation strategies share: the rank and the rounds."""

    rank: int
    num_server_rounds: int
    iteration_rank: int  # fixed (rank), as is stop-tol (0): read by the code every strategy shares
    stop_tol: float


@dataclass(frozen=True, kw_only=True)
class FedMFSettings(MFSettings):
    """``fedmf``: the sketched initialisation and the local updates of U."""

    power_steps: int
    num_sketches: int
    local_iterations: int
    momentum: str
    u_solver: str


@dataclass(frozen=True, kw_only=True)
class MFAltGDSettings(MFSettings):
    """``mf-altgd``: alternating gradient descent with steps from ``sigma_1``."""

    target_log_excess: float
    mf_sigma_1: float


@dataclass(frozen=True, kw_only=True)
class MFSimGDSettings(MFAltGDSettings):
    """``mf-simgd``: simultaneous gradient descent (Ye & Du) with steps from ``sigma_1`` and ``sigma_r``."""

    mf_sigma_r: float


def fedpower_noise_stds(settings: PowerSettings | CovarianceSettings, total_iterations: int,
                        num_rows: int) -> tuple[float, float]:
    """``(nu, nu_mean)`` of a FedPower client with ``num_rows`` rows (and of the covariance client, which is
    one): :func:`fl_strategies.privacy.fedpower_dp.client_noise_stds` for a strategy with a privacy target,
    ``(0, 0)`` for the power baselines, which add no noise. The server bounds the replies with the same values."""
    s = settings
    if not isinstance(s, NoiseSettings):
        return 0.0, 0.0
    return client_noise_stds(s.noise_std, s.epsilon, s.delta, s.dp_calibration, s.iteration_rank, s.center,
                             total_iterations, num_rows)


@cache
def declared_keys(cls: type) -> dict[str, str]:
    """``field name -> run-config key`` of a settings class, in declaration order."""
    return {f.name: key_of(f.name) for f in fields(cls)}
