"""Tests for :mod:`simulations.compare.report` on small hand-built result frames."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from simulations.compare.report import (
    plot_metric,
    rounds_to_reach,
    summarize,
    write_summary_markdown,
)

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

# Run "fast": decays by 100x per round, seed s scaled by (1, 2, 5).
FAST = {
    0: [1.0, 1e-2, 1e-4, 1e-6, 1e-8],
    1: [2.0, 2e-2, 2e-4, 2e-6, 2e-8],
    2: [5.0, 5e-2, 5e-4, 5e-6, 5e-8],
}
# Run "slow": decays by 10x per round, seed s scaled by (1, 0.5, 3).
SLOW = {
    0: [1.0, 1e-1, 1e-2, 1e-3, 1e-4],
    1: [0.5, 5e-2, 5e-3, 5e-4, 5e-5],
    2: [3.0, 3e-1, 3e-2, 3e-3, 3e-4],
}


def _rows(run, strategy, values_by_seed, up, down, panel=None):
    """Tidy rows for one run; round 0 carries no traffic."""
    rows = []
    for seed, values in values_by_seed.items():
        for rnd, value in enumerate(values):
            row = {
                "run": run,
                "strategy": strategy,
                "seed": seed,
                "round": rnd,
                "subspace_distance": value,
                "bytes_up": 0 if rnd == 0 else up(seed),
                "bytes_down": 0 if rnd == 0 else down(seed),
            }
            if panel is not None:
                row["panel"] = panel
            rows.append(row)
    return rows


def make_frame(with_panel=False):
    """2 runs x 3 seeds x 5 rounds with known geometric decay and traffic."""
    fast = _rows(
        "fast",
        "power",
        FAST,
        up=lambda s: 1000 * (s + 1),
        down=lambda s: 500,
        panel="A" if with_panel else None,
    )
    slow = _rows(
        "slow",
        "oja",
        SLOW,
        up=lambda s: 2_000_000,
        down=lambda s: 1_000_000,
        panel="B" if with_panel else None,
    )
    return pd.DataFrame(fast + slow)


@pytest.fixture
def frame():
    return make_frame()


def _one(df, run, seed):
    return df[(df["run"] == run) & (df["seed"] == seed)]


# --------------------------------------------------------------------------- #
# rounds_to_reach
# --------------------------------------------------------------------------- #
def test_rounds_to_reach_exact_values(frame):
    assert rounds_to_reach(_one(frame, "fast", 0), 1e-2) == 1.0  # equality counts
    assert rounds_to_reach(_one(frame, "fast", 1), 1e-2) == 2.0
    assert rounds_to_reach(_one(frame, "fast", 2), 1e-4) == 3.0
    assert rounds_to_reach(_one(frame, "slow", 1), 1e-4) == 4.0
    assert rounds_to_reach(_one(frame, "fast", 0), 10.0) == 0.0


def test_rounds_to_reach_never_is_nan(frame):
    assert math.isnan(rounds_to_reach(_one(frame, "slow", 2), 1e-4))
    assert math.isnan(rounds_to_reach(_one(frame, "fast", 0), 1e-10))


def test_rounds_to_reach_ignores_order_and_nan(frame):
    part = _one(frame, "fast", 1).sample(frac=1.0, random_state=0).copy()
    part.loc[part["round"] == 2, "subspace_distance"] = np.nan
    assert rounds_to_reach(part, 1e-3) == 3.0
    assert isinstance(rounds_to_reach(part, 1e-3), float)


def test_rounds_to_reach_custom_metric(frame):
    df = _one(frame, "fast", 0).rename(columns={"subspace_distance": "err"})
    assert rounds_to_reach(df, 1e-6, metric="err") == 3.0


# --------------------------------------------------------------------------- #
# summarize
# --------------------------------------------------------------------------- #
def test_summarize_columns_and_order(frame):
    summary = summarize(frame.iloc[::-1].reset_index(drop=True))
    assert list(summary["run"]) == ["slow", "fast"]  # order of first appearance
    assert list(summary.columns) == [
        "run",
        "strategy",
        "seeds",
        "rounds",
        "final_median",
        "final_min",
        "final_max",
        "rounds_to_0.01",
        "rounds_to_0.0001",
        "rounds_to_1e-10",
        "total_bytes",
    ]


def test_summarize_exact_values(frame):
    summary = summarize(frame).set_index("run")
    fast, slow = summary.loc["fast"], summary.loc["slow"]

    assert fast["strategy"] == "power" and slow["strategy"] == "oja"
    assert fast["seeds"] == 3 and fast["rounds"] == 4

    assert fast["final_median"] == 2e-8
    assert fast["final_min"] == 1e-8
    assert fast["final_max"] == 5e-8
    assert slow["final_median"] == 1e-4
    assert slow["final_min"] == 5e-5
    assert slow["final_max"] == 3e-4

    # fast: seeds reach 1e-2 at (1, 2, 2), 1e-4 at (2, 3, 3), never 1e-10.
    assert fast["rounds_to_0.01"] == 2.0
    assert fast["rounds_to_0.0001"] == 3.0
    assert math.isnan(fast["rounds_to_1e-10"])
    # slow: 1e-2 at (2, 2, 3); seed 2 never reaches 1e-4 -> NaN.
    assert slow["rounds_to_0.01"] == 2.0
    assert math.isnan(slow["rounds_to_0.0001"])

    # fast: per-seed totals 4*1500, 4*2500, 4*3500 -> median 10_000.
    assert fast["total_bytes"] == 10_000
    # slow: 4 * 3 MB for every seed.
    assert slow["total_bytes"] == 12_000_000


def test_summarize_custom_thresholds_and_even_seed_median(frame):
    df = frame[~((frame["run"] == "fast") & (frame["seed"] == 0))]
    summary = summarize(df, thresholds=(1e-1, 3e-4)).set_index("run")
    assert list(summary.columns[-3:]) == ["rounds_to_0.1", "rounds_to_0.0003", "total_bytes"]
    # fast seeds 1, 2 reach 0.1 at round 1 and 3e-4 at rounds (2, 3).
    assert summary.loc["fast", "rounds_to_0.1"] == 1.0
    assert summary.loc["fast", "rounds_to_0.0003"] == 2.5
    assert summary.loc["fast", "seeds"] == 2
    assert summary.loc["fast", "total_bytes"] == 12_000  # median of 10k, 14k
    assert summary.loc["fast", "final_median"] == pytest.approx(3.5e-8)


# --------------------------------------------------------------------------- #
# write_summary_markdown
# --------------------------------------------------------------------------- #
def test_markdown_table(frame, tmp_path):
    path = tmp_path / "sub" / "summary.md"
    write_summary_markdown(summarize(frame), path, "My comparison", "subspace_distance")
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines()
    assert lines[0] == "# My comparison"

    table = [line for line in lines if line.startswith("|")]
    header = [c.strip() for c in table[0].strip("|").split("|")]
    assert header == [
        "run",
        "strategy",
        "seeds",
        "rounds",
        "final subspace distance",
        "rounds to 0.01",
        "rounds to 0.0001",
        "rounds to 1e-10",
        "total bytes",
    ]
    assert set(table[1].replace("|", "").split()) == {"---"}
    body = table[2:]
    assert len(body) == 2
    assert body[0].startswith("| fast |") and body[1].startswith("| slow |")
    assert all(row.count("|") == table[0].count("|") for row in body)

    fast = [c.strip() for c in body[0].strip("|").split("|")]
    slow = [c.strip() for c in body[1].strip("|").split("|")]
    assert fast == [
        "fast",
        "power",
        "3",
        "4",
        "2.00e-08 [1.00e-08, 5.00e-08]",
        "2",
        "3",
        "—",
        "10.0 kB",
    ]
    assert slow[4] == "1.00e-04 [5.00e-05, 3.00e-04]"
    assert slow[5:] == ["2", "—", "—", "12.0 MB"]
    assert "median [min, max]" in text


# --------------------------------------------------------------------------- #
# plot_metric
# --------------------------------------------------------------------------- #
def _assert_png(path):
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC


@pytest.fixture
def saved_figures(monkeypatch):
    """Every matplotlib figure saved during the test, inspected before it is closed."""
    import matplotlib.figure

    figures = []
    savefig = matplotlib.figure.Figure.savefig

    def recording_savefig(self, *args, **kwargs):
        figures.append(self)
        return savefig(self, *args, **kwargs)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", recording_savefig)
    return figures


def _panels(fig):
    """``[(title, xlabel, ylabel, [line labels], [legend texts], [line y data])]`` of the visible axes."""
    out = []
    for ax in fig.axes:
        if not ax.get_visible():
            continue
        legend = ax.get_legend()
        out.append((ax.get_title(), ax.get_xlabel(), ax.get_ylabel(), [ln.get_label() for ln in ax.get_lines()],
                    [t.get_text() for t in legend.get_texts()] if legend else [], [ln.get_ydata() for ln in ax.get_lines()]))
    return out


def test_plot_single_panel(frame, tmp_path, saved_figures):
    path = tmp_path / "single.png"
    plot_metric(frame, path, title="single panel")
    _assert_png(path)
    (fig,) = saved_figures
    (panel,) = _panels(fig)
    title, xlabel, ylabel, lines, legend, ys = panel
    assert (xlabel, ylabel) == ("communication rounds", "subspace distance")
    assert lines == ["fast", "slow"] and legend == ["fast", "slow"]
    assert fig._suptitle.get_text() == "single panel"
    # the line is the median over the seeds, round by round
    np.testing.assert_allclose(ys[0], np.median(np.array(list(FAST.values())), axis=0))
    np.testing.assert_allclose(ys[1], np.median(np.array(list(SLOW.values())), axis=0))
    assert fig.axes[0].get_yscale() == "log"


def test_plot_with_panels(tmp_path, saved_figures):
    path = tmp_path / "panels.png"
    plot_metric(make_frame(with_panel=True), path, ylabel="distance")
    _assert_png(path)
    (fig,) = saved_figures
    panels = _panels(fig)
    assert [p[0] for p in panels] == ["A", "B"]
    assert [p[3] for p in panels] == [["fast"], ["slow"]] and [p[4] for p in panels] == [["fast"], ["slow"]]
    assert [p[1] for p in panels] == ["communication rounds"] * 2
    assert panels[0][2] == "distance"  # the y label on the first panel of the row only
    assert fig._suptitle is None


def test_plot_with_nan_and_zero(frame, tmp_path, saved_figures):
    df = frame.copy()
    df.loc[(df["run"] == "fast") & (df["round"] == 4), "subspace_distance"] = 0.0
    df.loc[(df["run"] == "slow") & (df["round"] == 2), "subspace_distance"] = np.nan
    df.loc[(df["run"] == "slow") & (df["seed"] == 1) & (df["round"] == 3),
           "subspace_distance"] = np.nan
    df["panel"] = ["", None] * (len(df) // 2)  # empty / missing -> one panel
    path = tmp_path / "nan_zero.png"
    plot_metric(df, path)
    _assert_png(path)
    (fig,) = saved_figures
    (panel,) = _panels(fig)
    assert panel[0] == "" and panel[3] == ["fast", "slow"]
    fast_y = np.asarray(panel[5][0], dtype=float)
    assert fast_y[-1] == pytest.approx(1e-16)  # zeros are clipped to 1e-16 for the log axis
    assert np.all(np.isfinite(fast_y)) and np.all(fast_y > 0)


def test_plot_many_panels(tmp_path, saved_figures):
    frames = []
    for i in range(4):
        df = make_frame()
        df["panel"] = f"p{i}"
        df["run"] = df["run"] + f"-{i}"
        frames.append(df)
    df = pd.concat(frames)  # keep duplicate index labels on purpose
    path = tmp_path / "many.png"
    plot_metric(df, path)
    _assert_png(path)
    (fig,) = saved_figures
    panels = _panels(fig)
    assert [p[0] for p in panels] == ["p0", "p1", "p2", "p3"]
    assert [p[3] for p in panels] == [[f"fast-{i}", f"slow-{i}"] for i in range(4)]
    assert [p[2] for p in panels] == ["subspace distance", "", "", "subspace distance"]  # rows of at most three
    summary = summarize(df)
    assert len(summary) == 8
    assert list(summary["total_bytes"]) == [10_000, 12_000_000] * 4
