"""A caption under a painted figure (e.g. the randomization grid's reading guide)."""

from __future__ import annotations

import os
import textwrap
from typing import Any

from matplotlib.figure import Figure

from xaikit.errors import XaikitTypeError
from xaikit.viz._save import save_figure

__all__ = ["add_caption", "paint_with_caption"]

_LINE_INCHES = 0.19
_PAD_INCHES = 0.12


def add_caption(fig: Figure, text: str, fontsize: float = 8.0) -> Figure:
    """Grow ``fig`` downwards and write ``text`` (wrapped to the figure's width) in the new strip.

    The painted content keeps its size and place; the figure gets taller by the caption's lines.

    Args:
        fig: a painted figure.
        text: the caption; blank lines and newlines start new paragraphs.
        fontsize: the caption's font size in points.

    Returns:
        The same figure; the caption is a figure text with the label ``"caption"``.

    Example:
        >>> import numpy as np
        >>> from xaikit.viz import ImgData
        >>> fig = ImgData(x=np.zeros((1, 8, 8))).paint_figure(dpi=20)
        >>> h = fig.get_figheight()
        >>> [t.get_label() for t in add_caption(fig, "what the picture shows").texts]
        ['caption']
        >>> bool(fig.get_figheight() > h)
        True
    """
    if not isinstance(text, str):
        raise XaikitTypeError(f"caption text must be a str; got {type(text).__name__}")
    width, height = fig.get_figwidth(), fig.get_figheight()
    # DejaVu Sans averages ~0.55 em a glyph over prose; 0.62 leaves room for wide letters
    chars = max(int((width - 2 * _PAD_INCHES) * 72 / (fontsize * 0.62)), 20)
    lines = [part for para in text.split("\n") for part in (textwrap.wrap(para, chars) or [""])]
    extra = _PAD_INCHES * 2 + _LINE_INCHES * len(lines) * fontsize / 8.0
    new_height = height + extra
    for ax in fig.axes:
        box = ax.get_position()
        ax.set_position(
            (box.x0, (box.y0 * height + extra) / new_height, box.width, box.height * height / new_height)
        )
    for artist in fig.texts:
        x, y = artist.get_position()
        artist.set_position((x, (y * height + extra) / new_height))
    fig.set_figheight(new_height)
    fig.text(
        _PAD_INCHES / width,
        (extra - _PAD_INCHES) / new_height,
        "\n".join(lines),
        ha="left",
        va="top",
        fontsize=fontsize,
        color="0.15",
        label="caption",
    )
    return fig


def paint_with_caption(
    grid: Any,
    caption: str,
    save_path: str | os.PathLike[str] | None = None,
    dpi: float = 96,
    cell_size: float = 1.6,
) -> Figure:
    """Paint an :class:`~xaikit.viz.ImgData` grid with a caption under it, optionally saving it
    (atomically, like :meth:`ImgData.paint_figure`)."""
    fig = add_caption(grid.paint_figure(dpi=dpi, cell_size=cell_size), caption)
    if save_path is not None:
        save_figure(fig, save_path, dpi=dpi)
    return fig
