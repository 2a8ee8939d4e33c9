"""client_app.data where bugs hide: data given directly, the names in messages, the rows and operator a node
builds from its file, and the checks of ``A_i``; each against a dense computation on the same rows."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from client_app.data import NodeData

RNG = np.random.default_rng(7)
ROWS = RNG.standard_normal((9, 5))
Z = RNG.standard_normal((5, 2))


def gram(M: np.ndarray) -> np.ndarray:
    return M.T @ M / len(M)


# -- data given directly ---------------------------------------------------------------------------------------------
def test_rows_given_directly_make_the_operator_of_those_rows():
    data = NodeData.of(3, rows=ROWS)
    op = data.operator()
    assert data.partition_id == 3 and op.num_rows == 9
    np.testing.assert_allclose(op @ Z, gram(ROWS) @ Z, rtol=1e-12)
    assert data.rows is ROWS


def test_a_covariance_given_directly_is_the_operator_with_or_without_its_rows():
    A = gram(ROWS)
    alone = NodeData.of(1, covariance=(A, 9)).operator()
    assert alone.rows is None and alone.num_rows == 9
    np.testing.assert_allclose(alone @ Z, A @ Z, rtol=1e-12)
    both = NodeData.of(1, rows=ROWS, covariance=(A, 9)).operator()
    assert both.rows is not None and both.rows.rows is ROWS
    np.testing.assert_allclose(both.row_sum, ROWS.sum(axis=0), rtol=1e-12)
    assert NodeData.of(2)._operator is None  # nothing given: nothing built


# -- the source a message names --------------------------------------------------------------------------------------
def test_the_source_names_the_folder_file_the_data_path_or_the_dataset(tmp_path):
    for pid in range(2):
        np.save(tmp_path / f"partition_{pid}.npy", ROWS)
    cfg = {"dataset": str(tmp_path), "num-clients": 2}
    folder = NodeData(cfg, {"partition-id": 1})
    assert folder.source == f"partition 1: dataset folder file {str(tmp_path / 'partition_1.npy')!r}"
    own = NodeData(cfg, {"partition-id": 1, "data-path": "rows.npy"})
    assert own.source == "partition 1: node config data-path 'rows.npy'"
    generated = NodeData({"dataset": "dp-haar", "num-clients": 2}, {"partition-id": 0})
    assert generated.source == "partition 0 of dataset 'dp-haar'"


# -- a node's file: which one, its fingerprint, its rows -------------------------------------------------------------
def config(tmp_path, **overrides) -> dict:
    """A validated run config of a fedpower run on node files (``dataset = "nodes"``)."""
    from fl_strategies.settings.config import validate_run_config
    from simulations.engines import fused_run_config

    over = {"strategy": "fedpower", "dataset": "nodes", "num-clients": 2, "rank": 1, "iteration-rank": 2,
            "row-normalize": False, "results-dir": str(tmp_path / "out")}
    over.update(overrides)
    return validate_run_config(fused_run_config(over))


def test_the_fingerprint_is_the_data_path_the_folder_file_or_the_dataset_file_and_none_for_generated_data(tmp_path):
    import hashlib

    for pid, scale in ((0, 1.0), (1, 2.0)):
        np.save(tmp_path / f"partition_{pid}.npy", ROWS * scale)
    np.save(tmp_path / "own.npy", ROWS * 3)
    np.save(tmp_path / "all.npy", ROWS * 4)

    def sha(name):
        return hashlib.sha256((tmp_path / name).read_bytes()).hexdigest()

    folder = {"dataset": str(tmp_path), "num-clients": 2}
    assert NodeData(folder, {"partition-id": 1}).fingerprint == sha("partition_1.npy")
    assert NodeData(folder, {"partition-id": 1, "data-path": str(tmp_path / "own.npy")}).fingerprint == sha("own.npy")
    whole = {"dataset": str(tmp_path / "all.npy"), "num-clients": 2}
    assert NodeData(whole, {"partition-id": 0}).fingerprint == sha("all.npy")
    assert NodeData({"dataset": "dp-haar", "num-clients": 2}, {"partition-id": 0}).fingerprint is None


@pytest.mark.parametrize("suffix, normalize, clip", [(".npy", False, 0.0), (".npy", True, 0.0), (".npy", False, 1.5),
                                                     (".csv", True, 0.0), (".csv", False, 0.5)])
def test_a_files_rows_are_float64_in_memory_normalised_or_clipped_as_the_run_says(tmp_path, suffix, normalize, clip):
    # a .npy file of float32 is memory-mapped in its dtype; a .csv file is read into float64 in memory
    stored = (ROWS * 4).astype(np.float32 if suffix == ".npy" else np.float64)
    path = tmp_path / f"rows{suffix}"
    if suffix == ".npy":
        np.save(path, stored)
    else:
        np.savetxt(path, stored, delimiter=",", fmt="%.17g")
    cfg = config(tmp_path, **{"row-normalize": normalize, "clip-norm": clip})
    rows = NodeData(cfg, {"partition-id": 0, "data-path": str(path)}).rows
    want = stored.astype(np.float64)
    norms = np.linalg.norm(want, axis=1, keepdims=True)
    if normalize:
        want = want / norms
    if clip:
        want = want * np.minimum(1.0, clip / norms)
    assert type(rows) is np.ndarray and rows.dtype == np.float64
    np.testing.assert_allclose(rows, want, rtol=1e-12)


def test_float64_rows_in_memory_are_used_as_they_are_and_a_memory_map_is_read_into_memory(tmp_path):
    np.save(tmp_path / "rows.npy", ROWS)
    cfg = config(tmp_path)
    mapped = NodeData(cfg, {"partition-id": 0, "data-path": str(tmp_path / "rows.npy")}).rows
    assert type(mapped) is np.ndarray and not isinstance(mapped, np.memmap)
    np.testing.assert_array_equal(mapped, ROWS)
    assert NodeData.of(0, rows=ROWS).rows is ROWS


def test_the_sums_a_node_reports_are_those_of_its_rows(tmp_path):
    np.save(tmp_path / "rows.npy", ROWS + 2.0)
    data = NodeData(config(tmp_path), {"partition-id": 1, "data-path": str(tmp_path / "rows.npy")})
    M = ROWS + 2.0
    m = M.mean(axis=0)
    assert data.num_rows == 9
    np.testing.assert_allclose(data.row_sum, M.sum(axis=0), rtol=1e-12)
    assert data.sum_of_squares(False) == pytest.approx(float((M ** 2).sum()), rel=1e-12)
    assert data.sum_of_squares(True) == pytest.approx(float(((M - m) ** 2).sum()), rel=1e-12)
    np.testing.assert_allclose(data.column_sq_sums(), ((M - m) ** 2).sum(axis=0), rtol=1e-12)
    A, s = data.covariance
    np.testing.assert_allclose(A, gram(M), rtol=1e-12)
    assert s == 9


def replace(path, rows: np.ndarray) -> None:
    """A new version of the file at ``path``, put in place as a new file (a memory map of the old one stays valid)."""
    np.save(path.with_suffix(".new.npy"), rows)
    path.with_suffix(".new.npy").replace(path)


# -- the operator: built once per source and file version, on the cheaper path ---------------------------------------
def test_the_operator_is_built_once_per_file_version_and_preprocessing(tmp_path):
    path = tmp_path / "rows.npy"
    np.save(path, ROWS)
    cfg, node = config(tmp_path), {"partition-id": 0, "data-path": str(path)}
    first = NodeData(cfg, node).operator()
    assert NodeData(cfg, node).operator() is first  # a client rebuilt at the next message: the same operator
    assert NodeData(config(tmp_path, **{"row-normalize": True}), node).operator() is not first
    replace(path, np.vstack([ROWS, ROWS]))  # a new version of the file: read again
    again = NodeData(cfg, node).operator()
    assert again.num_rows == 18
    np.testing.assert_allclose(again @ Z, gram(ROWS) @ Z, rtol=1e-12)


def test_at_most_the_configured_number_of_operators_is_kept_oldest_first(tmp_path, monkeypatch):
    import client_app.data as data_module

    monkeypatch.setattr(data_module, "_OPERATORS", data_module.OrderedDict())
    monkeypatch.setattr(data_module, "_MAX_OPERATORS", 2)
    cfg, ops = config(tmp_path), []
    for i in range(3):
        np.save(tmp_path / f"r{i}.npy", ROWS + i)
        ops.append(NodeData(cfg, {"partition-id": 0, "data-path": str(tmp_path / f"r{i}.npy")}).operator())
    kept = list(data_module._OPERATORS.values())
    assert len(kept) == 2 and kept[0] is ops[1] and kept[1] is ops[2]


def test_the_gram_path_is_taken_when_many_products_make_it_cheaper_and_the_log_says_which(tmp_path, caplog):
    rows = np.random.default_rng(1).standard_normal((200, 5))
    for name, products, rank, path, logged in (("few", 1, 1, "rows", "M^T (M Z) from row blocks, no d x d matrix"),
                                               ("many", 100, 5, "gram", "M^T M / s formed once")):
        np.save(tmp_path / f"{name}.npy", rows)
        with caplog.at_level(logging.INFO, logger="flwr"):
            op = NodeData(config(tmp_path), {"partition-id": 0, "data-path": str(tmp_path / f"{name}.npy")}
                          ).operator(products, rank)
        assert op.path == path and f"{path} path ({logged})" in caplog.text
        np.testing.assert_allclose(op @ Z, gram(rows) @ Z, rtol=1e-10)


@pytest.mark.parametrize("clip", [0.0, 0.5])
def test_a_simulated_partition_on_the_gram_path_shares_the_harness_covariance_unless_its_rows_are_clipped(clip):
    # the harness caches A_i of the unclipped rows for every run of a sweep; clipped rows need their own
    from fl_strategies.settings.config import validate_run_config
    from fl_strategies.files.harness import find_harness
    from fl_strategies.kernels.rows import clip_rows
    from simulations.engines import fused_run_config

    cfg = validate_run_config(fused_run_config({"strategy": "fedpower", "dataset": "fedpower-model1",
                                                "dimension": 6, "num-samples": 400, "num-clients": 2,
                                                "rank": 1, "iteration-rank": 2, "data-seed": 5,
                                                "clip-norm": clip}))
    harness = find_harness(cfg)
    rows = harness.client_rows(cfg, 1)
    op = NodeData(cfg, {"partition-id": 1}).operator(products=50, rank=2)
    assert op.path == "gram" and op.rows is not None and op.num_rows == len(rows)
    assert (op.gram is harness.client_covariance(cfg, 1)[0]) is (clip == 0)
    V = RNG.standard_normal((6, 2))
    np.testing.assert_allclose(op @ V, gram(clip_rows(rows, clip) if clip else rows) @ V, rtol=1e-10)


def test_a_node_without_a_file_or_a_harness_is_told_to_give_a_data_path(tmp_path):
    with pytest.raises(ValueError, match="partition 1: the node config has no data-path, and no simulation harness "
                                         "provides dataset 'nodes'"):
        NodeData(config(tmp_path), {"partition-id": 1}).operator()


# -- the mean and scales a server broadcasts ---------------------------------------------------------------------------
def test_the_broadcast_mean_and_scale_centre_and_scale_the_operator():
    data = NodeData.of(0, rows=ROWS)
    mu, scale = RNG.standard_normal(5), RNG.uniform(0.5, 2.0, 5)
    assert data.operator_for({}) is data.operator()
    centred = (ROWS - mu) / scale
    op = data.operator_for({"mean": mu.astype("<f8").tobytes(), "scale": scale.astype("<f8").tobytes()})
    np.testing.assert_allclose(op.dense(), gram(centred), rtol=1e-10, atol=1e-12)
    A, s = data.covariance_for({"mean": mu.astype("<f8").tobytes()})
    np.testing.assert_allclose(A, gram(ROWS - mu), rtol=1e-10, atol=1e-12)
    assert s == 9


@pytest.mark.parametrize("config, message", [
    ({"mean": np.zeros(4).tobytes()}, "the broadcast mean is not 5 float64 numbers"),
    ({"mean": [0.0] * 5}, "the broadcast mean is not 5 float64 numbers"),
    ({"mean": [0.0] * 40}, "the broadcast mean is not 5 float64 numbers"),  # 40 items, but not 40 bytes
    ({"mean": np.zeros(5).tobytes(), "scale": np.ones(6).tobytes()}, "the broadcast scale is not 5 float64"),
    ({"scale": np.ones(5).tobytes()}, "column scales without the mean"),
    ({"mean": np.zeros(5).tobytes(), "scale": np.array([1, 1, 0, 1, 1.0]).tobytes()}, "not finite and > 0"),
    ({"mean": np.zeros(5).tobytes(), "scale": np.array([1, 1, np.inf, 1, 1.0]).tobytes()}, "not finite and > 0"),
])
def test_a_malformed_broadcast_is_refused_naming_what(config, message):
    with pytest.raises(ValueError, match=message):
        NodeData.of(0, rows=ROWS).operator_for(config)


# -- the checks of A_i -----------------------------------------------------------------------------------------------
def test_the_local_matrix_checks_rows_finiteness_and_unit_trace_at_1e_9():
    from client_app.data import check_local_matrix

    normalised, raw = {"row-normalize": True}, {"row-normalize": False}
    with pytest.raises(ValueError, match="here: the partition has no rows"):
        check_local_matrix(np.eye(2), 0, raw, "here")
    with pytest.raises(ValueError, match="non-finite entries"):
        check_local_matrix(np.array([[1.0, np.nan], [np.nan, 1.0]]), 3, raw, "here")
    check_local_matrix(np.diag([0.5, 0.5 + 0.9e-9]), 3, normalised, "here")  # within the rounding slack
    check_local_matrix(np.diag([1.0, 0.0]), 1, normalised, "here")  # one row is enough
    with pytest.raises(ValueError, match="rows are not of unit norm"):
        check_local_matrix(np.diag([0.5, 0.5 + 1.5e-9]), 3, normalised, "here")
    check_local_matrix(np.diag([5.0, 5.0]), 3, raw, "here")  # without row-normalize any finite trace


def test_an_operator_from_rows_is_checked_from_its_column_squares():
    from client_app.data import check_local_operator
    from fl_strategies.kernels.products import LocalOperator
    from fl_strategies.kernels.rows import RowBlocks

    def check(rows, normalize):
        check_local_operator(LocalOperator.from_rows(RowBlocks(rows)), {"row-normalize": normalize}, "here")

    unit = ROWS / np.linalg.norm(ROWS, axis=1, keepdims=True)
    check(unit, True)  # tr = 1 exactly: accepted
    check(unit[:1], True)  # one row is enough
    check(unit * np.sqrt(1 + 0.9e-9), True)  # within the rounding slack
    check(unit * 1.5, False)
    with pytest.raises(ValueError, match="rows are not of unit norm"):
        check(unit * np.sqrt(1 + 1.5e-9), True)
    with pytest.raises(ValueError, match="non-finite entries"):
        check(np.full((3, 2), 1e200), False)  # the squares overflow, the row sums do not
    with pytest.raises(ValueError, match="here: the partition has no rows"):
        check(np.zeros((0, 2)), False)


# -- rows and operator of one node agree; float64 rows in memory are not copied -------------------------------------
def test_the_rows_are_those_the_operator_was_built_from_even_after_the_file_changed(tmp_path):
    path = tmp_path / "rows.npy"
    np.save(path, ROWS)
    data = NodeData(config(tmp_path), {"partition-id": 0, "data-path": str(path)})
    op = data.operator()
    replace(path, ROWS[:4] * 2)  # a new version after the operator was built
    np.testing.assert_array_equal(data.rows, ROWS)
    assert len(data.rows) == op.num_rows


def test_a_csv_files_float64_rows_are_read_once_read_only_and_shared_by_every_client_built_on_it(tmp_path):
    path = tmp_path / "rows.csv"
    np.savetxt(path, ROWS, delimiter=",", fmt="%.17g")
    cfg, node = config(tmp_path), {"partition-id": 0, "data-path": str(path)}
    first, second = NodeData(cfg, node).rows, NodeData(cfg, node).rows
    assert first is second and not first.flags.writeable
    np.testing.assert_array_equal(first, ROWS)


def test_a_simulated_partition_without_rows_is_refused_naming_it(monkeypatch):
    import client_app.data as data_module

    class Empty:
        def client_rows(self, cfg, pid):
            return np.zeros((0, 6))

    monkeypatch.setattr(data_module, "find_harness", lambda cfg: Empty())
    with pytest.raises(ValueError, match="partition 1: the partition has no rows"):
        NodeData({"dataset": "dp-haar", "num-clients": 2, "clip-norm": 0.0, "row-normalize": False},
                 {"partition-id": 1}).rows


def test_an_operator_asked_for_nothing_in_particular_is_built_for_one_product_of_one_column(tmp_path):
    # d = 2, 100 rows: one product of one column is cheaper from the rows; two products, or two columns, from M^T M
    from fl_strategies.kernels.products import gram_is_cheaper

    assert not gram_is_cheaper(100, 2, 1, 1) and gram_is_cheaper(100, 2, 1, 2) and gram_is_cheaper(100, 2, 2, 1)
    for name in ("thin.npy", "thin2.npy"):
        np.save(tmp_path / name, np.random.default_rng(2).standard_normal((100, 2)))
    cfg = config(tmp_path)
    assert NodeData(cfg, {"partition-id": 0, "data-path": str(tmp_path / "thin.npy")}).operator().path == "rows"
    assert NodeData(cfg, {"partition-id": 0, "data-path": str(tmp_path / "thin2.npy")}).operator_for({}).path == "rows"


def test_two_files_of_the_same_size_and_time_are_two_sources(tmp_path):
    import os

    for name, rows in (("a.npy", ROWS), ("b.npy", -ROWS)):
        np.save(tmp_path / name, rows)
        os.utime(tmp_path / name, ns=(1_000_000_000, 1_000_000_000))
    cfg = config(tmp_path)
    a, b = (NodeData(cfg, {"partition-id": 0, "data-path": str(tmp_path / name)}).operator()
            for name in ("a.npy", "b.npy"))
    assert a is not b
    np.testing.assert_allclose(b.row_sum, -ROWS.sum(axis=0), rtol=1e-12)


# -- a data-path file in a simulation: the width against the run's dimension, a sparse file ------------------------
@pytest.mark.parametrize("dimension, refused", [(0, False), (1, True), (5, False), (6, True)])
def test_a_files_width_is_checked_against_the_runs_dimension_only_when_the_run_fixes_one(tmp_path, dimension,
                                                                                          refused):
    """``dimension = 0`` (the generator's own width) leaves the comparison to the server; a fixed one, 1 included,
    must be the file's width (5 columns here)."""
    path = tmp_path / "rows.npy"
    np.save(path, ROWS)
    cfg = config(tmp_path, dataset="fedpower-model1", dimension=dimension, rank=1, **{"iteration-rank": 1})
    data = NodeData(cfg, {"partition-id": 0, "data-path": str(path)})
    if refused:
        with pytest.raises(ValueError, match=rf"has 5 columns, but the run's data have dimension d = {dimension}"):
            data.rows
    else:
        np.testing.assert_array_equal(data.rows, ROWS)


def test_a_sparse_npz_file_is_read_as_stored_and_gives_the_dense_operator(tmp_path):
    """A scipy sparse ``.npz`` node file stays sparse (no read-only flag to set on it) and its operator is that
    of the dense rows."""
    import scipy.sparse as sp

    sparse = sp.random(40, 5, density=0.3, random_state=3, format="csr")
    path = tmp_path / "rows.npz"
    sp.save_npz(path, sparse)
    data = NodeData(config(tmp_path), {"partition-id": 0, "data-path": str(path)})
    assert sp.issparse(data.rows)
    dense = sparse.toarray()
    np.testing.assert_allclose(data.operator() @ Z, gram(dense) @ Z, rtol=1e-12, atol=1e-15)
