"""Moved to :mod:`fedspectral.deploy` (the tools a user runs against their own data and SuperNodes).

This name stays: ``python -m simulations.engines.deploy`` runs it, and ``import simulations.engines.deploy`` is the
same module object as ``fedspectral.deploy`` (so a test's monkeypatch of either reaches both).
"""

import sys

if __name__ == "__main__":
    from fedspectral.deploy import main

    sys.exit(main())
else:
    import fedspectral.deploy

    sys.modules[__name__] = fedspectral.deploy
