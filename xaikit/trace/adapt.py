"""Traces that steer training: BestModelSaver, LRScheduler, EarlyStopping.

They reach model weights and learning rates through ``xaikit.models`` (``get_lr``, ``set_lr``,
``save_model``, ``load_model``, ``get_weights``, ``set_weights``), so they work for torch and
Keras models alike.
"""

from __future__ import annotations

import inspect
import math
import os
from collections.abc import Callable
from typing import Any

import numpy as np

from xaikit.backend import framework_of
from xaikit.checks import check_int, check_number
from xaikit.errors import XaikitTypeError, XaikitValueError, describe, describe_name
from xaikit.trace.base import Data, Trace

__all__ = ["BestModelSaver", "EarlyStopping", "LRScheduler"]


def _network_api() -> Any:
    """The module holding the model helpers, :mod:`xaikit.models` (a seam for tests)."""
    import xaikit.models

    return xaikit.models


_WEIGHT_SUFFIX = {"torch": ".pt", "tf": ".weights.h5"}  # Keras weight files must end in .weights.h5


def _model_name(model: Any) -> str:
    return str(getattr(model, "model_name", None) or type(model).__name__)


def _check_compare(name: str, value: Any) -> str:
    if not isinstance(value, str) or value not in ("min", "max"):
        raise XaikitValueError(f"{name} must be 'min' or 'max'; got {describe_name(value)}")
    return str(value)


def _scalar(owner: str, key: str, data: Data) -> float:
    if key not in data:
        raise XaikitValueError(
            f"{owner}: key {key!r} is not in the data at the end of the epoch; "
            f"available keys: {sorted(data.keys())}"
        )
    value = data[key]
    arr = np.asarray(value) if isinstance(value, (np.ndarray, float, int, np.generic)) else None
    if arr is None:
        from xaikit.backend import to_number

        arr = np.asarray(to_number(value))
    if arr.size != 1 or arr.dtype.kind not in "biuf":
        raise XaikitValueError(f"{owner}: key {key!r} must hold one number; got {describe(value)}")
    return float(arr.reshape(()))


def _resolve_loss(owner: str, system: Any, requested: str | None) -> str:
    """``requested`` itself, or the network's only loss key when ``requested`` is None."""
    if requested is not None:
        return requested
    keys = sorted(system.network.get_loss_keys()) if system.network is not None else []
    if len(keys) != 1:
        raise XaikitValueError(
            f"{owner}: metric/monitor is None, which means the network's loss, but the network has "
            f"{len(keys)} loss keys {keys}; name the key to watch"
        )
    return keys[0]


def _improved(value: float, best: float | None, compare: str, min_delta: float = 0.0) -> bool:
    if math.isnan(value):
        return False
    if best is None:
        return True
    return value < best - min_delta if compare == "min" else value > best + min_delta


class BestModelSaver(Trace):
    """Save a model's weights whenever an evaluation metric reaches its best value so far.

    Logs ``since_best_<metric>`` (epochs since the last improvement) and ``<metric>_<mode>``
    (the best value) each evaluation epoch.

    Args:
        model: The model to save (built with ``xk.build``).
        save_dir: Folder for the weight file ``<model_name>_best_<metric>.pt`` (torch) or
            ``.weights.h5`` (Keras), created when missing.
        metric: Key to watch at the end of each evaluation epoch; ``None`` uses the network's
            loss (when it has exactly one).
        save_best_mode: ``"min"`` or ``"max"``: which direction is better.
        load_best_final: Put the best weights back into the model when training ends.

    Attributes:
        best: The best value so far (None before the first evaluation).
        best_epoch: The epoch that reached it.
        model_path: Where the best weights are.
    """

    def __init__(
        self,
        model: Any,
        save_dir: str | os.PathLike[str],
        metric: str | None = None,
        save_best_mode: str = "min",
        load_best_final: bool = False,
    ) -> None:
        if not isinstance(save_dir, (str, os.PathLike)):
            raise XaikitTypeError(f"save_dir must be a folder path; got {describe(save_dir)}")
        if metric is not None and (not isinstance(metric, str) or not metric):
            raise XaikitTypeError(f"metric must be None or a key name; got {describe(metric)}")
        mode = _check_compare("save_best_mode", save_best_mode)
        super().__init__(
            inputs=metric,
            outputs=[f"since_best_{metric}", f"{metric}_{mode}"] if metric else None,
            mode="eval",
        )
        self.model = model
        self.save_dir = os.fspath(save_dir)
        self.metric = metric
        self.save_best_mode = mode
        self.load_best_final = bool(load_best_final)
        self.monitor_names = {metric} if metric else set()
        self.best: float | None = None
        self.best_epoch: int | None = None
        self.since_best = 0
        self.model_path: str | None = None

    def on_begin(self, data: Data) -> None:
        self.metric = _resolve_loss("BestModelSaver", self.system, self.metric)
        self.inputs = [self.metric]
        self.outputs = [f"since_best_{self.metric}", f"{self.metric}_{self.save_best_mode}"]
        self.best, self.best_epoch, self.since_best, self.model_path = None, None, 0, None

    def on_epoch_end(self, data: Data) -> None:
        metric = str(self.metric)
        value = _scalar("BestModelSaver", metric, data)
        if _improved(value, self.best, self.save_best_mode):
            self.best, self.best_epoch, self.since_best = value, self.system.epoch_idx, 0
            os.makedirs(self.save_dir, exist_ok=True)
            base = os.path.join(self.save_dir, f"{_model_name(self.model)}_best_{metric}")
            base += _WEIGHT_SUFFIX.get(framework_of(self.model) or "", "")
            self.model_path = str(_network_api().save_model(self.model, base))
            if self.system.log_steps is not None:
                print(f"xaikit-BestModelSaver: saved model to {self.model_path}")
        else:
            self.since_best += 1
        data.write_with_log(f"since_best_{metric}", self.since_best)
        data.write_with_log(f"{metric}_{self.save_best_mode}", self.best)

    def on_end(self, data: Data) -> None:
        if self.load_best_final and self.model_path is not None:
            _network_api().load_model(self.model, self.model_path)
            if self.system.log_steps is not None:
                print(
                    f"xaikit-BestModelSaver: restored model from {self.model_path} (epoch {self.best_epoch})"
                )


class LRScheduler(Trace):
    """Set a model's learning rate from a function of the epoch or of the step.

    Logs ``<model_name>_lr`` on the training log lines.

    Args:
        model: The model whose optimizer to drive (built with ``xk.build``).
        lr_fn: ``lr_fn(epoch)`` (called at the start of each training epoch, epochs from 1) or
            ``lr_fn(step)`` (called before each training step, steps from 1); the parameter's
            name, ``epoch`` or ``step``, says which.

    Example:
        >>> t = LRScheduler(model=None, lr_fn=lambda epoch: 0.1 * 0.5 ** (epoch - 1))
        >>> t.schedule_on
        'epoch'
    """

    def __init__(self, model: Any, lr_fn: Callable[[int], float]) -> None:
        if not callable(lr_fn):
            raise XaikitTypeError(
                f"lr_fn must be a function lr_fn(epoch) or lr_fn(step); got {describe(lr_fn)}"
            )
        try:
            params = list(inspect.signature(lr_fn).parameters)
        except (TypeError, ValueError):
            params = []
        if len(params) != 1 or params[0] not in ("epoch", "step"):
            raise XaikitValueError(
                f"lr_fn must take one parameter named 'epoch' or 'step' (which one says when it is called); "
                f"got parameters {params}"
            )
        self.model_name = _model_name(model)
        super().__init__(outputs=f"{self.model_name}_lr", mode="train")
        self.model = model
        self.lr_fn = lr_fn
        self.schedule_on = params[0]

    def _set(self, index: int) -> None:
        lr = self.lr_fn(index)
        lr = check_number(lr, f"lr_fn({self.schedule_on}={index}) (its return value)", low=0)
        _network_api().set_lr(self.model, float(lr))

    def on_epoch_begin(self, data: Data) -> None:
        if self.schedule_on == "epoch":
            self._set(self.system.epoch_idx)

    def on_batch_begin(self, data: Data) -> None:
        if self.schedule_on == "step":
            self._set(self.system.global_step)

    def on_batch_end(self, data: Data) -> None:
        s = self.system
        if s.log_steps and (s.global_step % s.log_steps == 0 or s.global_step == 1):
            data.write_with_log(self.outputs[0], float(_network_api().get_lr(self.model)))


class EarlyStopping(Trace):
    """Stop training when a monitored value stops improving.

    Args:
        monitor: Key to watch at the end of each evaluation epoch. The default ``"loss"`` means
            the network's loss: when the data has no ``"loss"`` key the network's only loss key
            is used.
        min_delta: The smallest change that counts as an improvement.
        patience: Stop after this many evaluation epochs in a row without improvement (like
            Keras; 0 and 1 both stop at the first epoch that does not improve).
        compare: ``"min"`` or ``"max"``: which direction is better.
        baseline: A value to beat; epochs that do not beat it count as not improving.
        restore_best_weights: When stopping, put back the weights of every network model from
            the best epoch (kept in memory).

    Attributes:
        best: The best value so far; ``best_epoch`` the epoch that reached it; ``stopped_epoch``
            the epoch that triggered the stop (None when it did not).
    """

    def __init__(
        self,
        monitor: str = "loss",
        min_delta: float = 0.0,
        patience: int = 0,
        compare: str = "min",
        baseline: float | None = None,
        restore_best_weights: bool = False,
    ) -> None:
        if not isinstance(monitor, str) or not monitor:
            raise XaikitTypeError(f"monitor must be a key name; got {describe(monitor)}")
        check_int(patience, "patience", 0)
        check_number(min_delta, "min_delta", low=0)
        super().__init__(inputs=monitor, mode="eval")
        self.monitor = monitor
        self.min_delta = float(min_delta)
        self.patience = patience
        self.compare = _check_compare("compare", compare)
        self.baseline = None if baseline is None else float(baseline)
        self.restore_best_weights = bool(restore_best_weights)
        self.monitor_names = {monitor}
        self._reset()

    def _reset(self) -> None:
        self.best: float | None = self.baseline
        self.best_epoch: int | None = None
        self.wait = 0
        self.stopped_epoch: int | None = None
        self.best_weights: list[Any] | None = None

    def on_begin(self, data: Data) -> None:
        self._reset()
        network = self.system.network
        if self.monitor == "loss" and network is not None and "loss" not in network.get_loss_keys():
            self.monitor = _resolve_loss("EarlyStopping", self.system, None)
            self.inputs = [self.monitor]

    def on_epoch_end(self, data: Data) -> None:
        value = _scalar("EarlyStopping", self.monitor, data)
        if _improved(value, self.best, self.compare, self.min_delta):
            self.best, self.best_epoch, self.wait = value, self.system.epoch_idx, 0
            if self.restore_best_weights:
                api = _network_api()
                self.best_weights = [api.get_weights(m) for m in self.system.network.models]
            return
        self.wait += 1
        if self.wait >= max(self.patience, 1):
            self.stopped_epoch = self.system.epoch_idx
            self.system.stop_training = True
            if self.restore_best_weights and self.best_weights is not None:
                api = _network_api()
                for model, weights in zip(self.system.network.models, self.best_weights):
                    api.set_weights(model, weights)
            if self.system.log_steps is not None:
                print(
                    f"xaikit-EarlyStopping: {self.monitor!r} did not improve for {self.wait} epoch(s); "
                    f"best {self.best} at epoch {self.best_epoch}; stopping"
                )

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state["best_weights"] = None  # in-memory copies of weights are not part of a checkpoint
        return state
