"""Participation: seeded sampling, the virtual-time straggler model and the server policies (in-process engine)."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import distances, run_app
from fl_strategies.settings.config import ConfigError, validate_run_config
from fl_strategies.protocol.strategies.eigenspace import STREAM_SAMPLING as EIGENSPACE_STREAM_SAMPLING
from fl_strategies.settings.participation import STREAM_LATENCY, STREAM_SAMPLING, Participation, sample_partitions
from simulations.engines import fused_run_config

# a small FedPower instance: m = 10 clients, p = 1 (no alignment), no noise
SMALL = dict(dataset="fedpower-model1", num_samples=4000, dimension=20, num_clients=10, rank=2, iteration_rank=3,
             local_steps=1, schedule="fixed", num_server_rounds=25)
STRAGGLERS = dict(latency_model="shifted-exp", latency_upload=0.5, slow_fraction=0.3, slow_factor=4.0)


def cfg_of(**over):
    return validate_run_config(fused_run_config({k.replace("_", "-"): v for k, v in over.items()}))


def arrivals_by_the_documented_model(seed, server_round, pids, work, shift=1.0, scale=1.0, upload=0.5,
                                     slow_fraction=0.3, slow_factor=4.0, dropout=0.0):
    """The module docstring's recipe, written out independently of Participation.latency (shifted-exp)."""
    out = {}
    for pid in pids:
        rng = np.random.default_rng([seed, STREAM_LATENCY, server_round, pid])
        u, x = rng.random(), rng.gamma(work, 1.0)
        up = rng.exponential(upload) if upload > 0 else 0.0
        slow = np.random.default_rng([seed, 21, pid]).random() < slow_fraction
        out[pid] = np.inf if u < dropout else (work * shift + scale * x + up) * (slow_factor if slow else 1.0)
    return out


def replies_seen(strategy_runs):
    """An observer that records (round, partition) of every accepted reply."""
    seen = []
    return seen, (lambda rnd, pid, broadcast, arrays: seen.append((rnd, pid)))


# -- sampling ---------------------------------------------------------------------------------------------------------

def test_one_stream_tag_for_sampling():
    """Sampling draws from its own stream (tag 1), never the init (0), noise (2) or latency stream of the seed."""
    from fl_strategies.privacy.noise import STREAM_NOISE
    from fl_strategies.protocol.strategies.eigenspace import STREAM_INIT
    tags = [STREAM_INIT, STREAM_SAMPLING, STREAM_NOISE, STREAM_LATENCY]
    assert len(set(tags)) == len(tags) and EIGENSPACE_STREAM_SAMPLING == 1
    for seed, rnd in [(0, 1), (5, 3)]:  # the draw is the documented one: (seed, 1, round), K = 4 of m = 9
        counts = np.bincount(np.random.default_rng([seed, 1, rnd]).integers(0, 9, size=4), minlength=9)
        assert sample_partitions(seed, rnd, 9, 4, replace=True) == {p: int(c) for p, c in enumerate(counts) if c}


@pytest.mark.parametrize("seed", [0, 1, 7])
def test_with_replacement_is_fedpowers_former_draw(seed):
    m, K = 20, 8
    for rnd in range(1, 30):  # the draw FedPowerStrategy._sample made before this module existed
        rng = np.random.default_rng([seed, STREAM_SAMPLING, rnd])
        counts = np.bincount(rng.integers(0, m, size=K), minlength=m)
        assert sample_partitions(seed, rnd, m, K, replace=True) == {p: int(c) for p, c in enumerate(counts) if c}
    assert sample_partitions(seed, 3, m, m, replace=True) == {p: 1 for p in range(m)}  # K = m: everyone


@pytest.mark.parametrize("seed", [0, 3])
def test_without_replacement_is_fedaves_former_draw_and_never_repeats(seed):
    m = 12
    for K in (1, 5, 11):
        for rnd in range(1, 40):
            rng = np.random.default_rng([seed, STREAM_SAMPLING, rnd])
            former = sorted(int(i) for i in rng.choice(m, size=K, replace=False))
            drawn = sample_partitions(seed, rnd, m, K, replace=False)
            assert list(drawn) == former and set(drawn.values()) == {1} and len(drawn) == K


def test_sampling_key_overrides_the_strategys_rule():
    cfg = cfg_of(strategy="fedpower", num_clients=10, clients_per_round=6)
    assert Participation(cfg, "with-replacement").replace
    assert not Participation(dict(cfg, sampling="without-replacement"), "with-replacement").replace
    s = run_app(sampling="without-replacement", clients_per_round=6, **dict(SMALL, num_server_rounds=8))
    assert all(r["participants"] == r["distinct_participants"] == 6 for r in s.records[1:])


# -- the straggler model and the server policies ------------------------------------------------------------------

def test_first_k_keeps_the_k_earliest_and_closes_at_the_kth():
    p = Participation(cfg_of(round_policy="first-k", first_k=3, **STRAGGLERS))
    for rnd in range(1, 20):
        plan = p.plan(rnd, range(10), work=2)
        arr = arrivals_by_the_documented_model(0, rnd, range(10), 2)
        order = sorted(range(10), key=lambda i: (arr[i], i))
        assert plan.kept == sorted(order[:3]) and plan.late == sorted(order[3:]) and plan.dropped == []
        assert plan.round_time == pytest.approx(arr[order[2]], rel=1e-12)


def test_deadline_drops_exactly_the_late_ones():
    closes = set()
    for deadline in (3.0, 16.0):
        p = Participation(cfg_of(round_policy="deadline", deadline=deadline, **STRAGGLERS))
        for rnd in range(1, 30):
            plan = p.plan(rnd, range(10), work=1)
            arr = arrivals_by_the_documented_model(0, rnd, range(10), 1)
            assert plan.kept == [i for i in range(10) if arr[i] <= deadline]
            assert plan.late == [i for i in range(10) if arr[i] > deadline]
            assert plan.round_time == (deadline if plan.late else pytest.approx(max(arr.values())))
            closes.add(plan.round_time == deadline)
    assert closes == {True, False}  # both cases occurred: closed at the deadline, and early


def test_dropout_removes_clients_and_all_waits_for_the_rest():
    p = Participation(cfg_of(dropout=0.3, **STRAGGLERS))
    dropped = 0
    for rnd in range(1, 60):
        plan = p.plan(rnd, range(10))
        arr = arrivals_by_the_documented_model(0, rnd, range(10), 1, dropout=0.3)
        assert plan.dropped == [i for i in range(10) if np.isinf(arr[i])]
        assert plan.kept == [i for i in range(10) if np.isfinite(arr[i])] and plan.late == []
        assert plan.round_time == pytest.approx(max([arr[i] for i in plan.kept], default=0.0))
        dropped += len(plan.dropped)
    assert 0.2 < dropped / 590 < 0.4


def test_slow_devices_are_fixed_for_the_run_and_slower():
    p = Participation(cfg_of(latency_model="shifted-exp", slow_fraction=0.5, slow_factor=10.0))
    slow = [i for i in range(40) if p.is_slow(i)]
    assert 10 < len(slow) < 30
    mean = lambda ids: np.mean([p.latency(r, i) for r in range(1, 30) for i in ids])  # noqa: E731
    assert mean(slow) > 5 * mean(sorted(set(range(40)) - set(slow)))


def test_pareto_is_heavier_tailed_than_shifted_exp():
    draws = {}
    for model in ("shifted-exp", "pareto"):
        p = Participation(cfg_of(latency_model=model, latency_tail=1.5))
        draws[model] = np.array([p.latency(r, i) for r in range(1, 200) for i in range(10)])
    assert draws["pareto"].max() > 3 * draws["shifted-exp"].max()


def test_no_straggler_setting_means_everyone_at_time_zero():
    p = Participation(cfg_of())
    plan = p.plan(4, [3, 1, 2], extra=[0])
    assert not p.timed and plan.kept == [1, 2, 3] and plan.extra == [0] and plan.round_time == 0.0


# -- end to end ---------------------------------------------------------------------------------------------------------

def test_a_straggler_run_is_reproducible_and_the_seed_matters():
    over = dict(SMALL, num_server_rounds=10, round_policy="first-k", first_k=4, dropout=0.1, **STRAGGLERS)
    runs = []
    for seed in (0, 0, 1):
        seen, observer = replies_seen(None)
        s = run_app(seed=seed, observer=observer, **over)
        runs.append((seen, [r["round_time"] for r in s.records], distances(s)))
    assert runs[0][0] == runs[1][0] and runs[0][1] == runs[1][1]
    np.testing.assert_array_equal(runs[0][2], runs[1][2])
    assert runs[0][0] != runs[2][0] and runs[0][1] != runs[2][1]


def test_fedpower_first_k_end_to_end_asks_exactly_the_k_earliest():
    over = dict(SMALL, num_server_rounds=6, round_policy="first-k", first_k=3, **STRAGGLERS)
    seen, observer = replies_seen(None)
    s = run_app(observer=observer, **over)
    for row in s.records[1:]:
        rnd = row["round"]
        arr = arrivals_by_the_documented_model(0, rnd, range(10), 1)
        order = sorted(range(10), key=lambda i: (arr[i], i))
        close = arr[order[2]]
        # the kept three, plus the reference client 0 if it arrived by the close (alignment only)
        expected = sorted(set(order[:3]) | ({0} if arr[0] <= close else set()))
        assert sorted(pid for r, pid in seen if r == rnd) == expected
        assert row["participants"] == 3 and row["late"] == 7 and row["round_time"] == pytest.approx(close)


def test_fedpower_deadline_with_dropout_counts_failures_and_late():
    over = dict(SMALL, num_server_rounds=6, round_policy="deadline", deadline=2.5, dropout=0.2, **STRAGGLERS)
    s = run_app(**over)
    for row in s.records[1:]:
        arr = arrivals_by_the_documented_model(0, row["round"], range(10), 1, dropout=0.2)
        assert row["participants"] == sum(t <= 2.5 for t in arr.values())
        assert row["failures"] == sum(np.isinf(t) for t in arr.values())
        assert row["late"] == sum(2.5 < t < np.inf for t in arr.values())


def test_fedave_uses_the_mechanism():
    ridge = dict(strategy="fedave", dataset="erm-ridge", loss="ridge", l2=0.1, dimension=4, num_samples=404,
                 num_clients=5, server_samples=4, num_server_rounds=5, local_steps=3, frac_active=0.8)
    s = run_app(latency_model="shifted-exp", round_policy="first-k", first_k=2, **ridge)
    assert [r["participants"] for r in s.records[1:]] == [2] * 5 and all(r["late"] == 2 for r in s.records[1:])
    assert all(r["round_time"] > 3.0 for r in s.records[1:])  # three work units of at least 1 each
    base = run_app(**ridge)
    assert all(r["round_time"] == 0.0 and r["participants"] == 4 for r in base.records[1:])


def test_faps_reports_round_time_under_policy_all():
    s = run_app(strategy="faps", dataset="faps-geometric", row_normalize=False, dimension=20, num_samples=400,
                num_clients=4, rank=2, num_server_rounds=3, latency_model="shifted-exp")
    times = [r["round_time"] for r in s.records[1:]]
    assert len(times) == 3 and all(t > 1.0 for t in times)


@pytest.mark.parametrize("overrides, fragment", [
    (dict(strategy="faps", dataset="faps-geometric", row_normalize=False, dimension=20, num_samples=400,
          num_clients=4, rank=2, dropout=0.1), "dropout must be 0 for faps"),
    (dict(strategy="faps", dataset="faps-geometric", row_normalize=False, dimension=20, num_samples=400,
          num_clients=4, rank=2, latency_model="pareto",
          round_policy="first-k", first_k=2), "round-policy must be 'all' for faps"),
    (dict(strategy="fedlrgd", dataset="erm-ridge", loss="ridge", dimension=4, num_samples=404, num_clients=5,
          server_samples=4, latency_model="shifted-exp", round_policy="deadline", deadline=5.0),
     "round-policy must be 'all' for fedlrgd"),
    (dict(strategy="fedmf", dataset="mf-synthetic", num_samples=600, dimension=40, rank=4, num_clients=5,
          latency_model="shifted-exp"), "latency-model must be 'none'"),
])
def test_strategies_that_need_every_client_refuse_before_round_one(overrides, fragment):
    calls = []

    def spy(msg, pid):
        calls.append(msg.metadata.message_type)
        return "ok"

    with pytest.raises(ConfigError, match=fragment):
        run_app(fault_fn=spy, **overrides)
    assert calls == []


@pytest.mark.parametrize("overrides, fragment", [
    (dict(first_k=3), "first-k = 3 is only used with round-policy = 'first-k'"),
    (dict(round_policy="first-k", latency_model="shifted-exp"), "first-k must be an integer in [1, num-clients"),
    (dict(round_policy="first-k", first_k=11, latency_model="shifted-exp"), "num-clients = 10"),
    (dict(deadline=2.0), "deadline = 2.0 is only used with round-policy = 'deadline'"),
    (dict(round_policy="deadline", latency_model="shifted-exp"), "deadline must be a number > 0"),
    (dict(round_policy="first-k", first_k=2), "needs a latency"),
    (dict(dropout=1.0), "dropout must be a number in [0, 1)"),
    (dict(slow_factor=0.5), "slow-factor must be a number >= 1"),
    (dict(latency_model="gamma"), "latency-model must be one of none, shifted-exp, pareto"),
    (dict(round_policy="first_k"), "Did you mean 'first-k'"),
])
def test_bad_participation_keys_name_the_key(overrides, fragment):
    with pytest.raises(ConfigError) as info:
        cfg_of(**overrides)
    assert fragment in str(info.value)


# -- FedPower's Theorem 9: the sampling term grows as fewer clients contribute ----------------------------------------

def test_the_floor_grows_as_fewer_clients_are_kept():
    """Noise-free p = 1: full participation converges; keeping the first K replies leaves a floor ~ 1/sqrt(K)."""
    floors = {K: [] for K in (2, 5, 10)}
    for seed in (0, 1, 2):
        for K in floors:
            policy = {} if K == 10 else dict(round_policy="first-k", first_k=K)
            s = run_app(seed=seed, latency_model="shifted-exp", **SMALL, **policy)
            floors[K].append(np.median(distances(s)[-8:]))
    for seed in range(3):
        assert floors[2][seed] > floors[5][seed] > 10 * floors[10][seed]


def test_stragglers_report_floor_and_sampling_factor():
    import pandas as pd

    from simulations.experiments.fedpower.stragglers_report import floor_table, sampling_factor

    assert sampling_factor(20, 20) == 0.0 and sampling_factor(1, 20) == pytest.approx(1.0)
    assert sampling_factor(5, 20) == pytest.approx(np.sqrt(15 / 95))
    rows = [dict(run=run, seed=seed, round=rnd, subspace_distance=value * (1 + seed) if rnd else 1.0,
                 distinct_participants=K, round_time=t)
            for run, K, value, t in (("a", 5, 0.1, 2.0), ("b", 20, 1e-15, 4.0))
            for seed in (0, 1, 2) for rnd in range(0, 15)]
    table = floor_table(pd.DataFrame(rows), m=20, last=10)
    assert list(table["run"]) == ["a", "b"]
    a = table.iloc[0]
    assert a["floor"] == pytest.approx(0.2) and a["kept"] == 5 and a["round_time"] == 2.0
    assert a["ratio"] == pytest.approx(0.2 / np.sqrt(15 / 95)) and np.isnan(table.iloc[1]["ratio"])


@pytest.mark.usefixtures("every_iterate")
@pytest.mark.parametrize("strategy", ["fedpower", "fedave"])
def test_a_round_where_everyone_drops_out_keeps_the_estimate(strategy):
    over = (dict(SMALL, num_clients=3, num_server_rounds=12) if strategy == "fedpower" else
            dict(strategy="fedave", dataset="erm-ridge", loss="ridge", l2=0.1, dimension=4, num_samples=304,
                 num_clients=3, server_samples=4, num_server_rounds=12, local_steps=2))
    s = run_app(dropout=0.7, latency_model="shifted-exp", **over)
    empty = [r for r in s.records[1:] if r["participants"] == 0]
    assert empty and all(r["failures"] == 3 and r["round_time"] == 0.0 for r in empty)  # 0.7^3: a few rounds
    assert len(s.iterates) == len(s.records) == 13
    for r in empty:  # nothing aggregated: the estimate of the round is the previous one
        np.testing.assert_array_equal(s.iterates[r["round"]], s.iterates[r["round"] - 1])
