"""A fork server for Flower's ``flwr-clientapp``: ClientApp processes forked from one that has imported Flower.

Flower 1.42's SuperExec starts a new ``flwr-clientapp`` process for every message a SuperNode receives; that
process spends most of its life importing Flower (``flwr.supernode.cli`` pulls in the SuperNode's own server
code: FastAPI, SQLAlchemy, Alembic), about 1 s on an idle core and 3 s when four nodes share two loaded cores.
This server imports Flower and numpy once, then, for every request of the ``flwr-clientapp`` launcher in this
directory, forks a child that runs Flower's own entry point, :func:`flwr.supernode.cli.flwr_clientapp`, with
the launcher's arguments, environment, working directory and standard streams. Nothing of Flower is changed or
replaced: the child runs the same function the ``flwr-clientapp`` script runs, in a copy of a process that has
already imported it. The app itself (the FAB) is never imported here: each child installs and imports it as a
new process does, so a message always runs the code of its own run.

Protocol (Unix socket, one connection per ClientApp): the launcher sends a 4-byte length, then its stdin,
stdout and stderr (``socket.send_fds``) with a JSON object ``{"argv", "env", "cwd"}``; the server answers the
child's process id (4 bytes), and the child, when it ends, its exit status (4 bytes). A child killed by a signal
closes the connection without a status.

Usage (started by ``fedspectral deploy`` and ``fedspectral supernode``: :mod:`fedspectral.supernode`)::

    python fedspectral/launchers/forkserver.py SOCKET

Run it as a script, not as a module of the repository: it must import nothing of the app, so that the app's
modules are imported by each child from its run's FAB. It exits when the process that started it has ended
(``fedspectral supernode`` or ``deploy``, even when killed), removing its socket (and its folder when empty).
When Flower's ``flwr-clientapp`` script is not the function it forks (:data:`ENTRY_POINT`), it exits before it
serves anything, with one line and exit status :data:`MISFIT`: its starters then leave Flower's own
``flwr-clientapp`` to the SuperNodes.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import sys
import threading

SOCKET_VARIABLE = "FEDSPECTRAL_CLIENTAPP_FORKSERVER"
"""The launcher finds the server's socket in this environment variable."""
HEADER = struct.Struct("!i")
ENTRY_POINT = "flwr.supernode.cli:flwr_clientapp"
"""What Flower's ``flwr-clientapp`` script runs (Flower 1.41 and 1.42), and what each child runs."""
MISFIT = 3
"""Exit status when the installed Flower's ``flwr-clientapp`` is another function."""
PARENT_CHECK_SECONDS = 1.0


def _receive_exact(conn: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            raise ConnectionError("launcher closed the connection")
        data += chunk
    return data


def _child(conn: socket.socket) -> None:
    """Run one ClientApp in this forked process; never returns."""
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
        from flwr.supernode.cli import flwr_clientapp

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


def preload() -> None:
    """What every ClientApp process imports before the app: Flower's ``flwr-clientapp`` entry point and numpy
    (the app's own modules are left to each child, from its run's FAB)."""
    import numpy  # noqa: F401
    from flwr.supernode.cli import flwr_clientapp  # noqa: F401


def misfit(expected: str = ENTRY_POINT) -> str | None:
    """Why the installed Flower's ``flwr-clientapp`` script is not ``expected``, or ``None``."""
    from importlib.metadata import entry_points

    found = [e.value for e in entry_points(group="console_scripts", name="flwr-clientapp")]
    return None if found == [expected] else f"Flower's flwr-clientapp runs {found or 'nothing'}, not {expected}"


def serve(path: str) -> None:
    """Import Flower (:func:`preload`), listen on the Unix socket ``path`` (mode 600) and fork a ClientApp per
    connection, until the process that started this one has ended."""
    problem = misfit()
    if problem:
        print(f"forkserver: {problem}; not serving", flush=True)
        sys.exit(MISFIT)
    parent = os.getppid()
    preload()
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
                _child(conn)
            conn.close()
        print(f"forkserver {os.getpid()}: the process that started it has ended; stopping", flush=True)
    finally:  # the socket, and its folder when nothing else is in it
        server.close()
        for remove in (os.unlink, os.rmdir):
            try:
                remove(path if remove is os.unlink else os.path.dirname(os.path.abspath(path)))
            except OSError:
                pass

if __name__ == "__main__":
    # the script's own directory is no place to import anything from
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(os.path.abspath(__file__))]
    if len(sys.argv) != 2:
        sys.exit("usage: forkserver.py SOCKET")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    serve(sys.argv[1])
