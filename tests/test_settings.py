"""Conflicting keys are refused naming both; keys the chosen strategy never reads are named (or refused)."""

import numpy as np
import pytest

from fl_strategies.settings.config import (KEYS, ConfigError, check_unread_keys, default_run_config, unread_keys,
                                  validate_run_config)
from fl_strategies.settings.registry import STRATEGY_NAMES, readers
from simulations.engines import fused_run_config

from conftest import run_app

TINY = {"num-samples": 240, "dimension": 8, "num-clients": 3, "rank": 2, "iteration-rank": 2, "num-server-rounds": 3}


def test_epsilon_with_noise_std_is_refused_naming_both():
    cfg = fused_run_config({"epsilon": 1.0, "noise-std": 0.1, "row-normalize": True})
    with pytest.raises(ConfigError, match=r"^epsilon = 1\.0 and noise-std = 0\.1 are both set") as err:
        validate_run_config(cfg)
    assert "\n" not in str(err.value)


def test_each_of_epsilon_and_noise_std_alone_is_accepted():
    assert validate_run_config(fused_run_config({"epsilon": 1.0, "row-normalize": True}))["epsilon"] == 1.0
    assert validate_run_config(fused_run_config({"noise-std": 0.1, "row-normalize": True}))["noise-std"] == 0.1


def test_dp_calibration_with_noise_std_is_refused_naming_both():
    cfg = fused_run_config({"noise-std": 0.1, "row-normalize": True, "dp-calibration": "tight"})
    with pytest.raises(ConfigError, match=r"dp-calibration = 'tight' with noise-std set"):
        validate_run_config(cfg)


def test_the_issue_example_is_named_in_one_line():
    defaults = default_run_config()
    cfg = fused_run_config({"strategy": "covariance", "local-steps": 4, "alignment": "none", "mf-sigma-1": 3.0})
    validate_run_config(cfg)
    assert unread_keys(cfg, defaults) == ["local-steps", "alignment", "mf-sigma-1"]
    line = check_unread_keys(cfg, defaults)
    assert "\n" not in line
    assert "local-steps = 4" in line and "alignment = 'none'" in line and "mf-sigma-1 = 3.0" in line
    assert line.startswith("strategy 'covariance' does not read")


def test_strict_refuses_the_unread_keys_in_one_message():
    defaults = default_run_config()
    cfg = fused_run_config({"strategy": "covariance", "local-steps": 4, "strict": True})
    with pytest.raises(ConfigError, match=r"^strict = true: strategy 'covariance' does not read local-steps = 4"):
        check_unread_keys(cfg, defaults)


def test_defaults_and_read_keys_are_not_named():
    defaults = default_run_config()
    for name in STRATEGY_NAMES:  # the defaults themselves: nothing to name, for every strategy
        assert unread_keys({**defaults, "strategy": name}, defaults) == []
    assert check_unread_keys(fused_run_config({"local-steps": 4, "alignment": "none"}), defaults) is None


def test_every_declared_reader_is_a_strategy_and_common_keys_are_few():
    common = {name for name in KEYS if not readers(name)}
    for name in KEYS:
        assert set(readers(name)) <= set(STRATEGY_NAMES), name
    assert {"strategy", "dataset", "seed", "num-clients", "results-dir", "strict"} <= common
    assert "local-steps" not in common and "mf-sigma-1" not in common


def test_the_server_app_logs_the_unread_keys_at_the_start(monkeypatch):
    import server_app.app as server

    lines = []
    monkeypatch.setattr(server.log, "warning", lambda fmt, *args: lines.append(fmt % args))
    run_app(strategy="covariance", **{k.replace("-", "_"): v for k, v in TINY.items()}, local_steps=4,
            mf_sigma_1=3.0)
    assert len(lines) == 1  # covariance runs one round: num-server-rounds is not read either
    assert "does not read num-server-rounds = 3, local-steps = 4, mf-sigma-1 = 3.0" in lines[0]


@pytest.mark.parametrize("strategy, unread", [
    ("covariance", {"mf-sigma-1": 3.0, "inner-tol": 0.5, "momentum": "none", "sampling": "without-replacement"}),
    ("power", {"alignment": "none", "schedule": "fixed", "dp-sensitivity": "one", "u-solver": "exact"}),
    ("faps", {"local-steps": 4, "total-iterations": 0, "step-max": 0.05, "dp-sensitivity": "one"}),
])
def test_undeclared_keys_leave_the_result_unchanged(strategy, unread):
    """A non-default value of keys the strategy does not declare changes nothing in its result."""
    base = {k.replace("-", "_"): v for k, v in TINY.items()}
    plain = run_app(strategy=strategy, **base)
    changed_cfg = fused_run_config({**TINY, "strategy": strategy, **unread})
    assert set(unread_keys(changed_cfg, default_run_config())) >= {k for k, v in unread.items()
                                                                   if v != default_run_config()[k]}
    changed = run_app(strategy=strategy, **base, **{k.replace("-", "_"): v for k, v in unread.items()})
    np.testing.assert_array_equal(plain.iterates[-1], changed.iterates[-1])


@pytest.mark.parametrize("over, match", [
    ({"total-iterations": 40, "num-server-rounds": 20},
     r"^total-iterations = 40 and num-server-rounds = 20 are both set: it fixes"),
    ({"strategy": "faps", "inner-steps": 3, "inner-tol": 0.5},
     r"^inner-steps = 3 and inner-tol = 0\.5 are both set"),
])
def test_two_ways_of_setting_one_thing_are_refused_at_the_start_naming_both(over, match):
    cfg = fused_run_config(over)
    validate_run_config(cfg)  # each value is valid on its own
    with pytest.raises(ConfigError, match=match):
        check_unread_keys(cfg, default_run_config())


def test_one_of_the_two_alone_is_accepted():
    for over in ({"total-iterations": 40}, {"num-server-rounds": 20},
                 {"strategy": "faps", "inner-steps": 3}, {"strategy": "faps", "inner-tol": 0.5},
                 {"strategy": "power", "total-iterations": 40, "num-server-rounds": 20}):  # power fixes T = 0
        cfg = fused_run_config(over)
        line = check_unread_keys(cfg, default_run_config())
        assert line is None or "num-server-rounds" not in line, over


def test_an_exact_solver_names_the_iteration_keys_it_does_not_read():
    defaults = default_run_config()
    cfg = fused_run_config({"strategy": "fedmf", "u-solver": "exact", "local-iterations": 60})
    assert unread_keys(cfg, defaults) == ["local-iterations"]
    cfg = fused_run_config({"strategy": "faps", "inner-solver": "exact", "inner-tol": 0.5})
    assert unread_keys(cfg, defaults) == ["inner-tol"]
    assert unread_keys(fused_run_config({"strategy": "faps", "inner-tol": 0.5}), defaults) == []


def test_inner_min_steps_above_inner_max_steps_is_refused_for_the_inner_tol_rule():
    cfg = fused_run_config({"strategy": "faps", "inner-min-steps": 5, "inner-max-steps": 3})
    with pytest.raises(ConfigError, match=r"^inner-min-steps = 5 exceeds inner-max-steps = 3"):
        validate_run_config(cfg)
    validate_run_config(fused_run_config({"strategy": "faps", "inner-min-steps": 5, "inner-max-steps": 3,
                                          "inner-steps": 4}))  # the rule is off: neither is read


def test_flwr_run_names_the_unread_keys_before_flower_starts(capsys):
    from simulations.engines import ArgumentError, checked_run_config

    checked_run_config({"strategy": "covariance", "mf-sigma-1": 3.0, **{k: TINY[k] for k in ("num-clients", "rank")}})
    assert capsys.readouterr().err == ("warning: strategy 'covariance' does not read mf-sigma-1 = 3.0 (set to "
                                       "non-default values; they have no effect)\n")
    with pytest.raises(ArgumentError, match=r"^--run-config: strict = true: strategy 'covariance' does not read"):
        checked_run_config({"strategy": "covariance", "mf-sigma-1": 3.0, "strict": True})
