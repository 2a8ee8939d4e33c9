"""Kernels of federated low-rank matrix factorisation (Philippenko, Scaman, Massoulie, AAAI 2025).

Pure functions, called by the clients (:mod:`client_app.fedmf_client`), the
server (:mod:`fl_strategies.protocol.strategies.fedmf`) and the tests. Client ``i`` holds
``S_i`` (``n_i x d``, rows are samples); the factorisation is
``S ~ U V^T`` with ``U_i`` (``n_i x r``) private and ``V`` (``d x r``) shared.

* Algorithm 1 (power initialisation): ``V = (S^T S)^alpha S^T Phi`` from the
  sums of :func:`sketch` (round 1) and :func:`power_product` (rounds 2 ..
  alpha + 1), never normalised; the best of ``m`` sketches by
  :func:`condition_number` (the authors' code's rule, spec P3).
* Algorithm 2 (local GD on ``U_i`` with ``V`` fixed): :func:`local_gd`, plain,
  with Nesterov momentum ``beta_k = k / (k + 3)`` (the paper's experiments) or
  the strongly-convex constant ``(kappa - 1) / (kappa + 1)`` (Theorem 1's
  accelerated rate); :func:`exact_u` is the closed form of Prop. 2.
* :func:`theorem1_bound` is Theorem 1's bound on ``F(U_t) - F(U_hat)``.
* The Table 2 baselines with one communication per iteration:
  :func:`wk_init` / :func:`altgd_step` (Ward & Kolda 2023) and
  :func:`yd_step_size` / :func:`simgd_step` (Ye & Du 2021, simultaneous GD done
  correctly, spec P16).

Every loss is ``1/2 ||S - U V^T||_F^2`` computed from the residual (spec P12).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import scipy.linalg

__all__ = ["MOMENTA", "STREAM_SKETCH", "STREAM_U0", "STREAM_BASELINE", "MFReference", "sketch_matrix",
           "sketch", "power_product", "condition_number", "select_sketch", "initial_u", "mf_loss", "exact_u",
           "local_gd", "theorem1_bound", "theorem2_kappa2", "wk_constants", "wk_init", "altgd_step", "simgd_step", "yd_constants"]

MOMENTA = ("none", "nesterov", "nesterov-sc")
# Tags of the random streams derived from the run seed (distinct from the eigenspace streams 0-2).
STREAM_SKETCH, STREAM_U0, STREAM_BASELINE = 10, 11, 12
WK_MU, WK_C = 0.5, 8.0  # the authors' code: mu = 0.5, C = 8


@dataclass(frozen=True)
class MFReference:
    """Exact spectral information of the pooled matrix ``S`` (harness only, never sent by clients).

    Attributes
    ----------
    singular_values : ndarray of shape (min(n, d),)
        ``sigma_1 >= sigma_2 >= ...`` of ``S`` (scipy ``svd``).
    rank : int
        ``r``, the latent dimension.
    """

    singular_values: np.ndarray
    rank: int

    @property
    def eps_min(self) -> float:
        """``1/2 sum_{k > r} sigma_k^2`` (Eckart-Young in F units; the correct value, spec P2)."""
        return 0.5 * float(np.sum(self.singular_values[self.rank:] ** 2))

    @property
    def eps_min_code(self) -> float:
        """The authors' code's value, which omits ``sigma_{r+1}`` (spec P2); for reference only."""
        return 0.5 * float(np.sum(self.singular_values[self.rank + 1:] ** 2))

    @classmethod
    def from_matrix(cls, S: np.ndarray, rank: int) -> "MFReference":
        """Build the reference from the pooled ``S`` (n, d)."""
        return cls(scipy.linalg.svd(S, compute_uv=False), rank)


def sketch_matrix(seed: int, partition_id: int, j: int, num_rows: int, r: int) -> np.ndarray:
    """``Phi^{i,j}`` (``num_rows x r``, iid N(0, 1)), drawn on client ``i`` from the run seed."""
    return np.random.default_rng([seed, STREAM_SKETCH, partition_id, j]).standard_normal((num_rows, r))


def sketch(S: np.ndarray, seed: int, partition_id: int, m: int, r: int) -> list[np.ndarray]:
    """Round 1 of Algorithm 1 at a client: ``Y^{i,j} = S_i^T Phi^{i,j}`` for ``j = 0 .. m-1``.

    Returns
    -------
    list of m ndarrays of shape (d, r)
    """
    return [S.T @ sketch_matrix(seed, partition_id, j, S.shape[0], r) for j in range(m)]


def power_product(S: np.ndarray, V: np.ndarray) -> np.ndarray:
    """A power round at a client: ``S_i^T (S_i V)`` (d, r), right to left (no d x d matrix)."""
    return S.T @ (S @ V)


def condition_number(V: np.ndarray) -> float:
    """``kappa(V) = sigma_1(V) / sigma_r(V)`` (inf when ``V`` is rank deficient)."""
    s = np.linalg.svd(V, compute_uv=False)
    return float(s[0] / s[-1]) if s[-1] > 0 else math.inf


def select_sketch(sums: list[np.ndarray]) -> tuple[int, list[float]]:
    """Best of ``m``: the index of the sketch sum with the smallest condition number, and all of them."""
    kappas = [condition_number(Y) for Y in sums]
    return int(np.argmin(kappas)), kappas


def initial_u(seed: int, partition_id: int, num_rows: int, r: int) -> np.ndarray:
    """``U_0^i`` with iid N(0, 1/n_i) entries (the authors' code, spec P4)."""
    rng = np.random.default_rng([seed, STREAM_U0, partition_id])
    return rng.normal(0.0, 1.0 / math.sqrt(num_rows), (num_rows, r))


def mf_loss(S: np.ndarray, U: np.ndarray, V: np.ndarray) -> float:
    """``F_i(U, V) = 1/2 ||S - U V^T||_F^2`` from the residual (spec P12)."""
    return 0.5 * float(np.linalg.norm(S - U @ V.T) ** 2)


def exact_u(S: np.ndarray, V: np.ndarray) -> np.ndarray:
    """Prop. 2: ``U_hat = S V (V^T V)^+`` (n_i, r), the minimiser of ``F_i(., V)``."""
    return (S @ V) @ scipy.linalg.pinvh(V.T @ V)


def local_gd(S: np.ndarray, V: np.ndarray, U0: np.ndarray, T: int, momentum: str = "none",
             step: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Algorithm 2: ``T`` gradient steps on ``U`` with ``V`` fixed, with or without Nesterov momentum.

    Parameters
    ----------
    S : ndarray of shape (n_i, d)
    V : ndarray of shape (d, r)
    U0 : ndarray of shape (n_i, r)
    T : int
        Number of iterations.
    momentum : {"none", "nesterov", "nesterov-sc"}
        ``none``: plain GD; ``nesterov``: ``beta_k = k / (k + 3)`` (k = 0, 1, ...;
        the authors' experiments); ``nesterov-sc``: constant
        ``beta = (kappa(V) - 1) / (kappa(V) + 1)``.
    step : float, optional
        ``gamma``; default ``1 / sigma_max(V)^2``.

    Returns
    -------
    U : ndarray of shape (n_i, r)
        ``U_T``.
    losses : ndarray of shape (T + 1,)
        ``F_i(U_t, V)`` for ``t = 0 .. T``.
    """
    if momentum not in MOMENTA:
        raise ValueError(f"momentum must be one of {MOMENTA}, got {momentum!r}")
    sv = np.linalg.svd(V, compute_uv=False)
    gamma = 1.0 / sv[0] ** 2 if step is None else step
    beta_sc = (sv[0] - sv[-1]) / (sv[0] + sv[-1])
    G, B = V.T @ V, S @ V  # grad = U G - B
    losses = np.empty(T + 1)
    losses[0] = mf_loss(S, U0, V)
    U_prev, Y = U0, U0
    for k in range(T):
        U = Y - gamma * (Y @ G - B)
        beta = 0.0 if momentum == "none" else (k / (k + 3.0) if momentum == "nesterov" else beta_sc)
        Y = U + beta * (U - U_prev) if beta else U
        U_prev = U
        losses[k + 1] = mf_loss(S, U, V)
    return U_prev, losses


def theorem1_bound(kappa: float, t: np.ndarray, initial_excess: float, momentum: str) -> np.ndarray | None:
    """Theorem 1's bound on ``F(U_t, V) - F(U_hat, V)``; ``None`` for ``beta_k = k/(k+3)`` (no such rate).

    Parameters
    ----------
    kappa : float
        ``kappa(V)``.
    t : ndarray of int
        Iterations.
    initial_excess : float
        ``F(U_0, V) - F(U_hat, V)``.
    momentum : {"none", "nesterov", "nesterov-sc"}

    Returns
    -------
    ndarray of the shape of ``t`` or None
        ``(1 - kappa^-2)^t`` (GD) or ``2 (1 - kappa^-1)^t`` (constant-beta
        Nesterov) times ``initial_excess``.
    """
    t = np.asarray(t, dtype=np.float64)
    if momentum == "none":
        return (1.0 - kappa ** -2.0) ** t * initial_excess
    if momentum == "nesterov-sc":
        return 2.0 * (1.0 - 1.0 / kappa) ** t * initial_excess
    return None


def theorem2_kappa2(singular_values: np.ndarray, r: int, alpha: int, p: float, appendix: bool = True) -> float:
    """Theorem 2's ``kappa_p^2``: with probability >= 1 - 3p, ``kappa(V)^2 < kappa_p^2`` (one sketch).

    ``(1/p^2) [9 r^2 (s_1/s_r)^(2(2 alpha + 1)) + 4 r (d + log(2/p)) (s_{r+1}/s_r)^(2 e)]`` with ``e = 2 alpha + 1``
    (the appendix's proof, default) or ``e = alpha`` (the main text), spec P8; ``s`` are the singular values of
    ``S`` and ``d = len(singular_values)`` is taken as the feature dimension when ``n >= d``.
    """
    s = np.asarray(singular_values, dtype=np.float64)
    d = s.size
    e = 2 * alpha + 1 if appendix else alpha
    tail = s[r] / s[r - 1] if d > r else 0.0
    return float((9 * r ** 2 * (s[0] / s[r - 1]) ** (2 * (2 * alpha + 1))
                  + 4 * r * (d + math.log(2 / p)) * tail ** (2 * e)) / p ** 2)


# -- Table 2 baselines: one communication per iteration ----------------------------------------------

def wk_constants(sigma1: float) -> tuple[float, float, float]:
    """Ward & Kolda's step and scales from ``sigma_1(S)``: ``eta = 9 / (4 C mu sigma_1)``, ``C``, ``D = C mu / 9``."""
    return 9.0 / (4.0 * WK_C * WK_MU * sigma1), WK_C, WK_C * WK_MU / 9.0


def wk_init(seed: int, d: int, r: int, sigma1: float) -> tuple[np.ndarray, np.ndarray]:
    """The common ``Phi_U`` scaled for ``U_0^i = S_i Phi_U`` and ``V_0`` of Ward & Kolda (the authors' code).

    ``Phi_U`` has N(0, 1/d^2) entries and ``Phi_V`` N(0, 1/r^2) (std 1/d and 1/r,
    spec P15); both derive from the run seed, so every client has the same.

    Returns
    -------
    PhiU : ndarray of shape (d, r)
        Already divided by ``sqrt(eta) sigma_1 C``: ``U_0^i = S_i PhiU``.
    V0 : ndarray of shape (d, r)
        ``sqrt(eta) sigma_1 D Phi_V``.
    """
    eta, C, D = wk_constants(sigma1)
    rng = np.random.default_rng([seed, STREAM_BASELINE])
    phi_u = rng.normal(0.0, 1.0 / d, (d, r))
    phi_v = rng.normal(0.0, 1.0 / r, (d, r))
    return phi_u / (math.sqrt(eta) * sigma1 * C), math.sqrt(eta) * sigma1 * D * phi_v


def altgd_step(S: np.ndarray, U: np.ndarray, V: np.ndarray, eta: float) -> tuple[np.ndarray, np.ndarray]:
    """One alternating step at a client: ``U <- U - eta (U V^T - S) V``, then ``G = (U V^T - S)^T U`` (new U).

    Returns
    -------
    U : ndarray of shape (n_i, r)
    G : ndarray of shape (d, r)
        The client's part of the V gradient; the server sets ``V <- V - eta sum_i G_i``.
    """
    U = U - eta * ((U @ V.T - S) @ V)
    return U, (U @ V.T - S).T @ U


def simgd_step(S: np.ndarray, U: np.ndarray, V: np.ndarray, eta: float) -> tuple[np.ndarray, np.ndarray]:
    """One simultaneous step at a client: ``G = (U V^T - S)^T U`` and ``U <- U - eta (U V^T - S) V``, both at the old U.

    Returns
    -------
    U : ndarray of shape (n_i, r)
    G : ndarray of shape (d, r)
        A matrix (not summed to a scalar, unlike the authors' code, spec P16).
    """
    R = U @ V.T - S
    return U - eta * (R @ V), R.T @ U


def yd_constants(sigma1: float, sigma_r: float, r: int, n: int, d: int, log10_target: float
                 ) -> tuple[float, float, float]:
    """Ye & Du's init scale, step and predicted iteration count (spec 2.7).

    Returns
    -------
    std : float
        ``sigma_r / (sqrt(sigma_1 r^3) (d + n))``, the std of the initial entries.
    eta : float
        ``sigma_r std^2 / (r sigma_1^3)``.
    T_YD : float
        ``ln(r sigma_r^2 / (std 10^target)) / (eta sigma_r)``.
    """
    std = sigma_r / (math.sqrt(sigma1 * r ** 3) * (d + n))
    eta = sigma_r * std ** 2 / (r * sigma1 ** 3)
    return std, eta, math.log(r * sigma_r ** 2 / (std * 10.0 ** log10_target)) / (eta * sigma_r)
