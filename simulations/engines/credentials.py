"""Moved to :mod:`fedspectral.credentials` (the tools a user runs against their own data and SuperNodes).

This name stays: ``python -m simulations.engines.credentials`` runs it, and ``import simulations.engines.credentials`` is the
same module object as ``fedspectral.credentials`` (so a test's monkeypatch of either reaches both).
"""

import sys

if __name__ == "__main__":
    from fedspectral.credentials import main

    sys.exit(main())
else:
    import fedspectral.credentials

    sys.modules[__name__] = fedspectral.credentials
