"""What every fedspectral strategy shares, server side.

* **Discovery.** Before round 1 the server waits for ``num-clients`` nodes and
  learns each one's partition id and row count, so that sampling, weights and
  the reference client are defined by partition ids (Flower's node ids are
  random). ``discovery = "ask"``: a ``get_properties`` message to every node
  (which also reports its dimension; deployment; with ``dataset = "nodes"``
  the nodes' dimensions fix ``d`` and must agree). ``discovery = "engine"``:
  from the :mod:`fl_strategies.protocol.node_directory` the simulation engine
  registered for the run: no message, nothing per node but a dictionary entry
  (large populations). Both give the same map, so the same numbers.
* **Reply intake.** :meth:`FederatedStrategy.collect_replies`: origin,
  shapes, finiteness, metrics and the strategy's own checks; every rejection
  counted and logged. :func:`uploaded_bytes` counts the traffic.
* **Results.** One row per round; ``on_round(row, estimate)`` receives each
  row (the ServerApp writes them to ``results-dir``). A row may be held until
  the next round knows its objective (:attr:`FederatedStrategy.holds_rows`).
* **Abort.** :meth:`FederatedStrategy.abort`: the one way a strategy ends a
  run it cannot continue; the ServerApp then raises :class:`RunFailed`.
* **Checkpoints.** :meth:`FederatedStrategy.state_dict` /
  :meth:`FederatedStrategy.load_state_dict` (:mod:`fl_strategies.protocol.checkpoint`).

Every strategy reads its settings from :attr:`FederatedStrategy.settings` (its class of
:mod:`fl_strategies.settings.strategies`, built once here). The whole mapping ``cfg`` is kept for what handles
every key, whether the strategy reads it or not: the participation model (which refuses straggler settings a
strategy does not honour), the checks against the data shared with the validation, and the checkpoint (which
compares the whole run config).
"""

from __future__ import annotations

import copy
import logging
import re
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

import numpy as np
from flwr.common import GetPropertiesIns
from flwr.server.client_manager import ClientManager
from flwr.server.client_proxy import ClientProxy
from flwr.server.strategy import Strategy

from . import node_directory
from .iterates import Iterates
from ..settings.config import ConfigError, check_against_data, column_scaling, round_timeout, row_sums_at_discovery
from ..files.data_files import FINGERPRINT
from ..files.harness import on_nodes, widths_listed
from ..files.variants import align_variants, decode_variants, encode_variants, is_ambiguous
from ..settings.participation import Participation
from ..settings.registry import settings_for, spec
from ..settings.strategies import PcaSettings
from .replies import check_array, check_origin, check_properties, decode_arrays, scalar_metric
from ..kernels.standardize import between_sum_of_squares, constant_columns, pooled_mean, pooled_variance, scales
from ..kernels.variant_qc import variant_filter
from ..kernels.ld_prune import parse_indep_pairwise
from .ld_exchange import federated_prune, variant_map
from ..files.ranges import in_ranges, range_file, read_ranges

__all__ = ["FederatedStrategy", "RunFailed", "uploaded_bytes", "log"]

log = logging.getLogger("flwr.fedspectral")  # shown by Flower's console handler


RELEASED = "fedspectral_released_bytes"
"""Attribute of a ``FitRes`` whose serialised arrays :meth:`FederatedStrategy.collect_replies` released: their size."""


def uploaded_bytes(results: list) -> int:
    """Bytes of the arrays in a round's ``(proxy, FitRes)`` replies, as they travelled (``bytes_up``), also after
    :meth:`FederatedStrategy.collect_replies` released them."""
    return sum(getattr(res, RELEASED, None) if hasattr(res, RELEASED) else sum(len(t) for t in res.parameters.tensors)
               for _, res in results)


def release_arrays(res) -> None:
    """Drop a reply's serialised arrays once decoded (``d x r`` bytes each, held by the round's results until the
    round ends otherwise), keeping their size for :func:`uploaded_bytes`."""
    tensors = getattr(getattr(res, "parameters", None), "tensors", None)
    if isinstance(tensors, list) and not hasattr(res, RELEASED):
        setattr(res, RELEASED, sum(len(t) for t in tensors))
        tensors.clear()


_ERROR_LINE = re.compile(r"\b([A-Za-z_][\w.]*(?:Error|Exception)): (.+)")


def failure_reason(ex: BaseException, limit: int = 500) -> str:
    """The innermost ``SomeError: message`` of a node's failure, without the engine's wrapping.

    A ClientApp's exception reaches the server wrapped by Flower (and, in the Ray engine, in a
    ``RayTaskError`` with the actor's repr and a traceback); the last ``...Error: ...`` line that is not a
    wrapper is the node's own message (e.g. ``ValueError: partition 2: ... has shape (0, 1)``). Falls back to
    the whole text, cut at ``limit`` characters.
    """
    text = str(ex)
    found = [m for line in text.splitlines() for m in [_ERROR_LINE.search(line)]
             if m and not m.group(1).endswith(("ClientAppException", "RayTaskError"))]
    if found:
        kind, message = found[-1].group(1).rsplit(".", 1)[-1], found[-1].group(2).rstrip("'>) ")
        return f"{kind}: {message}"
    return text if len(text) <= limit else text[:limit] + " ..."


class RunFailed(RuntimeError):
    """Raised by the ServerApp after a run that its strategy aborted (:meth:`EigenspaceStrategy.abort`).

    The rows up to the abort are written; Flower reports the run as failed.
    ``strategy`` is the strategy after the run (its ``records``, ``failure``).
    """

    def __init__(self, message: str, strategy=None) -> None:
        super().__init__(message)
        self.strategy = strategy


class FederatedStrategy(Strategy):
    """Base class of every fedspectral strategy: discovery, reply intake, rows, abort, checkpoints.

    Parameters
    ----------
    cfg : dict
        Effective run configuration (:func:`fl_strategies.settings.config.validate_run_config`).
    dimension : int or None
        ``d``; ``None``: the nodes report it at discovery (``dataset = "nodes"``).
    reference : object, optional
        The evaluator a simulation harness computed from the pooled data
        (:mod:`fl_strategies.files.harness`); without it the accuracy columns are empty.
    wait_timeout : float
        Seconds to wait for ``num-clients`` nodes to register.

    Attributes
    ----------
    settings : fl_strategies.settings.strategies.Settings
        The strategy's typed settings (:func:`fl_strategies.settings.registry.settings_for`); a key its class
        does not declare is an ``AttributeError``.
    records : list of dict
        One row per round (round 0 is the initial estimate).
    iterates : fl_strategies.protocol.iterates.Iterates
        The estimates so far, indexed by position (``iterates[0]`` the initial one, ``iterates[-1]`` the newest,
        ``len`` their number): only ``Z_0`` and the newest :attr:`ITERATES_KEPT` are held, so the server stays
        ``O(d r)`` however many rounds run. Assigning a list of estimates replaces them.
    stopped : bool
        Set when the stopping rule fired or the run was aborted; the server loop then ends the run.
    failure : str or None
        Why the run was aborted (:meth:`abort`); the ServerApp then raises :class:`RunFailed`.
    on_round : callable, optional
        ``on_round(row, Z)`` is called for every row.
    observer : callable, optional
        ``observer(server_round, partition_id, broadcast, arrays)`` sees every
        reply as the server received it (for analyses of what the server learns).
    spec : fl_strategies.settings.registry.StrategySpec
        What the strategy tolerates. A node that fails discovery (it cannot
        start, e.g. on bad data, or reports a partition id out of range, a
        duplicate one, another dimension or no rows) is always left out with a
        WARNING; if that leaves a partition without a node, a strategy whose
        spec has ``partial_ok`` runs without it, the others refuse to start
        (``ConfigError`` before round 1). Straggler settings it does not
        honour (``spec.stragglers``) are refused when it is built.
    participation : fl_strategies.settings.participation.Participation
        The run's sampling (``spec.sampling`` for ``sampling = "auto"``) and straggler model.
    resumable : bool
        Whether a run can resume from :meth:`state_dict` (``spec.checkpoints``: all state at the server).
    """

    def __init__(self, cfg: dict[str, Any], dimension: int | None, reference: Any = None,
                 wait_timeout: float = 600.0) -> None:
        super().__init__()
        self.cfg = cfg
        self.settings = settings = settings_for(cfg)
        self.d, self.r, self.k = dimension, settings.iteration_rank, settings.rank
        self.m = settings.num_clients
        self.reference = reference
        self.wait_timeout = wait_timeout
        self.timeout = round_timeout(settings.round_timeout, real_nodes=False)  # run_server: for its nodes
        self.stop_tol = settings.stop_tol
        self.records: list[dict] = []
        self.iterates = []
        self.proxies: dict[int, ClientProxy] = {}
        self.sizes: dict[int, int] = {}
        self.fingerprints: dict[int, str] = {}  # partition id -> the fingerprint of its data reported at discovery
        self._engine_fingerprints: dict[int, str] = {}  # the same, from the engine (discovery = "engine")
        self.node_properties: dict[str, Any] = {}  # what each node answered at discovery (by node id)
        self._pid_by_cid: dict[str, int] = {}
        self._row_sums: dict[str, np.ndarray] = {}
        self._col_sq_sums: dict[str, np.ndarray] = {}
        self._call_counts: dict[str, np.ndarray] = {}  # non-missing calls per variant, from nodes with missing calls
        self._founder_sums: dict[str, tuple[np.ndarray, np.ndarray]] = {}  # (allele sums, calls) of the founders
        self.variants: list[tuple[str, str, str]] | None = None  # (ID, A1, A2) of a run over .bed files, by discovery
        self.prune: dict[str, list[str]] | None = None  # indep-pairwise's prune_in / prune_out IDs, by discovery
        self.mean: np.ndarray | None = None  # the global mean (zeros without centring), set at discovery
        self.scale: np.ndarray | None = None  # the columns' pooled standard deviations (scale = true), at discovery
        self.total_variance: float | None = None  # tr(C) from the nodes' sq-sum (noise-free), set at discovery
        self.model: dict[str, Any] | None = None  # the PCA model of the summary exchange (fl_strategies.files.pca)
        self.on_model: Callable[[dict], None] | None = None
        self.stopped = False
        self.failure: str | None = None
        self.on_round: Callable[[dict, np.ndarray], None] | None = None
        self.observer: Callable[[int, int, np.ndarray, list], None] | None = None
        self._pending: dict[str, Any] = {}
        self._held: tuple[dict, np.ndarray] | None = None
        self._last_objective: float | None = None
        self.spec = spec(settings.strategy)
        self.resumable = self.spec.checkpoints
        self.participation = Participation(cfg, self.spec.sampling)
        self.participation.check_support(self.spec.stragglers, settings.strategy)

    ITERATES_KEPT: int | None = 2
    """How many of the newest estimates the server keeps besides ``Z_0``: the newest and the one before (a row's
    ``estimate_change``, the row held by a stopping rule). ``None`` keeps every round's (``O(d r T)``), for an
    analysis that compares them all."""

    @property
    def iterates(self) -> Iterates:
        """The estimates so far (:class:`~fl_strategies.protocol.iterates.Iterates`)."""
        return self._iterates

    @iterates.setter
    def iterates(self, estimates) -> None:
        self._iterates = (estimates if isinstance(estimates, Iterates)
                          else Iterates(estimates, keep=self.ITERATES_KEPT))

    SHARED_ON_RESTART = frozenset({"cfg", "settings", "reference", "on_round", "on_model", "observer", "spec",
                                   "timeout", "folders"})
    """Attributes :meth:`restart` keeps as they are (the run's settings, its hooks, the folders' locks), not
    restored from a copy."""

    def initial_state(self) -> dict[str, Any]:
        """A copy of the strategy's state before discovery, for :meth:`restart` (the outlier passes)."""
        return {key: value if key in self.SHARED_ON_RESTART else copy.deepcopy(value)
                for key, value in self.__dict__.items()}

    def restart(self, state: dict[str, Any]) -> None:
        """Start the fit again from ``state`` (:meth:`initial_state`): discovery, the mean, the scale and every
        round are redone (after an outlier pass: without the people the sites removed). The fit's last held row is
        written first: the rows of every fit are written in turn, each from round 0."""
        if self._held is not None:
            self._write(*self._held)
        self.__dict__.update({key: value if key in self.SHARED_ON_RESTART else copy.deepcopy(value)
                              for key, value in state.items()})

    # -- to be provided by subclasses ---------------------------------------------------------------
    @property
    def num_rounds(self) -> int:
        """Maximum number of communication rounds of the run."""
        raise NotImplementedError

    def round_columns(self, server_round: int) -> dict[str, Any]:
        """Strategy-specific columns of the row of ``server_round`` (e.g. privacy spent)."""
        return {}

    @property
    def center_at_discovery(self) -> bool:
        """Whether the nodes send their row sums at discovery (``center``), in the clear: not when the sums go
        through SecAgg+ with the round's other sums (:func:`fl_strategies.settings.config.row_sums_at_discovery`)."""
        return row_sums_at_discovery(self.cfg)

    @property
    def rows_public(self) -> bool:
        """Whether each node reports its row count at discovery (``num-examples``, kept in ``sizes``). Not where
        the row counts go through SecAgg+ (:class:`~.strategies.secure_power.SecurePowerStrategy`): there
        ``sizes`` stays empty and :attr:`num_rows` comes from the secure sum."""
        return True

    @property
    def num_rows(self) -> int:
        """``n``, the rows of all registered nodes."""
        return sum(self.sizes.values())

    @property
    def scales_columns(self) -> bool:
        """Whether the columns are scaled by their pooled standard deviations (``scale``, a PCA model's setting;
        the others never scale)."""
        return isinstance(self.settings, PcaSettings) and column_scaling(self.settings.scale) != "false"

    # -- set-up -------------------------------------------------------------------------------------
    WAIT_LOG_EVERY = 10.0
    """Seconds between two "waiting for N nodes, M connected" lines while the server waits for its nodes."""

    def _discover(self, client_manager: ClientManager) -> None:
        start = time.monotonic()
        deadline, next_log = start + self.wait_timeout, start + 1.0
        hint = (f"each client is one node: in a simulation give one SuperNode per client (flwr run . "
                f"--federation-config num-supernodes={self.m}), in a deployment start {self.m} SuperNodes, or "
                "lower num-clients")
        while (connected := client_manager.num_available()) < self.m:
            now = time.monotonic()
            if now > deadline:
                raise RuntimeError(f"only {connected} of num-clients = {self.m} nodes connected within "
                                   f"{self.wait_timeout:.0f} s; {hint}")
            if now >= next_log:
                log.warning("waiting for %d nodes, %d connected (giving up in %.0f s; %s)", self.m, connected,
                            deadline - now, hint)
                next_log = now + self.WAIT_LOG_EVERY
            time.sleep(0.2)
        proxies = sorted(client_manager.all().values(), key=lambda p: p.cid)
        if self.settings.discovery == "engine":
            answers = self._from_directory(proxies, deadline)
        else:
            answers = self._ask(proxies)
        self._register(answers)
        self.mean = np.zeros(self.d)
        self.scale = None
        if self.center_at_discovery:  # the global mean from the registered nodes' row sums and counts
            sizes, row_sums = self._sizes_and_sums(self._row_sums)
            self.mean = pooled_mean(*self._frequency_sums(sizes, row_sums))
            n = self.num_rows
            log.info("center = true: the mean of %d rows, from the clients' row sums", n)
            if self._founder_sums:
                log.info("allele frequencies from the founders alone at %d node(s) whose .fam has people with "
                         "parents (plink2's default; nonfounders = true takes every person's)",
                         len(self._founder_sums))
            if self._call_counts:
                calls = sum(sizes)
                log.info("missing genotype calls at %d node(s): %.4g %% of the calls missing, %d variant(s) without a "
                         "call; each missing call imputed with the variant's mean (0 after centring)",
                         len(self._call_counts), 100.0 * (1.0 - float(np.sum(calls)) / (n * self.d)),
                         int(np.sum(calls == 0)))
        if self.scales_columns and self.center_at_discovery:  # and the columns' spread from their sums of squares
            _, sq_sums = self._sizes_and_sums(self._col_sq_sums)
            variance = pooled_variance(sizes, row_sums, sq_sums, self.mean)  # over the non-missing calls
            self.standardize(variance, sum(sizes), "the clients' sums")
        else:
            self.total_variance = self._total_variance()

    def standardize(self, variance: np.ndarray, calls, source: str) -> None:
        """Set ``scale`` (``scale`` = true or hwe) and ``tr(C)`` in the scaled space from the pooled variance.

        Parameters
        ----------
        variance : ndarray of shape (d,)
            Every column's pooled variance over its non-missing calls
            (:func:`~fl_strategies.kernels.standardize.pooled_variance`).
        calls : int or ndarray of shape (d,)
            ``n``, or the non-missing calls per column of genotypes with missing calls.
        source : str
            Where the sums came from, for the log.
        """
        n = self.num_rows
        self.scale = scales(column_scaling(self.settings.scale), variance, self.mean, calls)
        if column_scaling(self.settings.scale) == "hwe":
            log.info("scale = hwe: every variant over sqrt(2 p (1 - p)), p from %s (%d monomorphic variant(s) keep "
                     "scale 1)", source, int(np.sum(variance == 0)))
        else:
            log.info("scale = true: every column over its pooled standard deviation, from %s (%d constant column(s) "
                     "keep scale 1)", source, int(np.sum(constant_columns(variance, self.mean, calls))))
        called = np.asarray(calls, dtype=np.float64) / n  # a missing call adds 0 to C's diagonal
        self.total_variance = float(np.sum(variance * called / self.scale ** 2))  # tr(C) in the scaled space

    def _frequency_sums(self, sizes: list, row_sums: list[np.ndarray]) -> tuple[list, list[np.ndarray]]:
        """The counts and allele sums the federation's mean (its allele frequencies) comes from: a node's
        ``founder-count`` and ``founder-sum`` where it sent them (plink2's founders rule), else its own (in the order
        of :meth:`_sizes_and_sums`)."""
        if not self._founder_sums:
            return sizes, row_sums
        pairs = [self._founder_sums.get(proxy.cid, (total, size)) for proxy, size, total
                 in zip(self.proxies.values(), sizes, row_sums)]
        return [calls for _, calls in pairs], [total for total, _ in pairs]

    def _sizes_and_sums(self, vectors: dict[str, np.ndarray]) -> tuple[list, list[np.ndarray]]:
        """The registered nodes' row counts (their non-missing calls per column, (d,), for a node with missing
        genotype calls) and one of their discovery vectors (by node id), in the same order."""
        return ([self._call_counts.get(proxy.cid, self.sizes[pid]) for pid, proxy in self.proxies.items()],
                [vectors[proxy.cid] for proxy in self.proxies.values()])

    def _total_variance(self) -> float | None:
        """``tr(C)`` of the pooled (centred) second-moment matrix from the nodes' ``sq-sum``, or ``None``.

        A node reports ``sq-sum`` at discovery in a noise-free run: ``sum_j ||x_j||^2`` over its rows, or with
        ``center = true`` ``sum_j ||x_j - m_i||^2`` about its own mean ``m_i``; the server combines the latter
        with the row sums as Chan et al.'s pairwise variance does (:mod:`fl_strategies.kernels.standardize`),
        ``tr(C) = (sum_i sq_i + sum_i s_i ||m_i - mu||^2) / n``, free of the cancellation of
        ``sum ||x||^2 - n ||mu||^2``. ``None`` unless every registered node reported a finite value >= 0.
        (With ``scale = true`` it comes from the per-column sums instead, in the scaled space.)
        """
        sums = [self.node_properties.get(proxy.cid, {}).get("sq-sum") for proxy in self.proxies.values()]
        if not sums or not all(isinstance(v, (int, float)) and np.isfinite(v) and v >= 0 for v in sums):
            return None
        n = self.num_rows
        total = float(sum(sums))
        if self.center_at_discovery:
            total += float(np.sum(between_sum_of_squares(*self._sizes_and_sums(self._row_sums), self.mean)))
        return total / n

    def _from_directory(self, proxies: list[ClientProxy], deadline: float) -> list[tuple[ClientProxy, Any]]:
        """``(proxy, (partition id, rows) or reason)`` from the engine's node directory; no message is sent."""
        run_id = getattr(proxies[0], "run_id", None) if proxies else None
        directory = node_directory.lookup(run_id) if run_id is not None else None
        deadline = min(deadline, time.monotonic() + 10.0)
        while directory is None and run_id is not None and time.monotonic() < deadline:
            time.sleep(0.05)  # the Ray engine publishes it right after registering its nodes
            directory = node_directory.lookup(run_id)
        if directory is None or self.d is None:
            raise ConfigError("discovery = 'engine' needs an engine that registers its nodes (the in-process or "
                              "Ray engine of simulations.engines); use discovery = 'ask' with flwr run or a "
                              "deployment")
        answers: list[tuple[ClientProxy, Any]] = []
        for proxy in proxies:
            pid = directory.partition_of.get(int(proxy.cid))
            if pid is None or not 0 <= pid < self.m or pid not in directory.sizes:
                answers.append((proxy, "the engine's node directory does not know it"))
            else:
                answers.append((proxy, (int(pid), int(directory.sizes[pid]))))
        self._engine_fingerprints = dict(directory.fingerprints)
        return answers

    def _ask(self, proxies: list[ClientProxy]) -> list[tuple[ClientProxy, Any]]:
        """``(proxy, (partition id, rows) or reason)`` from a ``get_properties`` message to every node.

        Without a dimension from the harness (``dataset = "nodes"``) the nodes' data fix ``d``: they must agree.
        """

        def ask(proxy: ClientProxy, config: dict | None = None):  # a node that fails is left out, never crashes
            try:
                res = proxy.get_properties(GetPropertiesIns(config=config or {}), timeout=self.timeout, group_id=0)
            except Exception as ex:  # noqa: BLE001
                return proxy, f"it failed to start: {failure_reason(ex)}"
            return proxy, getattr(res, "properties", None)

        with ThreadPoolExecutor(max_workers=8) as pool:
            def ask_some(config, some):
                return list(pool.map(lambda proxy: ask(proxy, config), some))

            answers = list(pool.map(ask, proxies))
            answers = self._agree_on_variants(answers, ask_some)
            checked = self._checked(answers)
            kept = self._variant_filter(checked)
            if kept is not None:  # the variants the filters keep: every node answers again in their columns
                checked = self._realign(kept, checked, answers, ask_some)
            checked = self._ld_prune(checked, answers, ask_some)
        return checked

    def _realign(self, kept: list[tuple[str, str, str]], checked: list[tuple[ClientProxy, Any]],
                 answers: list[tuple[ClientProxy, Any]], ask_some) -> list[tuple[ClientProxy, Any]]:
        """Make ``kept`` the run's variants: sent to every usable node (``variant-align``), whose discovery answers
        in its columns replace ``answers``; returns them checked."""
        self.variants, self.d = kept, len(kept)
        self._row_sums, self._col_sq_sums, self._call_counts = {}, {}, {}
        self._founder_sums = {}
        usable = [proxy for proxy, info in checked if isinstance(info, tuple)]
        again = dict(ask_some({"variant-align": encode_variants(kept)}, usable))
        return self._checked([(proxy, again.get(proxy, props)) for proxy, props in answers])

    def _ld_prune(self, checked: list[tuple[ClientProxy, Any]], answers: list[tuple[ClientProxy, Any]],
                  ask_some) -> list[tuple[ClientProxy, Any]]:
        """``exclude-range``, then ``indep-pairwise`` (:mod:`fl_strategies.protocol.ld_exchange`): the variants in
        the ranges leave the run, then those the pruning removes; each change of the run's variants sent to the
        nodes (:meth:`_realign`), whose answers are returned checked. Sets :attr:`prune` (the ``prune.in`` and
        ``prune.out`` IDs)."""
        settings = self.settings if isinstance(self.settings, PcaSettings) else None
        value = getattr(settings, "indep_pairwise", "") or ""
        exclude = getattr(settings, "exclude_range", "") or ""
        if not value and not exclude:
            return checked
        keys = " and ".join(f"{key} = {v!r}" for key, v in (("indep-pairwise", value), ("exclude-range", exclude))
                            if v)
        if self.variants is None:
            raise ConfigError(f"{keys}: LD pruning applies to PLINK .bed data, and the nodes' data are no .bed "
                              "files; set indep-pairwise = '' and exclude-range = ''")
        usable = sorted(((proxy, info) for proxy, info in checked if isinstance(info, tuple)), key=lambda x: x[1][0])
        proxies = [proxy for proxy, _ in usable]
        chromosomes, positions = variant_map(proxies[0], ask_some, self.d)
        if exclude:
            try:
                path = range_file(exclude)
                inside = in_ranges(chromosomes, positions, read_ranges(path))
            except ValueError as ex:
                raise ConfigError(f"exclude-range = {exclude!r}: {ex}") from None
            log.info("exclude-range %s: %d of %d variants inside its ranges leave the run",
                     exclude if str(path) == exclude else f"{exclude} ({path})", int(inside.sum()), self.d)
            if len(inside) - int(inside.sum()) < self.r:
                raise ConfigError(f"exclude-range = {exclude!r} leaves {len(inside) - int(inside.sum())} of the "
                                  f"{self.d} variants, fewer than iteration-rank = {self.r}")
            if inside.any():
                kept = [variant for variant, out in zip(self.variants, inside) if not out]
                checked = self._realign(kept, checked, answers, ask_some)
                chromosomes = [c for c, out in zip(chromosomes, inside) if not out]
                positions = positions[~inside]
        if not value:
            return checked
        window = parse_indep_pairwise(value)
        if self.prune_later(chromosomes, positions, window):  # under SecAgg+: from the secure sums (secure_power)
            return checked
        keep, prune_in, prune_out = federated_prune(self.variants, proxies, chromosomes, positions, ask_some, window)
        if len(prune_in) < self.r:
            raise ConfigError(f"indep-pairwise = {value!r} keeps {len(prune_in)} of the {self.d} variants, fewer "
                              f"than iteration-rank = {self.r}: raise its r^2 threshold")
        self.prune = {"prune_in": prune_in, "prune_out": prune_out}
        if keep.all():
            return checked
        return self._realign([variant for variant, kept_it in zip(self.variants, keep) if kept_it], checked,
                             answers, ask_some)

    def prune_later(self, chromosomes: list[str], positions: np.ndarray, window) -> bool:
        """Whether ``indep-pairwise`` prunes after this discovery, from sums the strategy forms itself (SecAgg+:
        :class:`~.strategies.secure_power.SecurePowerStrategy`), given the run's variants' map; ``False`` here: the
        plain exchange of :func:`~fl_strategies.protocol.ld_exchange.federated_prune` prunes now."""
        return False

    def _checked(self, answers: list[tuple[ClientProxy, Any]]) -> list[tuple[ClientProxy, Any]]:
        """``(proxy, (partition id, rows) or reason)`` of the nodes' discovery answers; keeps their properties, ``d``
        (when the nodes fix it) and, with ``center``, their column sums."""
        self.node_properties = {proxy.cid: dict(props) for proxy, props in answers if hasattr(props, "keys")}
        if self.d is None:
            self.d = self._agreed_dimension(answers)
        checked = [(proxy, props if isinstance(props, str)
                    else check_properties(props, self.m, self.d, self.rows_public)) for proxy, props in answers]
        if self.center_at_discovery:
            checked = [(proxy, self._column_sums(proxy, props, info)) for (proxy, info), (_, props)
                       in zip(checked, answers)]
        return checked

    def _variant_filter(self, checked: list[tuple[ClientProxy, Any]]) -> list[tuple[str, str, str]] | None:
        """The ``.bed`` variants that ``maf-min`` and ``geno-max`` keep (:mod:`fl_strategies.kernels.variant_qc`),
        from the usable nodes' call counts and allele sums at discovery; ``None`` when they keep every variant
        (or are not set). A ``ConfigError`` in one line where the data are no ``.bed`` files or the filters keep
        fewer variants than ``iteration-rank``."""
        if not isinstance(self.settings, PcaSettings):
            return None
        maf_min, geno_max = float(self.settings.maf_min), float(self.settings.geno_max)
        if maf_min <= 0 and geno_max >= 1:
            return None
        keys = ", ".join(f"{key} = {value:g}" for key, value, active in (
            ("maf-min", maf_min, maf_min > 0), ("geno-max", geno_max, geno_max < 1)) if active)
        if self.variants is None:
            raise ConfigError(f"{keys}: the variant filters apply to PLINK .bed data (variants with allele counts "
                              "and missing calls), and the nodes' data are no .bed/.pgen files; set maf-min = 0 and "
                              "geno-max = 1")
        if not row_sums_at_discovery(self.cfg):  # under SecAgg+: from the secure sums, after this (secure_power)
            return None
        usable = [(proxy, info) for proxy, info in checked if isinstance(info, tuple)]
        n = sum(int(size) for _, (_, size) in usable)
        calls = sum(self._call_counts.get(proxy.cid, np.full(self.d, float(size))) for proxy, (_, size) in usable)
        sums = sum(self._row_sums[proxy.cid] for proxy, _ in usable)
        frequency = None
        if self._founder_sums:  # maf-min from the founders' frequencies (plink2's rule), geno-max over everyone
            pairs = [self._founder_sums.get(proxy.cid, (self._row_sums[proxy.cid], self._call_counts.get(
                proxy.cid, np.full(self.d, float(size))))) for proxy, (_, size) in usable]
            frequency = (sum(c for _, c in pairs), sum(t for t, _ in pairs))
        keep = self.variants_kept(calls, sums, n, f"{len(usable)} node(s), from their call counts and allele sums",
                                  frequency)
        return None if keep is None else [variant for variant, kept_it in zip(self.variants, keep) if kept_it]

    def variants_kept(self, calls: np.ndarray, allele_sums: np.ndarray, n: int, source: str,
                      frequency: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray | None:
        """The mask (d,) of the variants ``maf-min`` and ``geno-max`` keep, from the federation's call counts and
        allele sums over ``n`` people (logged with ``source``, where they come from); ``None`` when every variant
        is kept. A ``ConfigError`` in one line when fewer than ``iteration-rank`` are. ``frequency``: ``(calls,
        allele sums)`` of the founders, which ``maf-min`` then reads (plink2's founders rule)."""
        maf_min, geno_max = float(self.settings.maf_min), float(self.settings.geno_max)
        keys = ", ".join(f"{key} = {value:g}" for key, value, active in (
            ("maf-min", maf_min, maf_min > 0), ("geno-max", geno_max, geno_max < 1)) if active)
        keep, by_geno, by_maf = variant_filter(calls, allele_sums, n, 0.0 if frequency else maf_min, geno_max)
        if frequency is not None:
            by_frequency, _, _ = variant_filter(frequency[0], frequency[1], n, maf_min, 1.0)
            by_maf = int(np.sum(keep & ~by_frequency))
            keep = keep & by_frequency
        kept = int(np.sum(keep))
        log.info("variant filters (%s) over the %d people of %s: %d of %d variants kept; geno-max dropped %d "
                 "(missing-call rate above %g), maf-min %d more (minor allele frequency below %g)", keys, n, source,
                 kept, self.d, by_geno, geno_max, by_maf, maf_min)
        if kept < self.r:
            raise ConfigError(f"{keys} keep {kept} of the {self.d} variants ({by_geno} dropped by geno-max, {by_maf} "
                              f"by maf-min), fewer than iteration-rank = {self.r}: loosen the filters")
        return None if kept == self.d else keep

    def _agree_on_variants(self, answers: list[tuple[ClientProxy, Any]],
                           ask: Callable[[dict, list[ClientProxy]], list[tuple[ClientProxy, Any]]]) \
            -> list[tuple[ClientProxy, Any]]:
        """Check the nodes' ``.bed`` variant lists against each other (:mod:`fl_strategies.files.variants`).

        Every node of a run over ``.bed`` files reports ``variant-digest``. Where all agree the lowest partition's
        IDs and alleles are asked for (the model records them) and ``answers`` stand. Otherwise every node sends
        its IDs and alleles, the server aligns them (:func:`~fl_strategies.files.variants.align_variants`: the
        variants every site holds, in the lowest partition's order), logs what it dropped and flipped, sends the
        list to every node and returns their answers in its columns; a ``ConfigError`` in one line when too few
        variants are shared or a node does not answer.
        """
        digests = {proxy.cid: props.get("variant-digest") for proxy, props in answers if hasattr(props, "keys")}
        if not any(isinstance(v, str) for v in digests.values()):
            return answers
        if not all(isinstance(v, str) for v in digests.values()):
            raise ConfigError("some nodes hold a PLINK .bed/.pgen file and others other data: "
                              + ", ".join(f"node {cid}: {'genotypes' if v else 'no .bed/.pgen'}"
                                          for cid, v in digests.items()))
        usable = sorted((proxy for proxy, props in answers if hasattr(props, "keys")),
                        key=lambda proxy: dict(answers)[proxy].get("partition-id", 0))
        agree = len(set(digests.values())) == 1
        lists = {}
        for proxy, props in ask({"variant-list": True}, usable[:1] if agree else usable):
            if not hasattr(props, "keys") or not isinstance(props.get("variant-list"), bytes):
                raise ConfigError(f"node {proxy.cid} sent no variant list ({props if isinstance(props, str) else ''})")
            try:
                lists[int(props.get("partition-id", -1))] = decode_variants(props["variant-list"])
            except (ValueError, UnicodeDecodeError) as ex:
                raise ConfigError(f"node {proxy.cid}: its variant list is unreadable: {ex}") from None
        drop_ambiguous = bool(getattr(self.settings, "drop_ambiguous", False))
        if agree and not (drop_ambiguous and any(is_ambiguous(a1, a2) for _, a1, a2 in next(iter(lists.values())))):
            self.variants = next(iter(lists.values()))
            log.info("the %d nodes' variant lists agree (their digests): %d variants", len(usable), len(self.variants))
            return answers
        try:
            self.variants, report = align_variants(lists, drop_ambiguous)
        except ValueError as ex:
            raise ConfigError(str(ex)) from None
        log.info("the nodes' variant lists %s: %d variants shared by every node (in partition %d's order); dropped "
                 "%d not at every node, %d with other alleles, %d listed twice at a node, %d strand-ambiguous (A/T, "
                 "C/G) %s; A1/A2 exchanged (flipped) at %s; %d strand-ambiguous kept (listed in the same order "
                 "everywhere)", "agree" if agree else "differ", len(self.variants), min(lists), report["missing"],
                 report["mismatched"], report["duplicated"], report["ambiguous-dropped"],
                 "(drop-ambiguous = true)" if drop_ambiguous else "(their alleles in another order at some node)",
                 ", ".join(f"partition {pid}: {k}" for pid, k in sorted(report["flipped"].items())),
                 report["ambiguous"])
        aligned = dict(ask({"variant-align": encode_variants(self.variants)}, usable))
        if self.d is not None and self.d != len(self.variants):
            raise ConfigError(f"the run's dimension d = {self.d} is not the {len(self.variants)} variants shared")
        return [(proxy, aligned.get(proxy, props)) for proxy, props in answers]

    def _column_sums(self, proxy: ClientProxy, props: Any, info: Any) -> Any:
        """Keep a node's ``row-sum`` (``center = true``) and ``col-sq-sum`` (``scale = true``), d float64 as bytes
        each; a node without valid ones is left out (``info`` becomes the reason)."""
        if isinstance(info, str):
            return info
        wanted = [("row-sum", "center = true", self._row_sums)]
        if self.scales_columns:
            wanted.append(("col-sq-sum", "scale = true", self._col_sq_sums))
        found = []
        for key, why, _ in wanted:
            value = props.get(key)
            if not isinstance(value, bytes) or len(value) != 8 * self.d:
                return f"no {key} of {self.d} numbers in its properties ({why})"
            vector = np.frombuffer(value, dtype="<f8").astype(np.float64)
            if not np.all(np.isfinite(vector)) or (key == "col-sq-sum" and np.any(vector < 0)):
                return f"its {key} is not finite" + (" and >= 0" if key == "col-sq-sum" else "")
            found.append(vector)
        counts = props.get("call-count")
        if counts is not None:
            if not isinstance(counts, bytes) or len(counts) != 8 * self.d:
                return f"its call-count is not {self.d} numbers"
            counts = np.frombuffer(counts, dtype="<f8").astype(np.float64)
            if not np.all((counts >= 0) & (counts <= info[1]) & (counts == np.round(counts))):
                return f"its call-count is not whole numbers in 0..{info[1]}"
            self._call_counts[proxy.cid] = counts
        founders = [props.get(key) for key in ("founder-sum", "founder-count")]
        if founders != [None, None]:  # plink2's founders rule at this node: its founders' sums, for the frequencies
            if not all(isinstance(v, bytes) and len(v) == 8 * self.d for v in founders):
                return f"its founder-sum and founder-count are not {self.d} numbers each"
            total, calls = (np.frombuffer(v, dtype="<f8").astype(np.float64) for v in founders)
            if not (np.all((calls >= 0) & (calls <= info[1]) & (calls == np.round(calls)))
                    and np.all((total >= 0) & (total <= 2 * calls))):
                return f"its founder-count is not whole numbers in 0..{info[1]} with founder-sum in 0..2 counts"
            self._founder_sums[proxy.cid] = (total, calls)
        for (_, _, store), vector in zip(wanted, found):
            store[proxy.cid] = vector
        return info

    def _agreed_dimension(self, answers: list[tuple[ClientProxy, Any]]) -> int:
        """``d`` as every node that reported one reports it; a ``ConfigError`` naming the nodes otherwise."""
        by_d: dict[int, list[str]] = {}
        for proxy, props in answers:
            info = None if isinstance(props, str) else check_properties(props, self.m, None, self.rows_public)
            if isinstance(info, tuple):
                by_d.setdefault(int(props["dimension"]), []).append(f"node {proxy.cid} (partition {info[0]})")
        if len(by_d) > 1:
            raise ConfigError(f"the nodes' data disagree on the dimension d: {widths_listed(by_d)}")
        if not by_d:
            raise ConfigError("no node reported usable data, so the dimension d is unknown: "
                              + "; ".join(f"node {p.cid}: {props}" for p, props in answers if isinstance(props, str)))
        (d,) = by_d
        log.info("dimension d = %d, from the nodes' data", d)
        return d

    def _register(self, answers: list[tuple[ClientProxy, Any]]) -> None:
        """Keep the usable nodes by partition id; leave the others out (or refuse to start)."""
        left_out: list[str] = []
        for proxy, info in answers:
            if isinstance(info, tuple) and info[0] in self.proxies:
                info = f"it reports partition-id {info[0]}, which node {self.proxies[info[0]].cid} already has"
            if isinstance(info, str):
                left_out.append(f"node {proxy.cid}: {info}")
                log.warning("node %s is left out of the run: %s", proxy.cid, info)
                continue
            pid, size = info
            self.proxies[pid] = proxy
            if self.rows_public:  # else the engine's (discovery = "engine") count is not kept either
                self.sizes[pid] = size
            fingerprint = self.node_properties.get(proxy.cid, {}).get(FINGERPRINT, self._engine_fingerprints.get(pid))
            if isinstance(fingerprint, str) and 0 < len(fingerprint) <= 128:
                self.fingerprints[pid] = fingerprint
        self._pid_by_cid = {proxy.cid: pid for pid, proxy in self.proxies.items()}
        missing = sorted(set(range(self.m)) - set(self.proxies))
        if missing:
            problem = (f"no usable node for partition(s) {', '.join(map(str, missing))} of num-clients = {self.m}"
                       + (f" ({'; '.join(left_out)})" if left_out else ""))
            if not self.proxies or not self.spec.partial_ok or on_nodes(self.cfg):  # node data: all or none
                raise ConfigError(problem)
            log.warning("%s; the run goes on without them (counted in 'failures' when sampled)", problem)
        if self.rows_public:  # else after the secure sum of the row counts
            log.info("%r: %d clients, %d rows in all", self, self.m, self.num_rows)
            check_against_data(self.cfg, self.d, self.num_rows)

    def partition_of(self, proxy: ClientProxy) -> int | None:
        """Partition id of a node, or ``None`` for a node the server does not know."""
        return self._pid_by_cid.get(proxy.cid)

    def collect_replies(self, server_round: int, results: list, asked, shapes: list[tuple[int, ...]],
                        metrics: tuple[str, ...] = (), broadcast: Any = None, names: tuple[str, ...] = (),
                        check: Callable[[int, list[np.ndarray]], str | None] | None = None
                        ) -> tuple[dict[int, tuple[list[np.ndarray], dict[str, float]]], int]:
        """The valid replies of a round by partition id, in partition order, and how many were rejected.

        A reply is rejected (counted, and logged at WARNING with its partition
        and node) when it comes from an unknown node or a partition not in
        ``asked``, repeats a partition, does not hold ``len(shapes)`` arrays of
        those shapes (floating point, finite), or lacks a finite number for one
        of ``metrics`` (:mod:`fl_strategies.protocol.replies`), or fails the strategy's
        own ``check(partition_id, arrays) -> reason or None`` (a norm bound,
        orthonormality). ``names`` name the arrays in the reasons. The
        observer sees each accepted reply with ``broadcast``.

        Returns
        -------
        replies : dict
            ``pid -> (arrays as float64, {metric: value})``.
        rejected : int
        """
        replies: dict[int, tuple[list[np.ndarray], dict[str, float]]] = {}
        rejected = 0
        max_bytes = 16 * max(int(np.prod(s)) for s in shapes) + 4096 if shapes else None
        for proxy, res in sorted(results, key=lambda pr: (self.partition_of(pr[0]) is None,
                                                          self.partition_of(pr[0]) or 0)):
            pid = self.partition_of(proxy)
            reason = (check_origin(pid, asked, res, node_id=proxy.cid, expected_examples=self.sizes.get(pid))
                      or ("a second reply of this partition" if pid in replies else None))
            arrays = reason or decode_arrays(res, len(shapes), max_bytes=max_bytes)
            release_arrays(res)  # the decoded arrays (or the reason) are all that is needed of it now
            if isinstance(arrays, str):
                reason = arrays
            else:
                for i, (a, shape) in enumerate(zip(arrays, shapes)):
                    name = names[i] if i < len(names) else f"array of shape {shape}"
                    reason = reason or check_array(a, shape, name=name)
                if reason is None and check is not None:
                    reason = check(pid, arrays)
            values = {}
            for key in metrics:
                v = scalar_metric(res, key) if reason is None else None
                reason = reason or (v if isinstance(v, str) else None)
                values[key] = v
            if reason is not None:
                rejected += 1
                log.warning("round %d: reply of partition %s (node %s) rejected: %s", server_round, pid, proxy.cid,
                            reason)
                continue
            if self.observer is not None:
                self.observer(server_round, pid, broadcast, arrays)
            replies[pid] = ([a.astype(np.float64, copy=False) for a in arrays], values)  # freshly decoded: no copy
        return replies, rejected

    def abort(self, reason: str) -> None:
        """End the run after this round with no further estimate: the one way every strategy aborts.

        The server loop stops at ``stopped``, the rows so far are written, and
        the ServerApp raises :class:`RunFailed` with ``reason`` (logged here at ERROR).
        """
        degenerate = self.degenerate_problem()
        if degenerate is not None and not reason.startswith(degenerate):
            reason = f"{degenerate} ({reason})"
        self.failure, self.stopped = reason, True
        log.error("%s: %s", self.settings.strategy, reason)

    RANDOM_START = True
    """Whether the run starts from a random estimate (a seeded basis or factor), which is never a result: an estimate
    that never moved from it is a failure. The ERM baselines start from ``theta = 0``, which is the optimum of
    legitimate data (ridge regression on labels all zero): for them an unmoved estimate is a result."""

    def degenerate_problem(self) -> str | None:
        """Why the run's data leave nothing to estimate, or ``None`` (also when the server cannot tell).

        Degenerate means that the matrix the family works on is zero, so that every candidate is an equally good
        answer and the result is arbitrary: the (centred, scaled) second-moment matrix ``C`` for the eigenspace
        strategies (any basis is an eigenbasis), the matrix to factorise for the MF strategies, the features
        (not the labels: labels all zero on non-zero features have the optimum ``theta = 0``) for the ERM
        strategies. The server knows it from the sums of squares the nodes report at discovery in a noise-free
        run (:attr:`total_variance` = 0); a private run releases no such sum, so its data are never judged here.
        """
        if self.total_variance == 0.0:
            return (f"the data of its {len(self.proxies)} node(s) are degenerate (sum of squares 0 at every node, "
                    "e.g. all-zero rows): there is nothing to estimate")
        return None

    def progress_problem(self) -> str | None:
        """Why the run produced no result, or ``None``: called once after the last round.

        The one failure rule of every strategy. A run fails when no client reply was accepted in any of its
        rounds (every reply rejected, dropped out or too late: the estimate is its seeded start, or the server's
        own work alone); when its data are degenerate (:meth:`degenerate_problem`); or, from a random start
        (:attr:`RANDOM_START`), when its estimate after the last round equals its start exactly (every round kept
        it). The first and last are judged over the whole run, so a run with one productive round is never
        declared failed.
        """
        rows = [*self.records, *([self._held[0]] if self._held is not None else [])]
        rounds = [row for row in rows if row.get("round", 0) >= 1]
        if rounds and not any(row.get("participants", 0) for row in rounds):
            rejected = sum(int(row.get("rejected", 0) or 0) for row in rounds)
            failures = sum(int(row.get("failures", 0) or 0) for row in rounds)
            late = sum(int(row.get("late", 0) or 0) for row in rounds)
            return (f"no client reply was accepted in any of its {len(rounds)} round(s) ({rejected} rejected, "
                    f"{failures} failed or dropped out, {late} late): the result would be its start")
        degenerate = self.degenerate_problem()
        if degenerate is not None:
            return degenerate
        if self.RANDOM_START and len(self.iterates) >= 2 and not self.iterates.moved:
            return (f"the estimate never moved from its start in {len(self.iterates) - 1} round(s) (no usable "
                    "replies, or replies that sum to zero)")
        return None

    def check_progress(self) -> None:
        """:meth:`abort` a run that :meth:`progress_problem` finds without a result (after its last round)."""
        if self.failure is None:
            reason = self.progress_problem()
            if reason is not None:
                self.abort(reason)

    def end_round_without_clients(self, server_round: int, estimate: np.ndarray, name: str, **columns) -> None:
        """End a round in ``configure_fit`` whose sampled clients all dropped out: the estimate is kept.

        Flower skips ``aggregate_fit`` when nobody is asked, so the round's
        pending row (``participants = 0`` and ``columns``) and iterate are set
        here. ``name`` is the estimate's name in the WARNING.
        """
        log.warning("round %d: every sampled client dropped out; %s is kept", server_round, name)
        self._pending.update(participants=0, **columns)
        self.iterates.append(estimate)

    # -- results ------------------------------------------------------------------------------------
    @property
    def d_repr(self) -> str:
        """``d=<d>`` for a strategy's repr, or ``d from the nodes`` before discovery has learnt it."""
        return "d from the nodes" if self.d is None else f"d={self.d}"

    @property
    def holds_rows(self) -> bool:
        """Whether each row waits for the next round, which reports its objective (here: a stopping rule)."""
        return self.stop_tol > 0

    def _emit(self, row: dict, Z: np.ndarray) -> None:
        """Write a row now, or (:attr:`holds_rows`) when its objective is known."""
        if not self.holds_rows:
            self._write(row, Z)
            return
        if self._held is not None:
            self._write(*self._held)
        self._held = (row, Z)

    def _write(self, row: dict, Z: np.ndarray) -> None:
        self.records.append(row)
        if self.on_round is not None:
            self.on_round(row, Z)

    def finish(self) -> None:
        """Write the last held row and, after a run that did not fail, give the PCA model to ``on_model``; called
        by the server loop at the end of the run (after :meth:`check_progress`)."""
        if self._held is not None:
            self._write(*self._held)
            self._held = None
        if self.stopped:  # the newest estimate was discarded: the held one is the result
            self.iterates.truncate(len(self.records))
        if self.model is not None and self.failure is None and self.on_model is not None:
            self.on_model(self.model)

    @property
    def estimate(self) -> np.ndarray:
        """The result of the run: the last recorded estimate."""
        return self.iterates[len(self.records) - 1] if self.records else self.iterates[-1]

    # -- no federated evaluation ----------------------------------------------------------------------
    def configure_evaluate(self, server_round, parameters, client_manager):
        """fedspectral strategies are evaluated at the server only."""
        return []

    def aggregate_evaluate(self, server_round, results, failures):
        """fedspectral strategies are evaluated at the server only."""
        return None, {}

    # -- checkpoints (fl_strategies.protocol.checkpoint) -------------------------------------------------------
    def resume_problem(self) -> str | None:
        """Why this run could not resume correctly although the strategy can, or ``None``."""
        return None

    def state_dict(self) -> dict[str, Any]:
        """The server-side state after a round: results rows, estimates, the stopping rule's held row.

        Returns
        -------
        dict
            ``records`` (list of dict), ``iterates`` (``Z_0`` and the newest kept estimates, (d, r) arrays),
            ``iterate_count`` (how many estimates they stand for), ``iterate_first_moved`` (the first position
            whose estimate differs from ``Z_0``, or ``None``), ``held`` (``[row, Z]`` or ``None``),
            ``last_objective``, ``sizes`` (``[[partition id, rows], ...]`` as discovered) and ``fingerprints``
            (``[[partition id, str], ...]``: the fingerprint of each partition's data its node reported at
            discovery, where it reported one).
        """
        kept = self.iterates.state()
        return {"records": self.records, "iterates": kept["estimates"], "iterate_count": kept["count"],
                "iterate_first_moved": kept["first_moved"],
                "held": None if self._held is None else [self._held[0], self._held[1]],
                "last_objective": self._last_objective,
                "sizes": [[pid, size] for pid, size in sorted(self.sizes.items())],
                "fingerprints": [[pid, fp] for pid, fp in sorted(self.fingerprints.items())]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` after discovery (the nodes of the new run are known).

        Raises
        ------
        ConfigError
            If a partition now has another row count or other data (another fingerprint, or a fingerprint on one
            side only) than when the state was saved: the run cannot be continued.
        """
        saved = {int(pid): int(size) for pid, size in state["sizes"]}
        changed = [f"partition {pid} had {saved[pid]} rows, now {self.sizes[pid]}"
                   for pid in sorted(self.sizes) if pid in saved and saved[pid] != self.sizes[pid]]
        then = {int(pid): fp for pid, fp in state.get("fingerprints", [])}
        for pid in sorted(self.sizes):
            if pid not in saved or then.get(pid) == self.fingerprints.get(pid):
                continue
            node = f"partition {pid} (node {self.proxies[pid].cid})"
            if pid not in then:
                changed.append(f"{node} reports a fingerprint of its data, the checkpoint holds none to compare")
            elif pid not in self.fingerprints:
                changed.append(f"{node} reports no fingerprint of its data, the checkpoint holds one")
            else:
                changed.append(f"{node} holds other data than in the checkpointed run (another fingerprint)")
        if changed:
            raise ConfigError("resume: the data changed since the checkpoint: " + "; ".join(changed)
                              + "; resume only on the data the run started with, or start a new run")
        if set(saved) != set(self.sizes):
            log.warning("resume: partitions %s then, %s now", sorted(saved), sorted(self.sizes))
        self.records = [dict(row) for row in state["records"]]
        estimates = [np.asarray(Z, dtype=np.float64) for Z in state["iterates"]]
        if "iterate_count" in state:  # Z_0 and the newest estimates, standing for iterate_count of them
            self.iterates = Iterates(estimates, keep=self.ITERATES_KEPT, count=state["iterate_count"],
                                     first_moved=state["iterate_first_moved"])
        else:  # every estimate of the run
            self.iterates = estimates
        held = state["held"]
        self._held = None if held is None else (dict(held[0]), np.asarray(held[1], dtype=np.float64))
        self._last_objective = state["last_objective"]
