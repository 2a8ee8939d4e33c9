"""LD pruning (``indep-pairwise``, ``exclude-range``) and plink2's founders rule with ``secure-aggregation = true``:
the pair sums and the founders' sums go through SecAgg+ (fl_strategies.protocol.strategies.secure_power), and the
run equals the plain one (prune.in, mean, scale, model)."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import run_app

from fl_strategies.kernels.linalg import subspace_distance

bed_reader = pytest.importorskip("bed_reader")

from test_keep import fam_of, with_parents  # noqa: E402
from test_ld_prune import bim_of, counts_of, ld_sites, write_site  # noqa: E402


def pruned_sites(tmp_path, keeps=True, seed=5, d=300):
    """Four ``.bed`` sites with LD and missing calls (three chromosomes, one of a single variant, chromosome 0),
    with ``.keep`` files at two of them; the sites' genotypes and map."""
    sites = ld_sites((60, 45, 50, 35), d, seed=seed)
    chrom, bp = bim_of(d, seed=seed)
    (tmp_path / "data").mkdir()
    rng = np.random.default_rng(seed)
    for i, G in enumerate(sites):
        bed = tmp_path / "data" / f"partition_{i}.bed"
        write_site(bed, G, chrom, bp)
        fam_of(bed, [f"S{i}F{j}" for j in range(len(G))])
        if keeps and i in (0, 2):
            fam = [line.split()[:2] for line in bed.with_suffix(".fam").read_text().splitlines()]
            chosen = rng.choice(len(G), len(G) - 6, replace=False)
            bed.with_suffix(".keep").write_text("".join(" ".join(fam[j]) + "\n" for j in chosen))
    return sites, chrom, bp


def config(tmp_path, strategy="power", **extra):
    return dict(dict(strategy=strategy, dataset=str(tmp_path / "data"), num_clients=4, rank=2, iteration_rank=3,
                     num_server_rounds=15, center=True, scale="hwe", row_normalize=False, secagg_clip=1e12,
                     indep_pairwise="50 5 0.2"), **extra)


def assert_same_run(secure, plain, tol=1e-10):
    assert secure.secure and not plain.secure
    assert secure.prune == plain.prune and plain.prune["prune_out"]
    assert secure.variants == plain.variants
    np.testing.assert_allclose(secure.mean, plain.mean, rtol=0, atol=1e-12)
    np.testing.assert_allclose(secure.scale, plain.scale, rtol=0, atol=1e-12)
    assert subspace_distance(secure.model["components"].T, plain.model["components"].T) <= tol
    np.testing.assert_allclose(secure.model["explained_variance"], plain.model["explained_variance"], rtol=tol)


@pytest.mark.parametrize("strategy", ["power", "krylov"])
def test_a_secure_pruned_run_is_the_plain_one(tmp_path, strategy):
    """Missing calls, ``.keep`` files at two sites, maf-min and pruning ``50 5 0.2``: the same prune.in and
    prune.out, mean, scale and model as the plain run, for ``power`` and ``krylov``."""
    pruned_sites(tmp_path)
    cfg = config(tmp_path, strategy, maf_min=0.05)
    plain = run_app(**cfg)
    secure = run_app(**cfg, secure_aggregation="true")
    assert_same_run(secure, plain)
    assert secure.sizes == {} and secure.num_rows == plain.num_rows == 60 + 45 + 50 + 35 - 12


def test_a_secure_run_with_excluded_ranges_prunes_as_the_plain_one(tmp_path):
    """``exclude-range`` then pruning under SecAgg+: the plain run's variants and model."""
    pruned_sites(tmp_path, keeps=False)
    ranges = tmp_path / "ranges.txt"
    ranges.write_text("1 1 600000 first\n3 100000 200000 second\n")
    cfg = config(tmp_path, exclude_range=str(ranges))
    assert_same_run(run_app(**cfg, secure_aggregation="true"), run_app(**cfg))


def test_many_secure_chunks_prune_as_one(tmp_path, monkeypatch):
    """Pair sums split over several SecAgg+ exchanges (a small chunk size) give the plain run's prune.in."""
    from fl_strategies.protocol.strategies import secure_power

    pruned_sites(tmp_path, keeps=False, d=200)
    cfg = config(tmp_path, num_server_rounds=30)
    plain = run_app(**cfg)
    monkeypatch.setattr(secure_power, "MAX_PAIRS", 49 * 20)
    secure = run_app(**cfg, secure_aggregation="true")
    assert len(secure._ld["chunks"]) >= 5
    assert_same_run(secure, plain)


def test_no_message_from_a_node_holds_its_own_pair_sums_in_a_secure_pruned_run(tmp_path):
    """Every value the server receives in a secure pruned run: no site's pair sums or variant sums (as int64 or
    float64 bytes), its row count or own sums; the properties are the public ones plus the lowest partition's map
    (chromosome and position of each variant, public). The same scan finds the pair sums in the plain run."""
    from fl_strategies.kernels.ld_prune import PruneWindow, pair_spans, pair_sums, variant_sums
    from test_secure_power import _leaks, _received, _site_secrets, assert_only_public_fields, secure_recorded

    sites, chrom, bp = pruned_sites(tmp_path, keeps=False, d=120)
    spans = pair_spans(chrom, bp, PruneWindow(50, 5, 0.2))
    secrets = _site_secrets(sites)
    for i, G in enumerate(sites):
        counts = counts_of(G)
        pairs = pair_sums(lambda a, b: counts[a:b], spans, 0, len(spans))
        for what, sums in (("pair sums", pairs[:3]), ("variant sums", variant_sums(counts)[:3])):
            secrets += [(f"site {i} {what}", sums.astype("<i8").tobytes()),
                        (f"site {i} {what}", sums.astype("<f8").tobytes())]
    cfg = config(tmp_path, num_server_rounds=3)
    plain, plain_grid = secure_recorded(**cfg)
    assert {f"site {i} pair sums" for i in range(4)} <= {f.split(" in ")[0] for f in _leaks(_received(plain_grid),
                                                                                            secrets)}
    secure, grid = secure_recorded(**cfg, secure_aggregation="true")
    received = _received(grid)
    assert _leaks(received, secrets) == []
    maps = [(pid, value) for pid, kind, key, value in received if key.endswith("/ld-map")]
    assert maps == [(0, "".join(f"{c}\t{p}\n" for c, p in zip(chrom, bp)).encode())]  # the map, public
    assert_only_public_fields([r for r in received if not r[2].endswith("/ld-map")], 4)
    assert secure.prune == plain.prune


@pytest.mark.parametrize("nonfounders", [False, True])
def test_the_founders_frequencies_under_secure_aggregation_are_the_plain_runs(tmp_path, nonfounders):
    """``.fam`` files with parents at two sites, ``maf-min = 0.1`` and pruning: the founders' allele sums and calls
    and the pair sums over the founders go through SecAgg+, and the run keeps the plain run's variants with its mean
    (the founders', every person's with ``nonfounders = true``), scale and model; its prune.in is plink2's rule with
    r^2 over the founders and the major-allele frequency over the same people as the mean."""
    from test_ld_prune import founders_removed

    sites, chrom, bp = pruned_sites(tmp_path, keeps=False)
    founders = [np.ones(len(G), bool) for G in sites]
    for i in (1, 3):
        family = {j: (f"iid{j - 9}", "0") for j in range(10, 20)} | {j: ("0", f"iid{j - 19}") for j in range(20, 25)}
        founders[i] = with_parents(tmp_path / "data" / f"partition_{i}.bed", family)
    cfg = config(tmp_path, maf_min=0.1, nonfounders=nonfounders)
    plain = run_app(**cfg)
    secure = run_app(**cfg, secure_aggregation="true")
    assert_same_run(secure, plain)
    founders = np.concatenate(founders)
    G = np.vstack(sites)[founders | nonfounders]
    columns = [int(vid[1:]) for vid, _, _ in secure.variants]
    np.testing.assert_allclose(secure.mean, np.nanmean(G[:, columns], axis=0), rtol=0, atol=1e-12)
    p = np.nanmean(G, axis=0) / 2  # maf-min from the same people, then pruning over the variants it keeps
    kept = np.flatnonzero(np.minimum(p, 1 - p) >= 0.1)
    removed = founders_removed(np.vstack(sites)[:, kept], [chrom[j] for j in kept], np.asarray(bp)[kept],
                               "50 5 0.2", founders, founders | nonfounders)
    assert secure.prune["prune_out"] == [f"v{kept[j]}" for j in np.flatnonzero(removed)]


def test_secure_pruning_down_to_fewer_variants_than_the_rank_stops_the_run_in_one_line(tmp_path):
    """As the plain run refuses it: the SecAgg+ sums keep fewer variants than ``iteration-rank``, and the run stops
    naming the key, with no model."""
    from conftest import run_aborted

    sites = ld_sites((30, 30), 40, seed=7, copy=0.97)
    (tmp_path / "data").mkdir()
    for i, S in enumerate(sites):
        write_site(tmp_path / "data" / f"partition_{i}.bed", S, ["1"] * 40, np.arange(40) + 1)
    secure = run_aborted(match=r"indep-pairwise = '40 1 0.01' keeps \d+ of the 40 variants, fewer than "
                               r"iteration-rank = 3", **dict(config(tmp_path), num_clients=2,
                                                             indep_pairwise="40 1 0.01"), secure_aggregation="true")
    assert secure.model is None
