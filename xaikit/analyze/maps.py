"""The streaming reader of an ``explain_dataset`` store: its committed shards, one at a time, as
small non-negative maps that sum to 1, with the per-sample columns.

A map of the store is reduced to one value per pixel, (H, W): an input-shaped map (C, H, W) or
(H, W, C) by the sum of the absolute values over its channel axis (:func:`spatial_layout` finds
it), an (H, W) map (CAM) by its absolute value. It is then area-resampled to (s, s)
(:func:`area_resample`: each output cell is the mean of the input area it covers) and divided by
its sum. A map that is all zero or holds a NaN or infinity is skipped and counted.

Only one shard's maps are in memory at a time; what is kept is N x s x s float32 (plus, for the
displayed samples, t x t thumbnails).

Example:
    >>> import numpy as np
    >>> area_resample(np.arange(16.0).reshape(1, 4, 4), 2)[0].tolist()
    [[2.5, 4.5], [10.5, 12.5]]
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from xaikit.errors import XaikitValueError

__all__ = [
    "MapTable",
    "area_resample",
    "area_weights",
    "explained_class",
    "read_columns",
    "read_maps",
    "reduce_maps",
    "spatial_layout",
]

#: sizes an axis of channels may have
CHANNEL_SIZES = (1, 3, 4)
#: samples reduced at once within a shard (bounds the float32 temporaries)
_BLOCK = 32


def spatial_layout(
    shape: tuple[int, ...], spatial: tuple[int, int] | None = None
) -> tuple[int | None, tuple[int, int]]:
    """``(channel axis or None, (H, W))`` of one sample's shape.

    An (H, W) shape has no channel axis. Of a 3-D shape the channel axis is the first or the last
    one, whose size is 1, 3 or 4: the one whose removal leaves ``spatial`` when that is given
    (the maps' (H, W)); else the one that qualifies alone; if both do, the smaller one (the
    first on a tie: channels-first).

    Raises:
        XaikitValueError: a shape that is not an image's.

    Example:
        >>> spatial_layout((3, 8, 6)), spatial_layout((8, 6, 3)), spatial_layout((8, 6))
        ((0, (8, 6)), (2, (8, 6)), (None, (8, 6)))
        >>> spatial_layout((3, 5, 4), spatial=(3, 5))
        (2, (3, 5))
    """
    shape = tuple(int(d) for d in shape)
    if len(shape) == 2:
        return None, (shape[0], shape[1])
    if len(shape) == 3:
        first, last = shape[0] in CHANNEL_SIZES, shape[2] in CHANNEL_SIZES
        if spatial is not None:
            if first and shape[1:] == tuple(spatial):
                return 0, (shape[1], shape[2])
            if last and shape[:2] == tuple(spatial):
                return 2, (shape[0], shape[1])
        if first and (not last or shape[0] <= shape[2]):
            return 0, (shape[1], shape[2])
        if last:
            return 2, (shape[0], shape[1])
    raise XaikitValueError(
        "the maps must be images: (H, W), or (C, H, W) / (H, W, C) with C in 1, 3 or 4; "
        f"got maps of one sample of shape {shape}"
    )


def reduce_maps(maps: np.ndarray, channel_axis: int | None) -> np.ndarray:
    """(B, H, W) float32: the sum of absolute values over the channel axis (of one sample's
    shape) of a (B, ...) batch, or the absolute value of (B, H, W) maps.

    Example:
        >>> m = np.array([[[[1.0, -2.0]], [[-3.0, 4.0]]]])  # (1, C=2, H=1, W=2)
        >>> reduce_maps(m, 0).tolist()
        [[[4.0, 6.0]]]
    """
    a = np.abs(np.asarray(maps, dtype=np.float32))
    return a if channel_axis is None else a.sum(axis=1 + channel_axis, dtype=np.float32)


def area_weights(n: int, size: int) -> np.ndarray:
    """(size, n) float64 area weights: row i averages the input interval [i n / size, (i + 1) n / size).

    Example:
        >>> area_weights(3, 2).round(4).tolist()
        [[0.6667, 0.3333, 0.0], [0.0, 0.3333, 0.6667]]
    """
    edges = np.arange(size + 1, dtype=np.float64) * n / size
    lo, hi = edges[:-1, None], edges[1:, None]
    cells = np.arange(n, dtype=np.float64)[None, :]
    overlap = np.clip(np.minimum(hi, cells + 1) - np.maximum(lo, cells), 0.0, None)
    return overlap / (n / size)


def area_resample(maps: np.ndarray, size: int) -> np.ndarray:
    """(B, size, size) float32 area resampling of (B, H, W) maps: each output cell is the mean of
    the input area it covers (exact block means when H and W are multiples of ``size``; a cell
    over a fraction of a pixel weighs that pixel by the fraction; upsampling repeats).

    Example:
        >>> area_resample(np.array([[[1.0, 2.0, 3.0]]]), 1).tolist()
        [[[2.0]]]
    """
    maps = np.asarray(maps, dtype=np.float32)
    wh = area_weights(maps.shape[1], size).astype(np.float32)
    ww = area_weights(maps.shape[2], size).astype(np.float32)
    return np.matmul(np.matmul(wh, maps), ww.T)


def explained_class(manifest: dict[str, Any], label: np.ndarray, prediction: np.ndarray) -> np.ndarray:
    """The class each sample's map explains: the prediction, or the label for a store written
    with ``target="label"``."""
    return np.asarray(label if manifest.get("target") == "label" else prediction, dtype=np.int64)


@dataclass
class Columns:
    """The per-sample columns of the committed samples (unreadable ones left out), in index order."""

    index: np.ndarray
    label: np.ndarray
    prediction: np.ndarray
    klass: np.ndarray


def _records(explanation: Any) -> list[dict[str, Any]]:
    """The committed shards' records with maps, in index order."""
    records = sorted(explanation.store.records().values(), key=lambda r: int(r["start"]))
    return [r for r in records if r.get("maps", True)]


def _read_rows(array: Any, start: int, stop: int) -> np.ndarray:
    """Rows ``start`` .. ``stop - 1`` of a store array (one shard: the unit the store is read in)."""
    return np.asarray(array[start:stop])


def read_columns(explanation: Any) -> Columns:
    """The columns of the committed samples (small: (N,) integers), shard by shard."""
    root = explanation.store.group(writable=False)
    manifest = explanation.manifest
    parts: dict[str, list[np.ndarray]] = {"index": [], "label": [], "prediction": []}
    for rec in _records(explanation):
        start, stop = int(rec["start"]), int(rec["stop"])
        keep = np.ones(stop - start, dtype=bool)
        for item in rec.get("skipped") or ():
            keep[int(item["index"]) - start] = False
        for name in parts:
            parts[name].append(_read_rows(root[name], start, stop).astype(np.int64)[keep])
    cols = {k: np.concatenate(v) if v else np.zeros(0, np.int64) for k, v in parts.items()}
    return Columns(
        cols["index"], cols["label"], cols["prediction"],
        explained_class(manifest, cols["label"], cols["prediction"]),
    )  # fmt: skip


@dataclass
class MapTable:
    """The analysed samples: ``maps`` (N, s, s) float32, each summing to 1; their dataset
    ``index``, ``label`` (-1: none), ``prediction``, ``klass`` (the explained class); ``thumbs``
    (the samples asked for, as (t, t) float32 maps, by dataset index); ``skipped`` counts the
    maps left out (``"zero"``, ``"non-finite"``); ``spatial``: the maps' (H, W) in the store."""

    maps: np.ndarray
    index: np.ndarray
    label: np.ndarray
    prediction: np.ndarray
    klass: np.ndarray
    spatial: tuple[int, int]
    skipped: dict[str, int] = field(default_factory=lambda: {"zero": 0, "non-finite": 0})
    thumbs: dict[int, np.ndarray] = field(default_factory=dict)


def _shards(explanation: Any) -> Iterator[tuple[dict[str, Any], np.ndarray]]:
    root = explanation.store.group(writable=False)
    array = root["attributions"]
    for rec in _records(explanation):
        yield rec, _read_rows(array, int(rec["start"]), int(rec["stop"]))


def read_maps(
    explanation: Any,
    columns: Columns,
    size: int,
    thumb_size: int = 0,
    thumb_index: np.ndarray | None = None,
    on_shard: Callable[[int], None] | None = None,
) -> MapTable:
    """Read the committed shards of ``explanation`` one at a time into a :class:`MapTable` of
    (size, size) maps for the samples of ``columns``; the samples of ``thumb_index`` also as
    (thumb_size, thumb_size) maps. ``on_shard`` is told the samples of each shard read.

    Raises:
        XaikitValueError: the store has no committed shard with maps, or its maps are not images.
    """
    manifest = explanation.manifest
    map_shape = manifest.get("map_shape")
    if map_shape is None or not _records(explanation):
        raise XaikitValueError(
            f"store: {explanation.path!r} has no committed shard with maps yet; run explain_dataset "
            "(xaikit explain) on it to the end of at least one shard first"
        )
    axis, spatial = spatial_layout(tuple(map_shape))
    wanted = set() if thumb_index is None else {int(i) for i in thumb_index}
    position = {int(i): p for p, i in enumerate(columns.index)}
    maps = np.zeros((len(columns.index), size, size), np.float32)
    ok = np.zeros(len(columns.index), dtype=bool)
    table = MapTable(maps, columns.index, columns.label, columns.prediction, columns.klass, spatial)
    for rec, block in _shards(explanation):
        start = int(rec["start"])
        rows = [(j, position[start + j]) for j in range(len(block)) if start + j in position]
        for b0 in range(0, len(rows), _BLOCK):
            part = rows[b0 : b0 + _BLOCK]
            reduced = reduce_maps(block[[j for j, _ in part]], axis)
            flat = reduced.reshape(len(part), -1)
            finite = np.isfinite(flat).all(axis=1)
            total = np.where(finite, flat.sum(axis=1, dtype=np.float64, where=np.isfinite(flat)), 0.0)
            good = finite & (total > 0)
            table.skipped["non-finite"] += int((~finite).sum())
            table.skipped["zero"] += int((finite & (total <= 0)).sum())
            if not good.any():
                continue
            small = area_resample(reduced[good], size)
            small /= small.sum(axis=(1, 2), keepdims=True)
            where = np.asarray([p for (_, p), g in zip(part, good) if g])
            maps[where] = small
            ok[where] = True
            if wanted and thumb_size:
                for (_, p), g, r in zip(part, good, reduced):
                    if g and int(columns.index[p]) in wanted:
                        table.thumbs[int(columns.index[p])] = area_resample(r[None], thumb_size)[0]
        if on_shard is not None:
            on_shard(len(block))
    table.maps = maps[ok]
    table.index, table.label = columns.index[ok], columns.label[ok]
    table.prediction, table.klass = columns.prediction[ok], columns.klass[ok]
    return table
