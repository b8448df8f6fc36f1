"""TensorFlow / Keras implementation of the backend protocol.

The chunk step (forward + backward of one chunk of rows) is a ``tf.function`` traced once per
input shape and cached per model, across calls and across ``SaliencyNet`` instances. The engine
pads the last chunk so that a whole explanation traces the step at most once.
"""

from __future__ import annotations

import inspect
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from xaikit.backend._base import Backend, T
from xaikit.backend._outputs import select_output


class TFBackend(Backend):
    """TensorFlow tensors, Keras models and TF callables."""

    name = "tf"
    channel_first = False

    def __init__(self) -> None:
        import tensorflow as tf

        self.tf = tf
        self._steps: weakref.WeakKeyDictionary[Any, dict[tuple[Any, ...], Any]] = weakref.WeakKeyDictionary()
        self._fallback_steps: dict[int, dict[tuple[Any, ...], Any]] = {}
        #: number of times a step was traced, per (model id, "grad" | "scores") (tests, benchmarks)
        self.trace_counts: dict[tuple[int, str], int] = {}
        self.jit_compile = False

    # ---- ownership and placement -------------------------------------------------------------
    def owns(self, obj: Any) -> bool:
        tf = self.tf
        if tf.is_tensor(obj) or isinstance(obj, (tf.Variable, tf.Module)):
            return True
        for cls in type(obj).__mro__:
            if cls.__module__.split(".")[0] in ("keras", "tensorflow", "tf_keras"):
                return True
        return False

    def is_tensor(self, obj: Any) -> bool:
        return bool(self.tf.is_tensor(obj))

    def model_device(self, model: Any) -> Any:
        for v in getattr(model, "weights", None) or getattr(model, "variables", None) or []:
            dev = getattr(v, "device", None)
            if dev:
                return dev
        return None

    def model_dtype(self, model: Any) -> str:
        name = getattr(model, "compute_dtype", None)
        if isinstance(name, str) and name.startswith("float"):
            return name
        return "float32"

    def as_tensor(self, x: Any, device: Any, dtype: str | None = "float32") -> T:
        tf = self.tf
        if not tf.is_tensor(x):
            if hasattr(x, "detach"):  # a torch tensor
                x = x.detach().cpu().numpy()
            x = np.asarray(x)
        if device:
            with tf.device(device):
                t = tf.identity(tf.convert_to_tensor(x))
        else:
            t = tf.convert_to_tensor(x)
        if dtype is not None and t.dtype.name != dtype:
            t = tf.cast(t, dtype)
        return t

    def dtype_name(self, t: T) -> str:
        return str(t.dtype.name)

    def to_numpy(self, t: T) -> np.ndarray:
        return np.asarray(t.numpy() if hasattr(t, "numpy") else t)

    # ---- tensor operations --------------------------------------------------------------------
    def gather(self, t: T, idx: T) -> T:
        return self.tf.gather(t, idx)

    def index_add(self, acc: T, idx: T, values: T) -> T:
        tf = self.tf
        return acc + tf.math.unsorted_segment_sum(tf.cast(values, acc.dtype), idx, num_segments=acc.shape[0])

    def matmul(self, a: T, b: T) -> T:
        return self.tf.linalg.matmul(a, b)

    def cat(self, ts: Sequence[T], axis: int = 0) -> T:
        return ts[0] if len(ts) == 1 else self.tf.concat(list(ts), axis=axis)

    def zeros(self, shape: Sequence[int], device: Any, dtype: str = "float32") -> T:
        return self.tf.zeros(tuple(shape), dtype=dtype)

    def reshape(self, t: T, shape: Sequence[int]) -> T:
        return self.tf.reshape(t, tuple(shape))

    def sum0(self, t: T) -> T:
        return self.tf.reduce_sum(t, axis=0)

    def sample_min(self, t: T) -> T:
        return self.tf.reduce_min(t, axis=list(range(1, t.shape.rank)), keepdims=True)

    def sample_max(self, t: T) -> T:
        return self.tf.reduce_max(t, axis=list(range(1, t.shape.rank)), keepdims=True)

    def sample_sum(self, t: T) -> T:
        return self.tf.reduce_sum(self.tf.reshape(t, (t.shape[0], -1)), axis=1)

    @staticmethod
    def _seed(seed: int) -> tuple[int, int]:
        seed = int(seed) % (2**62)
        return (seed % (2**31), seed // (2**31))

    def normal(self, seed: int, shape: Sequence[int], device: Any, dtype: str = "float32") -> T:
        return self.tf.random.stateless_normal(tuple(shape), seed=self._seed(seed), dtype=dtype)

    def uniform(self, seed: int, shape: Sequence[int], device: Any, dtype: str = "float32") -> T:
        return self.tf.random.stateless_uniform(tuple(shape), seed=self._seed(seed), dtype=dtype)

    # ---- the model ----------------------------------------------------------------------------
    def _caller(self, model: Any) -> Callable[[Sequence[T]], Any]:
        """A function calling the model on a list of inputs, in inference mode where it has one."""
        keras_layer = any(cls.__name__ in ("Layer", "Model") for cls in type(model).__mro__) and hasattr(
            model, "trainable_weights"
        )
        takes_training = keras_layer
        if not keras_layer:
            try:
                takes_training = "training" in inspect.signature(model).parameters
            except (TypeError, ValueError):
                takes_training = False

        def call(inputs: Sequence[T]) -> Any:
            arg = inputs[0] if len(inputs) == 1 else list(inputs)
            return model(arg, training=False) if takes_training else model(arg)

        return call

    def forward(self, model: Any, inputs: Sequence[T], output: int | str = 0) -> T:
        return select_output(self._caller(model)(inputs), output, int(inputs[0].shape[0]))

    def _step(self, model: Any, n_inputs: int, output: int | str, kind: str = "grad") -> Any:
        tf = self.tf
        key = (kind, n_inputs, output, self.jit_compile)
        try:
            table = self._steps.setdefault(model, {})
        except TypeError:  # not weak-referenceable
            table = self._fallback_steps.setdefault(id(model), {})
        if key in table:
            return table[key]
        ref = weakref.ref(model) if _weakrefable(model) else (lambda m=model: m)
        count_key = (id(model), kind)
        counts = self.trace_counts

        def step(inputs: list[T], targets: T) -> tuple[T, list[T], T]:
            counts[count_key] = counts.get(count_key, 0) + 1  # runs at trace time only
            m = ref()
            with tf.GradientTape() as tape:
                for x in inputs:
                    tape.watch(x)
                out = select_output(self._caller(m)(inputs), output, int(inputs[0].shape[0]))
                chosen = tf.where(targets < 0, tf.argmax(out, axis=1, output_type=tf.int64), targets)
                scores = tf.gather(out, chosen, axis=1, batch_dims=1)
            grads = tape.gradient(scores, inputs)
            grads = [tf.zeros_like(x) if g is None else g for g, x in zip(grads, inputs)]
            return scores, grads, out

        def forward_scores(inputs: list[T], targets: T) -> T:
            counts[count_key] = counts.get(count_key, 0) + 1  # runs at trace time only
            out = select_output(self._caller(ref())(inputs), output, int(inputs[0].shape[0]))
            chosen = tf.where(targets < 0, tf.argmax(out, axis=1, output_type=tf.int64), targets)
            return tf.gather(out, chosen, axis=1, batch_dims=1)

        fn = tf.function(
            step if kind == "grad" else forward_scores, jit_compile=self.jit_compile, reduce_retracing=False
        )
        table[key] = fn
        return fn

    def scores(self, model: Any, inputs: Sequence[T], targets: T, output: int | str = 0) -> T:
        return self._step(model, len(inputs), output, "scores")(list(inputs), targets)

    def grad_step(
        self, model: Any, inputs: Sequence[T], targets: T, output: int | str = 0
    ) -> tuple[T, list[T], T]:
        scores, grads, out = self._step(model, len(inputs), output)(list(inputs), targets)
        return scores, list(grads), out

    def traces(self, model: Any, kind: str = "grad") -> int:
        """How many times the ``"grad"`` (or ``"scores"``) step of ``model`` has been traced."""
        return self.trace_counts.get((id(model), kind), 0)

    # ---- memory and chunking ------------------------------------------------------------------
    def is_oom(self, exc: BaseException) -> bool:
        return isinstance(exc, self.tf.errors.ResourceExhaustedError)

    def is_accelerator(self, device: Any) -> bool:
        return isinstance(device, str) and ("GPU" in device.upper() or "TPU" in device.upper())

    def pads_chunks(self) -> bool:
        return True


def _weakrefable(obj: Any) -> bool:
    try:
        weakref.ref(obj)
    except TypeError:
        return False
    return True
