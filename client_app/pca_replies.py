"""What an eigenspace client tells the server besides its products: discovery properties and the summary.

Shared by the FedPower-family client and the FAPS client (:mod:`client_app.fedpower_client`,
:mod:`client_app.faps_client`). Everything here is a count, a ``d``-vector, a scalar or a fingerprint of the
data (keyed with the node's secret in a private run): never a row. Its functions take the whole run
configuration: what a node sends at discovery is decided by the rules the validation shares
(:func:`fl_strategies.settings.config.row_sums_at_discovery`, :func:`~fl_strategies.settings.config.secure_covariance`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fl_strategies.settings.config import column_scaling, row_sums_at_discovery, secure_covariance, secure_power
from fl_strategies.files.data_files import FINGERPRINT
from fl_strategies.files.pca import KRYLOV_BASIS, KRYLOV_COORDINATES, MISSINGNESS_DIAGONAL, PRODUCT_KNOWN
from fl_strategies.files.variants import encode_variants

from .ld_replies import asks_ld, ld_reply

__all__ = ["discovery_properties", "fingerprint_property", "summary_reply"]


def discovery_properties(data, cfg: dict[str, Any], dimension: int, noisy: bool,
                         config: dict[str, Any] | None = None) -> dict[str, Any]:
    """The node's answer to discovery: partition id, row count (not under SecAgg+) and ``d``; with ``center`` its
    row sum; with ``scale`` its per-column sums of squares about its own mean
    (:mod:`fl_strategies.kernels.standardize`); without noise its sum of squares ``sq-sum`` (the total variance
    of reference-free progress); for a ``.bed`` the digest of its variant list
    (:mod:`fl_strategies.files.variants`).

    The server's ``config`` may ask, where the sites' variant lists differ, for the node's variants
    (``variant-list``: its IDs and alleles only, nothing else), or send the run's list (``variant-align``), which
    the node keeps in its state and answers in its columns.

    Parameters
    ----------
    data : client_app.data.NodeData
        The node's data.
    cfg : dict
        Effective run config.
    dimension : int
        ``d``, the width of the node's rows.
    noisy : bool
        Whether the client adds privacy noise: then no ``sq-sum`` is sent (it would be released without noise).
    config : dict, optional
        The server's request (above); empty for the first discovery request.

    Returns
    -------
    dict
        Flower properties (scalars and bytes): ``partition-id``, ``dimension``, ``num-examples`` (not with
        ``secure-aggregation = true`` for power, ssi, fedpower, localpower: there the row count is summed by
        SecAgg+), and
        ``row-sum`` / ``col-sq-sum`` (``d`` float64 as bytes each) / ``sq-sum`` (float) as above; ``call-count``
        (``d`` float64) beside ``row-sum`` when the node's genotypes have missing calls; ``founder-sum`` and
        ``founder-count`` (``d`` float64 each) beside them when plink2's founders rule applies
        (:attr:`~client_app.data.NodeData.founder_sums`); ``variant-digest`` (str)
        for a ``.bed``, or ``variant-list`` (bytes) alone when asked for it.
    """
    config = config or {}
    if asks_ld(config):  # indep-pairwise's exchange (client_app.ld_replies)
        return ld_reply(data, config)
    bim = getattr(data, "bim", None)
    if config.get("variant-list"):
        if bim is None:
            raise ValueError(f"partition {data.partition_id}: the server asks for a variant list, but the node's "
                             "data are no .bed file")
        return {"partition-id": data.partition_id,
                "variant-list": encode_variants([(vid, a1, a2) for _, vid, _, a1, a2 in bim])}
    if isinstance(config.get("variant-align"), bytes):
        data.align(config["variant-align"])
        dimension = data.operator().shape[0]
    s = data.num_rows
    founders = getattr(data, "founder_sums", None) if cfg.get("center") else None
    if founders is not None and (noisy or not row_sums_at_discovery(cfg)) and not secure_power(cfg):
        raise ValueError(f"partition {data.partition_id}: its .fam has people with parents, whose allele frequencies "
                         "plink2 leaves out (founders only), which only a noise-free run without secure aggregation "
                         "sends apart (in the clear): set nonfounders = true to take every person's")
    props: dict[str, Any] = {"partition-id": data.partition_id, "dimension": dimension}
    if not secure_power(cfg):  # under SecAgg+ the row count goes only through the secure sum of the counts
        props["num-examples"] = s
    if row_sums_at_discovery(cfg):
        props["row-sum"] = data.row_sum.astype("<f8").tobytes()
        if founders is not None:  # plink2's founders rule: the allele frequencies from the founders alone
            props["founder-sum"], props["founder-count"] = (v.astype("<f8").tobytes() for v in founders)
        counts = getattr(data, "call_counts", None)
        if counts is not None:  # genotypes with missing calls: the row sum is over each variant's calls
            props["call-count"] = counts.astype("<f8").tobytes()
    if column_scaling(cfg.get("scale", False)) != "false" and row_sums_at_discovery(cfg):  # never with noise or SecAgg+
        props["col-sq-sum"] = data.column_sq_sums().astype("<f8").tobytes()
    if not noisy and not secure_covariance(cfg) and not secure_power(cfg):
        props["sq-sum"] = data.sum_of_squares(cfg["center"])
    if bim is not None:
        props["variant-digest"] = data.variant_digest
    return props


def fingerprint_property(data, cfg: dict[str, Any], noise) -> dict[str, str]:
    """``{"data-fingerprint": ...}`` in a run that checkpoints (``checkpoint-dir``), for data read from a file.

    The server records it with the checkpoint and refuses to resume on other data
    (:mod:`fl_strategies.protocol.checkpoint`); the node's noise keys it with the node's secret when it has one
    (:meth:`fl_strategies.privacy.noise.ClientNoise.fingerprint`).
    Empty without checkpoints or for generated data.
    """
    if not cfg["checkpoint-dir"]:
        return {}
    digest = data.fingerprint
    return {} if digest is None else {FINGERPRINT: noise.fingerprint(digest)}


def summary_left(A, Z: np.ndarray, config, partition_id: int) -> tuple[np.ndarray, np.ndarray] | None:
    """``(X Z, row squares)`` from the blocks a ``krylov`` site kept in the rounds where the summary's ``config``
    gives the estimate's coordinates in the server's basis (:data:`~fl_strategies.files.pca.KRYLOV_COORDINATES`),
    else ``None`` (the site reads its file).

    Raises
    ------
    ValueError
        If the coordinates are not ``q r x r`` float64 numbers for the broadcast ``Z`` (d, r).
    """
    basis, coordinates = config.get(KRYLOV_BASIS), config.get(KRYLOV_COORDINATES)
    if not basis or coordinates is None or not hasattr(A, "kept_left"):
        return None
    r = Z.shape[1]
    if not isinstance(coordinates, bytes) or not coordinates or len(coordinates) % (8 * r):
        raise ValueError(f"partition {partition_id}: the summary's {KRYLOV_COORDINATES} are not q r x r = {r} "
                         "float64 numbers")
    V = np.frombuffer(coordinates, dtype="<f8").reshape(-1, r).astype(np.float64)
    return A.kept_left(str(basis), V)


def summary_reply(A, Z: np.ndarray, s: int, noise_std: float, partition_id: int, config=None):
    """The summary exchange's reply (:mod:`fl_strategies.files.pca`): ``[A_i Z]``, ``s_i`` and ``tr(A_i)``.

    ``A`` is the client's (centred) local operator (:class:`fl_strategies.kernels.products.LocalOperator`). Where
    the server's ``config`` asks for it (:data:`MISSINGNESS_DIAGONAL`), also this site's part of plink2's diagonal
    (:meth:`~fl_strategies.kernels.rows.BedVariants.missingness_diagonal`): ``S_i`` (r, r) as the next array and
    ``sum delta`` as the metric ``diagonal``. Where the server holds ``C Z`` already (:data:`PRODUCT_KNOWN`),
    ``A_i Z`` is left out (no right pass over a ``.bed``): the arrays are ``[S_i]`` or none.

    Refused when the client adds privacy noise: the summary is exact, its release would not be covered.
    """
    if noise_std > 0:
        raise RuntimeError("a noisy client sends no summary: its exact A_i Z would not be covered by the privacy "
                           "guarantee")
    diagonal = bool((config or {}).get(MISSINGNESS_DIAGONAL))
    if diagonal and (not hasattr(A.rows, "missingness_diagonal") or A.mean is None):
        raise ValueError(f"partition {partition_id}: the server asks for plink2's diagonal, but the node's data are "
                         "no centred .bed file")
    known = bool((config or {}).get(PRODUCT_KNOWN))
    if A.gram is None and getattr(A.rows, "centers_inside", False):  # a .bed file: two reads for all of it (one
        left = summary_left(A, Z, config or {}, partition_id)  # without A_i Z; none from a krylov site's kept blocks)
        product, trace, parts = A.rows.summary(Z, A.mean, A.scale, diagonal, product=not known, left=left)
        product = [] if known else [product * (A.weight / A.num_rows)]
        trace = trace * A.weight / A.num_rows
        if not diagonal:
            return product, s, {"partition-id": partition_id, "trace": trace}
        return product + [parts[0]], s, {"partition-id": partition_id, "trace": trace, "diagonal": parts[1]}
    metrics = {"partition-id": partition_id, "trace": A.trace()}
    product = [] if known else [A @ Z]
    if not diagonal:
        return product, s, metrics
    S, delta = A.rows.missingness_diagonal(Z, A.mean, A.scale)
    return product + [S], s, {**metrics, "diagonal": delta}
