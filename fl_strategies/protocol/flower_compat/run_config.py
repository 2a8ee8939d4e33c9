"""Private Flower names for reading a run config the way ``flwr run`` does.

Flower's CLI reads ``[tool.flwr.app.config]`` from ``pyproject.toml`` and applies ``--run-config`` overrides;
fedspectral's engines and command-line tools do the same in-process so that every path sees the same config.
"""

from __future__ import annotations

from flwr.common.config import get_fused_config_from_dir, parse_config_args

__all__ = ["get_fused_config_from_dir", "parse_config_args"]

# get_fused_config_from_dir : function, from ``flwr.common.config``
#   What: the default run config of an app directory's ``pyproject.toml`` with overrides applied.
#   Why: simulations.engines.fused_run_config and the Ray engine build the config a ``flwr run`` would.
#   Public alternative: none in 1.41 (``flwr run`` does it in the CLI; ``Context.run_config`` inside an app).

# parse_config_args : function, from ``flwr.common.config``
#   What: parses ``--run-config 'k=v ...'`` strings (or TOML files) the way ``flwr run`` does.
#   Why: the command-line tools (simulations.engines.ray, simulations.deploy, simulations.flwr_run) take the
#   same ``--run-config`` syntax as ``flwr run``.
#   Public alternative: none (``flwr run --run-config`` itself, in a subprocess).
