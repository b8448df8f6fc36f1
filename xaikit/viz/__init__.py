"""Painting: the ImgData grid, saliency overlays, training-history plots and the run report page.

This is the only package of xaikit that imports matplotlib. Everything here uses matplotlib's
object API (``Figure`` + the Agg canvas), never the pyplot state machine, so it runs headless.

Example:
    >>> import numpy as np
    >>> from xaikit.viz import ImgData
    >>> ImgData(y=np.array([1, 2]), x=np.zeros((2, 8, 8))).paint_numpy(dpi=20).dtype.name
    'uint8'
"""

from __future__ import annotations

from xaikit.denormalize import denormalize
from xaikit.viz._image import display_range
from xaikit.viz._save import save_figure
from xaikit.viz.contour import Contour
from xaikit.viz.history import plot_history
from xaikit.viz.img_data import ImgData
from xaikit.viz.overlay import overlay
from xaikit.viz.report_page import report

__all__ = [
    "Contour",
    "ImgData",
    "denormalize",
    "display_range",
    "overlay",
    "plot_history",
    "report",
    "save_figure",
]
