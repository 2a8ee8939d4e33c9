"""The plink2 weight files (``fl_strategies/files/plink_outputs.py``) formatted in bulk are byte for byte the texts of
the earlier one-number-at-a-time formatting (kept here as the reference), over numbers whose ``repr`` takes every form
(negative zero, exponents either way, 17 digits, integers as floats) and variants monomorphic either way."""

from __future__ import annotations

import numpy as np
import pytest

from fl_strategies.files.plink_outputs import (afreq_text, eigenvec_allele_text, exact_rows, negated_rows,
                                               plink2_eigenvectors, score_text)


def _old_texts(values):
    return list(map(repr, np.asarray(values, dtype=np.float64).ravel().tolist()))


def _old_negated(text):
    return text[1:] if text.startswith("-") else "-" + text


def old_score_text(model):
    weights = plink2_eigenvectors(np.asarray(model["components"]).T, model)
    k = weights.shape[1]
    texts = _old_texts(weights)
    lines = ["\t".join(["ID", "A1"] + [f"PC{j + 1}" for j in range(k)])]
    lines += ["\t".join([vid, a1, *texts[i * k:(i + 1) * k]]) for i, (vid, a1, _) in enumerate(model["variants"])]
    return "\n".join(lines) + "\n"


def old_afreq_text(model):
    lines = ["#ID\tREF\tALT\tALT_FREQS"]
    frequencies = _old_texts(np.asarray(model["mean"], dtype=np.float64) / 2)
    lines += [f"{vid}\t{a2}\t{a1}\t{p}" for (vid, a1, a2), p in zip(model["variants"], frequencies)]
    return "\n".join(lines) + "\n"


def old_eigenvec_allele_text(model):
    components = np.asarray(model["components"], dtype=np.float64)
    k, d = components.shape
    weights = d * plink2_eigenvectors(components.T, model)
    frequency = np.asarray(model["mean"], dtype=np.float64) / 2
    texts = _old_texts(weights)
    lines = ["\t".join(["#ID", "REF", "ALT", "A1"] + [f"PC{j + 1}" for j in range(k)])]
    for i, ((vid, a1, a2), p) in enumerate(zip(model["variants"], frequency.tolist())):
        if p * (1 - p) > 0:
            row = texts[i * k:(i + 1) * k]
            lines.append("\t".join([vid, a2, a1, a2, *map(_old_negated, row)]))
            lines.append("\t".join([vid, a2, a1, a1, *row]))
        else:
            lines.append("\t".join([vid, a2, a1, a1 if p <= 0 else a2] + ["0.0"] * k))
    return "\n".join(lines) + "\n"


def awkward_model(k: int, d: int, seed: int) -> dict:
    """A model whose weights' texts take every form ``repr`` writes, some variants monomorphic either way."""
    rng = np.random.default_rng(seed)
    components = rng.standard_normal((k, d)) * 10.0 ** rng.integers(-22, 20, (k, d))
    components[:, :6] = np.array([0.0, -0.0, 1.0, -3.0, 1e20, -1e-5])[None, :] if d >= 6 else components[:, :6]
    mean = rng.uniform(0, 2, d)
    mean[1::7], mean[3::11] = 0.0, 2.0  # frequency 0 and 1: the line of the absent allele alone
    return {"components": components, "mean": mean, "singular_values": np.linspace(3.0, 1.0, k),
            "explained_variance": np.linspace(3.0, 1.0, k), "n_samples": 50,
            "variants": [(f"rs{j}", "ACGT"[j % 4], "TGCA"[j % 4]) for j in range(d)]}


@pytest.mark.parametrize("k,d,seed", [(1, 40, 0), (2, 1, 1), (4, 300, 2), (7, 64, 3)])
def test_the_weight_files_are_the_texts_of_the_one_number_at_a_time_formatting(k, d, seed):
    model = awkward_model(k, d, seed)
    texts = [score_text(model), eigenvec_allele_text(model), afreq_text(model)]
    assert texts == [old_score_text(model), old_eigenvec_allele_text(model), old_afreq_text(model)]
    if d >= 6:  # the awkward forms were there
        assert "e-" in texts[0] and "e+" in texts[0] and "\t-0.0" in texts[1]


def test_rows_and_their_negations_are_the_numbers_reprs():
    values = np.array([[0.0, -0.0, 1e-05], [-2.5, 1e+16, -1.2345678901234567e-300], [np.inf, -np.inf, 7.0]])
    rows = exact_rows(values)
    assert rows == ["\t".join(map(repr, row)) for row in values.tolist()]
    assert negated_rows(rows) == ["\t".join(map(repr, (-values)[i].tolist())) for i in range(3)]
    assert exact_rows(np.zeros((0, 3))) == [] and negated_rows([]) == []
    assert exact_rows(np.array([[0.5], [-1.0]])) == ["0.5", "-1.0"]
