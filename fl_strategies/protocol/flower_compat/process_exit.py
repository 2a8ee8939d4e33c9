"""Private Flower names for ending a ServerApp's process cleanly when Flower stops it.

Flower's ``flwr-simulation`` and ``flwr-serverapp`` processes exit through their own exit handlers on Ctrl-C,
SIGTERM or ``flwr stop``; fedspectral registers one so that a run stops before its next round with what it wrote
consistent (:mod:`fl_strategies.protocol.stop_request`).
"""

from __future__ import annotations

from flwr.supercore.exit import add_exit_handler

__all__ = ["add_exit_handler"]

# add_exit_handler : function, from ``flwr.supercore.exit``
#   What: registers a callable that Flower's process exit runs (optionally before its forced exit after 5 s).
#   Why: stop_request ends the ServerApp between rounds when Flower stops the process (Ctrl-C of fedspectral run,
#   SIGTERM, flwr stop), instead of Flower's forced exit mid-write.
#   Public alternative: none (signal handlers of our own would be replaced by Flower's and Ray's).
