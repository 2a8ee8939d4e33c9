"""What a fresh install promises: the README's versions are the installed ones, compare runs after `pip install -e .`."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions, version
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _requirement_name(requirement: str) -> str:
    return re.split(r"[\[<>=!~; ]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def test_the_flower_version_the_readme_names_is_the_installed_one():
    """Every Flower version the README and the guides name (``Flower 1.42``, ``flwr 1.41``) is the installed one."""
    text = "\n".join(path.read_text() for path in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))])
    named = set(re.findall(r"\b(?:Flower|flwr) (\d+\.\d+(?:\.\d+)?)\b", text))
    installed = version("flwr")
    assert named, "the README names no Flower version"
    for v in named:
        assert installed == v or installed.startswith(v + "."), f"README names Flower {v}, installed {installed}"


def test_compare_imports_only_main_dependencies():
    """Every third-party module the compare tool imports comes with `pip install -e .` (no extra)."""
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    main = {_requirement_name(r) for r in meta["dependencies"]}
    modules = set()
    for path in (ROOT / "simulations" / "compare").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                modules.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules.add(node.module.split(".")[0])
    own = {"fl_strategies", "client_app", "server_app", "simulations", "fedspectral"}
    third_party = modules - own - set(sys.stdlib_module_names)
    assert {"matplotlib", "tqdm"} <= third_party  # the plots and the progress bar
    dists = packages_distributions()
    for module in sorted(third_party):
        names = {d.lower().replace("_", "-") for d in dists.get(module, [module])}
        assert names & main, f"simulations.compare imports {module} ({names}), not a main dependency"
