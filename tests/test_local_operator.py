"""The local operator: products from rows as stored and from a Gram matrix agree, for every eigenspace strategy."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse

from fl_strategies.kernels.faps_local import FapsOptions, faps_client_round, local_subproblem, multiplier_factor
from fl_strategies.kernels.power import local_power_iterations
from fl_strategies.kernels.products import LocalOperator, gram_is_cheaper
from fl_strategies.kernels.rows import RowBlocks

TOL = 1e-12


def rel(a, b):
    return float(np.linalg.norm(np.asarray(a) - np.asarray(b)) / max(np.linalg.norm(np.asarray(b)), 1e-300))


def rows_of(kind, s=70, d=40, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.integers(0, 3, size=(s, d)).astype(np.int8) if kind == "int8" else \
        (rng.standard_normal((s, d)) * rng.uniform(0.5, 3, d) + rng.uniform(-2, 2, d))
    if kind == "float32":
        X = X.astype(np.float32)
    if kind == "sparse":
        X[rng.random(X.shape) < 0.7] = 0.0
        X = scipy.sparse.csr_matrix(X)
    return X


def dense(X):
    return np.asarray(X.toarray() if hasattr(X, "toarray") else X, dtype=np.float64)


def both(X, block_bytes=8 * 40 * 16):
    """The rows operator (in several row blocks) and the Gram operator of the same rows."""
    blocks = RowBlocks(X, block_bytes=block_bytes)
    return LocalOperator.from_rows(blocks), LocalOperator.from_rows(RowBlocks(X), use_gram=True)


@pytest.mark.parametrize("kind", ["float64", "float32", "int8", "sparse"])
@pytest.mark.parametrize("centred", [False, True])
@pytest.mark.parametrize("scaled", [False, True])
def test_rows_and_gram_paths_agree_with_the_centred_rows(kind, centred, scaled):
    X = rows_of(kind)
    s, d = X.shape
    rng = np.random.default_rng(1)
    mu = rng.uniform(-1, 1, d) if centred else None
    scale = rng.uniform(0.5, 2, d) if scaled else None
    rows_op, gram_op = (op.centered(mu, scale) for op in both(X))
    assert rows_op.path == "rows" and gram_op.path == "gram"
    assert rows_op.rows.block < s or kind == "float64"  # float64 in memory: one block, no copy
    Xc = dense(X) - (mu if centred else 0.0)
    if scaled:
        Xc = Xc / scale
    A = Xc.T @ Xc / s  # the exact reference: centred (and scaled) rows materialised
    Z = np.linalg.qr(rng.standard_normal((d, 5)))[0]
    for op in (rows_op, gram_op):
        assert rel(op @ Z, A @ Z) <= TOL
        assert abs(op.trace() - np.trace(A)) <= TOL * np.trace(A)
        assert abs(op.objective(Z) - s * np.sum(Z * (A @ Z))) <= TOL * s * np.trace(A)
        assert rel(op.dense(), A) <= TOL
        assert abs(op.largest_eigenvalue() - np.linalg.eigvalsh(A)[-1]) <= TOL * np.linalg.eigvalsh(A)[-1]
    assert rel(rows_op @ Z, gram_op @ Z) <= TOL
    assert rel(rows_op.product(Z), dense(X).T @ (dense(X) @ Z)) <= TOL  # dp-power's unnormalised share


def test_the_data_stay_as_stored():
    X = rows_of("int8")
    op = LocalOperator.from_rows(RowBlocks(X, block_bytes=8 * 40 * 16))
    assert op.rows.rows is X and op.gram is None and op.rows.nbytes == X.nbytes


def test_local_power_iterations_agree_on_both_paths():
    X = rows_of("int8", s=90, d=50)
    rows_op, gram_op = (op.centered(np.full(50, 0.9)) for op in both(X, 8 * 50 * 7))
    Z = np.linalg.qr(np.random.default_rng(2).standard_normal((50, 4)))[0]
    Y_r, Z_r = local_power_iterations(rows_op, Z, 5, 0.0, None)
    Y_g, Z_g = local_power_iterations(gram_op, Z, 5, 0.0, None)
    assert rel(Y_r, Y_g) <= TOL and rel(Z_r, Z_g) <= TOL


@pytest.mark.parametrize("solver", ["ssi", "exact"])
def test_faps_client_round_agrees_on_both_paths_and_with_the_dense_matrix(solver):
    X = rows_of("float32", s=60, d=30)
    s = X.shape[0]
    rows_op, gram_op = (op.centered(np.full(30, 0.2), weight=float(s)) for op in both(X, 8 * 30 * 9))
    M = gram_op.dense().copy()  # s_i A_i as the paper's dense matrix
    options = FapsOptions(penalty_init=0.5, penalty_mu=0.1, penalty_theta=0.2, solver=solver, inner_steps=4,
                          inner_tol=1e-2, inner_min_steps=1, inner_max_steps=10)
    rng = np.random.default_rng(3)
    Z = np.linalg.qr(rng.standard_normal((30, 3)))[0]
    states = {"rows": None, "gram": None, "dense": None}
    for _ in range(3):
        out = {name: faps_client_round(op, Z, states[name], options)
               for name, op in (("rows", rows_op), ("gram", gram_op), ("dense", M))}
        for name in ("rows", "gram"):
            assert rel(out[name][0], out["dense"][0]) <= 1e-10
            assert abs(out[name][1] - out["dense"][1]) <= TOL * abs(out["dense"][1])
        states = {name: value[2] for name, value in out.items()}
        Z = np.linalg.qr(sum(value[0] for value in out.values()) + rng.standard_normal((30, 3)) * 0.1)[0]


def test_faps_exact_local_solve_on_rows_matches_the_dense_eigensolver():
    X = rows_of("float64", s=50, d=35)
    rows_op, _ = both(X, 8 * 35 * 11)
    M = rows_op.dense()
    rng = np.random.default_rng(4)
    Xb = np.linalg.qr(rng.standard_normal((35, 3)))[0]
    Z = np.linalg.qr(rng.standard_normal((35, 3)))[0]
    W = multiplier_factor(M, Xb)
    V_rows, _ = local_subproblem(rows_op, Xb, W, 2.0, Z, solver="exact")
    V_dense, _ = local_subproblem(M, Xb, W, 2.0, Z, solver="exact")
    P_rows, P_dense = V_rows @ V_rows.T, V_dense @ V_dense.T
    assert rel(P_rows, P_dense) <= 1e-10


def test_the_gram_matrix_is_chosen_only_where_it_is_cheaper():
    assert gram_is_cheaper(num_rows=5000, dimension=100, rank=5, products=200)
    assert not gram_is_cheaper(num_rows=5000, dimension=100, rank=5, products=1)  # built for one product
    assert not gram_is_cheaper(num_rows=500, dimension=100_000, rank=8, products=10_000)  # d x d > rows
    assert not gram_is_cheaper(num_rows=300, dimension=30_000, rank=2, products=50)
    # a Gram matrix shared by the runs of a sweep is used wherever it is no larger than the rows (or small)
    assert gram_is_cheaper(num_rows=5000, dimension=100, rank=5, products=1, shared=True)
    assert not gram_is_cheaper(num_rows=300, dimension=30_000, rank=2, products=50, shared=True)


def test_a_sweep_keeps_only_the_current_runs_simulated_operators():
    """Each run of a sweep builds its clients' operators (each holding its partition's rows); one process keeps
    only the current run's, so a sweep of many runs does not accumulate every run's rows."""
    from client_app import data as node_data
    from simulations.engines import fused_run_config

    node_data._OPERATORS.clear()
    for seed in range(3):
        cfg = fused_run_config({"num-clients": 2, "num-samples": 200, "dimension": 6, "rank": 2,
                                "iteration-rank": 2, "seed": seed})
        for pid in range(2):
            node_data.NodeData(cfg, {"partition-id": pid}).operator()
        harness = [key for key in node_data._OPERATORS if key[0] == "harness"]
        assert len(harness) == 2, harness
        assert all(dict(key[1])["seed"] == seed for key in harness)
