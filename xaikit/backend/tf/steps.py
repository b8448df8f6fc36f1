"""The compiled steps of the TensorFlow backend: one ``tf.function`` per model, kind and option.

Each step is a :class:`Traced` object, not a closure: TensorFlow's frequent-retracing detector
keys its counts on the Python function's code object, so every ``tf.function`` made from one
closure (one per model, output, option...) shares one count, and a sixth model explained in a
process, or a few methods on a freshly loaded model, printed "N out of the last M calls to
<function ...step> triggered tf.function retracing" although no step was ever traced twice for
one input signature. A callable object is its own key: the warning then fires only when one
step really retraces.

Traces are counted per ``(model id, kind)`` in the backend's ``trace_counts`` (tests, benchmarks),
a :class:`TraceCounts` that forgets a model's counts when the model is collected: Python reuses
the id of a dead object, and a new model must not start with a dead one's count.

A step that finds, while it is traced, that it cannot compute what it should (a gradient that
does not reach an input or a layer) calls :meth:`Traced.fail` and returns placeholders; every
:meth:`Traced.run` with that input signature then raises a :class:`~xaikit.errors.XaikitValueError`
with the message. Raising inside the traced function itself would reach the caller wrapped by
AutoGraph, as a ``StagingError`` with the traced frames in its message.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from xaikit.backend.base import T
from xaikit.backend.tf.errors import unreachable_inputs
from xaikit.errors import XaikitValueError

#: the kinds of steps and what they compute (``TFBackend.traces(model, kind)``)
KINDS = {
    "grad": "scores and input gradients of a chunk of rows (the gradient methods)",
    "sweep": "a whole chunk of the gradient sweep: its rows built, their input gradients, folded per path",
    "scores": "forward scores of a chunk of rows (perturbation methods, probes)",
    "logits": "the explained output of a batch, forward only (the classes a call explains), compiled "
    "once the same input signature has come back three times",
    "cam_grad": "a layer's activations and the scores' gradient with respect to them (Grad-CAM family)",
    "cam_spread": "the same, the layer's output spread to several targets' rows (stacked targets)",
    "cam_acts": "a layer's activations (Eigen-CAM, Score-CAM)",
    "guided": "guided-backpropagation input gradients (Guided Grad-CAM)",
    "deeplift": "DeepLIFT attributions of a chunk of rows and their baseline rows",
    "deconvnet": "deconvnet input gradients (each ReLU's backward: the ReLU of the gradient)",
    "lrp": "LRP relevance of a chunk of rows (the layers' calls swapped for their rules' backward)",
}


class TraceCounts(dict[tuple[int, str], int]):
    """Trace counts per ``(id(model), kind)``; a model's entries go when the model is collected."""

    def __init__(self) -> None:
        super().__init__()
        self._watched: set[int] = set()

    def key(self, model: Any, kind: str) -> tuple[int, str]:
        """The count key of ``model``'s step ``kind``; the first key of a model that can be
        weakly referenced arranges for its entries to be dropped when it is collected."""
        ident = id(model)
        if ident not in self._watched:
            try:
                weakref.finalize(model, self._forget, ident)
            except TypeError:  # not weak-referenceable: it lives in a fallback table for good
                pass
            else:
                self._watched.add(ident)
        return (ident, kind)

    def _forget(self, ident: int) -> None:
        self._watched.discard(ident)
        for k in [k for k in self if k[0] == ident]:
            del self[k]


class Traced:
    """A step function traced by ``tf.function``: ``body(*args)`` with each trace counted.

    Args:
        body: the Python function traced (it runs at trace time only).
        counts: the backend's trace counter, ``{(model id, kind): traces}``.
        count_key: this step's ``(model id, kind)``.
        xla: compile with XLA.
    """

    def __init__(
        self,
        body: Callable[..., Any],
        counts: dict[tuple[int, str], int],
        count_key: tuple[int, str],
        xla: bool = False,
    ) -> None:
        import tensorflow as tf

        self.body = body
        self.counts = counts
        self.count_key = count_key
        self.__name__ = f"xaikit_{count_key[1]}_step"  # the name TF's messages show
        self.fn = tf.function(self, jit_compile=bool(xla), reduce_retracing=False)
        #: the message of each input signature whose trace failed (see :meth:`fail`)
        self.problems: dict[str, str] = {}
        self._tracing = ""
        #: how often :meth:`again` has seen each input signature
        self.sightings: dict[str, int] = {}
        #: set when the compiled function failed where the eager call may not: every call then
        #: runs eagerly (see :meth:`again`)
        self.eager_only = False
        #: what the body found at trace time for the caller to check after a call (by name)
        self.found: dict[str, Any] = {}

    def __call__(self, *args: Any) -> Any:
        """The traced function (runs at trace time only)."""
        self.counts[self.count_key] = self.counts.get(self.count_key, 0) + 1
        self._tracing = signature(args)
        return self.body(*args)

    def fail(self, message: str) -> None:
        """Called by the body while it is traced: calls with this input signature raise
        ``XaikitValueError(message)`` (the body returns placeholders of the right shapes)."""
        self.problems[self._tracing] = message

    def run(self, *args: Any) -> Any:
        """The compiled step on ``args``; the error its trace recorded, if any."""
        out = self.fn(*args)
        if self.problems:
            message = self.problems.get(signature(args))
            if message is not None:
                raise XaikitValueError(message)
        return out

    def again(self, *args: Any, eager_calls: int = 3) -> bool:
        """Whether this input signature has already run ``eager_calls`` times (counting this call):
        a step worth compiling only when its calls repeat runs eagerly until then. The rule of
        renting before buying: a trace costs about 3-6 eager calls (Keras: a LeNet's forward
        pass 23 ms eagerly, 128 ms for its first compiled call; a ResNet-50's 0.73 s and 2.6 s),
        so a signature that comes back pays at most about twice the cheapest choice, and a
        one-off call pays no trace at all."""
        if self.eager_only:
            return False
        key = signature(args)
        self.sightings[key] = self.sightings.get(key, 0) + 1
        return self.sightings[key] > eager_calls


def signature(args: Any) -> str:
    """The input signature of a call, as a key: each tensor or array by its shape and dtype, the
    rest as it is (the same key at trace time, on symbolic tensors, as on the eager call)."""
    import tensorflow as tf

    def spec(v: Any) -> Any:
        if tf.is_tensor(v) or (hasattr(v, "__array__") and hasattr(v, "dtype")):
            return (tuple(v.shape), str(getattr(v.dtype, "name", v.dtype)))
        return v

    return repr(tf.nest.map_structure(spec, args))


# ---- what every step's cache and body share ---------------------------------------------------
def static_key(value: Any) -> Any:
    """A cache key for a constant model argument: the value when hashable; lists, tuples and
    dicts by their contents (an equal list passed again reuses the compiled step instead of
    tracing a new one); anything else by its identity (the cached step keeps the value alive,
    so the identity is not reused)."""
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, tuple(static_key(v) for v in value))
    if isinstance(value, dict):
        return ("dict", tuple(sorted((repr(k), static_key(v)) for k, v in value.items())))
    try:
        hash(value)
    except TypeError:
        return ("id", id(value))
    return value


def constants_key(static: dict[str, Any], target: Any) -> tuple[Any, Any]:
    """The part of a step's cache key that its constant model arguments and its target kind
    make (a target object's per-sample tensors are arguments of the step, not part of the key)."""
    return (
        tuple((k, static_key(v)) for k, v in sorted(static.items())),
        None if target is None else static_key(target.static),
    )


#: every store of compiled steps (and of what they were made from) per model: a model whose
#: Python-level state changed is dropped from all of them (:func:`refresh`)
_STORES: list[weakref.WeakKeyDictionary[Any, Any]] = []
#: the Python-level state of each model at the end of its last call (:func:`python_state`)
_STATES: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()


def step_store() -> weakref.WeakKeyDictionary[Any, Any]:
    """A new store of steps per model (weakly keyed), emptied for a model by :func:`refresh`."""
    store: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()
    _STORES.append(store)
    return store


_PLAIN = (bool, int, float, str, type(None))
#: the types whose values a trace reads when it runs (variables) or that are walked on their own
#: (layers), and the types compared by identity (tensors, arrays); set on first use
_SKIP: tuple[type, ...] = ()
_BY_ID: tuple[type, ...] = ()


def _state_value(value: Any) -> Any:
    """What of an attribute value a trace freezes: plain values by value, tensors, arrays and
    callables (an activation function) by identity; variables (read when a step runs), layers
    (walked on their own) and anything else not at all."""
    global _SKIP, _BY_ID
    kind = type(value)
    if kind in _PLAIN:
        return value
    if not _SKIP:
        import keras
        import tensorflow as tf

        _SKIP = (tf.Variable, keras.Variable, keras.layers.Layer, type)
        _BY_ID = (tf.Tensor, np.ndarray)
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (tuple, list)) and all(isinstance(v, _PLAIN) for v in value):
        return tuple(value)
    if isinstance(value, _SKIP):
        return None
    if isinstance(value, _BY_ID) or callable(value):
        return ("id", id(value))
    return None


def python_state(model: Any) -> tuple[Any, ...] | None:
    """The state of a Keras model that its compiled steps froze when they were traced: every
    layer's public attributes that are plain values, tensors or callables (``layer.activation``
    swapped for a linear one, a ``Rescaling`` scale, a ``Normalization`` adapted again). Weights
    are variables, read each time a step runs, and are left out. None for a model that is not a
    Keras layer (a ``tf.function``, a SavedModel's callable)."""
    flatten = getattr(model, "_flatten_layers", None)
    if flatten is None:
        return None
    return tuple(
        (id(layer), key, _state_value(value))
        for layer in flatten(include_self=True, recursive=True)
        for key, value in list(vars(layer).items())
        if not key.startswith("_")
    )


def refresh(model: Any) -> bool:
    """Drop the model's compiled steps from every store where its Python-level state differs
    from the one last kept (a step traced before would explain the model as it was), and keep
    the state it has now. Returns whether the model had none kept (its first call, which may
    build it: :func:`remember` takes the state again at the end)."""
    try:
        seen = _STATES.get(model)
    except TypeError:  # not weak-referenceable: its steps live for one call (cached_step)
        return False
    if seen is None:
        return True
    state = python_state(model)
    if state != seen:
        for store in _STORES:
            store.pop(model, None)
        _STATES[model] = state
    return False


def remember(model: Any) -> None:
    """Keep the model's Python-level state as it is at the end of its first call, for
    :func:`refresh` at the next; later calls keep the state :func:`refresh` took (one walk of
    the layers per call)."""
    state = python_state(model)
    if state is not None:
        try:
            _STATES[model] = state
        except TypeError:
            pass


def cached_step(
    store: weakref.WeakKeyDictionary[Any, dict[Any, Traced]], model: Any, key: Any, make: Callable[[], Traced]
) -> Traced:
    """The step ``store`` caches for ``model`` under ``key``, made by ``make()`` the first time;
    a model that cannot be weakly referenced gets a step for this call only."""
    try:
        table = store.setdefault(model, {})
    except TypeError:
        return make()
    if key not in table:
        table[key] = make()
    return table[key]


def weakrefable(obj: Any) -> bool:
    try:
        weakref.ref(obj)
    except TypeError:
        return False
    return True


def model_ref(model: Any) -> Callable[[], Any]:
    """What a cached step calls to reach its model: a weak reference (the step is cached under
    the model and must not hold it), or the model itself where it cannot be weakly referenced."""
    if weakrefable(model):
        return weakref.ref(model)
    return lambda: model


def scorer_of(target: Any) -> Any:
    """A bound target object's scorer, run as written (AutoGraph would try to convert a user's
    callable), or None without a target object."""
    import tensorflow as tf

    return None if target is None else tf.autograph.experimental.do_not_convert(target.scorer())


def input_grads(step: Traced, model: Any, grads: Any, inputs: list[T]) -> list[T]:
    """The gradients of a traced body's inputs; one that is None (the scores do not reach the
    input) fails the step (an error for the caller, never a gradient of zeros) and is
    replaced by zeros."""
    import tensorflow as tf

    missing = [i for i, g in enumerate(grads) if g is None]
    if missing:
        step.fail(unreachable_inputs(model, missing, len(inputs)))
    return [tf.zeros_like(x) if g is None else g for g, x in zip(grads, inputs)]


def f16_scaled_grads(tape: Any, scores: T, inputs: list[T], grads: list[T]) -> list[T]:
    """``grads`` (of ``scores`` w.r.t. ``inputs``, from the persistent ``tape`` of a float16
    model's pass) again with loss scaling, per row, inside the step (see
    :data:`xaikit.backend.base.F16_GRAD_GOAL`): rows whose gradients already reach the goal get
    a scale of 1; rows whose scaled gradients are not finite keep the unscaled ones. ``scores``
    must be one value per row (a target object's other shapes are returned unchanged)."""
    import tensorflow as tf

    from xaikit.backend.base import F16_GRAD_GOAL, F16_SCALE_MAX_EXP

    if scores.shape.rank != 1:
        return grads
    rows = tf.shape(inputs[0])[0]
    flat = [tf.reshape(tf.cast(g, tf.float32), tf.stack([rows, -1])) for g in grads]
    peak = tf.reduce_max(tf.stack([tf.reduce_max(tf.abs(f), axis=1) for f in flat]), axis=0)
    tiny = float(np.finfo(np.float32).tiny)
    want = tf.floor(tf.math.log(F16_GRAD_GOAL / tf.maximum(peak, tiny)) / np.log(2.0))
    exp = tf.clip_by_value(
        tf.where(tf.math.is_finite(peak), want, tf.zeros_like(want)), 0.0, F16_SCALE_MAX_EXP
    )
    scale = tf.pow(2.0, exp)
    again = tape.gradient(scores, inputs, output_gradients=tf.cast(scale, scores.dtype))
    ok = tf.reduce_all(
        tf.stack(
            [tf.reduce_all(tf.math.is_finite(tf.reshape(a, tf.stack([rows, -1]))), axis=1) for a in again]
        ),
        axis=0,
    )
    out = []
    for a, g in zip(again, grads):
        shape = tf.concat([[rows], tf.ones([tf.rank(g) - 1], tf.int32)], 0)
        out.append(tf.where(tf.reshape(ok, shape), a / tf.cast(tf.reshape(scale, shape), a.dtype), g))
    return out
