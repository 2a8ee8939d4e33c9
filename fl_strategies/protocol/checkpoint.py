"""Checkpoints of the server's state after every round, and resuming a run from one.

With ``checkpoint-dir = DIR`` the server (:class:`~fl_strategies.protocol.server_loop.StoppingServer`)
writes ``DIR/checkpoint.npz`` after every round: the round number, the current
global parameters, the strategy's state (``strategy.state_dict()``: its results
rows, estimates and stopping-rule state) and the run config (the whole mapping, not the strategy's settings:
a resume compares every key). The file is
replaced atomically (written to a temporary file, then renamed), so a kill at
any moment leaves the previous or the new checkpoint, never a torn one. It holds
only arrays and one JSON document (``numpy.load(..., allow_pickle=False)``):
loading it cannot run code. A SHA-256 checksum over the document and every
array (dtype, shape and bytes) is stored beside them; on load a file that is
truncated, damaged or altered, whose round is outside ``[0, num-server-rounds]``,
whose estimates do not have the run's shape or whose rows do not match its round
is refused with a :class:`~fl_strategies.settings.config.ConfigError` saying which. Since
anyone holding the file can recompute the checksum, every value is checked
before use as well (:meth:`Checkpoint._problem`): finite orthonormal estimates,
rows of non-negative numbers, well-formed partition sizes and fingerprints, and every field against the others
(:func:`_mismatch`: rows, iterate count, held row, parameters, estimates, partition sizes). A
checkpoint that cannot be written (disk full, directory removed) is reported at
ERROR and the run goes on; the previous checkpoint stays the one to resume from.

A new run never replaces a checkpoint an earlier run left in its ``checkpoint-dir``: it is refused before round 1
(:func:`check_checkpoint_dir`) unless ``resume = true`` (continue that run) or ``overwrite = true`` (the old
checkpoint is removed first).

A new run with the same run config plus ``resume = true`` (a new ``flwr run``)
discovers the nodes again, checks that every partition still has the row count
and the data it had (the fingerprint its node reported at discovery,
:meth:`fl_strategies.protocol.base.FederatedStrategy.load_state_dict`), restores the
strategy's state and goes on with the round after the checkpoint. "The same run
config" means every key but those declared ``harmless_on_resume``
(:data:`SAME_KEYS_EXEMPT`); a key the checkpointed run's config lacks (it was added since) counts as the same
when its value now is the one declared to reproduce the runs before it (``absent_means`` of its
:class:`~fl_strategies.settings.config.Key`), so a new key with a harmless default does not orphan old
checkpoints. Its ``rounds.csv`` is appended to (:class:`server_app.results.ResultsWriter` with ``keep``): rows
of rounds the
checkpoint does not cover (the round in flight at the crash) are written again.
All randomness derives from ``(seed, stream, round, partition)``, so the
resumed run ends with the same rows (except ``wall_time``) and the same estimate
as an uninterrupted one.

Only strategies whose whole state lives at the server can resume: ``fedpower``,
``power``, ``ssi`` and ``localpower`` (:attr:`resumable`). The others refuse
``checkpoint-dir`` with a :class:`~fl_strategies.settings.config.ConfigError` before
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

import hashlib
import json
import logging
import math
import zipfile
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from ..files.plain_files import WriteFailed, write_file
from ..settings.config import KEYS, RESUME_HARMLESS, ConfigError, column_scaling, writable_directory
from .replies import check_orthonormal

__all__ = ["CHECKPOINT_FILE", "NOT_RESUMABLE", "SAME_KEYS_EXEMPT", "Checkpoint", "check_checkpoint_dir",
           "checkpoint_for"]

log = logging.getLogger("flwr.fedspectral")

CHECKPOINT_FILE = "checkpoint.npz"
FORMAT_VERSION = 2

SAME_KEYS_EXEMPT = RESUME_HARMLESS
"""Run-config keys that may differ between the checkpointed run and its resumption: those declared
``harmless_on_resume`` in :data:`fl_strategies.settings.config.KEYS` (a key added later matters unless declared so)."""

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
    "dp-krylov": "every dp-krylov client keeps the blocks it multiplied in its node state (context.state), which a "
                 "new run does not have: a resumed run could ask again about a direction already released",
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
    """The keys a resumption must match; ``scale`` as one of its choices (a checkpoint may hold it as a boolean)."""
    return {k: column_scaling(v) if k == "scale" else v for k, v in cfg.items() if k not in SAME_KEYS_EXEMPT}


def _added_as_before(saved: dict, now: dict) -> set[str]:
    """The keys ``saved`` lacks whose value ``now`` is the declared ``absent_means``: the run config of the
    checkpointed run, written before the key existed, behaves as this value."""
    return {k for k in set(now) - set(saved)
            if k in KEYS and KEYS[k].absent_means is not None and now[k] == KEYS[k].absent_means}


def _shown(k: str, saved: dict, now: dict) -> str:
    """``key = saved there, now here`` for one difference; a key the checkpoint lacks says what it stood for."""
    if k in saved or k not in KEYS or KEYS[k].absent_means is None:
        return f"{k} = {saved.get(k)!r} there, {now.get(k)!r} here"
    return (f"{k} absent there (added since: the runs before it are {k} = {KEYS[k].absent_means!r}), "
            f"{now.get(k)!r} here")


class Checkpoint:
    """The checkpoint file of a run: saved after every round, loaded once to resume.

    Parameters
    ----------
    directory : str or Path
        Created if needed.
    cfg : dict
        The effective run config (:func:`fl_strategies.settings.config.validate_run_config`).

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

    def __init__(self, directory: str | Path, cfg: dict, num_rounds: int | None = None) -> None:
        check_checkpoint_dir({**cfg, "checkpoint-dir": str(directory)})
        self.dir = writable_directory(directory, "checkpoint-dir")
        self.path = self.dir / CHECKPOINT_FILE
        self.cfg = cfg
        self.num_rounds = num_rounds
        self.saved_round: int | None = None
        self.resumed = self._read() if cfg["resume"] else None
        if not cfg["resume"] and self.path.is_file():  # overwrite = true: the earlier run's is not resumed later
            try:
                self.path.unlink()
            except OSError as ex:
                raise ConfigError(f"checkpoint-dir = {str(directory)!r}: the old {CHECKPOINT_FILE} cannot be "
                                  f"removed: {ex.strerror or ex}") from None

    def _refuse(self, why: str) -> ConfigError:
        return ConfigError(f"resume = true but the checkpoint {self.path} {why}; start the run again with "
                           "resume = false (or restore an intact checkpoint)")

    def _read(self) -> dict:
        if not self.path.is_file():
            raise ConfigError(f"resume = true but there is no checkpoint {self.path} (checkpoint-dir = "
                              f"{str(self.dir)!r}); start the run with resume = false")
        try:
            with np.load(self.path, allow_pickle=False) as npz:
                arrays = {k: npz[k] for k in npz.files}
            text = str(arrays.pop("state"))
            stored = str(arrays.pop("checksum", ""))
            doc = json.loads(text)
        except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile, zlib.error) as ex:
            raise self._refuse(f"cannot be read (truncated or damaged: {type(ex).__name__}: {ex})") from None
        if not isinstance(doc, dict) or doc.get("version") != FORMAT_VERSION:
            version = doc.get("version") if isinstance(doc, dict) else None
            raise self._refuse(f"has format {version!r}, expected {FORMAT_VERSION}")
        # arrays not named a0, a1, ... were not written by save(): refused like a wrong checksum
        if not _numbered(arrays) or stored != _checksum(text, [arrays[f"a{i}"] for i in range(len(arrays))]):
            raise self._refuse("fails its checksum (the file was altered or damaged after it was written)")
        saved, now = doc.get("config"), _comparable(self.cfg)
        if not isinstance(saved, dict):
            raise self._refuse("holds no run config")
        saved = _comparable(saved)  # a key declared harmless after the checkpoint was written
        same = _added_as_before(saved, now)
        differ = sorted(k for k in set(saved) | set(now) if k not in same and saved.get(k) != now.get(k))
        if differ:
            shown = "; ".join(_shown(k, saved, now) for k in differ[:5])
            raise ConfigError(f"resume = true: the checkpoint {self.path} was written by a run with another run "
                              f"config ({shown}); only {', '.join(SAME_KEYS_EXEMPT)} may change")
        try:
            state = _decode(doc, arrays)
        except (KeyError, TypeError) as ex:
            raise self._refuse(f"refers to a missing array ({ex})") from None
        problem = self._problem(state)
        if problem:
            raise self._refuse(problem)
        log.info("resuming from %s: %d round(s) done", self.path, state["round"])
        return state

    def _problem(self, state: dict) -> str | None:
        """Why a checksummed state cannot be this run's, or ``None``.

        A checksum only shows that the file is as some writer left it (anyone with the file can compute one), so
        every value is checked before use: the round, every array (floating point, finite, the estimates of the
        run's shape with orthonormal columns), every row (a dict of scalars, numbers >= 0, distances in [0, 1]),
        the held row, the objective, the partitions' sizes and fingerprints.
        """
        rnd = state.get("round")
        last = self.num_rounds if self.num_rounds is not None else self.cfg["num-server-rounds"]
        if not _is_int(rnd) or not 0 <= rnd <= last:
            return f"has round {rnd!r}, outside [0, {last}] of this run"
        params = state.get("parameters")
        if not isinstance(params, list) or not params or not all(isinstance(a, np.ndarray) for a in params):
            return "holds no parameters"
        if not all(a.dtype == np.float64 and np.all(np.isfinite(a)) for a in params):
            return "holds parameters that are not finite float64 numbers"
        strat = state.get("strategy")
        if not isinstance(strat, dict) or not all(k in strat for k in ("records", "iterates", "held", "sizes")):
            return "holds no strategy state"
        records, iterates, held = strat["records"], strat["iterates"], strat["held"]
        if not isinstance(records, list) or not isinstance(iterates, list):
            return "holds no rows or estimates"
        count, first_moved = strat.get("iterate_count", len(iterates)), strat.get("iterate_first_moved")
        if not _is_int(count) or not 0 < len(iterates) <= count:  # Z_0 is held from round 0 on
            return f"holds {len(iterates)} estimate(s) standing for {count!r}"
        if first_moved is not None and not (_is_int(first_moved) and 1 <= first_moved < count):
            return f"holds the first moved estimate {first_moved!r}, not a position in 1 .. {count - 1}"
        if held is not None and not (isinstance(held, list) and len(held) == 2 and isinstance(held[0], dict)):
            return f"holds a malformed held row ({type(held).__name__})"
        rounds = [row.get("round") if isinstance(row, dict) else None for row in records]
        if (not all(_is_int(v) for v in rounds) or rounds != list(range(len(rounds)))
                or not rnd - 1 <= len(rounds) - 1 <= rnd):
            return f"has rows of rounds {rounds[:3]}...{rounds[-2:]} for round {rnd}"
        for row in records + ([held[0]] if held else []):
            problem = _row_problem(row)
            if problem:
                return f"has a row of round {row.get('round')!r} with {problem}"
        shape = params[0].shape
        r = self.cfg["iteration-rank"]
        if self.cfg["strategy"] in ("fedpower", "power", "ssi", "localpower") and (params[0].ndim != 2
                                                                                 or shape[1] != r):
            return f"holds an estimate of shape {shape}; this run iterates {r} columns (iteration-rank)"
        for Z in [params[0]] + iterates + ([held[1]] if held else []):
            if (not isinstance(Z, np.ndarray) or Z.shape != shape or Z.dtype != np.float64
                    or not np.all(np.isfinite(Z))):
                return (f"holds an estimate of shape {getattr(Z, 'shape', None)}, not {shape} like its "
                        "parameters, or not of finite float64 numbers")
            reason = check_orthonormal(Z, name="Z") if Z.ndim == 2 else f"Z has {Z.ndim} dimensions"
            if reason:
                return f"holds an estimate that is not an orthonormal basis ({reason})"
        objective = strat.get("last_objective")
        if objective is not None and not (_is_number(objective) and math.isfinite(objective)):
            return f"holds the objective {objective!r}, not a finite number"
        return (_sizes_problem(strat["sizes"], strat.get("fingerprints", []), self.cfg["num-clients"])
                or _mismatch(rnd, params[0], records, iterates, count, first_moved, held, strat["sizes"]))

    def save(self, server_round: int, parameters: list[np.ndarray], strategy) -> None:
        """Write the state after ``server_round`` (atomically replacing the previous checkpoint).

        A write that fails (``OSError``: disk full, directory gone) is logged at ERROR and the run goes on:
        the previous checkpoint is kept and stays the one a resumed run starts from.
        """
        arrays: list[np.ndarray] = []
        doc = _encode({"version": FORMAT_VERSION, "round": server_round, "config": _comparable(self.cfg),
                       "parameters": list(parameters), "strategy": strategy.state_dict()}, arrays)
        text = json.dumps(doc)
        fields = {"state": np.array(text), "checksum": np.array(_checksum(text, arrays)),
                  **{f"a{i}": a for i, a in enumerate(arrays)}}
        try:
            write_file(self.path, lambda handle: np.savez(handle, **fields))
        except OSError as ex:
            kept = "no checkpoint" if self.saved_round is None else f"the checkpoint of round {self.saved_round}"
            log.error("checkpoint after round %d could not be written to %s: %s; the run goes on and %s is kept "
                      "for resume", server_round, self.path, ex.reason if isinstance(ex, WriteFailed) else ex, kept)
            return
        self.saved_round = server_round


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _row_problem(row: Any) -> str | None:
    """Why a results row of a checkpoint is not one the run could have written, or ``None``.

    Rows hold strings, ``None`` and numbers; every number the strategies write is >= 0 (counts, times, errors,
    epsilons; NaN where there is no value), and a subspace distance is in [0, 1].
    """
    if not isinstance(row, dict):
        return "a row that is not a table"
    for key, value in row.items():
        if value is None or isinstance(value, (str, bool)):
            continue
        if not _is_number(value):
            return f"{key} = {value!r}, not a number"
        if math.isnan(value):
            continue
        if value < 0 or ("distance" in key and value > 1.0 + 1e-9):
            return f"{key} = {value!r}, outside {'[0, 1]' if 'distance' in key else '[0, inf)'}"
    return None


def _sizes_problem(sizes: Any, fingerprints: Any, num_clients: int) -> str | None:
    """Why the checkpoint's partitions (``[[id, rows], ...]``, ``[[id, fingerprint], ...]``) are malformed."""
    if not isinstance(sizes, list) or not all(isinstance(p, list) and len(p) == 2 and _is_int(p[0]) and _is_int(p[1])
                                              and 0 <= p[0] < num_clients and p[1] >= 1 for p in sizes):
        return (f"holds malformed partition sizes (not pairs [partition id in [0, {num_clients}), rows >= 1]): "
                f"{str(sizes)[:80]}")
    ids = [p[0] for p in sizes]
    if len(set(ids)) != len(ids):
        return f"lists a partition twice in its sizes: {ids}"
    if not isinstance(fingerprints, list) or not all(
            isinstance(p, list) and len(p) == 2 and _is_int(p[0]) and p[0] in ids and isinstance(p[1], str)
            and 0 < len(p[1]) <= 128 for p in fingerprints) or len({p[0] for p in fingerprints}) != len(fingerprints):
        return f"holds malformed data fingerprints: {str(fingerprints)[:80]}"
    return None


def _mismatch(rnd: int, parameters: np.ndarray, records: list, iterates: list, count: int,
              first_moved: int | None, held: list | None, sizes: list) -> str | None:
    """Why the checkpoint's fields, each well formed, disagree with one another, or ``None``.

    After round ``rnd`` a run has written the rows of rounds ``0 .. rnd`` (the last one held back as ``held`` under
    a stopping rule) and made ``rnd + 1`` estimates; its parameters, the held row's estimate and the newest estimate
    are one array; ``first_moved`` is at most the first kept position whose estimate differs from ``Z_0`` and, when
    kept, an estimate that differs; no row counts more distinct participants than there are partitions.
    """
    rows = len(records) + (held is not None)
    if rows != rnd + 1 or count != rnd + 1:
        return (f"has {len(records)} row(s){' and a held row' if held is not None else ''} and an iterate count of "
                f"{count} for round {rnd} (both must be {rnd + 1})")
    if held is not None and held[0].get("round") != rnd:
        return f"holds a held row of round {held[0].get('round')!r} for round {rnd}"
    newest = iterates[-1]
    if not np.array_equal(parameters, newest) or (held is not None and not np.array_equal(held[1], newest)):
        return "holds parameters or a held estimate that differ from its newest estimate"
    kept = dict(zip(range(count - len(iterates) + 1, count), iterates[1:]))
    moved = [position for position, Z in kept.items() if not np.array_equal(Z, iterates[0])]
    if (moved and (first_moved is None or first_moved > moved[0])) or (
            first_moved in kept and first_moved not in moved):
        return (f"holds the first moved estimate {first_moved!r} but the estimate(s) at {moved or 'no position'} "
                "of those kept differ from Z_0")
    crowded = [row.get("round") for row in records + ([held[0]] if held else [])
               if _is_number(row.get("distinct_participants")) and row["distinct_participants"] > len(sizes)]
    if crowded:
        return (f"has rows (rounds {crowded[:3]}) with more distinct participants than its {len(sizes)} "
                "partition size(s)")
    return None


def _numbered(arrays: dict[str, np.ndarray]) -> bool:
    return set(arrays) == {f"a{i}" for i in range(len(arrays))}


def _checksum(text: str, arrays: list[np.ndarray]) -> str:
    """SHA-256 of the JSON document and of every array's dtype, shape and bytes, in order."""
    digest = hashlib.sha256(text.encode("utf-8"))
    for a in arrays:
        a = np.ascontiguousarray(a)
        digest.update(f"{a.dtype.str}{a.shape}".encode())
        digest.update(a.tobytes())
    return digest.hexdigest()


def check_checkpoint_dir(cfg: dict) -> None:
    """Refuse a ``checkpoint-dir`` that holds an earlier run's checkpoint, unless ``resume`` or ``overwrite``.

    A new run would replace it at its first round: the run it could resume would be lost. Checked before Flower
    starts (:func:`fedspectral.run_config.checked_run_config`) and again by :class:`Checkpoint`.

    Raises
    ------
    ConfigError
        Naming the directory, the file and the keys that allow it.
    """
    if not cfg.get("checkpoint-dir") or cfg.get("resume") or cfg.get("overwrite"):
        return
    path = Path(cfg["checkpoint-dir"]) / CHECKPOINT_FILE
    if path.exists() or path.is_symlink():
        raise ConfigError(f"checkpoint-dir = {str(cfg['checkpoint-dir'])!r} already holds {CHECKPOINT_FILE} of an "
                          "earlier run: choose another checkpoint-dir, set resume = true to continue that run, or "
                          "overwrite = true to replace it")


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
    return Checkpoint(cfg["checkpoint-dir"], cfg, num_rounds=strategy.num_rounds)
