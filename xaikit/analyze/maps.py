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


@dataclass
class ShardMaps:
    """One shard's reduced maps: ``where`` (positions in the columns), ``maps`` (len(where), s, s),
    ``thumbs`` (dataset index -> (t, t) map), ``skipped`` counts."""

    where: np.ndarray
    maps: np.ndarray
    thumbs: dict[int, np.ndarray]
    skipped: dict[str, int]


def reduce_shard(
    block: np.ndarray,
    rows: list[tuple[int, int]],
    axis: int | None,
    size: int,
    thumb_size: int = 0,
    wanted: dict[int, int] | None = None,
) -> ShardMaps:
    """Reduce the maps of one shard: ``block`` holds its rows, ``rows`` pairs (row in the block,
    position in the columns) of the samples to keep; ``wanted`` maps positions to the dataset
    indices whose (thumb_size, thumb_size) thumbnails are wanted. A pure function of its
    arguments, so a Ray task can run it."""
    out = ShardMaps(
        np.zeros(0, np.int64), np.zeros((0, size, size), np.float32), {}, {"zero": 0, "non-finite": 0}
    )
    where_parts, map_parts = [], []
    for b0 in range(0, len(rows), _BLOCK):
        part = rows[b0 : b0 + _BLOCK]
        reduced = reduce_maps(block[[j for j, _ in part]], axis)
        flat = reduced.reshape(len(part), -1)
        finite = np.isfinite(flat).all(axis=1)
        total = np.where(finite, flat.sum(axis=1, dtype=np.float64, where=np.isfinite(flat)), 0.0)
        good = finite & (total > 0)
        out.skipped["non-finite"] += int((~finite).sum())
        out.skipped["zero"] += int((finite & (total <= 0)).sum())
        if not good.any():
            continue
        small = area_resample(reduced[good], size)
        small /= small.sum(axis=(1, 2), keepdims=True)
        where_parts.append(np.asarray([p for (_, p), g in zip(part, good) if g], dtype=np.int64))
        map_parts.append(small)
        if wanted and thumb_size:
            for (_, p), g, r in zip(part, good, reduced):
                if g and p in wanted:
                    out.thumbs[wanted[p]] = area_resample(r[None], thumb_size)[0]
    if where_parts:
        out.where, out.maps = np.concatenate(where_parts), np.concatenate(map_parts)
    return out


def _reduce_stored(
    path: str, start: int, stop: int, rows: list[tuple[int, int]], axis: int | None, size: int,
    thumb_size: int, wanted: dict[int, int],
) -> ShardMaps:  # fmt: skip
    """:func:`reduce_shard` of rows ``start`` .. ``stop - 1`` read from the store at ``path`` by
    the caller's process (a Ray task reads its shard itself: only the small maps travel back)."""
    from xaikit.xai import DatasetExplanation

    array = DatasetExplanation(path).store.group(writable=False)["attributions"]
    return reduce_shard(_read_rows(array, start, stop), rows, axis, size, thumb_size, wanted)


def _shard_jobs(
    explanation: Any, columns: Columns, wanted_index: set[int]
) -> Iterator[tuple[dict[str, Any], list[tuple[int, int]], dict[int, int]]]:
    position = {int(i): p for p, i in enumerate(columns.index)}
    for rec in _records(explanation):
        start, stop = int(rec["start"]), int(rec["stop"])
        rows = [(j, position[start + j]) for j in range(stop - start) if start + j in position]
        wanted = {p: start + j for j, p in rows if start + j in wanted_index}
        yield rec, rows, wanted


def read_maps(
    explanation: Any,
    columns: Columns,
    size: int,
    thumb_size: int = 0,
    thumb_index: np.ndarray | None = None,
    on_shard: Callable[[int], None] | None = None,
    engine: str = "local",
    workers: int | None = None,
    address: str | None = None,
) -> MapTable:
    """Read the committed shards of ``explanation`` one at a time into a :class:`MapTable` of
    (size, size) maps for the samples of ``columns``; the samples of ``thumb_index`` also as
    (thumb_size, thumb_size) maps. ``on_shard`` is told the samples of each shard read.

    With ``engine="ray"`` the shards are read and reduced by Ray tasks (on ``workers`` CPUs of a
    local cluster, or the cluster at ``address``; a session the caller started is used as it
    is), at most two per CPU in flight, so the driver holds only the small maps; every task
    reads its shard from the store's folder, which must be on a file system the workers see
    (as ``explain_dataset`` on Ray needs too). The result is the same as the local one.

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
    wanted_index = set() if thumb_index is None else {int(i) for i in thumb_index}
    maps = np.zeros((len(columns.index), size, size), np.float32)
    ok = np.zeros(len(columns.index), dtype=bool)
    table = MapTable(maps, columns.index, columns.label, columns.prediction, columns.klass, spatial)

    def keep(rec: dict[str, Any], part: ShardMaps) -> None:
        maps[part.where] = part.maps
        ok[part.where] = True
        table.thumbs.update(part.thumbs)
        for key, count in part.skipped.items():
            table.skipped[key] += count
        if on_shard is not None:
            on_shard(int(rec["stop"]) - int(rec["start"]))

    jobs = _shard_jobs(explanation, columns, wanted_index)
    if engine == "ray":
        _read_on_ray(str(explanation.store.path), jobs, axis, size, thumb_size, keep, workers, address)
    else:
        array = explanation.store.group(writable=False)["attributions"]
        for rec, rows, wanted in jobs:
            block = _read_rows(array, int(rec["start"]), int(rec["stop"]))
            keep(rec, reduce_shard(block, rows, axis, size, thumb_size, wanted))
    table.maps = maps[ok]
    table.index, table.label = columns.index[ok], columns.label[ok]
    table.prediction, table.klass = columns.prediction[ok], columns.klass[ok]
    return table


def _read_on_ray(
    path: str,
    jobs: Iterator[tuple[dict[str, Any], list[tuple[int, int]], dict[int, int]]],
    axis: int | None,
    size: int,
    thumb_size: int,
    keep: Callable[[dict[str, Any], ShardMaps], None],
    workers: int | None,
    address: str | None,
) -> None:
    """Reduce the shards of ``jobs`` in Ray tasks, a bounded number in flight, handing each
    result to ``keep`` as it arrives."""
    import ray

    from xaikit.xai.internal import start_ray

    started = start_ray(workers, address)
    try:
        task = ray.remote(num_cpus=1)(_reduce_stored)
        limit = 2 * max(1, int(ray.cluster_resources().get("CPU", 1)))
        pending: dict[Any, dict[str, Any]] = {}
        for rec, rows, wanted in jobs:
            if len(pending) >= limit:
                done, _ = ray.wait(list(pending), num_returns=1)
                keep(pending.pop(done[0]), ray.get(done[0]))
            ref = task.remote(path, int(rec["start"]), int(rec["stop"]), rows, axis, size, thumb_size, wanted)
            pending[ref] = rec
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            keep(pending.pop(done[0]), ray.get(done[0]))
    finally:
        if started:
            ray.shutdown()
