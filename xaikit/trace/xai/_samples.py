"""``SampleCollector``: the fixed set of samples an explanation trace looks at every time it runs.

Traces that explain or evaluate a model on a few samples (``Saliency``, the evaluation traces)
want the *same* samples at every epoch, so that the pictures or scores can be compared over
training. The collector implements the three ways of choosing them (the reference ``Saliency``
trace's ``samples`` argument):

* ``None``: the first batch seen in a mode;
* an ``int`` ``n``: the first ``n`` samples, gathered over as many batches as needed;
* a ``dict`` ``{key: array}``: exactly these samples (nothing is collected).

Samples are gathered per mode (``"eval"`` and ``"test"`` each get their own). After the first
epoch of a mode ends (:meth:`SampleCollector.finish`) its set is frozen. Only the requested keys
are copied (as numpy arrays), so memory is bounded by the samples kept, never by the dataset.

Example:
    >>> import numpy as np
    >>> c = SampleCollector(3, keys=["x", "y"])
    >>> for start in (0, 2, 4):
    ...     c.collect("eval", {"x": np.arange(start, start + 2), "y": np.zeros(2)})
    >>> c.finish("eval")["x"].tolist()
    [0, 1, 2]
    >>> c.collect("eval", {"x": np.array([9, 9]), "y": np.zeros(2)})  # frozen: ignored
    >>> c.get("eval")["x"].tolist()
    [0, 1, 2]
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from xaikit.backend import to_number
from xaikit.errors import XaikitTypeError, XaikitValueError, describe

__all__ = ["SampleCollector", "check_samples"]


def check_samples(samples: Any, name: str = "samples") -> int | dict[str, np.ndarray] | None:
    """Validate a ``samples`` argument; dict values become numpy arrays of one batch size.

    Raises:
        XaikitTypeError: ``samples`` is not None, an int or a dict of arrays.
        XaikitValueError: a non-positive int, an empty dict, or arrays of different batch sizes.
    """
    if samples is None:
        return None
    if isinstance(samples, bool):
        raise XaikitTypeError(
            f"{name} must be None, an int >= 1 or a dict of arrays; got {describe(samples)}"
        )
    if isinstance(samples, (int, np.integer)):
        if samples < 1:
            raise XaikitValueError(f"{name} must be >= 1 when it is an int; got {int(samples)}")
        return int(samples)
    if isinstance(samples, Mapping):
        if not samples:
            raise XaikitValueError(f"{name} must hold at least one key when it is a dict; got an empty dict")
        out: dict[str, np.ndarray] = {}
        sizes: dict[str, int] = {}
        for key, value in samples.items():
            if not isinstance(key, str):
                raise XaikitTypeError(f"{name} keys must be strings; got {describe(key)}")
            arr = to_number(value)
            if arr.ndim == 0:
                raise XaikitValueError(
                    f"{name}[{key!r}] must be a batch (first axis = samples); got {describe(arr)}"
                )
            out[key] = arr
            sizes[key] = int(arr.shape[0])
        if len(set(sizes.values())) > 1:
            raise XaikitValueError(f"every {name} value must have the same batch size; got {sizes}")
        if not next(iter(sizes.values())):
            raise XaikitValueError(f"{name} must hold at least one sample; got batch size 0")
        return out
    raise XaikitTypeError(f"{name} must be None, an int >= 1 or a dict of arrays; got {describe(samples)}")


def _batch_len(value: Any) -> int | None:
    shape = getattr(value, "shape", None)
    if shape is None or len(shape) == 0:
        return None
    return int(shape[0])


class SampleCollector:
    """Collects (once per mode) and keeps the samples an explanation trace works on.

    Args:
        samples: ``None`` (the first batch), an int ``n`` (the first ``n`` samples) or a dict
            ``{key: array}`` of fixed samples.
        keys: the keys to keep from each batch; ``None`` keeps every key whose value is an
            array with the batch's first dimension.

    Call :meth:`collect` from ``on_batch_end`` with the trace's data and :meth:`finish` from
    ``on_epoch_end``; it returns the samples (a dict of numpy arrays) or ``None`` when nothing
    was seen. The object pickles (plain dicts of numpy arrays).
    """

    def __init__(self, samples: Any = None, keys: Iterable[str] | None = None) -> None:
        self.samples = check_samples(samples)
        self.keys = None if keys is None else list(dict.fromkeys(keys))
        if isinstance(self.samples, dict) and self.keys is not None:
            missing = [k for k in self.keys if k not in self.samples]
            if missing:
                raise XaikitValueError(
                    f"samples must hold the key(s) {missing}; the given samples have keys {sorted(self.samples)}"
                )
        self._parts: dict[str, list[dict[str, np.ndarray]]] = {}
        self._count: dict[str, int] = {}
        self._frozen: dict[str, dict[str, np.ndarray]] = {}

    @property
    def fixed(self) -> bool:
        """Whether the samples were given (a dict) rather than collected."""
        return isinstance(self.samples, dict)

    def wants(self, mode: str) -> bool:
        """Whether :meth:`collect` would still keep something in ``mode``."""
        if self.fixed or mode in self._frozen:
            return False
        if self.samples is None:
            return mode not in self._parts
        return self._count.get(mode, 0) < int(self.samples)  # type: ignore[arg-type]

    def collect(self, mode: str, data: Mapping[str, Any]) -> None:
        """Keep what is still needed of this batch (copies, as numpy arrays)."""
        if not self.wants(mode):
            return
        keys = self.keys
        if keys is None:
            first = next((v for v in data.values() if _batch_len(v) is not None), None)
            n = _batch_len(first)
            keys = [k for k, v in data.items() if n is not None and _batch_len(v) == n]
        missing = [k for k in keys if k not in data]
        if missing:
            raise XaikitValueError(
                f"the batch has no key(s) {missing} to collect samples from; it has {sorted(map(str, data))}"
            )
        part = {k: np.array(to_number(data[k])) for k in keys}
        sizes = {k: v.shape[0] if v.ndim else None for k, v in part.items()}
        if len(set(sizes.values())) > 1 or None in sizes.values():
            raise XaikitValueError(f"the collected keys must be batches of one size; got sizes {sizes}")
        n = next(iter(sizes.values()), 0) or 0
        if isinstance(self.samples, int):
            take = min(n, self.samples - self._count.get(mode, 0))
            part = {k: v[:take] for k, v in part.items()}
            n = take
        self._parts.setdefault(mode, []).append(part)
        self._count[mode] = self._count.get(mode, 0) + n

    def finish(self, mode: str) -> dict[str, np.ndarray] | None:
        """Freeze the samples of ``mode`` (at the end of its first epoch) and return them."""
        if self.fixed:
            return dict(self.samples)  # type: ignore[arg-type]
        if mode not in self._frozen:
            parts = self._parts.pop(mode, [])
            self._count.pop(mode, None)
            if not parts:
                return None
            self._frozen[mode] = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
        return dict(self._frozen[mode])

    def get(self, mode: str) -> dict[str, np.ndarray] | None:
        """The frozen samples of ``mode`` (or the given ones), ``None`` before the first finish."""
        if self.fixed:
            return dict(self.samples)  # type: ignore[arg-type]
        found = self._frozen.get(mode)
        return None if found is None else dict(found)

    def reset(self) -> None:
        """Forget every collected sample (given samples stay)."""
        self._parts.clear()
        self._count.clear()
        self._frozen.clear()
