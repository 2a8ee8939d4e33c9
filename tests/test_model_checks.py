"""A model is checked before it is applied (fl_strategies/files/model_checks.py): ``fedspectral transform`` and
``init-from`` refuse, in one line naming the field, a ``pca.npz`` whose scale would give infinite scores, whose
components are not orthonormal, or whose zip member's header declares an array larger than its bound or than the
member holds, before a byte of that array is allocated; exit status 2 and nothing written."""

from __future__ import annotations

import tracemalloc
import zipfile

import numpy as np
import pytest

from client_app.transform import main
from fl_strategies.files.model_checks import MAX_MODEL_BYTES, ORTHONORMAL_TOLERANCE, checked_model
from fl_strategies.files.pca import pca_model, save_model
from fl_strategies.files.warm_start import load_start
from fl_strategies.settings.config import ConfigError

D, K = 6, 2


def _good(path):
    """A model as a run writes it: orthonormal components to ~1e-15, scale 1."""
    Z = np.linalg.qr(np.random.default_rng(0).standard_normal((D, K)))[0]
    return save_model(path, pca_model(Z, Z * [2.0, 1.0], 4.0, 10, np.zeros(D), K), {"center": True})


def _edited(tmp_path, **fields):
    """The good model with ``fields`` replaced, written by ``np.savez`` as a hand-edited file would be."""
    with np.load(_good(tmp_path / "good.npz")) as f:
        arrays = {key: f[key] for key in f.files}
    arrays.update(fields)
    np.savez(tmp_path / "model.npz", **arrays)
    return tmp_path / "model.npz"


def _transform(tmp_path, model, capsys, rows=None):
    """``fedspectral transform`` of ``rows`` (default: small random rows); its exit status and its error lines."""
    np.save(tmp_path / "rows.npy", np.random.default_rng(1).standard_normal((4, D)) if rows is None else rows)
    status = main(["--model", str(model), "--data", str(tmp_path / "rows.npy"), "--out", str(tmp_path / "s.npy")],
                  prog="fedspectral transform")
    return status, capsys.readouterr().err.strip().splitlines()


@pytest.mark.parametrize("scale, entry", [(1e-320, "9.99989e-321"), (1e308, "1e+308"), (0.0, None)],
                         ids=["subnormal", "reciprocal-subnormal", "zero"])
def test_a_scale_whose_reciprocal_is_not_a_finite_normal_number_is_refused(tmp_path, capsys, scale, entry):
    """A scale of 1e-320 gave inf scores with exit 0; 1e308 (1/scale subnormal) and 0 are refused alike."""
    status, err = _transform(tmp_path, _edited(tmp_path, scale=np.r_[np.ones(D - 1), scale]), capsys)
    assert status == 2 and len(err) == 1 and "--model" in err[0] and "scale" in err[0]
    if entry:
        assert f"scale has an entry {entry} outside" in err[0]
    assert not (tmp_path / "s.npy").exists()


def test_components_that_are_not_orthonormal_are_refused_naming_the_deviation(tmp_path, capsys):
    model = _edited(tmp_path, components=checked_model(_good(tmp_path / "g.npz"))["components"] * 1.1)
    status, err = _transform(tmp_path, model, capsys)
    assert status == 2 and len(err) == 1
    assert "components are not orthonormal: max |C C^T - I| = 0.21 > 1e-05" in err[0]
    assert not (tmp_path / "s.npy").exists()
    with pytest.raises(ConfigError, match=r"^init-from '.*model.npz': components are not orthonormal"):
        load_start({"init-from": str(model), "center": True, "scale": False})


def test_more_components_than_columns_are_refused(tmp_path):
    with pytest.raises(ValueError, match=r"components has 7 rows of 6 columns: at most 6 can be orthonormal"):
        checked_model(_edited(tmp_path, components=np.eye(7, D), explained_variance=np.ones(7),
                              explained_variance_ratio=np.ones(7), singular_values=np.ones(7)))


@pytest.mark.parametrize("form", ["float32", "6 significant digits"])
def test_orthonormal_components_stored_with_less_precision_are_accepted(tmp_path, form):
    """The tolerance admits a run's model stored as float32 and one copied from plink2-like text (6 digits)."""
    C = np.linalg.qr(np.random.default_rng(2).standard_normal((500, 10)))[0].T
    C = C.astype(np.float32) if form == "float32" else np.array([[float(f"{v:.6g}") for v in row] for row in C])
    deviation = np.max(np.abs(C.astype(np.float64) @ C.T.astype(np.float64) - np.eye(10)))
    assert 1e-12 < deviation <= ORTHONORMAL_TOLERANCE / 5
    model = checked_model(_edited(tmp_path, components=C, mean=np.zeros(500), scale=np.ones(500),
                                  explained_variance=np.ones(10), explained_variance_ratio=np.full(10, 0.1),
                                  singular_values=np.ones(10)))
    assert model["components"].shape == (10, 500)


def _crafted(tmp_path, shape, data_bytes: int):
    """A zip whose ``components.npy`` has a valid ``.npy`` header declaring ``shape`` (float64) and only
    ``data_bytes`` bytes of data; the other fields are the good model's."""
    path = tmp_path / "crafted.npz"
    header = {"descr": "<f8", "fortran_order": False, "shape": shape}
    with np.load(_good(tmp_path / "good.npz")) as f, zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for key in f.files:
            if key != "components":
                with z.open(f"{key}.npy", "w") as member:
                    np.lib.format.write_array(member, f[key])
        with z.open("components.npy", "w") as member:
            np.lib.format.write_array_header_1_0(member, header)
            member.write(b"\0" * data_bytes)
    return path


@pytest.mark.parametrize("shape, data_bytes, message", [
    ((400_000, 1000), 3_000_000, r"components declares shape \(400000, 1000\) of float64 \(3\.2 GB\); a model may "
                                 r"hold at most 1 GiB of arrays"),
    ((1000, D), 800, r"components declares shape \(1000, 6\) of float64 \(48\.0 kB\), but its zip member holds 800 "
                     r"bytes of data"),
], ids=["above-the-bound", "more-than-the-member-holds"])
def test_an_array_declared_larger_than_its_bound_or_its_member_is_refused_before_it_is_allocated(
        tmp_path, capsys, shape, data_bytes, message):
    """A 3 MB member whose header declares a 3.2 GB array cost 3.2 GB of memory; now its header is read and
    the file refused with at most a few MB allocated (the member's data are never read)."""
    assert MAX_MODEL_BYTES < 400_000 * 1000 * 8
    path = _crafted(tmp_path, shape, data_bytes)
    tracemalloc.start()
    try:
        with pytest.raises(ValueError, match=r"^--model '.*crafted.npz' is not a readable pca.npz: " + message):
            checked_model(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2_000_000, peak
    status, err = _transform(tmp_path, path, capsys)
    assert status == 2 and len(err) == 1 and "components declares shape" in err[0]
    assert not (tmp_path / "s.npy").exists()


def test_a_run_config_that_is_not_a_json_table_is_refused_naming_it(tmp_path):
    with pytest.raises(ValueError, match=r"run_config is JSON list, not a table"):
        checked_model(_edited(tmp_path, run_config=np.asarray("[1, 2]")))


def test_scores_that_overflow_within_the_models_range_are_refused(tmp_path, capsys):
    """A scale of 1e-300 is in range, but rows of 1e10 give scores beyond float64: refused, nothing written."""
    status, err = _transform(tmp_path, _edited(tmp_path, scale=np.full(D, 1e-300)), capsys, rows=np.full((3, D), 1e10))
    assert status == 2 and len(err) == 1 and "scores under --model" in err[0] and "are not all finite" in err[0]
    assert not (tmp_path / "s.npy").exists()


def test_the_pruned_lists_travel_with_the_model_and_must_name_its_variants(tmp_path):
    """``indep-pairwise``'s ``prune_in`` / ``prune_out`` are read back as written; a ``prune_in`` that does not
    list the model's variants is refused naming it."""
    variants = np.asarray("".join(f"v{j}\tA\tG\n" for j in range(D)))
    model = checked_model(_edited(tmp_path, variants=variants, prune_in=np.asarray("".join(f"v{j}\n" for j in
                          range(D))), prune_out=np.asarray("w1\nw2\n")))
    assert str(model["prune_out"]) == "w1\nw2\n" and str(model["prune_in"]).split() == [f"v{j}" for j in range(D)]
    with pytest.raises(ValueError, match="prune_in does not list the model's variants"):
        checked_model(_edited(tmp_path, variants=variants, prune_in=np.asarray("v0\nv1\n")))
    with pytest.raises(ValueError, match="prune_out is int64"):
        checked_model(_edited(tmp_path, variants=variants, prune_out=np.arange(3)))
