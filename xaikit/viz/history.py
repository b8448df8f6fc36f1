"""Line plots of training histories (:class:`xaikit.summary.Summary`)."""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from xaikit.errors import XaikitTypeError, XaikitValueError, describe
from xaikit.summary import Summary, ValWithError
from xaikit.viz._save import new_figure, save_figure

__all__ = ["plot_history"]

_MODE_STYLES = {"train": "-", "eval": "--", "test": ":"}
_OTHER_STYLES = ("-.", (0, (5, 1, 1, 1)), (0, (1, 2)))


def _number(value: Any) -> float | None:
    if isinstance(value, (bool, str, bytes)) or value is None:
        return None
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        return None
    return float(arr.reshape(())) if arr.size == 1 else None


def _series(steps: dict[int, Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Sorted steps, mid values and (low, high) bands (None when no value carries an error)."""
    xs, mids, lows, highs, banded = [], [], [], [], False
    for step in sorted(steps):
        value = steps[step]
        if isinstance(value, ValWithError):
            low, mid, high = (_number(v) for v in value)
            if mid is None:
                continue
            banded = True
            lows.append(mid if low is None else low)
            highs.append(mid if high is None else high)
        else:
            mid = _number(value)
            if mid is None:
                continue
            lows.append(mid)
            highs.append(mid)
        xs.append(step)
        mids.append(mid)
    band = np.array([lows, highs]) if banded else None
    return np.array(xs, dtype=np.float64), np.array(mids), band


def _style(mode: str, modes: list[str]) -> Any:
    if mode in _MODE_STYLES:
        return _MODE_STYLES[mode]
    others = [m for m in modes if m not in _MODE_STYLES]
    return _OTHER_STYLES[others.index(mode) % len(_OTHER_STYLES)]


def plot_history(
    summaries: Summary | Iterable[Summary],
    save_path: str | os.PathLike[str] | None = None,
    dpi: float = 96,
    metrics: Sequence[str] | None = None,
    title: str | None = None,
    modes: Sequence[str] | None = None,
) -> Figure:
    """Draw one or more histories as lines against the step, one subplot per metric.

    Each summary is one colour (its ``name`` is the legend label); each mode a line style
    (train solid, eval dashed, test dotted), added to the label when a metric has several
    modes. :class:`~xaikit.summary.ValWithError` values are drawn as their ``mid`` line with a
    shaded band from ``low`` to ``high``. Values that are not numbers are left out.

    Args:
        summaries: a Summary or several (e.g. one per label from ``LabelTracker``).
        save_path: also write the figure there (``.png``, ``.svg``, ``.pdf``), atomically.
        dpi: figure and raster resolution.
        metrics: the metrics to draw, in this order (default: every numeric metric).
        title: figure title.
        modes: the modes to draw (default: all).

    Returns:
        The figure (no pyplot involved).

    Example:
        >>> from xaikit.summary import Summary, ValWithError
        >>> s = Summary("cat")
        >>> for step in (1, 2, 3):
        ...     s.write("eval", "loss", step, ValWithError(0.5 / step, 1.0 / step, 1.5 / step))
        >>> fig = plot_history(s)
        >>> [ax.get_title() for ax in fig.axes], fig.axes[0].get_xlabel()
        (['loss'], 'step')
    """
    runs = [summaries] if isinstance(summaries, Summary) else list(summaries)
    if not runs:
        raise XaikitValueError("plot_history needs at least one Summary; got none")
    for s in runs:
        if not isinstance(s, Summary):
            raise XaikitTypeError(f"plot_history draws Summary objects; got {describe(s)}")
    if isinstance(metrics, str) or isinstance(modes, str):
        raise XaikitTypeError("metrics and modes must be sequences of names, not a single string")
    if not isinstance(dpi, (int, float)) or not dpi > 0:
        raise XaikitValueError(f"dpi must be a positive number; got {dpi!r}")
    # (metric -> [(run index, mode, xs, mids, band)])
    found: dict[str, list[tuple[int, str, np.ndarray, np.ndarray, np.ndarray | None]]] = {}
    all_modes: list[str] = []
    for i, s in enumerate(runs):
        for mode, by_metric in s.history.items():
            if modes is not None and mode not in modes:
                continue
            for metric, steps in by_metric.items():
                xs, mids, band = _series(steps)
                if xs.size:
                    found.setdefault(metric, []).append((i, mode, xs, mids, band))
                    if mode not in all_modes:
                        all_modes.append(mode)
    if metrics is not None:
        missing = [m for m in metrics if m not in found]
        if missing:
            raise XaikitValueError(
                f"metrics {missing} have no numeric values in the summaries; available: {list(found)}"
            )
        names = list(metrics)
    else:
        names = list(found)
    if not names:
        raise XaikitValueError("the summaries hold no numeric values to plot")
    ncols = min(len(names), 3)
    nrows = math.ceil(len(names) / ncols)
    fig = new_figure(5.0 * ncols, 3.4 * nrows + (0.4 if title else 0.0), dpi)
    fig.set_layout_engine("constrained")
    for k, metric in enumerate(names):
        ax = fig.add_subplot(nrows, ncols, k + 1)
        lines = found[metric]
        several_modes = len({mode for _, mode, *_ in lines}) > 1
        for i, mode, xs, mids, band in lines:
            label = str(runs[i].name) if runs[i].name is not None else f"summary {i}"
            if several_modes:
                label = f"{label} ({mode})"
            color = f"C{i % 10}"
            ax.plot(
                xs,
                mids,
                color=color,
                linestyle=_style(mode, all_modes),
                marker="o" if xs.size <= 30 else None,
                markersize=3,
                label=label,
            )
            if band is not None:
                ax.fill_between(xs, band[0], band[1], color=color, alpha=0.2, linewidth=0)
        ax.set_title(metric)
        ax.set_xlabel("step")
        ax.set_ylabel(metric)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    if title:
        fig.suptitle(title)
    if save_path is not None:
        save_figure(fig, save_path, dpi=dpi)
    return fig
