"""PCA as users expect it: centring, a pca.npz in scikit-learn's names, transform on a node, variance-target."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.decomposition import PCA

from conftest import run_app
from fl_strategies.settings.config import ConfigError, validate_run_config
from fl_strategies.kernels.linalg import subspace_distance
from fl_strategies.files.pca import choose_rank, load_model
from simulations.engines import fused_run_config

D, K = 8, 3


def node_files(folder, sizes=(60, 90, 150), seed=0):
    """Per-client files ``partition_<i>.npy`` of one data set with a non-zero mean and a clear spectrum."""
    rng = np.random.default_rng(seed)
    basis = np.linalg.qr(rng.standard_normal((D, D)))[0]
    scales = np.array([5.0, 4.0, 3.0, 1.0, 0.7, 0.5, 0.3, 0.2])
    mean = rng.uniform(-3, 3, D)
    blocks = [mean + (rng.standard_normal((s, D)) * scales) @ basis.T for s in sizes]
    folder.mkdir(exist_ok=True)
    for i, block in enumerate(blocks):
        np.save(folder / f"partition_{i}.npy", block)
    return blocks


def folder_run(tmp_path, **over):
    blocks = node_files(tmp_path / "data")
    cfg = dict(strategy="power", dataset=str(tmp_path / "data"), num_clients=3, rank=K, iteration_rank=5,
               num_server_rounds=60, center=True, row_normalize=False, results_dir=str(tmp_path / "out"))
    cfg.update(over)
    shapes = []
    s = run_app(observer=lambda rnd, pid, broadcast, arrays: shapes.extend(a.shape for a in arrays), **cfg)
    return s, np.vstack(blocks), shapes


def test_folder_run_writes_the_pca_of_scikit_learn(tmp_path):
    s, X, shapes = folder_run(tmp_path)
    model = load_model(tmp_path / "out" / "pca.npz")
    ref = PCA(n_components=K).fit(X)
    assert s.reference is None and s.d == D  # the server read no file: d came from the clients
    assert set(shapes) == {(D, 5)}  # every reply it saw: d x r products only
    np.testing.assert_allclose(model["mean"], X.mean(axis=0), rtol=0, atol=1e-10)
    assert subspace_distance(model["components"].T, ref.components_.T) < 1e-6
    for key in ("explained_variance", "explained_variance_ratio", "singular_values"):
        np.testing.assert_allclose(model[key], getattr(ref, key + "_"), rtol=1e-6)
    assert model["n_samples"] == X.shape[0] == 300
    np.testing.assert_allclose(model["components"], ref.components_, rtol=0, atol=1e-6)  # signs included


def test_transform_on_a_node_gives_pca_transform(tmp_path):
    from client_app.transform import main

    _, X, _ = folder_run(tmp_path)
    ref = PCA(n_components=K).fit(X)
    new = np.random.default_rng(5).standard_normal((20, D)) * 3
    np.save(tmp_path / "rows.npy", new)
    assert main(["--model", str(tmp_path / "out" / "pca.npz"), "--data", str(tmp_path / "rows.npy"),
                 "--out", str(tmp_path / "scores.npy")]) == 0
    scores = np.load(tmp_path / "scores.npy")
    np.testing.assert_allclose(scores, ref.transform(new), rtol=0, atol=1e-8)  # signs included


def test_transform_refuses_rows_of_another_width(tmp_path, capsys):
    from client_app.transform import main

    folder_run(tmp_path, num_server_rounds=5)
    np.save(tmp_path / "wide.npy", np.ones((4, D + 1)))
    assert main(["--model", str(tmp_path / "out" / "pca.npz"), "--data", str(tmp_path / "wide.npy"),
                 "--out", str(tmp_path / "s.npy")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("python -m client_app.transform: error: --data") and f"needs {D} columns" in err and "\n" not in err
    assert main(["--model", str(tmp_path / "wide.npy"), "--data", str(tmp_path / "wide.npy"),
                 "--out", str(tmp_path / "s.npy")]) == 2


def test_uncentred_model_has_a_zero_mean_and_the_papers_covariance(tmp_path):
    _, X, _ = folder_run(tmp_path, center=False)
    model = load_model(tmp_path / "out" / "pca.npz")
    C = X.T @ X / len(X)
    values = np.linalg.eigvalsh(C)[::-1][:K]
    assert not model["mean"].any()
    np.testing.assert_allclose(model["explained_variance"] * (len(X) - 1) / len(X), values, rtol=1e-8)


@pytest.mark.parametrize("target", [0.5, 0.8, 0.95])
def test_variance_target_keeps_the_components_of_scikit_learn(tmp_path, target):
    _, X, _ = folder_run(tmp_path, variance_target=target, rank=1)
    model = load_model(tmp_path / "out" / "pca.npz")
    assert len(model["components"]) == PCA(n_components=target, svd_solver="full").fit(X).n_components_


def test_choose_rank_when_the_target_is_not_reached():
    assert choose_rank(np.array([0.5, 0.3]), 0.9) == 2
    assert choose_rank(np.array([0.5, 0.3]), 0.8) == 2
    assert choose_rank(np.array([0.5, 0.3]), 0.5) == 1


@pytest.mark.parametrize("over, key", [
    ({"variance-target": 1.5}, "variance-target"),
    ({"center": True, "noise-std": 0.1, "row-normalize": True}, "center"),  # private centring needs epsilon
    ({"variance-target": 0.9, "strategy": "dp-power"}, "variance-target"),  # centring is private there, the ratio not
    ({"variance-target": 0.9, "noise-std": 0.1, "row-normalize": True}, "variance-target"),
    ({"center": True, "discovery": "engine"}, "center"),
])
def test_pca_settings_that_cannot_hold_are_refused(over, key):
    with pytest.raises(ConfigError, match=rf"^{key}"):
        validate_run_config(fused_run_config(over))


def test_compare_writes_a_pca_model_per_run_and_seed(tmp_path):
    from simulations.compare import run_comparison

    blocks = node_files(tmp_path / "data")
    (tmp_path / "c.toml").write_text(f'''title = "PCA on a folder"
[defaults]
dataset = "{tmp_path / 'data'}"
num-clients = 3
rank = {K}
iteration-rank = 5
num-server-rounds = 60
center = true
row-normalize = false
[[runs]]
name = "power"
strategy = "power"
''')
    run_comparison(tmp_path / "c.toml", out=tmp_path / "out")
    (path,) = sorted((tmp_path / "out" / "estimates").glob("*.pca.npz"))
    model, ref = load_model(path), PCA(n_components=K).fit(np.vstack(blocks))
    assert subspace_distance(model["components"].T, ref.components_.T) < 1e-6
    np.testing.assert_allclose(model["explained_variance"], ref.explained_variance_, rtol=1e-6)


def test_covariance_is_eigh_of_the_pooled_data_in_one_round(tmp_path):
    """The exact baseline: one round, d^2 numbers per client, the eigenvectors of the pooled (centred) matrix."""
    s, X, shapes = folder_run(tmp_path, strategy="covariance", num_server_rounds=1)
    assert len(s.records) == 2 and set(shapes) == {(D, D)}
    Xc = X - X.mean(axis=0)
    values, vectors = np.linalg.eigh(Xc.T @ Xc / len(X))
    assert subspace_distance(s.estimate, vectors[:, -5:]) < 1e-12
    model = load_model(tmp_path / "out" / "pca.npz")
    np.testing.assert_allclose(model["explained_variance"], values[::-1][:K] * len(X) / (len(X) - 1), rtol=1e-12)
    assert 3 * D * D * 8 < s.records[1]["bytes_up"] < 3 * (D * D * 8 + 256)  # three d x d float64 arrays


def test_covariance_in_simulation_matches_the_reference():
    s = run_app(strategy="covariance", dimension=20, num_samples=2000, rank=3, iteration_rank=3)
    assert s.records[-1]["subspace_distance"] < 1e-12


def test_covariance_crossover_script_measures_both_strategies():
    from simulations.experiments.fedpower.covariance_crossover import markdown, run

    table = run([16], tol=1e-6, max_rounds=40)
    (row,) = table.to_dict("records")
    assert row["covariance_distance"] < 1e-12 and 1 <= row["power_rounds"] <= 40
    assert row["covariance_bytes_up"] > 10 * 16 * 16 * 8  # ten d x d float64 matrices
    assert row["bytes_ratio"] == row["covariance_bytes_up"] / row["power_bytes_up"]
    assert markdown(table).splitlines()[0].startswith("| d | covariance_rounds |")


def test_a_folder_data_set_needs_one_client_per_file_and_is_not_checked_by_the_harness(tmp_path):
    """A folder of per-client files fixes num-clients (refused naming the key, not silently changed), and the
    command-line check (`flwr_run`, `deploy`) accepts the folder without looking for a harness data set."""
    from simulations.engines import ArgumentError, checked_run_config

    node_files(tmp_path / "data")
    with pytest.raises(ConfigError, match=r"^num-clients = 10, but the dataset folder .* holds 3 per-client "
                                          r"file\(s\) \(partition_0 \.\. partition_2\): set num-clients = 3"):
        validate_run_config(fused_run_config({"dataset": str(tmp_path / "data")}))
    cfg = checked_run_config({"dataset": str(tmp_path / "data"), "num-clients": 3, "rank": 2})
    assert cfg["num-clients"] == 3 and cfg["dimension"] == 0  # the folder's width comes from the files
    (tmp_path / "data" / "partition_1.npy").unlink()  # a gap: every file is an owner's, none is left out
    with pytest.raises(ArgumentError, match=r"holds 2 node file\(s\) \(partition_0.npy, partition_2.npy\) but none "
                                            r"for partition 1: .*rename the files to partition_0 .. partition_1"):
        checked_run_config({"dataset": str(tmp_path / "data"), "num-clients": 3, "rank": 2})


def test_a_bad_folder_file_is_one_line_before_flower_starts(tmp_path):
    """flwr_run / deploy read a folder data set's files before any Flower process: an empty file, a NaN, files of
    different widths and a rank above the width are each one line naming the partition, file or key."""
    from simulations.engines import ArgumentError, checked_run_config

    blocks = node_files(tmp_path / "data")
    over = {"dataset": str(tmp_path / "data"), "num-clients": 3, "rank": 2}
    np.save(tmp_path / "data" / "partition_1.npy", blocks[1][:, :5])
    with pytest.raises(ArgumentError, match=r"disagree on the number of columns: d = 5: partition 1 "
                                            r"\(partition_1.npy\); d = 8: partition 0 \(partition_0.npy\), partition 2"):
        checked_run_config(over)
    bad = blocks[1].copy()
    bad[3, 2] = np.nan
    np.save(tmp_path / "data" / "partition_1.npy", bad)
    with pytest.raises(ArgumentError, match=r"partition 1: dataset folder file .*partition_1.npy'.*non-finite.*row 3"):
        checked_run_config(over)
    np.save(tmp_path / "data" / "partition_1.npy", np.zeros((0, D)))
    with pytest.raises(ArgumentError, match=r"partition 1: dataset folder file .*at least 1 row"):
        checked_run_config(over)
    np.save(tmp_path / "data" / "partition_1.npy", blocks[1])
    with pytest.raises(ArgumentError, match=rf"rank must be at most the data dimension d = {D}, got 9"):
        checked_run_config({**over, "rank": 9, "iteration-rank": 9})
    assert checked_run_config(over)["num-clients"] == 3


def test_a_nodes_failure_is_its_own_message_without_the_engines_wrapping():
    from fl_strategies.protocol.base import failure_reason

    wrapped = ("Message contains an Error (reason: <class 'ray.exceptions.RayTaskError(ClientAppException)'>:<'ray::"
               "ClientAppActor.run() (pid=4242, actor_id=ab12)\n  File \"/x/app.py\", line 3, in run\n"
               "flwr.clientapp.ClientAppException: \nValueError: partition 2: dataset folder file '/d/partition_2.csv':"
               " has shape (0, 1); at least 1 row and 1 column are required'>)")
    assert failure_reason(RuntimeError(wrapped)) == ("ValueError: partition 2: dataset folder file '/d/partition_2.csv':"
                                                     " has shape (0, 1); at least 1 row and 1 column are required")
    assert failure_reason(ValueError("no such file")) == "no such file"
    assert failure_reason(RuntimeError("x" * 2000)).endswith(" ...") and len(failure_reason(RuntimeError("x" * 2000))) == 504


def _transform(tmp_path, model, data, out, *extra):
    from client_app.transform import main

    return main(["--model", str(model), "--data", str(data), "--out", str(out), *extra])


def test_transform_never_writes_over_its_input_and_refuses_an_existing_out(tmp_path, capsys):
    folder_run(tmp_path, num_server_rounds=5)
    model = tmp_path / "out" / "pca.npz"
    rows = np.random.default_rng(6).standard_normal((7, D))
    np.save(tmp_path / "rows.npy", rows)
    (tmp_path / "link.npy").symlink_to(tmp_path / "rows.npy")
    model_bytes = model.read_bytes()
    for out, force in [(tmp_path / "rows.npy", []), (tmp_path / "rows.npy", ["--force"]),
                       (tmp_path / "link.npy", ["--force"]), (tmp_path / "." / "rows.npy", [])]:
        assert _transform(tmp_path, model, tmp_path / "rows.npy", out, *force) == 2
        err = capsys.readouterr().err.strip()
        assert "--data" in err and "rows.npy" in err and "\n" not in err, err
    (tmp_path / "model.npy").symlink_to(model)
    assert _transform(tmp_path, model, tmp_path / "rows.npy", tmp_path / "model.npy", "--force") == 2
    assert "--model" in capsys.readouterr().err
    np.testing.assert_array_equal(np.load(tmp_path / "rows.npy"), rows)
    assert model.read_bytes() == model_bytes
    # an existing --out that is no input: refused, untouched; replaced with --force
    (tmp_path / "mine.npy").write_bytes(b"the user's own file")
    assert _transform(tmp_path, model, tmp_path / "rows.npy", tmp_path / "mine.npy") == 2
    err = capsys.readouterr().err.strip()
    assert "already exists" in err and "--force" in err and "mine.npy" in err
    assert (tmp_path / "mine.npy").read_bytes() == b"the user's own file"
    assert _transform(tmp_path, model, tmp_path / "rows.npy", tmp_path / "mine.npy", "--force") == 0
    assert np.load(tmp_path / "mine.npy").shape == (7, K)


def test_transform_writes_a_new_file_with_mode_600_and_leaves_no_temporary(tmp_path):
    import os
    import stat

    folder_run(tmp_path, num_server_rounds=5)
    np.save(tmp_path / "rows.npy", np.ones((3, D)))
    old = os.umask(0)
    try:
        assert _transform(tmp_path, tmp_path / "out" / "pca.npz", tmp_path / "rows.npy", tmp_path / "s.npy") == 0
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "s.npy").stat().st_mode) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_file()) == ["rows.npy", "s.npy"]  # no temporary


@pytest.mark.parametrize("key, value", [
    ("components", lambda m: np.where(np.arange(m.size).reshape(m.shape) == 0, np.nan, m)),
    ("mean", lambda m: m + np.inf),
    ("explained_variance", lambda m: np.append(m, 1.0)),
    ("singular_values", lambda m: np.full_like(m, np.nan)),
    ("n_samples", lambda m: np.asarray([3, 4])),
    ("explained_variance_ratio", lambda m: m.astype(str)),
])
def test_transform_refuses_a_model_with_a_non_finite_or_misshaped_field(tmp_path, capsys, key, value):
    folder_run(tmp_path, num_server_rounds=5)
    with np.load(tmp_path / "out" / "pca.npz") as f:
        fields = {name: f[name] for name in f.files}
    fields[key] = value(fields[key])
    np.savez(tmp_path / "bad.npz", **fields)
    np.save(tmp_path / "rows.npy", np.ones((3, D)))
    assert _transform(tmp_path, tmp_path / "bad.npz", tmp_path / "rows.npy", tmp_path / "s.npy") == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("python -m client_app.transform: error: --model") and key in err and "\n" not in err, err
    assert not (tmp_path / "s.npy").exists()
