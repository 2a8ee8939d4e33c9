"""What a PCA of PLINK genotypes writes for a genomics pipeline: plink2's ``.eigenvec`` / ``.eigenval`` layouts, a
variant-weights file for ``plink2 --score`` with the model's allele frequencies as an ``.afreq``, and a picture of
the ancestry space.

Scales. plink2's ``--pca`` eigenvectors are those of its relationship matrix ``K = X X^T / d`` (``X`` (n, d) the
variance-standardised genotypes of all samples): unit norm over the pooled samples, and its eigenvalues
``sigma_k^2 / d`` with ``sigma_k`` the singular values of ``X``. The model's ``singular_values`` are the
``sigma_k`` and ``explained_variance = sigma_k^2 / (n - 1)``, so one site reproduces plink2's scale from the model
alone: eigenvector ``u_k = X v_k / sigma_k`` (:func:`plink2_eigenvectors`), eigenvalue
``explained_variance (n - 1) / d`` (:func:`plink2_eigenvalues`).

``plink2 --score`` with the weights of :func:`score_text`, the frequencies of :func:`afreq_text` and
``variance-standardize no-mean-imputation cols=+scoresums`` sums ``w_jk (g_ij - 2 p_j) / sqrt(2 p_j (1 - p_j))``
over person ``i``'s non-missing calls: with ``w_k = v_k / sigma_k`` that is ``u_ik`` before the correction for
missingness (``d / c_i``, ``c_i`` the person's calls: ``ALLELE_CT / 2`` of the same output), which a
``.eigenvec`` written by ``transform`` includes. (plink2 2.00a3.5 with mean imputation scores a missing call as
``+2 p / sqrt(2 p (1 - p))`` rather than 0; ``no-mean-imputation`` gives the documented mean imputation's sum.)

No hand rescaling: the allele weights of :func:`eigenvec_allele_text` (plink2's ``.eigenvec.allele`` layout) are
``d v_k / sigma_k``, so that ``plink2 --score`` with them (:func:`allele_score_command`) gives as ``PCk_AVG`` (the
sum over ``ALLELE_CT = 2 c_i``) the ``.eigenvec`` value itself, the correction ``d / c_i`` included, for every
person: those in the fit and those outside it alike.

plink2's own weights. ``plink2 --pca allele-wts`` writes ``v_k / (2 sqrt(lambda_k))`` (``lambda_k`` its
``.eigenval``), so that ``--score`` with plink2's own file gives ``sqrt(lambda_k) / 2`` times the ``.eigenvec``
scale, of the other sign in plink2 v2.00a3.5 (for a person in the fit, without missing calls: ``-sqrt(lambda_k) / 2
u_ik``): fedspectral's file is plink2's times ``-2 / sqrt(lambda_k)`` per PC
(``tests/test_keep.py``, marker ``plink2``).
"""

from __future__ import annotations

from typing import IO, Any, Mapping, Sequence

import numpy as np

__all__ = ["plink2_eigenvalues", "plink2_eigenvectors", "eigenval_text", "eigenvec_text", "score_text", "afreq_text",
           "score_command", "eigenvec_allele_text", "allele_score_command", "draw_ancestry", "pc_label"]


def plink2_eigenvalues(model: Mapping[str, Any]) -> np.ndarray:
    """The eigenvalues of plink2's relationship matrix, ``explained_variance (n - 1) / d``, shape (k,)."""
    n, d = int(model["n_samples"]), model["components"].shape[1]
    return np.asarray(model["explained_variance"], dtype=np.float64) * (n - 1) / d


def plink2_eigenvectors(scores: np.ndarray, model: Mapping[str, Any]) -> np.ndarray:
    """Projection scores (m, k) on plink2's eigenvector scale (unit norm over the pooled samples): over
    ``singular_values``, shape (m, k)."""
    sv = np.asarray(model["singular_values"], dtype=np.float64)
    return np.divide(scores, sv, out=np.zeros_like(scores), where=sv > 0)


def eigenval_text(model: Mapping[str, Any]) -> str:
    """plink2's ``.eigenval``: one eigenvalue a line (:func:`plink2_eigenvalues`), 6 significant digits."""
    return "".join(f"{value:.6g}\n" for value in plink2_eigenvalues(model))


def eigenvec_text(samples: Sequence[tuple[str, str]], vectors: np.ndarray) -> str:
    """plink2's ``.eigenvec``: ``#FID IID PC1 .. PCk``, tab-separated, 6 significant digits.

    Parameters
    ----------
    samples : sequence of (FID, IID), length m
        The people, from the ``.fam``.
    vectors : ndarray of shape (m, k)
    """
    k = vectors.shape[1]
    lines = ["\t".join(["#FID", "IID"] + [f"PC{j + 1}" for j in range(k)])]
    lines += ["\t".join([fid, iid] + [f"{value:.6g}" for value in row]) for (fid, iid), row in zip(samples, vectors)]
    return "\n".join(lines) + "\n"


def score_text(model: Mapping[str, Any]) -> str:
    """Weights for ``plink2 --score``: ``ID A1 PC1 .. PCk`` with the columns ``components / singular_values``
    (module docstring), every number exact (``repr``)."""
    weights = plink2_eigenvectors(np.asarray(model["components"]).T, model)
    k = weights.shape[1]
    tab = "\t" if k else ""
    lines = ["\t".join(["ID", "A1"] + [f"PC{j + 1}" for j in range(k)])]
    lines += [f"{vid}\t{a1}{tab}{row}" for (vid, a1, _), row in zip(model["variants"], exact_rows(weights))]
    return "\n".join(lines) + "\n"


def exact_texts(values: np.ndarray) -> list[str]:
    """``repr`` of every number of ``values`` as a Python float (the shortest text that reads back exactly), in
    C order: ``k`` numbers a row for a (d, k) array."""
    return list(map(repr, np.asarray(values, dtype=np.float64).ravel().tolist()))


def exact_rows(values: np.ndarray) -> list[str]:
    """Each row of ``values`` (m, k) as its numbers' :func:`exact_texts` joined by tabs, one string a row.

    Each number is formatted once, and the rows are joined without a Python loop over them (``k`` texts at a
    time from one iterator).

    Parameters
    ----------
    values : array_like of shape (m, k)

    Returns
    -------
    list of str, length m
    """
    values = np.asarray(values, dtype=np.float64)
    if values.ndim != 2:
        raise ValueError(f"exact_rows needs a 2-D array, got shape {values.shape}")
    if values.shape[1] == 1:
        return exact_texts(values)
    texts = iter(exact_texts(values))
    return list(map("\t".join, zip(*[texts] * values.shape[1]))) if values.shape[1] else [""] * values.shape[0]


def negated_rows(rows: list[str]) -> list[str]:
    """:func:`negated_text` of every tab-separated number of every row of :func:`exact_rows`, without formatting
    the numbers again: a ``-`` put before each number's text, then ``--`` (a negative number's) taken away, each
    over the whole text at once (a float's ``repr`` never holds ``--``)."""
    if not rows:
        return []
    body = "-" + "\n".join(rows).replace("\t", "\t-").replace("\n", "\n-")
    return body.replace("--", "").split("\n")


def negated_text(text: str) -> str:
    """``repr(-x)`` from ``repr(x)`` of a finite ``x`` (``0.0`` gives ``-0.0`` as ``repr(-0.0)``), without
    formatting the number again."""
    return text[1:] if text.startswith("-") else "-" + text


def afreq_text(model: Mapping[str, Any]) -> str:
    """The model's allele frequencies as plink2's ``.afreq`` (``#ID REF ALT ALT_FREQS``): A1 (the allele counted)
    as ALT, its frequency ``mean / 2``."""
    lines = ["#ID\tREF\tALT\tALT_FREQS"]
    frequencies = exact_rows((np.asarray(model["mean"], dtype=np.float64) / 2)[:, None])
    lines += [f"{vid}\t{a2}\t{a1}\t{p}" for (vid, a1, a2), p in zip(model["variants"], frequencies)]
    return "\n".join(lines) + "\n"


def score_command(bfile: str, prefix: str, k: int, out: str) -> list[str]:
    """The ``plink2`` command that applies ``<prefix>.score`` with ``<prefix>.afreq`` to ``<bfile>.bed``, writing
    ``<out>.sscore`` with columns ``PC1_SUM .. PCk_SUM``."""
    return ["plink2", "--bfile", bfile, "--read-freq", f"{prefix}.afreq", "--score", f"{prefix}.score", "1", "2",
            "header-read", "variance-standardize", "no-mean-imputation", "cols=+scoresums", "--score-col-nums",
            f"3-{k + 2}", "--out", out]


def eigenvec_allele_text(model: Mapping[str, Any]) -> str:
    """Allele weights in plink2's ``.eigenvec.allele`` layout, as ``plink2 --pca allele-wts vcols=ref,alt`` writes
    it (the model keeps no chromosome): ``#ID REF ALT A1 PC1 .. PCk``, tab-separated, REF the ``.bim``'s A2 and ALT
    its A1, two lines a variant (REF's, then ALT's) of opposite weights; every number exact (``repr``).

    The weights on A1 (the allele counted) are ``d v_k / sigma_k`` (module docstring): plink2 ``--score``
    (:func:`allele_score_command`) then gives the ``.eigenvec`` values of ``transform`` as ``PCk_AVG``. A variant
    monomorphic in the fit (frequency 0 or 1, scale 1) has the line of its absent allele alone, of weight 0:
    plink2's ``variance-standardize`` refuses an allele of frequency 1, and its calls still count in ``ALLELE_CT``
    as in ``c_i``; plink2 refuses the file at a site where someone carries that allele (as it refuses its own).
    """
    components = np.asarray(model["components"], dtype=np.float64)
    k, d = components.shape
    weights = d * plink2_eigenvectors(components.T, model)  # (d, k)
    frequency = np.asarray(model["mean"], dtype=np.float64) / 2
    rows = exact_rows(weights)  # each weight formatted once: the REF line's are their negations
    negated = negated_rows(rows) if k else rows
    zeros = "\t".join(["0.0"] * k)
    tab = "\t" if k else ""
    lines = ["\t".join(["#ID", "REF", "ALT", "A1"] + [f"PC{j + 1}" for j in range(k)])]
    lines += [f"{vid}\t{a2}\t{a1}\t{a2}{tab}{minus}\n{vid}\t{a2}\t{a1}\t{a1}{tab}{row}" if p * (1 - p) > 0
              else f"{vid}\t{a2}\t{a1}\t{a1 if p <= 0 else a2}{tab}{zeros}"
              for (vid, a1, a2), p, minus, row in zip(model["variants"], frequency.tolist(), negated, rows)]
    return "\n".join(lines) + "\n"


def allele_score_command(bfile: str, prefix: str, k: int, out: str) -> list[str]:
    """The ``plink2`` command that applies ``<prefix>.eigenvec.allele`` (:func:`eigenvec_allele_text`) with
    ``<prefix>.afreq`` to ``<bfile>.bed``, writing ``<out>.sscore`` whose ``PC1_AVG .. PCk_AVG`` are the
    ``.eigenvec`` values (plink2's documented projection with allele weights, for the layout without ``#CHROM``)."""
    return ["plink2", "--bfile", bfile, "--read-freq", f"{prefix}.afreq", "--score", f"{prefix}.eigenvec.allele",
            "1", "4", "header-read", "no-mean-imputation", "variance-standardize", "--score-col-nums", f"5-{k + 4}",
            "--out", out]


SITE_COLOURS = ("#0072B2", "#E69F00", "#009E73", "#AA3377", "#56B4E9", "#D55E00", "#F0E442", "#000000")
"""The sites' colours in :func:`draw_ancestry` (Okabe and Ito's colour-blind-safe set, ordered so that the first
sites' are far apart: no two of the first four are near alike, as tab10's orange and red are); more sites: tab20."""


def draw_ancestry(handle: IO[bytes], vectors: np.ndarray, groups: Sequence[str] | None = None,
                  title: str = "", converged: int | None = None) -> None:
    """A PNG of PC1 against PC2 and PC1 against PC3 (as many panels as the components allow), one colour a group;
    an axis whose PC has not converged says so (``PC3 (not converged)``).

    Parameters
    ----------
    handle : binary file
        Where the PNG goes.
    vectors : ndarray of shape (m, k)
        The samples' coordinates, ``k >= 2``.
    groups : sequence of str, length m, optional
        A label per sample (its site); one colour (:data:`SITE_COLOURS`), with a legend, each. The samples are
        drawn in one seeded shuffled order, so that the last site drawn does not cover the others.
    title : str, optional
    converged : int, optional
        How many leading PCs have converged (the run's last ``converged_components``): the axes of the PCs after
        them are labelled ``PC<j> (not converged)``; ``None``: not known (a run against a reference, a model file
        alone), the axes say nothing of it.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pairs = [(0, j) for j in (1, 2) if j < vectors.shape[1]]
    figure, axes = plt.subplots(1, len(pairs), figsize=(5.5 * len(pairs), 5), squeeze=False)
    labels = np.asarray(groups if groups is not None else [""] * len(vectors))
    names = list(dict.fromkeys(labels.tolist()))
    if len(names) <= len(SITE_COLOURS):
        colour_of = dict(zip(names, SITE_COLOURS))
    else:
        colours = plt.get_cmap("tab20")
        colour_of = {name: colours(i % colours.N) for i, name in enumerate(names)}
    # one scatter in a fixed shuffled order, so that no site is drawn over the others; smaller, more translucent
    # points as the samples grow (20,000 people: 2 points of 0.35)
    order = np.random.default_rng(0).permutation(len(vectors))
    size, alpha = (8.0, 0.7) if len(vectors) <= 2_000 else (3.0, 0.8) if len(vectors) <= 10_000 else (2.0, 0.35)
    for axis, (a, b) in zip(axes[0], pairs):
        axis.scatter(vectors[order, a], vectors[order, b], s=size, alpha=alpha, linewidths=0,
                     c=[colour_of[label] for label in labels[order]])
        for name in names:  # the legend's entries, one per site, drawn with no point
            axis.scatter([], [], s=8, color=colour_of[name], label=name or None)
        axis.locator_params(nbins=5)
        axis.set_xlabel(pc_label(a, converged))
        axis.set_ylabel(pc_label(b, converged))
        if groups is not None:
            axis.legend(fontsize=8, markerscale=2)
    if title:
        figure.suptitle(title)
    figure.tight_layout()
    figure.savefig(handle, format="png", dpi=100)
    plt.close(figure)


def pc_label(index: int, converged: int | None = None) -> str:
    """The axis label of component ``index`` (0-based): ``PC<index + 1>``, with `` (not converged)`` when
    ``converged`` (how many leading PCs have converged) is known and does not reach it."""
    return f"PC{index + 1}" + (" (not converged)" if converged is not None and index >= converged else "")
