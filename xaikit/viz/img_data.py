"""``ImgData``: a grid of images, masks, boxes and text, one column per keyword, one row per sample.

The class is the façade; the work is in :mod:`xaikit.viz._cells` (what a value is),
:mod:`xaikit.viz._grid_options` (checked options), :mod:`xaikit.viz._grid_layout` (geometry)
and :mod:`xaikit.viz._grid_paint` (drawing).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
from matplotlib.colors import Colormap
from matplotlib.figure import Figure

from xaikit.backend import prefers_channel_first, to_number
from xaikit.denormalize import to_denormalizer
from xaikit.errors import XaikitTypeError, XaikitValueError, describe
from xaikit.viz._cells import Layer, parse_columns, split_layers
from xaikit.viz._grid_options import GridOptions, channel_axes, check_known
from xaikit.viz._grid_paint import paint_grid
from xaikit.viz._save import save_figure

__all__ = ["ImgData"]


def _denormalized(
    raw: dict[str, Any], denormalize: Mapping[str, Any] | None, axes: Mapping[str, int], names: list[str]
) -> dict[str, Any]:
    """The columns with the ``denormalize`` option applied to the (base) images it names."""
    if denormalize is None:
        return raw
    if not isinstance(denormalize, Mapping):
        raise XaikitTypeError(
            f"denormalize must be a dict {{column: (mean, std) or function}}; got {describe(denormalize)}"
        )
    check_known(denormalize, "denormalize", names)
    out = dict(raw)
    for key, spec in denormalize.items():
        den = to_denormalizer(spec, f"denormalize[{key!r}]")
        if den is None:
            continue
        layers = split_layers(key, raw[key])
        base = den.apply(to_number(layers[0]), axes.get(key), prefers_channel_first(layers[0]))
        out[key] = [base, *layers[1:]] if isinstance(raw[key], (list, tuple)) else base
    return out


class ImgData:
    """Columns of images, masks, bounding boxes and text painted as one matplotlib grid.

    Each keyword is a column (in insertion order) and every sample of its value is one row.
    Columns whose batch sizes differ are painted in separate row groups, smallest batch first.

    A cell's kind comes from its value:

    * strings, bytes and numbers, or arrays of shape ``(B,)`` / ``(B, N)`` → centred text (one
      string per row; a plain list of strings or numbers counts as such an array);
    * a 2-D float array ``(H, W)`` where a batch of one is expected → one greyscale image: when
      the column is named in an image-only option (below), when another column has one sample
      and none has ``H``, or, with no column of ``H`` samples, when ``H`` and ``W`` are both at
      least 8 (a ``(B, N)`` float array beside ``B``-sample columns stays text);
    * arrays of shape ``(B, N, 4)`` or ``(B, N, 5)`` → ``N`` bounding boxes per row,
      ``(x0, y0, width, height[, label])`` in pixels of the image below; boxes whose width or
      height is not positive are skipped (padding). (A column named in ``colormaps``,
      ``vranges``, ``signed`` or ``colorbars`` reads such a shape as images 4 or 5 pixels wide.)
    * ``(B, H, W)``, ``(B, H, W, C)`` or ``(B, C, H, W)`` with 1 or 3 channels → images. The
      channel axis is detected (an ambiguous shape is read channel-first for torch tensors,
      channel-last otherwise) unless ``channel_axis`` says where it is.
    * :class:`~xaikit.viz.Contour` ``(masks)`` → the outlines of ``(B, H, W)`` bool or integer
      masks (the region's border pixels, opaque in its colour; the inside and outside left
      alone), e.g. a segmentation target over its image: ``x=[images, Contour(masks)]``.
    * a list of such values → overlays: the first is the base, the later ones are drawn on top
      half-transparent (images) or as outlines (boxes, contours).

    Values may be numpy arrays, torch tensors or TF tensors. Image values map to colours by the
    display-range rule of :func:`xaikit.viz.display_range`: integers as uint8, colour floats in
    [0, 1] or [-1, 1] as such, anything else from each image's own minimum to maximum.
    Single-channel float images (masks, raw maps) are scaled per image by their own range, from 0
    to their maximum when non-negative (a display mask reaching 1 paints as on 0..1; a raw map of
    maximum 0.036 is not painted black), else from their minimum to maximum; an all-zero one is
    painted in the colormap's zero colour with an "all 0" note. ``vranges`` and ``signed`` win.
    An image with NaN or infinite pixels (painted in the background colour) gets a note with
    their count ("3 NaN/inf px", "all NaN/inf").

    Args:
        columns: optional mapping ``{title: value}``, for titles that are not Python identifiers
            (e.g. ``{"x saliency": ...}``); its columns come before the keyword ones. A string
            here is taken as ``colormap`` (the reference's positional argument).
        colormap: colormap of single-channel cells (never applied to colour images).
        colormaps: per-column colormaps ``{column: name}``, overriding ``colormap``.
        vranges: per-column display ranges ``{column: (low, high)}`` (e.g. ``(0, 1)`` to compare
            a column's maps on one scale), or ``"minmax"`` to scale every image of that column by
            its own minimum and maximum.
        signed: column names (or True for all) holding signed values such as raw attributions:
            each image gets a range symmetric around 0 and, unless ``colormaps`` says otherwise,
            the diverging colormap ``"RdBu_r"`` (0 is white, positive red, negative blue).
        colorbars: column names (or True for all) whose single-channel cells get a colorbar.
        titles: display titles ``{column: title}`` (default: the column name).
        channel_axis: the channel axis (batch axis included: 1 = channel-first, -1 or 3 =
            channel-last) for all 4-D image columns, or ``{column: axis}``.
        text_colors: per-row text colours ``{column: [colour or None, ...]}``; a coloured cell
            is also bold (e.g. wrong predictions in red).
        figure_title: a title over the whole grid (e.g. the epoch).
        denormalize: ``{column: (mean, std)}`` for image columns that hold normalized model
            inputs: each is drawn as ``x * std + mean`` per channel (numbers or one per channel;
            see :mod:`xaikit.denormalize`), so the grid shows the real picture. A function
            images -> display images may stand for ``(mean, std)``. In an overlay list, only the
            base (first) element is mapped.
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
        text_colors: Mapping[str, Sequence[str | None]] | None = None,
        figure_title: str | None = None,
        denormalize: Mapping[str, Any] | None = None,
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
        self._options = GridOptions.build(
            names, colormap, colormaps, vranges, signed, colorbars, titles, text_colors, figure_title
        )
        named = self._options.image_named(signed, colorbars)
        axes = channel_axes(channel_axis, names)
        raw = _denormalized(raw, denormalize, axes, names)
        self._columns: dict[str, list[Layer]] = parse_columns(
            raw, axes, isinstance(channel_axis, Mapping), named
        )

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
        """The cell kind of each overlay element of ``column``: ``"text"``, ``"boxes"``, ``"image"``
        or ``"contour"``."""
        return [layer.kind for layer in self._layers(column)]

    def _layers(self, column: str) -> list[Layer]:
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
        return self._options.title(column)

    @property
    def figure_title(self) -> str | None:
        """The title over the whole grid (``None``: none)."""
        return self._options.figure_title

    def text_color(self, column: str, row: int) -> str | None:
        """The colour of the text of ``column`` in ``row`` (``None``: the default)."""
        self._layers(column)
        return self._options.text_color(column, row)

    @property
    def _cmaps(self) -> dict[str, Colormap]:
        return self._options.cmaps

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
            column's row group) and ``"colorbar:<column>:<row>"``; ``figure_title`` is its
            ``suptitle``.
        """
        if not self._columns:
            raise XaikitValueError("ImgData has no columns to paint; pass at least one column")
        if not isinstance(cell_size, (int, float)) or not cell_size > 0:
            raise XaikitValueError(f"cell_size must be a positive number of inches; got {cell_size!r}")
        if not isinstance(dpi, (int, float)) or not dpi > 0:
            raise XaikitValueError(f"dpi must be a positive number; got {dpi!r}")
        fig = paint_grid(self._columns, self._options, float(dpi), float(cell_size))
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
