"""fl_strategies.protocol.flower_compat is the only module that imports private Flower names."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCANNED = ("fl_strategies", "client_app", "server_app", "simulations", "fedspectral")
COMPAT = ROOT / "fl_strategies" / "protocol" / "flower_compat"
LAUNCHERS = ROOT / "fedspectral" / "launchers"

# Flower's public API: the top-level packages its documentation exposes. A ``from M import n`` is public when
# ``M`` is listed and ``n`` is no underscore name (and, if ``M`` declares ``__all__``, is in it or is a listed
# subpackage); ``import M`` is public when ``M`` is listed.
PUBLIC_FLOWER_MODULES = frozenset({
    "flwr",
    "flwr.app",
    "flwr.client",
    "flwr.client.mod",
    "flwr.clientapp",
    "flwr.common",
    "flwr.server",
    "flwr.server.client_manager",
    "flwr.server.client_proxy",
    "flwr.server.strategy",
    "flwr.server.workflow",
    "flwr.serverapp",
    "flwr.serverapp.strategy",
    "flwr.simulation",
})


def _is_flower(module: str) -> bool:
    return module == "flwr" or module.startswith("flwr.")


def _public_name(module: str, name: str) -> bool:
    """Whether ``from module import name`` uses Flower's public API."""
    if module not in PUBLIC_FLOWER_MODULES or name.startswith("_"):
        return False
    if f"{module}.{name}" in PUBLIC_FLOWER_MODULES:
        return True
    exported = getattr(importlib.import_module(module), "__all__", None)
    return exported is None or name in exported


def private_flower_imports(source: str) -> list[tuple[int, str]]:
    """``(line, what)`` of every import of a private Flower name in ``source`` (functions' imports included)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, f"import {a.name}") for a in node.names
                      if _is_flower(a.name) and a.name not in PUBLIC_FLOWER_MODULES]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module and _is_flower(node.module):
            found += [(node.lineno, f"from {node.module} import {a.name}") for a in node.names
                      if not _public_name(node.module, a.name)]
        elif (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str) and _is_flower(node.args[0].value)
              and getattr(node.func, "attr", getattr(node.func, "id", None)) in ("import_module", "__import__")
              and node.args[0].value not in PUBLIC_FLOWER_MODULES):
            found.append((node.lineno, f"import_module({node.args[0].value!r})"))
    return found


def test_the_checker_tells_private_from_public():
    source = ("from flwr.app import Message, MessageType\nfrom flwr.server.client_proxy import ClientProxy\n"
              "import flwr.common\nfrom flwr.client.mod import secaggplus_mod\nfrom flwr.server import History\n"
              "def f():\n    from flwr.server.compat.app import start_grid\n    import flwr.supercore.run\n"
              "    from flwr.simulation import _run_simulation\n    from flwr.common.logger import log\n"
              "    from flwr.app.message_type import MessageType\n    from flwr.server import compat\n")
    assert [line for line, _ in private_flower_imports(source)] == [7, 8, 9, 10, 11, 12]


def test_only_flower_compat_imports_private_flower_names():
    offenders = []
    for package in SCANNED:
        for path in sorted((ROOT / package).rglob("*.py")):
            if COMPAT in path.parents:
                continue
            if LAUNCHERS in path.parents:  # standalone: they import no fedspectral module; listed in the docstring
                listed = importlib.import_module("fl_strategies.protocol.flower_compat").__doc__
                offenders += [f"{path.relative_to(ROOT)}:{line}: {what} (not listed in flower_compat's docstring)"
                              for line, what in private_flower_imports(path.read_text())
                              if what.split()[-1] not in listed]
                continue
            offenders += [f"{path.relative_to(ROOT)}:{line}: {what}"
                          for line, what in private_flower_imports(path.read_text())]
    assert not offenders, ("private Flower names imported outside fl_strategies/protocol/flower_compat (add them "
                           "there, with what / why / public alternative):\n" + "\n".join(offenders))


def test_every_flower_compat_name_resolves():
    compat = importlib.import_module("fl_strategies.protocol.flower_compat")
    assert compat.__all__, "flower_compat exports nothing"
    for name in compat.__all__:
        assert getattr(compat, name) is not None, name
    with pytest.raises(AttributeError):
        compat.no_such_name  # noqa: B018


def test_every_area_module_exports_what_the_package_maps_to_it():
    compat = importlib.import_module("fl_strategies.protocol.flower_compat")
    areas = {area for area in compat._AREA.values()}
    exported = set()
    for area in areas:
        module = importlib.import_module(f"fl_strategies.protocol.flower_compat.{area}")
        assert {n for n, a in compat._AREA.items() if a == area} == set(module.__all__), area
        exported |= set(module.__all__)
    assert exported == set(compat.__all__)


def test_renamed_names_are_flowers_own():
    from flwr.compat.common import recorddict_compat
    from flwr.server.workflow.constant import Key  # noqa: F401  (only this test and flower_compat may)
    from flwr.simulation.run_simulation import _run_simulation

    import fl_strategies.protocol.flower_compat as compat

    assert compat.WorkflowKey is Key
    assert compat.private_run_simulation is _run_simulation
    assert compat.check_mapping_from_recordscalartype_to_scalar is (
        recorddict_compat._check_mapping_from_recordscalartype_to_scalar)
