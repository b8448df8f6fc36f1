"""Line plots of module statistics recorded by :class:`xaikit.inspect.ModuleTracker`."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from xaikit.errors import XaikitTypeError, XaikitValueError, describe
from xaikit.viz._save import save_figure

__all__ = ["plot_module_stats"]


def _frame(log: Any) -> Any:
    if isinstance(log, (str, os.PathLike)):
        from xaikit.inspect import read_log

        return read_log(log)
    if hasattr(log, "columns") and hasattr(log, "groupby"):
        return log
    raise XaikitTypeError(f"log must be a DataFrame from the tracker or a run folder; got {describe(log)}")


def plot_module_stats(
    log: Any,
    stat: str = "std",
    kind: str = "output",
    modules: Sequence[str] | None = None,
    tname: str | None = None,
    logy: bool | None = None,
    title: str | None = None,
    ax: Axes | None = None,
    save_path: str | os.PathLike[str] | None = None,
    dpi: float = 96,
) -> Figure:
    """One line per module: a statistic over training steps.

    A module called several times per step (a shared pooling layer) gets one line per call,
    labelled ``module #call``.

    Args:
        log: ``tracker.df``, the result of :func:`xaikit.inspect.read_log`, or a run folder.
        stat: the column to plot (``"std"``, ``"mean"``, ``"zero_frac"``, ``"norm"``...).
        kind: ``"input"``, ``"output"``, ``"weight"`` or ``"grad"``.
        modules: the modules to draw, in this order (default: every module with records of
            ``kind``, in order of first appearance).
        tname: the tensor name to draw (default: the first one of each module, e.g. ``out``,
            ``x.0`` or ``weight``/``kernel``).
        logy: logarithmic y axis (default: when every value is positive and they span more than
            two decades).
        title: axes title (default: ``"<stat> of module <kind>s"``).
        ax: draw into these axes instead of a new figure.
        save_path: also write the figure (PNG, SVG or PDF, by extension), atomically.
        dpi: resolution of a saved raster figure.

    Returns:
        The figure drawn into.

    Raises:
        XaikitValueError: ``stat`` is not a column, or nothing matches ``kind`` / ``modules``.

    Example:
        >>> import pandas as pd
        >>> df = pd.DataFrame({"step": [0, 1, 0, 1], "call": [0, 0, 0, 0], "module": ["a", "a", "b", "b"],
        ...                    "kind": "output", "tname": "out", "std": [1.0, 0.5, 2.0, 1.5]})
        >>> fig = plot_module_stats(df)
        >>> [line.get_label() for line in fig.axes[0].get_lines()]
        ['a', 'b']
    """
    df = _frame(log)
    if stat not in df.columns:
        raise XaikitValueError(
            f"stat must be a column of the log {sorted(map(str, df.columns))}; got {stat!r}"
        )
    rows = df[df["kind"] == kind]
    if rows.empty:
        raise XaikitValueError(
            f"kind {kind!r} has no records in the log; kinds present: {sorted(set(df['kind']))}"
        )
    if modules is None:
        modules = list(dict.fromkeys(rows["module"]))
    else:
        missing = [m for m in modules if m not in set(rows["module"])]
        if missing:
            raise XaikitValueError(f"modules {missing} have no {kind!r} records in the log")
    if ax is None:
        fig = Figure(figsize=(8.0, 4.5), dpi=dpi)
        FigureCanvasAgg(fig)
        ax = fig.add_subplot()
    else:
        fig = ax.figure  # type: ignore[assignment]
    drawn: list[np.ndarray] = []
    for module in modules:
        mrows = rows[rows["module"] == module]
        name = tname if tname is not None else mrows["tname"].iloc[0]
        mrows = mrows[mrows["tname"] == name]
        calls = mrows["call"].fillna(0).astype(int) if "call" in mrows.columns else None
        groups = [(0, mrows)] if calls is None else list(mrows.groupby(calls.to_numpy()))
        for call, sub in groups:
            values = sub.groupby("step")[stat].mean()
            y = values.to_numpy(dtype=np.float64)
            label = module if len(groups) == 1 else f"{module} #{call}"
            if tname is None and name not in ("out", "x.0"):
                label = f"{label} ({name})"
            ax.plot(values.index.to_numpy(), y, marker="o", markersize=2.5, linewidth=1.4, label=label)
            drawn.append(y[np.isfinite(y)])
    values_all = np.concatenate(drawn) if drawn else np.zeros(0)
    if logy is None:
        positive = values_all.size > 0 and bool((values_all > 0).all())
        logy = positive and float(values_all.max() / values_all.min()) > 100.0
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel(stat)
    ax.set_title(title if title is not None else f"{stat} of module {kind}s")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small", loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
    if save_path is not None:
        save_figure(fig, save_path, dpi=dpi, bbox_inches="tight")
    return fig
