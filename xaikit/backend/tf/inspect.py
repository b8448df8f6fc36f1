"""Keras 3 (TensorFlow) side of the module tracker: a reversible wrapper around each layer's
``call``.

Keras 3 invokes ``self.call`` from ``Layer.__call__``, so an instance attribute ``call`` (set with
``object.__setattr__``, bypassing Keras' attribute tracking) intercepts every call of that layer.
:meth:`KerasInspector.detach` deletes the attribute again (or puts back one that was there), so the
class method is what runs afterwards and the layer objects are untouched.

Only eager calls are recorded (``model(x)``, ``GradientTape`` loops, ``fit(run_eagerly=True)``):
inside a ``tf.function`` the tensors are symbolic and the wrapper just calls through.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from xaikit.backend.inspector import EnterHook, ExitHook, Inspector, ModuleInfo, T
from xaikit.errors import XaikitTypeError, describe

_MISSING = object()


def _sublayers(layer: Any) -> list[Any]:
    flatten = getattr(layer, "_flatten_layers", None)
    if flatten is None:
        return []
    return [sub for sub in flatten(include_self=False, recursive=False) if sub is not layer]


def _is_input_layer(layer: Any) -> bool:
    return type(layer).__name__ == "InputLayer"


#: exponent bias, mantissa bits and the integer type of the same width, of the dtypes reduced
_FLOAT_BITS = {tf.float32: (127, 23, tf.int32), tf.float64: (1023, 52, tf.int64)}


def _inverse_power_of_two(top: Any) -> Any:
    """``2**-e`` (``top``'s dtype: float32 or float64) with ``2**(e-1) <= top < 2**e`` for a finite
    ``top > 0`` (``e`` clamped so that ``2**-e`` is a normal number), else 1; built from the bits,
    so exact."""
    bias, bits, itype = _FLOAT_BITS[top.dtype]
    e = tf.bitwise.right_shift(tf.bitcast(top, itype), bits) - (bias - 1)  # the biased exponent, + 1
    e = tf.clip_by_value(e, 1 - bias, bias - 1)
    inv = tf.bitcast(tf.bitwise.left_shift(bias - e, bits), top.dtype)
    return tf.where(tf.math.is_finite(top) & (top > 0), inv, tf.ones_like(top))


def _stats_of(x: Any) -> Any:
    flat = tf.reshape(x, [-1])
    n = tf.cast(tf.size(flat), x.dtype)
    lo, hi = tf.reduce_min(flat), tf.reduce_max(flat)
    # the sums are of the values times the power of two that brings the largest magnitude below 1
    # (exact), scaled back in float64: 1e20 ** 2 would overflow float32, 1e-25 ** 2 underflow
    inv = _inverse_power_of_two(tf.maximum(hi, -lo))
    y = flat * inv
    mean = tf.reduce_sum(y) / n
    std = tf.sqrt(tf.reduce_sum(tf.square(y - mean)) / n)
    inv64 = tf.cast(inv, tf.float64)
    zeros = tf.cast(tf.size(flat, out_type=tf.int64) - tf.math.count_nonzero(flat), tf.float64)
    nonfinite = tf.cast(tf.math.count_nonzero(flat - flat), tf.float64)  # NaN and +-inf give NaN
    moments = tf.stack(
        [
            tf.cast(mean, tf.float64) / inv64,
            tf.cast(std, tf.float64) / inv64,
            tf.cast(lo, tf.float64),
            tf.cast(hi, tf.float64),
        ]
    )
    return tf.concat([moments, tf.stack([zeros / tf.cast(n, tf.float64), nonfinite])], axis=0)


def _stats_units_of(x: Any) -> Any:
    per_unit = tf.reshape(x, [-1, tf.shape(x)[-1]])
    dead = tf.logical_and(tf.equal(tf.reduce_max(per_unit, 0), 0), tf.equal(tf.reduce_min(per_unit, 0), 0))
    return tf.concat([_stats_of(x), tf.reshape(tf.reduce_mean(tf.cast(dead, tf.float64)), [1])], axis=0)


# Compiled once for any shape, one function per reduced dtype (float32: float32 and the half
# types; float64: float64 and integers, which float64 holds exactly up to 2**53): one Python call
# per tensor instead of a dozen eager ops, which dominate the cost of small tensors.
_STATS = {
    (dtype, units): tf.function(fn, input_signature=[tf.TensorSpec(None, dtype)])
    for dtype in _FLOAT_BITS
    for units, fn in ((False, _stats_of), (True, _stats_units_of))
}


class KerasInspector(Inspector):
    """A Keras model and its layers (nested models and layers with sublayers included)."""

    framework = "tf"
    unit_axis = -1

    def __init__(self, model: Any, root_name: str = "model") -> None:
        self._saved: list[tuple[Any, Any]] = []
        super().__init__(model, root_name)

    def _walk(self, model: Any, root_name: str) -> None:
        seen: set[int] = set()

        def visit(layer: Any, name: str, parent: str | None) -> None:
            seen.add(id(layer))
            subs = [s for s in _sublayers(layer) if id(s) not in seen and not _is_input_layer(s)]
            info = ModuleInfo(
                name=name,
                short=name.rsplit(".", 1)[-1],
                cls=type(layer).__name__,
                parent=parent,
                obj=layer,
            )
            self.modules[name] = info
            if parent is not None:
                self.modules[parent].children.append(name)
            if subs:
                own = list(getattr(layer, "_trainable_variables", [])) + list(
                    getattr(layer, "_non_trainable_variables", [])
                )
            else:
                own = list(layer.weights)
            info.params = [(getattr(v, "name", f"weight_{i}"), v) for i, v in enumerate(own)]
            for sub in subs:
                if id(sub) not in seen:
                    visit(sub, f"{name}.{sub.name}", name)

        visit(model, root_name, None)

    def trainable(self) -> list[Any]:
        return list(self.model.trainable_variables)

    def attach(self, on_enter: EnterHook, on_exit: ExitHook) -> None:
        if self._saved:
            return
        for name, info in self.modules.items():
            layer = info.obj
            before = layer.__dict__.get("call", _MISSING)
            original = layer.call

            def wrapped(*args: Any, _name: str = name, _original: Any = original, **kwargs: Any) -> Any:
                if not tf.executing_eagerly():
                    return _original(*args, **kwargs)
                on_enter(_name, args, kwargs)
                try:
                    out = _original(*args, **kwargs)
                except BaseException:
                    on_exit(_name, None, True)
                    raise
                on_exit(_name, out, False)
                return out

            object.__setattr__(layer, "call", wrapped)
            self._saved.append((layer, before))

    def detach(self) -> None:
        for layer, before in reversed(self._saved):
            if before is _MISSING:
                object.__delattr__(layer, "call")
            else:
                object.__setattr__(layer, "call", before)
        self._saved = []

    def is_tensor(self, obj: Any) -> bool:
        return isinstance(obj, (tf.Tensor, tf.Variable)) and tf.executing_eagerly()

    def describe(self, t: T) -> tuple[list[int], str]:
        return [int(d) for d in t.shape], t.dtype.name

    def value(self, var: Any) -> T:
        return tf.convert_to_tensor(var)

    def grad(self, var: Any, given: dict[int, Any] | None) -> T | None:
        if given is None:
            return None
        g = given.get(id(var))
        if g is None:
            return None
        return tf.convert_to_tensor(g)

    def version(self, t: T) -> int:
        return 0  # TF tensors are immutable

    def default_stats(self, t: T, units: bool) -> T:
        x = tf.convert_to_tensor(t)
        if x.dtype.is_complex:
            x = tf.abs(x)
        # reduced like torch's: float64 and integers in float64, the other floats in float32
        dtype = tf.float64 if x.dtype == tf.float64 or not x.dtype.is_floating else tf.float32
        if x.dtype != dtype:
            x = tf.cast(x, dtype)
        if int(tf.size(x)) == 0:
            return tf.fill([7 if units else 6], tf.constant(np.nan, tf.float64))
        if not units:
            return _STATS[dtype, False](x)
        rank = x.shape.rank
        if rank is not None and rank >= 2 and x.shape[-1]:
            return _STATS[dtype, True](x)
        return tf.concat([_STATS[dtype, False](x), tf.constant([np.nan], tf.float64)], axis=0)

    def flat(self, value: Any) -> T:
        return tf.reshape(tf.cast(tf.convert_to_tensor(value), tf.float64), [-1])

    def to_host(self, parts: Sequence[T]) -> np.ndarray:
        if not parts:
            return np.zeros(0)
        return tf.concat(list(parts), axis=0).numpy()


def inspector(model: Any, root_name: str = "model") -> Inspector:
    """The inspector facet of this backend for ``model``."""
    if not hasattr(model, "_flatten_layers"):
        raise XaikitTypeError(
            f"model must be a torch.nn.Module or a Keras 3 model / layer; got {describe(model)}"
        )
    return KerasInspector(model, root_name)
