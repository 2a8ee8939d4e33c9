"""The README and the guides of docs/: the site builds, every link resolves, every shell command is run.

The commands and the test that runs each are listed in ``tests/doc_commands.py`` (the registry, with the
substitution table that runs a large command smaller).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from doc_commands import (ENTRIES, ROOT, TEST_COMMAND, bash_blocks, command_path, documents, missing_needs,
                          small_comparison)

LINK = re.compile(r"\]\(([^)\s]+)\)")
FENCE = re.compile(r"^ *```.*?^ *```", flags=re.M | re.S)


def github_anchor(heading: str) -> str:
    """The anchor GitHub (and the site's ``toc`` slugify) gives a heading: lower case, punctuation dropped."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """The anchors of the headings of a Markdown file (outside code blocks)."""
    text = FENCE.sub("", path.read_text())
    return {github_anchor(m.group(1)) for m in re.finditer(r"^#{1,6} +(.+?) *$", text, flags=re.M)}


# -- the registry covers every command ---------------------------------------------------------------------------


def test_every_documented_command_is_in_the_registry_and_every_entry_in_a_document():
    found = {block.text: block.path for path in documents() for block in bash_blocks(path)}
    listed = {text for entry in ENTRIES for text in entry.blocks}
    missing = {text: path for text, path in found.items() if text not in listed}
    assert not missing, ("commands in the documents that tests/doc_commands.py does not list (add an entry, or "
                         f"update the one whose block changed): {missing}")
    assert not listed - set(found), f"registry entries whose block is in no document: {listed - set(found)}"
    for entry in ENTRIES:
        assert sum(map(bool, (entry.by, entry.manual))) <= 1, entry.name
        script = "".join(entry.blocks)
        for old, _new in entry.subs:
            present = re.search(old[3:], script) if old.startswith("re:") else old in script
            assert present, f"{entry.name}: the substitution of {old!r} finds nothing to replace"
        for source in entry.comparisons:
            assert source in script and (ROOT / source).is_file(), (entry.name, source)
        if entry.by.startswith("tests/"):
            file, _, test = entry.by.partition("::")
            test, _, case = test.partition("[")
            test = test.split(" ")[0]
            assert f"def {test}(" in (ROOT / file).read_text(), f"{entry.name}: {entry.by} does not exist"
            if case:  # another entry of this registry, which runs the same command
                other = case.partition("]")[0]
                assert other in {e.name for e in RUN}, f"{entry.name}: no entry {other!r} runs commands"


def test_only_the_mutation_run_is_left_to_a_person():
    """A block no test runs says why; only the mutation run (minutes to an hour a module) is such a block."""
    assert [e.name for e in ENTRIES if e.manual] == ["mutation testing"]


def test_an_entry_needing_a_missing_program_or_module_names_it():
    """``needs``: a program not on the PATH and a module not installed are named (the entry is then skipped); those
    present are not."""
    assert missing_needs(("bash", "no-such-program-x", "module:os", "module:no_such_module_x")) == [
        "no-such-program-x", "module:no_such_module_x"]
    assert {need for entry in ENTRIES for need in entry.needs} >= {"plink2", "module:msprime"}


def test_ci_runs_the_readmes_test_command():
    readme = [b.text for b in bash_blocks(ROOT / "README.md")]
    assert TEST_COMMAND in readme
    assert TEST_COMMAND.strip() in (ROOT / ".ci" / "run").read_text().splitlines()


def test_the_documented_plink2_command_is_the_one_the_tests_run():
    """docs/genotypes.md's ``plink2 --score`` is ``allele_score_command``, which test_keep.py runs."""
    from fl_strategies.files.plink_outputs import allele_score_command

    (block,) = [b.text for b in bash_blocks(ROOT / "docs" / "genotypes.md") if "--score" in b.text]
    typed = " ".join(block.replace("\\\n", " ").split())
    assert typed.replace("<k+4>", "7") == " ".join(allele_score_command("site", "pca", 3, "site"))


# -- links and the site ------------------------------------------------------------------------------------------


def test_every_relative_link_names_a_file_and_every_anchor_a_heading():
    """README.md and docs/: a link to a file of the repository resolves, and ``#anchor`` is one of its headings."""
    broken = []
    for path in documents():
        text = FENCE.sub("", path.read_text())
        for target in LINK.findall(text):
            if re.match(r"[a-z]+:", target):  # https:, mailto:
                continue
            file, _, anchor = target.partition("#")
            dest = (path.parent / file).resolve() if file else path
            if not dest.exists() or ROOT not in dest.parents and dest != ROOT:
                broken.append(f"{path.relative_to(ROOT)}: {target} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                broken.append(f"{path.relative_to(ROOT)}: {target} (no heading with that anchor)")
    assert not broken, "\n".join(broken)


def test_the_anchor_rule_is_githubs():
    assert github_anchor("Private PCA: `covariance` with `epsilon`") == "private-pca-covariance-with-epsilon"
    assert github_anchor("Plain `flwr run .`") == "plain-flwr-run-"
    assert github_anchor("Against scikit-learn at d = 100,000") == "against-scikit-learn-at-d--100000"


def test_the_site_builds_without_a_warning(tmp_path):
    """``mkdocs build --strict``: every page in the navigation, every link between pages and anchor resolves."""
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                          cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, NO_MKDOCS_2_WARNING="1"))
    log = done.stdout + done.stderr
    assert done.returncode == 0 and "WARNING" not in log, log[-4000:]
    assert (tmp_path / "site" / "reference" / "run-config" / "index.html").is_file()


def _build_with(tmp_path: Path, planted: str) -> subprocess.CompletedProcess:
    """``mkdocs build --strict`` of a copy of docs/ and mkdocs.yml whose first page ends with ``planted``."""
    copy = tmp_path / "repo"
    shutil.copytree(ROOT / "docs", copy / "docs", ignore=shutil.ignore_patterns("_incoming"))
    shutil.copy(ROOT / "mkdocs.yml", copy / "mkdocs.yml")
    page = copy / "docs" / "index.md"
    page.write_text(page.read_text() + f"\n{planted}\n")
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                          cwd=copy, capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, NO_MKDOCS_2_WARNING="1"))


def test_a_broken_anchor_fails_the_site(tmp_path):
    """The strict build is not vacuous: a link to a heading that does not exist stops it."""
    done = _build_with(tmp_path, "See [nothing](simulation.md#no-such-heading).")
    assert done.returncode != 0 and "no-such-heading" in done.stdout + done.stderr


@pytest.mark.parametrize("target", ["../README.md", "../simulations/benchmarks/README.md#what-the-engines-cost",
                                    "../simulations/experiments/fedpower/fedpower_model1.toml",
                                    "../simulations/experiments/", "/simulations/benchmarks/README.md"])
def test_a_link_the_site_cannot_follow_fails_the_site(tmp_path, target):
    """A link out of docs/ (a file of the checkout, which the site does not hold: the README, a committed result, a
    folder) or an absolute one is a dead link on the built site: the strict build stops, naming it."""
    done = _build_with(tmp_path, f"See [there]({target}).")
    log = done.stdout + done.stderr
    assert done.returncode != 0 and target in log and "WARNING" in log, log[-2000:]


def test_the_guides_link_only_to_pages_of_the_site():
    """Every relative link of docs/ stays in docs/ and names a page (what the built site can follow); a file of the
    checkout outside docs/ is named as code text (`simulations/benchmarks/README.md`), not linked."""
    outside = []
    for path in documents()[1:]:
        for target in LINK.findall(FENCE.sub("", path.read_text())):
            file = target.partition("#")[0]
            if re.match(r"[a-z]+:", target) or not file:
                continue
            dest = (path.parent / file).resolve()
            if ROOT / "docs" not in dest.parents or dest.suffix != ".md":
                outside.append(f"{path.relative_to(ROOT)}: {target}")
    assert not outside, "links the site cannot follow:\n" + "\n".join(outside)


def test_the_sites_first_page_has_the_readmes_installation():
    """docs/index.md, the site's first page, installs as the README does: the same two commands, the same needs."""
    import tomllib

    from doc_commands import QUICK_START

    for path in (ROOT / "README.md", ROOT / "docs" / "index.md"):
        blocks = [b.text for b in bash_blocks(path)]
        assert blocks[:2] == [QUICK_START, TEST_COMMAND], path
        assert "Python 3.11+ (only the package index is needed online)" in path.read_text(), path
    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    assert requires == ">=3.11"


PATH_TEXT = re.compile(r"`((?:simulations|fl_strategies|client_app|server_app|fedspectral|tests|docs)/[\w./-]+)`")


def test_every_file_of_the_checkout_the_guides_name_exists():
    """A file the site cannot link to is named as code text (`simulations/benchmarks/README.md`): it exists."""
    missing = []
    for path in documents()[1:]:
        for name in PATH_TEXT.findall(FENCE.sub("", path.read_text())):
            if not (ROOT / name.rstrip("/")).exists():
                missing.append(f"{path.relative_to(ROOT)}: {name}")
    assert not missing, "named files that are not in the checkout:\n" + "\n".join(missing)


# -- the commands, run -------------------------------------------------------------------------------------------


def _script(entry, tmp_path: Path) -> str:
    text = "".join(entry.setup) + "".join(entry.blocks)
    for old, new in entry.subs:
        text = re.sub(old[3:], new, text) if old.startswith("re:") else text.replace(old, new)
    for source in entry.comparisons:
        text = text.replace(source, str(small_comparison(source, tmp_path)))
    return text.replace("$TMP", str(tmp_path))


RUN = [e for e in ENTRIES if not e.by and not e.manual]


@pytest.mark.parametrize("entry", [pytest.param(e, id=e.name, marks=[getattr(pytest.mark, m) for m in e.marks])
                                   for e in RUN])
@pytest.mark.timeout(900)
def test_documented_commands_run(entry, tmp_path):
    """The entry's blocks, as typed (but for the substitution table of tests/doc_commands.py), succeed."""
    missing = missing_needs(entry.needs)
    if missing:
        pytest.skip(f"{entry.name} needs {', '.join(missing)}")
    work = tmp_path / "work"
    work.mkdir()
    cwd = ROOT if entry.cwd == "repo" else work
    env = dict(os.environ, PATH=command_path(tmp_path) + os.pathsep + os.environ.get("PATH", ""),
               NO_MKDOCS_2_WARNING="1", MPLBACKEND="Agg")
    script = _script(entry, tmp_path)
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=850)
    assert done.returncode == 0, f"$ {script}\n{(done.stdout + done.stderr)[-4000:]}"
    for name in entry.expect:
        assert (cwd / name.replace("$TMP", str(tmp_path))).exists(), f"{entry.name}: {name} was not written"
