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
naming ``init-from`` and the file: a missing or unreadable file, a model that fails a check of
:func:`fl_strategies.files.model_checks.checked_model` (non-finite numbers, components that are not
orthonormal, a scale out of range, ...), a model fitted with other ``center`` / ``scale`` settings
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

from ..settings.config import ConfigError, column_scaling
from ..kernels.linalg import orth
from ..kernels.standardize import hwe_scale
from .pca import load_model

__all__ = ["load_start", "check_width", "initial_basis"]


def load_start(cfg: Mapping[str, Any]) -> dict[str, Any] | None:
    """The model named by ``init-from``, checked against the run config; ``None`` for ``init-from = ""``.

    Raises
    ------
    ConfigError
        If the file cannot be read as a ``pca.npz``, fails a check of
        :func:`~fl_strategies.files.model_checks.checked_model`, or was fitted with ``center`` / ``scale``
        settings other than the run's, or (``scale = true``) lacks the ``run_config`` that would tell.
    """
    path = cfg.get("init-from", "")
    if not path:
        return None
    try:
        model = load_model(path, what="init-from")
    except ValueError as ex:
        raise ConfigError(str(ex)) from None
    for key in ("center", "scale"):
        then, why = _fitted_with(model, key)
        now = column_scaling(cfg.get(key, False)) if key == "scale" else str(bool(cfg.get(key, False))).lower()
        if then is None and now != "false":
            raise ConfigError(f"init-from {path!r} {why}, so whether it was fitted with {key} = {now} cannot be "
                              f"told; fit it again (its pca.npz records the run config) or start from a random "
                              "basis (init-from = '')")
        if then is not None and then != now:
            raise ConfigError(f"init-from {path!r} was fitted with {key} = {then}, but this run has "
                              f"{key} = {now}: its components are of other columns; use the same "
                              f"{key} or start from a random basis (init-from = '')")
    model["path"] = str(path)
    return model


def _fitted_with(model: Mapping[str, Any], key: str) -> tuple[str | None, str | None]:
    """The model's ``center`` or ``scale`` setting, and why it cannot be told (the field that is missing).

    The model's own fields tell where they can: ``centered`` (:func:`fl_strategies.files.pca.load_model` fills it
    from the mean for a file without it), and ``run_config``'s ``scale`` (``"false"``, ``"true"`` or ``"hwe"``).
    Without a readable ``run_config``, a ``scale`` other than 1 in some column still tells that the columns were
    scaled, and how: ``hwe`` when every scale is ``sqrt(2 p (1 - p))`` of the model's own mean (``p = mean / 2``,
    :func:`fl_strategies.kernels.standardize.hwe_scale`), else ``true``; a scale of 1 in every column tells
    nothing, which matters only to a run with a ``scale``.

    Returns
    -------
    setting : str or None
        ``"true"`` / ``"false"`` for ``center``; ``"false"``, ``"true"``, ``"hwe"`` or ``None`` for
        ``scale``.
    why : str or None
        What is missing, when the setting cannot be told in full (``None`` when it can).
    """
    if key == "center":
        return ("true" if bool(model["centered"]) else "false"), None
    scale = np.asarray(model["scale"], dtype=np.float64)
    scaled = bool(np.any(scale != 1.0))
    if "run_config" not in model:
        why = "lacks its run_config (the settings it was fitted with)"
    else:
        try:
            fitted = json.loads(str(model["run_config"]))
        except ValueError:
            fitted = None
        if isinstance(fitted, dict):  # a model written before scale existed is unscaled
            setting = column_scaling(fitted.get("scale", False))
            return ("true" if scaled and setting == "false" else setting), None
        why = "holds a run_config that is not a JSON table"
    if not scaled:
        return None, why
    hwe = np.allclose(scale, hwe_scale(model["mean"]), rtol=1e-12, atol=0.0)
    return ("hwe" if hwe else "true"), None


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
