"""Edges of the reply checks (fl_strategies/protocol/replies.py) that the mutation run found untested: the exact size
limit, the orthonormality tolerance and its boundary, a basis without columns, and replies whose metrics lack a key."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
from flwr.common import ndarrays_to_parameters

from fl_strategies.protocol.replies import check_orthonormal, check_origin, decode_arrays, scalar_metric


def test_an_array_of_exactly_the_size_limit_is_decoded():
    res = SimpleNamespace(parameters=ndarrays_to_parameters([np.ones((3, 2))]))
    size = len(res.parameters.tensors[0])
    assert isinstance(decode_arrays(res, 1, max_bytes=size), list)
    assert decode_arrays(res, 1, max_bytes=size - 1) == f"array 0 is {size} bytes, more than the {size - 1} expected"


def test_orthonormality_tolerance_is_1e_6_and_inclusive():
    Q = np.linalg.qr(np.random.default_rng(0).standard_normal((6, 3)))[0]
    off = Q.copy()
    off[:, 0] *= 1 + 0.75e-6  # (1 + e)^2 - 1 ~ 1.5e-6 on the diagonal of Q^T Q
    assert check_orthonormal(Q) is None and check_orthonormal(off) is not None
    assert check_orthonormal(off, atol=2e-6) is None
    assert check_orthonormal(np.eye(4)[:, :2], atol=0.0) is None  # an exact basis at zero tolerance
    assert check_orthonormal(np.zeros((3, 0))) is None  # no columns: nothing to check


def test_metrics_without_the_key_give_a_reason_not_an_exception():
    res = SimpleNamespace(metrics={}, num_examples=5)
    assert check_origin(1, {1}, res, expected_examples=5) is None
    assert scalar_metric(res, "f") == "no 'f' in the reply"
    assert scalar_metric(SimpleNamespace(metrics=None), "f") == "no 'f' in the reply"
