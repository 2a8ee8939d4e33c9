"""Bad configurations fail before round 1 with a message naming the key."""

import logging
import tomllib
from pathlib import Path

import pytest

from conftest import run_app
from fl_strategies.settings.config import KEYS, ConfigError, validate_run_config
from simulations.engines import APP_DIR, fused_run_config


def test_pyproject_defaults_are_exactly_the_validated_keys():
    table = tomllib.loads((APP_DIR / "pyproject.toml").read_text())["tool"]["flwr"]["app"]["config"]
    assert set(table) == set(KEYS)
    validate_run_config(table)


@pytest.mark.parametrize("overrides, key, fragment", [
    ({"strategy": "fedpowr"}, "strategy", "Did you mean 'fedpower'"),
    ({"rank": 5, "iteration-rank": 3}, "iteration-rank", ">= rank = 5"),
    ({"clients-per-round": 30}, "clients-per-round", "at most num-clients = 10"),
    ({"epsilon": -1.0}, "epsilon", ">= 0"),
    ({"delta": 0.0}, "delta", "(0, 1)"),
    ({"delta": 1.5}, "delta", "(0, 1)"),
    ({"local-steps": 0}, "local-steps", ">= 1"),
    ({"schedule": "decay"}, "schedule", "Did you mean 'decayed'"),
    ({"alignment": "procrustes"}, "alignment", "opt, none"),
    ({"num-clients": 0}, "num-clients", ">= 1"),
    ({"rank": 2.5}, "rank", "integer"),
    ({"row-normalize": 1}, "row-normalize", "true or false"),
    ({"epsilon": 1.0, "row-normalize": False}, "row-normalize", "unit L2 norm"),
])
def test_bad_values_name_the_key(overrides, key, fragment):
    cfg = fused_run_config(overrides)
    with pytest.raises(ConfigError) as info:
        validate_run_config(cfg)
    assert key in str(info.value) and fragment in str(info.value)


def test_unknown_key_gets_a_suggestion():
    cfg = dict(fused_run_config({}), **{"local-step": 2})
    with pytest.raises(ConfigError, match="unknown run-config key 'local-step'.*Did you mean 'local-steps'"):
        validate_run_config(cfg)


@pytest.mark.parametrize("overrides, fragment", [
    ({"rank": 60, "iteration-rank": 60}, r'"rank" is 60 .*dimension is 50'),
    ({"iteration-rank": 51}, "iteration-rank must be at most the data dimension d = 50, got 51"),
    ({"dataset": "digits", "dimension": 0, "num-samples": 0, "rank": 70, "iteration-rank": 70},
     "at most the data dimension d = 64"),
    ({"dataset": "no/such/file.npy"}, "dataset"),
    ({"strategy": "fedsvd"}, "strategy"),
])
def test_bad_configs_fail_before_round_one(overrides, fragment):
    calls = []

    def spy(msg, pid):
        calls.append(msg.metadata.message_type)
        return "ok"

    with pytest.raises(ValueError, match=fragment):
        run_app(fault_fn=spy, **overrides)
    assert calls == []  # no client was contacted


def test_power_baseline_fixes_its_settings_and_says_so():
    from fl_strategies.settings.config import effective_config

    cfg, overridden = effective_config(fused_run_config({"strategy": "power", "local-steps": 4}))
    assert (cfg["local-steps"], cfg["epsilon"], cfg["clients-per-round"], cfg["schedule"]) == (1, 0.0, 10, "fixed")
    assert overridden == {"local-steps": (4, 1), "schedule": ("decayed", "fixed"), "alignment": ("opt", "none")}


@pytest.mark.parametrize("strategy, over, key", [
    ("power", {"epsilon": 5.0, "local-steps": 4, "clients-per-round": 3}, "epsilon"),
    ("power", {"clients-per-round": 3}, "clients-per-round"),
    ("faps", {"noise-std": 0.1}, "noise-std"),
    ("fedmf", {"epsilon": 1.0}, "epsilon"),
    ("dp-power", {"noise-std": 0.1, "row-normalize": True}, "noise-std"),
    ("fedlrgd", {"frac-active": 0.5}, "frac-active"),
])
def test_a_setting_that_would_weaken_a_promise_is_refused(strategy, over, key):
    with pytest.raises(ConfigError, match=rf"^{key} = .* is not honoured by strategy '{strategy}'"):
        validate_run_config(fused_run_config({"strategy": strategy, **over}))
    # just inside: without the promise keys (the value the strategy fixes anyway) the config is accepted
    from fl_strategies.settings.registry import PROMISE_KEYS

    validate_run_config(fused_run_config({"strategy": strategy,
                                          **{k: v for k, v in over.items() if k not in PROMISE_KEYS}}))


def test_the_server_logs_every_fixed_setting_at_start(caplog):
    from server_app.app import build_strategy

    with caplog.at_level(logging.INFO, logger="flwr.fedspectral"):
        build_strategy(fused_run_config({"strategy": "power", "local-steps": 4, "dimension": 10, "num-samples": 200}))
    (line,) = [r.getMessage() for r in caplog.records if "fixes" in r.getMessage()]
    assert line == ("strategy power fixes local-steps = 1 (run config: 4), schedule = 'fixed' (run config: "
                    "'decayed'), alignment = 'none' (run config: 'opt')")


def test_the_run_config_reference_documents_every_key():
    """docs/reference/run-config.md is what `python -m fl_strategies.settings.reference` generates: a key added
    (or a default, a range, a reader changed) without regenerating the page fails here."""
    from fl_strategies.settings.reference import PAGE, pyproject_defaults, run_config_page

    page = run_config_page(pyproject_defaults())
    assert PAGE.read_text() == page, "regenerate it: python -m fl_strategies.settings.reference --write"
    assert all(f"| `{key}` |" in page for key in KEYS)


def test_readme_names_every_key_that_may_change_on_resume():
    """The checkpoint guide lists, by name, exactly the keys declared ``harmless_on_resume``."""
    import re

    from fl_strategies.settings.config import RESUME_HARMLESS

    text = (APP_DIR / "docs" / "checkpoints-and-faults.md").read_text()
    bullet = text[text.index("* **Same run config.**"):]
    bullet = bullet[:bullet.index("may differ from the checkpointed run")]
    named = set(re.findall(r"`([a-z-]+)`", bullet)) - {"harmless_on_resume"}
    assert named == set(RESUME_HARMLESS)
