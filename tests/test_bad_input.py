"""Bad input never crashes a run and never corrupts a result.

Three layers, each tested directly and end to end on the in-process engine:

* the run config: every bad value is a ``ConfigError`` before round 1 that names
  the key (fuzzed with hypothesis: nothing else ever comes out of the validator);
* a client's data: a node with unusable data fails with an error naming its
  partition and file, the server leaves it out and the run goes on;
* a client's reply: a malformed reply (shape, dtype, NaN, norm, array count,
  sender) is left out, counted in ``rejected`` and the results stay finite.
"""

from __future__ import annotations

import csv
import logging
import math
import tempfile
from pathlib import Path

import numpy as np
import pytest
from flwr.common import Code, FitRes, Parameters, Status, ndarrays_to_parameters
from flwr.common.constant import PARTITION_ID_KEY
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from conftest import distances, run_aborted, run_app
from fl_strategies.settings.config import KEYS, MAX_ITERATIONS, ConfigError, validate_run_config
from fl_strategies.kernels.linalg import orth
from fl_strategies.protocol.replies import (
    check_array,
    check_orthonormal,
    check_origin,
    check_properties,
    decode_arrays,
    scalar_metric,
)
from simulations.engines import fused_run_config

TINY = dict(num_clients=4, num_samples=80, dimension=6, rank=2, iteration_rank=3, num_server_rounds=3)
FAST = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def load_client_covariance(cfg, node_config):
    """``(A_i, s_i, partition id)`` of the node ``node_config`` describes, as its client builds them."""
    from client_app.data import NodeData

    data = NodeData(cfg, node_config)
    A, s = data.covariance
    return A, s, data.partition_id


def fitres(arrays, num_examples=10, metrics=None, tensors=None):
    params = ndarrays_to_parameters(arrays) if tensors is None else Parameters(tensors=tensors,
                                                                               tensor_type="numpy.ndarray")
    return FitRes(Status(Code.OK, ""), params, num_examples, metrics or {})


def finite_or_empty(value) -> bool:
    return value is None or isinstance(value, str) or math.isfinite(value)


def assert_finite_records(strategy):
    for row in strategy.records:
        assert all(finite_or_empty(v) for v in row.values()), row
    for Z in strategy.iterates:
        assert np.all(np.isfinite(Z))
        np.testing.assert_allclose(Z.T @ Z, np.eye(Z.shape[1]), atol=1e-8)


# -- replies: the shared validation module --------------------------------------------------------------------------

@pytest.mark.parametrize("array, fragment", [
    (np.zeros((5, 3)), "shape (5, 3) instead of (6, 3)"),
    (np.zeros((6, 3), dtype=np.int64), "dtype int64, not floating point"),
    (np.zeros((6, 3), dtype=np.complex128), "not floating point"),
    (np.full((6, 3), np.nan), "18 non-finite value(s)"),
    (np.full((6, 3), 10.0), "Frobenius norm 42.4, above the bound 2"),
    ([[0.0] * 3] * 6, "is a list, not an array"),
])
def test_check_array_gives_a_reason(array, fragment):
    reason = check_array(array, (6, 3), max_norm=2.0, name="Y")
    assert reason is not None and fragment in reason and reason.startswith("Y")


def test_check_array_accepts_good_floats_of_any_precision():
    for dtype in (np.float16, np.float32, np.float64, np.longdouble):
        assert check_array(np.full((6, 3), 0.1, dtype=dtype), (6, 3), max_norm=2.0) is None


def _frobenius(a: np.ndarray) -> float:
    """The Frobenius norm in float64 without underflow or overflow (``math.hypot``; ``np.linalg.norm`` returns 0
    for entries below 1e-154, whose squares underflow)."""
    with np.errstate(all="ignore"):
        return math.hypot(*a.astype(np.float64).ravel().tolist())


def test_the_norm_bound_holds_for_entries_whose_squares_underflow():
    tiny = np.array([3e-170, 4e-170])
    assert _frobenius(tiny) == pytest.approx(5e-170, rel=1e-15)
    assert check_array(tiny, (2,), max_norm=5.1e-170) is None
    assert "above the bound" in check_array(tiny, (2,), max_norm=4.9e-170)


@FAST
@given(data=st.data())
def test_check_array_fuzz_only_none_or_a_reason(data):
    dtype = data.draw(st.one_of(hnp.floating_dtypes(), hnp.scalar_dtypes(), hnp.unicode_string_dtypes(),
                                hnp.byte_string_dtypes()))
    shape = data.draw(hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=5))
    if dtype.kind == "f" and data.draw(st.booleans()):  # often a valid (finite) float array
        a = data.draw(hnp.arrays(np.float64, shape, elements=st.floats(-1e3, 1e3))).astype(dtype)
    else:
        a = data.draw(hnp.arrays(dtype, shape))
    if dtype.kind == "f" and a.size and data.draw(st.booleans()):
        a.flat[data.draw(st.integers(0, a.size - 1))] = data.draw(st.sampled_from([np.nan, np.inf, -np.inf, 1e300]))
    expected = data.draw(st.one_of(st.just(shape), hnp.array_shapes(min_dims=0, max_dims=3, max_side=5)))
    bound = data.draw(st.one_of(st.none(), st.floats(0, 1e6)))
    if dtype.kind == "f" and data.draw(st.booleans()):  # often a bound just above the array's norm
        norm = _frobenius(a)
        if math.isfinite(norm):
            bound = norm * (1 + data.draw(st.floats(1e-6, 0.9))) + 1e-300
    reason = check_array(a, expected, max_norm=bound)
    assert reason is None or isinstance(reason, str)
    with np.errstate(all="ignore"):
        good = (a.shape == tuple(expected) and dtype.kind == "f" and bool(np.all(np.isfinite(a)))
                and (bound is None or _frobenius(a) <= bound * (1 - 1e-9)))
    if good:  # a valid array is accepted, whatever else the draw did
        assert reason is None, reason
    if reason is None:
        assert a.shape == expected and dtype.kind == "f" and np.all(np.isfinite(a))
        assert bound is None or _frobenius(a) <= bound * (1 + 1e-12)
        if a.ndim == 2:
            assert check_orthonormal(a) is None or isinstance(check_orthonormal(a), str)


@FAST
@given(data=st.data())
def test_decode_arrays_fuzz_only_arrays_or_a_reason(data):
    tensors, originals = [], []
    for _ in range(data.draw(st.integers(0, 3))):
        kind = data.draw(st.sampled_from(["array", "array", "bytes", "truncated"]))
        if kind == "bytes":
            tensors.append(data.draw(st.binary(max_size=64)))
            originals.append(None)
            continue
        a = data.draw(hnp.arrays(hnp.scalar_dtypes(), hnp.array_shapes(min_dims=0, max_dims=2, max_side=4)))
        blob = ndarrays_to_parameters([a]).tensors[0]
        tensors.append(blob[: len(blob) // 2] if kind == "truncated" else blob)
        originals.append(a if kind == "array" else None)
    count = data.draw(st.one_of(st.just(len(tensors)), st.integers(0, 3)))
    max_bytes = data.draw(st.one_of(st.none(), st.integers(0, 400)))
    out = decode_arrays(fitres(None, tensors=tensors), count, max_bytes=max_bytes)
    assert isinstance(out, str) or (isinstance(out, list) and all(isinstance(a, np.ndarray) for a in out))
    if count != len(tensors):
        assert out == f"{len(tensors)} arrays instead of {count}"
        return
    for i, (blob, a) in enumerate(zip(tensors, originals)):  # the first bad tensor gives the reason
        if max_bytes is not None and len(blob) > max_bytes:
            assert out == f"array {i} is {len(blob)} bytes, more than the {max_bytes} expected"
            return
        if a is None:  # random bytes or a truncated blob: never an array
            assert isinstance(out, str) and out.startswith(f"array {i} ")
            return
    assert isinstance(out, list) and len(out) == count, out  # well-formed arrays within the limit decode to themselves
    for got, a in zip(out, originals):
        assert got.dtype == a.dtype and got.shape == a.shape
        np.testing.assert_array_equal(got, a)


def test_decode_arrays_reasons():
    assert decode_arrays(fitres([np.zeros(3)]), 2) == "1 arrays instead of 2"
    assert "cannot be decoded" in decode_arrays(fitres(None, tensors=[b"junk"]), 1)
    assert "more than the 100 expected" in decode_arrays(fitres([np.zeros(1000)]), 1, max_bytes=100)
    assert decode_arrays("not a reply", 1) == "the reply has no parameters"


def test_check_origin_and_properties():
    res = fitres([np.zeros(2)], num_examples=20, metrics={"partition-id": 3})
    assert check_origin(3, {1, 3}, res, expected_examples=20) is None
    assert "not a registered client" in check_origin(None, {1}, res, node_id=77)
    assert check_origin(2, {1, 3}, res) == "partition 2 was not asked this round"
    assert "claims partition-id 3" in check_origin(1, {1, 3}, res)
    assert "reports 20 rows" in check_origin(3, {3}, res, expected_examples=21)
    assert check_properties({"partition-id": 1, "dimension": 6, "num-examples": 5}, 4, 6) == (1, 5)
    assert "outside 0..3" in check_properties({"partition-id": 4, "dimension": 6, "num-examples": 5}, 4, 6)
    assert "dimension 7" in check_properties({"partition-id": 1, "dimension": 7, "num-examples": 5}, 4, 6)
    assert "0 rows" in check_properties({"partition-id": 1, "dimension": 6, "num-examples": 0}, 4, 6)
    assert "not an integer" in check_properties({"partition-id": "x", "dimension": 6, "num-examples": 1}, 4, 6)
    assert scalar_metric(fitres([], metrics={"f": 1.5}), "f") == 1.5
    assert "not finite" in scalar_metric(fitres([], metrics={"f": float("nan")}), "f")
    assert "not a number" in scalar_metric(fitres([], metrics={"f": "1"}), "f")


# -- malformed replies in a run -----------------------------------------------------------------------------------

CORRUPTIONS = {
    1: ("wrong shape", lambda arrays, s, m: ([arrays[0][:-1]] + arrays[1:], s, m)),
    2: ("NaN", lambda arrays, s, m: ([np.full_like(arrays[0], np.nan)] + arrays[1:], s, m)),
    3: ("int dtype", lambda arrays, s, m: ([arrays[0].astype(np.int64)] + arrays[1:], s, m)),
    4: ("huge norm", lambda arrays, s, m: ([arrays[0] * 1e6] + arrays[1:], s, m)),
    5: ("extra array", lambda arrays, s, m: (arrays + [arrays[0]], s, m)),
    6: ("not orthonormal Z_prev", lambda arrays, s, m: ([arrays[0], 2 * arrays[1]], s, m)),
    7: ("claims another partition", lambda arrays, s, m: (arrays, s, {**m, "partition-id": 0})),
    8: ("other row count", lambda arrays, s, m: (arrays, s + 1, m)),
}


@pytest.fixture
def corrupt_replies(monkeypatch):
    """Make chosen partitions return a malformed reply."""
    from client_app.fedpower_client import FedPowerClient

    honest = FedPowerClient.fit

    def install(which):
        def fit(self, parameters, config):
            arrays, s, metrics = honest(self, parameters, config)
            if self.partition_id in which:
                return CORRUPTIONS[self.partition_id][1](list(arrays), s, dict(metrics))
            return arrays, s, metrics

        monkeypatch.setattr(FedPowerClient, "fit", fit)

    return install


@pytest.mark.usefixtures("every_iterate")
def test_malformed_replies_are_rejected_counted_and_logged(corrupt_replies, caplog):
    corrupt_replies(set(CORRUPTIONS))
    over = dict(num_clients=12, num_samples=2400, dimension=20, rank=3, iteration_rank=4, local_steps=2,
                schedule="fixed", num_server_rounds=6, row_normalize=True)  # unit rows: the norm bound applies
    with caplog.at_level(logging.WARNING, logger="flwr"):  # the rounds go on; the model needs every client
        strategy = run_aborted(r"^summary: partition\(s\) 1, 2, 3, 5, 6, 7, 8 did not answer", expect_clean=False,
                               **over)
    assert [r["rejected"] for r in strategy.records[1:]] == [8] * 6
    assert [r["participants"] for r in strategy.records[1:]] == [4] * 6
    assert all(r["failures"] == 0 for r in strategy.records)
    assert_finite_records(strategy)
    assert distances(strategy)[-1] < 0.1  # the four honest clients still find the eigenspace
    for pid, (name, _) in CORRUPTIONS.items():
        assert f"reply of partition {pid} (node {1000 + pid}) rejected" in caplog.text, name
    for fragment in ("shape (19, 4) instead of (20, 4)", "non-finite", "dtype int64", "above the bound",
                     "3 arrays instead of 2", "Z_prev is not orthonormal", "claims partition-id 0",
                     "the reply reports"):
        assert fragment in caplog.text


@pytest.mark.usefixtures("every_iterate")
def test_norm_bound_never_rejects_honest_noisy_replies():
    """Theorem 6's noise at a tiny s_i is huge; the bound sqrt(r) + 8 nu sqrt(d r) still lets it through."""
    by_iterations = {k: v for k, v in TINY.items() if k != "num_server_rounds"}  # total-iterations fixes the rounds
    strategy = run_app(**by_iterations, epsilon=0.5, local_steps=2, total_iterations=6, row_normalize=True)
    assert all(r["rejected"] == 0 for r in strategy.records)
    strategy = run_app(**TINY, noise_std=1e300, row_normalize=True)  # entries near 1e300: the norm is computed without overflow
    assert all(r["rejected"] == 0 for r in strategy.records)
    assert_finite_records(strategy)
    strategy = run_app(**TINY, noise_std=0.5, local_steps=1, row_normalize=True)
    assert all(r["rejected"] == 0 for r in strategy.records)
    assert_finite_records(strategy)


def test_unknown_node_and_unasked_partition_are_rejected(caplog):
    from flwr.server.client_proxy import ClientProxy

    strategy = run_app(**dict(TINY, num_clients=6), clients_per_round=2, local_steps=1)
    params = ndarrays_to_parameters([strategy.iterates[-1]])
    instructions = strategy.configure_fit(3, params, None)
    asked = {strategy.partition_of(proxy) for proxy, _ in instructions}
    not_asked = min(set(range(6)) - asked)
    Y = np.full((6, 3), 0.1)

    class Stranger(ClientProxy):
        def get_properties(self, *a, **k): ...
        def get_parameters(self, *a, **k): ...
        def fit(self, *a, **k): ...
        def evaluate(self, *a, **k): ...
        def reconnect(self, *a, **k): ...

    results = [(Stranger("999"), fitres([Y], 20)), (strategy.proxies[not_asked], fitres([Y], strategy.sizes[not_asked]))]
    with caplog.at_level(logging.WARNING, logger="flwr"):
        strategy.aggregate_fit(3, results, [])
    assert strategy._pending["rejected"] == 2
    assert "node 999 is not a registered client" in caplog.text
    assert f"partition {not_asked} was not asked this round" in caplog.text
    assert np.all(np.isfinite(strategy.iterates[-1]))


# -- a client's data ----------------------------------------------------------------------------------------------

def client_cfg(**over):
    return validate_run_config(fused_run_config({k.replace("_", "-"): v for k, v in {**TINY, **over}.items()}))


def write(path: Path, content) -> str:
    if isinstance(content, str):
        path.write_text(content)
    else:
        np.save(path, content, allow_pickle=True)
    return str(path)


@pytest.mark.parametrize("name, content, fragment", [
    ("nan.npy", np.array([[1.0, np.nan, 0, 0, 0, 0]] * 4), "non-finite entries"),
    ("wide.npy", np.ones((10, 7)), "has 7 columns, but the run's data have dimension d = 6"),
    ("words.npy", np.array([["a"] * 6] * 3), "a real numeric array is required"),
    ("empty.npy", np.zeros((0, 6)), "at least 1 row"),
    ("flat.npy", np.ones(6), "a 2-D array"),
    ("text.csv", "1,2,3,4,5,x\n", "is not a number"),
    ("rows.txt", "1,2,3,4,5,6\n", "must be a .npy or .csv file"),
])
def test_bad_deployment_data_fail_naming_partition_and_file(tmp_path, name, content, fragment):
    path = write(tmp_path / name, content)
    with pytest.raises(ValueError) as info:
        load_client_covariance(client_cfg(), {"partition-id": 2, "data-path": path})
    assert str(info.value).startswith(f"partition 2: node config data-path {path!r}: ")
    assert fragment in str(info.value)


def test_bad_partition_ids_and_missing_files_are_clear(tmp_path):
    cfg = client_cfg()
    with pytest.raises(ValueError, match="partition-id = 4 is outside 0..num-clients-1 = 3"):
        load_client_covariance(cfg, {"partition-id": 4})
    with pytest.raises(ValueError, match="partition-id must be an integer, got 'one'"):
        load_client_covariance(cfg, {"partition-id": "one"})
    with pytest.raises(ValueError, match=r"partition 1: node config data-path .*: no such file"):
        load_client_covariance(cfg, {"partition-id": 1, "data-path": str(tmp_path / "gone.npy")})


def test_deployment_rows_are_normalised_even_when_huge_and_few(tmp_path):
    """With row-normalize, rows of norm ~1e200 are scaled to unit norm (no overflow); fewer rows than r are
    accepted; without it (the default) the same rows overflow M^T M and are refused naming the file."""
    rows = np.array([[1e200, 2e200, 0, 0, 0, 0], [0, 0, 3.0, 0, 0, 4.0]])
    A, s, pid = load_client_covariance(client_cfg(row_normalize=True),
                                       {"partition-id": 0, "data-path": write(tmp_path / "r.npy", rows)})
    assert (s, pid) == (2, 0) and np.linalg.matrix_rank(A) == 2 < 3  # s_i = 2 < iteration-rank = 3
    assert np.trace(A) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="partition 0: node config data-path .*non-finite entries"):
        load_client_covariance(client_cfg(), {"partition-id": 0, "data-path": write(tmp_path / "r.npy", rows)})


def test_deployment_without_row_normalisation_but_with_noise_is_refused(tmp_path):
    from client_app.app import client_fn
    from flwr.common import Context, RecordDict

    path = write(tmp_path / "r.npy", np.ones((5, 6)))
    run_config = fused_run_config({"row-normalize": False, "epsilon": 1.0, "dimension": 6})
    context = Context(1, 5, {"partition-id": 0, "data-path": path}, RecordDict(), run_config)
    with pytest.raises(ConfigError, match="row-normalize must be true when epsilon or noise-std is set"):
        client_fn(context)


@pytest.fixture
def bad_data_on(monkeypatch, tmp_path):
    """Give chosen partitions a deployment data-path file instead of their simulated partition."""
    import client_app.app

    real = client_app.app.app

    def install(files):
        def app(message, context):
            pid = context.node_config[PARTITION_ID_KEY]
            if pid in files:
                context.node_config["data-path"] = write(tmp_path / f"node{pid}.npy", files[pid])
            return real(message, context)

        monkeypatch.setattr(client_app.app, "app", app)

    return install


@pytest.mark.usefixtures("every_iterate")
def test_a_node_with_bad_data_is_left_out_and_the_run_goes_on(bad_data_on, caplog):
    bad_data_on({2: np.full((30, 6), np.nan), 3: np.ones((30, 9))})
    with caplog.at_level(logging.WARNING, logger="flwr"):
        strategy = run_app(expect_clean=False, **TINY, local_steps=2)
    assert sorted(strategy.proxies) == [0, 1]
    assert all(r["failures"] == 2 and r["participants"] == 2 for r in strategy.records[1:])
    assert_finite_records(strategy)
    assert "node 1002 is left out of the run" in caplog.text and "partition 2: node config data-path" in caplog.text
    assert "has 9 columns, but the run's data have dimension d = 6" in caplog.text
    assert "no usable node for partition(s) 2, 3 of num-clients = 4" in caplog.text


@pytest.mark.usefixtures("every_iterate")
def test_the_reference_client_with_bad_data_is_replaced(bad_data_on):
    bad_data_on({0: np.zeros((0, 6))})
    strategy = run_app(**TINY, local_steps=3, schedule="fixed", clients_per_round=3, seed=4)
    assert 0 not in strategy.proxies
    assert all(r["distinct_participants"] >= 1 for r in strategy.records[1:])
    assert_finite_records(strategy)


@pytest.mark.usefixtures("every_iterate")
def test_a_good_deployment_file_is_used(bad_data_on):
    """A node with a valid data-path file joins; its rows are normalised like simulated data."""
    bad_data_on({1: np.random.default_rng(0).standard_normal((25, 6)) * 1e3})
    strategy = run_app(**TINY)
    assert strategy.sizes[1] == 25 and all(r["failures"] == 0 for r in strategy.records)
    assert_finite_records(strategy)


def test_duplicate_partition_ids_and_strict_strategies(monkeypatch, caplog):
    import client_app.app

    real = client_app.app.app

    def app(message, context):  # node 1002 claims partition 1, which node 1001 already has
        if context.node_id == 1002:
            context.node_config[PARTITION_ID_KEY] = 1
        return real(message, context)

    monkeypatch.setattr(client_app.app, "app", app)
    with caplog.at_level(logging.WARNING, logger="flwr"):
        strategy = run_app(expect_clean=False, **TINY)
    assert "node 1002 is left out of the run: it reports partition-id 1, which node 1001 already has" in caplog.text
    assert sorted(strategy.proxies) == [0, 1, 3] and strategy.records[-1]["failures"] == 1
    import dataclasses

    from fl_strategies.settings import registry

    strict = dataclasses.replace(registry.STRATEGIES["fedpower"], partial_ok=False)  # needs every partition
    monkeypatch.setitem(registry.STRATEGIES, "fedpower", strict)
    with pytest.raises(ConfigError, match=r"no usable node for partition\(s\) 2 of num-clients = 4 \(node 1002"):
        run_app(**TINY)


def test_no_usable_node_refuses_the_run_before_round_one(bad_data_on):
    bad_data_on({i: np.ones((3, 5)) for i in range(4)})
    with pytest.raises(ConfigError, match=r"no usable node for partition\(s\) 0, 1, 2, 3 .*has 5 columns"):
        run_app(**TINY)


# -- the run config -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("overrides, fragment", [
    ({"dataset": ""}, "dataset must name a data set or a .npy/.csv file, got ''"),
    ({"round-timeout": float("nan")}, "round-timeout must be -1 or a number >= 0 and finite, got nan"),
    ({"round-timeout": float("inf")}, "round-timeout must be -1 or a number >= 0 and finite, got inf"),
    ({"round-timeout": -2.0}, "round-timeout must be -1 or a number >= 0, got -2.0"),
    ({"dirichlet-alpha": float("inf")}, "dirichlet-alpha must be a number > 0 and finite, got inf"),
    ({"delta": float("nan")}, "delta must be a number in (0, 1) and finite, got nan"),
    ({"epsilon": float("inf")}, "epsilon must be a finite number >= 0 (0 = no noise), got inf"),
    ({"seed": -1}, "seed must be an integer >= 0 (it seeds numpy's generators), got -1"),
    ({"data-seed": -3}, "data-seed must be an integer >= 0"),
    ({"num-server-rounds": 10**12}, f"num-server-rounds must be at most {MAX_ITERATIONS}, got 1000000000000"),
    ({"total-iterations": 10**9}, f"total-iterations must be at most {MAX_ITERATIONS}"),
    ({"local-steps": 10**6, "schedule": "fixed"}, "means T = 10000000 local iterations; at most 1000000"),
    ({"epsilon": 1e-320, "row-normalize": True}, "epsilon = 1e-320 (with delta = 0.0001) is too small"),
    ({"noise-std": 1e-200, "row-normalize": True}, "noise-std = 1e-200 is too small to account for"),
    ({"rank": float("nan")}, "rank must be an integer >= 1, got nan"),
    ({"strategy": 3}, "strategy must be a string, got 3"),
])
def test_more_bad_values_name_the_key(overrides, fragment):
    with pytest.raises(ConfigError) as info:
        validate_run_config(fused_run_config({}) | overrides)
    assert fragment in str(info.value)


def test_unwritable_results_dir_fails_before_any_client_is_contacted(tmp_path):
    calls = []

    def spy(msg, pid):
        calls.append(pid)
        return "ok"

    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(ConfigError, match=r"results-dir = .*file/out' is not a writable directory"):
        run_app(fault_fn=spy, results_dir=str(blocker / "out"), **TINY)
    assert calls == []


def _four_rows() -> str:
    path = Path(tempfile.mkdtemp()) / "four.npy"
    np.save(path, np.arange(24.0).reshape(4, 6))
    return str(path)


def test_data_errors_are_config_errors_before_round_one():
    with pytest.raises(ConfigError, match=r'"num-samples" is 10 but .*four\.npy.* has 4 rows; use 0'):
        run_app(**dict(TINY, dataset=_four_rows(), dimension=0, num_samples=10, num_clients=2))
    with pytest.raises(ConfigError, match="partitioner"):
        run_app(**dict(TINY, partitioner="group"))
    with pytest.raises(ConfigError, match=r"dimension = 1000000000 .* need about 2.4e\+10 GB of memory"):
        run_app(**dict(TINY, dimension=10**9, strategy="covariance"))  # would otherwise be killed by the OS
    with pytest.raises(ConfigError, match=r"dimension = 1000000000 .* need about 2.56e\+03 GB of memory"):
        run_app(**dict(TINY, dimension=10**9))  # fedpower: the rows, no d x d matrix
    with pytest.raises(ConfigError, match="num-clients"):
        run_app(**dict(TINY, num_clients=10**20))  # refused before the in-process engine makes its nodes


CONFIG_VALUES = st.one_of(st.none(), st.booleans(), st.integers(-10**30, 10**30),
                          st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12),
                          st.lists(st.integers(), max_size=2), st.binary(max_size=3),
                          st.sampled_from(["fedpower", "power", "iid", "fixed", "opt", "os", "digits"]))


@FAST
@given(raw=st.dictionaries(st.one_of(st.sampled_from(sorted(KEYS)), st.text(max_size=8), st.integers()),
                           CONFIG_VALUES, max_size=6))
def test_config_fuzz_random_dicts_only_config_error(raw):
    with pytest.raises(ConfigError):
        validate_run_config(raw)


@settings(max_examples=50, deadline=None)
@given(data=st.data())
def test_config_fuzz_random_values_for_real_keys(data):
    raw = fused_run_config({})
    for key in data.draw(st.lists(st.sampled_from(sorted(KEYS)), min_size=1, max_size=3, unique=True)):
        raw[key] = data.draw(CONFIG_VALUES)
    try:
        cfg = validate_run_config(raw)
    except ConfigError as ex:
        assert str(ex)
        return
    for name, key in KEYS.items():
        assert isinstance(cfg[name], key.kind)
        if key.kind is float:
            assert math.isfinite(cfg[name])


# -- random valid configs end to end ------------------------------------------------------------------------------

@st.composite
def small_runs(draw):
    m = draw(st.integers(1, 4))
    over = dict(
        strategy=draw(st.sampled_from(["fedpower", "power"])),
        num_clients=m, clients_per_round=draw(st.integers(0, m)),
        num_samples=draw(st.integers(m, 60)), dimension=draw(st.integers(2, 7)),
        rank=draw(st.integers(1, 3)), iteration_rank=draw(st.integers(0, 4)),
        num_server_rounds=draw(st.integers(1, 3)), total_iterations=draw(st.integers(0, 5)),
        local_steps=draw(st.integers(1, 3)), schedule=draw(st.sampled_from(["fixed", "decayed"])),
        alignment=draw(st.sampled_from(["opt", "none"])),
        partitioner=draw(st.sampled_from(["iid", "contiguous", "dirichlet"])),
        epsilon=draw(st.sampled_from([0.0, 0.5, 5.0])), noise_std=draw(st.sampled_from([0.0, 0.0, 1e-3])),
        row_normalize=draw(st.booleans()), seed=draw(st.integers(0, 5)), data_seed=draw(st.integers(0, 5)),
    )
    if draw(st.booleans()):
        over.update(dataset="digits", dimension=0, num_samples=draw(st.integers(0, 1)) * draw(st.integers(m, 200)),
                    partitioner=draw(st.sampled_from(["iid", "label", "dirichlet"])))
    return over


@pytest.mark.usefixtures("every_iterate")
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(over=small_runs())
def test_random_small_configs_give_finite_results_or_a_config_error_before_round_one(over):
    contacted = []

    def spy(msg, pid):
        contacted.append(pid)
        return "ok"

    with tempfile.TemporaryDirectory() as out:
        try:
            strategy = run_app(fault_fn=spy, results_dir=out, **over)
        except ConfigError:
            assert contacted == []  # refused before any client was asked anything
            return
        assert_finite_records(strategy)
        assert all(r["rejected"] == 0 and r["failures"] == 0 for r in strategy.records)
        with open(Path(out) / "rounds.csv", newline="") as fh:
            rows = list(csv.DictReader(fh))
        assert len(rows) == len(strategy.records)
        for row in rows:
            for key, cell in row.items():
                assert cell.lower() not in ("nan", "inf", "-inf"), (key, cell)
            noisy = strategy.cfg["epsilon"] > 0 or strategy.cfg["noise-std"] > 0
            assert (row["epsilon_spent"] == "") == (not noisy) and (row["delta"] == "") == (not noisy)


# -- results tables -----------------------------------------------------------------------------------------------

def test_results_table_never_holds_a_non_finite_number(tmp_path, caplog):
    from fl_strategies.protocol.strategies.fedpower import FedPowerStrategy
    from server_app.results import ResultsWriter

    cfg = client_cfg()
    strategy = FedPowerStrategy(cfg, 6, reference=None)  # no reference: the accuracy columns are empty
    strategy.on_round = ResultsWriter(tmp_path)
    strategy.iterates = [orth(np.random.default_rng(0).standard_normal((6, 3)))]
    strategy.evaluate(0, ndarrays_to_parameters(strategy.iterates))
    strategy.finish()  # the row waits for the next round's explained variance; there is none
    assert strategy.records[0]["subspace_distance"] is None and strategy.records[0]["iterated_explained_variance"] is None
    with open(tmp_path / "rounds.csv", newline="") as fh:
        rows = list(csv.reader(fh))
    assert rows[1][rows[0].index("subspace_distance")] == "" and rows[1][rows[0].index("epsilon_spent")] == ""
    other = ResultsWriter(tmp_path / "other")
    with caplog.at_level(logging.WARNING, logger="flwr"):
        other({"round": 1, "a": float("nan"), "b": float("inf"), "c": 1.5, "d": None}, strategy.iterates[0])
    assert "non-finite a, b written as empty cell(s)" in caplog.text
    with open(tmp_path / "other" / "rounds.csv", newline="") as fh:
        assert list(csv.reader(fh)) == [["round", "a", "b", "c", "d"], ["1", "", "", "1.5", ""]]
