"""What ``explain_dataset`` checks before the model is built: the method's options as it runs them
(:func:`check_method_options`) and the class names (:func:`read_classes`, or the model's own,
:func:`model_classes`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from xaikit.errors import XaikitError, XaikitTypeError, XaikitValueError, describe
from xaikit.xai._engine.plan import check_max_batch, check_memory_budget
from xaikit.xai.agnostic.features import FEATURE_KINDS
from xaikit.xai.registry import get_method

__all__ = ["check_features", "check_method_options", "model_classes", "read_classes"]


#: rows per fused chunk unless given: a fixed size, so that every process gives the same bits
#: (``max_batch="auto"`` times chunk sizes per process and may choose differently)
DEFAULT_MAX_BATCH = 128


#: ``explain``'s own keywords that a store's options may hold (the engine's settings)
ENGINE_OPTIONS = ("max_batch", "memory_budget", "xla")


def check_method_options(method: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """The options of ``method`` as ``explain_dataset`` runs them (``max_batch`` 128 unless
    given), checked without the model: the names against the method's record (an unknown one is
    refused with the list of the method's), and the values that can be told without a model
    (the record's ``check``). The model-dependent ones (a CAM's ``layer``) are checked when it
    runs.

    Raises:
        XaikitTypeError: an unknown option, an option ``explain_dataset`` sets itself, a value of
            the wrong type.
        XaikitValueError: a value out of range.
    """
    record = get_method(method)
    opts = record.current_names(options)  # stored under the names of today
    for bad in ("x", "target", "return_delta", "seed", "progress"):
        if bad in opts:
            raise XaikitTypeError(
                f"explain_dataset sets {bad!r} itself (seed=, target= are its own arguments); got {bad}="
                f"{describe(opts[bad])}"
            )
    _, own = record.split_options({k: v for k, v in opts.items() if k not in ENGINE_OPTIONS})
    if own.get("raw"):
        raise XaikitValueError(
            "raw=True (a method's full result: a CAM at its layer's resolution, XRAI's regions, LIME's "
            "fit) is not stored by explain_dataset, which stores the maps; leave raw out"
        )
    opts.setdefault("max_batch", DEFAULT_MAX_BATCH)
    if opts["max_batch"] == "auto":
        raise XaikitValueError(
            "max_batch='auto' chooses chunk sizes per process, so shards run by different processes "
            "would not give the same bits; give an int (default 128)"
        )
    check_max_batch(opts["max_batch"])
    if "memory_budget" in opts:
        check_memory_budget(opts["memory_budget"])
    return opts


def check_features(method: str, options: Mapping[str, Any], sample: tuple[int, ...]) -> None:
    """A model-agnostic method's ``features=`` array checked against the shape of one sample
    (the first one read, before the model is built): ``explain_dataset`` gives the same array to
    every batch, so it must be one sample's feature ids, (H, W) for an image of either channel
    layout or (F,) for a row. A per-sample array (N, H, W) would not follow the samples through
    the batches (one of batch size would be applied to every batch): refused, as is an array of
    another shape. A name (``"slic"``, ...) segments each image and needs no check here.

    Raises:
        XaikitValueError: an array that is not one sample's feature ids.
    """
    features = options.get("features")
    fits: set[tuple[int, ...]]
    if "features" not in get_method(method).options or features is None or isinstance(features, str):
        return
    if len(sample) == 3:
        fits, what = {sample[1:], sample[:2]}, f"an integer (H, W) array for these {sample} images"
    elif len(sample) == 1:
        fits, what = {sample}, f"an integer (F,) array for these rows of {sample[0]} columns"
    else:
        return  # the method refuses other inputs when it runs
    try:
        shape = tuple(int(d) for d in np.shape(features))
    except ValueError:  # ragged nested lists
        raise XaikitValueError(
            f"features must be a rectangular integer array of feature ids; got {describe(features)}"
        ) from None
    if shape in fits:
        return
    per_sample = len(shape) == len(sample) + (0 if len(sample) == 3 else 1)
    raise XaikitValueError(
        f"features: explain_dataset gives one array of feature ids to every sample: {what}, or a "
        f"name ({', '.join(map(repr, FEATURE_KINDS))}); got shape {shape}"
        + (
            ", one mask per sample, which explain_dataset cannot follow through its batches: "
            "give one mask, a name that segments each image, or explain the batches with "
            "xk.xai.explain(..., features=masks)"
            if per_sample
            else ""
        )
    )


def read_classes(classes: Any) -> list[str] | None:
    """Class names from ``classes``: None; a list of names (index i is class i); or the path of
    a text file (one name per line) or of a JSON file (a list of names, or an object
    ``{"0": name, ...}`` with every index from 0).

    Example:
        >>> read_classes(["cat", "dog"])
        ['cat', 'dog']
    """
    if classes is None:
        return None
    if isinstance(classes, (str, os.PathLike)):
        path = os.fspath(classes)
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise XaikitValueError(
                f"classes: cannot read the class names file {path!r} ({type(exc).__name__}: {exc})"
            ) from None
        if path.lower().endswith(".json") or text.lstrip().startswith(("[", "{")):
            try:
                found = json.loads(text)
            except ValueError as exc:
                raise XaikitValueError(f"classes: {path!r} is not valid JSON ({exc})") from None
            return _names_list(found, f"the JSON in {path!r}")
        lines = text.splitlines()
        while lines and not lines[-1].strip():
            lines.pop()
        empty = [i + 1 for i, line in enumerate(lines) if not line.strip()]
        if empty or not lines:
            raise XaikitValueError(
                f"classes: {path!r} must hold one class name per line; "
                + (f"line {empty[0]} is empty" if empty else "it is empty")
            )
        return [line.strip() for line in lines]
    return _names_list(classes, "classes")


def _names_list(found: Any, what: str) -> list[str]:
    if isinstance(found, Mapping):
        try:
            by_index = {int(k): v for k, v in found.items()}
        except (TypeError, ValueError):
            by_index = {}
        if not by_index or sorted(by_index) != list(range(len(by_index))):
            raise XaikitValueError(
                f"classes: {what} must map every class index from 0 to a name; got keys {sorted(found)[:8]}"
            )
        found = [by_index[i] for i in range(len(by_index))]
    if isinstance(found, (str, bytes)) or not isinstance(found, (list, tuple)) or not found:
        raise XaikitTypeError(
            f"classes: {what} must be a non-empty list of class names; got {describe(found)}"
        )
    if not all(isinstance(n, str) and n.strip() for n in found):
        bad = next(n for n in found if not (isinstance(n, str) and n.strip()))
        raise XaikitTypeError(f"classes: {what} must hold non-empty strings; got {describe(bad)}")
    return [n.strip() for n in found]


def model_classes(model: Any, n_outputs: int | None) -> list[str] | None:
    """The class names a model carries (a Hugging Face model's ``config.id2label``), when they
    name each of its ``n_outputs`` outputs; else None."""
    id2label = getattr(getattr(model, "config", None), "id2label", None)
    if not isinstance(id2label, Mapping) or n_outputs is None:
        return None
    try:
        names = _names_list(id2label, "the model's config.id2label")
    except XaikitError:
        return None
    return names if len(names) == n_outputs else None
