"""Methods side by side: the picture of :meth:`xaikit.evaluate.CompareResult.figure`.

Rows are samples; the first column is the input, then one column per method, each map titled
with its scores on that sample. Takes plain arrays (the evaluation layer prepares them), so
this painting layer knows nothing of the metrics.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

import numpy as np
from matplotlib.figure import Figure

from xaikit.errors import XaikitValueError
from xaikit.viz._save import new_figure, save_figure

__all__ = ["paint_comparison"]


def _unit_image(image: np.ndarray) -> np.ndarray:
    """An image (H, W) or (H, W, C) min-max scaled to [0, 1] for display (grey for one channel)."""
    img = np.asarray(image, dtype=np.float64)
    if img.ndim == 3 and img.shape[-1] == 1:
        img = img[..., 0]
    low, high = float(img.min()), float(img.max())
    return (img - low) / (high - low) if high > low else np.zeros_like(img)


def paint_comparison(
    images: np.ndarray,
    maps: Mapping[str, np.ndarray],
    titles: Mapping[str, Sequence[str]] | None = None,
    save_path: str | os.PathLike[str] | None = None,
    dpi: float = 96,
    cell_size: float = 1.7,
    colormap: str = "inferno",
    figure_title: str | None = None,
) -> Figure:
    """Paint inputs and each method's maps side by side.

    Args:
        images: (N, H, W) or (N, H, W, C) inputs, channel-last (each min-max scaled for display).
        maps: method label -> (N, H, W) display maps in [0, 1].
        titles: method label -> N titles (one per sample) of that method's cells.
        save_path: also write the figure there (``.png``, ``.svg`` or ``.pdf``).
        dpi: the figure's resolution.
        cell_size: inches per cell.
        colormap: the maps' colour map.
        figure_title: a title over the grid.

    Returns:
        The matplotlib figure.

    Example:
        >>> fig = paint_comparison(np.zeros((2, 8, 8, 3)), {"a": np.ones((2, 8, 8))},
        ...                        {"a": ["s=1", "s=2"]}, dpi=20)
        >>> len(fig.axes)
        4
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
    cols = 1 + len(maps)
    top = 0.35 if figure_title else 0.0
    lines = max([1] + [t.count("\n") + 2 for ts in titles.values() for t in ts])  # + the method's name
    fig = new_figure(cols * cell_size, n * (cell_size + 0.11 * lines + 0.1) + top, dpi)
    axes = fig.subplots(n, cols, squeeze=False)
    for i in range(n):
        ax = axes[i, 0]
        img = _unit_image(images[i])
        ax.imshow(img, cmap="gray" if img.ndim == 2 else None, vmin=0.0, vmax=1.0)
        ax.set_title("input" if i == 0 else "", fontsize=7)
        for j, (label, m) in enumerate(maps.items(), start=1):
            ax = axes[i, j]
            ax.imshow(np.asarray(m[i], dtype=np.float64), cmap=colormap, vmin=0.0, vmax=1.0)
            head = f"{label}\n" if i == 0 else ""
            ax.set_title(head + (titles[label][i] if label in titles else ""), fontsize=6)
    for ax in axes.flat:
        ax.set_xticks([])
        ax.set_yticks([])
    if figure_title:
        fig.suptitle(figure_title, fontsize=9)
    fig.tight_layout(pad=0.3)
    if save_path is not None:
        save_figure(fig, save_path, dpi=dpi)
    return fig
