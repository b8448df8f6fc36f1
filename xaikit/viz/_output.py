"""Helpers for the output traces: paint a trace value, figures as arrays, showing on a display."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from xaikit.summary import Summary

__all__ = ["can_show", "figure_to_array", "paint_value", "show_figure"]


def paint_value(value: Any, title: str | None = None, dpi: float = 96) -> Figure | None:
    """The figure of a trace output: an ``ImgData`` grid, the history plot of a ``Summary`` or a
    list of them, or a figure as is. ``None`` for anything else."""
    from xaikit.viz.history import plot_history
    from xaikit.viz.img_data import ImgData

    if isinstance(value, ImgData):
        return value.paint_figure(dpi=dpi)
    if isinstance(value, Summary):
        return plot_history(value, dpi=dpi, title=title)
    if isinstance(value, Iterable) and not isinstance(value, (str, bytes, dict, np.ndarray)):
        items = list(value)
        if items and all(isinstance(s, Summary) for s in items):
            if not any(s.modes() for s in items):
                return None
            return plot_history(items, dpi=dpi, title=title)
        return None
    if isinstance(value, Figure):
        return value
    return None


def figure_to_array(fig: Figure) -> np.ndarray:
    """Render ``fig`` on an Agg canvas: ``(H, W, 3)`` uint8."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    return np.array(np.asarray(canvas.buffer_rgba())[..., :3], dtype=np.uint8)


_INLINE = ("inline", "ipympl", "widget", "nbagg")


def can_show() -> bool:
    """Whether ``show_figure`` can put a figure in front of a person: an inline (notebook)
    backend, or an interactive non-Agg backend with a display (``DISPLAY``/``WAYLAND_DISPLAY``
    on Linux)."""
    import matplotlib

    backend = str(matplotlib.get_backend()).lower()
    if any(name in backend for name in _INLINE):
        return True
    if backend in ("agg", "pdf", "ps", "svg", "cairo", "template") or "agg" == backend.split(".")[-1]:
        return False
    if sys.platform.startswith("linux"):
        return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))
    return True


def show_figure(fig: Figure) -> None:
    """Show ``fig`` (painted by the Agg canvas) in the notebook or a pyplot window."""
    import matplotlib

    backend = str(matplotlib.get_backend()).lower()
    if any(name in backend for name in _INLINE):
        from IPython.display import display

        display(fig)
        return
    import matplotlib.pyplot as plt

    image = figure_to_array(fig)
    w, h = fig.get_size_inches()
    shown = plt.figure(figsize=(w, h), dpi=fig.dpi)
    ax = shown.add_axes((0.0, 0.0, 1.0, 1.0))
    ax.imshow(image)
    ax.set_axis_off()
    plt.show(block=False)
    plt.pause(0.001)
