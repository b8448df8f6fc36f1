"""Guided backprop and deconvnet on Keras models (``modified_step`` of the TF relevance facet):
equal to a numpy backward pass with the modified ReLUs, different from the plain gradient, equal
to the torch backend on the same weights, the model unchanged, and a model without a reachable
ReLU refused."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

keras = pytest.importorskip("keras")
tf = pytest.importorskip("tensorflow")

import xaikit as xk  # noqa: E402
from tests.xai.models import cnn, cnn_weights, from_layout, images, to_channel_first  # noqa: E402
from xaikit.errors import XaikitValueError  # noqa: E402

L = keras.layers


def _mlp(rng: np.random.Generator) -> tuple[Any, list[np.ndarray]]:
    """Dense(6, relu) -> Dense(5) -> ReLU() -> Dense(3): a fused ReLU and a ReLU layer."""
    model = keras.Sequential([L.Input((4,)), L.Dense(6, activation="relu"), L.Dense(5), L.ReLU(), L.Dense(3)])
    weights = [rng.normal(size=w.shape).astype(np.float32) for w in model.get_weights()]
    weights[1], weights[3] = np.abs(weights[1]) + 0.5, np.abs(weights[3]) + 0.5  # no row all dead
    model.set_weights(weights)
    return model, [w.astype(np.float64) for w in weights]


def _numpy(weights: list[np.ndarray], x: np.ndarray, target: int, mode: str) -> np.ndarray:
    k1, b1, k2, b2, k3, _ = weights
    a1 = x @ k1 + b1
    a2 = np.maximum(a1, 0) @ k2 + b2

    def relu_back(g: np.ndarray, a: np.ndarray) -> np.ndarray:
        if mode == "guided":
            return np.maximum(g, 0) * (a > 0)
        if mode == "deconvnet":
            return np.maximum(g, 0)
        return g * (a > 0)

    g = np.broadcast_to(k3[:, target], a2.shape)
    g = relu_back(g, a2) @ k2.T
    return relu_back(g, a1) @ k1.T


@pytest.mark.parametrize("method", ["guided_backprop", "deconvnet", "vanilla"])
def test_equals_numpy_and_differs_from_vanilla(method: str) -> None:
    rng = np.random.default_rng(0)
    model, weights = _mlp(rng)
    x = rng.normal(size=(16, 4)).astype(np.float32)
    got = xk.xai.explain(model, x, target=1, method=method)
    mode = {"guided_backprop": "guided", "deconvnet": "deconvnet", "vanilla": "plain"}[method]
    want = _numpy(weights, x.astype(np.float64), 1, mode)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6 * np.abs(want).max())
    if method != "vanilla":
        plain = _numpy(weights, x.astype(np.float64), 1, "plain")
        assert np.abs(want - plain).max() > 0.1 * np.abs(plain).max()


@pytest.mark.parametrize("method", ["guided_backprop", "deconvnet"])
def test_torch_equals_keras(method: str) -> None:
    torch = pytest.importorskip("torch")
    w = cnn_weights(3)
    tm, km = cnn("torch", w).eval(), cnn("tf", w)
    x = images(np.random.default_rng(1), batch=4)
    with torch.no_grad():
        target = tm(torch.as_tensor(to_channel_first(x))).argmax(1).numpy()
    a_t = from_layout("torch", xk.xai.explain(tm, to_channel_first(x), target=target, method=method))
    a_k = xk.xai.explain(km, x, target=target, method=method)
    np.testing.assert_allclose(a_k, a_t, rtol=1e-5, atol=1e-5 * np.abs(a_t).max())
    plain = xk.xai.explain(km, x, target=target, method="vanilla")
    assert np.abs(a_k - plain).max() > 0.05 * np.abs(plain).max()


def test_deconvnet_and_guided_are_separate_steps_and_restore_the_model() -> None:
    """The two modes trace separate steps (the guided graph is never reused for deconvnet),
    and every swapped activation is put back."""
    rng = np.random.default_rng(2)
    model, weights = _mlp(rng)
    acts = [la.__dict__.get("activation") for la in model.layers]
    calls = ["call" in la.__dict__ for la in model.layers]
    x = rng.normal(size=(3, 4)).astype(np.float32)
    g = xk.xai.explain(model, x, target=0, method="guided_backprop")
    d = xk.xai.explain(model, x, target=0, method="deconvnet")
    g2 = xk.xai.explain(model, x, target=0, method="guided_backprop")
    np.testing.assert_array_equal(g, g2)
    np.testing.assert_allclose(d, _numpy(weights, x.astype(np.float64), 0, "deconvnet"), rtol=1e-5, atol=1e-6)
    assert [la.__dict__.get("activation") for la in model.layers] == acts
    assert ["call" in la.__dict__ for la in model.layers] == calls
    plain = xk.xai.explain(model, x, target=0, method="vanilla")
    np.testing.assert_allclose(plain, _numpy(weights, x.astype(np.float64), 0, "plain"), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("method", ["guided_backprop", "deconvnet"])
def test_a_model_without_reachable_relus_is_refused(method: str) -> None:
    model = keras.Sequential([L.Input((4,)), L.Dense(5, activation="tanh"), L.Dense(2)])
    x = np.ones((2, 4), np.float32)
    name = "guided backprop" if method == "guided_backprop" else "deconvnet"
    with pytest.raises(XaikitValueError, match=rf"{name} modifies the backward pass .* has no ReLU"):
        xk.xai.explain(model, x, target=0, method=method)


class _ReluInCall(keras.layers.Layer):
    """A custom layer whose ReLU is a tf.nn.relu call: no swap reaches it."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.dense = L.Dense(5)

    def call(self, x: Any) -> Any:
        return tf.nn.relu(self.dense(x))


@pytest.mark.parametrize("method", ["guided_backprop", "deconvnet", "guided_gradcam"])
def test_a_relu_out_of_reach_beside_reachable_ones_is_refused(method: str) -> None:
    """One ReLU in a custom layer's call, one a Dense activation: the swap reaches only the
    second, so the map would be modified in part. It used to come back without a word."""
    keras.utils.set_random_seed(0)
    inp = L.Input((6, 6, 2))
    h = L.Conv2D(3, 3, padding="same", activation="relu", name="conv")(inp)
    out = L.Dense(2)(_ReluInCall(name="custom")(L.Flatten()(h)))
    model = keras.Model(inp, out)
    x = np.random.default_rng(0).normal(size=(2, 6, 6, 2)).astype(np.float32)
    own = model.get_layer("conv").__dict__.get("activation")
    options = {"layer": "conv"} if method == "guided_gradcam" else {}
    name = "deconvnet" if method == "deconvnet" else r"guided backprop \(guided_backprop, guided_gradcam\)"
    with pytest.raises(
        XaikitValueError, match=rf"{name} modifies .* 1 ReLU op\(s\) .*'[^']*custom[^']*/Relu'.* only in part"
    ):
        xk.xai.explain(model, x, target=0, method=method, **options)
    assert model.get_layer("conv").__dict__.get("activation") is own  # the swap is undone
    if method == "guided_gradcam":  # its map also depends on the class evidence at the layer
        return
    # the reachable ReLUs alone are modified and explained as before
    reachable = keras.Model(inp, L.Dense(2)(L.Flatten()(h)))
    got = xk.xai.explain(reachable, x, target=0, method=method, **options)
    assert np.isfinite(got).all() and np.abs(got).max() > 0
