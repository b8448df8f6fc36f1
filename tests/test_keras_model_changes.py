"""A Keras model changed in Python after it was explained (its softmax swapped for a linear
activation, a Normalization adapted again, a Rescaling scale set) is explained as it is now: the
compiled steps froze such attributes when they were traced, and every method kept explaining the
model as it was, while an unchanged model keeps its steps (no new trace)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import xaikit as xk
from xaikit.backend import get_backend

keras = pytest.importorskip("keras")
tf = pytest.importorskip("tensorflow")

METHODS = {"vanilla": {}, "gradcam": {}, "occlusion": {"window": 4}, "lrp_epsilon": {}, "deeplift": {}}


def _net(pre: tuple[Any, ...] = (), act: str | None = None) -> Any:
    keras.utils.set_random_seed(0)
    return keras.Sequential(
        [
            keras.Input((12, 12, 3)),
            *pre,
            keras.layers.Conv2D(4, 3, activation="relu"),
            keras.layers.Conv2D(4, 3, activation="relu", name="last_conv"),
            keras.layers.GlobalAveragePooling2D(),
            keras.layers.Dense(3, activation=act, name="head"),
        ]
    )


def _grad(model: Any, x: np.ndarray, target: np.ndarray) -> np.ndarray:
    xt = tf.convert_to_tensor(x)
    with tf.GradientTape() as tape:
        tape.watch(xt)
        y = model(xt, training=False)
        s = tf.reduce_sum(tf.gather(y, target, axis=1, batch_dims=1))
    return tape.gradient(s, xt).numpy()


X = np.random.default_rng(0).random((2, 12, 12, 3)).astype(np.float32)
T = np.array([0, 1])


@pytest.mark.filterwarnings("ignore::xaikit.DegenerateMapWarning")  # a random net: some CAMs are 0
@pytest.mark.filterwarnings("ignore::xaikit.IncompleteMapWarning")  # DeepLIFT through the softmax
def test_swapping_the_softmax_for_a_linear_activation_explains_the_logits() -> None:
    # the usual way to explain logits, as the degenerate-map warning advises: every method
    # returned the softmax model's maps, bit for bit
    model = _net(act="softmax")
    for method, opts in METHODS.items():
        xk.xai.explain(model, X, target=T, method=method, **opts)
    model.get_layer("head").activation = keras.activations.linear
    logits = _net(act=None)  # the same weights (same seed), a linear head from the start
    for method, opts in METHODS.items():
        np.testing.assert_allclose(
            xk.xai.explain(model, X, target=T, method=method, **opts),
            xk.xai.explain(logits, X, target=T, method=method, **opts),
            rtol=1e-5,
            atol=1e-7,
            err_msg=method,
        )
    vanilla = xk.xai.explain(model, X, target=T, method="vanilla")
    np.testing.assert_allclose(vanilla, _grad(model, X, T), rtol=1e-5, atol=1e-8)


def test_a_normalization_adapted_again_is_explained_with_its_new_statistics() -> None:
    # the classes were pinned on the new model and the gradient taken of the old one
    norm = keras.layers.Normalization()
    norm.adapt(X * 255)
    model = _net(pre=(norm,))
    xk.xai.explain(model, X * 255, method="vanilla")
    norm.adapt(X * 255 + 100.0)
    target = np.argmax(model(X * 255).numpy(), 1)
    maps = xk.xai.explain(model, X * 255, method="vanilla")
    np.testing.assert_allclose(maps, _grad(model, X * 255, target), rtol=1e-5, atol=1e-9)


def test_a_new_rescaling_scale_is_explained() -> None:
    scale = keras.layers.Rescaling(1 / 255)
    model = _net(pre=(scale,))
    before = xk.xai.explain(model, X * 255, target=T, method="vanilla")
    scale.scale = 2 / 255
    after = xk.xai.explain(model, X * 255, target=T, method="vanilla")
    np.testing.assert_allclose(after, _grad(model, X * 255, T), rtol=1e-5, atol=1e-9)
    assert not np.allclose(after, before)


@pytest.mark.filterwarnings("ignore::xaikit.DegenerateMapWarning")
def test_an_unchanged_model_keeps_its_steps() -> None:
    # the state is taken at the end of each call: a model built by its first call is not new
    model = keras.Sequential(
        [keras.layers.Conv2D(4, 3, activation="relu"), keras.layers.Flatten(), keras.layers.Dense(3)]
    )
    for _ in range(3):
        xk.xai.explain(model, X, target=T, method="vanilla")
        xk.xai.explain(model, X, target=T, method="gradcam")
    from xaikit.backend.tf.steps import KINDS

    bk = get_backend(model)
    counts = {kind: bk.traces(model, kind) for kind in KINDS}
    assert counts["cam_grad"] >= 1 and counts["sweep"] + counts["grad"] >= 1
    for _ in range(3):
        xk.xai.explain(model, X, target=T, method="vanilla")
        xk.xai.explain(model, X, target=T, method="gradcam")
    assert {kind: bk.traces(model, kind) for kind in counts} == counts
