"""Federated LD pruning (``indep-pairwise``) as ``plink2 --indep-pairwise`` on the pooled file."""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest

from fl_strategies.kernels import ld_prune as L
from fl_strategies.settings.config import ConfigError

bed_reader = pytest.importorskip("bed_reader")



def needs_plink2(test):
    """Marked ``plink2`` and skipped where it is not installed."""
    return pytest.mark.plink2(pytest.mark.skipif(shutil.which("plink2") is None,
                                                 reason="plink2 is not installed")(test))


def ld_sites(sizes, d, seed, copy=0.6, missing=0.03, populations=3):
    """Genotypes with LD between neighbouring variants and population structure, at sites of ``sizes`` people:
    each haplotype copies its previous variant's allele with probability ``copy``, else draws it from its
    population's frequency; ``missing`` of the calls missing (NaN), more at site 0. A list of (s_i, d) arrays."""
    rng = np.random.default_rng(seed)
    base = rng.uniform(0.1, 0.9, d)
    freqs = np.clip(base + rng.normal(0, 0.15, (populations, d)), 0.02, 0.98)
    sites = []
    for i, s in enumerate(sizes):
        pop = rng.integers(0, populations, s)
        p = np.repeat(freqs[pop], 2, axis=0)
        H = np.empty((2 * s, d))
        H[:, 0] = rng.random(2 * s) < p[:, 0]
        for j in range(1, d):
            H[:, j] = np.where(rng.random(2 * s) < copy, H[:, j - 1], rng.random(2 * s) < p[:, j])
        G = H[0::2] + H[1::2]
        G[rng.random(G.shape) < missing * (3 if i == 0 else 1)] = np.nan
        sites.append(G)
    return sites


def bim_of(d, seed):
    """Chromosomes and positions of ``d`` variants: three chromosomes, one of them a single variant, a stretch on
    chromosome 0, with gaps wider than a 50 kb window."""
    rng = np.random.default_rng(seed)
    cut = [0, d // 2, d // 2 + 1, d - 10, d]
    chrom = ["1"] * (cut[1] - cut[0]) + ["2"] + ["3"] * (cut[3] - cut[2]) + ["0"] * 10
    bp = np.concatenate([np.sort(rng.choice(2_000_000, cut[1], replace=False)) + 1, [500],
                         np.sort(rng.choice(400_000, cut[3] - cut[2], replace=False)) + 1, np.arange(1, 11)])
    return chrom, bp


def write_site(path, G, chrom, bp):
    d = G.shape[1]
    bed_reader.to_bed(path, np.asarray(G, dtype=np.float32), properties={
        "sid": [f"v{j}" for j in range(d)], "chromosome": list(chrom), "bp_position": [int(b) for b in bp],
        "allele_1": ["A"] * d, "allele_2": ["G"] * d})
    return str(path)


def counts_of(G):
    return np.where(np.isnan(G), -1, G).astype(np.int8).T


def kernel_removed(G, chrom, bp, args):
    """The kernel on pooled genotypes ``G``: (d,) bool of the variants removed."""
    window = L.parse_indep_pairwise(args)
    spans = L.pair_spans(chrom, bp, window)
    counts = counts_of(G)
    sums = L.pair_sums(lambda a, b: counts[a:b], spans, 0, G.shape[1])
    return L.indep_pairwise(L.variant_sums(counts), L.ld_exceeds(sums, window.r2), spans,
                            L.subcontigs(chrom, bp, window), window, bp)


def numpy_plink2_rule(G, chrom, bp, window):
    """plink2's ``--indep-pairwise`` written directly on the pooled genotypes ``G`` (n, d), NaN missing: r^2 of
    each pair over the people who called both, compared as ``cov^2 > t var var``; windows over each piece of a
    chromosome; within a window, passes of: each kept variant against the later ones it has not met, the first
    pair in LD losing its lower-MAF variant (the later on a tie); constant variants removed on entry."""
    d = G.shape[1]
    t = window.r2 * (1 + 2.0 ** -44)

    def in_ld(i, j):
        both = ~np.isnan(G[:, i]) & ~np.isnan(G[:, j])
        x, y = G[both, i].astype(np.int64), G[both, j].astype(np.int64)
        n = both.sum()
        cov = float(n * (x * y).sum() - x.sum() * y.sum())
        return cov * cov > t * float(n * (x * x).sum() - x.sum() ** 2) * float(n * (y * y).sum() - y.sum() ** 2)

    p = np.nanmean(G, axis=0) / 2
    major = np.maximum(p, 1 - p)
    constant = np.array([np.nanvar(G[:, j]) == 0 if (~np.isnan(G[:, j])).any() else True for j in range(d)])
    removed = np.zeros(d, dtype=bool)
    for start, stop in L.subcontigs(chrom, bp, window):
        met = {i: i + 1 for i in range(start, stop)}
        first = start
        end = (start + int(np.sum(bp[start:stop] <= bp[start] + window.size)) if window.kb
               else min(start + window.size, stop))
        end = min(end, stop)
        while True:
            removed[first:end] |= constant[first:end]
            while True:
                changed = False
                for i in range(first, end):
                    if removed[i]:
                        continue
                    later = [j for j in range(i + 1, end) if not removed[j]]
                    for k, j in enumerate(later):
                        if j < met[i]:
                            continue
                        if in_ld(i, j):
                            changed = True
                            if major[i] > major[j] * (1 + 2.0 ** -44):
                                removed[i] = True
                            else:
                                removed[j] = True
                                met[i] = later[k + 1] if k + 1 < len(later) else end
                            break
                    else:
                        met[i] = max(met[i], end)
                if not changed:
                    break
            if end == stop:
                break
            if window.kb:
                first += 1
                while bp[first] < bp[end] - window.size:
                    first += 1
                end += 1
                while end < stop and bp[end] <= bp[first] + window.size:
                    end += 1
            else:
                first += window.step
                end = min(first + window.size, stop)
    return removed


def test_plink2s_arguments_are_read_as_plink2_reads_them():
    assert L.parse_indep_pairwise("") is None
    assert L.parse_indep_pairwise("50 5 0.2") == L.PruneWindow(50, 5, 0.2, False)
    assert L.parse_indep_pairwise("50 0.2") == L.PruneWindow(50, 1, 0.2, False)
    assert L.parse_indep_pairwise("500kb 1 0.2") == L.PruneWindow(500_000, 1, 0.2, True)
    assert L.parse_indep_pairwise("0.5 kb 0.1") == L.PruneWindow(500, 1, 0.1, True)
    for bad, says in (("50 5", "r\\^2 threshold 5 is not"), ("50 60 0.2", "larger than the window"),
                      ("500kb 5 0.2", "must be 1"), ("1 1 0.2", "at least 2"), ("50 5 1", "not in \\[0, 1\\)"),
                      ("fifty 5 0.2", "no window"), ("50 5 0.2 1", "plink2's"), ("50.5 5 0.2", "whole number")):
        with pytest.raises(ValueError, match=says):
            L.parse_indep_pairwise(bad)


def test_the_sites_sums_add_up_to_the_pooled_sums_over_the_people_who_called_both():
    sites = ld_sites((30, 45, 25), 120, seed=1, missing=0.08)
    G = np.vstack(sites)
    chrom, bp = bim_of(120, seed=1)
    window = L.parse_indep_pairwise("20kb 1 0.2")
    spans = L.pair_spans(chrom, bp, window)
    assert spans.sum() > 100
    pooled = L.pair_sums(lambda a, b: counts_of(G)[a:b], spans, 0, 120, block=7)
    federated = sum(L.pair_sums(lambda a, b, S=S: counts_of(S)[a:b], spans, 0, 120) for S in sites)
    np.testing.assert_array_equal(federated, pooled)
    offset = L.pair_index(spans)
    for i in range(0, 120, 3):  # against the sums written out for a few pairs
        for j in range(i + 1, i + 1 + spans[i]):
            both = ~np.isnan(G[:, i]) & ~np.isnan(G[:, j])
            x, y = G[both, i], G[both, j]
            expected = [both.sum(), x.sum(), (x * x).sum(), y.sum(), (y * y).sum(), (x * y).sum()]
            np.testing.assert_array_equal(pooled[offset[i] + j - i - 1], expected)
    vsums = sum(L.variant_sums(counts_of(S)) for S in sites)
    np.testing.assert_array_equal(vsums[:, 0], (~np.isnan(G)).sum(axis=0))
    np.testing.assert_array_equal(vsums[:, 1], np.nansum(G, axis=0))


@pytest.mark.parametrize("args", ["50 5 0.2", "10 3 0.1", "6 6 0.5", "50kb 1 0.2", "20 kb 0.3"])
def test_the_greedy_rule_is_plink2s_rule_written_on_the_pooled_genotypes(args):
    sites = ld_sites((40, 50), 160, seed=2)
    G = np.vstack(sites)
    G[:, 9] = 1.0  # constant: removed on entry
    G[:, 30] = G[:, 31]  # a perfect pair
    chrom, bp = bim_of(160, seed=2)
    window = L.parse_indep_pairwise(args)
    removed = kernel_removed(G, chrom, bp, args)
    np.testing.assert_array_equal(removed, numpy_plink2_rule(G, chrom, bp, window))
    assert 5 < removed.sum() < 150
    assert removed[9] and not removed[chrom.index("2")]  # a one-variant chromosome is never examined


def plink2_prune(tmp_path, G, chrom, bp, args, tag="pooled"):
    write_site(tmp_path / f"{tag}.bed", G, chrom, bp)
    subprocess.run(["plink2", "--bfile", str(tmp_path / tag), "--indep-pairwise", *args.split(), "--threads", "1",
                    "--out", str(tmp_path / tag)], check=True, capture_output=True)
    return ((tmp_path / f"{tag}.prune.in").read_text().split(), (tmp_path / f"{tag}.prune.out").read_text().split())


@needs_plink2
@pytest.mark.parametrize("args", ["50 5 0.2", "20 3 0.1", "50kb 1 0.2", "30 kb 0.5"])
def test_the_kept_set_is_plink2s_on_the_pooled_file(tmp_path, args):
    sites = ld_sites((60, 45, 50, 35), 400, seed=3)
    G = np.vstack(sites)
    G[:, 11] = 2.0
    chrom, bp = bim_of(400, seed=3)
    _, theirs_out = plink2_prune(tmp_path, G, chrom, bp, args)
    removed = kernel_removed(G, chrom, bp, args)
    assert [f"v{j}" for j in np.flatnonzero(removed)] == theirs_out
    assert 10 < len(theirs_out) < 350


def test_column_counts_follow_the_runs_list_with_flipped_alleles(tmp_path):
    from fl_strategies.files.data_files import open_samples

    G = ld_sites((23,), 12, seed=4, missing=0.2)[0]
    X = open_samples(write_site(tmp_path / "g.bed", G, ["1"] * 12, np.arange(12) + 1), "test")
    np.testing.assert_array_equal(X.column_counts(2, 7), counts_of(G)[2:7])
    columns = np.array([3, -1, 0, 1, 2, -1, -1, -1, -1, -1, -1, -1])  # file variants 2, 3, 4, 0 as the list's 0..3
    flip = np.zeros(12, dtype=bool)
    flip[3] = True
    aligned = X.aligned(columns, flip, 4)
    expected = counts_of(G[:, [2, 3, 4, 0]])
    expected[1] = np.where(expected[1] < 0, -1, 2 - expected[1])
    np.testing.assert_array_equal(aligned.column_counts(0, 4), expected)


def test_a_bad_value_or_a_run_it_cannot_serve_is_refused_in_one_line():
    from fl_strategies.settings.config import validate_run_config

    from fl_strategies.settings.config import default_run_config

    base = {**default_run_config(), "strategy": "fedpower", "center": True, "dataset": "nodes"}
    for value, says in (("50 5", "indep-pairwise = '50 5': the r\\^2 threshold"),
                        ("500kb 2 0.2", "must be 1 with a window in kb")):
        with pytest.raises(ConfigError, match=says):
            validate_run_config({**base, "indep-pairwise": value})
    with pytest.raises(ConfigError, match="needs center = true"):
        validate_run_config({**base, "center": False, "indep-pairwise": "50 5 0.2"})
    with pytest.raises(ConfigError, match="with secure-aggregation, a strategy of power"):  # secure Gram matrices
        validate_run_config({**base, "strategy": "covariance", "secure-aggregation": "true",
                             "indep-pairwise": "50 5 0.2"})
    validate_run_config({**base, "strategy": "power", "secure-aggregation": "true", "secagg-clip": 1e12,
                         "indep-pairwise": "50 5 0.2"})  # SecAgg+ sums of the pair sums (tests/test_secure_prune.py)
    with pytest.raises(ConfigError, match="not 'fedlrgd'"):
        validate_run_config({**base, "strategy": "fedlrgd", "indep-pairwise": "50 5 0.2"})


def pruned_run(tmp_path, seed=5, extra=""):
    """A ``compare`` run over four ``.bed`` sites with missing calls and ``indep-pairwise = "50 5 0.2"`` (``extra``:
    more keys); the sites' genotypes, the ``.bim`` columns and the written model."""
    from tests.test_genotype_bed import compare_sites

    sites = ld_sites((60, 45, 50, 35), 300, seed=seed)
    chrom, bp = bim_of(300, seed=seed)
    (tmp_path / "data").mkdir()
    for i, G in enumerate(sites):
        write_site(tmp_path / "data" / f"partition_{i}.bed", G, chrom, bp)
    model = compare_sites(tmp_path, 4, scale='"hwe"', rank=2, rounds=40,
                          extra='indep-pairwise = "50 5 0.2"\n' + extra)
    return sites, chrom, bp, model


def test_a_run_prunes_as_the_rule_on_the_pooled_file_and_fits_the_model_of_the_pooled_pruned_file(tmp_path):
    """The run's variants are the pooled rule's prune.in (written beside the model as prune.in / prune.out, and in
    pca.npz); its model is the same run's over the sites' files cut to those variants."""
    from tests.test_genotype_bed import compare_sites

    sites, chrom, bp, model = pruned_run(tmp_path)
    G = np.vstack(sites)
    removed = kernel_removed(G, chrom, bp, "50 5 0.2")
    keep = ~removed & (np.array(chrom) != "0")
    ids = [f"v{j}" for j in np.flatnonzero(keep)]
    assert [vid for vid, _, _ in model["variants"]] == ids
    (prune_in,) = (tmp_path / "out" / "estimates").glob("*.prune.in")
    (prune_out,) = (tmp_path / "out" / "estimates").glob("*.prune.out")
    assert prune_in.read_text() == "".join(f"{vid}\n" for vid in ids)
    assert prune_out.read_text() == "".join(f"v{j}\n" for j in np.flatnonzero(removed))
    assert str(model["prune_in"]) == prune_in.read_text() and str(model["prune_out"]) == prune_out.read_text()
    (tmp_path / "cut" / "data").mkdir(parents=True)
    for i, S in enumerate(sites):
        write_site(tmp_path / "cut" / "data" / f"partition_{i}.bed", S[:, keep], np.array(chrom)[keep],
                   np.asarray(bp)[keep])
    cut = compare_sites(tmp_path / "cut", 4, scale='"hwe"', rank=2, rounds=40)
    for key in ("mean", "scale", "components", "explained_variance"):
        np.testing.assert_allclose(model[key], cut[key], rtol=0, atol=1e-10)
    from fl_strategies.files.data_files import open_samples
    from fl_strategies.files.pca import transform
    from fl_strategies.files.variants import as_variants

    full = tmp_path / "data" / "partition_1.bed"  # transform reads a site's whole file as the model's variants
    scores = transform(model, as_variants(open_samples(full), full, model["variants"]))
    expected = transform(cut, open_samples(tmp_path / "cut" / "data" / "partition_1.bed"))
    np.testing.assert_allclose(scores, expected, rtol=0, atol=1e-10)


def test_pruning_data_without_variants_or_down_to_fewer_than_the_rank_is_refused(tmp_path):
    from simulations.compare import run_comparison
    from tests.test_genotype_bed import compare_sites

    sites = ld_sites((30, 30), 40, seed=7, copy=0.97)
    chrom, bp = ["1"] * 40, np.arange(40) + 1
    (tmp_path / "bed" / "data").mkdir(parents=True)
    for i, S in enumerate(sites):
        write_site(tmp_path / "bed" / "data" / f"partition_{i}.bed", S, chrom, bp)
    with pytest.raises(Exception, match=r"indep-pairwise = '40 1 0.01' keeps \d+ of the 40 variants, fewer than "
                                        r"iteration-rank = 8"):
        compare_sites(tmp_path / "bed", 2, rank=6, extra='indep-pairwise = "40 1 0.01"')
    with pytest.raises(Exception, match=r"exclude-range = '.*nowhere.txt': '.*nowhere.txt' cannot be read"):
        compare_sites(tmp_path / "bed", 2, rank=2, extra=f'exclude-range = "{tmp_path / "nowhere.txt"}"')
    folder = tmp_path / "npy"
    folder.mkdir()
    for i, S in enumerate(sites):
        np.save(folder / f"partition_{i}.npy", np.nan_to_num(S).astype(np.int8))
    (tmp_path / "n.toml").write_text(f'''title = "int8"
[defaults]
dataset = "{folder}"
num-clients = 2
rank = 2
num-server-rounds = 3
center = true
indep-pairwise = "50 5 0.2"
[[runs]]
name = "fedpower"
strategy = "fedpower"
''')
    with pytest.raises(Exception, match="indep-pairwise = '50 5 0.2': LD pruning applies to PLINK .bed data"):
        run_comparison(tmp_path / "n.toml", out=tmp_path / "out_npy")


def prunes_as_plink2_with_exclude_range(tmp_path, sites, chrom, bp, ranges, model) -> tuple[list, list]:
    """``plink2 --exclude range <ranges> --indep-pairwise 50 5 0.2`` on the pooled ``sites``: its prune.in and
    prune.out, asserted equal to the ``compare`` run's in ``tmp_path / "out"`` and to ``model``'s variants."""
    write_site(tmp_path / "pooled.bed", np.vstack(sites), chrom, bp)
    subprocess.run(["plink2", "--bfile", str(tmp_path / "pooled"), "--exclude", "range", str(ranges),
                    "--indep-pairwise", "50", "5", "0.2", "--threads", "1", "--out", str(tmp_path / "pooled")],
                   check=True, capture_output=True)
    theirs_in = (tmp_path / "pooled.prune.in").read_text().split()
    theirs_out = (tmp_path / "pooled.prune.out").read_text().split()
    (prune_in,) = (tmp_path / "out" / "estimates").glob("*.prune.in")
    (prune_out,) = (tmp_path / "out" / "estimates").glob("*.prune.out")
    assert prune_in.read_text().split() == theirs_in and prune_out.read_text().split() == theirs_out
    assert [vid for vid, _, _ in model["variants"]] == theirs_in
    return theirs_in, theirs_out


@needs_plink2
def test_a_runs_prune_in_is_plink2s_on_the_pooled_file_with_its_exclude_range(tmp_path):
    """Four sites with missing calls, a range file (``chr`` prefixes, a label, a comment): the run's prune.in and
    prune.out are ``plink2 --exclude range <file> --indep-pairwise 50 5 0.2``'s on the pooled ``.bed``."""
    ranges = tmp_path / "ranges.txt"
    ranges.write_text("# long-range LD, made up\nchr1 200000 700000 first\n3 1 60000 second\n")
    sites, chrom, bp, model = pruned_run(tmp_path, seed=6, extra=f'exclude-range = "{ranges}"')
    theirs_in, theirs_out = prunes_as_plink2_with_exclude_range(tmp_path, sites, chrom, bp, ranges, model)
    excluded = {f"v{j}" for j in range(len(chrom)) if (chrom[j] == "1" and 200000 <= bp[j] <= 700000)
                or (chrom[j] == "3" and bp[j] <= 60000)}
    assert 20 < len(excluded) and not excluded & (set(theirs_in) | set(theirs_out))
    assert 50 < len(theirs_in) < 250


def test_ranges_are_read_as_plink2_reads_them(tmp_path):
    from fl_strategies.files.ranges import in_ranges, read_ranges

    path = tmp_path / "r.txt"
    path.write_text("# comment\n\nchr6 25000000 33500000 MHC\n8 8000000 12000000\nchrX 10 20 x\n")
    ranges = read_ranges(path)
    assert ranges == [("6", 25000000, 33500000), ("8", 8000000, 12000000), ("X", 10, 20)]
    inside = in_ranges(["6", "6", "chr8", "8", "23", "X", "1"], [25000000, 33500001, 12000000, 7999999, 15, 21, 9],
                       ranges)
    assert inside.tolist() == [True, False, True, False, True, False, False]
    path.write_text("6 25000000\n")
    with pytest.raises(ValueError, match="r.txt' line 1 is not 'chromosome first-bp last-bp"):
        read_ranges(path)


def test_a_site_whose_bim_lists_an_id_twice_is_refused_naming_it(tmp_path):
    from client_app.data import NodeData
    from client_app.ld_replies import ld_reply
    from fl_strategies.settings.config import default_run_config

    G = ld_sites((12,), 6, seed=8)[0]
    path = write_site(tmp_path / "g.bed", G, ["1"] * 6, np.arange(6) + 1)
    bim = (tmp_path / "g.bim").read_text().replace("\tv3\t", "\tv1\t")
    (tmp_path / "g.bim").write_text(bim)
    cfg = {**default_run_config(), "num-clients": 1, "dataset": "nodes", "center": True}
    data = NodeData(cfg, {"partition-id": 0, "data-path": path})
    with pytest.raises(ValueError, match="partition 0: its .bim lists variant ID\\(s\\) v1 more than once"):
        ld_reply(data, {"ld-map": True})


def family_sites(tmp_path, seed=8):
    """Three ``.bed`` sites with LD and missing calls whose ``.fam`` files have parents (a parent in the file, one
    not in it, a mother alone: a third of each site's people), and a ``.keep`` at site 0 (ten people left out,
    founders among them); the sites' genotypes, map, founders (n,) bool and whether each is in the fit (n,) bool."""
    from tests.test_keep import fam_of, with_parents

    sites = ld_sites((80, 70, 75), 300, seed=seed)
    chrom, bp = bim_of(300, seed=seed)
    (tmp_path / "data").mkdir()
    founders, kept = [], []
    for i, G in enumerate(sites):
        bed = tmp_path / "data" / f"partition_{i}.bed"
        write_site(bed, G, chrom, bp)
        fam_of(bed, [f"S{i}F{j}" for j in range(len(G))])
        family = {j: (f"iid{j - 9}", "0") for j in range(10, 25)} | {j: ("nobody", "0") for j in range(25, 30)} | \
            {j: ("0", f"iid{j - 29}") for j in range(30, 35)}
        founders.append(with_parents(bed, family))
        fit = np.ones(len(G), dtype=bool)
        if i == 0:
            fit[[0, 2, 4, 6, 8, 12, 14, 40, 50, 60]] = False
            fam = [line.split()[:2] for line in bed.with_suffix(".fam").read_text().splitlines()]
            bed.with_suffix(".keep").write_text("".join(" ".join(fam[j]) + "\n" for j in np.flatnonzero(fit)))
        kept.append(fit)
    return sites, chrom, bp, np.concatenate(founders), np.concatenate(kept)


def founders_removed(G, chrom, bp, args, founders, frequency_people):
    """plink2's rule on the pooled ``G``: r^2 over ``founders``, the major-allele frequency over
    ``frequency_people`` (both (n,) bool), (d,) bool of the variants removed."""
    window = L.parse_indep_pairwise(args)
    spans = L.pair_spans(chrom, bp, window)
    counts = counts_of(G[founders])
    sums = L.pair_sums(lambda a, b: counts[a:b], spans, 0, G.shape[1])
    return L.indep_pairwise(L.variant_sums(counts), L.ld_exceeds(sums, window.r2), spans,
                            L.subcontigs(chrom, bp, window), window, bp,
                            frequency=L.variant_sums(counts_of(G[frequency_people]))[:, :2])


@needs_plink2
@pytest.mark.parametrize("nonfounders", [False, True])
def test_pruning_counts_the_founders_in_the_fit_as_plink2(tmp_path, nonfounders):
    """``.fam`` files with parents and a ``.keep`` at one site: the run's prune.in is ``plink2 --keep ...
    --indep-pairwise 50 5 0.2``'s on the pooled file, and with ``nonfounders = true`` ``--nonfounders``'s, which
    differs (plink2 v2.00a3.5 measures r^2 over the founders either way; ``--nonfounders`` changes the allele
    frequencies, which decide which of a pair goes). Neither is the rule over everyone in the fit."""
    from tests.test_genotype_bed import compare_sites

    sites, chrom, bp, founders, fit = family_sites(tmp_path)
    compare_sites(tmp_path, 3, scale='"hwe"', rank=2, rounds=20,
                  extra=f'indep-pairwise = "50 5 0.2"\nnonfounders = {str(nonfounders).lower()}')
    (prune_in,) = (tmp_path / "out" / "estimates").glob("*.prune.in")
    G = np.vstack(sites)
    write_site(tmp_path / "pooled.bed", G, chrom, bp)
    fams = [(tmp_path / "data" / f"partition_{i}.fam").read_text() for i in range(3)]
    (tmp_path / "pooled.fam").write_text("".join(fams))  # the sites' people with their parents
    ids = [line.split()[:2] for text in fams for line in text.splitlines()]
    (tmp_path / "kept.txt").write_text("".join(f"{f} {i}\n" for (f, i), k in zip(ids, fit) if k))
    theirs = {}
    for flag in ([], ["--nonfounders"]):
        out = tmp_path / f"plink2{'-'.join(flag)}"
        subprocess.run(["plink2", "--bfile", str(tmp_path / "pooled"), "--keep", str(tmp_path / "kept.txt"),
                        "--indep-pairwise", "50", "5", "0.2", *flag, "--threads", "1", "--out", str(out)],
                       check=True, capture_output=True)
        theirs[bool(flag)] = (out.parent / f"{out.name}.prune.in").read_text().split()
    assert prune_in.read_text().split() == theirs[nonfounders]
    assert theirs[False] != theirs[True]
    everyone = founders_removed(G[fit], chrom, bp, "50 5 0.2", np.ones(fit.sum(), bool), np.ones(fit.sum(), bool))
    assert [f"v{j}" for j in np.flatnonzero(~everyone & (np.array(chrom) != "0"))] != theirs[nonfounders]
    mine = founders_removed(G[fit], chrom, bp, "50 5 0.2", founders[fit], founders[fit] | nonfounders)
    assert [f"v{j}" for j in np.flatnonzero(~mine & (np.array(chrom) != "0"))] == theirs[nonfounders]


def test_variants_on_x_y_or_mt_are_refused_in_one_line_and_an_exclude_range_leaves_them_out(tmp_path):
    """plink2 prunes chromosome X with males' calls haploid (Y over males, MT haploid), from the ``.fam``'s sexes;
    fedspectral does not, and refuses them naming the chromosomes and the remedy; an ``exclude-range`` line for X
    lets the run prune the rest (the pseudo-autosomal ``XY`` pruned as an autosome, as plink2 does)."""
    from tests.test_genotype_bed import compare_sites

    assert L.sex_chromosomes(["1", "chrX", "23", "XY", "25", "M", "26", "Y", "2"]) == ["chrX", "23", "M", "26", "Y"]
    sites = ld_sites((40, 40), 60, seed=9)
    chrom, bp = ["1"] * 40 + ["XY"] * 8 + ["X"] * 12, np.arange(60) * 1000 + 1
    (tmp_path / "data").mkdir()
    for i, S in enumerate(sites):
        write_site(tmp_path / "data" / f"partition_{i}.bed", S, chrom, bp)
    with pytest.raises(ConfigError, match=r"^indep-pairwise = '50 5 0.2': 12 variant\(s\) on chromosome\(s\) X, "
                                          r"which plink2 prunes with males' calls haploid .*exclude-range"):
        compare_sites(tmp_path, 2, extra='indep-pairwise = "50 5 0.2"')
    (tmp_path / "sex.txt").write_text("X 0 999999999 chrX\n")
    model = compare_sites(tmp_path, 2, rounds=5, extra=f'indep-pairwise = "50 5 0.2"\nexclude-range = '
                                                        f'"{tmp_path / "sex.txt"}"')
    removed = kernel_removed(np.vstack(sites)[:, :48], chrom[:48], bp[:48], "50 5 0.2")
    assert [vid for vid, _, _ in model["variants"]] == [f"v{j}" for j in np.flatnonzero(~removed)]


def test_pruning_over_fewer_than_two_founders_is_refused_and_fewer_than_50_warned(caplog):
    """plink2 refuses LD pruning without two founders (and below 50 unless ``--bad-ld``): the server refuses the
    pooled sums of at most one founder per variant in one line, and warns below 50."""
    from fl_strategies.protocol.ld_exchange import prune_decision

    window = L.parse_indep_pairwise("3 1 0.2")
    variants = [(f"v{j}", "A", "G") for j in range(4)]
    chrom, bp, spans = ["1"] * 4, np.arange(4) + 1, np.array([2, 2, 1, 0])
    exceeds = [np.zeros(5, dtype=bool)]
    lone = np.array([[1, 1, 1, 1, 1]] * 4)
    with pytest.raises(ConfigError, match=r"^indep-pairwise = '3 1 0.2': at most 1 founder\(s\) with a call"):
        prune_decision(variants, chrom, bp, window, spans, lone, exceeds, "test", 1)
    few = np.array([[10, 9, 11, 10, 9]] * 4)
    keep, prune_in, _ = prune_decision(variants, chrom, bp, window, spans, few, exceeds, "test", 1)
    assert keep.all() and "LD measured over at most 10 founder(s)" in caplog.text
