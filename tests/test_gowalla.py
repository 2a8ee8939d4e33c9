"""The Gowalla loader, normalisations, user split and Table 1 coefficients (simulations/data/gowalla.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.sparse as sp

from simulations.data import gowalla
from simulations.data.gowalla import (
    DEFAULT_PATH,
    PAPER_TABLE1,
    coherences,
    hp_coefficient,
    load_interactions,
    normalised_rows,
    split_users,
    table1_statistics,
    top_right_singular_vectors,
)


@pytest.fixture(scope="module")
def gowalla_R():
    if not (DEFAULT_PATH / "train.txt").is_file():
        pytest.skip(f"Gowalla data not available at {DEFAULT_PATH}")
    return load_interactions(DEFAULT_PATH)


def _write(folder, name, text):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.txt").write_text(text)


# ------------------------------------------------------------------ the real data


def test_all_three_splits_give_table_1_counts(gowalla_R):
    stats = table1_statistics(gowalla_R)
    assert stats == {k: PAPER_TABLE1[k] for k in ("users", "items", "interactions")}
    assert gowalla_R.shape == (29858, 40981)
    assert set(np.unique(gowalla_R.data)) == {1.0}


def test_train_alone_is_not_table_1():
    if not (DEFAULT_PATH / "train.txt").is_file():
        pytest.skip(f"Gowalla data not available at {DEFAULT_PATH}")
    stats = table1_statistics(load_interactions(DEFAULT_PATH, splits=("train",)))
    assert stats["users"] == 29858
    assert stats["interactions"] < PAPER_TABLE1["interactions"]


def test_user_normalised_rows_have_unit_norm(gowalla_R):
    Rn = normalised_rows(gowalla_R, "user")
    norms = np.sqrt(np.asarray(Rn.multiply(Rn).sum(axis=1)).ravel())
    np.testing.assert_allclose(norms, 1.0, atol=1e-12)
    # Same sparsity pattern as R: every user's share is computed from her own row only.
    assert (Rn != 0).sum() == gowalla_R.nnz


def test_global_normalisation_has_top_singular_value_one(gowalla_R):
    """R~ = D_U^-1/2 R D_I^-1/2 has sigma_1 = 1 with right vector ∝ sqrt(item degree)."""
    Rg = normalised_rows(gowalla_R, "global")
    d_i = np.asarray(gowalla_R.sum(axis=0)).ravel()
    v = np.sqrt(d_i) / np.linalg.norm(np.sqrt(d_i))
    np.testing.assert_allclose(Rg.T @ (Rg @ v), v, atol=1e-12)


def test_split_of_the_real_users_is_a_partition(gowalla_R):
    parts = split_users(gowalla_R.shape[0], 10, seed=3)
    rows = sum(gowalla_R[p].nnz for p in parts)
    assert rows == gowalla_R.nnz


# ------------------------------------------------------------------ loader on small files


def test_small_folder_loads_with_duplicates_collapsed_and_empty_users(tmp_path):
    _write(tmp_path, "train", "0 1 2 2\n1 0\n\n")
    _write(tmp_path, "valid", "0 2 3\n3\n")  # user 3 has no items, user 2 appears nowhere
    R = load_interactions(tmp_path, splits=("train", "valid"))
    assert R.shape == (4, 4)
    np.testing.assert_array_equal(R.toarray(), [[0, 1, 1, 1], [1, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]])
    assert table1_statistics(R) == {"users": 2, "items": 4, "interactions": 4}
    # Only the train file.
    assert table1_statistics(load_interactions(tmp_path, splits=("train",)))["interactions"] == 3


@pytest.mark.parametrize(
    "text, line, what",
    [
        ("0 1 2\n1 x 3\n", 2, "'x'"),
        ("0 1 2\n1 2.5\n", 2, "'2.5'"),
        ("0 1\n1 2\n2 -4\n", 3, "non-negative"),
        ("-1 3\n", 1, "non-negative"),
    ],
)
def test_malformed_lines_name_the_file_and_line(tmp_path, text, line, what):
    _write(tmp_path, "train", text)
    with pytest.raises(ValueError) as info:
        load_interactions(tmp_path, splits=("train",))
    msg = str(info.value)
    assert f"train.txt:{line}:" in msg
    assert what in msg


def test_missing_or_empty_files_are_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="folder not found"):
        load_interactions(tmp_path / "nowhere")
    _write(tmp_path, "train", "0 1\n")
    with pytest.raises(FileNotFoundError, match="test.txt"):
        load_interactions(tmp_path, splits=("train", "test"))
    _write(tmp_path, "valid", "\n\n")
    with pytest.raises(ValueError, match="valid.txt: no user lines"):
        load_interactions(tmp_path, splits=("valid",))
    with pytest.raises(ValueError, match="at least one"):
        load_interactions(tmp_path, splits=())


# ------------------------------------------------------------------ normalisation, split, coefficients


def test_normalisations_on_a_small_matrix():
    R = sp.csr_matrix(np.array([[1, 1, 0, 0], [1, 0, 1, 1], [0, 0, 0, 0]], dtype=float))
    Ru = normalised_rows(R, "user").toarray()
    np.testing.assert_allclose(np.linalg.norm(Ru, axis=1), [1, 1, 0])
    Rg = normalised_rows(R, "global").toarray()
    d_u, d_i = R.toarray().sum(1), R.toarray().sum(0)
    with np.errstate(divide="ignore"):
        expected = np.nan_to_num(R.toarray() / np.sqrt(np.outer(d_u, d_i)), posinf=0.0)
    np.testing.assert_allclose(Rg, expected)
    with pytest.raises(ValueError, match="mode"):
        normalised_rows(R, "items")


def test_split_users_is_a_reproducible_partition():
    parts = split_users(103, 7, seed=11)
    assert len(parts) == 7
    allu = np.concatenate(parts)
    np.testing.assert_array_equal(np.sort(allu), np.arange(103))
    assert {p.size for p in parts} <= {14, 15}
    assert all(np.all(np.diff(p) > 0) for p in parts)
    again = split_users(103, 7, seed=11)
    assert all(np.array_equal(a, b) for a, b in zip(parts, again))
    other = split_users(103, 7, seed=12)
    assert not all(np.array_equal(a, b) for a, b in zip(parts, other))
    for bad in [(0, 1, 0), (5, 0, 0), (5, 6, 0), (5, 2, -1)]:
        with pytest.raises(ValueError):
            split_users(*bad)


def test_hp_coefficient_reproduces_table_1_and_its_gowalla_slip():
    # Yelp2018 and Amazon-book rows (spec 6.2): c = mu_0 sqrt(ln n_items).
    assert round(hp_coefficient(0.40, 38048), 2) == 1.30
    assert round(hp_coefficient(0.33, 91599), 2) == 1.12
    # Gowalla: mu_0 = 0.36 gives 1.17, not the printed 1.08.
    assert round(hp_coefficient(PAPER_TABLE1["mu_0"], PAPER_TABLE1["items"]), 2) == 1.17
    assert abs(hp_coefficient(0.36, 40981) - PAPER_TABLE1["c"]) > 0.05


def test_top_singular_vectors_and_coherences_match_dense_svd():
    rng = np.random.default_rng(0)
    R = sp.random(60, 80, density=0.2, random_state=1, data_rvs=np.ones, format="csr")
    M = normalised_rows(R, "global")
    s, V = top_right_singular_vectors(M, 5, seed=0)
    _, s_ref, Vt_ref = np.linalg.svd(M.toarray())
    np.testing.assert_allclose(s, s_ref[:5], atol=1e-10)
    np.testing.assert_allclose(np.abs(V.T @ Vt_ref[:5].T), np.eye(5), atol=1e-8)
    coh = coherences(Vt_ref.T)  # all 80 right singular vectors (an orthogonal matrix)
    assert 1 / math.sqrt(80) <= coh["mu_0"] <= 1
    assert coh["mu_1"] >= 1  # rows of an orthogonal matrix have l1 norm >= l2 norm = 1 (spec P5)
    # Top-q values are lower bounds of the full ones.
    sub = coherences(Vt_ref[:5].T)
    assert sub["mu_0"] <= coh["mu_0"] and sub["mu_1"] <= coh["mu_1"]
    with pytest.raises(ValueError, match="q must be"):
        top_right_singular_vectors(M, 60)
    del rng


def test_cli_writes_the_table(tmp_path, capsys):
    rng = np.random.default_rng(5)
    lines = [f"{u} " + " ".join(map(str, sorted(rng.choice(50, 6, replace=False)))) for u in range(40)]
    data = tmp_path / "data"
    for name in ("train", "valid", "test"):
        _write(data, name, "\n".join(lines[: 30 if name == "train" else 40]) + "\n")
    out = tmp_path / "out"
    assert gowalla.main(["--path", str(data), "--q", "4", "--out", str(out)]) == 0
    text = (out / "table1.md").read_text()
    assert "| paper | 29,858 | 40,981 | 1,027,370 |" in text
    assert "| this repo (top 4) | 40 |" in text
    assert (out / "table1.csv").read_text().count("\n") == 3
    assert "this repo" in capsys.readouterr().out
