"""Tests for simulations.data.datasets and simulations.data.partitioners."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulations.data.datasets import (
    DATASET_NAMES,
    Dataset,
    load_dataset,
    model1_basis,
    normalize_rows,
    sbm_layers,
)
from simulations.data.partitioners import PARTITIONERS, partition

DEFAULTS = dict(num_samples=200, dimension=20, rank=3, num_clients=4, seed=0, row_normalize=True)


def load(name: str, **overrides) -> Dataset:
    return load_dataset(name, **{**DEFAULTS, **overrides})


def sin_theta(A: np.ndarray, B: np.ndarray) -> float:
    """Spectral-norm sine of the largest principal angle between col spans."""
    Qa, _ = np.linalg.qr(A)
    Qb, _ = np.linalg.qr(B)
    return float(np.linalg.norm(Qb - Qa @ (Qa.T @ Qb), 2))


# ---------------------------------------------------------------------------
# Model I
# ---------------------------------------------------------------------------


def test_model1_shape_and_unit_rows():
    ds = load("fedpower-model1", num_samples=300, dimension=12, rank=2)
    assert ds.X.shape == (300, 12)
    assert ds.X.dtype == np.float64
    assert ds.labels is None and ds.groups is None
    np.testing.assert_allclose(np.linalg.norm(ds.X, axis=1), 1.0, rtol=1e-12)


@pytest.mark.parametrize("row_normalize", [False, True])
def test_model1_top_eigenspace_matches_spike(row_normalize):
    n, d, k = 20000, 50, 4
    ds = load("fedpower-model1", num_samples=n, dimension=d, rank=k, seed=3,
              row_normalize=row_normalize)
    cov = ds.X.T @ ds.X / n
    eigvals, eigvecs = np.linalg.eigh(cov)
    eigvals, eigvecs = eigvals[::-1], eigvecs[:, ::-1]
    U = model1_basis(d, k, seed=3)
    assert sin_theta(U, eigvecs[:, :k]) < 0.05
    assert eigvals[k - 1] > 2.5 * eigvals[k]
    if not row_normalize:
        # Sigma = U U^T + 0.36 I: spikes at 1.36, bulk at 0.36.
        np.testing.assert_allclose(eigvals[:k], 1.36, atol=0.1)
        np.testing.assert_allclose(np.median(eigvals[k:]), 0.36, atol=0.03)


def test_model1_basis_is_orthonormal_with_positive_mean_loadings():
    d, k = 30, 3
    U = model1_basis(d, k, seed=1)
    np.testing.assert_allclose(U.T @ U, np.eye(k), atol=1e-12)
    # G has entry mean 0.5, so span(U) leans towards the all-ones direction:
    # the squared cosine is about 0.4 on average, versus k/d = 0.1 for mean 0.
    ones = np.ones(d) / np.sqrt(d)
    cos2 = [np.sum((model1_basis(d, k, seed=s).T @ ones) ** 2) for s in range(20)]
    assert np.mean(cos2) > 0.25


def test_model1_deterministic_by_seed():
    a = load("fedpower-model1", seed=7).X
    b = load("fedpower-model1", seed=7).X
    c = load("fedpower-model1", seed=8).X
    np.testing.assert_array_equal(a, b)
    assert not np.allclose(a, c)


@pytest.mark.parametrize("rank,dimension", [(0, 10), (10, 10), (11, 10), (1, 1)])
def test_model1_bad_rank(rank, dimension):
    with pytest.raises(ValueError, match='"(rank|dimension)"'):
        load("fedpower-model1", rank=rank, dimension=dimension)


def test_model1_bad_num_samples():
    with pytest.raises(ValueError, match='"num-samples"'):
        load("fedpower-model1", num_samples=0)


# ---------------------------------------------------------------------------
# Model II
# ---------------------------------------------------------------------------


def test_sbm_layers_symmetric_binary_zero_diagonal():
    layers, communities = sbm_layers(5, 40, seed=2)
    assert layers.shape == (5, 40, 40)
    assert set(np.unique(layers)) <= {0.0, 1.0}
    for M in layers:
        np.testing.assert_array_equal(M, M.T)
        assert not np.any(np.diag(M))
    assert np.bincount(communities).tolist() == [20, 20]


def test_sbm_layers_block_densities():
    d = 200
    layers, g = sbm_layers(4, d, seed=0)
    same = (g[:, None] == g[None, :]) & ~np.eye(d, dtype=bool)
    diff = g[:, None] != g[None, :]
    # Layers 0,1 use 0.8 W, layers 2,3 use 0.6 W (W = [[.25, .1], [.1, .25]]).
    for layer, scale in zip(layers, [0.8, 0.8, 0.6, 0.6]):
        assert abs(layer[same].mean() - scale * 0.25) < 0.02
        assert abs(layer[diff].mean() - scale * 0.1) < 0.02


def test_model2_stacks_layers_with_groups():
    L, d = 3, 30
    raw = load("fedpower-model2", num_clients=L, dimension=d, seed=5, row_normalize=False)
    layers, communities = sbm_layers(L, d, seed=5)
    assert raw.X.shape == (L * d, d)
    np.testing.assert_array_equal(raw.X, layers.reshape(L * d, d))
    np.testing.assert_array_equal(raw.groups, np.repeat(np.arange(L), d))
    np.testing.assert_array_equal(raw.labels, np.tile(communities, L))

    normed = load("fedpower-model2", num_clients=L, dimension=d, seed=5, row_normalize=True)
    norms = np.linalg.norm(normed.X, axis=1)
    zero_rows = ~raw.X.any(axis=1)
    np.testing.assert_allclose(norms[~zero_rows], 1.0)
    assert np.all(norms[zero_rows] == 0.0)
    assert np.all(np.isfinite(normed.X))


def test_model2_ignores_num_samples():
    a = load("fedpower-model2", num_samples=5).X
    b = load("fedpower-model2", num_samples=999).X
    np.testing.assert_array_equal(a, b)


# ---------------------------------------------------------------------------
# Digits
# ---------------------------------------------------------------------------


def test_digits_full():
    ds = load("digits", num_samples=0, dimension=0, row_normalize=False)
    assert ds.X.shape == (1797, 64)
    assert ds.X.dtype == np.float64
    assert ds.labels.shape == (1797,)
    assert set(ds.labels.tolist()) == set(range(10))
    assert ds.X.max() == 16.0


def test_digits_subsample_is_seeded():
    a = load("digits", num_samples=100, dimension=64, seed=1)
    b = load("digits", num_samples=100, dimension=64, seed=1)
    c = load("digits", num_samples=100, dimension=64, seed=2)
    assert a.X.shape == (100, 64) and a.labels.shape == (100,)
    np.testing.assert_array_equal(a.X, b.X)
    assert not np.array_equal(a.X, c.X)
    np.testing.assert_allclose(np.linalg.norm(a.X, axis=1), 1.0)


@pytest.mark.parametrize("overrides,key", [
    (dict(dimension=32), '"dimension"'),
    (dict(num_samples=5000, dimension=0), '"num-samples"'),
])
def test_digits_errors(overrides, key):
    with pytest.raises(ValueError, match=key):
        load("digits", **overrides)


# ---------------------------------------------------------------------------
# User files
# ---------------------------------------------------------------------------


def test_npy_round_trip(tmp_path):
    X = np.random.default_rng(0).normal(size=(15, 6))
    path = tmp_path / "data.npy"
    np.save(path, X)
    ds = load(str(path), num_samples=0, dimension=6, row_normalize=False)
    np.testing.assert_array_equal(ds.X, X)
    assert ds.name == str(path)
    normed = load(str(path), num_samples=0, dimension=0, row_normalize=True)
    np.testing.assert_allclose(normed.X, X / np.linalg.norm(X, axis=1, keepdims=True))


def test_csv_round_trip(tmp_path):
    X = np.random.default_rng(1).normal(size=(9, 4))
    path = tmp_path / "data.csv"
    np.savetxt(path, X, delimiter=",", fmt="%.17g")
    ds = load(str(path), num_samples=0, dimension=0, row_normalize=False)
    np.testing.assert_array_equal(ds.X, X)


def test_csv_single_row_is_2d(tmp_path):
    path = tmp_path / "row.csv"
    path.write_text("1,2,3\n")
    ds = load(str(path), num_samples=0, dimension=0, row_normalize=False)
    assert ds.X.shape == (1, 3)


def test_file_subsample(tmp_path):
    path = tmp_path / "data.npy"
    np.save(path, np.arange(40.0).reshape(20, 2))
    ds = load(str(path), num_samples=5, dimension=0, row_normalize=False)
    assert ds.X.shape == (5, 2)
    assert len(set(ds.X[:, 0].tolist())) == 5


def test_csv_header_rejected(tmp_path):
    path = tmp_path / "header.csv"
    path.write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match=r'"dataset".*line 1'):
        load(str(path), num_samples=0, dimension=0)


def test_missing_file(tmp_path):
    with pytest.raises(ValueError, match=r'"dataset".*not found'):
        load(str(tmp_path / "nope.npy"), num_samples=0, dimension=0)


def test_nan_file(tmp_path):
    X = np.ones((5, 3))
    X[2, 1] = np.nan
    X[4, 0] = np.inf
    path = tmp_path / "nan.npy"
    np.save(path, X)
    with pytest.raises(ValueError, match=r'"dataset".*2 non-finite.*row 2'):
        load(str(path), num_samples=0, dimension=0)


def test_file_wrong_dimension(tmp_path):
    path = tmp_path / "data.npy"
    np.save(path, np.ones((4, 3)))
    with pytest.raises(ValueError, match='"dimension"'):
        load(str(path), num_samples=0, dimension=5)


def test_npy_must_be_2d(tmp_path):
    path = tmp_path / "vec.npy"
    np.save(path, np.ones(4))
    with pytest.raises(ValueError, match=r'"dataset".*2-D'):
        load(str(path), num_samples=0, dimension=0)


def test_unknown_dataset_suggests():
    with pytest.raises(ValueError, match=r'"dataset".*\.npy.*did you mean \'digits\'') as info:
        load("digitz")
    for name in DATASET_NAMES:
        assert name in str(info.value)


def test_normalize_rows_keeps_zero_rows():
    X = np.array([[3.0, 4.0], [0.0, 0.0]])
    np.testing.assert_array_equal(normalize_rows(X), [[0.6, 0.8], [0.0, 0.0]])
    assert X[0, 0] == 3.0  # input untouched


# ---------------------------------------------------------------------------
# Partitioners
# ---------------------------------------------------------------------------


def check_partition(parts, num_rows, num_clients):
    assert len(parts) == num_clients
    for part in parts:
        assert part.dtype == np.int64
        assert part.size > 0
        assert np.all(np.diff(part) > 0)  # sorted ascending, no duplicates
    allrows = np.concatenate(parts)
    assert allrows.size == num_rows  # disjoint (given the cover below)
    np.testing.assert_array_equal(np.sort(allrows), np.arange(num_rows))


def make_inputs(num_rows, num_clients, seed=0, num_classes=3):
    rng = np.random.default_rng(seed)
    labels = rng.integers(num_classes, size=num_rows)
    groups = rng.permutation(np.arange(num_rows) % num_clients) * 7  # arbitrary values
    return labels, groups


@pytest.mark.parametrize("scheme", PARTITIONERS)
@pytest.mark.parametrize("num_rows,num_clients", [(1, 1), (5, 5), (10, 3), (101, 7), (1000, 10)])
def test_partition_invariants(scheme, num_rows, num_clients):
    labels, groups = make_inputs(num_rows, num_clients)
    parts = partition(scheme, num_rows, num_clients, labels=labels, groups=groups,
                      alpha=0.1, seed=1)
    check_partition(parts, num_rows, num_clients)


@settings(max_examples=30, deadline=None)
@given(
    scheme=st.sampled_from(PARTITIONERS),
    num_rows=st.integers(1, 300),
    data=st.data(),
)
def test_partition_invariants_hypothesis(scheme, num_rows, data):
    num_clients = data.draw(st.integers(1, min(num_rows, 20)))
    num_classes = data.draw(st.integers(1, 10))
    alpha = data.draw(st.floats(0.01, 100.0))
    seed = data.draw(st.integers(0, 2**32 - 1))
    labels, groups = make_inputs(num_rows, num_clients, seed, num_classes)
    parts = partition(scheme, num_rows, num_clients, labels=labels, groups=groups,
                      alpha=alpha, seed=seed)
    check_partition(parts, num_rows, num_clients)


def test_iid_is_seeded_and_contiguous_is_blocks():
    a = partition("iid", 50, 4, seed=3)
    b = partition("iid", 50, 4, seed=3)
    c = partition("iid", 50, 4, seed=4)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert not all(np.array_equal(x, y) for x, y in zip(a, c))
    blocks = partition("contiguous", 10, 3)
    assert [p.tolist() for p in blocks] == [[0, 1, 2, 3], [4, 5, 6], [7, 8, 9]]


def test_label_partition_on_digits_at_most_two_labels():
    ds = load("digits", num_samples=0, dimension=0)
    parts = partition("label", len(ds.labels), 10, labels=ds.labels)
    check_partition(parts, len(ds.labels), 10)
    counts = [len(np.unique(ds.labels[p])) for p in parts]
    assert max(counts) <= 2
    assert min(counts) >= 1


def test_label_partition_snaps_to_class_boundary():
    labels = np.array([1] * 11 + [0] * 9)  # sorted: 9 zeros then 11 ones
    parts = partition("label", 20, 2, labels=labels)
    assert [np.unique(labels[p]).tolist() for p in parts] == [[0], [1]]
    # Far from any class boundary the cut stays at the equal split.
    labels = np.array([0] * 4 + [1] * 16)
    parts = partition("label", 20, 2, labels=labels)
    assert [p.size for p in parts] == [10, 10]


def mean_largest_label_share(parts, labels):
    return float(np.mean([np.bincount(labels[p]).max() / p.size for p in parts]))


def test_dirichlet_small_alpha_more_skewed():
    labels = load("digits", num_samples=0, dimension=0).labels
    n = len(labels)
    small = np.mean([mean_largest_label_share(
        partition("dirichlet", n, 10, labels=labels, alpha=0.1, seed=s), labels) for s in range(5)])
    large = np.mean([mean_largest_label_share(
        partition("dirichlet", n, 10, labels=labels, alpha=100.0, seed=s), labels) for s in range(5)])
    assert small > 0.4
    assert large < 0.2
    assert small > large + 0.2


def test_dirichlet_extreme_alpha_still_valid():
    labels = np.zeros(20, dtype=int)  # one class: most clients get nothing before repair
    parts = partition("dirichlet", 20, 10, labels=labels, alpha=1e-3, seed=0)
    check_partition(parts, 20, 10)


@pytest.mark.parametrize("alpha", [0, -1.0, float("nan"), "x"])
def test_dirichlet_bad_alpha(alpha):
    with pytest.raises(ValueError, match='"dirichlet-alpha"'):
        partition("dirichlet", 10, 2, labels=np.arange(10) % 2, alpha=alpha)


def test_group_partition_follows_groups():
    groups = np.repeat([5, 2, 9], 4)
    parts = partition("group", 12, 3, groups=groups)
    assert [p.tolist() for p in parts] == [[4, 5, 6, 7], [0, 1, 2, 3], [8, 9, 10, 11]]
    with pytest.raises(ValueError, match='"num-clients"'):
        partition("group", 12, 2, groups=groups)


def test_group_partition_on_model2_gives_layers():
    L, d = 3, 10
    ds = load("fedpower-model2", num_clients=L, dimension=d)
    parts = partition("group", ds.X.shape[0], L, groups=ds.groups)
    for layer, part in enumerate(parts):
        np.testing.assert_array_equal(part, np.arange(layer * d, (layer + 1) * d))


@pytest.mark.parametrize("num_clients", [0, 11, -1])
def test_bad_num_clients(num_clients):
    with pytest.raises(ValueError, match='"num-clients"'):
        partition("iid", 10, num_clients)


@pytest.mark.parametrize("scheme", ["label", "dirichlet"])
def test_label_schemes_need_labels(scheme):
    with pytest.raises(ValueError, match=f"partitioner '{scheme}' needs a dataset with labels"):
        partition(scheme, 10, 2)


def test_group_needs_groups():
    with pytest.raises(ValueError, match='"partitioner"'):
        partition("group", 10, 2)


def test_unknown_scheme_suggests():
    with pytest.raises(ValueError, match=r'"partitioner".*did you mean \'dirichlet\'') as info:
        partition("dirichelt", 10, 2)
    for scheme in PARTITIONERS:
        assert scheme in str(info.value)


def test_zero_sizes_mean_the_data_sets_own():
    """num-samples = dimension = 0 (the run config's defaults): a generator's documented size, a file's or a bundled
    set's rows and width, so none of them needs a size in the run config."""
    from simulations.data.datasets import GENERATOR_SIZE, sized
    from simulations.data.federated_data import data_shape, federated_dataset
    from simulations.engines import fused_run_config

    cfg = fused_run_config({})
    assert (cfg["num-samples"], cfg["dimension"]) == (0, 0)
    assert data_shape(cfg) == (GENERATOR_SIZE["num-samples"], GENERATOR_SIZE["dimension"]) == (10_000, 50)
    explicit = fused_run_config({"num-samples": 10_000, "dimension": 50})
    np.testing.assert_array_equal(federated_dataset(cfg)[0].X, federated_dataset(explicit)[0].X)
    assert data_shape(fused_run_config({"dataset": "digits"})) == (1797, 64)
    assert sized({"dataset": "/x/rows.npy", "num-samples": 0, "dimension": 0})["dimension"] == 0
    assert sized({"dataset": "dp-haar", "num-samples": 0, "dimension": 7})["dimension"] == 7
