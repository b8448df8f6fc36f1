"""Framework-neutral helpers: they accept numpy arrays, torch tensors and TF tensors (and nested
lists, tuples and dicts of them where it makes sense) and return the same kind of value."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from xaikit.backend.registry import framework_of, load_backend
from xaikit.errors import XaikitValueError, describe_name

__all__ = ["reduce_mean", "squeeze", "to_number", "to_tensor"]

_TARGETS = {"np": "np", "numpy": "np", "torch": "torch", "tf": "tf", "tensorflow": "tf"}


def to_number(data: Any) -> np.ndarray:
    """Convert a tensor, array, scalar or list of numbers to a numpy array on the host.

    Example:
        >>> to_number(3.5)
        array(3.5)
        >>> to_number([[1, 2], [3, 4]]).shape
        (2, 2)
    """
    fw = framework_of(data)
    if fw is not None and (load_backend(fw).is_tensor(data) or hasattr(data, "numpy")):
        return _plain_float(np.asarray(load_backend(fw).to_numpy(data)))
    if isinstance(data, (list, tuple)) and data and framework_of(data[0]) is not None:
        return np.stack([to_number(d) for d in data])
    return _plain_float(np.asarray(data))


def _plain_float(arr: np.ndarray) -> np.ndarray:
    """``arr`` as float32 when its dtype is one of ``ml_dtypes``' floats (bfloat16, float8: what a
    TensorFlow bfloat16 tensor becomes on the host), which numpy files under "void" (kind "V")
    and so cannot do arithmetic with; any other array unchanged."""
    if arr.dtype.kind == "V" and arr.dtype.names is None and arr.dtype.itemsize <= 2:
        try:
            return arr.astype(np.float32)
        except (TypeError, ValueError):
            return arr
    return arr


def to_tensor(data: Any, target_type: str) -> Any:
    """Convert values, recursively through dicts, lists and tuples, to one tensor type.

    Args:
        data: arrays, tensors, numbers or strings, possibly nested in dicts/lists/tuples.
        target_type: ``"np"``, ``"torch"`` or ``"tf"``.

    Returns:
        The same structure with every array-like leaf converted; strings are left alone.

    Example:
        >>> out = to_tensor({"x": [1.0, 2.0], "name": "a"}, "np")
        >>> out["x"].dtype.name, out["name"]
        ('float64', 'a')
    """
    target = _TARGETS.get(target_type) if isinstance(target_type, str) else None  # arrays: unhashable
    if target is None:
        raise XaikitValueError(
            f"target_type must be one of 'np', 'torch', 'tf'; got {describe_name(target_type)}"
        )
    if isinstance(data, Mapping):
        return {k: to_tensor(v, target) for k, v in data.items()}
    if isinstance(data, tuple) and not hasattr(data, "_fields"):
        return tuple(to_tensor(v, target) for v in data)
    if isinstance(data, (str, bytes)) or data is None:
        return data
    if isinstance(data, list) and not _is_numeric_list(data):
        return [to_tensor(v, target) for v in data]
    if target == "np":
        return to_number(data)
    bk = load_backend(target)
    if framework_of(data) == bk.name:
        return data
    array = to_number(data)
    return bk.as_tensor(array, None, dtype=None)


def _is_numeric_list(data: list[Any]) -> bool:
    try:
        return np.asarray(data).dtype.kind in "biufc"
    except (ValueError, TypeError):
        return False


def squeeze(tensor: Any, axis: int | None = None) -> Any:
    """Remove size-1 axes (all of them, or only ``axis``), keeping the value's type.

    Example:
        >>> squeeze(np.zeros((1, 2, 1)), axis=0).shape
        (2, 1)
    """
    fw = framework_of(tensor)
    if fw is not None:
        return load_backend(fw).squeeze(tensor, axis)
    return np.squeeze(tensor, axis=axis)


def reduce_mean(tensor: Any, axis: int | tuple[int, ...] | None = None, keepdims: bool = False) -> Any:
    """Mean over ``axis`` (all axes when None), keeping the value's type.

    Example:
        >>> reduce_mean(np.array([[1.0, 3.0], [5.0, 7.0]]), axis=0).tolist()
        [3.0, 5.0]
    """
    fw = framework_of(tensor)
    if fw is not None:
        return load_backend(fw).mean(tensor, axis, keepdims)
    return np.mean(tensor, axis=axis, keepdims=keepdims)
