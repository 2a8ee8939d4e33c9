"""bench_run_overhead's memory sampling: resident sets every 0.2 s, proportional sets (costly) every second."""

from __future__ import annotations

import os


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def perf_counter(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


class _Process:
    """A command that runs for ``polls`` samples, prints nothing and exits 0."""

    def __init__(self, polls: int) -> None:
        self.polls, self.pid, self.returncode, self.stdout = polls, os.getpid(), 0, iter(())

    def poll(self):
        self.polls -= 1
        return None if self.polls >= 0 else 0


def test_the_proportional_sets_are_read_once_a_second_and_the_resident_sets_at_every_sample(monkeypatch):
    """``smaps_rollup`` walks a process's page tables (37 ms of the benchmark's CPU for `fedspectral run`'s 13
    processes): read at every 0.2 s sample it took a fifth of a core from the command measured."""
    from simulations.benchmarks import bench_run_overhead as bench

    clock, reads = _Clock(), []
    monkeypatch.setattr(bench, "time", clock)
    monkeypatch.setattr(bench.subprocess, "Popen", lambda *a, **k: _Process(polls=10))
    monkeypatch.setattr(bench, "tree", lambda roots, marker=None: [os.getpid()])
    monkeypatch.setattr(bench, "_kb", lambda path, key: reads.append(key) or 1024)
    result = bench.measured(["command"], env={})
    assert reads.count("VmRSS") == 10 and reads.count("Pss") == 2  # samples at 0, 0.2, ..., 1.8 s; PSS at 0, 1.0 s
    assert (result["rss_mb"], result["pss_mb"], result["processes"]) == (1.0, 1.0, 1)
