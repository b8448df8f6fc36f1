"""LRP, guided backprop and deconvnet on Keras models (TensorFlow): the steps of the relevance
facet (:class:`~xaikit.backend.facets.RelevanceFacet`, through :mod:`xaikit.backend.tf.relevance`).

LRP runs one backward pass whose "gradient" at each tensor ``a`` is its relevance over its
value (``R = a * g``, see :mod:`xaikit.xai.rules.spec`). Inside the traced step, the ``call``
of each layer that has a rule is swapped (``try``/``finally``, as the class-activation maps
capture a layer: :mod:`xaikit.backend.tf.cam`) for a wrapper that runs the layer's own call and
gives its output a ``tf.custom_gradient`` backward, the rule's (which rule each layer gets, and
which BatchNorms merge: :mod:`xaikit.backend.tf.lrp_plan`):

* convolutions (Conv1D/2D/3D, their transposes, DepthwiseConv1D/2D, SeparableConv1D/2D as a
  depthwise then a pointwise map) and Dense: the rule on ``z = W x + b`` computed with the
  layer's own operation and configuration (:mod:`xaikit.backend.tf.lrp_linear`); a fused
  ``activation=`` is taken out of the layer's call while it runs, the rule reads the
  pre-activation ``z``, and the activation then passes relevance like an activation layer;
* activation layers (Activation, ReLU, LeakyReLU, PReLU, ELU) and fused activations:
  ``pass``, ``g_x = g_y * y / x`` (nothing where ``|x| <= 1e-12``); a ReLU, leaky ReLU, PReLU
  or linear activation keeps its plain gradient, which is that exactly; a softmax (layer,
  ``Activation`` or fused) keeps its plain gradient too, torch's softmax rule;
* BatchNormalization: merged into the convolution or dense layer whose output it normalizes
  when the composite canonizes (the pair must be visible in a Sequential's layer order or a
  Functional graph, the layer's output must feed only the BatchNorm, and the tensors must be
  the same at run time), computed on the fly, the model's weights untouched; else its own rule
  (``pass`` by default);
* ``norm`` / ``epsilon`` on a layer without weights (average pooling by default, max pooling)
  or an unmerged BatchNorm: the gradient at the output scaled by ``y / stab(y)``, then the
  layer's own backward; ``norm`` on a convolution or dense layer is the epsilon rule;
* Multiply (a gate, e.g. squeeze-excitation): every input but the largest gets a stopped
  gradient, so the relevance goes to the gated signal; inputs of the same largest size (a GLU's
  ``a * sigmoid(b)``) share it evenly.

Everything else (sums, concatenation, reshapes, padding) keeps its plain gradient, which is
LRP-0 in this convention. A rule that gives the input's relevance directly (flat, w-square,
z^B) applies only to a layer that reads a model input: its relevance is kept aside and added to
that input's ``x * g``; on another layer the step is refused, naming the layer. The model is the
same object with the same attributes, weights and statistics after every call, also after an
error. The steps are cached per model, composite, output and constant model arguments; the
swapped calls exist only while a step is traced, so no other step sees them.

Guided backprop and deconvnet delegate to :meth:`xaikit.backend.tf.cam.Cam.guided_step`: deconvnet
(``mode="deconvnet"``) is the same swap of ReLUs with the ReLU of the gradient as backward.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import keras
import tensorflow as tf

from xaikit.backend.base import T
from xaikit.backend.rows import Rows
from xaikit.backend.tf.cam import _call_attr, _relu_layers, _restore
from xaikit.backend.tf.errors import unreachable_inputs
from xaikit.backend.tf.forms import NO_LAYER_METHODS, exported_artifact, model_form
from xaikit.backend.tf.layers import sublayers
from xaikit.backend.tf.lrp_linear import Linear, backward, linears, pass_grad, stab
from xaikit.backend.tf.lrp_plan import ALLOWED, Assignment, composite_key, is_linear, zbox_slots
from xaikit.backend.tf.steps import Traced, cached_step, constants_key, model_ref, scorer_of, step_store
from xaikit.errors import XaikitTypeError, XaikitValueError, describe

__all__ = ["lrp_step", "modified_step"]

_L = keras.layers
_STEPS: weakref.WeakKeyDictionary[Any, dict[tuple[Any, ...], Traced]] = step_store()


# ---- one traced pass ------------------------------------------------------------------------------
def _override(x: T, y: T, grad: Callable[[T], T]) -> T:
    """``y`` (computed from ``x``) whose backward gives ``x`` the gradient ``grad(g)``."""

    @tf.custom_gradient
    def op(x_: T, y_: T) -> Any:
        def back(g: T) -> Any:
            return grad(g), None

        return tf.identity(y_), back

    return op(x, tf.stop_gradient(y))


class _Site:
    """One call of a convolution or dense map: what its backward needs (a BatchNorm merged in
    later, when the BatchNorm's call sees this site's output)."""

    def __init__(self, run: _Run, layer: Any, rule: Any, lin: Linear, x: T, z: T, bounds: Any) -> None:
        self.run, self.layer, self.rule, self.lin, self.x, self.z = run, layer, rule, lin, x, z
        name = str(layer.name)
        self.bounds = bounds
        self.merge: tuple[T, T] | None = None
        self.index: int | None = None
        self.pads: list[tuple[str, Any]] = []
        self.support: T | None = None
        if rule.reads_input:
            found = run.input_index(x)
            if found is not None:
                self.index, self.pads = found
                if self.pads:  # 1 on the model's input, 0 on the padding around it
                    support = tf.ones_like(run.inputs[self.index], dtype=x.dtype)
                    for kind, p in reversed(self.pads):
                        support = tf.pad(support, p) if kind == "pad" else tf.reshape(support, p[1])
                    self.support = support
            else:
                run.step.fail(
                    f"layer {name!r} has the {rule.kind!r} rule, which gives the relevance of the layer's "
                    "input itself and so applies only to a layer that reads a model input; this layer reads "
                    "another layer's output (a preprocessing layer inside the model, such as Rescaling, "
                    "Normalization or Resizing, counts as one). Give it another rule (e.g. "
                    "composite='epsilon_plus'), move the preprocessing out of the model, or give the input "
                    "rule to the layer that reads the model's input"
                )
                self.rule = run.plan.gradient
        self.out = _override(x, z, self.backward)

    def backward(self, g: T) -> T:
        lin, z = self.lin, self.z
        if self.merge is not None:
            lin = lin.merged(*self.merge, rank=z.shape.rank)
            z = lin.forward(self.x, lin.kernel, lin.bias)
        g_x, direct = backward(self.rule, lin, self.x, z, g, self.bounds, self.support)
        if direct is None:
            return g_x
        self.run.direct[self.index].append(_unpad(direct, self.pads))  # type: ignore[index]
        return tf.zeros_like(self.x)


class _Run:
    """The state of one traced LRP pass: the inputs, the z^B bounds, the sites by output, the
    relevance given directly to each input."""

    def __init__(self, step: Traced, plan: Assignment, inputs: list[T], bounds: dict[str, Any]) -> None:
        self.step, self.plan, self.inputs, self.bounds = step, plan, inputs, bounds
        self.sites: dict[int, _Site] = {}
        self.direct: list[list[T]] = [[] for _ in inputs]
        #: layers with their own ``call``: (name, class, base class, tolerance, relative difference
        #: of the rule's operator from the layer's output), checked after the step (:func:`lrp_step`)
        self.checks: list[tuple[str, str, str, float, T]] = []
        self.composite: Any = None  # for messages

    def input_index(self, x: T) -> tuple[int, list[tuple[str, Any]]] | None:
        """Which model input ``x`` is, through identities, casts, zero paddings (Keras'
        ``ZeroPadding2D`` before ResNet's and DenseNet's first convolution) and reshapes that
        keep the batch axis (``Flatten``), with the steps met on the way (outermost first):
        ``("pad", paddings)`` or ``("view", (the input's shape, the output's shape))``; or None."""
        steps: list[tuple[str, Any]] = []
        while True:
            for i, inp in enumerate(self.inputs):
                if x is inp:
                    return i, steps
            op = getattr(x, "op", None)
            if op is None:
                return None
            if op.type in ("Identity", "Cast") and len(op.inputs) == 1:
                x = op.inputs[0]
            elif op.type == "Pad" or (op.type == "PadV2" and tf.get_static_value(op.inputs[2]) == 0):
                steps.append(("pad", op.inputs[1]))
                x = op.inputs[0]
            elif op.type == "Reshape" and _keeps_rows(op.inputs[0], x):
                steps.append(("view", (tf.shape(op.inputs[0]), tf.shape(x))))
                x = op.inputs[0]
            else:
                return None


def _keeps_rows(before: T, after: T) -> bool:
    """Whether a reshape keeps the batch axis (the same static size first, or the same dynamic
    size by construction when both have a known rank and the rest is static)."""
    b, a = before.shape, after.shape
    if b.rank is None or a.rank is None or b.rank < 1 or a.rank < 1:
        return False
    rest_b, rest_a = b[1:].num_elements(), a[1:].num_elements()
    return rest_b is not None and rest_b == rest_a and (b[0] == a[0] or (b[0] is None and a[0] is None))


def _unpad(r: T, steps: list[tuple[str, Any]]) -> T:
    """Relevance of a zero-padded or reshaped input (``steps`` outermost first) taken back to the
    input (the rules give the padding none, see :func:`~xaikit.backend.tf.lrp_linear.backward`)."""
    for kind, p in steps:
        if kind == "pad":
            p = tf.cast(p, tf.int32)
            r = tf.slice(r, p[:, 0], tf.shape(r) - p[:, 0] - p[:, 1])
        else:
            r = tf.reshape(r, p[0])
    return r


def _first_arg(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    return args[0] if args else kwargs["inputs"]


def _activation(run: _Run, act: Any, z: T) -> T:
    """A fused activation on ``z`` with the composite's activation rule."""
    y = act(z)
    if run.plan.fused.kind == "gradient" or _piecewise_linear(act) or _is_softmax(act):
        return y
    return _override(z, y, lambda g: pass_grad(z, y, g))


def _piecewise_linear(fn: Any) -> bool:
    """An activation whose plain gradient is its pass rule: ``y / x`` is its slope."""
    return is_linear(fn) or getattr(fn, "__name__", "") in ("relu", "leaky_relu")


def _weighted(run: _Run, layer: Any, own: Callable[..., Any]) -> Callable[..., Any]:
    """The wrapper of a convolution or dense layer's call."""
    rule = run.plan.rules[id(layer)]
    slot = run.plan.slots[id(layer)]

    def call(*args: Any, **kwargs: Any) -> Any:
        x = _first_arg(args, kwargs)
        act = layer.__dict__.get("activation")
        fused = not is_linear(act)
        if fused:
            object.__setattr__(layer, "activation", None)
        try:
            z = own(*args, **kwargs)
        finally:
            if fused:
                object.__setattr__(layer, "activation", act)
        bounds = run.bounds.get(slot) if rule.kind == "zbox" and slot is not None else None
        maps = linears(layer, x.dtype)
        base = _own_call(layer)
        if base is not None and rule.kind != "gradient":
            _check_call(run, layer, base, maps, x, z)
        if len(maps) == 2:  # separable: depthwise, then pointwise
            t = maps[0].forward(x)
            first = _Site(run, layer, rule, maps[0], x, t, bounds)
            site = _Site(run, layer, run.plan.pointwise[id(layer)], maps[1], first.out, z, None)
        else:
            site = _Site(run, layer, rule, maps[0], x, z, bounds)
        run.sites[id(site.out)] = site
        return _activation(run, act, site.out) if fused else site.out

    return call


def _own_call(layer: Any) -> str | None:
    """The Keras layer class whose ``call`` the layer's class replaces (a weight-standardized
    convolution, an adapter that adds to the kernel), or None."""
    base = next((c for c in type(layer).__mro__ if c.__module__.startswith("keras.")), None)
    if (
        base is None
        or base is type(layer)
        or getattr(type(layer), "call", None) is getattr(base, "call", None)
    ):
        return None
    return base.__name__


def _check_call(run: _Run, layer: Any, base: str, maps: list[Linear], x: T, z: T) -> None:
    """Record how far the rule's operator (the layer's kernel and bias) is from what the
    layer's own ``call`` computed; a different shape is refused at once."""
    zz = x
    for lin in maps:
        zz = lin.forward(zz, lin.kernel, lin.bias)
    why = None
    if zz.shape.rank != z.shape.rank or any(
        a is not None and b is not None and a != b for a, b in zip(zz.shape.as_list(), z.shape.as_list())
    ):
        why = f"an output of shape {tuple(zz.shape.as_list())}, not the layer's {tuple(z.shape.as_list())}"
        run.step.fail(own_call_refusal(str(layer.name), type(layer).__name__, base, why, run.composite))
        return
    # in float32 at least (a float16 floor of 1e-30 would be 0), held to the resolution of the
    # layer's output (a half-precision layer's recomputation differs by that)
    wide = tf.float64 if z.dtype == tf.float64 else tf.float32
    zc, zf = tf.cast(z, wide), tf.cast(zz, wide)
    err = tf.reduce_max(tf.abs(zf - zc))
    scale = tf.maximum(tf.reduce_max(tf.abs(zc)), tf.constant(1e-30, wide))
    eps = {tf.float16: 2.0**-10, tf.bfloat16: 2.0**-7, tf.float64: 0.0}.get(z.dtype, 2.0**-23)
    tol = 1e-10 if z.dtype == tf.float64 else max(1e-5, 4 * eps)
    run.checks.append((str(layer.name), type(layer).__name__, base, tol, tf.cast(err / scale, tf.float32)))


def own_call_refusal(name: str, cls: str, base: str, why: str, comp: Any) -> str:
    """The refusal of a layer whose own ``call`` does not compute its operator with its kernel."""
    yours = (
        f"xk.xai.rules.composite({comp.name!r}, <the same epsilon/gamma/low/high>)"
        if getattr(comp, "name", "custom") != "custom"
        else "your_composite"
    )
    return (
        f"layer {name!r} is a {cls}, a subclass of {base} with its own call, and LRP's rules compute with "
        f"its kernel and bias: recomputed that way the layer gives {why}, so its rule would not describe "
        "what the layer computes. Give that layer its plain gradient (method='lrp', "
        f"composite={yours}.with_names({{{name!r}: xk.xai.rules.Gradient()}})), or write its call as "
        "the plain layer with the kernel it computes with"
    )


def _batchnorm(run: _Run, layer: Any, own: Callable[..., Any]) -> Callable[..., Any] | None:
    rule = run.plan.rules[id(layer)]

    def call(*args: Any, **kwargs: Any) -> Any:
        x = _first_arg(args, kwargs)
        y = own(*args, **kwargs)
        site = run.sites.get(id(x))
        if site is not None and site.out is x and site.merge is None and _merges(run, site, layer, x):
            site.merge = _affine(layer, x.dtype)
            return _override(x, y, lambda g: g)
        if rule.kind == "pass":
            return _override(x, y, lambda g: pass_grad(x, y, g))
        if rule.kind in ("norm", "epsilon"):
            return _scaled(own, x, y, rule.epsilon)
        if rule.kind != "gradient":
            run.step.fail(
                f"layer {layer.name!r} (a BatchNormalization layer that is not merged) cannot take the "
                f"{rule.kind!r} rule; it takes {list(ALLOWED['batchnorm'])}: change the composite's rule for it"
            )
        return y

    return call


def _merges(run: _Run, site: _Site, bn: Any, x: T) -> bool:
    rank = x.shape.rank
    axis = bn.axis[0] if isinstance(bn.axis, (list, tuple)) and len(bn.axis) == 1 else bn.axis
    if not isinstance(axis, int) or rank is None:
        return False
    channel = 1 if site.lin.channels_first else rank - 1
    return (id(site.layer), id(bn)) in run.plan.pairs and axis % rank == channel


def _affine(bn: Any, dtype: Any) -> tuple[T, T]:
    """A BatchNorm (inference) as ``y = a * x + c`` per channel."""
    mean = tf.cast(tf.convert_to_tensor(bn.moving_mean), dtype)
    var = tf.cast(tf.convert_to_tensor(bn.moving_variance), dtype)
    a = tf.math.rsqrt(var + tf.cast(bn.epsilon, dtype))
    if bn.scale:
        a = a * tf.cast(tf.convert_to_tensor(bn.gamma), dtype)
    c = -mean * a
    if bn.center:
        c = c + tf.cast(tf.convert_to_tensor(bn.beta), dtype)
    return a, c


def _elementwise(run: _Run, layer: Any, own: Callable[..., Any]) -> Callable[..., Any]:
    """An activation layer with the pass rule."""

    def call(*args: Any, **kwargs: Any) -> Any:
        x = _first_arg(args, kwargs)
        y = own(*args, **kwargs)
        return _override(x, y, lambda g: pass_grad(x, y, g))

    return call


def _pooling(run: _Run, layer: Any, own: Callable[..., Any]) -> Callable[..., Any]:
    """A pooling layer with the norm (or epsilon) rule."""
    rule = run.plan.rules[id(layer)]

    def call(*args: Any, **kwargs: Any) -> Any:
        x = _first_arg(args, kwargs)
        return _scaled(own, x, own(*args, **kwargs), rule.epsilon)

    return call


def _scaled(own: Callable[..., Any], x: T, y: T, eps: float) -> T:
    """``y = own(x)`` whose backward is its own, of the gradient scaled by ``y / stab(y)``:
    ``R_x = x * J^T (R / stab(y))``, the norm rule (a layer without weights, a BatchNorm)."""

    def grad(g: T) -> T:
        with tf.GradientTape() as tape:
            tape.watch(x)
            again = own(x)
        return tape.gradient(again, x, output_gradients=tf.math.divide_no_nan(g * y, stab(y, eps)))

    return _override(x, y, grad)


def _gate(own: Callable[..., Any]) -> Callable[..., Any]:
    """A Multiply layer: every input but the largest (the gated signal) with a stopped gradient;
    inputs of the same largest size share the relevance evenly (each one's gradient divided by
    their number), whatever their order, as the torch backend's rule for a product of two
    input-dependent tensors."""

    def call(*args: Any, **kwargs: Any) -> Any:
        ins = list(_first_arg(args, kwargs))
        sizes = [t.shape[1:].num_elements() or 0 for t in ins]
        keep = [i for i, n in enumerate(sizes) if n == max(sizes)]
        share = 1.0 / len(keep)
        ins = [
            (t if len(keep) == 1 else _override(t, t, lambda g: g * share))
            if i in keep
            else tf.stop_gradient(t)
            for i, t in enumerate(ins)
        ]
        rest = args[1:] if args else ()
        kw = {k: v for k, v in kwargs.items() if k != "inputs"}
        return own(ins, *rest, **kw)

    return call


def _wrapper(run: _Run, layer: Any, own: Callable[..., Any]) -> Callable[..., Any] | None:
    """The wrapper of a layer's call, or None where the plain gradient is the rule."""
    if isinstance(layer, _L.Multiply):
        return _gate(own)
    if id(layer) not in run.plan.rules:
        return None
    kind, rule = run.plan.kinds[id(layer)], run.plan.rules[id(layer)]
    if kind in ("conv", "dense"):
        merges = any(pair[0] == id(layer) for pair in run.plan.pairs)
        return _weighted(run, layer, own) if rule.kind != "gradient" or merges else None
    if kind == "batchnorm":
        return _batchnorm(run, layer, own)
    if kind == "activation" and _is_softmax(layer):
        return None  # its gradient, as torch's softmax rule
    if kind == "activation" and rule.kind == "pass" and not _plain_relu(layer):
        return _elementwise(run, layer, own)
    if kind in ("avgpool", "maxpool") and rule.kind != "gradient":
        return _pooling(run, layer, own)
    return None


def _is_softmax(fn_or_layer: Any) -> bool:
    """A softmax activation (function, ``Softmax`` layer or ``Activation("softmax")``): it keeps
    its plain gradient, which is torch's softmax rule (AttnLRP), so a classifier that ends in a
    softmax gets the same relevance on both frameworks."""
    if isinstance(fn_or_layer, _L.Softmax):
        return True
    fn = fn_or_layer.activation if isinstance(fn_or_layer, _L.Activation) else fn_or_layer
    return getattr(fn, "__name__", "") == "softmax"


def _plain_relu(layer: Any) -> bool:
    """A layer whose pass rule is its plain gradient (ReLU, leaky ReLU, PReLU, linear)."""
    if isinstance(layer, _L.Activation):
        return _piecewise_linear(layer.activation)
    if isinstance(layer, _L.ReLU):
        return getattr(layer, "max_value", None) is None and not getattr(layer, "threshold", 0)
    return isinstance(layer, (_L.LeakyReLU, _L.PReLU))


@contextlib.contextmanager
def _rules_in(run: _Run) -> Iterator[None]:
    """Swap the call of every layer that has a rule for its wrapper; restore the layers' own
    attributes in a ``finally`` block."""
    swapped: list[tuple[Any, str, Any, bool]] = []
    try:
        for la in run.plan.layers:
            if sublayers(la):
                continue
            attr = _call_attr(la)
            wrapper = _wrapper(run, la, getattr(la, attr))
            if wrapper is not None:
                swapped.append((la, attr, la.__dict__.get(attr), attr in la.__dict__))
                object.__setattr__(la, attr, wrapper)
        yield
    finally:
        _restore(swapped)


# ---- the steps ----------------------------------------------------------------------------------
def lrp_step(bk: Any, rows: Rows, composite: Any) -> tuple[list[T], T]:
    """LRP of a chunk of rows: ``(relevance per input (float32, the model's layout), target
    scores (rows,))`` (see :meth:`xaikit.backend.facets.RelevanceFacet.lrp_step`); a bound
    ``rows.target`` object scores the raw output (``rows.targets`` are then sample indices; its
    tensors are an argument of the compiled step)."""
    model, target = rows.model, rows.target
    refuse_exported(model, "LRP")
    if not all(hasattr(composite, a) for a in ("rule_for", "layers", "first", "names", "canonize")):
        raise XaikitTypeError(f"composite must be a Composite (xk.xai.rules.spec); got {describe(composite)}")
    Assignment(model, composite)  # the composite's errors, before anything is traced
    tensors, static, extra = bk._step_args(rows.model_kwargs, target)
    zbox = zbox_slots(composite)
    bounds = {
        slot: (tf.constant(r.low, tf.float32), tf.constant(r.high, tf.float32)) for slot, r in zbox.items()
    }
    step = _step(bk, model, composite, rows.output, static, target)
    rel, scores, off = step.run(list(rows.inputs), rows.targets, tensors, bounds, extra)
    own_calls = step.found.get("own_calls", [])
    if own_calls:
        for (name, cls, base, tol), diff in zip(own_calls, off.numpy()):
            if not diff <= tol:
                raise XaikitValueError(
                    own_call_refusal(
                        name,
                        cls,
                        base,
                        f"a different output ({float(diff):.3g} of its largest value off)",
                        composite,
                    )
                )
    return list(rel), scores


def _step(
    bk: Any, model: Any, comp: Any, output: int | str, static: dict[str, Any], target: Any = None
) -> Traced:
    """The compiled LRP step of ``model``, made once per model, composite, output, constant
    model arguments and target kind (:func:`_traced`)."""
    key = ("lrp", composite_key(comp), output, *constants_key(static, target))
    return cached_step(_STEPS, model, key, lambda: _traced(bk, model, comp, output, static, target))


def _traced(bk: Any, model: Any, comp: Any, output: int | str, static: dict[str, Any], target: Any) -> Traced:
    """A new LRP step of ``model`` (see :func:`_step`)."""
    ref = model_ref(model)
    scorer = scorer_of(target)

    def body(
        inputs: list[T], targets: T, kw: dict[str, Any], bounds: dict[str, Any], extra: dict[str, T]
    ) -> tuple[list[T], T, T]:
        m = ref()
        run = _Run(step, Assignment(m, comp), inputs, bounds)
        run.composite = comp
        with tf.GradientTape(watch_accessed_variables=False) as tape:
            for x in inputs:
                tape.watch(x)
            with _rules_in(run):
                out = bk._call(m, inputs, {**kw, **static})
            scores, _ = bk._scores_of(out, targets, output, int(inputs[0].shape[0]), scorer, extra)
        grads = tape.gradient(scores, inputs)
        missing = [i for i, g in enumerate(grads) if g is None and not run.direct[i]]
        if missing:  # an error for the caller (never relevance of zeros)
            step.fail(unreachable_inputs(m, missing, len(inputs)))
        rel = []
        for x, g, direct in zip(inputs, grads, run.direct):
            r = tf.zeros_like(x) if g is None else x * tf.cast(g, x.dtype)
            for d in direct:
                r = r + tf.cast(d, x.dtype)
            rel.append(tf.cast(r, tf.float32))
        step.found["own_calls"] = [c[:4] for c in run.checks]
        off = tf.stack([c[4] for c in run.checks]) if run.checks else tf.zeros([0], tf.float32)
        return rel, scores, off

    step = Traced(body, bk.trace_counts, bk.trace_counts.key(model, "lrp"))
    return step


def refuse_exported(model: Any, what: str) -> None:
    """An exported SavedModel has no layers to give rules to (or ReLUs to swap): refused, with
    what works on it."""
    if exported_artifact(model):
        raise XaikitTypeError(
            f"{what} needs the model's Keras layers, and a {model_form(model)} has no inner layers to read: "
            "model.export() keeps the model's computation as a TensorFlow graph, not its Keras layers. "
            f"For {what} explain the Keras model itself (keras.models.load_model('model.keras'), or the "
            f"model in memory); the methods that need no layer work on the exported model: "
            f"{', '.join(NO_LAYER_METHODS)}"
        )


def modified_step(bk: Any, rows: Rows, mode: str) -> list[T]:
    """Guided backprop (``mode="guided"``) or deconvnet (``"deconvnet"``) input gradients of a
    chunk of rows (see :meth:`xaikit.backend.facets.RelevanceFacet.modified_step`, which checks
    ``mode``)."""
    model = rows.model
    name = "guided backprop" if mode == "guided" else "deconvnet"
    refuse_exported(model, name)
    if not _relu_layers(model):
        raise XaikitValueError(
            f"{name} modifies the backward pass of the model's ReLUs, and this {model_form(model)} has no "
            "ReLU it can reach (activation='relu', Activation('relu'), ReLU() layers; a ReLU called inside "
            "a custom layer's call cannot be reached): its map would be the plain gradient. Use "
            "method='vanilla' for that"
        )
    return list(bk.cam.guided_step(rows, mode=mode))
