"""A run never replaces earlier results silently: results-dir, deploy --out and compare --out."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

from conftest import run_app
from fl_strategies.settings.config import ConfigError
from fl_strategies.files.pca import load_model

SMALL = dict(strategy="power", dimension=12, num_samples=240, num_clients=3, rank=2, iteration_rank=2,
             num_server_rounds=3)


def test_a_second_run_into_the_same_results_dir_is_refused_and_the_first_is_kept(tmp_path):
    out = tmp_path / "out"
    run_app(results_dir=str(out), **SMALL)
    before = {name: (out / name).read_bytes() for name in ("rounds.csv", "estimate.npy", "pca.npz")}
    with pytest.raises(ConfigError, match=r"results-dir = .*out' already holds rounds\.csv, estimate\.npy, "
                                          r"pca\.npz of an earlier run.*overwrite = true.*resume = true"):
        run_app(results_dir=str(out), **{**SMALL, "num_server_rounds": 1})
    assert {name: (out / name).read_bytes() for name in before} == before


def test_overwrite_replaces_every_result_of_the_earlier_run(tmp_path):
    """With overwrite the earlier (noise-free) model does not stay beside the new rows: the noisy run's is there."""
    out = tmp_path / "out"
    run_app(results_dir=str(out), **SMALL)
    (out / "notes.txt").write_text("mine")
    run_app(results_dir=str(out), overwrite=True, epsilon=4.0, row_normalize=True,
            **{**SMALL, "strategy": "fedpower"})
    assert json.loads(str(load_model(out / "pca.npz")["privacy"]))["epsilon"] > 0 and (out / "rounds.csv").is_file()
    assert (out / "notes.txt").read_text() == "mine"  # not a result: untouched


def test_a_users_file_named_like_a_result_is_refused(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "rounds.csv").write_text("my own table\n")
    with pytest.raises(ConfigError, match="already holds rounds.csv"):
        run_app(results_dir=str(out), **SMALL)
    assert (out / "rounds.csv").read_text() == "my own table\n"


def _refuse_flower(monkeypatch, module):
    def refuse(*args, **kwargs):
        raise AssertionError("Flower was started")

    for name in ("stream_run", "LocalDeployment", "write_node_files"):
        if hasattr(module, name):
            monkeypatch.setattr(module, name, refuse)


def test_flwr_run_refuses_a_results_dir_with_results_before_flower(tmp_path, monkeypatch, capsys):
    from simulations.engines import flwr_run

    _refuse_flower(monkeypatch, flwr_run)
    (tmp_path / "estimate.npy").write_bytes(b"x")
    assert flwr_run.main(["--run-config", f'results-dir="{tmp_path}"']) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "already holds estimate.npy" in err and "overwrite = true" in err
    assert (tmp_path / "estimate.npy").read_bytes() == b"x"


def _earlier_deployment(out: Path, files: dict[str, bytes]) -> None:
    """``out`` as an earlier deployment left it: ``files`` (relative path -> bytes) and its record of them."""
    for name, data in files.items():
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_bytes(data)
    (out / ".deploy-outputs.json").write_text(json.dumps(sorted(files)))


def _tree(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


def test_deploy_refuses_an_out_of_an_earlier_deployment_unless_forced(tmp_path, monkeypatch, capsys):
    from simulations.engines import deploy

    _refuse_flower(monkeypatch, deploy)
    _earlier_deployment(tmp_path, {"logs/superlink.log": b"log", "rounds.csv": b"round\n0\n",
                                   "node-data/partition_1.npy": b"rows"})
    assert deploy.main(["--out", str(tmp_path), "--run-config", "num-clients=2"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--force" in err
    assert "already holds logs/superlink.log, node-data/partition_1.npy, rounds.csv of an earlier deployment" in err
    with pytest.raises(AssertionError, match="Flower was started"):  # --force passes the check
        deploy.main(["--out", str(tmp_path), "--run-config", "num-clients=2", "--force"])
    assert (tmp_path / "rounds.csv").read_text() == "round\n0\n"


@pytest.mark.parametrize("force", [[], ["--force"]], ids=["plain", "force"])
@pytest.mark.parametrize("name", ["node-data/partition_0.npy", "credentials/ca.key", "credentials/node_1.pub",
                                  "logs/supernode_1.log", "flwr-home/config.toml", "rounds.csv", "pca.npz"])
def test_deploy_never_writes_over_a_file_it_did_not_create(tmp_path, monkeypatch, capsys, name, force):
    """A file no deployment recorded is the user's: refused with or without --force, naming it, byte-identical;
    an earlier deployment's own files beside it do not make it replaceable."""
    from simulations.engines import deploy

    _refuse_flower(monkeypatch, deploy)
    _earlier_deployment(tmp_path, {"logs/superlink.log": b"log"})
    (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / name).write_bytes(b"the user's own file")
    before = _tree(tmp_path)
    assert deploy.main(["--out", str(tmp_path), "--secure", "--run-config", "num-clients=2", *force]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"holds {name}, which no deployment wrote there" in err, err
    assert _tree(tmp_path) == before


def test_deploy_secure_into_a_users_out_leaves_every_file_as_it_was(tmp_path, monkeypatch, capsys):
    """The user's node file and CA key, and a certificate that links outside --out: one line, exit 2, before any
    process starts; every file and the link's target byte-identical."""
    from simulations.engines import deploy

    _refuse_flower(monkeypatch, deploy)
    out, outside = tmp_path / "out", tmp_path / "elsewhere.crt"
    outside.write_bytes(b"a certificate outside --out")
    (out / "node-data").mkdir(parents=True)
    (out / "credentials").mkdir()
    (out / "node-data" / "partition_0.npy").write_bytes(b"the user's rows")
    (out / "credentials" / "ca.key").write_bytes(b"the user's key")
    (out / "credentials" / "ca.crt").symlink_to(outside)
    before = _tree(out)
    for force in ([], ["--force"]):
        assert deploy.main(["--secure", "--out", str(out), "--run-config", "num-clients=2", *force]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "ca.crt' is a symbolic link" in err, err
        assert _tree(out) == before and outside.read_bytes() == b"a certificate outside --out"
    (out / "credentials" / "ca.crt").unlink()
    assert deploy.main(["--secure", "--out", str(out), "--run-config", "num-clients=2"]) == 2
    err = capsys.readouterr().err.strip()
    assert "holds node-data/partition_0.npy, credentials/ca.key, which no deployment wrote there" in err, err
    assert _tree(out) == {name: data for name, data in before.items() if name != "credentials/ca.crt"}


def _comparison(tmp_path: Path, rounds: int = 2) -> Path:
    f = tmp_path / "c.toml"
    f.write_text('[defaults]\ndataset = "fedpower-model1"\nnum-samples = 300\ndimension = 10\nnum-clients = 3\n'
                 f'rank = 2\niteration-rank = 2\nnum-server-rounds = {rounds}\n'
                 '[[runs]]\nname = "p"\nstrategy = "power"\n')
    return f


def test_compare_keeps_foreign_files_and_refuses_a_name_it_would_replace(tmp_path, capsys):
    from simulations.compare import main

    out = tmp_path / "o"
    out.mkdir()
    (out / "notes.md").write_text("mine")
    assert main([str(_comparison(tmp_path)), "--out", str(out)]) == 0
    assert main([str(_comparison(tmp_path, 3)), "--out", str(out)]) == 0  # its own results: replaced
    assert (out / "notes.md").read_text() == "mine"
    other = tmp_path / "other"
    other.mkdir()
    (other / "summary.md").write_text("my summary")
    capsys.readouterr()
    assert main([str(_comparison(tmp_path)), "--out", str(other)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "holds summary.md, which no comparison wrote there" in err
    assert (other / "summary.md").read_text() == "my summary" and not (other / "results.csv").exists()


def test_every_committed_comparison_records_its_outputs():
    """The reproduction commands (the experiments' READMEs, docs/) write into committed folders: each lists what compare wrote there."""
    from simulations.compare.cli import MANIFEST, ComparisonError, load_comparison, output_names

    root = Path(__file__).resolve().parents[1]
    tracked = set(subprocess.run(["git", "ls-files"], cwd=root, capture_output=True, text=True).stdout.split())
    checked = 0
    for toml in sorted((root / "simulations" / "experiments").glob("*/*.toml")):
        folder = toml.parent / "results" / toml.stem
        try:
            meta, _ = load_comparison(toml)
        except ComparisonError:  # a script's own file, not a comparison
            continue
        manifest = folder / MANIFEST
        assert manifest.relative_to(root).as_posix() in tracked, manifest
        assert set(json.loads(manifest.read_text())) == set(output_names(meta))
        checked += 1
    assert checked >= 10
