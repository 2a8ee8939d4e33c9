"""The argument parser of every fedspectral command line: a bad argument is one line, exit status 2.

Used by the ``fedspectral`` command's subcommands (:mod:`fedspectral.cli`) and by their ``python -m`` entry
points, which name themselves as ``prog`` (``fedspectral run: error: ...`` or
``python -m simulations.engines.flwr_run: error: ...``).
"""

from __future__ import annotations

import argparse

__all__ = ["ArgumentParser"]


class ArgumentParser(argparse.ArgumentParser):
    """``argparse.ArgumentParser`` whose refusal of a bad argument is one line (``prog: error: argument ...``).

    The description and the epilog (a command's examples and exit statuses) are printed as written
    (``RawDescriptionHelpFormatter``) unless another ``formatter_class`` is given.
    """

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str):  # noqa: D102
        self.exit(2, f"{self.prog}: error: {message}\n")
