"""TensorFlow / Keras layer facet of the class-activation maps (``get_backend(model).cam``).

A functional or Sequential Keras model is re-wired into a sub-model with two outputs,
``keras.Model(model.inputs, [layer.output, model.output])`` (same layers, same weights), called
in inference mode under a ``GradientTape`` that watches the layer's output. The sub-model and
its ``tf.function`` step are cached per model and layer; the model itself is never changed.
Activations come back in the layer's layout (the engine moves the channels).

Guided backpropagation swaps, inside a ``try``/``finally``, the ReLU activation of each layer
that has one (``activation="relu"``, ``Activation("relu")``, plain ``ReLU()`` layers, nested
sub-models included) for a ``tf.custom_gradient`` guided ReLU, runs its step, and puts the
model's own activations back: the model is the same object with the same attributes after.
A ReLU applied inside a custom layer's ``call`` (``tf.nn.relu``, ``keras.ops.relu``) cannot be
reached and keeps its plain gradient. Loaded the first time a CAM method runs.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Iterator, Sequence
from typing import Any

import keras
import tensorflow as tf

from xaikit.backend.base import HALF_DTYPES, T
from xaikit.backend.facets import CamFacet, CamLayer
from xaikit.backend.outputs import as_matrix, select_output
from xaikit.backend.tf.layers import all_layers
from xaikit.errors import XaikitTypeError, XaikitValueError, describe


def _shape(layer: Any) -> tuple[Any, ...] | None:
    try:
        out = layer.output
    except (AttributeError, ValueError):
        return None
    shape = getattr(out, "shape", None)
    return None if shape is None else tuple(shape)


def _spatial(shape: tuple[Any, ...] | None, channel_first: bool) -> bool:
    if shape is None or len(shape) != 4:
        return False
    h, w = (shape[2], shape[3]) if channel_first else (shape[1], shape[2])
    return h is None or w is None or int(h) * int(w) > 1


class Cam(CamFacet):
    """The CAM facet of the TensorFlow backend."""

    def __init__(self, bk: Any) -> None:
        self.bk = bk
        self._subs: weakref.WeakKeyDictionary[Any, dict[tuple[Any, ...], Any]] = weakref.WeakKeyDictionary()

    def channel_first(self, model: Any) -> bool:
        return bool(self.bk.model_layout(model).channel_first)

    def resolve(
        self, model: Any, layer: Any, inputs: Sequence[T], model_kwargs: dict[str, Any] | None
    ) -> CamLayer:
        layers = list(getattr(model, "layers", None) or [])
        if not layers or getattr(model, "inputs", None) is None:
            raise XaikitTypeError(
                "class-activation maps need a functional or Sequential Keras model with declared "
                f"inputs (to read an inner layer's output); got {describe(model)}"
            )
        first = self.channel_first(model)
        if layer is None:
            for la in reversed(layers):
                if _spatial(_shape(la), first):
                    return CamLayer(str(la.name), la, _shape(la)[1:])  # type: ignore[index]
            raise XaikitValueError(
                "layer=None looks for the last layer with a spatial (B, h, w, C) output (h * w > 1) "
                "and the model has none: pass layer= (a layer name of model.layers, with reshape= "
                "for a token output)"
            )
        if isinstance(layer, str):
            found = [la for la in layers if la.name == layer]
            if not found:
                raise XaikitValueError(
                    f"layer {layer!r} is not a layer of the model; layer must be a layer name of "
                    f"model.layers, e.g. {[la.name for la in layers][-4:]}, or None (the last "
                    "layer with a spatial output)"
                )
            chosen = found[0]
        elif any(la is layer for la in layers):
            chosen = layer
        elif hasattr(layer, "name") and hasattr(layer, "output"):
            raise XaikitValueError(
                f"layer must be a layer of model.layers; got the layer {layer.name!r}, which is not one "
                "(a layer nested inside a sub-model is not reachable: pass a top-level layer)"
            )
        else:
            raise XaikitTypeError(
                f"layer must be a layer name (str), a layer of model.layers or None; got {describe(layer)}"
            )
        shape = _shape(chosen)
        if shape is None:
            raise XaikitValueError(f"layer {chosen.name!r} must output one tensor; it has no single output")
        return CamLayer(str(chosen.name), chosen, shape[1:])

    def _fn(self, model: Any, layer: CamLayer, output: int | str, kind: str) -> Any:
        table = self._subs.setdefault(model, {})
        key = (layer.name, id(layer.obj), output, kind)
        if key in table:
            return table[key]
        if kind == "guided":
            fn = self._guided_fn(model, output)
            table[key] = fn
            return fn
        try:  # a functional model's output structure keeps a dict output's keys
            outs = model.output
        except (AttributeError, ValueError):
            outs = model.outputs
        sub = keras.Model(model.inputs, [layer.obj.output, outs])
        compute = self.bk.model_dtype(model)
        half = compute if compute in HALF_DTYPES else None

        def call(inputs: list[T]) -> tuple[T, T]:
            xs = [tf.cast(x, half) if half is not None and x.dtype.is_floating else x for x in inputs]
            a, out = sub(xs[0] if len(xs) == 1 else xs, training=False)
            out = as_matrix(select_output(out, output, int(inputs[0].shape[0])))
            if half is not None and out.dtype != tf.float32:
                out = tf.cast(out, tf.float32)
            return a, out

        def working(t: T) -> T:
            return tf.cast(t, tf.float32) if half is not None else t

        def grad(inputs: list[T], targets: T | None) -> tuple[T, T, T]:
            with tf.GradientTape(watch_accessed_variables=False) as tape:
                for x in inputs:  # records the ops above the inputs; only dA is computed
                    tape.watch(x)
                a, out = call(inputs)
                if targets is None:  # the predicted class: each row's highest score, this pass
                    scores = tf.reduce_max(out, axis=1)
                else:
                    scores = tf.gather(out, targets, axis=1, batch_dims=1)
            da = tape.gradient(scores, a)
            da = tf.zeros_like(a) if da is None else da
            return working(a), working(da), scores

        def acts(inputs: list[T]) -> T:
            return working(call(inputs)[0])

        fn = tf.function(grad if kind == "grad" else acts, reduce_retracing=False)
        table[key] = fn
        return fn

    def _guided_fn(self, model: Any, output: int | str) -> Any:
        ref = weakref.ref(model)  # the step is cached under the model (weakly): it must not hold it

        def step(inputs: list[T], targets: T) -> list[T]:
            with tf.GradientTape(watch_accessed_variables=False) as tape:
                for x in inputs:
                    tape.watch(x)
                out = as_matrix(self.bk._caller(ref())(inputs, output, None))
                scores = tf.gather(out, targets, axis=1, batch_dims=1)
            grads = tape.gradient(scores, inputs)
            return [tf.zeros_like(x) if g is None else g for g, x in zip(grads, inputs)]

        return tf.function(step, reduce_retracing=False)

    def grad_step(
        self,
        model: Any,
        layer: CamLayer,
        inputs: Sequence[T],
        targets: T | None,
        output: int | str = 0,
        model_kwargs: dict[str, Any] | None = None,
    ) -> tuple[T, T, T]:
        _no_kwargs(model_kwargs)
        a, da, scores = self._fn(model, layer, output, "grad")(list(inputs), targets)
        return a, da, scores

    def activations(
        self,
        model: Any,
        layer: CamLayer,
        inputs: Sequence[T],
        output: int | str = 0,
        model_kwargs: dict[str, Any] | None = None,
    ) -> T:
        _no_kwargs(model_kwargs)
        return self._fn(model, layer, output, "acts")(list(inputs))

    def guided_step(
        self,
        model: Any,
        inputs: Sequence[T],
        targets: T,
        output: int | str = 0,
        model_kwargs: dict[str, Any] | None = None,
    ) -> list[T]:
        _no_kwargs(model_kwargs)
        fn = self._fn(model, CamLayer("", None, ()), output, "guided")
        # The step is traced (and retraced) only while the ReLUs are swapped, so its graph is
        # always the guided one; the model's own attributes are restored right after.
        with _guided_relus(model):
            return list(fn(list(inputs), targets))


@tf.custom_gradient
def _guided_relu(x: T) -> Any:
    """ReLU whose gradient passes only positive gradients, where the input was positive."""
    y = tf.nn.relu(x)

    def grad(dy: T) -> T:
        return dy * tf.cast(dy > 0, dy.dtype) * tf.cast(x > 0, dy.dtype)

    return y, grad


def _is_relu(fn: Any) -> bool:
    return fn is not None and getattr(fn, "__name__", "") == "relu"


@contextlib.contextmanager
def _guided_relus(model: Any) -> Iterator[None]:
    """Swap, for the duration of the block, the ReLU activation of every layer that has one
    (``activation="relu"`` of Dense/Conv layers, ``Activation("relu")``) and the ``call`` of
    plain ``keras.layers.ReLU`` layers (no max value, slope or threshold) for a guided ReLU;
    restore the model's own attributes in a ``finally`` block."""
    swapped: list[tuple[Any, str, Any, bool]] = []  # (layer, attribute, own value, had its own)
    try:
        for la in all_layers(model):
            if _is_relu(getattr(la, "activation", None)):
                swapped.append((la, "activation", la.activation, True))
                la.activation = _guided_relu
            elif (
                isinstance(la, keras.layers.ReLU)
                and getattr(la, "max_value", None) is None
                and not getattr(la, "negative_slope", 0)
                and not getattr(la, "threshold", 0)
            ):
                swapped.append((la, "call", la.__dict__.get("call"), "call" in la.__dict__))
                la.call = _guided_relu
        yield
    finally:
        for la, attr, value, own in reversed(swapped):
            if not own:  # the class's own method shows through again
                object.__delattr__(la, attr)
            else:
                setattr(la, attr, value)


def _no_kwargs(model_kwargs: dict[str, Any] | None) -> None:
    if model_kwargs:
        raise XaikitValueError(
            "model_kwargs are not supported by the class-activation maps of Keras models (the "
            f"layer's sub-model takes the model's inputs only); got keys {sorted(model_kwargs)}"
        )
