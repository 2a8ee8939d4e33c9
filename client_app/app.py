"""The fedspectral ClientApp: one NumPyClient per algorithm, chosen by the run config."""

from __future__ import annotations

import sys
from functools import lru_cache

from flwr.app import ConfigRecord, Context, Message, MessageType, RecordDict
from flwr.client import ClientApp

from fl_strategies.settings.config import validate_run_config
from fl_strategies.protocol.fit_records import fit_reply_content, is_fitins_content
from fl_strategies.protocol.flower_compat import (RECORD_KEY_CONFIGS, THREAD_BACKEND, quicken_engine_delivery,
                                                  use_thread_backend)
from fl_strategies.settings.registry import load_class, spec

from .data import NodeData
from .faults import garbage_reply_mod
from .outlier_replies import OUTLIER_PHASES, OutlierClient
from .secure_rounding import rounding_entropy, secaggplus_seeded


def numpy_client(context: Context):
    """The NumPyClient of the configured strategy (its spec's ``client``) on this node's data."""
    cfg = _validated(context.run_config)
    return load_class(spec(cfg["strategy"]).client)(NodeData(cfg, context.node_config, context.state), cfg, context)


def client_fn(context: Context):
    """Build the client of the configured strategy on this node's data (Flower's ``client_fn``)."""
    return numpy_client(context).to_client()


def _validated(run_config) -> dict:
    """``validate_run_config`` once per distinct run config and process (a client is rebuilt at every message:
    validating ~60 keys each time cost 0.08 ms of the in-process engine's ~0.6 ms per message); a copy each call."""
    try:
        key = tuple(run_config.items())  # same content in another key order: only a cache miss
        hash(key)
    except TypeError:  # an unhashable value: the validation names the key
        return validate_run_config(run_config)
    return dict(_validate_cached(key))


@lru_cache(maxsize=8)
def _validate_cached(items: tuple) -> dict:
    return validate_run_config(dict(items))


def is_secagg_stage(content: RecordDict) -> bool:
    """Whether a message's content is a SecAgg+ stage (it holds SecAgg+'s config record).

    Looks the key up in the content itself: ``content.config_records`` would build a view of all its records,
    a measurable cost at every message of the in-process engine.
    """
    return RECORD_KEY_CONFIGS in content and isinstance(content[RECORD_KEY_CONFIGS], ConfigRecord)


def secure_aggregation_mod(msg: Message, context: Context, call_next) -> Message:
    """Flower's ``secaggplus_mod`` for the messages of a SecAgg+ round; every other message passes through.

    ``secaggplus_mod`` expects every training message to be a SecAgg+ stage; the strategies that send plain
    training messages (all but ``dp-power`` with ``dp-channel = "secagg"``) must bypass it. On a simulated node
    its stochastic rounding is seeded from the run seed, partition id, round and stage, so a simulation is
    reproduced exactly; a SuperNode keeps Flower's unseeded rounding (:mod:`client_app.secure_rounding`).
    """
    if msg.metadata.message_type == MessageType.TRAIN and is_secagg_stage(msg.content):
        entropy = rounding_entropy(_validated(context.run_config), context.node_config, msg)
        return secaggplus_seeded(msg, context, call_next, entropy)
    return call_next(msg, context)


SECAGG_RECORD = frozenset({RECORD_KEY_CONFIGS})
"""The record a SecAgg+ stage adds to the fit instruction it passes on to the client."""


def numpy_fit_mod(msg: Message, context: Context, call_next) -> Message:
    """Answer a plain fit instruction with :func:`fl_strategies.protocol.fit_records.fit_reply_content`.

    The same reply Flower's legacy handler builds (same NumPyClient, same layout), without its per-access record
    views and ``np.load`` header parsing: most of a message's cost in the in-process engine. Every other message
    (discovery, SecAgg+ stages, anything unexpected) goes to Flower's handler. The fit instruction that
    ``secaggplus_mod`` passes on in its stage that collects the masked vectors (the instruction and the stage's
    configs record, which the reply does not read) takes the same path: Flower's handler cost a secure run's client
    about as much again as its computation.
    """
    if msg.metadata.message_type == MessageType.TRAIN and is_fitins_content(msg.content, SECAGG_RECORD):
        if msg.content["fitins.config"].get("phase") in OUTLIER_PHASES:  # any strategy's: the node's data alone
            client = OutlierClient(NodeData(_validated(context.run_config), context.node_config, context.state))
            return Message(fit_reply_content(client, msg.content), reply_to=msg)
        return Message(fit_reply_content(numpy_client(context), msg.content), reply_to=msg)
    return call_next(msg, context)


# the testing fault (active only with `fault` in a node's --node-config) is outermost: it corrupts the arrays of
# plain training replies, not SecAgg+'s masked uploads (a malicious client under SecAgg+ is outside its threat model)
mods = [garbage_reply_mod, secure_aggregation_mod, numpy_fit_mod]

app = ClientApp(client_fn=client_fn, mods=mods)


if "flwr.server.superlink.fleet.vce.vce_api" in sys.modules:
    # Flower's simulation engine loads this app in its main thread before it starts its sweep for messages: the
    # sweep is quickened now (fl_strategies.protocol.flower_compat.engine_delivery), not later by the ServerApp's
    # thread, which may come after the sweep started (prompt_grid logs it where it does not fit this Flower)
    quicken_engine_delivery()
    # and a run whose federation config names backend "threads" (fedspectral run's default) runs this app in the
    # engine's thread, not in Ray (fl_strategies.protocol.flower_compat.thread_backend)
    _misfit = use_thread_backend()
    if _misfit:
        from logging import WARNING

        from flwr.common import log

        log(WARNING, "simulation backend %r is not available (%s): a run that names it runs in Ray", THREAD_BACKEND,
            _misfit)
