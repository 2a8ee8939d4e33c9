"""Installed like any package: a wheel carries the app's pyproject.toml, and an installed ``fedspectral`` runs its
own app from any folder (:mod:`fedspectral.app_bundle`), while a checkout keeps running from itself."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from fedspectral import app_bundle
from fedspectral.app_bundle import AppBundleError, assemble_bundle, bundle_files
from simulations.engines import APP_DIR

PACKAGES = ("fl_strategies", "client_app", "server_app", "simulations", "fedspectral")


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The folder a wheel of this checkout was installed into (``pip install --no-deps --target``)."""
    where = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(where / "dist"), str(APP_DIR)],
                   check=True, capture_output=True, timeout=300)
    (wheel,) = (where / "dist").glob("fedspectral-*.whl")
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(where / "site"),
                    str(wheel)], check=True, capture_output=True, timeout=300)
    return where / "site"


def installed_env(site: Path, cache: Path) -> dict[str, str]:
    """The environment of a command run from the installed copy: ``site`` first on the path, this repository off it
    (the editable install's ``.pth`` comes after ``PYTHONPATH``), the user's cache in ``cache``."""
    return {**os.environ, "PYTHONPATH": str(site), "XDG_CACHE_HOME": str(cache), "PYTHONDONTWRITEBYTECODE": "1"}


def fab_files(app: Path) -> dict[str, bytes]:
    """The files of the FAB that ``flwr run`` builds from ``app``, by name (its manifest left out)."""
    from flwr.cli.build import build_fab_from_disk

    with zipfile.ZipFile(io.BytesIO(build_fab_from_disk(app))) as fab:
        return {name: fab.read(name) for name in fab.namelist() if not name.startswith(".info/")}


def test_a_checkout_runs_from_itself():
    """The editable install (and the tests) use the repository as the app, with its .flwr/ as FLWR_HOME."""
    assert app_bundle.is_checkout() and app_bundle.app_dir() == APP_DIR == app_bundle.PACKAGE_ROOT
    assert app_bundle.default_flower_home() == APP_DIR / ".flwr"


def test_flwr_home_is_never_inside_the_app_directory(monkeypatch, tmp_path):
    """FLWR_HOME: the checkout's .flwr/, or the user's cache for an installed package; one the user set relative
    is taken against the directory the command runs from (``flwr`` itself runs in the app's directory)."""
    from fedspectral.run import flower_env

    monkeypatch.delenv("FLWR_HOME", raising=False)
    assert flower_env()["FLWR_HOME"] == str(APP_DIR / ".flwr")
    monkeypatch.setattr(app_bundle, "is_checkout", lambda root=None: False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert flower_env()["FLWR_HOME"] == str(tmp_path / "cache" / "fedspectral" / "flwr-home")
    monkeypatch.setenv("FLWR_HOME", "state")
    monkeypatch.chdir(tmp_path)
    assert flower_env()["FLWR_HOME"] == str(tmp_path / "state")


def test_the_wheel_carries_the_apps_pyproject_and_the_installed_app_builds_the_checkouts_fab(installed, tmp_path):
    """The wheel holds pyproject.toml (as fedspectral/app/pyproject.toml) and every module of the FAB; the app
    directory assembled from the installed files builds, file for file, the FAB of the checkout."""
    assert (installed / "fedspectral" / "app" / "pyproject.toml").read_bytes() == \
        (APP_DIR / "pyproject.toml").read_bytes()
    assert not (installed / "pyproject.toml").exists() and not app_bundle.is_checkout(installed)
    files = bundle_files(installed, installed / "fedspectral" / "app" / "pyproject.toml")
    app = assemble_bundle(files, tmp_path / "cache")
    assert app.parent == tmp_path / "cache" and app.name.startswith("app-0.1.0-")
    assert (app.stat().st_mode & 0o777, (app / "pyproject.toml").stat().st_mode & 0o777) == (0o700, 0o600)
    checkout = fab_files(APP_DIR)
    assert "server_app/app.py" in checkout and "simulations/harness.py" in checkout
    assert fab_files(app) == checkout


def test_the_installed_serverapp_finds_the_shipped_long_range_ld_lists_the_fab_cannot_carry(installed, tmp_path):
    """The wheel holds the long-range LD lists (package data); the FAB has no room for a ``.txt`` file, so the
    ServerApp, importing ``fl_strategies`` from the FAB, finds them in the installed package
    (:func:`fl_strategies.files.ranges.range_file`)."""
    shipped = Path("fl_strategies", "files", "long_range_ld")
    for build in ("GRCh37.txt", "GRCh38.txt"):
        assert (installed / shipped / build).read_bytes() == (APP_DIR / shipped / build).read_bytes()
    app = assemble_bundle(bundle_files(installed, installed / "fedspectral" / "app" / "pyproject.toml"),
                          tmp_path / "cache")
    fab = tmp_path / "fab"
    for name, content in fab_files(app).items():
        (fab / name).parent.mkdir(parents=True, exist_ok=True)
        (fab / name).write_bytes(content)
    assert (fab / "fl_strategies" / "files" / "ranges.py").is_file() and not (fab / shipped).exists()
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    env = {**installed_env(installed, tmp_path / "cache"), "PYTHONPATH": os.pathsep.join([str(fab), str(installed)])}
    done = subprocess.run([sys.executable, "-c", "import fl_strategies.files.ranges as r; "
                           "print(r.__file__, r.range_file('hg38'))"], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120)
    module, found = done.stdout.split()
    assert Path(module) == fab / "fl_strategies" / "files" / "ranges.py", done.stderr
    assert Path(found) == installed / shipped / "GRCh38.txt"


def test_an_edited_or_incomplete_app_directory_is_written_again(tmp_path):
    """A copy in the cache that differs from the installed files in any way is replaced; a complete one is used
    as it is."""
    files = {"pyproject.toml": b'[project]\nversion = "1.2"\n', "pkg/a.py": b"A = 1\n", "pkg/b.py": b"B = 2\n"}
    cache = tmp_path / "cache"
    app = assemble_bundle(files, cache)
    assert app.name.startswith("app-1.2-") and app.parent == cache
    inode = app.stat().st_ino
    assert assemble_bundle(files, cache) == app and app.stat().st_ino == inode  # complete: used as it is
    for damage in (lambda: (app / "pkg" / "a.py").write_bytes(b"import os; os.system('x')\n"),
                   lambda: (app / "pkg" / "evil.py").write_bytes(b"\n"),
                   lambda: (app / "pkg" / "b.py").unlink(),
                   lambda: (app / "pkg" / "b.py").unlink() or (app / "pkg" / "b.py").symlink_to(app / "pkg" / "a.py")):
        damage()
        assert assemble_bundle(files, cache) == app
        found = {p.relative_to(app).as_posix(): p.read_bytes() for p in app.rglob("*") if p.is_file()}
        assert found == files and not any(p.is_symlink() for p in app.rglob("*"))
    assert sorted(p.name for p in cache.iterdir()) == [app.name]  # nothing set aside is left


def test_two_commands_building_the_app_directory_at_once_both_use_a_complete_one(tmp_path, monkeypatch):
    """The second of two commands that wrote the folder at once finds the first one's in place: it uses it when
    complete (and removes its own copy), and refuses in one line when what is there is not."""
    files = {"pyproject.toml": b'[project]\nversion = "1"\n', "pkg/a.py": b"A = 1\n"}
    real_rename = os.rename
    other = assemble_bundle(files, tmp_path / "other")  # the other command's complete copy

    def they_were_first(source, target):
        real_rename(other, target)
        return real_rename(source, target)  # ENOTEMPTY: the target is taken

    def junk_was_first(source, target):
        Path(target).mkdir()
        (Path(target) / "pkg.py").write_text("")
        return real_rename(source, target)

    monkeypatch.setattr(app_bundle.os, "rename", they_were_first)
    inode = other.stat().st_ino
    app = assemble_bundle(files, tmp_path / "cache")
    assert app.stat().st_ino == inode and sorted(p.name for p in app.parent.iterdir()) == [app.name]
    monkeypatch.setattr(app_bundle.os, "rename", junk_was_first)
    with pytest.raises(AppBundleError, match=rf"^{tmp_path / 'new'}: cannot write the app's directory there"):
        assemble_bundle(files, tmp_path / "new")
    assert [p.name for p in (tmp_path / "new").iterdir()] == [app.name]  # its own copy removed


def test_an_unwritable_cache_is_one_line_naming_it(tmp_path):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    with pytest.raises(AppBundleError, match=rf"^{blocker / 'fedspectral'}: cannot write the app's directory there "
                       r"\(Not a directory\); set XDG_CACHE_HOME to a writable folder$"):
        assemble_bundle({"pyproject.toml": b""}, blocker / "fedspectral")


def test_an_installed_package_checks_its_run_config_from_any_folder(installed, tmp_path):
    """From another folder, the installed ``fedspectral run`` reads its own defaults (as the installed ServerApp
    does in-process): a key the strategy does not read is refused under strict = true, in one line, before Flower
    starts (it ended in a traceback, "Cannot find
    pyproject.toml"); an unwritable cache folder is one line too. Neither writes in the folder."""
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    env = installed_env(installed, tmp_path / "cache")
    where = subprocess.run([sys.executable, "-c", "import fedspectral, fedspectral.run_config as r; "
                            "from fl_strategies.settings.config import default_run_config as d; "
                            "print(fedspectral.__file__, r.app_dir(), d()['strategy'])"], cwd=cwd, env=env,
                           capture_output=True, text=True, timeout=120)
    module, app, strategy = where.stdout.split()
    assert Path(module) == installed / "fedspectral" / "__init__.py", where.stderr
    assert Path(app).parent == tmp_path / "cache" / "fedspectral"
    assert strategy == "fedpower"  # the ServerApp of an in-process engine (compare) reads the defaults too
    run = [sys.executable, "-m", "fedspectral", "run", "--run-config", "l2=0.5 strict=true"]
    done = subprocess.run(run, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.strip().splitlines() == [
        "fedspectral run: error: --run-config: strict = true: strategy 'fedpower' does not read l2 = 0.5 (set to "
        "non-default values; they have no effect)"]
    (tmp_path / "file").write_text("")
    done = subprocess.run(run, cwd=cwd, env={**env, "XDG_CACHE_HOME": str(tmp_path / "file")}, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert f"{tmp_path / 'file' / 'fedspectral'}: cannot write the app's directory there" in done.stderr
    assert list(cwd.iterdir()) == []


def _tagged_processes(tag: str) -> list[str]:
    """Command lines of the processes (any program: Flower's, Ray's) whose environment carries this test's tag."""
    from conftest import tagged_processes

    return [args for _, args in tagged_processes(tag)]


@pytest.mark.ray
@pytest.mark.timeout(600)
def test_an_installed_wheel_runs_a_simulation_from_any_folder(installed, tmp_path, flower_processes):
    """``pip install`` of a wheel, then ``fedspectral run`` from another folder: a 2-round simulation of the
    installed app (a line added to the installed ServerApp shows in its log) finishes, exit 0, with its results
    in that folder, and stops every process it started."""
    server = installed / "server_app" / "app.py"
    server.write_text(server.read_text() + '\nlog.info("fedspectral: the installed copy %s", __name__)\n')
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    env = installed_env(installed, tmp_path / "cache")
    done = subprocess.run([sys.executable, "-m", "fedspectral", "run", "--run-config",
                           'num-server-rounds=2 num-clients=3 results-dir="out"'], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=540)
    log = done.stdout + done.stderr
    assert done.returncode == 0 and "flwr run status: finished:completed" in log, log
    assert "fedspectral: the installed copy server_app.app" in log  # the FAB was built from the installed files
    assert {p.name for p in (cwd / "out").iterdir()} >= {"rounds.csv", "pca.npz"}
    (app,) = (tmp_path / "cache" / "fedspectral").glob("app-*")
    assert (app / "server_app" / "app.py").read_bytes() == server.read_bytes()
    home = tmp_path / "cache" / "fedspectral" / "flwr-home"  # FLWR_HOME: in the user's cache, with the FAB that ran
    (shipped,) = (home / "apps").glob("fedspectral.fedspectral.0.1.0.*")
    assert (shipped / "server_app" / "app.py").read_bytes() == server.read_bytes()
    assert _tagged_processes(flower_processes) == []


def test_fedspectral_run_builds_the_fab_from_a_folder_of_the_fabs_files_only(monkeypatch, tmp_path):
    """Flower reads every file under the folder ``flwr run`` is given (a checkout's ``.venv`` too: seconds per run);
    ``fedspectral run`` gives it ``FLWR_HOME/app/app-<version>-<digest>``, holding only the checkout's FAB files,
    and the FAB built from it is the checkout's."""
    from fedspectral import run

    monkeypatch.setenv("FLWR_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(run, "claim_superlink_port", lambda env: None)
    monkeypatch.setattr(run, "superlink_running", lambda env: True)  # nothing to start or stop
    monkeypatch.setattr(run, "run_status", lambda run_id, env: "finished:completed")
    commands = []

    def flower_run(cmd, env, app_lines=None, run_ids=None):
        commands.append(cmd)
        app_lines.append("fedspectral: a ServerApp line")
        return "7"

    monkeypatch.setattr(run, "stream_run", flower_run)
    assert run.main(["--run-config", 'strategy="fedmf"'], prog="fedspectral run") == 0
    assert commands[0][:2] == ["flwr", "run"]
    folder = Path(commands[0][2])
    assert folder.parent == tmp_path / "home" / "app" and folder.name.startswith("app-0.1.0-")
    held = {path.relative_to(folder).as_posix() for path in folder.rglob("*") if path.is_file()}
    assert held == set(bundle_files(APP_DIR, APP_DIR / "pyproject.toml")) and not any(".venv" in h for h in held)
    assert fab_files(folder) == fab_files(APP_DIR)


def test_an_flwr_home_where_the_fab_folder_cannot_be_written_is_one_line_naming_it(monkeypatch, tmp_path, capsys):
    """Exit 2 and one line naming the folder, before Flower starts."""
    from fedspectral import run

    (tmp_path / "home").write_text("a file, not a folder")
    monkeypatch.setenv("FLWR_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(run, "claim_superlink_port", lambda env: None)
    monkeypatch.setattr(run, "stream_run", lambda *args, **kwargs: pytest.fail("Flower was started"))
    assert run.main(["--run-config", 'strategy="fedmf"'], prog="fedspectral run") == 2
    assert capsys.readouterr().err.splitlines() == [
        f"fedspectral run: error: {tmp_path / 'home' / 'app'}: cannot write the app's directory there; set FLWR_HOME "
        "to a writable folder"]
