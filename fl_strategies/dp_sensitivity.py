"""Sensitivities of the private power method's product ``A X`` (DP power-method paper, Sec. 3-4).

Under the paper's neighbouring relation (12), ``A' = A + C`` with ``C`` symmetric and
``||C||_{1,2} = sqrt(sum_i ||C_i:||_1^2) <= 1``, Theorem 3.1 bounds ``||C X||_F <= max_i ||X_i:||_2`` for every
``X``; Hardt & Price use ``sqrt(p) max_ij |X_ij|``, which is never smaller.
"""

from __future__ import annotations

import numpy as np

__all__ = ["SENSITIVITIES", "delta_a", "delta_b", "sensitivity"]

SENSITIVITIES = ("row-norm", "max-entry", "one")


def delta_a(X: np.ndarray) -> float:
    """Hardt & Price's ``Delta^a = sqrt(p) max_ij |X_ij|`` of an ``n x p`` iterate (basis dependent)."""
    return float(np.sqrt(X.shape[1]) * np.max(np.abs(X)))


def delta_b(X: np.ndarray) -> float:
    """The paper's ``Delta^b = max_i ||X_i:||_2`` of an ``n x p`` iterate (invariant under ``X -> X O``)."""
    return float(np.sqrt(np.max(np.einsum("ij,ij->i", X, X))))


def sensitivity(X: np.ndarray, mode: str) -> float:
    """``Delta_l`` of the product with ``X`` (shape ``(n, p)``): ``row-norm`` (``Delta^b``), ``max-entry``
    (``Delta^a``) or ``one`` (the runtime-independent bound ``min(1, mu_1(A)) = 1`` of Theorem 4.1)."""
    if mode == "row-norm":
        return delta_b(X)
    if mode == "max-entry":
        return delta_a(X)
    if mode == "one":
        return 1.0
    raise ValueError(f"sensitivity must be one of {', '.join(SENSITIVITIES)}; got {mode!r}")
