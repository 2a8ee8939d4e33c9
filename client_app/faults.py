"""A testing fault for deployments: a SuperNode that replies with garbage.

A real SuperNode cannot be made to misbehave from the run config (every node
sees the same one), so the fault is chosen per node in its ``--node-config``::

    flower-supernode ... --node-config 'partition-id=2 num-partitions=3 data-path="..." fault="nan"'

``fault`` (absent or ``""``: no fault) corrupts every training reply of that
node after its client computed it:

* ``"nan"``: the first entry of every reply array becomes NaN;
* ``"shape"``: every reply array loses its last column (its last entry for a
  vector), so it has the wrong shape.

The server must reject such replies, count them in ``rejected`` and never
average them in (:mod:`fl_strategies.protocol.replies`). Nothing else changes: the
node's other messages (discovery, evaluation) are untouched. The key exists for
tests and fire drills; never set it on a production node.
"""

from __future__ import annotations

import logging

import numpy as np
from flwr.app import Context, Message, MessageType
from flwr.common import ndarrays_to_parameters, parameters_to_ndarrays

from fl_strategies.protocol.flower_compat import recorddict_compat as compat

__all__ = ["FAULT_KEY", "FAULTS", "corrupt", "garbage_reply_mod"]

log = logging.getLogger("flwr.fedspectral")

FAULT_KEY = "fault"
"""The node-config key that selects a fault."""

FAULTS = ("nan", "shape")


def corrupt(arrays: list[np.ndarray], fault: str) -> list[np.ndarray]:
    """The reply arrays as a node with ``fault`` sends them.

    Parameters
    ----------
    arrays : list of ndarray
        The honest reply, e.g. ``[Y]`` or ``[Y, Z_prev]`` of shape (d, r).
    fault : {"nan", "shape"}

    Returns
    -------
    list of ndarray
        ``"nan"``: same shapes, first entry NaN (float64); ``"shape"``: the last
        column (or entry) removed.
    """
    if fault == "nan":
        out = []
        for a in arrays:
            b = np.array(a, dtype=np.float64, copy=True)
            if b.size:
                b.flat[0] = np.nan
            out.append(b)
        return out
    if fault == "shape":
        return [np.ascontiguousarray(a[..., :-1]) if a.ndim else a for a in arrays]
    raise ValueError(f"node-config {FAULT_KEY} = {fault!r}: expected one of {', '.join(FAULTS)}")


def garbage_reply_mod(msg: Message, context: Context, call_next) -> Message:
    """ClientApp mod: corrupt this node's training replies when its node config sets ``fault``.

    Without ``fault`` in the node config the message passes through untouched.
    An unknown value raises ``ValueError`` naming the key (the node then answers
    with an error reply, which the server counts as a failure).
    """
    fault = str(context.node_config.get(FAULT_KEY, "") or "")
    if not fault or msg.metadata.message_type != MessageType.TRAIN:
        return call_next(msg, context)
    if fault not in FAULTS:
        raise ValueError(f"node-config {FAULT_KEY} = {fault!r}: expected one of {', '.join(FAULTS)}")
    reply = call_next(msg, context)
    if reply.has_error():
        return reply
    fit_res = compat.recorddict_to_fitres(reply.content, keep_input=True)
    fit_res.parameters = ndarrays_to_parameters(corrupt(parameters_to_ndarrays(fit_res.parameters), fault))
    reply.content = compat.fitres_to_recorddict(fit_res, keep_input=True)
    log.warning("node-config fault = %r: this node's training reply was corrupted on purpose", fault)
    return reply
