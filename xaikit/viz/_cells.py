"""ImgData cells: how a column's value is read as text, boxes or images (one ``Layer`` each).

Kinds, decided per value (see :class:`~xaikit.viz.ImgData`):

* strings, bytes, numbers and ``(B,)`` / ``(B, N)`` arrays → text, one string per row;
* ``(B, N, 4|5)`` → bounding boxes;
* ``(B, H, W)``, ``(B, H, W, C)``, ``(B, C, H, W)`` → images;
* a :class:`~xaikit.viz.contour.Contour` → mask outlines (``"contour"``), drawn over the images;
* a 2-D *float* array ``(H, W)`` is one greyscale image (a batch of 1) instead of ``H`` rows of
  text when the column is named in an image-only option, or when its ``H`` is no other
  column's batch size and either another column has a batch of 1 or both sides are at least
  :data:`MIN_FLAT_IMAGE` long (see :func:`parse_columns`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from xaikit.backend import prefers_channel_first, to_number
from xaikit.errors import XaikitTypeError, XaikitValueError, describe
from xaikit.viz._image import Range, cell_range, to_channels_last
from xaikit.viz.contour import Contour

__all__ = ["MIN_FLAT_IMAGE", "Layer", "fmt", "is_scalar", "parse_columns"]

MAX_VECTOR_ITEMS = 6
#: both sides of a lone 2-D float array at least this long: an image, not rows of numbers
MIN_FLAT_IMAGE = 8


@dataclass
class Layer:
    """One overlay element of a column, prepared for painting."""

    kind: str  # "text" | "boxes" | "image" | "contour"
    data: (
        Any  # text: list[str]; boxes: (B, N, 4|5); image: (B, H, W) or (B, H, W, 3); contour: (B, H, W) bool
    )
    batch: int
    fixed: Range | str | None = None  # the batch range of the image array (see viz._image.cell_range)
    flat: tuple[int, int] | None = None  # text read from a 2-D numeric array of this shape
    flat_float: bool = False  # ... of floats
    color: str | None = None  # a contour's colour


def fmt(value: Any) -> str:
    """A cell value as display text (floats with 4 significant digits, long vectors cut)."""
    if isinstance(value, np.ndarray):
        if value.size == 1:
            return fmt(value.reshape(()).item())
        flat = value.ravel()
        items = [fmt(v) for v in flat[:MAX_VECTOR_ITEMS].tolist()]
        more = ", …" if flat.size > MAX_VECTOR_ITEMS else ""
        return "[" + ", ".join(items) + more + "]"
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def is_scalar(value: Any) -> bool:
    """Whether ``value`` is one plain text or number cell."""
    return isinstance(value, (str, bytes, int, float, bool, np.generic))


def parse_layer(
    name: str,
    value: Any,
    channel_axis: int | None,
    strict: bool = True,
    image_hint: bool = False,
    flat_image: bool = False,
) -> Layer:
    """One overlay element of a column.

    ``strict=False``: ``channel_axis`` only applies to 4-D values. ``image_hint``: the column has
    image-only options, so a ``(B, H, 4|5)`` value is a batch of images, not of boxes.
    ``flat_image``: a 2-D numeric array is one ``(H, W)`` image, not ``H`` rows of text.
    """
    if is_scalar(value):
        return Layer("text", [fmt(value)], 1)
    if isinstance(value, Contour):
        edges = value.outlines(f"column {name!r}: Contour")
        return Layer("contour", edges, int(edges.shape[0]), color=value.color)
    prefer_first = prefers_channel_first(value)
    try:
        arr = to_number(value)
    except Exception as exc:
        raise XaikitTypeError(
            f"column {name!r} must be an array, tensor, number, string or a list of them; "
            f"got {describe(value)}"
        ) from exc
    if not strict and arr.ndim != 4:
        channel_axis = None
    if arr.dtype.kind == "c":
        raise XaikitValueError(f"column {name!r} cannot draw complex values; got {describe(arr)}")
    flat_num = arr.ndim == 2 and arr.dtype.kind in "biuf" and channel_axis is None and 0 not in arr.shape
    if flat_num and flat_image:
        images = arr[None]
        return Layer("image", images, 1, cell_range(images))
    if arr.dtype.kind in "USOV" or (arr.ndim <= 2 and channel_axis is None):
        if arr.ndim == 0:
            return Layer("text", [fmt(arr)], 1)
        if arr.shape[0] == 0:
            raise XaikitValueError(f"column {name!r} is empty; got {describe(arr)}")
        shape = (int(arr.shape[0]), int(arr.shape[1])) if flat_num else None
        rows = [fmt(row) for row in arr]
        return Layer("text", rows, arr.shape[0], flat=shape, flat_float=flat_num and arr.dtype.kind == "f")
    if arr.shape[0] == 0:
        raise XaikitValueError(f"column {name!r} is empty; got {describe(arr)}")
    if arr.ndim == 3 and arr.shape[-1] in (4, 5) and channel_axis is None and not image_hint:
        return Layer("boxes", arr.astype(np.float64), arr.shape[0])
    if arr.ndim in (3, 4):
        images = to_channels_last(arr, f"column {name!r}", channel_axis, prefer_first)
        return Layer("image", images, images.shape[0], cell_range(images))
    raise XaikitValueError(
        f"column {name!r} must hold per-sample text (B,), boxes (B, N, 4|5) or images "
        f"(B, H, W[, C]) / (B, C, H, W), or one (H, W) float image; got {describe(arr)}"
    )


def split_layers(name: str, value: Any) -> list[Any]:
    """A list/tuple of arrays is an overlay stack; a list of plain scalars is one array of text."""
    if isinstance(value, (list, tuple)):
        if not value:
            raise XaikitValueError(f"column {name!r}: an overlay list must not be empty")
        if all(is_scalar(v) for v in value):
            return [np.asarray(value)]
        return list(value)
    return [value]


def _maybe_flat_image(layers: list[Layer]) -> bool:
    """A 2-D float array, or a 2-D numeric array stacked with images or boxes, read as text so far."""
    if any(layer.flat_float for layer in layers):
        return True
    return any(layer.flat is not None for layer in layers) and any(layer.kind != "text" for layer in layers)


def _flat_is_image(layers: list[Layer], sizes: set[int]) -> bool:
    """Whether a column whose 2-D float arrays were first read as text holds (H, W) images."""
    if any(layer.kind != "text" for layer in layers):
        return True  # drawn over (or under) an image or boxes: an image too
    floats = [layer.flat for layer in layers if layer.flat is not None and layer.flat_float]
    if not floats:
        return False  # integers and booleans alone are values, as before
    rows, cols = floats[0]
    if rows in sizes:
        return False  # B rows of N values beside other columns of B samples
    return 1 in sizes or min(rows, cols) >= MIN_FLAT_IMAGE


def _stack(
    name: str, values: list[Any], channel_axis: int | None, strict: bool, hint: bool, flat_image: bool
) -> list[Layer]:
    """The layers of one column. An image-only option (``hint``) makes a ``(B, H, 4|5)`` value an
    image; over a base image it does so only for a value of the base's height and width, so that
    the boxes of an overlay stack stay boxes when the column has a colormap or a value range."""
    first = parse_layer(name, values[0], channel_axis, strict, hint, flat_image)
    layers = [first]
    for value in values[1:]:
        shape = tuple(int(d) for d in (value.shape if hasattr(value, "shape") else np.shape(value)))
        same = first.kind == "image" and len(shape) == 3 and shape[1:3] == tuple(first.data.shape[1:3])
        layers.append(
            parse_layer(
                name, value, channel_axis, strict, hint and (first.kind != "image" or same), flat_image
            )
        )
    return layers


def parse_columns(
    raw: Mapping[str, Any], axes: Mapping[str, int], strict: bool, named: set[str]
) -> dict[str, list[Layer]]:
    """Every column's layers; a 2-D float array is one (H, W) image or rows of text (see module).

    Args:
        raw: ``{column: value}``.
        axes: the channel axis of the columns that have one.
        strict: ``channel_axis`` was given per column (so it applies to every value's rank).
        named: columns named by an image-only option (``colormaps``, ``vranges``, ...).
    """
    parsed: dict[str, list[Layer]] = {}
    for key, value in raw.items():
        parsed[key] = _stack(key, split_layers(key, value), axes.get(key), strict, key in named, key in named)
    flat_cols = [k for k, layers in parsed.items() if _maybe_flat_image(layers)]
    sizes = {layers[0].batch for k, layers in parsed.items() if k not in flat_cols}
    for key in flat_cols:
        if _flat_is_image(parsed[key], sizes):
            parsed[key] = _stack(key, split_layers(key, raw[key]), axes.get(key), strict, key in named, True)
    for key, layers in parsed.items():
        batches = [layer.batch for layer in layers]
        if len(set(batches)) > 1:
            raise XaikitValueError(
                f"column {key!r}: every overlay element must have the same batch size; got {batches}"
            )
    return parsed
