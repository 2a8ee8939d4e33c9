"""fedmf (power-initialised V, local GD on U) and the Table 2 baselines, against exact references."""

from __future__ import annotations

import csv

import numpy as np
import pytest
import scipy.linalg
from conftest import run_aborted, run_app

from fl_strategies.settings.config import validate_run_config
from fl_strategies.kernels.mf import (MFReference, condition_number, exact_u, initial_u, local_gd, mf_loss,
                                         power_product, sketch_matrix, theorem1_bound)
from simulations.data.datasets import load_dataset
from simulations.engines import fused_run_config
from simulations.data.federated_data import federated_dataset

SMALL = dict(strategy="fedmf", dataset="mf-synthetic", num_samples=600, dimension=40, rank=4, num_clients=5,
             partitioner="iid", mf_noise=1e-3, local_iterations=60)


def pooled(**overrides):
    """The pooled ``S`` in partition order and the row counts, as the federation holds it."""
    cfg = validate_run_config(fused_run_config({k.replace("_", "-"): v for k, v in overrides.items()}))
    data, parts = federated_dataset(cfg)
    return np.vstack([data.X[p] for p in parts]), [len(p) for p in parts], cfg


def solve_rows(strategy):
    return [r for r in strategy.records if r["phase"] == "solve"]


@pytest.mark.parametrize("alpha,partitioner", [(0, "iid"), (2, "contiguous"), (1, "label")])
def test_federated_v_is_the_centralised_power_iterate(alpha, partitioner):
    over = dict(SMALL, power_steps=alpha, num_sketches=4, partitioner=partitioner, seed=3)
    if partitioner == "label":  # digits split by label: heterogeneous, unequal n_i
        over.update(dataset="digits", num_samples=0, dimension=0, num_clients=10, rank=5)
    strategy = run_app(**over)
    S, sizes, cfg = pooled(**over)
    r = cfg["rank"]
    phis = [np.vstack([sketch_matrix(3, i, j, n_i, r) for i, n_i in enumerate(sizes)]) for j in range(4)]
    kappas = [condition_number(S.T @ P) for P in phis]
    assert strategy.chosen == int(np.argmin(kappas))  # best of m on the alpha = 0 sketch (spec P3)
    np.testing.assert_allclose(strategy.kappas, kappas, rtol=1e-10)
    V = S.T @ phis[strategy.chosen]
    for _ in range(alpha):
        V = S.T @ (S @ V)
    assert np.linalg.norm(strategy.estimate - V) <= 1e-12 * np.linalg.norm(V)
    rows = solve_rows(strategy)
    assert [r["communications"] for r in rows] == [alpha + 1] * len(rows)
    assert len(strategy.records) == 1 + alpha + 1 + SMALL["local_iterations"] + 1
    # the exact loss is 1/2 ||S - S P_V||_F^2 of the pooled matrix; eps_min from its SVD
    Q = scipy.linalg.orth(V)
    np.testing.assert_allclose(rows[0]["exact_loss"], 0.5 * np.linalg.norm(S - S @ Q @ Q.T) ** 2, rtol=1e-9)
    s = np.linalg.svd(S, compute_uv=False)
    np.testing.assert_allclose(rows[0]["eps_min"], 0.5 * np.sum(s[r:] ** 2), rtol=1e-10)


def _protocol(blocks, phi_blocks, u0_blocks, alpha, T, momentum, weights=None):
    """The fedmf protocol on given row blocks with unweighted (or weighted, for the P1 guard) sums."""
    w = weights or [1.0] * len(blocks)
    V = sum(wi * S.T @ P for wi, S, P in zip(w, blocks, phi_blocks))
    for _ in range(alpha):
        V = sum(wi * power_product(S, V) for wi, S in zip(w, blocks))
    return V, sum(local_gd(S, V, U0, T, momentum)[1] for S, U0 in zip(blocks, u0_blocks))


def _gd_losses_by_hand(S, V, U0, T, momentum):
    """Spec Algorithm 2: U_{k+1} = Y_k - gamma (Y_k V^T - S) V, Y_{k+1} = U_{k+1} + beta_k (U_{k+1} - U_k)."""
    sv = np.linalg.svd(V, compute_uv=False)
    gamma = 1 / sv[0] ** 2
    U, Y, losses = U0, U0, [0.5 * np.linalg.norm(S - U0 @ V.T) ** 2]
    for k in range(T):
        U_next = Y - gamma * (Y @ V.T - S) @ V
        beta = {"none": 0.0, "nesterov": k / (k + 3), "nesterov-sc": (sv[0] - sv[-1]) / (sv[0] + sv[-1])}[momentum]
        Y, U = U_next + beta * (U_next - U), U_next
        losses.append(0.5 * np.linalg.norm(S - U @ V.T) ** 2)
    return np.array(losses)


@pytest.mark.parametrize("momentum", ["none", "nesterov", "nesterov-sc"])
def test_loss_trajectory_does_not_depend_on_the_row_partition(momentum):
    rng = np.random.default_rng(0)
    S = load_dataset("mf-decay", num_samples=300, dimension=30, rank=3, num_clients=1, seed=1,
                     row_normalize=False).X
    Phi, U0 = rng.standard_normal((300, 3)), rng.standard_normal((300, 3)) / 10
    V_c = S.T @ (S @ (S.T @ Phi))
    V_1, ref = _protocol([S], [Phi], [U0], 1, 40, momentum)
    np.testing.assert_allclose(V_1, V_c, rtol=1e-12)
    # the reference trajectory is Algorithm 2 written out here, not local_gd
    np.testing.assert_allclose(ref, _gd_losses_by_hand(S, V_c, U0, 40, momentum), rtol=1e-10)
    for cuts in ([60, 120, 180, 240], [3, 250], sorted(rng.choice(np.arange(1, 300), 24, replace=False))):
        order = rng.permutation(len(cuts) + 1)  # any client order
        blocks = [np.split(a, cuts) for a in (S, Phi, U0)]
        V, traj = _protocol(*[[b[i] for i in order] for b in blocks], 1, 40, momentum)
        assert np.linalg.norm(V - V_c) <= 1e-12 * np.linalg.norm(V_c)
        np.testing.assert_allclose(traj, ref, rtol=1e-10)
    # n_i-weighted aggregation is not a power iteration of S
    blocks = [np.split(a, [60, 200]) for a in (S, Phi, U0)]
    V_w, _ = _protocol(*blocks, 1, 40, momentum, weights=[60 / 300, 140 / 300, 100 / 300])
    assert np.linalg.norm(V_w / np.linalg.norm(V_w) - V_c / np.linalg.norm(V_c)) > 1e-3


@pytest.mark.parametrize("momentum,alpha", [("none", 0), ("none", 1), ("nesterov-sc", 1), ("nesterov-sc", 0)])
def test_theorem1_bound_holds_at_every_iteration(momentum, alpha):
    strategy = run_app(**dict(SMALL, dataset="mf-decay", momentum=momentum, power_steps=alpha,
                              local_iterations=150))
    rows = solve_rows(strategy)
    F0 = rows[0]["loss"]
    assert rows[0]["kappa_v"] > 2  # the bound is not trivial here
    for row in rows:
        assert row["excess_fixed_v"] <= row["theorem1_bound"] * (1 + 1e-9) + 1e-12 * F0, row["iteration"]
        assert row["excess_fixed_v"] >= -1e-9 * F0  # U_hat is the minimiser
    if alpha == 0:  # with alpha = 1, kappa(V) is large on this spectrum (spec Drawback 1) and GD is slow
        assert rows[-1]["excess_fixed_v"] < 1e-3 * rows[0]["excess_fixed_v"]


def test_theorem1_bound_kernel_with_exact_values():
    assert theorem1_bound(2.0, np.array([0, 1, 2]), 1.0, "none") == pytest.approx([1, 0.75, 0.5625])
    assert theorem1_bound(2.0, np.array([0, 2]), 1.0, "nesterov-sc") == pytest.approx([2, 0.5])
    assert theorem1_bound(2.0, np.array([0]), 1.0, "nesterov") is None


def test_closed_form_and_orthogonalised_one_step():
    S = load_dataset("mf-decay", num_samples=200, dimension=25, rank=4, num_clients=1, seed=0,
                     row_normalize=False).X
    V = S.T @ np.random.default_rng(1).standard_normal((200, 4))
    U_hat = exact_u(S, V)
    np.testing.assert_allclose(U_hat, np.linalg.lstsq(V, S.T, rcond=None)[0].T, rtol=1e-9, atol=1e-12)
    Q = np.linalg.qr(V)[0]
    U1, losses = local_gd(S, Q, initial_u(0, 0, 200, 4), 1, "none")  # Remark 4: gamma = 1, one step
    assert np.linalg.norm(U1 - exact_u(S, Q)) <= 1e-12 * np.linalg.norm(U1)
    assert losses[1] == pytest.approx(mf_loss(S, U_hat, V), rel=1e-10)
    exact = run_app(**dict(SMALL, u_solver="exact"))
    orth = run_app(**dict(SMALL, u_solver="orth", local_iterations=3))
    (row,) = solve_rows(exact)
    assert row["loss"] == row["exact_loss"]
    o = solve_rows(orth)
    assert o[1]["loss"] == pytest.approx(row["exact_loss"], rel=1e-10)
    np.testing.assert_allclose(scipy.linalg.orth(orth.estimate) @ scipy.linalg.orth(orth.estimate).T,
                               scipy.linalg.orth(exact.estimate) @ scipy.linalg.orth(exact.estimate).T, atol=1e-10)


def test_low_rank_data_are_reconstructed_exactly():
    """Prop. 3: without noise and r = r_*, F(U_hat, V) is at machine precision."""
    strategy = run_app(**dict(SMALL, mf_noise=0.0, u_solver="exact", power_steps=0))
    S, _, _ = pooled(**dict(SMALL, mf_noise=0.0))
    assert solve_rows(strategy)[0]["loss"] <= 1e-25 * np.linalg.norm(S) ** 2


def test_power_steps_shrink_the_gap_to_the_svd_optimum_on_the_step_spectrum():
    """Spec check 4 (n = 2000, d = 200, r = 5, xi = 0.1): each power step multiplies the gap by about xi^4."""
    S = load_dataset("mf-step", num_samples=2000, dimension=200, rank=5, num_clients=1, seed=0,
                     row_normalize=False, mf_noise=0.1).X
    eps_min = MFReference.from_matrix(S, 5).eps_min
    assert eps_min == pytest.approx(0.5 * 195 * 0.01)
    V = S.T @ sketch_matrix(0, 0, 0, 2000, 5)
    gaps = []
    for _ in range(3):
        gaps.append(mf_loss(S, exact_u(S, V), V) - eps_min)
        V = power_product(S, V)
    assert 0.3 < gaps[0] < 3
    assert gaps[1] < 2e-3 * gaps[0] and gaps[2] < 2e-3 * gaps[1] and gaps[2] > 0


def test_nesterov_needs_fewer_iterations_than_gd_and_reaches_the_table2_accuracy_with_one_communication():
    over = dict(strategy="fedmf", dataset="mf-synthetic", num_samples=5000, dimension=200, rank=5, num_clients=25,
                partitioner="contiguous", mf_noise=1e-6, power_steps=0, num_sketches=20, local_iterations=200)
    first = {}
    for momentum in ("none", "nesterov"):
        rows = solve_rows(run_app(**dict(over, momentum=momentum)))
        first[momentum] = next(r["iteration"] for r in rows if r["log10_excess_loss"] <= -5.5)
        assert rows[-1]["communications"] == 1
    assert first["nesterov"] < first["none"] <= 200


def test_ward_kolda_needs_tens_of_communications_on_the_synthetic_data(tmp_path):
    over = dict(strategy="mf-altgd", dataset="mf-synthetic", num_samples=5000, dimension=200, rank=5,
                num_clients=25, partitioner="contiguous", mf_noise=1e-6, num_server_rounds=100,
                results_dir=str(tmp_path))
    strategy = run_app(**over)
    last = strategy.records[-1]
    assert 20 <= last["communications"] <= 30 and last["log10_excess_loss"] <= -5.5  # spec: 23-26
    assert all(r["log10_excess_loss"] > -5.5 for r in strategy.records[:-1])
    assert [r["communications"] for r in strategy.records] == list(range(len(strategy.records)))
    with open(tmp_path / "rounds.csv", newline="") as fh:
        assert len(list(csv.DictReader(fh))) == len(strategy.records)
    assert np.load(tmp_path / "estimate.npy").shape == (200, 5)


def test_simultaneous_gd_baseline_uses_a_matrix_gradient_and_the_predicted_count():
    """Ye & Du's constants by hand (spec 2.7); the update rule itself is pinned in test_mf_update_rules.py."""
    over = dict(strategy="mf-simgd", dataset="mf-synthetic", num_samples=500, dimension=40, rank=3,
                num_clients=5, mf_noise=1e-6, num_server_rounds=5)
    strategy = run_app(**over)
    for data_over in ({}, dict(dataset="mf-decay", num_server_rounds=1)):  # sigma_1 = 1, then sigma_i = 100 / i
        s_over = dict(over, **data_over)
        st_ = strategy if not data_over else run_app(**s_over)
        S, sizes, cfg = pooled(**s_over)
        s = np.linalg.svd(S, compute_uv=False)
        r, n, d = 3, S.shape[0], S.shape[1]
        std = s[r - 1] / (np.sqrt(s[0] * r ** 3) * (d + n))
        eta = s[r - 1] * std ** 2 / (r * s[0] ** 3)
        assert st_.init_std == pytest.approx(std, rel=1e-9) and st_.eta == pytest.approx(eta, rel=1e-9)
    assert len(strategy.records) == 6 and strategy.predicted_iterations > 1e6
    assert np.linalg.matrix_rank(strategy.V) == 3  # a matrix step, not a scalar (spec P16)


def test_a_missing_client_stops_the_run_without_a_result():
    def fault(msg, pid):
        return "error" if pid == 2 and msg.metadata.message_type.startswith("train") else "ok"

    strategy = run_aborted(fault_fn=fault, **SMALL)
    assert strategy.losses is None
    assert strategy.records[-1]["failures"] == 1


def test_comparison_and_report_count_communications(tmp_path):
    from simulations.compare import run_comparison
    from simulations.experiments.fedmf.fedmf_report import main as report

    config = tmp_path / "mf.toml"
    config.write_text("""
metric = "excess_loss"
thresholds = [1e-3]
seeds = [0, 1]
[defaults]
dataset = "mf-synthetic"
num-samples = 400
dimension = 30
rank = 3
num-clients = 4
mf-noise = 1e-4
local-iterations = 300
num-sketches = 10
target-log-excess = -3
[[runs]]
name = "fedmf"
strategy = "fedmf"
power-steps = 1
[[runs]]
name = "wk"
strategy = "mf-altgd"
""")
    results = run_comparison(config, out=tmp_path / "out")
    from simulations.compare.cli import estimate_stem

    assert np.load(tmp_path / "out" / "estimates" / f"{estimate_stem('fedmf', 0)}.npy").shape == (30, 3)
    assert set(results["phase"]) >= {"init", "sketch", "power", "solve", "iterate"}
    assert report([str(tmp_path / "out"), "--target", "-3"]) == 0
    table = (tmp_path / "out" / "table2.md").read_text()
    assert "| fedmf | fedmf | 2 | 2 | 2 |" in table  # alpha + 1 = 2 communications on both seeds
    assert (tmp_path / "out" / "convergence.png").stat().st_size > 0


@pytest.mark.parametrize("alpha", [0, 1])
def test_theorem2_condition_bound_holds_with_the_stated_probability(alpha):
    """Spec check 6: over 500 single sketches, P[kappa(V)^2 < kappa_p^2] >= 1 - 3p for both constant versions."""
    from fl_strategies.kernels.mf import theorem2_kappa2

    S = load_dataset("mf-synthetic", num_samples=1000, dimension=100, rank=5, num_clients=1, seed=0,
                     row_normalize=False, mf_noise=1e-6).X
    s = np.linalg.svd(S, compute_uv=False)
    rng = np.random.default_rng(7)
    kappa2 = []
    for _ in range(500):
        V = S.T @ rng.standard_normal((1000, 5))
        for _ in range(alpha):
            V = power_product(S, V)
        kappa2.append(condition_number(V) ** 2)
    kappa2 = np.array(kappa2)
    for p in (0.05, 0.1, 0.2, 0.3):
        for appendix in (True, False):
            assert np.mean(kappa2 < theorem2_kappa2(s, 5, alpha, p, appendix)) >= 1 - 3 * p
    assert theorem2_kappa2(np.array([2.0, 1.0, 0.5]), 2, 0, 0.5) == pytest.approx(4 * (9 * 4 * 4 + 8 * (3 + np.log(4)) * 0.25))
