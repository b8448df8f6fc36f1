"""Features: which input values move together when a model-agnostic method switches a feature
off. A :class:`Features` holds, per sample, an integer id for every pixel (images, shared by the
channels) or every column (tabular ``(B, F)`` inputs), relabelled to ``0 ... F_b - 1``.

``features=`` is one of

* ``"patches"`` (default): a regular grid of about ``segments`` cells (``round(sqrt(segments))``
  per side, the last row and column taking the remainder);
* ``"slic"``, ``"felzenszwalb"``, ``"quickshift"``: superpixels of each image from
  scikit-image (``slic`` aims at ``segments`` of them; the other two choose their own count);
* an integer array: ``(H, W)`` or ``(B, H, W)`` for images, ``(F,)`` or ``(B, F)`` for tabular
  inputs (a grouping of the columns). Any integers: each distinct value is one feature.

Tabular inputs default to one feature per column.

Example:
    >>> f = patch_ids((4, 6), 4)
    >>> f.tolist()
    [[0, 0, 0, 1, 1, 1], [0, 0, 0, 1, 1, 1], [2, 2, 2, 3, 3, 3], [2, 2, 2, 3, 3, 3]]
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from xaikit.checks import check_int
from xaikit.errors import XaikitTypeError, XaikitValueError, describe

__all__ = ["FEATURE_KINDS", "Features", "feature_ids", "patch_ids", "segment"]

#: the names ``features=`` accepts
FEATURE_KINDS = ("patches", "slic", "felzenszwalb", "quickshift")


@dataclass
class Features:
    """Per-sample feature ids.

    Attributes:
        ids: int64 (B, P): the feature of each of a sample's P pixels (row-major over H x W)
            or columns, relabelled to 0 ... counts[b] - 1.
        counts: int64 (B,): F_b, each sample's number of features.
    """

    ids: np.ndarray
    counts: np.ndarray

    @property
    def width(self) -> int:
        """F, the most features of any sample (the width of every coalition matrix)."""
        return int(self.counts.max())

    def spread(self, values: np.ndarray) -> np.ndarray:
        """(B, F) per-feature values as (B, P): each pixel or column gets its feature's value."""
        return np.take_along_axis(values, self.ids, axis=1)


def patch_ids(hw: tuple[int, int], segments: int) -> np.ndarray:
    """A grid of about ``segments`` patches over an (H, W) image: ``round(sqrt(segments))`` cells
    per side (at most the side), each cell ``side // cells`` pixels with the remainder in the
    last one."""
    per = max(1, round(math.sqrt(segments)))
    rows = [_cells(side, min(per, side)) for side in hw]
    return rows[0][:, None] * (int(rows[1].max()) + 1) + rows[1][None, :]


def _cells(side: int, cells: int) -> np.ndarray:
    size = side // cells
    return np.minimum(np.arange(side) // size, cells - 1)


def segment(images: np.ndarray, kind: str, segments: int) -> np.ndarray:
    """Superpixels of each image of a channel-last (B, H, W, C) float batch: int (B, H, W).

    Each image is rescaled to [0, 1] first (scikit-image's colour conversions expect it);
    ``segments`` is the number SLIC aims at (Felzenszwalb and quickshift choose their own).
    """
    from skimage import segmentation

    out = np.empty(images.shape[:3], dtype=np.int64)
    for b, img in enumerate(images):
        lo, hi = float(img.min()), float(img.max())
        img = (img - lo) / (hi - lo) if hi > lo else np.zeros_like(img)
        gray = img.shape[-1] == 1
        if kind == "slic":
            out[b] = segmentation.slic(
                img[..., 0] if gray else img, n_segments=segments, start_label=0,
                channel_axis=None if gray else -1, convert2lab=not gray and img.shape[-1] == 3,
            )  # fmt: skip
        elif kind == "felzenszwalb":
            out[b] = segmentation.felzenszwalb(
                img[..., 0] if gray else img, channel_axis=None if gray else -1
            )
        else:  # quickshift takes three channels
            rgb = np.repeat(img, 3, axis=-1) if gray else img[..., :3]
            out[b] = segmentation.quickshift(
                rgb.astype(np.float64), convert2lab=False, kernel_size=3, max_dist=6
            )
    return out


def _relabel(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(B, P) arbitrary integers -> each row relabelled 0 ... F_b - 1 (in sorted order), and F_b."""
    out = np.empty(ids.shape, dtype=np.int64)
    counts = np.empty(ids.shape[0], dtype=np.int64)
    for b, row in enumerate(ids):
        uniq, inv = np.unique(row, return_inverse=True)
        out[b], counts[b] = inv.reshape(-1), len(uniq)
    return out, counts


def feature_ids(
    features: Any, x_host: np.ndarray, channel_axis: int | None, segments: int = 64, method: str = "method"
) -> Features:
    """The :class:`Features` of a batch.

    Args:
        features: ``"patches"``, ``"slic"``, ``"felzenszwalb"``, ``"quickshift"``, None (the
            default: patches for images, one feature per column for tabular inputs) or an
            integer array (see the module's doc).
        x_host: the batch on the host, (B, C, H, W) / (B, H, W, C) images or (B, F) rows.
        channel_axis: 1 or 3 for images, None for tabular rows.
        segments: how many features ``"patches"`` and ``"slic"`` aim at.
        method: the method's name, for messages.
    """
    B = x_host.shape[0]
    image = x_host.ndim == 4
    space = (
        ((x_host.shape[2], x_host.shape[3]) if channel_axis == 1 else (x_host.shape[1], x_host.shape[2]))
        if image
        else tuple(x_host.shape[1:])
    )
    segments = check_int(segments, "segments", 1, kind=XaikitTypeError)
    if isinstance(features, str) or features is None:
        kind = features if features is not None else ("patches" if image else None)
        if kind is not None and kind not in FEATURE_KINDS:
            raise XaikitValueError(
                f"features must be one of {FEATURE_KINDS} or an integer array of feature ids; got {kind!r}"
            )
        if kind is None:  # tabular: one feature per column
            ids = np.broadcast_to(np.arange(int(np.prod(space))), (B, int(np.prod(space))))
        elif not image:
            raise XaikitValueError(
                f"features={kind!r} segments images; method {method!r} got rows of shape {space}: pass "
                "features=None (one feature per column) or an integer array grouping the columns"
            )
        elif kind == "patches":
            ids = np.broadcast_to(patch_ids(space, segments).reshape(1, -1), (B, space[0] * space[1]))
        else:
            last = x_host if channel_axis == 3 else np.moveaxis(x_host, 1, -1)
            ids = segment(np.asarray(last, dtype=np.float64), kind, segments).reshape(B, -1)
        return Features(*_relabel(np.asarray(ids)))
    try:
        arr = np.asarray(features)
    except (ValueError, TypeError):  # ragged nested lists
        raise XaikitValueError(
            f"features must be an integer array of feature ids with one id per "
            f"{'pixel' if image else 'column'}; got {describe(features)} that is not a rectangular array"
        ) from None
    if arr.dtype == bool or not np.issubdtype(arr.dtype, np.integer):
        hint = (
            "a boolean mask is one region: give ids, e.g. mask.astype(int) (the region and the rest)"
            if arr.dtype == bool
            else "cast whole-number ids with .astype(int)"
        )
        raise XaikitTypeError(
            f"features must be an integer array of feature ids (or one of {FEATURE_KINDS}); got "
            f"{describe(features)}{'' if hasattr(features, 'dtype') else f' of {arr.dtype} values'}: {hint}"
        )
    if arr.shape == space:
        arr = np.broadcast_to(arr, (B, *space))
    elif arr.shape != (B, *space):
        raise XaikitValueError(
            f"features must give one id per {'pixel' if image else 'column'}: shape {space} (the same for "
            f"every sample) or {(B, *space)} (one per sample); got shape {arr.shape}"
        )
    return Features(*_relabel(arr.reshape(B, -1)))
