"""Moved to :mod:`fedspectral.run` (the tools a user runs against their own data and SuperNodes).

This name stays: ``python -m simulations.engines.flwr_run`` runs it, and ``import simulations.engines.flwr_run`` is the
same module object as ``fedspectral.run`` (so a test's monkeypatch of either reaches both).
"""

import sys

if __name__ == "__main__":
    from fedspectral.run import main

    sys.exit(main())
else:
    import fedspectral.run

    sys.modules[__name__] = fedspectral.run
