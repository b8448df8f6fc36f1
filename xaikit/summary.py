"""Training histories: ``Summary`` (``{mode: {metric: {step: value}}}``) and ``ValWithError``.

Plain Python, no matplotlib: traces and loggers write here, :func:`xaikit.viz.plot_history`
paints it. Everything pickles (the nested defaultdicts use module-level factories).

Example:
    >>> s = Summary("cat")
    >>> s.history["eval"]["loss"][10] = ValWithError(0.1, 0.2, 0.3)
    >>> str(s.history["eval"]["loss"][10])
    '(0.1, 0.2, 0.3)'
    >>> s.metrics()
    ['loss']
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from typing import Any, NamedTuple

from xaikit.errors import XaikitTypeError, XaikitValueError, describe

__all__ = ["Summary", "ValWithError", "average_summaries", "merge_summaries"]


class ValWithError(NamedTuple):
    """A value with a lower and upper bound, e.g. mean ± std or (min, mean, max).

    Example:
        >>> v = ValWithError(1, 2.5, 4)
        >>> v.as_tuple(), float(v), str(v)
        ((1, 2.5, 4), 2.5, '(1, 2.5, 4)')
    """

    low: float
    mid: float
    high: float

    def as_tuple(self) -> tuple[float, float, float]:
        """``(low, mid, high)`` as a plain tuple."""
        return (self.low, self.mid, self.high)

    def __float__(self) -> float:
        return float(self.mid)

    def __str__(self) -> str:
        return "(" + ", ".join(f"{float(v):.6g}" for v in self) + ")"


def _metric_dict() -> defaultdict[str, dict[int, Any]]:
    return defaultdict(dict)


class Summary:
    """The history of one run, label or instance: ``history[mode][metric][step] = value``.

    Args:
        name: what this history describes (a run, a class label, an instance index); used as the
            line label when plotted.

    Attributes:
        history: nested ``{mode: {metric: {step: value}}}``; missing modes and metrics are
            created on access.
    """

    def __init__(self, name: Any = None) -> None:
        self.name = name
        self.history: defaultdict[str, defaultdict[str, dict[int, Any]]] = defaultdict(_metric_dict)

    def write(self, mode: str, metric: str, step: int, value: Any) -> None:
        """Record ``value`` of ``metric`` at ``step`` in ``mode``."""
        self.history[mode][metric][int(step)] = value

    def modes(self) -> list[str]:
        """The modes with at least one metric, in the order they were first written."""
        return [m for m, metrics in self.history.items() if metrics]

    def metrics(self, mode: str | None = None) -> list[str]:
        """The metric names (of one mode, or of all), in first-written order."""
        modes = [mode] if mode is not None else list(self.history)
        out: dict[str, None] = {}
        for m in modes:
            for key in self.history.get(m, {}):
                out[key] = None
        return list(out)

    def merge(self, other: Summary) -> Summary:
        """Copy every value of ``other`` into this summary (``other`` wins on clashes); returns self."""
        if not isinstance(other, Summary):
            raise XaikitTypeError(f"merge needs a Summary; got {describe(other)}")
        for mode, metrics in other.history.items():
            for metric, steps in metrics.items():
                self.history[mode][metric].update(steps)
        return self

    def __repr__(self) -> str:
        counts = {m: len(v) for m, v in self.history.items()}
        return f"Summary(name={self.name!r}, metrics per mode={counts})"


def merge_summaries(summaries: Iterable[Summary], name: Any = None) -> Summary:
    """A new summary holding every value of ``summaries`` (later ones win on clashes)."""
    out = Summary(name)
    for s in summaries:
        out.merge(s)
    return out


def _as_float(value: Any) -> float | None:
    if isinstance(value, ValWithError):
        return float(value.mid)
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def average_summaries(name: Any, summaries: Iterable[Summary]) -> Summary:
    """Mean ± sample standard deviation of numeric values across runs, per (mode, metric, step).

    Values that are not numbers are skipped; a ``ValWithError`` counts by its ``mid``.

    Example:
        >>> a, b = Summary("a"), Summary("b")
        >>> a.write("train", "loss", 1, 1.0); b.write("train", "loss", 1, 3.0)
        >>> str(average_summaries("avg", [a, b]).history["train"]["loss"][1])
        '(0.585786, 2, 3.41421)'
    """
    runs = list(summaries)
    if not runs:
        raise XaikitValueError("average_summaries needs at least one Summary; got none")
    pooled: dict[tuple[str, str, int], list[float]] = {}
    for s in runs:
        for mode, metrics in s.history.items():
            for metric, steps in metrics.items():
                for step, value in steps.items():
                    number = _as_float(value)
                    if number is not None:
                        pooled.setdefault((mode, metric, step), []).append(number)
    out = Summary(name)
    for (mode, metric, step), values in pooled.items():
        mean = sum(values) / len(values)
        std = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1)) if len(values) > 1 else 0.0
        out.history[mode][metric][step] = ValWithError(mean - std, mean, mean + std)
    return out
