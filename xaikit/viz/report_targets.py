"""The explained target drawn on the report's sample thumbnails: for an ``explain_dataset`` store
whose target is a ``Box`` (the box, a one-pixel frame) or a ``ClassRegion`` with a mask (the
region's outline, :func:`xaikit.viz.contour.outline`), fixed or per sample (the store's
``target_<field>`` arrays; see :mod:`xaikit.xai.dataset.targets`), in :data:`MARK_RGB`.

Read from the store's ``manifest.json`` and Zarr arrays only (``xaikit.viz`` sits below
``xaikit.xai``). Box coordinates are pixels of the explained images, whose height and width
come from the maps' shape; a box whose coordinates all lie in [0, 1] is read as fractions of
the image (a DETR-style ``pred_boxes`` target). A store without such a target, or one that
cannot be read, leaves the thumbnails as they are.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from xaikit.layout import channel_axis_of
from xaikit.viz.contour import MARK_RGB, paint_box, paint_outline
from xaikit.viz.run_data import read_json

__all__ = ["MARK_RGB", "marked_thumbnails"]


def _spatial(map_shape: Any) -> tuple[int, int] | None:
    """(H, W) of the explained images from the store's map shape (one sample's)."""
    if not isinstance(map_shape, list) or len(map_shape) not in (2, 3):
        return None
    shape = tuple(int(d) for d in map_shape)
    if len(shape) == 2:
        return shape[0], shape[1]
    axis = channel_axis_of((1, *shape), prefer_first=shape[0] in (1, 3, 4))
    spatial = [d for i, d in enumerate(shape) if i + 1 != axis] if axis is not None else list(shape[1:])
    return (spatial[0], spatial[1]) if len(spatial) == 2 else None


def _values(store: Path, target: Mapping[str, Any], field: str, index: np.ndarray) -> np.ndarray | None:
    entry = target.get(field)
    if entry is None:
        return None
    if isinstance(entry, Mapping) and "per_sample" in entry:
        import zarr

        column = zarr.open_group(str(store), mode="r")[f"target_{field}"]
        return np.asarray(column.oindex[index.astype(np.int64)])  # type: ignore[union-attr]
    value = np.asarray(entry, dtype=np.float64)
    return np.broadcast_to(value, (len(index), *value.shape))


def _resized(mask: np.ndarray, side: int) -> np.ndarray:
    """A (h, w) mask as (side, side), nearest pixel (as the thumbnails are square)."""
    rows = np.minimum((np.arange(side) + 0.5) * mask.shape[0] / side, mask.shape[0] - 1).astype(int)
    cols = np.minimum((np.arange(side) + 0.5) * mask.shape[1] / side, mask.shape[1] - 1).astype(int)
    return mask[np.ix_(rows, cols)] != 0


def marked_thumbnails(store: Path, index: np.ndarray, thumbs: np.ndarray) -> np.ndarray | None:
    """``thumbs`` (n, t, t, 3) uint8 of the samples ``index`` with each one's explained box or
    region outline drawn (a copy), or None when the store's target has neither (see the module)."""
    try:
        manifest = read_json(store / "manifest.json")
        target = manifest.get("target") if isinstance(manifest, Mapping) else None
        if not isinstance(target, Mapping) or target.get("kind") not in ("Box", "ClassRegion"):
            return None
        box = target["kind"] == "Box"
        values = _values(store, target, "box" if box else "mask", np.asarray(index))
        hw = _spatial(manifest.get("map_shape"))
        if values is None or (box and hw is None) or len(values) != len(thumbs):
            return None
        side = int(thumbs.shape[1])
        out = np.array(thumbs, copy=True)
        for i, value in enumerate(values):
            if box and hw is not None:
                v = np.asarray(value, np.float64)
                fractions = bool(np.all((v >= 0) & (v <= 1)))
                scale = (float(side), float(side)) if fractions else (side / hw[0], side / hw[1])
                out[i] = paint_box(out[i], v, scale, MARK_RGB)
            elif np.ndim(value) == 2:
                out[i] = paint_outline(out[i], _resized(np.asarray(value), side), MARK_RGB)
        return out
    except Exception:  # the page shows the thumbnails as they are, never fails
        return None
