"""Keys never land in a repository: ``simulations.engines.credentials`` refuses a directory of a git working copy
that git does not ignore, this repository ignores the credential directories, and Flower's app bundle of
``flwr run .`` never holds a key or a certificate."""

from __future__ import annotations

import io
import subprocess
import zipfile

import pytest

from simulations.engines import APP_DIR
from simulations.engines.credentials import committable_in, main, written_names


def _git(*args, cwd):
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture
def repository(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    _git("init", "-q", cwd=repo)
    return repo


def test_credentials_refuse_a_directory_git_would_commit_and_write_into_an_ignored_one(repository, capsys):
    keys = repository / "keys"
    assert main([str(keys), "--nodes", "2"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"is in the git working copy {repository}" in err, err
    assert "could be committed" in err and not keys.exists()  # nothing written
    (repository / ".gitignore").write_text("keys/\n")
    assert committable_in(keys) is None
    assert main([str(keys), "--nodes", "2"]) == 0
    assert sorted(p.name for p in keys.iterdir()) == sorted(written_names(2))
    outside = repository.parent / "elsewhere" / "creds"
    assert committable_in(outside) is None and main([str(outside), "--nodes", "1"]) == 0


def test_this_repository_ignores_the_credential_directories():
    """``creds/`` (the old guide's directory) and ``OUT/credentials`` of ``deploy --secure`` anywhere."""
    for directory in ("creds", "results/deployment/credentials", "somewhere/credentials", "creds/sub"):
        assert committable_in(APP_DIR / directory) is None, directory
    assert committable_in(APP_DIR / "keys-here") == APP_DIR  # a directory it does not ignore is refused


def test_flowers_app_bundle_never_holds_a_key_even_from_a_directory_git_does_not_ignore():
    """Flower 1.42's FAB builder (``flwr run .``) with this repository's ``pyproject.toml`` and no ``.gitignore``."""
    from flwr.cli.build import build_fab_from_files

    import tomllib

    secrets = {f"{where}/{name}": b"-----BEGIN PRIVATE KEY-----\n" for where in ("creds", "results/credentials")
               for name in written_names(2)}
    pyproject = (APP_DIR / "pyproject.toml").read_bytes()
    # Flower refuses a fab-include pattern that matches no file: one module for each
    shipped = {pattern.replace("**/", "").replace("*", "m"): b"x = 1\n"
               for pattern in tomllib.loads(pyproject.decode())["tool"]["flwr"]["app"].get("fab-include", [])}
    files = {"pyproject.toml": pyproject, **shipped, "server_app/app.py": b"x = 1\n", **secrets}
    fab, _ = build_fab_from_files(files)
    names = zipfile.ZipFile(io.BytesIO(fab)).namelist()
    assert "server_app/app.py" in names and "pyproject.toml" in names
    assert not set(names) & set(secrets), sorted(set(names) & set(secrets))
