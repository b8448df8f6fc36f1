"""Region outlines and boxes drawn over images: :class:`Contour` (an :class:`~xaikit.viz.ImgData`
overlay element) and the pixel painters the report uses on its thumbnails.

The outline of a mask is the set of its pixels that belong to a region (non-zero) and touch,
by one of their 4 neighbours, a pixel of another value or the image's edge: a one-pixel line
inside the region's border, so the region's interior and everything outside stay as they are.
An integer mask (a label map) outlines each label's regions, where two labels meet too.

Example:
    >>> m = np.zeros((5, 5), bool); m[1:4, 1:4] = True
    >>> outline(m).astype(int)[2].tolist()  # the middle row: the region's left and right edge
    [0, 1, 0, 1, 0]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from xaikit.backend import to_number
from xaikit.errors import XaikitTypeError, XaikitValueError, describe

__all__ = ["Contour", "box_pixels", "outline", "paint_box", "paint_outline"]

#: RGB of the outlines and boxes drawn on report thumbnails
MARK_RGB = (0, 255, 255)


def outline(mask: Any) -> np.ndarray:
    """The outline (bool, same shape) of a ``(..., H, W)`` bool or integer mask (see the module)."""
    m = np.asarray(mask)
    if m.dtype.kind == "f":
        m = np.where(np.isfinite(m), m, 0)
    padded = np.pad(m, [(0, 0)] * (m.ndim - 2) + [(1, 1), (1, 1)])
    centre = padded[..., 1:-1, 1:-1]
    edge = np.zeros(m.shape, dtype=bool)
    for dy, dx in ((-1, 0), (1, 0), (0, -1), (0, 1)):
        near = padded[..., 1 + dy : padded.shape[-2] - 1 + dy, 1 + dx : padded.shape[-1] - 1 + dx]
        edge |= near != centre
    return edge & (m != 0)


@dataclass(frozen=True)
class Contour:
    """Masks drawn as outlines in an :class:`~xaikit.viz.ImgData` cell: put it in a column's
    overlay list, over the images, e.g. ``ImgData(x=[images, Contour(masks)])``.

    Args:
        mask: ``(B, H, W)`` (or one ``(H, W)``) bool or integer masks, one per row (a numpy
            array or a tensor); an integer mask outlines each label's regions.
        color: the outline's matplotlib colour.

    Example:
        >>> Contour(np.ones((2, 4, 4), bool)).outlines().shape
        (2, 4, 4)
    """

    mask: Any
    color: str = "c"

    def outlines(self, name: str = "Contour") -> np.ndarray:
        """The (B, H, W) bool outlines; a mask of another shape or kind is refused naming ``name``."""
        try:
            m = to_number(self.mask)
        except Exception as exc:
            raise XaikitTypeError(
                f"{name}: mask must be an array or tensor; got {describe(self.mask)}"
            ) from exc
        if m.ndim == 2:
            m = m[None]
        if m.ndim != 3 or m.dtype.kind not in "biu" or 0 in m.shape:
            raise XaikitValueError(
                f"{name}: mask must be (B, H, W) or (H, W) bool or integer masks (a float map is an image: "
                f"threshold it, e.g. map > 0.5); got {describe(self.mask)}"
            )
        return outline(m)


def paint_outline(rgb: np.ndarray, mask: np.ndarray, color: tuple[int, int, int] = MARK_RGB) -> np.ndarray:
    """``rgb`` (H, W, 3) uint8 with the outline of ``mask`` (H, W) painted in ``color`` (a copy)."""
    out = np.array(rgb, copy=True)
    out[outline(mask)] = color
    return out


def box_pixels(boxes: Any, hw: tuple[int, int]) -> np.ndarray:
    """(n, H, W) bool: the pixels each (x0, y0, x1, y1) box of ``boxes`` (n, 4) touches (pixel
    column c when c + 1 > x0 and c < x1, rows likewise); its :func:`outline` is the frame
    :func:`paint_box` draws.

    Example:
        >>> box_pixels(np.array([[1.2, 0.0, 3.0, 1.5]]), (3, 4)).astype(int)[0].tolist()
        [[0, 1, 1, 0], [0, 1, 1, 0], [0, 0, 0, 0]]
    """
    b = np.asarray(boxes, np.float64).reshape(-1, 4)
    rows, cols = np.arange(hw[0], dtype=np.float64), np.arange(hw[1], dtype=np.float64)
    inside_y = (rows + 1 > b[:, 1:2]) & (rows < b[:, 3:4])
    inside_x = (cols + 1 > b[:, 0:1]) & (cols < b[:, 2:3])
    return inside_y[:, :, None] & inside_x[:, None, :]


def paint_box(
    rgb: np.ndarray, box: Any, scale: tuple[float, float] = (1.0, 1.0), color: tuple[int, int, int] = MARK_RGB
) -> np.ndarray:
    """``rgb`` (H, W, 3) uint8 with the one-pixel frame of ``box`` (x0, y0, x1, y1), scaled by
    ``scale`` (sy, sx) into its pixels, painted in ``color`` (a copy; clipped to the image; a
    box with NaN is left out)."""
    out = np.array(rgb, copy=True)
    b = np.asarray(box, np.float64).reshape(-1)
    if b.size != 4 or not np.all(np.isfinite(b)):
        return out
    h, w = out.shape[:2]
    x0, x1 = (int(np.clip(np.floor(v * scale[1]), 0, w - 1)) for v in (b[0], b[2] - 1e-9))
    y0, y1 = (int(np.clip(np.floor(v * scale[0]), 0, h - 1)) for v in (b[1], b[3] - 1e-9))
    if x1 < x0 or y1 < y0:
        return out
    out[y0, x0 : x1 + 1] = color
    out[y1, x0 : x1 + 1] = color
    out[y0 : y1 + 1, x0] = color
    out[y0 : y1 + 1, x1] = color
    return out
