"""Outlier removal (``outlier-sigma``) with ``secure-aggregation = true``: each pass's score sums and the sites'
counts go through SecAgg+ (fl_strategies.protocol.outlier_exchange.secure_outlier_pass), and the run removes the
plain run's people at every site and gives its model."""

from __future__ import annotations

import re

import numpy as np
import pytest
from conftest import run_app

from fl_strategies.files.data_files import open_samples
from fl_strategies.files.pca import transform
from fl_strategies.kernels.linalg import subspace_distance
from fl_strategies.kernels.outliers import site_outliers

bed_reader = pytest.importorskip("bed_reader")

from test_genotype_bed import write_bed  # noqa: E402
from test_outliers import sites_with_outliers  # noqa: E402

SITE_LINE = re.compile(r"^partition (\d+): .*: (\d+) of the (\d+) people in its fit beyond ([\d.]+) sd")


def outlier_sites(tmp_path):
    """Three ``.bed`` sites with 1 % missing calls and a distant person at sites 0 and 2, as ``data/``."""
    sites, _ = sites_with_outliers(tmp_path)
    (tmp_path / "data").mkdir()
    for i, G in enumerate(sites):
        write_bed(tmp_path / "data" / f"partition_{i}.bed", G)
    return sites


def config(tmp_path, strategy, scale, **extra):
    return dict(dict(strategy=strategy, dataset=str(tmp_path / "data"), num_clients=3, rank=4, iteration_rank=6,
                     num_server_rounds=30, center=True, scale=scale, row_normalize=False, outlier_sigma=2.2,
                     outlier_iterations=3, outlier_pcs=3), **extra)


def removed_lists(strategy, files) -> list[np.ndarray]:
    """Each site's removed people recomputed from the passes the run's model records, as ``transform`` does at the
    site (:func:`client_app.outlier_replies.removed_people`)."""
    passes = [{"model": {"components": p["components"], "mean": p["mean"], "scale": p["scale"],
                         "scaling": strategy.model.get("scaling", "false"), "row_normalize": False, "clip_norm": 0.0},
               "pcs": p["pcs"], "mean": p["score_mean"], "sd": p["score_sd"]} for p in strategy.model["outlier_passes"]]
    return [site_outliers(lambda m, chosen, X=X: transform(m, X.subset(chosen)), np.arange(X.num_rows), passes,
                          strategy.model["outlier_sigma"]) for X in files]


def site_counts(records) -> dict[int, list[int]]:
    """Per partition, the counts its sites logged, pass by pass."""
    counts: dict[int, list[int]] = {}
    for record in records:
        match = SITE_LINE.match(record.getMessage())
        if match:
            counts.setdefault(int(match.group(1)), []).append(int(match.group(2)))
    return counts


@pytest.mark.parametrize("strategy,scale", [("power", "false"), ("krylov", "hwe")])
def test_a_secure_outlier_run_removes_the_plain_runs_people_at_each_site_and_gives_its_model(tmp_path, strategy,
                                                                                             scale, caplog):
    """The same passes (people removed at each site, pass by pass), the same federation moments (fixed point: the
    pooled sums within m 2^-(f+1), 2^-f <= 2^(2 - 87) B for 3 clients; 1e-12 asserted, about 1e-15 measured) and
    the same final model (1e-10; about 1e-13 measured) as the plain run (which tests/test_outliers.py compares with
    smartpca's rule on the pooled genotypes). The server logs only the federation's total per pass; each site logs
    its own count."""
    sites = outlier_sites(tmp_path)
    cfg = config(tmp_path, strategy, scale)
    plain = run_app(**cfg)
    with caplog.at_level("INFO", logger="flwr.fedspectral"):
        secure = run_app(**cfg, secure_aggregation="true")
    assert secure.secure and not plain.secure and secure.sizes == {}
    ours, theirs = secure.model["outlier_passes"], plain.model["outlier_passes"]
    assert [p["removed"] for p in ours] == [p["removed"] for p in theirs] and ours[0]["removed"] >= 1
    for a, b in zip(ours, theirs):
        assert a["n"] == b["n"] and a["pcs"] == b["pcs"]
        np.testing.assert_allclose(a["score_mean"], b["score_mean"], rtol=0, atol=1e-12 * np.max(b["score_sd"]))
        np.testing.assert_allclose(a["score_sd"], b["score_sd"], rtol=1e-12)
    files = [open_samples(tmp_path / "data" / f"partition_{i}.bed") for i in range(len(sites))]
    lists = removed_lists(secure, files)
    for mine, plains in zip(lists, removed_lists(plain, files)):
        np.testing.assert_array_equal(mine, plains)
    assert secure.model["n_samples"] == plain.model["n_samples"] == sum(len(G) for G in sites) - sum(map(len, lists))
    assert subspace_distance(secure.model["components"].T, plain.model["components"].T) <= 1e-10
    np.testing.assert_allclose(secure.model["explained_variance"], plain.model["explained_variance"], rtol=1e-10)
    server = [r.getMessage() for r in caplog.records if r.getMessage().startswith("outliers, pass")]
    assert len(server) == len(ours) and all("SecAgg+ sum of the sites' counts" in m and "per site" not in m
                                            for m in server)
    assert [int(m.split(": ")[1].split(" of ")[0]) for m in server] == [p["removed"] for p in ours]
    counts = site_counts(caplog.records)  # each site's own line, pass by pass: what it removed
    assert sorted(counts) == [0, 1, 2] and all(len(c) == len(ours) for c in counts.values())
    assert [sum(c[t] for c in counts.values()) for t in range(len(ours))] == [p["removed"] for p in ours]
    assert [sum(counts[i]) for i in range(3)] == [len(r) for r in lists]
    # the public bound on a person's scores holds (a value beyond it would be refused by its site)
    R = secure.score_bound()
    scores = np.vstack([transform(secure.model, X) for X in files])
    assert R is not None and np.max(np.linalg.norm(scores, axis=1)) <= R


def test_no_message_from_a_node_holds_its_score_sums_or_counts_in_a_secure_outlier_run(tmp_path):
    """Every value the server receives in a secure run with outlier passes: no site's score sums or sums of squares
    (float64 bytes), no row count of its fit before or after a pass, no count of the people it flagged; the fit
    replies carry only SecAgg+'s weight 1, a success status and the partition id. The same scan finds the score sums
    and the per-site counts in the plain run's replies."""
    from test_secure_power import _leaks, _received, _site_secrets, assert_only_public_fields, secure_recorded

    sites = outlier_sites(tmp_path)
    cfg = config(tmp_path, "power", "false", num_server_rounds=8, rank=3, iteration_rank=4)
    plain, plain_grid = secure_recorded(**cfg)
    files = [open_samples(tmp_path / "data" / f"partition_{i}.bed") for i in range(len(sites))]
    passes = plain.model["outlier_passes"]
    assert len(passes) >= 2 and passes[0]["removed"] >= 1
    secrets = _site_secrets(sites)
    people = [np.arange(len(G)) for G in sites]
    flagged_total = 0
    for number, record in enumerate(passes):
        model = {"components": record["components"], "mean": record["mean"], "scale": record["scale"]}
        for i, X in enumerate(files):
            y = transform(model, X.subset(people[i]))
            flags = np.any(np.abs(y - record["score_mean"]) / record["score_sd"] > cfg["outlier_sigma"], axis=1)
            secrets += [(f"site {i} score sums", y.sum(axis=0)[:2].astype("<f8").tobytes()),
                        (f"site {i} score squares", (y ** 2).sum(axis=0)[:2].astype("<f8").tobytes()),
                        (f"site {i} people", int(people[i].size)), (f"site {i} people", float(people[i].size))]
            if flags.sum() > len(sites):  # a count that no public field (partition ids, weight 1) can equal
                secrets.append((f"site {i} flagged", int(flags.sum())))
            flagged_total += int(flags.sum())
            people[i] = people[i][~flags]
    assert flagged_total == sum(p["removed"] for p in passes)
    received = _received(plain_grid)
    found = {f.split(" in ")[0].split(" = ")[0] for f in _leaks(received, secrets)}
    assert {f"site {i} score sums" for i in range(3)} <= found
    assert any(key == "fitres.metrics/outliers" for _, _, key, _ in received)  # the plain pass: counts in the clear
    secure, grid = secure_recorded(**cfg, secure_aggregation="true")
    assert [p["removed"] for p in secure.model["outlier_passes"]] == [p["removed"] for p in passes]
    received = _received(grid)
    assert _leaks(received, secrets) == []
    assert_only_public_fields(received, 3)


def test_with_variant_filters_every_fit_filters_the_files_variants_again_over_the_people_left(tmp_path,
                                                                                             monkeypatch):
    """``maf-min`` with outlier passes, plain and secure: each fit starts from discovery with the files' own variants
    (a node forgets the previous fit's list), so the final variants are numpy's maf filter over the people left
    (those the sites removed, as recorded at the sites), and the secure run's passes, variants and model are the
    plain run's; ``transform``'s list at each site (from ``pca.npz``, each pass over its own variants) is the
    people the site removed."""
    from client_app.data import NodeData

    sites = outlier_sites(tmp_path)
    removed: dict[str, dict[int, list]] = {"plain": {}, "secure": {}}
    run = ["plain"]
    original = NodeData.remove

    def remove(self, people):
        removed[run[0]].setdefault(self.partition_id, []).extend(np.asarray(people).tolist())
        original(self, people)

    monkeypatch.setattr(NodeData, "remove", remove)
    cfg = config(tmp_path, "krylov", "hwe", maf_min=0.1)
    plain = run_app(**cfg)
    run[0] = "secure"
    secure = run_app(**cfg, secure_aggregation="true")
    assert removed["plain"] == removed["secure"] and sum(map(len, removed["plain"].values())) >= 2
    ours, theirs = secure.model["outlier_passes"], plain.model["outlier_passes"]
    assert [p["removed"] for p in ours] == [p["removed"] for p in theirs] and len(ours) >= 2
    assert secure.variants == plain.variants
    left = np.vstack([np.delete(G, removed["plain"].get(i, []), axis=0) for i, G in enumerate(sites)])
    frequency = np.nanmean(left, axis=0) / 2
    kept = [f"sid{j + 1}" for j in np.flatnonzero(np.minimum(frequency, 1 - frequency) >= 0.1)]
    assert [vid for vid, _, _ in secure.variants] == kept and len(kept) < sites[0].shape[1]
    assert subspace_distance(secure.model["components"].T, plain.model["components"].T) <= 1e-10
    # transform's list at each site: every pass's model over its own fit's variants (recorded in pca.npz)
    from client_app.outlier_replies import removed_people
    from fl_strategies.files.pca import load_model, save_model
    from fl_strategies.files.variants import as_variants, read_fam

    path = save_model(tmp_path / "pca.npz", secure.model, secure.cfg)
    model = load_model(path)
    assert len({len(p["variants"]) for p in ours}) >= 2  # the passes' fits kept different variants
    for i in range(len(sites)):
        bed = tmp_path / "data" / f"partition_{i}.bed"
        X = as_variants(open_samples(bed), bed, model["variants"])
        fam = read_fam(bed)
        assert removed_people(str(path), model, X, str(bed)) == [tuple(fam[j][:2])
                                                                 for j in sorted(removed["secure"].get(i, []))]


def test_a_secure_pruned_outlier_run_with_keep_files_is_the_plain_one(tmp_path):
    """``indep-pairwise``, ``maf-min`` and ``.keep`` files at two sites with outlier passes: every fit prunes again over
    the people left, and the secure run's passes (removed people, each fit's variants), prune.in and model are the
    plain run's."""
    from test_secure_prune import config as prune_config
    from test_secure_prune import pruned_sites

    pruned_sites(tmp_path, keeps=True)
    cfg = prune_config(tmp_path, "krylov", outlier_sigma=2.5, outlier_iterations=3, outlier_pcs=2, maf_min=0.05)
    plain = run_app(**cfg)
    secure = run_app(**cfg, secure_aggregation="true")
    ours, theirs = secure.model["outlier_passes"], plain.model["outlier_passes"]
    assert [p["removed"] for p in ours] == [p["removed"] for p in theirs] and len(ours) >= 2
    assert [p["variants"] for p in ours] == [p["variants"] for p in theirs]
    assert len({len(p["variants"]) for p in ours}) >= 2  # the people left change what pruning keeps
    assert secure.prune == plain.prune and secure.variants == plain.variants
    assert subspace_distance(secure.model["components"].T, plain.model["components"].T) <= 1e-10
