"""The crossover simulator runs exactly what the Flower strategies run."""

from __future__ import annotations

import numpy as np
from conftest import run_app

from simulations.experiments.fedlrgd.fedlrgd_crossover import fedave_curve, fedlrgd_curve, first_stay_below, make_data, report, run


def _file(tmp_path, p=2, m=5, s=20, r=6, seed=0):
    Xs, ys, Xc, yc = make_data(p, m, s, r, seed)
    rows = np.vstack([np.column_stack([Xs, ys]), np.column_stack([Xc.reshape(-1, p), yc.ravel()])])
    path = tmp_path / "rows.npy"
    np.save(path, rows)
    common = dict(dataset=str(path), num_samples=0, dimension=0, num_clients=m, partitioner="contiguous",
                  server_samples=r, loss="logistic", l2=0.1, seed=seed)
    return (Xs, ys, Xc, yc), common


def test_simulator_matches_flower_fedlrgd(tmp_path):
    data, common = _file(tmp_path)
    s = run_app(strategy="fedlrgd", gd_iterations=150, g_inverse="pinv", **common)
    gaps = fedlrgd_curve(*data, 6, 0.1, 150, 0, "pinv", 1e-10)
    assert abs(s.records[-1]["loss_gap"] - gaps[-1]) < 1e-13


def test_simulator_matches_flower_fedave(tmp_path):
    data, common = _file(tmp_path)
    s = run_app(strategy="fedave", num_server_rounds=12, local_steps=7, step_max=0.2, step_schedule="clipped",
                server_as_client=True, **common)
    gaps = fedave_curve(*data, 6, 0.1, 7, 0.2, 12, 0)
    np.testing.assert_allclose([row["loss_gap"] for row in s.records], gaps, rtol=1e-9, atol=1e-14)


def test_first_stay_below():
    assert first_stay_below(np.array([5.0, 1.0, 3.0, 0.5, 0.2]), 1.0) == 3
    assert first_stay_below(np.array([5.0, 2.0]), 1.0) is None


def test_tiny_grid_and_report(tmp_path, monkeypatch):
    import matplotlib.figure

    figures, savefig = [], matplotlib.figure.Figure.savefig
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig",
                        lambda self, *a, **k: (figures.append(self), savefig(self, *a, **k))[1])
    c = {"p": [1], "seeds": 1, "m": 4, "s": 10, "l2": 0.1, "ranks": [2, 3], "gd-factor": 30, "g-inverse": "pinv",
         "pinv-rcond": 1e-10, "fedave-server-samples": 3, "local-steps": [5], "step-max": [0.2], "max-epochs": 30,
         "eps": [1e-3, 1e-6], "phi": [1, 100]}
    df = run(c, workers=1)
    assert len(df) == 2 * 2 * 2 and set(df.algorithm) == {"fedlrgd", "fedave"}
    lrgd = df[(df.algorithm == "fedlrgd") & (df.eps == 1e-3) & (df.phi == 100)].iloc[0]
    r = int(lrgd.setting.split()[0][2:])
    S = int(lrgd.setting.split()[1][2:])
    assert lrgd.gamma == r * r + r * 10 + r * S + 100 * 4 * r  # Gamma's closed form
    report(df, tmp_path, "t")
    assert (tmp_path / "oracle_complexity.png").exists() and "| 2 | 100 |" in (tmp_path / "summary.md").read_text()
    (fig,) = figures  # what the plot shows: one panel for p = 1, one curve per (algorithm, phi), eps on x
    (ax,) = fig.axes
    assert (ax.get_title(), ax.get_xlabel(), ax.get_ylabel()) == (
        "d = 2 (p = 1)", "target eps (F - F*)", "federated oracle complexity Gamma")
    labels = ["FedLRGD, phi=1", "FedAve, phi=1", "FedLRGD, phi=100", "FedAve, phi=100"]
    assert [ln.get_label() for ln in ax.get_lines()] == labels
    assert [x.get_text() for x in ax.get_legend().get_texts()] == labels
    curve = ax.get_lines()[2]  # FedLRGD at phi = 100: its Gamma at each eps
    expected = df[(df.algorithm == "fedlrgd") & (df.phi == 100)].sort_values("eps")
    np.testing.assert_allclose(curve.get_xdata(), expected.eps)
    np.testing.assert_allclose(curve.get_ydata(), expected.gamma)
