"""The server's progress line: one per round, its seconds, the kept components' change and what is left."""

from __future__ import annotations

import logging
import re

import pytest

from conftest import run_app
from fl_strategies.protocol.round_progress import PROGRESS_LOGGER, RoundProgress, about, rounds_to_tolerance

LINE = re.compile(r"^round (\d+) of (\d+): [\d.]+ s \(waited [\d.]+ s for \d+ replies, server [\d.]+ s\)(.*)$")


# -- the estimate ----------------------------------------------------------------------------------------------
def test_a_geometric_change_gives_the_rounds_to_the_tolerance():
    assert rounds_to_tolerance([1e-1, 1e-2, 1e-3], 1e-6) == 3  # 1e-3 * 0.1^3 = 1e-6
    assert rounds_to_tolerance([8.0, 4.0, 2.0, 1.0], 0.2) == 3  # halving: 0.5, 0.25, 0.125
    assert rounds_to_tolerance([100.0, 8.0, 4.0, 2.0, 1.0], 0.2) == 3  # the rate of the last 3 ratios (0.5)
    assert rounds_to_tolerance([1e-3, 1e-5], 1e-6) == 1


def test_a_change_already_at_the_tolerance_needs_no_round():
    assert rounds_to_tolerance([1e-2, 1e-6], 1e-6) == 0
    assert rounds_to_tolerance([5e-7], 1e-6) == 0


@pytest.mark.parametrize("changes", [[1e-3, 1e-3, 1e-3], [1e-3, 2e-3, 4e-3], [1e-3], [], [0.0, 1e-3]],
                         ids=["stalled", "increasing", "one round", "none", "from zero"])
def test_no_estimate_without_a_steady_decrease(changes):
    assert rounds_to_tolerance(changes, 1e-6) is None


def test_no_estimate_without_a_tolerance():
    assert rounds_to_tolerance([1e-1, 1e-2, 1e-3], 0.0) is None


def test_seconds_read_as_a_person_reads_a_wait():
    assert [about(s) for s in (0.4, 2.54, 40.2, 750.0, 11160.0)] == ["< 1 s", "~2.5 s", "~40 s", "~12.5 min",
                                                                     "~3.1 h"]


class _Strategy:
    def __init__(self, stop_tol: float) -> None:
        self.stop_tol, self.stopped, self.progress_notes = stop_tol, False, {}


def test_what_is_left_with_and_without_stop_tol():
    progress = RoundProgress(_Strategy(1e-6), 20)
    said = []
    for t, statistic in enumerate([1e-1, 1e-2, 1e-3], start=1):
        progress.strategy.progress_notes.update(stop_statistic=statistic, kept="round x's kept")
        said.append(progress.line(t, 2.0, {"waited": 1.5, "replies": 4}))
    assert said[0].startswith("round 1 of 20: 2.00 s (waited 1.50 s for 4 replies, server 0.50 s); round x's kept; "
                              "|F_k - F_k-1| / F_k = 1.00e-01 (stop-tol 1e-06); left: at most 19 rounds (~38 s)")
    assert said[0].endswith(", to stop-tol unknown (no steady decrease yet)")  # one change: no rate
    assert said[2].endswith("left: at most 17 rounds (~34 s), about 3 rounds to stop-tol (~6.0 s)")
    plain = RoundProgress(_Strategy(0.0), 3)
    assert plain.line(2, 1.0, {}).endswith("; left: at most 1 round (~1.0 s)")
    assert plain.line(3, 1.0, {}).endswith("; left: none (num-server-rounds reached)")
    slow = RoundProgress(_Strategy(1e-12), 5)
    for t, statistic in enumerate([1e-1, 5e-2], start=1):
        slow.strategy.progress_notes["stop_statistic"] = statistic
        text = slow.line(t, 1.0, {})
    assert text.endswith("at most 3 rounds (~3.0 s), stop-tol not within them at the current rate")


# -- a run ------------------------------------------------------------------------------------------------------
def _round_lines(caplog) -> list[tuple[int, int, str]]:
    return [(int(m[1]), int(m[2]), m[3]) for r in caplog.records if r.name == PROGRESS_LOGGER
            for m in [LINE.match(r.getMessage())] if m]


def _genotype_run(tmp_path, caplog, **over):
    from test_genotype_bed import simulated_sites, write_bed

    (tmp_path / "data").mkdir()
    for i, G in enumerate(simulated_sites((60, 70), 120, missing=0.0, seed=35)):
        write_bed(tmp_path / "data" / f"partition_{i}.bed", G)
    with caplog.at_level(logging.INFO, logger="flwr"):
        return run_app(strategy="power", dataset=str(tmp_path / "data"), num_clients=2, rank=2, iteration_rank=3,
                       center=True, scale="hwe", row_normalize=False, **over)


def test_a_stopped_genotype_run_logs_one_line_per_round_that_ran(tmp_path, caplog):
    strategy = _genotype_run(tmp_path, caplog, num_server_rounds=40, stop_tol=1e-6)
    ran = strategy.rounds_run
    lines = _round_lines(caplog)
    assert strategy.stopped and 3 < ran < 40
    assert [t for t, _, _ in lines] == list(range(1, ran + 1)) and {T for _, T, _ in lines} == {40}
    for t, _, rest in lines[1:]:  # the kept components' change of the round before and the rule's quantity
        assert f"; round {t - 1}'s 2 kept components moved " in rest and "; |F_k - F_k-1| / F_k = " in rest
    assert lines[-1][2].endswith("; left: none (the run stops in this round)")
    assert all(re.search(r"; left: at most \d+ rounds \(.*\), (about \d+ rounds? to stop-tol|to stop-tol unknown)",
                         rest) for _, _, rest in lines[:-1])
    # the round that ended it, named after its line; no other per-round INFO line
    said = [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO]
    last = max(i for i, m in enumerate(said) if m.startswith(f"round {ran} of 40: "))
    assert said[last + 1] == f"run stopped in round {ran}: stopping rule met"
    assert not [m for m in said if re.match(r"round \d+(/\d+)?: |aggregate_fit|configure_fit: strategy", m)]


def test_a_run_to_num_server_rounds_ends_with_its_last_round(tmp_path, caplog):
    _genotype_run(tmp_path, caplog, num_server_rounds=4)
    lines = _round_lines(caplog)
    assert [(t, T) for t, T, _ in lines] == [(1, 4), (2, 4), (3, 4), (4, 4)]
    assert [rest.rsplit("; left: ", 1)[1] for _, _, rest in lines][1:] == [
        *(re.search(r"at most \d+ rounds? \(.*\)$", rest)[0] for _, _, rest in lines[1:-1]),
        "none (num-server-rounds reached)"]
    assert [re.search(r"at most (\d+) round", rest)[1] for _, _, rest in lines[:-1]] == ["3", "2", "1"]
    assert all("change of the estimate (sin theta) " in rest for _, _, rest in lines)


def test_an_erm_round_is_one_line_too(caplog):
    """The ERM strategies' measures (``F - F*``, Gamma) are in the progress line, not a line of their own."""
    from test_fedlrgd import RIDGE

    with caplog.at_level(logging.INFO, logger="flwr"):
        strategy = run_app(**RIDGE)
    lines = _round_lines(caplog)
    assert [(t, T) for t, T, _ in lines] == [(t, strategy.num_rounds) for t in range(1, strategy.num_rounds + 1)]
    assert all(re.match(r"; F - F\* = \S+, Gamma = \S+; left: ", rest) for _, _, rest in lines)
    assert not [r for r in caplog.records if re.match(r"round \d+/\d+: ", r.getMessage())]


def test_compare_shows_one_line_per_round_with_verbose_and_none_without(tmp_path, caplog):
    """``compare`` quiets Flower's log unless ``--verbose`` (a comparison of many runs stays short); with it each
    round of each run is one line, Flower's own per-round lines being DEBUG."""
    from simulations.compare import main

    (tmp_path / "cmp.toml").write_text('title = "t"\nseeds = [0]\n[defaults]\nnum-clients = 3\nnum-samples = 300\n'
                                       'dimension = 10\nrank = 2\niteration-rank = 3\nnum-server-rounds = 3\n'
                                       '[[runs]]\nname = "power"\nstrategy = "power"\n')
    flwr = logging.getLogger("flwr")
    level = flwr.level
    try:
        assert main([str(tmp_path / "cmp.toml"), "--out", str(tmp_path / "quiet")]) == 0
        assert _round_lines(caplog) == []
        flwr.setLevel(logging.DEBUG)  # as in a fresh process: Flower's level on import (conftest quiets it)
        assert main([str(tmp_path / "cmp.toml"), "--out", str(tmp_path / "verbose"), "--verbose"]) == 0
    finally:
        flwr.setLevel(level)
    assert [(t, T) for t, T, _ in _round_lines(caplog)] == [(1, 3), (2, 3), (3, 3)]
    said = [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO]
    assert not [m for m in said if re.match(r"round \d+(/\d+)?: |aggregate_fit|configure_fit: strategy", m)]
