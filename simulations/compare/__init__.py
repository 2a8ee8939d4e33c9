"""The compare tool: run the runs of a comparison file and write a results table, summary and plots.

``python -m simulations.compare FILE --out DIR`` (or ``fedspectral-compare``); see :mod:`simulations.compare.cli`.
"""

from simulations.compare.cli import ComparisonError, Job, load_comparison, main, run_comparison

__all__ = ["ComparisonError", "Job", "load_comparison", "main", "run_comparison"]
