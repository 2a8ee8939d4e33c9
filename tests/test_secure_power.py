"""``power`` and ``ssi`` with ``secure-aggregation = true``: the server learns only SecAgg+ sums, and they are exact
(fl_strategies.protocol.strategies.secure_power, fl_strategies.privacy.fixed_point)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from conftest import run_app
from flwr.app import Context, RecordDict
from flwr.common import bytes_to_ndarray
from flwr.common.secure_aggregation.secaggplus_constants import RECORD_KEY_CONFIGS, Key, Stage
from scipy.stats import chi2, kstest

from fl_strategies.kernels.linalg import subspace_distance
from fl_strategies.protocol.base import RunFailed
from fl_strategies.settings.config import ConfigError, validate_run_config
from simulations.engines import fused_run_config

BASE = dict(strategy="power", num_samples=4000, dimension=60, rank=3, iteration_rank=5, num_server_rounds=12,
            num_clients=4, row_normalize=True)


def explained(strategy) -> np.ndarray:
    return np.asarray(strategy.model["explained_variance"])


def assert_same_model(secure, plain, tol=1e-9):
    assert secure.secure and not plain.secure
    assert subspace_distance(secure.model["components"].T, plain.model["components"].T) <= tol
    np.testing.assert_allclose(explained(secure), explained(plain), rtol=tol, atol=0)
    np.testing.assert_allclose(secure.model["explained_variance_ratio"], plain.model["explained_variance_ratio"],
                               rtol=tol, atol=0)


@pytest.mark.parametrize("strategy", ["power", "ssi"])
def test_the_secure_run_gives_the_plain_runs_model(strategy):
    plain = run_app(**dict(BASE, strategy=strategy))
    secure = run_app(**dict(BASE, strategy=strategy, secure_aggregation="true"))
    assert_same_model(secure, plain)
    for a, b in zip(secure.records, plain.records):  # every round's estimate, not only the last
        assert abs(a["subspace_distance"] - b["subspace_distance"]) <= 1e-9
    assert len(secure.records) == len(plain.records) == BASE["num_server_rounds"] + 1
    assert plain.records[-1]["subspace_distance"] < 1e-4  # near convergence: the comparison is of a meaningful model


def secure_recorded(**overrides):
    from client_app.app import app as client_app
    from server_app.app import run_server
    from test_dp_power import RecordingGrid

    cfg = fused_run_config({k.replace("_", "-"): v for k, v in overrides.items()})
    grid = RecordingGrid(client_app, cfg["num-clients"], cfg)
    strategy = run_server(grid, Context(run_id=1, node_id=0, node_config={}, state=RecordDict(), run_config=cfg))
    return strategy, grid


def chi_square_uniform(values: np.ndarray, modulus: int, bins: int = 16) -> float:
    """Pearson's statistic of ``values`` against the uniform law on ``[0, modulus)`` in ``bins`` equal bins."""
    counts = np.bincount((values.astype(np.float64) * bins / modulus).astype(int), minlength=bins)
    expected = values.size / bins
    return float(np.sum((counts - expected) ** 2 / expected))


def test_one_round_the_server_sees_uniform_masked_uploads_and_the_exact_sum():
    cfg = dict(BASE, num_server_rounds=1)
    products = {}

    def observe(server_round, pid, broadcast, arrays):
        products[server_round, pid] = arrays[0]

    plain = run_app(observer=observe, **cfg)
    secure, grid = secure_recorded(**cfg, secure_aggregation="true")
    code = secure.code
    # the round's sum: sum_i s_i A_i Z_0 and the rows, against the exactly rounded sum of the plain products
    sizes = plain.sizes
    exact = np.array([math.fsum(col) for col in zip(*(sizes[p] * products[1, p].ravel() for p in range(4)))])
    got = secure.round_sum[: exact.size]
    assert np.all(np.abs(got - exact) <= code.tolerance(exact) + np.spacing(np.abs(exact)) / 2)
    assert secure.round_sum[exact.size] == sum(sizes.values())
    # what the server received from each client in round 1: uniform modulo 2^32, unrelated to the client's limbs
    uploads = {}
    for pid, msg in grid.replies:
        if msg.has_content() and RECORD_KEY_CONFIGS in msg.content.config_records:
            record = msg.content.config_records[RECORD_KEY_CONFIGS]
            if Key.MASKED_PARAMETERS in record and msg.metadata.group_id == "1":
                uploads[pid] = bytes_to_ndarray(record[Key.MASKED_PARAMETERS][1]).astype(np.int64).ravel()
    assert sorted(uploads) == [0, 1, 2, 3]
    # 16 bins, 15 degrees of freedom: a uniform upload's statistic exceeds 56.5 with probability 1e-6
    limit = chi2.ppf(1 - 1e-6, 15)
    for pid, masked in uploads.items():
        own = code.encode(np.concatenate([sizes[pid] * products[1, pid].ravel(), [sizes[pid]]])).ravel()
        assert masked.size == own.size == code.limbs * (60 * 5 + 1)
        assert masked.min() >= 0 and masked.max() < code.modulus
        assert chi_square_uniform(masked, code.modulus) < limit
        assert kstest(masked / code.modulus, "uniform").pvalue > 1e-6
        assert abs(np.corrcoef(masked, own)[0, 1]) < 0.15  # 903 entries: |corr| of independent ones ~ 0.03
        # unmasked, the quantised limbs sit in [0, 2^b]: far from uniform on [0, 2^32)
        assert chi_square_uniform(own + code.clipping_range, code.modulus) > 50 * limit
    # no array the server holds is one client's product
    held = [v for v in vars(secure).values() if isinstance(v, np.ndarray)]
    assert not any(v.size >= 300 and np.allclose(v.ravel()[:300], products[1, pid].ravel()[:300], rtol=1e-6)
                   for v in held for pid in range(4))


def _collect_stage(msg) -> bool:
    content = msg.content
    return (RECORD_KEY_CONFIGS in content.config_records
            and content.config_records[RECORD_KEY_CONFIGS].get(Key.STAGE) == Stage.COLLECT_MASKED_VECTORS)


def test_a_client_lost_after_sharing_its_keys_is_left_out_of_the_sum_as_in_the_plain_run():
    def secure_fault(msg, pid):  # partition 2 shares its keys in round 3, then never uploads
        return "drop" if pid == 2 and msg.metadata.group_id == "3" and _collect_stage(msg) else "ok"

    def plain_fault(msg, pid):  # the plain run without partition 2's round-3 reply
        return "drop" if pid == 2 and msg.metadata.group_id == "3" else "ok"

    plain = run_app(fault_fn=plain_fault, **BASE)
    secure = run_app(fault_fn=secure_fault, **BASE, secure_aggregation="true")
    assert [r["participants"] for r in secure.records][1:5] == [4, 4, 3, 4]
    assert [r["participants"] for r in plain.records][1:5] == [4, 4, 3, 4]
    assert_same_model(secure, plain)


def test_below_the_threshold_the_round_fails_in_one_line_and_no_model_is_written(tmp_path):
    def fault(msg, pid):  # two of four lost after sharing their keys: the threshold is 3
        return "drop" if pid in (1, 2) and msg.metadata.group_id == "2" and _collect_stage(msg) else "ok"

    out = tmp_path / "out"
    with pytest.raises(RunFailed, match=r"^round 2: SecAgg\+ halted before the sum was formed[^\n]*$") as info:
        run_app(fault_fn=fault, **BASE, secure_aggregation="true", results_dir=str(out))
    assert info.value.strategy.aggregated == {-1, 0, 1}  # discovery: the row counts and the squares; round 1
    assert not (out / "pca.npz").exists()


def test_a_value_beyond_the_public_bound_is_refused_never_clipped():
    """secagg-clip (raised to n, for the row counts) below the summary's traces: every client refuses to upload
    it, SecAgg+ forms no sum, no model."""
    with pytest.raises(RunFailed, match="round 13: SecAgg\\+ halted before the summary's sum") as info:
        run_app(**dict(BASE, row_normalize=False, secagg_clip=1e-3, secure_aggregation="true"))
    assert info.value.strategy.model is None
    assert info.value.strategy.upload_bound() == 4000


@pytest.mark.parametrize("overrides, message", [
    (dict(strategy="fedpower", epsilon=1.0), "exact and adds no noise"),
    (dict(strategy="faps"), "refused for strategy 'faps'"),
    (dict(clients_per_round=2), "is not honoured"),
    (dict(dropout=0.1), "every client in every round"),
    (dict(row_normalize=False), "secagg-clip must be set"),
    (dict(num_clients=1), "2 <= num-clients"),
])
def test_secure_aggregation_is_refused_where_it_cannot_hold(overrides, message):
    cfg = fused_run_config({k.replace("_", "-"): v for k, v in dict(BASE, secure_aggregation="true",
                                                                     **overrides).items()})
    with pytest.raises(ConfigError, match=message):
        validate_run_config(cfg)


def test_clip_norm_is_a_public_row_bound_too():
    cfg = dict(BASE, row_normalize=False, clip_norm=0.5, center=True)
    plain = run_app(**cfg)
    secure = run_app(**cfg, secure_aggregation="true")
    assert secure.upload_bound() == 4000 * (0.5 + np.linalg.norm(secure.mean)) ** 2 * 5
    assert_same_model(secure, plain)


def test_the_limb_code_is_public_and_fixed_by_the_bound():
    secure = run_app(**dict(BASE, num_server_rounds=1, secure_aggregation="true"))
    assert secure.sizes == {} and secure.num_rows == BASE["num_samples"]  # n from the SecAgg+ sum of the counts
    assert secure.upload_bound() == secure.num_rows * 5  # n (1 + ||0||)^2 r: no site's data in it
    assert secure.code.max_value >= secure.upload_bound() > secure.code.max_value / 2
    assert secure.code.limb_bits * secure.code.limbs == 87  # 4 clients: 29-bit limbs


@pytest.mark.parametrize("overrides", [dict(center=True),
                                       dict(center=True, scale=True, row_normalize=False, secagg_clip=1e6)])
def test_the_discovery_sums_go_through_secagg_and_give_the_plain_mean_scale_and_model(overrides):
    plain = run_app(**dict(BASE, **overrides))
    secure = run_app(**dict(BASE, **overrides, secure_aggregation="true"))
    assert secure.aggregated >= set(secure.discovery_rounds) and len(secure.discovery_rounds) == 3
    np.testing.assert_allclose(secure.mean, plain.mean, rtol=1e-12, atol=1e-15)
    assert np.any(np.abs(plain.mean) > 1e-3)  # a mean worth centring
    if overrides.get("scale"):
        np.testing.assert_allclose(secure.scale, plain.scale, rtol=1e-12, atol=0)
    assert secure.total_variance == pytest.approx(plain.total_variance, rel=1e-12)
    assert_same_model(secure, plain)
    np.testing.assert_allclose(secure.model["mean"], plain.model["mean"], rtol=1e-12, atol=1e-15)
    # nothing of a site's data at discovery: no row sum, no sum of squares (they travel only inside SecAgg+ sums)
    assert secure.node_properties and all(not {"row-sum", "col-sq-sum", "sq-sum"} & set(props)
                                          for props in secure.node_properties.values())
    assert all("row-sum" in props for props in plain.node_properties.values())


def test_a_client_lost_in_a_discovery_sum_stops_the_run():
    def fault(msg, pid):  # partition 1 shares its keys for the row sums, then never uploads them
        return "drop" if pid == 1 and msg.metadata.group_id == "-1" and _collect_stage(msg) else "ok"

    with pytest.raises(RunFailed, match=r"^round -1: SecAgg\+ summed 3 of s = 4 products"):
        run_app(fault_fn=fault, **dict(BASE, center=True, secure_aggregation="true"))


def test_the_stopping_rule_reads_the_secure_sum_of_the_objectives():
    """With stop-tol the clients add f_i to the sum: the secure run stops after the plain run's rounds."""
    cfg = dict(BASE, num_server_rounds=30, stop_tol=1e-3)
    plain = run_app(**cfg)
    secure = run_app(**cfg, secure_aggregation="true")
    assert plain.stopped and secure.stopped and len(secure.records) == len(plain.records) < 30
    for a, b in zip(secure.records, plain.records):
        assert a["objective"] == pytest.approx(b["objective"], rel=1e-12)
    assert_same_model(secure, plain)


def test_a_client_lost_after_uploading_is_unmasked_from_the_shares_and_its_product_stays_in_the_sum():
    def fault(msg, pid):  # partition 3 uploads its masked product in round 2, then never answers the unmask stage
        content = msg.content
        unmask = (RECORD_KEY_CONFIGS in content.config_records
                  and content.config_records[RECORD_KEY_CONFIGS].get(Key.STAGE) == Stage.UNMASK)
        return "drop" if pid == 3 and msg.metadata.group_id == "2" and unmask else "ok"

    plain = run_app(**BASE)
    secure = run_app(fault_fn=fault, **BASE, secure_aggregation="true")
    assert [r["participants"] for r in secure.records][1:4] == [4, 4, 4]
    assert_same_model(secure, plain)


def test_four_genotype_sites_centred_and_scaled_give_the_plain_runs_pcs(tmp_path):
    from simulations.data.genotypes import write_genotype_sites

    write_genotype_sites(tmp_path / "sites", (300, 250, 350, 300), 200, populations=3, seed=1)
    cfg = dict(strategy="power", dataset=str(tmp_path / "sites"), num_clients=4, rank=2, iteration_rank=4,
               num_server_rounds=15, center=True, scale=True, row_normalize=False)
    plain = run_app(**cfg)
    secure = run_app(**cfg, secure_aggregation="true", secagg_clip=1e12)  # |x| <= 2 / min scale: a loose bound
    assert_same_model(secure, plain)
    np.testing.assert_allclose(secure.scale, plain.scale, rtol=1e-12, atol=0)


def test_without_a_reference_the_explained_variance_columns_come_from_the_secure_sums():
    cfg = dict(BASE, center=True, evaluation="none")
    plain = run_app(**cfg)
    secure = run_app(**cfg, secure_aggregation="true")
    assert secure.reference is None and secure.tracks_objective
    for key in ("iterated_explained_variance", "iterated_explained_variance_ratio", "estimate_change"):
        got = [r[key] for r in secure.records[1:]]
        want = [r[key] for r in plain.records[1:]]
        assert None not in got and got == pytest.approx(want, rel=1e-9, abs=1e-12)
    assert_same_model(secure, plain)


@pytest.mark.parametrize("overrides", [dict(center=True, discovery="engine"),
                                       dict(num_clients=12, num_samples=6000, num_server_rounds=6)])
def test_engine_discovery_and_secagg_neighbourhoods_of_more_than_7_clients(overrides):
    """discovery = "engine" sends no properties (the sums still go through SecAgg+); 12 clients share their keys
    with neighbourhoods of 7 (the limbs are 27 bits wide)."""
    cfg = dict(BASE, **overrides)
    plain = run_app(**{k: v for k, v in cfg.items() if k != "discovery"})
    secure = run_app(**cfg, secure_aggregation="true")
    assert secure.code.limb_bits == (29 if cfg["num_clients"] == 4 else 27)
    assert secure.sizes == {} and secure.num_rows == cfg["num_samples"]  # the engine's counts are not kept either
    assert_same_model(secure, plain)


def test_four_bed_sites_with_missing_calls_and_hwe_give_the_plain_runs_pcs_through_secagg(tmp_path):
    """Call counts and allele sums go through the SecAgg+ discovery sums: the plain run's mean, hwe scale and PCs."""
    pytest.importorskip("bed_reader")
    from test_genotype_bed import simulated_sites, write_bed

    sites = simulated_sites((300, 250, 350, 300), 400, missing=0.01, seed=11, populations=3)
    (tmp_path / "data").mkdir()
    for i, G in enumerate(sites):
        write_bed(tmp_path / "data" / f"partition_{i}.bed", G)
    cfg = dict(strategy="power", dataset=str(tmp_path / "data"), num_clients=4, rank=2, iteration_rank=2,
               num_server_rounds=20, center=True, scale="hwe", row_normalize=False)
    plain = run_app(**cfg)
    secure = run_app(**cfg, secure_aggregation="true", secagg_clip=1e12)
    assert secure.aggregated >= set(secure.discovery_rounds) and secure.discovery_rounds == [0]  # one exchange
    assert plain.records[-1]["estimate_change"] < 1e-6  # a converged model: the comparison is meaningful
    G = np.vstack(sites)
    np.testing.assert_allclose(plain.mean, np.nan_to_num(np.nanmean(G, axis=0)), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(secure.mean, plain.mean, rtol=1e-12, atol=1e-15)  # over each variant's calls
    np.testing.assert_allclose(secure.scale, plain.scale, rtol=1e-12, atol=0)
    assert secure.total_variance == pytest.approx(plain.total_variance, rel=1e-12)
    assert plain.plink2_diagonal and secure.plink2_diagonal  # plink2's diagonal summed through SecAgg+ as well
    assert not np.allclose(plain.model["explained_variance"], plain.model["singular_values"] ** 2 / (1200 - 1),
                           rtol=1e-6, atol=0)
    assert_same_model(secure, plain)
    assert all(not {"row-sum", "call-count", "col-sq-sum", "sq-sum"} & set(props)
               for props in secure.node_properties.values())
    assert all("call-count" in props for props in plain.node_properties.values())


@pytest.mark.parametrize("strategy, overrides", [("fedpower", dict(local_steps=4, schedule="decayed")),
                                                 ("localpower", dict(local_steps=8))])
def test_fedpower_and_localpower_align_on_the_client_and_reach_eigh_through_secagg(strategy, overrides):
    """Each client aligns its Y_i to the broadcast Z: the server sums, and the run converges as the plain one."""
    cfg = dict(BASE, strategy=strategy, num_server_rounds=20, **overrides)
    plain = run_app(**cfg)
    secure = run_app(**cfg, secure_aggregation="true")
    assert secure.secure and secure.aggregated >= set(range(1, 21))
    got = [r["subspace_distance"] for r in secure.records]
    want = [r["subspace_distance"] for r in plain.records]
    assert got[-1] <= 1e-9 and want[-1] <= 1e-9  # against eigh of the pooled covariance
    rounds = [next(t for t, dist in enumerate(run) if dist <= 1e-6) for run in (got, want)]
    assert rounds[0] <= rounds[1] + 1
    assert_same_model(secure, plain, tol=1e-8)


def test_a_secure_fedpower_round_sums_the_replies_each_client_aligned_to_the_broadcast_basis():
    """Two rounds (4, then 3 local steps) equal numpy's client-aligned form, not the unaligned sum."""
    from simulations.benchmarks.secure_fedpower_alignment import iterate
    from simulations.data.federated_data import local_covariance

    overrides = dict(BASE, strategy="fedpower", local_steps=4, schedule="decayed", num_server_rounds=2)
    secure = run_app(**overrides, secure_aggregation="true")
    cfg = fused_run_config({k.replace("_", "-"): v for k, v in overrides.items()})
    pairs = [local_covariance(cfg, i) for i in range(4)]
    local, sizes = [A for A, _ in pairs], [s for _, s in pairs]
    Z0, Z2 = secure.iterates[0], secure.iterates[-1]
    forms = {a: list(iterate(local, sizes, Z0, [4, 3], a))[-1] for a in ("client", "none")}
    assert subspace_distance(Z2, forms["client"]) <= 1e-12
    assert subspace_distance(Z2, forms["none"]) > 1e-6  # the alignment changes the sum


def test_the_benchmark_writes_rounds_wall_times_and_agreement_with_its_command(tmp_path):
    pytest.importorskip("bed_reader")
    from simulations.benchmarks.bench_secure_power import main

    argv = ["--setups", "model1", "genotypes", "--clients", "4", "--dim", "20", "--geno-dim", "60", "--rounds", "3",
            "--repeat", "1", "--out", str(tmp_path)]
    assert main(argv) == 0
    text = (tmp_path / "secure_power.md").read_text()
    assert text.startswith("python -m simulations.benchmarks.bench_secure_power --setups model1 genotypes")
    import csv

    rows = list(csv.DictReader(open(tmp_path / "secure_power.csv")))
    assert [(r["set-up"], r["d"], r["rounds"], r["SecAgg+ exchanges"]) for r in rows] == [
        ("model1", "20", "3", "7"), ("genotypes", "60", "3", "7")]
    for row in rows:
        assert float(row["sin theta"]) <= 1e-9 and float(row["explained variance, max rel. diff."]) <= 1e-9
        assert float(row["plain (s)"]) > 0 and float(row["secure (s)"]) > 0


def _received(grid) -> list[tuple[int, str, str, object]]:
    """Everything the server received from the nodes: ``(partition, message type, key, value)`` for every scalar,
    string and bytes value (list items one by one) of every record of every reply."""
    out = []
    for pid, msg in grid.replies:
        content, kind = msg.content, msg.metadata.message_type
        for records in (content.config_records, content.metric_records):
            for name, record in records.items():
                for key, value in record.items():
                    for item in value if isinstance(value, list) else [value]:
                        out.append((pid, kind, f"{name}/{key}", item))
        for name, record in content.array_records.items():
            for key, array in record.items():
                out.append((pid, kind, f"{name}/{key}", array.numpy().tobytes()))
    return out


def _site_secrets(sites) -> list[tuple[str, object]]:
    """Per-site counts and sums a server must not see: ``(what, value)``; a number as itself, a vector as the
    float64 bytes of its first two entries."""
    secrets = []
    for i, G in enumerate(sites):
        calls = np.sum(~np.isnan(G), axis=0).astype(np.float64)
        row_sum = np.nansum(G, axis=0)
        mean = np.divide(row_sum, calls, out=np.zeros_like(row_sum), where=calls > 0)
        squares = np.nansum((G - mean) ** 2, axis=0)
        secrets += [(f"site {i} rows", G.shape[0]), (f"site {i} rows", float(G.shape[0])),
                    (f"site {i} sum of squares", float(np.sum(squares)))]
        secrets += [(f"site {i} {what}", v[1:3].astype("<f8").tobytes())
                     for what, v in (("call counts", calls), ("row sum", row_sum), ("column squares", squares))]
    return secrets


def assert_only_public_fields(received, num_clients: int) -> None:
    """The discovery properties of a secure run over ``.bed`` sites are exactly the public ones, and its fit replies
    carry nothing but SecAgg+'s weight 1, a success status and the partition id (``received``: :func:`_received`)."""
    properties = {key.split("/")[1] for _, kind, key, _ in received
                  if kind == "get_properties" and key.startswith("getpropertiesres.properties/")}
    assert properties == {"partition-id", "dimension", "variant-digest", "variant-list", "noise-source",
                          "noise-persistent"}
    fit_values = {(key, value) for _, kind, key, value in received if key.startswith("fitres.")}
    assert fit_values <= {("fitres.num_examples/num_examples", 1), ("fitres.status/code", 0),
                          ("fitres.status/message", "Success")} | {("fitres.metrics/partition-id", p)
                                                                   for p in range(num_clients)}


def _leaks(received, secrets) -> list[str]:
    found = []
    for pid, kind, key, value in received:
        for what, secret in secrets:
            if isinstance(secret, bytes) and isinstance(value, bytes) and secret in value:
                found.append(f"{what} in partition {pid}'s {kind} {key}")
            elif not isinstance(secret, bytes) and isinstance(value, (int, float)) and not isinstance(value, bool) \
                    and value == secret:
                found.append(f"{what} = {value!r} as partition {pid}'s {kind} {key}")
    return found


def test_in_a_secure_run_no_message_from_a_node_holds_its_row_count_or_a_sum_of_its_own(tmp_path):
    """Every value of every message the server receives in a secure run over four .bed sites (missing calls,
    center, hwe): no site's row count, call counts, row sum or sums of squares, in the clear or as float64 bytes;
    the discovery properties hold only the partition id, d and public metadata; every masked upload is uniform
    modulo 2^32 and none is the site's own quantised limbs. The same scan finds them in the plain run's messages."""
    pytest.importorskip("bed_reader")
    from test_genotype_bed import simulated_sites, write_bed

    from fl_strategies.privacy.fixed_point import limb_code
    from fl_strategies.protocol.strategies.secure_power import COUNTS_BOUND

    sizes = (301, 257, 349, 293)
    sites = simulated_sites(sizes, 120, missing=0.01, seed=11, populations=3)
    (tmp_path / "data").mkdir()
    for i, G in enumerate(sites):
        write_bed(tmp_path / "data" / f"partition_{i}.bed", G)
    cfg = dict(strategy="power", dataset=str(tmp_path / "data"), num_clients=4, rank=2, iteration_rank=2,
               num_server_rounds=2, center=True, scale="hwe", row_normalize=False, secagg_clip=1e12)
    secrets = _site_secrets(sites)
    plain, plain_grid = secure_recorded(**cfg)
    found = _leaks(_received(plain_grid), secrets)
    assert {f.split(" in ")[0].split(" = ")[0] for f in found} >= {f"site {i} {what}" for i in range(4) for what in
                                                                  ("rows", "call counts", "row sum")}
    secure, grid = secure_recorded(**cfg, secure_aggregation="true")
    received = _received(grid)
    assert _leaks(received, secrets) == []
    assert secure.sizes == {} and secure.num_rows == sum(sizes)  # n only as the SecAgg+ sum
    assert_only_public_fields(received, 4)
    # the masked uploads, per site over all SecAgg+ exchanges: uniform modulo 2^32
    masked: dict[int, list[np.ndarray]] = {pid: [] for pid in range(4)}
    counts_code = limb_code(COUNTS_BOUND, 4)
    for pid, msg in grid.replies:
        record = msg.content.config_records.get(RECORD_KEY_CONFIGS)
        if record is not None and Key.MASKED_PARAMETERS in record:
            upload = bytes_to_ndarray(record[Key.MASKED_PARAMETERS][1]).astype(np.int64).ravel()
            masked[pid].append(upload)
            if msg.metadata.group_id == str(secure.discovery_rounds[0]):  # the counts' exchange (the only one)
                G = sites[pid]
                t, c, q = np.nansum(G, axis=0), np.sum(~np.isnan(G), axis=0), np.nansum(G * G, axis=0)
                own = counts_code.encode(np.concatenate([[sizes[pid]], t, c, q, t, c])).ravel() \
                    + counts_code.clipping_range
                assert upload.size == own.size == 3 * (1 + 5 * 120) and not np.array_equal(upload, own)
    rounds = len(secure.discovery_rounds) + cfg["num_server_rounds"] + 1
    limit = chi2.ppf(1 - 1e-6, 15)
    for pid, uploads in masked.items():
        assert len(uploads) == rounds
        values = np.concatenate(uploads)
        assert values.min() >= 0 and values.max() < 2 ** 32
        assert chi_square_uniform(values, 2 ** 32) < limit
        assert kstest(values / 2 ** 32, "uniform").pvalue > 1e-6


def test_a_node_that_sends_its_row_count_in_a_secure_run_is_left_out_with_the_reason():
    from fl_strategies.protocol.replies import check_properties

    props = {"partition-id": 1, "dimension": 6}
    assert check_properties(props, 4, 6, rows=False) == (1, None)
    assert "num-examples" in check_properties(dict(props, **{"num-examples": 5}), 4, 6, rows=False)
    assert check_properties(dict(props, **{"num-examples": 5}), 4, 6) == (1, 5)


def test_the_profile_splits_a_secure_run_between_the_project_and_flowers_secagg(tmp_path):
    from simulations.benchmarks.profile_secure_exchange import main

    assert main(["--clients", "4", "--dim", "20", "--rounds", "2", "--out", str(tmp_path)]) == 0
    text = (tmp_path / "profile.md").read_text()
    assert text.startswith("python -m simulations.benchmarks.profile_secure_exchange --clients 4")
    rows = {line.split(" | ")[0].strip("| ").strip(): line.split(" | ") for line in text.splitlines()
            if line.startswith("| ") and "%" in line}
    seconds = {label: float(cells[1]) for label, cells in rows.items()}
    total = seconds["secure run, profiled"]
    flower = seconds["Flower SecAgg+ client stages (without the computation)"] + seconds[
        "Flower SecAgg+ server workflow (without the clients)"]
    project = seconds["project: client computation (product, limbs)"] + seconds[
        "project: seeded rounding around the SecAgg+ client"]
    assert 0 < project and 0 < flower and project + flower <= total * 1.001
    assert "(6 SecAgg+ exchanges)" in text  # the row counts, the row sums, the squares, 2 rounds, the summary


def test_the_genotype_discoverys_raw_squares_are_centred_exactly():
    """discovery-counts sends ``sum x^2`` raw; the server's ``Q - 2 mu T + C mu^2`` is the exact ``sum (x - mu)^2``
    rounded once, also where float64 would cancel (a mean near 2: ``Q`` about 4 C, the sum near 0)."""
    from fractions import Fraction

    from fl_strategies.protocol.strategies.secure_power import exact_squares

    rng = np.random.default_rng(5)
    G = np.where(rng.random((5000, 6)) < [0.0, 0.5, 0.99, 0.9995, 1.0, 0.3], 2, rng.integers(0, 2, (5000, 6)))
    G[:, 0] = 0  # a monomorphic variant: exactly 0
    Q, T, C = (G ** 2).sum(axis=0), G.sum(axis=0), np.full(6, 5000)
    mu = T / C
    got = exact_squares(Q.astype(float), T.astype(float), C.astype(float), mu)
    want = [float(sum((Fraction(int(x)) - Fraction(m)) ** 2 for x in G[:, j])) for j, m in enumerate(mu)]
    assert got.tolist() == want and got[0] == 0.0 and got[4] == 0.0
