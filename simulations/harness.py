"""fedspectral's simulation harness, as the product sees it (:mod:`fl_strategies.files.harness`).

Registered under the entry-point group ``fedspectral.harness`` in
``pyproject.toml``; the ServerApp and the ClientApp load it only for a run
whose ``dataset`` it claims: a named generator or bundled set, a ``.npy`` /
``.csv`` file split by the ``partitioner``, a folder of user-item
interactions (``dp-power``), the supervised ``erm-*`` sets (FedLRGD,
FedAve). It claims every name but ``"nodes"`` (the rows are the nodes' own
``data-path`` files), so that a misspelt data set name gets the generators'
"did you mean" message.

* server side: the dimension, the exact reference (``evaluation``), the
  server's own samples of FedLRGD / FedAve and the pooled singular values the
  MF baselines' step sizes need;
* client side: a partition's rows, and its ``A_i = M_i^T M_i / s_i`` (cached
  per process: a Ray actor plays many nodes and rebuilds the client at every
  message, but never its data).
"""

from __future__ import annotations

import os
from typing import Any, Mapping

from fl_strategies.settings.config import ConfigError, check_against_data
from fl_strategies.files.harness import NODE_DATA, ServerData
from fl_strategies.settings.registry import spec

from simulations.data.datasets import sized
from simulations.data.federated_data import client_rows, data_shape, local_covariance, mf_reference, reference
from simulations.data.interaction_data import client_rows as interaction_client_rows
from simulations.data.interaction_data import interaction_reference, interaction_rows, is_interaction_folder

__all__ = ["HARNESS", "SimulationHarness", "check_memory"]

def check_memory(cfg: Mapping[str, Any]) -> None:
    """Refuse a generated data set that cannot fit in this machine's memory, before anything is allocated.

    The run holds the ``n x d`` data and ``d x d`` matrices (the pooled
    covariance, each client's ``A_i``, ``covariance``'s exchange); a typo such as
    ``dimension = 1e9`` would otherwise get the process killed by the operating
    system. An eigenspace strategy other than ``covariance`` forms a ``d x d``
    matrix only where it is no larger than the rows (a client's Gram matrix when
    ``s_i >= d``; the reference of wide data comes from the rows), so its ``d x d``
    term is at most ``3 min(d^2, n d)``. Files and bundled sets (``dimension = 0``)
    are not estimated.

    Raises
    ------
    ConfigError
        If ``8 (n d + 3 d^2)`` bytes (eigenspace strategies but ``covariance``:
        ``8 (n d + 3 min(d^2, n d))``) exceed the physical memory.
    """
    cfg = sized(cfg)
    d = cfg["dimension"]
    rows = cfg["num-clients"] * d if cfg["dataset"] == "fedpower-model2" else cfg["num-samples"]
    row_products = spec(cfg["strategy"]).family == "eigenspace" and cfg["strategy"] != "covariance"
    need = 8 * (rows * d + 3 * (min(d * d, rows * d) if row_products else d * d))
    try:
        have = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):  # not available on this platform
        return
    if need > have:
        raise ConfigError(f"num-samples = {cfg['num-samples']}, dimension = {d} (dataset {cfg['dataset']!r}) need "
                          f"about {need / 1e9:.3g} GB of memory for the data and the d x d matrices; this machine "
                          f"has {have / 1e9:.3g} GB")


class SimulationHarness:
    """The data sets of :mod:`simulations` as a client data source and a server-side evaluator."""

    def claims(self, cfg: Mapping[str, Any]) -> bool:
        """Every ``dataset`` but ``"nodes"``."""
        return cfg["dataset"] != NODE_DATA

    def server_data(self, cfg: Mapping[str, Any], evaluate: bool) -> ServerData:
        """Dimension, rows, the exact reference (with ``evaluate``) and the server's algorithm inputs.

        Eigenspace strategies: eigenpairs of the pooled covariance the run
        estimates (centred with ``center = true``); fedmf: the
        SVD of the pooled matrix; FedLRGD and FedAve: ``F*`` and the server's
        rows (supervised rows, the label in the last column).

        Raises
        ------
        ConfigError
            Naming the data set or key when the data cannot be built or used.
        """
        check_memory(cfg)
        family = spec(cfg["strategy"]).family  # erm: supervised rows [x, y], the server keeps server-samples rows
        if family == "erm":
            return self._erm(cfg, evaluate)
        if is_interaction_folder(cfg["dataset"]):  # user-item interactions (dp-power): sparse rows, the top items
            try:
                rows = interaction_rows(cfg)
                check_against_data(cfg, rows.shape[1], rows.shape[0])
                return ServerData(rows.shape[1], rows.shape[0], interaction_reference(cfg) if evaluate else None)
            except (ValueError, OSError, MemoryError) as ex:
                raise ConfigError(f"the interactions in {cfg['dataset']!r} cannot be used: {ex}") from ex
        try:  # the data set named by the config: its errors name the key at fault
            n, d = data_shape(cfg)  # a lazy data set is not generated here
        except ValueError as ex:
            raise ConfigError(str(ex)) from ex
        except MemoryError:
            raise ConfigError(f"the data set {cfg['dataset']!r} (num-samples = {cfg['num-samples']}, dimension = "
                              f"{cfg['dimension']}) does not fit in memory") from None
        check_against_data(cfg, d, n)
        mf = family == "mf"  # the reference is the singular values of the pooled S
        try:
            ref = (mf_reference if mf else reference)(cfg) if evaluate or mf else None
        except (ValueError, MemoryError) as ex:
            raise ConfigError(f"the exact reference (eigenvectors of the pooled covariance the run estimates) of "
                              f"the data set {cfg['dataset']!r} cannot be computed ({type(ex).__name__}: {ex}); "
                              "data too large in magnitude can be rescaled or used with row-normalize = true") from ex
        return ServerData(d, n, ref if evaluate else None,
                          singular_values=ref.singular_values if mf else None)

    @staticmethod
    def _erm(cfg: Mapping[str, Any], evaluate: bool) -> ServerData:
        from simulations.data.erm_data import erm_reference, erm_split  # late: only FedLRGD / FedAve runs need the ERM solver

        try:
            server, clients = erm_split(cfg)
            ref = erm_reference(cfg) if evaluate else None
        except (ValueError, MemoryError) as ex:
            raise ConfigError(f"the data of {cfg['strategy']} cannot be loaded: {ex}") from ex
        return ServerData(server.shape[1], sum(c.shape[0] for c in clients), ref, server_rows=server)

    def client_rows(self, cfg: Mapping[str, Any], partition_id: int):
        """Rows of one partition: the ERM split, a folder's users (sparse), or the split data set."""
        if spec(cfg["strategy"]).family == "erm":
            from simulations.data.erm_data import erm_client_rows

            return erm_client_rows(cfg, partition_id)
        if is_interaction_folder(cfg["dataset"]):
            return interaction_client_rows(cfg, partition_id)
        return client_rows(cfg, partition_id)

    def client_covariance(self, cfg: Mapping[str, Any], partition_id: int):
        """``(A_i, s_i)`` of one partition (cached per process by :func:`simulations.data.federated_data.local_covariance`)."""
        return local_covariance(cfg, partition_id)


HARNESS = SimulationHarness()
"""The object registered under the entry-point group ``fedspectral.harness``."""
