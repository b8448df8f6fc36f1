"""Image layout and value-range rules shared by ImgData cells and :func:`overlay`.

Display range rule (:func:`display_range`), decided once per array, applied per image:

1. an explicit ``vrange=(low, high)`` wins; ``vrange="minmax"`` forces rule 6;
2. ``signed=True``: symmetric around 0, ``(-m, m)`` with ``m = max|x|`` of the image (or of the
   explicit range);
3. booleans: ``(0, 1)``;
4. integers within 0..255: ``(0, 255)``, i.e. drawn as uint8;
5. floats within [0, 1]: ``(0, 1)``; within [-1, 1]: ``(-1, 1)``;
6. otherwise the image's own minimum and maximum. A constant image ``c`` gets ``(c, c + 1)``, so
   it is drawn in the lowest colour instead of producing NaN.

ImgData's single-channel float cells (masks, maps and greyscale images: the colormapped ones)
replace rules 5 and 6 by :data:`PER_IMAGE` (:func:`cell_range`): each image by its own range, so
that a map is never painted in one colour because of its scale (a raw Grad-CAM map with maximum
0.036 on a fixed 0..1 scale is all but the colormap's lowest colour):

* a non-negative image: ``(0, max)``: 0 keeps the colormap's lowest colour and the image's
  maximum gets the highest. A display mask (values in [0, 1] reaching 1, as
  :func:`xaikit.xai._engine.display.to_display` makes them) paints exactly as on the fixed ``(0, 1)``;
  an all-zero image gets ``(0, 1)``: the lowest colour, honestly;
* a signed image: its own ``(min, max)``, as rule 6 (normalized greyscale inputs keep their
  contrast); ``signed=`` draws a range symmetric around 0 with a diverging colormap instead.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from xaikit.errors import XaikitValueError, describe
from xaikit.layout import channel_axis_of

#: channel counts a painted image may have (grey, RGB)
_PAINTED = (1, 3)

__all__ = [
    "PER_IMAGE",
    "cell_range",
    "display_range",
    "fixed_range",
    "is_channel_first",
    "to_channels_last",
    "to_unit",
]

Range = tuple[float, float]
#: the batch range of ImgData's single-channel float cells: each image by its own range, from 0
#: for a non-negative image (see the module)
PER_IMAGE = "per-image"


def _finite_bounds(values: np.ndarray) -> Range | None:
    finite = values[np.isfinite(values)] if values.dtype.kind == "f" else values
    if finite.size == 0:
        return None
    return float(finite.min()), float(finite.max())


def fixed_range(batch: np.ndarray) -> Range | None:
    """The fixed range that a whole array falls into (rules 3–5 of the module docstring), or None.

    Example:
        >>> import numpy as np
        >>> fixed_range(np.array([0.2, 0.7])), fixed_range(np.array([3.0, 5.0]))
        ((0.0, 1.0), None)
    """
    if batch.dtype.kind == "b":
        return 0.0, 1.0
    bounds = _finite_bounds(batch)
    if bounds is None:
        return None
    low, high = bounds
    if batch.dtype.kind in "iu" and low >= 0 and high <= 255:
        return 0.0, 255.0
    if batch.dtype.kind == "f" and low >= 0.0 and high <= 1.0:
        return 0.0, 1.0
    if batch.dtype.kind == "f" and low >= -1.0 and high <= 1.0:
        return -1.0, 1.0
    return None


def cell_range(batch: np.ndarray) -> Range | str | None:
    """The batch range of an ImgData image column: :data:`PER_IMAGE` for single-channel float
    images (B, H, W), else :func:`fixed_range`.

    Example:
        >>> import numpy as np
        >>> cell_range(np.full((2, 4, 4), 0.036)), cell_range(np.zeros((2, 4, 4, 3)))
        ('per-image', (0.0, 1.0))
    """
    if batch.ndim == 3 and batch.dtype.kind == "f":
        return PER_IMAGE
    return fixed_range(batch)


def display_range(
    image: np.ndarray,
    *,
    vrange: Range | str | None = None,
    signed: bool = False,
    batch_range: Range | str | None = "auto",
) -> Range:
    """The ``(low, high)`` values that map to the ends of the colour scale for one image.

    Args:
        image: one image (any shape).
        vrange: explicit ``(low, high)``, ``"minmax"`` (force the image's own range) or None.
        signed: symmetric range around zero.
        batch_range: :func:`fixed_range` of the whole array the image comes from, so every
            image of a column is scaled the same way; ``"auto"`` computes it from ``image``;
            :data:`PER_IMAGE` scales each image by its own range, from 0 when it is non-negative.

    Returns:
        ``(low, high)`` with ``low < high``.

    Example:
        >>> import numpy as np
        >>> display_range(np.array([0.2, 0.7]))
        (0.0, 1.0)
        >>> display_range(np.array([-0.5, 0.25]))
        (-1.0, 1.0)
        >>> display_range(np.array([3.0, 5.0]))
        (3.0, 5.0)
        >>> display_range(np.array([-2.0, 1.0]), signed=True)
        (-2.0, 2.0)
        >>> display_range(np.array([7, 9], dtype=np.uint8))
        (0.0, 255.0)
        >>> display_range(np.full(4, 5.0))
        (5.0, 6.0)
        >>> display_range(np.array([0.0, 0.036]), batch_range=PER_IMAGE)
        (0.0, 0.036)
        >>> display_range(np.array([-0.5, 0.25]), batch_range=PER_IMAGE)
        (-0.5, 0.25)
    """
    if isinstance(vrange, tuple):
        low, high = float(vrange[0]), float(vrange[1])
        if signed:
            m = max(abs(low), abs(high))
            return (-m, m) if m > 0 else (-1.0, 1.0)
        return low, high
    own = _finite_bounds(image)
    if signed:
        m = max(abs(own[0]), abs(own[1])) if own else 0.0
        return (-m, m) if m > 0 else (-1.0, 1.0)
    per_image = vrange is None and batch_range == PER_IMAGE
    if vrange is None and not per_image:
        fixed = fixed_range(image) if isinstance(batch_range, str) else batch_range
        if fixed is not None:
            return fixed
    if own is None:
        return 0.0, 1.0
    low, high = own
    if per_image and low >= 0:
        return (0.0, high) if high > 0 else (0.0, 1.0)
    if high <= low:
        return low, low + 1.0
    return low, high


def to_unit(image: np.ndarray, vrange: Range) -> np.ndarray:
    """Map ``image`` linearly from ``vrange`` to [0, 1] (float32, clipped; NaN becomes 0).

    Example:
        >>> import numpy as np
        >>> [round(float(v), 3) for v in to_unit(np.array([0, 128, 255], dtype=np.uint8), (0.0, 255.0))]
        [0.0, 0.502, 1.0]
    """
    low, high = vrange
    out = (image.astype(np.float64) - low) / (high - low)
    return np.nan_to_num(np.clip(out, 0.0, 1.0), nan=0.0).astype(np.float32)


def to_channels_last(
    value: np.ndarray, name: str, channel_axis: int | None = None, prefer_first: bool = False
) -> np.ndarray:
    """Bring a batch of images to ``(B, H, W)`` (one channel) or ``(B, H, W, 3)``.

    Args:
        value: ``(B, H, W)``, ``(B, H, W, C)`` or ``(B, C, H, W)`` with C of 1 or 3.
        name: the column or argument name for error messages.
        channel_axis: the channel axis of ``value`` (batch axis included), when it is known.
        prefer_first: resolve an ambiguous 4-D shape (channel-sized first *and* last axis) as
            channel-first (torch's convention); otherwise channel-last.

    Raises:
        XaikitValueError: not a 3-D/4-D batch, or not 1 or 3 channels.
    """
    arr = value
    if channel_axis is not None:
        if arr.ndim != 4:
            raise XaikitValueError(
                f"channel_axis for {name} needs a (B, H, W, C) or (B, C, H, W) value; got {describe(arr)}"
            )
        if not -4 <= channel_axis < 4 or channel_axis % 4 == 0:
            raise XaikitValueError(
                f"channel_axis for {name} must be 1, 2, 3 or -1 (axis 0 is the batch); got {channel_axis!r}"
            )
        arr = np.moveaxis(arr, channel_axis % 4, -1)
    elif arr.ndim == 4:
        if channel_axis_of(arr.shape, prefer_first, _PAINTED) == 1:
            arr = np.moveaxis(arr, 1, -1)
    elif arr.ndim != 3:
        raise XaikitValueError(
            f"{name} must hold images of shape (B, H, W), (B, H, W, C) or (B, C, H, W); got {describe(value)}"
        )
    if arr.ndim == 4:
        if arr.shape[-1] not in (1, 3):
            raise XaikitValueError(
                f"{name} must hold images with 1 or 3 channels (first or last axis after the batch); "
                f"got {describe(value)}"
            )
        if arr.shape[-1] == 1:
            arr = arr[..., 0]
    if arr.shape[1] == 0 or arr.shape[2] == 0:
        raise XaikitValueError(f"{name} holds empty images; got {describe(value)}")
    return arr


def is_channel_first(value: Any, channel_axis: int | None = None, prefer_first: bool = False) -> bool:
    """Whether a 4-D image batch would be read as channel-first by :func:`to_channels_last`."""
    shape = np.shape(value)
    if len(shape) != 4:
        return False
    if channel_axis is not None:
        return channel_axis % 4 == 1
    return channel_axis_of(tuple(shape), prefer_first, _PAINTED) == 1
