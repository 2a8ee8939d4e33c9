"""Comparison files that never lose a result: every bad file is one line before anything runs,
every run keeps its own files, one process per --out, and a failed or killed re-run leaves the last complete
results as they were."""

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pandas as pd
import pytest

from simulations.compare import ComparisonError, load_comparison, main
from simulations.compare import cli
from simulations.compare.cli import MAX_SEEDS, OutputDir, estimate_stem
from simulations.compare.report import summarize
from simulations.engines import APP_DIR

RUN = '[[runs]]\nname = "a"\nstrategy = "power"\n'
SMALL = """
seeds = [0, 1]
[defaults]
num-clients = 3
num-samples = 300
dimension = 8
rank = 2
iteration-rank = 2
num-server-rounds = {rounds}
"""


def _refused(tmp_path, capsys, text, fragment, line=None, extra=()):
    """The file is refused in one line naming the file (and line), exit 2, and nothing is written."""
    f = tmp_path / "bad.toml"
    f.write_text(text)
    out = tmp_path / "o"
    start = time.monotonic()
    assert main([str(f), "--out", str(out), *extra]) == 2
    assert time.monotonic() - start < 10
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith(f"python -m simulations.compare: error: {f}:" + (f"{line}:" if line else "")), err
    assert fragment in err, err
    assert not out.exists()
    return err


@pytest.mark.parametrize("text, line, fragment", [
    ('thresholds = "abc"\n' + RUN, 1, "thresholds must be a list of at most 20 finite numbers > 0"),
    ('thresholds = [1e-2, nan]\n' + RUN, 1, "thresholds must be"),
    ('metric = "nosuch"\n' + RUN, 1, "metric 'nosuch' is not written by run 'a' (eigenspace strategy)"),
    ('metric = 3\n' + RUN, 1, "metric must be the name of a results column"),
    ('title = {a = 1}\n' + RUN, 1, "title must be a string, got dict"),
    ('title = "x"\nruns = [1, 2]\n', 2, "runs must be tables"),
    ('[[runs]]\nname = "' + "n" * 5000 + '"\nstrategy = "power"\n', 2, "has 5000 characters; at most 200"),
    ('[[runs]]\nname = ""\nstrategy = "power"\n', 2, "name must not be empty"),
    ('seeds = [0, 0]\n' + RUN, 1, "seeds lists seed 0 twice"),
    ('seeds = [0]\n' + RUN + 'seeds = [3, 1, 3]\n', 5, "run 'a': seeds lists seed 3 twice"),
    ('seeds = [-1]\n' + RUN, 1, "seeds must be a non-empty list of integers in [0, 4294967295]"),
    ('seeds = [true]\n' + RUN, 1, "seeds must be"),
    ('[defaults]\nrank = 2\nseed = 5\n\n' + RUN, 3, "seed in [defaults]: 'seed' is not read from a comparison "
     "file: list the seeds with seeds = [...]"),
    (RUN + 'seed = 5\n', 4, "run 'a': 'seed' is not read from a comparison file"),
    ('seed = 5\n' + RUN, 1, "unknown top-level key 'seed'. 'seed' is not read"),
    ('[defaults]\nrank = [[[[[[[[[[2]]]]]]]]]]\n' + RUN, 2, "rank in [defaults] must be a single number, string or "
     "boolean, got list"),
    (RUN + 'rank = {a = {b = {c = 1}}}\n', 4, "run 'a': rank must be a single number, string or boolean"),
    ('[defaults.a.b.c.d.e.f]\nx = 1\n' + RUN, 1, "unknown run-config key 'a' in [defaults]"),
    (RUN + 'strategy2 = "x"\n', 4, "unknown key 'strategy2'"),
    ('[defaults]\nrank = 2\nepsilon = -2.0\n\n' + RUN, 3, "run 'a': epsilon must be a finite number >= 0"),
    ('[[runs]]\nname = "a"\nstrategy = "fedpowr"\n', 3, "Did you mean 'fedpower'?"),
    ('[[runs]]\nname = 7\nstrategy = "power"\n', 2, "name must be a string, got int"),
    ('[defaults]\nstrategy = "fedmf"\n[[runs]]\nname = "a"\nstrategy = "fedmf"\n[[runs]]\nname = "b"\n'
     'strategy = "fedave"\n', None, "the runs mix strategy families (erm, mf)"),
], ids=["thresholds-str", "thresholds-nan", "metric-nosuch", "metric-int", "title-table", "runs-ints",
        "name-5000", "name-empty", "seeds-dup", "run-seeds-dup", "seeds-negative", "seeds-bool", "seed-defaults",
        "seed-run", "seed-top", "nested-array", "nested-table", "nested-defaults", "unknown-run-key", "bad-default",
        "strategy-typo", "name-int", "mixed-families"])
def test_bad_comparison_files_are_one_line_before_anything_runs(tmp_path, capsys, text, line, fragment):
    _refused(tmp_path, capsys, text, fragment, line)


def test_a_deeply_nested_file_is_one_line(tmp_path, capsys):
    _refused(tmp_path, capsys, "x = " + "[" * 200_000 + "]" * 200_000 + "\n" + RUN, "")


def test_200000_seeds_are_refused_at_once_with_the_bound(tmp_path, capsys):
    text = "seeds = [" + ", ".join(map(str, range(200_000))) + "]\n" + RUN
    err = _refused(tmp_path, capsys, text, f"seeds lists 200000 seeds; at most {MAX_SEEDS} are allowed", 1)
    assert "seeds" in err


def test_many_seeds_within_the_bound_validate_fast(tmp_path):
    f = tmp_path / "ok.toml"
    f.write_text("seeds = [" + ", ".join(map(str, range(MAX_SEEDS))) + "]\n" + RUN)
    start = time.monotonic()
    _, jobs = load_comparison(f)
    assert len(jobs) == MAX_SEEDS and time.monotonic() - start < 5


def test_out_naming_a_file_is_refused(tmp_path, capsys):
    f = tmp_path / "ok.toml"
    f.write_text(RUN)
    target = tmp_path / "afile"
    target.write_text("keep me")
    assert main([str(f), "--out", str(target)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"python -m simulations.compare: error: --out {target}: is a file, not a directory"
    assert target.read_text() == "keep me"


def test_report_only_without_results_is_one_line(tmp_path, capsys):
    f = tmp_path / "ok.toml"
    f.write_text(RUN)
    assert main([str(f), "--out", str(tmp_path / "none"), "--report-only"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--report-only: there are no results to report" in err
    assert not (tmp_path / "none").exists()


@pytest.mark.parametrize("strategy, metric", [("fedpower", "subspace_distance"), ("faps", "subspace_distance"),
                                              ("fedmf", "excess_loss"), ("mf-altgd", "excess_loss"),
                                              ("fedave", "loss_gap"), ("fedlrgd", "loss_gap")])
def test_the_default_metric_follows_the_strategy_family(tmp_path, strategy, metric):
    f = tmp_path / "c.toml"
    f.write_text(f'[[runs]]\nname = "a"\nstrategy = "{strategy}"\n')
    meta, _ = load_comparison(f)
    assert meta["metric"] == metric


def test_fedave_without_metric_runs_and_summarises_the_loss_gap(tmp_path):
    f = tmp_path / "c.toml"
    f.write_text('[defaults]\ndataset = "erm-ridge"\nloss = "ridge"\nnum-clients = 3\nnum-samples = 200\n'
                 'dimension = 5\nnum-server-rounds = 3\n[[runs]]\nname = "fedave"\nstrategy = "fedave"\n')
    assert main([str(f), "--out", str(tmp_path / "o")]) == 0
    assert "final loss gap" in (tmp_path / "o" / "summary.md").read_text()
    assert (tmp_path / "o" / "loss_gap.png").is_file()


def test_the_final_value_is_the_last_iteration_of_the_last_round():
    """fedmf writes many rows of one round (its local iterations): the final one is the last iteration."""
    rows = []
    for seed in (0, 1, 2):
        rows += [{"run": "r", "strategy": "fedmf", "seed": seed, "round": 1, "iteration": None,
                  "excess_loss": 9.0, "bytes_up": 1, "bytes_down": 1}]
        order = np.random.default_rng(seed).permutation(200)  # rows of one round in any order
        rows += [{"run": "r", "strategy": "fedmf", "seed": seed, "round": 2, "iteration": int(i),
                  "excess_loss": 1.0 / (1 + i) * (seed + 1), "bytes_up": 0, "bytes_down": 0} for i in order]
    df = pd.DataFrame(rows)
    summary = summarize(df, thresholds=(), metric="excess_loss").iloc[0]
    finals = [(seed + 1) / 200 for seed in (0, 1, 2)]
    assert summary["final_median"] == pytest.approx(np.median(finals))
    assert summary["final_min"] == pytest.approx(min(finals)) and summary["final_max"] == pytest.approx(max(finals))


def test_run_names_that_look_alike_keep_their_own_estimates(tmp_path):
    names = ["a/b", "a_b", "a b", "eps=1 (p=2)", "eps=1 [p=2]"]
    f = tmp_path / "c.toml"
    f.write_text(SMALL.format(rounds=2).replace("seeds = [0, 1]", "seeds = [0]") + "".join(
        f'[[runs]]\nname = "{n}"\nstrategy = "power"\nnum-server-rounds = {2 + i}\n' for i, n in enumerate(names)))
    out = tmp_path / "o"
    assert main([str(f), "--out", str(out)]) == 0
    files = sorted(p.name for p in (out / "estimates").glob("*.npy"))
    # and each noise-free eigenspace run's PCA model beside its estimate
    assert sorted(p.name for p in (out / "estimates").glob("*.pca.npz")) == [f[:-4] + ".pca.npz" for f in files]
    assert len(files) == len(names) == len({estimate_stem(n, 0) for n in names})
    assert files == sorted(f"{estimate_stem(n, 0)}.npy" for n in names)
    assert estimate_stem("a/b", 0).startswith("a_b-") and estimate_stem("a/b", 0).endswith("__seed0")
    df = pd.read_csv(out / "results.csv")
    assert df.groupby("run").size().to_dict() == {n: 3 + i for i, n in enumerate(names)}


def _complete_results(out, rounds, runs=("p", "q"), seeds=(0, 1)):
    df = pd.read_csv(out / "results.csv")
    assert df.groupby(["run", "seed"])["round"].apply(list).to_dict() == {
        (r, s): list(range(rounds + 1)) for r in runs for s in seeds}
    assert sorted(p.name for p in (out / "estimates").glob("*.npy")) == sorted(
        f"{estimate_stem(r, s)}.npy" for r in runs for s in seeds)


def _two_runs(tmp_path, rounds, name="c.toml", num_samples=300):
    f = tmp_path / name
    f.write_text(SMALL.format(rounds=rounds).replace("num-samples = 300", f"num-samples = {num_samples}")
                 + '[[runs]]\nname = "p"\nstrategy = "fedpower"\n[[runs]]\nname = "q"\nstrategy = "power"\n')
    return f


def _snapshot(out):
    return {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*"))
            if p.is_file() and not any(part.startswith(".") for part in p.relative_to(out).parts)}


def test_a_rerun_that_fails_leaves_the_last_complete_results(tmp_path, monkeypatch, capsys):
    out = tmp_path / "o"
    assert main([str(_two_runs(tmp_path, 3)), "--out", str(out)]) == 0
    before = _snapshot(out)
    run_job = cli._run_job
    calls = []

    def failing(job, engine, workdir):
        calls.append(job.stem)
        if len(calls) == 2:
            raise RuntimeError("run 'q' seed 0 wrote no results")
        return run_job(job, engine, workdir)

    monkeypatch.setattr(cli, "_run_job", failing)
    assert main([str(_two_runs(tmp_path, 5, "d.toml")), "--out", str(out)]) == 1
    assert "the earlier results in" in capsys.readouterr().err
    assert _snapshot(out) == before
    assert not list(out.glob(".staging-*"))


def test_a_second_process_on_the_same_out_is_refused_at_once(tmp_path, capsys):
    out = tmp_path / "o"
    config = _two_runs(tmp_path, 3)
    with OutputDir(out):
        start = time.monotonic()
        assert main([str(config), "--out", str(out)]) == 2
        assert time.monotonic() - start < 10
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"python -m simulations.compare: error: --out {str(out)!r} is in use by pid {os.getpid()}: ")
    assert "\n" not in err
    assert main([str(config), "--out", str(out)]) == 0  # released
    _complete_results(out, 3)


def _compare(config, out):
    env = {**os.environ, "PYTHONPATH": str(APP_DIR)}
    return subprocess.Popen([sys.executable, "-m", "simulations.compare", str(config), "--out", str(out)],
                            cwd=APP_DIR, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for_jobs(out, at_least=1, timeout=120):
    """Wait until the compare process writing ``out`` has finished ``at_least`` jobs (in its staging dir)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if sum(1 for _ in out.glob(".staging-*/estimates/*.npy")) >= at_least:
            return
        time.sleep(0.05)
    raise AssertionError("the compare process did not get going")


def test_two_processes_on_one_out_one_runs_the_other_is_refused(tmp_path):
    out = tmp_path / "o"
    first = _compare(_two_runs(tmp_path, 300, num_samples=3000), out)
    try:
        _wait_for_jobs(out)
        first.send_signal(signal.SIGSTOP)  # hold it mid-run (with its lock) however slow the machine is
        start = time.monotonic()
        second = _compare(_two_runs(tmp_path, 3, "d.toml"), out)
        _, err = second.communicate(timeout=60)
        assert second.returncode == 2 and time.monotonic() - start < 30
        assert f"is in use by pid {first.pid}: " in err and "Traceback" not in err
        assert len(err.strip().splitlines()) == 1
        first.send_signal(signal.SIGCONT)
        assert first.wait(timeout=300) == 0
    finally:
        first.kill()
    _complete_results(out, 300)


def test_killing_compare_mid_run_leaves_the_previous_results_unchanged(tmp_path):
    out = tmp_path / "o"
    assert main([str(_two_runs(tmp_path, 3)), "--out", str(out)]) == 0
    before = _snapshot(out)
    proc = _compare(_two_runs(tmp_path, 300, "d.toml", num_samples=3000), out)
    try:
        _wait_for_jobs(out)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        proc.kill()
    assert _snapshot(out) == before
    _complete_results(out, 3)
    assert main([str(_two_runs(tmp_path, 2, "e.toml")), "--out", str(out)]) == 0  # the leftovers are cleared
    _complete_results(out, 2)
    assert not list(out.glob(".staging-*"))


def test_resume_through_compare_keeps_every_earlier_row(tmp_path, monkeypatch):
    from fl_strategies.protocol import checkpoint as ck

    class Killed(BaseException):
        pass

    save = ck.Checkpoint.save

    def dying_save(self, server_round, parameters, strategy):
        save(self, server_round, parameters, strategy)
        if server_round == 3 and "seed1" in str(self.dir):
            raise Killed()

    text = (SMALL.format(rounds=6) + f'checkpoint-dir = "{tmp_path / "ck"}"\n'
            + '[[runs]]\nname = "p"\nstrategy = "fedpower"\n')
    whole = tmp_path / "whole.toml"
    whole.write_text(SMALL.format(rounds=6) + '[[runs]]\nname = "p"\nstrategy = "fedpower"\n')
    assert main([str(whole), "--out", str(tmp_path / "whole")]) == 0
    f = tmp_path / "c.toml"
    f.write_text(text)
    with monkeypatch.context() as patch:
        patch.setattr(ck.Checkpoint, "save", dying_save)
        with pytest.raises(Killed):
            main([str(f), "--out", str(tmp_path / "o")])
    f.write_text(text.replace("[[runs]]", "resume = true\n[[runs]]"))
    assert main([str(f), "--out", str(tmp_path / "o")]) == 0
    got = pd.read_csv(tmp_path / "o" / "results.csv").drop(columns="wall_time")
    want = pd.read_csv(tmp_path / "whole" / "results.csv").drop(columns="wall_time")
    pd.testing.assert_frame_equal(got, want)
    assert "| p | fedpower | 2 | 6 |" in (tmp_path / "o" / "summary.md").read_text()


def test_a_data_set_that_cannot_be_loaded_is_refused_at_its_run(tmp_path, capsys):
    _refused(tmp_path, capsys, 'title = "x"\n\n[[runs]]\nname = "a"\nstrategy = "power"\ndataset = "missing.npy"\n',
             "run 'a' seed 0: \"dataset\" is 'missing.npy': file not found", 3)
