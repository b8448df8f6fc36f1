"""``LabelTracker`` and ``InstanceTracker``: how a per-sample metric evolves over training, by
class label or by sample index. Both produce a list of :class:`~xaikit.summary.Summary` (one per
label / kept instance) at the end of training, drawn by :func:`xaikit.viz.plot_history` (through
``ImageSaver``, ``ImageViewer`` or ``TensorBoard``).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from xaikit.backend import to_number
from xaikit.checks import check_int
from xaikit.errors import XaikitTypeError, XaikitValueError, XaikitWarning, describe
from xaikit.summary import Summary, ValWithError
from xaikit.trace.base import Data, Trace
from xaikit.trace.xai.saliency import invert_mapping

__all__ = ["InstanceTracker", "LabelTracker"]

_BOUNDS = (None, "std", "range")


def _per_sample(value: Any, key: str) -> np.ndarray:
    arr = to_number(value)
    if arr.ndim == 0:
        raise XaikitValueError(
            f"{key!r} must hold one value per sample (e.g. CrossEntropy(average_loss=False)); got a scalar"
        )
    if arr.ndim > 1:
        if int(np.prod(arr.shape[1:])) != 1:
            raise XaikitValueError(f"{key!r} must hold one value per sample; got {describe(arr)}")
        arr = arr.reshape(arr.shape[0])
    return arr


def _key_of(value: Any) -> Any:
    """A hashable, printable Python scalar for a label or index value."""
    item = value.item() if isinstance(value, np.generic) else value
    if isinstance(item, float) and item.is_integer():
        return int(item)
    if isinstance(item, bytes):
        return item.decode()
    return item


def _pair(data: Data, a: str, b: str) -> tuple[np.ndarray, np.ndarray]:
    for key in (a, b):
        if key not in data:
            raise XaikitValueError(f"key {key!r} is not in the data; it has {sorted(map(str, data))}")
    x, y = _per_sample(data[a], a), _per_sample(data[b], b)
    if x.shape[0] != y.shape[0]:
        raise XaikitValueError(f"{a!r} has {x.shape[0]} samples but {b!r} has {y.shape[0]}; they must match")
    return x, y


class _MetricByKey(Trace):
    """A trace that reads a per-sample metric next to a grouping key (``inputs=[key, metric]``)
    and writes under ``outputs``, by default ``"<metric>_by_<key>"``; ``name`` is the argument
    that holds ``key``, for the error message."""

    def __init__(
        self,
        name: str,
        key: Any,
        metric: Any,
        mode: str | Iterable[str] | None,
        ds_id: str | Iterable[str] | None,
        outputs: Any,
    ) -> None:
        for arg, value in ((name, key), ("metric", metric)):
            if not isinstance(value, str) or not value:
                raise XaikitTypeError(f"{arg} must be a non-empty key (str); got {describe(value)}")
        if outputs is not None and (not isinstance(outputs, str) or not outputs):
            raise XaikitTypeError(f"outputs must be a non-empty string or None; got {describe(outputs)}")
        super().__init__(
            inputs=[key, metric], outputs=outputs or f"{metric}_by_{key}", mode=mode, ds_id=ds_id
        )


class LabelTracker(_MetricByKey):
    """Track a per-sample metric (e.g. per-sample loss) grouped by label, epoch by epoch.

    At each epoch end the metric's values of every label are summarized (mean with a band) at
    the current global step; at the end of training the list of summaries (one per label,
    named by ``label_mapping`` when given) is written under ``outputs`` and kept in
    :attr:`summaries`.

    Memory is bounded by the number of labels: batches are folded into running counts, sums,
    minima and maxima, never stored.

    Args:
        label: the key holding each sample's label (class index, or any grouping value).
        metric: the key holding the per-sample metric.
        label_mapping: ``{name: value}``: show names; labels not in it are not tracked.
        bounds: ``"std"`` (mean ± sample standard deviation), ``"range"`` (min, mean, max),
            ``None`` (the mean alone), or several of them (each becomes its own metric line).
        mode: modes to run in.
        ds_id: dataset ids to run on.
        outputs: the output key (default ``"<metric>_by_<label>"``).

    Attributes:
        summaries: the list written at the end (empty before).

    Example:
        >>> t = LabelTracker(label="y", metric="sample_ce", bounds=["std", None])
        >>> t.outputs, t.bounds
        (['sample_ce_by_y'], ['std', None])
    """

    def __init__(
        self,
        label: str,
        metric: str,
        label_mapping: Mapping[str, Any] | None = None,
        bounds: str | Iterable[str | None] | None = "std",
        mode: str | Iterable[str] | None = "eval",
        ds_id: str | Iterable[str] | None = None,
        outputs: str | None = None,
    ) -> None:
        super().__init__("label", label, metric, mode, ds_id, outputs)
        if bounds is None or isinstance(bounds, str):
            items: list[Any] = [bounds]
        elif isinstance(bounds, Iterable):
            items = list(bounds)
        else:
            raise XaikitTypeError(
                f"bounds must be None, 'std', 'range' or a list of them; got {describe(bounds)}"
            )
        bad = [b for b in items if b not in _BOUNDS]
        if bad or not items:
            raise XaikitValueError(f"bounds must be None, 'std', 'range' or a list of them; got {bounds!r}")
        self.bounds: list[str | None] = list(dict.fromkeys(items))
        self.label_key = label
        self.metric_key = metric
        self._inverse = invert_mapping(label_mapping)
        # per-epoch running statistics {label: [n, mean, M2, min, max]}
        self._stats: dict[Any, list[float]] = {}
        # {label: Summary}, in first-seen order
        self._summaries: dict[Any, Summary] = {}
        self.summaries: list[Summary] = []

    def metric_name(self, bound: str | None) -> str:
        """The history key of a bound: ``"<metric> (mean ± std)"``, ``"<metric> (min, mean, max)"``
        or ``"<metric>"``."""
        if bound == "std":
            return f"{self.metric_key} (mean ± std)"
        if bound == "range":
            return f"{self.metric_key} (min, mean, max)"
        return self.metric_key

    def on_epoch_begin(self, data: Data) -> None:
        self._stats = {}

    def on_batch_end(self, data: Data) -> None:
        labels, values = _pair(data, self.label_key, self.metric_key)
        values = values.astype(np.float64)
        for lab in np.unique(labels):
            key = _key_of(lab)
            if self._inverse and key not in self._inverse:
                continue
            v = values[labels == lab]
            n_b, mean_b = float(v.size), float(v.mean())
            m2_b = float(((v - mean_b) ** 2).sum())
            st = self._stats.get(key)
            if st is None:
                self._stats[key] = [n_b, mean_b, m2_b, float(v.min()), float(v.max())]
                continue
            n_a, mean_a, m2_a = st[0], st[1], st[2]
            n = n_a + n_b
            delta = mean_b - mean_a
            st[0] = n
            st[1] = mean_a + delta * n_b / n
            st[2] = m2_a + m2_b + delta * delta * n_a * n_b / n
            st[3] = min(st[3], float(v.min()))
            st[4] = max(st[4], float(v.max()))

    def on_epoch_end(self, data: Data) -> None:
        mode, step = self.system.mode, self.system.global_step
        for key in sorted(self._stats, key=lambda k: (str(type(k)), k)):
            n, mean, m2, low, high = self._stats[key]
            name = self._inverse.get(key, key)
            summary = self._summaries.setdefault(key, Summary(name))
            std = math.sqrt(m2 / (n - 1)) if n > 1 else 0.0
            for bound in self.bounds:
                if bound == "std":
                    value: Any = ValWithError(mean - std, mean, mean + std)
                elif bound == "range":
                    value = ValWithError(low, mean, high)
                else:
                    value = mean
                summary.write(mode, self.metric_name(bound), step, value)
        self._stats = {}

    def on_end(self, data: Data) -> None:
        if self._inverse:
            order = {v: i for i, v in enumerate(self._inverse)}
            keys = sorted(self._summaries, key=lambda k: order.get(k, len(order)))
        else:
            keys = sorted(self._summaries, key=lambda k: (str(type(k)), k))
        self.summaries = [self._summaries[k] for k in keys]
        data.write_without_log(self.outputs[0], list(self.summaries))


def _check_count(name: str, value: Any, minimum: int) -> int:
    return int(check_int(value, name, minimum, kind=XaikitTypeError))


class InstanceTracker(_MetricByKey):
    """Track a per-sample metric of individual samples (by an index key) over training.

    Every ``epoch_frequency``-th epoch, the last value of each index in the epoch is recorded at
    the current global step. At the end of training the ``n_max_to_keep`` indices with the
    highest final value, the ``n_min_to_keep`` with the lowest and every index of
    ``list_to_keep`` become one :class:`~xaikit.summary.Summary` each (named by the index),
    written under ``outputs`` and kept in :attr:`summaries`.

    Memory: with ``n_max_to_keep = n_min_to_keep = 0`` only the indices of ``list_to_keep`` are
    ever stored (memory grows with that list, not with the dataset); otherwise every index's
    history is kept until the end, since the final ranking needs them all.

    Args:
        index: the key holding each sample's index (e.g. an ``"index"`` column of the dataset).
        metric: the key holding the per-sample metric.
        n_max_to_keep: how many of the highest-scoring samples (by final value) to draw.
        n_min_to_keep: how many of the lowest-scoring samples to draw.
        list_to_keep: indices to draw in any case.
        epoch_frequency: record only every this-many epochs (epochs 1..E with
            ``epoch % epoch_frequency == 0``) to save memory.
        mode: modes to run in.
        ds_id: dataset ids to run on.
        outputs: the output key (default ``"<metric>_by_<index>"``).

    Attributes:
        summaries: the list written at the end: highest first, then lowest (lowest first), then
            ``list_to_keep`` in its order; each index once.

    Example:
        >>> InstanceTracker(index="idx", metric="ce", list_to_keep=[3, 7]).outputs
        ['ce_by_idx']
    """

    def __init__(
        self,
        index: str,
        metric: str,
        n_max_to_keep: int = 5,
        n_min_to_keep: int = 5,
        list_to_keep: Iterable[Any] | None = None,
        epoch_frequency: int = 1,
        mode: str | Iterable[str] | None = "eval",
        ds_id: str | Iterable[str] | None = None,
        outputs: str | None = None,
    ) -> None:
        super().__init__("index", index, metric, mode, ds_id, outputs)
        self.n_max_to_keep = _check_count("n_max_to_keep", n_max_to_keep, 0)
        self.n_min_to_keep = _check_count("n_min_to_keep", n_min_to_keep, 0)
        self.epoch_frequency = _check_count("epoch_frequency", epoch_frequency, 1)
        if list_to_keep is None:
            keep: list[Any] = []
        elif isinstance(list_to_keep, (str, bytes, Mapping)) or not isinstance(list_to_keep, Iterable):
            raise XaikitTypeError(
                f"list_to_keep must be an iterable of indices or None; got {describe(list_to_keep)}"
            )
        else:
            given = list(list_to_keep)
            keep = [_key_of(v) for v in to_number(given).reshape(-1)] if given else []
        self.list_to_keep: list[Any] = list(dict.fromkeys(keep))
        self._keep_set = set(self.list_to_keep)
        self.index_key = index
        self.metric_key = metric
        self._epoch: dict[Any, float] = {}  # this epoch: {idx: last value}
        self.index_history: dict[str, dict[Any, list[tuple[int, float]]]] = {}  # {mode: {idx: [(step, v)]}}
        self.summaries: list[Summary] = []
        self._modes_seen: set[str] = set()  # modes with a tracked batch (for the unseen-index warning)

    @property
    def only_listed(self) -> bool:
        """Whether only ``list_to_keep`` is asked for (then nothing else is stored)."""
        return self.n_max_to_keep == 0 and self.n_min_to_keep == 0

    def _active(self) -> bool:
        return self.system.epoch_idx % self.epoch_frequency == 0

    def on_epoch_begin(self, data: Data) -> None:
        self._epoch = {}

    def on_batch_end(self, data: Data) -> None:
        if not self._active():
            return
        idx, values = _pair(data, self.index_key, self.metric_key)
        self._modes_seen.add(self.system.mode)
        listed = self.only_listed
        for i, v in zip(idx.tolist(), values.astype(np.float64).tolist()):
            key = _key_of(i)
            if listed and key not in self._keep_set:
                continue
            self._epoch[key] = v

    def on_epoch_end(self, data: Data) -> None:
        if self._active() and self._epoch:
            history = self.index_history.setdefault(self.system.mode, {})
            step = self.system.global_step
            for key, v in self._epoch.items():
                history.setdefault(key, []).append((step, v))
        self._epoch = {}

    def on_end(self, data: Data) -> None:
        chosen: dict[Any, None] = {}
        for history in self.index_history.values():
            final = sorted(history, key=lambda k: history[k][-1][1])
            top = final[::-1][: self.n_max_to_keep]
            bottom = final[: self.n_min_to_keep]
            for key in [*top, *bottom]:
                chosen[key] = None
        for key in self.list_to_keep:
            chosen[key] = None
        out = []
        for key in chosen:
            summary = Summary(key)
            for mode, history in self.index_history.items():
                for step, v in history.get(key, []):
                    summary.write(mode, self.metric_key, step, v)
            if summary.modes():
                out.append(summary)
        unseen = [key for key in self.list_to_keep if not any(key in h for h in self.index_history.values())]
        if unseen and getattr(self, "_modes_seen", None):  # (a tracker pickled before it had none)
            warnings.warn(
                f"InstanceTracker: list_to_keep {unseen} never appeared under the index key "
                f"{self.index_key!r} (modes {sorted(self._modes_seen)}): nothing is drawn for "
                f"{'it' if len(unseen) == 1 else 'them'}; the indices are the values of that key, "
                "not positions",
                XaikitWarning,
                stacklevel=2,
            )
        self.summaries = out
        data.write_without_log(self.outputs[0], list(out))
