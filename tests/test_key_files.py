"""Private keys are written with mode 600 from their first byte: by ``simulations.engines.credentials``
and by ``simulations.engines.deploy --secure``'s writer."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

PRIVATE = ("ca.key", "server.key")


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _private_files(directory: Path) -> list[Path]:
    return sorted(p for p in directory.iterdir() if p.name in PRIVATE or (p.name.startswith("node_")
                                                                          and p.suffix != ".pub"))


@pytest.fixture
def open_umask():
    """The most permissive umask: a file written without an explicit mode would be world-readable (or writable)."""
    old = os.umask(0)
    yield
    os.umask(old)


def test_credentials_writes_every_private_key_with_mode_600(tmp_path, open_umask):
    from simulations.engines.credentials import main

    out = tmp_path / "creds"
    assert main([str(out), "--nodes", "3"]) == 0
    keys = _private_files(out)
    assert [p.name for p in keys] == ["ca.key", "node_0", "node_1", "node_2", "server.key"]
    assert {p.name: _mode(p) for p in keys} == {p.name: 0o600 for p in keys}
    assert _mode(out) == 0o700
    assert all(_mode(p) == 0o666 for p in out.iterdir() if p not in keys)  # public files: as the umask says


def test_a_key_file_that_exists_with_a_wider_mode_is_replaced_not_reused(tmp_path, open_umask):
    """A file replaced keeps its mode, except a private key: always 600."""
    from simulations.engines.credentials import write_node_keys

    old = tmp_path / "node_0"
    old.write_bytes(b"old")
    old.chmod(0o644)
    write_node_keys(tmp_path, 1)
    assert _mode(old) == 0o600 and old.read_bytes() != b"old"


def test_every_open_of_a_private_key_carries_mode_600(tmp_path, monkeypatch):
    """From the first byte: every file holding a private key is created exclusively with mode 0o600 (the
    temporary file renamed into place), never chmod-ed by path later."""
    import simulations.engines.credentials as credentials

    opened, chmods = [], []
    real_open = os.open

    def spy_open(path, flags, mode=0o777, *args, **kwargs):
        opened.append((Path(path).name, flags, mode))
        return real_open(path, flags, mode, *args, **kwargs)

    monkeypatch.setattr(credentials.os, "open", spy_open)
    monkeypatch.setattr(Path, "chmod", lambda self, mode: chmods.append(self.name))
    credentials.main([str(tmp_path), "--nodes", "2"])
    modes = {name.split(".")[1] + ("." + name.split(".")[2] if name.count(".") == 4 else ""): (flags, mode)
             for name, flags, mode in opened}
    assert sorted(modes) == ["ca.crt", "ca.key", "node_0", "node_0.pub", "node_1", "node_1.pub", "server.key",
                             "server.pem"]
    assert all(flags & os.O_CREAT and flags & os.O_EXCL and flags & os.O_NOFOLLOW for flags, _ in modes.values())
    assert {name: mode for name, (_, mode) in modes.items() if mode == 0o600} == dict.fromkeys(
        ["ca.key", "node_0", "node_1", "server.key"], 0o600)
    assert chmods == []


def test_deploy_secure_writes_its_keys_with_mode_600(tmp_path, monkeypatch, open_umask):
    """``LocalDeployment(secure=True)`` as ``deploy --secure`` builds it, with the processes stubbed out: the
    credentials it writes for the SuperLink and every SuperNode are mode 600."""
    import simulations.engines.deploy as deploy

    class Stub:
        pid = 0

        def poll(self):
            return None

    health = iter([False] + [True] * 10)
    monkeypatch.setattr(deploy, "_healthy", lambda *a, **k: next(health))
    monkeypatch.setattr(deploy.LocalDeployment, "_start", lambda self, name, cmd: Stub())
    monkeypatch.setattr(deploy.LocalDeployment, "register", lambda self, key: None)
    monkeypatch.setattr(deploy.LocalDeployment, "stop", lambda self: None)
    files = [tmp_path / f"partition_{i}.npy" for i in range(3)]
    with deploy.LocalDeployment(files, tmp_path / "out", port=1, secure=True, warm_clientapp=False) as deployment:
        creds = deployment.credentials
        assert deployment.keys == [creds / f"node_{i}" for i in range(3)]
    keys = _private_files(creds)
    assert len(keys) == 5 and {p.name: _mode(p) for p in keys} == {p.name: 0o600 for p in keys}


def _contents(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


@pytest.mark.parametrize("present", ["ca.crt", "ca.key", "server.pem", "server.key", "node_1", "node_1.pub"])
def test_credentials_never_replaces_existing_keys_without_rotate(tmp_path, capsys, present):
    """A second run (or a directory with one of its files) is refused naming the files, and nothing changes;
    ``--rotate`` replaces every key and the CA."""
    from simulations.engines.credentials import main

    out = tmp_path / "creds"
    assert main([str(out), "--nodes", "2"]) == 0
    first = _contents(out)
    for name in first:
        if name != present:
            (out / name).unlink()
    kept = _contents(out)
    capsys.readouterr()
    assert main([str(out), "--nodes", "2"]) == 2
    err = capsys.readouterr().err
    assert f"already holds {present}; nothing was written" in err and "--rotate" in err and err.count("\n") == 1
    assert _contents(out) == kept
    assert main([str(out), "--nodes", "2", "--rotate"]) == 0
    rotated = _contents(out)
    assert set(rotated) == set(first) and rotated[present] != first[present]
    assert {p.name: _mode(p) for p in _private_files(out)} == {p.name: 0o600 for p in _private_files(out)}


def test_credentials_refuses_a_second_run_naming_every_file_it_would_replace(tmp_path, capsys):
    from simulations.engines.credentials import main

    out = tmp_path / "creds"
    assert main([str(out), "--nodes", "1"]) == 0
    before = _contents(out)
    assert main([str(out), "--nodes", "3"]) == 2
    err = capsys.readouterr().err
    assert "already holds ca.crt, ca.key, server.pem, server.key, node_0, node_0.pub;" in err
    assert _contents(out) == before
    assert main([str(tmp_path / "other"), "--nodes", "3"]) == 0  # a new directory is fine
