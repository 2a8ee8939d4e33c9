"""Validation of run configurations: one place for every key's type, range and relations.

A run configuration is the flat ``[tool.flwr.app.config]`` table of
``pyproject.toml`` after Flower fused it with ``--run-config`` overrides (or a
row of a comparison file). :func:`validate_run_config` checks it completely
before the first round and returns the *effective* configuration: values
coerced to their types, ``iteration-rank = 0`` and ``clients-per-round = 0``
resolved, and the settings a baseline strategy fixes (``power``) applied. The
server and every client call it on the same input and so agree on the result.

Relations that need the data (a rank above the dimension, more clients than
rows) are checked by :func:`check_against_data` as soon as the data are known,
still before round 1.
"""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from .schedule import SCHEDULES, round_lengths

__all__ = ["ConfigError", "KEYS", "validate_run_config", "check_against_data", "total_iterations"]


class ConfigError(ValueError):
    """A run configuration is invalid; the message names the key and what is allowed."""


@dataclass(frozen=True)
class Key:
    """Specification of one run-config key."""

    name: str
    kind: type  # int, float, bool or str
    doc: str
    check: Callable[[Any], bool] | None = None
    allowed: str = ""  # human description of the allowed values
    choices: tuple[str, ...] = ()


def _key(name, kind, doc, check=None, allowed="", choices=()):
    return Key(name, kind, doc, check, allowed, tuple(choices))


STRATEGY_NAMES = ("fedpower", "power")
PARTITIONERS = ("iid", "contiguous", "label", "dirichlet", "group")

KEYS: dict[str, Key] = {
    k.name: k
    for k in [
        _key("strategy", str, "algorithm to run", choices=STRATEGY_NAMES),
        _key("dataset", str, "named generator or bundled set (fedpower-model1, fedpower-model2, digits) "
             "or a path to a .npy/.csv file whose rows are samples"),
        _key("partitioner", str, "how rows are split over clients", choices=PARTITIONERS),
        _key("dirichlet-alpha", float, "concentration of the Dirichlet label skew",
             lambda v: v > 0, "a number > 0"),
        _key("num-clients", int, "m, the number of clients (partitions)", lambda v: v >= 1, "an integer >= 1"),
        _key("clients-per-round", int, "K, clients sampled with replacement per round; 0 or num-clients = "
             "full participation without sampling", lambda v: v >= 0, "an integer in [0, num-clients]"),
        _key("rank", int, "k, the target rank", lambda v: v >= 1, "an integer >= 1"),
        _key("iteration-rank", int, "r >= k, columns iterated (0 = rank)", lambda v: v >= 0,
             "0 or an integer >= rank"),
        _key("num-server-rounds", int, "communication rounds (used when total-iterations is 0)",
             lambda v: v >= 1, "an integer >= 1"),
        _key("total-iterations", int, "T, local iterations in total; > 0 fixes the schedule and the number of "
             "rounds, 0 derives T from num-server-rounds", lambda v: v >= 0, "an integer >= 0"),
        _key("local-steps", int, "p, local iterations between communications", lambda v: v >= 1,
             "an integer >= 1"),
        _key("schedule", str, "fixed: p every round; decayed: p, p-1, ..., 1, 1, ...", choices=SCHEDULES),
        _key("alignment", str, "opt: Orthogonal Procrustes alignment before averaging; none: plain average",
             choices=("opt", "none")),
        _key("epsilon", float, "privacy target epsilon; 0 = no noise", lambda v: v >= 0 and math.isfinite(v),
             "a finite number >= 0 (0 = no noise)"),
        _key("delta", float, "privacy target delta", lambda v: 0 < v < 1, "a number in (0, 1)"),
        _key("noise-std", float, "explicit noise standard deviation nu; overrides the calibration (0 = off)",
             lambda v: v >= 0 and math.isfinite(v), "a finite number >= 0"),
        _key("noise-source", str, "seeded: reproducible from seed; os: operating-system entropy (private "
             "from the server)", choices=("seeded", "os")),
        _key("seed", int, "run seed: initialisation, sampling and seeded noise derive from it"),
        _key("data-seed", int, "seed of the synthetic data and of the partition"),
        _key("num-samples", int, "rows of a generated data set (0 = the generator's default)",
             lambda v: v >= 0, "an integer >= 0"),
        _key("dimension", int, "d of a generated data set; for files and bundled sets 0 or their width",
             lambda v: v >= 0, "an integer >= 0"),
        _key("row-normalize", bool, "scale every row to unit L2 norm (required by the privacy calibration)"),
        _key("results-dir", str, "directory where the server writes rounds.csv and estimate.npy ('' = none)"),
        _key("round-timeout", float, "seconds to wait for replies in a round (0 = no limit)",
             lambda v: v >= 0, "a number >= 0"),
    ]
}

# Settings a baseline fixes whatever the configuration says.
FIXED_BY_STRATEGY: dict[str, Callable[[dict], dict]] = {
    "power": lambda c: {"local-steps": 1, "schedule": "fixed", "epsilon": 0.0, "noise-std": 0.0,
                        "clients-per-round": c["num-clients"], "alignment": "none", "total-iterations": 0},
}


def _suggest(name: str, options) -> str:
    close = difflib.get_close_matches(name, list(options), n=1)
    return f" Did you mean {close[0]!r}?" if close else ""


def _coerce(key: Key, value: Any) -> Any:
    if key.kind is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{key.name} must be true or false, got {value!r}")
    if isinstance(value, bool):
        raise ConfigError(f"{key.name} must be {key.allowed or 'a ' + key.kind.__name__}, got {value!r}")
    if key.kind is int:
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise ConfigError(f"{key.name} must be {key.allowed or 'an integer'}, got {value!r}")
    if key.kind is float:
        if isinstance(value, (int, float)):
            return float(value)
        raise ConfigError(f"{key.name} must be {key.allowed or 'a number'}, got {value!r}")
    if not isinstance(value, str):
        raise ConfigError(f"{key.name} must be a string, got {value!r}")
    return value


def validate_run_config(raw: Mapping[str, Any]) -> dict[str, Any]:
    """Check a run configuration and return its effective values.

    Parameters
    ----------
    raw : mapping of str to scalar
        All keys of :data:`KEYS` (as Flower's fused run config has them).

    Returns
    -------
    dict
        A new dict with coerced values, ``iteration-rank`` and
        ``clients-per-round`` resolved, and the settings of fixed-setting
        baselines applied.

    Raises
    ------
    ConfigError
        On an unknown or missing key, a value of the wrong type or out of
        range, or inconsistent keys. The message names the key, the value and
        what is allowed.
    """
    unknown = [k for k in raw if k not in KEYS]
    if unknown:
        k = unknown[0]
        raise ConfigError(f"unknown run-config key {k!r}.{_suggest(k, KEYS)} Valid keys: {', '.join(KEYS)}")
    missing = [k for k in KEYS if k not in raw]
    if missing:
        raise ConfigError(f"run config is missing key(s) {', '.join(missing)}")
    cfg: dict[str, Any] = {}
    for name, key in KEYS.items():
        value = _coerce(key, raw[name])
        if key.choices and value not in key.choices:
            raise ConfigError(f"{name} must be one of {', '.join(key.choices)}; got {value!r}."
                              f"{_suggest(value, key.choices)}")
        if key.check is not None and not key.check(value):
            raise ConfigError(f"{name} must be {key.allowed}, got {value!r}")
        cfg[name] = value

    if cfg["strategy"] in FIXED_BY_STRATEGY:
        cfg.update(FIXED_BY_STRATEGY[cfg["strategy"]](cfg))
    m = cfg["num-clients"]
    if cfg["clients-per-round"] == 0:
        cfg["clients-per-round"] = m
    if cfg["clients-per-round"] > m:
        raise ConfigError(f"clients-per-round must be at most num-clients = {m}, got {cfg['clients-per-round']}")
    if cfg["iteration-rank"] == 0:
        cfg["iteration-rank"] = cfg["rank"]
    if cfg["iteration-rank"] < cfg["rank"]:
        raise ConfigError(f"iteration-rank must be >= rank = {cfg['rank']} (or 0 for rank), "
                          f"got {cfg['iteration-rank']}")
    noisy = cfg["epsilon"] > 0 or cfg["noise-std"] > 0
    if noisy and not cfg["row-normalize"]:
        raise ConfigError("row-normalize must be true when epsilon or noise-std is set: the privacy "
                          "calibration (Theorem 6) assumes rows of unit L2 norm")
    return cfg


def total_iterations(cfg: Mapping[str, Any]) -> int:
    """``T``, the total number of local iterations of the effective configuration."""
    return sum(round_lengths(cfg["local-steps"], cfg["schedule"], total_iterations=cfg["total-iterations"],
                             num_rounds=cfg["num-server-rounds"]))


def check_against_data(cfg: Mapping[str, Any], dimension: int, num_rows: int) -> None:
    """Check the relations between a validated config and the data.

    Parameters
    ----------
    cfg : mapping
        Output of :func:`validate_run_config`.
    dimension : int
        ``d``, the number of columns of the data.
    num_rows : int
        ``n``, the total number of rows over all clients.

    Raises
    ------
    ConfigError
        If ``rank`` or ``iteration-rank`` exceeds ``d`` or ``num-clients``
        exceeds ``n``.
    """
    for name in ("rank", "iteration-rank"):
        if cfg[name] > dimension:
            raise ConfigError(f"{name} must be at most the data dimension d = {dimension}, got {cfg[name]}")
    if cfg["num-clients"] > num_rows:
        raise ConfigError(f"num-clients must be at most the number of rows n = {num_rows}, "
                          f"got {cfg['num-clients']}")
