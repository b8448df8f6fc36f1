"""ImgData geometry: row groups, column widths and text fitting, all in inches."""

from __future__ import annotations

import textwrap
from typing import Any

import numpy as np

from xaikit.viz._cells import Layer
from xaikit.viz._grid_options import GridOptions

__all__ = ["fit_text", "fit_title", "plan_figure", "single_channel_layer"]

MARGIN = 0.15
TITLE_H = 0.4
FIGURE_TITLE_H = 0.45
FIGURE_TITLE_PT = 13.0
ROW_GAP = 0.12
COL_GAP = 0.25
GROUP_GAP = 0.35
CBAR_W = 0.65
TEXT_PT = 12.0
TITLE_PT = 11.0
CHAR_W = 0.6  # average glyph width as a fraction of the font size


def text_width(text: str, points: float) -> float:
    """Estimated width in inches of the longest line of ``text`` at ``points``."""
    longest = max((len(line) for line in text.split("\n")), default=0)
    return longest * CHAR_W * points / 72.0


def fit_title(title: str, width: float) -> tuple[str, float]:
    """Wrap (at spaces, two lines at most) and shrink a title so it fits ``width`` inches."""
    if text_width(title, TITLE_PT) <= width:
        return title, TITLE_PT
    text = title
    if " " in title:
        half = max(len(title) // 2, max(len(w) for w in title.split()))
        lines = textwrap.wrap(title, width=half + 1)
        if len(lines) <= 2:
            text = "\n".join(lines)
    points = TITLE_PT * width / max(text_width(text, TITLE_PT), 1e-9)
    return text, max(6.0, min(TITLE_PT, points))


def fit_text(text: str, width: float, height: float) -> tuple[str, float]:
    """Wrap (at spaces) and size ``text`` to fit a ``width`` × ``height`` inch box.

    The largest font size from 12 pt down to 6 pt at which the wrapped text fits wins; below
    that the unwrapped text is shrunk to fit (never under 4 pt).
    """
    for points in np.arange(TEXT_PT, 5.5, -0.5):
        chars = max(1, int(width * 72.0 / (CHAR_W * points)))
        paragraphs = text.split("\n")
        lines = [ln for p in paragraphs for ln in (textwrap.wrap(p, chars, break_long_words=False) or [""])]
        wrapped = "\n".join(lines)
        if text_width(wrapped, points) <= width and len(lines) * points * 1.3 / 72.0 <= height:
            return wrapped, float(points)
    lines_n = text.count("\n") + 1
    points = min(TEXT_PT * width / max(text_width(text, TEXT_PT), 1e-9), height * 72.0 / (1.3 * lines_n))
    return text, max(4.0, float(points))


def single_channel_layer(layers: list[Layer]) -> Layer | None:
    """The topmost single-channel image layer of a column (the one a colorbar describes)."""
    found = None
    for layer in layers:
        if layer.kind == "image" and layer.data.ndim == 3:
            found = layer
    return found


def plan_group(
    columns: dict[str, list[Layer]], opts: GridOptions, cols: list[str], cell: float
) -> dict[str, Any]:
    """Widths of the columns of one row group (same batch size), its row height and its size."""
    batch = columns[cols[0]][0].batch
    has_pictures = any(columns[c][0].kind != "text" for c in cols)
    max_lines = max(
        (t.count("\n") + 1 for c in cols for layer in columns[c] if layer.kind == "text" for t in layer.data),
        default=1,
    )
    row_h = cell if has_pictures else max(0.6, max_lines * TEXT_PT * 1.5 / 72.0)
    specs: list[dict[str, Any]] = []
    for col in cols:
        base = columns[col][0]
        if base.kind in ("image", "contour"):
            h, w = base.data.shape[1:3]
            content = row_h * float(np.clip(w / h, 0.25, 4.0))
        elif base.kind == "boxes":
            content = row_h
        else:
            longest = max(base.data, key=lambda t: text_width(t, TEXT_PT))
            content = float(np.clip(text_width(longest, TEXT_PT) + 0.2, 0.5 * cell, 2.2 * cell))
        cbar = CBAR_W if col in opts.colorbars and single_channel_layer(columns[col]) is not None else 0.0
        title_w = min(text_width(opts.title(col), TITLE_PT) + 0.1, 1.6 * cell)
        specs.append({"col": col, "content": content, "cbar": cbar, "width": max(content + cbar, title_w)})
    width = sum(s["width"] for s in specs) + COL_GAP * (len(specs) - 1)
    height = TITLE_H + batch * row_h + (batch - 1) * ROW_GAP
    return {"specs": specs, "batch": batch, "row_h": row_h, "width": width, "height": height}


def plan_figure(columns: dict[str, list[Layer]], opts: GridOptions, cell: float) -> dict[str, Any]:
    """The row groups (smallest batch first), the figure's size and where the first group starts."""
    batch_sizes = sorted({layers[0].batch for layers in columns.values()})
    groups = [[k for k, v in columns.items() if v[0].batch == b] for b in batch_sizes]
    plans = [plan_group(columns, opts, cols, cell) for cols in groups]
    top = MARGIN + (FIGURE_TITLE_H if opts.figure_title else 0.0)
    width = 2 * MARGIN + max(p["width"] for p in plans)
    if opts.figure_title:
        width = max(width, 2 * MARGIN + text_width(opts.figure_title, FIGURE_TITLE_PT))
    height = top + MARGIN + sum(p["height"] for p in plans) + GROUP_GAP * (len(plans) - 1)
    return {"groups": plans, "width": width, "height": height, "top": top}
