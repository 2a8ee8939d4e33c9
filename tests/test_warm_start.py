"""``init-from``: a run started from an earlier model, and the models it refuses."""

from __future__ import annotations

import json

import numpy as np
import pytest
from sklearn.decomposition import PCA

from conftest import run_app
from fl_strategies.settings.config import ConfigError, validate_run_config
from fl_strategies.kernels.linalg import subspace_distance
from fl_strategies.files.pca import load_model, save_model
from fl_strategies.files.warm_start import initial_basis, load_start
from simulations.engines import ArgumentError, checked_run_config, fused_run_config

D, K = 40, 3


def site_files(tmp_path, seed=0):
    """Four sites' rows of one population whose top-3 subspace converges slowly (lambda_4 / lambda_3 = 0.76):
    ``early/`` holds the first three sites, ``all/`` all four (the fourth site joins later)."""
    rng = np.random.default_rng(seed)
    basis = np.linalg.qr(rng.standard_normal((D, D)))[0]
    spread = np.r_[[3.0, 2.6, 2.3], 2.0 * 0.97 ** np.arange(D - 3)]
    mean = rng.uniform(-2, 2, D)
    blocks = [mean + (rng.standard_normal((s, D)) * spread) @ basis.T for s in (300, 250, 350, 300)]
    for name, chosen in (("early", blocks[:3]), ("all", blocks)):
        (tmp_path / name).mkdir()
        for i, block in enumerate(chosen):
            np.save(tmp_path / name / f"partition_{i}.npy", block)
    return np.vstack(blocks)


@pytest.mark.parametrize("strategy", ["power", "fedpower"])
def test_a_run_from_an_earlier_model_reaches_stop_tol_in_fewer_rounds(tmp_path, strategy):
    X = site_files(tmp_path)
    common = dict(strategy=strategy, rank=K, iteration_rank=K, center=True, row_normalize=False, stop_tol=1e-9,
                  num_server_rounds=500)
    run_app(dataset=str(tmp_path / "early"), num_clients=3, results_dir=str(tmp_path / "early-model"), **common)
    earlier = tmp_path / "early-model" / "pca.npz"
    cold = run_app(dataset=str(tmp_path / "all"), num_clients=4, results_dir=str(tmp_path / "cold"), **common)
    warm = run_app(dataset=str(tmp_path / "all"), num_clients=4, results_dir=str(tmp_path / "warm"),
                   init_from=str(earlier), **common)
    ref = PCA(n_components=K).fit(X).components_.T
    start = subspace_distance(load_model(earlier)["components"].T, ref)
    rounds = {"random start": len(cold.records) - 1, "init-from": len(warm.records) - 1}
    final = {name: subspace_distance(load_model(tmp_path / name / "pca.npz")["components"].T, ref)
             for name in ("cold", "warm")}
    print(f"\n{strategy}: rounds to stop-tol 1e-9: {rounds}; sin theta to scikit-learn's PCA of all rows: earlier "
          f"model {start:.3g}, final {final}")
    assert subspace_distance(warm.iterates[0], load_model(earlier)["components"].T) < 1e-12  # Z_0 is the model
    assert start > 0.1  # the fourth site moved the subspace: the earlier model is a start, not the answer
    assert rounds["init-from"] < rounds["random start"] < 500
    assert final["warm"] < 1e-3 and final["cold"] < 1e-3


def fake_model(path, d=D, k=K, center=True, scale=False, bad=None):
    components = np.linalg.qr(np.random.default_rng(1).standard_normal((d, k)))[0].T
    if bad is not None:
        components[0, 0] = bad
    model = {"components": components, "mean": np.zeros(d), "scale": np.ones(d), "explained_variance": np.ones(k),
             "explained_variance_ratio": np.full(k, 0.1), "singular_values": np.ones(k), "n_samples": 100}
    return save_model(path, model, {"center": center, "scale": scale})


def test_the_start_is_the_model_completed_at_random_from_the_seed(tmp_path):
    model = load_start({"init-from": str(fake_model(tmp_path / "m.npz")), "center": True, "scale": False})
    Z = initial_basis(model, D, 5, np.random.default_rng([0, 0]))
    assert Z.shape == (D, 5)
    np.testing.assert_allclose(Z.T @ Z, np.eye(5), atol=1e-12)
    assert subspace_distance(Z[:, :K], model["components"].T) < 1e-12
    assert np.array_equal(Z, initial_basis(model, D, 5, np.random.default_rng([0, 0])))  # reproducible
    assert not np.allclose(Z, initial_basis(model, D, 5, np.random.default_rng([1, 0])))  # the complement: seeded
    assert subspace_distance(initial_basis(model, D, 2, np.random.default_rng(0)),
                             model["components"][:2].T) < 1e-12  # more components than iteration-rank: the first


def test_a_model_with_fewer_components_than_iteration_rank_starts_a_run(tmp_path):
    X = site_files(tmp_path)
    run_app(strategy="power", dataset=str(tmp_path / "early"), num_clients=3, rank=2, iteration_rank=2,
            center=True, row_normalize=False, num_server_rounds=20, results_dir=str(tmp_path / "m"))
    s = run_app(strategy="faps", dataset=str(tmp_path / "all"), num_clients=4, rank=K, iteration_rank=5,
                center=True, row_normalize=False, num_server_rounds=150, init_from=str(tmp_path / "m" / "pca.npz"),
                results_dir=str(tmp_path / "out"))
    assert subspace_distance(s.iterates[0][:, :2], load_model(tmp_path / "m" / "pca.npz")["components"].T) < 1e-12
    model = load_model(tmp_path / "out" / "pca.npz")
    assert subspace_distance(model["components"].T, PCA(n_components=K).fit(X).components_.T) < 1e-6


@pytest.mark.parametrize("make, over, message", [
    (None, {}, r"^init-from '.*missing.npz' is not a readable pca.npz: .*No such file"),
    ("text", {}, r"^init-from '.*m.npz' is not a readable pca.npz"),
    ("nan", {}, r"^init-from '.*m.npz': components has non-finite entries \(NaN/inf\)"),
    ("ok", {"center": False}, r"^init-from '.*m.npz' was fitted with center = true, but this run has center = false"),
    ("ok", {"scale": True}, r"^init-from '.*m.npz' was fitted with scale = false, but this run has scale = true"),
    ("wide", {}, rf"^init-from '.*m.npz' has components of width {D + 1}, but the run's data have d = {D} columns"),
])
def test_an_unusable_model_is_refused_before_the_first_round(tmp_path, make, over, message):
    site_files(tmp_path)
    path = tmp_path / ("missing.npz" if make is None else "m.npz")
    if make == "text":
        path.write_text("not a model")
    elif make is not None:
        fake_model(path, d=D + 1 if make == "wide" else D, bad=np.nan if make == "nan" else None)
    over = {"dataset": str(tmp_path / "all"), "num-clients": 4, "rank": K, "center": True, "init-from": str(path),
            **over}
    with pytest.raises(ArgumentError, match=message.replace("^", "^--run-config: ")):  # flwr_run, deploy
        checked_run_config(over)
    asked = []
    with pytest.raises(ConfigError, match=message):  # the server refuses before round 1
        run_app(observer=lambda *a: asked.append(a), **{k.replace("-", "_"): v for k, v in over.items()})
    assert not asked


@pytest.mark.parametrize("over, message", [
    ({"strategy": "covariance"}, r"^init-from does not apply to strategy 'covariance'"),
    ({"strategy": "fedmf"}, r"^init-from applies to the strategies that write a PCA model"),
    ({"epsilon": 1.0, "row-normalize": True}, r"^init-from is refused with epsilon or noise-std set"),
    ({"init-from": "model.txt"}, r"^init-from must be '' or a pca.npz file"),
])
def test_init_from_settings_that_cannot_hold_are_refused(over, message):
    with pytest.raises(ConfigError, match=message):
        validate_run_config(fused_run_config({"init-from": "model.npz", **over}))


def test_a_model_written_before_scale_existed_loads_as_unscaled(tmp_path):
    path = fake_model(tmp_path / "m.npz")
    with np.load(path) as f:
        old = {key: f[key] for key in f.files if key != "scale"}
    np.savez(tmp_path / "old.npz", **old)
    model = load_start({"init-from": str(tmp_path / "old.npz"), "center": True, "scale": False})
    assert np.array_equal(model["scale"], np.ones(D)) and json.loads(str(model["run_config"]))["center"] is True


def _without_run_config(tmp_path, **fake) -> str:
    """A model as :func:`fake_model` writes it, saved again without its ``run_config`` (a hand-made file)."""
    with np.load(fake_model(tmp_path / "m.npz", **fake)) as f:
        kept = {key: f[key] for key in f.files if key != "run_config"}
    np.savez(tmp_path / "bare.npz", **kept)
    return str(tmp_path / "bare.npz")


def test_a_centred_model_without_its_run_config_starts_a_centred_run(tmp_path):
    """Its ``centered`` field says how it was fitted: no refusal for a field it holds."""
    model = load_start({"init-from": _without_run_config(tmp_path, center=True), "center": True, "scale": False})
    assert model["centered"] is True


def test_a_model_without_its_run_config_is_refused_naming_what_it_lacks(tmp_path):
    """With ``scale = true`` and a scale of 1 in every column only the run config could tell: the refusal names
    it; a ``center`` that differs is refused for that, read from the model's own field."""
    path = _without_run_config(tmp_path, center=True)
    with pytest.raises(ConfigError, match=r"^init-from '.*bare.npz' lacks its run_config \(the settings it was "
                                          r"fitted with\), so whether it was fitted with scale = true cannot be told"):
        load_start({"init-from": path, "center": True, "scale": True})
    with pytest.raises(ConfigError, match=r"was fitted with center = true, but this run has center = false"):
        load_start({"init-from": path, "center": False, "scale": False})


def test_a_scaled_model_without_its_run_config_is_known_scaled_by_its_scale(tmp_path):
    path = fake_model(tmp_path / "m.npz", center=True, scale=True)
    with np.load(path) as f:
        kept = {key: f[key] for key in f.files if key != "run_config"}
    kept["scale"] = np.full(D, 2.0)
    np.savez(tmp_path / "bare.npz", **kept)
    model = load_start({"init-from": str(tmp_path / "bare.npz"), "center": True, "scale": True})
    assert np.all(model["scale"] == 2.0)
    with pytest.raises(ConfigError, match=r"was fitted with scale = true, but this run has scale = false"):
        load_start({"init-from": str(tmp_path / "bare.npz"), "center": True, "scale": False})


def test_a_model_without_its_run_config_scaled_as_plink2_is_known_hwe_by_its_mean_and_scale(tmp_path):
    path = fake_model(tmp_path / "m.npz", center=True, scale=True)
    with np.load(path) as f:
        kept = {key: f[key] for key in f.files if key != "run_config"}
    p = np.linspace(0.05, 0.5, D)
    kept["mean"], kept["scale"] = 2 * p, np.sqrt(2 * p * (1 - p))
    np.savez(tmp_path / "bare.npz", **kept)
    assert load_start({"init-from": str(tmp_path / "bare.npz"), "center": True, "scale": "hwe"}) is not None
    for other in ("true", "false"):
        with pytest.raises(ConfigError, match=rf"was fitted with scale = hwe, but this run has scale = {other}"):
            load_start({"init-from": str(tmp_path / "bare.npz"), "center": True, "scale": other})
