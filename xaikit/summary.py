"""Run history: :class:`Summary` (values by mode, key and step) and :class:`ValWithError`.

Minimal version written by the training-loop side so that ``System.summary`` has a home; the
plotting side may extend it (keep ``Summary(name).history`` and ``ValWithError(low, mid, high)``).

Example:
    >>> s = Summary("run1")
    >>> s.history["eval"]["accuracy"][100] = 0.9
    >>> dict(s.history["eval"]["accuracy"])
    {100: 0.9}
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, NamedTuple

__all__ = ["Summary", "ValWithError"]


class ValWithError(NamedTuple):
    """A value with a lower and an upper bound (for example mean ± std).

    Example:
        >>> ValWithError(0.1, 0.2, 0.3).mid
        0.2
    """

    low: float
    mid: float
    high: float

    def __str__(self) -> str:
        return f"({self.low:.4g}, {self.mid:.4g}, {self.high:.4g})"


def _key_dict() -> defaultdict[str, dict[int, Any]]:
    return defaultdict(dict)


class Summary:
    """The history of one run: ``history[mode][key][step] = value``.

    Args:
        name: The run's name (used as a label in plots); ``None`` for an unnamed run.
    """

    def __init__(self, name: str | None = None) -> None:
        self.name = name
        self.history: defaultdict[str, defaultdict[str, dict[int, Any]]] = defaultdict(_key_dict)

    def merge(self, other: Summary) -> None:
        """Copy every value of ``other`` into this summary (``other`` wins on clashes)."""
        for mode, keys in other.history.items():
            for key, steps in keys.items():
                self.history[mode][key].update(steps)

    def __repr__(self) -> str:
        return f"Summary(name={self.name!r}, modes={sorted(self.history)})"
