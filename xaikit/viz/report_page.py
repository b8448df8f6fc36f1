"""``xaikit report``: one self-contained HTML page to look at a run folder.

:func:`report` reads what xaikit wrote into a run folder and writes one HTML file: every
picture is embedded (``data:`` URIs), the page's CSS and JavaScript are inline and written
here (no library, no CDN, no font download), and a Content-Security-Policy forbids any network
request, so the page works from ``file://`` and can be mailed as one file. Links to the
full-size PNG files are relative, so they work while the page sits in the run folder.

What it reads (each section appears only when its files exist):

* ``summary.json`` (``xaikit demo``): model, data, settings, final metrics, time and, when
  present, the ``history`` of the logged metrics (drawn as curves);
* ``<key>_<mode>_epoch_<n>.npz`` cells files (``ImageSaver`` with an ``ImgData``, e.g. the
  ``Saliency`` trace): per key, the grid of the epoch chosen by a slider, and a
  method-by-method view of one sample (its image, each mask and the mask's overlay);
* ``<key>_<mode>_epoch_<n>.json`` history files (``ImageSaver`` with ``LabelTracker`` /
  ``InstanceTracker`` output): interactive curves (hover shows the series, e.g. the sample
  index, the step and the value);
* ``evaluation/<name>.json`` (:func:`xaikit.evaluate.save_evaluation`): sortable tables,
  mean curves and the randomization grid; a comparison's verdicts, one per line, its table
  of ranks (one row per method, a column per metric, cells coloured by rank), whether its
  metrics agree (the pairs of one family that rank the methods oppositely, and the heatmap of
  the metrics' rank correlations), every raw value in ``<details>``;
* an explained dataset, in the folder itself (``xaikit report STORE``) or a sub-folder: the
  store's ``manifest.json`` (settings), ``grids/*.png`` (``xaikit explain``'s first / most /
  least confident grids, embedded, each beside the table of its samples) and ``table.csv``
  (a filterable, sortable table; picks by a ``confidence``, ``score`` or ``prob`` column; the
  rows whose ``map_status`` is not empty counted, listed and marked); and when the store holds
  an analysis (``xaikit analyze STORE``: ``analysis/analysis.json`` + ``arrays.npz``), the
  "Dataset explorer" (:mod:`xaikit.viz.report_explorer`);
* every ``*.png`` in the folder: a link each.

Tables sit in boxes that scroll sideways on their own (the page never does) and show their first
:data:`COLLAPSE_ROWS` rows until "show all".

Formats: :mod:`xaikit.viz.run_data`.

Example:
    >>> import tempfile, pathlib
    >>> run = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (run / "summary.json").write_text('{"model": "LeNet", "final_metrics": {"eval": {"accuracy": 0.9}}}')
    >>> page = report(run)
    >>> page.name, "LeNet" in page.read_text()
    ('report.html', True)
"""

from __future__ import annotations

import base64
import csv
import heapq
import io
import json
import math
import os
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from xaikit.errors import XaikitTypeError, XaikitValueError, describe
from xaikit.files import write_text
from xaikit.viz.report_explorer import explorer
from xaikit.viz.run_data import EVALUATION_FORMAT, HISTORY_FORMAT, jsonable, load_cells, read_json

__all__ = ["PIXEL_BUDGET", "THUMB_SIDE", "report"]

#: the longest side of a thumbnail cell in the page (pixels; shown enlarged, full PNG on click)
THUMB_SIDE = 96
#: the most thumbnail pixels embedded for one key's grids over all epochs; beyond it the cells shrink
PIXEL_BUDGET = 12_000_000
#: the most rows of an explained-dataset table embedded in the page
MAX_TABLE_ROWS = 2000
#: a table of more rows shows its first COLLAPSE_ROWS until "show all" (the CSS rule says 20 too)
COLLAPSE_ROWS = 20
_EPOCH_FILE = re.compile(r"^(?P<key>.+)_(?P<mode>[A-Za-z0-9]+)_epoch_(?P<epoch>\d+)\.(?P<ext>npz|json|png)$")
_CONFIDENCE = ("confidence", "score", "prob", "probability")


def _png_uri(rgb: np.ndarray) -> str:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(rgb).save(buf, format="PNG", compress_level=6)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def _thumb_uri(path: Path, width: int = 900) -> str | None:
    """A downscaled PNG of the picture at ``path`` (None when it cannot be read)."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as opened:
            rgb = opened.convert("RGB")
        if rgb.width > width:
            rgb = rgb.resize((width, max(1, round(rgb.height * width / rgb.width))), Image.Resampling.LANCZOS)
        return _png_uri(np.asarray(rgb))
    except (OSError, UnidentifiedImageError):
        return None


# ------------------------------------------------------------------------------------- saliency
def _resize(batch: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """(B, h, w, 3) uint8 resized to ``size`` = (th, tw) (box filter down, nearest up)."""
    if batch.shape[1:3] == size:
        return batch
    from PIL import Image

    th, tw = size
    down = batch.shape[1] >= th and batch.shape[2] >= tw
    method = Image.Resampling.BOX if down else Image.Resampling.NEAREST
    return np.stack([np.asarray(Image.fromarray(im).resize((tw, th), method)) for im in batch])


def _thumb_size(shape: tuple[int, int], cells: int, budget_share: float) -> tuple[int, int]:
    h, w = shape
    side = min(max(h, w), THUMB_SIDE)
    while side > 16 and cells * side * side > budget_share:
        side = int(side * 0.85)
    scale = side / max(h, w)
    return max(1, round(h * scale)), max(1, round(w * scale))


def _overlays(base: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """The heat-map overlay of a mask (0..255) over its image (uint8 RGB), as uint8 RGB."""
    from xaikit.viz.overlay import overlay

    side = max(base.shape[1:3])
    out = overlay(
        base.astype(np.float32) / 255.0, mask.astype(np.float32) / 255.0, smooth=max(1.0, side / 32.0)
    )
    return np.round(np.clip(out, 0.0, 1.0) * 255.0).astype(np.uint8)


def _saliency_group(
    run: Path, key: str, mode: str, files: dict[int, Path], index: int
) -> dict[str, Any] | None:
    """One key's cells files (by epoch) as sprites: per epoch one PNG, rows = samples, columns =
    the grid's image columns then one overlay per mask."""
    loaded = {}
    for epoch in sorted(files):
        try:
            loaded[epoch] = load_cells(files[epoch])
        except (OSError, ValueError, KeyError):
            continue
    if not loaded:
        return None
    last = loaded[max(loaded)]
    columns = last["columns"]
    rows = int(last["rows"])
    images = [i for i, c in enumerate(columns) if c["kind"] == "image" and c["rows"] == rows]
    texts = [i for i, c in enumerate(columns) if c["kind"] == "text" and c["rows"] == rows]
    if not images:
        return None
    masks = [i for i in images if columns[i]["mask"]]
    plain = [i for i in images if not columns[i]["mask"]]
    base = plain[0] if plain else None
    overlaid = [i for i in masks if not columns[i]["signed"]] if base is not None else []
    ncells = len(images) + len(overlaid)
    native = tuple(last["rgb"][base if base is not None else images[0]].shape[1:3])
    th, tw = _thumb_size(native, ncells * rows * len(loaded), PIXEL_BUDGET)
    sprites, pngs, text, colors, epochs = [], [], [], [], []
    for epoch, cells in loaded.items():
        if [c["name"] for c in cells["columns"]] != [c["name"] for c in columns]:
            continue  # a different layout (the columns changed): not comparable across the slider
        tiles = [_resize(cells["rgb"][i], (th, tw)) for i in images]
        for i in overlaid:
            tiles.append(_resize(_overlays(cells["rgb"][base], cells["value"][i]), (th, tw)))  # type: ignore[index]
        sprite = np.concatenate([np.concatenate(list(t), axis=0) for t in tiles], axis=1)
        sprites.append(_png_uri(sprite))
        png = files[epoch].with_suffix(".png")
        pngs.append(png.relative_to(run).as_posix() if png.exists() else None)
        text.append([cells["text"].get(i, [""] * rows) for i in texts])
        colors.append([cells["columns"][i].get("colors") or [None] * rows for i in texts])
        epochs.append(epoch)
    cells_meta = [{"title": columns[i]["title"], "kind": "mask" if i in masks else "image"} for i in images]
    methods = []
    for i in masks:
        pos = images.index(i)
        over = len(images) + overlaid.index(i) if i in overlaid else None
        methods.append({"title": columns[i]["title"], "mask": pos, "overlay": over})
        if over is not None:
            cells_meta.append({"title": f"{columns[i]['title']} overlay", "kind": "overlay"})
    return {
        "id": f"g{index}",
        "key": key,
        "mode": mode,
        "title": last.get("title") or key,
        "epochs": epochs,
        "rows": rows,
        "th": th,
        "tw": tw,
        "ncells": ncells,
        "cells": cells_meta,
        "grid": list(range(len(images))),
        "base": images.index(base) if base is not None else None,
        "methods": methods,
        "text_titles": [columns[i]["title"] for i in texts],
        "text": text,
        "colors": colors,
        "sprites": sprites,
        "pngs": pngs,
    }


def _picture_group(
    run: Path, key: str, mode: str, files: dict[int, Path], index: int
) -> dict[str, Any] | None:
    """PNG grids saved without their data (``ImageSaver(save_data=False)``): a downscaled copy of
    each, behind the same epoch slider (no method view: that needs the cells file)."""
    thumbs, pngs, epochs = [], [], []
    for epoch in sorted(files):
        uri = _thumb_uri(files[epoch])
        if uri is not None:
            thumbs.append(uri)
            pngs.append(files[epoch].relative_to(run).as_posix())
            epochs.append(epoch)
    if not thumbs:
        return None
    return {"id": f"p{index}", "key": key, "mode": mode, "epochs": epochs, "thumbs": thumbs, "pngs": pngs}


# ---------------------------------------------------------------------------------------- charts
def _history_chart(doc: Mapping[str, Any], source: str) -> list[dict[str, Any]]:
    """A history file as charts, one per metric."""
    by_metric: dict[str, list[dict[str, Any]]] = {}
    for s in doc.get("series", []):
        name = str(s.get("name"))
        label = name if s.get("mode") in (None, "eval") else f"{name} ({s['mode']})"
        by_metric.setdefault(str(s.get("metric")), []).append(
            {
                "name": label,
                "x": s.get("steps", []),
                "y": s.get("values", []),
                "low": s.get("low"),
                "high": s.get("high"),
            }
        )
    title = str(doc.get("title") or source)
    return [
        {
            "title": f"{title}: {metric}" if len(by_metric) > 1 else title,
            "x_label": "step",
            "y_label": metric,
            "series": series,
            "source": source,
        }
        for metric, series in by_metric.items()
    ]


def _summary_charts(history: Any) -> list[dict[str, Any]]:
    """``summary.json``'s ``{mode: {metric: {step: value}}}`` as one chart per metric."""
    if not isinstance(history, Mapping):
        return []
    by_metric: dict[str, list[dict[str, Any]]] = {}
    for mode, metrics in history.items():
        if not isinstance(metrics, Mapping):
            continue
        for metric, steps in metrics.items():
            if not isinstance(steps, Mapping):
                continue
            pairs = sorted((int(k), v) for k, v in steps.items() if isinstance(v, (int, float)))
            if pairs:
                by_metric.setdefault(str(metric), []).append(
                    {"name": str(mode), "x": [p[0] for p in pairs], "y": [p[1] for p in pairs]}
                )
    return [
        {
            "title": f"{metric} by step",
            "x_label": "step",
            "y_label": metric,
            "series": s,
            "source": "summary.json",
        }
        for metric, s in by_metric.items()
    ]


# ----------------------------------------------------------------------------------- evaluation
def _evaluation(path: Path, run: Path) -> dict[str, Any]:
    """The section of one ``evaluation/*.json`` file; one that cannot be read, or is not an
    evaluation file of this format, gets a section with a note saying so (it is not dropped)."""
    doc = read_json(path)
    if not isinstance(doc, Mapping) or doc.get("format") != EVALUATION_FORMAT:
        if doc is None:
            why = "it cannot be read as JSON"
        elif not isinstance(doc, Mapping):
            why = f"it holds a JSON {type(doc).__name__}, not an evaluation object"
        else:
            why = f"its format is {doc.get('format')!r}, not {EVALUATION_FORMAT!r}"
        return {
            "title": path.stem,
            "kind": "",
            "note": f"{path.name} cannot be shown: {why} (xaikit.evaluate.save_evaluation writes these files)",
            "verdicts": [],
            "agreement": [],
            "heat": None,
            "tables": [],
            "charts": [],
            "images": [],
            "source": path.relative_to(run).as_posix(),
        }
    images = []
    for name in doc.get("images") or []:
        picture = path.parent / str(name)
        uri = _thumb_uri(picture) if picture.is_file() else None
        if uri is not None:
            images.append({"uri": uri, "href": picture.relative_to(run).as_posix()})
    charts = [
        {
            "title": c.get("title", ""),
            "x_label": c.get("x_label", ""),
            "y_label": c.get("y_label", ""),
            "series": c.get("series", []),
            "source": path.relative_to(run).as_posix(),
        }
        for c in doc.get("curves") or []
    ]
    verdicts = [
        {"method": str(v.get("method", "")), "text": str(v.get("text", ""))}
        for v in doc.get("verdicts") or []
        if isinstance(v, Mapping)
    ]
    return {
        "title": str(doc.get("title") or path.stem),
        "kind": str(doc.get("kind") or ""),
        "note": doc.get("note"),
        "verdicts": verdicts,
        "agreement": [str(line) for line in doc.get("agreement") or []],
        "heat": _heat(doc),
        "tables": [_format_table(t) for t in doc.get("tables") or []],
        "charts": charts,
        "images": images,
        "source": path.relative_to(run).as_posix(),
    }


def _finite(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _heat(doc: Mapping[str, Any]) -> dict[str, Any] | None:
    """A comparison's first table (``method``, each metric, ``rank <metric>``, ``mean rank``,
    ``seconds``) as a table of ranks: one row per method, one column per metric grouped by
    family, each cell the method's rank coloured by it (the score in its tooltip). None when the
    document is not a comparison with its ``metrics``."""
    from xaikit.viz.compare_plot import rank_colors

    metrics = [m for m in doc.get("metrics") or [] if isinstance(m, Mapping)]
    tables = doc.get("tables") or []
    if doc.get("kind") != "comparison" or not metrics or not tables:
        return None
    columns = [str(c) for c in tables[0].get("columns") or []]
    at = {c: i for i, c in enumerate(columns)}
    shown = [m for m in metrics if str(m.get("name")) in at and f"rank {m.get('name')}" in at]
    if "method" not in at or not shown:
        return None
    rows = tables[0].get("rows") or []
    colors = rank_colors(len(rows))

    def cell(value: Any, rank: Any, what: str) -> dict[str, Any]:
        v, r = _finite(value), _finite(rank)
        if r is None or v is None:
            return {"text": "–", "title": f"{what}: no score", "color": None, "sort": ""}
        k = round(r)
        return {
            "text": str(k),
            "title": f"{what} = {_fmt(v)}: rank {k} of {len(rows)}",
            "color": colors[min(max(k, 1), len(colors)) - 1],
            "sort": repr(r),
        }

    families: list[dict[str, Any]] = []
    for m in shown:
        name = str(m.get("family", ""))
        if families and families[-1]["name"] == name:
            families[-1]["span"] += 1
        else:
            families.append({"name": name, "span": 1})
    mean = [_finite(r[at["mean rank"]]) if "mean rank" in at else None for r in rows]
    order = sorted(v for v in mean if v is not None)
    out_rows = []
    for row, mr in zip(rows, mean):
        cells = []
        for m in shown:
            better = "higher" if m.get("higher_is_better") else "lower"
            what = f"{m.get('label') or m.get('name')} ({better} is better)"
            cells.append(cell(row[at[str(m["name"])]], row[at[f"rank {m['name']}"]], what))
        mean_cell = cell(mr, None if mr is None else 1 + order.index(mr), "mean rank")
        if mr is not None:
            mean_cell["text"] = f"{mr:.2f}"
        seconds = _finite(row[at["seconds"]]) if "seconds" in at else None
        out_rows.append(
            {
                "method": str(row[at["method"]]),
                "cells": cells,
                "mean": mean_cell,
                "seconds": "" if seconds is None else f"{seconds:.2f}",
            }
        )
    return {
        "families": families,
        "columns": [
            {
                "label": str(m.get("label") or m.get("name")),
                "arrow": "↑" if m.get("higher_is_better") else "↓",
                "question": str(m.get("question") or ""),
            }
            for m in shown
        ],
        "rows": out_rows,
        "colors": colors,
    }


def _fmt(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, float):
        return f"{value:.4g}" if math.isfinite(value) else str(value)
    return str(value)


def _format_table(table: Mapping[str, Any]) -> dict[str, Any]:
    """``{"title", "columns", "rows"}`` with each cell as display text and a sort key."""
    rows = []
    for row in table.get("rows") or []:
        cells = []
        for v in row:
            number = v if isinstance(v, (int, float)) and not isinstance(v, bool) else None
            cells.append({"text": _fmt(v), "sort": "" if number is None else repr(float(number))})
        rows.append(cells)
    return {
        "title": str(table.get("title") or ""),
        "columns": [str(c) for c in table.get("columns") or []],
        "rows": rows,
    }


# -------------------------------------------------------------------------------------- explain
def _number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


#: the grids ``xaikit explain`` paints into ``<store>/grids/`` and the pick table beside each
_GRIDS = {"first": "first samples", "most_confident": "most confident", "least_confident": "least confident"}
#: samples in each pick table (``xaikit explain --grid-size``'s default)
PICK_ROWS = 8
#: ``map_status`` values of a usable map
_MAP_OK = ("", "ok")


@dataclass
class _SampleTable:
    """What the page needs of a ``table.csv``, read in one pass (the file may hold millions of
    rows): the first rows, the rows whose map is not usable, their counts by status, and the
    most and least confident rows."""

    header: list[str]
    shown: list[list[str]] = field(default_factory=list)
    bad: list[list[str]] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    high: list[tuple[float, int, list[str]]] = field(default_factory=list)
    low: list[tuple[float, int, list[str]]] = field(default_factory=list)
    total: int = 0
    status_at: int | None = None
    conf: int | None = None

    def status(self, record: list[str]) -> str:
        """The record's map problem ("" for a usable map, or without a ``map_status`` column)."""
        if self.status_at is None or self.status_at >= len(record):
            return ""
        value = record[self.status_at].strip()
        return "" if value.lower() in _MAP_OK else value


def _read_samples(path: Path) -> _SampleTable | None:
    try:
        with path.open(newline="", encoding="utf-8") as fh:
            reader = csv.reader(fh)
            header = next(reader, None)
            if not header:
                return None
            lower = [h.strip().lower() for h in header]
            t = _SampleTable(header)
            t.status_at = lower.index("map_status") if "map_status" in lower else None
            t.conf = next((lower.index(c) for c in _CONFIDENCE if c in lower), None)
            for i, record in enumerate(reader):
                t.total += 1
                if i < MAX_TABLE_ROWS:
                    t.shown.append(record)
                problem = t.status(record)
                if problem:
                    t.counts[problem] = t.counts.get(problem, 0) + 1
                    if len(t.bad) < MAX_TABLE_ROWS:
                        t.bad.append(record)
                score = _number(record[t.conf]) if t.conf is not None and t.conf < len(record) else None
                if score is not None:  # heaps of PICK_ROWS; ties go to the earlier row (the grids' order)
                    heapq.heappush(t.high, (score, -i, record))
                    heapq.heappush(t.low, (-score, -i, record))
                    if len(t.high) > PICK_ROWS:
                        heapq.heappop(t.high)
                    if len(t.low) > PICK_ROWS:
                        heapq.heappop(t.low)
    except (OSError, csv.Error, UnicodeDecodeError):
        return None
    return t


def _store_facts(folder: Path) -> list[tuple[str, str]]:
    """What an ``explain_dataset`` store's ``manifest.json`` says (method, options, samples, ...)."""
    manifest = read_json(folder / "manifest.json")
    if not isinstance(manifest, Mapping) or "method" not in manifest:
        return []
    keys = ("model", "method", "options", "length", "target", "seed", "batch_size", "shard_size", "created")
    facts = []
    for k in keys:
        if k in manifest:
            v = manifest[k]
            if k == "created" and isinstance(v, (int, float)):
                v = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(v))
            if k == "target" and v is None:
                v = "the predicted class"
            facts.append(
                ("samples" if k == "length" else k, json.dumps(v) if isinstance(v, (list, dict)) else _fmt(v))
            )
    return facts


def _explained(folder: Path, run: Path) -> dict[str, Any] | None:
    """An explained dataset (``xaikit explain --out STORE``, or a folder with a ``table.csv``):
    the store's settings, its grids (``grids/*.png``, embedded) each beside the table of the
    samples it shows, the samples whose map is not usable (``map_status``), and the filterable
    sample table."""
    grids_dir = folder / "grids"
    pictures = sorted(grids_dir.glob("*.png")) if grids_dir.is_dir() else []
    pictures.sort(key=lambda p: (list(_GRIDS).index(p.stem) if p.stem in _GRIDS else len(_GRIDS), p.name))
    table = _read_samples(folder / "table.csv")
    facts = _store_facts(folder)
    if table is None and not pictures and not facts:
        return None
    t = table if table is not None else _SampleTable([])

    def row(record: list[str]) -> dict[str, Any]:
        cells = [{"text": v, "sort": "" if _number(v) is None else repr(_number(v))} for v in record]
        return {"cells": cells, "bad": bool(t.status(record))}

    rows = [row(r) for r in t.shown]
    picks: dict[str, dict[str, Any]] = {"first": {"title": "first samples", "rows": rows[:PICK_ROWS]}}
    if t.conf is not None:
        by = t.header[t.conf]
        high = [r for _, _, r in sorted(t.high, reverse=True)]
        low = [r for _, _, r in sorted(t.low, reverse=True)]
        picks["most_confident"] = {"title": f"most confident (by {by})", "rows": [row(r) for r in high]}
        picks["least_confident"] = {"title": f"least confident (by {by})", "rows": [row(r) for r in low]}
    blocks = []
    for picture in pictures:
        pick = picks.pop(picture.stem, None)
        blocks.append(
            {
                "title": pick["title"] if pick else picture.stem.replace("_", " "),
                "uri": _thumb_uri(picture),
                "href": picture.relative_to(run).as_posix(),
                "rows": pick["rows"] if pick else None,
            }
        )
    blocks += [
        {"title": p["title"], "uri": None, "href": None, "rows": p["rows"]}
        for p in picks.values()
        if t.header
    ]
    manifest = read_json(folder / "manifest.json")
    names = manifest.get("classes") if isinstance(manifest, Mapping) else None
    return {
        "explorer": explorer(folder, "", [str(n) for n in names] if isinstance(names, list) else None),
        "title": folder.relative_to(run).as_posix() if folder != run else folder.resolve().name,
        "source": (folder / "table.csv").relative_to(run).as_posix() if table is not None else None,
        "facts": facts,
        "columns": t.header,
        "rows": rows,
        "total": t.total,
        "cut": t.total > MAX_TABLE_ROWS,
        "blocks": blocks,
        "status": t.status_at is not None,
        "problems": {
            "count": sum(t.counts.values()),
            "by_status": sorted(t.counts.items(), key=lambda kv: (-kv[1], kv[0])),
            "rows": [row(r) for r in t.bad],
        },
    }


# ---------------------------------------------------------------------------------------- summary
def _summary_view(summary: Mapping[str, Any]) -> dict[str, Any]:
    found = summary.get("settings")
    settings: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
    facts = [
        (k, _fmt(v) if not isinstance(v, (list, dict)) else json.dumps(v))
        for k, v in summary.items()
        if k not in ("settings", "final_metrics", "files", "history")
    ]
    metrics = []
    final = summary.get("final_metrics")
    if isinstance(final, Mapping):
        for mode, values in final.items():
            if isinstance(values, Mapping):
                metrics += [(str(mode), str(k), _fmt(v)) for k, v in values.items()]
    return {
        "facts": facts,
        "settings": [
            (str(k), _fmt(v) if not isinstance(v, (list, dict)) else json.dumps(v))
            for k, v in settings.items()
        ],
        "metrics": metrics,
    }


def _collect(run: Path) -> dict[str, Any]:
    groups: dict[tuple[str, str], dict[int, Path]] = {}
    pictures: dict[tuple[str, str], dict[int, Path]] = {}
    with_data: set[tuple[str, str]] = set()
    charts: list[dict[str, Any]] = []
    pngs: list[str] = []
    for path in sorted(run.iterdir()):
        match = _EPOCH_FILE.match(path.name)
        if not path.is_file() or match is None:
            continue
        key, mode, epoch, ext = match["key"], match["mode"], int(match["epoch"]), match["ext"]
        if ext == "npz":
            groups.setdefault((key, mode), {})[epoch] = path
            with_data.add((key, mode))
        elif ext == "json":
            doc = read_json(path)
            if isinstance(doc, Mapping) and doc.get("format") == HISTORY_FORMAT:
                charts += _history_chart(doc, path.name)
                with_data.add((key, mode))
        else:
            pictures.setdefault((key, mode), {})[epoch] = path
    for path in sorted(run.rglob("*.png")):
        if not any(part.startswith(".") for part in path.relative_to(run).parts):
            pngs.append(path.relative_to(run).as_posix())
    summary = read_json(run / "summary.json")
    summary = summary if isinstance(summary, Mapping) else None
    if summary is not None:
        charts = _summary_charts(summary.get("history")) + charts
    saliency: list[dict[str, Any]] = []
    for (key, mode), files in sorted(groups.items()):
        group = _saliency_group(run, key, mode, files, len(saliency))
        if group is not None:
            saliency.append(group)
    picture_groups: list[dict[str, Any]] = []
    for (key, mode), files in sorted(pictures.items()):
        if (key, mode) not in with_data:
            group = _picture_group(run, key, mode, files, len(picture_groups))
            if group is not None:
                picture_groups.append(group)
    folder = run / "evaluation"
    evaluations = [
        _evaluation(path, run) for path in (sorted(folder.glob("*.json")) if folder.is_dir() else [])
    ]
    explained: list[dict[str, Any]] = []
    folders = [run, *sorted(p for p in run.iterdir() if p.is_dir() and not p.name.startswith("."))]
    for folder in folders:
        if folder.name in ("evaluation", "grids") and folder != run:
            continue
        table = _explained(folder, run)
        if table is not None:
            table["id"] = f"x{len(explained)}"
            if table["explorer"] is not None:
                table["explorer"]["id"] = f"e{len(explained)}"
                if table["explorer"]["page"] is not None:
                    table["explorer"]["page"]["id"] = table["explorer"]["id"]
            explained.append(table)
    for i, chart in enumerate([*charts, *(c for ev in evaluations for c in ev["charts"])]):
        chart["id"] = f"c{i}"
    return {
        "summary": _summary_view(summary) if summary is not None else None,
        "saliency": saliency,
        "pictures": picture_groups,
        "charts": charts,
        "evaluations": evaluations,
        "explained": explained,
        "pngs": pngs,
    }


def _environment() -> Any:
    from jinja2 import Environment, PackageLoader, StrictUndefined

    return Environment(
        loader=PackageLoader("xaikit.viz", "templates"),
        autoescape=True,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )


def _asset(name: str) -> str:
    return resources.files("xaikit.viz").joinpath("templates", name).read_text(encoding="utf-8")


def report(
    run: str | os.PathLike[str], out: str | os.PathLike[str] | None = None, title: str | None = None
) -> Path:
    """Write one self-contained HTML page that shows the run folder ``run``.

    Args:
        run: the run folder (what ``xaikit demo`` or an ``Estimator`` with ``ImageSaver``
            wrote; see the module docstring for what is read).
        out: the HTML file (default ``<run>/report.html``). Links to the PNG files are relative
            to it.
        title: the page title (default: ``"xaikit report: <run folder name>"``).

    Returns:
        The path of the page.

    Raises:
        XaikitValueError: ``run`` is not a folder, or ``out`` is not an ``.html`` file name.
    """
    from markupsafe import Markup

    if not isinstance(run, (str, os.PathLike)):
        raise XaikitTypeError(f"run must be a folder path (str or PathLike); got {describe(run)}")
    run_dir = Path(run)
    if not run_dir.is_dir():
        raise XaikitValueError(f"run must be an existing run folder; got {str(run)!r} (no such folder)")
    out_path = Path(out) if out is not None else run_dir / "report.html"
    if out_path.suffix.lower() not in (".html", ".htm"):
        raise XaikitValueError(f"out must be a file name ending in .html; got {str(out_path)!r}")
    start = time.perf_counter()
    data = _collect(run_dir)
    # links are relative to the page: rebase them when the page is written elsewhere
    base = os.path.relpath(run_dir.resolve(), out_path.resolve().parent)
    prefix = "" if base == "." else base.replace(os.sep, "/") + "/"
    data["prefix"] = prefix
    page_data = {
        "groups": data["saliency"],
        "pictures": data["pictures"],
        "charts": [*data["charts"], *(c for e in data["evaluations"] for c in e["charts"])],
        "prefix": prefix,
    }
    html = (
        _environment()
        .get_template("report.html.j2")
        .render(
            title=title or f"xaikit report: {run_dir.resolve().name}",
            data=data,
            page_data=jsonable(page_data),
            explorer_data=jsonable(
                [x["explorer"]["page"] for x in data["explained"] if x["explorer"] and x["explorer"]["page"]]
            ),
            css=Markup(_asset("report.css")),
            js=Markup(_asset("report.js")),
            explorer_js=Markup(_asset("explorer.js")),
            built_sec=round(time.perf_counter() - start, 2),
            collapse=COLLAPSE_ROWS,
        )
    )
    return write_text(out_path, html)
