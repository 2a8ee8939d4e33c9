"""``krylov`` with ``secure-aggregation = true``: the Krylov basis from exact SecAgg+ sums gives the plain run's
model in the plain run's rounds (fl_strategies.protocol.strategies.secure_krylov)."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import distances, run_app
from test_secure_power import _collect_stage, assert_same_model

from fl_strategies.protocol.base import RunFailed
from fl_strategies.settings.config import ConfigError, validate_run_config
from simulations.engines import fused_run_config

BASE = dict(strategy="krylov", num_samples=4000, dimension=60, rank=3, iteration_rank=5, num_server_rounds=8,
            num_clients=4, row_normalize=True)
# geometric spectrum lambda_{i+1} / lambda_i = 1 / 1.02^2: small gaps, where krylov's rounds matter
SMALL_GAP = dict(strategy="krylov", dataset="faps-geometric", row_normalize=False, dimension=200, num_samples=4000,
                 xi=1.02, partitioner="linear", num_clients=4, rank=5, iteration_rank=5, num_server_rounds=40)


def first_round_within(strategy, threshold: float) -> int:
    hits = np.nonzero(distances(strategy) <= threshold)[0]
    assert len(hits), f"never within {threshold}"
    return int(hits[0])


def test_the_secure_run_gives_the_plain_runs_model_in_every_round():
    plain = run_app(**BASE)
    secure = run_app(**BASE, secure_aggregation="true")
    assert type(secure).__name__ == "SecureKrylovStrategy" and secure.aggregated == set(range(-1, 10))  # -1: row counts
    assert_same_model(secure, plain)
    for a, b in zip(secure.records, plain.records):  # every round's Ritz estimate
        assert abs(a["subspace_distance"] - b["subspace_distance"]) <= 1e-9
    assert len(secure.records) == len(plain.records) == BASE["num_server_rounds"] + 1
    assert secure.products == plain.products == BASE["num_server_rounds"]
    assert plain.records[-1]["subspace_distance"] < 1e-8  # converged: the comparison is of a meaningful model


def test_on_a_small_gap_the_secure_run_takes_the_plain_runs_rounds():
    plain = run_app(**SMALL_GAP)
    secure = run_app(**SMALL_GAP, secure_aggregation="true", secagg_clip=1e6)
    assert_same_model(secure, plain)
    rounds = [first_round_within(s, threshold) for s in (secure, plain) for threshold in (1e-3, 1e-6)]
    assert rounds[:2] == rounds[2:], rounds
    assert secure.restarts == plain.restarts


def test_the_stopping_rule_stops_both_runs_in_the_same_round():
    """F = n * sum(Ritz values) from the secure sums: the secure run stops after the plain run's rounds."""
    cfg = dict(BASE, num_server_rounds=30, stop_tol=1e-10)
    plain = run_app(**cfg)
    secure = run_app(**cfg, secure_aggregation="true")
    assert plain.stopped and secure.stopped and len(secure.records) == len(plain.records) < 30
    for a, b in zip(secure.records[1:], plain.records[1:]):
        assert a["objective"] == pytest.approx(b["objective"], rel=1e-12)
    assert_same_model(secure, plain)


@pytest.mark.usefixtures("every_iterate")
def test_a_round_whose_sum_lacks_a_client_is_repeated_as_in_the_plain_run(caplog):
    """Partition 2 shares its keys in round 3, then never uploads: SecAgg+ sums the other three, and that sum is
    not used; round 4 asks for round 3's block again, as the plain run does without partition 2's round-3 reply."""
    def secure_fault(msg, pid):
        return "drop" if pid == 2 and msg.metadata.group_id == "3" and _collect_stage(msg) else "ok"

    def plain_fault(msg, pid):
        return "drop" if pid == 2 and msg.metadata.group_id == "3" else "ok"

    cfg = dict(BASE, num_server_rounds=9)
    plain = run_app(fault_fn=plain_fault, **cfg)
    secure = run_app(fault_fn=secure_fault, **cfg, secure_aggregation="true")
    for run in (secure, plain):
        assert [r["participants"] for r in run.records][1:6] == [4, 4, 3, 4, 4]
        assert np.array_equal(run.iterates[3], run.iterates[2])  # round 3 kept round 2's estimate
        assert run.products == cfg["num_server_rounds"] - 1
    assert "the SecAgg+ sum holds 3 of 4 clients' products" in caplog.text
    assert 3 in secure.aggregated  # SecAgg+ formed round 3's sum (of three clients): the strategy did not use it
    assert_same_model(secure, plain)
    intact = run_app(**dict(BASE, num_server_rounds=8), secure_aggregation="true")
    np.testing.assert_allclose(secure.ritz_values, intact.ritz_values, rtol=1e-12)  # the lost round cost one round


def test_below_the_threshold_no_sum_is_formed_and_the_run_fails_in_one_line():
    def fault(msg, pid):  # two of four lost after sharing their keys: the threshold is 3
        return "drop" if pid in (1, 2) and msg.metadata.group_id == "2" and _collect_stage(msg) else "ok"

    with pytest.raises(RunFailed, match=r"^round 2: SecAgg\+ halted before the sum was formed[^\n]*$") as info:
        run_app(fault_fn=fault, **BASE, secure_aggregation="true")
    assert info.value.strategy.model is None and info.value.strategy.products == 1


@pytest.mark.parametrize("overrides, message", [
    (dict(dropout=0.1), "every client in every round"),
    (dict(round_policy="first-k", first_k=3, latency_upload=1.0), "every client in every round"),
    (dict(row_normalize=False), "secagg-clip must be set"),
    (dict(checkpoint_dir="ck"), "checkpoint-dir is refused"),
])
def test_secure_krylov_is_refused_where_it_cannot_hold(overrides, message):
    cfg = fused_run_config({k.replace("_", "-"): v for k, v in dict(BASE, secure_aggregation="true",
                                                                     **overrides).items()})
    with pytest.raises(ConfigError, match=message):
        validate_run_config(cfg)


def test_four_bed_sites_with_missing_calls_and_hwe_give_the_plain_runs_pcs_through_secagg(tmp_path):
    """Call counts and allele sums through the SecAgg+ discovery sums, the blocks' products through SecAgg+
    rounds: the plain krylov run's mean, hwe scale and PCs, in its rounds."""
    pytest.importorskip("bed_reader")
    from test_genotype_bed import simulated_sites, write_bed

    sites = simulated_sites((300, 250, 350, 300), 400, missing=0.01, seed=11, populations=3)
    (tmp_path / "data").mkdir()
    for i, G in enumerate(sites):
        write_bed(tmp_path / "data" / f"partition_{i}.bed", G)
    cfg = dict(strategy="krylov", dataset=str(tmp_path / "data"), num_clients=4, rank=2, iteration_rank=2,
               num_server_rounds=12, center=True, scale="hwe", row_normalize=False)
    plain = run_app(**cfg)
    secure = run_app(**cfg, secure_aggregation="true", secagg_clip=1e12)
    assert secure.aggregated >= set(secure.discovery_rounds) and secure.discovery_rounds == [0]  # one exchange
    assert plain.records[-1]["estimate_change"] < 1e-6  # a converged model: the comparison is meaningful
    np.testing.assert_allclose(secure.mean, plain.mean, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(secure.scale, plain.scale, rtol=1e-12, atol=0)
    assert_same_model(secure, plain)
    assert len(secure.records) == len(plain.records)
