"""``fedspectral supernode``: Flower's SuperNode started as ``fedspectral deploy`` starts it, on a device.

Flower 1.42 has no warm ClientApp for a SuperNode (``flower-supernode --isolation process`` only leaves the
SuperExec to the user, and its SuperExec still starts one ``flwr-clientapp`` process per message, which exits
after that message) and no option for the SuperNode's 3 s sleep after an empty poll. This command runs, without
any flag:

* the ClientApp fork server (``launchers/forkserver.py``): one process that has imported Flower and this
  installation's ClientApp (:func:`fedspectral.app_bundle.app_dir`) forks every ClientApp, running Flower's own
  ``flwr-clientapp`` entry point, which keeps those modules only when the run's FAB holds the same files and
  unpacks a FAB once; the SuperNode finds the launcher ``launchers/flwr-clientapp`` first on its ``PATH``;
* Flower's ``flower-supernode`` through ``launchers/supernode.py``: within a minute of its last message it polls
  the SuperLink every ``--poll`` seconds instead of sleeping 3 s (idle, as Flower's does);
* Flower's own settings as ``deploy`` gives them (:func:`node_env`; a value the user set is kept): its SuperExec
  looks for a new task every 0.1 s (``FLWR_SUPEREXEC_TASK_POLL_INTERVAL``; Flower's 1 s), and ``TMPDIR`` is a
  memory file system where there is one (``/dev/shm``: Flower unpacks and checks the app there at every message).

Every other argument goes to ``flower-supernode`` unchanged, and the process becomes the SuperNode (``exec``:
its signals and exit status are Flower's); the fork server ends with it. ``--flower-defaults`` runs
``flower-supernode`` itself. When either change does not fit the installed Flower (another version, another
loop, another ``flwr-clientapp`` entry point), one line says so and Flower's own behaviour is kept.
:class:`fedspectral.deploy.LocalDeployment` starts its SuperNodes with the same helpers.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

from fedspectral.app_bundle import AppBundleError, app_dir
from fl_strategies.settings.command_line import ArgumentParser

__all__ = ["DEFAULT_POLL", "LAUNCHERS_DIR", "FORKSERVER_VARIABLE", "supernode_command", "start_forkserver",
           "warm_env", "node_env", "main"]

DEFAULT_POLL = 0.1
"""Seconds between a SuperNode's polls of the SuperLink while a run is active (Flower's: 3 s)."""
POLL_RANGE = (0.05, 3.0)
"""The ``--poll`` values ``launchers/supernode.py`` accepts."""
LAUNCHERS_DIR = Path(__file__).resolve().parent / "launchers"
"""The fork server (``forkserver.py``), the ``flwr-clientapp`` launcher and ``supernode.py``."""
FORKSERVER_VARIABLE = "FEDSPECTRAL_CLIENTAPP_FORKSERVER"
"""The launcher finds the fork server's socket in this variable (``forkserver.SOCKET_VARIABLE``)."""
SUPEREXEC_POLL_VARIABLE, SUPEREXEC_POLL_SECONDS = "FLWR_SUPEREXEC_TASK_POLL_INTERVAL", "0.1"
"""Flower's SuperExec reads its task polling interval (default 1 s) from this variable."""
MEMORY_TMP = Path("/dev/shm")
"""A memory file system: the SuperNodes' ``TMPDIR`` (each ClientApp process unpacks the app there to check it)."""
FORKSERVER_START_SECONDS = 120.0
"""How long the fork server may take to import Flower before the ClientApps start without it."""


def supernode_command(poll: float | None) -> list[str]:
    """The command that starts Flower's SuperNode: ``launchers/supernode.py POLL`` (``None``: Flower's own
    ``flower-supernode``); ``flower-supernode``'s arguments follow it."""
    if poll is None:
        return ["flower-supernode"]
    return [sys.executable, str(LAUNCHERS_DIR / "supernode.py"), str(poll)]


def node_env(env: dict[str, str]) -> dict[str, str]:
    """``env`` with Flower's settings for a fast SuperNode, where ``env`` has none of its own.

    Each SuperExec looks for a new task every second by default: a message waited up to that long before its
    ClientApp started (:data:`SUPEREXEC_POLL_VARIABLE`, 0.1 s here). Every ClientApp process (and ServerApp)
    unpacks the whole app (FAB) into a new private folder of ``TMPDIR`` and checks its hashes before it runs
    (Flower's ``install_from_fab``, even when the app is installed): 0.30 s on disk, 0.06 s in memory
    (:data:`MEMORY_TMP`), at a load of 11 on 2 cores.
    """
    env = {**env}
    env.setdefault(SUPEREXEC_POLL_VARIABLE, SUPEREXEC_POLL_SECONDS)
    if MEMORY_TMP.is_dir() and os.access(MEMORY_TMP, os.W_OK | os.X_OK):
        env.setdefault("TMPDIR", str(MEMORY_TMP))
    return env


def warm_env(env: dict[str, str], socket_path: Path) -> dict[str, str]:
    """``env`` for a SuperNode whose ClientApps are forked by the fork server listening on ``socket_path``: the
    launcher first on ``PATH`` (only the name ``flwr-clientapp`` is there) and the socket in
    :data:`FORKSERVER_VARIABLE`."""
    return {**env, FORKSERVER_VARIABLE: str(socket_path),
            "PATH": str(LAUNCHERS_DIR) + os.pathsep + env.get("PATH", os.defpath)}


def start_forkserver(popen: Callable[[list[str]], subprocess.Popen], timeout: float = FORKSERVER_START_SECONDS,
                     app: Path | None = None) -> tuple[subprocess.Popen, Path | None, str]:
    """Start the ClientApp fork server with ``popen(command)`` and wait until it serves.

    Parameters
    ----------
    popen : callable
        Starts the command (the caller chooses its log, environment and session).
    timeout : float
        Seconds it may take to import Flower.
    app : Path, optional
        The app's directory (what ``flwr run`` builds the FAB from): the server imports its ClientApp in advance
        and each ClientApp keeps those modules when its run's FAB holds the same files (``forkserver.py``).

    Returns
    -------
    process : subprocess.Popen
        The fork server (stopped here when it did not start in time).
    socket_path : Path or None
        Its socket in a new private folder (mode 700); ``None`` when it does not serve.
    problem : str
        Why it does not serve (empty when it does): the SuperNodes then start Flower's own ``flwr-clientapp``.
    """
    folder = Path(tempfile.mkdtemp(prefix="fedspectral-forkserver-"))  # a socket path must stay short (108 bytes)
    socket_path = folder / "clientapp.sock"
    proc = popen([sys.executable, str(LAUNCHERS_DIR / "forkserver.py"), str(socket_path),
                  *([str(app)] if app is not None else [])])
    deadline = time.monotonic() + timeout
    while not socket_path.exists():
        code = proc.poll()
        if code is not None or time.monotonic() > deadline:
            if code is None:
                proc.terminate()
                proc.wait()
            shutil.rmtree(folder, ignore_errors=True)
            reason = f"exited with status {code}" if code is not None else f"did not serve within {timeout:g} s"
            return proc, None, f"the ClientApp fork server {reason}"
        time.sleep(0.05)
    return proc, socket_path, ""


def check_flower_arguments(rest: list[str], prog: str) -> None:
    """Parse ``rest`` as ``flower-supernode`` will, with Flower's own parser, so that a bad argument is refused
    before anything starts: ``SystemExit(2)`` after one line ``prog: error: ...``. Skipped when this Flower has
    no such parser (the SuperNode then refuses it itself)."""
    from fl_strategies.protocol.flower_compat import supernode_argument_parser

    if supernode_argument_parser is None:
        return
    parser = supernode_argument_parser()
    parser.prog = prog
    parser.error = lambda message: parser.exit(2, f"{prog}: error: {message}\n")  # one line, not its usage
    parser.parse_args(rest)


EXAMPLES = """\
examples:
  {prog} --superlink superlink.example.org:9091 --root-certificates ca.crt \\
      --auth-supernode-private-key node_0 --node-config "partition-id=0 num-partitions=3 data-path='rows.npy'"
  {prog} --poll 0.5 --insecure --superlink 127.0.0.1:9092
  {prog} --flower-defaults --insecure --superlink 127.0.0.1:9092     (exactly flower-supernode)

Every argument other than those above goes to flower-supernode (`flower-supernode --help`).

exit status: 0 the SuperNode stopped normally (otherwise flower-supernode's status), 2 a bad argument, ours or
flower-supernode's (one line, before anything starts)
"""


def main(argv: list[str] | None = None, prog: str = "python -m fedspectral.supernode") -> int:
    """Start the fork server, then become Flower's SuperNode (``exec``); returns only on a bad argument (2)."""
    parser = ArgumentParser(prog=prog, allow_abbrev=False, epilog=EXAMPLES.format(prog=prog),
                            description="Flower's flower-supernode with warm ClientApps (forked from a process that "
                            "has imported Flower)\nand short polls of the SuperLink while a run is active, as "
                            "`fedspectral deploy` starts its SuperNodes.")
    parser.add_argument("--poll", type=float, default=DEFAULT_POLL, metavar="SECONDS",
                        help=f"seconds between polls of the SuperLink while a run is active, in [{POLL_RANGE[0]}, "
                        f"{POLL_RANGE[1]}] (default {DEFAULT_POLL}; Flower's: 3)")
    parser.add_argument("--flower-defaults", action="store_true", help="run flower-supernode itself: a new "
                        "flwr-clientapp process per message, 3 s after every empty poll")
    given = sys.argv[1:] if argv is None else list(argv)
    args, rest = parser.parse_known_args(given)
    if not POLL_RANGE[0] <= args.poll <= POLL_RANGE[1]:
        parser.error(f"--poll {args.poll}: give seconds in [{POLL_RANGE[0]}, {POLL_RANGE[1]}]")
    check_flower_arguments(rest, prog)
    if args.flower_defaults:
        if any(a == "--poll" or a.startswith("--poll=") for a in given):
            parser.error("--poll and --flower-defaults contradict each other: give one")
        flower = shutil.which("flower-supernode") or shutil.which("flower-supernode",
                                                                   path=str(Path(sys.executable).parent))
        if flower is None:
            print(f"{prog}: error: Flower's flower-supernode is neither on PATH nor beside {sys.executable}",
                  file=sys.stderr)
            return 1
        os.execv(flower, [flower, *rest])
    env = node_env(dict(os.environ))
    sys.stdout.flush()
    try:
        app = app_dir()
    except AppBundleError as ex:  # the ClientApps import the app from their FAB
        print(f"{prog}: {ex}; the app is not imported in advance", file=sys.stderr, flush=True)
        app = None
    _, socket_path, problem = start_forkserver(lambda cmd: subprocess.Popen(cmd, env=env), app=app)
    if problem:
        print(f"{prog}: {problem}; every message starts Flower's own flwr-clientapp", file=sys.stderr, flush=True)
    else:
        env = warm_env(env, socket_path)
    command = supernode_command(args.poll)
    os.execve(command[0], [*command, *rest], env)
    return 1  # not reached


if __name__ == "__main__":
    sys.exit(main())
