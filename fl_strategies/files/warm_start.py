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
than the run's (its components live in another space; a model whose fields cannot tell is refused naming the
field it lacks), and (once ``d`` is
known) a width other than the run's ``d``.

:func:`load_start` takes the whole run configuration, not a strategy's settings: every eigenspace strategy
calls it, and ``init-from`` is declared only by those that iterate from a starting basis.
"""

from __future__ import annotations

import json
from typing import Any, Mapping

import numpy as np

from ..settings.config import ConfigError
from ..kernels.linalg import orth
from .pca import load_model

__all__ = ["load_start", "check_width", "initial_basis"]


def load_start(cfg: Mapping[str, Any]) -> dict[str, Any] | None:
    """The model named by ``init-from``, checked against the run config; ``None`` for ``init-from = ""``.

    Raises
    ------
    ConfigError
        If the file cannot be read as a ``pca.npz``, holds NaN or inf, or was fitted with ``center`` / ``scale``
        settings other than the run's, or (``scale = true``) lacks the ``run_config`` that would tell.
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
    for key in ("center", "scale"):
        then, now = _fitted_with(model, key), bool(cfg.get(key, False))
        if isinstance(then, str) and now:
            raise ConfigError(f"init-from {path!r} {then}, so whether it was fitted with {key} = true cannot be "
                              f"told; fit it again (its pca.npz records the run config) or start from a random "
                              "basis (init-from = '')")
        if isinstance(then, bool) and then != now:
            raise ConfigError(f"init-from {path!r} was fitted with {key} = {str(then).lower()}, but this run has "
                              f"{key} = {str(now).lower()}: its components are of other columns; use the same "
                              f"{key} or start from a random basis (init-from = '')")
    model["path"] = str(path)
    return model


def _fitted_with(model: Mapping[str, Any], key: str) -> bool | str:
    """The model's ``center`` or ``scale`` setting, or why it cannot be told (the field that is missing).

    The model's own fields tell where they can: ``centered`` (:func:`fl_strategies.files.pca.load_model` fills it
    from the mean for a file without it), and a ``scale`` other than 1 in some column (a scaled model). A scale of
    1 in every column is the unscaled space unless ``run_config`` says ``scale = true``; without a readable
    ``run_config`` the answer is the missing field, which matters only to a run with ``scale = true``.
    """
    if key == "center":
        return bool(model["centered"])
    if np.any(np.asarray(model["scale"]) != 1.0):
        return True
    if "run_config" not in model:
        return "lacks its run_config (the settings it was fitted with)"
    try:
        fitted = json.loads(str(model["run_config"]))
    except ValueError:
        fitted = None
    if not isinstance(fitted, dict):
        return "holds a run_config that is not a JSON table"
    return bool(fitted.get("scale", False))  # a model written before scale existed is unscaled


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
