"""l2 sensitivities of one private power-method step ``Y = A X + G`` (DP power spec, sections 1.3-1.4).

Two noise multipliers for the current orthonormal iterate ``X`` (n x p):

* :func:`delta_a` -- Hardt & Price / Balcan et al.: ``Delta^a = sqrt(p) * max_ij |X_ij|``;
* :func:`delta_b` -- the paper's (Thm 3.1): ``Delta^b = max_i ||X_{i:}||_2``.

Under the paper's neighbouring relation (12), ``A' = A + C`` with ``C`` symmetric and
``||C||_{1,2} = sqrt(sum_i ||C_{i:}||_1^2) <= 1`` (:func:`norm_1_2`), every ``X`` satisfies
``||C X||_F <= Delta^b(X) <= Delta^a(X)``. ``Delta^b`` is invariant under a change of
basis ``X -> X O`` (``O`` orthogonal), ``Delta^a`` is not (its value depends on which orthonormal basis of the span the QR returns). Both are
deterministic functions of the public iterate, so computing them costs no privacy.
"""

from __future__ import annotations

import numpy as np

__all__ = ["SENSITIVITIES", "delta_a", "delta_b", "norm_1_2", "sensitivity"]


def _as_matrix(X: np.ndarray, name: str = "X") -> np.ndarray:
    X = np.asarray(X)
    if X.ndim != 2 or X.shape[0] == 0 or X.shape[1] == 0:
        raise ValueError(f"{name} must be a non-empty 2-D array, got shape {X.shape}")
    if not np.issubdtype(X.dtype, np.number):
        raise TypeError(f"{name} must be numeric, got dtype {X.dtype}")
    return X


def delta_a(X: np.ndarray) -> float:
    """Hardt & Price's sensitivity ``sqrt(p) * max_ij |X_ij|``.

    Parameters
    ----------
    X : ndarray of shape (n, p)
        The iterate being multiplied (normally with orthonormal columns).

    Returns
    -------
    float
        ``sqrt(p) * ||X||_max``; depends on the basis of ``span(X)``.
    """
    X = _as_matrix(X)
    return float(np.sqrt(X.shape[1]) * np.max(np.abs(X)))


def delta_b(X: np.ndarray) -> float:
    """The paper's sensitivity ``max_i ||X_{i:}||_2`` (largest row l2 norm).

    Parameters
    ----------
    X : ndarray of shape (n, p)
        The iterate being multiplied (normally with orthonormal columns, then
        ``delta_b(X) <= 1``).

    Returns
    -------
    float
        Largest row norm; unchanged by ``X -> X O`` for orthogonal ``O`` (p x p).
    """
    X = _as_matrix(X)
    return float(np.sqrt(np.max(np.einsum("ij,ij->i", X, X))))


def norm_1_2(C: np.ndarray) -> float:
    """The ``||C||_{1,2}`` norm of the paper's neighbouring relation (12).

    Parameters
    ----------
    C : ndarray of shape (n, n)
        A perturbation of the data matrix.

    Returns
    -------
    float
        ``sqrt(sum_i ||C_{i:}||_1^2)``: the l2 norm of the vector of row l1 norms.
    """
    C = _as_matrix(C, "C")
    return float(np.linalg.norm(np.abs(C).sum(axis=1)))


SENSITIVITIES = ("row-norm", "max-entry", "one")
"""Values of the ``dp-sensitivity`` key: :func:`delta_b`, :func:`delta_a`, and the runtime-independent 1."""


def sensitivity(X: np.ndarray, mode: str) -> float:
    """``Delta_l`` of the product with the iterate ``X`` (shape ``(n, p)``) for a ``dp-sensitivity`` mode.

    ``row-norm``: :func:`delta_b`; ``max-entry``: :func:`delta_a`; ``one``: Theorem 4.1's runtime-independent
    ``min(1, mu_1(A))``, which is always 1 because every row of an orthogonal matrix has l1 norm >= 1 (spec P5).
    """
    if mode == "row-norm":
        return delta_b(X)
    if mode == "max-entry":
        return delta_a(X)
    if mode == "one":
        return 1.0
    raise ValueError(f"sensitivity must be one of {', '.join(SENSITIVITIES)}; got {mode!r}")
