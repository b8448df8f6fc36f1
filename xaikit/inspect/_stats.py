"""Statistics collection of the module tracker: reduce on the device, copy to the host once a step."""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from typing import Any

from xaikit.backend.inspector import DEAD_UNITS, DEFAULT_STATS
from xaikit.errors import XaikitTypeError, describe
from xaikit.inspect._record import Pending, StatFn, check_kinds

__all__ = ["StatCollector", "derive"]


class StatCollector:
    """The statistics of one step, kept on the device until :meth:`collect`.

    Each recorded tensor becomes a :class:`Pending` record whose statistics are a slice of one
    of the step's device parts (1-D tensors). :meth:`collect` copies every part to the host in
    one :meth:`Inspector.to_host` call and turns the records into rows. A tensor measured as one
    module's output and passed on as the next module's input is reduced only once per step.

    Args:
        insp: the framework inspector of the tracked model (``xaikit.backend.inspector``).
    """

    def __init__(self, insp: Any) -> None:
        self.insp = insp
        #: custom statistic functions per kind (replacing the defaults of that kind)
        self.stat_fns: dict[str, StatFn] = {}
        self.pending: list[Pending] = []
        self._parts: list[Any] = []
        self._sizes: list[int] = []
        # id(tensor) -> (weak reference, in-place version, part index)
        self._seen: dict[int, tuple[Any, int, int]] = {}

    @staticmethod
    def check_stat(kind: Any, fn: Any, arg: str) -> None:
        """Check that ``kind`` is a kind and ``fn`` a function or None (``arg`` names the argument)."""
        check_kinds([kind], arg)
        if fn is not None and not callable(fn):
            raise XaikitTypeError(f"{arg}[{kind!r}] must be a function tensor -> dict; got {describe(fn)}")

    def set_stat(self, kind: Any, fn: Any, arg: str) -> None:
        """Use ``fn`` as the statistics of ``kind`` (None restores the defaults)."""
        self.check_stat(kind, fn, arg)
        if fn is None:
            self.stat_fns.pop(kind, None)
        else:
            self.stat_fns[kind] = fn

    def stat_names(self, kinds: tuple[str, ...]) -> dict[str, str]:
        """The name of each kind's statistic function (``"default"`` for the built-in ones)."""
        return {k: getattr(self.stat_fns.get(k), "__name__", "default") for k in kinds}

    def record(self, meta: dict[str, Any], t: Any) -> None:
        """Queue the statistics of tensor ``t`` for a row with the leading columns ``meta``."""
        kind = meta["kind"]
        pending = Pending(meta)
        fn = self.stat_fns.get(kind)
        if fn is None:
            activation = kind in ("input", "output")
            part = self._cached(t) if activation else None
            if part is None:
                part = self._add_part(self.insp.default_stats(t, activation), 7 if activation else 6)
                if activation:
                    self._remember(t, part)
            keys = [*DEFAULT_STATS, DEAD_UNITS] if activation else list(DEFAULT_STATS)
            pending.fields = [(key, part, i, ()) for i, key in enumerate(keys)]
        else:
            result = fn(t)
            if not isinstance(result, Mapping):
                raise XaikitTypeError(
                    f"the {kind!r} statistic function {getattr(fn, '__name__', fn)!r} must return a dict "
                    f"of name -> number or tensor; got {describe(result)}"
                )
            for key, value in result.items():
                if isinstance(value, (bool, int, float, str)) or value is None:
                    pending.host[str(key)] = value
                    continue
                vshape = getattr(value, "shape", None)
                dims = tuple(int(d) for d in vshape) if vshape is not None else (len(value),)
                size = 1
                for d in dims:
                    size *= d
                part = self._add_part(self.insp.flat(value), size)
                pending.fields.append((str(key), part, 0, dims))
        self.pending.append(pending)

    def record_row(self, row: dict[str, Any]) -> None:
        """Queue a row that has no statistics (e.g. an absent gradient)."""
        self.pending.append(Pending(row))

    def collect(self) -> list[dict[str, Any]]:
        """Copy the step's statistics to the host (one transfer) and return the queued rows.

        Each row has its leading columns, then its statistics (see :func:`derive`); the queue is
        empty afterwards.
        """
        if not self.pending:
            return []
        host = self.insp.to_host(self._parts)
        starts = [0]
        for size in self._sizes:
            starts.append(starts[-1] + size)
        rows = []
        for pending in self.pending:
            row = dict(pending.meta)
            for key, part, first, shape in pending.fields:
                at = starts[part] + first
                if shape == ():
                    row[key] = float(host[at])
                else:
                    size = starts[part + 1] - starts[part]
                    row[key] = host[at : at + size].reshape(shape).tolist()
            row.update(pending.host)
            derive(row)
            rows.append(row)
        self.pending, self._parts, self._sizes = [], [], []
        self._seen = {}
        return rows

    def _add_part(self, part: Any, size: int) -> int:
        self._parts.append(part)
        self._sizes.append(size)
        return len(self._parts) - 1

    def _cached(self, t: Any) -> int | None:
        entry = self._seen.get(id(t))
        if entry is None:
            return None
        ref, version, part = entry
        if ref() is not t or version != self.insp.version(t):
            return None
        return part

    def _remember(self, t: Any, part: int) -> None:
        try:
            ref = weakref.ref(t)
        except TypeError:
            return
        self._seen[id(t)] = (ref, self.insp.version(t), part)


def derive(row: dict[str, Any]) -> None:
    """Statistics computed from others, in place: ``nonfinite`` as an int, ``norm`` of weights
    and grads from their mean, std and size (``sqrt(n * (std**2 + mean**2))``).

    Example:
        >>> row = {"kind": "weight", "shape": [4], "mean": 0.0, "std": 1.0, "nonfinite": 0.0}
        >>> derive(row)
        >>> row["norm"], row["nonfinite"]
        (2.0, 0)
    """
    if isinstance(row.get("nonfinite"), float):
        row["nonfinite"] = int(row["nonfinite"])
    if row["kind"] in ("weight", "grad") and isinstance(row.get("mean"), float):
        n = 1
        for d in row["shape"]:
            n *= d
        mean, std = row["mean"], row["std"]
        row["norm"] = (n * (std * std + mean * mean)) ** 0.5
