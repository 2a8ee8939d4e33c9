"""Every guard that refuses something, just inside and just outside its limit.

Resume (another seed, config, data or row count), and a reply's size, norm, orthonormality, origin and row count.
The limits are written out here from their documented formulas, so a guard that drifts (a looser bound, a larger
tolerance, a key exempted from the comparison) fails a test.
"""

from __future__ import annotations

import logging
import json
import math

import numpy as np
import pytest
from flwr.common import Code, FitRes, Parameters, Status, ndarrays_to_parameters

from conftest import run_aborted, run_app
from fl_strategies.protocol import checkpoint as ck
from fl_strategies.settings.config import ConfigError, validate_run_config
from fl_strategies.kernels.linalg import orth
from fl_strategies.protocol.replies import check_array, check_orthonormal, check_origin, check_properties, decode_arrays
from simulations.engines import fused_run_config

TINY = dict(num_clients=3, num_samples=600, dimension=10, rank=2, iteration_rank=3, num_server_rounds=3)


def cfg_of(**over):
    return validate_run_config(fused_run_config({k.replace("_", "-"): v for k, v in over.items()}))


def fitres(arrays=None, num_examples=10, metrics=None, tensors=None):
    params = (ndarrays_to_parameters(arrays) if tensors is None
              else Parameters(tensors=tensors, tensor_type="numpy.ndarray"))
    return FitRes(Status(Code.OK, ""), params, num_examples, metrics or {})


# -- resume ---------------------------------------------------------------------------------------------------------

class _State:
    def state_dict(self):  # the state after round 1: rows and estimates (orthonormal bases) of rounds 0 and 1
        return {"records": [{"round": 0}, {"round": 1}], "iterates": [np.eye(10, 3), np.eye(10, 3)],
                "held": None, "last_objective": None, "sizes": [[0, 5]]}


def _saved_checkpoint(tmp_path, **over):
    cfg = cfg_of(checkpoint_dir=str(tmp_path), **over)
    ck.Checkpoint(tmp_path, cfg).save(1, [np.eye(10, 3)], _State())
    return cfg


@pytest.mark.parametrize("key, value", [("seed", 1), ("data-seed", 8), ("num-samples", 601), ("epsilon", 2.0),
                                        ("noise-source", "os"), ("dataset", "fedpower-model2")])
def test_resume_refuses_a_checkpoint_of_another_run_config(tmp_path, key, value):
    cfg = _saved_checkpoint(tmp_path, **TINY, seed=0, data_seed=7)
    assert cfg[key] != value
    with pytest.raises(ConfigError, match=f"another run config \\({key} = "):
        ck.Checkpoint(tmp_path, dict(cfg, resume=True, **{key: value}))


def test_resume_accepts_the_same_config_and_the_exempt_keys(tmp_path):
    cfg = _saved_checkpoint(tmp_path, **TINY, seed=0)
    assert ck.Checkpoint(tmp_path, dict(cfg, resume=True)).resumed["round"] == 1
    assert ck.Checkpoint(tmp_path, dict(cfg, resume=True, **{"round-timeout": 5.0})).resumed["round"] == 1


class Killed(BaseException):
    """The ServerApp process killed (nothing may catch it)."""


def _kill_after_round_1(monkeypatch, **over):
    save = ck.Checkpoint.save

    def dying_save(self, server_round, parameters, strategy):
        save(self, server_round, parameters, strategy)
        raise Killed()

    with monkeypatch.context() as patch:
        patch.setattr(ck.Checkpoint, "save", dying_save)
        with pytest.raises(Killed):
            run_app(**over)


def test_resume_with_another_seed_end_to_end(tmp_path, monkeypatch):
    over = dict(TINY, checkpoint_dir=str(tmp_path), epsilon=5.0, row_normalize=True)
    _kill_after_round_1(monkeypatch, seed=3, **over)
    with pytest.raises(ConfigError, match="seed = 3 there, 4 here"):
        run_app(resume=True, seed=4, **over)
    assert [r["round"] for r in run_app(resume=True, seed=3, **over).records] == [0, 1, 2, 3]


def _edit_saved_sizes(directory, sizes):
    """Rewrite the row counts a checkpoint remembers (as if the data had changed since it was written)."""
    path = directory / ck.CHECKPOINT_FILE
    with np.load(path, allow_pickle=False) as npz:
        arrays = {k: npz[k] for k in npz.files}
    doc = json.loads(str(arrays["state"]))
    doc["strategy"]["sizes"] = [[pid, n] for pid, n in enumerate(sizes)]
    text = json.dumps(doc)
    arrays["state"] = np.array(text)  # a valid checkpoint of that (other) data: its checksum recomputed
    arrays["checksum"] = np.array(ck._checksum(text, [arrays[f"a{i}"] for i in range(len(arrays) - 2)]))
    np.savez(path, **arrays)


@pytest.mark.parametrize("saved, message", [
    ([200, 200, 200], None),  # the counts it had: the run goes on
    ([200, 200, 201], "partition 2 had 201 rows, now 200"),
    ([199, 200, 200], "partition 0 had 199 rows, now 200"),
])
def test_resume_refuses_data_whose_row_counts_changed(tmp_path, monkeypatch, saved, message):
    over = dict(TINY, partitioner="iid", checkpoint_dir=str(tmp_path))
    _kill_after_round_1(monkeypatch, **over)
    _edit_saved_sizes(tmp_path, saved)
    if message is None:
        assert [r["round"] for r in run_app(resume=True, **over).records] == [0, 1, 2, 3]
    else:
        with pytest.raises(ConfigError, match=f"resume: the data changed since the checkpoint: {message}"):
            run_app(resume=True, **over)


# -- FedPower's reply norm bound ------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def noisy_fedpower():
    """A finished FedPower run with explicit noise (d = 10, r = 3) whose reply intake we probe."""
    return run_app(**dict(TINY, noise_std=0.02, row_normalize=True, local_steps=2))


@pytest.fixture(scope="module")
def eps_fedpower():
    return run_app(**dict(TINY, epsilon=3.0, delta=1e-5, row_normalize=True, local_steps=2, partitioner="linear"))


def test_fedpower_norm_bound_by_hand(noisy_fedpower, eps_fedpower):
    d, r = 10, 3
    for pid in range(3):
        assert noisy_fedpower.reply_norm_bound(pid) == pytest.approx(math.sqrt(r) + 1e-6 + 8 * 0.02 * math.sqrt(d * r),
                                                                      rel=1e-12)
        s_i, T = eps_fedpower.sizes[pid], 4  # the decayed schedule from p = 2 over 3 rounds: 2, 1, 1
        sigma_g = max(math.sqrt(T / 3.0), 2 * math.sqrt(2 * T * math.log(1e5)) / 3.0)
        nu = 2 * math.sqrt(r) * sigma_g / s_i
        assert eps_fedpower.reply_norm_bound(pid) == pytest.approx(math.sqrt(r) + 1e-6 + 8 * nu * math.sqrt(d * r),
                                                                    rel=1e-12)
    assert len(set(eps_fedpower.sizes.values())) == 3  # unequal: the bound depends on the partition


def _decode(s, res, Z, pid=0):
    """FedPower's reply intake on one reply of partition ``pid`` (two local steps): ``[Y, Z_prev]`` or the reason."""
    seen = []
    handler = logging.Handler()
    handler.emit = lambda record: seen.append(record.getMessage())
    logger = logging.getLogger("flwr.fedspectral")
    logger.addHandler(handler)
    try:
        valid, rejected = s.intake(1, [(s.proxies[pid], res)], {pid}, 2, Z)
    finally:
        logger.removeHandler(handler)
    return seen[-1].split("rejected: ", 1)[1] if rejected else valid[pid][0]


def _reply(strategy, Y, Z_prev=None, pid=0):
    arrays = [Y] if Z_prev is None else [Y, Z_prev]
    return fitres(arrays, strategy.sizes[pid], {"partition-id": pid})


@pytest.mark.parametrize("factor, ok", [(1 - 1e-6, True), (1 + 1e-6, False), (10.0, False)])
def test_fedpower_reply_just_inside_and_outside_the_norm_bound(noisy_fedpower, factor, ok):
    s = noisy_fedpower
    bound = math.sqrt(3) + 1e-6 + 8 * 0.02 * math.sqrt(30)
    Y = np.random.default_rng(1).standard_normal((10, 3))
    Y *= factor * bound / np.linalg.norm(Y)
    Z = orth(np.random.default_rng(2).standard_normal((10, 3)))
    out = _decode(s, _reply(s, Y, Z), Z)
    if ok:
        assert not isinstance(out, str) and np.array_equal(out[0], Y)
    else:
        assert isinstance(out, str) and "above the bound" in out


@pytest.mark.parametrize("factor, ok", [(1 + 4e-7, True), (1 - 4e-7, True), (1 + 6e-7, False), (1.04, False)])
def test_fedpower_z_prev_just_inside_and_outside_orthonormality(noisy_fedpower, factor, ok):
    s = noisy_fedpower
    Z = orth(np.random.default_rng(2).standard_normal((10, 3)))
    Y = 0.5 * Z
    out = _decode(s, _reply(s, Y, factor * Z), Z)  # max |Z^T Z - I| = factor^2 - 1
    assert (not isinstance(out, str)) == ok
    if not ok:
        assert "not orthonormal" in out
    # the same limit in the shared check: 1e-6, entrywise on the Gram matrix
    assert (check_orthonormal(factor * Z) is None) == ok


def test_check_orthonormal_off_diagonal_limit():
    Z = orth(np.random.default_rng(5).standard_normal((8, 2)))
    q = Z[:, 1] - (Z[:, 0] @ Z[:, 1]) * Z[:, 0]
    for tilt, ok in [(9e-7, True), (1.1e-6, False)]:  # column 1 leans towards column 0: Gram off-diagonal = tilt
        W = Z.copy()
        W[:, 1] = math.sqrt(1 - tilt ** 2) * q / np.linalg.norm(q) + tilt * Z[:, 0]
        assert (check_orthonormal(W) is None) == ok


# -- shared reply checks: norm, size, origin, row count, discovery ---------------------------------------------------

def test_check_array_norm_bound_is_exact():
    a = np.full((4, 4), 0.5)  # Frobenius norm 2
    assert check_array(a, (4, 4), max_norm=2.0) is None
    assert check_array(a, (4, 4), max_norm=2.0 * (1 - 1e-12)) is not None
    assert check_array(a * (1 + 1e-12), (4, 4), max_norm=2.0) is not None


def test_decode_arrays_size_limit_is_exact():
    blob = ndarrays_to_parameters([np.zeros((6, 3))]).tensors[0]
    assert isinstance(decode_arrays(fitres(tensors=[blob]), 1, max_bytes=len(blob)), list)
    out = decode_arrays(fitres(tensors=[blob]), 1, max_bytes=len(blob) - 1)
    assert isinstance(out, str) and f"is {len(blob)} bytes, more than the {len(blob) - 1} expected" in out


def test_fedpower_reply_size_limit(noisy_fedpower):
    """``16 d r + 4096`` bytes per array: a float128 reply passes, one 4 kB larger does not."""
    s = noisy_fedpower
    Z = orth(np.random.default_rng(2).standard_normal((10, 3)))
    big = np.zeros(((16 * 30 + 4096) // 8, 1))  # its np.save is just above the limit (header + 8 bytes an entry)
    blob = ndarrays_to_parameters([big]).tensors[0]
    assert len(blob) > 16 * 30 + 4096 >= len(blob) - 128
    zblob = ndarrays_to_parameters([Z]).tensors[0]
    out = _decode(s, fitres(tensors=[blob, zblob], num_examples=s.sizes[0], metrics={"partition-id": 0}), Z)
    assert isinstance(out, str) and "bytes, more than the 4576 expected" in out
    ok = _decode(s, _reply(s, (0.1 * Z).astype(np.longdouble), Z), Z)
    assert not isinstance(ok, str)


def test_check_origin_row_count_and_partition_claim():
    asked = {0, 1}
    assert check_origin(1, asked, fitres([np.zeros(1)], 40, {"partition-id": 1}), expected_examples=40) is None
    for n in (39, 41):
        reason = check_origin(1, asked, fitres([np.zeros(1)], n), expected_examples=40)
        assert reason is not None and f"reports {n} rows, the node registered with 40" in reason
    assert "claims partition-id 0" in check_origin(1, asked, fitres([np.zeros(1)], 40, {"partition-id": 0}),
                                                   expected_examples=40)
    assert "was not asked" in check_origin(2, asked, fitres([np.zeros(1)], 40), expected_examples=40)
    assert "not a registered client" in check_origin(None, asked, node_id=7)


def test_check_properties_limits():
    good = {"partition-id": 2, "dimension": 10, "num-examples": 1}
    assert check_properties(good, 3, 10) == (2, 1)
    assert "outside 0..2" in check_properties(dict(good, **{"partition-id": 3}), 3, 10)
    assert "outside 0..2" in check_properties(dict(good, **{"partition-id": -1}), 3, 10)
    assert "reports 0 rows" in check_properties(dict(good, **{"num-examples": 0}), 3, 10)
    assert "dimension 11" in check_properties(dict(good, dimension=11), 3, 10)


def test_a_reply_with_another_row_count_is_rejected_end_to_end():
    """A node whose reply claims one row more than it registered with: every one of its replies is rejected."""
    from client_app.fedpower_client import FedPowerClient
    fit = FedPowerClient.fit

    def lying_fit(self, parameters, config):
        arrays, n, metrics = fit(self, parameters, config)
        return arrays, n + (1 if self.partition_id == 1 else 0), metrics

    mp = pytest.MonkeyPatch()
    mp.setattr(FedPowerClient, "fit", lying_fit)
    try:
        s = run_aborted(r"^summary: partition\(s\) 1 did not answer", expect_clean=False, **TINY)  # needs every
    finally:                                                                                       # client
        mp.undo()
    assert [r["rejected"] for r in s.records] == [0, 1, 1, 1]
    assert [r["failures"] for r in s.records] == [0, 0, 0, 0]


# -- privacy guards: the zCDP target the paper's calibration can meet, and a client's step budget ------------------

@pytest.mark.parametrize("delta", [1e-5, 1e-8])
def test_paper_calibration_refuses_epsilon_just_above_its_limit(delta):
    """``eps' = eps^2 / (8 ln(1/delta)) + eps / sqrt 2 <= eps`` holds iff ``eps <= 8 (1 - 1/sqrt 2) ln(1/delta)``."""
    from fl_strategies.privacy.zcdp import calibrate
    limit = 8 * (1 - 1 / math.sqrt(2)) * math.log(1 / delta)
    assert calibrate(limit * (1 - 1e-9), delta, 5, "paper").epsilon <= limit
    with pytest.raises(ValueError, match="cannot be met with the paper calibration"):
        calibrate(limit * (1 + 1e-6), delta, 5, "paper")
    assert calibrate(limit * 1.5, delta, 5, "tight").epsilon == pytest.approx(limit * 1.5, rel=1e-9)


@pytest.mark.parametrize("extra, failing_round", [(0, None), (1, 3)])
def test_fedpower_client_refuses_a_step_beyond_its_budget(monkeypatch, extra, failing_round):
    """T = 4 noisy steps (2, 1, 1): a server that claims one more step was done makes the last round exceed T."""
    from fl_strategies.protocol.strategies.fedpower import FedPowerStrategy
    configure = FedPowerStrategy.configure_fit

    def configure_fit(self, server_round, parameters, client_manager):
        out = configure(self, server_round, parameters, client_manager)
        for config in {id(ins.config): ins.config for _, ins in out}.values():  # the clients may share one
            config["iteration-offset"] = int(config["iteration-offset"]) + extra
        return out

    monkeypatch.setattr(FedPowerStrategy, "configure_fit", configure_fit)
    s = run_app(expect_clean=False, **dict(TINY, epsilon=3.0, row_normalize=True, local_steps=2, schedule="decayed"))
    assert [r["local_iterations"] for r in s.records] == [0, 2, 3, 4]
    expected = [0, 0, 0, 0] if failing_round is None else [0, 0, 0, 3]
    assert [r["failures"] for r in s.records] == expected
