"""The ancestry picture (``draw_ancestry``) shows every site, also where sites overlap, and says which PCs it draws
have not converged."""

from __future__ import annotations

import io

import numpy as np
import pytest

from fl_strategies.files.plink_outputs import SITE_COLOURS, draw_ancestry


def _pixels(vectors: np.ndarray, groups: list[str]) -> np.ndarray:
    import matplotlib.image

    handle = io.BytesIO()
    draw_ancestry(handle, vectors, groups)
    handle.seek(0)
    return matplotlib.image.imread(handle, format="png")[..., :3]


def test_the_site_drawn_last_does_not_cover_the_others():
    """Two sites of 3,000 people at the same coordinates: drawn one after the other, the second would hide the
    first everywhere; drawn in one shuffled order, the first site's colour is on top at about half the points."""
    from matplotlib import colors

    points = np.random.default_rng(1).uniform(-1, 1, size=(3_000, 2))
    vectors = np.vstack([points, points])
    pixels = _pixels(vectors, ["site A"] * 3_000 + ["site B"] * 3_000).reshape(-1, 3)
    blue, orange = (np.asarray(colors.to_rgb(c)) for c in SITE_COLOURS[:2])
    painted = pixels[np.abs(pixels - 1.0).max(axis=1) > 0.2]  # not the white background
    closer_blue = np.linalg.norm(painted - blue, axis=1) < np.linalg.norm(painted - orange, axis=1)
    assert painted.shape[0] > 10_000
    assert 0.2 < closer_blue.mean() < 0.8


def test_a_site_that_is_a_minority_in_every_cluster_is_seen_in_each():
    """Three clusters of 1,000 people, each mostly one site's (525), a fourth site a quarter of every cluster: the
    fourth site's colour is the nearest at a tenth of the painted pixels at least, as every other site's (tab10's
    red at 2 points of 0.35 was blended into the orange and green around it: 1 % of the pixels)."""
    from matplotlib import colors

    rng = np.random.default_rng(2)
    vectors, groups = [], []
    centres = np.array([[3.0, 0.0], [-1.5, 2.6], [-1.5, -2.6]])
    for c in range(3):
        for site, count in ((c, 525), (3, 250), ((c + 1) % 3, 150), ((c + 2) % 3, 75)):
            vectors.append(centres[c] + 0.35 * rng.standard_normal((count, 2)))
            groups += [f"site {site}"] * count
    pixels = _pixels(np.vstack(vectors), groups).reshape(-1, 3)
    painted = pixels[np.abs(pixels - 1.0).max(axis=1) > 0.2]
    palette = np.array([colors.to_rgb(c) for c in SITE_COLOURS[:4]])
    nearest = np.argmin(np.linalg.norm(painted[:, None, :] - palette[None], axis=2), axis=1)
    assert painted.shape[0] > 5_000
    assert np.all(np.bincount(nearest, minlength=4) / nearest.size > 0.1)


def _axis_labels(monkeypatch, vectors: np.ndarray, converged) -> list[tuple[str, str]]:
    """Each panel's ``(x label, y label)`` as ``draw_ancestry`` drew them (the figure seen as it is closed)."""
    import matplotlib.pyplot as plt

    closed, close = [], plt.close
    monkeypatch.setattr(plt, "close", lambda figure=None: closed.append(figure) or close(figure))
    draw_ancestry(io.BytesIO(), vectors, ["site A"] * len(vectors), converged=converged)
    (figure,) = closed
    return [(axis.get_xlabel(), axis.get_ylabel()) for axis in figure.axes]


@pytest.mark.parametrize("converged, labels", [
    (3, [("PC1", "PC2"), ("PC1", "PC3")]),
    (None, [("PC1", "PC2"), ("PC1", "PC3")]),  # not known (a run against a reference, a model file alone)
    (2, [("PC1", "PC2"), ("PC1", "PC3 (not converged)")]),
    (0, [("PC1 (not converged)", "PC2 (not converged)"), ("PC1 (not converged)", "PC3 (not converged)")])])
def test_an_axis_says_when_its_pc_has_not_converged(monkeypatch, converged, labels):
    vectors = np.random.default_rng(3).standard_normal((50, 4))
    assert _axis_labels(monkeypatch, vectors, converged) == labels


def test_compare_draws_the_sites_with_the_files_its_clients_opened(tmp_path, monkeypatch):
    """An in-process compare projects every site's people with the file its client opened in the process: each
    ``.bed``'s calls are counted once (by its client), not once more for the picture; the run's files are moved into
    ``estimates/``, not copied."""
    pytest.importorskip("bed_reader")
    from fl_strategies.kernels.rows import BedVariants
    from tests.test_genotype_bed import compare_sites, simulated_sites, write_bed

    from simulations.compare import cli

    from fl_strategies.files import plink_outputs

    counted, written, drawn = [], [], []
    count, write, draw = BedVariants._count_codes, cli.write_file, plink_outputs.draw_ancestry
    monkeypatch.setattr(plink_outputs, "draw_ancestry", lambda *a, **k: drawn.append(k["converged"]) or draw(*a, **k))
    monkeypatch.setattr(BedVariants, "_count_codes", lambda self: counted.append(self) or count(self))
    monkeypatch.setattr(cli, "write_file", lambda path, *a, **k: written.append(path.name) or write(path, *a, **k))
    (tmp_path / "data").mkdir()
    for i, G in enumerate(simulated_sites((40, 50, 45), 200, seed=3)):
        write_bed(tmp_path / "data" / f"partition_{i}.bed", G)
    compare_sites(tmp_path, 3, scale='"hwe"', rounds=5, rank=3)
    (picture,) = (tmp_path / "out" / "estimates").glob("*.ancestry.png")
    assert picture.read_bytes()[:4] == b"\x89PNG"
    assert len(counted) == 3
    # the run's files are moved into the results, not read and written again: compare writes the picture alone
    stem = picture.name[:-len(".ancestry.png")]
    assert sorted(path.name for path in picture.parent.iterdir()) == sorted(
        f"{stem}{suffix}" for suffix in (".npy", ".pca.npz", ".eigenval", ".eigenvec.allele", ".score", ".afreq",
                                         ".ancestry.png"))
    assert [name for name in written if name.startswith(stem)] == [picture.name]
    # the picture is told how many PCs the run's last row had converged
    import pandas as pd

    rows = pd.read_csv(tmp_path / "out" / "results.csv")
    assert drawn == [int(rows["converged_components"].iloc[-1])] and 0 <= drawn[0] <= 3
