"""The engines that run the same ServerApp and ClientApp: in-process (``local``) and Flower's Ray engine."""

from __future__ import annotations

from pathlib import Path

APP_DIR = Path(__file__).resolve().parents[2]
"""The project directory (holds ``pyproject.toml`` with the default run config)."""


def fused_run_config(overrides: dict) -> dict:
    """The default run config of ``pyproject.toml`` with ``overrides`` applied (unknown keys refused)."""
    from fl_strategies.flower_compat import get_fused_config_from_dir

    return get_fused_config_from_dir(APP_DIR, dict(overrides))


def engine_directory(run_config: dict, partition_of: dict[int, int]):
    """The :class:`fl_strategies.node_directory.NodeDirectory` of an engine's nodes (``discovery = "engine"``).

    Row counts come from the data generator (:func:`simulations.data.federated_data.partition_sizes`: arithmetic for
    a lazy data set); nothing is asked of the nodes.
    """
    from fl_strategies.config import validate_run_config
    from fl_strategies.node_directory import NodeDirectory

    from simulations.data.federated_data import partition_sizes

    sizes = partition_sizes(validate_run_config(run_config))
    return NodeDirectory(partition_of=dict(partition_of), sizes=dict(enumerate(sizes.tolist())))
