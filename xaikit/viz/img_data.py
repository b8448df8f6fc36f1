"""``ImgData``: a grid of images, masks, boxes and text, one column per keyword, one row per sample."""

from __future__ import annotations

import os
import textwrap
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from matplotlib import colormaps as _mpl_colormaps
from matplotlib.axes import Axes
from matplotlib.colors import Colormap
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from xaikit.backend import framework_of, to_number
from xaikit.errors import XaikitTypeError, XaikitValueError, describe
from xaikit.viz._image import Range, display_range, fixed_range, to_channels_last, to_unit
from xaikit.viz._save import new_figure, save_figure

__all__ = ["ImgData"]

# Geometry in inches.
_MARGIN = 0.15
_TITLE_H = 0.4
_ROW_GAP = 0.12
_COL_GAP = 0.25
_GROUP_GAP = 0.35
_CBAR_W = 0.65
_TEXT_PT = 12.0
_TITLE_PT = 11.0
_CHAR_W = 0.6  # average glyph width as a fraction of the font size
_OVERLAY_ALPHA = 0.5
_BOX_COLORS = ("m", "r", "c", "g", "y", "b")
_MAX_VECTOR_ITEMS = 6


@dataclass
class _Layer:
    kind: str  # "text" | "boxes" | "image"
    data: Any  # text: list[str]; boxes: (B, N, 4|5); image: (B, H, W) or (B, H, W, 3)
    batch: int
    fixed: Range | None = None  # fixed display range of the whole image array


def _fmt(value: Any) -> str:
    if isinstance(value, np.ndarray):
        if value.size == 1:
            return _fmt(value.reshape(()).item())
        flat = value.ravel()
        items = [_fmt(v) for v in flat[:_MAX_VECTOR_ITEMS].tolist()]
        more = ", …" if flat.size > _MAX_VECTOR_ITEMS else ""
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


def _is_scalar(value: Any) -> bool:
    return isinstance(value, (str, bytes, int, float, bool, np.generic))


def _parse_layer(
    name: str, value: Any, channel_axis: int | None, strict: bool = True, image_hint: bool = False
) -> _Layer:
    """One overlay element of a column.

    ``strict=False``: ``channel_axis`` only applies to 4-D values. ``image_hint``: the column has
    image-only options, so a ``(B, H, 4|5)`` value is a batch of images, not of boxes.
    """
    if _is_scalar(value):
        return _Layer("text", [_fmt(value)], 1)
    prefer_first = framework_of(value) == "torch"
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
    if arr.dtype.kind in "USOV" or (arr.ndim <= 2 and channel_axis is None):
        if arr.ndim == 0:
            return _Layer("text", [_fmt(arr)], 1)
        if arr.shape[0] == 0:
            raise XaikitValueError(f"column {name!r} is empty; got {describe(arr)}")
        return _Layer("text", [_fmt(row) for row in arr], arr.shape[0])
    if arr.shape[0] == 0:
        raise XaikitValueError(f"column {name!r} is empty; got {describe(arr)}")
    if arr.ndim == 3 and arr.shape[-1] in (4, 5) and channel_axis is None and not image_hint:
        return _Layer("boxes", arr.astype(np.float64), arr.shape[0])
    if arr.ndim in (3, 4):
        images = to_channels_last(arr, f"column {name!r}", channel_axis, prefer_first)
        return _Layer("image", images, images.shape[0], fixed_range(images))
    raise XaikitValueError(
        f"column {name!r} must hold per-sample text (B,), boxes (B, N, 4|5) or images "
        f"(B, H, W[, C]) / (B, C, H, W); got {describe(arr)}"
    )


def _split_layers(name: str, value: Any) -> list[Any]:
    """A list/tuple of arrays is an overlay stack; a list of plain scalars is one array of text."""
    if isinstance(value, (list, tuple)):
        if not value:
            raise XaikitValueError(f"column {name!r}: an overlay list must not be empty")
        if all(_is_scalar(v) for v in value):
            return [np.asarray(value)]
        return list(value)
    return [value]


def _name_set(arg: Any, argname: str, columns: list[str]) -> set[str]:
    """The column names an option names; ``True`` means every column."""
    if arg is None or arg is False:
        return set()
    if arg is True:
        return set(columns)
    if isinstance(arg, str):
        arg = [arg]
    if not isinstance(arg, Iterable):
        raise XaikitTypeError(f"{argname} must be True, a column name or a set of them; got {describe(arg)}")
    names = set(arg)
    _check_known(names, argname, columns)
    return names


def _check_known(names: Iterable[str], argname: str, columns: list[str]) -> None:
    unknown = sorted(str(n) for n in names if n not in columns)
    if unknown:
        raise XaikitValueError(f"{argname} names unknown column(s) {unknown}; the columns are {columns}")


def _get_cmap(cmap: Any, argname: str) -> Colormap:
    if isinstance(cmap, Colormap):
        return cmap
    if not isinstance(cmap, str):
        raise XaikitTypeError(
            f"{argname} must be a matplotlib colormap name or Colormap; got {describe(cmap)}"
        )
    try:
        return _mpl_colormaps[cmap]
    except KeyError:
        raise XaikitValueError(
            f"{argname} must be a matplotlib colormap name such as 'Greys', 'inferno' or 'RdBu_r'; "
            f"got {cmap!r}"
        ) from None


def _text_width(text: str, points: float) -> float:
    longest = max((len(line) for line in text.split("\n")), default=0)
    return longest * _CHAR_W * points / 72.0


def _fit_title(title: str, width: float) -> tuple[str, float]:
    """Wrap (at spaces, two lines at most) and shrink a title so it fits ``width`` inches."""
    if _text_width(title, _TITLE_PT) <= width:
        return title, _TITLE_PT
    text = title
    if " " in title:
        half = max(len(title) // 2, max(len(w) for w in title.split()))
        lines = textwrap.wrap(title, width=half + 1)
        if len(lines) <= 2:
            text = "\n".join(lines)
    points = _TITLE_PT * width / max(_text_width(text, _TITLE_PT), 1e-9)
    return text, max(6.0, min(_TITLE_PT, points))


def _fit_text(text: str, width: float, height: float) -> tuple[str, float]:
    """Wrap (at spaces) and size ``text`` to fit a ``width`` × ``height`` inch box.

    The largest font size from 12 pt down to 6 pt at which the wrapped text fits wins; below
    that the unwrapped text is shrunk to fit (never under 4 pt).
    """
    for points in np.arange(_TEXT_PT, 5.5, -0.5):
        chars = max(1, int(width * 72.0 / (_CHAR_W * points)))
        paragraphs = text.split("\n")
        lines = [ln for p in paragraphs for ln in (textwrap.wrap(p, chars, break_long_words=False) or [""])]
        wrapped = "\n".join(lines)
        if _text_width(wrapped, points) <= width and len(lines) * points * 1.3 / 72.0 <= height:
            return wrapped, float(points)
    lines_n = text.count("\n") + 1
    points = min(_TEXT_PT * width / max(_text_width(text, _TEXT_PT), 1e-9), height * 72.0 / (1.3 * lines_n))
    return text, max(4.0, float(points))


class ImgData:
    """Columns of images, masks, bounding boxes and text painted as one matplotlib grid.

    Each keyword is a column (in insertion order) and every sample of its value is one row.
    Columns whose batch sizes differ are painted in separate row groups, smallest batch first.

    A cell's kind comes from its value:

    * strings, bytes and numbers, or arrays of shape ``(B,)`` / ``(B, N)`` → centred text (one
      string per row; a plain list of strings or numbers counts as such an array);
    * arrays of shape ``(B, N, 4)`` or ``(B, N, 5)`` → ``N`` bounding boxes per row,
      ``(x0, y0, width, height[, label])`` in pixels of the image below; boxes whose width or
      height is not positive are skipped (padding). (A column named in ``colormaps``,
      ``vranges``, ``signed`` or ``colorbars`` reads such a shape as images 4 or 5 pixels wide.)
    * ``(B, H, W)``, ``(B, H, W, C)`` or ``(B, C, H, W)`` with 1 or 3 channels → images. The
      channel axis is detected (an ambiguous shape is read channel-first for torch tensors,
      channel-last otherwise) unless ``channel_axis`` says where it is.
    * a list of such values → overlays: the first is the base, the later ones are drawn on top
      half-transparent (images) or as outlines (boxes).

    Values may be numpy arrays, torch tensors or TF tensors. Image values map to colours by the
    display-range rule of :func:`xaikit.viz.display_range`: integers as uint8, floats in [0, 1]
    or [-1, 1] as such, anything else from each image's own minimum to maximum.

    Args:
        columns: optional mapping ``{title: value}``, for titles that are not Python identifiers
            (e.g. ``{"x saliency": ...}``); its columns come before the keyword ones. A string
            here is taken as ``colormap`` (the reference's positional argument).
        colormap: colormap of single-channel cells (never applied to colour images).
        colormaps: per-column colormaps ``{column: name}``, overriding ``colormap``.
        vranges: per-column display ranges ``{column: (low, high)}``, or ``"minmax"`` to scale
            every image of that column by its own minimum and maximum.
        signed: column names (or True for all) holding signed values such as raw attributions:
            each image gets a range symmetric around 0 and, unless ``colormaps`` says otherwise,
            the diverging colormap ``"RdBu_r"`` (0 is white, positive red, negative blue).
        colorbars: column names (or True for all) whose single-channel cells get a colorbar.
        titles: display titles ``{column: title}`` (default: the column name).
        channel_axis: the channel axis (batch axis included: 1 = channel-first, -1 or 3 =
            channel-last) for all 4-D image columns, or ``{column: axis}``.
        **kwargs: the columns, ``title=value``. The option names above cannot be column names
            here; pass such a column through ``columns``.

    Example:
        >>> import numpy as np
        >>> img = ImgData(colormap="inferno", y=np.array([3, 5]), x=np.zeros((2, 8, 8, 3)),
        ...               saliency=np.ones((2, 8, 8, 1)), colorbars={"saliency"})
        >>> list(img), img.batch_sizes
        (['y', 'x', 'saliency'], [2])
        >>> img.paint_numpy(dpi=20).shape[0], img.paint_numpy(dpi=20).dtype.name
        (1, 'uint8')
    """

    def __init__(
        self,
        columns: Mapping[str, Any] | str | None = None,
        /,
        colormap: str | Colormap = "Greys",
        *,
        colormaps: Mapping[str, str | Colormap] | None = None,
        vranges: Mapping[str, tuple[float, float] | str] | None = None,
        signed: bool | str | Iterable[str] | None = None,
        colorbars: bool | str | Iterable[str] | None = None,
        titles: Mapping[str, str] | None = None,
        channel_axis: int | Mapping[str, int] | None = None,
        **kwargs: Any,
    ) -> None:
        if isinstance(columns, str):
            colormap, columns = columns, None
        if columns is not None and not isinstance(columns, Mapping):
            raise XaikitTypeError(f"columns must be a mapping {{title: value}}; got {describe(columns)}")
        raw: dict[str, Any] = {}
        for key, value in (columns or {}).items():
            if not isinstance(key, str):
                raise XaikitTypeError(f"column titles must be strings; got {describe(key)}")
            raw[key] = value
        for key, value in kwargs.items():
            if key in raw:
                raise XaikitValueError(f"column {key!r} is given twice (in columns and as a keyword)")
            raw[key] = value
        names = list(raw)
        self._cmap = _get_cmap(colormap, "colormap")
        self._cmaps = {}
        for key, cmap in (colormaps or {}).items():
            _check_known([key], "colormaps", names)
            self._cmaps[key] = _get_cmap(cmap, f"colormaps[{key!r}]")
        self._vranges: dict[str, tuple[float, float] | str] = {}
        for key, vr in (vranges or {}).items():
            _check_known([key], "vranges", names)
            self._vranges[key] = self._check_vrange(key, vr)
        self._signed = _name_set(signed, "signed", names)
        self._colorbars = _name_set(colorbars, "colorbars", names)
        # columns named explicitly by an image-only option are images even if (B, H, 4|5)
        named = set(self._cmaps) | set(self._vranges)
        named |= self._signed if signed is not True else set()
        named |= self._colorbars if colorbars is not True else set()
        self._titles = dict(titles or {})
        _check_known(self._titles, "titles", names)
        for key, title in self._titles.items():
            if not isinstance(title, str):
                raise XaikitTypeError(f"titles[{key!r}] must be a string; got {describe(title)}")
        axes = self._channel_axes(channel_axis, names)
        self._columns: dict[str, list[_Layer]] = {}
        for key, value in raw.items():
            strict = isinstance(channel_axis, Mapping)
            hint = key in named
            layers = [_parse_layer(key, v, axes.get(key), strict, hint) for v in _split_layers(key, value)]
            sizes = [layer.batch for layer in layers]
            if len(set(sizes)) > 1:
                raise XaikitValueError(
                    f"column {key!r}: every overlay element must have the same batch size; got {sizes}"
                )
            self._columns[key] = layers

    @staticmethod
    def _check_vrange(key: str, vr: Any) -> tuple[float, float] | str:
        if isinstance(vr, str):
            if vr == "minmax":
                return "minmax"
            raise XaikitValueError(f"vranges[{key!r}] must be (low, high) or 'minmax'; got {vr!r}")
        try:
            low, high = (float(v) for v in vr)
        except (TypeError, ValueError):
            raise XaikitValueError(
                f"vranges[{key!r}] must be (low, high) or 'minmax'; got {describe(vr)}"
            ) from None
        if not (np.isfinite(low) and np.isfinite(high) and low < high):
            raise XaikitValueError(f"vranges[{key!r}] must be finite with low < high; got ({low}, {high})")
        return low, high

    @staticmethod
    def _channel_axes(channel_axis: Any, names: list[str]) -> dict[str, int]:
        if channel_axis is None:
            return {}
        if isinstance(channel_axis, Mapping):
            _check_known(channel_axis, "channel_axis", names)
            items = dict(channel_axis)
        else:
            items = dict.fromkeys(names, channel_axis)
        for key, axis in items.items():
            if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
                raise XaikitTypeError(f"channel_axis for {key!r} must be an int; got {describe(axis)}")
        return {k: int(a) for k, a in items.items()}

    # ----------------------------------------------------------------------------- access
    # Deliberately not a Mapping: helpers that recurse into mappings (to_tensor, loggers) must
    # treat an ImgData as one value.
    @property
    def columns(self) -> list[str]:
        """The column names, in painting order within each row group."""
        return list(self._columns)

    def __getitem__(self, key: str) -> list[Any]:
        """The prepared overlay elements of a column: text as a list of strings per row, boxes
        as ``(B, N, 4|5)`` and images as ``(B, H, W)`` or ``(B, H, W, 3)`` arrays."""
        return [layer.data for layer in self._layers(key)]

    def __iter__(self) -> Iterator[str]:
        return iter(self._columns)

    def __contains__(self, key: object) -> bool:
        return key in self._columns

    def kinds(self, column: str) -> list[str]:
        """The cell kind of each overlay element of ``column``: ``"text"``, ``"boxes"`` or ``"image"``."""
        return [layer.kind for layer in self._layers(column)]

    def _layers(self, column: str) -> list[_Layer]:
        if column not in self._columns:
            raise KeyError(f"ImgData has no column {column!r}; the columns are {self.columns}")
        return self._columns[column]

    def __repr__(self) -> str:
        cols = ", ".join(f"{k}: {'+'.join(layer.kind for layer in v)}" for k, v in self._columns.items())
        return f"ImgData({cols}; batch sizes {self.batch_sizes})"

    @property
    def batch_sizes(self) -> list[int]:
        """The distinct batch sizes of the columns, ascending (one row group each)."""
        return sorted({layers[0].batch for layers in self._columns.values()})

    def title(self, column: str) -> str:
        """The display title of ``column``."""
        return self._titles.get(column, column)

    # ----------------------------------------------------------------------------- painting
    def paint_figure(
        self, save_path: str | os.PathLike[str] | None = None, dpi: float = 96, cell_size: float = 1.6
    ) -> Figure:
        """Paint the grid into a new matplotlib figure (no pyplot, no display needed).

        Args:
            save_path: if given, also write the figure there (``.png``, ``.svg`` or ``.pdf``),
                atomically: a temporary file in the same folder is renamed over the target.
            dpi: dots per inch of the figure and of the saved raster.
            cell_size: height of an image row in inches (the width follows the image's aspect).

        Returns:
            The figure; its axes are labelled ``"cell:<column>:<row>"`` (rows counted inside the
            column's row group) and ``"colorbar:<column>:<row>"``.
        """
        if not self._columns:
            raise XaikitValueError("ImgData has no columns to paint; pass at least one column")
        if not isinstance(cell_size, (int, float)) or not cell_size > 0:
            raise XaikitValueError(f"cell_size must be a positive number of inches; got {cell_size!r}")
        if not isinstance(dpi, (int, float)) or not dpi > 0:
            raise XaikitValueError(f"dpi must be a positive number; got {dpi!r}")
        groups = [[k for k, v in self._columns.items() if v[0].batch == b] for b in self.batch_sizes]
        plans = [self._plan_group(cols, float(cell_size)) for cols in groups]
        width = 2 * _MARGIN + max(p["width"] for p in plans)
        height = 2 * _MARGIN + sum(p["height"] for p in plans) + _GROUP_GAP * (len(plans) - 1)
        fig = new_figure(width, height, dpi)
        top = _MARGIN
        for plan in plans:
            self._paint_group(fig, plan, top, width, height)
            top += plan["height"] + _GROUP_GAP
        if save_path is not None:
            save_figure(fig, save_path, dpi=dpi)
        return fig

    def paint_numpy(self, dpi: float = 96, cell_size: float = 1.6) -> np.ndarray:
        """Paint the grid on an Agg canvas and return it as a ``(1, H, W, 3)`` uint8 array.

        Example:
            >>> import numpy as np
            >>> ImgData(x=np.zeros((1, 4, 4))).paint_numpy(dpi=10).shape[-1]
            3
        """
        fig = self.paint_figure(dpi=dpi, cell_size=cell_size)
        canvas = fig.canvas
        canvas.draw()
        rgba = np.asarray(canvas.buffer_rgba())  # type: ignore[attr-defined]
        out = np.array(rgba[..., :3], dtype=np.uint8)[None]
        fig.clear()
        return out

    # ----------------------------------------------------------------------------- layout
    def _plan_group(self, cols: list[str], cell: float) -> dict[str, Any]:
        batch = self._columns[cols[0]][0].batch
        has_pictures = any(self._columns[c][0].kind != "text" for c in cols)
        max_lines = max(
            (
                t.count("\n") + 1
                for c in cols
                for layer in self._columns[c]
                if layer.kind == "text"
                for t in layer.data
            ),
            default=1,
        )
        row_h = cell if has_pictures else max(0.6, max_lines * _TEXT_PT * 1.5 / 72.0)
        specs: list[dict[str, Any]] = []
        for col in cols:
            base = self._columns[col][0]
            if base.kind == "image":
                h, w = base.data.shape[1:3]
                content = row_h * float(np.clip(w / h, 0.25, 4.0))
            elif base.kind == "boxes":
                content = row_h
            else:
                longest = max(base.data, key=lambda t: _text_width(t, _TEXT_PT))
                content = float(np.clip(_text_width(longest, _TEXT_PT) + 0.2, 0.5 * cell, 2.2 * cell))
            cbar = _CBAR_W if col in self._colorbars and self._single_channel_layer(col) is not None else 0.0
            title_w = min(_text_width(self.title(col), _TITLE_PT) + 0.1, 1.6 * cell)
            specs.append(
                {"col": col, "content": content, "cbar": cbar, "width": max(content + cbar, title_w)}
            )
        width = sum(s["width"] for s in specs) + _COL_GAP * (len(specs) - 1)
        height = _TITLE_H + batch * row_h + (batch - 1) * _ROW_GAP
        return {"specs": specs, "batch": batch, "row_h": row_h, "width": width, "height": height}

    def _single_channel_layer(self, col: str) -> _Layer | None:
        found = None
        for layer in self._columns[col]:
            if layer.kind == "image" and layer.data.ndim == 3:
                found = layer
        return found

    def _paint_group(self, fig: Figure, plan: dict[str, Any], top: float, fig_w: float, fig_h: float) -> None:
        row_h = plan["row_h"]
        x = _MARGIN
        for spec in plan["specs"]:
            col = spec["col"]
            left = x + (spec["width"] - spec["content"] - spec["cbar"]) / 2
            title, title_pt = _fit_title(self.title(col), spec["width"] + 0.8 * _COL_GAP)
            for row in range(plan["batch"]):
                y = top + _TITLE_H + row * (row_h + _ROW_GAP)
                rect = (left / fig_w, 1 - (y + row_h) / fig_h, spec["content"] / fig_w, row_h / fig_h)
                ax = fig.add_axes(rect, label=f"cell:{col}:{row}")
                mappable = self._paint_cell(ax, col, row, spec["content"], row_h)
                if row == 0:
                    ax.set_title(title, fontsize=title_pt, pad=5)
                if spec["cbar"] and mappable is not None:
                    cx = left + spec["content"] + 0.08
                    crect = (cx / fig_w, 1 - (y + row_h) / fig_h, 0.1 / fig_w, row_h / fig_h)
                    cax = fig.add_axes(crect, label=f"colorbar:{col}:{row}")
                    fig.colorbar(mappable, cax=cax)
                    cax.tick_params(labelsize=7, length=2, pad=1)
            x += spec["width"] + _COL_GAP

    def _paint_cell(self, ax: Axes, col: str, row: int, width: float, height: float) -> Any:
        layers = self._columns[col]
        ax.set_xticks([])
        ax.set_yticks([])
        base = layers[0]
        if base.kind == "text":
            for spine in ax.spines.values():
                spine.set_visible(False)
        mappable = None
        extent: tuple[float, float, float, float] | None = None
        for depth, layer in enumerate(layers):
            if layer.kind == "text":
                self._paint_text(ax, layer.data[row], width, height, overlay=depth > 0)
            elif layer.kind == "boxes":
                self._paint_boxes(ax, layer.data[row], depth, extent)
            else:
                image = layer.data[row]
                if extent is None:
                    extent = (0.0, float(image.shape[1]), float(image.shape[0]), 0.0)
                m = self._paint_image(ax, col, layer, image, extent, _OVERLAY_ALPHA if depth else None)
                mappable = m if m is not None else mappable
        if extent is not None:
            ax.set_xlim(extent[0], extent[1])
            ax.set_ylim(extent[2], extent[3])
            ax.set_axis_off()
        return mappable

    def _paint_text(self, ax: Axes, text: str, width: float, height: float, overlay: bool) -> None:
        if overlay:
            ax.text(
                0.03,
                0.97,
                text,
                ha="left",
                va="top",
                fontsize=8,
                transform=ax.transAxes,
                bbox={"facecolor": "white", "alpha": 0.7, "edgecolor": "none", "pad": 1},
            )
            return
        wrapped, points = _fit_text(text, 0.92 * width, 0.85 * height)
        ax.text(0.5, 0.5, wrapped, ha="center", va="center", fontsize=points, transform=ax.transAxes)

    def _paint_boxes(
        self, ax: Axes, boxes: np.ndarray, depth: int, extent: tuple[float, float, float, float] | None
    ) -> None:
        color = _BOX_COLORS[depth % len(_BOX_COLORS)]
        valid = [b for b in boxes if np.all(np.isfinite(b[:4])) and b[2] > 0 and b[3] > 0]
        for box in valid:
            x0, y0, w, h = (float(v) for v in box[:4])
            ax.add_patch(Rectangle((x0, y0), w, h, fill=False, edgecolor=color, linewidth=1.5))
            if box.shape[0] == 5:
                ax.text(
                    x0,
                    y0,
                    _fmt(box[4]),
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

    def _paint_image(
        self,
        ax: Axes,
        col: str,
        layer: _Layer,
        image: np.ndarray,
        extent: tuple[float, float, float, float],
        alpha: float | None,
    ) -> Any:
        signed = col in self._signed
        vrange = self._vranges.get(col)
        rng = display_range(image, vrange=vrange, signed=signed, batch_range=layer.fixed)
        kwargs: dict[str, Any] = {"interpolation": "nearest", "extent": extent, "alpha": alpha}
        if image.ndim == 2:
            cmap = self._cmaps.get(col) or (_mpl_colormaps["RdBu_r"] if signed else self._cmap)
            return ax.imshow(image.astype(np.float32), cmap=cmap, vmin=rng[0], vmax=rng[1], **kwargs)
        ax.imshow(to_unit(image, rng), **kwargs)
        return None
