"""Bookkeeping traces the Estimator adds by itself: loss monitoring, timing and the Logger.

Log lines look like::

    xaikit-Start: step: 1; logging_interval: 100; num_device: 1;
    xaikit-Train: step: 100; ce: 0.5123; steps/sec: 41.2;
    xaikit-Train: step: 120; epoch: 1; epoch_time(sec): 3.1;
    xaikit-Eval: step: 120; epoch: 1; accuracy: 0.91; ce: 0.2871; epoch_time(sec): 0.4;
    xaikit-Finish: step: 120; total_time(sec): 4.02; LeNet_lr: 0.001;

Keys are in natural order, then timings, then learning rates. Array values with more than one
element are printed on their own lines after the line (``\\nkey:\\n[...];``).
"""

from __future__ import annotations

import math
import re
import time
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

import numpy as np

from xaikit.summary import ValWithError
from xaikit.trace.base import Data, DSData, Trace

__all__ = ["EvalEssential", "Logger", "TestEssential", "TrainEssential", "format_value", "log_line"]

PREFIX = "xaikit-"
_TIMING_KEYS = ("steps/sec", "epoch_time(sec)", "total_time(sec)")


def _as_array(value: Any) -> np.ndarray:
    if isinstance(value, np.ndarray):
        return value
    if hasattr(value, "numpy") or hasattr(value, "detach"):
        from xaikit.backend import to_number

        return np.asarray(to_number(value))
    return np.asarray(value)


def _fmt_float(x: float) -> str:
    if not math.isfinite(x):
        return str(x)
    if x == 0:
        return "0.0"
    if abs(x) >= 1e-3:
        text = f"{x:.4f}".rstrip("0")
        return text + "0" if text.endswith(".") else text
    return f"{x:.4g}"


def format_value(value: Any) -> tuple[str, str | None]:
    """How a logged value is printed: (inline text, block text for arrays of several values or None).

    Example:
        >>> format_value(2.302585093)
        ('2.3026', None)
        >>> format_value(3)
        ('3', None)
        >>> format_value(np.array([0.5, 0.25]))[1]
        '[0.5 ,0.25]'
    """
    if isinstance(value, ValWithError):
        return str(value), None
    if isinstance(value, str):
        return value, None
    if isinstance(value, (bool, np.bool_)):
        return str(bool(value)), None
    if isinstance(value, (int, np.integer)):
        return str(int(value)), None
    if isinstance(value, (float, np.floating)):
        return _fmt_float(float(value)), None
    try:
        arr = _as_array(value)
    except Exception:  # anything numpy cannot read is printed as text
        return str(value), None
    if arr.dtype.kind not in "biuf":
        return str(value), None
    if arr.size == 1:
        return format_value(arr.reshape(()).item())
    with np.printoptions(precision=4, suppress=True, threshold=200, linewidth=100):
        block = np.array2string(arr, separator=",")
    return "", block


def _natural(key: str) -> list[Any]:
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", key.lower())]


def _order(key: str) -> tuple[int, list[Any]]:
    if key in _TIMING_KEYS:
        return 1, [_TIMING_KEYS.index(key)]
    if key.endswith("_time(sec)"):  # a trace's own time (e.g. saliency_time(sec)): after epoch_time
        return 1, [1.5, key]
    if key.endswith("_lr"):
        return 2, _natural(key)
    return 0, _natural(key)


def log_line(header: str, items: Iterable[tuple[str, Any]]) -> str:
    """Build one log message: ``header key: value; ...`` then the array blocks.

    Example:
        >>> log_line("xaikit-Train: step: 5; ", [("steps/sec", 12.3), ("ce", 2.30259)])
        'xaikit-Train: step: 5; ce: 2.3026; steps/sec: 12.3;'
    """
    message = header
    blocks = []
    for key, value in sorted(items, key=lambda kv: _order(kv[0])):
        inline, block = format_value(value)
        if block is None:
            message += f"{key}: {inline}; "
        else:
            blocks.append(f"\n{key}:\n{block};")
    return message.strip() + "".join(blocks)


def _summary_value(value: Any) -> Any:
    if isinstance(value, (str, ValWithError, int, float)):
        return value
    try:
        arr = _as_array(value)
    except Exception:
        return value
    if arr.dtype.kind in "biuf" and arr.size == 1:
        return arr.reshape(()).item()
    return arr


def _emit(message: str) -> None:
    from tqdm import tqdm  # writes around a progress bar when one is shown

    tqdm.write(message)


class Logger(Trace):
    """Prints the Start, Train, Eval, Test and Finish lines and records logged values in the summary.

    Added by the Estimator (do not add it yourself). It reads every key (``inputs="*"``) so it
    runs after all other traces. With ``log_steps=None`` it prints nothing but still records.
    """

    def __init__(self) -> None:
        super().__init__(inputs="*")

    def _log(self, header: str, data: Data, epoch: bool = False) -> None:
        system = self.system
        logs = data.read_logs()
        if epoch:
            header += f"epoch: {system.epoch_idx}; "
            system.write_summary("epoch", system.epoch_idx)
        for key, value in logs.items():
            system.write_summary(key, _summary_value(value))
        if system.log_steps is not None:
            _emit(log_line(header, logs.items()))

    def on_begin(self, data: Data) -> None:
        if self.system.mode != "test":
            self._log(f"{PREFIX}Start: step: {max(self.system.global_step, 1)}; ", data)

    def on_batch_end(self, data: Data) -> None:
        s = self.system
        if s.mode == "train" and s.log_steps and (s.global_step % s.log_steps == 0 or s.global_step == 1):
            self._log(f"{PREFIX}Train: step: {s.global_step}; ", data)

    def on_epoch_end(self, data: Data) -> None:
        name = {"train": "Train", "eval": "Eval", "test": "Test"}.get(self.system.mode)
        if name is not None:
            self._log(f"{PREFIX}{name}: step: {self.system.global_step}; ", data, epoch=True)

    def on_end(self, data: Data) -> None:
        if self.system.mode != "test":
            self._log(f"{PREFIX}Finish: step: {self.system.global_step}; ", data)


class _Averager:
    """Averages monitored keys over an epoch, per dataset id.

    Scalars (one value per batch, e.g. a mean loss) are averaged over batches; arrays with one
    value per sample (e.g. ``average_loss=False``) are averaged over all samples.
    """

    def __init__(self) -> None:
        self.sums: dict[str, dict[str, float]] = defaultdict(dict)
        self.counts: dict[str, dict[str, int]] = defaultdict(dict)

    def add(self, key: str, ds_id: str, value: Any) -> None:
        arr = _as_array(value).astype(np.float64)
        self.sums[key][ds_id] = self.sums[key].get(ds_id, 0.0) + float(arr.sum())
        self.counts[key][ds_id] = self.counts[key].get(ds_id, 0) + max(int(arr.size), 1)

    def write(self, data: Data) -> None:
        for key, per_ds in self.sums.items():
            counts = self.counts[key]
            if len(per_ds) > 1 or "" not in per_ds:
                for ds_id, total in per_ds.items():
                    if ds_id:
                        DSData(ds_id, data).write_with_log(key, total / counts[ds_id])
            data.write_with_log(key, sum(per_ds.values()) / sum(counts.values()))


class TrainEssential(Trace):
    """Logs monitored keys (losses) every ``log_steps`` steps, steps/sec, epoch and total time, lr.

    Added by the Estimator.

    Args:
        monitor_names: Keys to log at logging steps (the network's losses and any extra names).
    """

    _runs_first = True

    def __init__(self, monitor_names: Iterable[str]) -> None:
        super().__init__(
            inputs=sorted(monitor_names),
            mode="train",
            outputs=["steps/sec", "epoch_time(sec)", "total_time(sec)", "num_device", "logging_interval"],
        )
        self.train_start = 0.0
        self.epoch_start = 0.0
        self.last_log_time = 0.0
        self.last_log_step = 0

    def on_begin(self, data: Data) -> None:
        self.train_start = time.perf_counter()
        data.write_with_log("num_device", self.system.num_devices)
        data.write_with_log("logging_interval", self.system.log_steps)

    def on_epoch_begin(self, data: Data) -> None:
        self.epoch_start = time.perf_counter()
        self.last_log_time = self.epoch_start
        self.last_log_step = self.system.global_step

    def on_batch_end(self, data: Data) -> None:
        s = self.system
        if not s.log_steps or not (s.global_step % s.log_steps == 0 or s.global_step == 1):
            return
        target: Data | DSData = DSData(s.ds_id, data) if s.ds_id else data
        for key in self.inputs:
            if key in data:
                value = _as_array(data[key])
                target.write_with_log(key, value.mean() if value.size > 1 else value.reshape(()))
        now = time.perf_counter()
        if s.global_step > 1 and now > self.last_log_time:
            rate = (s.global_step - self.last_log_step) / (now - self.last_log_time)
            data.write_with_log("steps/sec", round(rate, 2))
        self.last_log_time = now
        self.last_log_step = s.global_step

    def on_epoch_end(self, data: Data) -> None:
        data.write_with_log("epoch_time(sec)", round(time.perf_counter() - self.epoch_start, 2))

    def on_end(self, data: Data) -> None:
        data.write_with_log("total_time(sec)", round(time.perf_counter() - self.train_start, 2))
        for model in getattr(self.system.network, "models", None) or []:
            lr = _model_lr(model)
            if lr is not None:
                data.write_with_log(f"{getattr(model, 'model_name', None) or type(model).__name__}_lr", lr)


def _model_lr(model: Any) -> float | None:
    """The model's learning rate through ``xaikit.models.get_lr``; None without an optimizer."""
    if getattr(model, "optimizer", None) is None:
        return None
    from xaikit.models import get_lr

    return float(get_lr(model))


class EvalEssential(Trace):
    """Averages monitored keys (losses) over each evaluation epoch and logs them, with epoch time.

    With several evaluation datasets each gets its own ``key|ds_id`` value beside the overall one.
    Added by the Estimator.
    """

    _runs_first = True

    def __init__(self, monitor_names: Iterable[str], mode: str = "eval") -> None:
        super().__init__(inputs=sorted(monitor_names), mode=mode)
        self.averager = _Averager()
        self.epoch_start = 0.0

    def get_outputs(self, ds_ids: Iterable[str] | None = None) -> list[str]:
        ids = [d for d in ds_ids or [] if d]
        return self.inputs + [f"{k}|{d}" for k in self.inputs for d in ids] + ["epoch_time(sec)"]

    def on_epoch_begin(self, data: Data) -> None:
        self.averager = _Averager()
        self.epoch_start = time.perf_counter()

    def on_batch_end(self, data: Data) -> None:
        for key in self.inputs:
            if key in data:
                self.averager.add(key, self.system.ds_id, data[key])

    def on_epoch_end(self, data: Data) -> None:
        self.averager.write(data)
        if self.mode == {"eval"}:
            data.write_with_log("epoch_time(sec)", round(time.perf_counter() - self.epoch_start, 2))


class TestEssential(EvalEssential):
    """Averages monitored keys over the test epoch and logs them. Added by the Estimator."""

    __test__ = False  # not a pytest test class

    def __init__(self, monitor_names: Iterable[str]) -> None:
        super().__init__(monitor_names, mode="test")
