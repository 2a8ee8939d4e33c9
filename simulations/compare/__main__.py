"""``python -m simulations.compare``."""

import sys

from simulations.compare.cli import main

sys.exit(main())
