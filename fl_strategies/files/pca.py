"""The PCA model an eigenspace run produces, in scikit-learn's names and shapes, and its use on new rows.

After the last round the server sends the final basis ``Z`` (d x r) to every
client once more (the *summary* exchange) and each client answers
``A_i Z`` (d x r) and ``tr(A_i)`` (a scalar), where ``A_i = M_i^T M_i / s_i``
is its (centred, with ``center = true``) second-moment matrix. With
``C = (1/n) sum_i s_i A_i`` the server forms the Rayleigh-Ritz matrix
``B = Z^T C Z`` (r x r) from those sums alone, and :func:`pca_model`
rotates ``Z`` to the eigenvectors of ``B``: the components, sorted by
explained variance. The Ritz values are the exact eigenvalues of ``C`` when
``Z`` spans an invariant subspace, and lower bounds otherwise (Cauchy
interlacing), so an explained-variance ratio is never overstated.

Conventions follow :class:`sklearn.decomposition.PCA`: ``explained_variance``
uses the ``n - 1`` denominator, ``singular_values`` are those of the centred
data matrix, ``components`` has one component per row, and each component's sign
is scikit-learn's (:func:`sklearn_signs`: its entry of largest magnitude is
positive), so that ``components`` and the scores of :func:`transform` equal
``PCA(n_components=k).fit(X)``'s entry for entry. Without centring the
``mean`` is zero and the model is the uncentred PCA (the FedPower papers'
covariance ``(1/n) X^T X``); the file says which (``centered``).

A noisy run has no summary exchange (its exact ``A_i Z`` would not be covered
by the privacy guarantee). Its model is post-processing of its last released
product instead (:func:`released_product_model`): ``Y ~ C Z`` (d x r), whose
left singular vectors span ``orth(Y)``, the run's final estimate, and whose
singular values estimate the explained variance; ``tr(C)`` is not released, so
the explained-variance ratio is NaN.

With ``scale = true`` the clients' matrices are
those of the standardised rows ``(x - mean) / scale``
(:mod:`fl_strategies.kernels.standardize`) and the model is scikit-learn's
``StandardScaler`` followed by ``PCA``: ``scale`` is ``StandardScaler.scale_``
and the explained variances are those of the standardised columns. Without
scaling ``scale`` is all ones.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from ..kernels.rows import BedVariants
from .data_files import clip_rows, normalize_rows
from .model_checks import MODEL_KEYS, checked_model
from .plain_files import write_file
from .variants import decode_variants, encode_variants

__all__ = ["MODEL_KEYS", "OUTLIER_PASS_KEYS", "outlier_passes", "pca_model", "sklearn_signs",
           "released_product_model", "choose_rank", "save_model", "load_model", "transform"]

MISSINGNESS_DIAGONAL = "missingness-diagonal"
"""Summary-config key: the server asks every site for its part of plink2's diagonal (a run over ``.bed`` files with
missing calls and ``scale = "hwe"``; :func:`pca_model`'s ``diagonal``)."""

PRODUCT_KNOWN = "product-known"
"""Summary-config key: the server holds ``C Z`` at the estimate already (``krylov``: ``C Q V`` from its basis's
products), so every site leaves ``A_i Z`` out of its reply (the right pass over its file) and sends ``tr(A_i)``, and
plink2's diagonal where asked, alone."""

KRYLOV_BASIS = "krylov-basis"
"""Round- and summary-config key of ``krylov``: the id of the server's Krylov basis (new for every basis: a fit, a
thick restart, a resumed run). With :data:`KRYLOV_BLOCK` in a round, a ``.bed`` site keeps ``X Q_j`` of the
broadcast block and, the first time, its people's row squares (:meth:`~fl_strategies.kernels.products.
LocalOperator.product_keeping`); with :data:`KRYLOV_COORDINATES` in the summary, it answers from them without
reading its file (:meth:`~fl_strategies.kernels.products.LocalOperator.kept_left`), else with a read as before."""

KRYLOV_BLOCK = "krylov-block"
"""Round-config key of ``krylov``: the index ``j`` of the broadcast block ``Q_j`` in the basis :data:`KRYLOV_BASIS`."""

KRYLOV_COORDINATES = "krylov-coordinates"
"""Summary-config key of ``krylov``: ``V`` (q r, r) float64 as bytes, the estimate's coordinates in the blocks
``0 .. q - 1`` of the basis :data:`KRYLOV_BASIS` (``Z = [Q_0 ... Q_{q-1}] V``), so that ``X Z = [X Q_0 ... X
Q_{q-1}] V`` from a site's kept blocks."""



def sklearn_signs(components: np.ndarray) -> np.ndarray:
    """``components`` (k, d) with each row's sign chosen as scikit-learn's PCA chooses it.

    scikit-learn's ``PCA`` applies ``sklearn.utils.extmath.svd_flip(U, Vt, u_based_decision=False)`` with every
    solver (read in ``sklearn/decomposition/_pca.py`` of the installed 1.9.1; since 1.5, when the
    ``covariance_eigh`` solver came: older versions decided by the columns of ``U``, which can give other
    signs): each row of ``Vt`` is multiplied by the sign of its entry of largest magnitude, the first one where
    several tie, so that entry is positive. The same rule here gives the same components from the same span,
    entry for entry. Two entries of equal magnitude up to rounding may be told apart differently by the two
    computations; a row of zeros is kept as it is.

    Parameters
    ----------
    components : ndarray of shape (k, d)

    Returns
    -------
    ndarray of shape (k, d)
        A new array; row ``j`` is ``components[j]`` or ``-components[j]``.
    """
    components = np.asarray(components, dtype=np.float64)
    largest = components[np.arange(components.shape[0]), np.argmax(np.abs(components), axis=1)]
    return components * np.where(largest < 0, -1.0, 1.0)[:, None]


def pca_model(Z: np.ndarray, CZ: np.ndarray, total_variance: float, n_samples: int, mean: np.ndarray,
              k: int, scale: np.ndarray | None = None,
              diagonal: tuple[np.ndarray, float] | None = None) -> dict[str, Any]:
    """The first ``k`` principal components from a basis and the pooled products of the summary exchange.

    Parameters
    ----------
    Z : ndarray of shape (d, r)
        The run's orthonormal estimate.
    CZ : ndarray of shape (d, r)
        ``C Z`` with ``C = (1/n) sum_i s_i A_i`` (the clients' replies, weighted by rows, summed, over ``n``).
    total_variance : float
        ``tr(C)``; NaN when it is unknown (the ratio is then NaN).
    n_samples : int
        ``n``, rows over all clients.
    mean : ndarray of shape (d,)
        The mean the clients centred their rows with (zeros without centring).
    k : int
        Components kept, ``1 <= k <= r``.
    scale : ndarray of shape (d,), optional
        The columns' scales the clients divided by (``scale = true``); ``None``: ones.
    diagonal : (ndarray of shape (r, r), float), optional
        plink2's diagonal for genotypes with missing calls, summed over the sites
        (:meth:`~fl_strategies.kernels.rows.BedVariants.missingness_diagonal`: ``S`` and ``sum_i delta_i``). The
        components stay the eigenvectors of ``C``; ``explained_variance`` and the ratio become those of plink2's
        matrix ``K`` (``X X^T / N``), to first order in its diagonal ``delta``: with ``C v = lam v``, ``v = Z g``,
        ``K``'s eigenvalue is ``n lam / d + g^T S g / (n lam)``, so ``lam`` gains ``d g^T S g / (n^2 lam)`` and
        ``tr(C)`` gains ``d sum_i delta_i / n``. ``singular_values`` stay ``sqrt(n lam)`` of ``C``: the norm that
        makes a site's scores plink2's unit-norm eigenvectors (:func:`~fl_strategies.files.plink_outputs`).

    Returns
    -------
    dict
        :data:`MODEL_KEYS`: ``components`` (k, d), signs as scikit-learn's (:func:`sklearn_signs`), ``mean``
        (d,), ``scale`` (d,), ``explained_variance`` (k,), ``explained_variance_ratio`` (k,), ``singular_values``
        (k,), ``n_samples`` (int).
    """
    B = Z.T @ CZ
    values, W = np.linalg.eigh((B + B.T) / 2.0)
    order = np.argsort(values)[::-1][:k]
    lam = np.clip(values[order], 0.0, None)
    n = int(n_samples)
    explained = lam
    if diagonal is not None:  # plink2's eigenvalues (diagonal N_ii = c_i), to first order
        S, delta = diagonal
        d, G = Z.shape[0], W[:, order]
        gain = d * np.einsum("aj,ab,bj->j", G, np.asarray(S, dtype=np.float64), G) / (n * n)
        explained = lam + np.divide(gain, lam, out=np.zeros_like(lam), where=lam > 0)
        total_variance = total_variance + d * float(delta) / n
    components = sklearn_signs((Z @ W[:, order]).T)
    return {"components": np.ascontiguousarray(components), "mean": np.asarray(mean, dtype=np.float64),
            "scale": np.ones(Z.shape[0]) if scale is None else np.asarray(scale, dtype=np.float64),
            "explained_variance": explained * n / max(n - 1, 1),
            "explained_variance_ratio": (explained / total_variance if total_variance > 0
                                         else np.zeros_like(lam))
            if np.isfinite(total_variance) else np.full_like(lam, np.nan),
            "singular_values": np.sqrt(lam * n), "n_samples": n}


def released_product_model(Y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(Z, CZ)`` for :func:`pca_model` from a released product ``Y ~ C Z_prev`` (module docstring).

    Parameters
    ----------
    Y : ndarray of shape (d, r)
        The last released (noisy) product, over ``n``: ``C Z_prev`` plus noise.

    Returns
    -------
    Z : ndarray of shape (d, r)
        The left singular vectors of ``Y`` (the same span as ``orth(Y)``).
    CZ : ndarray of shape (d, r)
        ``Z diag(sv)`` with ``sv`` the singular values of ``Y``, so that ``Z^T CZ = diag(sv)``: the explained
        variance. Exact (the eigenvalues of ``C``) when ``Z_prev`` spans an invariant subspace and there is no
        noise; under noise biased upward, by about ``nu sqrt(d)`` for per-entry noise std ``nu`` of ``Y``.
    """
    U, values, _ = np.linalg.svd(Y, full_matrices=False)
    return U, U * values


def choose_rank(ratios: np.ndarray, target: float) -> int:
    """The smallest ``k`` whose cumulative explained-variance ratio reaches ``target`` (``len(ratios)`` if none).

    ``ratios`` are the Ritz ratios of the ``r = iteration-rank`` columns, lower
    bounds of the exact ones: when the target is not reached within ``r``
    columns the answer is ``r``, and a larger ``iteration-rank`` may be needed.
    """
    reached = np.nonzero(np.cumsum(ratios) >= target - 1e-15)[0]
    return int(reached[0]) + 1 if reached.size else len(ratios)


def prune_text(ids) -> str:
    """Variant IDs one per line, as plink2 writes ``prune.in`` and ``prune.out``."""
    return "".join(f"{vid}\n" for vid in ids)


def save_model(path: str | Path, model: Mapping[str, Any], run_config: Mapping[str, Any],
               privacy: Mapping[str, Any] | None = None) -> Path:
    """Write ``model`` to ``path`` (``.npz``, :func:`fl_strategies.files.plain_files.write_file`) with the run config.

    The run config travels as JSON (``run_config``), with the privacy spent (``privacy``), ``centered`` (whether
    ``mean`` is the rows' mean or zero: the uncentred model), ``row_normalize`` and ``clip_norm``, which
    :func:`transform` applies to new rows as the run did; a run over ``.bed`` files adds ``variants``, one
    ``ID\tA1\tA2`` line per column (A1 the allele counted), and with ``indep-pairwise`` ``prune_in`` and
    ``prune_out`` (:func:`prune_text`: the IDs kept, the model's, and removed).
    """
    fields = dict(**{key: np.asarray(model[key]) for key in MODEL_KEYS},
             centered=np.asarray(bool(run_config.get("center", False))),
             row_normalize=np.asarray(bool(run_config.get("row-normalize", False))),
             clip_norm=np.asarray(float(run_config.get("clip-norm", 0.0))),
             run_config=np.asarray(json.dumps(dict(run_config), sort_keys=True, default=str)),
             privacy=np.asarray(json.dumps(dict(privacy or {}), sort_keys=True, default=str)))
    if model.get("variants") is not None:  # the .bed variants of the columns: ID, A1 (counted), A2 per line
        fields["variants"] = np.asarray(encode_variants(model["variants"]).decode("utf-8"))
    for key in ("prune_in", "prune_out"):  # indep-pairwise: the IDs kept and removed, one per line
        if model.get(key) is not None:
            fields[key] = np.asarray(prune_text(model[key]))
    if model.get("outlier_passes"):  # outlier-sigma: each pass's model and moments, for a site's list at the site
        fields["outlier_sigma"] = np.asarray(float(model["outlier_sigma"]))
        for number, record in enumerate(model["outlier_passes"]):
            for key in OUTLIER_PASS_KEYS:
                fields[f"outlier_{number}_{key}"] = np.asarray(record[key])
            if record.get("variants") is not None:  # the pass's fit's variants (the filters ran over its people)
                fields[f"outlier_{number}_variants"] = np.asarray(encode_variants(record["variants"]).decode("utf-8"))
    return write_file(path, lambda handle: np.savez(handle, **fields))


OUTLIER_PASS_KEYS = ("components", "mean", "scale", "score_mean", "score_sd")
"""The arrays of an outlier pass in ``pca.npz`` (``outlier_<t>_<key>``, t from 0): the components the sites scored
with (p, d_t), the model's mean and scale (d_t,), the federation's mean and standard deviation of the scores (p,);
over ``.bed`` data also ``outlier_<t>_variants``, the pass's ``d_t`` variants (``ID\tA1\tA2`` lines, as
``variants``): each fit filters and prunes the variants again over the people left."""


def outlier_passes(path: str | Path, model: Mapping[str, Any], what: str = "--model"
                   ) -> tuple[float, list[dict[str, Any]]]:
    """The outlier passes a ``pca.npz`` records (:func:`save_model`), checked against its ``model``
    (:func:`load_model`): ``(sigma, passes)``, each pass ``{"model", "pcs", "mean", "sd"}`` as
    :func:`fl_strategies.kernels.outliers.site_outliers` reads it (the pass model's ``variants``: its own, or the
    model's where it records none); ``(0.0, [])`` for a run without outlier-sigma. A ``ValueError`` naming the field
    that does not fit."""
    passes: list[dict[str, Any]] = []
    with np.load(path, allow_pickle=False) as stored:
        if "outlier_sigma" not in stored.files:
            return 0.0, passes
        sigma = float(stored["outlier_sigma"])
        while f"outlier_{len(passes)}_components" in stored.files:
            number = len(passes)
            variants, d = model.get("variants"), model["components"].shape[1]
            if f"outlier_{number}_variants" in stored.files:
                try:
                    variants = decode_variants(str(stored[f"outlier_{number}_variants"]).encode("utf-8"))
                except (ValueError, UnicodeDecodeError) as ex:
                    raise ValueError(f"{what} {str(path)!r}: outlier_{number}_variants: {ex}") from None
                d = len(variants)
            arrays = {}
            for key in OUTLIER_PASS_KEYS:
                name = f"outlier_{number}_{key}"
                if name not in stored.files:
                    raise ValueError(f"{what} {str(path)!r}: lacks {name}")
                arrays[key] = np.asarray(stored[name], dtype=np.float64)
            p = arrays["components"].shape[0] if arrays["components"].ndim == 2 else -1
            want = {"components": (p, d), "mean": (d,), "scale": (d,), "score_mean": (p,), "score_sd": (p,)}
            for key, value in arrays.items():
                if p < 1 or value.shape != want[key] or not np.all(np.isfinite(value)):
                    raise ValueError(f"{what} {str(path)!r}: outlier_{number}_{key} has shape {value.shape} or "
                                     f"non-finite entries; expected {want[key]}")
            passes.append({"model": {"components": arrays["components"], "mean": arrays["mean"],
                                     "scale": arrays["scale"], "scaling": model.get("scaling", "false"),
                                     "row_normalize": False, "clip_norm": 0.0, "variants": variants},
                           "pcs": p, "mean": arrays["score_mean"], "sd": arrays["score_sd"]})
    if not (np.isfinite(sigma) and sigma > 0 and passes):
        raise ValueError(f"{what} {str(path)!r}: outlier_sigma {sigma} without outlier passes, or not > 0")
    return sigma, passes


def load_model(path: str | Path, what: str = "--model") -> dict[str, Any]:
    """Read a model written by :func:`save_model`, every field checked before any use
    (:func:`fl_strategies.files.model_checks.checked_model`, which lists the checks); ``what`` names the path in the
    messages (an option or key).

    Raises
    ------
    ValueError
        One line naming the field that fails a check (a missing key, a shape that does not fit, a non-finite
        value, components that are not orthonormal, a scale out of range, an array larger than its bound, ...).
    """
    return checked_model(path, what)


def transform(model: Mapping[str, Any], X: np.ndarray) -> np.ndarray:
    """Scores of rows ``X`` (m, d): ``((X - mean) / scale) @ components.T``, shape (m, k), as ``PCA.transform``
    (after ``StandardScaler.transform`` when the run scaled its columns).

    Rows are scaled to unit norm first when the run did so (``row_normalize`` of the model), or the rows longer
    than the run's ``clip-norm`` scaled down to it (``clip_norm`` of the model). A PLINK ``.bed`` file
    (:class:`~fl_strategies.kernels.rows.BedVariants`) is read once in its variant order, a missing call given the
    model's mean (0 after centring).
    """
    if isinstance(X, BedVariants):
        if X.dimension != model["components"].shape[1]:
            raise ValueError(f"the rows have {X.dimension} variants; the model needs {model['components'].shape[1]}")
        if not (model.get("row_normalize", False) or model.get("clip_norm", 0.0) > 0):
            scores = X.left(model["components"].T, model["mean"], model.get("scale"))
            if model.get("scaling") == "hwe":  # a person's scores over their share of calls, as the run weighted
                scores *= np.sqrt(X.missingness_weights())[:, None]
            return scores
        X = next(X.blocks())
    X = np.asarray(X, dtype=np.float64)
    d = model["components"].shape[1]
    if X.ndim != 2 or X.shape[1] != d:
        raise ValueError(f"the rows have shape {X.shape}; the model needs {d} columns")
    if model.get("row_normalize", False):
        X = normalize_rows(X)
    if model.get("clip_norm", 0.0) > 0:
        X = clip_rows(X, float(model["clip_norm"]))
    return ((X - model["mean"]) / model.get("scale", 1.0)) @ model["components"].T
