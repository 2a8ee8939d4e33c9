"""The MF baselines' update rules, pinned by hand-computed iterates (lowrank_mf spec, Algorithm 2 and Table 2).

Each expected iterate is written out here from the spec's formula, independently of fl_strategies.kernels.mf:

* fedmf local GD on ``U`` (``V`` fixed), Nesterov ``beta_k = k / (k + 3)`` (``beta_0 = 0``), step ``1/sigma_max(V)^2``;
* mf-altgd (Ward & Kolda): ``U <- U - eta (U V^T - S) V``, then ``V <- V - eta sum_i (U V^T - S)^T U`` at the *new* U;
* mf-simgd (Ye & Du, done correctly, spec P16): both gradients at the *old* ``(U, V)``.
"""

from __future__ import annotations

import numpy as np
import pytest

from conftest import run_app
from fl_strategies.settings.config import validate_run_config
from fl_strategies.kernels.mf import altgd_step, local_gd, simgd_step, wk_init
from simulations.engines import fused_run_config
from simulations.data.federated_data import federated_dataset


@pytest.fixture
def problem():
    rng = np.random.default_rng(11)
    S = rng.standard_normal((9, 6))
    V = rng.standard_normal((6, 2))
    U0 = 0.1 * rng.standard_normal((9, 2))
    return S, V, U0


def test_local_gd_nesterov_first_three_iterates_by_hand(problem):
    S, V, U0 = problem
    gamma = 1.0 / np.linalg.norm(V, 2) ** 2

    def step(Y):  # gradient of 1/2 ||S - Y V^T||^2 in Y is (Y V^T - S) V
        return Y - gamma * (Y @ V.T - S) @ V

    U1 = step(U0)                      # beta_0 = 0: Y_1 = U_1
    U2 = step(U1)                      # from Y_1 = U_1
    Y2 = U2 + (1 / 4) * (U2 - U1)      # beta_1 = 1/4
    U3 = step(Y2)
    Y3 = U3 + (2 / 5) * (U3 - U2)      # beta_2 = 2/5
    U4 = step(Y3)
    for T, expected in [(1, U1), (2, U2), (3, U3), (4, U4)]:
        U, losses = local_gd(S, V, U0, T, "nesterov")
        np.testing.assert_allclose(U, expected, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(losses, [0.5 * np.linalg.norm(S - W @ V.T) ** 2 for W in (U0, U1, U2, U3, U4)],
                               rtol=1e-12)
    # plain GD: no momentum at all
    np.testing.assert_allclose(local_gd(S, V, U0, 3, "none")[0], step(step(step(U0))), rtol=1e-12)


def test_local_gd_constant_momentum_by_hand(problem):
    S, V, U0 = problem
    sv = np.linalg.svd(V, compute_uv=False)
    gamma, beta = 1.0 / sv[0] ** 2, (sv[0] - sv[1]) / (sv[0] + sv[1])  # (kappa - 1) / (kappa + 1)

    def step(Y):
        return Y - gamma * (Y @ V.T - S) @ V

    U1 = step(U0)
    U2 = step(U1 + beta * (U1 - U0))
    np.testing.assert_allclose(local_gd(S, V, U0, 2, "nesterov-sc")[0], U2, rtol=1e-12)


def test_altgd_step_uses_the_new_u_for_v(problem):
    S, V, U = problem
    eta = 0.05
    U1 = U - eta * (U @ V.T - S) @ V
    G = (U1 @ V.T - S).T @ U1
    out_U, out_G = altgd_step(S, U, V, eta)
    np.testing.assert_allclose(out_U, U1, rtol=1e-12)
    np.testing.assert_allclose(out_G, G, rtol=1e-12)


def test_simgd_step_uses_the_old_u_for_v(problem):
    S, V, U = problem
    eta = 0.05
    G = (U @ V.T - S).T @ U   # at the old U (at the new U it would be alternating GD)
    out_U, out_G = simgd_step(S, U, V, eta)
    np.testing.assert_allclose(out_U, U - eta * (U @ V.T - S) @ V, rtol=1e-12)
    np.testing.assert_allclose(out_G, G, rtol=1e-12)
    assert not np.allclose(out_G, altgd_step(S, U, V, eta)[1], rtol=1e-6)  # the two rules differ here


@pytest.mark.parametrize("strategy", ["mf-simgd", "mf-altgd"])
def test_baseline_losses_follow_the_hand_iterates_end_to_end(strategy, monkeypatch):
    """The federation's loss at iterations 0..3 equals the loss of the spec's rule run by hand on the pooled blocks.

    Ye & Du's step is so small (about 1e-9 here) that simultaneous and alternating GD agree to round-off over a
    few iterations; mf-simgd runs here with Ward & Kolda's step instead, large enough to tell the rules apart.
    """
    import fl_strategies.protocol.strategies.fedmf as fedmf
    from fl_strategies.kernels.mf import wk_constants, yd_constants

    def larger_step(sigma1, *args):
        std, _, count = yd_constants(sigma1, *args)
        return std, wk_constants(sigma1)[0], count

    monkeypatch.setattr(fedmf, "yd_constants", larger_step)
    over = dict(strategy=strategy, dataset="mf-synthetic", num_samples=120, dimension=12, rank=2, num_clients=3,
                mf_noise=1e-3, num_server_rounds=4, partitioner="contiguous", seed=5)
    s = run_app(**over)
    cfg = validate_run_config(fused_run_config({k.replace("_", "-"): v for k, v in over.items()}))
    data, parts = federated_dataset(cfg)
    blocks = [np.asarray(data.X[p], dtype=np.float64) for p in parts]
    eta, seed, r = s.eta, 5, 2
    if strategy == "mf-simgd":
        V = np.random.default_rng([seed, 12, 1]).normal(0.0, s.init_std, (12, r))
        Us = [np.random.default_rng([seed, 12, 2, i]).normal(0.0, s.init_std, (len(B), r))
              for i, B in enumerate(blocks)]
    else:
        PhiU, V = wk_init(seed, 12, r, s.sigma1)
        Us = [B @ PhiU for B in blocks]
    losses = []
    for _ in range(4):
        losses.append(sum(0.5 * np.linalg.norm(B - U @ V.T) ** 2 for B, U in zip(blocks, Us)))
        Rs = [U @ V.T - B for B, U in zip(blocks, Us)]
        newUs = [U - eta * R @ V for U, R in zip(Us, Rs)]
        if strategy == "mf-simgd":
            grad_V = sum(R.T @ U for R, U in zip(Rs, Us))  # old U
        else:
            grad_V = sum((U @ V.T - B).T @ U for B, U in zip(blocks, newUs))  # new U
        Us, V = newUs, V - eta * grad_V
    rows = [row for row in s.records if row.get("phase") == "iterate"]
    got = [row["loss"] for row in rows][:4]
    assert len(got) == 4
    np.testing.assert_allclose(got, losses, rtol=1e-10)
    assert abs(losses[3] - losses[0]) > 1e-5 * losses[0]  # the iterates really moved
