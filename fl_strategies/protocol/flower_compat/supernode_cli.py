"""Private Flower names of the SuperNode's command line.

``fedspectral supernode`` (:mod:`fedspectral.supernode`) parses the arguments it passes on to
``flower-supernode`` with Flower's own parser before it starts anything, so that a bad argument is one line and
exit status 2 rather than a fork server started and then a SuperNode that refuses.
"""

from __future__ import annotations

__all__ = ["supernode_argument_parser"]

try:
    from flwr.supernode.cli.flower_supernode import _parse_args_run_supernode as supernode_argument_parser
except ImportError:  # another Flower: the SuperNode refuses a bad argument itself
    supernode_argument_parser = None

# supernode_argument_parser : function or None, ``_parse_args_run_supernode`` from
#   ``flwr.supernode.cli.flower_supernode``
#   What: returns the ``argparse.ArgumentParser`` of ``flower-supernode``.
#   Why: fedspectral supernode checks flower-supernode's arguments before it starts the ClientApp fork server.
#   Public alternative: none (``flower-supernode`` itself refuses a bad argument, after the fork server started).
