"""Resume only the same run on the same data: the run config key by key, the data by fingerprint, and every value
of a checkpoint checked before use, whatever its checksum says (fl_strategies/protocol/checkpoint.py)."""

from __future__ import annotations

import hashlib
import json
import shutil

import numpy as np
import pytest

from conftest import run_app
from fl_strategies.protocol import checkpoint as ck
from fl_strategies.settings.config import KEYS, RESUME_HARMLESS, ConfigError, default_run_config
from test_resume import SMALL, Killed, kill_server

HARMLESS = {"resume", "round-timeout", "results-dir", "overwrite", "checkpoint-dir",
            "strict"}  # strict only refuses unread keys at the start: it changes no estimate


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """One finished run's checkpoint directory and its effective run config."""
    out = tmp_path_factory.mktemp("saved")
    strategy = run_app(checkpoint_dir=str(out), **SMALL)
    return out, dict(strategy.cfg)


def _copy(saved, tmp_path):
    out, cfg = saved
    shutil.copy(out / ck.CHECKPOINT_FILE, tmp_path / ck.CHECKPOINT_FILE)
    return tmp_path / ck.CHECKPOINT_FILE, dict(cfg, resume=True)


def _open(path) -> tuple[str, str, list[np.ndarray]]:
    with np.load(path, allow_pickle=False) as npz:
        arrays = {k: npz[k] for k in npz.files}
    text, checksum = str(arrays.pop("state")), str(arrays.pop("checksum"))
    return text, checksum, [arrays[f"a{i}"] for i in range(len(arrays))]


def _write(path, text: str, checksum: str, arrays: list[np.ndarray]) -> None:
    np.savez(path, state=np.array(text), checksum=np.array(checksum), **{f"a{i}": a for i, a in enumerate(arrays)})


# -- the run config, key by key ---------------------------------------------------------------------------------

def test_the_keys_a_resume_may_change_are_the_declared_harmless_few():
    """One place declares them (``harmless_on_resume`` in KEYS); the checkpoint exempts exactly those, and none of
    them changes the estimate or the privacy guarantee. A key added later matters unless declared harmless."""
    assert set(RESUME_HARMLESS) == HARMLESS
    assert set(ck.SAME_KEYS_EXEMPT) == HARMLESS
    assert {name for name, key in KEYS.items() if key.harmless_on_resume} == HARMLESS


def _another(name: str, value):
    """A different value of the same kind for key ``name``."""
    key = KEYS[name]
    if key.kind is bool:
        return not value
    if key.choices:
        return next(c for c in key.choices if c != value)
    if key.kind is int:
        return value + 1
    if key.kind is float:
        return value * 2 + 1
    return value + "-other"


@pytest.mark.parametrize("name", sorted(KEYS))
def test_a_resume_that_changes_a_key_is_refused_unless_the_key_is_harmless(saved, tmp_path, name):
    """Every run-config key in turn (the walk covers keys added later): any change of a key not declared harmless
    is refused naming it; a change of a harmless key resumes."""
    path, cfg = _copy(saved, tmp_path)
    changed = dict(cfg, **{name: _another(name, cfg[name])}) if name != "resume" else cfg
    if name in HARMLESS:
        resumed = ck.Checkpoint(tmp_path, changed, num_rounds=SMALL["num_server_rounds"]).resumed
        assert resumed["round"] == SMALL["num_server_rounds"]
    else:
        with pytest.raises(ConfigError, match=f"another run config \\({name} = ") as info:
            ck.Checkpoint(tmp_path, changed, num_rounds=SMALL["num_server_rounds"])
        assert "\n" not in str(info.value) and str(path) in str(info.value)


# -- a key added after the checkpoint was written ------------------------------------------------------------

ADDED = [name for name, key in KEYS.items() if key.absent_means is not None]


def _without(path, name: str) -> None:
    """The checkpoint as a run before key ``name`` existed wrote it: its run config lacks the key."""
    _edit(path, lambda doc, arrays: doc["config"].pop(name))


def test_the_declared_values_of_added_keys_are_their_defaults():
    """A run with the defaults resumes a checkpoint written before any of these keys existed."""
    assert {"center", "scale", "clip-norm", "variance-target", "init-from", "krylov-blocks", "maf-min",
            "geno-max", "nonfounders", "indep-pairwise", "exclude-range", "drop-ambiguous", "outlier-sigma",
            "outlier-iterations", "outlier-pcs"} == set(ADDED)
    defaults = default_run_config()
    assert all(KEYS[name].absent_means == defaults[name] for name in ADDED)


@pytest.mark.parametrize("name", ADDED)
def test_a_checkpoint_without_an_added_key_resumes_with_the_value_it_stood_for(saved, tmp_path, name):
    path, cfg = _copy(saved, tmp_path)
    assert cfg[name] == KEYS[name].absent_means
    _without(path, name)
    resumed = ck.Checkpoint(tmp_path, cfg, num_rounds=SMALL["num_server_rounds"]).resumed
    assert resumed["round"] == SMALL["num_server_rounds"]


@pytest.mark.parametrize("name", ADDED)
def test_a_checkpoint_without_an_added_key_is_refused_with_another_value_naming_it(saved, tmp_path, name):
    path, cfg = _copy(saved, tmp_path)
    _without(path, name)
    changed = dict(cfg, **{name: _another(name, cfg[name]) if name != "init-from" else "earlier/pca.npz"})
    with pytest.raises(ConfigError, match=f"another run config \\({name} absent there \\(added since: the runs "
                                          f"before it are {name} = {KEYS[name].absent_means!r}\\), "):
        ck.Checkpoint(tmp_path, changed, num_rounds=SMALL["num_server_rounds"])


def test_a_checkpoint_without_a_key_that_declares_no_earlier_value_is_refused(saved, tmp_path):
    """Only a declared value stands for a missing key: any other missing key is a difference, even at its
    default."""
    path, cfg = _copy(saved, tmp_path)
    _without(path, "alignment")
    with pytest.raises(ConfigError, match="another run config \\(alignment = None there, 'opt' here\\)"):
        ck.Checkpoint(tmp_path, cfg, num_rounds=SMALL["num_server_rounds"])


# -- integrity, field by field ----------------------------------------------------------------------------------

def _leaves(obj, where=()):
    """Paths to every scalar of a JSON document (array references excluded)."""
    if isinstance(obj, dict):
        if set(obj) == {"__array__"}:
            return
        for k, v in obj.items():
            yield from _leaves(v, where + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _leaves(v, where + (i,))
    else:
        yield where


def _changed(value):
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 1
    if isinstance(value, str):
        return value + "x"
    return 0  # None


def test_every_value_and_every_array_byte_is_covered_by_the_checksum(saved, tmp_path):
    """Change each scalar of the document, flip one byte of each array, reshape or retype each array, swap two,
    add or drop one, or change the checksum itself, each in turn with the old checksum kept: every change is
    refused (by the checksum, or by the format check for the format number itself)."""
    path, cfg = _copy(saved, tmp_path)
    text, checksum, arrays = _open(path)
    doc = json.loads(text)
    edits = []
    for where in _leaves(doc):
        edited = json.loads(text)
        parent = edited
        for k in where[:-1]:
            parent = parent[k]
        parent[where[-1]] = _changed(parent[where[-1]])
        edits.append((f"document {where}", json.dumps(edited), arrays))
    for i, a in enumerate(arrays):
        flipped = a.copy()
        flipped.view(np.uint8).reshape(-1)[a.nbytes // 2] ^= 0x01
        edits.append((f"a{i}: one byte", text, arrays[:i] + [flipped] + arrays[i + 1:]))
        edits.append((f"a{i}: shape", text, arrays[:i] + [a.reshape(-1)] + arrays[i + 1:]))
        edits.append((f"a{i}: dtype", text, arrays[:i] + [a.view(np.int64)] + arrays[i + 1:]))
    edits.append(("two arrays swapped", text, [arrays[1], arrays[0]] + arrays[2:]))
    edits.append(("an array added", text, arrays + [arrays[0]]))
    edits.append(("an array dropped", text, arrays[:-1]))
    assert len(arrays) >= 4 and len(edits) > 100
    accepted = []
    for what, edited_text, edited_arrays in edits:
        _write(path, edited_text, checksum, edited_arrays)
        try:
            ck.Checkpoint(tmp_path, cfg, num_rounds=SMALL["num_server_rounds"])
        except ConfigError as ex:
            assert "fails its checksum" in str(ex) or "has format" in str(ex) or "missing array" in str(ex), what
        else:
            accepted.append(what)
    assert accepted == []
    _write(path, text, checksum[:-1] + ("0" if checksum[-1] != "0" else "1"), arrays)
    with pytest.raises(ConfigError, match="fails its checksum"):
        ck.Checkpoint(tmp_path, cfg, num_rounds=SMALL["num_server_rounds"])
    _write(path, text, checksum, arrays)  # unchanged: accepted
    assert ck.Checkpoint(tmp_path, cfg, num_rounds=SMALL["num_server_rounds"]).resumed["round"] == 3


# -- every value checked before use, whatever the checksum says ---------------------------------------------------

def _edit(path, change) -> None:
    """Apply ``change(doc, arrays)`` and write the checkpoint with a valid checksum, as a forger would, with the
    project's own checksum function."""
    text, _, arrays = _open(path)
    doc = json.loads(text)
    change(doc, arrays)
    text = json.dumps(doc)
    _write(path, text, ck._checksum(text, arrays), arrays)


def _param(doc, arrays, value):
    arrays[doc["parameters"][0]["__array__"]] = value(arrays[doc["parameters"][0]["__array__"]])


def _iterate(doc, arrays, value):
    i = doc["strategy"]["iterates"][1]["__array__"]
    arrays[i] = value(arrays[i])


def _nan(Z):
    Z = Z.copy()
    Z[0, 0] = np.nan
    return Z


def _row(doc, key, value):
    doc["strategy"]["records"][1][key] = value


def _sizes(value):
    return lambda doc, arrays: doc["strategy"].update(sizes=value)


CASES = [
    ("nan-estimate", lambda d, a: _param(d, a, _nan), "parameters that are not finite"),
    ("inf-estimate", lambda d, a: _param(d, a, lambda Z: Z * np.inf), "parameters that are not finite"),
    ("zero-estimate", lambda d, a: _param(d, a, np.zeros_like), "not an orthonormal basis"),
    ("scaled-estimate", lambda d, a: _param(d, a, lambda Z: 2 * Z), "not an orthonormal basis"),
    ("int-estimate", lambda d, a: _param(d, a, lambda Z: Z.astype(np.int64)), "not finite float64"),
    ("text-iterate", lambda d, a: _iterate(d, a, lambda Z: np.full(Z.shape, "abc")), "not of finite float64"),
    ("complex-iterate", lambda d, a: _iterate(d, a, lambda Z: Z.astype(complex)), "not of finite float64"),
    ("date-iterate", lambda d, a: _iterate(d, a, lambda Z: np.full(Z.shape, np.datetime64("2020-01-01"))),
     "not of finite float64"),
    ("nan-iterate", lambda d, a: _iterate(d, a, _nan), "not of finite float64"),
    ("zero-iterate", lambda d, a: _iterate(d, a, np.zeros_like), "not an orthonormal basis"),
    ("sizes-string", _sizes("abc"), "malformed partition sizes"),
    ("sizes-short-pair", _sizes([[0], [1], [2]]), "malformed partition sizes"),
    ("sizes-text-rows", _sizes([[0, "x"], [1, 200], [2, 200]]), "malformed partition sizes"),
    ("sizes-negative", _sizes([[0, -5], [1, 200], [2, 200]]), "malformed partition sizes"),
    ("sizes-float", _sizes([[0, 200.5], [1, 200], [2, 200]]), "malformed partition sizes"),
    ("sizes-partition-beyond", _sizes([[0, 200], [1, 200], [7, 200]]), "malformed partition sizes"),
    ("sizes-twice", _sizes([[0, 200], [0, 200], [2, 200]]), "lists a partition twice"),
    ("negative-distance", lambda d, a: _row(d, "subspace_distance", -0.5), "subspace_distance = -0.5, outside"),
    ("distance-above-one", lambda d, a: _row(d, "subspace_distance", 3.0), "subspace_distance = 3.0, outside"),
    ("negative-count", lambda d, a: _row(d, "bytes_up", -1), "bytes_up = -1, outside"),
    ("list-in-row", lambda d, a: _row(d, "participants", [1]), "participants = \\[1\\], not a number"),
    ("row-round-true", lambda d, a: _row(d, "round", True), "has rows of rounds"),
    ("row-not-a-table", lambda d, a: d["strategy"]["records"].__setitem__(2, [2]), "has rows of rounds"),
    ("objective-nan", lambda d, a: d["strategy"].update(last_objective=float("nan")), "objective nan"),
    ("held-malformed", lambda d, a: d["strategy"].update(held="x"), "malformed held row"),
    ("fingerprints-malformed", lambda d, a: d["strategy"].update(fingerprints=[[0, 5]]), "malformed data fingerprints"),
    ("fingerprint-of-unknown-partition", lambda d, a: d["strategy"].update(fingerprints=[[9, "ab"]]),
     "malformed data fingerprints"),
]


@pytest.mark.parametrize("change, match", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_forged_checkpoint_with_a_valid_checksum_is_refused_in_one_line(saved, tmp_path, change, match):
    path, _ = _copy(saved, tmp_path)
    _edit(path, change)
    with pytest.raises(ConfigError, match=match) as info:
        run_app(checkpoint_dir=str(tmp_path), resume=True, **SMALL)
    assert str(path) in str(info.value) and "\n" not in str(info.value)


# -- the data, by fingerprint ------------------------------------------------------------------------------------

def _folder(directory, seed: int = 0, sizes=(200, 150, 250), d: int = 10):
    directory.mkdir(exist_ok=True)
    rng = np.random.default_rng(seed)
    for i, s in enumerate(sizes):
        np.save(directory / f"partition_{i}.npy", rng.standard_normal((s, d)) * np.linspace(3, 1, d))
    return directory


FOLDER_RUN = dict(num_clients=3, dimension=0, num_server_rounds=4, rank=2)


def test_resume_on_other_data_of_the_same_size_is_refused_naming_the_partition(tmp_path, monkeypatch):
    """A node file replaced between the crash and ``resume = true`` (same row count: the old check passed) is
    refused, naming the partition and its node; the same files resume."""
    data = _folder(tmp_path / "data")
    out = tmp_path / "run"
    over = dict(FOLDER_RUN, dataset=str(data), checkpoint_dir=str(out), results_dir=str(out))
    whole = run_app(**dict(over, checkpoint_dir="", results_dir=""))
    with monkeypatch.context() as patch:
        kill_server(patch, 2, before_save=False)
        with pytest.raises(Killed):
            run_app(**over)
    original = (data / "partition_1.npy").read_bytes()
    X = np.load(data / "partition_1.npy")
    X[0, 0] += 1.0  # one entry of one row
    np.save(data / "partition_1.npy", X)
    with pytest.raises(ConfigError, match="resume: the data changed since the checkpoint: partition 1 \\(node "
                                          "\\d+\\) holds other data") as info:
        run_app(**over, resume=True)
    assert "partition 0" not in str(info.value) and "\n" not in str(info.value)
    (data / "partition_1.npy").write_bytes(original)
    resumed = run_app(**over, resume=True)
    np.testing.assert_array_equal(resumed.estimate, whole.estimate)


def test_a_noise_free_node_reports_its_files_sha256_and_a_private_node_a_keyed_one(tmp_path):
    """Only in a run that checkpoints. In a private run the plain hash would let the server test a guess of the
    data: the node keys it with its secret."""
    from test_noise_source import PRIVATE, _blocks, _nodes

    blocks = _blocks()
    plain = _nodes(tmp_path, blocks, **{**PRIVATE, "epsilon": 0.0, "checkpoint-dir": str(tmp_path / "a")})
    files = [hashlib.sha256((tmp_path / f"node{i}.npy").read_bytes()).hexdigest() for i in range(3)]
    assert [plain.fingerprints[i] for i in range(3)] == files
    private = _nodes(tmp_path, blocks, secrets=True, **{**PRIVATE, "checkpoint-dir": str(tmp_path / "b")})
    keyed = [private.fingerprints[i] for i in range(3)]
    assert len(set(keyed)) == 3 and not set(keyed) & set(files)
    again = _nodes(tmp_path, blocks, secrets=True, **{**PRIVATE, "checkpoint-dir": str(tmp_path / "c")})
    assert [again.fingerprints[i] for i in range(3)] == keyed  # same secret, same data: the same fingerprint
    assert _nodes(tmp_path, blocks, **{**PRIVATE, "epsilon": 0.0}).fingerprints == {}  # no checkpoints: none


def test_resume_of_a_private_run_on_other_data_is_refused(tmp_path, monkeypatch):
    from test_noise_source import PRIVATE, _blocks, _nodes

    out = tmp_path / "run"
    over = dict(PRIVATE, **{"checkpoint-dir": str(out), "results-dir": str(out)})
    with monkeypatch.context() as patch:
        kill_server(patch, 1, before_save=False)
        with pytest.raises(Killed):
            _nodes(tmp_path, _blocks(), secrets=True, **over)
    other = _blocks()
    other[2] = _blocks(seed=5)[2]  # the same row count, other rows
    with pytest.raises(ConfigError, match="partition 2 \\(node \\d+\\) holds other data"):
        _nodes(tmp_path, other, secrets=True, **over, resume=True)
    done = _nodes(tmp_path, _blocks(), secrets=True, **over, resume=True)
    assert [r["round"] for r in done.records] == [0, 1, 2, 3]


def test_a_checkpoint_without_fingerprints_does_not_resume_nodes_that_report_one(saved, tmp_path, monkeypatch):
    """Dropping the fingerprints from a checkpoint (and re-checksumming it) does not switch the check off."""
    data = _folder(tmp_path / "data")
    out = tmp_path / "run"
    over = dict(FOLDER_RUN, dataset=str(data), checkpoint_dir=str(out))
    with monkeypatch.context() as patch:
        kill_server(patch, 1, before_save=False)
        with pytest.raises(Killed):
            run_app(**over)
    _edit(out / ck.CHECKPOINT_FILE, lambda doc, arrays: doc["strategy"].pop("fingerprints"))
    with pytest.raises(ConfigError, match="partition 0 \\(node \\d+\\) reports a fingerprint of its data, the "
                                          "checkpoint holds none"):
        run_app(**over, resume=True)


def test_engine_discovery_fingerprints_the_data_file_too(tmp_path, monkeypatch):
    """With ``discovery = "engine"`` nothing is asked of the nodes: the engine fingerprints the data set's file,
    and a resume on another file is refused the same way."""
    data = _folder(tmp_path / "data")
    np.save(tmp_path / "rows.npy", np.vstack([np.load(data / f"partition_{i}.npy") for i in range(3)]))
    source = changed = tmp_path / "rows.npy"
    out = tmp_path / "run"
    over = dict(FOLDER_RUN, dataset=str(source), discovery="engine", checkpoint_dir=str(out))
    with monkeypatch.context() as patch:
        kill_server(patch, 1, before_save=False)
        with pytest.raises(Killed):
            run_app(**over)
    original = changed.read_bytes()
    X = np.load(changed)
    np.save(changed, X[::-1])  # the same rows in another order: the same sizes, other data
    with pytest.raises(ConfigError, match="partition 2 \\(node \\d+\\) holds other data"):
        run_app(**over, resume=True)
    changed.write_bytes(original)
    assert [r["round"] for r in run_app(**over, resume=True).records] == [0, 1, 2, 3, 4]
