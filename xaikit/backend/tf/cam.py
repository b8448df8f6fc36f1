"""TensorFlow / Keras layer facet of the class-activation maps (``get_backend(model).cam``).

The chosen layer's output is captured while the whole model runs: inside the traced step, the
layer instance's ``call`` is swapped (``try``/``finally``) for a wrapper that hands the model
the layer's own output and records it; the tape watches that tensor, so the gradient is taken
with respect to the tensor that really flows into the explained output. This works the same for
every form of Keras model: built in memory, saved to ``.keras`` and loaded (a loaded Sequential's
``layer.output`` belongs to another build of its graph than ``model.outputs``, so a sub-model
``keras.Model(model.inputs, [layer.output, model.output])`` gave a score that does not depend
on the layer, and all-zero maps), cloned, or subclassed (no ``model.inputs`` at all). Layers
nested inside a sub-model can be chosen too. A gradient that does not reach the layer is an
error, never zeros. The steps are cached per model, layer, output and constant model
arguments (:class:`~xaikit.backend.tf.steps.Traced`); the model itself is left as it was.
For stacked targets the wrapper also gathers the layer's output to the targets' rows
(``spread``, step ``"cam_spread"``): the layers below the layer run once per image, whatever the
form of the model; one whose layers above read a tensor from below the layer cannot take the
spread rows and runs the repeated rows (see :meth:`Cam.grad_step`).

Guided backpropagation swaps, inside a ``try``/``finally``, the ReLU activation of each layer
that has one (``activation="relu"``, ``Activation("relu")``, plain ``ReLU()`` layers, nested
sub-models included) for a ``tf.custom_gradient`` guided ReLU, runs its step, and puts the
model's own activations back: the model is the same object with the same attributes after.
Deconvnet (:meth:`Cam.guided_step` with ``mode="deconvnet"``, for the rules family) swaps the
same ReLUs for one whose backward is the ReLU of the gradient, in a step of its own.
A ReLU applied inside a custom layer's ``call`` (``tf.nn.relu``, ``keras.ops.relu``) cannot be
reached and keeps its plain gradient. Loaded the first time a CAM method runs.

An exported SavedModel (``keras.layers.TFSMLayer``, ``tf.saved_model.load``) has no layers to
capture: the class-activation maps refuse it and name the methods that work on it.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import keras
import tensorflow as tf

from xaikit.backend.base import T
from xaikit.backend.facets import CamFacet, CamLayer
from xaikit.backend.outputs import pick_output
from xaikit.backend.rows import Rows
from xaikit.backend.tf.errors import ops_out_of_reach, out_of_reach, unreachable_layer
from xaikit.backend.tf.forms import NO_LAYER_METHODS, exported_artifact, model_form
from xaikit.backend.tf.layers import all_layers, sublayers
from xaikit.backend.tf.steps import Traced, constants_key, input_grads, scorer_of, signature, step_store
from xaikit.errors import XaikitError, XaikitTypeError, XaikitValueError, describe


def _spatial(shape: tuple[Any, ...] | None, channel_first: bool) -> bool:
    if shape is None or len(shape) != 4:
        return False
    h, w = (shape[2], shape[3]) if channel_first else (shape[1], shape[2])
    return h is None or w is None or int(h) * int(w) > 1


def _shape(out: Any) -> tuple[int | None, ...] | None:
    """The shape of a captured output that is one tensor, else None."""
    if not tf.is_tensor(out):
        return None
    return tuple(None if d is None else int(d) for d in out.shape)


class Cam(CamFacet):
    """The CAM facet of the TensorFlow backend."""

    def __init__(self, bk: Any) -> None:
        super().__init__(bk)
        self._steps: weakref.WeakKeyDictionary[Any, dict[tuple[Any, ...], Traced]] = step_store()
        self._resolved: weakref.WeakKeyDictionary[Any, dict[tuple[Any, ...], CamLayer]] = step_store()

    def channel_first(self, model: Any) -> bool:
        return bool(self.bk.model_layout(model).channel_first)

    # ---- which layer -----------------------------------------------------------------------
    def resolve(
        self,
        model: Any,
        layer: Any,
        inputs: Sequence[T],
        model_kwargs: dict[str, Any] | None,
        output: int | str = 0,
    ) -> CamLayer:
        """The layer (see :meth:`CamFacet.resolve`), found by running the model on one row with
        the layers' calls captured; cached per model, layer and input signature, so a repeated
        call does not run the model again."""
        top = _top_layers(model)
        key = (
            layer if layer is None or isinstance(layer, str) else ("object", id(layer)),
            signature((list(inputs), dict(model_kwargs or {}))),
            output if layer is None else None,
        )
        cache = self._resolved.setdefault(model, {})
        if key not in cache:
            cache[key] = self._resolve(model, top, layer, inputs, model_kwargs, output)
        return cache[key]

    def _resolve(
        self,
        model: Any,
        top: list[Any],
        layer: Any,
        inputs: Sequence[T],
        model_kwargs: dict[str, Any] | None,
        output: int | str = 0,
    ) -> CamLayer:
        first = self.channel_first(model)
        if layer is None:
            outs, order, raw = self._probe(model, top, inputs, model_kwargs)
            # the last top-level layers to finish with a spatial output, latest first
            spatial = [i for i in reversed(order) if _spatial(_shape(outs[i]), first)]
            if len(spatial) > 1 and isinstance(raw, (dict, list, tuple)):
                # several outputs (a second head): the last spatial layer that the explained
                # output depends on, not one that feeds only another output
                spatial = self._on_path(model, top, spatial, inputs, model_kwargs, output)
            if spatial:
                i = spatial[0]
                return CamLayer(str(top[i].name), top[i], _shape(outs[i])[1:], raw)  # type: ignore[index]
            raise XaikitValueError(
                "layer=None looks for the last layer with a spatial (B, h, w, C) output (h * w > 1) "
                "and the model has none: pass layer= (a layer name of model.layers, with reshape= "
                "for a token output)"
            )
        chosen = _find(model, top, layer)
        outs, _, raw = self._probe(model, [chosen], inputs, model_kwargs)
        if outs[0] is None:
            raise XaikitValueError(
                f"layer {chosen.name!r} was not called by the forward pass of this {model_form(model)} "
                "(an input layer, or a layer the model's call does not use): choose a layer that runs"
            )
        shape = _shape(outs[0])
        if shape is None:
            raise XaikitValueError(
                f"layer {chosen.name!r} must output one tensor; it gives {describe(outs[0])}"
            )
        return CamLayer(str(chosen.name), chosen, shape[1:], raw)

    def _on_path(
        self,
        model: Any,
        top: list[Any],
        candidates: list[int],
        inputs: Sequence[T],
        model_kwargs: dict[str, Any] | None,
        output: int | str,
    ) -> list[int]:
        """The indices of ``candidates`` (into ``top``, latest first) whose output ``output`` of
        the model depends on, in the same order, found by one pass under a tape on the probe's
        row; all of them when none is (the gradient CAMs then say the layer is off the path)."""
        layers = [top[i] for i in candidates]
        xs = [tf.convert_to_tensor(x) for x in inputs]
        with tf.GradientTape() as tape:
            for x in xs:
                if x.dtype.is_floating:
                    tape.watch(x)
            with _capture(layers) as seen:
                raw = self.bk._call(model, xs, model_kwargs)
            try:
                score = tf.reduce_sum(tf.cast(pick_output(raw, output), tf.float32))
            except XaikitError:
                return candidates  # the call's own output check says what is wrong
        outs = [s.outputs[-1] if s.outputs else None for s in seen]
        live = [(i, o) for i, o in zip(candidates, outs) if isinstance(o, tf.Tensor)]
        grads = tape.gradient(score, [o for _, o in live], unconnected_gradients=tf.UnconnectedGradients.NONE)
        reached = [i for (i, _), g in zip(live, grads) if g is not None]
        return reached or candidates

    def _probe(
        self, model: Any, layers: list[Any], inputs: Sequence[T], model_kwargs: dict[str, Any] | None
    ) -> tuple[list[Any], list[int], Any]:
        """The output of each layer (its last call's) for one forward pass of ``inputs`` (one
        row, eagerly), the order (indices into ``layers``) in which the layers finished and what
        the model returned."""
        with _capture(layers) as seen:
            raw = self.bk._call(model, list(inputs), model_kwargs)
        return [s.outputs[-1] if s.outputs else None for s in seen], seen.order, raw

    # ---- the steps ---------------------------------------------------------------------------
    def _step(
        self,
        model: Any,
        layer: CamLayer | None,
        output: int | str,
        kind: str,
        static: dict[str, Any],
        target: Any = None,
    ) -> Traced:
        """The compiled step ``kind`` of ``model``, made once per layer, output, constant model
        arguments and target kind (``target.static``: a target object's per-sample tensors are
        an argument of the step, so new masks or references do not retrace it)."""
        table = self._steps.setdefault(model, {})
        layer_id = None if layer is None else (layer.name, id(layer.obj))
        key = (kind, layer_id, output, *constants_key(static, target))
        if key in table:
            return table[key]
        bk = self.bk
        ref = weakref.ref(model)  # the step is cached under the model (weakly): it must not hold it
        layer_ref = None if layer is None else weakref.ref(layer.obj)
        name = "" if layer is None else layer.name
        scorer = scorer_of(target)

        def scores_of(out: Any, targets: T | None, extra: dict[str, T], rows: int) -> T:
            """The rows' target scores of what the model returned."""
            return bk._scores_of(out, targets, output, rows, scorer, extra)[0]

        def captured(
            inputs: list[T], kw: dict[str, Any], tape: Any, spread: T | None = None
        ) -> tuple[Any, T]:
            """The model's output and the layer's output (its last call's) in one pass; with
            ``spread``, the layer's output rows gathered by it (and the rest of the model run
            on those)."""
            m, la = ref(), layer_ref() if layer_ref is not None else None
            spreading = None if spread is None else (lambda t: tf.gather(t, spread))
            with _capture([la], tape, spreading) as seen:
                out = bk._call(m, inputs, {**kw, **static})
            if not seen[0].outputs:  # resolve() saw it run: the model takes another path here
                step.fail(f"layer {name!r} was not called by the forward pass of this {model_form(m)}")
                rows = int(inputs[0].shape[0])
                return out, tf.zeros((rows, *(d or 1 for d in layer.shape)))  # type: ignore[union-attr]
            if spread is not None and len(seen[0].outputs) > 1:
                step.fail(f"layer {name!r} runs twice in one pass: its rows cannot be spread")
            return out, seen[0].outputs[-1]

        def layer_grad(tape: Any, a: T, scores: T) -> tuple[T, T, T]:
            """``(A, dA, scores)`` of a pass; a gradient that does not reach the layer fails the
            step (an error for the caller, never a map of zeros)."""
            da = tape.gradient(scores, a)
            if da is None:
                step.fail(unreachable_layer(ref(), name, output))
                da = tf.zeros_like(a)
            return _working(a), _working(da), scores

        def grad(
            inputs: list[T], targets: T | None, kw: dict[str, Any], extra: dict[str, T]
        ) -> tuple[T, T, T]:
            with tf.GradientTape(watch_accessed_variables=False) as tape:  # records from A on
                out, a = captured(inputs, kw, tape)
                scores = scores_of(out, targets, extra, int(inputs[0].shape[0]))
            return layer_grad(tape, a, scores)

        def spread_grad(
            inputs: list[T], targets: T | None, spread: T, kw: dict[str, Any], extra: dict[str, T]
        ) -> tuple[T, T, T]:
            rows = int(spread.shape[0])
            with tf.GradientTape(watch_accessed_variables=False) as tape:
                out, a = captured(inputs, kw, tape, spread)
                scores = scores_of(out, targets, extra, rows)
            if int(a.shape[0]) != rows or scores.shape[:1] != (rows,):
                step.fail(f"the model's rows above layer {name!r} do not follow the layer's rows")
                return tf.zeros((rows, *a.shape[1:])), tf.zeros((rows, *a.shape[1:])), tf.zeros((rows,))
            return layer_grad(tape, a, scores)

        def acts(inputs: list[T], kw: dict[str, Any]) -> T:
            return _working(captured(inputs, kw, None)[1])

        def guided(inputs: list[T], targets: T, kw: dict[str, Any], extra: dict[str, T]) -> list[T]:
            graph = tf.compat.v1.get_default_graph()  # the step's graph, being traced
            first = len(graph.get_operations())
            with tf.GradientTape(watch_accessed_variables=False) as tape:
                for x in inputs:
                    tape.watch(x)
                out = bk._call(ref(), inputs, {**kw, **static})
                scores = scores_of(out, targets, extra, int(inputs[0].shape[0]))
            plain = ops_out_of_reach(graph.get_operations()[first:], ("Relu",), _MODIFIED)
            if plain:  # an error for the caller (never a map modified only in part)
                step.fail(_unreached_relus(kind, plain, ref()))
            return input_grads(step, ref(), tape.gradient(scores, inputs), inputs)

        bodies: dict[str, Callable[..., Any]] = {
            "cam_grad": grad, "cam_spread": spread_grad, "cam_acts": acts, "guided": guided,
            "deconvnet": guided,
        }  # fmt: skip
        step = Traced(bodies[kind], bk.trace_counts, bk.trace_counts.key(model, kind))
        table[key] = step
        return step

    def grad_step(self, rows: Rows, layer: CamLayer, spread: T | None = None) -> tuple[T, T, T]:
        """See :meth:`CamFacet.grad_step`. With ``spread`` (stacked targets) the layer's captured
        output is gathered by it inside the swapped ``call``, so the layers above it run on the
        spread rows, whatever the form of the model (functional, Sequential, loaded, subclassed;
        a head model ``keras.Model(layer.output, model.outputs)`` would miss the loaded and
        subclassed forms, see above). A model whose layers above read a tensor from below the
        layer (a skip connection around it) or the input's batch size does not take the spread
        rows: its step fails, and the caller runs the repeated rows instead (correct, slower)."""
        model, output, target = rows.model, rows.output, rows.target
        tensors, static, extra = self.bk._step_args(rows.model_kwargs, target)
        if spread is not None:
            step = self._step(model, layer, output, "cam_spread", static, target)
            a, da, scores = step.run(list(rows.inputs), rows.targets, spread, tensors, extra)
            return a, da, scores
        a, da, scores = self._step(model, layer, output, "cam_grad", static, target).run(
            list(rows.inputs), rows.targets, tensors, extra
        )
        return a, da, scores

    def activations(
        self,
        model: Any,
        layer: CamLayer,
        inputs: Sequence[T],
        output: int | str = 0,
        model_kwargs: dict[str, Any] | None = None,
    ) -> T:
        tensors, static = self.bk._split(model_kwargs)
        return self._step(model, layer, 0, "cam_acts", static).run(list(inputs), tensors)

    def guided_step(self, rows: Rows, mode: str = "guided") -> list[T]:
        """Input gradients with every reachable ReLU's backward modified: ``mode="guided"``
        (:meth:`CamFacet.guided_step`: positive gradients where the input was positive) or
        ``"deconvnet"`` (the ReLU of the gradient, for :func:`xaikit.backend.tf.lrp.modified_step`);
        a bound ``rows.target`` object scores the rows (sample indices)."""
        model, target = rows.model, rows.target
        tensors, static, extra = self.bk._step_args(rows.model_kwargs, target)
        step = self._step(model, None, rows.output, mode, static, target)
        # The step is traced (and retraced) only while the ReLUs are swapped, so its graph is
        # always the modified one; the model's own attributes are restored right after.
        with _modified_relus(model, _RELUS[mode]):
            return list(step.run(list(rows.inputs), rows.targets, tensors, extra))


def _working(t: T) -> T:
    """A half-precision layer output in float32 (the maps are computed in float32 or more)."""
    return tf.cast(t, tf.float32) if t.dtype in (tf.float16, tf.bfloat16) else t


def _top_layers(model: Any) -> list[Any]:
    """The layers of a Keras model (``model.layers``), or a clear refusal for a form whose
    layers cannot be reached (an exported SavedModel, a function, a layer without sub-layers)."""
    if exported_artifact(model):
        raise XaikitTypeError(
            f"class-activation maps read an inner layer's output, and a {model_form(model)} has no "
            "inner layers to read: model.export() keeps the model's computation as a TensorFlow "
            "graph, not its Keras layers. For a class-activation map explain the Keras model itself "
            "(keras.models.load_model('model.keras'), or the model in memory); the methods that need "
            f"no layer work on the exported model: {', '.join(NO_LAYER_METHODS)}"
        )
    layers = sublayers(model) if isinstance(model, keras.layers.Layer) else []
    if not layers:
        raise XaikitTypeError(
            f"class-activation maps need a Keras model with layers (to read an inner layer's output); "
            f"got a {model_form(model)}. Pass the Keras model itself, or use a method that needs no "
            f"layer: {', '.join(NO_LAYER_METHODS)}"
        )
    return layers


def _attribute(model: Any, path: str) -> Any:
    """What the dotted attribute path ``path`` reaches from ``model`` (``"block.conv"``; a
    number indexes a list of layers: ``"blocks.0"``), or None."""
    obj = model
    for part in path.split("."):
        if part.isdigit() and isinstance(obj, (list, tuple)):
            index = int(part)
            obj = obj[index] if index < len(obj) else None
        elif part.isidentifier():
            try:  # a Keras property (output, input) may raise more than AttributeError
                obj = getattr(obj, part, None)
            except Exception:
                return None
        else:
            return None
        if obj is None:
            return None
    return obj


def _find(model: Any, top: list[Any], layer: Any) -> Any:
    """The layer ``layer`` names (a layer name: top-level layers first, then the layers nested
    in sub-models; else the attribute path of a subclassed model's layer, ``"conv"``,
    ``"blocks.0"``), or the layer object itself."""
    nested = all_layers(model)
    if isinstance(layer, str):
        found = [la for la in top if la.name == layer] or [la for la in nested if la.name == layer]
        if not found:
            attribute = _attribute(model, layer)
            if attribute is not None and any(la is attribute for la in nested):
                return attribute
            raise XaikitValueError(
                f"layer {layer!r} is not a layer of the model; layer must be a layer name of "
                f"model.layers (or of a sub-model's layers), e.g. {[la.name for la in top][-4:]}, the "
                "name of an attribute holding one (a subclassed model's self.conv: 'conv'; "
                "'blocks.0' for a list), or None (the last layer with a spatial output)"
            )
        if len({id(la) for la in found}) > 1:
            raise XaikitValueError(
                f"layer {layer!r} names {len(found)} layers nested in different sub-models; pass the "
                "layer object itself"
            )
        return found[0]
    if any(la is layer for la in nested):
        return layer
    if isinstance(layer, keras.layers.Layer):
        raise XaikitValueError(
            f"layer must be a layer of the model (model.layers, or a layer nested in one of them); "
            f"got the layer {layer.name!r}, which is not one"
        )
    raise XaikitTypeError(
        f"layer must be a layer name (str), a layer of the model or None; got {describe(layer)}"
    )


class _Seen:
    """What one captured layer gave: its outputs, one per call, in call order."""

    def __init__(self) -> None:
        self.outputs: list[Any] = []


class _Capture(list):  # type: ignore[type-arg]
    """One :class:`_Seen` per captured layer, and the order in which the layers finished."""

    def __init__(self, n: int) -> None:
        super().__init__(_Seen() for _ in range(n))
        self.order: list[int] = []


def _call_attr(layer: Any) -> str:
    """The method Keras runs for a layer: ``quantized_call`` for a quantized one, else ``call``."""
    return "quantized_call" if getattr(layer, "quantization_mode", None) is not None else "call"


@contextlib.contextmanager
def _capture(
    layers: Sequence[Any], tape: Any = None, transform: Callable[[T], T] | None = None
) -> Iterator[_Capture]:
    """Swap, for the duration of the block, the ``call`` of each layer for a wrapper that runs
    the layer's own ``call``, records its output (watched by ``tape`` when one is given) and
    hands it on unchanged (``transform(output)`` when one is given); restore the layers' own attributes in a ``finally`` block. Keras looks
    ``self.call`` up on every call, for every form of model (functional, Sequential, loaded,
    cloned, subclassed)."""
    seen = _Capture(len(layers))
    swapped: list[tuple[Any, str, Any, bool]] = []  # (layer, attribute, own value, had its own)

    def wrap(i: int, own_call: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            out = own_call(*args, **kwargs)
            if transform is not None:
                out = transform(out)
            if tape is not None and tf.is_tensor(out) and out.dtype.is_floating:
                tape.watch(out)
            seen[i].outputs.append(out)
            seen.order.append(i)
            return out

        return call

    try:
        for i, la in enumerate(layers):
            attr = _call_attr(la)
            swapped.append((la, attr, la.__dict__.get(attr), attr in la.__dict__))
            object.__setattr__(la, attr, wrap(i, getattr(la, attr)))
        yield seen
    finally:
        _restore(swapped)


def _restore(swapped: list[tuple[Any, str, Any, bool]]) -> None:
    """Put back each ``(layer, attribute, own value, had its own)`` swapped, the last first: a
    layer's own value, or the class's attribute showing through again."""
    for la, attr, value, own in reversed(swapped):
        if not own:  # the class's own method shows through again
            object.__delattr__(la, attr)
        else:
            object.__setattr__(la, attr, value)


#: the name of the forward ReLU op of the swapped-in ReLUs (``ops_out_of_reach`` tells them
#: from the model's own)
_MODIFIED = "xaikit_modified_relu"


def _unreached_relus(mode: str, plain: list[str], model: Any) -> str:
    name = "guided backprop (guided_backprop, guided_gradcam)" if mode == "guided" else "deconvnet"
    return out_of_reach(
        f"{name} modifies the backward pass of every ReLU of the model",
        "ReLU",
        plain,
        model_form(model),
        "its map would be modified only in part",
        "Build the model's ReLUs as activation='relu', Activation('relu') or ReLU() layers, or use a "
        "method that does not modify the backward pass",
    )


@tf.custom_gradient
def _guided_relu(x: T) -> Any:
    """ReLU whose gradient passes only positive gradients, where the input was positive."""
    y = tf.nn.relu(x, name=_MODIFIED)

    def grad(dy: T) -> T:
        return dy * tf.cast(dy > 0, dy.dtype) * tf.cast(x > 0, dy.dtype)

    return y, grad


@tf.custom_gradient
def _deconv_relu(x: T) -> Any:
    """ReLU whose gradient is the ReLU of the gradient, whatever the input (deconvnet)."""

    def grad(dy: T) -> T:
        return tf.nn.relu(dy)

    return tf.nn.relu(x, name=_MODIFIED), grad


#: the ReLU that each mode of :meth:`Cam.guided_step` swaps in
_RELUS = {"guided": _guided_relu, "deconvnet": _deconv_relu}


def _is_relu(fn: Any) -> bool:
    return fn is not None and getattr(fn, "__name__", "") == "relu"


def _relu_attr(layer: Any) -> str | None:
    """What makes ``layer`` a ReLU that can be swapped: ``"activation"`` (``activation="relu"``
    of a Dense/Conv layer, ``Activation("relu")``), ``"call"`` (a plain ``keras.layers.ReLU``:
    no max value, slope or threshold), or None."""
    if _is_relu(getattr(layer, "activation", None)):
        return "activation"
    if (
        isinstance(layer, keras.layers.ReLU)
        and getattr(layer, "max_value", None) is None
        and not getattr(layer, "negative_slope", 0)
        and not getattr(layer, "threshold", 0)
    ):
        return "call"
    return None


def _relu_layers(model: Any) -> list[tuple[Any, str]]:
    """``(layer, attribute)`` of every ReLU of the model that can be swapped (nested models too)."""
    return [(la, attr) for la in all_layers(model) if (attr := _relu_attr(la)) is not None]


@contextlib.contextmanager
def _modified_relus(model: Any, relu: Any) -> Iterator[None]:
    """Swap, for the duration of the block, every ReLU of :func:`_relu_layers` for ``relu``
    (the activation, or a plain ReLU layer's ``call``); restore the model's own attributes in a
    ``finally`` block."""
    swapped: list[tuple[Any, str, Any, bool]] = []  # (layer, attribute, own value, had its own)
    try:
        for la, attr in _relu_layers(model):
            swapped.append((la, attr, la.__dict__.get(attr), attr in la.__dict__))
            setattr(la, attr, relu)
        yield
    finally:
        _restore(swapped)


def _guided_relus(model: Any) -> contextlib.AbstractContextManager[None]:
    """:func:`_modified_relus` with the guided ReLU."""
    return _modified_relus(model, _guided_relu)
