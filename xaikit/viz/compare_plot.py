"""Methods side by side: the picture of :meth:`xaikit.evaluate.CompareResult.figure`.

Two parts, both readable at the saved resolution (no text under :data:`MIN_FONT` points):

* the maps: rows are samples, the first column the input, then one column per method, with a
  colour bar that says what the map's colours mean;
* the scores (when given): a table with one row per metric (its full name and ↑ / ↓ for the
  direction of better) and one column per method; each cell holds one number, the method's
  mean score, and is coloured by the method's rank on that metric (colour bar: rank, 1 = best;
  grey: no score). A line under it explains the arrows and the colours.

Takes plain arrays and labels (the evaluation layer prepares them), so this painting layer
knows nothing of the metrics.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
from matplotlib import colormaps
from matplotlib.axes import Axes
from matplotlib.colors import BoundaryNorm, ListedColormap
from matplotlib.figure import Figure, SubFigure

from xaikit.errors import XaikitValueError
from xaikit.viz._save import finish_figure, new_figure

__all__ = ["MIN_FONT", "ScoreTable", "paint_comparison", "rank_colors"]

#: the smallest font (points) of the picture: 8 pt is 10 pixels at the report's 90 dpi
MIN_FONT = 8.0
_HEAD = 9.0  # column titles
_RANKS = colormaps["RdBu_r"]  # rank 1 blue ... last red (readable with red-green colour blindness)
_NA = "#d9d9de"  # a cell without a score


@dataclass
class ScoreTable:
    """Mean scores to paint under the maps.

    Attributes:
        rows: the row labels (a metric's name and its direction, e.g. ``"deletion AUC ↓"``).
        columns: the column labels (the methods, in the order of the maps).
        values: (rows, columns) the numbers shown, NaN where there is none.
        ranks: (rows, columns) the colours: rank 1 = best, NaN = no rank (grey).
        legend: the line under the table (what the arrows and colours mean).
    """

    rows: Sequence[str]
    columns: Sequence[str]
    values: np.ndarray
    ranks: np.ndarray
    legend: str = field(
        default="↑ higher is better, ↓ lower is better. Each cell: the method's mean score; "
        "its colour: the method's rank on that row (1 = best); grey: no score."
    )

    def __post_init__(self) -> None:
        shape = (len(self.rows), len(self.columns))
        self.values = np.asarray(self.values, dtype=np.float64)
        self.ranks = np.asarray(self.ranks, dtype=np.float64)
        if self.values.shape != shape or self.ranks.shape != shape:
            raise XaikitValueError(
                f"values and ranks must have one entry per row and column, shape {shape}; got "
                f"{self.values.shape} and {self.ranks.shape}"
            )


def rank_colors(n: int) -> list[str]:
    """The colours of ranks 1 .. ``n`` (hex), light tones that keep black text readable: blue
    for rank 1 ... red for rank ``n`` (no red-green pair). The report's rank table uses them too.

    Example:
        >>> colors = rank_colors(3)
        >>> len(colors), colors[0] != colors[-1], colors[0].startswith("#")
        (3, True, True)
    """
    from matplotlib.colors import to_hex

    return [to_hex(c) for c in _RANKS(np.linspace(0.2, 0.8, max(2, int(n))))][: max(1, int(n))]


def _unit_image(image: np.ndarray) -> np.ndarray:
    """An image (H, W) or (H, W, C) min-max scaled to [0, 1] for display (grey for one channel)."""
    img = np.asarray(image, dtype=np.float64)
    if img.ndim == 3 and img.shape[-1] == 1:
        img = img[..., 0]
    low, high = float(img.min()), float(img.max())
    return (img - low) / (high - low) if high > low else np.zeros_like(img)


def _cell_text(value: float) -> str:
    return "n/a" if not np.isfinite(value) else f"{value:.3g}"


def _paint_scores(fig: Figure | SubFigure, ax: Axes, cax: Axes, scores: ScoreTable) -> None:
    """The score table on ``ax``, its rank colour bar on ``cax``."""
    n = max(2, len(scores.columns))
    cmap = ListedColormap(rank_colors(n)).with_extremes(bad=_NA)
    norm = BoundaryNorm(np.arange(0.5, n + 1.5), n)
    image = ax.imshow(np.ma.masked_invalid(scores.ranks), cmap=cmap, norm=norm, aspect="auto")
    for i in range(len(scores.rows)):
        for j in range(len(scores.columns)):
            ax.text(j, i, _cell_text(scores.values[i, j]), ha="center", va="center", fontsize=MIN_FONT)
    ax.set_yticks(range(len(scores.rows)), [str(r) for r in scores.rows], fontsize=MIN_FONT)
    ax.set_xticks(range(len(scores.columns)), [str(c) for c in scores.columns], fontsize=MIN_FONT)
    ax.xaxis.tick_top()
    ax.tick_params(length=0)
    ax.set_xticks(np.arange(-0.5, len(scores.columns)), minor=True)
    ax.set_yticks(np.arange(-0.5, len(scores.rows)), minor=True)
    ax.grid(which="minor", color="white", linewidth=1.5)
    ax.tick_params(which="minor", length=0)
    for side in ax.spines.values():
        side.set_visible(False)
    ax.set_xlabel(scores.legend, fontsize=MIN_FONT, wrap=True)
    bar = fig.colorbar(image, cax=cax, ticks=range(1, n + 1))
    bar.set_label("rank (1 = best)", fontsize=MIN_FONT)
    bar.ax.invert_yaxis()  # rank 1 on top
    bar.ax.tick_params(labelsize=MIN_FONT)


def paint_comparison(
    images: np.ndarray,
    maps: Mapping[str, np.ndarray],
    titles: Mapping[str, Sequence[str]] | None = None,
    save_path: str | os.PathLike[str] | None = None,
    dpi: float = 96,
    cell_size: float = 1.7,
    colormap: str = "inferno",
    figure_title: str | None = None,
    *,
    scores: ScoreTable | None = None,
    row_titles: Sequence[str] | None = None,
    map_label: str = "map value (display scale)",
) -> Figure:
    """Paint inputs and each method's maps side by side, and the score table under them.

    Args:
        images: (N, H, W) or (N, H, W, C) inputs, channel-last (each min-max scaled for display).
        maps: method label -> (N, H, W) display maps in [0, 1].
        titles: method label -> N short titles (one per sample) of that method's cells.
        save_path: also write the figure there (``.png``, ``.svg`` or ``.pdf``).
        dpi: the figure's resolution.
        cell_size: inches per map cell.
        colormap: the maps' colour map.
        figure_title: a title over the grid.
        scores: the :class:`ScoreTable` painted under the maps (None: maps only).
        row_titles: N labels of the rows (left of the inputs), e.g. ``"#0, class 3"``.
        map_label: the label of the maps' colour bar.

    Returns:
        The matplotlib figure.

    Example:
        >>> table = ScoreTable(["score ↑"], ["a"], np.array([[0.5]]), np.array([[1.0]]))
        >>> fig = paint_comparison(np.zeros((2, 8, 8, 3)), {"a": np.ones((2, 8, 8))}, scores=table, dpi=20)
        >>> len(fig.axes)  # 2 x 2 cells, the maps' colour bar, the table and its colour bar
        7
    """
    images = np.asarray(images)
    n = images.shape[0]
    titles = dict(titles or {})
    for label, m in maps.items():
        if np.shape(m)[0] != n:
            raise XaikitValueError(
                f"maps[{label!r}] must have one map per image ({n}); got shape {np.shape(m)}"
            )
        if label in titles and len(titles[label]) != n:
            raise XaikitValueError(f"titles[{label!r}] must have {n} entries; got {len(titles[label])}")
    if row_titles is not None and len(row_titles) != n:
        raise XaikitValueError(f"row_titles must have {n} entries; got {len(row_titles)}")
    if scores is not None and list(scores.columns) != list(maps):
        raise XaikitValueError(
            f"scores.columns must be the methods of maps, in order {list(maps)}; got {list(scores.columns)}"
        )
    cols = 1 + len(maps)
    head = 0.3
    lines = max([0] + [t.count("\n") + 1 for ts in titles.values() for t in ts if t])
    row_h = cell_size + 0.16 * lines
    maps_h = head + n * row_h + 0.2
    table_h = 0.0 if scores is None else 0.3 * len(scores.rows) + 1.2
    bar_w = 1.0  # a colour bar and its label
    fig = new_figure(cols * cell_size + bar_w + 0.4, maps_h + table_h + (0.4 if figure_title else 0.0), dpi)
    top: Figure | SubFigure = fig
    bottom: SubFigure | None = None
    if scores is not None:
        top, bottom = np.asarray(fig.subfigures(2, 1, height_ratios=[maps_h, table_h])).tolist()
    grid = top.add_gridspec(n, cols + 1, width_ratios=[cell_size] * cols + [0.12])
    shown = None
    for i in range(n):
        ax = top.add_subplot(grid[i, 0])
        img = _unit_image(images[i])
        ax.imshow(img, cmap="gray" if img.ndim == 2 else None, vmin=0.0, vmax=1.0)
        ax.set_title("input" if i == 0 else "", fontsize=_HEAD)
        if row_titles is not None:
            ax.set_ylabel(str(row_titles[i]), fontsize=MIN_FONT)
        for j, (label, m) in enumerate(maps.items(), start=1):
            ax = top.add_subplot(grid[i, j])
            shown = ax.imshow(np.asarray(m[i], dtype=np.float64), cmap=colormap, vmin=0.0, vmax=1.0)
            text = [label] if i == 0 else []
            if titles.get(label) and titles[label][i]:
                text.append(str(titles[label][i]))
            ax.set_title("\n".join(text), fontsize=_HEAD if i == 0 else MIN_FONT)
    for ax in top.axes:
        ax.set_xticks([])
        ax.set_yticks([])
    if shown is not None:
        bar = top.colorbar(shown, cax=top.add_subplot(grid[: max(1, min(n, 2)), cols]))
        bar.set_label(map_label, fontsize=MIN_FONT)
        bar.ax.tick_params(labelsize=MIN_FONT)
    if scores is not None and bottom is not None:
        table = bottom.add_gridspec(1, 2, width_ratios=[cols * cell_size, 0.12])
        _paint_scores(bottom, bottom.add_subplot(table[0, 0]), bottom.add_subplot(table[0, 1]), scores)
    return finish_figure(fig, figure_title, save_path, dpi)
