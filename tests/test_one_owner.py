"""One owner per folder for the whole run, and an earlier run's checkpoint never replaced unasked.

In-process: the holder is a lock this test takes (as another command or a ServerApp would), and the command under
test must refuse in one line naming it, exit status 2, before it starts Flower or writes anything.
"""

from __future__ import annotations

import os
import signal

import numpy as np
import pytest

from conftest import run_app
from fl_strategies.files.folder_lock import OWNER_LOCK, WRITER_LOCK, FolderInUse, FolderLock, holder, own_folders
from fl_strategies.settings.config import ConfigError

RUN_CONFIG = "num-clients=2 num-server-rounds=2 dimension=8 num-samples=60 rank=2"


def _no_flower(*args, **kwargs):
    raise AssertionError("Flower was started although a folder of the run is owned by another process")


def _listing(folder):
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else None


@pytest.mark.parametrize("key", ["results-dir", "checkpoint-dir"])
def test_a_second_run_on_an_owned_folder_is_refused_in_one_line_naming_the_holder(key, tmp_path, monkeypatch,
                                                                                   capsys):
    from fedspectral import run

    monkeypatch.setattr(run, "stream_run", _no_flower)
    folder = tmp_path / "out"
    with own_folders({key: folder}, what="fedspectral run (the first one)"):
        before = _listing(folder)
        assert run.main(["--run-config", f'{RUN_CONFIG} {key}="{folder}"'], prog="fedspectral run") == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "Traceback" not in err
        assert f"{key} '{folder}' is in use by pid {os.getpid()}: fedspectral run (the first one)" in err
        assert _listing(folder) == before  # nothing written
    assert not (folder / OWNER_LOCK).exists()  # released: the lock file is gone


def test_a_run_on_a_folder_a_serverapp_writes_is_refused(tmp_path, monkeypatch, capsys):
    """A plain `flwr run .` holds no owner lock, but its ServerApp holds the writer lock while it runs."""
    from fedspectral import run

    monkeypatch.setattr(run, "stream_run", _no_flower)
    folder = tmp_path / "out"
    with FolderLock(folder, "results-dir", writer=True, what="the ServerApp of a fedspectral run"):
        assert run.main(["--run-config", f'{RUN_CONFIG} results-dir="{folder}"'], prog="fedspectral run") == 2
    err = capsys.readouterr().err
    assert "is in use by a running ServerApp (pid" in err and err.count("\n") == 1
    assert holder(folder) is None  # the refused command holds nothing afterwards


def test_a_run_and_a_compare_on_one_folder_exclude_each_other(tmp_path, monkeypatch, capsys):
    from fedspectral import run
    from simulations.compare.cli import OutputDir, main as compare

    monkeypatch.setattr(run, "stream_run", _no_flower)
    out = tmp_path / "out"
    with OutputDir(out):  # a comparison writing out
        assert run.main(["--run-config", f'{RUN_CONFIG} results-dir="{out}"'], prog="fedspectral run") == 2
    assert f"results-dir '{out}' is in use by pid {os.getpid()}" in capsys.readouterr().err
    config = tmp_path / "c.toml"
    config.write_text('[defaults]\nnum-clients = 2\nnum-server-rounds = 2\n[[runs]]\nname = "a"\n'
                      'strategy = "fedpower"\n')
    with own_folders({"results-dir": out}, what="fedspectral run"):  # a run writing out
        assert compare([str(config), "--out", str(out)], prog="fedspectral compare") == 2
    err = capsys.readouterr().err
    assert f"--out '{out}' is in use by pid {os.getpid()}: fedspectral run" in err and err.count("\n") == 1
    assert not (out / "results.csv").exists()


def test_a_compare_owns_the_checkpoint_dirs_of_its_runs(tmp_path, monkeypatch, capsys):
    from simulations.compare import cli

    config = tmp_path / "c.toml"
    config.write_text(f'[defaults]\nnum-clients = 2\nnum-server-rounds = 2\ncheckpoint-dir = "{tmp_path / "ck"}"\n'
                      '[[runs]]\nname = "a"\nstrategy = "fedpower"\n')
    _, jobs = cli.load_comparison(config)
    job_dir = cli.job_checkpoint_dir(jobs[0])
    with own_folders({"checkpoint-dir": job_dir}, what="fedspectral run"):
        assert cli.main([str(config), "--out", str(tmp_path / "out")], prog="fedspectral compare") == 2
    err = capsys.readouterr().err
    assert f"checkpoint-dir (run 'a' seed 0) '{job_dir}' is in use by pid {os.getpid()}: fedspectral run" in err
    assert err.endswith("choose another checkpoint-dir\n") and err.count("\n") == 1


def test_a_second_deploy_on_one_out_is_refused_before_any_process_starts(tmp_path, monkeypatch, capsys):
    from fedspectral import deploy

    monkeypatch.setattr(deploy, "LocalDeployment", _no_flower)
    monkeypatch.setattr(deploy, "write_node_files", _no_flower)
    out = tmp_path / "dep"
    with own_folders({"--out": out}, what="fedspectral deploy --out dep"):
        before = _listing(out)
        assert deploy.main(["--run-config", RUN_CONFIG, "--out", str(out)], prog="fedspectral deploy") == 2
        assert _listing(out) == before
    err = capsys.readouterr().err
    assert f"--out '{out}' is in use by pid {os.getpid()}: fedspectral deploy --out dep" in err
    assert err.count("\n") == 1


def test_a_serverapp_refuses_a_folder_another_serverapp_writes(tmp_path):
    """Two plain `flwr run .` on one results-dir: the second ServerApp stops before round 1, writing nothing."""
    folder = tmp_path / "out"
    with FolderLock(folder, "results-dir", writer=True, what="the ServerApp of another run"):
        with pytest.raises(FolderInUse, match="results-dir .* is in use by pid .*: the ServerApp of another run"):
            run_app(num_clients=2, num_server_rounds=2, results_dir=str(folder))
        assert _listing(folder) == [WRITER_LOCK]
    run_app(num_clients=2, num_server_rounds=2, results_dir=str(folder))  # free again; and released after it
    assert (folder / "rounds.csv").is_file() and holder(folder, writer=True) is None
    assert not (folder / WRITER_LOCK).exists()


def test_a_serverapp_is_not_refused_by_the_owner_lock_of_the_command_that_started_it(tmp_path):
    folder = tmp_path / "out"
    with own_folders({"results-dir": folder}, what="fedspectral run"):
        run_app(num_clients=2, num_server_rounds=2, results_dir=str(folder))
    assert (folder / "rounds.csv").is_file()


def test_the_folders_are_released_when_the_serverapp_fails(tmp_path):
    folder = tmp_path / "out"
    with pytest.raises(ConfigError):  # refused after the locks were taken: fedavg keeps no checkpoint
        run_app(num_clients=2, num_server_rounds=2, results_dir=str(folder), checkpoint_dir=str(folder),
                strategy="fedave")
    assert holder(folder, writer=True) is None


def test_a_second_transform_to_one_out_is_refused(tmp_path, capsys):
    from client_app.transform import main as transform

    out = tmp_path / "scores.npy"
    with FolderLock(out, "--out", file=True, what="fedspectral transform --out scores.npy"):
        assert transform(["--model", str(tmp_path / "pca.npz"), "--data", str(tmp_path / "x.npy"), "--out",
                          str(out), "--force"], prog="fedspectral transform") == 2
    err = capsys.readouterr().err
    assert f"--out '{out}' is in use by pid {os.getpid()}: fedspectral transform" in err
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == []


def test_sigterm_of_transform_leaves_no_partial_file(tmp_path, monkeypatch, capsys):
    from client_app import transform as module

    model, data, out = tmp_path / "m", tmp_path / "x.npy", tmp_path / "scores.npy"
    rows = np.random.default_rng(0).standard_normal((20, 4))
    np.save(data, rows)
    monkeypatch.setattr(module, "load_model", lambda path: {})

    def stopped(model, X):  # the signal arrives while the scores are computed
        os.kill(os.getpid(), signal.SIGTERM)
        return X

    monkeypatch.setattr(module, "transform", stopped)
    before = signal.getsignal(signal.SIGTERM)  # SIG_DFL, or what an earlier test left (ray.init installs one)
    assert module.main(["--model", str(model), "--data", str(data), "--out", str(out)], prog="t") == 143
    err = capsys.readouterr().err
    assert err == f"t: interrupted (SIGTERM): nothing was written to {out}\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.npy"]
    assert signal.getsignal(signal.SIGTERM) is before  # the command's handlers are removed again


# -- an earlier run's checkpoint ----------------------------------------------------------------------------------
def test_a_new_run_never_replaces_an_earlier_checkpoint_without_resume_or_overwrite(tmp_path):
    folder = tmp_path / "ck"
    run_app(num_clients=2, num_server_rounds=3, checkpoint_dir=str(folder))
    saved = (folder / "checkpoint.npz").read_bytes()
    with pytest.raises(ConfigError, match="checkpoint-dir = .* already holds checkpoint.npz of an earlier run: .*"
                                          "resume = true .* overwrite = true"):
        run_app(num_clients=2, num_server_rounds=3, seed=5, checkpoint_dir=str(folder))
    assert (folder / "checkpoint.npz").read_bytes() == saved
    run_app(num_clients=2, num_server_rounds=3, checkpoint_dir=str(folder), resume=True)  # allowed
    run_app(num_clients=2, num_server_rounds=3, seed=5, checkpoint_dir=str(folder), overwrite=True)
    assert (folder / "checkpoint.npz").read_bytes() != saved


def test_the_run_command_refuses_an_earlier_checkpoint_before_flower_starts(tmp_path, monkeypatch, capsys):
    from fedspectral import run

    monkeypatch.setattr(run, "stream_run", _no_flower)
    folder = tmp_path / "ck"
    folder.mkdir()
    (folder / "checkpoint.npz").write_bytes(b"an earlier run's")
    assert run.main(["--run-config", f'{RUN_CONFIG} checkpoint-dir="{folder}"'], prog="fedspectral run") == 2
    err = capsys.readouterr().err
    assert "checkpoint-dir" in err and "already holds checkpoint.npz" in err and err.count("\n") == 1
    assert (folder / "checkpoint.npz").read_bytes() == b"an earlier run's"
