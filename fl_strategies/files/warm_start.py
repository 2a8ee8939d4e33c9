"""``init-from``: start an eigenspace run from an earlier run's PCA model instead of a random basis.

New rows at a site, or a site joining, move the principal subspace little: a
run that starts from the earlier model's components (``pca.npz``,
:mod:`fl_strategies.files.pca`) needs fewer rounds to a tolerance than one from a
random start. The model's ``k`` components (the first ``iteration-rank`` of
them, when it has more) are completed to ``iteration-rank`` columns by a
random orthonormal complement drawn from the run seed, so the start is
reproducible and, like a random start, has a component along every direction
outside the model's span.

Everything is checked on the server before round 1 and refused with one line
naming ``init-from`` and the file: a missing or unreadable file, a model with
non-finite numbers, a model fitted with other ``center`` / ``scale`` settings
than the run's (its components live in another space), and (once ``d`` is
known) a width other than the run's ``d``.

:func:`load_start` takes the whole run configuration, not a strategy's settings: every eigenspace strategy
calls it, and ``init-from`` is declared only by those that iterate from a starting basis.
"""

from __future__ import annotations

import json
from typing import Any, Mapping

import numpy as np

from ..settings.config import ConfigError, column_scaling
from ..kernels.linalg import orth
from .pca import load_model

__all__ = ["load_start", "check_width", "initial_basis"]


def load_start(cfg: Mapping[str, Any]) -> dict[str, Any] | None:
    """The model named by ``init-from``, checked against the run config; ``None`` for ``init-from = ""``.

    Raises
    ------
    ConfigError
        If the file cannot be read as a ``pca.npz``, holds NaN or inf, or was fitted with ``center`` / ``scale``
        settings other than the run's.
    """
    path = cfg.get("init-from", "")
    if not path:
        return None
    try:
        model = load_model(path, what="init-from")
    except ValueError as ex:
        raise ConfigError(str(ex)) from None
    for key in ("components", "mean", "scale"):
        if not np.all(np.isfinite(model[key])):
            raise ConfigError(f"init-from {path!r}: the model's {key} has non-finite values (NaN or inf); fit it "
                              "again or start from a random basis (init-from = '')")
    try:
        fitted = json.loads(str(model.get("run_config", "{}")))
    except ValueError:
        fitted = {}
    for key in ("center", "scale"):
        then, now = (column_scaling(fitted.get(key, False)), column_scaling(cfg.get(key, False))) if key == "scale" \
            else (str(bool(fitted.get(key, False))).lower(), str(bool(cfg.get(key, False))).lower())
        if then != now:
            raise ConfigError(f"init-from {path!r} was fitted with {key} = {then}, but this run has "
                              f"{key} = {now}: its components are of other columns; use the same "
                              f"{key} or start from a random basis (init-from = '')")
    model["path"] = str(path)
    return model


def check_width(model: Mapping[str, Any], d: int) -> None:
    """Refuse (``ConfigError`` naming ``init-from`` and the file) a model whose width is not the run's ``d``."""
    width = np.shape(model["components"])[1]
    if width != d:
        raise ConfigError(f"init-from {model['path']!r} has components of width {width}, but the run's data have "
                          f"d = {d} columns")


def initial_basis(model: Mapping[str, Any], d: int, r: int, rng: np.random.Generator) -> np.ndarray:
    """``Z_0``: the model's leading components, completed to ``r`` orthonormal columns at random.

    Parameters
    ----------
    model : mapping
        From :func:`load_start`: ``components`` of shape (k, d'), ``path``.
    d : int
        The run's dimension.
    r : int
        ``iteration-rank``.
    rng : numpy.random.Generator
        Source of the complement (the run's initialisation stream).

    Returns
    -------
    ndarray of shape (d, r)
        Orthonormal; its first ``min(k, r)`` columns span the model's leading components.

    Raises
    ------
    ConfigError
        If the model's width is not ``d``.
    """
    check_width(model, d)
    components = np.asarray(model["components"], dtype=np.float64)
    kept = orth(components[:r].T)  # (d, min(k, r)); already orthonormal up to rounding
    if kept.shape[1] == r:
        return kept
    extra = rng.standard_normal((d, r - kept.shape[1]))
    for _ in range(2):  # project out the kept span twice: one pass loses orthogonality to rounding
        extra -= kept @ (kept.T @ extra)
    return np.hstack([kept, orth(extra)])
