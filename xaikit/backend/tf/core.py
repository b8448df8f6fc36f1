"""TensorFlow / Keras implementation of the backend's core: tensors, the gradient step, memory.

The facets live beside this file (``train.py``, ``eval.py``, ``inspect.py``, ``layers.py``).

The chunk step (forward + backward of one chunk of rows) is a ``tf.function`` traced once per
input shape and cached per model, across calls and across ``SaliencyNet`` instances. The engine
pads the last chunk so that a whole explanation traces the step at most once. Each step is its
own callable object (:class:`~xaikit.backend.tf.steps.Traced`), so TensorFlow's retracing
warning counts the traces of one step, not those of every model's step together. An input that
the scores' gradient does not reach is an error (:func:`~xaikit.backend.tf.errors.unreachable_inputs`),
never a gradient of zeros.
"""

from __future__ import annotations

import contextlib
import inspect
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from xaikit.backend.base import HALF_DTYPES, Backend, T
from xaikit.backend.outputs import as_matrix, select_output
from xaikit.backend.rows import Rows
from xaikit.backend.tf.errors import error_text
from xaikit.backend.tf.forms import input_shapes, not_callable
from xaikit.backend.tf.layers import all_layers, sublayers
from xaikit.backend.tf.steps import (
    KINDS,
    TraceCounts,
    Traced,
    constants_key,
    f16_scaled_grads,
    input_grads,
    model_ref,
    refresh,
    remember,
    scorer_of,
    step_store,
)
from xaikit.checks import check_choice
from xaikit.errors import XaikitTypeError
from xaikit.layout import ModelLayout


class TFBackend(Backend):
    """TensorFlow tensors, Keras models and TF callables."""

    name = "tf"
    channel_first = False
    package = "xaikit.backend.tf"

    def __init__(self) -> None:
        import tensorflow as tf

        self.tf = tf
        self._steps: weakref.WeakKeyDictionary[Any, dict[tuple[Any, ...], Traced]] = step_store()
        #: ids of the models inside an :meth:`inference` context (their state is checked once)
        self._inside: set[int] = set()
        self._fallback_steps: dict[int, dict[tuple[Any, ...], Traced]] = {}
        #: number of times a step was traced, per (model id, kind) (kinds: ``steps.KINDS``; tests, benchmarks)
        self.trace_counts = TraceCounts()

    # ---- the model ----------------------------------------------------------------------------
    @contextlib.contextmanager
    def inference(self, model: Any) -> Iterator[None]:
        # a compiled step froze the model's Python-level state when it was traced (an activation,
        # a Rescaling scale): a model changed since its last call gets new steps
        if id(model) in self._inside:
            yield
            return
        first = refresh(model)
        self._inside.add(id(model))
        try:
            yield
        finally:
            self._inside.discard(id(model))
            if first:
                remember(model)

    # ---- process-wide settings and model facts -----------------------------------------------
    def _seed_framework(self, seed: int) -> None:
        import keras

        keras.utils.set_random_seed(seed)

    def limit_threads(self, threads: int) -> None:
        tf = self.tf
        try:
            tf.config.threading.set_intra_op_parallelism_threads(int(threads))
            tf.config.threading.set_inter_op_parallelism_threads(max(int(threads), 2))
        except RuntimeError:  # TF already initialized: keep its settings
            pass

    def model_layout(self, model: Any) -> ModelLayout:
        """Channel-last (Keras' default ``data_format``, or the first convolution's own), and the
        channels of the model's declared input when it has one."""
        channel_first = False
        for layer in all_layers(model):
            fmt = getattr(layer, "data_format", None)
            if fmt in ("channels_first", "channels_last") and hasattr(layer, "kernel_size"):
                channel_first = fmt == "channels_first"
                break
        channels = None
        shape = _input_shape(model)
        if shape is not None and len(shape) == 4:
            c = shape[1] if channel_first else shape[-1]
            channels = int(c) if c is not None else None
        return ModelLayout(channel_first=channel_first, channels=channels)

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
        """The compute dtype of the model's first layer with weights (a layer built with
        ``dtype="float64"`` under a float32 global policy computes in float64, whatever the
        model's own ``compute_dtype`` says); else the model's; else its first floating
        variable's (a ``tf.Module``); else float32."""
        for layer in all_layers(model):
            if not sublayers(layer) and list(getattr(layer, "weights", None) or []):
                name = getattr(layer, "compute_dtype", None)
                if isinstance(name, str) and name.startswith(("float", "bfloat")):
                    return name
                break
        name = getattr(model, "compute_dtype", None)
        if isinstance(name, str) and name.startswith(("float", "bfloat")):
            return name
        for v in getattr(model, "variables", None) or []:
            name = str(getattr(v.dtype, "name", v.dtype))
            if name.startswith(("float", "bfloat")):
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

    def arange(self, start: int, stop: int, device: Any) -> T:
        tf = self.tf
        if device:
            with tf.device(device):
                return tf.range(int(start), int(stop), dtype=tf.int64)
        return tf.range(int(start), int(stop), dtype=tf.int64)

    # ---- tensor operations --------------------------------------------------------------------
    def gather(self, t: T, idx: T) -> T:
        return self.tf.gather(t, idx)

    def index_add(self, acc: T, idx: T, values: T) -> T:
        tf = self.tf
        return acc + tf.math.unsorted_segment_sum(tf.cast(values, acc.dtype), idx, num_segments=acc.shape[0])

    def working(self, t: T) -> T:
        return self.tf.cast(t, self.tf.float32) if t.dtype.name in HALF_DTYPES else t

    def pick(self, t: T, idx: T) -> T:
        return self.tf.gather(t, idx, axis=1, batch_dims=1)

    def matmul(self, a: T, b: T) -> T:
        return self.tf.linalg.matmul(a, b)

    def cat(self, ts: Sequence[T], axis: int = 0) -> T:
        return ts[0] if len(ts) == 1 else self.tf.concat(list(ts), axis=axis)

    def zeros(self, shape: Sequence[int], device: Any, dtype: str = "float32") -> T:
        return self.tf.zeros(tuple(shape), dtype=dtype)

    def reshape(self, t: T, shape: Sequence[int]) -> T:
        return self.tf.reshape(t, tuple(shape))

    def moveaxis(self, t: T, source: int, destination: int) -> T:
        order = list(range(t.shape.rank))
        order.insert(destination, order.pop(source))
        return self.tf.transpose(t, order)

    def squeeze(self, t: T, axis: int | None = None) -> T:
        return self.tf.squeeze(t, axis=axis)

    def mean(self, t: T, axis: int | tuple[int, ...] | None = None, keepdims: bool = False) -> T:
        tf = self.tf
        t = t if t.dtype.is_floating else tf.cast(t, "float32")
        return tf.reduce_mean(t, axis=axis, keepdims=keepdims)

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

    def seed_list(self, seeds: Sequence[int], device: Any) -> Any:
        return self.tf.constant([self._seed(s) for s in seeds], dtype=self.tf.int32)  # (k, 2)

    def normal_at(self, seeds: Any, j: int, shape: Sequence[int], device: Any, dtype: str = "float32") -> T:
        return self.tf.random.stateless_normal(tuple(shape), seed=seeds[j], dtype=dtype)

    # ---- the model ----------------------------------------------------------------------------
    def _call(self, model: Any, inputs: Sequence[T], kw: dict[str, Any] | None = None) -> Any:
        """The model's own output for a list of inputs, in inference mode where it has one, with
        ``kw`` as extra keyword arguments. A half-precision model (mixed_float16 /
        mixed_bfloat16 policy, float16 variables) gets its floating inputs cast to its compute
        dtype (inside the tape)."""
        tf = self.tf
        if not callable(model):
            raise XaikitTypeError(not_callable(model))
        keras_layer = any(cls.__name__ in ("Layer", "Model") for cls in type(model).__mro__) and hasattr(
            model, "trainable_weights"
        )
        takes_training = keras_layer
        if not keras_layer:
            try:
                takes_training = "training" in inspect.signature(model).parameters
            except (TypeError, ValueError):
                takes_training = False
        compute = self.model_dtype(model)
        if compute in HALF_DTYPES:
            inputs = [tf.cast(x, compute) if x.dtype.is_floating else x for x in inputs]
        arg = inputs[0] if len(inputs) == 1 else list(inputs)
        extra = dict(kw or {})
        if takes_training:
            extra.setdefault("training", False)
        return model(arg, **extra)

    def selected(self, out: Any, output: int | str, rows: int) -> T:
        """The explained output of a model's output (:func:`~xaikit.backend.outputs.select_output`),
        in float32 when the model computes in half precision."""
        out = select_output(out, output, rows)
        if out.dtype.name in HALF_DTYPES:
            out = self.tf.cast(out, self.tf.float32)
        return out

    def forward(
        self,
        model: Any,
        inputs: Sequence[T],
        output: int | str = 0,
        model_kwargs: dict[str, Any] | None = None,
    ) -> T:
        return self.selected(self._call(model, inputs, model_kwargs), output, int(inputs[0].shape[0]))

    def outputs(self, model: Any, inputs: Sequence[T], model_kwargs: dict[str, Any] | None = None) -> Any:
        return self._call(model, inputs, model_kwargs)

    def _split(self, model_kwargs: dict[str, Any] | None) -> tuple[dict[str, Any], dict[str, Any]]:
        """model_kwargs as (tensors and arrays: arguments of the compiled step, the rest: constants
        of the step, part of its cache key, so that any Python value can be passed)."""
        tensors: dict[str, Any] = {}
        static: dict[str, Any] = {}
        for key, value in (model_kwargs or {}).items():
            if self.tf.is_tensor(value) or isinstance(value, np.ndarray):
                tensors[key] = value
            else:
                static[key] = value
        return tensors, static

    def _step_args(
        self, model_kwargs: dict[str, Any] | None, target: Any
    ) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        """``(tensors, static, extra)``: :meth:`_split`'s two parts of ``model_kwargs`` and a bound
        target object's per-sample tensors (``extra``, an argument of the compiled step)."""
        tensors, static = self._split(model_kwargs)
        return tensors, static, {} if target is None else dict(target.tensors)

    def _scores_of(
        self, out: Any, targets: T | None, output: int | str, rows: int, scorer: Any, extra: dict[str, T]
    ) -> tuple[T, T]:
        """``(scores, output matrix)`` of what the model returned, inside a step: a target
        object's ``scorer`` (the scores stand for the matrix), else the ``targets`` column of
        each row of the selected output (``targets=None``: each row's highest score)."""
        tf = self.tf
        if scorer is not None:
            scores = scorer(self, out, targets, extra)
            return scores, scores
        out = as_matrix(self.selected(out, output, rows))
        if targets is None:  # the predicted class: each row's highest score, this pass
            return tf.reduce_max(out, axis=1), out
        return tf.gather(out, targets, axis=1, batch_dims=1), out

    def _step(
        self,
        model: Any,
        n_inputs: int,
        output: int | str,
        kind: str,
        xla: bool,
        static: dict[str, Any] | None = None,
        target: Any = None,
        fused: Callable[..., Any] | None = None,
    ) -> Traced:
        """The compiled ``"grad"``, ``"scores"``, ``"logits"`` or ``"sweep"`` step of ``model``, made once per
        model, number of inputs, output, XLA flag, constant model arguments, target kind (a
        target object's per-sample tensors are arguments of the step) and chunk body (``fused``,
        kind ``"sweep"``: the engine's whole-chunk body around the ``"grad"`` step's gradient),
        and traced once per input signature (the engine pads chunks to a few row counts)."""
        tf = self.tf
        static = dict(static or {})
        key = (
            kind,
            n_inputs,
            output,
            bool(xla),
            *constants_key(static, target),
            fused,
        )
        try:
            table = self._steps.setdefault(model, {})
        except TypeError:  # not weak-referenceable
            table = self._fallback_steps.setdefault(id(model), {})
        if key in table:
            return table[key]
        ref = model_ref(model)
        scorer = scorer_of(target)

        def scores_of(inputs: list[T], targets: T, kw: dict[str, Any], extra: dict[str, T]) -> tuple[T, T]:
            out = self._call(ref(), inputs, {**kw, **static})
            return self._scores_of(out, targets, output, int(inputs[0].shape[0]), scorer, extra)

        f16 = self.model_dtype(model) == "float16"

        def grad(
            inputs: list[T], targets: T, kw: dict[str, Any], extra: dict[str, T]
        ) -> tuple[T, list[T], T]:
            with tf.GradientTape(persistent=f16) as tape:
                for x in inputs:
                    tape.watch(x)
                scores, out = scores_of(inputs, targets, kw, extra)
            grads = input_grads(step, ref(), tape.gradient(scores, inputs), inputs)
            if f16:  # loss scaling: small gradients lose bits or become 0 in float16
                grads = f16_scaled_grads(tape, scores, inputs, grads)
            return scores, grads, out

        def forward_scores(inputs: list[T], targets: T, kw: dict[str, Any], extra: dict[str, T]) -> T:
            return scores_of(inputs, targets, kw, extra)[0]

        def logits(inputs: list[T], _targets: Any, kw: dict[str, Any], _extra: dict[str, T]) -> T:
            return self.selected(self._call(ref(), inputs, {**kw, **static}), output, int(inputs[0].shape[0]))

        body: Callable[..., Any] = {"grad": grad, "logits": logits}.get(kind, forward_scores)
        if fused is not None:  # kind "sweep": the engine's chunk body around the gradient
            chunk_body = fused

            def body(*args: Any) -> Any:
                return chunk_body(self, lambda rows, targets: grad(list(rows), targets, {}, {})[1], *args)

        step = Traced(body, self.trace_counts, self.trace_counts.key(model, kind), xla)
        table[key] = step
        return step

    def _run_rows(self, rows: Rows, kind: str, xla: bool) -> Any:
        """The compiled ``kind`` step (``"grad"`` or ``"scores"``) run on the rows: their fields
        are the step's arguments and key (the :class:`Rows` object never enters the graph)."""
        tensors, static, extra = self._step_args(rows.model_kwargs, rows.target)
        step = self._step(rows.model, len(rows.inputs), rows.output, kind, xla, static, rows.target)
        return step.run(list(rows.inputs), rows.targets, tensors, extra)

    def scores(self, rows: Rows, xla: bool = False) -> T:
        return self._run_rows(rows, "scores", xla)

    def logits(self, rows: Rows) -> T:
        """:meth:`forward` of the rows, through a compiled step once the same model, output,
        constant arguments and input signature keep coming back (a Keras model's eager call pays
        Python for every layer: a ResNet-50's 16 rows took 0.73 s eagerly, 0.13 s compiled); the
        first three calls run eagerly, as a trace costs about as much (:meth:`~xaikit.backend.tf.steps.Traced.again`),
        so a one-off call pays no trace. A compiled call that fails otherwise than out of memory
        falls back to the eager call: where that fails too, it raises the model's own error (the
        rows were wrong, not the compiling); where it succeeds, the model cannot be compiled and
        every later call of the step runs eagerly."""
        tensors, static, _ = self._step_args(rows.model_kwargs, None)
        step = self._step(rows.model, len(rows.inputs), rows.output, "logits", False, static)
        args: tuple[Any, ...] = (list(rows.inputs), None, tensors, {})
        if step.again(*args):
            try:
                return step.run(*args)
            except Exception as exc:
                if self.is_oom(exc):
                    raise
                out = self.forward(rows.model, rows.inputs, rows.output, model_kwargs=rows.model_kwargs)
                step.eager_only = True  # reached only when the eager call worked
                return out
        return self.forward(rows.model, rows.inputs, rows.output, model_kwargs=rows.model_kwargs)

    def grad_step(self, rows: Rows, xla: bool = False) -> tuple[T, list[T], T]:
        scores, grads, out = self._run_rows(rows, "grad", xla)
        return scores, list(grads), out

    def traces(self, model: Any, kind: str = "grad") -> int:
        """How many times a step of ``model`` has been traced: ``"grad"`` (the gradient methods),
        ``"scores"`` (forward scores), ``"cam_grad"``, ``"cam_acts"``, ``"guided"`` (the
        class-activation maps), ``"deconvnet"``, ``"lrp"`` (see :data:`xaikit.backend.tf.steps.KINDS`)."""
        check_choice(kind, "kind", sorted(KINDS))
        return self.trace_counts.get((id(model), kind), 0)

    def error_text(self, exc: BaseException) -> str:
        return error_text(exc)

    def input_shapes(self, model: Any) -> list[tuple[int | None, ...]] | None:
        return input_shapes(model)

    # ---- memory and chunking ------------------------------------------------------------------
    def is_oom(self, exc: BaseException) -> bool:
        return isinstance(exc, self.tf.errors.ResourceExhaustedError)

    def is_accelerator(self, device: Any) -> bool:
        return isinstance(device, str) and ("GPU" in device.upper() or "TPU" in device.upper())

    def peak_memory(self, fn: Callable[[], Any], device: Any) -> tuple[Any, int | None]:
        """GPU: ``tf.config.experimental.get_memory_info``'s ``peak`` after a reset, above the
        ``current`` bytes at the start; CPU: the resident set (see :meth:`Backend.peak_memory`)."""
        if not self.is_accelerator(device):
            return super().peak_memory(fn, device)
        name = _short_device(device)
        exp = self.tf.config.experimental
        try:
            exp.reset_memory_stats(name)
            base = int(exp.get_memory_info(name)["current"])
        except (ValueError, RuntimeError):  # no allocator statistics for this device
            return fn(), None
        out = fn()
        return out, max(0, int(exp.get_memory_info(name)["peak"]) - base)

    def pads_chunks(self) -> bool:
        return True

    def fuses_chunks(self) -> bool:
        return True

    def _chunk_runner(
        self, model: Any, body: Callable[..., Any], n: int, output: Any, xla: bool
    ) -> Callable[..., Any]:
        """The chunk body compiled with the model's gradient into one ``tf.function`` (the step
        kind ``"sweep"``), traced once per input signature; a gradient that does not reach an
        input raises as :meth:`grad_step`'s does."""
        return self._step(model, n, output, "sweep", xla, fused=body).run


def _short_device(device: str) -> str:
    """``"/job:localhost/replica:0/task:0/device:GPU:0"`` -> ``"GPU:0"``."""
    return device.rsplit("device:", 1)[-1]


def _input_shape(model: Any) -> tuple[Any, ...] | None:
    """The declared input shape of a built single-input Keras model, or None."""
    shapes = input_shapes(model)
    return shapes[0] if shapes is not None and len(shapes) == 1 else None
