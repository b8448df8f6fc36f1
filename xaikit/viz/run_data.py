"""The data files of a run folder that :func:`xaikit.viz.report` reads beside the PNG figures.

Three small formats, each written atomically (:mod:`xaikit.files`) and read back by the
report, so that the page is built from what is on disk and never re-computes anything:

* **cells** (``<key>_<mode>_epoch_<n>.npz``, written by ``ImageSaver`` next to the PNG of an
  :class:`~xaikit.viz.ImgData`): every column of the grid as it is painted. Text columns as
  strings (``text_<i>``, with their per-row colours in the metadata); image columns as uint8
  RGB exactly as the grid colours them (``rgb_<i>``, ``(B, h, w, 3)``) and, for single-channel
  columns, the display value in 0..255 (``value_<i>``, ``(B, h, w)``: a mask's [0, 1] as
  0..255), from which the report draws each mask's overlay. Images larger than
  :data:`MAX_CELL_SIDE` pixels are downscaled (box filter) to that size; the PNG keeps the
  full resolution. ``meta`` is a JSON string: ``{"format": "xaikit-cells/1", "title",
  "rows", "columns": [{"name", "title", "kind": "text"|"image", "mask", "signed", "colors"}]}``.
* **history** (``<key>_<mode>_epoch_<n>.json``, written by ``ImageSaver`` next to the plot of a
  tracker's list of :class:`~xaikit.summary.Summary`): ``{"format": "xaikit-history/1",
  "title", "series": [{"name", "mode", "metric", "steps", "values", "low", "high"}]}``
  (``low`` / ``high`` are null for series without a band).
* **evaluation** (``evaluation/<name>.json``, written by :func:`xaikit.evaluate.save_evaluation` from an
  ``xk.evaluate`` result): ``{"format": "xaikit-evaluation/1", "kind", "title", "note",
  "tables": [{"title", "columns", "rows"}], "curves": [{"title", "x_label", "y_label",
  "series": [{"name", "x", "y"}]}], "images": [file names beside the JSON]}``; a comparison
  (``kind: "comparison"``) also has ``"verdicts": [{"method", "text"}]`` and ``"metrics":
  [{"name", "label", "family", "higher_is_better", "question"}]``, from which the report draws
  its table of ranks (older files without them get the plain tables), and ``"agreement": [lines]``
  (whether its metrics rank the methods alike: :meth:`~xaikit.evaluate.CompareResult.metric_agreement`;
  with 3 methods or more its heatmap ``<name>_agreement.png`` is the second image and its pairs
  the last table).

NaN and infinite numbers are written as ``null`` (JSON has no NaN).

Example:
    >>> import tempfile, pathlib
    >>> import numpy as np
    >>> from xaikit.viz import ImgData
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> img = ImgData(y=np.array([1, 2]), x=np.zeros((2, 8, 8)), saliency=np.ones((2, 8, 8, 1)),
    ...               colormaps={"saliency": "inferno"}, colorbars={"saliency"})
    >>> cells = load_cells(save_cells(img, folder / "saliency_eval_epoch_1.npz"))
    >>> [c["name"] for c in cells["columns"]], [c["mask"] for c in cells["columns"]]
    (['y', 'x', 'saliency'], [False, False, True])
    >>> cells["text"][0], cells["rgb"][2].shape, int(cells["value"][2].max())
    (['1', '2'], (2, 8, 8, 3), 255)
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from xaikit.errors import XaikitTypeError, XaikitValueError, describe
from xaikit.files import atomic_path, write_json

__all__ = [
    "CELLS_FORMAT",
    "EVALUATION_FORMAT",
    "HISTORY_FORMAT",
    "MAX_CELL_SIDE",
    "jsonable",
    "load_cells",
    "read_json",
    "save_cells",
    "save_history",
    "table_doc",
]

CELLS_FORMAT = "xaikit-cells/1"
HISTORY_FORMAT = "xaikit-history/1"
EVALUATION_FORMAT = "xaikit-evaluation/1"
#: images of a cells file are downscaled to at most this many pixels on their longer side
MAX_CELL_SIDE = 128


def read_json(path: Path) -> Any:
    """The JSON document at ``path``, or None when it cannot be read or parsed (a page section
    is then left out or noted, never a crash)."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def jsonable(value: Any) -> Any:
    """``value`` with numpy scalars / arrays as Python values and NaN / inf as None (valid JSON).

    Example:
        >>> jsonable({"a": np.float32(0.5), "b": [float("nan"), np.arange(2)]})
        {'a': 0.5, 'b': [None, [0, 1]]}
    """
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, np.ndarray):
        return jsonable(value.tolist())
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if value is None or isinstance(value, (bool, int, str)):
        return value
    return str(value)


# ---------------------------------------------------------------------------------------- cells
def _downscale(batch: np.ndarray) -> np.ndarray:
    """(B, H, W[, 3]) uint8 with the longer side cut to :data:`MAX_CELL_SIDE` (box filter)."""
    h, w = batch.shape[1:3]
    side = max(h, w)
    if side <= MAX_CELL_SIDE:
        return batch
    from PIL import Image

    size = (max(1, round(w * MAX_CELL_SIDE / side)), max(1, round(h * MAX_CELL_SIDE / side)))
    return np.stack([np.asarray(Image.fromarray(im).resize(size, Image.Resampling.BOX)) for im in batch])


def _painted(img: Any, column: str, layer: Any) -> tuple[np.ndarray, np.ndarray | None]:
    """The column's images coloured as the grid paints them: uint8 RGB, and the display value
    (0..255) of single-channel images."""
    from matplotlib import colormaps

    from xaikit.viz._image import display_range, to_unit

    opts = img._options
    signed = column in opts.signed
    data = np.asarray(layer.data)
    rgb = np.empty(data.shape[:3] + (3,), dtype=np.uint8)
    value = np.empty(data.shape[:3], dtype=np.uint8) if data.ndim == 3 else None
    cmap = opts.cmaps.get(column) or (colormaps["RdBu_r"] if signed else opts.cmap)
    for i, image in enumerate(data):
        rng = display_range(image, vrange=opts.vranges.get(column), signed=signed, batch_range=layer.fixed)
        unit = np.nan_to_num(to_unit(image, rng), nan=0.0)
        if value is not None:
            value[i] = np.round(unit * 255.0).astype(np.uint8)
            rgb[i] = np.round(cmap(unit)[..., :3] * 255.0).astype(np.uint8)
        else:
            rgb[i] = np.round(unit * 255.0).astype(np.uint8)
    return rgb, value


def save_cells(img: Any, path: str | os.PathLike[str]) -> Path:
    """Write the columns of ``img`` (an :class:`~xaikit.viz.ImgData`) as painted, to ``path``
    (a ``.npz``; see the module docstring for the layout). Box columns are left out; of a
    column of overlays only the base element is kept. Returns the path."""
    from xaikit.viz.img_data import ImgData

    if not isinstance(img, ImgData):
        raise XaikitTypeError(f"img must be an ImgData; got {describe(img)}")
    if not str(path).endswith(".npz"):
        raise XaikitValueError(f"path must end in .npz; got {str(path)!r}")
    opts = img._options
    arrays: dict[str, np.ndarray] = {}
    columns: list[dict[str, Any]] = []
    first_image = True
    for name, layers in img._columns.items():
        layer = layers[0]
        i = len(columns)
        entry: dict[str, Any] = {"name": name, "title": img.title(name), "rows": int(layer.batch)}
        if layer.kind == "text":
            texts = [str(t) for t in layer.data]
            arrays[f"text_{i}"] = np.array(texts, dtype=str)
            entry.update(kind="text", mask=False, signed=False)
            entry["colors"] = [opts.text_color(name, r) for r in range(len(texts))]
        elif layer.kind == "image":
            rgb, value = _painted(img, name, layer)
            arrays[f"rgb_{i}"] = _downscale(rgb)
            if value is not None:
                arrays[f"value_{i}"] = _downscale(value)
            single = value is not None
            mask = name in opts.colorbars or name in opts.signed or (single and not first_image)
            entry.update(kind="image", mask=bool(mask), signed=name in opts.signed)
            first_image = False
        else:
            continue
        columns.append(entry)
    rows = max((c["rows"] for c in columns), default=0)
    meta = {"format": CELLS_FORMAT, "title": img.figure_title, "rows": rows, "columns": columns}
    arrays["meta"] = np.array(json.dumps(meta))
    with atomic_path(path) as tmp, open(tmp, "wb") as fh:
        np.savez_compressed(fh, **arrays)  # type: ignore[arg-type]
    return Path(path)


def load_cells(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a cells file: ``{"title", "rows", "columns", "text": {i: [str]}, "rgb": {i: array},
    "value": {i: array}}`` (``i`` is the column's position in ``columns``)."""
    with np.load(path, allow_pickle=False) as npz:
        meta = json.loads(str(npz["meta"]))
        if meta.get("format") != CELLS_FORMAT:
            raise XaikitValueError(
                f"{str(path)!r} is not a {CELLS_FORMAT} file; its format is {meta.get('format')!r}"
            )
        out: dict[str, Any] = {**meta, "text": {}, "rgb": {}, "value": {}}
        for key in npz.files:
            kind, _, idx = key.partition("_")
            if kind == "text":
                out["text"][int(idx)] = [str(t) for t in npz[key].tolist()]
            elif kind in ("rgb", "value"):
                out[kind][int(idx)] = npz[key]
    return out


# -------------------------------------------------------------------------------------- history
def save_history(summaries: Any, path: str | os.PathLike[str], title: str | None = None) -> Path:
    """Write a ``Summary`` or a list of them (a tracker's output) as a history JSON file.

    Example:
        >>> import tempfile, pathlib
        >>> from xaikit.summary import Summary, ValWithError
        >>> s = Summary(167); s.write("eval", "ce", 10, 0.5); s.write("eval", "ce", 20, ValWithError(1, 2, 3))
        >>> p = save_history([s], pathlib.Path(tempfile.mkdtemp()) / "h.json", title="ce_by_index")
        >>> json.loads(p.read_text())["series"][0]["values"], json.loads(p.read_text())["series"][0]["high"]
        ([0.5, 2.0], [0.5, 3.0])
    """
    from xaikit.summary import Summary
    from xaikit.viz.history import _series

    items = [summaries] if isinstance(summaries, Summary) else list(summaries)
    if not all(isinstance(s, Summary) for s in items):
        raise XaikitTypeError(f"summaries must be a Summary or a list of them; got {describe(summaries)}")
    series = []
    for s in items:
        for mode in s.modes():
            for metric, steps in s.history[mode].items():
                xs, mids, band = _series(steps)
                if not len(xs):
                    continue
                series.append(
                    {
                        "name": str(s.name),
                        "mode": mode,
                        "metric": metric,
                        "steps": [int(x) for x in xs],
                        "values": mids,
                        "low": None if band is None else band[0],
                        "high": None if band is None else band[1],
                    }
                )
    return write_json(path, jsonable({"format": HISTORY_FORMAT, "title": title, "series": series}))


# ----------------------------------------------------------------------------------- evaluation
def table_doc(title: str, frame: Any) -> dict[str, Any]:
    """A pandas DataFrame or a dict of equal-length columns as ``{"title", "columns", "rows"}``."""
    if hasattr(frame, "to_dict") and hasattr(frame, "columns"):
        columns = [str(c) for c in frame.columns]
        rows = frame.to_numpy(dtype=object).tolist()
    elif isinstance(frame, Mapping):
        columns = [str(k) for k in frame]
        values = [np.asarray(v).reshape(-1) for v in frame.values()]
        if len({len(v) for v in values}) > 1:
            raise XaikitValueError(
                f"the columns of table {title!r} must have equal lengths; got {[len(v) for v in values]}"
            )
        rows = [list(r) for r in zip(*(v.tolist() for v in values))]
    else:
        raise XaikitTypeError(
            f"table {title!r} must be a DataFrame or a dict of columns; got {describe(frame)}"
        )
    return {"title": title, "columns": columns, "rows": rows}
