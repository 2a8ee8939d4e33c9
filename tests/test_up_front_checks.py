"""Up-front checks: a bad node file or an output directory that cannot be written is one line, exit 2, before
any Flower process starts (deploy, flwr_run, compare); a folder with two files for one partition is refused."""

from __future__ import annotations

import os
import time

import numpy as np
import pytest

from fl_strategies.settings.config import ConfigError, validate_run_config
from simulations.engines import fused_run_config

needs_permissions = pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only directory")


@pytest.fixture
def no_processes(monkeypatch):
    """Fail the test if a deployment or ``flwr run`` would start."""
    from simulations.engines import deploy, flwr_run

    def started(*_, **__):
        raise AssertionError("a Flower process was started")

    monkeypatch.setattr(deploy.LocalDeployment, "__enter__", started)
    monkeypatch.setattr(flwr_run, "stream_run", started)
    monkeypatch.setattr(flwr_run, "superlink_running", lambda *_: False)


def _node_files(folder, bad=None):
    folder.mkdir()
    for i in range(3):
        np.save(folder / f"partition_{i}.npy", np.random.default_rng(i).standard_normal((10, 5)))
    if bad is not None:
        bad(folder)
    return folder


def _pickled(folder):
    np.save(folder / "partition_1.npy", np.array([{"a": 1}, None], dtype=object), allow_pickle=True)


@pytest.mark.parametrize("bad, fragment", [
    (lambda f: np.save(f / "partition_2.npy", np.full((10, 5), np.nan)),
     "partition 2: node file", ),
    (_pickled, "partition 1: node file"),
    (lambda f: np.save(f / "partition_0.npy", np.ones((10, 4))), "disagree on the number of columns"),
    (lambda f: np.save(f / "partition_1.npy", np.ones(5)), "partition 1: node file"),
    (lambda f: (f / "partition_2.npy").write_bytes(b"not an array"), "partition 2: node file"),
], ids=["nan", "pickle", "width", "1-d", "garbage"])
def test_deploy_checks_every_node_file_before_any_process(tmp_path, capsys, no_processes, bad, fragment):
    from simulations.engines.deploy import main

    data = _node_files(tmp_path / "data", bad)
    start = time.monotonic()
    assert main(["--run-config", 'dataset="nodes" num-clients=3 rank=2 iteration-rank=2', "--data-dir", str(data),
                 "--out", str(tmp_path / "out")]) == 2
    assert time.monotonic() - start < 10
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("python -m simulations.engines.deploy: error: --data-dir")
    assert fragment in err, err
    assert not (tmp_path / "out").exists()  # nothing created for a run refused on its data


def test_deploy_refuses_a_rank_above_the_node_files_width(tmp_path, capsys, no_processes):
    from simulations.engines.deploy import main

    data = _node_files(tmp_path / "data")
    assert main(["--run-config", 'dataset="nodes" num-clients=3 rank=6 iteration-rank=6', "--data-dir", str(data),
                 "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "rank" in err, err


def _secret(folder, pid=1, data=b"s" * 32, mode=0o600):
    path = folder / f"partition_{pid}.secret"
    path.write_bytes(data)
    path.chmod(mode)
    return path


@pytest.mark.parametrize("bad, fragment", [
    (lambda f: (f / "partition_1.secret").symlink_to("/dev/zero"), "is a symbolic link"),
    (lambda f: _secret(f, mode=0o644), "others may read it (mode 0644)"),
    (lambda f: _secret(f, data=b"short"), "holds 5 bytes"),
    (lambda f: os.mkfifo(f / "partition_1.secret", 0o600), "is a FIFO"),
], ids=["link-to-dev-zero", "mode-644", "size", "fifo"])
def test_deploy_checks_every_noise_secret_before_any_process(tmp_path, capsys, no_processes, bad, fragment):
    """Each node's secret is judged up front as its node will judge it: one line naming the file, exit 2."""
    from simulations.engines.deploy import main

    data, secrets = _node_files(tmp_path / "data"), tmp_path / "secrets"
    secrets.mkdir(mode=0o700)
    _secret(secrets, pid=0)
    bad(secrets)
    assert main(["--run-config", 'dataset="nodes" num-clients=3 rank=2 iteration-rank=2', "--data-dir", str(data),
                 "--noise-secret-dir", str(secrets), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith("python -m simulations.engines.deploy: error: --noise-secret-dir")
    assert f"'{secrets / 'partition_1.secret'}'" in err and fragment in err, err
    assert not (tmp_path / "out").exists()


def test_deploy_refuses_a_noise_secret_dir_that_is_a_file_and_accepts_good_or_missing_secrets(tmp_path, capsys,
                                                                                            no_processes):
    from simulations.engines.deploy import main

    data = _node_files(tmp_path / "data")
    args = ["--run-config", 'dataset="nodes" num-clients=3 rank=2 iteration-rank=2', "--data-dir", str(data),
            "--out", str(tmp_path / "out"), "--noise-secret-dir"]
    (tmp_path / "file").write_text("a user's file")
    assert main(args + [str(tmp_path / "file")]) == 2
    assert "is not a directory" in capsys.readouterr().err
    secrets = tmp_path / "secrets"
    secrets.mkdir(mode=0o700)
    _secret(secrets, pid=0)  # partitions 1 and 2 draw theirs on their nodes
    with pytest.raises(AssertionError, match="a Flower process was started"):
        main(args + [str(secrets)])


@pytest.mark.parametrize("option", ["--out", "results-dir", "checkpoint-dir"])
def test_deploy_refuses_an_output_directory_it_cannot_create(tmp_path, capsys, no_processes, option):
    from simulations.engines.deploy import main

    data = _node_files(tmp_path / "data")
    (tmp_path / "file").write_text("a user's file")
    blocked = tmp_path / "file" / "sub"  # under a regular file: cannot be created, whoever runs it
    cfg = 'dataset="nodes" num-clients=3 rank=2 iteration-rank=2'
    out = str(tmp_path / "out")
    if option == "--out":
        out = str(blocked)
    else:
        cfg += f' {option}="{blocked}"'
    assert main(["--run-config", cfg, "--data-dir", str(data), "--out", out]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"{option} = '{blocked}' is not a writable directory" in err, err
    assert (tmp_path / "file").read_text() == "a user's file"


@pytest.mark.parametrize("key", ["results-dir", "checkpoint-dir"])
def test_flwr_run_refuses_an_output_directory_it_cannot_create(tmp_path, capsys, no_processes, key):
    from simulations.engines.flwr_run import main

    (tmp_path / "file").write_text("")
    blocked = tmp_path / "file" / "sub"
    assert main(["--run-config", f'num-server-rounds=1 num-clients=2 {key}="{blocked}"']) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"{key} = '{blocked}' is not a writable directory" in err, err


@needs_permissions
def test_flwr_run_refuses_a_read_only_results_dir(tmp_path, capsys, no_processes):
    from simulations.engines.flwr_run import main

    (tmp_path / "ro").mkdir(mode=0o500)
    assert main(["--run-config", f'num-server-rounds=1 num-clients=2 results-dir="{tmp_path / "ro"}"']) == 2
    assert "results-dir" in capsys.readouterr().err


def test_compare_refuses_a_checkpoint_dir_it_cannot_create(tmp_path, capsys):
    from simulations.compare import main

    (tmp_path / "file").write_text("")
    config = tmp_path / "c.toml"
    config.write_text(f'[[runs]]\nname = "a"\nstrategy = "power"\ncheckpoint-dir = "{tmp_path / "file" / "ck"}"\n')
    assert main([str(config), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"python -m simulations.compare: error: {config}:1: run 'a': checkpoint-dir = "), err
    assert "is not a writable directory" in err
    assert not (tmp_path / "o").exists()


def test_a_folder_with_two_files_for_one_partition_is_refused_naming_both(tmp_path):
    folder = _node_files(tmp_path / "data")
    (folder / "partition_1.csv").write_text("1,2,3,4,5\n")
    cfg = fused_run_config({"dataset": str(folder), "num-clients": 3, "rank": 2, "iteration-rank": 2})
    with pytest.raises(ConfigError, match=r"holds two files for partition 1: 'partition_1\.npy' and "
                                          r"'partition_1\.csv'; keep one"):
        validate_run_config(cfg)
    (folder / "partition_1.csv").unlink()
    (folder / "partition_0.csv").write_text("1,2,3,4,5\n")  # partition 0 too, where the folder is recognised
    with pytest.raises(ConfigError, match=r"partition 0: 'partition_0\.npy' and 'partition_0\.csv'"):
        validate_run_config(cfg)
