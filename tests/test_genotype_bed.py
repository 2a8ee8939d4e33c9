"""PLINK ``.bed`` files read in their own variant-major order: products, discovery sums and ``transform``."""

from __future__ import annotations

import numpy as np
import pytest

from fl_strategies.files.data_files import open_samples
from fl_strategies.kernels.products import LocalOperator
from fl_strategies.kernels.rows import BedVariants

bed_reader = pytest.importorskip("bed_reader")


def write_bed(path, G) -> str:
    """``G`` (n, d) of 0/1/2 (NaN: a missing call) as a PLINK ``.bed`` with its ``.fam`` and ``.bim``."""
    bed_reader.to_bed(path, np.asarray(G, dtype=np.float32))
    return str(path)


class Recorder:
    """The raw bytes of a :class:`BedVariants`, recording which variant slices are read."""

    def __init__(self, raw):
        self.raw, self.reads, self.shape, self.nbytes = raw, [], raw.shape, raw.nbytes

    def __getitem__(self, index):
        self.reads.append((index.start, index.stop))
        return self.raw[index]


def test_a_bed_product_reads_the_file_in_variant_blocks_in_file_order(tmp_path):
    rng = np.random.default_rng(0)
    G = rng.integers(0, 3, (37, 101)).astype(float)
    X = open_samples(write_bed(tmp_path / "g.bed", G))
    assert isinstance(X, BedVariants) and X.shape == (37, 101)
    X.block = 10  # variants per block
    X.rows = recorder = Recorder(X.rows)
    op = LocalOperator.from_rows(X)
    mean, scale = G.mean(axis=0), G.std(axis=0) + 0.5
    Z = rng.standard_normal((101, 3))
    Xc = (G - mean) / scale
    np.testing.assert_allclose(op.centered(mean, scale) @ Z, Xc.T @ (Xc @ Z) / 37, rtol=0, atol=1e-12)
    blocks = [(start, min(start + 10, 101)) for start in range(0, 101, 10)]
    assert recorder.reads == [(a, a + 10) for a, _ in blocks] * 2  # two passes (X Z, then X^T Y), each in order
    np.testing.assert_allclose(op @ Z, G.T @ (G @ Z) / 37, rtol=0, atol=1e-12)
    np.testing.assert_allclose(op.centered(mean, scale).trace(), np.trace(Xc.T @ Xc) / 37, rtol=1e-13)


@pytest.mark.parametrize("people", [28, 29, 30, 31])
def test_decoding_agrees_with_bed_reader_whatever_the_padding(tmp_path, people):
    G = np.random.default_rng(people).integers(0, 3, (people, 23)).astype(float)
    X = open_samples(write_bed(tmp_path / "g.bed", G))
    X.block = 4
    np.testing.assert_array_equal(np.asarray(X), bed_reader.open_bed(tmp_path / "g.bed").read(dtype="float64"))
    total, squares = X.stats()
    np.testing.assert_array_equal(total, G.sum(axis=0))
    np.testing.assert_array_equal(squares, (G * G).sum(axis=0))


def test_a_fam_short_of_a_person_is_refused(tmp_path):
    G = np.random.default_rng(2).integers(0, 3, (32, 40)).astype(float)
    path = write_bed(tmp_path / "g.bed", G)
    fam = (tmp_path / "g.fam").read_text().splitlines()
    (tmp_path / "g.fam").write_text("\n".join(fam[:-1]) + "\n")  # 31 people fit the same bytes as 32
    with pytest.raises(ValueError, match=r"g.bed'.*calls beyond the 31 people its .fam lists"):
        open_samples(path, "node config data-path")


def test_transform_of_a_bed_reads_it_in_variant_order(tmp_path):
    from client_app.transform import main

    rng = np.random.default_rng(3)
    G = rng.integers(0, 3, (21, 30)).astype(float)
    write_bed(tmp_path / "g.bed", G)
    components = np.linalg.qr(rng.standard_normal((30, 2)))[0].T
    model = {"components": components, "mean": G.mean(axis=0) + 0.1, "scale": G.std(axis=0) + 0.2,
             "explained_variance": np.array([2.0, 1.0]), "explained_variance_ratio": np.array([0.2, 0.1]),
             "singular_values": np.array([3.0, 2.0]), "n_samples": 21}
    from fl_strategies.files.pca import save_model

    save_model(tmp_path / "pca.npz", model, {"center": True})
    assert main(["--model", str(tmp_path / "pca.npz"), "--data", str(tmp_path / "g.bed"),
                 "--out", str(tmp_path / "s.npy")]) == 0
    expected = ((G - model["mean"]) / model["scale"]) @ components.T
    np.testing.assert_allclose(np.load(tmp_path / "s.npy"), expected, rtol=0, atol=1e-12)
