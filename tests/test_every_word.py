"""Every word heard, early and true refusals.

A run-config word that is not ``key=value``, a run-config file that does not exist or does not parse, a node folder
whose files do not match ``num-clients`` exactly, PLINK ``.bed`` files beside other formats, ``.bim`` lists that
cannot be aligned, and a FIFO or a device given as a data file are each refused in one line, exit status 2, by
``run``, ``deploy`` and ``compare`` alike, before any process starts (``subprocess.Popen`` refuses here). A results
file that cannot be written (a full disk) ends the run with one line naming the file.
"""

from __future__ import annotations

import errno
import logging
import os
import subprocess

import numpy as np
import pytest

D = 6


def _one_line(capsys, *fragments, absent=()):
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    for fragment in fragments:
        assert fragment in err, err
    for fragment in absent:
        assert fragment not in err, err
    return err


@pytest.fixture
def nothing_starts(monkeypatch):
    """No process may start: every ``subprocess.Popen`` (``run``, ``flwr``, a SuperLink) fails the test."""
    def refuse(*args, **kwargs):
        raise AssertionError(f"a process was started: {args[0] if args else kwargs}")

    monkeypatch.setattr(subprocess, "Popen", refuse)


def _run(argv):
    from fedspectral import run

    return run.main(argv, prog="fedspectral run")


def _deploy(argv, tmp_path):
    from fedspectral import deploy

    return deploy.main([*argv, "--out", str(tmp_path / "out")], prog="fedspectral deploy")


def node_folder(folder, pids=(0, 1, 2), rows=20, suffix=".npy"):
    """Node files ``partition_<i>`` for the partitions ``pids`` (rows of width :data:`D`)."""
    folder.mkdir(exist_ok=True)
    rng = np.random.default_rng(0)
    for pid in pids:
        block = rng.standard_normal((rows, D)) + 1.0
        if suffix == ".csv":
            np.savetxt(folder / f"partition_{pid}.csv", block, delimiter=",")
        else:
            np.save(folder / f"partition_{pid}.npy", block)
    return folder


# -- 3. every word of the run config --------------------------------------------------------------------------

@pytest.mark.parametrize("text, fragments", [
    ("num-clients=3 rank:2", ["'rank:2' is not key=value", "nothing of 'num-clients=3 rank:2' is used"]),
    ("num-clients=3 rank", ["'rank' is not key=value"]),
    ("rank = 2", ["'rank' is not key=value", "no space around '='"]),
    ("my-run.tml", ["'my-run.tml' is not key=value", "ends in .toml"]),
    ("x.toml rank=2", ["'x.toml' is not key=value"]),
    ("rank=2 x.toml", ["a .toml file is given alone"]),
    ('rank=2 strategy="power"x', ["'strategy=\"power\"x' has text after its value"]),
    ("rank=2 rank=3", ["rank is given twice"]),
    ('dataset="a b', ["opens a quote it does not close"]),
    ("rank=2 =3", ["'=3' has no key"]),
    ("num-clients= rank=3", ["num-clients has no value"]),
])
def test_a_word_that_is_not_key_value_is_refused_naming_it(nothing_starts, capsys, tmp_path, text, fragments):
    """Flower's parser drops these words silently (``'num-clients=3 rank:2'`` ran with the default rank, exit 0)."""
    assert _run(["--run-config", text]) == 2
    _one_line(capsys, "fedspectral run: error: --run-config", *fragments)
    assert _deploy(["--run-config", text], tmp_path) == 2
    _one_line(capsys, "fedspectral deploy: error: --run-config", *fragments)
    assert not (tmp_path / "out").exists()


def test_a_run_config_file_that_is_missing_unreadable_or_not_toml_is_refused_naming_it(nothing_starts, capsys,
                                                                                       tmp_path):
    missing = tmp_path / "my-rnu.toml"
    assert _run(["--run-config", str(missing)]) == 2
    _one_line(capsys, f"--run-config '{missing}': no such file")
    bad = tmp_path / "bad.toml"
    bad.write_text("rank = 2\nnum-clients = \n")
    assert _run(["--run-config", str(bad)]) == 2
    _one_line(capsys, f"--run-config '{bad}': not valid TOML", "line 2")
    fifo = tmp_path / "fifo.toml"
    os.mkfifo(fifo)  # opening it would wait for a writer forever
    assert _run(["--run-config", str(fifo)]) == 2
    _one_line(capsys, "is a FIFO (named pipe), not a regular file")
    nested = tmp_path / "nested.toml"
    nested.write_text("rank = 2\n[extra]\nsetting = 1\n")  # read by Flower as the key extra.setting
    assert _run(["--run-config", str(nested)]) == 2
    _one_line(capsys, "unknown run-config key 'extra.setting'")


def test_the_words_that_are_right_are_read_as_flower_reads_them(tmp_path):
    from fedspectral.run_config import parse_run_config

    assert parse_run_config("  num-clients=3\trank=2 dataset='a b' center=true epsilon=0.5 ") == {
        "num-clients": 3, "rank": 2, "dataset": "a b", "center": True, "epsilon": 0.5}
    (tmp_path / "run.toml").write_text('rank = 2\nstrategy = "power"\n')
    assert parse_run_config(str(tmp_path / "run.toml")) == {"rank": 2, "strategy": "power"}
    assert parse_run_config("") == {} and parse_run_config("   ") == {}


# -- 3. node folders: one rule for every command ----------------------------------------------------------------

def _compare_file(tmp_path, folder, num_clients):
    path = tmp_path / "c.toml"
    path.write_text(f'[defaults]\ndataset = "{folder}"\nnum-clients = {num_clients}\nrank = 2\niteration-rank = 3\n'
                    'num-server-rounds = 2\n[[runs]]\nname = "power"\nstrategy = "fedpower"\n')
    return path


def _refused_by_every_command(tmp_path, capsys, folder, num_clients, *fragments, absent=()):
    """``run`` with ``dataset = FOLDER``, ``deploy --data-dir FOLDER`` and ``compare`` refuse the folder alike."""
    from simulations.compare import cli as compare

    assert _run(["--run-config", f'dataset="{folder}" num-clients={num_clients} rank=2']) == 2
    _one_line(capsys, *fragments, absent=absent)
    assert _deploy(["--data-dir", str(folder), "--run-config",
                    f'dataset="nodes" num-clients={num_clients} rank=2'], tmp_path) == 2
    _one_line(capsys, f"--data-dir {folder}:", *fragments, absent=absent)
    assert not (tmp_path / "out").exists()
    assert compare.main([str(_compare_file(tmp_path, folder, num_clients)), "--out", str(tmp_path / "cmp")]) == 2
    _one_line(capsys, *fragments, absent=absent)
    assert not (tmp_path / "cmp").exists()


def test_a_folder_with_more_node_files_than_clients_is_refused_by_every_command(nothing_starts, capsys, tmp_path):
    """``deploy --data-dir`` with four node files and ``num-clients = 3`` used three (``run`` refused)."""
    folder = node_folder(tmp_path / "data", pids=(0, 1, 2, 3))
    _refused_by_every_command(tmp_path, capsys, folder, 3, "num-clients = 3, but",
                              "holds 4 per-client file(s) (partition_0 .. partition_3): set num-clients = 4")


def test_a_folder_with_a_gap_gets_a_hint_that_keeps_every_owner(nothing_starts, capsys, tmp_path):
    """``partition_0, _2, _3`` got the hint "set num-clients = 1", which drops two owners."""
    folder = node_folder(tmp_path / "data", pids=(0, 2, 3))
    _refused_by_every_command(tmp_path, capsys, folder, 3, "holds 3 node file(s) (partition_0.npy, partition_2.npy, "
                              "partition_3.npy) but none for partition 1",
                              "rename the files to partition_0 .. partition_2", absent=("num-clients = 1",))


def test_a_misspelt_node_file_is_not_left_out(nothing_starts, capsys, tmp_path):
    folder = node_folder(tmp_path / "data", pids=(0, 1))
    np.save(folder / "partition_02.npy", np.ones((3, D)))
    _refused_by_every_command(tmp_path, capsys, folder, 2, "'partition_02.npy' (name it partition_2.npy)")


def test_node_files_of_the_one_rule(tmp_path):
    from fl_strategies.files.harness import folder_partitions, node_files, partition_file

    folder = node_folder(tmp_path / "data", pids=(0, 1), suffix=".csv")
    np.save(folder / "partition_2.npy", np.ones((3, D)))
    (folder / "partition_2.secret").write_bytes(b"x" * 32)  # not a data file: ignored
    assert node_files(folder, 3, "the folder") == [folder / "partition_0.csv", folder / "partition_1.csv",
                                                   folder / "partition_2.npy"]
    assert folder_partitions(str(folder)) == 3 and partition_file(str(folder), 2) == folder / "partition_2.npy"
    np.save(folder / "partition_1.npy", np.ones((3, D)))
    with pytest.raises(ValueError, match=r"two files for partition 1: 'partition_1.npy' and 'partition_1.csv'"):
        node_files(folder, 3, "the folder")


# -- 7. early, true refusals ------------------------------------------------------------------------------------

def test_a_fifo_or_a_device_as_a_node_file_is_named_as_what_it_is(nothing_starts, capsys, tmp_path):
    """They were reported as "missing"."""
    folder = node_folder(tmp_path / "data", pids=(0, 2))
    os.mkfifo(folder / "partition_1.npy")
    over = f'dataset="{folder}" num-clients=3 rank=2'
    assert _run(["--run-config", over]) == 2
    _one_line(capsys, "partition 1: dataset folder file", "partition_1.npy': is a FIFO (named pipe), not a regular "
                      "file")
    assert _deploy(["--data-dir", str(folder), "--run-config", 'dataset="nodes" num-clients=3 rank=2'],
                   tmp_path) == 2
    _one_line(capsys, "partition 1: node file", "is a FIFO (named pipe), not a regular file")
    (folder / "partition_1.npy").unlink()
    (folder / "partition_1.npy").symlink_to("/dev/zero")
    assert _run(["--run-config", over]) == 2
    _one_line(capsys, "partition_1.npy': is a character device, not a regular file")
    assert _run(["--run-config", f'dataset="{tmp_path / "gone.npy"}"']) == 2  # still "file not found"
    _one_line(capsys, "file not found")
    os.mkfifo(tmp_path / "pipe.npy")
    assert _run(["--run-config", f'dataset="{tmp_path / "pipe.npy"}"']) == 2
    _one_line(capsys, "is a FIFO (named pipe), not a regular file")


def test_a_node_config_data_path_that_is_a_device_is_named_as_one(tmp_path):
    from fl_strategies.files.data_files import open_samples

    (tmp_path / "zero.npy").symlink_to("/dev/zero")
    with pytest.raises(ValueError, match=r"^node config data-path '.*zero.npy': is a character device, not a "
                                         r"regular file$"):
        open_samples(tmp_path / "zero.npy", "node config data-path")
    (tmp_path / "gone.npy").symlink_to(tmp_path / "nothing.npy")
    with pytest.raises(ValueError, match=r"gone.npy': is a symbolic link to a missing file$"):
        open_samples(tmp_path / "gone.npy", "node config data-path")


def test_a_fifo_is_never_opened_for_a_fingerprint_or_as_a_comparison_file(capsys, tmp_path):
    """Opening a FIFO for reading waits for a writer forever: the fingerprint a node reports at discovery and
    ``compare``'s file are judged before they are opened."""
    from fl_strategies.files.data_files import file_fingerprint
    from simulations.compare import cli as compare

    os.mkfifo(tmp_path / "rows.npy")
    with pytest.raises(ValueError, match=r"rows.npy': is a FIFO \(named pipe\), not a regular file$"):
        file_fingerprint(tmp_path / "rows.npy")
    os.mkfifo(tmp_path / "c.toml")
    assert compare.main([str(tmp_path / "c.toml"), "--out", str(tmp_path / "out")]) == 2
    _one_line(capsys, "c.toml: is a FIFO (named pipe), not a regular file")


bed_reader = pytest.importorskip("bed_reader")


def _bed_sites(folder, widths, no_ids=False):
    """PLINK sites ``partition_<i>.bed`` with the first ``widths[i]`` of one variant list (IDs ``.`` if
    ``no_ids``)."""
    from tests.test_variant_alignment import ALLELES, write_site

    folder.mkdir(exist_ok=True)
    rng = np.random.default_rng(3)
    for pid, width in enumerate(widths):
        G = rng.integers(0, 3, (12, width)).astype(np.float32)
        write_site(folder / f"partition_{pid}.bed", G, [f"rs{100 + j}" for j in range(width)],
                   [ALLELES[j % len(ALLELES)] for j in range(width)])
        if no_ids:
            bim = folder / f"partition_{pid}.bim"
            rows = [line.split("\t") for line in bim.read_text().splitlines()]
            bim.write_text("".join("\t".join([row[0], ".", *row[2:]]) + "\n" for row in rows))
    return folder


def test_bed_files_beside_npy_files_are_refused_before_flower_starts(nothing_starts, capsys, tmp_path):
    """They were refused only after Flower started (about 28 s, naming Flower's node ids)."""
    folder = _bed_sites(tmp_path / "data", (D, D))
    np.save(folder / "partition_2.npy", np.ones((12, D)))
    _refused_by_every_command(tmp_path, capsys, folder, 3, "mixes kinds of node file (PLINK .bed: partition 0 "
                              "(partition_0.bed), partition 1 (partition_1.bed); other data: partition 2 "
                              "(partition_2.npy))")


def test_bim_files_without_ids_that_must_be_aligned_are_refused_before_flower_starts(nothing_starts, capsys,
                                                                                     tmp_path):
    folder = _bed_sites(tmp_path / "data", (10, 9, 8), no_ids=True)
    over = f'dataset="{folder}" num-clients=3 rank=2 center=true'
    assert _run(["--run-config", over]) == 2
    _one_line(capsys, "the sites share 0 variants", "variants without an ID ('.') cannot be told apart "
                      "(partition 0: 10, partition 1: 9, partition 2: 8)", "--set-all-var-ids")
    assert _deploy(["--data-dir", str(folder), "--run-config", 'dataset="nodes" num-clients=3 rank=2 center=true'],
                   tmp_path) == 2
    _one_line(capsys, "variants without an ID ('.') cannot be told apart")


def test_bed_sites_whose_lists_differ_are_checked_on_the_variants_they_share(tmp_path):
    """Sites with more or fewer variants were refused as "disagree on the number of columns", though the server
    aligns them; now the run's width is the variants they share, as the server will compute it."""
    from fedspectral.run_config import ArgumentError, checked_run_config

    folder = _bed_sites(tmp_path / "data", (10, 9, 8))
    cfg = checked_run_config({"dataset": str(folder), "num-clients": 3, "rank": 2, "iteration-rank": 3,
                              "center": True})
    assert cfg["num-clients"] == 3
    with pytest.raises(ArgumentError, match=r"iteration-rank must be at most the data dimension d = 8, got 9"):
        checked_run_config({"dataset": str(folder), "num-clients": 3, "rank": 2, "iteration-rank": 9,
                            "center": True})  # 8 variants shared


# -- 7. a full disk ---------------------------------------------------------------------------------------------

def _full_disk(monkeypatch, name):
    """Make every write of a file whose name holds ``name`` fail with ENOSPC (a full disk), as the kernel would:
    ``os.write`` (appended rows) and ``os.fsync`` (whole files) of :mod:`fl_strategies.files.plain_files`."""
    from fl_strategies.files import plain_files

    real_write, real_fsync = os.write, os.fsync

    def full(fd):
        return name in os.path.basename(os.readlink(f"/proc/self/fd/{fd}"))

    def write(fd, data):
        if full(fd):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(fd, data)

    def fsync(fd):
        if full(fd):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_fsync(fd)

    monkeypatch.setattr(plain_files.os, "write", write)
    monkeypatch.setattr(plain_files.os, "fsync", fsync)


@pytest.mark.parametrize("name", ["rounds.csv", "pca.npz"])
def test_a_full_disk_ends_the_run_with_one_line_naming_the_file(monkeypatch, tmp_path, caplog, name):
    """The ServerApp's entry point, in-process: the run ended in Flower tracebacks ("OSError: [Errno 28]", no
    file named); now its last line names the file and the reason, and Flower's traceback of it is dropped."""
    from flwr.app import Context, RecordDict

    from client_app.app import app as client_app
    from fl_strategies.files.plain_files import WriteFailed
    from server_app.app import LastWord, main
    from simulations.engines import fused_run_config
    from simulations.engines.local import LocalGrid

    results = tmp_path / "results"
    cfg = fused_run_config({"num-clients": 3, "num-server-rounds": 2, "results-dir": str(results),
                            "dataset": "digits", "rank": 2, "iteration-rank": 3})
    grid = LocalGrid(client_app, 3, cfg)
    context = Context(run_id=1, node_id=0, node_config={}, state=RecordDict(), run_config=cfg)
    _full_disk(monkeypatch, name)
    flower = logging.getLogger("flwr")
    try:
        with caplog.at_level(logging.ERROR, logger="flwr.fedspectral"), pytest.raises(WriteFailed) as failed:
            main(grid, context)
        last = [f for f in flower.filters if isinstance(f, LastWord)]
        assert last and last[-1].explained  # Flower's "ServerApp raised an exception" loses its traceback
    finally:
        for f in [f for f in flower.filters if isinstance(f, LastWord)]:
            flower.removeFilter(f)
    line = f"fedspectral: run FAILED: could not write '{results / name}': No space left on device (ENOSPC)"
    assert str(failed.value) == line.removeprefix("fedspectral: run FAILED: ")
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == [line]
    assert not [p.name for p in results.iterdir() if p.name.endswith(".part")]  # no temporary file left
    if name == "rounds.csv":  # its first row failed: no empty table is left to look like an earlier run's
        assert not (results / name).exists()
    else:  # every round's row was written
        assert (results / "rounds.csv").read_text().count("\n") == 1 + 3


def test_an_append_that_fails_leaves_the_file_as_it_was(monkeypatch, tmp_path):
    from fl_strategies.files.plain_files import WriteFailed, append_file, write_file

    table = tmp_path / "rounds.csv"
    write_file(table, "round,x\n0,1\n")
    real_write = os.write

    def half(fd, data):  # half a row goes down, then the disk is full
        if len(data) > 4:
            real_write(fd, bytes(data[:4]))
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(fd, data)

    monkeypatch.setattr("fl_strategies.files.plain_files.os.write", half)
    with pytest.raises(WriteFailed, match=r"^could not write '.*rounds.csv': No space left on device \(ENOSPC\)$"):
        append_file(table, b"1,0.5\n")
    assert table.read_text() == "round,x\n0,1\n"
    monkeypatch.undo()
    _full_disk(monkeypatch, "rounds.csv")
    with pytest.raises(WriteFailed, match="ENOSPC"):
        write_file(table, "round,x\n")
    assert table.read_text() == "round,x\n0,1\n" and sorted(p.name for p in tmp_path.iterdir()) == ["rounds.csv"]


def test_a_path_travels_to_flower_as_one_word(nothing_starts, capsys, tmp_path):
    """A path with a quote would be cut by Flower's parser (its words are ``key="..."``): it goes as a literal
    string, and a path no word can carry is refused before any process starts."""
    from fedspectral.run_config import ArgumentError, config_word, parse_run_config

    for path in ("/data/my sites/a.npy", '/data/say "hi"/a.npy', "/data/it's/a.npy", "C:\\data\\a.npy"):
        assert parse_run_config(config_word("data-path", path)) == {"data-path": path}
    with pytest.raises(ArgumentError, match="both quote characters"):
        config_word("data-path", "/x/it's \"here\"")
    folder = node_folder(tmp_path / "it's \"mine\"", pids=(0, 1))
    assert _deploy(["--data-dir", str(folder), "--run-config", 'dataset="nodes" num-clients=2 rank=2'],
                   tmp_path) == 2
    _one_line(capsys, "partition_0.npy': a path with both quote characters (or a quote and a backslash) cannot be "
              "passed to Flower whole")


def test_a_full_disk_before_deploy_starts_a_process_is_one_line(nothing_starts, capsys, monkeypatch, tmp_path):
    _full_disk(monkeypatch, "partition_")
    assert _deploy(["--run-config", "num-clients=2 rank=2"], tmp_path) == 1
    _one_line(capsys, "fedspectral deploy: error: could not write", "node-data/partition_0.npy': No space left on "
              "device (ENOSPC)")


def test_a_run_config_file_travels_to_flower_as_its_words_beside_the_commands_own(monkeypatch, tmp_path):
    """Flower refuses a TOML file beside other ``--run-config`` words ("TOML files cannot be passed alongside
    key-value pairs"), and ``fedspectral run`` and ``deploy`` add their own (absolute paths, ``results-dir``): the
    file goes as its words, which Flower reads back to the file's values (strings with quotes, booleans, integers,
    floats)."""
    from fl_strategies.protocol.flower_compat import parse_config_args
    from fedspectral.run_config import config_words, flower_run_config, parse_run_config

    quoted = tmp_path / "quoted.toml"
    quoted.write_text('title = \'say "hi"\'\npath = "it\'s"\nflag = false\ncount = 3\nsmall = 1e-6\n')
    words = flower_run_config(str(quoted))
    assert not words.endswith(".toml") and parse_run_config(words) == parse_run_config(str(quoted))
    run_file = tmp_path / "my-run.toml"
    run_file.write_text('num-clients = 2\nrank = 2\ncenter = true\nstop-tol = 1e-6\nresults-dir = "out"\n'
                        'num-server-rounds = 3\n')
    assert flower_run_config("rank=2 center=true") == "rank=2 center=true" and flower_run_config("") == ""
    assert config_words({"inf": float("inf"), "b": False}) == "inf=inf b=false"
    started = []

    class Started(Exception):
        pass

    def record(args, *rest, **kwargs):
        started.append(list(args))
        raise Started

    monkeypatch.setattr(subprocess, "Popen", record)
    monkeypatch.chdir(tmp_path)
    try:
        _run(["--run-config", str(run_file)])
    except Started:
        pass
    command = next(args for args in started if args[:2] == ["flwr", "run"])
    texts = [command[i + 1] for i, word in enumerate(command) if word == "--run-config"]
    assert len(texts) == 2 and not any(text.endswith(".toml") for text in texts)
    read = parse_config_args(texts)  # as flwr run reads its --run-config values
    assert read["results-dir"] == str((tmp_path / "out").resolve())
    assert read["stop-tol"] == 1e-6 and read["center"] is True and read["num-clients"] == 2
