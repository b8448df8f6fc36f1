"""Atomic saving of matplotlib figures (shared by ImgData and the plots) and the last steps of
a plot (:func:`finish_figure`)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from xaikit.errors import XaikitTypeError, XaikitValueError
from xaikit.files import atomic_path

__all__ = ["SAVE_FORMATS", "finish_figure", "new_figure", "save_figure"]

SAVE_FORMATS = ("png", "svg", "pdf")


def new_figure(width: float, height: float, dpi: float) -> Figure:
    """A pyplot-free figure of ``width`` × ``height`` inches with an Agg canvas attached."""
    fig = Figure(figsize=(width, height), dpi=dpi)
    FigureCanvasAgg(fig)
    return fig


def save_figure(
    fig: Figure, save_path: str | os.PathLike[str], dpi: float = 96, **savefig_options: Any
) -> Path:
    """Write ``fig`` to ``save_path`` atomically; the format comes from the extension.

    The figure is first written to a temporary file in the destination folder and then moved
    over the destination with :func:`os.replace`, so a reader never sees a half-written file
    and a failure leaves neither a partial file nor the temporary one behind. Missing parent
    folders are created.

    Args:
        fig: the figure to write.
        save_path: destination ending in ``.png``, ``.svg`` or ``.pdf`` (any case).
        dpi: resolution for the raster parts.
        **savefig_options: more options of ``Figure.savefig`` (e.g. ``bbox_inches="tight"``).

    Returns:
        The destination path.

    Raises:
        XaikitValueError: the extension is not one of the supported formats.
    """
    if not isinstance(save_path, (str, os.PathLike)):
        raise XaikitTypeError(f"save_path must be a str or path; got {type(save_path).__name__}")
    path = Path(save_path)
    fmt = path.suffix.lower().lstrip(".")
    if fmt not in SAVE_FORMATS:
        raise XaikitValueError(
            f"save_path must end in one of {', '.join('.' + f for f in SAVE_FORMATS)}; got {str(path)!r}"
        )
    if not isinstance(dpi, (int, float)) or dpi <= 0:
        raise XaikitValueError(f"dpi must be a positive number; got {dpi!r}")
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format=fmt, dpi=dpi, **savefig_options)
    return path


def finish_figure(
    fig: Figure, title: str | None, save_path: str | os.PathLike[str] | None, dpi: float
) -> Figure:
    """The last steps of a plot: the figure's ``title`` (if any) on top, the constrained layout,
    and the file written when ``save_path`` is given (:func:`save_figure`). Returns ``fig``."""
    if title:
        fig.suptitle(title, fontsize=10)
    fig.set_layout_engine("constrained")
    if save_path is not None:
        save_figure(fig, save_path, dpi=dpi)
    return fig
