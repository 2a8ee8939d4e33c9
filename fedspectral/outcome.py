"""What a finished run left behind: a run whose strategy writes a PCA model but left none is not a success.

Flower's status ``finished:completed`` says only that the ServerApp returned. ``fedspectral run`` and ``deploy``
also look for the model: when the run config names a ``results-dir`` and its strategy writes ``pca.npz``
(:attr:`fl_strategies.settings.registry.StrategySpec.pca`), a run that ends without a new ``pca.npz`` there
exits 1 with a line saying so (:func:`missing_model`), whatever Flower's status.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping

from fl_strategies.settings.registry import spec

__all__ = ["model_stamp", "missing_model"]

MODEL_FILE = "pca.npz"


def model_stamp(results_dir: str | Path | None) -> tuple[int, int, int] | None:
    """``(device, inode, mtime_ns)`` of ``results_dir/pca.npz``, or ``None`` when there is none (or no
    ``results_dir``): taken before a run, it tells an earlier run's model from a new one (every model is written
    to a new file renamed into place, :func:`fl_strategies.files.plain_files.write_file`)."""
    if not results_dir:
        return None
    try:
        info = os.stat(Path(results_dir) / MODEL_FILE)
    except OSError:
        return None
    return info.st_dev, info.st_ino, info.st_mtime_ns


def missing_model(cfg: Mapping[str, Any], results_dir: str | Path | None,
                  before: tuple[int, int, int] | None) -> str | None:
    """Why a run that finished has failed all the same: its strategy writes a PCA model to ``results_dir``, and
    no new one is there (``before`` is :func:`model_stamp` taken before the run); ``None`` otherwise, also
    without a ``results_dir`` or for a strategy that writes no model."""
    if not results_dir or not spec(cfg["strategy"]).pca:
        return None
    now = model_stamp(results_dir)
    if now is not None and now != before:
        return None
    path = Path(results_dir) / MODEL_FILE
    return (f"no PCA model was written: strategy {cfg['strategy']!r} writes {path} at the end of a successful run, "
            "and " + ("none is there" if now is None else "the one there is an earlier run's"))
