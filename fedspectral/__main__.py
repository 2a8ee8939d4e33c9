"""``python -m fedspectral``: the ``fedspectral`` command (:mod:`fedspectral.cli`)."""

import sys

from fedspectral.cli import main

sys.exit(main())
