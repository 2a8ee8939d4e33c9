"""The direct fit records (fl_strategies.protocol.fit_records) and the batched round
(fl_strategies.protocol.round_exchange).

Both replace Flower's legacy glue on the hot path of every training message; they must produce and read exactly
the layout of ``flwr.compat.common.recorddict_compat``, so these tests compare them with Flower's own converters
(a Flower upgrade that changes the layout fails here, not silently in a run).
"""

from __future__ import annotations

import io
import pickle

import numpy as np
import pytest
from flwr.app import ArrayRecord, ConfigRecord, Message, RecordDict
from flwr.client import ClientApp, NumPyClient
from flwr.common import Code, FitIns, FitRes, Status, ndarrays_to_parameters, parameters_to_ndarrays
from flwr.compat.common import recorddict_compat as compat
from flwr.server.client_proxy import ClientProxy
from flwr.server.compat.grid_client_proxy import GridClientProxy

from fl_strategies.protocol.fit_records import (fit_reply_content, fitins_content, fitres_from_content,
                                                is_fitins_content, load_npy)
from fl_strategies.protocol.round_exchange import MissingReply, fit_in_one_batch
from simulations.engines.local import LocalGrid

RNG = np.random.default_rng(7)


def npy(a) -> bytes:
    buf = io.BytesIO()
    np.save(buf, a, allow_pickle=False)
    return buf.getvalue()


def assert_same_content(ours: RecordDict, flowers: RecordDict) -> None:
    assert list(ours.keys()) == list(flowers.keys())
    for key, record in flowers.items():
        mine = ours[key]
        assert type(mine) is type(record), key
        if isinstance(record, ArrayRecord):
            assert list(mine.keys()) == list(record.keys())
            for k, a in record.items():
                b = mine[k]
                assert (b.data, b.dtype, b.stype, tuple(b.shape)) == (a.data, a.dtype, a.stype, tuple(a.shape))
        else:
            assert dict(mine) == dict(record), key


@pytest.mark.parametrize("a", [RNG.standard_normal((100, 5)), RNG.standard_normal(3).astype(np.float32),
                               np.asfortranarray(RNG.standard_normal((4, 3))), np.array(2.5), np.zeros((0, 3)),
                               RNG.standard_normal((2, 3)).astype(">f8"), RNG.standard_normal((2, 3, 4)).astype("<f2"),
                               np.asfortranarray(RNG.standard_normal((3, 4, 2))), np.arange(5),
                               np.array([1 + 2j, 3j]), np.array([True, False])])
def test_load_npy_equals_np_load(a):
    data = npy(a)
    ours, numpy = load_npy(data), np.load(io.BytesIO(data), allow_pickle=False)
    assert ours.dtype == numpy.dtype and ours.shape == numpy.shape
    np.testing.assert_array_equal(ours, numpy)
    assert ours.flags.writeable and ours.flags.f_contiguous == numpy.flags.f_contiguous
    ours[...] = 0  # a copy: the message's bytes are not aliased
    np.testing.assert_array_equal(load_npy(data), numpy)


def test_load_npy_refuses_what_np_load_refuses():
    data = npy(RNG.standard_normal((10, 5)))
    for bad in (data[:-8], b"not an array", data[:9]):
        with pytest.raises(ValueError):
            load_npy(bad)
    longer = data + b"\0" * 8  # np.load ignores trailing bytes; so does load_npy (through np.load)
    np.testing.assert_array_equal(load_npy(longer), np.load(io.BytesIO(longer), allow_pickle=False))
    buf = io.BytesIO()
    np.save(buf, np.array([{"x": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(ValueError):  # never unpickles
        load_npy(buf.getvalue())
    with pytest.raises(Exception):
        load_npy(pickle.dumps(np.ones(3)))


@pytest.mark.parametrize("arrays", [[RNG.standard_normal((6, 2))], [RNG.standard_normal((6, 2)), np.eye(2)], []])
def test_fitins_content_is_flowers_layout(arrays):
    ins = FitIns(ndarrays_to_parameters(arrays), {"round": 3, "lr": 0.5, "name": "x", "flag": True, "raw": b"\x01"})
    ours = fitins_content(ins)
    assert_same_content(ours, compat.fitins_to_recorddict(ins, keep_input=True))
    assert is_fitins_content(ours)
    back = compat.recorddict_to_fitins(ours, keep_input=True)  # Flower's client side reads ours
    assert back.config == ins.config and back.parameters.tensors == ins.parameters.tensors


def test_is_fitins_content_only_for_plain_instructions():
    ins = compat.fitins_to_recorddict(FitIns(ndarrays_to_parameters([np.ones(2)]), {}), keep_input=True)
    assert is_fitins_content(ins)
    ins["secaggplus"] = ConfigRecord({"stage": "setup"})  # a SecAgg+ stage holds more records
    assert not is_fitins_content(ins)
    assert is_fitins_content(ins, frozenset({"secaggplus"}))  # the instruction SecAgg+'s collect stage passes on
    del ins["fitins.config"]
    assert not is_fitins_content(ins, frozenset({"secaggplus"}))
    assert not is_fitins_content(RecordDict({"fitins.parameters": ConfigRecord(), "fitins.config": ConfigRecord()}))


@pytest.mark.parametrize("code", [Code.OK, Code.FIT_NOT_IMPLEMENTED])
def test_fitres_from_content_equals_flowers(code):
    res = FitRes(Status(code, "why"), ndarrays_to_parameters([RNG.standard_normal((4, 2)), np.ones(3)]), 17,
                 {"partition-id": 3, "f": 1.25, "note": "n"})
    content = compat.fitres_to_recorddict(res, keep_input=True)
    ours, flowers = fitres_from_content(content), compat.recorddict_to_fitres(content, keep_input=True)
    assert ours.status.code == flowers.status.code and ours.status.message == flowers.status.message
    assert ours.parameters.tensors == flowers.parameters.tensors
    assert ours.parameters.tensor_type == flowers.parameters.tensor_type
    assert (ours.num_examples, ours.metrics) == (flowers.num_examples, flowers.metrics)


def test_fitres_from_content_raises_on_a_malformed_reply():
    with pytest.raises((KeyError, TypeError, ValueError)):
        fitres_from_content(RecordDict({"fitres.parameters": ConfigRecord({"a": 1})}))


class Toy(NumPyClient):
    def __init__(self, result=None):
        self.result = result

    def fit(self, parameters, config):
        if self.result is not None:
            return self.result
        (Z,) = parameters
        return [2.0 * Z, Z.T.copy()], 11, {"round": int(config["round"]), "sum": float(Z.sum())}


def _message(content, node_id=5) -> Message:
    LocalGrid(ClientApp(client_fn=lambda c: Toy().to_client()), 1, {})  # sets Flower's task identity for Message
    msg = Message(content, node_id, "train", group_id="1")
    msg.metadata.__dict__["_message_id"] = "m1"
    return msg


def test_fit_reply_content_equals_flowers_handler():
    from flwr.app import Context
    from flwr.client.message_handler.message_handler import handle_legacy_message_from_msgtype

    ins = FitIns(ndarrays_to_parameters([RNG.standard_normal((6, 2))]), {"round": 4})
    msg = _message(fitins_content(ins))
    ctx = Context(run_id=1, node_id=5, node_config={}, state=RecordDict(), run_config={})
    flowers = handle_legacy_message_from_msgtype(lambda c: Toy().to_client(), msg, ctx)
    assert_same_content(fit_reply_content(Toy(), msg.content), flowers.content)


def test_fit_reply_content_checks_the_return_type_like_flower():
    msg = _message(fitins_content(FitIns(ndarrays_to_parameters([np.ones((2, 2))]), {"round": 1})))
    with pytest.raises(TypeError, match="fit"):
        fit_reply_content(Toy(result=([np.ones(2)], 1.5, {})), msg.content)


def test_fedspectral_client_app_replies_as_flowers_handler(tmp_path):
    """The app's fast fit path (numpy_fit_mod) gives the reply Flower's legacy handler gives, for a FedPower client."""
    from client_app.app import app, client_fn
    from simulations.engines import fused_run_config

    cfg = fused_run_config({"num-clients": 3, "num-samples": 300, "dimension": 8, "rank": 2, "iteration-rank": 3,
                            "stop-tol": 1e-6})
    flower_app = ClientApp(client_fn=client_fn)
    ours_grid, flower_grid = LocalGrid(app, 3, cfg), LocalGrid(flower_app, 3, cfg)
    Z = np.linalg.qr(RNG.standard_normal((8, 3)))[0]
    # the server asks for f_i (stop-tol: its stopping rule)
    ins = FitIns(ndarrays_to_parameters([Z]), {"round": 1, "local-steps": 2, "iteration-offset": 0, "objective": True})
    for nid in ours_grid.node_ids:
        ours = app(_message(fitins_content(ins), nid), ours_grid.contexts[nid])
        flowers = flower_app(_message(compat.fitins_to_recorddict(ins, True), nid), flower_grid.contexts[nid])
        assert_same_content(ours.content, flowers.content)
        # Y, Z_prev and, under stop-tol after several local steps, G_i = s_i Z^T A_i Z (r x r)
        arrays = parameters_to_ndarrays(fitres_from_content(ours.content).parameters)
        assert [a.shape for a in arrays] == [(8, 3), (8, 3), (3, 3)]
        assert dict(ours_grid.contexts[nid].state["fedpower"]) == dict(flower_grid.contexts[nid].state["fedpower"])


def _proxies(grid):
    return [GridClientProxy(nid, grid, grid.run.run_id) for nid in grid.node_ids]


def test_one_batch_round_sorts_replies_errors_and_silence():
    """OK replies in instruction order; an error reply, a silent node and a non-OK status are failures."""

    def faults(msg, pid):
        return {1: "error", 3: "drop"}.get(pid, "ok")

    class Picky(NumPyClient):
        def __init__(self, pid):
            self.pid = pid

        def fit(self, parameters, config):
            if self.pid == 4:
                raise RuntimeError("bad data")
            return [parameters[0] * self.pid], self.pid + 1, {"pid": self.pid}

    capp = ClientApp(client_fn=lambda c: Picky(int(c.node_config["partition-id"])).to_client())
    grid = LocalGrid(capp, 6, {}, fault_fn=faults, node_ids=[60, 10, 50, 20, 40, 30])
    proxies = _proxies(grid)
    order = [proxies[i] for i in (5, 0, 2, 4, 1, 3)]
    ins = FitIns(ndarrays_to_parameters([np.ones(3)]), {"round": 2})
    results, failures = fit_in_one_batch([(p, ins) for p in order], max_workers=1, timeout=5.0, group_id=2)
    assert [p.node_id for p, _ in results] == [30, 60, 50]  # partitions 5, 0, 2 in the instructions' order
    assert [r.metrics["pid"] for _, r in results] == [5, 0, 2]
    np.testing.assert_array_equal(parameters_to_ndarrays(results[0][1].parameters)[0], 5 * np.ones(3))
    assert len(failures) == 3
    assert sum(isinstance(f, MissingReply) and "node 20" in str(f) for f in failures) == 1  # partition 3 silent
    assert sum(isinstance(f, ValueError) and "injected" in str(f) for f in failures) == 1  # partition 1 error
    assert sum(isinstance(f, ValueError) and "bad data" in str(f) for f in failures) == 1  # partition 4 raised


def test_one_batch_round_falls_back_to_flowers_threads_for_other_proxies():
    class Stub(ClientProxy):
        def fit(self, ins, timeout, group_id):
            return FitRes(Status(Code.OK, ""), ins.parameters, 3, {"cid": self.cid})

        get_properties = get_parameters = evaluate = reconnect = None

    ins = FitIns(ndarrays_to_parameters([np.ones(2)]), {})
    results, failures = fit_in_one_batch([(Stub("a"), ins), (Stub("b"), ins)], max_workers=2, timeout=None,
                                         group_id=1)
    assert sorted(r.metrics["cid"] for _, r in results) == ["a", "b"] and failures == []
