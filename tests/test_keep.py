"""A fit on chosen people: a plink ``--keep`` file beside a site's ``.bed`` (``fl_strategies/files/keep.py``,
:meth:`~fl_strategies.kernels.rows.BedVariants.subset`), and everyone scored with the model as plink2 projects them."""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest

from fl_strategies.files.data_files import open_samples
from fl_strategies.files.keep import kept_people, read_keep, site_keep

bed_reader = pytest.importorskip("bed_reader")

from test_genotype_bed import compare_sites, imputed_reference, plink2_grm, simulated_sites, write_bed  # noqa: E402

@pytest.mark.parametrize("people,threads,block", [(29, 1, 4), (32, 2, 3), (31, 3, 64)])
def test_a_subset_is_the_file_of_its_people_alone(tmp_path, people, threads, block):
    """Counts, calls, decoded rows, products and row squares of a subset (alone, and with :meth:`aligned` before or
    after it) are those of the dense rows of its people, missing calls imputed with the given mean."""
    rng = np.random.default_rng(people)
    G = rng.integers(0, 3, (people, 40)).astype(float)
    G[rng.random(G.shape) < 0.15] = np.nan
    G[:, 7] = np.nan
    X = open_samples(write_bed(tmp_path / "g.bed", G))
    chosen = np.sort(rng.choice(people, people - 7, replace=False))
    flip = rng.random(40) < 0.3
    order = rng.permutation(40)
    everyone = np.arange(people)
    for S, rows, aligned in ((X.subset(everyone), everyone, False), (X.subset(chosen), chosen, False),
                             (X.aligned(order, flip, 40).subset(chosen), chosen, True),
                             (X.subset(chosen).aligned(order, flip, 40), chosen, True)):
        S.product_block, S.threads, S.block = block, threads, 5
        dense = G[rows].copy()
        if aligned:  # file variant j is column order[j], its alleles exchanged where flip
            dense[:, order] = np.where(flip, 2 - G[rows], G[rows])
        assert S.shape == (len(rows), 40) and S.num_rows == len(rows)
        np.testing.assert_array_equal(np.asarray(S), dense)
        np.testing.assert_array_equal(S.person_calls, (~np.isnan(dense)).sum(axis=1))
        np.testing.assert_array_equal(S.call_counts(), (~np.isnan(dense)).sum(axis=0))
        np.testing.assert_array_equal(S.stats()[0], np.nansum(dense, axis=0))
        mean, scale = rng.uniform(0.1, 1.9, 40), rng.uniform(0.5, 2.0, 40)
        Xc = np.where(np.isnan(dense), 0.0, (dense - mean) / scale)
        Z, Y = rng.standard_normal((40, 3)), rng.standard_normal((len(rows), 3))
        np.testing.assert_allclose(S.left(Z, mean, scale), Xc @ Z, rtol=0, atol=1e-12)
        np.testing.assert_allclose(S.right(Y, mean, scale), Xc.T @ Y, rtol=0, atol=1e-12)
        np.testing.assert_allclose(S.row_squares(mean, scale), (Xc ** 2).sum(axis=1), rtol=0, atol=1e-12)
        # LD pruning's counts (variant-major, a missing call -1) are the kept people's too
        np.testing.assert_array_equal(S.column_counts(0, 40), np.nan_to_num(dense, nan=-1).T.astype(np.int8))
    np.testing.assert_array_equal(X.subset(everyone).code_counts, X.code_counts)
    with pytest.raises(ValueError, match="distinct positions"):
        X.subset(np.array([3, 3]))


def fam_of(path, fids):
    """Rewrite the ``.fam`` beside ``path`` with the family IDs ``fids`` (one a person)."""
    fam = path.with_suffix(".fam")
    lines = fam.read_text().splitlines()
    fam.write_text("".join(f"{fid} {' '.join(line.split()[1:])}\n" for fid, line in zip(fids, lines)))


def test_a_keep_is_read_as_plink2_reads_it(tmp_path):
    """The forms plink2 --keep reads (checked against plink2 v2.00a3.5): FID IID lines, a #FID or #IID header, one
    column (an IID, FID 0), more columns ignored, blank lines; people the file lacks counted, not kept."""
    samples = [("F1", "a"), ("F2", "b"), ("0", "c"), ("F1", "d")]
    forms = {"F1 a\nF2 b extra\n\nX nobody\n": ([0, 1], 1),
             "#FID\tIID\tSEX\nF1\td\t1\nF1 a 2\n": ([0, 3], 0),
             "#IID\nc\na\n": ([2], 1),  # a is F1's, not FID 0's
             "c\n": ([2], 0),
             "FID IID\nF2 b\n": ([1], 1)}  # a first line without '#' is a person, as plink2 reads it
    for number, (text, (people, unknown)) in enumerate(forms.items()):
        (tmp_path / f"{number}.keep").write_text(text)
        got, missing = kept_people(tmp_path / f"{number}.keep", samples)
        assert got.tolist() == people and missing == unknown, text
    (tmp_path / "bad.keep").write_text("#SID IID\nF1 a\n")
    with pytest.raises(ValueError, match=r"line 1: a header must start with #FID or #IID"):
        read_keep(tmp_path / "bad.keep")
    (tmp_path / "short.keep").write_text("F1 a\nb\n")
    with pytest.raises(ValueError, match=r"line 2: one column where the file's format \(FID IID\) needs two"):
        read_keep(tmp_path / "short.keep")
    (tmp_path / "none.keep").write_text("F9 a\nF9 b\n")
    with pytest.raises(ValueError, match=r"keeps none of the file's 4 people \(2 listed, 2 of them not in the file"):
        kept_people(tmp_path / "none.keep", samples)


def test_a_keep_applies_to_genotype_files_only(tmp_path):
    np.save(tmp_path / "rows.npy", np.ones((3, 2)))
    (tmp_path / "rows.keep").write_text("0 iid1\n")
    assert site_keep(tmp_path / "rows.npy") is None
    G = np.random.default_rng(0).integers(0, 3, (6, 5)).astype(float)
    write_bed(tmp_path / "g.bed", G)
    assert site_keep(tmp_path / "g.bed") is None  # no g.keep: every person
    (tmp_path / "g.keep").write_text("0 iid2\n0 iid5\n0 iid9\n")
    keep, people, unknown, total = site_keep(tmp_path / "g.bed")
    assert keep == tmp_path / "g.keep" and people.tolist() == [1, 4] and unknown == 1 and total == 6


def write_sites(tmp_path, sites, keeps):
    """The sites as ``data/partition_<i>.bed`` with, where ``keeps[i]`` is not ``None``, a ``partition_<i>.keep``
    of those people (positions) and of one person no ``.fam`` lists; the pooled kept genotypes, (n, d)."""
    (tmp_path / "data").mkdir()
    kept = []
    for i, (G, keep) in enumerate(zip(sites, keeps)):
        bed = tmp_path / "data" / f"partition_{i}.bed"
        write_bed(bed, G)
        fam_of(bed, [f"S{i}F{j % 3}" for j in range(len(G))])
        if keep is not None:
            fam = [line.split()[:2] for line in bed.with_suffix(".fam").read_text().splitlines()]
            lines = ["#FID\tIID"] + [" ".join(fam[j]) for j in keep[::-1]] + ["NOBODY here"]
            bed.with_suffix(".keep").write_text("\n".join(lines) + "\n")
        kept.append(G if keep is None else G[np.sort(keep)])
    return np.vstack(kept)


def test_sites_with_keep_files_fit_the_pooled_kept_people(tmp_path, caplog):
    """Two sites of three with a ``.keep`` (10 % and 30 % of their people left out, one unknown person each), 1 %
    missing calls: the run's mean, row count and components are those of the pooled kept people's mean-imputed
    rows; each unknown person is a logged warning."""
    from fl_strategies.kernels.linalg import subspace_distance

    sites = simulated_sites((60, 50, 70), 400, seed=21)
    rng = np.random.default_rng(3)
    keeps = [rng.choice(60, 54, replace=False), None, rng.choice(70, 49, replace=False)]
    G = write_sites(tmp_path, sites, keeps)
    with caplog.at_level("INFO", logger="flwr.fedspectral"):
        model = compare_sites(tmp_path, 3)
    assert model["n_samples"] == 54 + 50 + 49
    np.testing.assert_allclose(model["mean"], np.nanmean(G, axis=0), rtol=0, atol=1e-12)
    X = imputed_reference(G)
    values, vectors = np.linalg.eigh(X.T @ X / len(X))
    assert subspace_distance(model["components"].T, vectors[:, ::-1][:, :2]) < 1e-8
    np.testing.assert_allclose(model["explained_variance"], values[::-1][:2] * len(X) / (len(X) - 1), rtol=1e-8)
    warned = [r.getMessage() for r in caplog.records if "not in the file" in r.getMessage()]
    assert any("partition_0.bed" in m and "1 of the people its .keep 'partition_0.keep' lists" in m for m in warned)
    assert not any("partition_1.bed" in m for m in warned)


def test_scale_hwe_with_keep_files_is_plink2s_pca_of_the_kept_people(tmp_path):
    """Without missing calls, ``scale = "hwe"``: the frequencies, the scale and the eigenvalues are those of the kept
    people alone (plink2's ``--keep ... --pca``: the GRM of the pooled kept people)."""
    sites = simulated_sites((60, 50, 70), 600, missing=0.0, seed=22, populations=4)
    rng = np.random.default_rng(4)
    keeps = [rng.choice(60, 50, replace=False), rng.choice(50, 45, replace=False), None]
    G = write_sites(tmp_path, sites, keeps)
    model = compare_sites(tmp_path, 3, scale='"hwe"', rank=3, rounds=60)
    p = G.mean(axis=0) / 2
    np.testing.assert_allclose(model["scale"], np.where(p * (1 - p) > 0, np.sqrt(2 * p * (1 - p)), 1.0), rtol=1e-12)
    values = np.loadtxt(next((tmp_path / "out" / "estimates").glob("*.eigenval")))
    np.testing.assert_allclose(values, np.linalg.eigvalsh(plink2_grm(G))[::-1][:3], rtol=1e-5)  # 6 digits


def test_a_keep_that_keeps_nobody_is_refused_before_the_run(tmp_path):
    from fedspectral.run_config import ArgumentError, check_node_files
    from simulations.engines import fused_run_config

    sites = simulated_sites((20, 30), 50, missing=0.0, seed=23)
    write_sites(tmp_path, sites, [None, None])
    (tmp_path / "data" / "partition_1.keep").write_text("0 somebody\n")
    files = [tmp_path / "data" / f"partition_{i}.bed" for i in range(2)]
    cfg = fused_run_config({"num-clients": 2, "center": True})
    with pytest.raises(ArgumentError) as refused:
        check_node_files(cfg, files, "--data-dir D", "node file", "--data-dir D")
    message = str(refused.value)
    assert "\n" not in message and message.startswith("--data-dir D: partition 1: node file")
    assert "partition_1.keep': keeps none of the file's 30 people (1 listed, 1 of them not in the file)" in message
    (tmp_path / "data" / "partition_1.keep").write_text("S1F0 iid1\nS1F1 iid2\n")
    assert check_node_files(cfg, files, "--data-dir D", "node file", "--data-dir D") == 50


def read_eigenvec(path):
    """``(IDs, values)`` of a ``.eigenvec`` (or ``.sscore``'s first two columns and the columns ``usecols``)."""
    lines = [line.split() for line in path.read_text().splitlines()[1:]]
    return [tuple(f[:2]) for f in lines], np.array([[float(v) for v in f[2:]] for f in lines])


def pooled_files(tmp_path, sites):
    """The sites' people in one ``pooled.bed`` (their ``.fam`` IDs) and ``kept.txt`` (``#FID IID``) the people of
    their ``.keep`` files (everyone at a site without one); the pooled IDs and whether each was kept."""
    ids, kept = [], []
    for i in range(len(sites)):
        bed = tmp_path / "data" / f"partition_{i}.bed"
        fam = [tuple(line.split()[:2]) for line in bed.with_suffix(".fam").read_text().splitlines()]
        listed = set(read_keep(bed.with_suffix(".keep"))) if bed.with_suffix(".keep").exists() else set(fam)
        ids += fam
        kept += [person in listed for person in fam]
    bed_reader.to_bed(tmp_path / "pooled.bed", np.vstack(sites).astype(np.float32),
                      properties={"fid": [f for f, _ in ids], "iid": [i for _, i in ids]})
    (tmp_path / "kept.txt").write_text("#FID\tIID\n" + "".join(f"{f}\t{i}\n" for (f, i), k in zip(ids, kept) if k))
    return ids, np.array(kept)


def plink2(*args):
    subprocess.run(["plink2", *map(str, args), "--threads", "1"], check=True, capture_output=True)


@pytest.mark.parametrize("missing", [0.0, 0.01])
@pytest.mark.plink2
@pytest.mark.skipif(shutil.which("plink2") is None, reason="plink2 is not installed")
def test_everyone_is_scored_and_plink2_projects_the_people_left_out_alike(tmp_path, missing):
    """Three sites, two with a ``.keep`` (10 % of their people left out). ``transform`` scores every person; the
    run's ``pca.eigenvec.allele`` with ``pca.afreq`` makes ``plink2 --score`` give those ``.eigenvec`` values
    (``PCk_AVG``) to its printed digits, for every person; and ``plink2 --keep kept --pca allele-wts`` on the
    pooled file, then ``--score`` with plink2's own weights, projects the people left out onto ``-sqrt(lambda_k) /
    2`` times the ``.eigenvec`` (to printed digits without missing calls; ``|r| >= 0.9999`` with 1 %), while the
    people in the fit are plink2's ``.eigenvec`` (``|r| >= 0.99999``)."""
    import pandas as pd

    from client_app.transform import main
    from fl_strategies.files.plink_outputs import allele_score_command

    sites = simulated_sites((60, 50, 70), 1500, missing=missing, seed=24, populations=4)
    rng = np.random.default_rng(5)
    write_sites(tmp_path, sites, [rng.choice(60, 54, replace=False), None, rng.choice(70, 63, replace=False)])
    compare_sites(tmp_path, 3, scale='"hwe"', rank=3, rounds=60)
    (npz,) = (tmp_path / "out" / "estimates").glob("*.pca.npz")
    prefix = str(npz)[:-len(".pca.npz")]
    values = np.loadtxt(prefix + ".eigenval")
    ours, by_plink2 = [], []
    for i in range(3):
        bed = tmp_path / "data" / f"partition_{i}.bed"
        assert main(["--model", str(npz), "--data", str(bed), "--out", str(tmp_path / f"site{i}.eigenvec")]) == 0
        ours.append(read_eigenvec(tmp_path / f"site{i}.eigenvec")[1])
        plink2(*allele_score_command(str(bed)[:-4], prefix, 3, tmp_path / f"site{i}")[1:])
        table = pd.read_csv(tmp_path / f"site{i}.sscore", sep="\t")
        np.testing.assert_array_equal(table["ALLELE_CT"] / 2, (~np.isnan(sites[i])).sum(axis=1))
        by_plink2.append(table[["PC1_AVG", "PC2_AVG", "PC3_AVG"]].to_numpy())
    ours, by_plink2 = np.vstack(ours), np.vstack(by_plink2)
    print("our allele weights through plink2 --score: max abs difference", np.abs(by_plink2 - ours).max())
    assert np.all(np.abs(by_plink2 - ours) <= 5e-6 * np.abs(ours) + 1e-6)  # both printed to 6 digits

    ids, kept = pooled_files(tmp_path, sites)
    plink2("--bfile", tmp_path / "pooled", "--keep", tmp_path / "kept.txt", "--pca", 3, "allele-wts",
           "vcols=ref,alt", "--freq", "--out", tmp_path / "ref")
    fitted_ids, fitted = read_eigenvec(tmp_path / "ref.eigenvec")
    assert fitted_ids == [person for person, k in zip(ids, kept) if k]
    plink2("--bfile", tmp_path / "pooled", "--read-freq", tmp_path / "ref.afreq", "--score",
           tmp_path / "ref.eigenvec.allele", 1, 4, "header-read", "no-mean-imputation", "variance-standardize",
           "--score-col-nums", "5-7", "--out", tmp_path / "proj")
    projected = pd.read_csv(tmp_path / "proj.sscore", sep="\t")[["PC1_AVG", "PC2_AVG", "PC3_AVG"]].to_numpy()
    left_out, theirs = ours[~kept], projected[~kept]
    signs = np.sign(np.sum(ours[kept] * fitted, axis=0))
    expected = left_out * (-np.sqrt(values) / 2) * signs  # plink2's sign: its projection against its .eigenvec
    r_fitted = [abs(np.corrcoef(ours[kept][:, j], fitted[:, j])[0, 1]) for j in range(3)]
    r_left = [abs(np.corrcoef(left_out[:, j], theirs[:, j])[0, 1]) for j in range(3)]
    print(f"missing {missing}: 1 - |r| fitted {np.subtract(1, r_fitted)}, left out {np.subtract(1, r_left)}; "
          f"left out, max abs difference {np.abs(theirs - expected).max():.2g} (largest {np.abs(theirs).max():.3g})")
    own = projected[kept] / (fitted * -np.sqrt(values) / 2)  # plink2's projection of its own fitted people
    print(f"missing {missing}: projected / expected, median per PC: left out {np.median(theirs / expected, axis=0)},"
          f" plink2's fitted people {np.median(own, axis=0)}")
    assert min(r_fitted) >= 0.99999 and min(r_left) >= 0.9999
    if missing == 0:
        assert np.abs(ours[kept] * signs - fitted).max() <= 2e-6  # both printed to 6 significant digits
        assert np.all(np.abs(theirs - expected) <= 1e-5 * np.abs(theirs) + 1e-6)
    else:  # plink2 projects the people left out as it projects its own fitted people: about 1 - missing of it
        np.testing.assert_allclose(np.median(theirs / expected, axis=0), np.median(own, axis=0), atol=3e-3)
        assert np.all(np.abs(np.median(own, axis=0) - (1 - missing)) < 3e-3)


def test_the_allele_weights_list_a_monomorphic_variant_by_its_absent_allele_alone():
    from fl_strategies.files.plink_outputs import eigenvec_allele_text

    model = {"components": np.array([[0.6, 0.0, 0.8, 0.0]]), "singular_values": np.array([2.0]),
             "mean": np.array([0.5, 0.0, 1.0, 2.0]), "variants": [("a", "G", "A"), ("b", "C", "T"),
                                                                   ("c", "A", "T"), ("d", "T", "G")]}
    lines = [line.split("\t") for line in eigenvec_allele_text(model).splitlines()]
    assert lines == [["#ID", "REF", "ALT", "A1", "PC1"],
                     ["a", "A", "G", "A", "-1.2"], ["a", "A", "G", "G", "1.2"],  # d v / sigma = 4 * 0.6 / 2 on A1
                     ["b", "T", "C", "C", "0.0"],  # A1 never called in the fit: its line alone
                     ["c", "T", "A", "T", "-1.6"], ["c", "T", "A", "A", "1.6"],
                     ["d", "G", "T", "G", "0.0"]]  # A2 never called: its line alone


def test_the_weight_files_write_every_number_as_its_repr():
    """``.score``, ``.eigenvec.allele`` and ``.afreq`` give every number as ``repr`` of the float (exact), the REF
    line of ``.eigenvec.allele`` the negated weight: the texts are formatted once and negated as text, checked
    against formatting each number (zeros of either sign, tiny and huge weights, monomorphic variants)."""
    from fl_strategies.files.plink_outputs import afreq_text, eigenvec_allele_text, plink2_eigenvectors, score_text

    rng = np.random.default_rng(5)
    d, k = 300, 3
    components = np.linalg.qr(rng.standard_normal((d, k)))[0].T
    components[:, :4] = [[0.0, -0.0, 1e-300, -1e-17]] * k
    mean = rng.uniform(0, 2, d)
    mean[[5, 9]] = [0.0, 2.0]
    model = {"components": components, "singular_values": np.array([3.0, 1e-3, 7e5]), "mean": mean,
             "variants": [(f"v{j}", "A", "G") for j in range(d)]}
    weights = plink2_eigenvectors(components.T, model)
    expected = [["ID", "A1", "PC1", "PC2", "PC3"]] + [[f"v{j}", "A", *(repr(float(w)) for w in weights[j])]
                                                      for j in range(d)]
    assert [line.split("\t") for line in score_text(model).splitlines()] == expected
    lines = [line.split("\t") for line in eigenvec_allele_text(model).splitlines()][1:]
    polymorphic = [j for j in range(d) if 0 < mean[j] < 2]
    assert [line[4:] for line in lines if line[0] != "v5" and line[0] != "v9"] == [
        [repr(float(sign * d * w)) for w in weights[j]] for j in polymorphic for sign in (-1.0, 1.0)]
    assert [line.split("\t")[3] for line in afreq_text(model).splitlines()[1:]] == [repr(float(m) / 2) for m in mean]


@pytest.mark.plink2
@pytest.mark.skipif(shutil.which("plink2") is None, reason="plink2 is not installed")
def test_plink2_scores_with_the_allele_weights_as_transform_with_monomorphic_variants_and_missing_calls(tmp_path):
    """A model with two variants monomorphic in the fit, applied to a file with 5 % missing calls: plink2
    ``--score`` with ``eigenvec_allele_text`` and ``afreq_text`` gives ``transform``'s ``.eigenvec`` values."""
    import pandas as pd

    from client_app.transform import main
    from fl_strategies.files.pca import save_model
    from fl_strategies.files.plink_outputs import afreq_text, allele_score_command, eigenvec_allele_text

    rng = np.random.default_rng(6)
    G = rng.integers(0, 3, (40, 30)).astype(float)
    G[:, 3], G[:, 4] = 0.0, 2.0  # monomorphic in the fit (A1 absent, A2 absent)
    G[rng.random(G.shape) < 0.05] = np.nan
    write_bed(tmp_path / "g.bed", G)
    p = np.nanmean(G, axis=0) / 2
    sd = np.sqrt(2 * p * (1 - p))
    components = np.zeros((2, 30))  # orthonormal, 0 on the monomorphic variants (as a fit gives them)
    components[:, np.r_[0:3, 5:30]] = np.linalg.qr(rng.standard_normal((28, 2)))[0].T
    model = {"components": components, "mean": 2 * p, "scale": np.where(sd > 0, sd, 1.0),
             "explained_variance": np.array([2.0, 1.0]), "explained_variance_ratio": np.array([0.2, 0.1]),
             "singular_values": np.array([3.0, 2.0]), "n_samples": 40,
             "variants": [(f"sid{j + 1}", "A1", "A2") for j in range(30)]}
    save_model(tmp_path / "pca.npz", model, {"center": True, "scale": "hwe"})
    (tmp_path / "pca.eigenvec.allele").write_text(eigenvec_allele_text(model))
    (tmp_path / "pca.afreq").write_text(afreq_text(model))
    assert main(["--model", str(tmp_path / "pca.npz"), "--data", str(tmp_path / "g.bed"),
                 "--out", str(tmp_path / "g.eigenvec")]) == 0
    _, ours = read_eigenvec(tmp_path / "g.eigenvec")
    plink2(*allele_score_command(str(tmp_path / "g"), str(tmp_path / "pca"), 2, tmp_path / "s")[1:])
    table = pd.read_csv(tmp_path / "s.sscore", sep="\t")
    np.testing.assert_array_equal(table["ALLELE_CT"] / 2, (~np.isnan(G)).sum(axis=1))  # c_i, monomorphic included
    theirs = table[["PC1_AVG", "PC2_AVG"]].to_numpy()
    assert np.all(np.abs(theirs - ours) <= 5e-6 * np.abs(ours) + 1e-6)


@pytest.mark.plink2
@pytest.mark.skipif(shutil.which("plink2") is None, reason="plink2 is not installed")
def test_the_documented_king_cutoff_writes_the_sites_keep(tmp_path):
    """docs/genotypes.md's two commands, as typed, on a site with three people present twice: the ``.keep`` they
    leave beside ``partition_0.bed`` keeps one of each pair, and the site reads it (``#FID IID`` header)."""
    from doc_commands import KING_CUTOFF

    G = simulated_sites((60,), 1500, missing=0.01, seed=25)[0]
    G[[10, 20, 30]] = G[[11, 21, 31]]  # three duplicated people
    write_bed(tmp_path / "partition_0.bed", G)
    subprocess.run(["bash", "-euo", "pipefail", "-c", KING_CUTOFF], cwd=tmp_path, check=True, capture_output=True)
    keep, people, unknown, total = site_keep(tmp_path / "partition_0.bed")
    assert keep.read_text().startswith("#FID\tIID\n") and unknown == 0 and total == 60
    assert len(people) == 57 and len({10, 11} - set(people)) == len({20, 21} - set(people)) == 1
    assert len({30, 31} - set(people)) == 1


def with_parents(bed, parents):
    """Give the people ``parents`` maps (position -> (father, mother)) those parents in the ``.fam`` beside ``bed``;
    the founders (father and mother ``0``), (s,) bool."""
    fam = bed.with_suffix(".fam")
    lines = [line.split() for line in fam.read_text().splitlines()]
    for j, (father, mother) in parents.items():
        lines[j][2:4] = [father, mother]
    fam.write_text("".join(" ".join(fields) + "\n" for fields in lines))
    return np.array([f[2] == "0" and f[3] == "0" for f in lines])


@pytest.mark.plink2
@pytest.mark.skipif(shutil.which("plink2") is None, reason="plink2 is not installed")
@pytest.mark.parametrize("nonfounders", [False, True])
def test_the_frequencies_come_from_the_founders_as_plink2s(tmp_path, nonfounders):
    """``.fam`` files with parents (a parent in the file, one not in it, a mother alone), a ``.keep`` at one site,
    ``maf-min = 0.1``: the mean is the founders' among the people in the fit (every person's with ``nonfounders =
    true``), and the variants kept and the ``.eigenval`` are those of plink2 ``--keep ... --maf 0.1 --pca`` on the
    pooled file (with ``--nonfounders`` for ``nonfounders = true``)."""
    sites = simulated_sites((60, 50, 70), 800, missing=0.0, seed=26, populations=4)
    rng = np.random.default_rng(7)
    keeps = [rng.choice(60, 54, replace=False), None, None]
    write_sites(tmp_path, sites, keeps)
    family = {j: (f"iid{j - 9}", "0") for j in range(10, 30)} | {j: ("nobody", "0") for j in range(30, 35)} | \
        {j: ("0", f"iid{j - 34}") for j in range(35, 40)}
    founders = [with_parents(tmp_path / "data" / f"partition_{i}.bed", family) for i in range(3)]
    model = compare_sites(tmp_path, 3, scale='"hwe"', rank=3, rounds=60,
                          extra=f"maf-min = 0.1\nnonfounders = {str(nonfounders).lower()}")
    ids, kept = pooled_files(tmp_path, sites)
    fitted = np.vstack(sites)[kept]
    chosen = np.concatenate(founders)[kept] | nonfounders
    listed = [vid for vid, _, _ in model["variants"]]
    columns = [int(vid[3:]) - 1 for vid in listed]
    np.testing.assert_allclose(model["mean"], fitted[chosen][:, columns].mean(axis=0), rtol=0, atol=1e-12)
    (tmp_path / "pooled.fam").write_text("".join((tmp_path / "data" / f"partition_{i}.fam").read_text()
                                                 for i in range(3)))  # the sites' people with their parents
    plink2("--bfile", tmp_path / "pooled", "--keep", tmp_path / "kept.txt", "--maf", 0.1, "--pca", 3,
           "--write-snplist", *(["--nonfounders"] if nonfounders else []), "--out", tmp_path / "ref")
    assert listed == (tmp_path / "ref.snplist").read_text().split()
    values = np.loadtxt(next((tmp_path / "out" / "estimates").glob("*.eigenval")))
    np.testing.assert_allclose(values, np.loadtxt(tmp_path / "ref.eigenval"), rtol=1e-5)  # 6 printed digits


def test_under_secure_aggregation_a_fam_with_parents_gives_the_founders_frequencies(tmp_path):
    """SecAgg+ sums the founders' allele sums and calls apart (every site sends them, its own sums where everyone is
    a founder): the mean is the founders' and the model the plain run's (tests/test_secure_prune.py prunes too)."""
    from conftest import run_app

    sites = simulated_sites((40, 50, 45), 200, missing=0.0, seed=27)
    write_sites(tmp_path, sites, [None, None, None])
    founders = with_parents(tmp_path / "data" / "partition_1.bed", {3: ("iid1", "0"), 7: ("0", "iid2")})
    cfg = dict(strategy="power", dataset=str(tmp_path / "data"), num_clients=3, rank=2, iteration_rank=3,
               num_server_rounds=30, center=True, scale="hwe", row_normalize=False, secagg_clip=1e12)
    plain, secure = run_app(**cfg), run_app(**cfg, secure_aggregation="true")
    chosen = np.concatenate([np.ones(40, bool), founders, np.ones(45, bool)])
    np.testing.assert_allclose(secure.mean, np.vstack(sites)[chosen].mean(axis=0), rtol=0, atol=1e-12)
    np.testing.assert_allclose(secure.model["explained_variance"], plain.model["explained_variance"], rtol=1e-10)


def test_a_deployed_node_finds_the_keep_beside_its_data_path_and_fingerprints_both(tmp_path):
    """A node started with ``data-path = "site.bed"`` fits on the people of ``site.keep`` beside it; its data
    fingerprint (which a resume compares) changes with the ``.keep``."""
    from client_app.data import NodeData
    from simulations.engines import fused_run_config

    G = simulated_sites((30,), 80, missing=0.02, seed=28)[0]
    write_bed(tmp_path / "site.bed", G)
    cfg = fused_run_config({"num-clients": 1, "center": True, "dataset": "nodes"})
    node = {"partition-id": 0, "data-path": str(tmp_path / "site.bed")}
    before = NodeData(cfg, node).fingerprint
    assert NodeData(cfg, node).num_rows == 30
    (tmp_path / "site.keep").write_text("".join(f"0 iid{j + 1}\n" for j in range(0, 30, 3)))
    data = NodeData(cfg, node)
    assert data.num_rows == 10 and data.fingerprint != before
    np.testing.assert_array_equal(data.row_sum, np.nansum(G[::3], axis=0))
    np.testing.assert_array_equal(data.call_counts, (~np.isnan(G[::3])).sum(axis=0))


def test_with_secure_aggregation_and_krylov_the_kept_people_are_the_sums(tmp_path):
    """``.keep`` files under SecAgg+ (``krylov``): the secure sums are the kept people's (row count, mean over
    their calls)."""
    from conftest import run_app

    sites = simulated_sites((60, 50, 70), 300, seed=29)
    rng = np.random.default_rng(8)
    G = write_sites(tmp_path, sites, [rng.choice(60, 54, replace=False), None, rng.choice(70, 49, replace=False)])
    secure = run_app(strategy="krylov", dataset=str(tmp_path / "data"), num_clients=3, rank=2, iteration_rank=3,
                     num_server_rounds=10, center=True, row_normalize=False, secure_aggregation="true",
                     secagg_clip=1e12)
    assert secure.num_rows == 54 + 50 + 49
    np.testing.assert_allclose(secure.mean, np.nanmean(G, axis=0), rtol=0, atol=1e-12)
