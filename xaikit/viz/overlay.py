"""Blend a [0, 1] saliency mask over its image (the Saliency trace's "x saliency" column)."""

from __future__ import annotations

from typing import Any

import numpy as np
from matplotlib import colormaps as _mpl_colormaps
from matplotlib.colors import Colormap

from xaikit.backend import framework_of, to_number
from xaikit.errors import XaikitTypeError, XaikitValueError, describe
from xaikit.viz._image import display_range, fixed_range, is_channel_first, to_channels_last, to_unit

__all__ = ["overlay"]


def overlay(
    image: Any,
    mask: Any,
    alpha: float = 0.6,
    colormap: str | Colormap = "inferno",
    channel_axis: int | None = None,
) -> np.ndarray:
    """Colour ``image`` by a saliency ``mask``: the image where the mask is 0, heat where it is 1.

    For each sample, with ``m`` the mask (clipped to [0, 1]) and ``heat = colormap(m)`` as RGB:

    1. the image is brought to [0, 1] by the ImgData display rule (:func:`display_range`):
       uint8 / [0, 1] / [-1, 1] arrays as such, anything else (e.g. ``Normalize()``-d inputs)
       by the sample's own minimum and maximum; a single-channel image becomes grey RGB;
    2. ``out = (1 - alpha * m) * image + alpha * m * heat``.

    ``out`` is a convex combination of two values in [0, 1], so it stays in [0, 1]; where the
    mask is 0 the picture is exactly the (rescaled) image.

    Args:
        image: ``(B, H, W)``, ``(B, H, W, C)`` or ``(B, C, H, W)`` images, C in {1, 3}; numpy,
            torch or TF; any value range.
        mask: ``(B, H, W)``, ``(B, H, W, 1)`` or ``(B, 1, H, W)`` values in [0, 1], as the
            saliency engine returns them for display.
        alpha: the mask's weight where it is 1, in [0, 1].
        colormap: colormap name or object for the heat.
        channel_axis: the image's channel axis when its layout is ambiguous.

    Returns:
        float32 RGB in [0, 1]: ``(B, 3, H, W)`` if the image was channel-first, else
        ``(B, H, W, 3)``.

    Example:
        >>> import numpy as np
        >>> out = overlay(np.zeros((1, 2, 2, 3)), np.array([[[0.0, 1.0], [0.0, 0.0]]]), alpha=1.0,
        ...               colormap="gray")
        >>> out.shape, out[0, 0, 1].tolist(), out[0, 0, 0].tolist()
        ((1, 2, 2, 3), [1.0, 1.0, 1.0], [0.0, 0.0, 0.0])
    """
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0.0 <= alpha <= 1.0:
        raise XaikitValueError(f"alpha must be a number in [0, 1]; got {alpha!r}")
    if isinstance(colormap, str):
        try:
            cmap = _mpl_colormaps[colormap]
        except KeyError:
            raise XaikitValueError(f"colormap must be a matplotlib colormap name; got {colormap!r}") from None
    elif isinstance(colormap, Colormap):
        cmap = colormap
    else:
        raise XaikitTypeError(f"colormap must be a colormap name or Colormap; got {describe(colormap)}")
    prefer_first = framework_of(image) == "torch"
    img = to_number(image)
    if img.ndim not in (3, 4):
        raise XaikitValueError(f"image must be (B, H, W), (B, H, W, C) or (B, C, H, W); got {describe(img)}")
    first = is_channel_first(img, channel_axis, prefer_first)
    img = to_channels_last(img, "image", channel_axis, prefer_first)
    m = to_number(mask).astype(np.float64)
    if m.ndim == 4 and m.shape[1] == 1 and m.shape[3] != 1:
        m = m[:, 0]
    elif m.ndim == 4 and m.shape[3] == 1:
        m = m[..., 0]
    if m.ndim != 3 or m.shape != img.shape[:3]:
        raise XaikitValueError(
            f"mask must be one channel of the image's batch and size {img.shape[:3]} "
            f"((B, H, W), (B, H, W, 1) or (B, 1, H, W)); got {describe(to_number(mask))}"
        )
    finite = m[np.isfinite(m)]
    if finite.size and (finite.min() < -1e-6 or finite.max() > 1 + 1e-6):
        raise XaikitValueError(
            f"mask must hold values in [0, 1] (a display mask, not raw attributions); "
            f"got values in [{finite.min():.4g}, {finite.max():.4g}]"
        )
    m = np.clip(np.nan_to_num(m, nan=0.0), 0.0, 1.0)
    fixed = fixed_range(img)
    base = np.stack([to_unit(sample, display_range(sample, batch_range=fixed)) for sample in img])
    if base.ndim == 3:
        base = np.repeat(base[..., None], 3, axis=-1)
    heat = cmap(m)[..., :3]
    weight = (alpha * m)[..., None]
    out = ((1.0 - weight) * base + weight * heat).astype(np.float32)
    return np.moveaxis(out, -1, 1) if first else out
