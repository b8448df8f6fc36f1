"""TensorFlow / Keras training facet (``get_backend(model).train``): optimizers, compiled steps,
weights I/O.

Each (mode, set of ops, updates, input keys and dtypes) gets one ``tf.function`` that runs every
op and, in training, applies one optimizer step per ``(model, loss key)`` update inside the
same graph. Its input
signature leaves the batch axis free, so it is traced once and reused for every batch size.
Models are called with ``training=True`` in train mode and ``training=False`` otherwise.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from xaikit.backend.facets import Step, Stepper, TrainFacet, Update, optimizer_factory
from xaikit.errors import XaikitValueError, describe
from xaikit.files import atomic_path

_OPTIMIZERS: dict[str, Callable[[], Any]] = {
    "adam": lambda: tf.keras.optimizers.Adam(learning_rate=1e-3),
    "adamw": lambda: tf.keras.optimizers.AdamW(learning_rate=1e-3),
    "sgd": lambda: tf.keras.optimizers.SGD(learning_rate=0.01),
    "rmsprop": lambda: tf.keras.optimizers.RMSprop(learning_rate=1e-3),
    "adagrad": lambda: tf.keras.optimizers.Adagrad(learning_rate=1e-3),
}


class Train(TrainFacet):
    """The training facet of the TensorFlow backend."""

    def is_model(self, obj: Any) -> bool:
        return isinstance(obj, (tf.keras.Model, tf.Module))

    def make_optimizer(self, model: Any, optimizer_fn: Any) -> Any:
        if optimizer_fn is None:
            return None
        opt = optimizer_factory(optimizer_fn, _OPTIMIZERS)()
        opt.build(model.trainable_variables)
        return opt

    def get_lr(self, model: Any) -> float:
        lr = model.optimizer.learning_rate
        value = lr.numpy() if hasattr(lr, "numpy") else lr
        return float(str(np.float32(value)))  # the float32 value, printed as the user wrote it

    def set_lr(self, model: Any, lr: float) -> None:
        var = model.optimizer.learning_rate
        if not hasattr(var, "assign"):
            raise XaikitValueError(
                f"the optimizer of {getattr(model, 'model_name', 'model')} has a fixed schedule as learning rate"
            )
        var.assign(float(lr))

    def get_weights(self, model: Any) -> list[np.ndarray]:
        return [np.array(w, copy=True) for w in model.get_weights()]

    def set_weights(self, model: Any, weights: Any) -> None:
        model.set_weights(weights)

    def save_model(self, model: Any, path: str) -> str:
        if os.path.isdir(path):
            path = os.path.join(path, f"{getattr(model, 'model_name', 'model')}.weights.h5")
        if not path.endswith(".weights.h5"):
            raise XaikitValueError(f"Keras weight files must end in '.weights.h5'; got path {path!r}")
        with atomic_path(path) as tmp:
            model.save_weights(tmp, overwrite=True)
        return path

    def load_model(self, model: Any, path: str) -> None:
        model.load_weights(path)

    def stepper(self) -> Stepper:
        return TFStepper()


class Functions:
    """Tensor functions that TensorOps use (the same names exist for torch)."""

    name = "tf"

    @staticmethod
    def call_model(model: Any, inputs: Sequence[Any], trainable: bool, training: bool = True) -> Any:
        xs = [x if x.dtype.is_floating else tf.cast(x, tf.float32) for x in inputs]
        out = model(xs[0] if len(xs) == 1 else xs, training=training and trainable)
        return out if trainable else tf.nest.map_structure(tf.stop_gradient, out)

    @staticmethod
    def cross_entropy(y_pred: Any, y_true: Any, from_logits: bool, average: bool) -> Any:
        eps = 1e-7
        if y_pred.shape.rank == 1 or y_pred.shape[-1] == 1:  # binary
            p = tf.reshape(y_pred, [-1])
            t = tf.cast(tf.reshape(y_true, [-1]), p.dtype)
            if from_logits:
                loss = tf.nn.sigmoid_cross_entropy_with_logits(labels=t, logits=p)
            else:
                p = tf.clip_by_value(p, eps, 1 - eps)
                loss = -(t * tf.math.log(p) + (1 - t) * tf.math.log(1 - p))
        else:
            if from_logits:
                logp = tf.nn.log_softmax(y_pred, axis=-1)
            else:
                logp = tf.math.log(tf.clip_by_value(y_pred, eps, 1 - eps))
            if y_true.shape.rank == y_pred.shape.rank and y_true.shape[-1] == y_pred.shape[-1]:
                loss = -tf.reduce_sum(tf.cast(y_true, logp.dtype) * logp, axis=-1)
            else:
                idx = tf.cast(tf.reshape(y_true, [-1]), tf.int32)
                loss = -tf.gather(logp, idx, axis=1, batch_dims=1)
        return tf.reduce_mean(loss) if average else loss

    @staticmethod
    def reduce_mean(x: Any) -> Any:
        return tf.reduce_mean(x if x.dtype.is_floating else tf.cast(x, tf.float32))


def _as_array(value: Any, key: str) -> np.ndarray:
    arr = np.asarray(value)
    if arr.dtype == np.float64:
        arr = arr.astype(np.float32)
    if arr.dtype.kind not in "biuf":
        raise XaikitValueError(f"batch key {key!r} fed to the network must be numeric; got {describe(arr)}")
    return arr


class TFStepper(Stepper):
    """The compiled steps of one Network, cached by mode, ops, updates and input signature."""

    def __init__(self) -> None:
        self.steps: dict[Any, tuple[Any, list[str]]] = {}
        self.trace_count = 0

    def run_step(self, step: Step) -> dict[str, Any]:
        arrays = {k: _as_array(step.batch[k], k) for k in step.needed}
        sig = tuple((k, a.dtype.str, a.shape[1:]) for k, a in arrays.items())
        todo = list(step.updates) if step.training else []
        key = (step.mode, tuple(id(op) for op in step.ops), tuple((id(m), k) for m, k in todo), sig)
        if key not in self.steps:
            self.steps[key] = self._compile(list(step.ops), todo, step.mode, arrays)
        fn, written = self.steps[key]
        out = fn({k: tf.convert_to_tensor(a) for k, a in arrays.items()})
        return {k: np.asarray(out[k].numpy()) for k in written}

    def _compile(
        self, forward_ops: list[Any], updates: list[Update], mode: str, arrays: dict[str, np.ndarray]
    ) -> tuple[Any, list[str]]:
        training = mode == "train"
        written: list[str] = []
        for op in forward_ops:
            for k in op.outputs:
                if k not in written:
                    written.append(k)
        state = {"mode": mode, "fw": Functions, "training": training}

        def step(data: dict[str, Any]) -> dict[str, Any]:
            self.trace_count += 1  # runs only while tracing
            data = dict(data)
            with tf.GradientTape(persistent=len(updates) > 1) as tape:
                for op in forward_ops:
                    ins = [data[k] for k in op.inputs]
                    out = op.forward(ins[0] if len(ins) == 1 else ins, state)
                    outs = [out] if len(op.outputs) == 1 else list(out)
                    for k, v in zip(op.outputs, outs):
                        data[k] = v
            grads = []
            for model, loss_key in updates:
                loss = data[loss_key]
                if loss.shape.rank:
                    loss = tf.reduce_mean(loss)
                variables = model.trainable_variables
                grads.append((model, variables, tape.gradient(loss, variables)))
            for model, variables, g in grads:
                model.optimizer.apply_gradients(zip(g, variables))
            return {k: data[k] for k in written}

        spec = {k: tf.TensorSpec([None, *a.shape[1:]], tf.as_dtype(a.dtype)) for k, a in arrays.items()}
        return tf.function(step, input_signature=[spec], reduce_retracing=True), written
