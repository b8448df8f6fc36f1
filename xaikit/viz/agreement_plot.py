"""Do the metrics agree? The heatmap of :meth:`xaikit.evaluate.MetricAgreement.figure`.

A square matrix of correlations in [-1, 1] between named rows (metrics), grouped (by family):
each cell coloured on a diverging scale (blue +1: the two rank the methods alike; red -1: in
reverse; grey: undefined) and its value written in it; black lines between the groups, the
group names over the columns, a colour bar, and a legend line under the matrix. No text under
:data:`~xaikit.viz.compare_plot.MIN_FONT` points.

Takes plain arrays and labels, so this painting layer knows nothing of the metrics.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np
from matplotlib import colormaps
from matplotlib.figure import Figure

from xaikit.errors import XaikitValueError
from xaikit.viz._save import finish_figure, new_figure
from xaikit.viz.compare_plot import _NA, MIN_FONT

__all__ = ["group_spans", "paint_agreement"]


def group_spans(groups: Sequence[str]) -> list[tuple[str, int, int]]:
    """The runs of equal neighbouring names: ``(name, first index, last index + 1)`` each.

    Example:
        >>> group_spans(["a", "a", "b", "a"])
        [('a', 0, 2), ('b', 2, 3), ('a', 3, 4)]
    """
    out: list[tuple[str, int, int]] = []
    for i, g in enumerate(groups):
        if out and out[-1][0] == g:
            out[-1] = (g, out[-1][1], i + 1)
        else:
            out.append((str(g), i, i + 1))
    return out


def paint_agreement(
    values: np.ndarray,
    labels: Sequence[str],
    groups: Sequence[str],
    *,
    legend: str = "",
    title: str | None = None,
    save_path: str | os.PathLike[str] | None = None,
    dpi: float = 96,
    cell: float = 0.5,
) -> Figure:
    """Paint a (n, n) correlation matrix as a heatmap grouped by ``groups``.

    Args:
        values: (n, n) correlations in [-1, 1], NaN where undefined (grey).
        labels: n row (and column) names.
        groups: n group names (neighbouring rows of one group are framed together).
        legend: the line under the matrix (what was correlated, over what).
        title: a title over the matrix.
        save_path: also write the figure there (``.png``, ``.svg`` or ``.pdf``).
        dpi: the figure's resolution.
        cell: inches per cell.

    Returns:
        The matplotlib figure.

    Example:
        >>> fig = paint_agreement(np.array([[1.0, -0.5], [-0.5, 1.0]]), ["a", "b"], ["f", "f"], dpi=20)
        >>> len(fig.axes)  # the matrix and its colour bar
        2
    """
    values = np.asarray(values, dtype=np.float64)
    n = len(labels)
    if values.shape != (n, n) or len(groups) != n:
        raise XaikitValueError(
            f"values must be (n, n) with n = len(labels) = len(groups); got {values.shape}, "
            f"{n} labels and {len(groups)} groups"
        )
    side = max(n, 2) * cell
    longest = max([len(str(x)) for x in labels] + [4])
    margin = 0.075 * longest + 0.6  # inches of the tick labels at 8 pt
    lines = 1 + len(legend) // 95
    fig = new_figure(side + margin + 1.6, side + margin + 0.6 + 0.18 * lines + (0.35 if title else 0), dpi)
    grid = fig.add_gridspec(1, 2, width_ratios=[side, 0.15])
    ax = fig.add_subplot(grid[0, 0])
    cax = fig.add_subplot(grid[0, 1])
    cmap = colormaps["RdBu"].with_extremes(bad=_NA)
    image = ax.imshow(np.ma.masked_invalid(values), cmap=cmap, vmin=-1.0, vmax=1.0, aspect="equal")
    for i in range(n):
        for j in range(n):
            v = values[i, j]
            text = "–" if not np.isfinite(v) else f"{v:.1f}".replace("-0.0", "0.0")
            color = "white" if np.isfinite(v) and abs(v) > 0.6 else "black"
            ax.text(j, i, text, ha="center", va="center", fontsize=MIN_FONT, color=color)
    ax.set_xticks(range(n), [str(x) for x in labels], fontsize=MIN_FONT, rotation=60, ha="right")
    ax.set_yticks(range(n), [str(x) for x in labels], fontsize=MIN_FONT)
    ax.tick_params(length=0)
    spans = group_spans(groups)
    for _, start, _stop in spans[1:]:
        ax.axhline(start - 0.5, color="black", linewidth=1.5)
        ax.axvline(start - 0.5, color="black", linewidth=1.5)
    for name, start, stop in spans:  # the group names in a band over the first row
        short = name if stop - start > 1 or len(name) <= 8 else name[:7] + "."
        ax.text((start + stop - 1) / 2, -0.75, short, ha="center", va="center", fontsize=MIN_FONT)
    ax.set_ylim(n - 0.5, -1.0)
    for side_ in ax.spines.values():
        side_.set_visible(False)
    if legend:
        ax.set_xlabel(legend, fontsize=MIN_FONT, wrap=True)
    bar = fig.colorbar(image, cax=cax, ticks=[-1, -0.5, 0, 0.5, 1])
    bar.set_label("rank correlation (+1: same order of the methods)", fontsize=MIN_FONT)
    bar.ax.tick_params(labelsize=MIN_FONT)
    return finish_figure(fig, title, save_path, dpi)
