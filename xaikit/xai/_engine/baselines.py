"""Baselines: what "no information" looks like, for Integrated Gradients' path start and for the
pixels that deletion/insertion curves remove. One list of names, one checker, one blur rule.

* ``"zeros"``: all zeros;  ``"black"``: each sample's minimum;  ``"mean"``: each sample's mean
  colour (per channel);  ``"blur"``: a Gaussian blur of the sample, sigma = max(1, longest spatial
  side / 8);  an array broadcastable to the batch;
* ``"uniform"`` (Integrated Gradients only): uniform noise in each sample's value range, drawn
  per noise sample from the call's seed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import numpy as np

from xaikit.errors import XaikitTypeError, XaikitValueError, describe

#: every baseline name; a function that takes baselines names which of them it accepts
BASELINES = ("uniform", "zeros", "black", "mean", "blur")
#: the baselines a deterministic image can be computed for (no random draw)
FIXED_BASELINES = ("zeros", "black", "mean", "blur")


def gaussian_blur(x: np.ndarray, sigma: float, spatial_axes: Sequence[int]) -> np.ndarray:
    """Gaussian blur along the given axes (edges handled by renormalizing the kernel).

    Implemented as one small matrix product per axis, so a batch is blurred at once.

    Each output is a weighted mean of its neighbours, so a constant image stays constant.

    Example:
        >>> img = np.zeros((1, 5, 5)); img[0, 2, 2] = 1.0
        >>> out = gaussian_blur(img, 1.0, spatial_axes=(1, 2))
        >>> bool(out[0, 2, 2] < 0.5), bool(out[0, 2, 3] > 0)
        (True, True)
        >>> float(gaussian_blur(np.ones((1, 4, 4)), 2.0, (1, 2)).max())
        1.0
    """
    out = np.asarray(x, dtype=np.float64)
    if sigma <= 0:
        return out.copy()
    for axis in spatial_axes:
        n = out.shape[axis]
        idx = np.arange(n)
        kernel = np.exp(-0.5 * ((idx[:, None] - idx[None, :]) / sigma) ** 2)
        kernel /= kernel.sum(axis=1, keepdims=True)
        out = np.moveaxis(np.tensordot(kernel, np.moveaxis(out, axis, 0), axes=(1, 0)), 0, axis)
    return out


def spatial_axes(ndim: int, channel_axis: int | None) -> tuple[int, ...]:
    """The non-batch, non-channel axes of a batch of ``ndim`` dimensions."""
    return tuple(a for a in range(1, ndim) if a != channel_axis)


def check_baseline(baseline: object, allowed: Sequence[str] = BASELINES, name: str = "baseline") -> None:
    """Reject a baseline that is neither one of the ``allowed`` names nor an array, early.

    Arrays are checked against the input later (:func:`baseline_array`)."""
    names = ", ".join(map(repr, allowed))
    if isinstance(baseline, str):
        if baseline not in allowed:
            raise XaikitValueError(f"{name} must be one of {names} or an array; got {baseline!r}")
    elif baseline is None or isinstance(baseline, (dict, bytes)):
        raise XaikitValueError(f"{name} must be one of {names} or an array; got {describe(baseline)}")
    elif isinstance(baseline, (complex, np.complexfloating)):
        raise XaikitTypeError(f"{name} must be one of {names} or real numbers; got {describe(baseline)}")


def blur_sigma(shape: tuple[int, ...], axes: Sequence[int]) -> float:
    """The blur baseline's sigma: max(1, the longest spatial side / 8) (0: nothing to blur)."""
    return max(1.0, max(shape[a] for a in axes) / 8.0) if axes else 0.0


def baseline_values(x: np.ndarray, baseline: object, channel_axis: int | None, key: str = "x") -> np.ndarray:
    """The baseline image of each sample of ``x`` (float64, x's shape) for a fixed baseline name
    or an array.

    Example:
        >>> x = np.array([[[1.0, 3.0], [5.0, 7.0]]])  # one 2x2 sample, no channel axis
        >>> baseline_values(x, "black", None).ravel().tolist(), baseline_values(x, "mean", None).ravel().tolist()
        ([1.0, 1.0, 1.0, 1.0], [4.0, 4.0, 4.0, 4.0])
    """
    x = np.asarray(x, dtype=np.float64)
    axes = spatial_axes(x.ndim, channel_axis)
    if isinstance(baseline, str):
        if baseline == "zeros":
            return np.zeros_like(x)
        if baseline == "black":
            low = x.reshape(x.shape[0], -1).min(axis=1)
            return np.broadcast_to(low.reshape((-1,) + (1,) * (x.ndim - 1)), x.shape).copy()
        if baseline == "mean":
            return np.broadcast_to(x.mean(axis=axes, keepdims=True), x.shape).copy()
        if baseline == "blur":
            return gaussian_blur(x, blur_sigma(x.shape, axes), axes)
        raise XaikitValueError(f"baseline {baseline!r} has no fixed image; use one of {FIXED_BASELINES}")
    return baseline_array(baseline, x.shape, key)


def real_array(value: object, what: str, expected: str = "") -> np.ndarray:
    """``value`` as a float64 array, or an :class:`XaikitTypeError` naming ``what`` for complex
    values (the cast would drop their imaginary part with only a numpy warning), text, objects
    and ragged lists.

    Example:
        >>> real_array([1, 2], "baseline").tolist()
        [1.0, 2.0]
        >>> real_array(2j, "baseline")
        Traceback (most recent call last):
        ...
        xaikit.errors.XaikitTypeError: baseline must be real numbers; got complex
    """
    try:
        arr = None if np.iscomplexobj(cast(Any, value)) else np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        arr = None
    if arr is None:
        raise XaikitTypeError(
            f"{what} must be real numbers{' ' + expected if expected else ''}; got {describe(value)}"
        )
    return arr


def baseline_array(value: object, x_shape: tuple[int, ...], key: str) -> np.ndarray:
    """An explicit baseline broadcast to the batch shape (a scalar, one sample, or a batch)."""
    arr = real_array(
        value,
        f"baseline for input {key!r}",
        "(a scalar, one sample or a batch) or a named baseline such as 'zeros'",
    )
    if not np.isfinite(arr).all():  # every row built from it would be NaN or inf
        bad = int((~np.isfinite(arr)).sum())
        raise XaikitValueError(
            f"baseline for input {key!r} must hold finite numbers; got {describe(value)} with {bad} NaN or "
            "infinite value(s): pass a finite value, or one of the named baselines such as 'zeros' or 'mean'"
        )
    try:
        if arr.ndim == len(x_shape) - 1:
            arr = arr[None]
        return np.broadcast_to(arr, x_shape).copy()
    except ValueError:
        raise XaikitValueError(
            f"baseline for input {key!r} must broadcast to the input's shape {x_shape} "
            f"(a scalar, one sample or a batch); got {describe(value)}"
        ) from None
