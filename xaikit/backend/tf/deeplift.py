"""DeepLIFT with the Rescale rule (Shrikumar et al., 2017, https://arxiv.org/abs/1704.02685) for
Keras models: :func:`deeplift_step`, the backend step of ``bk.relevance.deeplift_step``.

A chunk of n rows and their n baseline rows run as one batch of 2n rows (the inputs first, then
the baselines) in one forward pass of a compiled step, and one backward pass from the inputs'
target scores gives the multipliers; the attributions are ``(x - baseline) * multipliers``.

While the step runs (and is traced), the nonlinear layers of the model, nested models included,
compute through a ``tf.custom_gradient`` rule, swapped in a ``try``/``finally`` as the
class-activation maps swap layer calls (:mod:`xaikit.backend.tf.cam`) and restored after:

* an elementwise activation ``y = f(a)``: the fused ``activation=`` of a Dense or convolution
  layer and of an ``Activation`` layer (every Keras activation but ``linear``, ``softmax``,
  ``log_softmax``, ``glu`` and ``sparsemax``, which are not elementwise), and the ``ReLU``,
  ``LeakyReLU``, ``ELU`` and ``PReLU`` layers: the gradient times the Rescale multiplier
  ``(f(a) - f(a0)) / (a - a0)``, the plain derivative where ``|a - a0| <``
  :data:`~xaikit.backend.facets.DEEPLIFT_EPS`;
* ``MaxPooling1D/2D/3D`` and ``GlobalMaxPooling1D/2D/3D``: ``max(y, y0) - y0`` routed through the
  input's argmax and ``y - max(y, y0)`` through the baseline's (the rule the torch step uses);
* every other layer keeps its gradient (recurrent layers too: their gates multiply).

A model without Keras layers (a ``tf.function``, a Python function) is refused: nothing of it
can be reached, and a nested ``tf.function``'s ops are not even seen by the search below. An
activation applied inside a custom layer's ``call`` (``tf.nn.relu``, ``keras.ops.relu``) cannot
be reached either. A ReLU-family op among them (ReLU, ReLU6,
leaky ReLU, ELU, SELU, softplus; the traced forward pass is searched for them) is refused,
naming the ops. Any other (a sigmoid or tanh, which recurrent layers' gates keep by design, a
GELU written out) keeps its plain gradient, and the completeness delta (``return_delta=True``)
then shows what the sum misses (and the runner warns where it exceeds its tolerance: an
``IncompleteMapWarning``, as for a ``keras.ops.maximum(z, 0)`` or ``tf.where`` ReLU in a ``Lambda``).
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from xaikit.backend.base import T
from xaikit.backend.facets import DEEPLIFT_EPS, DEEPLIFT_TIES, MAX_TIE_ROUNDS, check_baselines
from xaikit.backend.rows import Rows
from xaikit.backend.tf.cam import _call_attr, _restore
from xaikit.backend.tf.errors import ops_out_of_reach, out_of_reach
from xaikit.backend.tf.forms import model_form, refuse_layerless
from xaikit.backend.tf.layers import all_layers
from xaikit.backend.tf.steps import (
    Traced,
    cached_step,
    constants_key,
    input_grads,
    model_ref,
    scorer_of,
    step_store,
)

__all__ = ["EPS", "deeplift_layers", "deeplift_step", "max_rule", "rescale", "snap_ties"]

#: ``|x - x0|`` below which the plain derivative replaces the Rescale multiplier
EPS = DEEPLIFT_EPS

#: Keras activations that are not elementwise, or are the identity: no rule
_NOT_ELEMENTWISE = ("linear", "softmax", "log_softmax", "glu", "sparsemax")
#: layers that are an elementwise nonlinearity
_ACTIVATION_LAYERS = (keras.layers.ReLU, keras.layers.LeakyReLU, keras.layers.ELU, keras.layers.PReLU)
#: layers that are a max over windows, or over the spatial axes (the batch axis kept)
_MAX_LAYERS = (keras.layers.MaxPooling1D, keras.layers.MaxPooling2D, keras.layers.MaxPooling3D)
_GLOBAL_MAX_LAYERS = (
    keras.layers.GlobalMaxPooling1D,
    keras.layers.GlobalMaxPooling2D,
    keras.layers.GlobalMaxPooling3D,
)

#: the compiled steps per model: {(inputs, output, constant model arguments): step}
_STEPS: weakref.WeakKeyDictionary[Any, dict[tuple[Any, ...], Traced]] = step_store()


def _halves(t: T) -> tuple[T, T]:
    n = tf.shape(t)[0] // 2
    return t[:n], t[n:]


def _where_small(d: T) -> tuple[T, T]:
    """``(small, safe)``: where ``|d| < EPS``, and ``d`` with 1 there (a safe divisor)."""
    small = tf.abs(d) < tf.cast(EPS, d.dtype)
    return small, tf.where(small, tf.ones_like(d), d)


def _grads(out: T, variables: Any) -> Any:
    """A custom gradient's return: the input's gradient, and none for the variables the rule's
    function read (a PReLU's slopes)."""
    if variables:
        return out, [tf.zeros_like(v) for v in variables]
    return out


#: the name scope of the forward ops of the swapped-in rules (``ops_out_of_reach`` tells them
#: from the model's own)
_RULED = "xaikit_deeplift_rule"
#: op types of the activations a rule exists for; one outside :data:`_RULED` ran unreached
#: (sigmoid and tanh are left out: the gates of recurrent layers keep them, by design)
_RULE_OPS = frozenset({"Relu", "Relu6", "LeakyRelu", "Elu", "Selu", "Softplus"})


def _unruled(names: list[str], model: Any) -> str:
    return out_of_reach(
        "DeepLIFT (deeplift, deepliftshap) swaps a rule in for every activation of the model",
        "activation",
        names,
        model_form(model),
        "their plain gradients would make the attributions miss f(x) - f(baseline)",
        "Build the activations as activation= of Dense/Conv layers, Activation or ReLU/LeakyReLU/ELU "
        "layers, or use a method that needs no rules",
    )


def rescale(fn: Callable[[T], T]) -> Callable[[T], T]:
    """``fn`` (elementwise) on the 2n rows [inputs; baselines], whose gradient is the Rescale
    rule's for the inputs' rows and zero for the baselines'."""

    @tf.custom_gradient  # type: ignore[misc]
    def rule(a: T) -> Any:
        with tf.name_scope(_RULED):
            y = fn(a)

        def grad(dy: T, variables: Any = None) -> Any:
            (ax, a0), (yx, y0), (gx, g0) = _halves(a), _halves(y), _halves(dy)
            with tf.GradientTape() as tape:
                tape.watch(ax)
                own = fn(ax)
            plain = tape.gradient(own, ax, output_gradients=gx)
            small, safe = _where_small(ax - a0)
            gx = tf.where(small, plain, gx * (yx - y0) / safe)
            return _grads(tf.concat([gx, tf.zeros_like(g0)], 0), variables)

        return y, grad

    return rule  # type: ignore[no-any-return]


def snap_ties(fn: Callable[[T], T], a: T, y: T, rounds: int | None = None, axes: Any = None) -> T:
    """``a`` with every value within ``DEEPLIFT_TIES`` (of its row's largest ``|a|``) of the
    maximum ``y`` of a window it belongs to raised to that maximum, so that near-ties float
    rounding alone tells apart become exact ties, broken by the max's own gradient (the first
    position of a max-pooling window; a global max shares them), as in torch
    (:func:`xaikit.backend.torch.deeplift.snap_ties`). A global max over ``axes`` compares with
    its maximum directly; a pooling window of ``rounds`` values is peeled ``rounds`` times."""
    rank = len(a.shape)
    scale = tf.reduce_max(tf.abs(tf.reshape(a, (tf.shape(a)[0], -1))), axis=1)
    if axes is not None:
        top = tf.reduce_max(a, axis=axes, keepdims=True)
        tol = DEEPLIFT_TIES * tf.reshape(scale, [-1] + [1] * (rank - 1))
        return tf.where(a >= top - tol, top, a)
    tol = DEEPLIFT_TIES * tf.reshape(scale, [-1] + [1] * (len(y.shape) - 1))
    low = tf.reduce_min(a) - 1  # below every value: a masked position is never a maximum again
    masked, snapped = a, a
    for _ in range(min(int(rounds or 1), MAX_TIE_ROUNDS)):
        with tf.GradientTape(persistent=True) as tape:
            tape.watch(masked)
            found = fn(masked)
        weight = tf.cast((found >= y - tol) & (found > low), a.dtype)
        count = tape.gradient(found, masked, output_gradients=weight)
        value = tape.gradient(found, masked, output_gradients=weight * y)
        del tape
        hit = count > 0
        snapped = tf.where(hit, value / tf.where(hit, count, tf.ones_like(count)), snapped)
        masked = tf.where(hit, tf.fill(tf.shape(a), low), masked)
    return snapped


def max_rule(rounds: int | None = None, axes: Any = None) -> Callable[[Callable[[T], T]], Callable[[T], T]]:
    """The rule of a max that keeps the batch axis (a pooling window of ``rounds`` values, or a
    global max over ``axes``): ``fn`` on the 2n rows [inputs; baselines], whose gradient routes
    ``max(y, y0) - y0`` through the input's argmax and ``y - max(y, y0)`` through the
    baseline's (near-ties made exact first: :func:`snap_ties`), divided by ``a - a0`` (the plain
    gradient where tiny); zero for the baselines' rows."""

    def make(fn: Callable[[T], T]) -> Callable[[T], T]:
        @tf.custom_gradient  # type: ignore[misc]
        def rule(a: T) -> Any:
            y = fn(a)

            def grad(dy: T, variables: Any = None) -> Any:
                snapped = snap_ties(fn, a, y, rounds, axes)
                (sx, s0), (ax, a0), (yx, y0), (gx, _g0) = (
                    _halves(snapped),
                    _halves(a),
                    _halves(y),
                    _halves(dy),
                )
                top = tf.maximum(yx, y0)
                with tf.GradientTape(persistent=True) as tape:
                    tape.watch(sx)
                    tape.watch(s0)
                    px, p0 = fn(sx), fn(s0)
                routed = tape.gradient(px, sx, output_gradients=gx * (top - y0))
                routed += tape.gradient(p0, s0, output_gradients=gx * (yx - top))
                plain = tape.gradient(px, sx, output_gradients=gx)
                del tape
                small, safe = _where_small(ax - a0)
                gx = tf.where(small, plain, routed / safe)
                return _grads(tf.concat([gx, tf.zeros_like(a0)], 0), variables)

            return y, grad

        return rule  # type: ignore[no-any-return]

    return make


def _elementwise(fn: Any) -> bool:
    return callable(fn) and getattr(fn, "__name__", "") not in _NOT_ELEMENTWISE


Rule = Callable[[Callable[[T], T]], Callable[[T], T]]


def _wrapped(own_call: Any, rule: Callable[[T], Rule]) -> Any:
    """A layer ``call`` that runs the layer's own call on its first argument through the rule
    ``rule(inputs)`` gives."""

    def call(inputs: T, *args: Any, **kwargs: Any) -> Any:
        return rule(inputs)(lambda t: own_call(t, *args, **kwargs))(inputs)

    return call


def _rule_of(layer: Any) -> Callable[[T], Rule] | None:
    """The rule for a layer's ``call`` (given its input), or None: its activation, if any."""
    if isinstance(layer, _ACTIVATION_LAYERS):
        return lambda _: rescale
    if isinstance(layer, _GLOBAL_MAX_LAYERS):
        first = getattr(layer, "data_format", "channels_last") == "channels_first"

        def global_axes(t: T) -> Rule:
            rank = len(t.shape)
            return max_rule(axes=list(range(2, rank)) if first else list(range(1, rank - 1)))

        return global_axes
    if isinstance(layer, _MAX_LAYERS):
        window = int(np.prod(layer.pool_size))
        return lambda _: max_rule(rounds=window)
    return None


@contextlib.contextmanager
def deeplift_layers(model: Any) -> Iterator[int]:
    """Swap, for the duration of the block, the nonlinear layers' calls and activations for the
    DeepLIFT rules (see the module), and yield how many were swapped; restore the model's own
    attributes in a ``finally`` block."""
    swapped: list[tuple[Any, str, Any, bool]] = []  # (layer, attribute, own value, had its own)
    try:
        for la in all_layers(model):
            rule = _rule_of(la)
            if rule is not None:
                attr = _call_attr(la)
                swapped.append((la, attr, la.__dict__.get(attr), attr in la.__dict__))
                object.__setattr__(la, attr, _wrapped(getattr(la, attr), rule))
                continue
            act = getattr(la, "activation", None)
            if act is not None and _elementwise(act) and not isinstance(la, keras.layers.RNN):
                swapped.append((la, "activation", la.__dict__.get("activation"), "activation" in la.__dict__))
                object.__setattr__(la, "activation", rescale(act))
        yield len(swapped)
    finally:
        _restore(swapped)


def _step(
    bk: Any, model: Any, n_inputs: int, output: int | str, static: dict[str, Any], target: Any = None
) -> Traced:
    """The compiled DeepLIFT step of ``model``, made once per model, number of inputs, output,
    constant model arguments and target kind (a target object's tensors are an argument),
    traced (while the rules are swapped in) once per shape."""
    key = (n_inputs, output, *constants_key(static, target))
    return cached_step(_STEPS, model, key, lambda: _traced(bk, model, output, static, target))


def _traced(bk: Any, model: Any, output: int | str, static: dict[str, Any], target: Any) -> Traced:
    """A new DeepLIFT step of ``model`` (see :func:`_step`)."""
    holder = model_ref(model)
    scorer = scorer_of(target)

    def body(
        inputs: list[T], baselines: list[T], targets: T, kw: dict[str, Any], extra: dict[str, T]
    ) -> tuple[list[T], T, T]:
        n = int(inputs[0].shape[0])
        graph = tf.compat.v1.get_default_graph()  # the step's graph, being traced
        first = len(graph.get_operations())
        with tf.GradientTape(watch_accessed_variables=False) as tape:
            for x in inputs:
                tape.watch(x)
            rows = [tf.concat([x, tf.cast(b, x.dtype)], 0) for x, b in zip(inputs, baselines)]
            raw = bk._call(holder(), rows, {**kw, **static})
            unruled = ops_out_of_reach(graph.get_operations()[first:], _RULE_OPS, _RULED)
            if unruled:  # an error for the caller (never attributions that miss the delta unsaid)
                step.fail(_unruled(unruled, holder()))
            picked, _ = bk._scores_of(raw, tf.concat([targets, targets], 0), output, 2 * n, scorer, extra)
            scores = picked[:n]
        grads = input_grads(step, holder(), tape.gradient(scores, inputs), inputs)
        attributions = [(x - tf.cast(b, x.dtype)) * g for x, b, g in zip(inputs, baselines, grads)]
        return attributions, scores, picked[n:]

    step = Traced(body, bk.trace_counts, bk.trace_counts.key(model, "deeplift"))
    return step


def deeplift_step(bk: Any, rows: Rows, baselines: Sequence[T]) -> tuple[list[T], T, T]:
    """DeepLIFT (Rescale rule) of n rows of a Keras model against one baseline row each, in
    one compiled step (see :meth:`xaikit.backend.facets.RelevanceFacet.deeplift_step`)."""
    from xaikit.backend.tf.lrp import refuse_exported

    model, inputs, target = rows.model, rows.inputs, rows.target
    refuse_exported(model, "DeepLIFT (deeplift, deepliftshap)")  # no layers to give the rules to
    # a tf.function or Python function: its activations get no rule (a nested tf.function's ops are
    # not even seen by the search below), and the map would be Input x Gradient without a word
    refuse_layerless(
        model, "DeepLIFT (deeplift, deepliftshap)", "each activation and max pooling gets a rule"
    )
    check_baselines(inputs, baselines)
    tensors, static, extra = bk._step_args(rows.model_kwargs, target)
    step = _step(bk, model, len(inputs), rows.output, static, target)
    # The step is traced (and retraced) only while the rules are swapped in, so its graph is
    # always DeepLIFT's; the model's own attributes are restored right after.
    with deeplift_layers(model):
        attributions, scores, base = step.run(list(inputs), list(baselines), rows.targets, tensors, extra)
    return list(attributions), scores, base
