"""A site's part of the outlier passes (:mod:`fl_strategies.kernels.outliers`): its score sums, then its flags.

After a fit the server sends the model's top ``p`` components (p, d) with its mean, scale and scaling twice:

* ``phase = "outlier-scores"``: the site scores the people in its fit with them, as ``transform`` scores
  (:func:`fl_strategies.files.pca.transform`), and answers ``[sum of scores (p,), sum of squared scores (p,)]``
  with its count: sums, never rows;
* ``phase = "outlier-flags"``, with the federation's ``score-mean`` and ``score-sd`` (p,) and ``outlier-sigma``:
  the site flags its people beyond ``sigma`` sd on any of those PCs (:func:`~fl_strategies.kernels.outliers.flagged`),
  removes them from its fit from now on (node state: :meth:`client_app.data.NodeData.remove`; the run's variant
  list is dropped, :meth:`~client_app.data.NodeData.forget_variants`: a next fit is discovered afresh) and answers their
  number alone (metric ``outliers``) and logs it in its own log; who they are never leaves the site (``transform``
  lists them there).

Under ``secure-aggregation = true`` (the instructions carry the limb code, ``secagg-exponent`` and
``secagg-clients``: :func:`fl_strategies.protocol.outlier_exchange.secure_outlier_pass`) the same values travel as
one vector of fixed-point limbs through SecAgg+, with weight 1 and metrics holding only the partition id:
``[s_i, sums (p,), squares (p,)]``, then ``[count]``; the server learns their sums over the sites only.
"""

from __future__ import annotations

import logging
from typing import Any, Mapping

import numpy as np
from flwr.client import NumPyClient

from fl_strategies.files.pca import transform
from fl_strategies.kernels.outliers import flagged, score_sums
from fl_strategies.privacy.fixed_point import LimbCode

__all__ = ["OUTLIER_PHASES", "OutlierClient"]

log = logging.getLogger("flwr.fedspectral")

OUTLIER_PHASES = ("outlier-scores", "outlier-flags")
"""The ``phase`` of the two instructions of an outlier pass."""


def floats(config: Mapping[str, Any], key: str, size: int) -> np.ndarray:
    """``config[key]``, ``size`` float64 numbers sent as bytes; a ``ValueError`` naming it otherwise."""
    value = config.get(key)
    if not isinstance(value, bytes) or len(value) != 8 * size:
        raise ValueError(f"the outlier pass's {key} is not {size} float64 numbers")
    return np.frombuffer(value, dtype="<f8").astype(np.float64)


def pass_model(components: np.ndarray, config: Mapping[str, Any]) -> dict[str, Any]:
    """The model the server sent (``components`` (p, d), ``outlier-mean``, ``outlier-scale``, ``outlier-scaling``)
    as :func:`~fl_strategies.files.pca.transform` reads one."""
    d = components.shape[1]
    return {"components": components, "mean": floats(config, "outlier-mean", d),
            "scale": floats(config, "outlier-scale", d), "scaling": str(config.get("outlier-scaling", "false")),
            "row_normalize": False, "clip_norm": 0.0}


class OutlierClient(NumPyClient):
    """Answers the two instructions of an outlier pass for the node's data (:class:`client_app.data.NodeData`)."""

    def __init__(self, data) -> None:
        self.data = data

    def fit(self, parameters, config):
        """Score sums (``outlier-scores``) or flags (``outlier-flags``) of the people in the fit."""
        (components,) = parameters
        if components.ndim != 2 or not np.all(np.isfinite(components)):
            raise ValueError(f"the outlier pass's components have shape {components.shape} or non-finite values")
        X = self.data.people_in_fit()
        if X.dimension != components.shape[1]:
            raise ValueError(f"{self.data.source}: the outlier pass's components have {components.shape[1]} "
                             f"columns, the node's fit {X.dimension} variants")
        scores = transform(pass_model(components, config), X)
        metrics = {"partition-id": self.data.partition_id}
        code = LimbCode(int(config["secagg-clients"]), int(config["secagg-exponent"])) \
            if "secagg-exponent" in config else None
        if config.get("phase") == "outlier-scores":
            n, sums, squares = score_sums(scores)
            if code is not None:
                return self._limbs(code, [[float(n)], sums, squares]), 1, metrics
            return [sums, squares], n, metrics
        p = components.shape[0]
        flags = flagged(scores, floats(config, "score-mean", p), floats(config, "score-sd", p),
                        float(config["outlier-sigma"]))
        if flags.all():
            raise ValueError(f"{self.data.source}: all {flags.size} people in its fit are outliers: the site would "
                             "have nobody left to fit on")
        people = np.arange(X.file_rows) if X.people is None else X.people
        self.data.remove(people[flags])
        self.data.forget_variants()  # a next fit starts from discovery: the filters and pruning again
        removed = int(flags.sum())
        log.info("%s: %d of the %d people in its fit beyond %g sd of the federation's scores: left out of the fit "
                 "(this site's count, in its own log%s)", self.data.source, removed, flags.size,
                 float(config["outlier-sigma"]), "; the server learns only the SecAgg+ sum of the sites' counts"
                 if code is not None else "")
        if code is not None:
            return self._limbs(code, [[float(removed)]]), 1, metrics
        return [np.zeros(0)], int(flags.size - removed), {**metrics, "outliers": removed}

    def _limbs(self, code: LimbCode, values: list) -> list[np.ndarray]:
        """``values`` as one vector of limbs for SecAgg+ (:class:`client_app.secure_power_client.SecurePowerClient`
        uploads the same way); a value beyond the public bound is refused, nothing uploaded."""
        try:
            return [code.encode(np.concatenate([np.asarray(v, dtype=np.float64).ravel() for v in values])).ravel()]
        except ValueError:
            raise ValueError(f"partition {self.data.partition_id}: an outlier pass's value is not finite or exceeds "
                             f"the fixed-point range {code.max_value:.6g} of the server's public bound; nothing is "
                             "uploaded") from None


def removed_people(model_path: str, model: Mapping[str, Any], X, data_path: str) -> list[tuple[str, str]] | None:
    """``(FID, IID)`` of the people a site removed as outliers in the run of ``model`` (read from ``model_path``),
    recomputed at the site from the passes the model records (:func:`fl_strategies.files.pca.outlier_passes`,
    :func:`~fl_strategies.kernels.outliers.site_outliers`): each pass's model (over its own fit's variants where they
    differ from the model's: the file read again as those) scores the site's people then in the
    fit (its ``.keep``'s, less those removed before) and the federation's recorded moments flag them, as the site
    did during the run; in file order. ``None`` for a run without ``outlier-sigma``. ``X`` is the site's genotype
    file as the model's variants, ``data_path`` its path (its ``.fam`` and ``.keep``)."""
    from fl_strategies.files.data_files import open_samples
    from fl_strategies.files.keep import site_keep
    from fl_strategies.files.pca import outlier_passes
    from fl_strategies.files.variants import as_variants, read_fam
    from fl_strategies.kernels.outliers import site_outliers

    sigma, passes = outlier_passes(model_path, model)
    if not passes:
        return None
    keep = site_keep(data_path)
    people = np.arange(X.num_rows) if keep is None else keep[1]

    def scores(pass_model: Mapping[str, Any], chosen: np.ndarray) -> np.ndarray:
        variants = pass_model.get("variants")  # a pass's own fit's variants: the file read as those
        rows = X if variants is None or variants == model.get("variants") else \
            as_variants(open_samples(data_path, "--data"), data_path, variants, "--data")
        return transform(pass_model, rows.subset(chosen))

    removed = site_outliers(scores, people, passes, sigma)
    fam = read_fam(data_path)
    return [tuple(fam[i][:2]) for i in np.sort(removed)]


def remove_file_text(people: list[tuple[str, str]]) -> str:
    """plink's ``--remove`` format: ``FID IID`` one person a line."""
    return "".join(f"{fid}\t{iid}\n" for fid, iid in people)
