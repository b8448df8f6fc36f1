"""LRP on Keras models (``xaikit/backend/tf/lrp.py``): every rule on every kind of layer against
an explicit numpy computation in matrix form (``keras_reference.py``), the BatchNorm merge
(virtual: the model is never written) and its absence, conservation, LRP-0 = gradient x input on
a ReLU net, the model unchanged after every call (also one that raises), the refusals, chunked ==
unchunked.

Each layer is checked in a model ``input -> layer "target" [-> BatchNorm] -> Flatten -> Dense(1)``
whose head is a fixed vector ``v`` with the plain gradient as its rule: the relevance reaching
the layer's output is then ``y * v`` (any vector, not only a one-hot), and the numpy reference
redistributes exactly that.
"""

from __future__ import annotations

import zlib
from typing import Any

import numpy as np
import pytest

keras = pytest.importorskip("keras")
tf = pytest.importorskip("tensorflow")

import xaikit as xk  # noqa: E402
from tests.rules import keras_reference as ref  # noqa: E402
from xaikit.backend import Rows  # noqa: E402
from xaikit.errors import DegenerateMapWarning, XaikitTypeError, XaikitValueError  # noqa: E402
from xaikit.xai.rules import spec  # noqa: E402

L = keras.layers
SHAPE = (6, 6, 3)
RULES = {
    "lrp0": spec.Zero(),
    "epsilon": spec.Epsilon(0.05),
    "zplus": spec.ZPlus(),
    "alpha2beta1": spec.AlphaBeta(2.0, 1.0),
    "alpha1beta0": spec.AlphaBeta(1.0, 0.0),
    "gamma": spec.Gamma(0.25),
    "zbox": spec.ZBox(-2.0, 2.5),
    "zbox_channels": spec.ZBox([-1.0, -2.0, -3.0], [1.0, 2.0, 3.5]),
    "flat": spec.Flat(),
    "wsquare": spec.WSquare(),
    "gradient": spec.Gradient(),
}


def _lrp(model: Any, x: np.ndarray, rule: Any, canonize: bool = False, **kw: Any) -> np.ndarray:
    comp = spec.Composite(names={"target": rule}, **kw)
    return np.asarray(
        xk.xai.explain(model, x, target=0, method="lrp", composite=comp, canonize=canonize), np.float64
    )


def _head(model_in: Any, y: Any, rng: np.random.Generator) -> tuple[Any, np.ndarray]:
    """The model ``model_in -> y -> Flatten -> Dense(1, v)`` and ``v``."""
    flat = L.Flatten()(y)
    head = L.Dense(1, use_bias=False, name="head")
    model = keras.Model(model_in, head(flat))
    v = rng.normal(size=(int(flat.shape[-1]), 1)).astype(np.float32)
    head.set_weights([v])
    return model, v[:, 0].astype(np.float64)


def _bounds(r: Any, x: np.ndarray) -> dict[str, np.ndarray]:
    if r.kind != "zbox":
        return {}
    return {
        "low": np.broadcast_to(np.asarray(r.low, np.float64), x.shape).ravel(),
        "high": np.broadcast_to(np.asarray(r.high, np.float64), x.shape).ravel(),
    }


def _check(got: np.ndarray, want: np.ndarray) -> None:
    scale = float(np.max(np.abs(want)))
    assert scale > 0
    np.testing.assert_allclose(got.ravel(), want.ravel(), rtol=1e-5, atol=1e-5 * scale)


def _matrix_layer(kind: str, rng: np.random.Generator) -> tuple[Any, Any]:
    """A layer named "target" and a function (layer, in shape) -> (M, ones matrix, bias)."""
    if kind == "dense":
        layer = L.Dense(5, name="target", bias_initializer="random_normal")

        def mats(la: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
            k, b = (w.astype(np.float64) for w in la.get_weights())
            return k.T, np.ones_like(k.T), b

        return layer, mats
    if kind == "conv":  # strides 2 and 'same' padding: the padding is uneven (top 0, bottom 1)
        layer = L.Conv2D(4, 3, strides=2, padding="same", name="target", bias_initializer="random_normal")

        def mats(la: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
            k, b = (w.astype(np.float64) for w in la.get_weights())
            m = ref.conv2d_matrix(k, SHAPE, 2, "same")
            return m, ref.conv2d_matrix(np.ones_like(k), SHAPE, 2, "same"), np.tile(b, m.shape[0] // b.size)

        return layer, mats
    if kind == "depthwise":
        layer = L.DepthwiseConv2D(
            3, depth_multiplier=2, padding="same", name="target", bias_initializer="random_normal"
        )

        def mats(la: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
            k, b = (w.astype(np.float64) for w in la.get_weights())
            m = ref.depthwise_matrix(k, SHAPE, 1, "same")
            return (
                m,
                ref.depthwise_matrix(np.ones_like(k), SHAPE, 1, "same"),
                np.tile(b, m.shape[0] // b.size),
            )

        return layer, mats
    assert kind == "transpose"
    layer = L.Conv2DTranspose(2, 3, strides=2, name="target", bias_initializer="random_normal")

    def mats(la: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        k, b = (w.astype(np.float64) for w in la.get_weights())
        m = ref.conv2d_transpose_matrix(k, SHAPE, 2)
        return m, ref.conv2d_transpose_matrix(np.ones_like(k), SHAPE, 2), np.tile(b, m.shape[0] // b.size)

    return layer, mats


def _inputs(rng: np.random.Generator, kind: str, r: Any = None) -> np.ndarray:
    """Two inputs: normal, or inside z^B's box (outside it the rule's denominator can cross 0)."""
    shape = (2, 8) if kind == "dense" else (2, *SHAPE)
    if r is not None and r.kind == "zbox":
        return rng.uniform(np.asarray(r.low), np.asarray(r.high), size=shape).astype(np.float32)
    return rng.normal(size=shape).astype(np.float32)


@pytest.mark.parametrize("kind", ["dense", "conv", "depthwise", "transpose"])
@pytest.mark.parametrize("name", list(RULES))
def test_rule_equals_numpy(kind: str, name: str) -> None:
    rng = np.random.default_rng(zlib.crc32(f"{kind}/{name}".encode()))
    keras.utils.set_random_seed(1)
    r = RULES[name]
    if kind == "dense" and r.kind == "zbox" and isinstance(r.low, tuple):
        pytest.skip("per-channel bounds are for images")
    layer, mats = _matrix_layer(kind, rng)
    inp = keras.Input((8,) if kind == "dense" else SHAPE)
    model, v = _head(inp, layer(inp), rng)
    x = _inputs(rng, kind, r)
    if kind == "dense" and r.kind == "flat":  # a flat dense layer spreads evenly: a constant map
        with pytest.warns(DegenerateMapWarning, match="constant"):
            got = _lrp(model, x, r)
    else:
        got = _lrp(model, x, r)
    m, ones, b = mats(layer)
    for row in range(len(x)):
        xr = x[row].astype(np.float64).ravel()
        z = m @ xr + b
        want = ref.rule(r, m, b, xr, z * v, ones=ones, **_bounds(r, x[row]))
        _check(got[row], want)


@pytest.mark.parametrize("name", ["epsilon", "zplus", "gamma", "wsquare", "zbox", "gradient"])
@pytest.mark.parametrize("canonize", [True, False])
def test_batchnorm_merged_and_not(name: str, canonize: bool) -> None:
    """Merged: the conv's rule with W' = W a, b' = b a + c and the BatchNorm's output; not
    merged: the BatchNorm passes relevance (R_z = R_y) to the conv's own rule."""
    rng = np.random.default_rng(7)
    keras.utils.set_random_seed(2)
    r = RULES[name]
    layer, mats = _matrix_layer("conv", rng)
    bn = L.BatchNormalization(name="bn", epsilon=1e-3)
    inp = keras.Input(SHAPE)
    model, v = _head(inp, bn(layer(inp)), rng)
    gamma, beta = rng.uniform(0.5, 2.0, 4) * [1, -1, 1, 1], rng.normal(size=4)  # a < 0 flips W+ and W-
    mean, var = rng.normal(size=4), rng.uniform(0.5, 2.0, 4)
    bn.set_weights([w.astype(np.float32) for w in (gamma, beta, mean, var)])
    before = [w.numpy().copy() for w in model.weights]
    x = _inputs(rng, "conv", r)
    got = _lrp(model, x, r, canonize=canonize)
    m, ones, b = mats(layer)
    a = gamma.astype(np.float32).astype(np.float64) / np.sqrt(
        var.astype(np.float32).astype(np.float64) + 1e-3
    )
    c = beta.astype(np.float32) - mean.astype(np.float32) * a
    a_out, c_out = np.tile(a, m.shape[0] // 4), np.tile(c, m.shape[0] // 4)
    for row in range(len(x)):
        xr = x[row].astype(np.float64).ravel()
        y = a_out * (m @ xr + b) + c_out
        if canonize:
            mm, bb = a_out[:, None] * m, a_out * b + c_out
            want = ref.rule(r, mm, bb, xr, y * v, ones=ones, **_bounds(r, x[row]))
        else:
            want = ref.rule(r, m, b, xr, y * v, ones=ones, **_bounds(r, x[row]))
        _check(got[row], want)
    for w, was in zip(model.weights, before):  # the merge is virtual
        np.testing.assert_array_equal(w.numpy(), was)


def test_merged_differs_from_unmerged() -> None:
    rng = np.random.default_rng(3)
    keras.utils.set_random_seed(3)
    layer, _ = _matrix_layer("conv", rng)
    bn = L.BatchNormalization(name="bn")
    inp = keras.Input(SHAPE)
    model, _ = _head(inp, bn(layer(inp)), rng)
    bn.set_weights([rng.uniform(0.5, 2.0, 4).astype(np.float32), rng.normal(size=4).astype(np.float32),
                    rng.normal(size=4).astype(np.float32), rng.uniform(0.5, 2.0, 4).astype(np.float32)])  # fmt: skip
    x = _inputs(rng, "conv")
    merged, plain = _lrp(model, x, spec.ZPlus(), True), _lrp(model, x, spec.ZPlus(), False)
    assert np.max(np.abs(merged - plain)) > 1e-2 * np.max(np.abs(merged))


@pytest.mark.parametrize("act", ["relu", "tanh", "elu"])
@pytest.mark.parametrize("kind", ["dense", "conv"])
def test_fused_activation(kind: str, act: str) -> None:
    """The rule reads the pre-activation z; the activation passes relevance: R_z = act(z) * v."""
    rng = np.random.default_rng(5)
    keras.utils.set_random_seed(5)
    layer, mats = _matrix_layer(kind, rng)
    layer.activation = keras.activations.get(act)
    inp = keras.Input((8,) if kind == "dense" else SHAPE)
    model, v = _head(inp, layer(inp), rng)
    x = _inputs(rng, kind)
    r = spec.Epsilon(0.01)
    got = _lrp(model, x, r)
    m, ones, b = mats(layer)
    fn = {
        "relu": lambda t: np.maximum(t, 0),
        "tanh": np.tanh,
        "elu": lambda t: np.where(t > 0, t, np.expm1(t)),
    }
    for row in range(len(x)):
        xr = x[row].astype(np.float64).ravel()
        z = m @ xr + b
        _check(got[row], ref.rule(r, m, b, xr, fn[act](z) * v, ones=ones))
    assert layer.activation is keras.activations.get(act)


@pytest.mark.parametrize("pool", [2, 6])
@pytest.mark.parametrize(
    "r", [spec.Norm(), spec.Norm(0.1), spec.Epsilon(0.1)], ids=["norm", "norm0.1", "eps"]
)
def test_avgpool_norm(pool: int, r: Any) -> None:
    rng = np.random.default_rng(11)
    inp = keras.Input(SHAPE)
    layer = L.AveragePooling2D(pool, name="target") if pool == 2 else L.GlobalAveragePooling2D(name="target")
    model, v = _head(inp, layer(inp), rng)
    x = rng.uniform(-1.0, 2.0, size=(2, *SHAPE)).astype(np.float32)
    got = _lrp(model, x, r)
    m = ref.avgpool_matrix(SHAPE, pool)
    for row in range(len(x)):
        xr = x[row].astype(np.float64).ravel()
        z = m @ xr
        _check(got[row], ref.rule(spec.Norm(r.epsilon), m, np.zeros(m.shape[0]), xr, z * v))


@pytest.mark.parametrize("name", ["epsilon", "zplus", "gamma"])
def test_separable_is_depthwise_then_pointwise(name: str) -> None:
    rng = np.random.default_rng(13)
    keras.utils.set_random_seed(13)
    r = RULES[name]
    layer = L.SeparableConv2D(
        4, 3, padding="same", depth_multiplier=2, name="target", bias_initializer="random_normal"
    )
    inp = keras.Input(SHAPE)
    model, v = _head(inp, layer(inp), rng)
    x = _inputs(rng, "conv")
    got = _lrp(model, x, r)
    dk, pk, b = (w.astype(np.float64) for w in layer.get_weights())
    d = ref.depthwise_matrix(dk, SHAPE, 1, "same")
    p = ref.conv2d_matrix(pk, (6, 6, 6), 1, "valid")
    bias = np.tile(b, 36)
    for row in range(len(x)):
        xr = x[row].astype(np.float64).ravel()
        t = d @ xr
        z = p @ t + bias
        r_t = ref.rule(r, p, bias, t, z * v)
        _check(got[row], ref.rule(r, d, np.zeros(d.shape[0]), xr, r_t))


# ---- conservation, LRP-0 -----------------------------------------------------------------------
def _relu_net(rng: np.random.Generator, bias: bool) -> Any:
    """A Functional ReLU net: conv, max pooling, a residual sum, average pooling, dense."""
    init = "random_normal" if bias else "zeros"
    inp = keras.Input((8, 8, 3))
    h = L.Conv2D(6, 3, padding="same", activation="relu", use_bias=bias, bias_initializer=init)(inp)
    h = L.MaxPooling2D(2)(h)
    r = L.Conv2D(6, 3, padding="same", use_bias=bias, bias_initializer=init)(h)
    h = L.ReLU()(L.Add()([h, r]))
    h = L.AveragePooling2D(2)(h)
    h = L.Dense(8, activation="relu", use_bias=bias, bias_initializer=init)(L.Flatten()(h))
    return keras.Model(inp, L.Dense(4, use_bias=bias, bias_initializer=init)(h))


def test_lrp0_conserves_on_a_bias_free_relu_net() -> None:
    rng = np.random.default_rng(17)
    keras.utils.set_random_seed(17)
    model = _relu_net(rng, bias=False)
    x = rng.normal(size=(4, 8, 8, 3)).astype(np.float32)
    comp = spec.Composite({"conv": spec.Zero(), "dense": spec.Zero(), "avgpool": spec.Norm(0.0)})
    rel = xk.xai.explain(model, x, target=[0, 1, 2, 3], method="lrp", composite=comp)
    scores = model(x).numpy()[np.arange(4), [0, 1, 2, 3]]
    np.testing.assert_allclose(rel.reshape(4, -1).sum(axis=1), scores, rtol=1e-5, atol=1e-6)


def test_lrp0_is_gradient_times_input_on_a_relu_net() -> None:
    """With biases too: in R = a * g, LRP-0 of a ReLU net is its gradient times its input."""
    rng = np.random.default_rng(19)
    keras.utils.set_random_seed(19)
    model = _relu_net(rng, bias=True)
    x = rng.normal(size=(3, 8, 8, 3)).astype(np.float32)
    comp = spec.Composite({"conv": spec.Zero(), "dense": spec.Zero(), "avgpool": spec.Norm(0.0)})
    rel = xk.xai.explain(model, x, target=1, method="lrp", composite=comp)
    gxi = xk.xai.explain(model, x, target=1, method="input_x_gradient")
    np.testing.assert_allclose(rel, gxi, rtol=1e-5, atol=1e-6 * np.abs(gxi).max())


def test_lrp_epsilon_method() -> None:
    rng = np.random.default_rng(23)
    keras.utils.set_random_seed(23)
    model = _relu_net(rng, bias=True)
    x = rng.normal(size=(2, 8, 8, 3)).astype(np.float32)
    comp = spec.Composite({"conv": spec.Epsilon(0.3), "dense": spec.Epsilon(0.3)})
    a = xk.xai.explain(model, x, target=1, method="lrp_epsilon", epsilon=0.3)
    b = xk.xai.explain(model, x, target=1, method="lrp", composite=comp)
    np.testing.assert_array_equal(a, b)
    c = xk.xai.explain(model, x, target=1, method="lrp_epsilon", epsilon=1e-6)
    assert np.abs(a - c).max() > 1e-3 * np.abs(c).max()


# ---- the model is left as it was --------------------------------------------------------------
_MISSING = object()


def _state(model: Any) -> tuple[list[np.ndarray], list[Any]]:
    from xaikit.backend.tf.layers import all_layers

    attrs = [
        (
            la,
            la.trainable,
            {k: la.__dict__.get(k, _MISSING) for k in ("call", "activation", "quantized_call")},
        )
        for la in [model, *all_layers(model)]
    ]
    return [w.numpy().copy() for w in model.weights], attrs


def _same_state(model: Any, before: tuple[list[np.ndarray], list[Any]]) -> None:
    weights, attrs = _state(model)
    assert len(weights) == len(before[0])
    for w, was in zip(weights, before[0]):
        np.testing.assert_array_equal(w, was)
    for (la, trainable, d), (la0, trainable0, d0) in zip(attrs, before[1]):
        assert la is la0 and trainable == trainable0
        assert all(d[k] is d0[k] for k in d), la.name


def _bn_net(rng: np.random.Generator) -> Any:
    inp = keras.Input((8, 8, 3))
    h = L.Conv2D(4, 3, name="c1")(inp)
    h = L.BatchNormalization(name="bn1")(h)
    h = L.ReLU(6.0)(h)
    h = L.DepthwiseConv2D(3, padding="same", name="dw")(h)
    h = L.BatchNormalization(name="bn2")(h)
    h = L.Activation("relu")(h)
    gate = L.Dense(4, activation="sigmoid")(L.GlobalAveragePooling2D(keepdims=True)(h))
    h = L.Multiply()([h, gate])
    h = L.Dense(5, activation="relu", name="fc")(L.Flatten()(h))
    model = keras.Model(inp, L.Dense(3, name="out")(h))
    for bn in (model.get_layer("bn1"), model.get_layer("bn2")):
        bn.set_weights([rng.uniform(0.5, 2.0, 4).astype(np.float32), rng.normal(size=4).astype(np.float32),
                        rng.normal(size=4).astype(np.float32), rng.uniform(0.5, 2.0, 4).astype(np.float32)])  # fmt: skip
    return model


@pytest.mark.parametrize("composite", spec.COMPOSITES)
def test_model_unchanged(composite: str) -> None:
    rng = np.random.default_rng(29)
    keras.utils.set_random_seed(29)
    model = _bn_net(rng)
    x = rng.normal(size=(3, 8, 8, 3)).astype(np.float32)
    before = _state(model)
    out = model(x).numpy()
    grad = xk.xai.explain(model, x, target=0, method="vanilla")
    rel = xk.xai.explain(model, x, target=0, method="lrp", composite=composite)
    assert np.isfinite(rel).all() and np.abs(rel).max() > 0
    _same_state(model, before)
    # no modified graph leaks into the plain steps traced after (or before) it
    np.testing.assert_array_equal(model(x).numpy(), out)
    np.testing.assert_array_equal(xk.xai.explain(model, x, target=0, method="vanilla"), grad)
    fresh = keras.models.clone_model(model)
    fresh.set_weights(model.get_weights())
    np.testing.assert_array_equal(xk.xai.explain(fresh, x, target=0, method="vanilla"), grad)


class _Boom(L.Layer):
    """Raises in its call while armed (a model that fails halfway through the traced pass)."""

    armed = False

    def call(self, x: Any) -> Any:
        if self.armed:
            raise RuntimeError("boom")
        return x


def test_model_unchanged_after_a_call_that_raises() -> None:
    rng = np.random.default_rng(31)
    keras.utils.set_random_seed(31)
    inp = keras.Input((8, 8, 3))
    h = L.BatchNormalization(name="bn")(L.Conv2D(4, 3, activation=None, name="c1")(inp))
    h = L.Conv2D(4, 3, activation="relu", name="c2")(h)
    boom = _Boom(name="boom")
    model = keras.Model(inp, L.Dense(3)(L.Flatten()(boom(h))))
    x = rng.normal(size=(2, 8, 8, 3)).astype(np.float32)
    before = _state(model)
    boom.armed = True
    with pytest.raises(Exception, match="boom"):
        xk.xai.explain(model, x, target=0, method="lrp")
    _same_state(model, before)
    boom.armed = False
    # an input rule on a layer that does not read the input: refused, naming the layer
    comp = spec.Composite({"conv": spec.ZPlus()}, names={"c2": spec.Flat()})
    with pytest.raises(
        XaikitValueError, match=r"layer 'c2' has the 'flat' rule.*reads another layer's output"
    ):
        xk.xai.explain(model, x, target=0, method="lrp", composite=comp)
    _same_state(model, before)
    rel = xk.xai.explain(model, x, target=0, method="lrp")  # and it works after both
    assert np.isfinite(rel).all()
    _same_state(model, before)


def test_input_rule_after_a_preprocessing_layer_is_refused() -> None:
    inp = keras.Input((8, 8, 3))
    h = L.Conv2D(4, 3, name="stem")(L.Rescaling(1 / 255.0)(inp))
    model = keras.Model(inp, L.Dense(2)(L.Flatten()(h)))
    x = np.random.default_rng(0).uniform(0, 255, (2, 8, 8, 3)).astype(np.float32)
    with pytest.raises(
        XaikitValueError, match=r"layer 'stem' has the 'flat' rule.*a preprocessing layer inside the model"
    ):
        xk.xai.explain(model, x, target=0, method="lrp", composite="epsilon_plus_flat")
    rel = xk.xai.explain(model, x, target=0, method="lrp", composite="epsilon_plus")
    assert np.isfinite(rel).all()


@pytest.mark.parametrize("composite", ["epsilon_plus_flat", "epsilon_gamma_box", "wsquare"])
def test_input_rule_through_zero_padding_equals_same_padding(composite: Any) -> None:
    """Keras' ResNet and DenseNet pad the image with a ZeroPadding2D layer before a "valid"
    first convolution. The input rules (flat, w-square, z^B) follow the padding back to the
    input and count the padding as no input: the relevance equals, bit for bit, that of the same
    weights in a convolution with padding="same" (which pads inside), and none is lost."""

    def build(explicit: bool) -> Any:
        inp = keras.Input((8, 8, 3))
        # "same" pads a 4 x 4 kernel by 1 before and 2 after: here two padding layers
        first = L.ZeroPadding2D(1)(L.ZeroPadding2D(((0, 1), (0, 1)))(inp)) if explicit else inp
        h = L.ReLU()(L.Conv2D(4, 4, padding="valid" if explicit else "same", name="stem")(first))
        h = L.ReLU()(L.Conv2D(4, 3, padding="same")(h))
        return keras.Model(inp, L.Dense(3)(L.GlobalAveragePooling2D()(h)))

    keras.utils.set_random_seed(3)
    padded, same = build(True), build(False)
    same.set_weights(padded.get_weights())
    x = np.random.default_rng(3).uniform(-1, 1, (2, 8, 8, 3)).astype(np.float32)
    kw: dict[str, Any] = {"target": [0, 2], "method": "lrp"}
    if composite == "epsilon_gamma_box":
        kw.update(low=-1.0, high=1.0)
    if composite == "wsquare":
        composite = spec.Composite(
            {"conv": spec.ZPlus(), "dense": spec.Epsilon()}, names={"stem": spec.WSquare()}
        )
    want = xk.xai.explain(same, x, composite=composite, **kw)
    got = xk.xai.explain(padded, x, composite=composite, **kw)
    assert float(np.abs(want).max()) > 0
    np.testing.assert_array_equal(got, want)


def test_bad_composites_refused() -> None:
    rng = np.random.default_rng(37)
    model = _bn_net(rng)
    x = rng.normal(size=(2, 8, 8, 3)).astype(np.float32)
    with pytest.raises(XaikitValueError, match=r"composite names \['nope'\] match no layer"):
        xk.xai.explain(
            model, x, target=0, method="lrp", composite=spec.Composite(names={"nope": spec.ZPlus()})
        )
    bn_zplus = spec.Composite(names={"bn1": spec.ZPlus()})
    with pytest.raises(
        XaikitValueError, match=r"layer 'bn1' \(a BatchNormalization layer\) cannot take the 'zplus'"
    ):
        xk.xai.explain(model, x, target=0, method="lrp", composite=bn_zplus, canonize=False)
    merged = xk.xai.explain(model, x, target=0, method="lrp", composite=bn_zplus)  # merged: its rule unused
    plain = xk.xai.explain(model, x, target=0, method="lrp", composite=spec.Composite())
    np.testing.assert_array_equal(merged, plain)
    inp = keras.Input((8, 8, 3))
    lone = keras.Model(inp, L.Dense(2)(L.Flatten()(L.BatchNormalization(name="lone")(inp))))
    with pytest.raises(
        XaikitValueError, match=r"layer 'lone' \(a BatchNormalization layer that is not merged\)"
    ):
        xk.xai.explain(
            lone, x, target=0, method="lrp", composite=spec.Composite(names={"lone": spec.ZPlus()})
        )
    with pytest.raises(XaikitValueError, match=r"layer 'fc' \(a Dense layer\) cannot take the 'pass'"):
        xk.xai.explain(model, x, target=0, method="lrp", composite=spec.Composite(names={"fc": spec.Pass()}))
    with pytest.raises(XaikitTypeError, match="composite must be"):
        xk.xai.explain(model, x, target=0, method="lrp", composite=3)

    from xaikit.backend.tf import lrp

    with pytest.raises(XaikitTypeError, match="LRP needs a Keras model with layers"):
        lrp.lrp_step(
            None, Rows(lambda t: t, [tf.constant(x)], tf.constant([0, 0])), spec.composite("epsilon")
        )


def test_chunked_equals_unchunked_and_zbox_bounds_do_not_retrace() -> None:
    rng = np.random.default_rng(41)
    keras.utils.set_random_seed(41)
    model = _bn_net(rng)
    x = rng.normal(size=(5, 8, 8, 3)).astype(np.float32)
    for comp in ("epsilon_plus_flat", "epsilon_gamma_box"):
        whole = xk.xai.explain(model, x, target=[0, 1, 2, 0, 1], method="lrp", composite=comp, max_batch=8)
        parts = xk.xai.explain(model, x, target=[0, 1, 2, 0, 1], method="lrp", composite=comp, max_batch=2)
        np.testing.assert_allclose(parts, whole, rtol=1e-6, atol=1e-6 * np.abs(whole).max())
    bk = xk.backend.get_backend(model) if hasattr(xk, "backend") else None
    from xaikit.backend.registry import get_backend

    bk = get_backend(model)
    traces = bk.traces(model, "lrp")
    a = xk.xai.explain(
        model, x, target=0, method="lrp", composite="epsilon_gamma_box", low=-3.0, high=3.0, max_batch=8
    )
    b = xk.xai.explain(
        model, x, target=0, method="lrp", composite="epsilon_gamma_box", low=-4.0, high=4.0, max_batch=8
    )
    assert bk.traces(model, "lrp") == traces  # new bounds are arguments, not a new trace
    assert np.abs(a - b).max() > 0


class _StdConv2D(keras.layers.Conv2D):
    """A weight-standardized convolution: its call computes with another kernel."""

    def call(self, inputs: Any) -> Any:
        k = self.kernel
        mean, var = tf.nn.moments(k, axes=[0, 1, 2], keepdims=True)
        return tf.nn.conv2d(inputs, (k - mean) / tf.sqrt(var + 1e-6), 1, "SAME")


class _AdapterDense(keras.layers.Dense):
    """A dense layer whose call adds a fixed low-rank term to its kernel."""

    def call(self, inputs: Any) -> Any:
        return tf.matmul(inputs, self.kernel + 0.5)


class _SameDense(keras.layers.Dense):
    """Its own call, computing exactly the dense map of its kernel and bias."""

    def call(self, inputs: Any) -> Any:
        return super().call(inputs) * 1.0


def test_a_layer_computing_with_another_kernel_is_refused_not_explained_with_its_kernel() -> None:
    # LRP used layer.kernel: on a weight-standardized conv LRP-0 was 86 % of the largest value
    # off gradient x input, with no word
    L = keras.layers
    x = np.random.default_rng(0).normal(size=(2, 6, 6, 3)).astype(np.float32)
    for conv, dense, bad in [
        (_StdConv2D(4, 3, padding="same", use_bias=False, name="std"), L.Dense(3, use_bias=False), "std"),
        (
            L.Conv2D(4, 3, padding="same", use_bias=False),
            _AdapterDense(3, use_bias=False, name="adapted"),
            "adapted",
        ),
    ]:
        keras.utils.set_random_seed(0)
        model = keras.Sequential([L.Input((6, 6, 3)), conv, L.ReLU(), L.Flatten(), dense])
        with pytest.raises(
            XaikitValueError, match=rf"layer '{bad}' is a _\w+, a subclass of \w+ with its own call"
        ):
            xk.xai.explain(model, x, target=1, method="lrp_epsilon", epsilon=0.0)
        comp = spec.composite("epsilon", epsilon=0.0).with_names({bad: spec.Gradient()})
        rel = xk.xai.explain(model, x, target=1, method="lrp", composite=comp)
        xt = tf.constant(x)
        with tf.GradientTape() as tape:
            tape.watch(xt)
            score = tf.reduce_sum(model(xt)[:, 1])
        gxi = (tape.gradient(score, xt) * xt).numpy()
        np.testing.assert_allclose(rel, gxi, atol=1e-5 * np.abs(gxi).max())
    # a subclass whose call computes the layer's own map is explained as the layer
    keras.utils.set_random_seed(1)
    plain = keras.Sequential([L.Input((6, 6, 3)), L.Conv2D(4, 3), L.ReLU(), L.Flatten(), L.Dense(3)])
    own = keras.Sequential([L.Input((6, 6, 3)), L.Conv2D(4, 3), L.ReLU(), L.Flatten(), _SameDense(3)])
    own.set_weights(plain.get_weights())
    np.testing.assert_array_equal(
        xk.xai.explain(own, x, target=1, method="lrp"), xk.xai.explain(plain, x, target=1, method="lrp")
    )


@pytest.mark.filterwarnings("ignore::xaikit.errors.DegenerateMapWarning")  # flat on a dense layer: constant
@pytest.mark.parametrize("first", ["flat", "wsquare", "zbox"])
def test_input_rule_through_a_flatten_equals_the_flat_input(first: str) -> None:
    # an MLP on images (Flatten -> Dense) was refused by the default composite
    L = keras.layers
    rule = {"flat": spec.Flat(), "wsquare": spec.WSquare(), "zbox": spec.ZBox(0.0, 1.0)}[first]
    comp = spec.Composite({"dense": spec.Epsilon(0.01)}, first={"dense": rule})
    keras.utils.set_random_seed(0)
    image = keras.Sequential([L.Input((4, 4, 2)), L.Flatten(), L.Dense(8, activation="relu"), L.Dense(3)])
    flat = keras.Sequential([L.Input((32,)), L.Dense(8, activation="relu"), L.Dense(3)])
    flat.set_weights(image.get_weights())
    x = np.random.default_rng(0).uniform(size=(3, 4, 4, 2)).astype(np.float32)
    ours = xk.xai.explain(image, x, target=1, method="lrp", composite=comp)
    want = xk.xai.explain(flat, x.reshape(3, -1), target=1, method="lrp", composite=comp)
    np.testing.assert_allclose(ours, want.reshape(x.shape), rtol=1e-6, atol=1e-7 * np.abs(want).max())
    assert xk.xai.explain(image, x, target=1, method="lrp").shape == x.shape  # the default composite
