"""The engines that run the same ServerApp and ClientApp: in-process (``local``) and Flower's Ray engine."""

from __future__ import annotations

from pathlib import Path

APP_DIR = Path(__file__).resolve().parents[2]
"""The project directory (holds ``pyproject.toml`` with the default run config)."""


def fused_run_config(overrides: dict) -> dict:
    """The default run config of ``pyproject.toml`` with ``overrides`` applied (unknown keys refused)."""
    from flwr.common.config import get_fused_config_from_dir

    return get_fused_config_from_dir(APP_DIR, dict(overrides))
