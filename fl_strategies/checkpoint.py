"""Checkpoints of the server's state after every round, and resuming a run from one.

With ``checkpoint-dir = DIR`` the server (:class:`~fl_strategies.server_loop.StoppingServer`)
writes ``DIR/checkpoint.npz`` after every round: the round number, the current
global parameters, the strategy's state (``strategy.state_dict()``: its results
rows, estimates and stopping-rule state) and the run config. The file is
replaced atomically (written to a temporary file, then renamed), so a kill at
any moment leaves the previous or the new checkpoint, never a torn one. It holds
only arrays and one JSON document (``numpy.load(..., allow_pickle=False)``):
loading it cannot run code.

A new run with the same run config plus ``resume = true`` (a new ``flwr run``)
discovers the nodes again, checks that every partition still has the row count
it had, restores the strategy's state and goes on with the round after the
checkpoint. Its ``rounds.csv`` is appended to
(:class:`server_app.results.ResultsWriter` with ``keep``): rows of rounds the
checkpoint does not cover (the round in flight at the crash) are written again.
All randomness derives from ``(seed, stream, round, partition)``, so the
resumed run ends with the same rows (except ``wall_time``) and the same estimate
as an uninterrupted one.

Only strategies whose whole state lives at the server can resume: ``fedpower``,
``power``, ``ssi`` and ``localpower`` (:attr:`resumable`). The others refuse
``checkpoint-dir`` with a :class:`~fl_strategies.config.ConfigError` before
round 1, with the reason (:data:`NOT_RESUMABLE`).

Privacy: a FedPower client counts its noisy local steps in its node state,
which a new run does not have, so the count restarts. That is correct only
because a resumed run re-sends exactly the rounds the checkpoint lacks and, with
``noise-source = "seeded"``, each client re-draws exactly the noise it drew for
that round before, so a repeated round releases the same values again and
spends no budget. With ``noise-source = "os"`` the repeated round would carry
fresh noise and spend its budget twice, so checkpoints are refused for noisy
runs with ``noise-source = "os"``.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

import numpy as np

from .config import ConfigError, writable_directory

__all__ = ["CHECKPOINT_FILE", "NOT_RESUMABLE", "SAME_KEYS_EXEMPT", "Checkpoint", "checkpoint_for"]

log = logging.getLogger("flwr.fedspectral")

CHECKPOINT_FILE = "checkpoint.npz"
FORMAT_VERSION = 1

SAME_KEYS_EXEMPT = ("resume", "round-timeout", "results-dir")
"""Run-config keys that may differ between the checkpointed run and its resumption."""

NOT_RESUMABLE = {
    "faps": "each FAPS client keeps its basis, multiplier and penalty in its node state (context.state), which a "
            "new run does not have",
    "fedlrgd": "each FedLRGD client keeps its interpolation weights in its node state (context.state), which a "
               "new run does not have",
    "fedave": "FedAve's server state is not checkpointed",
    "fedmf": "fedmf's server state is not checkpointed",
    "mf-altgd": "mf-altgd's server state is not checkpointed",
    "mf-simgd": "mf-simgd's server state is not checkpointed",
    "dp-power": "a dp-power run with SecAgg+ does not run in this server loop, and every client counts its released "
                "products against L in its node state (context.state)",
}


def _encode(obj: Any, arrays: list[np.ndarray]) -> Any:
    """``obj`` as JSON-able data, its arrays moved to ``arrays`` (and replaced by ``{"__array__": i}``)."""
    if isinstance(obj, np.ndarray):
        arrays.append(obj)
        return {"__array__": len(arrays) - 1}
    if isinstance(obj, dict):
        if not all(isinstance(k, str) for k in obj):
            raise TypeError(f"checkpoint dict keys must be strings, got {list(obj)[:3]}")
        return {k: _encode(v, arrays) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_encode(v, arrays) for v in obj]
    if isinstance(obj, np.generic):
        return obj.item()
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    raise TypeError(f"cannot checkpoint a {type(obj).__name__}")


def _decode(obj: Any, arrays: dict[str, np.ndarray]) -> Any:
    if isinstance(obj, dict):
        if set(obj) == {"__array__"}:
            return arrays[f"a{obj['__array__']}"]
        return {k: _decode(v, arrays) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_decode(v, arrays) for v in obj]
    return obj


def _comparable(cfg: dict) -> dict:
    return {k: v for k, v in cfg.items() if k not in SAME_KEYS_EXEMPT}


class Checkpoint:
    """The checkpoint file of a run: saved after every round, loaded once to resume.

    Parameters
    ----------
    directory : str or Path
        Created if needed.
    cfg : dict
        The effective run config (:func:`fl_strategies.config.validate_run_config`).

    Attributes
    ----------
    path : Path
        ``directory/checkpoint.npz``.
    resumed : dict or None
        With ``resume = true``, the saved state (``round``, ``parameters``,
        ``strategy``), read and checked against ``cfg`` here, before round 1.

    Raises
    ------
    ConfigError
        If the directory is not writable; with ``resume``, if there is no
        checkpoint, it cannot be read, or it was written with another run
        config (the message names the keys that differ).
    """

    def __init__(self, directory: str | Path, cfg: dict) -> None:
        self.dir = writable_directory(directory, "checkpoint-dir")
        self.path = self.dir / CHECKPOINT_FILE
        self.cfg = cfg
        self.resumed = self._read() if cfg["resume"] else None

    def _read(self) -> dict:
        if not self.path.is_file():
            raise ConfigError(f"resume = true but there is no checkpoint {self.path} (checkpoint-dir = "
                              f"{str(self.dir)!r}); start the run with resume = false")
        try:
            with np.load(self.path, allow_pickle=False) as npz:
                arrays = {k: npz[k] for k in npz.files}
            doc = json.loads(str(arrays.pop("state")))
        except (OSError, ValueError, KeyError) as ex:
            raise ConfigError(f"resume = true but the checkpoint {self.path} cannot be read: "
                              f"{type(ex).__name__}: {ex}") from None
        if doc.get("version") != FORMAT_VERSION:
            raise ConfigError(f"the checkpoint {self.path} has format {doc.get('version')!r}, expected "
                              f"{FORMAT_VERSION}")
        saved, now = doc["config"], _comparable(self.cfg)
        differ = sorted(k for k in set(saved) | set(now) if saved.get(k) != now.get(k))
        if differ:
            shown = "; ".join(f"{k} = {saved.get(k)!r} there, {now.get(k)!r} here" for k in differ[:5])
            raise ConfigError(f"resume = true: the checkpoint {self.path} was written by a run with another run "
                              f"config ({shown}); only {', '.join(SAME_KEYS_EXEMPT)} may change")
        state = _decode(doc, arrays)
        log.info("resuming from %s: %d round(s) done", self.path, state["round"])
        return state

    def save(self, server_round: int, parameters: list[np.ndarray], strategy) -> None:
        """Write the state after ``server_round`` (atomically replacing the previous checkpoint)."""
        arrays: list[np.ndarray] = []
        doc = _encode({"version": FORMAT_VERSION, "round": server_round, "config": _comparable(self.cfg),
                       "parameters": list(parameters), "strategy": strategy.state_dict()}, arrays)
        tmp = self.dir / "checkpoint.tmp.npz"
        with tmp.open("wb") as fh:
            np.savez(fh, state=np.array(json.dumps(doc)), **{f"a{i}": a for i, a in enumerate(arrays)})
            fh.flush()
            os.fsync(fh.fileno())
        tmp.replace(self.path)


def checkpoint_for(strategy) -> Checkpoint | None:
    """The checkpoint of the strategy's run config, or ``None`` without ``checkpoint-dir``.

    Raises
    ------
    ConfigError
        ``resume`` without ``checkpoint-dir``; ``checkpoint-dir`` with a
        strategy that cannot resume (:data:`NOT_RESUMABLE`) or a run it refuses
        (``strategy.resume_problem()``, e.g. noise from the OS); and the errors
        of :class:`Checkpoint`.
    """
    cfg = strategy.cfg
    if not cfg["checkpoint-dir"]:
        if cfg["resume"]:
            raise ConfigError("resume = true needs checkpoint-dir (the directory of the checkpoint to resume from)")
        return None
    name = cfg["strategy"]
    if not getattr(strategy, "resumable", False):
        reason = NOT_RESUMABLE.get(name, f"{name}'s state is not checkpointed")
        raise ConfigError(f"checkpoint-dir is set but strategy {name!r} cannot resume: {reason}. Checkpoints work "
                          "with fedpower, power, ssi and localpower; set checkpoint-dir = \"\"")
    problem = strategy.resume_problem()
    if problem:
        raise ConfigError(f"checkpoint-dir is set but this run cannot resume: {problem}")
    return Checkpoint(cfg["checkpoint-dir"], cfg)
