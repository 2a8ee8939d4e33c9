"""No writer of the project writes through a symbolic link.

Every writer is run with a link planted at one of its destinations (a file it writes, or a directory it creates
inside the output it was given), pointing to a file outside: the write is refused with one line naming the link,
and the file outside is byte-identical afterwards.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import numpy as np
import pytest

from fl_strategies.files.plain_files import (UnsafeDestination, append_file, make_directory, open_file,
                                             write_file)

OUTSIDE = b"the user's own file, outside the output\n"


def _small_cfg(**over):
    from fl_strategies.settings.config import validate_run_config
    from simulations.engines import fused_run_config

    return validate_run_config(fused_run_config({"num-clients": 2, "dimension": 6, "num-samples": 40, "rank": 2,
                                                 "iteration-rank": 2, "num-server-rounds": 1, **over}))


def _results_writer(base: Path, name: str):
    from server_app.results import ResultsWriter

    writer = ResultsWriter(base)
    _plant(base / name)
    if name == "pca.npz":
        writer.write_model(_model(), {})
    else:
        writer({"round": 0, "subspace_distance": 0.5}, np.eye(3, 2))


def _results_writer_resumed(base: Path, name: str):
    from server_app.results import ResultsWriter

    _plant(base / name)
    ResultsWriter(base, keep=True)


def _checkpoint(base: Path, name: str, caplog):
    import fl_strategies.protocol.checkpoint as ck

    class State:
        def state_dict(self):
            return {"records": []}

    checkpoint = ck.Checkpoint(base, dict(_small_cfg(), resume=False))
    _plant(base / ck.CHECKPOINT_FILE)
    with caplog.at_level(logging.ERROR, logger="flwr.fedspectral"):
        checkpoint.save(1, [np.eye(3, 2)], State())
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert checkpoint.saved_round is None and len(errors) == 1
    raise UnsafeDestination(errors[0])


def _model() -> dict:
    from fl_strategies.files.pca import pca_model

    Z = np.eye(4, 2)
    return pca_model(Z, Z * [2.0, 1.0], 4.0, 10, np.zeros(4), 2)


def _transform(base: Path, name: str, capsys):
    from client_app.transform import main
    from fl_strategies.files.pca import save_model

    save_model(base / "pca.npz", _model(), {})
    np.save(base / "rows.npy", np.ones((3, 4)))
    _plant(base / name)
    return _exit(main(["--model", str(base / "pca.npz"), "--data", str(base / "rows.npy"), "--out",
                       str(base / name), "--force"]), capsys)


def _credentials(base: Path, name: str, capsys):
    from simulations.engines.credentials import main

    _plant(base / name)
    return _exit(main([str(base), "--nodes", "1", "--rotate"]), capsys)


def _node_files(base: Path, name: str):
    from simulations.engines.deploy import write_node_files

    _plant(base / name)
    write_node_files(_small_cfg(), base / "node-data")


def _deployment(base: Path, name: str, monkeypatch):
    """``LocalDeployment(secure=True)`` as ``deploy --secure`` starts it, its processes stubbed out."""
    import simulations.engines.deploy as deploy

    class Stub:
        pid = 0

        def poll(self):
            return None

    health = iter([False] + [True] * 10)  # nothing answers on the port before the SuperLink starts
    monkeypatch.setattr(deploy, "_healthy", lambda *a, **k: next(health))
    monkeypatch.setattr(deploy.subprocess, "Popen", lambda *a, **k: Stub())
    monkeypatch.setattr(deploy.time, "sleep", lambda seconds: None)
    monkeypatch.setattr(deploy.LocalDeployment, "register", lambda self, key: None)
    monkeypatch.setattr(deploy.LocalDeployment, "stop", lambda self: None)
    for sub in ("logs", "flwr-home", "credentials"):
        if not name.startswith(sub):
            (base / sub).mkdir(mode=0o700)
    _plant(base / name)
    files = [base / f"partition_{i}.npy" for i in range(2)]
    with deploy.LocalDeployment(files, base, port=1, secure=True, warm_clientapp=False):  # no fork server
        pass


def _compare(base: Path, name: str):
    from simulations.compare.cli import MANIFEST, OutputDir

    names = ("estimates", "results.csv", "summary.md", "subspace_distance.png")
    if name != MANIFEST:  # every name is an earlier comparison's output
        write_file(base / MANIFEST, '["estimates", "results.csv", "summary.md", "subspace_distance.png"]')
    _plant(base / name)
    with OutputDir(base, names):
        pass


def _report(base: Path, name: str):
    import pandas as pd

    from simulations.compare.report import plot_metric, summarize, write_summary_markdown

    _plant(base / name)
    results = pd.DataFrame({"run": ["a", "a"], "strategy": ["fedpower"] * 2, "seed": [0, 0], "round": [0, 1],
                            "subspace_distance": [1.0, 0.5], "bytes_up": [0, 1], "bytes_down": [0, 1]})
    if name.endswith(".md"):
        write_summary_markdown(summarize(results), base / name, title="t", metric="subspace_distance")
    else:
        plot_metric(results, base / name)


def _data_folders(base: Path, name: str):
    from simulations.data.genotypes import write_genotype_sites
    from simulations.experiments.private_pca.owners import write_folder

    _plant(base / name)
    if name.startswith("genotypes"):
        write_genotype_sites(base / "genotypes", [5, 5], 8, seed=0)
    else:
        write_folder([np.ones((3, 2)), np.ones((3, 2))], base / "owners")


def _probe(base: Path, name: str):
    from fl_strategies.settings.config import writable_directory

    _plant(base / name)
    writable_directory(base, "results-dir")
    assert os.readlink(base / name)  # the link is left as it was
    raise UnsafeDestination(f"{str(base / name)!r} untouched")


def _secret(base: Path, name: str):
    from fl_strategies.privacy.noise import read_or_create_secret

    _plant(base / name)
    try:
        read_or_create_secret(base / name)
    except ValueError as ex:
        raise UnsafeDestination(str(ex)) from None


def _helpers(base: Path, name: str):
    _plant(base / name)
    which = name.split("-")[0]
    if which == "write":
        write_file(base / name, b"new")
    elif which == "append":
        append_file(base / name, b"new")
    elif which == "open":
        open_file(base / name, truncate=True).close()
    else:
        make_directory(base / name)


def _exit(status: int, capsys) -> None:
    err = capsys.readouterr().err
    assert status == 2 and err.count("\n") == 1, err
    raise UnsafeDestination(err)


WRITERS = {
    "plain_files": (_helpers, ["write-file", "append-file", "open-file", "make-directory"]),
    "results-dir": (_results_writer, ["rounds.csv", "estimate.npy", "pca.npz"]),
    "results-dir resumed": (_results_writer_resumed, ["rounds.csv", "estimate.npy", "pca.npz"]),
    "checkpoint-dir": (_checkpoint, ["checkpoint.npz"]),
    "transform --out": (_transform, ["scores.npy"]),
    "credentials --rotate": (_credentials, ["ca.crt", "ca.key", "server.pem", "server.key", "node_0",
                                            "node_0.pub"]),
    "deploy node files": (_node_files, ["node-data", "node-data/partition_0.npy", "node-data/partition_1.npy"]),
    "deploy --secure": (_deployment, ["logs", "flwr-home", "credentials", "logs/superlink.log",
                                      "logs/supernode_1.log", "flwr-home/config.toml", "credentials/ca.crt",
                                      "credentials/ca.key", "credentials/server.pem", "credentials/node_1",
                                      "credentials/node_1.pub"]),
    "compare --out": (_compare, [".fedspectral.lock", ".compare-outputs.json", "results.csv", "summary.md",
                                 "subspace_distance.png", "estimates"]),
    "compare report": (_report, ["summary.md", "metric.png"]),
    "data folders": (_data_folders, ["genotypes/partition_1.npy", "owners/partition_0.npy"]),
    "writable_directory": (_probe, [".write-test"]),
    "noise secret": (_secret, ["partition_0.secret"]),
}
CASES = [(writer, name) for writer, (_, names) in WRITERS.items() for name in names]


@pytest.fixture
def outside(tmp_path):
    path = tmp_path / "outside" / "users_file"
    path.parent.mkdir()
    path.write_bytes(OUTSIDE)
    return path


_TARGET: list[Path] = []
"""The file every planted link points to (set by the test)."""


def _plant(link: Path) -> None:
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(_TARGET[0])


@pytest.mark.parametrize("writer,name", CASES, ids=[f"{w}:{n}" for w, n in CASES])
def test_a_link_at_any_destination_is_refused_and_its_target_left_byte_identical(writer, name, tmp_path, outside,
                                                                                  monkeypatch, capsys, caplog):
    from fl_strategies.settings.config import ConfigError
    from simulations.compare.cli import ComparisonError

    base = tmp_path / "out"
    base.mkdir()
    _TARGET[:] = [outside]
    run, _ = WRITERS[writer]
    extra = {"capsys": capsys, "caplog": caplog, "monkeypatch": monkeypatch}
    wanted = {key: value for key, value in extra.items() if key in run.__code__.co_varnames[:run.__code__.co_argcount]}
    with pytest.raises((UnsafeDestination, ConfigError, ComparisonError)) as refused:
        run(base, name, **wanted)
    message = str(refused.value)
    assert "\n" not in message.strip() and Path(name).name in message
    assert outside.read_bytes() == OUTSIDE
    assert (base / name).is_symlink() and (base / name).resolve() == outside.resolve()
    assert not [p for p in base.rglob("*.part")]  # no temporary file left behind
