"""The long-range LD lists shipped for GRCh37 and GRCh38 (``exclude-range = "GRCh37"``), as plink2 reads them."""

from __future__ import annotations

import subprocess

import numpy as np
import pytest

from fl_strategies.files.ranges import BUILDS, in_ranges, range_file, read_ranges
from fl_strategies.settings.config import ConfigError, default_run_config, validate_run_config
from tests.test_ld_prune import ld_sites, needs_plink2, prunes_as_plink2_with_exclude_range, write_site

# the rows of the sources named in each file's header (GRCh37: the wiki's table; GRCh38: Genomics England's liftover)
MHC = {"GRCh37": ("6", 25000000, 35000000), "GRCh38": ("6", 24999772, 35032223)}
CHR8_INVERSION = {"GRCh37": ("8", 7000000, 13000000), "GRCh38": ("8", 7142478, 13142491)}


def labelled_rows(build: str) -> dict[str, tuple[str, int, int]]:
    """The shipped list's rows by label (its fourth column)."""
    lines = [line.split() for line in range_file(build).read_text().splitlines() if line and line[0] != "#"]
    return {fields[3]: (fields[0], int(fields[1]), int(fields[2])) for fields in lines}


@pytest.mark.parametrize("build", ["GRCh37", "GRCh38"])
def test_the_shipped_lists_parse_and_hold_the_mhc_and_the_chr8_inversion_of_their_sources(build):
    ranges = read_ranges(range_file(build))
    assert len(ranges) == {"GRCh37": 24, "GRCh38": 15}[build]
    assert {"hg19": "GRCh37", "hg38": "GRCh38"}.keys() <= BUILDS.keys()
    assert range_file(build.lower()) == range_file(build) == range_file({"GRCh37": "hg19", "GRCh38": "HG38"}[build])
    rows = labelled_rows(build)
    assert rows["MHC"] == MHC[build] and rows["chr8_inversion"] == CHR8_INVERSION[build]
    assert set(rows) <= set(labelled_rows("GRCh37")) and len(rows) == len(ranges)  # one label a row, named in 37
    assert all(first < last for _, first, last in ranges)
    header = " ".join(range_file(build).read_text().replace("#", " ").split())
    assert "Price et al." in header and "License:" in header and "no coordinate was lifted over" in header


def test_a_build_name_is_checked_at_config_time_and_a_file_called_like_one_is_reached_as_dot_slash(tmp_path,
                                                                                                      monkeypatch):
    base = {**default_run_config(), "strategy": "fedpower", "center": True, "dataset": "nodes"}
    monkeypatch.chdir(tmp_path)
    validate_run_config({**base, "exclude-range": "GRCh38"})
    validate_run_config({**base, "exclude-range": "some/ranges.txt"})  # a file: read by the server at discovery
    with pytest.raises(ConfigError, match=r"^exclude-range = 'hg18': fedspectral ships long-range LD lists for "
                                          r"GRCh37 \(hg19\) and GRCh38 \(hg38\) only, not hg18; name a file"):
        validate_run_config({**base, "exclude-range": "hg18"})
    (tmp_path / "GRCh37").write_text("6 1 2\n")
    with pytest.raises(ConfigError, match=r"exclude-range = 'GRCh37': names the shipped GRCh37 list and a file "
                                          r"GRCh37 in .*: write './GRCh37' for the file") as refused:
        validate_run_config({**base, "exclude-range": "GRCh37"})
    assert "\n" not in str(refused.value)
    validate_run_config({**base, "exclude-range": "./GRCh37"})
    assert range_file("./GRCh37").read_text() == "6 1 2\n"


def sites_around_the_regions(seed: int):
    """Four sites' genotypes and a ``.bim`` whose variants straddle the GRCh37 MHC and chr8 inversion (both bounds
    included, one bp outside each) and lie on chromosomes the list leaves alone."""
    rng = np.random.default_rng(seed)
    chr6 = np.sort(np.concatenate([rng.choice(np.arange(24_000_000, 36_000_000, 997), 110, replace=False),
                                   [24_999_999, 25_000_000, 35_000_000, 35_000_001]]))
    chr8 = np.sort(np.concatenate([rng.choice(np.arange(6_000_000, 14_000_000, 991), 110, replace=False),
                                   [6_999_999, 7_000_000, 13_000_000, 13_000_001]]))
    chr9 = np.sort(rng.choice(np.arange(20_000_000, 30_000_000, 983), 62, replace=False))
    chrom = ["6"] * len(chr6) + ["8"] * len(chr8) + ["9"] * len(chr9)
    bp = np.concatenate([chr6, chr8, chr9])
    return ld_sites((60, 45, 50, 35), len(bp), seed=seed), chrom, bp


@needs_plink2
def test_a_run_with_grch37_drops_the_variants_plink2_drops_with_the_shipped_file(tmp_path):
    """``exclude-range = "GRCh37"`` then ``indep-pairwise = "50 5 0.2"`` over four sites: prune.in and prune.out
    are ``plink2 --exclude range <the shipped GRCh37.txt> --indep-pairwise 50 5 0.2``'s on the pooled ``.bed``, and
    the variants inside the MHC and the chr8 inversion (bounds included) are in neither."""
    from tests.test_genotype_bed import compare_sites

    sites, chrom, bp = sites_around_the_regions(seed=11)
    (tmp_path / "data").mkdir()
    for i, G in enumerate(sites):
        write_site(tmp_path / "data" / f"partition_{i}.bed", G, chrom, bp)
    model = compare_sites(tmp_path, 4, scale='"hwe"', rank=2, rounds=40,
                          extra='indep-pairwise = "50 5 0.2"\nexclude-range = "GRCh37"')
    theirs_in, theirs_out = prunes_as_plink2_with_exclude_range(tmp_path, sites, chrom, bp, range_file("GRCh37"),
                                                                model)
    inside = in_ranges(chrom, bp, [MHC["GRCh37"], CHR8_INVERSION["GRCh37"]])
    dropped = {f"v{j}" for j in np.flatnonzero(inside)}
    kept = {f"v{j}" for j in np.flatnonzero(~inside)}
    assert set(theirs_in) | set(theirs_out) == kept and 100 < len(dropped) < len(bp) - 100
    at = {int(b): f"v{j}" for j, b in enumerate(bp)}
    assert {at[25_000_000], at[35_000_000], at[7_000_000], at[13_000_000]} <= dropped
    assert {at[24_999_999], at[35_000_001], at[6_999_999], at[13_000_001]} <= kept


@needs_plink2
@pytest.mark.parametrize("build", ["GRCh37", "GRCh38"])
def test_plink2_reads_each_shipped_file_and_excludes_the_variants_our_reader_places_in_it(tmp_path, build):
    """Every line of the file is one plink2 reads (a ``#`` line of fewer than three words stops it: "fewer tokens
    than expected"), and ``plink2 --exclude range`` keeps exactly the variants outside :func:`read_ranges`'s ranges,
    one variant a bp either side of each bound."""
    ranges = read_ranges(range_file(build))
    chrom = [c for c, first, last in ranges for _ in range(4)] + ["9", "9"]
    bp = [b for _, first, last in ranges for b in (first - 1, first, last, last + 1)] + [1_000, 2_000]
    order = np.lexsort((bp, [int(c) for c in chrom]))
    chrom, bp = [chrom[j] for j in order], np.asarray(bp)[order]
    G = np.random.default_rng(0).integers(0, 3, (10, len(bp))).astype(float)
    write_site(tmp_path / "g.bed", G, chrom, bp)
    subprocess.run(["plink2", "--bfile", str(tmp_path / "g"), "--exclude", "range", str(range_file(build)),
                    "--make-just-bim", "--threads", "1", "--out", str(tmp_path / "kept")], check=True,
                   capture_output=True)
    kept = [line.split()[1] for line in (tmp_path / "kept.bim").read_text().splitlines()]
    inside = in_ranges(chrom, bp, ranges)
    assert kept == [f"v{j}" for j in np.flatnonzero(~inside)] and inside.sum() == 2 * len(ranges)
