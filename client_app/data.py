"""How a node finds its own data (:class:`NodeData`), and the checks that data must pass.

One data source per node, chosen by its node config:

* ``data-path`` names a local ``.npy`` / ``.csv`` / ``.npz`` / ``.bed`` / ``.pgen`` file whose rows are samples
  (``flower-supernode --node-config 'partition-id=0 data-path="rows.npy"'``):
  opened by :func:`fl_strategies.files.data_files.open_samples` and kept as
  stored (a ``.npy`` memory-mapped in its dtype), once per process; the
  file never leaves the node. This is the deployment's source, and the only one with
  ``dataset = "nodes"``.
* Otherwise the run is a simulation and the node takes partition
  ``partition-id`` of the run's data set from the simulation harness that
  claims it (:func:`fl_strategies.files.harness.find_harness`): generated from
  ``(data-seed, partition-id)``, cached in the worker process.

A node whose data are unusable fails when its client is built, with a
``ValueError`` that names its partition id and the file (``data-path``) or the
config key at fault; the server leaves such a node out of the run before round
1 and goes on with the others. Checks:

* ``partition-id`` is an integer in ``0 .. num-clients - 1``;
* a ``data-path`` file exists, is a ``.npy`` / ``.csv`` file of real numbers,
  2-D, with only finite entries (:mod:`fl_strategies.files.data_files`);
* its width is the run's dimension ``d`` whenever the run config fixes it
  (``dimension > 0`` with a simulation data set; with ``dataset = "nodes"``
  the generators' ``dimension`` plays no part); otherwise the server compares
  the width the node reports with ``d`` (with ``dataset = "nodes"``: the
  nodes must agree) and leaves out a node that differs;
* the partition has at least one row. Fewer rows than ``iteration-rank`` are
  accepted: ``A_i`` then has rank ``s_i < r``, but the algorithm stays well
  defined (``orth`` of a rank-deficient ``Y`` is still an orthonormal basis,
  and the server weights the client by ``s_i``), and with one local step the
  server still iterates exactly the pooled covariance, so refusing the
  partition would silently change the result;
* ``A_i = M_i^T M_i / s_i`` is finite (data of huge magnitude without
  ``row-normalize`` would overflow it): checked on its diagonal, the
  columns' sums of squares, block by block, when no ``d x d`` matrix is formed;
* with ``clip-norm = c`` every row longer than ``c`` is scaled down to ``c`` (others are kept), before
  anything is computed from the rows;
* with ``row-normalize`` every row has unit norm (or is zero), so
  ``tr(A_i) <= 1``: the assumption of the privacy calibration. A deployment
  file is normalised on the node like simulated data; ``row-normalize = false``
  with ``epsilon`` or ``noise-std`` set is refused by the run-config
  validation, which every client runs on the run's config before it touches
  its data.

It reads the whole run configuration (not a strategy's settings): which data set, rows and scaling apply to
every strategy's node, and the simulation harness's plug-in API takes the mapping.
"""

from __future__ import annotations

import hashlib
import logging
from collections import OrderedDict
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping

import numpy as np
from flwr.common import ConfigRecord

from fl_strategies.files.data_files import file_fingerprint, is_data_file, is_genotype_file, open_samples
from fl_strategies.files.harness import find_harness, on_nodes, partition_file
from fl_strategies.files.keep import founders_of, keep_file, site_keep
from fl_strategies.files.variants import (check_unique_ids, decode_variants, list_digest, read_bim, site_alignment,
                                         variant_list_path)
from fl_strategies.settings.config import column_scaling, row_sums_at_discovery, secure_power
from fl_strategies.kernels.products import LocalOperator, gram_is_cheaper
from fl_strategies.kernels.rows import MISSING_CODE, BedVariants, RowBlocks
from fl_strategies.kernels.unit_genotypes import UnitGenotypes

__all__ = ["NodeData", "partition_id", "check_local_matrix", "check_local_operator", "stats_from_state",
           "stats_to_state", "folder_file"]


def partition_id(cfg: Mapping[str, Any], node_config: Mapping[str, Any]) -> int:
    """The node's ``partition-id``, checked against ``num-clients``."""
    if "partition-id" not in node_config:
        raise ValueError("node config has no 'partition-id'; start the SuperNode with "
                         "--node-config 'partition-id=<i> data-path=\"<file>\"'")
    value = node_config["partition-id"]
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"node config partition-id must be an integer, got {value!r}")
    pid = int(value)
    if not 0 <= pid < cfg["num-clients"]:
        raise ValueError(f"node config partition-id = {pid} is outside 0..num-clients-1 = {cfg['num-clients'] - 1}")
    return pid


class NodeData:
    """One node's data: its partition id, and on first use its rows ``M_i`` and its local operator ``A_i``.

    Every client class is built as ``Client(NodeData, cfg, context)`` and reads
    what it needs: :attr:`rows` (fedmf, FedLRGD, FedAve: float64 in memory) or
    :meth:`operator` (the eigenspace clients: ``A_i = M_i^T M_i / s_i`` applied
    to ``(d, r)`` blocks from the rows as stored, or from a cached Gram matrix
    where that is cheaper; :mod:`fl_strategies.kernels.products`).

    Parameters
    ----------
    cfg : mapping
        Effective run config.
    node_config : mapping
        The node's config (``partition-id``, optionally ``data-path``).
    state : flwr.common.RecordDict, optional
        The node's Flower state (``context.state``): a node file's row sums and column sums of squares are kept
        there (:func:`stats_from_state`), so that the ClientApp process of a later message, which opens the file
        anew, does not read all of it again for them; and the run's variant list, once the server sent one.
    """

    def __init__(self, cfg: Mapping[str, Any], node_config: Mapping[str, Any], state=None) -> None:
        self.cfg, self.node_config = cfg, node_config
        self.partition_id = partition_id(cfg, node_config)
        self.state = state  # the node's context.state: the variant list of the run, once the server sent one
        self._rows = self._operator = None

    @classmethod
    def of(cls, partition_id: int, *, rows=None, covariance: tuple[np.ndarray, int] | None = None) -> "NodeData":
        """Data given directly (tests, notebooks): ``rows`` (s_i, d) and/or ``covariance`` ``(A_i, s_i)``."""
        data = cls.__new__(cls)
        data.cfg, data.node_config, data.partition_id, data.state = {}, {}, int(partition_id), None
        data._rows, data._operator = rows, None
        if covariance is not None:
            A, s = covariance
            data._operator = LocalOperator.from_gram(A, s, rows=None if rows is None else RowBlocks(rows))
        elif rows is not None:
            data._operator = LocalOperator.from_rows(RowBlocks(rows))
        return data

    @property
    def source(self) -> str:
        """The source as error messages name it."""
        folder_file = partition_file(self.cfg.get("dataset"), self.partition_id)
        if "data-path" not in self.node_config and folder_file is not None:
            return f"partition {self.partition_id}: dataset folder file {str(folder_file)!r}"
        if "data-path" in self.node_config:
            return f"partition {self.partition_id}: node config data-path {str(self.node_config['data-path'])!r}"
        return f"partition {self.partition_id} of dataset {self.cfg.get('dataset')!r}"

    def _file(self) -> tuple[str, str] | None:
        """``(path, what)`` of the node's file, or ``None`` when a harness provides the rows."""
        if "data-path" in self.node_config:
            return str(self.node_config["data-path"]), "node config data-path"
        folder_file = partition_file(self.cfg["dataset"], self.partition_id)
        if folder_file is not None:  # a folder of per-client files: this client's own file only
            return str(folder_file), "dataset folder file"
        return None

    def _stored(self, unit_genotypes: bool = False) -> RowBlocks:
        """The node's rows as stored (a file's, read once per process and file version; a ``.bed`` as the columns of
        the run's variant list when the server sent one; with ``unit_genotypes`` a ``.bed`` under ``row-normalize``
        stays on disk, :class:`~fl_strategies.kernels.unit_genotypes.UnitGenotypes`)."""
        file = self._file()
        if file is not None:
            return _file_rows(self.cfg, self.partition_id, *file, variants=self.run_variants, removed=self.removed,
                              unit_genotypes=unit_genotypes)
        rows = _harness(self.cfg, self.partition_id).client_rows(self.cfg, self.partition_id)
        if rows.shape[0] < 1:
            raise ValueError(f"partition {self.partition_id}: the partition has no rows")
        return RowBlocks(rows, clip=self.cfg.get("clip-norm", 0.0))

    @property
    def fingerprint(self) -> str | None:
        """SHA-256 (hex) of the file the node's rows come from: its ``data-path``, its dataset folder file or
        the run's dataset file (with a ``.keep`` beside a genotype file: of both files' fingerprints); ``None`` for
        generated data (the run config, which a resume compares, fixes them).
        """
        folder_file = partition_file(self.cfg.get("dataset"), self.partition_id)
        if "data-path" in self.node_config or folder_file is not None:
            path = str(self.node_config.get("data-path", folder_file))
            keep = keep_file(path)  # the people who enter the fit are part of the data
            if keep is None:
                return file_fingerprint(path)
            return hashlib.sha256(f"{file_fingerprint(path)} {file_fingerprint(keep)}".encode()).hexdigest()
        return file_fingerprint(self.cfg["dataset"]) if is_data_file(self.cfg.get("dataset")) else None

    @property
    def rows(self):
        """``M_i``, shape (s_i, d): a float64 ndarray (a scipy sparse matrix for sparse rows), normalised with
        ``row-normalize`` for a node file."""
        if self._rows is None:
            stored = self.stored_rows()
            rows = next(stored.blocks()) if isinstance(stored, (BedVariants, UnitGenotypes)) else stored.rows
            if stored.normalize or stored.clip > 0 or not (
                    hasattr(rows, "tocsr") or isinstance(rows, np.ndarray) and rows.dtype == np.float64
                    and not isinstance(rows, np.memmap)):
                rows = next(RowBlocks(rows, stored.normalize, block_bytes=8 * rows.shape[0] * rows.shape[1],
                                      clip=stored.clip).blocks())
            self._rows = rows
        return self._rows

    def stored_rows(self) -> RowBlocks:
        """The rows ``M_i`` (s_i, d) as stored, read in float64 blocks (normalised or clipped block by block as the
        run config says): those of the local operator where one is built, else read now (a file once per
        process). Only one block at a time is float64 (``dp-power``'s and ``dp-krylov``'s products); a ``.bed``
        with ``row-normalize`` (and no ``clip-norm``) is never decoded whole: its products are weighted ones on
        the file (:class:`~fl_strategies.kernels.unit_genotypes.UnitGenotypes`)."""
        if self._operator is not None and self._operator.rows is not None:
            return self._operator.rows
        return self._stored(unit_genotypes=True)

    @property
    def num_rows(self) -> int:
        """``s_i``."""
        return self.operator().num_rows

    @property
    def row_sum(self) -> np.ndarray:
        """``sum`` of the rows, shape (d,) (what centring sends at discovery)."""
        return self.operator().row_sum

    def sum_of_squares(self, centered: bool) -> float:
        """``sum_j ||x_j||^2`` over the rows, or about their own mean ``m_i`` when ``centered``.

        What a node reports as ``sq-sum`` at discovery (the total variance of reference-free progress):
        ``s_i tr(A_i)``, and with ``centered`` the rows' deviations summed block by block (no cancellation).
        """
        op = self.operator()
        if not centered:
            return float(op.num_rows * op.trace())
        return op.rows.centered_sum_of_squares(self._own_mean())

    def _own_mean(self) -> np.ndarray:
        """The rows' own mean ``m_i`` (d,): over each variant's non-missing calls for genotypes."""
        op = self.operator()
        return op.rows.own_mean() if isinstance(op.rows, BedVariants) else op.row_sum / op.num_rows

    @property
    def call_counts(self) -> np.ndarray | None:
        """Non-missing genotype calls per variant (d,) float64 when the node's ``.bed`` has missing calls, else
        ``None`` (every column has ``s_i`` values): what a node reports as ``call-count`` at discovery."""
        rows = self.operator().rows
        if not isinstance(rows, BedVariants) or not rows.code_counts[:, MISSING_CODE].any():
            return None
        return rows.call_counts()

    def founders_among(self, rows: BedVariants) -> np.ndarray | None:
        """Which of the people in the fit are founders, plink2's rule (:func:`fl_strategies.files.keep.founders_of`),
        the one place that says who counts where plink2 counts founders only: its allele frequencies (unless
        ``nonfounders = true``: :attr:`founder_sums`) and, always, its LD pruning's r^2
        (:func:`client_app.ld_replies.ld_sums`).

        Parameters
        ----------
        rows : BedVariants
            The node's rows (its people in the fit: all its file's, or a ``.keep``'s, less any outliers removed).

        Returns
        -------
        ndarray of shape (s_i,), bool, or None
            Per person in the fit (file order), whether a founder; ``None`` when every one is (or the file has no
            ``.fam``).
        """
        file = self._file()
        founders = None if file is None else _founders_cached(file[0], _version(_samples_file(file[0])))
        if founders is None:
            return None
        chosen = founders[np.arange(rows.file_rows) if rows.people is None else rows.people]
        return None if chosen.all() else chosen

    @property
    def founder_sums(self) -> tuple[np.ndarray, np.ndarray] | None:
        """``(allele sums, calls)`` per variant, both (d,) float64, over the founders among the people in the fit
        (plink2's rule for the allele frequencies: :meth:`founders_among`), what a node reports as ``founder-sum``
        and ``founder-count`` at discovery; ``None`` with ``nonfounders = true``, for data other than a ``.bed``,
        or when every person in the fit is a founder (the row sums say the same)."""
        rows = self.operator().rows
        if self.cfg.get("nonfounders", False) or not isinstance(rows, BedVariants):
            return None
        founders = self.founders_among(rows)
        if founders is None:
            return None
        if not founders.any():
            return np.zeros(rows.dimension), np.zeros(rows.dimension)
        chosen = np.arange(rows.file_rows) if rows.people is None else rows.people
        alone = rows.subset(chosen[founders])  # one read of the file: their code counts
        return alone.stats()[0], alone.call_counts()

    @property
    def allele_squares(self) -> np.ndarray:
        """``sum x^2`` per variant over its non-missing calls, shape (d,) float64, whole numbers (from the code
        counts): what a genotype node sends in the SecAgg+ ``discovery-counts`` exchange; genotypes only."""
        rows = self.operator().rows
        if not isinstance(rows, BedVariants):
            raise ValueError("discovery-counts: the node's data are no PLINK genotypes")
        return rows.stats()[1]

    def column_sq_sums(self) -> np.ndarray:
        """``sum_j (x_j - m_i)^2`` per column about the rows' own mean ``m_i``, shape (d,).

        What a node reports as ``col-sq-sum`` at discovery with ``scale = true``
        (:mod:`fl_strategies.kernels.standardize`): the deviations summed block by block (no cancellation, no copy of
        the rows); sparse rows by the identity ``sum x^2 - s m^2``.
        """
        return self.operator().rows.centered_column_squares(self._own_mean())

    def operator(self, products: int = 1, rank: int = 1) -> LocalOperator:
        """The uncentred local operator ``A_i = M_i^T M_i / s_i`` (cached per process and data source).

        Parameters
        ----------
        products, rank : int
            How many products with ``rank`` columns the client expects in the run: with the row count and the
            width they choose the rows or the Gram path (:func:`fl_strategies.kernels.products.gram_is_cheaper`),
            once per source and process; the choice is logged at INFO.

        Raises
        ------
        ValueError
            If the data fail a check of the module docstring (:func:`check_local_operator`).
        """
        if self._operator is None:
            key = self._source_key()
            op = _OPERATORS.get(key)
            if op is None:
                if key[0] == "harness":  # a simulated partition holds a copy of its rows: keep only this run's
                    for other in [k for k in _OPERATORS if k[0] == "harness" and k[1] != key[1]]:
                        del _OPERATORS[other]
                op = self._build_operator(products, rank)
                _OPERATORS[key] = op
                while len(_OPERATORS) > _MAX_OPERATORS:
                    _OPERATORS.pop(next(iter(_OPERATORS)))
            self._operator = op
        return self._operator

    @property
    def bim(self) -> list[tuple[str, str, str, str, str]] | None:
        """The variants of the node's ``.bed`` (or ``.pgen``) file (:func:`~fl_strategies.files.variants.read_bim`),
        ``None`` for other data."""
        file = self._file()
        if file is None or not is_genotype_file(file[0]):
            return None
        return _bim_cached(file[0], _version(file[0]))

    @property
    def variant_digest(self) -> str | None:
        """:func:`~fl_strategies.files.variants.variant_digest` of :attr:`bim` (computed once per list content:
        :func:`~fl_strategies.files.variants.list_digest`), ``None`` for other data."""
        file = self._file()
        if file is None or not is_genotype_file(file[0]):
            return None
        return _digest_cached(file[0], _version(file[0]))

    @property
    def run_variants(self) -> bytes | None:
        """The run's variant list as the server sent it (:func:`~fl_strategies.files.variants.encode_variants`),
        kept in the node's state; ``None`` when the sites' lists agreed (or the data are no ``.bed``)."""
        if self.state is None or VARIANTS_STATE not in self.state:
            return None
        return self.state[VARIANTS_STATE]["list"]

    def align(self, variants: bytes) -> None:
        """Use the run's variant list from now on: kept in the node's state, the ``.bed`` read as its columns."""
        if self.bim is None:
            raise ValueError(f"{self.source}: the server sent a variant list, but the node's data are no .bed/.pgen "
                             "file")
        if self.state is None:
            raise ValueError(f"{self.source}: the node has no state to keep the run's variant list in")
        from flwr.app import ConfigRecord

        self.state[VARIANTS_STATE] = ConfigRecord({"list": bytes(variants)})
        self._operator = self._rows = None

    def forget_variants(self) -> None:
        """Read the file as its own variants again: the run's list (:meth:`align`) leaves the node's state. After an
        outlier pass the fit starts again from discovery, which sends the list anew where it is needed and applies
        the variant filters and pruning again (over the people left), as in the first fit."""
        if self.state is not None and VARIANTS_STATE in self.state:
            del self.state[VARIANTS_STATE]
        self._operator = self._rows = None

    @property
    def removed(self) -> np.ndarray | None:
        """The people this node removed as outliers in the run (positions in its file, ascending, int64), kept in
        the node's state (:mod:`client_app.outlier_replies`); ``None`` before any."""
        if self.state is None or OUTLIERS_STATE not in self.state:
            return None
        return np.frombuffer(self.state[OUTLIERS_STATE]["people"], dtype="<i8").astype(np.int64)

    def remove(self, people: np.ndarray) -> None:
        """Leave ``people`` (positions in the file) out of the fit from now on, as a ``.keep`` would: kept in the
        node's state with those removed before."""
        if self.state is None:
            raise ValueError(f"{self.source}: the node has no state to keep the people it removed in")
        before = self.removed if self.removed is not None else np.zeros(0, dtype=np.int64)
        people = np.union1d(before, np.asarray(people, dtype=np.int64))
        self.state[OUTLIERS_STATE] = ConfigRecord({"people": people.astype("<i8").tobytes()})
        self._operator = self._rows = None

    def people_in_fit(self) -> BedVariants:
        """The node's genotype file as the people in the fit (its ``.keep``'s, less those removed as outliers),
        as the run's variants, unweighted: what :func:`fl_strategies.files.pca.transform` scores (``people``:
        their positions in the file); a ``ValueError`` for data other than a ``.bed``/``.pgen`` file."""
        file = self._file()
        if file is None or not is_genotype_file(file[0]):
            raise ValueError(f"{self.source}: outlier-sigma needs PLINK genotype files (.bed/.pgen): the people it "
                             "removes are listed by FID and IID at the site, which other rows do not have")
        path, what = file
        version, variants = _version(path), self.run_variants
        if keep_file(path) is not None:
            X = _kept_cached(path, version, _keep_version(path), variants, self.partition_id, what)
        elif variants is not None:
            X = _aligned_cached(path, version, variants, f"partition {self.partition_id}: {what} {path!r}")
        else:
            X = _read_cached(path, version, f"partition {self.partition_id}: {what}")
        return without_people(X, self.removed)

    def _source_key(self) -> tuple:
        file = self._file()
        if file is not None:
            variants = self.run_variants
            return ("file", file[0], _version(file[0]), _keep_version(file[0]), bool(self.cfg["row-normalize"]),
                    float(self.cfg.get("clip-norm", 0.0)), column_scaling(self.cfg.get("scale", False)),
                    None if variants is None else hashlib.sha256(variants).hexdigest(),
                    None if self.removed is None else hashlib.sha256(self.removed.tobytes()).hexdigest())
        return ("harness", tuple(sorted(self.cfg.items())), self.partition_id)

    def _build_operator(self, products: int, rank: int) -> LocalOperator:
        stored = self._stored()
        s, d = stored.num_rows, stored.dimension
        # the harness caches A_i (of unclipped rows) across the runs of a sweep
        harness = self._file() is None and not stored.sparse and stored.clip <= 0
        use_gram = gram_is_cheaper(s, d, rank, products, shared=harness) and not getattr(stored, "centers_inside",
                                                                                           False)
        if use_gram and harness:
            A, s_h = _harness(self.cfg, self.partition_id).client_covariance(self.cfg, self.partition_id)
            op = LocalOperator.from_gram(A, s_h, rows=stored)
        else:
            op = LocalOperator.from_rows(stored, use_gram=use_gram)
        file_rows = self._file() is not None and type(stored) is RowBlocks
        if file_rows:
            stats_from_state(self.state, self._source_key(), stored)
        check_local_operator(op, self.cfg, self.source)
        if file_rows:
            stats_to_state(self.state, self._source_key(), stored)
        log.info("%s: s = %d rows, d = %d, about %d products of %d columns: %s path (%s)", self.source, s, d,
                 products, rank, op.path, "M^T M / s formed once" if op.path == "gram"
                 else "M^T (M Z) from row blocks, no d x d matrix")
        return op

    def operator_for(self, config: Mapping[str, Any], products: int = 1, rank: int = 1) -> LocalOperator:
        """:meth:`operator`, centred with the global mean when the server sends one (``config["mean"]``), and
        with its columns divided by their scales when it sends them (``config["scale"]``, ``scale = true``).

        ``(M_i - 1 mu^T)^T (M_i - 1 mu^T) / s_i = A_i - m_i mu^T - mu m_i^T + mu mu^T`` with the client's row
        mean ``m_i``, scaled ``D^{-1} (...) D^{-1}`` with ``D = diag(scale)``; never materialising the centred
        or scaled rows (:class:`~fl_strategies.kernels.products.LocalOperator`).
        """
        op = self.operator(products, rank)
        mean, scale = config.get("mean"), config.get("scale")
        if mean is None and scale is None:
            return op
        d = op.shape[0]
        for name, value in (("mean", mean), ("scale", scale)):
            if value is not None and (not isinstance(value, bytes) or len(value) != 8 * d):
                raise ValueError(f"{self.source}: the broadcast {name} is not {d} float64 numbers")
        if mean is None:
            raise ValueError(f"{self.source}: the server sent column scales without the mean they are about")
        if scale is not None:
            scale = np.frombuffer(scale, dtype="<f8").astype(np.float64)
            if not np.all(np.isfinite(scale) & (scale > 0)):
                raise ValueError(f"{self.source}: the broadcast scale has entries that are not finite and > 0")
        return op.centered(np.frombuffer(mean, dtype="<f8").astype(np.float64), scale)

    def covariance_for(self, config: Mapping[str, Any]) -> tuple[np.ndarray, int]:
        """``(A_i, s_i)`` as a dense (d, d) array, centred as :meth:`operator_for` (the ``covariance`` strategy)."""
        op = self.operator_for(config)
        return op.dense(), op.num_rows

    @property
    def covariance(self) -> tuple[np.ndarray, int]:
        """``(A_i = M_i^T M_i / s_i, s_i)`` as a dense (d, d) array."""
        op = self.operator()
        return op.dense(), op.num_rows


log = logging.getLogger("flwr.fedspectral")

VARIANTS_STATE = "fedspectral-variants"
"""Key of the run's variant list in a node's ``context.state`` (sent once, at discovery)."""

OUTLIERS_STATE = "fedspectral-outliers"
"""Key of the people a node removed as outliers in a node's ``context.state`` (positions in its file, int64)."""

_OPERATORS: "OrderedDict[tuple, LocalOperator]" = OrderedDict()
"""Local operators built in this process, per data source (a client is rebuilt at every message; its data never).

A simulated partition's operator is keyed by the whole run config and holds a copy of the partition's rows, so
only the current run's are kept: a sweep of many runs in one process (``compare``) would otherwise keep every
run's rows (the harness's own caches keep the data set and each ``A_i`` across runs)."""
_MAX_OPERATORS = 16384


STATS_KEY = "row-stats"
"""The node-state key of a node file's row statistics (a ``ConfigRecord``)."""


def stats_from_state(state, source: tuple, rows: RowBlocks) -> bool:
    """Give ``rows`` the row sum and column sums of squares kept in the node ``state`` for ``source`` (the file,
    its modification time and size, and the run's row scaling: :meth:`NodeData._source_key`); whether it had them.
    """
    if state is None or STATS_KEY not in state or rows._stats is not None:
        return False
    record, d = state[STATS_KEY], rows.dimension
    if record.get("source") != repr(source) or len(record.get("sum", b"")) != 8 * d:
        return False
    rows._stats = tuple(np.frombuffer(record[name], dtype="<f8").astype(np.float64) for name in ("sum", "squares"))
    return True


def stats_to_state(state, source: tuple, rows: RowBlocks) -> None:
    """Keep the statistics ``rows`` computed (if any) in the node ``state`` for ``source``, replacing others."""
    if state is None or rows._stats is None:
        return
    total, squares = rows._stats
    state[STATS_KEY] = ConfigRecord({"source": repr(source), "sum": np.asarray(total, "<f8").tobytes(),
                                     "squares": np.asarray(squares, "<f8").tobytes()})


def _version(path: str):
    """``(mtime, size)`` of the file at ``path`` (``None`` where it cannot be read: the reader names the problem),
    for a ``.bed`` or ``.pgen`` followed by its variant list's (:func:`~fl_strategies.files.variants.variant_list_
    path`): the caches below are keyed by it, and a genotype file's columns are those of its list, so a list
    changed beside an unchanged ``.bed`` is read again."""
    def stamp(file) -> tuple[int, int] | None:
        try:
            stat = Path(file).stat()
            return (stat.st_mtime_ns, stat.st_size)
        except OSError:
            return None

    own = stamp(path)
    if own is None or not is_genotype_file(path):
        return own
    return own + (stamp(variant_list_path(path)),)


def _samples_file(path: str) -> str:
    """The file of a genotype file's people (a ``.pgen``'s ``.psam``, else the ``.fam``): part of a cache key."""
    return str(Path(path).with_suffix(".psam" if path.lower().endswith(".pgen") else ".fam"))


@lru_cache(maxsize=16)
def _founders_cached(path: str, version) -> np.ndarray | None:
    """:func:`fl_strategies.files.keep.founders_of`, read once per process and version of the people's file (the
    frequencies and every chunk of the LD pruning's pair sums ask for it)."""
    founders = founders_of(path)
    if founders is not None:
        founders.setflags(write=False)
    return founders


def _harness(cfg: Mapping[str, Any], pid: int):
    harness = find_harness(cfg)
    if harness is None:
        raise ValueError(f"partition {pid}: the node config has no data-path, and no simulation harness provides "
                         f"dataset {cfg['dataset']!r}; start the SuperNode with --node-config "
                         "'partition-id=<i> data-path=\"<file>\"'")
    return harness


def _file_rows(cfg: Mapping[str, Any], pid: int, path: str, what: str = "node config data-path",
               variants: bytes | None = None, removed: np.ndarray | None = None,
               unit_genotypes: bool = False) -> RowBlocks:
    """The rows of a ``data-path`` file as stored, checked; with ``row-normalize`` normalised block by block; a
    ``.bed`` as the columns of the run's ``variants`` when given
    (:meth:`~fl_strategies.kernels.rows.BedVariants.aligned`), and with ``row-normalize``, ``unit_genotypes`` and
    no ``clip-norm`` as :class:`~fl_strategies.kernels.unit_genotypes.UnitGenotypes` (products on the file)."""
    X = _read_cached(path, _version(path), f"partition {pid}: {what}")
    if variants is not None:
        X = _aligned_cached(path, _version(path), variants, f"partition {pid}: {what} {path!r}")
    if hasattr(X, "subset") and keep_file(path) is not None:  # only the people of the .keep beside it
        X = _kept_cached(path, _version(path), _keep_version(path), variants, pid, what)
    if removed is not None:  # the people removed as outliers leave the fit as a .keep leaves them out
        X = without_people(X, removed)
    if not on_nodes(cfg) and cfg["dimension"] > 0 and X.shape[1] != cfg["dimension"]:
        raise ValueError(f"partition {pid}: {what} {path!r}: has {X.shape[1]} columns, but the "
                         f"run's data have dimension d = {cfg['dimension']}")
    if isinstance(X, BedVariants):
        summed = row_sums_at_discovery(cfg) or (bool(cfg.get("center")) and secure_power(cfg))
        if X.code_counts[:, MISSING_CODE].any() and not (summed and cfg.get("epsilon", 0) <= 0
                                                         and cfg.get("noise-std", 0) <= 0):
            raise ValueError(f"partition {pid}: {what} {path!r}: has missing genotype calls, which are imputed with "
                             "the federation's allele frequencies: that needs center = true in a noise-free run "
                             "whose row sums and call counts are summed at discovery (in the clear, or through "
                             "SecAgg+ with power or ssi)")
        log.info("partition %d: %s %r: %d people x %d variants (PLINK %s, read in variant blocks)", pid, what, path,
                 X.num_rows, X.dimension, Path(path).suffix)
        if not (cfg["row-normalize"] or cfg.get("clip-norm", 0.0) > 0):
            if column_scaling(cfg.get("scale", False)) == "hwe" and X.code_counts[:, MISSING_CODE].any():
                return X.weighted(X.missingness_weights())  # plink2's correction for missingness
            return X
        if unit_genotypes and cfg["row-normalize"] and cfg.get("clip-norm", 0.0) <= 0:
            return UnitGenotypes(X)
        X = next(X.blocks())  # rows scaled one by one: the decoded counts in memory
    return RowBlocks(X, normalize=bool(cfg["row-normalize"]), clip=cfg.get("clip-norm", 0.0))


def without_people(X: BedVariants, removed: np.ndarray | None) -> BedVariants:
    """``X`` (a genotype file, perhaps a subset of its people already) without the people at file positions
    ``removed`` (:meth:`~fl_strategies.kernels.rows.BedVariants.subset`); ``X`` itself when ``removed`` is None."""
    if removed is None:
        return X
    if not hasattr(X, "subset"):
        raise ValueError("people were removed as outliers, but the node's data are no genotype file")
    chosen = np.arange(X.file_rows) if X.people is None else X.people
    return X.subset(np.setdiff1d(chosen, removed))


def _keep_version(path: str):
    """The ``.keep`` beside ``path`` and its version (:func:`_version`), ``None`` without one: part of the keys of
    a node file's caches, so that a new or changed ``.keep`` is read again."""
    keep = keep_file(path)
    return None if keep is None else (str(keep), _version(str(keep)))


@lru_cache(maxsize=16)
def _kept_cached(path: str, version, keep_version, variants: bytes | None, pid: int, what: str) -> BedVariants:
    """The genotype file at ``path`` (as the run's ``variants`` when given) restricted to the people of the
    ``.keep`` beside it (:func:`fl_strategies.files.keep.site_keep`); the count of its IDs the file does not list
    logged as a warning (plink2 ``--keep`` leaves them out silently)."""
    X = _read_cached(path, version, f"partition {pid}: {what}")
    if variants is not None:
        X = _aligned_cached(path, version, variants, f"partition {pid}: {what} {path!r}")
    try:
        keep, people, unknown, total = site_keep(path)
    except ValueError as ex:
        raise ValueError(f"partition {pid}: {what} {path!r}: its .keep {ex}") from None
    if unknown:
        log.warning("partition %d: %s %r: %d of the people its .keep %r lists are not in the file (left out, as "
                    "plink2 --keep leaves them)", pid, what, path, unknown, keep.name)
    log.info("partition %d: %s %r: fitting on the %d of its %d people that %r lists", pid, what, path, people.size,
             total, keep.name)
    return X.subset(people)


@lru_cache(maxsize=64)
def _bim_cached(path: str, version) -> list[tuple[str, str, str, str, str]]:
    return read_bim(path)


@lru_cache(maxsize=64)
def _digest_cached(path: str, version) -> str:
    return list_digest(path, _unkept_list(path, version))


def _unkept_list(path: str, version) -> list[tuple[str, str, str, str, str]] | None:
    """The node's variant list (read once, :func:`_bim_cached`) where :func:`~fl_strategies.files.variants.read_bim`
    does not keep it parsed by content (a ``.pvar``); ``None`` for a ``.bim``, whose content's digest and repeated
    IDs are kept with it."""
    return None if variant_list_path(path).suffix == ".bim" else _bim_cached(path, version)


@lru_cache(maxsize=16)
def _aligned_cached(path: str, version, variants: bytes, label: str) -> BedVariants:
    """The ``.bed`` at ``path`` as the columns of ``variants`` (the run's list), its swapped alleles flipped."""
    X = _read_cached(path, version, label)
    if not isinstance(X, BedVariants):
        raise ValueError(f"{label}: the server sent a variant list, but the file is no .bed/.pgen")
    try:
        own = [(vid, a1, a2) for _, vid, _, a1, a2 in _bim_cached(path, version)]
        listed = decode_variants(variants)
        columns, flip = site_alignment(own, listed)
    except ValueError as ex:
        raise ValueError(f"{label}: {ex}") from None
    log.info("%s: %d of its %d variants in the run's list, %d with A1 and A2 exchanged (flipped when decoded)",
             label, int(np.sum(columns >= 0)), len(own), int(np.sum(flip & (columns >= 0))))
    return X.aligned(columns, flip, len(listed))


@lru_cache(maxsize=64)  # a client is rebuilt at every message; a changed file (mtime, size) is read again
def _read_cached(path: str, version, label: str):
    X = open_samples(path, label)
    if isinstance(X, BedVariants):  # a variant or a person listed twice: refused naming them
        check_unique_ids(path, label, _unkept_list(path, version))  # a .bim's IDs counted once per content
    if isinstance(X, np.ndarray) and not isinstance(X, np.memmap):
        X.setflags(write=False)
    return X


def folder_file(path: str, pid: int):
    """Partition ``pid``'s file of a dataset folder (``path``, as :func:`~fl_strategies.files.harness.partition_file`
    names it) as its in-process client opened it: the same object, whose code counts and missing calls were found
    once, or opened now and kept (a changed file, mtime or size, opened again); all its people, its own variants."""
    return _read_cached(path, _version(path), f"partition {pid}: dataset folder file")


def check_local_matrix(A: np.ndarray, num_rows: int, cfg: Mapping[str, Any], where: str) -> None:
    """Check a client's ``A_i = M_i^T M_i / s_i`` before it is used; ``where`` names partition and source.

    Raises
    ------
    ValueError
        If there are no rows, ``A_i`` has non-finite entries, or (with
        ``row-normalize``) ``tr(A_i) > 1``, i.e. the rows are not unit-norm.
    """
    if num_rows < 1:
        raise ValueError(f"{where}: the partition has no rows")
    if not np.all(np.isfinite(A)):
        raise ValueError(f"{where}: M^T M / s has non-finite entries (the data are too large in magnitude); "
                         "rescale them or set row-normalize = true")
    if cfg["row-normalize"] and np.trace(A) > 1.0 + 1e-9:
        raise ValueError(f"{where}: rows are not of unit norm (tr(M^T M / s) = {np.trace(A):.6g} > 1), which the "
                         "privacy calibration assumes")


def check_local_operator(op: LocalOperator, cfg: Mapping[str, Any], where: str) -> None:
    """:func:`check_local_matrix` on an operator: its Gram matrix when it has one, else from the column sums of
    squares (``diag(M_i^T M_i)``, computed block by block)."""
    if op.gram is not None:
        check_local_matrix(op.gram, op.num_rows, cfg, where)
        return
    if op.num_rows < 1:
        raise ValueError(f"{where}: the partition has no rows")
    squares = op.column_squares()
    if not (np.all(np.isfinite(squares)) and np.all(np.isfinite(op.row_sum))):
        raise ValueError(f"{where}: M^T M / s has non-finite entries (the data are too large in magnitude); "
                         "rescale them or set row-normalize = true")
    trace = float(squares.sum()) / op.num_rows
    if cfg["row-normalize"] and trace > 1.0 + 1e-9:
        raise ValueError(f"{where}: rows are not of unit norm (tr(M^T M / s) = {trace:.6g} > 1), which the "
                         "privacy calibration assumes")
