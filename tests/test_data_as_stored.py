"""Node files kept as stored (memory-mapped .npy, sparse .npz) and the d x d guards of the server and harness."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse

from fl_strategies.settings.config import ConfigError
from fl_strategies.files.data_files import open_samples, read_samples


def test_a_npy_file_is_memory_mapped_in_its_dtype(tmp_path):
    X = np.random.default_rng(0).integers(0, 3, (50, 20)).astype(np.int8)
    np.save(tmp_path / "g.npy", X)
    stored = open_samples(tmp_path / "g.npy")
    assert isinstance(stored, np.memmap) and stored.dtype == np.int8
    np.testing.assert_array_equal(read_samples(tmp_path / "g.npy"), X.astype(np.float64))


def test_a_non_finite_entry_is_found_block_by_block(tmp_path, monkeypatch):
    import fl_strategies.files.data_files as data_files

    monkeypatch.setattr(data_files, "BLOCK_BYTES", 8 * 20 * 3)  # three rows per block
    X = np.ones((40, 20), dtype=np.float32)
    X[17, 4] = np.nan
    X[30, 0] = np.inf
    np.save(tmp_path / "x.npy", X)
    with pytest.raises(ValueError, match=r"x.npy'.*2 non-finite entries.*first in row 17"):
        open_samples(tmp_path / "x.npy", "node config data-path")


def test_a_sparse_node_file_gives_the_same_operator_as_its_dense_rows(tmp_path):
    from client_app.data import NodeData

    rng = np.random.default_rng(1)
    X = rng.standard_normal((60, 30))
    X[rng.random(X.shape) < 0.8] = 0.0
    scipy.sparse.save_npz(tmp_path / "s.npz", scipy.sparse.csr_matrix(X))
    np.save(tmp_path / "d.npy", X)
    cfg = {"num-clients": 1, "row-normalize": False, "dataset": "nodes", "dimension": 0}
    ops = [NodeData(cfg, {"partition-id": 0, "data-path": str(tmp_path / name)}).operator() for name in
           ("s.npz", "d.npy")]
    assert ops[0].rows.sparse and not ops[1].rows.sparse
    mu = rng.standard_normal(30)
    Z = np.linalg.qr(rng.standard_normal((30, 3)))[0]
    np.testing.assert_allclose(ops[0].centered(mu) @ Z, ops[1].centered(mu) @ Z, rtol=0, atol=1e-12)
    Xc = X - mu
    np.testing.assert_allclose(ops[0].centered(mu) @ Z, Xc.T @ (Xc @ Z) / 60, rtol=0, atol=1e-12)


def test_row_normalize_is_applied_block_by_block_to_int8_rows(tmp_path):
    from client_app.data import NodeData

    X = np.random.default_rng(2).integers(0, 3, (40, 25)).astype(np.int8)
    np.save(tmp_path / "g.npy", X)
    cfg = {"num-clients": 1, "row-normalize": True, "dataset": "nodes", "dimension": 0}
    data = NodeData(cfg, {"partition-id": 0, "data-path": str(tmp_path / "g.npy")})
    Xn = X / np.linalg.norm(X.astype(float), axis=1, keepdims=True)
    Z = np.eye(25)[:, :4]
    np.testing.assert_allclose(data.operator() @ Z, Xn.T @ (Xn @ Z) / 40, rtol=0, atol=1e-14)
    np.testing.assert_allclose(data.rows, Xn, rtol=0, atol=1e-15)


def test_covariance_refuses_a_d_that_does_not_fit_naming_the_memory_and_fedpower():
    from fl_strategies.protocol.strategies.covariance import check_covariance_fits

    check_covariance_fits(1000, 4, memory=10**9)  # 48 MB
    with pytest.raises(ConfigError, match=r'd = 100000 .*4 clients needs about 480 GB.*use strategy = "fedpower"'):
        check_covariance_fits(100_000, 4, memory=16 * 10**9)


def test_the_memory_check_counts_d_x_d_only_where_a_strategy_forms_it(monkeypatch):
    import os

    from simulations.engines import fused_run_config
    from simulations.harness import check_memory

    monkeypatch.setattr(os, "sysconf", lambda name: 4096 if name == "SC_PAGE_SIZE" else 16 * 10**9 // 4096)
    wide = {"dataset": "fedpower-model1", "num-samples": 2000, "dimension": 100_000, "num-clients": 4}
    check_memory(fused_run_config({**wide, "strategy": "fedpower"}))  # 1.6 GB of rows, no d x d
    with pytest.raises(ConfigError, match="dimension = 100000"):
        check_memory(fused_run_config({**wide, "strategy": "covariance"}))


@pytest.mark.parametrize("center", [False, True])
def test_the_wide_reference_from_a_thin_svd_is_the_eigh_reference(center):
    from fl_strategies.kernels.metrics import Reference, round_metrics

    rng = np.random.default_rng(3)
    X = rng.standard_normal((40, 300)) * np.linspace(4, 0.1, 300) + 2.0
    dense, thin = Reference.from_rows([X], 2, 5, center=center), Reference.from_thin_svd(X, 2, 5, center=center)
    np.testing.assert_allclose(thin.values, dense.values, rtol=1e-12)
    assert np.linalg.norm(thin.vectors @ thin.vectors.T - dense.vectors @ dense.vectors.T) < 1e-10
    Z = rng.standard_normal((300, 5))
    a, b = round_metrics(Z, dense), round_metrics(Z, thin)
    for key in a:
        assert abs(a[key] - b[key]) <= 1e-10


def test_a_plink_bed_file_is_streamed_and_a_missing_call_is_refused_without_centring(tmp_path):
    bed_reader = pytest.importorskip("bed_reader")
    from client_app.data import NodeData

    G = np.random.default_rng(4).integers(0, 3, (30, 50)).astype(np.float32)
    bed_reader.to_bed(tmp_path / "g.bed", G)
    cfg = {"num-clients": 1, "row-normalize": False, "dataset": "nodes", "dimension": 0}
    op = NodeData(cfg, {"partition-id": 0, "data-path": str(tmp_path / "g.bed")}).operator()
    Z = np.eye(50)[:, :3]
    np.testing.assert_allclose(op @ Z, G.T.astype(float) @ (G.astype(float) @ Z) / 30, rtol=0, atol=1e-13)
    np.testing.assert_array_equal(read_samples(tmp_path / "g.bed"), G)
    G[7, 3] = np.nan
    bed_reader.to_bed(tmp_path / "m.bed", G)
    with pytest.raises(ValueError, match=r"m.bed'.*missing genotype calls.*needs center = true"):
        NodeData(cfg, {"partition-id": 0, "data-path": str(tmp_path / "m.bed")}).operator()
