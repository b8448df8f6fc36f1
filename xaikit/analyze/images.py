"""Reading a dataset's images for the analysis: by sorted dataset indices, in ranges
(:func:`read_images`), and as small RGB uint8 thumbnails (:func:`thumbnails`, :func:`to_uint8`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from xaikit.analyze.maps import area_resample, spatial_layout

__all__ = ["read_images", "thumbnails", "to_uint8"]


def read_images(source: Any, indices: np.ndarray, batch_size: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """``(indices, images)`` of the samples at sorted ``indices`` of ``source``, read in ranges of
    at most ``batch_size`` consecutive dataset indices (only ranges holding a wanted index);
    samples the source cannot read are left out."""
    wanted = np.unique(np.asarray(indices, dtype=np.int64))
    i = 0
    while i < len(wanted):
        b0 = int(wanted[i])
        b1 = min(b0 + batch_size, len(source))
        j = int(np.searchsorted(wanted, b1))
        rows = source.get(b0, b1)
        read = rows.read
        row_of = np.cumsum(read) - 1
        offsets = wanted[i:j] - b0
        ok = read[offsets]
        if ok.any():
            yield wanted[i:j][ok], rows.x[row_of[offsets[ok]]]
        i = j


def to_uint8(images: np.ndarray) -> np.ndarray:
    """Images as uint8: values within [0, 1] scaled by 255, within [0, 255] kept, others
    stretched from their own min to their max (per image).

    Example:
        >>> to_uint8(np.array([[[0.0, 0.5, 1.0]]])).tolist(), to_uint8(np.array([[[-1.0, 1.0]]])).tolist()
        ([[[0, 128, 255]]], [[[0, 255]]])
    """
    x = np.asarray(images, dtype=np.float64)
    out = np.empty(x.shape, np.uint8)
    for i, img in enumerate(x):
        lo, hi = float(np.nanmin(img)), float(np.nanmax(img))
        if lo >= 0.0 and hi <= 1.0:
            scaled = img * 255.0
        elif lo >= 0.0 and hi <= 255.0:
            scaled = img
        else:
            scaled = (img - lo) / (hi - lo) * 255.0 if hi > lo else np.zeros_like(img)
        out[i] = np.clip(np.round(np.nan_to_num(scaled)), 0, 255).astype(np.uint8)
    return out


def _hwc(images: np.ndarray, spatial: tuple[int, int]) -> np.ndarray:
    """(n, H, W, C) float32 of a batch of images in their own layout."""
    axis, _ = spatial_layout(tuple(images.shape[1:]), spatial)
    if axis is None:
        return images[..., None]
    return np.moveaxis(images, 1 + axis, -1) if axis == 0 else images


def thumbnails(images: np.ndarray, spatial: tuple[int, int], side: int) -> np.ndarray:
    """(n, side, side, 3) uint8 thumbnails (area-resampled; one channel repeated to RGB, the
    first three of four kept)."""
    hwc = _hwc(np.asarray(images, np.float32), spatial)
    channels = np.moveaxis(hwc, -1, 1)  # (n, C, H, W)
    n, c = channels.shape[:2]
    small = area_resample(channels.reshape(n * c, *channels.shape[2:]), side).reshape(n, c, side, side)
    small = np.moveaxis(small, 1, -1)
    small = np.repeat(small, 3, axis=-1) if c == 1 else small[..., :3]
    return to_uint8(small)
