"""Run xaikit traces in Keras 3 ``model.fit`` through a callback.

Keras callbacks see the training *logs* of each batch (loss, metrics) but not the batch itself.
So :class:`TraceCallback` runs

* training epochs with the logs as the trace data (traces that read ``"loss"`` or a metric work
  in ``"train"`` mode; traces that need images or labels do not);
* an evaluation epoch after each training epoch on the ``validation_data`` given to the callback
  (not to ``fit``): it predicts each batch itself and gives the traces the batch (``x``, ``y``,
  ``index``: the sample's position in ``validation_data``), the prediction (``y_pred``) and the
  per-sample cross-entropy (``sample_ce``). Saliency, LabelTracker, InstanceTracker and the
  metric traces run here, in ``"eval"`` mode.

What the traces log at the end of an evaluation epoch is added to Keras' epoch logs with a
``val_`` prefix (so ``History`` and other callbacks see it); values written at the end of
training (tracker histories, the last ``ImgData``) are in :attr:`TraceCallback.outputs`.

Example:
    >>> from xaikit.integrations.keras import TraceCallback
    >>> cb = TraceCallback([Accuracy(true_key="y", pred_key="y_pred")],
    ...                    validation_data=(x_val, y_val))  # doctest: +SKIP
    >>> model.fit(x, y, epochs=3, callbacks=[cb])  # doctest: +SKIP
    >>> cb.history["val_accuracy"]  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import keras
import numpy as np

from xaikit.checks import check_int
from xaikit.errors import XaikitTypeError, XaikitValueError, describe
from xaikit.integrations.runner import TraceRunner

__all__ = ["TraceCallback"]


def sample_cross_entropy(y_pred: np.ndarray, y: np.ndarray, from_logits: bool = False) -> np.ndarray:
    """Per-sample cross-entropy of class scores ``(B, C)`` against labels ``(B,)`` or one-hot."""
    p = np.asarray(y_pred, dtype=np.float64)
    if from_logits:
        p = p - p.max(axis=-1, keepdims=True)
        logp = p - np.log(np.exp(p).sum(axis=-1, keepdims=True))
    else:
        logp = np.log(np.clip(p, 1e-7, 1.0))
    labels = np.asarray(y)
    if labels.ndim == 2 and labels.shape[1] == p.shape[1] and labels.shape[1] > 1:
        return -(labels * logp).sum(axis=-1)
    labels = labels.reshape(len(p)).astype(np.int64)
    return -logp[np.arange(len(p)), labels]


class TraceCallback(keras.callbacks.Callback):
    """A Keras callback that runs xaikit traces during ``model.fit``.

    Args:
        traces: traces or schedulers of traces.
        validation_data: ``(x, y)`` arrays (or a dict of arrays holding ``x_key`` and
            ``y_key``) for the evaluation epochs; ``None``: training epochs only.
        batch_size: batch size of the evaluation epochs.
        x_key: the name of the model input the traces read.
        y_key: the name of the labels.
        pred_key: the name of the predictions.
        loss_key: the name of the per-sample loss.
        index_key: the name of the sample indices.
        from_logits: whether the model outputs logits (for ``sample_ce``).

    Attributes:
        runner: the underlying :class:`~xaikit.integrations.TraceRunner`.
        history: ``{key: [value per epoch]}`` of the ``val_`` values the traces logged.
        outputs: what the traces wrote at the end of training.
    """

    def __init__(
        self,
        traces: Any,
        validation_data: Any = None,
        batch_size: int = 64,
        x_key: str = "x",
        y_key: str = "y",
        pred_key: str = "y_pred",
        loss_key: str = "sample_ce",
        index_key: str = "index",
        from_logits: bool = False,
    ) -> None:
        super().__init__()
        check_int(batch_size, "batch_size", 1)
        self.runner = TraceRunner(traces)
        self.batch_size = batch_size
        self.keys = {"x": x_key, "y": y_key, "pred": pred_key, "loss": loss_key, "index": index_key}
        self.from_logits = from_logits
        self.validation = self._check_validation(validation_data)
        self.history: dict[str, list[Any]] = {}
        self.outputs: dict[str, Any] = {}

    def _check_validation(self, data: Any) -> dict[str, np.ndarray] | None:
        if data is None:
            return None
        if isinstance(data, Mapping):
            missing = [k for k in (self.keys["x"], self.keys["y"]) if k not in data]
            if missing:
                raise XaikitValueError(f"validation_data has no key(s) {missing}; it has {sorted(data)}")
            arrays = {k: np.asarray(v) for k, v in data.items()}
        elif isinstance(data, (tuple, list)) and len(data) == 2:
            arrays = {self.keys["x"]: np.asarray(data[0]), self.keys["y"]: np.asarray(data[1])}
        else:
            raise XaikitTypeError(f"validation_data must be (x, y) or a dict of arrays; got {describe(data)}")
        sizes = {k: len(v) for k, v in arrays.items()}
        if len(set(sizes.values())) != 1:
            raise XaikitValueError(f"validation_data arrays must have one length; got {sizes}")
        n = next(iter(sizes.values()))
        arrays.setdefault(self.keys["index"], np.arange(n))
        return arrays

    # ---- Keras hooks ------------------------------------------------------------------------------
    def on_train_begin(self, logs: dict[str, Any] | None = None) -> None:
        self.runner.system.total_epochs = int((self.params or {}).get("epochs", 1) or 1)
        self.runner.on_begin()
        self.runner.system.total_epochs = int((self.params or {}).get("epochs", 1) or 1)

    def on_epoch_begin(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        self.runner.on_epoch_begin("train", epoch + 1)

    def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        values = {k: np.asarray(v) for k, v in (logs or {}).items()}
        self.runner.on_batch_end({}, values)

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        self.runner.on_epoch_end()
        if self.validation is None:
            return
        val = self._evaluate(epoch + 1)
        for key, value in val.items():
            arr = np.asarray(value)
            if arr.dtype.kind in "iuf" and arr.size == 1:
                name = f"val_{key}"
                number = float(arr.reshape(()))
                if logs is not None:
                    logs[name] = number
                self.history.setdefault(name, []).append(number)

    def _evaluate(self, epoch: int) -> dict[str, Any]:
        if self.validation is None:
            return {}
        k = self.keys
        self.runner.on_epoch_begin("eval", epoch)
        n = len(self.validation[k["x"]])
        for start in range(0, n, self.batch_size):
            batch = {key: v[start : start + self.batch_size] for key, v in self.validation.items()}
            y_pred = np.asarray(self.model(batch[k["x"]], training=False))
            ce = sample_cross_entropy(y_pred, batch[k["y"]], self.from_logits)
            self.runner.on_batch_end(batch, {k["pred"]: y_pred, k["loss"]: ce.astype(np.float32)})
        return self.runner.on_epoch_end()

    def on_train_end(self, logs: dict[str, Any] | None = None) -> None:
        self.outputs = self.runner.on_end()
