"""The ``fedspectral`` command: one entry point for the tools, each a subcommand with its own options.

``fedspectral <command> [options]`` runs the command's ``main(argv, prog)`` with ``prog = "fedspectral
<command>"``, so its usage and error lines name what the user typed; its exit status is the command's (2: a bad
argument, one line). ``fedspectral`` alone prints the list of commands and exits 2; ``fedspectral --help``
prints it and exits 0. A command's module is imported only when it runs (``fedspectral --help`` loads no
Flower). Each command also runs as ``python -m MODULE`` (:data:`COMMANDS`).
"""

from __future__ import annotations

import difflib
import importlib
import sys
from dataclasses import dataclass
from typing import Callable

__all__ = ["COMMANDS", "Command", "main", "compare_script", "usage"]

PROG = "fedspectral"


@dataclass(frozen=True)
class Command:
    """One subcommand: the module whose ``main(argv, prog)`` runs it and the line ``fedspectral --help`` shows."""

    module: str
    summary: str


COMMANDS: dict[str, Command] = {
    "run": Command("fedspectral.run",
                   "run the app in Flower's simulation engine (`flwr run .` offline) and report its status"),
    "compare": Command("simulations.compare.cli",
                       "run the runs of a comparison file and write a results table, summary and plots"),
    "deploy": Command("fedspectral.deploy",
                      "run on a SuperLink and one SuperNode process per data file on this machine"),
    "supernode": Command("fedspectral.supernode",
                         "start Flower's SuperNode on a device as deploy does: warm ClientApps, short polls"),
    "credentials": Command("fedspectral.credentials",
                           "write TLS certificates and SuperNode keys for a secure deployment"),
    "transform": Command("client_app.transform",
                         "apply a run's PCA model (pca.npz) to rows on this node: scores or .eigenvec"),
}
"""The subcommands, in the order ``fedspectral --help`` lists them."""


def usage() -> str:
    """The text of ``fedspectral --help``: the synopsis and one line per command."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        installed = f" {version('fedspectral')}"
    except PackageNotFoundError:
        installed = ""
    width = max(map(len, COMMANDS))
    lines = [f"usage: {PROG} <command> [options]", "",
             f"fedspectral{installed}: federated PCA and eigenspace estimation on Flower.", "", "commands:"]
    lines += [f"  {name:<{width}}  {command.summary}" for name, command in COMMANDS.items()]
    lines += ["", f"`{PROG} <command> --help` shows a command's options, examples and exit statuses.",
              f"example: {PROG} run --run-config 'num-clients=10 num-server-rounds=5'"]
    return "\n".join(lines) + "\n"


def _command_main(name: str) -> Callable[..., int]:
    return importlib.import_module(COMMANDS[name].module).main


def main(argv: list[str] | None = None) -> int:
    """Run ``fedspectral <command> ...``; return its exit status (2 with one line for an unknown command).

    Parameters
    ----------
    argv : list of str, optional
        The arguments after ``fedspectral`` (default: ``sys.argv[1:]``).
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv:
        sys.stderr.write(usage())
        return 2
    name, rest = argv[0], argv[1:]
    if name in ("-h", "--help"):
        sys.stdout.write(usage())
        return 0
    if name not in COMMANDS:
        close = difflib.get_close_matches(name, COMMANDS, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        what = "option" if name.startswith("-") else "command"
        print(f"{PROG}: error: unknown {what} {name!r}: {hint}choose a command from {', '.join(COMMANDS)} "
              f"(`{PROG} --help`)", file=sys.stderr)
        return 2
    return int(_command_main(name)(rest, prog=f"{PROG} {name}"))


def compare_script() -> int:
    """The ``fedspectral-compare`` command: ``fedspectral compare`` under its older name."""
    return int(_command_main("compare")(sys.argv[1:], prog="fedspectral-compare"))
