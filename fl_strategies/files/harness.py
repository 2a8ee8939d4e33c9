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
from dataclasses import dataclass
from functools import lru_cache
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, Mapping, Protocol

import numpy as np

from .data_files import FILE_SUFFIXES

__all__ = ["ENTRY_POINT_GROUP", "NODE_DATA", "Harness", "ServerData", "find_harness", "partition_file",
           "folder_partitions", "widths_listed", "on_nodes"]

ENTRY_POINT_GROUP = "fedspectral.harness"

NODE_DATA = "nodes"
"""``dataset`` of a run on the nodes' own files (``data-path``): no harness is looked up."""


def partition_file(dataset: object, partition_id: int) -> Path | None:
    """``DIR/partition_<i>.npy`` (or ``.csv``) when ``dataset`` is a folder of per-client files, else ``None``.

    A folder of per-client files is the simulation of node data: each client
    reads only its own file and the server reads none (as with
    :data:`NODE_DATA`). A folder is one when it holds ``partition_0.npy`` or
    ``partition_0.csv``.

    Raises
    ------
    ValueError
        If the partition has two files (``partition_<i>.npy`` and ``.csv``), naming both: which one is the
        owner's data is not for the program to guess.
    """
    if not isinstance(dataset, str) or not dataset.strip() or not Path(dataset).is_dir():
        return None
    folder = Path(dataset)
    if not any((folder / f"partition_0{suffix}").is_file() for suffix in FILE_SUFFIXES):
        return None
    found = _partition_files(folder, partition_id)
    return found[0] if found else folder / f"partition_{partition_id}.npy"  # missing: the reader names it


def _partition_files(folder: Path, partition_id: int) -> list[Path]:
    """The files of one partition in ``folder`` (at most one; :class:`ValueError` naming both otherwise)."""
    found = [folder / f"partition_{partition_id}{suffix}" for suffix in FILE_SUFFIXES
             if (folder / f"partition_{partition_id}{suffix}").is_file()]
    if len(found) > 1:
        raise ValueError(f"dataset folder {str(folder)!r} holds two files for partition {partition_id}: "
                         f"{' and '.join(repr(p.name) for p in found)}; keep one")
    return found


def folder_partitions(dataset: object) -> int | None:
    """How many per-client files ``partition_0 .. partition_<m-1>`` (``.npy`` or ``.csv``) a folder data set holds
    without a gap; ``None`` when ``dataset`` is not such a folder (:class:`ValueError` naming both files when a
    partition has two)."""
    if partition_file(dataset, 0) is None:
        return None
    folder, count = Path(dataset), 0
    while _partition_files(folder, count):
        count += 1
    return count


def widths_listed(by_width: Mapping[int, list[str]]) -> str:
    """``"d = 4: node a, node b; d = 6: node c"``: who holds rows of which width, when they disagree."""
    return "; ".join(f"d = {d}: {', '.join(holders)}" for d, holders in sorted(by_width.items()))


def on_nodes(cfg: Mapping[str, Any]) -> bool:
    """Whether the run's rows live only with the clients (``dataset = "nodes"`` or a folder of per-client files)."""
    return cfg["dataset"] == NODE_DATA or partition_file(cfg["dataset"], 0) is not None


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
