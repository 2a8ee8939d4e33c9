"""The UK Biobank projection's arithmetic (simulations/benchmarks/biobank_projection.py) on a made-up measurement."""

import json

import pytest

from simulations.benchmarks.biobank_projection import main, per_genotype_seconds, project

ENTRY = {"people": 1000, "variants": 2000, "rounds": 10, "rank": 4, "iteration_rank": 8, "strategy": "krylov",
         "stop_tol": 1e-6, "when": "then", "load_start": [1.0], "load_end": [2.0],
         "methods": [{"method": "fedspectral (4 sites, in-process engine)", "wall": 40.0},
                     {"method": "fedspectral + transform of every site", "wall": 44.0}],
         "site_passes": [{"peak_mb": 10.0, "before_mb": 4.0, "bed_mb": 0.5}, {"peak_mb": 12.0, "before_mb": 4.0,
                                                                              "bed_mb": 0.5}]}


def test_the_measured_shape_projects_to_its_own_run_over_parallel_sites():
    """Four sites of the measured run side by side, no overhead: the in-process run's wall over four."""
    assert per_genotype_seconds(ENTRY) == pytest.approx(40.0 / 10 / 2e6)
    row = project(ENTRY, 1000, 2000, 4, 0.0, float("inf"))
    assert row["total"] == pytest.approx(10.0) and row["rounds"] == 10 and row["people_per_site"] == 250
    assert row["bed_gb"] == pytest.approx(63 * 2000 / 1e9)
    # the largest extra of a site (7.5 MB) in units of d r float64, carried to the new shape
    assert row["site_gb"] - row["bed_gb"] == pytest.approx(7.5 * 2**20 / 1e9)


def test_sites_overhead_and_bandwidth_add_as_stated():
    one = project(ENTRY, 8000, 4000, 20, 1.5, 100.0)
    assert one["site_round"] == pytest.approx(2e-6 * 400 * 4000)
    assert one["messages"] == pytest.approx(2 * 4000 * 8 * 8 * 8 / 1e8)
    assert one["total"] == pytest.approx(10 * (one["site_round"] + 1.5 + one["messages"]))


def test_the_command_writes_the_table_and_refuses_bad_numbers(tmp_path, capsys):
    results = tmp_path / "bench_biobank.json"
    results.write_text(json.dumps([ENTRY]))
    assert main(["--results", str(results), "--out", str(tmp_path / "t.md")]) == 0
    text = (tmp_path / "t.md").read_text()
    assert "| 4 sites | 122,091 |" in text and "| 20 sites | 24,419 |" in text
    with pytest.raises(SystemExit) as info:
        main(["--results", str(results), "--bandwidth", "0"])
    assert info.value.code == 2
