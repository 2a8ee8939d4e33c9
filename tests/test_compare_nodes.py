"""compare on a folder of per-client files (no exact reference): it reports what the runs write."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from sklearn.decomposition import PCA

from simulations.compare import main
from simulations.compare.cli import load_comparison


def _folder(tmp_path):
    rng = np.random.default_rng(3)
    basis = np.linalg.qr(rng.standard_normal((6, 6)))[0]
    blocks = [2.0 + (rng.standard_normal((s, 6)) * [5, 3, 1, 0.5, 0.3, 0.2]) @ basis.T for s in (40, 60, 80)]
    folder = tmp_path / "data"
    folder.mkdir()
    for i, block in enumerate(blocks):
        np.save(folder / f"partition_{i}.npy", block)
    return folder, np.vstack(blocks)


def _file(tmp_path, folder, top="", runs=("power", "fedpower"), extra=""):
    f = tmp_path / "c.toml"
    f.write_text(f'{top}thresholds = [1e-2, 1e-6]\n[defaults]\ndataset = "{folder}"\nnum-clients = 3\nrank = 2\n'
                 f'iteration-rank = 2\nnum-server-rounds = 12\ncenter = true\nrow-normalize = false\n{extra}'
                 + "".join(f'[[runs]]\nname = "{s}"\nstrategy = "{s}"\n' for s in runs))
    return f


def test_node_data_defaults_to_the_change_of_the_estimate_and_reports_the_models_ratio(tmp_path, capsys):
    folder, X = _folder(tmp_path)
    f = _file(tmp_path, folder)
    assert load_comparison(f)[0]["metric"] == "estimate_change_first_k"  # the kept components'; here rank 2 of 2
    out = tmp_path / "o"
    assert main([str(f), "--out", str(out)]) == 0
    summary = (out / "summary.md").read_text()
    assert "final estimate change first k" in summary and "final explained variance ratio" in summary
    results = pd.read_csv(out / "results.csv")
    ratio = PCA(n_components=2).fit(X).explained_variance_ratio_.sum()
    for line in summary.splitlines()[-2:]:  # power, fedpower: a value in every cell that has one
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert cells[4] != "—" and float(cells[-1]) == pytest.approx(ratio, abs=1e-4)
    assert results.groupby("run")["estimate_change"].last().max() < 1e-2
    assert (out / "estimate_change_first_k.png").stat().st_size > 10_000


@pytest.mark.parametrize("metric", ["explained_variance_ratio", "iterated_explained_variance_ratio"])
def test_node_data_accepts_the_explained_variance_metrics(tmp_path, metric):
    folder, _ = _folder(tmp_path)
    out = tmp_path / "o"
    assert main([str(_file(tmp_path, folder, top=f'metric = "{metric}"\n')), "--out", str(out)]) == 0
    assert (out / f"{metric}.png").is_file()


@pytest.mark.parametrize("top, extra, fragment", [
    ('metric = "subspace_distance"\n', "", "metric 'subspace_distance' is empty for run 'power': it has no exact "
                                           "reference"),
    ("", "", None),
])
def test_a_metric_no_run_can_write_is_refused_before_anything_runs(tmp_path, capsys, top, extra, fragment):
    folder, _ = _folder(tmp_path)
    if fragment is None:  # a run with a reference and one without: no common accuracy column
        f = tmp_path / "mixed.toml"
        f.write_text(f'[[runs]]\nname = "sim"\nstrategy = "power"\n[[runs]]\nname = "files"\nstrategy = "power"\n'
                     f'dataset = "{folder}"\nnum-clients = 3\nrank = 2\niteration-rank = 2\n')
        fragment = "run 'sim' is measured against the exact reference and run 'files' has none"
    else:
        f = _file(tmp_path, folder, top=top, extra=extra)
    assert main([str(f), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and fragment in err
    assert not (tmp_path / "o").exists()


def test_a_noisy_run_is_refused_an_explained_variance_metric(tmp_path, capsys):
    folder, _ = _folder(tmp_path)
    f = tmp_path / "n.toml"
    f.write_text(f'metric = "explained_variance_ratio"\n[defaults]\ndataset = "{folder}"\nnum-clients = 3\n'
                 'rank = 2\niteration-rank = 2\nrow-normalize = true\nepsilon = 2.0\n'
                 '[[runs]]\nname = "dp"\nstrategy = "fedpower"\n')
    assert main([str(f), "--out", str(tmp_path / "o")]) == 2
    assert "a noisy run sends no explained variance" in capsys.readouterr().err


def test_an_all_empty_metric_column_is_reported_as_empty_not_drawn(tmp_path, capsys):
    """covariance writes no per-round explained variance: the summary says so, and no blank figure is drawn."""
    folder, _ = _folder(tmp_path)
    f = _file(tmp_path, folder, top='metric = "iterated_explained_variance_ratio"\n', runs=("covariance",))
    out = tmp_path / "o"
    assert main([str(f), "--out", str(out)]) == 0
    assert "No run wrote a value of iterated_explained_variance_ratio" in (out / "summary.md").read_text()
    assert "warning: no run wrote a value of iterated_explained_variance_ratio" in capsys.readouterr().err
    assert not (out / "iterated_explained_variance_ratio.png").exists()


def test_a_summary_shows_the_leading_pcs_converged_while_the_kept_subspace_still_turns(tmp_path):
    """Two clear PCs, then a bulk of equal eigenvalues: with rank 4 the kept subspace (PC3-4 in the bulk) keeps
    turning, so "final estimate change first k" stays large and "rounds to 0.01" is "—", while PC1-2 are exact:
    "PCs converged" says so, and the footnote says what each column measures."""
    rng = np.random.default_rng(5)
    basis = np.linalg.qr(rng.standard_normal((30, 30)))[0]
    folder = tmp_path / "data"
    folder.mkdir()
    for i in range(3):
        np.save(folder / f"partition_{i}.npy", (rng.standard_normal((300, 30)) * ([8.0, 4.0] + [1.0] * 28)) @ basis.T)
    f = _file(tmp_path, folder, runs=("power",))
    f.write_text(f.read_text().replace("rank = 2\niteration-rank = 2\nnum-server-rounds = 12",
                                       "rank = 4\niteration-rank = 4\nnum-server-rounds = 15"))
    out = tmp_path / "o"
    assert main([str(f), "--out", str(out)]) == 0
    summary = (out / "summary.md").read_text()
    header, _, row = summary.splitlines()[-3:]
    cells = dict(zip([c.strip() for c in header.strip("|").split("|")], [c.strip() for c in row.strip("|").split("|")]))
    assert float(cells["final estimate change first k"].split()[0]) > 1e-2 and cells["rounds to 0.01"] == "—"
    named, moved = cells["PCs converged"].split(" (moved ")
    assert named == "PC1-2" and float(moved.rstrip(")")) < 1e-10
    assert "PCs converged: the leading kept components that moved by at most 0.001" in summary
    assert "the column stays large while the leading PCs are exact" in summary
    results = pd.read_csv(out / "results.csv")
    assert results["converged_components"].iloc[-1] == 2 and results["converged_components"].iloc[1] == 0
