"""The compare CLI end to end on the in-process engine, and its refusals of malformed files."""

import numpy as np
import pandas as pd
import pytest

from fl_strategies.settings.config import validate_run_config
from fl_strategies.kernels.linalg import subspace_distance
from simulations.compare import ComparisonError, load_comparison, main
from simulations.compare.cli import estimate_stem
from simulations.engines import fused_run_config
from simulations.data.federated_data import reference

SMALL = """
title = "test"
seeds = [0, 1]
thresholds = [1e-2, 1e-6]

[defaults]
num-clients = 5
num-samples = 2000
dimension = 20
rank = 2
iteration-rank = 3

[[runs]]
name = "p=1"
strategy = "fedpower"
panel = "A"
local-steps = 1
num-server-rounds = 8

[[runs]]
name = "p=3, K=2"
strategy = "fedpower"
panel = "B"
local-steps = 3
clients-per-round = 2
num-server-rounds = 5
seeds = [4]

[[runs]]
name = "power"
strategy = "power"
panel = "A"
num-server-rounds = 8
"""


def test_compare_writes_results_summary_plot_and_estimates(tmp_path, capsys):
    cfg_file = tmp_path / "cmp.toml"
    cfg_file.write_text(SMALL)
    out = tmp_path / "out"
    assert main([str(cfg_file), "--out", str(out)]) == 0
    df = pd.read_csv(out / "results.csv")
    for col in ("run", "strategy", "seed", "round", "subspace_distance", "bytes_up", "bytes_down",
                "participants", "epsilon_spent", "wall_time"):
        assert col in df.columns
    assert sorted(df.groupby(["run", "seed"]).size().to_dict().items()) == [
        (("p=1", 0), 9), (("p=1", 1), 9), (("p=3, K=2", 4), 6), (("power", 0), 9), (("power", 1), 9)]
    assert (df.loc[df["round"] > 0, "bytes_up"] > 0).all()
    # p = 1 and the power baseline are the same algorithm here: identical numbers
    a = df[df.run == "p=1"].subspace_distance.to_numpy()
    b = df[df.run == "power"].subspace_distance.to_numpy()
    np.testing.assert_array_equal(a, b)
    summary = (out / "summary.md").read_text()
    assert "| p=3, K=2 |" in summary and "rounds to 1e-06" in summary
    png = out / "subspace_distance.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # each saved estimate reproduces its final row against an independent reference
    for (run, seed), rows in df.groupby(["run", "seed"]):
        Z = np.load(out / "estimates" / f"{estimate_stem(run, seed)}.npy")
        cfg = validate_run_config(fused_run_config({"num-clients": 5, "num-samples": 2000, "dimension": 20,
                                                    "rank": 2, "iteration-rank": 3}))
        U = reference(cfg).vectors[:, :2]
        assert subspace_distance(Z, U) == pytest.approx(rows.subspace_distance.iloc[-1], abs=1e-12)
    assert "p=3, K=2" in capsys.readouterr().out


@pytest.mark.parametrize("text, fragment", [
    ('[[runs]]\nname = "a"\nstrategy = "fedpower"\nlocal-step = 2\n', ":4: run 'a': unknown key 'local-step'. "
     "Did you mean 'local-steps'?"),
    ('[defaults]\nrank = 3\nitration-rank = 2\n\n[[runs]]\nname = "a"\nstrategy = "fedpower"\n',
     ":3: unknown run-config key 'itration-rank' in [defaults]. Did you mean 'iteration-rank'?"),
    ('[[runs]]\nname = "a"\nstrategy = "fedpower"\n\n[[runs]]\nname = "b"\nstrategy = "fedpower"\nepsilon = -2.0\n',
     ":8: run 'b': epsilon must be a finite number >= 0"),
    ('[[runs]]\nname = "a"\nstrategy = "fedpower"\n[[runs]]\nname = "a"\nstrategy = "power"\n',
     ":5: duplicate run name 'a'"),
    ('[[runs]]\nname = "a"\n', ":1: run #1 has no 'strategy'"),
    ('title = "x"\n', "defines no [[runs]] table"),
    ('[[runs]]\nname = "a"\nstrategy = fedpower\n', "not valid TOML"),
    ('rank = 3\n[[runs]]\nname = "a"\nstrategy = "fedpower"\n', ":1: unknown top-level key 'rank'"),
    # a misnamed table is offered the tables, not a run-config key of a similar spelling ('comm-ratio')
    ('[common]\nrank = 3\n[[runs]]\nname = "a"\nstrategy = "fedpower"\n',
     ":1: unknown top-level key 'common'. The tables are [defaults] and [[runs]]."),
    ('[default]\nrank = 3\n[[runs]]\nname = "a"\nstrategy = "fedpower"\n',
     ":1: unknown top-level key 'default'. Did you mean 'defaults'?"),
    ('[[run]]\nname = "a"\nstrategy = "fedpower"\n', ":1: unknown top-level key 'run'. Did you mean 'runs'?"),
    ('[[runs]]\nname = "a"\nstrategy = "fedpower"\nseeds = [1.5]\n', ":4: run 'a': seeds must be"),
])
def test_malformed_comparison_files_are_refused_with_a_line_number(tmp_path, text, fragment):
    f = tmp_path / "bad.toml"
    f.write_text(text)
    with pytest.raises(ComparisonError) as info:
        load_comparison(f)
    assert fragment in str(info.value)
    assert main([str(f), "--out", str(tmp_path / "o")]) == 2
    assert not (tmp_path / "o" / "results.csv").exists()


def test_shipped_configs_are_valid():
    from simulations.engines import APP_DIR

    sweeps = {"fedlrgd_crossover.toml"}  # the crossover script's own sweep file, not a comparison
    files = [f for f in sorted((APP_DIR / "simulations" / "experiments").glob("*/*.toml")) if f.name not in sweeps]
    assert len(files) == 15
    for f in files:
        meta, jobs = load_comparison(f)
        assert jobs and meta["title"]
