"""Blend a [0, 1] saliency mask as a heat map over its greyscale image ("x saliency" columns)."""

from __future__ import annotations

from typing import Any

import numpy as np
from matplotlib import colormaps as _mpl_colormaps
from matplotlib.colors import Colormap

from xaikit.backend import prefers_channel_first, to_number
from xaikit.checks import check_number
from xaikit.denormalize import to_denormalizer
from xaikit.errors import XaikitTypeError, XaikitValueError, describe
from xaikit.viz._image import display_range, fixed_range, is_channel_first, to_channels_last, to_unit

__all__ = ["overlay"]

_LUMA = (0.299, 0.587, 0.114)  # ITU-R BT.601 luma weights


def overlay(
    image: Any,
    mask: Any,
    alpha: float = 0.85,
    colormap: str | Colormap = "turbo",
    channel_axis: int | None = None,
    *,
    gamma: float = 0.5,
    grey: bool = True,
    smooth: float = 0.0,
    denormalize: Any = None,
) -> np.ndarray:
    """A heat-map blend of a saliency ``mask`` over its ``image``, as Grad-CAM tools draw it.

    For each sample, with ``m`` the mask (clipped to [0, 1]) and ``heat = colormap(m)`` as RGB:

    0. with ``denormalize=(mean, std)``, the image is first mapped back to its pixels,
       ``image * std + mean`` per channel (see :mod:`xaikit.denormalize`), so that normalized
       model inputs show the real picture;
    1. the image is brought to [0, 1] by the ImgData display rule (:func:`display_range`):
       uint8 / [0, 1] / [-1, 1] arrays as such, anything else (e.g. ``Normalize()``-d inputs)
       by the sample's own minimum and maximum;
    2. ``grey=True`` (default) desaturates it: ``base = 0.299 R + 0.587 G + 0.114 B`` repeated
       in the three channels (a single-channel image is grey already), so that every colour in
       the picture is saliency;
    3. the mask weighs the heat: ``a = alpha * m ** gamma`` and
       ``out = (1 - a) * base + a * heat``.

    Where the mask is 0 the picture is exactly the grey image; where it is 1 the heat colour
    has weight ``alpha`` (0.85). ``gamma < 1`` lifts the many small values of a sparse, speckled
    gradient mask so that the salient region reads as an area (``m = 0.25`` gets half the
    weight of ``m = 1`` with the default 0.5). The default ``"turbo"`` colormap is the
    jet-like rainbow that Grad-CAM users know (blue = low, red = high) with a smoother
    lightness ramp than ``"jet"``; its saturated hues stand out against the grey base, where a
    dark-to-bright map such as ``"inferno"`` would blend into a grey image.

    ``smooth > 0`` first blurs each mask with a Gaussian of that sigma (pixels) and rescales it
    to its own former maximum, so that a pixel-level speckle reads as the region it lies in, as
    the upsampled maps of Grad-CAM tools do (the mask columns of a grid keep the raw mask).

    ``out`` is a convex combination of two values in [0, 1], so it stays in [0, 1]. The
    colour-keeping formula of xaikit 0.x is ``overlay(image, mask, alpha=0.6,
    colormap="inferno", gamma=1.0, grey=False)``.

    Args:
        image: ``(B, H, W)``, ``(B, H, W, C)`` or ``(B, C, H, W)`` images, C in {1, 3}; numpy,
            torch or TF; any value range.
        mask: ``(B, H, W)``, ``(B, H, W, 1)`` or ``(B, 1, H, W)`` values in [0, 1], as the
            saliency engine returns them for display. NaN is drawn as 0 (no heat), so that a
            trace painting a degenerate map (which the engine reports with a
            ``DegenerateMapWarning``) still writes its figure.
        alpha: the heat's weight where the mask is 1, in [0, 1].
        colormap: colormap name or object for the heat.
        channel_axis: the image's channel axis when its layout is ambiguous.
        gamma: exponent applied to the mask in the weight (> 0; 1 = linear).
        grey: desaturate the image under the heat (``False``: keep its colours).
        smooth: sigma in pixels of the Gaussian blur of the mask (0: none).
        denormalize: the normalization of ``image`` to undo first: ``(mean, std)`` (numbers or
            one per channel) or a function images -> display images; None: none.

    Returns:
        float32 RGB in [0, 1]: ``(B, 3, H, W)`` if the image was channel-first, else
        ``(B, H, W, 3)``.

    Example:
        >>> import numpy as np
        >>> img = np.zeros((1, 2, 2, 3)); img[0, 0, 0] = (1.0, 0.0, 0.0)  # one red pixel
        >>> out = overlay(img, np.array([[[0.0, 1.0], [0.0, 0.0]]]), alpha=1.0, colormap="gray")
        >>> out.shape, out[0, 0, 1].tolist(), [round(v, 3) for v in out[0, 0, 0].tolist()]
        ((1, 2, 2, 3), [1.0, 1.0, 1.0], [0.299, 0.299, 0.299])
    """
    check_number(alpha, "alpha", low=0, high=1)
    check_number(gamma, "gamma", low=0, low_open=True)
    check_number(smooth, "smooth", low=0)
    den = to_denormalizer(denormalize)
    if isinstance(colormap, str):
        try:
            cmap = _mpl_colormaps[colormap]
        except KeyError:
            raise XaikitValueError(f"colormap must be a matplotlib colormap name; got {colormap!r}") from None
    elif isinstance(colormap, Colormap):
        cmap = colormap
    else:
        raise XaikitTypeError(f"colormap must be a colormap name or Colormap; got {describe(colormap)}")
    prefer_first = prefers_channel_first(image)
    img = to_number(image)
    if den is not None:
        img = den.apply(img, channel_axis, prefer_first)
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
    if smooth > 0:
        m = _blur(m, float(smooth))
    fixed = fixed_range(img)
    base = np.stack([to_unit(sample, display_range(sample, batch_range=fixed)) for sample in img])
    if base.ndim == 4 and grey:
        base = base @ np.array(_LUMA, dtype=np.float32)
    if base.ndim == 3:
        base = np.repeat(base[..., None], 3, axis=-1)
    heat = cmap(m)[..., :3]
    weight = (alpha * m**gamma)[..., None]
    out = ((1.0 - weight) * base + weight * heat).astype(np.float32)
    return np.moveaxis(out, -1, 1) if first else out


def _blur(masks: np.ndarray, sigma: float) -> np.ndarray:
    """Each (H, W) mask blurred (edges reflected) and rescaled to its own former maximum."""
    from scipy.ndimage import gaussian_filter

    out = gaussian_filter(masks, sigma=(0.0, sigma, sigma), mode="reflect")
    peak, new_peak = masks.max(axis=(1, 2)), out.max(axis=(1, 2))
    scale = np.where(new_peak > 0, peak / np.where(new_peak > 0, new_peak, 1.0), 0.0)
    return np.clip(out * scale[:, None, None], 0.0, 1.0)
