"""A site's part of the outlier passes (:mod:`fl_strategies.kernels.outliers`): its score sums, then its flags.

After a fit the server sends the model's top ``p`` components (p, d) with its mean, scale and scaling twice:

* ``phase = "outlier-scores"``: the site scores the people in its fit with them, as ``transform`` scores
  (:func:`fl_strategies.files.pca.transform`), and answers ``[sum of scores (p,), sum of squared scores (p,)]``
  with its count: sums, never rows;
* ``phase = "outlier-flags"``, with the federation's ``score-mean`` and ``score-sd`` (p,) and ``outlier-sigma``:
  the site flags its people beyond ``sigma`` sd on any of those PCs (:func:`~fl_strategies.kernels.outliers.flagged`),
  removes them from its fit from now on (node state: :meth:`client_app.data.NodeData.remove`) and answers their
  number alone (metric ``outliers``); who they are never leaves the site (``transform`` lists them there).
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np
from flwr.client import NumPyClient

from fl_strategies.files.pca import transform
from fl_strategies.kernels.outliers import flagged, score_sums

__all__ = ["OUTLIER_PHASES", "OutlierClient"]

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
        if config.get("phase") == "outlier-scores":
            n, sums, squares = score_sums(scores)
            return [sums, squares], n, metrics
        p = components.shape[0]
        flags = flagged(scores, floats(config, "score-mean", p), floats(config, "score-sd", p),
                        float(config["outlier-sigma"]))
        if flags.all():
            raise ValueError(f"{self.data.source}: all {flags.size} people in its fit are outliers: the site would "
                             "have nobody left to fit on")
        people = np.arange(X.file_rows) if X.people is None else X.people
        self.data.remove(people[flags])
        return [np.zeros(0)], int(flags.size - flags.sum()), {**metrics, "outliers": int(flags.sum())}


def removed_people(model_path: str, model: Mapping[str, Any], X, data_path: str) -> list[tuple[str, str]] | None:
    """``(FID, IID)`` of the people a site removed as outliers in the run of ``model`` (read from ``model_path``),
    recomputed at the site from the passes the model records (:func:`fl_strategies.files.pca.outlier_passes`,
    :func:`~fl_strategies.kernels.outliers.site_outliers`): each pass's model scores the site's people then in the
    fit (its ``.keep``'s, less those removed before) and the federation's recorded moments flag them, as the site
    did during the run; in file order. ``None`` for a run without ``outlier-sigma``. ``X`` is the site's genotype
    file as the model's variants, ``data_path`` its path (its ``.fam`` and ``.keep``)."""
    from fl_strategies.files.keep import site_keep
    from fl_strategies.files.pca import outlier_passes
    from fl_strategies.files.variants import read_fam
    from fl_strategies.kernels.outliers import site_outliers

    sigma, passes = outlier_passes(model_path, model)
    if not passes:
        return None
    keep = site_keep(data_path)
    people = np.arange(X.num_rows) if keep is None else keep[1]
    removed = site_outliers(lambda pass_model, chosen: transform(pass_model, X.subset(chosen)), people, passes,
                            sigma)
    fam = read_fam(data_path)
    return [tuple(fam[i][:2]) for i in np.sort(removed)]


def remove_file_text(people: list[tuple[str, str]]) -> str:
    """plink's ``--remove`` format: ``FID IID`` one person a line."""
    return "".join(f"{fid}\t{iid}\n" for fid, iid in people)
