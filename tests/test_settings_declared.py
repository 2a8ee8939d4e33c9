"""Each strategy's settings class (fl_strategies/settings/strategies.py): what it declares is what the strategy
reads, built once from the validated run config, and an undeclared key fails loudly."""

import dataclasses

import pytest

from fl_strategies.settings.config import KEYS, ConfigError, default_run_config, validate_run_config
from fl_strategies.settings.registry import STRATEGIES, STRATEGY_NAMES, fixed_keys, read_keys, readers, settings_for
from fl_strategies.settings.strategies import Settings, declared_keys
from simulations.engines import fused_run_config

# The keys each strategy read by the hand-written ownership tuples that the declarations replace (a tuple of
# strategies on each key), common keys left out: the derived ownership must say the same.
BEFORE = {
    'fedpower': ['alignment', 'center', 'checkpoint-dir', 'clients-per-round', 'clip-norm', 'deadline', 'delta',
        'dp-calibration', 'dropout', 'epsilon', 'first-k', 'init-from', 'iteration-rank', 'latency-model',
        'latency-scale', 'latency-shift', 'latency-tail', 'latency-upload', 'local-steps', 'noise-source',
        'noise-std', 'num-server-rounds', 'rank', 'resume', 'round-policy', 'row-normalize', 'sampling', 'scale',
        'schedule', 'secagg-clip', 'secagg-num-shares', 'secure-aggregation', 'slow-factor', 'slow-fraction',
        'stop-tol', 'total-iterations', 'variance-target'],
    'power': ['center', 'checkpoint-dir', 'clip-norm', 'deadline', 'dropout', 'first-k', 'init-from',
        'iteration-rank', 'latency-model', 'latency-scale', 'latency-shift', 'latency-tail', 'latency-upload',
        'num-server-rounds', 'rank', 'resume', 'round-policy', 'row-normalize', 'sampling', 'scale', 'secagg-clip',
        'secagg-num-shares', 'secure-aggregation', 'slow-factor', 'slow-fraction', 'stop-tol', 'variance-target'],
    'krylov': ['center', 'checkpoint-dir', 'clip-norm', 'deadline', 'dropout', 'first-k', 'init-from',
        'iteration-rank', 'krylov-blocks', 'latency-model', 'latency-scale', 'latency-shift', 'latency-tail',
        'latency-upload', 'num-server-rounds', 'rank', 'resume', 'round-policy', 'row-normalize', 'sampling', 'scale',
        'secagg-clip', 'secagg-num-shares', 'secure-aggregation', 'slow-factor', 'slow-fraction', 'stop-tol',
        'variance-target'],
    'ssi': ['center', 'checkpoint-dir', 'clip-norm', 'deadline', 'dropout', 'first-k', 'init-from', 'latency-model',
        'latency-scale', 'latency-shift', 'latency-tail', 'latency-upload', 'num-server-rounds', 'rank', 'resume',
        'round-policy', 'row-normalize', 'sampling', 'scale', 'secagg-clip', 'secagg-num-shares',
        'secure-aggregation', 'slow-factor', 'slow-fraction', 'stop-tol', 'variance-target'],
    'localpower': ['center', 'checkpoint-dir', 'clip-norm', 'deadline', 'dropout', 'first-k', 'init-from',
        'latency-model', 'latency-scale', 'latency-shift', 'latency-tail', 'latency-upload', 'local-steps',
        'num-server-rounds', 'rank', 'resume', 'round-policy', 'row-normalize', 'sampling', 'scale', 'secagg-clip',
        'secagg-num-shares', 'secure-aggregation', 'slow-factor', 'slow-fraction', 'stop-tol', 'variance-target'],
    'faps': ['center', 'clip-norm', 'deadline', 'dropout', 'first-k', 'init-from', 'inner-max-steps',
        'inner-min-steps', 'inner-solver', 'inner-steps', 'inner-tol', 'latency-model', 'latency-scale',
        'latency-shift', 'latency-tail', 'latency-upload', 'num-server-rounds', 'penalty-init', 'penalty-mu',
        'penalty-theta', 'rank', 'round-policy', 'row-normalize', 'scale', 'slow-factor', 'slow-fraction', 'stop-tol',
        'variance-target'],
    'fedlrgd': ['comm-ratio', 'deadline', 'dropout', 'first-k', 'g-inverse', 'gd-iterations', 'l2', 'latency-model',
        'latency-scale', 'latency-shift', 'latency-tail', 'latency-upload', 'loss', 'pinv-rcond', 'round-policy',
        'server-data', 'server-samples', 'slow-factor', 'slow-fraction'],
    'fedave': ['comm-ratio', 'deadline', 'dropout', 'first-k', 'frac-active', 'l2', 'latency-model', 'latency-scale',
        'latency-shift', 'latency-tail', 'latency-upload', 'local-steps', 'loss', 'num-server-rounds', 'round-policy',
        'sampling', 'server-as-client', 'server-data', 'server-samples', 'slow-factor', 'slow-fraction', 'step-max',
        'step-schedule'],
    'fedmf': ['local-iterations', 'momentum', 'num-server-rounds', 'num-sketches', 'power-steps', 'rank', 'u-solver'],
    'mf-altgd': ['mf-sigma-1', 'num-server-rounds', 'rank', 'target-log-excess'],
    'mf-simgd': ['mf-sigma-1', 'mf-sigma-r', 'num-server-rounds', 'rank', 'target-log-excess'],
    'covariance': ['center', 'clip-norm', 'delta', 'dp-calibration', 'epsilon', 'iteration-rank', 'noise-source',
        'rank', 'row-normalize', 'scale', 'secagg-clip', 'secagg-num-shares', 'secure-aggregation',
        'variance-target'],
    'dp-power': ['center', 'deadline', 'delta', 'dp-calibration', 'dp-channel', 'dp-sensitivity', 'dropout',
        'epsilon', 'first-k', 'iteration-rank', 'latency-model', 'latency-scale', 'latency-shift', 'latency-tail',
        'latency-upload', 'noise-source', 'num-server-rounds', 'rank', 'round-policy', 'row-normalize', 'secagg-clip',
        'secagg-num-shares', 'slow-factor', 'slow-fraction'],
    'dp-krylov': ['center', 'deadline', 'delta', 'dp-calibration', 'dp-channel', 'dropout', 'epsilon', 'first-k',
        'iteration-rank', 'latency-model', 'latency-scale', 'latency-shift', 'latency-tail', 'latency-upload',
        'noise-source', 'num-server-rounds', 'rank', 'round-policy', 'row-normalize', 'secagg-clip',
        'secagg-num-shares', 'slow-factor', 'slow-fraction'],
}
for _name in ("fedpower", "power", "krylov", "ssi", "localpower", "faps", "covariance"):  # added with PcaSettings since
    BEFORE[_name] = BEFORE[_name] + ["maf-min", "geno-max", "nonfounders", "indep-pairwise", "exclude-range",
                                    "drop-ambiguous", "outlier-sigma", "outlier-iterations", "outlier-pcs"]
COMMON_BEFORE = {"strategy", "dataset", "partitioner", "dirichlet-alpha", "num-clients", "seed", "data-seed",
                 "num-samples", "dimension", "results-dir", "overwrite", "round-timeout", "xi", "kappa", "mf-noise",
                 "evaluation", "discovery", "strict"}


@pytest.mark.parametrize("name", STRATEGY_NAMES)
def test_the_derived_ownership_equals_the_former_tuples(name):
    assert read_keys(name) - COMMON_BEFORE == set(BEFORE[name])
    assert COMMON_BEFORE <= read_keys(name)


def test_common_keys_are_the_base_class_and_read_by_every_strategy():
    assert set(declared_keys(Settings).values()) == COMMON_BEFORE
    assert {key for key in KEYS if readers(key) == ()} == COMMON_BEFORE
    assert readers("local-steps") == ("fedpower", "localpower", "fedave")


@pytest.mark.parametrize("name", STRATEGY_NAMES)
def test_every_field_is_a_key_and_every_class_is_frozen(name):
    cls = STRATEGIES[name].settings
    assert set(declared_keys(cls).values()) <= set(KEYS), name
    assert issubclass(cls, Settings) and dataclasses.is_dataclass(cls)
    assert fixed_keys(name) <= set(KEYS)


@pytest.mark.parametrize("name", STRATEGY_NAMES)
def test_settings_are_built_from_the_effective_config_with_typed_values(name):
    # their SecAgg+ channel needs bounded rows
    valid = {"row-normalize": True} if name in ("dp-power", "dp-krylov") else {}
    cfg = validate_run_config({**default_run_config(), "strategy": name, **valid})
    settings = settings_for(cfg)
    assert type(settings) is STRATEGIES[name].settings
    for field, key in declared_keys(type(settings)).items():
        assert getattr(settings, field) == cfg[key] and type(getattr(settings, field)) is KEYS[key].kind, key
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.seed = 1


def test_an_undeclared_key_is_an_attribute_error():
    settings = settings_for(validate_run_config(fused_run_config({"strategy": "covariance"})))
    with pytest.raises(AttributeError, match="alignment"):
        settings.alignment
    power = settings_for(validate_run_config(fused_run_config({"strategy": "power"})))
    with pytest.raises(AttributeError, match="delta"):
        power.delta  # power adds no noise: its settings have no privacy target


def test_a_missing_key_is_refused_naming_it():
    cfg = validate_run_config(fused_run_config({"strategy": "fedmf"}))
    del cfg["u-solver"], cfg["momentum"]
    with pytest.raises(ConfigError, match="FedMFSettings needs run-config key\\(s\\) momentum, u-solver"):
        settings_for(cfg)


def test_strategies_and_clients_read_their_settings_not_the_mapping():
    """The server strategies and the clients read keys from their settings object only; the mapping is passed on,
    whole, to what handles every key (participation, the data, the noise source, the checkpoint)."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    files = [*sorted((root / "fl_strategies/protocol/strategies").glob("*.py")),
             root / "fl_strategies/protocol/base.py", *sorted((root / "client_app").glob("*_client.py"))]
    raw = re.compile(r"\bcfg(\[|\.get\()")
    found = [f"{path.relative_to(root)}:{i}" for path in files
             for i, line in enumerate(path.read_text().splitlines(), 1) if raw.search(line)]
    assert len(files) >= 14 and found == []
