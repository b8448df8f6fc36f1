"""Target objects (:mod:`xaikit.targets`) in ``explain_dataset``: what its store records of one.

A dataset is explained batch by batch, possibly in other processes (Ray workers), and its store
must say, when read back, what its maps explain. ``explain_dataset`` takes ``Class(k)``,
``ClassRegion(k, mask, reduce, axis)``, ``Output(i)``, ``Similarity(reference, normalize)`` and
``Box(box, k, iou, top)``; each of their fields is one of:

* **fixed**: one value for every sample (``k`` an int, ``mask`` (H, W) or None, ``box`` (4,),
  ``reference`` (D,)), stored in the manifest as a JSON value (a list of numbers for arrays);
* **per sample, given**: an array with one value per *dataset* sample, (N, ...) (``k`` (N,),
  ``mask`` (N, H, W), ``box`` (N, 4), ``reference`` (N, D));
* **per sample, read**: a string naming a dataset key (a :class:`~xaikit.dataset.NumpyDataset`
  column or a key of dict samples), read with each batch, e.g. ``Box(box="box", k="label")``.

A per-sample field is described in the manifest by ``{"per_sample": "array" | "key", "key",
"shape" (one sample's), "dtype", "sha256" (of the whole given array; None for a key)}``
(:func:`describe_target` with :func:`complete_keys`), and its values are stored with the
shards, in the store's ``target_<field>`` array (N, ...), under the shard's checksum; a resumed
run with other per-sample values (another array, key, shape or dtype) is refused naming the
field. :func:`batch_target` builds the object of one batch (what ``explain`` would be given
for it); :func:`target_from` rebuilds the stored object.

Per sample, the table's ``score`` is then the target's clean score and ``prediction`` is -1
(a target object is not a class). A callable (not storable) and stacked boxes ((N, T, 4): one
map per sample is stored) are refused with an error naming ``target``.

Example:
    >>> d, arrays = describe_target(ClassRegion(2, reduce="mean"), 10)
    >>> d["kind"], d["k"], d["mask"], d["reduce"], arrays
    ('ClassRegion', 2, None, 'mean', {})
    >>> d, arrays = describe_target(Box(np.zeros((10, 4)), k="label"), 10)
    >>> d["box"]["per_sample"], d["box"]["shape"], arrays["box"].shape, d["k"]["key"]
    ('array', [4], (10, 4), 'label')
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

import numpy as np

from xaikit.errors import XaikitValueError, describe
from xaikit.targets import Box, Class, ClassRegion, Output, Similarity, is_target

__all__ = [
    "PER_SAMPLE",
    "batch_target",
    "complete_keys",
    "describe_target",
    "per_sample_fields",
    "target_from",
]

#: per kind: the fields that may hold one value per dataset sample -> one sample's rank
PER_SAMPLE: dict[str, dict[str, int]] = {
    "Class": {"k": 0},
    "Output": {"index": 0},
    "ClassRegion": {"k": 0, "mask": 2},
    "Box": {"box": 1, "k": 0},
    "Similarity": {"reference": 1},
}
#: how the fields of one sample look, for messages
_LOOKS = {
    "k": "an int",
    "index": "an int",
    "mask": "(H, W)",
    "box": "(4,) (x0, y0, x1, y1)",
    "reference": "(D,)",
}
_CTOR = {
    "Class": "Class(k)",
    "Output": "Output(index)",
    "ClassRegion": "ClassRegion(k, mask)",
    "Box": "Box(box, k)",
    "Similarity": "Similarity(reference)",
}


def _host(value: Any) -> np.ndarray:
    if hasattr(value, "detach"):
        value = value.detach().cpu().numpy()
    elif hasattr(value, "numpy") and not isinstance(value, np.ndarray):
        value = value.numpy()
    return np.asarray(value)


def _dtype(field: str, arr: np.ndarray, what: str) -> np.dtype[Any]:
    """The stored dtype of a field's values: int64 for classes and indices, bool for a boolean
    mask, float64 otherwise; values of another kind are refused naming the field."""
    if field in ("k", "index"):
        if arr.dtype.kind not in "iu":
            raise XaikitValueError(f"target={what}: {field} must hold ints; got {describe(arr)}")
        return np.dtype(np.int64)
    if arr.dtype.kind not in ("biuf" if field == "mask" else "iuf"):
        raise XaikitValueError(f"target={what}: {field} must hold numbers; got {describe(arr)}")
    return np.dtype(bool) if arr.dtype.kind == "b" else np.dtype(np.float64)


def _fixed_json(field: str, arr: np.ndarray) -> Any:
    if field in ("k", "index"):
        return int(arr.reshape(-1)[0])
    return arr.astype(np.float64).tolist()


def _sha256(arr: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(arr).tobytes()).hexdigest()


def _field(kind: str, field: str, value: Any, n: int) -> tuple[Any, np.ndarray | None]:
    """A field's manifest entry and, for a given per-sample array, its values (N, ...)."""
    what = _CTOR[kind]
    rank = PER_SAMPLE[kind][field]
    if isinstance(value, str):
        if not value:
            raise XaikitValueError(f"target={what}: {field}='' names no dataset key")
        return {"per_sample": "key", "key": value, "shape": None, "dtype": None, "sha256": None}, None
    arr = _host(value)
    if kind == "Box" and field == "box" and arr.ndim == 3:
        raise XaikitValueError(
            f"target={what}: stacked boxes {arr.shape} (T boxes per sample) give T maps per sample, and "
            "explain_dataset stores one map per sample: give one box per sample, box (N, 4), or explain "
            "the stacked boxes batch by batch with xk.xai.explain"
        )
    dtype = _dtype(field, arr, what)
    if arr.ndim == rank and (rank == 0 or arr.size):
        return _fixed_json(field, arr), None
    if rank == 0 and arr.ndim == 1 and arr.size == 1:
        return _fixed_json(field, arr), None
    if arr.ndim == rank + 1 and arr.shape[0] == n and (rank == 0 or 0 not in arr.shape):
        values = np.ascontiguousarray(arr.astype(dtype))
        entry = {
            "per_sample": "array",
            "key": None,
            "shape": [int(d) for d in values.shape[1:]],
            "dtype": values.dtype.str,
            "sha256": _sha256(values),
        }
        return entry, values
    raise XaikitValueError(
        f"target={what}: explain_dataset takes {field} as one value for every sample ({_LOOKS[field]}), "
        f"one per dataset sample ({n}, ...) or the name of a dataset key read with each batch; got "
        f"{describe(value)}"
    )


def describe_target(target: Any, n: int) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """The JSON description of a target object the store records (see the module), and the
    values of its per-sample array fields ``{field: (N, ...)}``, for a dataset of ``n`` samples.

    Raises:
        XaikitValueError: for a callable, stacked boxes or a field that is neither one value,
            one per dataset sample nor a key, naming ``target``.
    """
    arrays: dict[str, np.ndarray] = {}
    kind = type(target).__name__

    def field(name: str, value: Any) -> Any:
        entry, values = _field(kind, name, value, n)
        if values is not None:
            arrays[name] = values
        return entry

    if isinstance(target, Class):
        return {"kind": "Class", "k": field("k", target.k)}, arrays
    if isinstance(target, Output):
        return {"kind": "Output", "index": field("index", target.index)}, arrays
    if isinstance(target, ClassRegion):
        return {
            "kind": "ClassRegion",
            "k": field("k", target.k),
            "mask": None if target.mask is None else field("mask", target.mask),
            "reduce": target.reduce,
            "axis": target.axis,
        }, arrays
    if isinstance(target, Similarity):
        return {
            "kind": "Similarity",
            "reference": field("reference", target.reference),
            "normalize": bool(target.normalize),
        }, arrays
    if isinstance(target, Box):
        return {
            "kind": "Box",
            "box": None if target.box is None else field("box", target.box),
            "k": field("k", target.k),
            "iou": float(target.iou),
            "top": target.top,
        }, arrays
    if is_target(target):
        raise XaikitValueError(
            f"target={getattr(target, '__name__', type(target).__name__)}: explain_dataset cannot store a "
            "callable target (its store must say what its maps explain when read back): use "
            "ClassRegion, Output, Similarity, Box or Class, or explain batches with xk.xai.explain"
        )
    raise XaikitValueError(f"target must be a target object; got {describe(target)}")  # pragma: no cover


def per_sample_fields(described: Any) -> dict[str, Mapping[str, Any]]:
    """The per-sample fields of a stored description: ``{field: its manifest entry}``."""
    if not isinstance(described, Mapping):
        return {}
    return {k: v for k, v in described.items() if isinstance(v, Mapping) and "per_sample" in v}


def _key_values(field: str, key: str, fields: Mapping[str, np.ndarray], n: int, what: str) -> np.ndarray:
    if key not in fields:  # pragma: no cover - the source reads every key it was asked for
        raise XaikitValueError(f"target={what}: {field}={key!r}: the data gave no values for that key")
    arr = _host(fields[key])
    if arr.dtype == object:
        try:
            arr = np.stack([_host(v) for v in arr])
        except ValueError as exc:
            raise XaikitValueError(
                f"target={what}: {field}={key!r}: the dataset's values have different shapes ({exc})"
            ) from None
    if arr.shape[:1] != (n,):
        raise XaikitValueError(
            f"target={what}: {field}={key!r}: expected one value per sample ({n}); got {describe(arr)}"
        )
    return arr


def complete_keys(described: dict[str, Any], fields: Mapping[str, np.ndarray]) -> dict[str, Any]:
    """The description with the shape and dtype of its key fields filled in from the values of
    the dataset's first samples (``fields``: ``{key: (n, ...)}``); key fields whose values do not
    fit the field (stacked boxes, not numbers) are refused naming ``target``."""
    kind = described["kind"]
    what = _CTOR[kind]
    out = dict(described)
    for name, entry in per_sample_fields(described).items():
        if entry["per_sample"] != "key":
            continue
        arr = _key_values(name, entry["key"], fields, len(next(iter(fields.values()))), what)
        rank = PER_SAMPLE[kind][name]
        if arr.ndim != rank + 1:
            if kind == "Box" and name == "box" and arr.ndim == 3:
                _field(kind, name, arr, len(arr))  # the stacked-boxes refusal
            raise XaikitValueError(
                f"target={what}: {name}={entry['key']!r}: each sample's value must be {_LOOKS[name]}; the "
                f"dataset gives {describe(arr[0])}"
            )
        out[name] = {**entry, "shape": [int(d) for d in arr.shape[1:]], "dtype": _dtype(name, arr, what).str}
    return out


def batch_values(
    described: Mapping[str, Any],
    arrays: Mapping[str, np.ndarray] | None,
    fields: Mapping[str, np.ndarray],
    start: int,
    stop: int,
) -> dict[str, np.ndarray]:
    """The per-sample values of samples ``start`` .. ``stop - 1``: ``{field: (stop - start, ...)}``
    in the stored dtype, from the given arrays or the batch's dataset keys (``fields``); a key's
    values of another shape than the first samples' are refused naming the field and key."""
    kind = described["kind"]
    out: dict[str, np.ndarray] = {}
    for name, entry in per_sample_fields(described).items():
        if entry["per_sample"] == "array":
            if arrays is None or name not in arrays:  # pragma: no cover - settings carry them
                raise XaikitValueError(f"target: the values of the per-sample field {name!r} are missing")
            out[name] = arrays[name][start:stop]
            continue
        arr = _key_values(name, entry["key"], fields, stop - start, _CTOR[kind])
        if list(arr.shape[1:]) != list(entry["shape"]):
            raise XaikitValueError(
                f"target={_CTOR[kind]}: {name}={entry['key']!r}: samples {start}..{stop - 1} give values of "
                f"shape {tuple(arr.shape[1:])}, the first samples {tuple(entry['shape'])}: every sample's "
                "must have one shape"
            )
        want = np.dtype(entry["dtype"])
        if _dtype(name, arr, _CTOR[kind]) != want and want != np.float64:
            raise XaikitValueError(
                f"target={_CTOR[kind]}: {name}={entry['key']!r}: samples {start}..{stop - 1} give "
                f"{arr.dtype} values, the first samples {want}"
            )
        out[name] = arr.astype(want)
    return out


def _value(entry: Any, name: str, values: Mapping[str, np.ndarray] | None) -> Any:
    if not (isinstance(entry, Mapping) and "per_sample" in entry):
        return entry
    if values is None or name not in values:
        raise XaikitValueError(
            f"target: the field {name!r} holds one value per sample; ask for the samples' target "
            "(DatasetExplanation.targets_of(indices))"
        )
    return values[name]


def target_from(described: Any, values: Mapping[str, np.ndarray] | None = None) -> Any:
    """The target a store's manifest records: None, ``"label"`` or the rebuilt target object;
    its per-sample fields from ``values`` (``{field: (n, ...)}``, the samples' values)."""
    if not isinstance(described, Mapping):
        return described
    kind = described.get("kind")

    def get(name: str) -> Any:
        return _value(described.get(name), name, values)

    if kind == "Class":
        return Class(get("k"))
    if kind == "Output":
        return Output(get("index"))
    if kind == "ClassRegion":
        mask = get("mask")
        return ClassRegion(
            get("k"),
            mask=None
            if mask is None
            else np.asarray(mask, dtype=bool if np.asarray(mask).dtype == bool else np.float64),
            reduce=described.get("reduce", "sum"),
            axis=described.get("axis"),
        )
    if kind == "Similarity":
        return Similarity(np.asarray(get("reference"), dtype=np.float64), normalize=described["normalize"])
    if kind == "Box":
        box = get("box")
        return Box(
            None if box is None else np.asarray(box, dtype=np.float64),
            get("k"),
            iou=described.get("iou", 0.5),
            top=described.get("top"),
        )
    raise XaikitValueError(f"the store's manifest records an unknown target {described!r}")


def batch_target(described: Any, values: Mapping[str, np.ndarray]) -> Any:
    """The target object of one batch: what ``explain`` would be given for its samples."""
    return target_from(described, values)
