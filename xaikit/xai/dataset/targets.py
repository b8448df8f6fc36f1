"""Target objects (:mod:`xaikit.targets`) in ``explain_dataset``: what its store records of one.

A dataset is explained batch by batch, possibly in other processes (Ray workers), and its store
must say, when read back, what its maps explain. So ``explain_dataset`` takes a target object
whose fields hold for every sample — ``Class(k)``, ``ClassRegion(k, mask=None or (H, W),
reduce, axis)``, ``Output(i)``, ``Similarity((D,) reference, normalize)`` — and stores it in the
manifest as a JSON description (:func:`describe_target`: its kind and fields, a mask or a
reference as a list of numbers); :func:`target_from` rebuilds the object from it (the workers,
and :attr:`DatasetExplanation.target <xaikit.xai.dataset.results.DatasetExplanation.target>`).
Per sample, the table's ``score`` is then the target's clean score and ``prediction`` is -1
(a target object is not a class). A callable (not storable) and per-sample fields (one value
per sample of a batch, not of the dataset) are refused with an error naming ``target``.

Example:
    >>> d = describe_target(ClassRegion(2, reduce="mean"))
    >>> d["kind"], d["k"], d["mask"], d["reduce"]
    ('ClassRegion', 2, None, 'mean')
    >>> target_from(d).reduce
    'mean'
"""

from __future__ import annotations

from typing import Any

import numpy as np

from xaikit.errors import XaikitValueError, describe
from xaikit.targets import Class, ClassRegion, Output, Similarity, is_target

__all__ = ["describe_target", "target_from"]


def _one(value: Any, what: str) -> int:
    arr = np.asarray(value)
    if arr.size != 1:
        raise XaikitValueError(
            f"target={what}: explain_dataset takes one {what.split('(')[0].lower()} value for every "
            f"sample of the dataset, not one per sample of a batch; got {describe(value)}: explain "
            "batches with xk.xai.explain(model, x, target=...) for per-sample values"
        )
    return int(arr.reshape(-1)[0])


def _host(value: Any) -> np.ndarray:
    if hasattr(value, "detach"):
        value = value.detach().cpu().numpy()
    elif hasattr(value, "numpy") and not isinstance(value, np.ndarray):
        value = value.numpy()
    return np.asarray(value)


def describe_target(target: Any) -> dict[str, Any]:
    """The JSON description of a target object the store records (see the module).

    Raises:
        XaikitValueError: for a callable or per-sample fields, naming ``target``.
    """
    if isinstance(target, Class):
        return {"kind": "Class", "k": _one(target.k, "Class(k)")}
    if isinstance(target, Output):
        return {"kind": "Output", "index": _one(target.index, "Output(index)")}
    if isinstance(target, ClassRegion):
        mask = None
        if target.mask is not None:
            arr = _host(target.mask)
            if arr.ndim != 2 or arr.dtype.kind not in "biuf":
                raise XaikitValueError(
                    "target=ClassRegion(k, mask=...): explain_dataset takes one (H, W) mask for every "
                    f"sample of the dataset (or mask=None: each sample's predicted region); got "
                    f"{describe(target.mask)}"
                )
            mask = arr.astype(np.float64).tolist()
        return {
            "kind": "ClassRegion",
            "k": _one(target.k, "ClassRegion(k)"),
            "mask": mask,
            "reduce": target.reduce,
            "axis": target.axis,
        }
    if isinstance(target, Similarity):
        ref = _host(target.reference)
        if ref.ndim != 1 or ref.dtype.kind not in "iuf":
            raise XaikitValueError(
                "target=Similarity(reference): explain_dataset takes one (D,) reference for every "
                f"sample of the dataset; got {describe(target.reference)}"
            )
        return {
            "kind": "Similarity",
            "reference": ref.astype(np.float64).tolist(),
            "normalize": bool(target.normalize),
        }
    if is_target(target):
        raise XaikitValueError(
            f"target={getattr(target, '__name__', type(target).__name__)}: explain_dataset cannot store a "
            "callable target (its store must say what its maps explain when read back): use "
            "ClassRegion, Output, Similarity or Class, or explain batches with xk.xai.explain"
        )
    raise XaikitValueError(f"target must be a target object; got {describe(target)}")  # pragma: no cover


def target_from(described: Any) -> Any:
    """The target a store's manifest records: None, ``"label"`` or the rebuilt target object."""
    if not isinstance(described, dict):
        return described
    kind = described.get("kind")
    if kind == "Class":
        return Class(described["k"])
    if kind == "Output":
        return Output(described["index"])
    if kind == "ClassRegion":
        mask = described.get("mask")
        return ClassRegion(
            described["k"],
            mask=None if mask is None else np.asarray(mask, dtype=np.float64),
            reduce=described.get("reduce", "sum"),
            axis=described.get("axis"),
        )
    if kind == "Similarity":
        return Similarity(
            np.asarray(described["reference"], dtype=np.float64), normalize=described["normalize"]
        )
    raise XaikitValueError(f"the store's manifest records an unknown target {described!r}")
