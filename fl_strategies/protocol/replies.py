"""Validation of what clients send the server: one place, shared by every strategy.

Everything a node sends is untrusted input: a buggy, misconfigured or
malicious client must not crash the server or corrupt the estimate. The
functions here never raise on any input; each returns the decoded value or
``None`` when the input is acceptable, and otherwise a short *reason* string.
A strategy leaves a rejected reply out of the round, counts it in the round's
``rejected`` column and logs the reason at WARNING with the partition id and
the node id.

* :func:`decode_arrays` turns a ``FitRes`` into its arrays, with the expected
  count and an optional size limit checked before anything is decoded;
* :func:`check_array` checks one array: shape, floating dtype, finiteness and
  an optional Frobenius-norm bound;
* :func:`check_orthonormal` checks that the columns of a basis are orthonormal;
* :func:`check_origin` checks who sent a reply: a registered node, asked this
  round, reporting the partition id and row count it registered with;
* :func:`scalar_metric` reads one finite number from a reply's metrics;
* :func:`check_properties` checks a node's answer to the discovery request
  (partition id, dimension, row count) before round 1.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Collection, Mapping
from typing import Any

import numpy as np

from .fit_records import load_npy

__all__ = ["decode_arrays", "check_array", "check_orthonormal", "check_origin", "scalar_metric",
           "check_properties"]


def _int_value(value: Any) -> int | None:
    """``value`` as an int if it is an integer (or an integral float), else ``None``; bools are not integers."""
    if isinstance(value, (bool, np.bool_)):
        return None
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real) and math.isfinite(value) and float(value).is_integer():
        return int(value)
    return None


def decode_arrays(res: Any, count: int, *, max_bytes: int | None = None) -> list[np.ndarray] | str:
    """The arrays of a ``FitRes``, or the reason they cannot be used.

    Parameters
    ----------
    res : flwr.common.FitRes
        A client's reply (anything else is rejected, not an error).
    count : int
        The number of arrays the reply must hold.
    max_bytes : int, optional
        Upper limit on the serialised size of each array, checked before it is
        decoded (a reply cannot make the server allocate more than this).

    Returns
    -------
    list of ndarray or str
        The ``count`` decoded arrays, or a reason such as ``"3 arrays instead of 2"``.
    """
    try:
        tensors = list(res.parameters.tensors)
    except Exception:  # noqa: BLE001 - anything that is not a FitRes with parameters
        return "the reply has no parameters"
    if len(tensors) != count:
        return f"{len(tensors)} arrays instead of {count}"
    arrays = []
    for i, tensor in enumerate(tensors):
        if not isinstance(tensor, (bytes, bytearray, memoryview)):
            return f"array {i} is a {type(tensor).__name__}, not bytes"
        if max_bytes is not None and len(tensor) > max_bytes:
            return f"array {i} is {len(tensor)} bytes, more than the {max_bytes} expected"
        try:  # Flower's own encoding (np.save); pickles are never loaded
            a = load_npy(bytes(tensor))
        except Exception as ex:  # noqa: BLE001 - corrupt bytes, pickled objects, ...
            return f"array {i} cannot be decoded: {type(ex).__name__}"
        if not isinstance(a, np.ndarray):
            if hasattr(a, "close"):
                a.close()
            return f"array {i} is not a single array"
        arrays.append(a)
    return arrays


def check_array(a: Any, shape: tuple[int, ...], *, max_norm: float | None = None,
                name: str = "array") -> str | None:
    """Check one array a client returned.

    Parameters
    ----------
    a : any
        The array (anything that is not a NumPy array is rejected).
    shape : tuple of int
        The exact expected shape.
    max_norm : float, optional
        Upper bound on the Frobenius norm (computed in float64).
    name : str
        What the array is, for the reason (``"Y"``, ``"Z_prev"``).

    Returns
    -------
    None or str
        ``None`` if ``a`` has the expected shape, a real floating dtype, only
        finite values and a norm within ``max_norm``; otherwise the reason.
    """
    if not isinstance(a, np.ndarray):
        return f"{name} is a {type(a).__name__}, not an array"
    expected = tuple(int(s) for s in shape)
    if a.shape != expected:
        return f"{name} has shape {a.shape} instead of {expected}"
    if a.dtype.kind != "f":
        return f"{name} has dtype {a.dtype}, not floating point"
    with np.errstate(all="ignore"):
        bad = int(a.size - np.count_nonzero(np.isfinite(a)))
        if bad:
            return f"{name} has {bad} non-finite value(s)"
        if max_norm is not None:  # scaled by the largest entry, so that the sum of squares cannot overflow
            flat = a.astype(np.float64).ravel()
            scale = float(np.max(np.abs(flat))) if flat.size else 0.0
            norm = scale * float(np.linalg.norm(flat / scale)) if scale > 0 else 0.0
            if not norm <= max_norm:
                return f"{name} has Frobenius norm {norm:.3g}, above the bound {max_norm:.3g}"
    return None


def check_orthonormal(a: np.ndarray, *, atol: float = 1e-6, name: str = "basis") -> str | None:
    """``None`` if ``a.T @ a`` is the identity within ``atol`` (entrywise), else the reason.

    ``a`` must already have passed :func:`check_array` (a finite 2-D float array).
    """
    with np.errstate(all="ignore"):
        a = np.asarray(a, dtype=np.float64)
        gram = a.T @ a
        err = float(np.max(np.abs(gram - np.eye(gram.shape[0])))) if gram.size else 0.0
    if not err <= atol:
        return f"{name} is not orthonormal (max |{name}^T {name} - I| = {err:.2g})"
    return None


def check_origin(partition_id: int | None, asked: Collection[int], res: Any = None, *,
                 node_id: Any = None, expected_examples: int | None = None) -> str | None:
    """Check who sent a reply.

    Parameters
    ----------
    partition_id : int or None
        The partition the server registered the sending node with before round
        1; ``None`` for a node it does not know.
    asked : collection of int
        The partition ids asked this round.
    res : flwr.common.FitRes, optional
        The reply: a ``partition-id`` in its metrics must be ``partition_id``,
        and its ``num_examples`` must be ``expected_examples`` when given.
    node_id : any, optional
        Named in the reason for an unknown node.
    expected_examples : int, optional
        The row count the node registered with.

    Returns
    -------
    None or str
    """
    if partition_id is None:
        return f"node {node_id} is not a registered client" if node_id is not None else "unknown node"
    if partition_id not in asked:
        return f"partition {partition_id} was not asked this round"
    if res is None:
        return None
    metrics = getattr(res, "metrics", None)
    if isinstance(metrics, Mapping) and "partition-id" in metrics:
        claimed = _int_value(metrics["partition-id"])
        if claimed != partition_id:
            return f"the reply claims partition-id {metrics['partition-id']!r}, the node registered as {partition_id}"
    if expected_examples is not None:
        n = _int_value(getattr(res, "num_examples", None))
        if n != expected_examples:
            return (f"the reply reports {getattr(res, 'num_examples', None)!r} rows, the node registered with "
                    f"{expected_examples}")
    return None


def scalar_metric(res: Any, key: str) -> float | str:
    """The finite number ``res.metrics[key]``, or the reason it is missing or unusable."""
    metrics = getattr(res, "metrics", None)
    if not isinstance(metrics, Mapping) or key not in metrics:
        return f"no {key!r} in the reply"
    value = metrics[key]
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        return f"{key!r} is {value!r}, not a number"
    value = float(value)
    if not math.isfinite(value):
        return f"{key!r} is {value}, not finite"
    return value


def check_properties(props: Any, num_partitions: int, dimension: int | None,
                     rows: bool = True) -> tuple[int, int | None] | str:
    """Check a node's answer to the discovery request.

    Parameters
    ----------
    props : mapping
        ``GetPropertiesRes.properties``: ``partition-id``, ``dimension`` and
        ``num-examples``.
    num_partitions : int
        ``num-clients``: partition ids are ``0 .. num_partitions - 1``.
    dimension : int or None
        ``d`` of the run's data (``None``: not checked).
    rows : bool
        Whether the node reports its row count (``num-examples``). ``False`` in a run whose row counts go only
        through SecAgg+ (``secure-aggregation = true`` for power, ssi, fedpower, localpower): a node that sends
        one there is left out (it would reveal its size to the server).

    Returns
    -------
    (partition_id, num_examples) or str
        ``num_examples`` is ``None`` without ``rows``. The reason when a property is missing, not an integer,
        a partition id out of range, a different dimension or fewer than one row, or a row count sent where
        none may be.
    """
    if not isinstance(props, Mapping):
        return "no properties"
    values = {}
    if not rows and "num-examples" in props:
        return "it sends its row count (num-examples) in the clear, but this run sums the row counts through SecAgg+"
    for key in ("partition-id", "dimension", "num-examples")[: 3 if rows else 2]:
        if key not in props:
            return f"no {key!r} in its properties"
        values[key] = _int_value(props[key])
        if values[key] is None:
            return f"{key} is {props[key]!r}, not an integer"
    pid = values["partition-id"]
    if not 0 <= pid < num_partitions:
        return f"partition-id {pid} is outside 0..{num_partitions - 1} (num-clients = {num_partitions})"
    if dimension is not None and values["dimension"] != dimension:
        return f"partition {pid} has data of dimension {values['dimension']}, the run's data have d = {dimension}"
    if not rows:
        return pid, None
    if values["num-examples"] < 1:
        return f"partition {pid} reports {values['num-examples']} rows; at least 1 is needed"
    return pid, values["num-examples"]
