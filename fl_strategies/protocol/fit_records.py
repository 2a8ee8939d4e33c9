"""The records of a legacy ``fit`` exchange, built and read without Flower's per-access record views.

A Flower Strategy and a NumPyClient talk through ``Message`` contents of a
fixed layout (``flwr.compat.common.recorddict_compat``):

* instruction: ``"fitins.parameters"`` (an ArrayRecord ``"0"``, ``"1"``, ...
  of ``np.save`` bytes) and ``"fitins.config"`` (a ConfigRecord);
* reply: ``"fitres.metrics"`` (ConfigRecord), ``"fitres.num_examples"``
  (MetricRecord ``{"num_examples": n}``), ``"fitres.parameters"`` and
  ``"fitres.status"`` (ConfigRecord ``{"code", "message"}``).

Flower's converters reach each record through ``RecordDict.config_records``
and friends, which build and type-check a new view of the whole content at
every access, and its NumPyClient wrapper decodes arrays with ``np.load``,
which parses every header with ``ast.literal_eval``. In the in-process engine
those were most of the ~0.4 ms a client message cost next to a 14 us product
(measured by ``simulations/benchmarks/bench_scale.py``). The functions here build and read
the *same* layout directly (``tests/test_fit_records.py`` checks them against
Flower's converters), so a server or client using them interoperates with
Flower's own on either side.
"""

from __future__ import annotations

import math
import re
from io import BytesIO
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, MetricRecord, RecordDict
from flwr.common import Code, FitIns, FitRes, Parameters, Status, ndarrays_to_parameters

from .flower_compat import (
    EXCEPTION_MESSAGE_WRONG_RETURN_TYPE_FIT,
    check_mapping_from_recordscalartype_to_scalar,
    recorddict_compat as compat,
)

__all__ = ["load_npy", "fitins_content", "fitres_from_content", "is_fitins_content", "fit_reply_content"]

FITINS_KEYS = frozenset({"fitins.parameters", "fitins.config"})

# The header ``np.save`` writes (format 1.0) for a real floating array, e.g.
# ``{'descr': '<f8', 'fortran_order': False, 'shape': (100, 5), }`` padded with spaces and a newline.
_NPY_HEADER = re.compile(rb"\{'descr': '([<>|=]f[248])', 'fortran_order': (False|True), "
                         rb"'shape': \((|\d+,|\d+(?:, \d+)+)\), \} *\n")
_NPY_MAGIC = b"\x93NUMPY\x01\x00"


def load_npy(data: bytes) -> np.ndarray:
    """Decode ``np.save`` bytes; the same array as ``np.load(BytesIO(data), allow_pickle=False)``.

    The common case (format 1.0, float16/32/64, the header ``np.save``
    writes, exactly as many data bytes as the shape needs) is parsed with a
    regular expression into a writable copy; anything else goes to ``np.load``
    (which raises on corrupt input and never loads pickles).
    """
    if data[:8] == _NPY_MAGIC and len(data) >= 10:
        end = 10 + int.from_bytes(data[8:10], "little")
        m = _NPY_HEADER.fullmatch(data, 10, end)
        if m is not None:
            dtype = np.dtype(m.group(1).decode())
            shape = tuple(int(x) for x in m.group(3).split(b",") if x.strip())
            if len(data) - end == dtype.itemsize * math.prod(shape):
                a = np.frombuffer(data, dtype=dtype, offset=end)
                return a.reshape(shape, order="F" if m.group(2) == b"True" else "C").copy(order="K")
    return np.load(BytesIO(data), allow_pickle=False)


def _array_record(parameters: Parameters) -> ArrayRecord:
    """``compat.parameters_to_arrayrecord(parameters, keep_input=True)``."""
    tensors = list(parameters.tensors)
    if not tensors:  # Flower's layout for no arrays: one empty tensor under its own key
        return compat.parameters_to_arrayrecord(parameters, keep_input=True)
    return ArrayRecord(array_dict={str(i): Array(data=t, dtype="", stype=parameters.tensor_type, shape=())
                                   for i, t in enumerate(tensors)})


def fitins_content(ins: FitIns) -> RecordDict:
    """The content Flower's ``GridClientProxy.fit`` sends: ``compat.fitins_to_recorddict(ins, keep_input=True)``."""
    return RecordDict({"fitins.parameters": _array_record(ins.parameters),
                       "fitins.config": ConfigRecord(ins.config)})


def fitres_from_content(content: RecordDict) -> FitRes:
    """The ``FitRes`` in a reply's content: ``compat.recorddict_to_fitres(content, keep_input=True)``.

    Raises
    ------
    KeyError, TypeError, ValueError
        If the content does not have the reply layout (a malformed reply).
    """
    arrays, status = content["fitres.parameters"], content["fitres.status"]
    metrics = dict(content["fitres.metrics"])
    if not isinstance(arrays, ArrayRecord) or not isinstance(status, ConfigRecord):
        raise TypeError("the reply's records do not have the fit-reply types")
    return FitRes(status=Status(code=Code(int(status["code"])), message=str(status["message"])),
                  parameters=compat.arrayrecord_to_parameters(arrays, keep_input=True),
                  num_examples=int(content["fitres.num_examples"]["num_examples"]),
                  metrics=check_mapping_from_recordscalartype_to_scalar(metrics))


def is_fitins_content(content: RecordDict, extra: frozenset[str] = frozenset()) -> bool:
    """Whether a content is exactly a plain fit instruction (a SecAgg+ stage, for one, holds more records), or
    one with the records named in ``extra`` besides (which :func:`fit_reply_content` does not read: e.g. the
    SecAgg+ configs record of the stage that collects the masked vectors)."""
    return (FITINS_KEYS <= set(content.keys()) <= FITINS_KEYS | extra
            and isinstance(content["fitins.parameters"], ArrayRecord)
            and isinstance(content["fitins.config"], ConfigRecord))


def fit_reply_content(numpy_client: Any, content: RecordDict) -> RecordDict:
    """Run ``numpy_client.fit`` on a fit instruction; the reply content Flower's legacy handler would build.

    What ``flwr.client.message_handler.handle_legacy_message_from_msgtype``
    and the NumPyClient wrapper do for a training message: decode the arrays,
    call ``fit(parameters, config)``, check its ``(list, int, dict)`` result,
    encode it with ``ndarrays_to_parameters`` and lay it out as
    ``compat.fitres_to_recorddict``.

    Raises
    ------
    TypeError
        If ``fit`` does not return ``(list of arrays, int, dict)`` (Flower's message).
    """
    parameters = [load_npy(t) for t in compat.arrayrecord_to_parameters(content["fitins.parameters"], True).tensors]
    results = numpy_client.fit(parameters, dict(content["fitins.config"]))
    if not (len(results) == 3 and isinstance(results[0], list) and isinstance(results[1], int)
            and isinstance(results[2], dict)):
        raise TypeError(EXCEPTION_MESSAGE_WRONG_RETURN_TYPE_FIT)
    arrays_out, num_examples, metrics = results
    return RecordDict({"fitres.metrics": ConfigRecord(metrics),
                       "fitres.num_examples": MetricRecord({"num_examples": num_examples}),
                       "fitres.parameters": _array_record(ndarrays_to_parameters(arrays_out)),
                       "fitres.status": ConfigRecord({"code": int(Code.OK.value), "message": "Success"})})
