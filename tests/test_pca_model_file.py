"""The PCA model's maths and its file (fl_strategies/files/pca.py) against scikit-learn, at the edges the mutation run
found untested: small variances, two samples, zero total variance, the privacy record, and files that are not a
model (pickled objects, missing keys, a mean of another width, no row_normalize flag); a noisy run's model from its
released product (numpy's SVD), choose_rank's rounding tolerance, the run's preprocessing flags as saved and as
loaded from files written before a flag existed, fields that make no model, and transform of new rows against
scikit-learn on the run's own preprocessed rows (row-normalize, clip-norm, scale)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from sklearn.decomposition import PCA

from fl_strategies.files.pca import MODEL_KEYS, choose_rank, load_model, pca_model, save_model, transform


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
    np.testing.assert_allclose(model["components"], ref.components_, rtol=0, atol=1e-8)  # signs included


def test_zero_total_variance_gives_zero_ratios():
    model = _model_of(np.ones((5, 3)), 2)
    np.testing.assert_array_equal(model["explained_variance_ratio"], np.zeros(2))


def _read(path) -> dict:
    """Every array of the ``.npz`` file ``path``."""
    with np.load(path) as f:
        return {key: f[key] for key in f.files}


def _saved(tmp_path, privacy=None, **extra):
    X = np.random.default_rng(1).standard_normal((30, 4))
    path = save_model(tmp_path / "pca.npz", _model_of(X, 2), {"row-normalize": False, "seed": 3}, privacy)
    if extra:
        arrays = _read(path)
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


# -- a noisy run's model: post-processing of its released product Y ~ C Z -----------------------------------------

def _spd(d: int, seed: int) -> np.ndarray:
    """A second-moment matrix ``C`` of distinct eigenvalues: the centred covariance of random rows."""
    X = np.random.default_rng(seed).standard_normal((60, d)) * np.linspace(3.0, 0.5, d)
    Xc = X - X.mean(axis=0)
    return Xc.T @ Xc / len(X)


@pytest.mark.parametrize("d, r, rank", [(7, 3, 3), (7, 3, 2), (4, 4, 4), (5, 2, 0)])
def test_released_product_model_is_the_thin_svd_of_the_product(d, r, rank):
    """``released_product_model(Y)`` is ``Y``'s thin SVD: ``Z`` (d, r) orthonormal with ``Z Z^T Y = Y`` (the span
    of the released product), and ``CZ`` (d, r) with ``Z^T CZ = diag(sv)``, ``sv`` numpy's singular values of
    ``Y`` (descending), also for a tall ``Y``, a rank-deficient one and ``Y = 0`` (zero singular values give zero
    columns, never inf or NaN)."""
    from fl_strategies.files.pca import released_product_model

    rng = np.random.default_rng(d * 10 + rank)
    Y = rng.standard_normal((d, rank)) @ rng.standard_normal((rank, r))  # rank `rank`, shape (d, r)
    Z, CZ = released_product_model(Y)
    assert Z.shape == CZ.shape == (d, r)
    sv = np.linalg.svd(Y, compute_uv=False)
    np.testing.assert_allclose(Z.T @ Z, np.eye(r), atol=1e-12)
    np.testing.assert_allclose(Z @ (Z.T @ Y), Y, atol=1e-12)
    np.testing.assert_allclose(Z.T @ CZ, np.diag(sv), atol=1e-12)
    assert np.all(np.isfinite(CZ))


def test_a_released_product_of_an_invariant_subspace_gives_the_eigenvalues_and_eigenvectors():
    """No noise and ``Z_prev`` spanning ``C``'s top-3 eigenspace (in a random rotation): the model of
    ``Y = C Z_prev`` has ``C``'s top eigenvalues as explained variance (times ``n / (n - 1)``), its eigenvectors as
    components (up to sign), a NaN ratio (``tr(C)`` is not released) and every field a file accepts."""
    from fl_strategies.files.pca import released_product_model

    C, n = _spd(6, 4), 60
    values, vectors = np.linalg.eigh(C)
    rotation = np.linalg.qr(np.random.default_rng(5).standard_normal((3, 3)))[0]
    Y = C @ (vectors[:, -3:] @ rotation)
    Z, CZ = released_product_model(Y)
    model = pca_model(Z, CZ, float("nan"), n, np.zeros(6), 3)
    np.testing.assert_allclose(model["explained_variance"], values[::-1][:3] * n / (n - 1), rtol=1e-10)
    np.testing.assert_allclose(np.abs(model["components"] @ vectors[:, ::-1][:, :3]), np.eye(3), atol=1e-8)
    assert np.all(np.isnan(model["explained_variance_ratio"]))


# -- choose_rank: the smallest k reaching the target, a sum short only by rounding counting as reaching it ---------

def test_choose_rank_counts_a_cumulative_ratio_short_of_the_target_by_rounding_only():
    """0.7 + 0.1 + 0.1 is 0.8999999999999999 in floating point: three components reach 0.9, not four."""
    ratios = np.array([0.7, 0.1, 0.1, 0.1])
    assert np.cumsum(ratios)[2] < 0.9  # the rounding this test is about
    assert choose_rank(ratios, 0.9) == 3


@pytest.mark.parametrize("target", [0.5, 0.9, 0.95])
def test_choose_rank_tolerance_is_1e_15_inclusive(target):
    """A cumulative ratio exactly at the target, or exactly ``1e-15`` below it (the rounding tolerance, boundary
    included), reaches it; one ``1.5e-15`` below does not: the ratios are lower bounds and are not rounded up
    further."""
    assert choose_rank(np.array([target, 0.01]), target) == 1
    assert choose_rank(np.array([target - 1e-15, 0.01]), target) == 1
    assert choose_rank(np.array([target - 1.5e-15, 0.01]), target) == 2


# -- save_model: the run's preprocessing travels with the model ---------------------------------------------------

@pytest.mark.parametrize("center, row_normalize, clip_norm", [(True, True, 0.0), (False, False, 0.5),
                                                              (True, False, 2.5)])
def test_save_model_writes_the_runs_center_row_normalize_and_clip_norm(tmp_path, center, row_normalize, clip_norm):
    """``centered``, ``row_normalize`` and ``clip_norm`` of the file are the run config's ``center``,
    ``row-normalize`` and ``clip-norm``, as stored and as loaded."""
    X = np.random.default_rng(6).standard_normal((20, 4))
    cfg = {"center": center, "row-normalize": row_normalize, "clip-norm": clip_norm}
    path = save_model(tmp_path / "pca.npz", _model_of(X, 2), cfg)
    with np.load(path) as f:
        assert (bool(f["centered"]), bool(f["row_normalize"]), float(f["clip_norm"])) == (center, row_normalize,
                                                                                        clip_norm)
    model = load_model(path)
    assert (model["centered"], model["row_normalize"], model["clip_norm"]) == (center, row_normalize, clip_norm)
    assert type(model["centered"]) is bool and type(model["row_normalize"]) is bool


def test_save_model_of_a_run_config_without_the_preprocessing_keys_writes_what_those_runs_did(tmp_path):
    """A partial run config (a caller's own, or one written before a key existed; the server's is validated and
    complete) is saved with the value that reproduces a run without the key: the registry's ``absent_means`` for
    ``center`` and ``clip-norm``, the default for ``row-normalize`` (a key of the first release): no preprocessing
    a run did not do."""
    from fl_strategies.settings.config import KEYS, default_run_config

    X = np.random.default_rng(7).standard_normal((20, 4))
    model = load_model(save_model(tmp_path / "pca.npz", _model_of(X, 2), {"seed": 1}))
    assert model["centered"] is KEYS["center"].absent_means
    assert model["row_normalize"] is default_run_config()["row-normalize"]
    assert model["clip_norm"] == KEYS["clip-norm"].absent_means



def test_save_model_writes_the_same_bytes_for_an_equal_config_and_privacy_record_in_any_key_order(tmp_path):
    """The file is a function of its content: the same model with a run config and a privacy record that are equal
    as dicts but built in another key order gives a byte-identical ``pca.npz`` (canonical JSON), so two runs'
    models can be compared by their hash; each JSON field is also readable as the dict it was."""
    X = np.random.default_rng(13).standard_normal((20, 4))
    model = _model_of(X, 2)
    cfg = {"center": True, "row-normalize": False, "clip-norm": 0.0, "seed": 4, "rank": 2}
    privacy = {"epsilon": 1.0, "delta": 1e-5, "releases": [{"name": "products", "count": 3}]}
    first = save_model(tmp_path / "a.npz", model, cfg, privacy).read_bytes()
    for other_cfg, other_privacy in [(dict(reversed(list(cfg.items()))), privacy),
                                     (cfg, dict(reversed(list(privacy.items()))))]:
        assert save_model(tmp_path / "b.npz", model, other_cfg, other_privacy).read_bytes() == first
    with np.load(tmp_path / "a.npz") as f:
        assert json.loads(str(f["run_config"])) == cfg and json.loads(str(f["privacy"])) == privacy

# -- load_model: files written before a field existed, and fields that make no model ------------------------------

@pytest.mark.parametrize("run_config, mean, expected", [
    ({"center": True}, np.zeros(4), True),  # a centred run of data whose mean is zero: the config says
    ({"center": False}, np.full(4, 0.5), False),
    ({"seed": 3}, np.full(4, 0.5), True),  # a config without center: whether the mean is non-zero
    ({"seed": 3}, np.zeros(4), False),
    (None, np.full(4, 0.5), True),  # no run config at all
    (None, np.zeros(4), False),
])
def test_a_model_without_centered_takes_it_from_its_run_config_else_from_its_mean(tmp_path, run_config, mean,
                                                                                 expected):
    """A file written before ``centered`` existed: the saved run config's ``center`` when it has one, else whether
    the mean is non-zero."""
    extra = {"centered": None, "mean": mean}
    if run_config is None:
        extra["run_config"] = None
    else:
        extra["run_config"] = np.asarray(json.dumps(run_config))
    model = load_model(_saved(tmp_path, **extra))
    assert model["centered"] is expected


def test_a_model_without_clip_norm_does_not_clip(tmp_path):
    """A file written before ``clip_norm`` existed loads with ``clip_norm`` 0 and ``transform`` keeps long rows."""
    model = load_model(_saved(tmp_path, clip_norm=None))
    assert model["clip_norm"] == 0.0
    X = np.random.default_rng(8).standard_normal((6, 4)) * 10  # norms far above 1
    np.testing.assert_allclose(transform(model, X), (X - model["mean"]) @ model["components"].T, rtol=1e-12)


def _fields(tmp_path) -> dict:
    return _read(_saved(tmp_path))


def _write(tmp_path, fields: dict):
    path = tmp_path / "edited.npz"
    np.savez(path, **fields)
    return path


def test_a_one_component_model_of_one_sample_loads(tmp_path):
    """``k = 1`` and ``n_samples = 1`` make a model (docs/bad-input.md: ``n_samples`` a positive count)."""
    fields = _fields(tmp_path)
    for key in ("explained_variance", "explained_variance_ratio", "singular_values"):
        fields[key] = fields[key][:1]
    fields["components"] = fields["components"][:1]
    fields["n_samples"] = np.asarray(1)
    model = load_model(_write(tmp_path, fields))
    assert model["components"].shape == (1, 4) and model["n_samples"] == 1 and type(model["n_samples"]) is int


@pytest.mark.parametrize("edit", ["no components", "n_samples 0", "n_samples 2.5", "n_samples -3"])
def test_a_model_of_no_components_or_no_whole_positive_sample_count_is_refused(tmp_path, edit):
    fields = _fields(tmp_path)
    if edit == "no components":
        for key in ("explained_variance", "explained_variance_ratio", "singular_values"):
            fields[key] = fields[key][:0]
        fields["components"] = fields["components"][:0]
    else:
        fields["n_samples"] = np.asarray(float(edit.split()[1]))
    with pytest.raises(ValueError, match="not a model"):
        load_model(_write(tmp_path, fields))


@pytest.mark.parametrize("scale", [[1.0, 0.0, 2.0, 1.0], [1.0, -2.0, 1.0, 1.0]])
def test_a_scale_with_a_zero_or_negative_entry_is_refused(tmp_path, scale):
    """``transform`` divides by ``scale``: a zero would give inf scores, a negative one flipped ones."""
    with pytest.raises(ValueError, match="scale has entries that are not > 0"):
        load_model(_saved(tmp_path, scale=np.asarray(scale)))


@pytest.mark.parametrize("clip_norm", [np.inf, -0.5, np.nan])
def test_a_clip_norm_that_is_not_a_finite_number_at_least_0_is_refused(tmp_path, clip_norm):
    with pytest.raises(ValueError, match="clip_norm .* is not a finite number >= 0"):
        load_model(_saved(tmp_path, clip_norm=np.asarray(clip_norm)))


def test_components_of_three_dimensions_with_a_mean_that_fits_are_refused(tmp_path):
    """``components`` of shape (k, d, 1) with a mean of width d: not a (k, d) matrix, refused by name."""
    fields = _fields(tmp_path)
    fields["components"] = fields["components"][:, :, None]
    with pytest.raises(ValueError, match=r"components \(2, 4, 1\) and mean \(4,\) do not fit"):
        load_model(_write(tmp_path, fields))


def test_a_model_without_the_total_variance_loads_with_a_nan_ratio_but_partial_nans_are_refused(tmp_path):
    """A noisy run's model (``tr(C)`` not released) has an all-NaN ``explained_variance_ratio`` and loads; a ratio
    with one NaN among numbers is a damaged file."""
    model = load_model(_saved(tmp_path, explained_variance_ratio=np.full(2, np.nan)))
    assert np.all(np.isnan(model["explained_variance_ratio"]))
    with pytest.raises(ValueError, match="explained_variance_ratio has non-finite entries"):
        load_model(_saved(tmp_path, explained_variance_ratio=np.asarray([0.5, np.nan])))


# -- transform: new rows get the run's own preprocessing ----------------------------------------------------------

def _same(scores: np.ndarray, expected: np.ndarray) -> None:
    """Scores equal scikit-learn's entry for entry (the model's signs are scikit-learn's)."""
    np.testing.assert_allclose(scores, expected, rtol=0, atol=1e-8)


def _train_and_new_rows(seed: int):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((80, 5)) * [4.0, 2.0, 1.0, 0.5, 0.2] + rng.uniform(-1, 1, 5)
    new = rng.standard_normal((12, 5)) * rng.uniform(0.05, 5.0, (12, 1))  # norms on both sides of 1 and of c
    return X, new


def test_transform_of_a_row_normalised_run_scores_the_unit_rows(tmp_path):
    """``row-normalize = true``: new raw rows (any scale) get scikit-learn's PCA scores of their unit-norm rows
    in the PCA of the run's unit-norm rows."""
    X, new = _train_and_new_rows(9)
    unit = X / np.linalg.norm(X, axis=1, keepdims=True)
    path = save_model(tmp_path / "pca.npz", _model_of(unit, 3), {"center": True, "row-normalize": True})
    ref = PCA(n_components=3).fit(unit)
    _same(transform(load_model(path), new), ref.transform(new / np.linalg.norm(new, axis=1,
                                                                                          keepdims=True)))


@pytest.mark.parametrize("c", [0.5, 3.0])
def test_transform_of_a_clipped_run_scores_the_clipped_rows(tmp_path, c):
    """``clip-norm = c`` (below and above 1): rows longer than ``c`` are scaled down to ``c``, shorter ones kept,
    before the run's PCA, as the run did to its own rows."""
    X, new = _train_and_new_rows(10)

    def clipped(rows):
        norms = np.linalg.norm(rows, axis=1, keepdims=True)
        return rows * np.minimum(1.0, c / norms)

    new_norms = np.linalg.norm(new, axis=1)
    assert np.any(new_norms > c) and np.any(new_norms < c)
    path = save_model(tmp_path / "pca.npz", _model_of(clipped(X), 3), {"center": True, "clip-norm": c})
    ref = PCA(n_components=3).fit(clipped(X))
    _same(transform(load_model(path), new), ref.transform(clipped(new)))


def test_transform_of_a_scaled_run_is_standard_scaler_then_pca():
    """``scale = true``: the scores of ``StandardScaler`` followed by ``PCA`` fitted on the run's rows."""
    from sklearn.preprocessing import StandardScaler

    X, new = _train_and_new_rows(11)
    scaler = StandardScaler().fit(X)
    S = scaler.transform(X)
    C = S.T @ S / len(S)
    Z = np.linalg.eigh(C)[1][:, ::-1]
    model = pca_model(Z, C @ Z, float(np.trace(C)), len(X), scaler.mean_, 3, scale=scaler.scale_)
    ref = PCA(n_components=3).fit(S)
    _same(transform(model, new), ref.transform(scaler.transform(new)))


def test_transform_of_a_model_dict_with_only_components_and_mean_centres_and_projects():
    """A model dict without ``row_normalize``, ``clip_norm`` or ``scale`` (a caller's own): no preprocessing and
    scale 1, ``(X - mean) @ components.T`` for rows of any norm."""
    rng = np.random.default_rng(12)
    components = np.linalg.qr(rng.standard_normal((5, 2)))[0].T
    mean = rng.standard_normal(5)
    X = rng.standard_normal((7, 5)) * 10
    scores = transform({"components": components, "mean": mean}, X)
    np.testing.assert_allclose(scores, np.einsum("md,kd->mk", X - mean, components), rtol=1e-12)
