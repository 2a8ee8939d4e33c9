"""Benchmarks write to a new folder unless ``--out`` names one: a run never rewrites the committed tables in
``simulations/benchmarks/results/`` unless asked to."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

import simulations.benchmarks as benchmarks
from simulations.benchmarks import bench_genotype, bench_row_blocks, bench_scale

COMMITTED = Path(benchmarks.__file__).parent / "results"

TINY = {
    "bench_row_blocks": (bench_row_blocks, ["--dimension", "64", "--rows", "8", "--block-mib", "0.001", "0.002",
                                            "--repeats", "1"], ["bench_row_blocks.md"]),
    "bench_scale": (bench_scale, ["--clients", "2", "--rows", "10", "--dim", "6", "--rounds", "2", "--engines",
                                  "numpy"], ["bench_scale.md", "bench_scale.csv", "bench_scale.png"]),
    "bench_genotype": (bench_genotype, ["--dimension", "64", "--sites", "16", "16", "--rounds", "1", "--rank", "1",
                                        "--iteration-rank", "2", "--methods", "sklearn-randomized"],
                       ["bench_genotype.md", "bench_genotype.csv"]),
}


def _digests() -> dict[str, str]:
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(COMMITTED.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("name", sorted(TINY))
def test_a_benchmark_without_out_writes_a_new_folder_and_no_committed_table(tmp_path, monkeypatch, name):
    module, argv, files = TINY[name]
    committed = _digests()
    monkeypatch.chdir(tmp_path)
    assert module.main(argv) == 0
    assert module.main(argv) == 0
    folders = sorted((tmp_path / benchmarks.RUNS).iterdir())
    assert len(folders) == 2 and all(f.name.startswith(f"{name}-") for f in folders)  # one new folder per run
    assert all(sorted(p.name for p in f.iterdir()) == sorted(files) for f in folders)
    assert sorted(p.name for p in tmp_path.iterdir()) == [str(benchmarks.RUNS)]  # nothing else, no results/ tree
    assert _digests() == committed


def test_out_names_the_folder_whatever_it_is(tmp_path):
    assert benchmarks.out_folder("bench_scale", tmp_path / "mine") == tmp_path / "mine"
    assert benchmarks.out_folder("bench_scale", None).parent == benchmarks.RUNS
