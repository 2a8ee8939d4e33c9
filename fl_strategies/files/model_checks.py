"""The checks a ``pca.npz`` passes before it is applied: ``fedspectral transform``, ``init-from``, ``compare``.

A model file is input like any other: it may be damaged, edited by hand, written by another program, or made to
do harm. :func:`checked_model` reads it and refuses, in one line naming the field, anything that would make its
use silently wrong (a scale of ``1e-320``: infinite scores; components that are not orthonormal: scores that are
not a projection) or costly (a 3 MB zip member that inflates to a 3.2 GB array): every array's size is read from
its ``.npy`` header and bounded before a byte of its data is read. Its docstring lists each check, in order.
"""

from __future__ import annotations

import json
import math
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
from numpy.lib import format as npy_format

from ..kernels.standardize import SCALINGS
from ..settings.config import column_scaling
from .variants import decode_variants

__all__ = ["MODEL_KEYS", "MODEL_FIELDS", "MAX_MODEL_BYTES", "ORTHONORMAL_TOLERANCE", "SCALE_RANGE", "checked_model"]

MODEL_KEYS = ("components", "mean", "scale", "explained_variance", "explained_variance_ratio", "singular_values",
              "n_samples")
"""The arrays of the model proper, in scikit-learn's names (``scale`` may be absent: a model from before it)."""
FLAGS = ("centered", "row_normalize", "clip_norm")
"""Scalars: how the run treated its rows, which ``transform`` repeats on new rows."""
TEXTS = ("run_config", "privacy", "variants", "prune_in", "prune_out")
"""0-d strings: the run config and the privacy record (JSON tables), the ``.bed`` variants (``ID\\tA1\\tA2`` lines),
``indep-pairwise``'s kept and removed variant IDs (one a line, as plink2's ``prune.in`` and ``prune.out``)."""
MODEL_FIELDS = MODEL_KEYS + FLAGS + TEXTS
"""Every field :func:`checked_model` reads; of any other member of the zip only the ``.npy`` header is read."""
MAX_MODEL_BYTES = 1 << 30
"""The most bytes the arrays of one model may hold together (1 GiB): ``8 k d`` bytes for ``k`` components of
``d`` columns, e.g. 20 components of 6.7 million variants."""
ORTHONORMAL_TOLERANCE = 1e-5
"""Largest ``|C C^T - I|`` entry accepted for ``components`` ``C`` (k, d). The models fedspectral writes reach
~1e-15; the same model stored as float32 at most ~1.2e-7 (two roundings of 2^-24 per product of unit vectors);
components copied from text with 6 significant digits (plink2's ``.eigenvec`` precision) at most ~1e-6. A
deviation of 1e-5 changes no score by more than that share of its length."""
SCALE_RANGE = (float(np.finfo(np.float64).tiny), 1.0 / float(np.finfo(np.float64).tiny))
"""``scale`` must lie in ``[tiny, 1 / tiny]`` (about ``[2.2e-308, 4.5e307]``): normal floats whose reciprocals,
by which ``transform`` multiplies, are finite and normal too."""
HEADER_BYTES = 10_000
"""The longest ``.npy`` header read (numpy's own default limit)."""


def _size(nbytes: int) -> str:
    """``nbytes`` for a message: ``3.2 GB``, ``512 bytes``."""
    for unit, factor in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if nbytes >= factor:
            return f"{nbytes / factor:.1f} {unit}"
    return f"{nbytes} bytes"


def _read_members(path: str | Path) -> dict[str, np.ndarray]:
    """The :data:`MODEL_FIELDS` members of the ``.npz`` ``path``, each bounded by its header before it is read
    (checks 1-4 of :func:`checked_model`); a ``ValueError`` naming the field otherwise."""
    arrays, declared = {}, 0
    with zipfile.ZipFile(path) as archive:
        for info in archive.infolist():
            field = info.filename.removesuffix(".npy")
            if not info.filename.endswith(".npy") or field in arrays:
                continue  # not an array (np.load would not give it either), or a second member of one name
            with archive.open(info) as fp:
                version = npy_format.read_magic(fp)
                if version not in ((1, 0), (2, 0)):
                    raise ValueError(f"{field} is a .npy of format version {version}; 1.0 or 2.0 is read")
                read_header = (npy_format.read_array_header_1_0 if version == (1, 0)
                               else npy_format.read_array_header_2_0)
                shape, fortran, dtype = read_header(fp, max_header_size=HEADER_BYTES)
                if dtype.hasobject:
                    raise ValueError(f"{field} holds Python objects (dtype {dtype}); they are never read")
                if field not in MODEL_FIELDS:
                    continue  # never read
                if dtype.itemsize == 0:
                    raise ValueError(f"{field} has dtype {dtype}, of items of no size")
                nbytes = math.prod(shape) * dtype.itemsize  # Python integers: no overflow
                declared += nbytes
                if declared > MAX_MODEL_BYTES:
                    raise ValueError(f"{field} declares shape {shape} of {dtype} ({_size(nbytes)}); a model "
                                     f"may hold at most {MAX_MODEL_BYTES >> 30} GiB of arrays")
                if fp.tell() + nbytes != info.file_size:
                    raise ValueError(f"{field} declares shape {shape} of {dtype} ({_size(nbytes)}), but its "
                                     f"zip member holds {_size(max(info.file_size - fp.tell(), 0))} of data")
                buffer = bytearray(nbytes)
                view, filled = memoryview(buffer), 0
                while filled < nbytes:
                    got = fp.readinto(view[filled:])
                    if not got:
                        raise ValueError(f"{field} ends after {filled} of its {nbytes} bytes")
                    filled += got
                fp.read(1)  # at the member's end: zipfile checks its CRC
            arrays[field] = np.frombuffer(buffer, dtype=dtype).reshape(shape, order="F" if fortran else "C")
    return arrays


def _json_table(arrays: dict[str, np.ndarray], field: str, name: str) -> dict[str, Any]:
    """The JSON table of the 0-d string ``field`` (checked: check 10)."""
    value = arrays[field]
    if value.shape != () or value.dtype.kind != "U":
        raise ValueError(f"{name}: {field} is {value.dtype} of shape {value.shape}; a JSON text is required")
    try:
        table = json.loads(str(value))
    except ValueError as ex:
        raise ValueError(f"{name}: {field} is not JSON: {ex}") from None
    if not isinstance(table, dict):
        raise ValueError(f"{name}: {field} is JSON {type(table).__name__}, not a table")
    return table


def checked_model(path: str | Path, what: str = "--model") -> dict[str, Any]:
    """Read the ``pca.npz`` at ``path`` and check every field before any use; ``what`` names it in the messages.

    Modelled on scipy's ``sparse.linalg._svds._iv``: each check in turn, the first that fails refused with a
    ``ValueError`` of one line, ``{what} 'path': {field} ...``.

    Reading (nothing is allocated before the sizes are checked):

    1. the file is a zip archive;
    2. each ``.npy`` member is of format 1.0 or 2.0 (``numpy.lib.format.read_magic``), its header at most
       :data:`HEADER_BYTES` long and of a dtype without Python objects (no pickles, in any member); only the
       members of :data:`MODEL_FIELDS` are read on, the first of each name;
    3. the sizes its headers declare (shape times item size) add up to at most :data:`MAX_MODEL_BYTES`;
    4. each declared size plus its header is exactly the zip member's uncompressed size, and the member holds
       those bytes (its CRC checked).

    The model:

    5. ``components``, ``mean``, ``explained_variance``, ``explained_variance_ratio``, ``singular_values`` and
       ``n_samples`` are present (``scale`` may be absent: ones, a model from before it existed);
    6. each of them is of real numbers (not bool, complex or text);
    7. shapes: ``components`` (k, d) with ``1 <= k <= d``; ``mean`` and ``scale`` (d,); the three variance
       fields (k,); ``n_samples`` a scalar;
    8. finite values in all of them (an ``explained_variance_ratio`` all NaN is accepted: a model without
       ``tr(C)``, a noisy run's);
    9. ``components`` orthonormal: ``max |C C^T - I| <= ORTHONORMAL_TOLERANCE`` (:data:`ORTHONORMAL_TOLERANCE`);
    10. ``scale`` within :data:`SCALE_RANGE` (positive, ``1 / scale`` finite and not subnormal);
    11. ``n_samples`` a whole number ``>= 1``;
    12. the flags ``centered``, ``row_normalize`` and ``clip_norm`` scalars, ``clip_norm`` finite and ``>= 0``;
    13. ``run_config`` and ``privacy`` 0-d JSON tables, the run config's ``scale`` one ``column_scaling`` knows;
    14. ``variants``, if present, ``d`` lines of ``ID``, ``A1`` and ``A2``;
    15. ``prune_in`` and ``prune_out``, if present, text (``prune_in`` the IDs of ``variants``, in their order).

    Parameters
    ----------
    path : str or Path
    what : str
        The option or key naming the file (``--model``, ``init-from``).

    Returns
    -------
    dict
        :data:`MODEL_KEYS` as arrays (``n_samples`` an int), ``centered``, ``row_normalize`` (bool), ``clip_norm``
        (float), ``scaling`` (the run's ``scale`` setting), ``run_config`` and ``privacy`` (0-d strings) if
        present, ``variants`` (list of ``(ID, A1, A2)``) if present, ``prune_in`` and ``prune_out`` (0-d strings)
        if present.

    Raises
    ------
    ValueError
        The first check that fails, naming the field.
    """
    name = f"{what} {str(path)!r}"
    try:  # checks 1-4
        model = _read_members(path)
    except ValueError as ex:
        raise ValueError(f"{name} is not a readable pca.npz: {ex}") from None
    except Exception as ex:  # noqa: BLE001  (no such file, not a zip, a damaged member, ...)
        raise ValueError(f"{name} is not a readable pca.npz: {type(ex).__name__}: {ex}") from None
    missing = [key for key in MODEL_KEYS if key not in model and key != "scale"]  # check 5
    if missing:
        raise ValueError(f"{name} lacks {', '.join(missing)}: not a fedspectral pca.npz")
    components, mean = model["components"], model["mean"]
    if components.ndim != 2 or mean.shape != (components.shape[1],):  # check 7, first the two that set k and d
        raise ValueError(f"{name}: components {components.shape} and mean {mean.shape} do not fit")
    k, d = components.shape
    model.setdefault("scale", np.ones(d))
    for key in MODEL_KEYS:
        value = model[key]
        if value.dtype == np.bool_ or not np.issubdtype(value.dtype, np.number) or np.iscomplexobj(value):  # 6
            raise ValueError(f"{name}: {key} has dtype {value.dtype}; real numbers are required")
        want = {"components": (k, d), "mean": (d,), "scale": (d,), "n_samples": ()}.get(key, (k,))
        if value.shape != want:  # check 7
            raise ValueError(f"{name}: {key} has shape {value.shape}, expected {want}")
        unknown = key == "explained_variance_ratio" and np.all(np.isnan(value))  # a model without tr(C)
        if not (unknown or np.all(np.isfinite(value))):  # check 8
            raise ValueError(f"{name}: {key} has non-finite entries (NaN/inf)")
    if k < 1 or model["n_samples"] < 1 or model["n_samples"] != int(model["n_samples"]):  # check 11 (and k >= 1)
        raise ValueError(f"{name}: {k} components and n_samples {model['n_samples']}: not a model")
    if k > d:
        raise ValueError(f"{name}: components has {k} rows of {d} columns: at most {d} can be orthonormal")
    C = components.astype(np.float64)
    deviation = float(np.max(np.abs(C @ C.T - np.eye(k))))
    if not deviation <= ORTHONORMAL_TOLERANCE:  # check 9
        raise ValueError(f"{name}: components are not orthonormal: max |C C^T - I| = {deviation:.3g} > "
                         f"{ORTHONORMAL_TOLERANCE:g}")
    scale = model["scale"].astype(np.float64)
    low, high = SCALE_RANGE
    if not np.all(scale > 0):  # check 10
        raise ValueError(f"{name}: its scale has entries that are not > 0 (e.g. {scale[~(scale > 0)][0]:g})")
    if not np.all((scale >= low) & (scale <= high)):
        bad = scale[(scale < low) | (scale > high)][0]
        raise ValueError(f"{name}: scale has an entry {bad:g} outside [{low:.3g}, {high:.3g}]: 1 / scale would "
                         "not be a finite normal number")
    for flag in FLAGS:  # check 12
        if flag in model:
            value = model[flag]
            if value.shape != () or not (value.dtype == np.bool_ or np.issubdtype(value.dtype, np.number)) \
                    or np.iscomplexobj(value):
                raise ValueError(f"{name}: {flag} is {value.dtype} of shape {value.shape}; a real scalar is required")
    clip_norm = float(model["clip_norm"]) if "clip_norm" in model else 0.0
    if not (math.isfinite(clip_norm) and clip_norm >= 0):
        raise ValueError(f"{name}: clip_norm {clip_norm} is not a finite number >= 0")
    config = _json_table(model, "run_config", name) if "run_config" in model else {}  # check 13
    if "privacy" in model:
        _json_table(model, "privacy", name)
    scaling = column_scaling(config.get("scale", False))
    if scaling not in SCALINGS:
        raise ValueError(f"{name}: run_config's scale is {scaling!r}, not one of {', '.join(SCALINGS)}")
    if "variants" in model:  # check 14
        value = model["variants"]
        if value.shape != () or value.dtype.kind != "U":
            raise ValueError(f"{name}: variants is {value.dtype} of shape {value.shape}; text lines are required")
        try:
            model["variants"] = decode_variants(str(value).encode("utf-8"))
        except ValueError as ex:
            raise ValueError(f"{name}: its variants: {ex}") from None
        if len(model["variants"]) != d:
            raise ValueError(f"{name}: {len(model['variants'])} variants for {d} columns")
    for key in ("prune_in", "prune_out"):  # check 15
        if key in model and (model[key].shape != () or model[key].dtype.kind != "U"):
            raise ValueError(f"{name}: {key} is {model[key].dtype} of shape {model[key].shape}; text lines are "
                             "required")
    if "prune_in" in model and "variants" in model and \
            str(model["prune_in"]).split() != [vid for vid, _, _ in model["variants"]]:
        raise ValueError(f"{name}: prune_in does not list the model's variants")
    model["n_samples"] = int(model["n_samples"])
    if "centered" not in model:  # a file written before the field: the run config says, else the mean
        model["centered"] = config.get("center", bool(np.any(mean)))
    model["centered"] = bool(model["centered"])
    model["scaling"] = scaling
    model["row_normalize"] = bool(model.get("row_normalize", False))
    model["clip_norm"] = clip_norm
    return model
