"""The DP power method's noise (:mod:`fl_strategies.protocol.strategies.dp_power`): what a client adds, and why.

:func:`privacy_plan` calibrates a run config's releases (the ``L`` products, and with ``center`` the mean
composed with them); :func:`product_sensitivity` is a product's ``Delta_l``; :func:`client_noise_std` and
:func:`mean_noise_std` are the per-entry noise std a client adds to its product and to its row sum. Each is a
function of settings and public values only, so the clients and the server compute the same numbers.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..kernels.linalg import into_unit_ball
from . import analyze_gauss as ag
from .dp_sensitivity import sensitivity
from .zcdp import Calibration, calibrate

__all__ = ["MEAN_SHARE", "CENTRED_SENSITIVITY", "privacy_plan", "product_sensitivity", "mean_noise_std",
           "project_mean", "client_noise_std"]


MEAN_SHARE = 0.05
"""The mean's share of the privacy (``1 / sigma^2``) in a centred private run (module docstring, Centring)."""


CENTRED_SENSITIVITY = 2.0
"""Sensitivity of a product and of a row sum when one unit row is replaced (a centred private run)."""


def privacy_plan(epsilon: float, delta: float, calibration: str, rounds: int,
                 center: bool) -> tuple[Calibration | None, ag.PrivateReleases | None]:
    """``(calibration of the products, the composed releases or None)`` of a target ``(epsilon, delta)`` by
    ``calibration`` (``dp-calibration``) over ``rounds = L`` products.

    Without ``center``: the products' calibration over ``L`` releases (``None`` without ``epsilon``) and no
    composition. With ``center`` and ``epsilon``: the mean and the ``L`` products calibrated together
    (:func:`fl_strategies.privacy.analyze_gauss.calibrate`), the products'
    :class:`~fl_strategies.privacy.zcdp.Calibration` carrying their multiplier.
    """
    if not epsilon > 0:
        return None, None
    L = rounds
    if not center:
        return calibrate(epsilon, delta, L, calibration), None
    releases = ag.calibrate(epsilon, delta, calibration, {"mean": (MEAN_SHARE, 1), "products": (1.0 - MEAN_SHARE, L)})
    return Calibration(releases.multipliers["products"], L, delta, calibration), releases


def product_sensitivity(center: bool, dp_sensitivity: str, X: np.ndarray) -> float:
    """``Delta_l`` of the product with ``X``: :data:`CENTRED_SENSITIVITY` in a centred run, else by
    ``dp_sensitivity`` (``dp-sensitivity``)."""
    return CENTRED_SENSITIVITY if center else sensitivity(X, dp_sensitivity)


def mean_noise_std(channel: str, num_clients: int, releases: ag.PrivateReleases | None) -> float:
    """Per-entry noise std a client adds to its row sum (0 without ``epsilon``), shared as the products' over
    the ``num_clients`` clients unless ``channel`` (``dp-channel``) is ``public``."""
    if releases is None:
        return 0.0
    share = 1.0 if channel == "public" else math.sqrt(num_clients)
    return CENTRED_SENSITIVITY * releases.multipliers["mean"] / share


project_mean = into_unit_ball
"""``mu`` scaled into the unit ball (the mean of unit rows lies there)."""


def client_noise_std(channel: str, num_clients: int, calibration: Calibration | None, Delta: float) -> float:
    """Per-entry noise std a client adds to its product in a round with sensitivity ``Delta``.

    ``Delta sigma / sqrt(s)`` (``s = num_clients``) for the ``channel`` (``dp-channel``) ``secagg`` and
    ``plaintext``, ``Delta sigma`` for ``public``; 0 without a privacy target (``epsilon = 0``).
    """
    if calibration is None:
        return 0.0
    share = 1.0 if channel == "public" else math.sqrt(num_clients)
    return Delta * calibration.sigma / share
