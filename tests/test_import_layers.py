"""The layers of ``fl_strategies`` keep to their imports, at the top of a module or inside a function.

* only the protocol layer (``fl_strategies/protocol/``) reaches Flower;
* the kernels (``fl_strategies/kernels/``) stay plain numpy: no Flower and no run-config settings, even through
  the fl_strategies modules they import;
* the clients (``client_app``) call the kernels, never the server strategies (``fl_strategies.protocol.strategies``).
"""

import ast
from pathlib import Path

import fl_strategies

PACKAGE = Path(fl_strategies.__file__).resolve().parent
SETTINGS = ("fl_strategies.settings",)


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> set[str]:
    """Every module ``path`` imports, at the top or inside a function, relative imports resolved."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")
            if node.level:
                base = base[:len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module
            found.add(target)
            found.update(f"{target}.{alias.name}" for alias in node.names)  # ``from . import kernels``
    return found


MODULES = {module_name(p): p for p in PACKAGE.rglob("*.py")}
CLIENTS = {module_name(p): p for p in (PACKAGE.parent / "client_app").rglob("*.py")}


def is_flower(module: str) -> bool:
    return module == "flwr" or module.startswith("flwr.")


def reached_from(start: str) -> set[str]:
    """The modules ``start`` imports, directly or through the fl_strategies modules it imports."""
    seen, todo = set(), [start]
    while todo:
        current = todo.pop()
        for target in imports(MODULES[current]):
            if target in seen:
                continue
            seen.add(target)
            if target in MODULES:
                todo.append(target)
    return seen


def test_the_walk_sees_the_imports_it_must_refuse():
    assert "flwr.common" in reached_from("fl_strategies.protocol.round_exchange")  # a protocol module: Flower
    assert "fl_strategies.settings.registry" in reached_from("fl_strategies.settings.config")


def test_only_the_protocol_layer_reaches_flower():
    outside = [name for name in MODULES if not name.startswith("fl_strategies.protocol")]
    assert len(outside) >= 30  # kernels, privacy, settings, files
    assert [name for name in outside if any(map(is_flower, reached_from(name)))] == []


def test_kernels_import_neither_flower_nor_the_settings():
    kernels = [name for name in MODULES if name.startswith("fl_strategies.kernels")]
    assert len(kernels) >= 12  # the package and rows, products, power, faps_local, linalg, mf, losses, ...
    for name in kernels:
        reached = reached_from(name)
        assert not [m for m in reached if is_flower(m)], name
        assert not [m for m in reached if m.startswith(SETTINGS)], name


def test_clients_call_the_kernels_not_the_server_strategies():
    assert len(CLIENTS) >= 8
    for name, path in CLIENTS.items():
        assert not [m for m in imports(path) if m.startswith("fl_strategies.protocol.strategies")], name


def test_no_circle_between_the_settings_and_participation_nor_datasets_and_erm_data():
    from fl_strategies.settings import config, errors, participation

    repo = PACKAGE.parent
    # neither at the top nor late
    assert "fl_strategies.settings.config" not in imports(PACKAGE / "settings" / "participation.py")
    assert "fl_strategies.settings.participation" in imports(PACKAGE / "settings" / "config.py")
    datasets = imports(repo / "simulations" / "data" / "datasets.py")
    assert not [m for m in datasets if m.startswith("simulations.data.erm_data")]
    assert "simulations.data.datasets" in imports(repo / "simulations" / "data" / "erm_data.py")
    assert config.ConfigError is errors.ConfigError is participation.ConfigError  # one class, caught as before
