"""Every shell command of the README and the guides, and the test that runs it (the registry).

``tests/test_docs.py`` collects every fenced ``bash`` block of ``README.md`` and ``docs/**/*.md`` (``docs/_incoming``
left out) and fails when a block is in no :data:`ENTRIES` entry, or an entry names a block that is gone: a command
changed in a document must be changed here too, and is then run as changed. An entry either

* **runs** its blocks (``test_docs.py::test_documented_commands_run``): as typed, by ``bash -euo pipefail``, in a
  fresh directory (or the repository's, ``cwd = "repo"``), with the environment's ``bin`` first on the ``PATH``
  (and a ``fedspectral`` command there that calls :func:`fedspectral.cli.main` when the installed environment
  predates the entry point), after its ``setup`` blocks; or
* names the test that runs them (``by``), or says why no test does (``manual``).

An entry that needs a program or an extra's module (``needs``) is skipped, naming it, where it is missing.

**The substitution table.** Where a documented command is large, the test runs it smaller. These are the only
changes made to a command (a ``setup`` writes input files a command reads, e.g. ``rows.npy``), each listed with its entry as ``(documented, run)`` and each required to occur:

* the quick start's install (``python3 -m venv .venv && .venv/bin/pip install -e . && .venv/bin/``) is left out:
  CI's ``.ci/run`` installs the environment the test runs in;
* ``num-server-rounds=N`` becomes ``num-server-rounds=2`` (a bare ``fedspectral run`` gets
  ``--run-config 'num-server-rounds=2'``);
* a comparison file becomes a copy cut to its first seed, at most 2 rounds (``num-server-rounds``), at most 4
  local iterations in all (``total-iterations``), at most 4,000 generated rows (``num-samples``) and 300 generated
  columns (``dimension``), written to
  ``$TMP`` (:func:`small_comparison`), and an ``--out`` into the repository becomes ``--out $TMP/...``;
* the genotype benchmarks run at ``--dimension 2000 --sites 60 60 60 60``;
* ``/tmp/fedspectral-site`` becomes ``$TMP/site``.

``$TMP`` is the test's temporary directory.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

__all__ = ["Block", "Entry", "ENTRIES", "documents", "bash_blocks", "small_comparison", "command_path", "missing_needs",
           "ROOT"]


@dataclass(frozen=True)
class Block:
    """One fenced ``bash`` block: the document it is in and its text, without the indentation of a list item."""

    path: str
    text: str


def documents() -> list[Path]:
    """``README.md`` and every page of ``docs/`` but the fragments waiting in ``docs/_incoming``."""
    pages = sorted(p for p in (ROOT / "docs").rglob("*.md") if "_incoming" not in p.relative_to(ROOT / "docs").parts)
    return [ROOT / "README.md", *pages]


def bash_blocks(path: Path) -> list[Block]:
    """The fenced ``bash`` blocks of ``path`` in order, each without the indentation of its fence."""
    text = path.read_text()
    found = []
    for match in re.finditer(r"^( *)```bash\n(.*?)^\1```", text, flags=re.M | re.S):
        indent = len(match.group(1))
        body = "\n".join(line[indent:] for line in match.group(2).splitlines()) + "\n"
        found.append(Block(path.relative_to(ROOT).as_posix(), body))
    return found


def small_comparison(source: str | Path, folder: Path) -> Path:
    """A copy of the comparison file ``source`` cut to its first seed, at most 2 rounds, 4 local iterations in all,
    4,000 generated rows and 300 generated columns, in ``folder`` (same name).

    Parameters
    ----------
    source : str or Path
        A comparison file (relative: to the repository).
    folder : Path
        Where the copy goes.

    Returns
    -------
    Path
        The copy.
    """
    source = ROOT / source
    meta = tomllib.loads(source.read_text())

    def cut(table: dict) -> dict:
        table = dict(table)
        for key, most in (("num-server-rounds", 2), ("total-iterations", 4), ("num-samples", 4000), ("dimension", 300)):
            if isinstance(table.get(key), int) and table[key] > most:
                table[key] = most
        return table

    meta["seeds"] = list(meta.get("seeds", [0]))[:1]
    meta["defaults"] = cut(meta.get("defaults", {}))
    meta["runs"] = [cut(run) for run in meta["runs"]]
    copy = folder / source.name
    copy.write_text(_toml(meta))
    return copy


def _toml(meta: dict) -> str:
    """A comparison as TOML (top-level values, ``[defaults]``, ``[[runs]]``: the shapes a comparison has)."""
    def value(v):
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, str):
            return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
        if isinstance(v, list):
            return "[" + ", ".join(value(x) for x in v) + "]"
        return repr(v)

    lines = [f"{k} = {value(v)}" for k, v in meta.items() if k not in ("defaults", "runs")]
    lines += ["", "[defaults]"] + [f"{k} = {value(v)}" for k, v in meta["defaults"].items()]
    for run in meta["runs"]:
        lines += ["", "[[runs]]"] + [f"{k} = {value(v)}" for k, v in run.items()]
    return "\n".join(lines) + "\n"


def missing_needs(needs: tuple[str, ...]) -> list[str]:
    """The programs (not on the ``PATH``) and modules (``module:<name>``, not importable) of ``needs`` missing here."""
    import importlib.util

    return [need for need in needs if (importlib.util.find_spec(need[len("module:"):]) is None
                                       if need.startswith("module:") else shutil.which(need) is None)]


def command_path(tmp_path: Path) -> str:
    """The environment's ``bin`` for the front of ``PATH``, with a ``fedspectral`` command in ``tmp_path/shim`` before it
    where the installed environment predates the entry point (it calls :func:`fedspectral.cli.main`, as the entry
    point does)."""
    bin_dir = str(Path(sys.executable).parent)
    if shutil.which("fedspectral", path=bin_dir) is None:
        shim = tmp_path / "shim"
        shim.mkdir(exist_ok=True)
        script = shim / "fedspectral"
        script.write_text(f"#!/bin/sh\nexec '{sys.executable}' -c 'import sys; sys.argv[0] = \"fedspectral\"; "
                          "from fedspectral.cli import main; sys.exit(main())' \"$@\"\n")
        script.chmod(0o755)
        bin_dir = f"{shim}{os.pathsep}{bin_dir}"
    return bin_dir


@dataclass(frozen=True)
class Entry:
    """Blocks of the documents and how a test runs them (module docstring)."""

    name: str
    blocks: tuple[str, ...]
    subs: tuple[tuple[str, str], ...] = ()
    setup: tuple[str, ...] = ()
    cwd: str = "tmp"
    marks: tuple[str, ...] = ()
    expect: tuple[str, ...] = ()
    """Files the commands must have written (relative to the directory they ran in, ``$TMP`` substituted)."""
    comparisons: tuple[str, ...] = ()
    """Comparison files replaced by :func:`small_comparison` copies in ``$TMP``."""
    by: str = ""
    manual: str = ""
    needs: tuple[str, ...] = ()
    """Programs on the ``PATH`` (``plink2``) and Python modules (``module:msprime``, from an extra) the commands
    need: the test is skipped, naming them, where one is missing."""


def _guide_blocks() -> tuple[str, ...]:
    from test_deploy_devices import guide_blocks

    return tuple(guide_blocks())


QUICK_START = "python3 -m venv .venv && .venv/bin/pip install -e . && .venv/bin/fedspectral run\n"
TEST_COMMAND = "python3 -m venv .venv && .venv/bin/pip install -e '.[test]' && .venv/bin/python -m pytest\n"
TWO_ROUNDS = (r"re:num-server-rounds=\d+", "num-server-rounds=2")
MAKE_DATA = ('mkdir -p mydata && python -c "\nimport numpy as np; from sklearn.datasets import load_wine\n'
             "X = load_wine().data; parts = np.array_split(np.random.default_rng(0).permutation(len(X)), [50, 110])\n"
             "[np.save(f'mydata/partition_{i}.npy', X[p]) for i, p in enumerate(parts)]\"\n")
OWN_RUN = ("fedspectral run --run-config 'dataset=\"mydata\" num-clients=3 center=true rank=3 iteration-rank=4 "
           "num-server-rounds=30 results-dir=\"out\"'\n")
OWN_DEPLOY = ("fedspectral deploy --data-dir mydata --out deployment --run-config 'dataset=\"nodes\" num-clients=3 "
              "center=true rank=3 iteration-rank=4 num-server-rounds=10'\n")
FEDPOWER_MODEL1 = ("fedspectral compare simulations/experiments/fedpower/fedpower_model1.toml "
                   "--out results/fedpower_model1\n")
KRYLOV = ("fedspectral compare simulations/experiments/krylov/krylov_table4.toml --out "
          "simulations/experiments/krylov/results/krylov_table4\n"
          "python -m simulations.experiments.krylov.genotypes   # writes the genotypes (data/, not committed)\n"
          "fedspectral compare simulations/experiments/krylov/krylov_genotypes.toml --out "
          "simulations/experiments/krylov/results/krylov_genotypes\n")
KRYLOV_SECURE = ("fedspectral compare simulations/experiments/krylov/krylov_secure_table4.toml --out "
                 "simulations/experiments/krylov/results/krylov_secure_table4\n"
                 "fedspectral compare simulations/experiments/krylov/krylov_secure_genotypes.toml --out "
                 "simulations/experiments/krylov/results/krylov_secure_genotypes\n")
VARIANT_QC = ("fedspectral run --run-config 'dataset=\"sites\" num-clients=4 rank=3 iteration-rank=5 num-server-rounds=30 "
              "center=true scale=\"hwe\" row-normalize=false maf-min=0.05 geno-max=0.05 results-dir=\"out\"'\n")
QC_SITES = ("python -c \"\nimport numpy as np, os, bed_reader; rng = np.random.default_rng(0); os.makedirs('sites')\n"
            "p = rng.uniform(0.01, 0.5, 1500); p[:150] = 0.02   # a tenth of the variants rare\n"
            "for i in range(4):\n"
            "    G = rng.binomial(2, p, size=(55, 1500)).astype(np.float32)\n"
            "    G[rng.random(G.shape) < 0.01] = np.nan; G[:, 150:300][rng.random((55, 150)) < 0.1] = np.nan\n"
            "    bed_reader.to_bed(f'sites/partition_{i}.bed', G)\"\n")
PLINK2_SCORE = ("plink2 --bfile site --read-freq pca.afreq --score pca.eigenvec.allele 1 4 header-read "
                "no-mean-imputation \\\n  variance-standardize --score-col-nums 5-<k+4> --out site\n")
ANCESTRY_DATA = "python -m simulations.benchmarks.ancestry_trial --write-sites sites --people 400 --variants 12000\n"
ANCESTRY_KING = ("for i in 0 1 2 3; do\n"
                 "  plink2 --bfile sites/partition_$i --king-cutoff 0.0884 --out sites/partition_$i\n"
                 "  mv sites/partition_$i.king.cutoff.in.id sites/partition_$i.keep\n"
                 "done\n")
ANCESTRY_KEYS = ('strategy="krylov" rank=4 iteration-rank=8 num-server-rounds=30 stop-tol=1e-6 center=true scale="hwe" '
                 'row-normalize=false maf-min=0.01 geno-max=0.1 indep-pairwise="50 5 0.2"')
ANCESTRY_RUN = f"fedspectral run --run-config 'dataset=\"sites\" num-clients=4 {ANCESTRY_KEYS} results-dir=\"out\"'\n"
ANCESTRY_DEPLOY = ("fedspectral deploy --data-dir sites --out deployment --run-config 'dataset=\"nodes\" "
                   f"num-clients=4 {ANCESTRY_KEYS}'\n")
ANCESTRY_TRANSFORM = ("for i in 0 1 2 3; do\n"
                      "  fedspectral transform --model out/pca.npz --data sites/partition_$i.bed "
                      "--out site$i.eigenvec\n"
                      "done\n")
ANCESTRY_SCORE = ("plink2 --bfile sites/partition_0 --read-freq out/pca.afreq --score out/pca.eigenvec.allele 1 4 "
                  "header-read \\\n  no-mean-imputation variance-standardize --score-col-nums 5-8 --out site0\n"
                  "python -c \"\nimport pandas as pd\n"
                  "ours, plink2 = pd.read_csv('site0.eigenvec', sep='\\t'), pd.read_csv('site0.sscore', sep='\\t')\n"
                  "print('largest difference:', abs(ours[['PC1', 'PC2']].to_numpy() - "
                  "plink2[['PC1_AVG', 'PC2_AVG']].to_numpy()).max())\"\n")
ANCESTRY_NEEDS = ("plink2", "module:msprime", "module:stdpopsim")
KING_CUTOFF = ("plink2 --bfile partition_0 --king-cutoff 0.0884 --out partition_0\n"
               "mv partition_0.king.cutoff.in.id partition_0.keep\n")

ENTRIES: tuple[Entry, ...] = (
    Entry("quick start: the main job", (QUICK_START,), marks=("ray",),
          subs=(("python3 -m venv .venv && .venv/bin/pip install -e . && .venv/bin/", ""),
                ("fedspectral run\n", "fedspectral run --run-config 'num-server-rounds=2'\n"))),
    Entry("quick start: the tests", (TEST_COMMAND,), by=".ci/run (CI runs the README's test command; "
          "test_docs.py::test_ci_runs_the_readmes_test_command)"),
    Entry("the main job (simulation guide)", ("fedspectral run\n",),
          by="tests/test_docs.py::test_documented_commands_run[quick start: the main job] (the same command, "
             "after the install)"),
    Entry("README: block Krylov on digits",
          ("fedspectral run --run-config 'strategy=\"krylov\" dataset=\"digits\" rank=3 iteration-rank=3 "
           "num-server-rounds=20'\n",), marks=("ray",), subs=(TWO_ROUNDS,)),
    Entry("simulation guide: overrides",
          ("fedspectral run --run-config 'local-steps=4 epsilon=10.0 row-normalize=true clients-per-round=6'\n"
           "fedspectral run --run-config 'dataset=\"digits\" partitioner=\"label\" rank=3 iteration-rank=3'\n",),
          marks=("ray",), subs=(("'\n", " num-server-rounds=2'\n"),)),
    Entry("plain flwr run", (
        "export PATH=$PWD/.venv/bin:$PATH FLWR_HOME=$PWD/.flwr \\\n"
        "       FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1 FLWR_TELEMETRY_ENABLED=0 FLWR_DISABLE_UPDATE_CHECK=1\n"
        "flwr run . --stream --federation-config num-supernodes=10\n",),
        by="tests/test_engines.py::test_plain_flwr_run_in_a_fresh_copy_finishes_and_says_so"),
    Entry("comparing strategies: FedPower's Model I", (FEDPOWER_MODEL1,), cwd="repo", marks=("slow",),
          comparisons=("simulations/experiments/fedpower/fedpower_model1.toml",),
          subs=(("--out results/fedpower_model1", "--out $TMP/fedpower_model1"),),
          expect=("$TMP/fedpower_model1/results.csv", "$TMP/fedpower_model1/summary.md")),
    Entry("block Krylov's tables", (KRYLOV,), cwd="repo", marks=("slow",),
          comparisons=("simulations/experiments/krylov/krylov_table4.toml",
                       "simulations/experiments/krylov/krylov_genotypes.toml"),
          subs=(("--out simulations/experiments/krylov/results/krylov_table4", "--out $TMP/krylov_table4"),
                ("--out simulations/experiments/krylov/results/krylov_genotypes", "--out $TMP/krylov_genotypes")),
          expect=("$TMP/krylov_table4/summary.md", "$TMP/krylov_genotypes/summary.md")),
    Entry("block Krylov with SecAgg+", (KRYLOV_SECURE,), cwd="repo", marks=("slow",),
          setup=("python -m simulations.experiments.krylov.genotypes\n",),
          comparisons=("simulations/experiments/krylov/krylov_secure_table4.toml",
                       "simulations/experiments/krylov/krylov_secure_genotypes.toml"),
          subs=(("--out simulations/experiments/krylov/results/krylov_secure_table4", "--out $TMP/krylov_secure_table4"),
                ("--out simulations/experiments/krylov/results/krylov_secure_genotypes",
                 "--out $TMP/krylov_secure_genotypes")),
          expect=("$TMP/krylov_secure_table4/summary.md", "$TMP/krylov_secure_genotypes/summary.md")),
    Entry("genotypes: variant QC", (VARIANT_QC,), setup=(QC_SITES,), marks=("ray",), subs=(TWO_ROUNDS,),
          expect=("out/pca.npz",)),
    Entry("own data: files, a run, the scores",
          (MAKE_DATA, OWN_RUN, "fedspectral transform --model out/pca.npz --data mydata/partition_0.npy "
           "--out scores_0.npy\n", "fedspectral transform --model out/pca.npz --data rows.npy --out scores.npy\n"),
          setup=("python -c \"import numpy as np; np.save('rows.npy', np.random.default_rng(1).normal(size=(5, 13)))\"\n",),
          marks=("ray",), subs=(TWO_ROUNDS,),
          expect=("out/pca.npz", "scores_0.npy", "scores.npy")),
    Entry("own data on SuperNodes", (OWN_DEPLOY,), setup=(MAKE_DATA,), marks=("deploy",), subs=(TWO_ROUNDS,),
          expect=("deployment/pca.npz",)),
    Entry("the scripted deployment",
          ("fedspectral deploy --run-config 'num-clients=3 clients-per-round=2 num-server-rounds=5' "
           "--out results/deployment\n",), marks=("deploy",),
          subs=(TWO_ROUNDS,), expect=("results/deployment/rounds.csv",)),
    Entry("the device guide", _guide_blocks(),
          by="tests/test_deploy_devices.py::test_the_device_guide_as_typed_survives_a_superlink_restart"),
    Entry("genotypes: .bed against int8",
          ("python -m simulations.benchmarks.bench_genotype_bed --dimension 20000 --sites 500 500 500 500 "
           "--missing 0.01\n",), marks=("slow",),
          subs=(("--dimension 20000 --sites 500 500 500 500", "--dimension 2000 --sites 60 60 60 60"),)),
    Entry("genotypes: plink2 applies the weights", (PLINK2_SCORE,),
          by="tests/test_keep.py::test_everyone_is_scored_and_plink2_projects_the_people_left_out_alike "
             "(fl_strategies.files.plink_outputs.allele_score_command; test_docs.py::"
             "test_the_documented_plink2_command_is_the_one_the_tests_run)"),
    Entry("genotypes: a site's relatives left out of the fit", (KING_CUTOFF,),
          by="tests/test_keep.py::test_the_documented_king_cutoff_writes_the_sites_keep"),
    Entry("ancestry guide: the sites, their .keep, the run, each site's .eigenvec, plink2's projection",
          (ANCESTRY_DATA, ANCESTRY_KING, ANCESTRY_RUN, ANCESTRY_TRANSFORM, ANCESTRY_SCORE), marks=("ray", "plink2"),
          needs=ANCESTRY_NEEDS,
          expect=("out/pca.npz", "out/prune.in", "out/prune.out", "out/pca.eigenvec.allele", "sites/partition_3.keep",
                  "site3.eigenvec", "site3.eigenvec.png", "site0.sscore")),
    Entry("ancestry guide: on SuperNodes", (ANCESTRY_DEPLOY,), setup=(ANCESTRY_DATA, ANCESTRY_KING),
          marks=("deploy", "plink2"), needs=ANCESTRY_NEEDS, subs=(TWO_ROUNDS,),
          expect=("deployment/pca.npz", "deployment/prune.in")),
    Entry("genotypes: against scikit-learn",
          ("python -m simulations.benchmarks.bench_genotype --dimension 100000 --sites 500 500 500 500\n",),
          marks=("slow",),
          subs=(("--dimension 100000 --sites 500 500 500 500", "--dimension 2000 --sites 60 60 60 60"),)),
    Entry("the site of the guides", ("mkdocs build --strict --site-dir /tmp/fedspectral-site\n",), cwd="repo",
          subs=(("/tmp/fedspectral-site", "$TMP/site"),), expect=("$TMP/site/index.html",)),
    Entry("mutation testing",
          ("pip install -e '.[mutation]'\n"
           "python tests/mutation/run.py fl_strategies/privacy/noise.py   # one module; no argument: every module\n",),
          manual="a module takes minutes to over an hour and needs the mutation extra (mutmut 2); "
                 "tests/test_mutation_runner.py tests the runner's test command and its tally"),
)
