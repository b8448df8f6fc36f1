"""Display normalization: raw attributions -> greyscale masks in [0, 1]."""

from __future__ import annotations

import numpy as np


def channel_axis_of(shape: tuple[int, ...], channel_first_default: bool) -> int | None:
    """The channel axis of a batch of inputs, or None when it has none.

    4-D batches are images: an axis of size 1, 3 or 4 at position 1 (and not at the end) means
    channel-first, at the end (and not at 1) channel-last; when both or neither fit, the
    framework's convention decides. 3-D batches (B, H, W) and 2-D batches have no channel axis.

    Example:
        >>> channel_axis_of((8, 3, 32, 32), False), channel_axis_of((8, 32, 32, 3), True)
        (1, 3)
        >>> channel_axis_of((8, 3, 5, 3), True), channel_axis_of((8, 28, 28), True) is None
        (1, True)
    """
    if len(shape) != 4:
        return None
    first, last = shape[1] in (1, 3, 4), shape[-1] in (1, 3, 4)
    if first and not last:
        return 1
    if last and not first:
        return 3
    return 1 if channel_first_default else 3


def to_display(raw: np.ndarray, channel_axis: int | None, percentile: float = 99.0) -> np.ndarray:
    """Greyscale display masks: abs, summed over channels, scaled per sample to [0, 1].

    Each sample is shifted by its minimum and divided by (its ``percentile`` - its minimum),
    then clipped to [0, 1]; values above the percentile saturate (a mask so sparse that its
    percentile equals its minimum is scaled by its maximum instead). A constant mask gives zeros,
    never NaN. The channel axis is kept with size 1.

    Example:
        >>> m = to_display(np.array([[[[1.0], [-3.0]]]]), channel_axis=3)
        >>> m.shape, m.ravel().tolist()
        ((1, 1, 2, 1), [0.0, 1.0])
        >>> float(to_display(np.ones((2, 1, 4, 4)), channel_axis=1).max())
        0.0
    """
    mag = np.abs(np.asarray(raw, dtype=np.float64))
    if channel_axis is not None:
        mag = mag.sum(axis=channel_axis, keepdims=True)
    flat = mag.reshape(mag.shape[0], -1)
    vmin = flat.min(axis=1)
    vmax = np.percentile(flat, percentile, axis=1, method="lower") if flat.shape[1] else vmin
    vmax = np.where(vmax > vmin, vmax, flat.max(axis=1) if flat.shape[1] else vmin)  # sparse masks
    span = vmax - vmin
    safe = np.where(span > 0, span, 1.0)
    scaled = (flat - vmin[:, None]) / safe[:, None]
    scaled[span <= 0] = 0.0
    return np.clip(scaled, 0.0, 1.0).reshape(mag.shape).astype(np.float32)
