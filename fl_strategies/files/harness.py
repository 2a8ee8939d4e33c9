"""Where a simulation harness plugs into the product: a server-side evaluator and a client-side data source.

The product (``fl_strategies``, ``client_app``, ``server_app``) never imports
the simulation tooling. In a deployment the rows live only on the nodes
(``data-path`` in each node's config), the server holds no data, and nothing
here is used. A simulation generates its data instead; the harness that does
so is found through the entry-point group :data:`ENTRY_POINT_GROUP` (the
installed ``fedspectral`` registers :mod:`simulations.harness` there) and
consulted only for a run whose ``dataset`` it claims. It then plays two roles,
as Flower's ``evaluate_fn`` does for a strategy:

* **client-side data source**: a node without ``data-path`` takes its
  partition from :meth:`Harness.client_rows` / :meth:`Harness.client_covariance`;
* **server-side evaluator and inputs**: :meth:`Harness.server_data` gives the
  dimension, the exact reference the strategies measure their estimate
  against (``evaluation``), and what an algorithm itself needs at the server
  when the run config does not name it (FedLRGD / FedAve: the server's own
  samples, ``server-data``; the MF baselines: ``sigma_1`` and ``sigma_r`` of
  the pooled matrix, ``mf-sigma-1`` / ``mf-sigma-r``).

A third-party harness registers an object with the methods of
:class:`Harness` under the same group.
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass
from functools import lru_cache
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, Mapping, Protocol

import numpy as np

from .data_files import FILE_SUFFIXES, GENOTYPE_SUFFIXES, is_genotype_file

__all__ = ["ENTRY_POINT_GROUP", "NODE_DATA", "Harness", "ServerData", "find_harness", "partition_file",
           "partition_files", "is_partition_folder", "node_files", "folder_partitions", "widths_listed", "on_nodes"]

ENTRY_POINT_GROUP = "fedspectral.harness"

NODE_DATA = "nodes"
"""``dataset`` of a run on the nodes' own files (``data-path``): no harness is looked up."""


PARTITION_NAME = re.compile(r"partition_(\d+)(\.[A-Za-z0-9]+)")
"""A name that reads as a node file: ``partition_<i>.<suffix>``; it is one when spelt exactly
``partition_<i>`` (``i`` without leading zeros) with a suffix of :data:`FILE_SUFFIXES`."""


def partition_files(folder: str | Path) -> dict[int, Path]:
    """Every node file of ``folder`` by partition: ``partition_<i>.npy`` (``.csv``, ``.npz``, ``.bed``), whatever
    kind of file it is (a FIFO is found here and named as one by the reader, never taken as missing).

    Raises
    ------
    ValueError
        One line naming the files, when a partition has two (``partition_1.npy`` and ``partition_1.csv``: which one
        is the owner's data is not for the program to guess), or a name reads as a node file but is not spelt as
        one (``partition_01.npy``, ``partition_1.NPY``: it would be left out); or the folder cannot be listed.
    """
    folder = Path(folder)
    try:
        names = sorted(os.listdir(folder))
    except OSError as ex:
        raise ValueError(f"{str(folder)!r}: cannot be listed: {ex.strerror or ex}") from None
    found: dict[int, list[str]] = {}
    odd = []
    for name in names:
        match = PARTITION_NAME.fullmatch(name)
        if match is None or match.group(2).lower() not in FILE_SUFFIXES:
            continue
        pid = int(match.group(1))
        if name != f"partition_{pid}{match.group(2).lower()}":
            odd.append(f"{name!r} (name it partition_{pid}{match.group(2).lower()})")
        else:
            found.setdefault(pid, []).append(name)
    if odd:
        raise ValueError(f"{str(folder)!r} holds {', '.join(odd)}, which no node would read: rename "
                         f"{'them' if len(odd) > 1 else 'it'}")
    for names in found.values():  # in the order of FILE_SUFFIXES (.npy first)
        names.sort(key=lambda name: FILE_SUFFIXES.index(Path(name).suffix))
    both = {pid: names for pid, names in found.items() if len(names) > 1}
    if both:
        pid, names = min(both.items())
        raise ValueError(f"{str(folder)!r} holds two files for partition {pid}: "
                         f"{' and '.join(repr(n) for n in names)}; keep one")
    return {pid: folder / names[0] for pid, names in sorted(found.items())}


def is_partition_folder(dataset: object) -> bool:
    """Whether ``dataset`` names a folder holding node files (a name :data:`PARTITION_NAME` matches, with a data
    suffix); such a folder is the simulation of node data."""
    if not isinstance(dataset, str) or not dataset.strip() or not Path(dataset).is_dir():
        return False
    try:
        return any(match is not None and match.group(2).lower() in FILE_SUFFIXES
                   for match in map(PARTITION_NAME.fullmatch, os.listdir(dataset)))
    except OSError:
        return False


def node_files(folder: str | Path, count: int, where: str) -> list[Path]:
    """The node files of ``folder`` for ``count`` clients: exactly ``partition_0 .. partition_<count-1>``.

    The one rule of every command that takes a folder of node files (``run`` with ``dataset = "FOLDER"``,
    ``deploy --data-dir``, ``compare``, and the validation of the run config): each file is one owner's, so none
    is left out and none is guessed.

    Parameters
    ----------
    folder : str or Path
    count : int
        ``num-clients``.
    where : str
        How messages name the folder (``"the dataset folder 'data'"``, ``"--data-dir data"``).

    Returns
    -------
    list of Path
        File ``i`` is partition ``i``'s.

    Raises
    ------
    ValueError
        One line, with a hint that keeps every owner: :func:`partition_files`' refusals; no node file; numbers
        with a gap (``partition_0, _2, _3``: rename to ``0 .. N-1`` or add the missing partition's file); another
        number of files than ``count`` (set ``num-clients`` to it); PLINK ``.bed`` or ``.pgen`` files beside
        another format (a run reads one kind).
    """
    files = partition_files(folder)
    if not files:
        raise ValueError(f"{where} holds no node file (partition_<i> with a suffix {', '.join(FILE_SUFFIXES)})")
    numbers, n = list(files), len(files)
    if numbers != list(range(n)):
        missing = [pid for pid in range(numbers[-1] + 1) if pid not in files]
        listed = ", ".join(files[pid].name for pid in numbers[:8]) + (" ..." if n > 8 else "")
        hint = "partition " + ", ".join(map(str, missing[:5])) + (" ..." if len(missing) > 5 else "")
        raise ValueError(f"{where} holds {n} node file(s) ({listed}) but none for {hint}: each file is one "
                         f"owner's and partitions are numbered 0 .. N-1 without a gap; rename the files to "
                         f"partition_0 .. partition_{n - 1} (and set num-clients = {n}), or add the missing "
                         f"partition's file")
    if n != count:
        raise ValueError(f"num-clients = {count}, but {where} holds {n} per-client file(s) (partition_0 .. "
                         f"partition_{n - 1}): set num-clients = {n}, one client per file")
    kinds: dict[str, list[str]] = {}  # each PLINK format a kind of its own, the matrices (.npy, .csv, .npz) one
    for pid, path in files.items():
        kind = path.suffix.lower() if is_genotype_file(path) else "other"
        kinds.setdefault(kind, []).append(f"partition {pid} ({path.name})")
    if len(kinds) > 1 and set(kinds) & set(GENOTYPE_SUFFIXES):
        held = "; ".join(f"{'PLINK ' + kind if kind != 'other' else 'other data'}: {', '.join(names[:4])}"
                         for kind, names in sorted(kinds.items()))
        raise ValueError(f"{where} mixes kinds of node file ({held}): a run reads one kind of file at every node; "
                         "convert them to one format (plink2 --make-bed or --make-pgen converts genotypes)")
    return [files[pid] for pid in range(n)]


def partition_file(dataset: object, partition_id: int) -> Path | None:
    """``DIR/partition_<i>.npy`` (or ``.csv``, ``.npz``, ``.bed``) when ``dataset`` is a folder of per-client
    files, else ``None``.

    A folder of per-client files is the simulation of node data: each client
    reads only its own file and the server reads none (as with
    :data:`NODE_DATA`). A folder is one when it holds a node file
    (:func:`is_partition_folder`); the run config's validation checks that its files are exactly those of
    ``num-clients`` clients (:func:`node_files`).

    Raises
    ------
    ValueError
        As :func:`partition_files` (two files for the partition, a misspelt node file).
    """
    if not is_partition_folder(dataset):
        return None
    found = partition_files(dataset)
    return found.get(partition_id, Path(dataset) / f"partition_{partition_id}.npy")  # missing: the reader names it


def folder_partitions(dataset: object) -> int | None:
    """How many node files (:func:`partition_files`) a folder data set holds; ``None`` when ``dataset`` is not such
    a folder. Whether they fit the run is :func:`node_files`' to say."""
    if not is_partition_folder(dataset):
        return None
    return len(partition_files(dataset))


def widths_listed(by_width: Mapping[int, list[str]]) -> str:
    """``"d = 4: node a, node b; d = 6: node c"``: who holds rows of which width, when they disagree."""
    return "; ".join(f"d = {d}: {', '.join(holders)}" for d, holders in sorted(by_width.items()))


def on_nodes(cfg: Mapping[str, Any]) -> bool:
    """Whether the run's rows live only with the clients (``dataset = "nodes"`` or a folder of per-client files)."""
    return cfg["dataset"] == NODE_DATA or is_partition_folder(cfg["dataset"])


@dataclass(frozen=True)
class ServerData:
    """What a harness gives the server of one simulated run (nothing here is sent to a client).

    Attributes
    ----------
    dimension : int
        ``d``, the width of every client's rows.
    num_rows : int
        ``n``, the rows over all clients.
    reference : object or None
        The exact reference (``fl_strategies.kernels.metrics.Reference``, ``fl_strategies.kernels.mf.MFReference`` or
        ``erm.ErmReference``), or ``None`` when the run is not evaluated.
    server_rows : ndarray of shape (r, p + 1) or None
        FedLRGD / FedAve: the server's own samples, label in the last column.
    singular_values : ndarray of shape (min(n, d),) or None
        The MF baselines: the singular values of the pooled matrix (their step sizes use ``sigma_1``, ``sigma_r``).
    """

    dimension: int
    num_rows: int
    reference: Any = None
    server_rows: np.ndarray | None = None
    singular_values: np.ndarray | None = None


class Harness(Protocol):
    """The methods a simulation harness provides (see the module docstring)."""

    def claims(self, cfg: Mapping[str, Any]) -> bool:
        """Whether the run's ``dataset`` is one this harness builds."""

    def server_data(self, cfg: Mapping[str, Any], evaluate: bool) -> ServerData:
        """Dimension, row count, reference (if ``evaluate``) and server inputs; ``ValueError`` naming the key."""

    def client_rows(self, cfg: Mapping[str, Any], partition_id: int) -> Any:
        """Rows of one partition, shape ``(s_i, d)`` (an ndarray, or a scipy sparse matrix for interactions)."""

    def client_covariance(self, cfg: Mapping[str, Any], partition_id: int) -> tuple[np.ndarray, int]:
        """``(A_i = M_i^T M_i / s_i, s_i)`` of one partition, cached per process."""


def find_harness(cfg: Mapping[str, Any]) -> Harness | None:
    """The installed harness that claims ``cfg["dataset"]``, or ``None`` (always for data on the nodes).

    Entry points are loaded once per process; a harness that fails to load
    is skipped with a WARNING (a deployment without the simulation tooling still runs).
    """
    if on_nodes(cfg):
        return None
    for harness in _installed():
        if harness.claims(cfg):
            return harness
    return None


@lru_cache(maxsize=1)
def _installed() -> tuple[Harness, ...]:
    found = []
    for point in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda p: p.name):
        try:
            found.append(point.load())
        except Exception as ex:  # noqa: BLE001  (a broken plug-in must not stop a deployment)
            logging.getLogger("flwr.fedspectral").warning("simulation harness %r (entry point %s) cannot be loaded "
                                                          "and is ignored: %r", point.name, point.value, ex)
    return tuple(found)
