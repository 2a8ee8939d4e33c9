"""The PCA model's maths and its file (fl_strategies/files/pca.py) against scikit-learn, at the edges the mutation run
found untested: small variances, two samples, zero total variance, the privacy record, and files that are not a
model (pickled objects, missing keys, a mean of another width, no row_normalize flag)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from sklearn.decomposition import PCA

from fl_strategies.files.pca import MODEL_KEYS, load_model, pca_model, save_model, transform


def _model_of(X: np.ndarray, k: int) -> dict:
    """pca_model on the exact basis of X's centred covariance: what a converged run gives."""
    mu = X.mean(axis=0)
    C = (X - mu).T @ (X - mu) / len(X)
    Z = np.linalg.eigh(C)[1][:, ::-1]
    return pca_model(Z, C @ Z, float(np.trace(C)), len(X), mu, k)


@pytest.mark.parametrize("rows, scale", [(2, 1.0), (40, 1e-3), (40, 1.0)])
def test_the_model_is_scikit_learns_pca(rows, scale):
    X = np.random.default_rng(rows).standard_normal((rows, 4)) * [3.0, 1.0, 0.5, 0.1] * scale
    k = min(rows, 3) - (rows == 2)
    model, ref = _model_of(X, k), PCA(n_components=k).fit(X)
    for key in ("explained_variance", "explained_variance_ratio", "singular_values"):
        np.testing.assert_allclose(model[key], getattr(ref, key + "_"), rtol=1e-8, atol=1e-15)
    np.testing.assert_allclose(np.abs(model["components"] @ ref.components_.T), np.eye(k), atol=1e-8)


def test_zero_total_variance_gives_zero_ratios():
    model = _model_of(np.ones((5, 3)), 2)
    np.testing.assert_array_equal(model["explained_variance_ratio"], np.zeros(2))


def _saved(tmp_path, privacy=None, **extra):
    X = np.random.default_rng(1).standard_normal((30, 4))
    path = save_model(tmp_path / "pca.npz", _model_of(X, 2), {"row-normalize": False, "seed": 3}, privacy)
    if extra:
        with np.load(path) as f:
            arrays = {key: f[key] for key in f.files}
        arrays.update(extra)
        for key in [k for k, v in extra.items() if v is None]:
            del arrays[key]
        np.savez(path, **arrays)
    return path


def test_the_privacy_record_and_run_config_are_kept(tmp_path):
    privacy = {"epsilon": 1.0, "delta": 1e-5}
    with np.load(_saved(tmp_path, privacy)) as f:
        assert json.loads(str(f["privacy"])) == privacy
        assert json.loads(str(f["run_config"])) == {"row-normalize": False, "seed": 3}


def test_a_model_file_with_a_pickled_object_is_refused(tmp_path):
    path = _saved(tmp_path, extra=np.array([{"code": "x"}], dtype=object))
    with pytest.raises(ValueError, match="is not a readable pca.npz"):
        load_model(path)


@pytest.mark.parametrize("key", [key for key in MODEL_KEYS if key != "scale"])
def test_a_model_file_without_a_key_is_refused(tmp_path, key):
    with pytest.raises(ValueError, match=f"lacks {key}: not a fedspectral pca.npz"):
        load_model(_saved(tmp_path, **{key: None}))


def test_a_model_without_scale_is_unscaled(tmp_path):
    """A model written before ``scale`` existed loads as unscaled (scale 1), and transform only centres."""
    model = load_model(_saved(tmp_path, scale=None))
    np.testing.assert_array_equal(model["scale"], np.ones(model["mean"].shape))
    X = np.random.default_rng(3).standard_normal((5, model["mean"].shape[0]))
    np.testing.assert_allclose(transform(model, X), (X - model["mean"]) @ model["components"].T, rtol=1e-12)


def test_a_mean_of_another_width_is_refused(tmp_path):
    with pytest.raises(ValueError, match="do not fit"):
        load_model(_saved(tmp_path, mean=np.zeros(5)))


def test_a_model_without_the_row_normalize_flag_does_not_normalise(tmp_path):
    model = load_model(_saved(tmp_path, row_normalize=None))
    assert model["row_normalize"] is False
    X = np.random.default_rng(2).standard_normal((6, 4)) * 10
    expected = (X - model["mean"]) @ model["components"].T
    np.testing.assert_allclose(transform(model, X), expected, rtol=1e-12)
    bare = {key: model[key] for key in MODEL_KEYS}  # a model dict as pca_model returns it
    np.testing.assert_allclose(transform(bare, X), expected, rtol=1e-12)
