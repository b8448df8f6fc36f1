"""ImgData painting: each cell's text, boxes and images onto matplotlib axes placed by the layout."""

from __future__ import annotations

from typing import Any

import numpy as np
from matplotlib import colormaps as _mpl_colormaps
from matplotlib.axes import Axes
from matplotlib.colors import to_rgba
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from xaikit.viz._cells import Layer, fmt
from xaikit.viz._grid_layout import (
    COL_GAP,
    FIGURE_TITLE_PT,
    GROUP_GAP,
    MARGIN,
    ROW_GAP,
    TITLE_H,
    fit_text,
    fit_title,
    plan_figure,
)
from xaikit.viz._grid_options import GridOptions
from xaikit.viz._image import PER_IMAGE, display_range, to_unit
from xaikit.viz._save import new_figure

__all__ = ["paint_grid"]

OVERLAY_ALPHA = 0.5
#: the caption of a single-channel float cell whose every value is exactly 0
ALL_ZERO = "all 0"
BOX_COLORS = ("m", "r", "c", "g", "y", "b")
Extent = tuple[float, float, float, float]


def not_finite_note(image: np.ndarray) -> str | None:
    """The note for an image with NaN or infinite pixels (matplotlib paints them in the
    background colour, which would pass for a blank or a low value): ``"all NaN/inf"`` or
    ``"<n> NaN/inf px"``; None when every pixel is finite."""
    if image.dtype.kind != "f":
        return None
    finite = np.isfinite(image) if image.ndim == 2 else np.isfinite(image).all(axis=-1)
    bad = int(finite.size - np.count_nonzero(finite))
    if not bad:
        return None
    return "all NaN/inf" if bad == finite.size else f"{bad} NaN/inf px"


def paint_grid(columns: dict[str, list[Layer]], opts: GridOptions, dpi: float, cell: float) -> Figure:
    """A new figure with every row group of the grid, the figure title on top."""
    plan = plan_figure(columns, opts, cell)
    width, height = plan["width"], plan["height"]
    fig = new_figure(width, height, dpi)
    if opts.figure_title:
        fig.suptitle(opts.figure_title, y=1 - MARGIN / height, va="top", fontsize=FIGURE_TITLE_PT)
    top = plan["top"]
    for group in plan["groups"]:
        _paint_group(fig, columns, opts, group, top, width, height)
        top += group["height"] + GROUP_GAP
    return fig


def _paint_group(
    fig: Figure,
    columns: dict[str, list[Layer]],
    opts: GridOptions,
    plan: dict[str, Any],
    top: float,
    fig_w: float,
    fig_h: float,
) -> None:
    row_h = plan["row_h"]
    x = MARGIN
    for spec in plan["specs"]:
        col = spec["col"]
        left = x + (spec["width"] - spec["content"] - spec["cbar"]) / 2
        title, title_pt = fit_title(opts.title(col), spec["width"] + 0.8 * COL_GAP)
        for row in range(plan["batch"]):
            y = top + TITLE_H + row * (row_h + ROW_GAP)
            rect = (left / fig_w, 1 - (y + row_h) / fig_h, spec["content"] / fig_w, row_h / fig_h)
            ax = fig.add_axes(rect, label=f"cell:{col}:{row}")
            mappable = _paint_cell(ax, columns[col], opts, col, row, spec["content"], row_h)
            if row == 0:
                ax.set_title(title, fontsize=title_pt, pad=5)
            if spec["cbar"] and mappable is not None:
                cx = left + spec["content"] + 0.08
                crect = (cx / fig_w, 1 - (y + row_h) / fig_h, 0.1 / fig_w, row_h / fig_h)
                cax = fig.add_axes(crect, label=f"colorbar:{col}:{row}")
                fig.colorbar(mappable, cax=cax)
                cax.tick_params(labelsize=7, length=2, pad=1)
        x += spec["width"] + COL_GAP


def _paint_cell(
    ax: Axes, layers: list[Layer], opts: GridOptions, col: str, row: int, width: float, height: float
) -> Any:
    ax.set_xticks([])
    ax.set_yticks([])
    if layers[0].kind == "text":
        for spine in ax.spines.values():
            spine.set_visible(False)
    mappable = None
    extent: Extent | None = None
    color = opts.text_color(col, row)
    for depth, layer in enumerate(layers):
        if layer.kind == "text":
            _paint_text(ax, layer.data[row], width, height, overlay=depth > 0, color=color)
        elif layer.kind == "boxes":
            _paint_boxes(ax, layer.data[row], depth, extent)
        elif layer.kind == "contour":
            edges = layer.data[row]
            if extent is None:
                extent = (0.0, float(edges.shape[1]), float(edges.shape[0]), 0.0)
            _paint_contour(ax, edges, layer.color or BOX_COLORS[depth % len(BOX_COLORS)], extent)
        else:
            image = layer.data[row]
            if extent is None:
                extent = (0.0, float(image.shape[1]), float(image.shape[0]), 0.0)
            alpha = OVERLAY_ALPHA if depth else None
            m = _paint_image(ax, opts, col, layer, image, extent, alpha)
            mappable = m if m is not None else mappable
    if extent is not None:
        ax.set_xlim(extent[0], extent[1])
        ax.set_ylim(extent[2], extent[3])
        ax.set_axis_off()
    return mappable


def _paint_text(ax: Axes, text: str, width: float, height: float, overlay: bool, color: str | None) -> None:
    if overlay:
        ax.text(
            0.03,
            0.97,
            text,
            ha="left",
            va="top",
            fontsize=8,
            color=color,
            transform=ax.transAxes,
            bbox={"facecolor": "white", "alpha": 0.7, "edgecolor": "none", "pad": 1},
        )
        return
    wrapped, points = fit_text(text, 0.92 * width, 0.85 * height)
    style: dict[str, Any] = {"color": color, "fontweight": "bold"} if color is not None else {}
    ax.text(0.5, 0.5, wrapped, ha="center", va="center", fontsize=points, transform=ax.transAxes, **style)


def _paint_boxes(ax: Axes, boxes: np.ndarray, depth: int, extent: Extent | None) -> None:
    color = BOX_COLORS[depth % len(BOX_COLORS)]
    valid = [b for b in boxes if np.all(np.isfinite(b[:4])) and b[2] > 0 and b[3] > 0]
    for box in valid:
        x0, y0, w, h = (float(v) for v in box[:4])
        ax.add_patch(Rectangle((x0, y0), w, h, fill=False, edgecolor=color, linewidth=1.5))
        if box.shape[0] == 5:
            ax.text(
                x0,
                y0,
                fmt(box[4]),
                color="white",
                fontsize=7,
                ha="left",
                va="bottom",
                bbox={"facecolor": color, "alpha": 0.8, "edgecolor": "none", "pad": 1},
            )
    if extent is None:
        if valid:
            arr = np.array([b[:4] for b in valid])
            x_lo, y_lo = arr[:, 0].min(), arr[:, 1].min()
            x_hi, y_hi = (arr[:, 0] + arr[:, 2]).max(), (arr[:, 1] + arr[:, 3]).max()
            pad = 0.05 * max(x_hi - x_lo, y_hi - y_lo)
            ax.set_xlim(x_lo - pad, x_hi + pad)
            ax.set_ylim(y_hi + pad, y_lo - pad)
        ax.set_aspect("equal")


def _paint_contour(ax: Axes, edges: np.ndarray, color: str, extent: Extent) -> None:
    """The outline pixels ``edges`` (H, W) in ``color``, opaque; every other pixel transparent."""
    rgba = np.zeros((*edges.shape, 4), np.float32)
    rgba[edges] = to_rgba(color)
    ax.imshow(rgba, interpolation="nearest", extent=extent)


def _paint_image(
    ax: Axes,
    opts: GridOptions,
    col: str,
    layer: Layer,
    image: np.ndarray,
    extent: Extent,
    alpha: float | None,
) -> Any:
    signed = col in opts.signed
    rng = display_range(image, vrange=opts.vranges.get(col), signed=signed, batch_range=layer.fixed)
    kwargs: dict[str, Any] = {"interpolation": "nearest", "extent": extent, "alpha": alpha}
    if image.ndim == 2:
        cmap = opts.cmaps.get(col) or (_mpl_colormaps["RdBu_r"] if signed else opts.cmap)
        mappable = ax.imshow(image.astype(np.float32), cmap=cmap, vmin=rng[0], vmax=rng[1], **kwargs)
    else:
        mappable = None
        ax.imshow(to_unit(image, rng), **kwargs)
    if alpha is None:  # a base cell (overlays get no caption)
        note = not_finite_note(image)
        if note is None and image.ndim == 2 and layer.fixed == PER_IMAGE and not np.any(image):
            note = ALL_ZERO  # painted in the colormap's zero colour: say that it is 0
        if note is not None:
            _caption(ax, note)
    return mappable


def _caption(ax: Axes, text: str) -> None:
    """A small note in the cell's lower left corner."""
    ax.text(
        0.03,
        0.03,
        text,
        ha="left",
        va="bottom",
        fontsize=6,
        transform=ax.transAxes,
        bbox={"facecolor": "white", "alpha": 0.7, "edgecolor": "none", "pad": 1},
    )
