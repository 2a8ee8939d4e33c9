"""The product (fl_strategies, client_app, server_app) runs without the simulation harness.

Each check runs in a fresh interpreter, so that nothing another test imported can hide an import of
``simulations``; the harness is reached only through the entry point ``fedspectral.harness``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]

PRELUDE = """
import json, sys, tomllib
import numpy as np
import pytest
defaults = tomllib.loads(open("pyproject.toml", "rb").read().decode())["tool"]["flwr"]["app"]["config"]
def loaded():
    return sorted(m for m in sys.modules if m == "simulations" or m.startswith("simulations."))
"""


def run_fresh(code: str) -> dict:
    """Run ``code`` (after :data:`PRELUDE`) in a new interpreter in the project directory; its last line is JSON."""
    done = subprocess.run([sys.executable, "-c", PRELUDE + textwrap.dedent(code)], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_importing_the_apps_loads_no_simulation_module():
    out = run_fresh("""
        import server_app.app, client_app.app
        print(json.dumps(loaded()))
    """)
    assert out == []


def test_a_clientapp_answers_a_fedpower_message_on_its_file_without_the_harness(tmp_path):
    rows = np.random.default_rng(0).standard_normal((40, 6))
    np.save(tmp_path / "rows.npy", rows)
    out = run_fresh(f"""
        from flwr.app import Context, Message, RecordDict
        from flwr.common import FitIns, ndarrays_to_parameters
        from flwr.supercore.task_identity import TaskIdentity  # what an engine sets before messages exist
        TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 1, 1, 0
        from client_app.app import app
        from fl_strategies.protocol.fit_records import fitins_content, fitres_from_content
        cfg = dict(defaults, dataset="nodes", **{{"num-clients": 3, "rank": 2, "iteration-rank": 2}})
        context = Context(1, 7, {{"partition-id": 1, "data-path": {str(tmp_path / "rows.npy")!r}}}, RecordDict(), cfg)
        Z = np.linalg.qr(np.random.default_rng(1).standard_normal((6, 2)))[0]
        ins = FitIns(ndarrays_to_parameters([Z]), {{"local-steps": 1, "round": 1}})
        reply = app(Message(fitins_content(ins), 7, "train", group_id="1"), context)
        res = fitres_from_content(reply.content)
        from flwr.common import parameters_to_ndarrays
        (Y,) = parameters_to_ndarrays(res.parameters)
        print(json.dumps({{"loaded": loaded(), "Y": Y.tolist(), "n": res.num_examples}}))
    """)
    assert out["loaded"] == []
    M = rows  # row-normalize = false by default: the node's rows are used as they are
    Z = np.linalg.qr(np.random.default_rng(1).standard_normal((6, 2)))[0]
    np.testing.assert_allclose(np.array(out["Y"]), M.T @ M / 40 @ Z, rtol=0, atol=1e-13)
    assert out["n"] == 40


def test_a_server_for_node_data_loads_no_data_and_no_harness():
    """dataset = "nodes": the ServerApp builds the strategy with no dimension (the nodes report it) and no
    reference; no simulation module is imported."""
    out = run_fresh("""
        from server_app.app import build_strategy
        strategy, rounds = build_strategy(dict(defaults, dataset="nodes", strategy="fedpower"))
        print(json.dumps({"loaded": loaded(), "d": strategy.d, "reference": strategy.reference is None,
                          "rounds": rounds}))
    """)
    assert out == {"loaded": [], "d": None, "reference": True, "rounds": 10}


def _node_run(tmp_path, blocks, **over):
    """Run the apps in-process on node files (``dataset = "nodes"``): node i reads only ``blocks[i]``."""
    from flwr.common import Context, RecordDict

    from client_app.app import app as client_app
    from server_app.app import run_server
    from simulations.engines import fused_run_config
    from simulations.engines.local import LocalGrid

    cfg = fused_run_config({"dataset": "nodes", "num-clients": len(blocks), **over})
    grid = LocalGrid(client_app, len(blocks), cfg)
    for i, (nid, context) in enumerate(sorted(grid.contexts.items())):
        np.save(tmp_path / f"node{i}.npy", blocks[i])
        context.node_config["data-path"] = str(tmp_path / f"node{i}.npy")
    return run_server(grid, Context(run_id=1, node_id=0, node_config={}, state=RecordDict(), run_config=cfg))


def test_node_data_runs_end_to_end_with_d_from_the_nodes(tmp_path):
    """A planted rank-2 spike in d = 7, held in three node files of different sizes: the server learns d from the
    nodes, writes no reference column, and the estimate is the pooled eigenspace (scipy eigh)."""
    from scipy.linalg import eigh

    from fl_strategies.kernels.linalg import subspace_distance

    rng = np.random.default_rng(3)
    U = np.linalg.qr(rng.standard_normal((7, 2)))[0]
    blocks = [rng.standard_normal((s, 2)) * [6.0, 3.0] @ U.T + 0.1 * rng.standard_normal((s, 7))
              for s in (50, 80, 120)]
    s = _node_run(tmp_path, blocks, **{"strategy": "power", "rank": 2, "iteration-rank": 2, "num-server-rounds": 40,
                                       "row-normalize": False})
    assert s.d == 7 and s.reference is None and s.failure is None
    assert all(r["subspace_distance"] is None for r in s.records)
    assert sum(r["failures"] + r["rejected"] for r in s.records) == 0
    pooled = np.vstack(blocks)
    exact = eigh(pooled.T @ pooled / len(pooled))[1][:, -2:]
    assert subspace_distance(s.estimate, exact) < 1e-10


def test_nodes_that_disagree_on_d_are_named_before_round_1(tmp_path):


    from fl_strategies.settings.config import ConfigError

    blocks = [np.ones((5, 4)), np.ones((5, 4)), np.ones((5, 6))]
    with pytest.raises(ConfigError, match=r"disagree on the dimension d: d = 4: node 1000 \(partition 0\), node 1001 "
                                          r"\(partition 1\); d = 6: node 1002 \(partition 2\)"):
        _node_run(tmp_path, blocks, **{"rank": 2, "iteration-rank": 2})


@pytest.mark.usefixtures("every_iterate")
def test_progress_without_a_reference_and_stop_tol_on_node_data(tmp_path):
    """With no reference the rows carry the change of the estimate (sin theta between successive bases) and,
    under a stopping rule, the explained variance tr(Z^T C Z) from the clients' sums: equal to the pooled value.
    stop-tol ends the run before num-server-rounds."""
    from fl_strategies.kernels.linalg import subspace_distance

    rng = np.random.default_rng(4)
    U = np.linalg.qr(rng.standard_normal((7, 2)))[0]
    blocks = [rng.standard_normal((s, 2)) * [6.0, 3.0] @ U.T + 0.3 * rng.standard_normal((s, 7))
              for s in (50, 80, 120)]
    s = _node_run(tmp_path, blocks, **{"strategy": "fedpower", "rank": 2, "iteration-rank": 2, "local-steps": 1,
                                       "num-server-rounds": 200, "row-normalize": False, "stop-tol": 1e-9})
    assert s.failure is None and len(s.records) < 200  # the rule fired
    pooled = np.vstack(blocks)
    C = pooled.T @ pooled / len(pooled)
    for row, Z in zip(s.records[1:], list(s.iterates)[1:]):
        assert row["estimate_change"] is not None
        np.testing.assert_allclose(row["iterated_explained_variance"], np.trace(Z.T @ C @ Z), rtol=1e-10)
    assert s.records[-1]["estimate_change"] < 1e-4
    assert s.records[1]["estimate_change"] == pytest.approx(subspace_distance(s.iterates[1], s.iterates[0]))
    assert s.records[-1]["estimate_change_first_k"] == pytest.approx(
        _ritz_change(s.iterates[-1], s.iterates[-2], C, 2), abs=1e-12)


def _ritz_change(Z, previous, C, k):
    """sin theta between the first ``k`` Ritz vectors of ``C`` in ``span(Z)`` and in ``span(previous)``."""
    from fl_strategies.kernels.linalg import subspace_distance

    def ritz(B):
        values, U = np.linalg.eigh(B.T @ C @ B)
        return B @ U[:, ::-1][:, :k]

    return subspace_distance(ritz(Z), ritz(previous))


def _spiked_blocks(seed: int, sizes=(50, 80, 120), d: int = 7, offset: float = 0.0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    U = np.linalg.qr(rng.standard_normal((d, 2)))[0]
    mean = offset * rng.standard_normal(d)
    return [mean + rng.standard_normal((s, 2)) * [6.0, 3.0] @ U.T + 0.3 * rng.standard_normal((s, d)) for s in sizes]


@pytest.mark.parametrize("strategy, extra", [
    ("fedpower", {"local-steps": 2, "schedule": "fixed", "center": True}),
    ("power", {"center": False}),
    ("faps", {"center": True}),
])
@pytest.mark.usefixtures("every_iterate")
def test_explained_variance_on_every_round_without_a_stopping_rule(tmp_path, strategy, extra):
    """Node data, no stop-tol: every row's explained variance (from the clients' f_i, one round late; the last
    from the summary) equals tr(Z^T C Z) of the pooled (centred) rows to 1e-10, and its ratio uses the total
    variance of the nodes' sq-sum, which equals scikit-learn's."""
    from sklearn.decomposition import PCA

    blocks = _spiked_blocks(5, offset=4.0 if extra["center"] else 0.0)
    s = _node_run(tmp_path, blocks, **{"strategy": strategy, "rank": 2, "iteration-rank": 2,
                                       "num-server-rounds": 6, "row-normalize": False, **extra})
    assert s.failure is None and len(s.records) == 7
    pooled = np.vstack(blocks)
    X = pooled - pooled.mean(axis=0) if extra["center"] else pooled
    C = X.T @ X / len(X)
    total = np.trace(C)
    if extra["center"]:  # scikit-learn's total variance, with its n - 1
        full = PCA().fit(pooled)
        assert total == pytest.approx(full.explained_variance_.sum() * (len(X) - 1) / len(X), rel=1e-12)
    assert s.total_variance == pytest.approx(total, rel=1e-12)
    for row, Z in zip(s.records, s.iterates):
        np.testing.assert_allclose(row["iterated_explained_variance"], np.trace(Z.T @ C @ Z), rtol=1e-10)
        np.testing.assert_allclose(row["iterated_explained_variance_ratio"], np.trace(Z.T @ C @ Z) / total,
                                   rtol=1e-10)
    assert s.records[-1]["explained_variance_ratio"] == pytest.approx(s.model["explained_variance_ratio"].sum(),
                                                                      rel=1e-10)
    assert 0.9 < s.records[-1]["explained_variance_ratio"] < 1  # the planted spike holds most of the variance
    assert all(row["explained_variance_ratio"] is None for row in s.records[:-1])  # only the summary gives it


def test_the_kept_ratio_and_the_iterated_ratio_have_their_own_names(tmp_path):
    """rank 2 of iteration-rank 4: explained_variance_ratio is the model's (two kept components, as pca.npz), the
    iterated_ one covers all four columns; rounds.csv says both, by name."""
    import pandas as pd
    from sklearn.decomposition import PCA

    blocks = _spiked_blocks(8)
    s = _node_run(tmp_path, blocks, **{"strategy": "power", "rank": 2, "iteration-rank": 4, "center": True,
                                       "num-server-rounds": 40, "row-normalize": False,
                                       "results-dir": str(tmp_path / "out")})
    pca = PCA(n_components=4).fit(np.vstack(blocks))
    last = s.records[-1]
    assert last["explained_variance_ratio"] == pytest.approx(pca.explained_variance_ratio_[:2].sum(), rel=1e-8)
    # all four columns: more than the two kept, at most the top four's (Ritz values are lower bounds)
    assert (last["explained_variance_ratio"] + 1e-4 < last["iterated_explained_variance_ratio"]
            <= pca.explained_variance_ratio_.sum() + 1e-12)
    table = pd.read_csv(tmp_path / "out" / "rounds.csv")
    assert table["explained_variance_ratio"].iloc[-1] == pytest.approx(last["explained_variance_ratio"])
    assert table["explained_variance_ratio"].iloc[:-1].isna().all()
    assert "explained_variance" not in table.columns  # no name that pca.npz gives another meaning


def test_the_kept_components_converge_before_the_trailing_columns(tmp_path):
    """rank 2 of iteration-rank 4 on a planted rank-2 spike: the leading columns settle (sin theta ~1e-15 per round)
    while the trailing noise columns still turn; estimate_change_first_k tells them apart."""
    from fl_strategies.kernels.linalg import subspace_distance

    blocks = _spiked_blocks(7)
    s = _node_run(tmp_path, blocks, **{"strategy": "power", "rank": 2, "iteration-rank": 4,
                                       "num-server-rounds": 30, "row-normalize": False})
    pooled = np.vstack(blocks)
    last = s.records[-1]
    assert last["estimate_change_first_k"] == pytest.approx(
        _ritz_change(s.iterates[-1], s.iterates[-2], pooled.T @ pooled / len(pooled), 2), abs=1e-13)
    assert last["estimate_change_first_k"] < 1e-12 < 1e-3 < last["estimate_change"]


@pytest.mark.usefixtures("every_iterate")
@pytest.mark.parametrize("strategy, steps", [("power", 1), ("fedpower", 2)])
def test_the_stopping_rule_and_rounds_to_follow_the_kept_components(tmp_path, strategy, steps, caplog):
    """Genotypes of three populations (two clear PCs, then a bulk of near-equal eigenvalues), rank 2 of
    iteration-rank 4, stop-tol 1e-6: the kept components' F settles and the run stops while the trailing columns
    still turn (the all-columns change is above 1e-2 at the end, so its rounds to 0.01 is NaN, the kept
    components' a round number); the kept change is that of the first two Ritz vectors of the pooled covariance,
    and the log says how many leading components have converged."""
    import logging

    from fl_strategies.kernels.metrics import pooled_covariance
    from simulations.compare.report import rounds_to_reach
    from simulations.data.genotypes import genotype_sites

    blocks = [G.astype(float) for G in genotype_sites((60, 80, 100, 70), 400, populations=3, seed=3)]
    with caplog.at_level(logging.INFO, logger="flwr.fedspectral"):
        s = _node_run(tmp_path, blocks, **{"strategy": strategy, "local-steps": steps, "schedule": "fixed",
                                           "rank": 2, "iteration-rank": 4, "center": True, "scale": "hwe",
                                           "num-server-rounds": 60, "row-normalize": False, "stop-tol": 1e-6})
    assert s.failure is None and s.stopped and len(s.records) < 30
    table = pd.DataFrame(s.records)
    assert table["estimate_change"].iloc[-1] > 1e-2
    assert np.isnan(rounds_to_reach(table, 1e-2, "estimate_change"))
    assert rounds_to_reach(table, 1e-2, "estimate_change_first_k") < len(s.records)
    C = pooled_covariance(blocks, center=True, scale="hwe")
    iterates = list(s.iterates)
    for row, Z, previous in zip(s.records[2:], iterates[2:], iterates[1:]):
        assert row["estimate_change_first_k"] == pytest.approx(_ritz_change(Z, previous, C, 2), rel=1e-6, abs=1e-12)
    said = [r.getMessage() for r in caplog.records if "leading converged" in r.getMessage()]
    last = s.records[-1]["estimate_change_first_k"]
    assert (f"round {len(s.records) - 1}'s 2 kept components moved {last:.3e} (sin theta, Ritz), "
            f"{1 if last > 1e-3 else 2} of 4 leading converged (moved <= 0.001)") in said[-1]


def test_no_objective_or_total_variance_leaves_a_noisy_node(tmp_path):
    """With noise the clients release neither f_i nor sq-sum (they carry no noise): the columns are empty, and a
    client asked for f_i in a noisy run refuses."""
    from client_app.data import NodeData
    from client_app.fedpower_client import FedPowerClient
    from fl_strategies.settings.config import validate_run_config
    from flwr.common import Context, RecordDict
    from simulations.engines import fused_run_config

    blocks = [b / np.linalg.norm(b, axis=1, keepdims=True) for b in _spiked_blocks(6)]
    s = _node_run(tmp_path, blocks, **{"strategy": "fedpower", "rank": 2, "iteration-rank": 2, "epsilon": 2.0,
                                       "num-server-rounds": 3, "row-normalize": True})
    assert s.failure is None and s.total_variance is None
    assert all("sq-sum" not in props for props in s.node_properties.values())
    assert all(r.get("iterated_explained_variance") is None and r["estimate_change"] is not None
               for r in s.records[1:])
    cfg = validate_run_config(fused_run_config({"epsilon": 1.0, "row-normalize": True, "dimension": 7,
                                                "rank": 2, "iteration-rank": 2}))
    client = FedPowerClient(NodeData.of(0, covariance=(np.eye(7), 100)), cfg, Context(1, 1, {}, RecordDict(), {}))
    Z = np.linalg.qr(np.random.default_rng(0).standard_normal((7, 2)))[0]
    with pytest.raises(RuntimeError, match="released without noise"):
        client.fit([Z], {"local-steps": 1, "round": 1, "objective": True})


def test_a_node_with_an_empty_file_stops_a_node_data_run_before_round_1(tmp_path):


    from fl_strategies.settings.config import ConfigError

    blocks = [np.ones((5, 4)), np.zeros((0, 4)), np.ones((5, 4))]
    with pytest.raises(ConfigError, match=r"no usable node for partition\(s\) 1 .*node 1001: it failed to start: "
                                          r".*partition 1: node config data-path .*at least 1 row"):
        _node_run(tmp_path, blocks, **{"rank": 2, "iteration-rank": 2})


def test_the_leading_columns_change_is_leading_changes_to_round_off():
    """leading_column_changes (one d x k residual) gives leading_changes' sin theta of each leading j columns, down
    to round-off for estimates that have barely moved."""
    from fl_strategies.kernels.linalg import leading_changes, leading_column_changes, orth, subspace_distance

    rng = np.random.default_rng(11)
    Z = orth(rng.standard_normal((500, 5)))
    for step in (1.0, 1e-3, 1e-11):
        moved = orth(Z + step * rng.standard_normal(Z.shape) * [0.0, 0.0, 1.0, 1.0, 1.0])  # PC1-2 stay put
        expected = leading_changes(moved, Z)
        got = leading_column_changes(moved, Z)
        assert got == pytest.approx(expected, rel=1e-9, abs=1e-15)
        assert got[1] < 1e-14 < got[2]
        assert got[-1] == subspace_distance(moved, Z)  # the kept components' change, as the column had it
