"""Display normalization: raw attributions -> greyscale masks in [0, 1]."""

from __future__ import annotations

import numpy as np


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
