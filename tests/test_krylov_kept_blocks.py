"""A krylov summary from the sites' kept blocks (``LocalOperator.product_keeping`` / ``kept_left``): an oracle
checks every kept ``X Z`` and row squares against a fresh read of the site's file, over the cases where kept blocks
could be stale (a repeated block, a restart, several runs in one process, a resumed run, outlier passes, SecAgg+),
and the blocks of a finished fit are dropped."""

import numpy as np
import pytest

from conftest import run_app


@pytest.fixture
def oracle(monkeypatch):
    """Every time a site answers the summary from its kept blocks, compare with the read it replaces."""
    import client_app.pca_replies as replies

    seen = {"kept": 0, "fallback": 0, "err": []}
    plain = replies.summary_left

    def checked(A, Z, config, partition_id):
        out = plain(A, Z, config, partition_id)
        if out is None:
            seen["fallback"] += 1
            return out
        seen["kept"] += 1
        Y, squares = A.rows.left_with_squares(Z, A.mean, A.scale)
        seen["err"].append(max(np.abs(out[0] - Y).max() / np.abs(Y).max(),
                               np.abs(out[1] - squares).max() / np.abs(squares).max()))
        return out

    monkeypatch.setattr(replies, "summary_left", checked)
    return seen


def sites(tmp_path):
    from test_krylov import bed_sites

    return bed_sites(tmp_path)


def assert_right(seen, kept):
    assert seen["kept"] == kept, seen
    assert all(e < 1e-10 for e in seen["err"]), seen["err"]


def test_a_run_that_stops_answers_from_the_kept_blocks(tmp_path, oracle):
    run_app(**sites(tmp_path))
    assert_right(oracle, 4)


@pytest.mark.parametrize("when", [1, 3])
def test_a_repeated_block(tmp_path, oracle, when):
    n = {"n": 0}

    def fail(msg, pid):
        if msg.metadata.message_type == "train" and pid == 1:
            n["n"] += 1
            return "error" if n["n"] == when else "ok"
        return "ok"

    s = run_app(fault_fn=fail, **sites(tmp_path))
    assert sum(r["failures"] for r in s.records[1:]) == 1
    assert_right(oracle, 4)


def test_a_repeated_first_round_sends_the_same_basis_id(tmp_path, oracle, monkeypatch):
    """A round 1 repeated (a client failed) names the basis drawn for it the first time, so the sites that answered
    keep block 0 and its row squares (one read of the squares each) instead of beginning another basis."""
    from fl_strategies.kernels.products import LocalOperator

    calls, squares = [], []
    keeping = LocalOperator.product_keeping

    def counted(self, Z, basis, block):
        calls.append((basis, block))
        left = self.rows.left_with_squares
        self.rows.left_with_squares = lambda *a, **k: squares.append(k.get("squares")) or left(*a, **k)
        try:
            return keeping(self, Z, basis, block)
        finally:
            del self.rows.left_with_squares

    asked = []

    def fail(msg, pid):  # partition 1's first round fails
        if msg.metadata.message_type == "train" and pid == 1:
            asked.append(pid)
            return "error" if len(asked) == 1 else "ok"
        return "ok"

    monkeypatch.setattr(LocalOperator, "product_keeping", counted)
    s = run_app(fault_fn=fail, **sites(tmp_path))
    assert s.records[1]["failures"] == 1
    assert [block for _, block in calls].count(0) == 3 + 4  # round 1: three sites answered, then all four again
    assert len({basis for basis, _ in calls}) == 1, calls
    assert squares.count(True) == 4  # each site's row squares read once, with its first block 0
    assert_right(oracle, 4)


def test_a_run_of_all_its_rounds_answers_from_the_kept_blocks(tmp_path, oracle):
    """``krylov-blocks = 0`` (``q = num-server-rounds``) fills the basis in the last round, which needs no next block:
    it does not restart there, so the summary still has the broadcast blocks and no site reads its file."""
    s = run_app(**dict(sites(tmp_path), stop_tol=0, num_server_rounds=6))
    assert s.restarts == 0, f"the last round restarted the basis ({s.restarts} restart)"
    assert_right(oracle, 4)


def test_a_thick_restart(tmp_path, oracle):
    over = dict(sites(tmp_path), krylov_blocks=3, stop_tol=0, num_server_rounds=8)
    s = run_app(**over)
    assert s.restarts >= 1
    assert oracle["kept"] == 0


def test_runs_in_one_process(tmp_path, oracle):
    over = sites(tmp_path)
    a = run_app(**over, seed=1)
    b = run_app(**over, seed=2)
    c = run_app(**over, seed=1)
    assert_right(oracle, 12)
    np.testing.assert_array_equal(a.model["components"], c.model["components"])


def test_kill_and_resume(tmp_path, oracle, monkeypatch):
    from test_resume import Killed, kill_server

    over = sites(tmp_path)
    whole = run_app(**over)
    out = tmp_path / "run"
    with monkeypatch.context() as patch:
        kill_server(patch, 3, False)
        with pytest.raises(Killed):
            run_app(results_dir=str(out), checkpoint_dir=str(out), **over)
    resumed = run_app(results_dir=str(out), checkpoint_dir=str(out), resume=True, **over)
    assert oracle["kept"] == 4  # the whole run only; the resumed one reads
    for key in ("explained_variance", "components"):
        np.testing.assert_allclose(resumed.model[key], whole.model[key], rtol=1e-10,
                                   atol=1e-10 * np.abs(whole.model[key]).max())


def test_outlier_passes(tmp_path, oracle):
    from test_outliers import run_outliers, sites_with_outliers

    people, _ = sites_with_outliers(tmp_path)
    run_outliers(tmp_path / "run", people,
                 "outlier-sigma = 2.2\noutlier-iterations = 2\noutlier-pcs = 3\nstop-tol = 1e-9",
                 strategy="krylov", keeps=[None, np.setdiff1d(np.arange(40), [3, 17, 30]), None])
    assert oracle["kept"] >= 6, oracle
    assert all(e < 1e-10 for e in oracle["err"]), oracle["err"]


@pytest.mark.parametrize("coordinates", [b"", b"x" * 7, "text", 3.0, [1.0, 2.0]])
def test_a_malformed_summary_config(tmp_path, coordinates):
    from fl_strategies.files.pca import KRYLOV_BASIS, KRYLOV_COORDINATES
    from client_app.pca_replies import summary_left

    class Op:
        def kept_left(self, basis, V):
            return None

    with pytest.raises(ValueError, match="partition 0"):
        summary_left(Op(), np.zeros((10, 5)), {KRYLOV_BASIS: "b", KRYLOV_COORDINATES: coordinates}, 0)


def test_secure_krylov_keeps_blocks_its_summary_never_uses(tmp_path, oracle, monkeypatch):
    """Under SecAgg+ the summary sends no coordinates (no known product): the rounds ask the sites to keep nothing."""
    from fl_strategies.kernels.products import LocalOperator

    calls = []
    keeping = LocalOperator.product_keeping

    def counted(self, Z, basis, block):
        calls.append(block)
        return keeping(self, Z, basis, block)

    monkeypatch.setattr(LocalOperator, "product_keeping", counted)
    run_app(**sites(tmp_path), secure_aggregation="true")
    assert oracle["kept"] == 0 and not calls


def test_superseded_operators_drop_their_kept_blocks(tmp_path):
    """The kept blocks live on the process-wide operators (``client_app/data.py``'s ``_OPERATORS`` and
    ``LocalOperator.centered``'s cache): a fit's first block drops those of the fits before (here the outlier passes'),
    so after the run only the last fit's three sites hold blocks."""
    from test_outliers import run_outliers, sites_with_outliers
    import client_app.data as data

    data._OPERATORS.clear()
    people, _ = sites_with_outliers(tmp_path)
    run_outliers(tmp_path / "run", people, "outlier-sigma = 2.2\noutlier-iterations = 2\noutlier-pcs = 3\n"
                 "stop-tol = 1e-9", strategy="krylov", keeps=[None, np.setdiff1d(np.arange(40), [3, 17, 30]), None])
    holding = [key[1] for key, op in data._OPERATORS.items() for c in op._centered.values() if c._kept is not None]
    assert len(holding) <= 3, f"{len(holding)} operators hold kept blocks after the run: {holding}"


@pytest.mark.parametrize("block", [None, -1, "0", 1.5, True])
def test_a_round_without_a_block_index_is_refused_in_one_line(tmp_path, block):
    """A round that names a basis but no block index ``j >= 0`` (a misbehaving server): the node refuses it with one
    line naming the key, and keeps nothing."""
    pytest.importorskip("bed_reader")
    from flwr.common import Context, RecordDict
    from test_genotype_bed import simulated_sites, write_bed

    from client_app.data import NodeData
    from client_app.fedpower_client import FedPowerClient
    from fl_strategies.files.data_files import _read_bed
    from fl_strategies.files.pca import KRYLOV_BASIS, KRYLOV_BLOCK
    from fl_strategies.kernels.products import LocalOperator
    from fl_strategies.settings.config import validate_run_config
    from simulations.engines import fused_run_config

    write_bed(tmp_path / "site.bed", simulated_sites((30,), 40, missing=0.0, seed=1, populations=2)[0])
    data = NodeData.of(0)
    data._operator = LocalOperator.from_rows(_read_bed(tmp_path / "site.bed", "site"))
    cfg = validate_run_config(fused_run_config({"strategy": "krylov", "rank": 2, "iteration-rank": 3,
                                                "row-normalize": False}))
    client = FedPowerClient(data, cfg, Context(1, 1, {}, RecordDict(), {}))
    Z = np.linalg.qr(np.random.default_rng(0).standard_normal((40, 3)))[0]
    config = {"local-steps": 1, "round": 1, KRYLOV_BASIS: "b"}
    if block is not None:
        config[KRYLOV_BLOCK] = block
    with pytest.raises(ValueError, match=f"partition 0: the round's {KRYLOV_BLOCK} is"):
        client.fit([Z], config)
    assert data._operator._kept is None
    client.fit([Z], {**config, KRYLOV_BLOCK: 0})
    assert data._operator._kept[0] == "b"
