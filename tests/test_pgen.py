"""PLINK 2 ``.pgen`` node files (with ``.pvar`` and ``.psam``): the same model as the same genotypes in ``.bed``."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from fl_strategies.files.data_files import open_samples

bed_reader = pytest.importorskip("bed_reader")
pgenlib = pytest.importorskip("pgenlib")

from tests.test_genotype_bed import compare_sites, simulated_sites, write_bed  # noqa: E402
from tests.test_variant_alignment import disagreeing_sites  # noqa: E402
from tests.test_variant_qc import qc_sites  # noqa: E402

needs_plink2 = pytest.mark.skipif(shutil.which("plink2") is None, reason="plink2 is not installed")


def bed_to_pgen(bed, pgen) -> None:
    """The ``.bed`` (with ``.bim`` and ``.fam``) at ``bed`` as ``pgen`` with its ``.pvar`` and ``.psam``, as
    ``plink2 --make-pgen`` writes them: A1 as ALT (the allele counted), A2 as REF; written with pgenlib."""
    G = open_samples(bed)
    calls = np.asarray(G)  # (s, d) float, NaN missing
    calls = np.where(np.isnan(calls), -9, calls).astype(np.int8)
    writer = pgenlib.PgenWriter(str(pgen).encode(), calls.shape[0], calls.shape[1], False)
    for j in range(calls.shape[1]):
        writer.append_biallelic(np.ascontiguousarray(calls[:, j]))
    writer.close()
    bim = [line.split() for line in open(str(bed)[:-4] + ".bim")]
    fam = [line.split() for line in open(str(bed)[:-4] + ".fam")]
    with open(str(pgen)[:-5] + ".pvar", "w") as handle:
        handle.write("##fileformat=PVARv1.0\n#CHROM\tPOS\tID\tREF\tALT\n")
        handle.writelines(f"{c}\t{pos}\t{vid}\t{a2}\t{a1}\n" for c, vid, _, pos, a1, a2 in bim)
    with open(str(pgen)[:-5] + ".psam", "w") as handle:
        handle.write("#FID\tIID\tPAT\tMAT\tSEX\n")
        handle.writelines(f"{fid}\t{iid}\t{pat}\t{mat}\tNA\n" for fid, iid, pat, mat, *_ in fam)
    if Path(bed).with_suffix(".keep").exists():
        shutil.copyfile(Path(bed).with_suffix(".keep"), Path(pgen).with_suffix(".keep"))


def as_pgen_folder(tmp_path, name="pgen"):
    """``tmp_path / "data"``'s ``.bed`` sites as ``.pgen`` sites in ``tmp_path / name / "data"``."""
    folder = tmp_path / name / "data"
    folder.mkdir(parents=True)
    for bed in sorted((tmp_path / "data").glob("partition_*.bed")):
        bed_to_pgen(bed, folder / (bed.stem + ".pgen"))
    return tmp_path / name


@pytest.mark.parametrize("people,in_memory", [(29, True), (32, True), (31, False)])
def test_a_pgen_decodes_to_the_codes_of_the_same_genotypes_bed(tmp_path, monkeypatch, people, in_memory):
    """Byte for byte the ``.bed``'s codes, in memory or (above ``MEMORY_BYTES``) in a temporary file that is gone from
    its folder as soon as it is made."""
    import mmap
    import tempfile

    from fl_strategies.files import pgen

    G = simulated_sites((people,), 70, missing=0.05, seed=3)[0]
    write_bed(tmp_path / "x.bed", G)
    bed_to_pgen(tmp_path / "x.bed", tmp_path / "x.pgen")
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    monkeypatch.setattr(pgen, "MEMORY_BYTES", pgen.MEMORY_BYTES if in_memory else 0)
    X, B = open_samples(tmp_path / "x.pgen"), open_samples(tmp_path / "x.bed")
    owner = X.rows
    while isinstance(owner, np.ndarray) and owner.base is not None:
        owner = owner.base
    assert isinstance(getattr(owner, "obj", owner), mmap.mmap) != in_memory  # a memoryview of the temporary file
    assert list((tmp_path / "tmp").iterdir()) == []
    assert np.array_equal(np.asarray(X.rows), np.asarray(B.rows))  # byte for byte, padding included
    np.testing.assert_array_equal(X.code_counts, B.code_counts)
    np.testing.assert_array_equal(np.asarray(X), G)  # NaN where a call is missing


def test_sites_in_pgen_give_the_bed_sites_model_with_missing_calls_alignment_and_qc(tmp_path):
    """Three sites with missing calls, one in another variant order with swapped alleles, one without five variants,
    ``maf-min`` and ``geno-max``: the model of the ``.pgen`` sites is the ``.bed`` sites' one."""
    sites = qc_sites((50, 60, 45), 300, seed=21)
    (tmp_path / "data").mkdir()
    disagreeing_sites(tmp_path / "data", sites, 300)
    extra = "maf-min = 0.05\ngeno-max = 0.1"
    bed = compare_sites(tmp_path, 3, scale='"hwe"', rounds=30, rank=2, extra=extra)
    pgen = compare_sites(as_pgen_folder(tmp_path), 3, scale='"hwe"', rounds=30, rank=2, extra=extra)
    assert 200 < bed["components"].shape[1] < 295  # the filters dropped variants of the 295 shared
    assert list(map(tuple, pgen["variants"])) == list(map(tuple, bed["variants"]))
    for key in ("components", "singular_values", "explained_variance", "mean", "scale"):
        np.testing.assert_allclose(pgen[key], bed[key], rtol=0, atol=1e-12, err_msg=key)


def test_pgen_sites_with_parents_and_a_keep_prune_and_fit_as_the_same_bed_sites(tmp_path):
    """The ``.psam``'s ``PAT`` / ``MAT`` make plink2's founders (LD pruning's r^2 and the frequencies) and a ``.keep``
    beside a ``.pgen`` chooses the fitted people, as beside a ``.bed``: same prune.in and model."""
    from tests.test_ld_prune import family_sites

    sites, chrom, bp, founders, fit = family_sites(tmp_path)
    assert not founders.all() and not fit.all()
    extra = 'indep-pairwise = "50 5 0.2"'
    bed = compare_sites(tmp_path, 3, scale='"hwe"', rounds=20, rank=2, extra=extra)
    kept_bed = next((tmp_path / "out" / "estimates").glob("*.prune.in")).read_text()
    pgen_folder = as_pgen_folder(tmp_path)
    assert sorted(p.name for p in (pgen_folder / "data").glob("*.keep")) == ["partition_0.keep"]
    pgen = compare_sites(pgen_folder, 3, scale='"hwe"', rounds=20, rank=2, extra=extra)
    kept_pgen = next((pgen_folder / "out" / "estimates").glob("*.prune.in")).read_text()
    assert kept_pgen == kept_bed and 0 < len(kept_bed.split()) < 300
    for key in ("components", "singular_values", "mean", "scale"):
        np.testing.assert_allclose(pgen[key], bed[key], rtol=0, atol=1e-12, err_msg=key)
    from fl_strategies.files.keep import founders_of

    site_founders = np.concatenate([founders_of(pgen_folder / "data" / f"partition_{i}.pgen") for i in range(3)])
    np.testing.assert_array_equal(site_founders, founders)


def test_pvar_and_psam_are_read_with_or_without_their_header_lines(tmp_path):
    from fl_strategies.files.pgen import read_psam, read_pvar

    (tmp_path / "a.pvar").write_text("##fileformat=PVARv1.0\n##contig=<ID=1>\n#CHROM\tID\tPOS\tALT\tREF\tQUAL\n"
                                     "1\trs1\t10\tA\tG\t.\n1\trs2\t20\t.\tC\t.\n")
    assert read_pvar(tmp_path / "a.pgen") == [("1", "rs1", "10", "A", "G"), ("1", "rs2", "20", ".", "C")]
    (tmp_path / "b.pvar").write_text("1 rs1 0 10 A G\n2 rs2 0.5 20 T C\n")  # as a .bim: ALT (A1) fifth
    assert read_pvar(tmp_path / "b.pgen") == [("1", "rs1", "10", "A", "G"), ("2", "rs2", "20", "T", "C")]
    (tmp_path / "a.psam").write_text("#IID\tSEX\ni1\t1\ni2\tNA\n")
    assert read_psam(tmp_path / "a.pgen") == [("0", "i1"), ("0", "i2")]  # plink2 --make-bed's FID
    (tmp_path / "b.psam").write_text("#FID\tIID\tPAT\tMAT\nf1\ti1\t0\t0\n")
    assert read_psam(tmp_path / "b.pgen") == [("f1", "i1")]
    (tmp_path / "e.psam").write_text("#IID\tPAT\tMAT\ni1\t0\t0\ni2\ti1\t0\n")
    assert read_psam(tmp_path / "e.pgen", parents=True) == [("0", "0"), ("i1", "0")]
    assert read_psam(tmp_path / "a.pgen", parents=True) == [("0", "0"), ("0", "0")]  # no PAT / MAT: founders
    (tmp_path / "c.psam").write_text("f1 i1 0 0 1 -9\nf2 i2 0 0 2 -9\n")  # as a .fam
    assert read_psam(tmp_path / "c.pgen") == [("f1", "i1"), ("f2", "i2")]
    assert read_psam(tmp_path / "c.pgen", parents=True) == [("0", "0"), ("0", "0")]
    (tmp_path / "d.pvar").write_text("#CHROM\tPOS\tREF\tALT\n1\t10\tA\tG\n")
    with pytest.raises(ValueError, match=r"d.pvar: line 1: the header has no ID column"):
        read_pvar(tmp_path / "d.pgen")


def test_a_pgen_without_its_pvar_or_psam_is_refused_naming_it(tmp_path):
    write_bed(tmp_path / "x.bed", simulated_sites((10,), 20, seed=1)[0])
    bed_to_pgen(tmp_path / "x.bed", tmp_path / "x.pgen")
    for suffix in (".pvar", ".psam"):
        moved = (tmp_path / "x").with_suffix(suffix)
        moved.rename(tmp_path / "aside")
        with pytest.raises(ValueError) as refused:
            open_samples(tmp_path / "x.pgen", "node config data-path")
        assert str(refused.value).startswith(f"node config data-path {str(tmp_path / 'x.pgen')!r}: has no {suffix} "
                                             f"beside it ({str(moved)!r})")
        (tmp_path / "aside").rename(moved)


def test_a_pgen_with_a_multiallelic_variant_or_without_pgenlib_is_refused_in_one_line(tmp_path, monkeypatch):
    """Also: a ``.psam`` or ``.pvar`` short of a line."""
    write_bed(tmp_path / "x.bed", simulated_sites((10,), 20, seed=1)[0])
    bed_to_pgen(tmp_path / "x.bed", tmp_path / "x.pgen")
    pvar, psam = tmp_path / "x.pvar", tmp_path / "x.psam"
    people = psam.read_text()
    psam.write_text(people.rsplit("\n", 2)[0] + "\n")
    with pytest.raises(ValueError, match=r"^file '.*x.pgen': is not a readable PLINK 2 .pgen file \(with 9 people in "
                                         r"its .psam\): .*raw_sample_ct == 9, but .*x.pgen contains 10 samples.$"):
        open_samples(tmp_path / "x.pgen")
    psam.write_text(people)
    lines = pvar.read_text().splitlines()
    pvar.write_text("\n".join(lines[:-1]) + "\n")
    with pytest.raises(ValueError, match=r"x.pgen': holds 20 variants, but its .pvar lists 19$"):
        open_samples(tmp_path / "x.pgen")
    pvar.write_text("\n".join(lines[:4] + [lines[4] + ",T"] + lines[5:]) + "\n")
    with pytest.raises(ValueError, match=r"x.pvar: line 5: variant \S+ has 2 ALT alleles .*plink2 --max-alleles 2"):
        open_samples(tmp_path / "x.pgen")
    monkeypatch.setitem(sys.modules, "pgenlib", None)  # not installed
    with pytest.raises(ValueError, match="needs the Python package pgenlib, which is not installed: pip install"):
        open_samples(tmp_path / "x.pgen")


def test_transform_of_a_pgen_writes_the_beds_eigenvec_with_the_psams_ids(tmp_path):
    from client_app.transform import main

    sites = simulated_sites((40, 30), 200, missing=0.01, seed=4, populations=3)
    (tmp_path / "data").mkdir()
    for i, G in enumerate(sites):
        write_bed(tmp_path / "data" / f"partition_{i}.bed", G)
    compare_sites(tmp_path, 2, scale='"hwe"', rounds=20, rank=2)
    as_pgen_folder(tmp_path)
    (model,) = (tmp_path / "out" / "estimates").glob("*.pca.npz")
    written = {}
    for suffix, folder in ((".bed", tmp_path / "data"), (".pgen", tmp_path / "pgen" / "data")):
        out = tmp_path / f"site{suffix}.eigenvec"
        assert main(["--model", str(model), "--data", str(folder / f"partition_1{suffix}"), "--out", str(out)]) == 0
        written[suffix] = out.read_text()
    assert written[".pgen"] == written[".bed"]
    psam = (tmp_path / "pgen" / "data" / "partition_1.psam").read_text().splitlines()[1:]
    assert [line.split("\t")[:2] for line in written[".pgen"].splitlines()[1:]] == [p.split("\t")[:2] for p in psam]


def test_a_folder_mixing_bed_and_pgen_files_is_refused_in_one_line(tmp_path, capsys):
    from fedspectral.cli import main

    sites = simulated_sites((20, 20), 50, missing=0.0, seed=2)
    (tmp_path / "data").mkdir()
    write_bed(tmp_path / "data" / "partition_0.bed", sites[0])
    write_bed(tmp_path / "b.bed", sites[1])
    bed_to_pgen(tmp_path / "b.bed", tmp_path / "data" / "partition_1.pgen")
    before = sorted(p.name for p in tmp_path.rglob("*"))
    assert main(["run", "--run-config", f'dataset="{tmp_path / "data"}" num-clients=2 rank=2 center=true '
                 f'results-dir="{tmp_path / "out"}"']) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "mixes kinds of node file (PLINK .bed: partition 0 (partition_0.bed); PLINK .pgen: " \
        "partition 1 (partition_1.pgen)): a run reads one kind of file at every node" in err[0], err
    assert sorted(p.name for p in tmp_path.rglob("*")) == before
    from fedspectral.deploy import main as deploy

    assert deploy(["--run-config", 'dataset="nodes" num-clients=2 rank=2 center=true', "--data-dir",
                   str(tmp_path / "data"), "--out", str(tmp_path / "deployment")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "mixes kinds of node file (PLINK .bed: partition 0 (partition_0.bed); PLINK .pgen: " \
        "partition 1 (partition_1.pgen))" in err[0], err
    assert sorted(p.name for p in tmp_path.rglob("*")) == before


@pytest.mark.plink2
@needs_plink2
def test_pgen_sites_give_plink2s_pca_of_the_pooled_pgen(tmp_path):
    """The sites' ``.pgen`` files made by ``plink2 --make-pgen`` (not by the tests' writer): the run's PCs against
    ``plink2 --pfile <pooled> --pca``, and plink2 counts the ALT allele as the run does."""
    sites = simulated_sites((60, 50, 70), 1000, missing=0.01, seed=9, populations=4)
    folder = tmp_path / "pgen"
    (folder / "data").mkdir(parents=True)
    for i, G in enumerate(sites):
        write_bed(tmp_path / f"site{i}.bed", G)
        subprocess.run(["plink2", "--bfile", str(tmp_path / f"site{i}"), "--make-pgen", "--out",
                        str(folder / "data" / f"partition_{i}")], check=True, capture_output=True)
    write_bed(tmp_path / "pooled.bed", np.vstack(sites))
    subprocess.run(["plink2", "--bfile", str(tmp_path / "pooled"), "--make-pgen", "--out", str(tmp_path / "pooled")],
                   check=True, capture_output=True)
    subprocess.run(["plink2", "--pfile", str(tmp_path / "pooled"), "--pca", "3", "--threads", "1", "--out",
                    str(tmp_path / "plink2")], check=True, capture_output=True)
    model = compare_sites(folder, 3, scale='"hwe"', rounds=60, rank=3)
    from fl_strategies.files.pca import transform

    scores = np.vstack([transform(model, open_samples(folder / "data" / f"partition_{i}.pgen")) for i in range(3)])
    assert (folder / "data" / "partition_0.psam").read_text().startswith("#IID")  # no FID: read as FID 0
    ids = 2 if (tmp_path / "plink2.eigenvec").read_text().startswith("#FID") else 1
    vectors = np.loadtxt(tmp_path / "plink2.eigenvec", skiprows=1, usecols=range(ids, ids + 3))
    correlation = np.array([abs(np.corrcoef(scores[:, j], vectors[:, j])[0, 1]) for j in range(3)])
    print("1 - |r|", 1 - correlation)
    assert np.all(correlation >= 0.99999)
    values = np.loadtxt(next((folder / "out" / "estimates").glob("*.eigenval")))
    # 1 % missing calls: plink2 divides by the calls each pair shares, the run by d / c_i per person (first order)
    np.testing.assert_allclose(values / np.loadtxt(tmp_path / "plink2.eigenval"), 1.0, rtol=1e-3)
    subprocess.run(["plink2", "--bfile", str(tmp_path / "pooled"), "--pca", "3", "--threads", "1", "--out",
                    str(tmp_path / "bed")], check=True, capture_output=True)
    np.testing.assert_array_equal(np.loadtxt(tmp_path / "bed.eigenval"), np.loadtxt(tmp_path / "plink2.eigenval"))
    from_bed = np.loadtxt(tmp_path / "bed.eigenvec", skiprows=1, usecols=(2, 3, 4))
    np.testing.assert_allclose(np.abs(from_bed), np.abs(vectors), rtol=0, atol=2e-6)  # plink2: the same PCA


RUN = ('num-clients=3 center=true scale="hwe" row-normalize=false strategy="fedpower" rank=2 iteration-rank=4 '
       'local-steps=2 num-server-rounds=30 results-dir="pca-out"')


def pgen_sites_and_bed_model(tmp_path):
    """Three sites with 1 % missing calls as ``.bed`` files (the in-process model of them) and as ``.pgen`` files in
    ``tmp_path / "pgen" / "data"``: ``(pgen folder, model)``."""
    sites = simulated_sites((40, 50, 30), 300, missing=0.01, seed=8)
    (tmp_path / "data").mkdir()
    for i, G in enumerate(sites):
        write_bed(tmp_path / "data" / f"partition_{i}.bed", G)
    model = compare_sites(tmp_path, 3, scale='"hwe"', rounds=30, rank=2)
    return as_pgen_folder(tmp_path) / "data", model


def assert_same_model(model, reference):
    from fl_strategies.kernels.linalg import subspace_distance

    assert subspace_distance(model["components"].T, reference["components"].T) < 1e-8
    np.testing.assert_allclose(model["singular_values"], reference["singular_values"], rtol=1e-8)
    np.testing.assert_allclose(model["mean"], reference["mean"], rtol=0, atol=1e-12)
    assert list(map(tuple, model["variants"])) == list(map(tuple, reference["variants"]))


@pytest.mark.ray
@pytest.mark.timeout(400)
def test_fedspectral_run_over_a_folder_of_pgen_files_gives_the_bed_sites_model(tmp_path, flower_processes):
    from fl_strategies.files.pca import load_model

    folder, reference = pgen_sites_and_bed_model(tmp_path)
    done = subprocess.run([sys.executable, "-m", "fedspectral", "run", "--run-config",
                           f'dataset="{folder}" {RUN}'], cwd=tmp_path, capture_output=True, text=True, timeout=380)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert_same_model(load_model(tmp_path / "pca-out" / "pca.npz"), reference)


@pytest.mark.deploy
@pytest.mark.timeout(600)
def test_deploy_with_pgen_node_files_gives_the_bed_sites_model(tmp_path, flower_processes):
    from fl_strategies.files.pca import load_model

    folder, reference = pgen_sites_and_bed_model(tmp_path)
    done = subprocess.run([sys.executable, "-m", "simulations.engines.deploy", "--data-dir", str(folder),
                           "--run-config", f'dataset="nodes" {RUN}'], cwd=tmp_path, capture_output=True, text=True,
                          timeout=580)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert_same_model(load_model(tmp_path / "pca-out" / "pca.npz"), reference)


def test_a_pgen_nodes_discovery_reads_its_pvar_once(tmp_path, monkeypatch):
    """A ``.pvar`` is not kept parsed by content as a ``.bim`` is (``read_bim``): a node's digest and its check
    of repeated IDs use the list it read once (``client_app/data.py``: ``_unkept_list``), not two more reads."""
    from client_app import data
    from client_app.data import NodeData
    from fl_strategies.files import pgen
    from fl_strategies.files.variants import variant_digest

    G = np.random.default_rng(8).integers(0, 3, (12, 5)).astype(np.float32)
    bed_to_pgen(write_bed(tmp_path / "g.bed", G), tmp_path / "g.pgen")
    reads = []
    real = pgen.read_pvar
    monkeypatch.setattr(pgen, "read_pvar", lambda path: reads.append(path) or real(path))
    for cache in (data._read_cached, data._bim_cached, data._digest_cached):
        cache.cache_clear()
    cfg = {"num-clients": 1, "row-normalize": False, "dataset": "nodes", "dimension": 0}
    node = NodeData(cfg, {"partition-id": 0, "data-path": str(tmp_path / "g.pgen")})
    assert node.num_rows == 12  # the file opened and checked (repeated IDs)
    assert node.variant_digest == variant_digest(node.bim) and len(node.bim) == 5
    assert len(reads) == 2  # the file's opening (its width) and the node's list
