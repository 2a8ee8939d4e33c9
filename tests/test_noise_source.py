"""Noise only its client knows: node-secret noise on SuperNodes, seeded noise refused there, resume.

The nodes here are SuperNodes as the ClientApp sees them: the in-process engine with a ``data-path`` file in
every node config (what ``flower-supernode --node-config`` gives a real node), so that ``noise-source = "auto"``
means ``node-secret`` as in a deployment.
"""

from __future__ import annotations

import os
import stat

import numpy as np
import pytest

from conftest import run_app
from fl_strategies.settings.config import ConfigError

D, R = 10, 2
PRIVATE = {"strategy": "fedpower", "rank": R, "iteration-rank": R, "num-server-rounds": 3, "local-steps": 1,
           "schedule": "fixed", "epsilon": 1.0, "delta": 1e-4, "row-normalize": True}


def _blocks(sizes=(800, 600, 1000), seed=4) -> list[np.ndarray]:
    """Unit-norm rows with a planted rank-2 spike (row normalisation on the node leaves them unchanged)."""
    rng = np.random.default_rng(seed)
    U = np.linalg.qr(rng.standard_normal((D, R)))[0]
    blocks = []
    for s in sizes:
        X = rng.standard_normal((s, R)) * [5.0, 3.0] @ U.T + rng.standard_normal((s, D))
        blocks.append(X / np.linalg.norm(X, axis=1, keepdims=True))
    return blocks


def _nodes(tmp_path, blocks, secrets: bool = False, observer=None, **over):
    """Run the ServerApp and ClientApp in-process on SuperNode-like nodes: node i reads ``blocks[i]`` from its
    ``data-path``; with ``secrets`` it keeps its noise secret in ``tmp_path/secret<i>`` (node config
    ``noise-secret``). Returns the strategy."""
    from flwr.common import Context, RecordDict

    from client_app.app import app as client_app
    from server_app.app import run_server
    from simulations.engines import fused_run_config
    from simulations.engines.local import LocalGrid

    cfg = fused_run_config({"dataset": "nodes", "num-clients": len(blocks), **over})
    grid = LocalGrid(client_app, len(blocks), cfg)
    for i, (_, context) in enumerate(sorted(grid.contexts.items())):
        np.save(tmp_path / f"node{i}.npy", blocks[i])
        context.node_config["data-path"] = str(tmp_path / f"node{i}.npy")
        if secrets:
            context.node_config["noise-secret"] = str(tmp_path / f"secret{i}")
    return run_server(grid, Context(run_id=1, node_id=0, node_config={}, state=RecordDict(), run_config=cfg),
                      observer=observer)


def _replies(tmp_path, blocks, secrets=False, **over) -> tuple[object, list]:
    seen = []
    strategy = _nodes(tmp_path, blocks, secrets=secrets, observer=lambda rnd, pid, Z, arrays: seen.append(
        (rnd, pid, Z.copy(), arrays[0].copy())), **over)
    return strategy, seen


def _best_reconstruction(blocks, replies, cfg) -> list[tuple[float, float]]:
    """Play the server: for every reply ``Y = A_i Z + N`` it received, its best guess of ``A_i Z`` from what it
    knows (the run config, seed, partition id, round, ``Z`` and the noise level): the reply itself, the reply minus
    the seeded noise, and the reply shrunk by the James-Stein factor; and the error of the best of them,
    beside the noise-to-signal ratio ``||N|| / ||A_i Z||``. Returns ``(relative error, ratio)`` per reply."""
    from fl_strategies.privacy.noise import STREAM_NOISE
    from fl_strategies.privacy.fedpower_dp import noise_std

    T = cfg["num-server-rounds"]
    out = []
    for rnd, pid, Z, Y in replies:
        B = blocks[pid]
        target = B.T @ (B @ Z) / len(B)  # what it would like to know
        nu = noise_std(cfg["epsilon"], cfg["delta"], T, R, len(B))  # public: s_i was reported at discovery
        recipe = np.random.default_rng([0, STREAM_NOISE, pid, rnd]).standard_normal(Y.shape)  # the seeded noise
        shrink = max(0.0, 1.0 - nu**2 * Y.size / np.sum(Y * Y))  # James-Stein: public noise level, ||Y||
        candidates = [Y, Y - nu * recipe, shrink * Y]
        norm = np.linalg.norm(target)
        best = min(np.linalg.norm(c - target) / norm for c in candidates)
        out.append((best, np.linalg.norm(Y - target) / norm))
    return out


def test_the_server_cannot_rebuild_a_clients_product_from_node_secret_noise(tmp_path):
    """Default run config on SuperNodes (``noise-source = "auto"``, i.e. node-secret; here with secret files of fixed
    content for a deterministic test), epsilon = 1: the server's best
    reconstruction of every ``A_i Z`` errs by at least half the noise-to-signal ratio. With seeded noise (asked
    for explicitly) the same attack rebuilds it to round-off, so the test can fail."""
    blocks = _blocks()
    for i in range(len(blocks)):  # fixed secrets, so that the test is deterministic (as if drawn earlier)
        fd = os.open(tmp_path / f"secret{i}", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.write(fd, bytes(range(i, i + 32)))
        os.close(fd)
    strategy, replies = _replies(tmp_path, blocks, secrets=True, **PRIVATE)
    assert strategy.failure is None and {r["noise_source"] for r in strategy.records} == {"node-secret"}
    attack = _best_reconstruction(blocks, replies, PRIVATE)
    assert len(attack) == 3 * len(blocks)
    # The oracle candidate (Y scaled by <Y, A_i Z> / <Y, Y>) errs by rho / sqrt(1 + rho^2) for noise orthogonal to
    # A_i Z, at least rho / sqrt(2) > rho / 2 for rho <= 1 and below rho / 2 past rho = 1.7: the bound is checked
    # where it is meaningful (0.1 < rho < 1; the secret, so rho, differs from run to run).
    meaningful = [(best, ratio) for best, ratio in attack if 0.1 < ratio < 1.0]
    assert len(meaningful) >= 2, attack
    assert all(best >= 0.5 * ratio for best, ratio in meaningful), attack

    seeded = dict(PRIVATE, **{"noise-source": "seeded-not-private"})
    strategy, replies = _replies(tmp_path, blocks, **seeded)
    assert {r["noise_source"] for r in strategy.records} == {"seeded-not-private"}
    assert all(best < 1e-10 for best, _ in _best_reconstruction(blocks, replies, seeded))


def test_dp_power_on_supernodes_uses_node_secret_noise(tmp_path):
    blocks = _blocks(sizes=(40, 50, 60))
    over = {"strategy": "dp-power", "rank": R, "iteration-rank": R, "num-server-rounds": 2, "epsilon": 2.0,
            "dp-channel": "plaintext"}
    first = _nodes(tmp_path, blocks, **over)
    second = _nodes(tmp_path, blocks, **over)
    assert first.failure is None and {r["noise_source"] for r in first.records[1:]} == {"node-secret"}
    assert not np.allclose(first.estimate, second.estimate)  # a new secret in each run's node state


def test_seeded_noise_is_refused_on_supernodes_unless_its_name_says_it_is_not_private(tmp_path):
    with pytest.raises(ConfigError, match=r"noise-source = \"seeded\" is refused on a SuperNode"):
        _nodes(tmp_path, _blocks(), **dict(PRIVATE, **{"noise-source": "seeded"}))
    # without noise there is nothing to refuse
    assert _nodes(tmp_path, _blocks(), **dict(PRIVATE, epsilon=0.0, **{"noise-source": "seeded"})).failure is None


def test_simulations_keep_seeded_noise_and_say_so():
    strategy = run_app(num_clients=3, num_samples=600, dimension=D, rank=R, iteration_rank=R, num_server_rounds=2,
                       epsilon=1.0, row_normalize=True)
    assert {r["noise_source"] for r in strategy.records} == {"seeded"}
    assert run_app(num_clients=3, num_samples=600, dimension=D, rank=R, num_server_rounds=1).records[-1][
        "noise_source"] is None


def test_the_secret_file_is_private_drawn_once_and_repeats_the_same_answers(tmp_path):
    """A noise-secret file is created with mode 600 and 32 bytes of entropy; a second run on the same files and
    data repeats the same answers (nothing new is revealed); with the secret in the node state (no file) two
    runs with the same config and seed differ."""
    blocks = _blocks()
    first = _nodes(tmp_path, blocks, secrets=True, **PRIVATE)
    files = sorted(tmp_path.glob("secret*"))
    assert len(files) == 3 and all(stat.S_IMODE(f.stat().st_mode) == 0o600 for f in files)
    assert len({f.read_bytes() for f in files}) == 3 and all(len(f.read_bytes()) == 32 for f in files)
    again = _nodes(tmp_path, blocks, secrets=True, **PRIVATE)
    np.testing.assert_array_equal(first.estimate, again.estimate)
    a, b = _nodes(tmp_path, blocks, **PRIVATE), _nodes(tmp_path, blocks, **PRIVATE)
    assert not np.allclose(a.estimate, b.estimate) and not np.allclose(a.estimate, first.estimate)
    for f in files:  # (one such node alone would be left out of the run, with the reason)
        f.chmod(0o644)
    with pytest.raises(ConfigError, match="others may read it"):
        _nodes(tmp_path, blocks, secrets=True, **PRIVATE)


def test_kill_and_resume_a_private_run_redraws_the_same_noise(tmp_path, monkeypatch):
    """Killed after round 2's replies arrived but before its checkpoint: the resumed run repeats round 2 with the
    same noise (every reply it sees for a round also seen before the kill is the same bytes) and ends with the
    rows and estimate of an uninterrupted run on the same node secrets."""
    from test_resume import Killed, kill_server

    blocks = _blocks()
    over = dict(PRIVATE, **{"num-server-rounds": 4, "clients-per-round": 2})
    whole = _nodes(tmp_path, blocks, secrets=True, **over)
    out = tmp_path / "run"
    ck = {"checkpoint-dir": str(out), "results-dir": str(out)}
    before, after = [], []
    with monkeypatch.context() as patch:
        kill_server(patch, 2, before_save=True)
        with pytest.raises(Killed):
            _nodes(tmp_path, blocks, secrets=True, observer=lambda r, p, Z, a: before.append((r, p, a[0].copy())),
                   **over, **ck)
    resumed = _nodes(tmp_path, blocks, secrets=True, observer=lambda r, p, Z, a: after.append((r, p, a[0].copy())),
                     **over, **ck, resume=True)
    repeated = [(r, p) for r, p, _ in after if any((r, p) == (r2, p2) for r2, p2, _ in before)]
    assert {r for r, _ in repeated} == {2}
    for r, p in repeated:
        np.testing.assert_array_equal(next(a for r2, p2, a in before if (r2, p2) == (r, p)),
                                      next(a for r2, p2, a in after if (r2, p2) == (r, p)))
    np.testing.assert_array_equal(resumed.estimate, whole.estimate)
    strip = [{k: v for k, v in row.items() if k != "wall_time"} for row in whole.records]
    assert [{k: v for k, v in row.items() if k != "wall_time"} for row in resumed.records] == strip


def test_resume_is_refused_when_node_secrets_lived_in_the_old_runs_node_state(tmp_path, monkeypatch):
    from test_resume import Killed, kill_server

    out = tmp_path / "run"
    over = dict(PRIVATE, **{"checkpoint-dir": str(out), "results-dir": str(out)})
    with monkeypatch.context() as patch:
        kill_server(patch, 1, before_save=False)
        with pytest.raises(Killed):
            _nodes(tmp_path, _blocks(), **over)
    with pytest.raises(ConfigError, match="kept its noise secret in the node state"):
        _nodes(tmp_path, _blocks(), **over, resume=True)
