"""The block Krylov strategy end to end on the in-process engine, against scipy ``eigh`` and against ``power``."""

import numpy as np
import pytest

from conftest import distances, run_app
from fl_strategies.kernels.krylov import next_block, rayleigh_ritz
from fl_strategies.kernels.linalg import gaussian_basis, orth, subspace_distance
from fl_strategies.protocol.strategies.eigenspace import STREAM_INIT
from fl_strategies.settings.config import ConfigError
from simulations.data.federated_data import federated_dataset
from simulations.engines import fused_run_config

MODEL1 = dict(num_clients=10, num_samples=5000, dimension=60, rank=4, iteration_rank=5, row_normalize=True)
# geometric spectrum lambda_{i+1} / lambda_i = 1 / 1.02^2: small gaps, where the power method is slow
SMALL_GAP = dict(dataset="faps-geometric", row_normalize=False, dimension=200, num_samples=4000, xi=1.02,
                 partitioner="linear", num_clients=4, rank=5, iteration_rank=5)


def rounds_to(strategy, threshold: float) -> int | None:
    """The first round whose distance is at most ``threshold``, or ``None``."""
    hits = np.nonzero(distances(strategy) <= threshold)[0]
    return int(hits[0]) if len(hits) else None


def pooled(over):
    """The pooled ``(1/n) M^T M`` of a run config's data and the run's ``Z_0``."""
    cfg = fused_run_config({k.replace("_", "-"): v for k, v in over.items()})
    X = federated_dataset(cfg)[0].X
    Z0 = gaussian_basis(X.shape[1], cfg["iteration-rank"], np.random.default_rng([cfg["seed"], STREAM_INIT]))
    return X.T @ X / X.shape[0], Z0


def test_final_estimate_and_explained_variances_are_eighs():
    s = run_app(**MODEL1, strategy="krylov", num_server_rounds=12)
    assert distances(s)[-1] <= 1e-8
    n = sum(s.sizes.values())  # explained variances use the n - 1 denominator, as scikit-learn's
    np.testing.assert_allclose(s.model["explained_variance"] * (n - 1) / n, s.reference.values[: s.k], rtol=1e-9)
    assert subspace_distance(s.model["components"].T, s.reference.vectors[:, : s.k]) <= 1e-8


@pytest.mark.usefixtures("every_iterate")
def test_each_round_is_rayleigh_ritz_on_the_krylov_space():
    """Round j's estimate: the top-r Ritz vectors of C on span{Z_0, C Z_0, ..., C^{j-1} Z_0}, computed here."""
    over = dict(MODEL1, strategy="krylov", num_server_rounds=4)
    s = run_app(**over)
    C, Z0 = pooled(over)
    for j in range(1, 5):
        blocks = [Z0]
        for _ in range(j - 1):
            blocks.append(C @ blocks[-1])
        Q = orth(np.hstack(blocks))
        _, Z, _, _ = rayleigh_ritz(Q, C @ Q, s.r)
        assert subspace_distance(s.iterates[j], Z) <= 1e-7


def test_a_round_reads_the_basis_six_times_and_keeps_q_t_c_q(monkeypatch):
    """A round's server step passes over the ``d x m`` basis (or its products) at most six times: ``Q^T W`` (the
    new columns of ``Q^T C Q`` and Gram-Schmidt's first projection at once), Gram-Schmidt's three other products,
    the orthogonality check, the Ritz vectors; ``C Z`` (a seventh) only at a restart. The kept ``Q^T C Q`` is
    that of the basis and its products to round-off, and the estimates are ``eigh``'s."""
    import fl_strategies.kernels.krylov as krylov_module
    from fl_strategies.protocol.strategies.krylov import KrylovStrategy

    passes, rounds = [], []
    for name in ("basis_times", "basis_transpose_times"):
        def counted(Q, S, plain=getattr(krylov_module, name)):
            passes.append(Q.shape)
            return plain(Q, S)
        monkeypatch.setattr(krylov_module, name, counted)
    extend = KrylovStrategy.extend

    def counted_extend(self, *args):
        passes.clear(), (restarts := self.restarts)
        out = extend(self, *args)
        rounds.append((self.restarts > restarts, len(passes)))
        if self._projection is not None:  # the kept Q^T C Q against the basis's own
            H = self._projection
            np.testing.assert_allclose(H, self.Q.T @ self.CQ, rtol=0, atol=1e-12 * np.abs(H).max())
        return out

    monkeypatch.setattr(KrylovStrategy, "extend", counted_extend)
    s = run_app(**SMALL_GAP, strategy="krylov", num_server_rounds=40, krylov_blocks=4)
    assert [count for restart, count in rounds if not restart] and all(count <= 6 for restart, count in rounds
                                                                       if not restart), rounds
    assert any(restart for restart, _ in rounds) and all(count <= 7 for _, count in rounds), rounds
    assert distances(s)[-1] <= 1e-8


def test_the_basis_is_never_copied_to_grow_and_restarts_reuse_its_buffers(monkeypatch):
    """The buffers of ``Q`` and ``C Q`` are allocated once (the basis's capacity, reserved) and a restart's Ritz
    vectors are copied into them: one pair of buffers for the whole run; with a smaller reservation they grow, and
    the run is the same."""
    from fl_strategies.protocol.strategies.krylov import KrylovStrategy

    buffers = []
    append = KrylovStrategy._append

    def recorded(self, Z, W):
        out = append(self, Z, W)
        buffers.append(self._buffers)
        assert all(np.shares_memory(view, buffer) for view, buffer in zip(out, self._buffers))
        return out

    monkeypatch.setattr(KrylovStrategy, "_append", recorded)
    s = run_app(**SMALL_GAP, strategy="krylov", num_server_rounds=40, krylov_blocks=4)
    assert s.restarts >= 10 and len(buffers) == 40
    assert all(pair[0] is buffers[0][0] and pair[1] is buffers[0][1] for pair in buffers)
    assert buffers[0][0].shape == (s.d, 4 * s.r)
    assert distances(s)[-1] <= 1e-8
    C, _ = pooled(dict(SMALL_GAP, strategy="krylov"))  # C Z of the last estimate from the basis, until a restart
    np.testing.assert_allclose(s.known_product(s.estimate), C @ s.estimate, rtol=0, atol=1e-12 * np.abs(C).max())
    s.restarts += 1
    assert s.known_product(s.estimate) is None
    # a reservation of one block: the buffers grow by doubling (copied), and the run is the same
    import fl_strategies.protocol.strategies.krylov as krylov_strategy

    monkeypatch.setattr(krylov_strategy, "RESERVED_BYTES", 8 * s.d * s.r)
    buffers.clear()
    grown = run_app(**SMALL_GAP, strategy="krylov", num_server_rounds=40, krylov_blocks=4)
    assert len({id(pair[0]) for pair in buffers}) >= 2
    np.testing.assert_array_equal(grown.estimate, s.estimate)


def test_next_block_is_orthogonal_and_replaces_exhausted_directions():
    rng = np.random.default_rng(0)
    Q = orth(rng.standard_normal((30, 6)))
    W = np.hstack([Q[:, :2] @ rng.standard_normal((2, 2)), rng.standard_normal((30, 1))])  # 2 columns in span(Q)
    B = next_block(Q, W, rng)
    np.testing.assert_allclose(B.T @ B, np.eye(3), atol=1e-12)
    assert np.abs(Q.T @ B).max() <= 1e-12
    new = W[:, 2:] - Q @ (Q.T @ W[:, 2:])
    assert subspace_distance(B, new / np.linalg.norm(new)) <= 1e-8  # the one new direction is kept
    # Q^T W given (the new columns of Q^T C Q): the same block, to round-off
    W = rng.standard_normal((30, 3))
    np.testing.assert_allclose(next_block(Q, W, rng, Q.T @ W), next_block(Q, W, rng), rtol=0, atol=1e-13)


def test_fewer_than_a_third_of_powers_rounds_on_a_small_gap():
    krylov = run_app(**SMALL_GAP, strategy="krylov", num_server_rounds=40)
    power = run_app(**SMALL_GAP, strategy="power", num_server_rounds=500)
    k, p = rounds_to(krylov, 1e-6), rounds_to(power, 1e-6)
    assert k is not None and p is not None
    assert 3 * k <= p, (k, p)
    assert distances(krylov)[-1] <= 1e-8


def test_restarts_keep_the_memory_bound_and_converge():
    s = run_app(**SMALL_GAP, strategy="krylov", num_server_rounds=60, krylov_blocks=4)
    assert s.Q.shape[1] <= 4 * s.r
    assert s.restarts >= 10
    assert distances(s)[-1] <= 1e-8
    assert [r["krylov_restarts"] for r in s.records][-1] == s.restarts


def test_a_missing_reply_repeats_the_block():
    seen = {"n": 0}

    def drop_partition_1_once(msg, pid):
        if msg.metadata.message_type == "train" and pid == 1:
            seen["n"] += 1
            return "error" if seen["n"] == 3 else "ok"
        return "ok"

    clean = run_app(**MODEL1, strategy="krylov", num_server_rounds=8)
    faulty = run_app(fault_fn=drop_partition_1_once, **MODEL1, strategy="krylov", num_server_rounds=9)
    assert [r["failures"] for r in faulty.records[1:]] == [0, 0, 1] + [0] * 6
    np.testing.assert_array_equal(faulty.records[3]["subspace_distance"], faulty.records[2]["subspace_distance"])
    # the round without the product is a pause: the later rounds are the clean run's, one round late
    np.testing.assert_allclose(distances(faulty)[4:], distances(clean)[3:], rtol=1e-6, atol=1e-14)


@pytest.mark.parametrize("override, key", [
    (dict(clients_per_round=3), "clients-per-round"),
    (dict(dropout=0.1), "dropout"),
    (dict(round_policy="first-k", first_k=5), "round-policy"),
    (dict(epsilon=1.0), "epsilon"),
    (dict(krylov_blocks=1), "krylov-blocks"),
])
def test_unsupported_settings_are_refused_in_one_line(override, key):
    with pytest.raises(ConfigError) as info:
        run_app(**MODEL1, strategy="krylov", num_server_rounds=3, **override)
    message = str(info.value)
    assert key in message and "\n" not in message


def test_kill_and_resume_gives_the_uninterrupted_run(tmp_path, monkeypatch):
    """The checkpoint holds the basis, its products and the next block: a resumed run is the same run."""
    import pandas as pd

    from test_resume import Killed, kill_server

    over = dict(MODEL1, num_clients=3, strategy="krylov", num_server_rounds=8, krylov_blocks=4, stop_tol=1e-15)
    whole = run_app(results_dir=str(tmp_path / "whole"), **over)
    out = tmp_path / "run"
    with monkeypatch.context() as patch:
        kill_server(patch, 5, False)  # after restarts (q = 4): the basis in the checkpoint is a restarted one
        with pytest.raises(Killed):
            run_app(results_dir=str(out), checkpoint_dir=str(out), **over)
    resumed = run_app(results_dir=str(out), checkpoint_dir=str(out), resume=True, **over)
    assert whole.restarts >= 2 and resumed.restarts == whole.restarts
    np.testing.assert_array_equal(resumed.estimate, whole.estimate)
    table = [pd.read_csv(d / "rounds.csv").drop(columns="wall_time") for d in (out, tmp_path / "whole")]
    pd.testing.assert_frame_equal(*table)
    rounds = len(table[0]) - 1  # F of the kept components settles to round-off by round 7 here: it may stop
    assert rounds >= 6 and table[0]["objective"].notna().sum() == rounds
    assert table[0]["stop_statistic"].notna().sum() == rounds - 1


def test_the_stopping_rule_uses_the_ritz_values():
    s = run_app(**MODEL1, strategy="krylov", num_server_rounds=40, stop_tol=1e-12)
    assert s.stopped and 5 < len(s.records) < 30
    assert distances(s)[-1] <= 1e-6
    last = s.records[-1]
    n = sum(s.sizes.values())
    assert last["objective"] == pytest.approx(n * s.reference.values[: s.k].sum(), rel=1e-9)  # the kept k of r


def test_the_stopping_rule_sums_only_the_kept_ritz_values(tmp_path):
    """``F`` is ``n`` times the sum of the leading ``rank`` Ritz values, not of all ``iteration-rank``: at the end
    it is ``n`` times the sum of the top-``k`` eigenvalues of the pooled covariance, and the rule stops no later
    than one over all ``r`` (the bulk's Ritz values settle last)."""
    import pandas as pd

    over = dict(SMALL_GAP, strategy="krylov", rank=2, iteration_rank=6, num_server_rounds=40, stop_tol=1e-9)
    s = run_app(results_dir=str(tmp_path), **over)
    assert s.stopped
    n = sum(s.sizes.values())
    last = pd.read_csv(tmp_path / "rounds.csv")["objective"].dropna().iloc[-1]
    np.testing.assert_allclose(last, n * np.sum(s.reference.values[:2]), rtol=1e-8)
    assert abs(last - n * np.sum(s.reference.values[:6])) > 1e-3 * last  # the rule over all r would differ
    kept_rounds = len(s.records)
    wide = run_app(**dict(over, rank=6))  # the same iteration with every column kept: F over all r
    assert wide.stopped and kept_rounds <= len(wide.records)


def test_the_latency_model_gives_round_times_and_changes_nothing_else():
    timed = run_app(**MODEL1, strategy="krylov", num_server_rounds=5, latency_model="shifted-exp")
    plain = run_app(**MODEL1, strategy="krylov", num_server_rounds=5)
    assert all(r["round_time"] > 1.0 for r in timed.records[1:])  # latency-shift 1 per work unit, plus the tail
    np.testing.assert_array_equal(distances(timed), distances(plain))


def _counting_orth(monkeypatch):
    """Count the QR factorisations ``next_block`` makes."""
    import fl_strategies.kernels.krylov as krylov_module

    calls = []

    def counted(Y):
        calls.append(Y.shape)
        return orth(Y)

    monkeypatch.setattr(krylov_module, "orth", counted)
    return calls


def test_next_block_skips_the_last_pass_only_when_the_block_is_orthogonal_already(monkeypatch):
    rng = np.random.default_rng(3)
    d = 2000
    Q = orth(rng.standard_normal((d, 40)))
    calls = _counting_orth(monkeypatch)
    W = rng.standard_normal((d, 4)) + 50 * Q[:, :4]  # a well-conditioned residual: one QR is enough
    B = next_block(Q, W, rng)
    assert len(calls) == 1
    assert np.abs(Q.T @ B).max() <= 1e-13
    np.testing.assert_allclose(B.T @ B, np.eye(4), atol=1e-13)
    # residuals nearly dependent (the second column the first plus 1e-11 of a new direction): the QR of such a
    # block amplifies its round-off along Q by its condition number, and a further pass restores orthogonality
    calls.clear()
    fresh = rng.standard_normal((d, 2))
    fresh -= Q @ (Q.T @ fresh)
    W = 10 * Q @ rng.standard_normal((40, 2)) + np.column_stack([fresh[:, 0], fresh[:, 0] + 1e-11 * fresh[:, 1]])
    B = next_block(Q, W, rng)
    assert len(calls) >= 2
    assert np.abs(Q.T @ B).max() <= 1e-12
    np.testing.assert_allclose(B.T @ B, np.eye(2), atol=1e-12)


def bed_sites(tmp_path) -> dict:
    """Four ``.bed`` sites with 1 % missing calls in ``tmp_path`` and a stopping krylov run over them (``scale =
    "hwe"``: plink2's diagonal at the summary; no reference, so every row has the estimate's change)."""
    pytest.importorskip("bed_reader")
    from test_genotype_bed import simulated_sites, write_bed

    for i, G in enumerate(simulated_sites((60, 50, 70, 40), 1500, missing=0.01, seed=8, populations=4)):
        write_bed(tmp_path / f"partition_{i}.bed", G)
    return dict(dataset=str(tmp_path), num_clients=4, strategy="krylov", rank=3, iteration_rank=5, center=True,
                scale="hwe", row_normalize=False, num_server_rounds=40, stop_tol=1e-7)


def test_the_estimates_change_takes_the_ritz_vectors_as_orthonormal(tmp_path, monkeypatch):
    """Every round's change of the estimate (all columns) without a QR of the Ritz vectors: the value the QR would
    give, to round-off (the kept components' changes come from ``leading_column_changes``, ``k`` columns)."""
    import fl_strategies.protocol.strategies.eigenspace as eigenspace_module

    seen = []

    def recorded(Z, U, orthonormal=False):
        value = subspace_distance(Z, U, orthonormal)
        seen.append((orthonormal, value, subspace_distance(Z, U)))
        return value

    monkeypatch.setattr(eigenspace_module, "subspace_distance", recorded)
    s = run_app(**bed_sites(tmp_path))
    assert len(seen) == len(s.records) - 1  # rounds 1.. (round 0 has no previous estimate)
    assert all(flag for flag, _, _ in seen)
    np.testing.assert_allclose([v for _, v, _ in seen], [v for _, _, v in seen], rtol=0, atol=1e-13)


def test_the_summary_takes_c_z_from_the_basis_and_x_z_from_the_sites_kept_blocks(tmp_path, monkeypatch):
    """The summary of a run that stopped (its model is the round before the last's estimate) over ``.bed`` sites
    with missing calls and ``scale = "hwe"`` (plink2's diagonal): ``C Z`` is ``C Q V`` from the basis, and each
    site's ``X Z`` is ``[X Q_0 ... X Q_{q-1}] V`` from the blocks it kept in the rounds (its row squares read with
    the first): no pass over the files at all. A site without its blocks reads its file once (the left pass), and
    without ``C Z`` twice; the three give the same model to round-off."""
    from fl_strategies.kernels.products import LocalOperator
    from fl_strategies.kernels.rows import BedVariants
    from fl_strategies.protocol.strategies.krylov import KrylovStrategy

    over = bed_sites(tmp_path)
    asked, summary = [], BedVariants.summary

    def recorded(self, Z, mean, scale, diagonal, product=True, left=None):
        asked.append((diagonal, product, left is not None))
        return summary(self, Z, mean, scale, diagonal, product, left)

    monkeypatch.setattr(BedVariants, "summary", recorded)
    fast = run_app(**over)
    assert fast.stopped and asked == [(True, False, True)] * 4
    runs = {"kept": fast}
    asked.clear()
    with monkeypatch.context() as patch:
        patch.setattr(LocalOperator, "kept_left", lambda self, basis, V: None)  # a node that kept nothing
        runs["left pass"] = run_app(**over)
    assert asked == [(True, False, False)] * 4
    asked.clear()
    monkeypatch.setattr(KrylovStrategy, "known_product", lambda self, Z: None)
    slow = run_app(**over)
    assert asked == [(True, True, False)] * 4
    for run in runs.values():
        assert len(slow.records) == len(run.records)
        for key in ("explained_variance", "explained_variance_ratio", "singular_values", "components"):
            np.testing.assert_allclose(run.model[key], slow.model[key], rtol=1e-12,
                                       atol=1e-12 * np.abs(slow.model[key]).max())
        assert run.model["summary_bytes"] <= slow.model["summary_bytes"] - 4 * 1500 * 5 * 8  # no A_i Z uploaded


def test_a_site_keeps_its_blocks_left_products_without_changing_its_products(tmp_path):
    """``LocalOperator.product_keeping`` gives ``A_i Q_j`` bit for bit (with row weights too) and keeps ``X Q_j``;
    ``kept_left`` gives ``X Z`` and the row squares for ``Z = [Q_0 Q_1] V`` as one read would, to round-off, and
    nothing for another basis, a missing block or coordinates of another width."""
    pytest.importorskip("bed_reader")
    from test_genotype_bed import simulated_sites, write_bed

    from fl_strategies.files.data_files import _read_bed
    from fl_strategies.kernels.products import LocalOperator

    write_bed(tmp_path / "site.bed", simulated_sites((90,), 300, missing=0.02, seed=3, populations=2)[0])
    X = _read_bed(tmp_path / "site.bed", "site")
    rng = np.random.default_rng(0)
    mean, scale = 2 * rng.uniform(0.1, 0.9, X.dimension), rng.uniform(0.5, 1.5, X.dimension)
    Q0, Q1 = np.linalg.qr(rng.standard_normal((X.dimension, 8)))[0].reshape(X.dimension, 2, 4).transpose(1, 0, 2)
    Q0, Q1 = np.ascontiguousarray(Q0), np.ascontiguousarray(Q1)
    for weights in (None, rng.uniform(0.5, 2.0, X.num_rows)):
        X.row_weights = weights
        op = LocalOperator.from_rows(X).centered(mean, scale, weight=0.75)
        assert op.keeps_lefts
        for j, Q in enumerate((Q0, Q1)):
            np.testing.assert_array_equal(op.product_keeping(Q, "basis", j), op @ Q)
        V = rng.standard_normal((8, 4))
        XZ, squares = op.kept_left("basis", V)
        Z = np.hstack([Q0, Q1]) @ V
        np.testing.assert_allclose(XZ, X.left(Z, mean, scale), rtol=0, atol=1e-12 * np.abs(XZ).max())
        np.testing.assert_allclose(squares, X.row_squares(mean, scale), rtol=1e-13)
        assert op.kept_left("other", V) is None and op.kept_left("basis", np.vstack([V, V])) is None
        assert op.kept_left("basis", V[:6]) is None
        op.product_keeping(Q0, "next", 0)  # a new basis drops the old one's blocks
        assert op.kept_left("basis", V) is None and op.kept_left("next", V) is None
