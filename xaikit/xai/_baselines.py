"""Integrated Gradients baselines: where the path from "no information" to the input starts."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from xaikit.errors import XaikitValueError, describe

BASELINES = ("uniform", "zeros", "black", "blur")


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


def check_baseline(baseline: object, name: str = "baseline") -> None:
    """Reject unknown baseline names early (arrays are checked against the input later)."""
    if isinstance(baseline, str) and baseline not in BASELINES:
        raise XaikitValueError(
            f"{name} must be one of {', '.join(map(repr, BASELINES))} or an array; got {baseline!r}"
        )
    if baseline is None:
        raise XaikitValueError(
            f"{name} must be one of {', '.join(map(repr, BASELINES))} or an array; got None"
        )


def baseline_array(value: object, x_shape: tuple[int, ...], key: str) -> np.ndarray:
    """An explicit baseline broadcast to the batch shape (a scalar, one sample, or a batch)."""
    arr = np.asarray(value, dtype=np.float64)
    try:
        if arr.ndim == len(x_shape) - 1:
            arr = arr[None]
        return np.broadcast_to(arr, x_shape).copy()
    except ValueError:
        raise XaikitValueError(
            f"baseline for input {key!r} must broadcast to the input's shape {x_shape} "
            f"(a scalar, one sample or a batch); got {describe(value)}"
        ) from None
