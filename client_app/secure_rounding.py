"""Reproducible SecAgg+ uploads in simulation: Flower's stochastic rounding seeded per node, round and stage.

Flower's SecAgg+ client (``flwr.client.mod.secaggplus_mod``) quantises each upload with stochastic rounding
(``flwr/common/secure_aggregation/quantization.py``, ``_stochastic_round``), which draws its uniforms from numpy's
*global* generator (``np.random.rand``), never seeded: two runs of the same simulation differ in the last digits
(up to 4e-4 in subspace distance on the Gowalla dp-power set-up). :func:`secaggplus_seeded` runs
``secaggplus_mod`` with the global generator seeded from ``(seed, STREAM_SECAGG_ROUNDING, partition id, server
round, stage)`` and puts the caller's generator state back afterwards; :func:`rounding_entropy` decides when.

Only simulated nodes are seeded: a node whose node config has no ``data-path``
(:func:`fl_strategies.privacy.noise.is_deployment`, the test by which ``noise-source = "auto"`` means
``seeded`` there), i.e. the in-process engine, Flower's Ray engine and ``simulations.compare``, where the data
come from a simulation harness or a dataset folder. A SuperNode keeps Flower's unseeded rounding: there the run
seed is in the run config, which the server writes, so seeded rounding would make every rounding decision of an
upload a function the server can compute. The masks would still hide the upload (below), but the rounding is
part of what the server's sum depends on, and a deployment gains nothing from reproducible last digits.

Why predictable rounding does not weaken what SecAgg+ hides (checked in Flower 1.42's source):

* the global generator is used by the quantiser only: ``quantization.py`` is the one module of
  ``flwr/common/secure_aggregation/`` and ``flwr/client/mod/secure_aggregation/`` that calls ``np.random``'s
  global functions;
* the masks do not come from it. The private mask is ``pseudo_rand_gen(rd_seed, ...)`` with
  ``rd_seed = os.urandom(32)`` (``secaggplus_mod.py``, ``_share_keys``); each pairwise mask is
  ``pseudo_rand_gen(shared_key, ...)`` with ``shared_key`` from ECDH between key pairs of
  ``ec.generate_private_key(SECP384R1)`` (``flwr/supercore/primitives/asymmetric.py``, ``generate_key_pairs``:
  OpenSSL's generator) and HKDF-SHA256 (``crypto/symmetric_encryption.py``, ``generate_shared_key``);
  ``pseudo_rand_gen`` (``secaggplus_utils.py``) draws from its own ``np.random.RandomState(seed32)`` instance,
  not the global one; the Shamir shares of ``rd_seed`` and of the key use pycryptodome's ``get_random_bytes``
  (``os.urandom``; ``crypto/shamir.py``). Seeding the global generator changes none of them: a masked upload is
  still uniform modulo the mask range whatever the quantised vector is;
* the privacy noise is drawn before quantisation, by the client inside ``call_next``, from the client's own
  generator (:meth:`fl_strategies.privacy.noise.ClientNoise.generator`: a ``default_rng`` of its own or a keyed
  SHAKE-256 stream), never the global one; and the client runs with the caller's global state, not the seeded
  one (below). In a simulation the seeded noise is known to whoever knows the seed anyway.

The seeded state is confined to the quantiser: the caller's global state is saved before, restored around the
client's own computation (``call_next``; the state the client leaves there is kept) and restored at the end (in
``finally``, also when the stage raises). Other code in the process sees the global stream it would have seen
without SecAgg+'s rounding draws. A lock makes the save-seed-restore windows of concurrent messages in one
process one at a time; code in another thread that draws from the global generator during a window would see
the seeded stream (the engines answer one message at a time per process: the in-process engine under a lock,
each Ray actor one message at a time).
"""

from __future__ import annotations

import threading
from typing import Any, Mapping

import numpy as np
from flwr.app import Context, Message
from flwr.client.mod import secaggplus_mod

from fl_strategies.privacy.noise import is_deployment
from fl_strategies.protocol.flower_compat import RECORD_KEY_CONFIGS, SecAggKey, SecAggStage

from .data import partition_id

__all__ = ["STREAM_SECAGG_ROUNDING", "rounding_entropy", "secaggplus_seeded"]

STREAM_SECAGG_ROUNDING = 30
"""The stream tag of SecAgg+'s rounding: ``SeedSequence([seed, 30, partition id, round, stage index])``."""

_LOCK = threading.Lock()


def rounding_entropy(cfg: Mapping[str, Any], node_config: Mapping[str, Any], msg: Message) -> list[int] | None:
    """The entropy that seeds a SecAgg+ stage's rounding on this node, or ``None`` to leave it unseeded.

    Parameters
    ----------
    cfg : mapping
        Effective run config (``seed``).
    node_config : mapping
        The node's config: a node with ``data-path`` (a SuperNode) is not seeded; else its ``partition-id``
        (checked by :func:`client_app.data.partition_id`) is part of the seed.
    msg : flwr.app.Message
        A SecAgg+ stage message: its ``group_id`` is the server round (``SecAggPlusWorkflow`` sets it), its
        SecAgg+ config record names the stage.

    Returns
    -------
    list of int or None
        ``[seed, STREAM_SECAGG_ROUNDING, partition_id, round, stage index in SecAggStage.all()]``; ``None`` on a
        SuperNode, or when the round or stage cannot be read (then ``secaggplus_mod`` runs as Flower ships it,
        and rejects a malformed stage itself).
    """
    if is_deployment(node_config):
        return None
    try:
        server_round = int(msg.metadata.group_id)
        stage = SecAggStage.all().index(msg.content[RECORD_KEY_CONFIGS][SecAggKey.STAGE])
    except (KeyError, TypeError, ValueError):
        return None
    if server_round < 0:
        return None
    return [int(cfg["seed"]), STREAM_SECAGG_ROUNDING, partition_id(cfg, node_config), server_round, stage]


def secaggplus_seeded(msg: Message, context: Context, call_next, entropy: list[int] | None) -> Message:
    """``secaggplus_mod(msg, context, call_next)``, its global-generator draws seeded from ``entropy``.

    Parameters
    ----------
    msg, context, call_next
        As for a Flower mod.
    entropy : list of int or None
        From :func:`rounding_entropy`; ``None`` runs ``secaggplus_mod`` unchanged.

    Returns
    -------
    flwr.app.Message
        The stage's reply.
    """
    if entropy is None:
        return secaggplus_mod(msg, context, call_next)
    with _LOCK:
        outer = np.random.get_state()

        def client_call(message: Message, ctx: Context) -> Message:
            # the client computes with the caller's global stream; what it draws from it stays drawn
            nonlocal outer
            seeded = np.random.get_state()
            np.random.set_state(outer)
            try:
                return call_next(message, ctx)
            finally:
                outer = np.random.get_state()
                np.random.set_state(seeded)

        np.random.seed(np.random.SeedSequence(entropy).generate_state(4))
        try:
            return secaggplus_mod(msg, context, client_call)
        finally:
            np.random.set_state(outer)
