"""Where the Flower app is: the checkout, or an app directory assembled from the installed package.

``flwr run DIR`` builds the app's FAB from a directory that holds ``pyproject.toml`` (the app's components, its
default run config and ``[tool.flwr.app] fab-include``) beside the modules ``fab-include`` names; the commands
read the default run config from the same file. :func:`app_dir` answers where that directory is:

* **A checkout** (``pip install -e .``, or the source tree on ``PYTHONPATH``): the packages sit beside the
  project's own ``pyproject.toml``, and the app is that directory (:data:`PACKAGE_ROOT`). Flower's state
  (``FLWR_HOME``) defaults to its ``.flwr/``.
* **An installed wheel** (``pip install .``): the packages sit in ``site-packages`` with no ``pyproject.toml``
  beside them; the wheel carries a copy as ``fedspectral/app/pyproject.toml`` (``force-include`` in
  ``pyproject.toml``). The app directory is assembled from it and the installed files that its ``fab-include``
  names, byte for byte, in the user's cache: ``$XDG_CACHE_HOME/fedspectral/app-<version>-<digest>``
  (``~/.cache/fedspectral/...`` when ``XDG_CACHE_HOME`` is unset), ``<digest>`` 16 hex digits of the SHA-256 of
  their names and contents. The FAB that ``flwr run`` builds from it is the checkout's
  (``tests/test_app_bundle.py``). Every command compares the folder with the installed files before using it: a
  folder that differs (an edited or stale copy, a file added or missing, a link) is set aside and written again.
  A new folder is written under a temporary name (mode 700, files 600) and renamed into place, so no command
  sees half of one, and two commands that build it at once both use a complete one. Folders of other versions
  are left alone (another environment may use them; a few hundred kB each, safe to delete). ``FLWR_HOME``
  defaults to ``$XDG_CACHE_HOME/fedspectral/flwr-home``: site-packages may be read-only, and is no place for a
  SuperLink's database and logs.

Run-config paths are resolved against the directory the command runs from either way
(:func:`fedspectral.run.absolute_paths`), never against the app directory.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import tomllib
from functools import cache
from pathlib import Path

__all__ = ["PACKAGE_ROOT", "SHIPPED_PYPROJECT", "AppBundleError", "is_checkout", "app_dir", "fab_dir", "cache_root",
           "default_flower_home", "bundle_files", "assemble_bundle"]

PACKAGE_ROOT = Path(__file__).resolve().parents[1]
"""The directory that holds the ``fedspectral`` package and its siblings: the checkout, or ``site-packages``."""

SHIPPED_PYPROJECT = Path(__file__).resolve().parent / "app" / "pyproject.toml"
"""The app's ``pyproject.toml`` as an installed wheel carries it."""

PROJECT = "fedspectral"


class AppBundleError(ValueError):
    """The app directory cannot be found or written; the message names the file or folder (one line)."""


def is_checkout(root: Path = PACKAGE_ROOT) -> bool:
    """Whether ``root`` holds fedspectral's own ``pyproject.toml`` (a checkout), not only the installed packages."""
    try:
        return tomllib.loads((root / "pyproject.toml").read_text())["project"]["name"] == PROJECT
    except (OSError, KeyError, TypeError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return False


def cache_root() -> Path:
    """``$XDG_CACHE_HOME/fedspectral`` (``~/.cache/fedspectral`` when the variable is unset or not absolute)."""
    base = os.environ.get("XDG_CACHE_HOME", "")
    return (Path(base) if os.path.isabs(base) else Path.home() / ".cache") / PROJECT


def default_flower_home() -> Path:
    """``FLWR_HOME`` unless the user set it: the checkout's ``.flwr/``, or ``flwr-home/`` in :func:`cache_root`."""
    return PACKAGE_ROOT / ".flwr" if is_checkout() else cache_root() / "flwr-home"


@cache
def app_dir() -> Path:
    """The app's directory, for ``flwr run`` and the default run config: the checkout, or the bundle assembled
    from the installed package (:func:`assemble_bundle`; once per process).

    Raises
    ------
    AppBundleError
        The installed package lacks its ``pyproject.toml``, or the cache folder cannot be written.
    """
    if is_checkout():
        return PACKAGE_ROOT
    return assemble_bundle(bundle_files(), cache_root())


def fab_dir(flower_home: Path) -> Path:
    """The directory ``flwr run`` builds the app's FAB from: only the files of the FAB.

    Flower reads every file under the directory it is given before it keeps those ``fab-include`` names
    (``flwr/cli/utils.py: collect_files``): in a checkout that is its ``.venv``, ``.git`` and results too, about
    6 s for 48,000 files on the 2-core test machine, at every ``fedspectral run``. For a checkout this is
    therefore the folder :func:`assemble_bundle` writes in ``flower_home / "app"`` (``FLWR_HOME``, which Flower
    already fills with one installed copy of the app per FAB) from the checkout's ``pyproject.toml`` and the files
    its ``fab-include`` names, byte for byte, so the FAB is the checkout's (``tests/test_app_bundle.py``); for an
    installed package it is :func:`app_dir` (already only those files).

    Raises
    ------
    AppBundleError
        The folder cannot be written, or (installed) the package lacks its ``pyproject.toml``.
    """
    if not is_checkout():
        return app_dir()
    files = bundle_files(PACKAGE_ROOT, PACKAGE_ROOT / "pyproject.toml")
    try:
        return assemble_bundle(files, Path(flower_home) / "app")
    except AppBundleError:
        raise AppBundleError(f"{Path(flower_home) / 'app'}: cannot write the app's directory there; set FLWR_HOME to "
                             "a writable folder") from None


def bundle_files(root: Path = PACKAGE_ROOT, pyproject: Path = SHIPPED_PYPROJECT) -> dict[str, bytes]:
    """The files of the app directory, by relative path: ``pyproject.toml`` (from ``pyproject``) and every
    file under ``root`` that a pattern of its ``fab-include`` matches (symbolic links left out, as Flower does).

    Raises
    ------
    AppBundleError
        ``pyproject`` is missing or unreadable, or has no ``fab-include`` list.
    """
    try:
        text = pyproject.read_bytes()
        patterns = tomllib.loads(text.decode())["tool"]["flwr"]["app"]["fab-include"]
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, KeyError, TypeError) as ex:
        raise AppBundleError(f"{pyproject}: the installed package's app configuration cannot be read "
                             f"({type(ex).__name__}: {ex}); reinstall fedspectral") from None
    files = {"pyproject.toml": text}
    for pattern in patterns:
        for path in sorted(root.glob(pattern)):
            if path.is_file() and not path.is_symlink() and "__pycache__" not in path.parts:
                try:
                    files[path.relative_to(root).as_posix()] = path.read_bytes()
                except OSError as ex:
                    raise AppBundleError(f"{path}: cannot be read ({ex.strerror or ex}); reinstall fedspectral") \
                        from None
    return files


def _digest(files: dict[str, bytes]) -> str:
    sha = hashlib.sha256()
    for name in sorted(files):
        sha.update(name.encode() + b"\0" + hashlib.sha256(files[name]).digest())
    return sha.hexdigest()


def _holds_exactly(folder: Path, files: dict[str, bytes]) -> bool:
    """Whether ``folder`` holds ``files`` and nothing else (no link, no other file), byte for byte."""
    found = {}
    if folder.is_symlink():
        return False
    try:
        for dirpath, dirnames, filenames in os.walk(folder, followlinks=False):
            for name in filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
                path = Path(dirpath, name)
                if path.is_symlink() or not path.is_file():
                    return False
                found[path.relative_to(folder).as_posix()] = path
        return found.keys() == files.keys() and all(found[n].read_bytes() == files[n] for n in files)
    except OSError:
        return False


def _write(folder: Path, files: dict[str, bytes]) -> None:
    for name, content in files.items():
        path = folder / name
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(content)


def assemble_bundle(files: dict[str, bytes], cache: Path) -> Path:
    """The folder ``cache/app-<version>-<digest>`` holding exactly ``files``: used as it is when it does, else
    (re)written atomically.

    Parameters
    ----------
    files : dict of str to bytes
        Relative path to content (:func:`bundle_files`); ``pyproject.toml`` names the version.
    cache : Path
        The user's cache folder for fedspectral (:func:`cache_root`), created with mode 700 if missing.

    Raises
    ------
    AppBundleError
        ``cache`` cannot be created or written (one line naming it).
    """
    version = tomllib.loads(files["pyproject.toml"].decode()).get("project", {}).get("version", "0")
    target = cache / f"app-{version}-{_digest(files)[:16]}"
    if _holds_exactly(target, files):
        return target
    try:
        cache.mkdir(mode=0o700, parents=True, exist_ok=True)
        if target.exists() or target.is_symlink():  # an edited or incomplete copy: set aside, then removed
            stale = Path(tempfile.mkdtemp(prefix=f".{target.name}.stale-", dir=cache))
            os.replace(target, stale / "app")
            shutil.rmtree(stale, ignore_errors=True)
        fresh = Path(tempfile.mkdtemp(prefix=f".{target.name}.new-", dir=cache))  # mode 700
        try:
            _write(fresh, files)
            try:
                os.rename(fresh, target)
            except OSError:  # another command put its copy there first: use it if it is complete
                if not _holds_exactly(target, files):
                    raise
        finally:
            shutil.rmtree(fresh, ignore_errors=True)
    except OSError as ex:
        raise AppBundleError(f"{cache}: cannot write the app's directory there ({ex.strerror or ex}); set "
                             "XDG_CACHE_HOME to a writable folder") from None
    return target
