"""LRP on whole Keras models: a multiplicative gate (squeeze-excitation), the forms of one model
(nested, saved and loaded, subclassed: the BatchNorm merge needs a graph to see), and
keras.applications.MobileNetV2 with calibrated BatchNorm."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

keras = pytest.importorskip("keras")
tf = pytest.importorskip("tensorflow")

import xaikit as xk  # noqa: E402
from xaikit.xai.rules import spec  # noqa: E402

L = keras.layers
LRP0 = spec.Composite({"conv": spec.Zero(), "dense": spec.Zero(), "avgpool": spec.Norm(0.0)})


def _se_net(bias_free: bool) -> Any:
    inp = keras.Input((8, 8, 3))
    h = L.Conv2D(6, 3, padding="same", activation="relu", use_bias=not bias_free)(inp)
    s = L.GlobalAveragePooling2D(keepdims=True)(h)
    s = L.Dense(6, activation="sigmoid", bias_initializer="ones")(L.Dense(3, activation="relu")(s))
    h = L.Multiply()([h, s])  # the gate: relevance goes to h only
    out = L.Dense(3, use_bias=not bias_free)(L.Flatten()(h))
    return keras.Model(inp, out)


def test_multiply_gate_passes_relevance_to_the_signal_only() -> None:
    keras.utils.set_random_seed(0)
    model = _se_net(bias_free=True)
    x = np.random.default_rng(0).normal(size=(3, 8, 8, 3)).astype(np.float32)
    rel = xk.xai.explain(model, x, target=[0, 1, 2], method="lrp", composite=LRP0)
    scores = model(x).numpy()[np.arange(3), [0, 1, 2]]
    # conserved: the gate's branch gets nothing (a plain gradient into it would count the
    # score twice: once through the signal, once through the gate)
    np.testing.assert_allclose(rel.reshape(3, -1).sum(axis=1), scores, rtol=1e-5, atol=1e-6)
    grad_x_input = xk.xai.explain(model, x, target=[0, 1, 2], method="input_x_gradient")
    assert np.abs(grad_x_input.reshape(3, -1).sum(axis=1) - scores).max() > 1e-2 * np.abs(scores).max()


def _block() -> list[Any]:
    return [
        L.Conv2D(4, 3, name="c1"),
        L.BatchNormalization(name="bn1"),
        L.ReLU(),
        L.Conv2D(4, 3, padding="same", name="c2"),
        L.BatchNormalization(name="bn2"),
        L.ReLU(),
        L.GlobalAveragePooling2D(),
        L.Dense(3, name="fc"),
    ]


def _calibrated(model: Any, rng: np.random.Generator) -> Any:
    from xaikit.architecture.tensorflow import calibrate_batchnorm

    calibrate_batchnorm(model, rng.normal(size=(32, 8, 8, 3)).astype(np.float32))
    return model


class SubclassedBlock(keras.Model):
    """The block as a subclassed model (no graph: nothing tells that c1 feeds bn1 only)."""

    def __init__(self) -> None:
        super().__init__()
        self.parts = _block()

    def call(self, x: Any) -> Any:
        for part in self.parts:
            x = part(x)
        return x


@pytest.mark.parametrize("composite", ["epsilon_plus_flat", "epsilon_gamma_box", "epsilon_alpha2_beta1"])
def test_model_forms(composite: str, tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    keras.utils.set_random_seed(1)
    seq = _calibrated(keras.Sequential([L.Input((8, 8, 3)), *_block()]), rng)
    x = rng.normal(size=(2, 8, 8, 3)).astype(np.float32)
    kw: dict[str, Any] = {"target": [0, 2], "method": "lrp", "composite": composite, "low": -3.0, "high": 3.0}
    want = xk.xai.explain(seq, x, **kw)
    unmerged = xk.xai.explain(seq, x, canonize=False, **kw)
    assert np.abs(want - unmerged).max() > 1e-3 * np.abs(want).max()  # the merge matters here

    inp = keras.Input((8, 8, 3))
    inner = keras.Sequential([L.Input((8, 8, 3)), *_block()[:-1]])
    nested = keras.Model(inp, L.Dense(3, name="fc")(inner(inp)))
    path = tmp_path / "seq.keras"
    seq.save(path)
    loaded = keras.models.load_model(path)
    func_in = keras.Input((8, 8, 3))
    h = func_in
    for part in _block():
        h = part(h)
    functional = keras.Model(func_in, h)
    sub = SubclassedBlock()
    sub(x)
    for other in (nested, loaded, functional, sub):
        other.set_weights(seq.get_weights())
        got = xk.xai.explain(other, x, **kw)
        expected = unmerged if other is sub else want
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5 * np.abs(expected).max())


def test_mobilenet_v2() -> None:
    """keras.applications.MobileNetV2 (random weights, calibrated BatchNorm): every one of its 52
    BatchNorms merged; the relevance is finite, and its sum is a stable fraction of the score
    (z+ on convolutions whose merged biases absorb relevance: about 5% reaches the input with
    canonize=True, about 60% without the merge, where the BatchNorm shifts absorb less)."""
    from xaikit.architecture.tensorflow import calibrate_batchnorm
    from xaikit.backend.tf.lrp_plan import merge_pairs

    keras.utils.set_random_seed(0)
    model = keras.applications.MobileNetV2(
        weights=None, input_shape=(64, 64, 3), classes=5, classifier_activation=None
    )
    rng = np.random.default_rng(0)
    calibrate_batchnorm(model, rng.uniform(-1, 1, (64, 64, 64, 3)).astype(np.float32))
    bns = [la for la in model.layers if isinstance(la, L.BatchNormalization)]
    assert len(merge_pairs(model)) == len(bns) == 52
    x = rng.uniform(-1, 1, (2, 64, 64, 3)).astype(np.float32)
    before = [w.numpy().copy() for w in model.weights]
    scores = model(x).numpy()
    target = scores.argmax(axis=1)
    score = scores[np.arange(2), target]
    rel = xk.xai.explain(model, x, target=target, method="lrp", composite="epsilon_plus_flat", canonize=True)
    assert np.isfinite(rel).all()
    share = rel.reshape(2, -1).sum(axis=1) / score
    assert np.all((share > 0.02) & (share < 0.2)), share
    plain = xk.xai.explain(
        model, x, target=target, method="lrp", composite="epsilon_plus_flat", canonize=False
    )
    share_plain = plain.reshape(2, -1).sum(axis=1) / score
    assert np.isfinite(plain).all() and np.all((share_plain > 0.3) & (share_plain < 1.0)), share_plain
    for w, was in zip(model.weights, before):
        np.testing.assert_array_equal(w.numpy(), was)


def test_mixed_float16_agrees_with_float32() -> None:
    keras.utils.set_random_seed(2)
    rng = np.random.default_rng(2)
    m32 = _calibrated(keras.Sequential([L.Input((8, 8, 3)), *_block()]), rng)
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        m16 = keras.Sequential([L.Input((8, 8, 3)), *_block()])
    finally:
        keras.mixed_precision.set_global_policy("float32")
    m16.set_weights(m32.get_weights())
    x = rng.normal(size=(2, 8, 8, 3)).astype(np.float32)
    for composite in ("epsilon_plus_flat", "epsilon_gamma_box"):
        a = xk.xai.explain(m32, x, target=0, method="lrp", composite=composite)
        b = xk.xai.explain(m16, x, target=0, method="lrp", composite=composite)
        assert b.dtype == np.float32
        np.testing.assert_allclose(b, a, atol=1e-2 * np.abs(a).max())


def test_a_gate_of_the_signal_s_size_shares_relevance_evenly_whatever_the_order() -> None:
    # a GLU-like product a * sigmoid(g) of two tensors of the same size: the first operand used to
    # get all of it, so Multiply([a, g]) and Multiply([g, a]) differed by 21 % of the largest value
    torch = pytest.importorskip("torch")

    def glu(order: str) -> Any:
        keras.utils.set_random_seed(0)
        inp = keras.Input((6,))
        a = L.Dense(4, use_bias=False, name="a")(inp)
        g = L.Dense(4, activation="sigmoid", use_bias=False, name="g")(inp)
        y = L.Multiply()([a, g] if order == "ag" else [g, a])
        return keras.Model(inp, L.Dense(3, use_bias=False, name="out")(y))

    ag, ga = glu("ag"), glu("ga")
    x = np.random.default_rng(0).normal(size=(5, 6)).astype(np.float32)
    rel = xk.xai.explain(ag, x, target=1, method="lrp", composite=LRP0)
    np.testing.assert_array_equal(rel, xk.xai.explain(ga, x, target=1, method="lrp", composite=LRP0))
    np.testing.assert_allclose(rel.sum(axis=1), ag(x).numpy()[:, 1], rtol=1e-5, atol=1e-6)  # conserved

    class Glu(torch.nn.Module):  # the same weights in torch: its rule for a product of two
        def __init__(self) -> None:  # input-dependent tensors gives each half
            super().__init__()
            self.a, self.g = torch.nn.Linear(6, 4, bias=False), torch.nn.Linear(6, 4, bias=False)
            self.out = torch.nn.Linear(4, 3, bias=False)

        def forward(self, t: Any) -> Any:
            return self.out(self.a(t) * torch.sigmoid(self.g(t)))

    net = Glu().eval()
    with torch.no_grad():
        for name in ("a", "g", "out"):
            getattr(net, name).weight.copy_(torch.from_numpy(ag.get_layer(name).get_weights()[0].T))
    theirs = xk.xai.explain(net, x, target=1, method="lrp", composite=LRP0)
    np.testing.assert_allclose(rel, theirs, atol=1e-5 * np.abs(rel).max())
