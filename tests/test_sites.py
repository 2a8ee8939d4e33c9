"""Sites as they come: strand-ambiguous variants, IDs listed twice, secure aggregation over
genotypes without ``secagg-clip``, and the log's last round."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest

from conftest import run_app

bed_reader = pytest.importorskip("bed_reader")

from test_genotype_bed import simulated_sites, write_bed  # noqa: E402
from test_variant_alignment import write_site  # noqa: E402

ALLELES = [("A", "G"), ("A", "T"), ("C", "T"), ("G", "C"), ("T", "G")]  # variants 1 and 3 of every 5 ambiguous


def same_sites(folder, sites, d):
    """Every site lists the same ``d`` variants in the same order (their digests agree), 2 in 5 strand-ambiguous."""
    folder.mkdir()
    ids, alleles = [f"rs{100 + j}" for j in range(d)], [ALLELES[j % 5] for j in range(d)]
    for i, G in enumerate(sites):
        write_site(folder / f"partition_{i}.bed", G, ids, alleles)
    return [j for j in range(d) if j % 5 not in (1, 3)]


def node_files(folder, m):
    return [folder / f"partition_{i}.bed" for i in range(m)]


def test_drop_ambiguous_drops_them_all_also_when_the_sites_lists_agree(tmp_path):
    """``drop-ambiguous = true``: the run (and the width ``run`` / ``deploy`` / ``compare`` check before Flower) has
    the variants other than A/T and C/G, in the model; false keeps them all (every site lists them in one order)."""
    from fedspectral.run_config import check_node_files
    from simulations.engines import fused_run_config

    sites = simulated_sites((40, 50), 100, missing=0.0, seed=31)
    kept = same_sites(tmp_path / "data", sites, 100)
    cfg = dict(strategy="power", dataset=str(tmp_path / "data"), num_clients=2, rank=2, iteration_rank=3,
               num_server_rounds=4, center=True, row_normalize=False)
    files = node_files(tmp_path / "data", 2)
    for drop, width in ((False, 100), (True, len(kept))):
        fused = fused_run_config({"num-clients": 2, "center": True, "drop-ambiguous": drop})
        assert check_node_files(fused, files, "--data-dir D", "node file", "--data-dir D") == width
    strategy = run_app(**cfg, drop_ambiguous=True)
    assert [vid for vid, _, _ in strategy.variants] == [f"rs{100 + j}" for j in kept] and strategy.d == 60
    np.testing.assert_allclose(strategy.mean, np.vstack(sites)[:, kept].mean(axis=0), rtol=0, atol=1e-12)
    assert run_app(**cfg).d == 100


def test_ambiguous_variants_listed_the_other_way_round_leave_the_run_counted_in_the_log(tmp_path, caplog):
    """Site 1 lists every variant with A1/A2 exchanged (its counts ``2 - g``): the unambiguous ones are flipped, the
    A/T and C/G ones (a swap or a strand flip?) dropped at every site, and the log counts them."""
    sites = simulated_sites((40, 50), 100, missing=0.0, seed=32)
    kept = same_sites(tmp_path / "data", sites, 100)
    ids, alleles = [f"rs{100 + j}" for j in range(100)], [ALLELES[j % 5][::-1] for j in range(100)]
    write_site(tmp_path / "data" / "partition_1.bed", 2 - sites[1], ids, alleles)
    with caplog.at_level(logging.INFO, logger="flwr"):
        strategy = run_app(strategy="power", dataset=str(tmp_path / "data"), num_clients=2, rank=2,
                           iteration_rank=3, num_server_rounds=4, center=True, row_normalize=False)
    assert [vid for vid, _, _ in strategy.variants] == [f"rs{100 + j}" for j in kept]
    np.testing.assert_allclose(strategy.mean, np.vstack(sites)[:, kept].mean(axis=0), rtol=0, atol=1e-12)
    assert ("60 variants shared by every node (in partition 0's order); dropped 0 not at every node, 0 with other "
            "alleles, 0 listed twice at a node, 40 strand-ambiguous (A/T, C/G) (their alleles in another order at "
            "some node); A1/A2 exchanged (flipped) at partition 0: 0, partition 1: 60") in caplog.text


@pytest.mark.parametrize("which", ["bim", "fam"])
def test_an_id_listed_twice_within_a_site_is_refused_naming_it(tmp_path, which):
    """Before Flower starts (the files the command reads) and at the node (its own file), in one line."""
    from client_app.data import NodeData
    from fedspectral.run_config import ArgumentError, check_node_files
    from fl_strategies.settings.config import ConfigError
    from simulations.engines import fused_run_config

    sites = simulated_sites((20, 30), 40, missing=0.0, seed=33)
    (tmp_path / "data").mkdir()
    for i, G in enumerate(sites):
        write_bed(tmp_path / "data" / f"partition_{i}.bed", G)
    path = tmp_path / "data" / f"partition_1.{which}"
    lines = path.read_text().splitlines()
    column = 1 if which == "bim" else slice(0, 2)
    twice = lines[7].split()[column]  # line 7's ID (variant, or FID IID) written again on line 12
    fields = lines[12].split()
    if which == "bim":
        fields[1] = twice
    else:
        fields[0:2] = twice
    lines[12] = "\t".join(fields)
    path.write_text("\n".join(lines) + "\n")
    named = twice if which == "bim" else " ".join(twice)
    what = "variant IDs" if which == "bim" else r"people \(FID IID\)"
    cfg = fused_run_config({"num-clients": 2, "center": True})
    with pytest.raises(ArgumentError, match=rf"^--data-dir D: partition 1: genotype file '[^']*partition_1.bed' "
                                            rf"lists {what} more than once: {named} \(2 times\); [^\n]*$"):
        check_node_files(cfg, node_files(tmp_path / "data", 2), "--data-dir D", "node file", "--data-dir D")
    node = {"partition-id": 1, "data-path": str(tmp_path / "data" / "partition_1.bed")}
    with pytest.raises(ValueError, match=rf"^partition 1: node config data-path '[^']*' lists {what} more than "
                                         rf"once: {named} \(2 times\)"):
        NodeData(fused_run_config({"num-clients": 2, "center": True, "dataset": "nodes"}), node).num_rows
    with pytest.raises(ConfigError, match=rf"partition 1: .* lists {what} more than once: {named} \(2 times\)"):
        run_app(strategy="power", dataset=str(tmp_path / "data"), num_clients=2, rank=2, iteration_rank=3,
                num_server_rounds=2, center=True, row_normalize=False, expect_clean=False)


def test_the_command_and_a_node_read_each_variant_list_once(tmp_path, monkeypatch):
    """The checks before Flower starts read each site's ``.bim`` once (the IDs listed twice are found in that
    list), a list the same bytes as an earlier site's not at all (the sites of one panel: its people are still
    checked), and a node opening its ``.bed`` reads its own once (its checks and its variant list share the
    read)."""
    from client_app import data
    from fedspectral.run_config import check_node_files
    from fl_strategies.files import variants
    from simulations.engines import fused_run_config

    (tmp_path / "data").mkdir()
    for i, G in enumerate(simulated_sites((20, 30), 40, missing=0.0, seed=33)):
        write_bed(tmp_path / "data" / f"partition_{i}.bed", G)
    reads, real = [], variants.read_bim

    def counted(path):
        reads.append(Path(path).name)
        return real(path)

    monkeypatch.setattr(variants, "read_bim", counted)
    monkeypatch.setattr(data, "read_bim", counted)
    cfg = fused_run_config({"num-clients": 2, "center": True})
    assert check_node_files(cfg, node_files(tmp_path / "data", 2), "--data-dir D", "node file", "--data-dir D") == 40
    assert reads == ["partition_0.bed"]  # partition 1's .bim is the same bytes
    reads.clear()
    bim = tmp_path / "data" / "partition_1.bim"
    bim.write_text(bim.read_text().replace("\n", "\r\n"))  # the same list in other bytes: read
    assert check_node_files(cfg, node_files(tmp_path / "data", 2), "--data-dir D", "node file", "--data-dir D") == 40
    assert sorted(reads) == ["partition_0.bed", "partition_1.bed"]
    reads.clear()
    node = {"partition-id": 1, "data-path": str(tmp_path / "data" / "partition_1.bed")}
    site = data.NodeData(fused_run_config({"num-clients": 2, "center": True, "dataset": "nodes"}), node)
    assert site.num_rows == 30 and len(site.bim) == 40
    assert reads == ["partition_1.bed"]


def test_the_command_and_read_bim_take_a_sites_variant_list_from_one_rule(tmp_path, monkeypatch):
    """``variant_list_path`` names the variant list of a genotype file (``.pvar`` beside a ``.pgen``, else the
    ``.bim``); the command's checks and ``read_bim`` both ask it."""
    from fedspectral.run_config import check_node_files
    from fl_strategies.files import variants
    from simulations.engines import fused_run_config

    assert variants.variant_list_path("d/x.pgen") == variants.variant_list_path("d/x.PGEN") == Path("d/x.pvar")
    assert variants.variant_list_path("d/x.bed") == Path("d/x.bim")
    (tmp_path / "data").mkdir()
    for i, G in enumerate(simulated_sites((20, 30), 40, missing=0.0, seed=33)):
        write_bed(tmp_path / "data" / f"partition_{i}.bed", G)
    asked, rule = [], variants.variant_list_path
    monkeypatch.setattr(variants, "variant_list_path", lambda path: asked.append(Path(path).name) or rule(path))
    cfg = fused_run_config({"num-clients": 2, "center": True})
    assert check_node_files(cfg, node_files(tmp_path / "data", 2), "--data-dir D", "node file", "--data-dir D") == 40
    assert asked == ["partition_0.bed", "partition_0.bed", "partition_1.bed"]  # the check; read_bim; the check


@pytest.mark.parametrize("strategy, missing", [("krylov", 0.01), ("power", 0.0)])
def test_secure_aggregation_over_genotypes_needs_no_secagg_clip_and_gives_the_plain_model(tmp_path, strategy,
                                                                                         missing):
    """The public bound from allele counts in [0, 2] and the broadcast mean and hwe scale (with missing calls:
    plink2's missingness weights and diagonal) fixes the SecAgg+ range: no secagg-clip, the plain run's model."""
    from test_secure_power import assert_same_model

    from fl_strategies.settings.config import ConfigError, validate_run_config
    from simulations.engines import fused_run_config

    sites = simulated_sites((150, 120, 130), 200, missing=missing, seed=34)
    (tmp_path / "data").mkdir()
    for i, G in enumerate(sites):
        write_bed(tmp_path / "data" / f"partition_{i}.bed", G)
    cfg = dict(strategy=strategy, dataset=str(tmp_path / "data"), num_clients=3, rank=2, iteration_rank=3,
               num_server_rounds=30 if strategy == "krylov" else 40, center=True, scale="hwe", row_normalize=False)
    plain = run_app(**cfg)
    secure = run_app(**cfg, secure_aggregation="true")  # secagg-clip = 0: its default
    assert secure.settings.secagg_clip == 0 and secure.genotype_row_bound() is not None
    assert secure.plink2_diagonal == (missing > 0)
    assert plain.records[-1]["estimate_change"] < (1e-6 if strategy == "krylov" else 1e-2)  # a model near its end
    assert_same_model(secure, plain)
    np.testing.assert_allclose(secure.mean, plain.mean, rtol=1e-12, atol=1e-15)
    (tmp_path / "dense").mkdir()  # other data still need the bound
    for i, G in enumerate(sites):
        np.save(tmp_path / "dense" / f"partition_{i}.npy", np.nan_to_num(G))
    with pytest.raises(ConfigError, match="^secagg-clip must be set .* no PLINK .bed/.pgen genotypes"):
        validate_run_config(fused_run_config({k.replace("_", "-"): v for k, v in dict(
            cfg, dataset=str(tmp_path / "dense"), scale="true", secure_aggregation="true").items()}))


def test_the_log_says_the_round_the_stopping_rule_ended_the_run_at(tmp_path, caplog):
    """Flower's own summary says "Run finished N round(s)" for num-server-rounds = N; a run the stopping rule ended
    earlier says so after it."""
    sites = simulated_sites((60, 70), 120, missing=0.0, seed=35)
    (tmp_path / "data").mkdir()
    for i, G in enumerate(sites):
        write_bed(tmp_path / "data" / f"partition_{i}.bed", G)
    with caplog.at_level(logging.INFO, logger="flwr"):
        strategy = run_app(strategy="power", dataset=str(tmp_path / "data"), num_clients=2, rank=2,
                           iteration_rank=3, num_server_rounds=40, center=True, scale="hwe", row_normalize=False,
                           stop_tol=1e-6)
    ran, model = strategy.rounds_run, strategy.records[-1]["round"]
    assert strategy.stopped and ran < 40 and model == ran - 1  # round `ran`'s objective stopped it: Z_(ran-1) kept
    assert (f"the run stopped in round {ran} of num-server-rounds = 40 (stopping rule, stop-tol = 1e-06): {ran} "
            f"round(s) ran, the model is round {model}'s estimate") in caplog.text
    assert caplog.text.rindex("Run finished 40 round(s)") < caplog.text.rindex(f"the run stopped in round {ran} of")


def test_deploy_data_dir_of_other_data_under_secure_aggregation_still_needs_a_bound(tmp_path):
    """``dataset = "nodes"`` passes the config (only the nodes know their data); the files ``deploy --data-dir``
    reads before Flower starts are no genotypes: refused in one line naming secagg-clip."""
    from fedspectral.run_config import ArgumentError, check_node_files
    from simulations.engines import fused_run_config

    files = []
    for i in range(2):
        files.append(tmp_path / f"partition_{i}.npy")
        np.save(files[-1], np.random.default_rng(i).normal(size=(20, 6)))
    cfg = fused_run_config({"strategy": "power", "num-clients": 2, "dataset": "nodes", "center": True,
                            "row-normalize": False, "secure-aggregation": "true"})
    with pytest.raises(ArgumentError, match=r"^--data-dir D: secagg-clip must be set \(> 0\) [^\n]*genotypes"):
        check_node_files(cfg, files, "--data-dir D", "node file", "--data-dir D")
    assert check_node_files(dict(cfg, **{"secagg-clip": 100.0}), files, "--data-dir D", "node file", "D") == 6
