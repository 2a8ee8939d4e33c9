"""A fork server for Flower's ``flwr-clientapp``: ClientApp processes forked from one that has imported Flower.

Flower 1.42's SuperExec starts a new ``flwr-clientapp`` process for every message a SuperNode receives; that
process spends most of its life importing Flower (``flwr.supernode.cli`` pulls in the SuperNode's own server
code: FastAPI, SQLAlchemy, Alembic), about 1 s on an idle core and 3 s when four nodes share two loaded cores.
This server imports Flower and numpy once, then, for every request of the ``flwr-clientapp`` launcher in this
directory, forks a child that runs Flower's own entry point, :func:`flwr.supernode.cli.flwr_clientapp`, with
the launcher's arguments, environment, working directory and standard streams. Flower's code runs unchanged but for one
wrapped function (below): the child runs the same function the ``flwr-clientapp`` script runs, in a copy of a
process that has already imported it.

Given the app's directory (``APP_DIR``: the folder ``flwr run`` builds the FAB from, as ``fedspectral deploy`` and
``fedspectral supernode`` give it), the server also imports the app's ClientApp module and the rest of its package
from there, with the scipy modules the app imports when it runs (about 1 s per message on two loaded cores), and
notes each module of the app it imported (file, SHA-256). A message still runs the code of its own run: Flower's
``install_from_fab`` in the child's ``flwr.supernode.runtime.run_clientapp`` is wrapped so that, once Flower has
installed the run's FAB, every module imported in advance is compared with the file of the same path in that
installation, byte for byte; all equal, they are kept (their ``__file__`` and package ``__path__`` then name the
installed files, so that anything imported later comes from the FAB as before); any different or missing, they are
all dropped (one line on stderr) and Flower imports the app from the FAB as a new process does. The same wrapper
installs a FAB once per fork server: Flower's own ``install_from_fab`` unpacks the FAB into a temporary folder and
checks every file's hash at every message, then keeps an existing installation as it is; the wrapper remembers, per
FAB (its SHA-256) and ``FLWR_HOME``, the folder Flower installed it to, and while that folder exists returns it
without unpacking again (same bytes: same checks, same folder). And a child asks its SuperNode again after 0.1 s,
not Flower's 1 s, for a part of its message the SuperNode is still receiving (:func:`wrap_pull`: the SuperExec
starts the ClientApp as soon as the message is announced). A Flower outside 1.41/1.42, or whose ``run_clientapp``
does not call ``install_from_fab`` and ``pull_and_inflate_object_from_tree`` as those do, gets none of the three
(one line; the app is then not imported in advance).

Protocol (Unix socket, one connection per ClientApp): the launcher sends a 4-byte length, then its stdin,
stdout and stderr (``socket.send_fds``) with a JSON object ``{"argv", "env", "cwd"}``; the server answers the
child's process id (4 bytes), and the child, when it ends, its exit status (4 bytes). A child killed by a signal
closes the connection without a status.

Usage (started by ``fedspectral deploy`` and ``fedspectral supernode``: :mod:`fedspectral.supernode`)::

    python fedspectral/launchers/forkserver.py SOCKET [APP_DIR]

Run it as a script, not as a module of the repository: it imports of the app only what it finds in ``APP_DIR``
(checked against each run's FAB as above), nothing from the repository it lives in. It exits when the process that
started it has ended (``fedspectral supernode`` or ``deploy``, even when killed), removing its socket (and its
folder when empty). When Flower's ``flwr-clientapp`` script is not the function it forks (:data:`ENTRY_POINT`), it
exits before it serves anything, with one line and exit status :data:`MISFIT`: its starters then leave Flower's own
``flwr-clientapp`` to the SuperNodes.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import json
import os
import pkgutil
import signal
import socket
import struct
import sys
import threading
import tomllib
from pathlib import Path

SOCKET_VARIABLE = "FEDSPECTRAL_CLIENTAPP_FORKSERVER"
"""The launcher finds the server's socket in this environment variable."""
HEADER = struct.Struct("!i")
ENTRY_POINT = "flwr.supernode.cli:flwr_clientapp"
"""What Flower's ``flwr-clientapp`` script runs (Flower 1.41 and 1.42), and what each child runs."""
MISFIT = 3
"""Exit status when the installed Flower's ``flwr-clientapp`` is another function."""
PARENT_CHECK_SECONDS = 1.0
FLOWER_SERIES = ("1.41.", "1.42.")
"""The Flower versions whose ``run_clientapp`` the install wrapper is written for (pyproject's pin)."""
INSTALL_CALL = "install_from_fab(fab.content, skip_prompt=True)"
"""How Flower's ``run_clientapp`` installs the run's FAB (1.41, 1.42): the call the wrapper stands in for."""
PULL_CALL = "pull_and_inflate_object_from_tree("
"""How Flower's ``run_clientapp`` fetches the message from its SuperNode (1.41, 1.42): the call whose first wait
the child shortens."""
LIBRARIES = ("numpy", "scipy.linalg", "scipy.sparse", "scipy.sparse.linalg", "scipy.special", "httpcore", "h11")
"""Third-party modules a ClientApp imports only when it runs (the app's scipy; httpx's transport, when Flower
creates its Runtime API client), imported before any message."""


def _receive_exact(conn: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            raise ConnectionError("launcher closed the connection")
        data += chunk
    return data


def _child(conn: socket.socket, app: dict[str, tuple[str, str]] | None = None, marks: Path | None = None) -> None:
    """Run one ClientApp in this forked process (``app``, ``marks``: :func:`wrap_install`'s, ``None``: Flower's
    own installation); never returns."""
    code = 1
    try:
        head, fds, _, _ = socket.recv_fds(conn, HEADER.size, 3)
        if len(head) < HEADER.size:
            head += _receive_exact(conn, HEADER.size - len(head))
        request = json.loads(_receive_exact(conn, HEADER.unpack(head)[0]))
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        sys.argv = list(request["argv"])
        conn.sendall(HEADER.pack(os.getpid()))
        fresh_random_state()
        from flwr.supernode.cli import flwr_clientapp

        if marks is not None:
            wrap_install(app or {}, marks)
            wrap_pull()

        try:
            flwr_clientapp()
            code = 0
        except SystemExit as ex:
            code = ex.code if isinstance(ex.code, int) else (0 if ex.code is None else 1)
    except BaseException:  # pylint: disable=broad-except
        import traceback

        traceback.print_exc()
    finally:
        import atexit

        atexit._run_exitfuncs()  # what a process's normal exit runs
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        try:
            conn.sendall(HEADER.pack(code))
        except OSError:
            pass
        os._exit(code)


def fresh_random_state() -> None:
    """Seed numpy's global generator from the operating system's entropy, as importing numpy does in a new
    process: under a numpy that keeps the parent's state in a fork (the pin allows 1.26), every child would draw
    what every other child draws (Flower's SecAgg+ quantization rounds with ``np.random.rand``). Python's
    ``random`` reseeds itself after a fork."""
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed()


def preload(app_dir: str | None = None) -> dict[str, tuple[str, str]]:
    """Import what every ClientApp process imports before the app: Flower's ``flwr-clientapp`` entry point and
    :data:`LIBRARIES`; with ``app_dir``, the app's ClientApp module from there (its ``pyproject.toml``'s
    ``[tool.flwr.app.components] clientapp``) and every other module of its package (the app imports some only
    when a message needs them: one strategy's replies); a module of the package that does not import is left
    to the FAB.

    Returns
    -------
    dict of str to (str, str)
        Each module of the app imported here (its file under ``app_dir``): its file's path relative to
        ``app_dir`` and the file's SHA-256 (hex); empty without ``app_dir`` or when the app does not import (one
        line: the ClientApps then import it from the FAB).
    """
    from flwr.supernode.cli import flwr_clientapp  # noqa: F401

    for name in LIBRARIES:
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    if app_dir is None:
        return {}
    root = os.path.realpath(app_dir)
    before = set(sys.modules)
    sys.path.insert(0, root)
    try:
        with open(os.path.join(root, "pyproject.toml"), "rb") as handle:
            component = tomllib.load(handle)["tool"]["flwr"]["app"]["components"]["clientapp"]
        module = component.partition(":")[0]
        importlib.import_module(module)
        package = sys.modules[module.partition(".")[0]]
        for sibling in pkgutil.iter_modules(getattr(package, "__path__", [])):
            try:
                importlib.import_module(f"{package.__name__}.{sibling.name}")
            except Exception:  # pylint: disable=broad-except
                pass
    except Exception as ex:  # pylint: disable=broad-except
        print(f"forkserver: the app in {root} does not import here ({type(ex).__name__}: {ex}); each ClientApp "
              "imports it from its FAB", flush=True)
        _drop([name for name in set(sys.modules) - before if _under(sys.modules[name], root)])
        return {}
    finally:
        sys.path.remove(root)
    app = {}
    for name in set(sys.modules) - before:
        if _under(sys.modules[name], root):
            path = os.path.realpath(sys.modules[name].__file__)
            app[name] = (os.path.relpath(path, root), _sha256(path))
    return app


def _under(module, root: str) -> bool:
    file = getattr(module, "__file__", None)
    return bool(file) and os.path.realpath(file).startswith(root + os.sep)


def _sha256(path: str | Path) -> str:
    with open(path, "rb") as handle:
        return hashlib.sha256(handle.read()).hexdigest()


def _drop(names) -> None:
    for name in names:
        sys.modules.pop(name, None)
    importlib.invalidate_caches()


def adopt(app: dict[str, tuple[str, str]], installed: Path) -> str | None:
    """Keep the modules :func:`preload` imported if each equals the file of the same path in ``installed`` (the
    run's FAB as Flower installed it), renaming their files and package paths to those there; else drop them all
    (Flower then imports them from ``installed``). ``None``, or which file differs."""
    differs = None
    for rel, digest in app.values():
        try:
            if _sha256(installed / rel) != digest:
                differs = f"{rel} differs"
        except OSError:
            differs = f"{rel} is not in it"
        if differs:
            break
    if differs:
        _drop(app)
        return differs
    for name, (rel, _) in app.items():
        module = sys.modules.get(name)
        if module is None:
            continue
        module.__file__ = str(installed / rel)
        if module.__spec__ is not None:
            module.__spec__.origin = module.__file__
        if hasattr(module, "__path__"):  # a package: its submodules imported later come from the FAB
            module.__path__[:] = [str((installed / rel).parent)]
            if module.__spec__ is not None and module.__spec__.submodule_search_locations is not None:
                module.__spec__.submodule_search_locations[:] = module.__path__
    return None


def flower_pulls():
    """``fl_strategies/protocol/flower_compat/grid_pull.py`` (:func:`with_first_wait`, ``PULL_BACKOFF``), loaded by
    its path under a name of its own: the standard library only, and no package of the repository imported."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "fl_strategies" / "protocol" / "flower_compat" / "grid_pull.py"
    spec = importlib.util.spec_from_file_location("_fedspectral_grid_pull", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


PULLS = flower_pulls()
"""The one wrapper that shortens Flower's first wait for a message still arriving (here: :func:`wrap_pull`)."""


def hook_misfit() -> str | None:
    """Why Flower's ``run_clientapp`` does not install a FAB as :func:`wrap_install` assumes, or ``None``."""
    from flwr.supercore.version import package_version

    try:
        import flwr.supernode.runtime.run_clientapp as runner
    except ImportError as ex:
        return f"Flower {package_version} has no flwr.supernode.runtime.run_clientapp ({ex})"
    if not package_version.startswith(FLOWER_SERIES):
        return f"written for Flower {' or '.join(v + 'x' for v in FLOWER_SERIES)}, found {package_version}"
    if INSTALL_CALL not in inspect.getsource(runner.run_clientapp) or not callable(
            getattr(runner, "install_from_fab", None)):
        return f"Flower's run_clientapp does not call {INSTALL_CALL}"
    pull = getattr(runner, PULL_CALL[:-1], None)
    if PULL_CALL not in inspect.getsource(runner.pull_task_input) or not callable(pull) or (
            "initial_backoff" not in inspect.signature(pull).parameters):
        return f"Flower's pull_task_input does not call {PULL_CALL}..., initial_backoff=...)"
    return None


def wrap_pull() -> None:
    """In this (child) process, make Flower's ``run_clientapp`` fetch its message with a first wait of
    :data:`PULLS`'s ``PULL_BACKOFF`` seconds (0.1 s, not 1 s; then twice as long each time, as Flower's) when its
    SuperNode has not received all of it yet: the SuperExec starts the ClientApp as soon as the message is announced,
    often before its contents have arrived. Every other argument is the caller's."""
    import flwr.supernode.runtime.run_clientapp as runner

    setattr(runner, PULL_CALL[:-1], PULLS.with_first_wait(getattr(runner, PULL_CALL[:-1])))


def wrap_install(app: dict[str, tuple[str, str]], marks: Path) -> None:
    """In this (child) process, make Flower's ``run_clientapp`` install a FAB through :func:`installed_fab`."""
    import flwr.supernode.runtime.run_clientapp as runner

    flower_install = runner.install_from_fab

    def install(fab_file, install_dir=None, skip_prompt=False):
        return installed_fab(flower_install, app, marks, fab_file, install_dir, skip_prompt)

    runner.install_from_fab = install


def installed_fab(flower_install, app: dict[str, tuple[str, str]], marks: Path, fab_file, install_dir=None,
                  skip_prompt=False) -> Path:
    """Flower's ``install_from_fab(fab_file, install_dir, skip_prompt)``, unpacked once per FAB and ``FLWR_HOME``
    (``marks``: a folder of this fork server noting where each went), then :func:`adopt` of the app's modules."""
    mark = None
    if isinstance(fab_file, bytes) and install_dir is None:
        key = hashlib.sha256(os.environ.get("FLWR_HOME", "").encode() + b"\0" + hashlib.sha256(fab_file).digest())
        mark = marks / key.hexdigest()
    path = None
    if mark is not None:
        try:
            path = Path(mark.read_text())
        except OSError:
            path = None
    if path is None or not path.is_dir():
        path = Path(flower_install(fab_file, install_dir, skip_prompt))
        if mark is not None:
            try:
                fresh = mark.with_name(f".{mark.name}.{os.getpid()}")
                fresh.write_text(str(path))
                os.replace(fresh, mark)
            except OSError:
                pass
    if app:
        problem = adopt(app, path)
        if problem:
            print(f"forkserver: the run's app is not the one imported in advance ({problem}); the ClientApp "
                  "imports it from its FAB", file=sys.stderr, flush=True)
    return path


def misfit(expected: str = ENTRY_POINT) -> str | None:
    """Why the installed Flower's ``flwr-clientapp`` script is not ``expected``, or ``None``."""
    from importlib.metadata import entry_points

    found = [e.value for e in entry_points(group="console_scripts", name="flwr-clientapp")]
    return None if found == [expected] else f"Flower's flwr-clientapp runs {found or 'nothing'}, not {expected}"


def serve(path: str, app_dir: str | None = None) -> None:
    """Import Flower and the app in ``app_dir`` (:func:`preload`), listen on the Unix socket ``path`` (mode 600)
    and fork a ClientApp per connection, until the process that started this one has ended."""
    problem = misfit()
    if problem:
        print(f"forkserver: {problem}; not serving", flush=True)
        sys.exit(MISFIT)
    parent = os.getppid()
    hook_problem = hook_misfit()
    if hook_problem:
        print(f"forkserver: {hook_problem}: every ClientApp unpacks its FAB and imports the app (Flower's own "
              "behaviour)", flush=True)
    app = preload(None if hook_problem else app_dir)
    marks = None if hook_problem else Path(os.path.dirname(os.path.abspath(path))) / "fabs"
    if marks is not None:
        marks.mkdir(mode=0o700, exist_ok=True)
    if threading.active_count() != 1:  # a fork copies only the forking thread: the imports must start none
        sys.exit(f"forkserver: importing Flower started {threading.active_count() - 1} thread(s); refusing to fork")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        server.bind(path)
    finally:
        os.umask(old)
    server.listen(128)
    server.settimeout(PARENT_CHECK_SECONDS)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel
    if app:
        print(f"forkserver {os.getpid()}: {len(app)} modules of the app in {app_dir} imported", flush=True)
    print(f"forkserver {os.getpid()}: Flower imported, serving {path}", flush=True)
    try:
        while os.getppid() == parent:
            try:
                conn, _ = server.accept()
            except socket.timeout:
                continue
            conn.settimeout(None)
            sys.stdout.flush()
            sys.stderr.flush()
            if os.fork() == 0:
                server.close()
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                _child(conn, app, marks)
            conn.close()
        print(f"forkserver {os.getpid()}: the process that started it has ended; stopping", flush=True)
    finally:  # the socket, the FAB marks, and the folder when nothing else is in it
        server.close()
        if marks is not None:
            for mark in marks.glob("*"):
                mark.unlink(missing_ok=True)
            try:
                marks.rmdir()
            except OSError:
                pass
        for remove in (os.unlink, os.rmdir):
            try:
                remove(path if remove is os.unlink else os.path.dirname(os.path.abspath(path)))
            except OSError:
                pass

if __name__ == "__main__":
    # the script's own directory is no place to import anything from
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(os.path.abspath(__file__))]
    if len(sys.argv) not in (2, 3):
        sys.exit("usage: forkserver.py SOCKET [APP_DIR]")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    serve(*sys.argv[1:])
