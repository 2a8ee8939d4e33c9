"""FedAve's local maths: the step-size schedules and a client's local SGD (plain numpy).

Step sizes (``step-schedule``): ``clipped`` ``min(step-max, 4/(mu(k b + 1)))``; ``theory-shifted``
``4/(mu((k + T0) b + 1))`` with Lemma 3's warm-up ``T0`` (:func:`warmup_epochs`); ``const`` ``step-max``.
Called by the FedAve clients and by the server strategy (:mod:`fl_strategies.protocol.strategies.fedave`) for its
pseudo-client.
"""

from __future__ import annotations

import numpy as np

from .losses import per_sample_grads

__all__ = ["STEP_SCHEDULES", "warmup_epochs", "step_size", "local_sgd"]


STEP_SCHEDULES = ("clipped", "theory-shifted", "const")


def warmup_epochs(kappa: float, tau: float, m: int, mu: float, b: int) -> float:
    """Lemma 3's ``T0 = 4 max{kappa, 4 + 32 kappa^2 (1-tau)/(tau (m-1)), 4 m/(mu^2 b)}``."""
    part = 0.0 if tau >= 1 or m <= 1 else 32 * kappa ** 2 * (1 - tau) / (tau * (m - 1))
    return 4.0 * max(kappa, 4.0 + part, 4.0 * m / (mu ** 2 * b))


def step_size(schedule: str, k: int, *, b: int, mu: float, step_max: float, T0: float = 0.0) -> float:
    """``eta_k`` of epoch ``k`` (0-based) under ``schedule`` (see the module docstring)."""
    if schedule == "clipped":
        return min(step_max, 4.0 / (mu * (k * b + 1)))
    if schedule == "theory-shifted":
        return 4.0 / (mu * ((k + T0) * b + 1))
    if schedule == "const":
        return step_max
    raise ValueError(f"unknown step-schedule {schedule!r}; expected one of {', '.join(STEP_SCHEDULES)}")


def local_sgd(loss: str, X: np.ndarray, y: np.ndarray, theta: np.ndarray, mu: float, eta: float, steps: int,
              rng: np.random.Generator) -> np.ndarray:
    """``steps`` single-sample SGD steps (``steps`` gradient evaluations).

    Parameters
    ----------
    X : ndarray of shape (s, p)
    y : ndarray of shape (s,)
    theta : ndarray of shape (p,)

    Returns
    -------
    ndarray of shape (p,)
    """
    theta = np.array(theta, dtype=np.float64)
    for j in rng.integers(0, X.shape[0], size=steps):
        theta -= eta * per_sample_grads(loss, X[j:j + 1], y[j:j + 1], theta[None, :], mu)[0, 0]
    return theta
