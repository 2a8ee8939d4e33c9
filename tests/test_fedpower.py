"""FedPower and the distributed power method end to end on the in-process engine.

Each test is one of the falsifiable checks of the issue / specs/fedpower.md,
against an exact reference (scipy ``eigh`` on the pooled matrix, or the
centralised power method on it).
"""

import logging

import numpy as np
import pytest

from conftest import distances, run_aborted, run_app
from fl_strategies.kernels.linalg import gaussian_basis, orth, subspace_distance, top_eigenvectors
from fl_strategies.protocol.strategies.eigenspace import STREAM_INIT
from simulations.engines import fused_run_config
from simulations.data.federated_data import federated_dataset

MODEL1 = dict(num_clients=20, num_samples=20_000, dimension=100, rank=4, iteration_rank=5,
              row_normalize=True)  # the paper's Model I has unit-norm rows


def centralised_power(cfg_overrides, rounds):
    """Orthogonal iteration on the pooled (1/n) X^T X from the same Z_0."""
    cfg = fused_run_config({k.replace("_", "-"): v for k, v in cfg_overrides.items()})
    X = federated_dataset(cfg)[0].X
    A = X.T @ X / X.shape[0]
    Z = gaussian_basis(X.shape[1], cfg["iteration-rank"], np.random.default_rng([cfg["seed"], STREAM_INIT]))
    out = [Z]
    for _ in range(rounds):
        Z = orth(A @ Z)
        out.append(Z)
    return out


@pytest.mark.parametrize("strategy, extra", [
    ("fedpower", dict(local_steps=1, schedule="fixed", alignment="opt")),
    ("fedpower", dict(local_steps=1, schedule="fixed", alignment="none")),
    ("power", dict(local_steps=3)),  # the baseline fixes p = 1 (logged; a noise setting would be refused)
])
@pytest.mark.usefixtures("every_iterate")
def test_p1_noise_free_full_participation_is_the_centralised_power_method(strategy, extra):
    over = dict(MODEL1, strategy=strategy, num_server_rounds=25, **extra)
    fed = run_app(**over).iterates
    ref = centralised_power(over, 25)
    assert len(fed) == 26
    worst = max(np.abs(a - b).max() for a, b in zip(fed, ref))
    assert worst < 1e-12


@pytest.mark.usefixtures("every_iterate")
def test_unequal_partitions_still_iterate_the_pooled_covariance():
    """Weights s_i / n make the server iterate (1/n) M^T M even with label skew."""
    over = dict(dataset="digits", dimension=0, num_samples=0, partitioner="dirichlet", dirichlet_alpha=0.3,
                num_clients=7, rank=3, iteration_rank=3, local_steps=1, schedule="fixed", num_server_rounds=12)
    strategy = run_app(**over)
    assert len(set(strategy.sizes.values())) > 1  # the partitions really differ in size
    worst = max(np.abs(a - b).max() for a, b in zip(strategy.iterates, centralised_power(over, 12)))
    assert worst < 1e-12


@pytest.mark.parametrize("p", [1, 2, 4])
def test_decayed_schedule_reaches_machine_precision_for_every_p(p):
    d = distances(run_app(**MODEL1, local_steps=p, schedule="decayed", num_server_rounds=30))
    assert d[0] > 0.5
    assert d[-1] < 1e-10


def rounds_to(d, threshold):
    hit = np.flatnonzero(d <= threshold)
    return int(hit[0]) if hit.size else None


def test_local_steps_save_communication():
    """p = 4 (decayed) needs at most half the rounds of p = 1 to reach 1e-4.

    At 20 x 1000 rows it needs 6 rounds against 10 (the heterogeneity floor of
    the first, long rounds scales like 1/s); from 4000 rows per client on it is 5
    against 10, and the spec's n = 2e6 gives 4 against 10.
    """
    over = dict(MODEL1, num_samples=80_000, schedule="decayed", num_server_rounds=14)
    r1 = rounds_to(distances(run_app(**over, local_steps=1)), 1e-4)
    r4 = rounds_to(distances(run_app(**over, local_steps=4)), 1e-4)
    assert r1 is not None and r4 is not None
    assert r4 <= r1 / 2, (r4, r1)


@pytest.mark.parametrize("p, spec_floor_opt, spec_floor_none", [(2, 3.7e-5, 5.1e-5), (4, 6.2e-5, 1.2e-4)])
def test_fixed_p_stalls_at_the_floor_the_spec_predicts(p, spec_floor_opt, spec_floor_none):
    """Fixed p > 1 without noise plateaus; spec check 5 gives the plateau at n = 2e6.

    The plateau comes from the clients' heterogeneity and falls like 1/s (measured:
    3.70e-3, 9.09e-4, 3.62e-4 for p = 2 at n = 2e4, 8e4, 2e5), so at n = 8e4 the
    spec's values are expected 25 times larger.
    """
    scale = 2e6 / 80_000
    floors = {}
    for alignment in ("opt", "none"):
        d = distances(run_app(**dict(MODEL1, num_samples=80_000), local_steps=p, schedule="fixed",
                              num_server_rounds=20, alignment=alignment))
        tail = d[-4:]
        assert np.ptp(tail) < 0.03 * tail.mean()  # stalled
        floors[alignment] = tail.mean()
    assert floors["opt"] == pytest.approx(spec_floor_opt * scale, rel=0.15)
    assert floors["none"] == pytest.approx(spec_floor_none * scale, rel=0.25)
    assert floors["opt"] < floors["none"]


@pytest.mark.parametrize("eps, expected", [(0.5, 0.19), (1.0, 0.096), (10.0, 0.0096)])
def test_noise_floor_matches_the_spec_and_is_linear_in_nu(eps, expected):
    """Model I, p = 2 decayed, T = 10, with the nu Theorem 6 gives at the paper's n = 2e6.

    The floor depends on nu, the eigengap, m and d, not on n, so the spec's
    plateaus (check 3: 0.19 / 0.096 / 0.0096) are reproduced at n = 2e4 with the
    same nu (median of 3 seeds).
    """
    from fl_strategies.privacy.fedpower_dp import noise_std

    nu = noise_std(eps, 1e-4, 10, 5, 100_000)
    finals = [distances(run_app(**MODEL1, local_steps=2, total_iterations=10, noise_std=nu, seed=s))[-1]
              for s in range(3)]
    assert np.median(finals) == pytest.approx(expected, rel=0.12)
    assert np.median(finals) / nu == pytest.approx(0.19 / 2.428e-3, rel=0.12)  # floor / nu is constant


def test_theorem6_noise_is_what_the_clients_add_and_what_is_reported():
    from client_app.data import NodeData
    from client_app.fedpower_client import FedPowerClient
    from flwr.common import Context, RecordDict

    cfg = dict(fused_run_config({"epsilon": 0.5, "total-iterations": 10, "iteration-rank": 5,
                                       "row-normalize": True}))
    from fl_strategies.settings.config import validate_run_config

    cfg = validate_run_config(cfg)
    client = FedPowerClient(NodeData.of(0, covariance=(np.eye(100), 100_000)), cfg, Context(1, 1, {}, RecordDict(), {}))
    assert client.noise_std == pytest.approx(2.428e-3, rel=1e-3)
    strategy = run_app(**MODEL1, local_steps=2, total_iterations=10, epsilon=0.5)
    # s_i = 1000 here, so nu is 100 times the paper's; the reported epsilon is the one achieved
    assert strategy.records[-1]["epsilon_spent"] == pytest.approx(0.2517, rel=1e-3)
    assert strategy.records[0]["epsilon_spent"] == 0.0
    assert distances(strategy)[-1] > 0.9  # at this n the calibrated noise drowns the signal


def test_opt_alignment_beats_plain_averaging_on_heterogeneous_clients():
    """digits split by label (one or two digits per client), r = k = 4, fixed p = 8."""
    over = dict(dataset="digits", dimension=0, num_samples=0, partitioner="label", num_clients=10, rank=4,
                iteration_rank=4, local_steps=8, schedule="fixed", num_server_rounds=5)
    opt = run_app(**over, alignment="opt")
    none = run_app(**over, alignment="none")
    assert np.all(distances(opt)[1:] < distances(none)[1:])
    assert opt.records[-1]["misalignment"] < none.records[-1]["misalignment"]


def test_partial_participation_samples_with_replacement_and_is_seeded():
    over = dict(MODEL1, clients_per_round=8, local_steps=2, num_server_rounds=6)
    a, b = run_app(**over, seed=3), run_app(**over, seed=3)
    assert np.array_equal(distances(a), distances(b))
    assert all(r["participants"] == 8 for r in a.records[1:])
    assert any(r["distinct_participants"] < 8 for r in a.records[1:])  # duplicates happen
    # unbiased sampling (spec check 9): every partition is drawn K/m times per round on average
    counts = np.zeros(20)
    for rnd in range(1, 2001):
        for pid, c in a._sample(rnd).items():
            counts[pid] += c
    np.testing.assert_allclose(counts / 2000, 8 / 20, rtol=0.1)
    # the reference client is asked every round and costs one download even when not sampled
    down = [r["bytes_down"] for r in a.records[1:]]
    assert min(down) > 0


def test_results_do_not_depend_on_node_ids():
    """Sampling is over partition ids, so Flower's random node ids do not change the numbers."""
    over = dict(MODEL1, clients_per_round=8, local_steps=2, num_server_rounds=5, noise_std=1e-3)
    a = run_app(**over)
    ids = list(np.random.default_rng(9).permutation(np.arange(500, 520)))
    b = run_app(node_ids=[int(i) for i in ids], **over)
    np.testing.assert_array_equal(distances(a), distances(b))


def test_reference_client_dropping_out_is_replaced(caplog):
    def drop_reference_in_round_2(msg, pid):
        return "drop" if pid == 0 and msg.metadata.group_id == "2" else "ok"

    over = dict(MODEL1, local_steps=3, schedule="fixed", num_server_rounds=4)
    with caplog.at_level(logging.WARNING, logger="flwr"):
        strategy = run_app(fault_fn=drop_reference_in_round_2, **over)
    assert "reference client 0 did not answer" in caplog.text
    assert strategy.records[2]["participants"] == 19
    assert np.all(np.isfinite(distances(strategy)))
    assert distances(strategy)[-1] < 0.05


def test_failed_clients_are_counted_and_the_run_goes_on():
    def fail_three(msg, pid):
        return "error" if pid in (3, 4, 5) and msg.metadata.message_type == "train" else "ok"

    over = dict(MODEL1, local_steps=1, schedule="fixed", num_server_rounds=15)
    strategy = run_aborted(r"^summary: partition\(s\) 3, 4, 5 did not answer", fault_fn=fail_three,
                           **over)  # the rounds go on without them; the model of every client's rows cannot
    assert all(r["failures"] == 3 and r["participants"] == 17 for r in strategy.records[1:])
    # the run converges to the eigenspace of the 17 clients that answered
    data, parts = federated_dataset(fused_run_config({k.replace("_", "-"): v for k, v in over.items()}))
    X = data.X[np.concatenate([parts[i] for i in range(20) if i not in (3, 4, 5)])]
    _, U = top_eigenvectors(X.T @ X, 4)
    assert subspace_distance(strategy.iterates[-1], U) < 1e-4
    assert distances(strategy)[-1] > 1e-3  # ... which is not the pooled one


def test_client_refuses_steps_beyond_its_privacy_budget():
    from client_app.data import NodeData
    from client_app.fedpower_client import FedPowerClient
    from fl_strategies.settings.config import validate_run_config
    from flwr.common import Context, RecordDict

    cfg = validate_run_config(fused_run_config({"epsilon": 1.0, "total-iterations": 3, "local-steps": 2,
                                                         "row-normalize": True}))
    client = FedPowerClient(NodeData.of(0, covariance=(np.eye(50), 100)), cfg, Context(1, 1, {}, RecordDict(), {}))
    Z = orth(np.random.default_rng(0).standard_normal((50, 5)))
    client.fit([Z], {"local-steps": 2, "round": 1})
    client.fit([Z], {"local-steps": 1, "round": 2})
    with pytest.raises(RuntimeError, match="privacy budget"):
        client.fit([Z], {"local-steps": 1, "round": 3})
    # a node whose state is new (a run resumed from a checkpoint) counts from the round's iteration offset
    fresh = FedPowerClient(NodeData.of(0, covariance=(np.eye(50), 100)), cfg, Context(1, 1, {}, RecordDict(), {}))
    fresh.fit([Z], {"local-steps": 1, "round": 2, "iteration-offset": 2})
    with pytest.raises(RuntimeError, match="privacy budget exhausted: 3 \\+ 1 local steps exceed T = 3"):
        FedPowerClient(NodeData.of(0, covariance=(np.eye(50), 100)), cfg, Context(1, 1, {}, RecordDict(), {})).fit(
            [Z], {"local-steps": 1, "round": 3, "iteration-offset": 3})


def test_model2_multilayer_sbm_matches_the_spec():
    """Model II (20 SBM layers of 1000 nodes, k = r = 2), noise free (spec section 5.4).

    Expected: p = 1 reaches ~3e-12 at 10 communications, decayed p = 2 ~2.5e-13, fixed p = 2
    plateaus at 1.5-1.8e-3 because the layers are very heterogeneous (eta ~ 0.19).
    """
    over = dict(dataset="fedpower-model2", partitioner="group", num_clients=20, dimension=1000, rank=2,
                iteration_rank=2, num_server_rounds=10)
    assert distances(run_app(**over, local_steps=1))[-1] < 3e-11
    assert distances(run_app(**over, local_steps=2, schedule="decayed"))[-1] < 3e-12
    tail = distances(run_app(**over, local_steps=2, schedule="fixed"))[-4:]
    assert np.all((tail > 1.2e-3) & (tail < 2.0e-3))
