"""Target objects (``xk.targets``) through the rule-based methods, torch and Keras on the same
weights. On a linear 1x1-conv segmenter every target's score is linear in the input, with the
gradient ``G[p, c] = sum_k T[k, p] w[k, c]`` (T the target's weight on logit (k, p)): LRP-0
(``lrp_epsilon`` with epsilon 0) is gradient x input = ``x * G``, DeepLIFT is ``(x - baseline) * G``
(DeepLiftShap its mean over the references), both exactly 0 outside a region. On
``conv1x1 -> ReLU -> conv1x1`` guided backprop and deconvnet are their analytic modified
gradients and LRP-0 is gradient x input; the default LRP composite is 0 outside a region and the
same in torch and Keras. ``Class(k)`` and a callable picking class k are bit-equal to
``target=k``; the model is unchanged; the Keras LRP and DeepLIFT steps are traced once across
masks."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import xaikit as xk
from tests.test_targets_cam import (
    FRAMEWORKS,
    KCLS,
    KINDS,
    B,
    C,
    H,
    K,
    W,
    batch,
    build,
    channel_last,
    forward,
    make_params,
    target_of,
    weights_of,
)

# one pixel (Output) whose ReLU units are all off for a sample has an exactly-0 map (the health
# check warns); the maps are compared with their analytic values, zeros included
pytestmark = pytest.mark.filterwarnings("ignore::xaikit.errors.DegenerateMapWarning")


@pytest.fixture(scope="module")
def params() -> dict[str, np.ndarray]:
    return make_params()


RULES = ("lrp", "lrp_epsilon", "deeplift", "deepliftshap", "guided_backprop", "deconvnet")


def linear(framework: str, p: dict[str, np.ndarray]) -> Any:
    """A 1x1 convolution C -> K (weights w2 @ w1, bias b2): class k's logit at a pixel is
    w[k] . x[pixel] + b[k]."""
    if framework == "torch":
        import torch

        conv = torch.nn.Conv2d(C, K, 1)
        with torch.no_grad():
            conv.weight.copy_(torch.as_tensor((p["w2"] @ p["w1"])[:, :, None, None]))
            conv.bias.copy_(torch.as_tensor(p["b2"]))
        return conv
    import keras

    inp = keras.Input((H, W, C))
    layer = keras.layers.Conv2D(K, 1)
    model = keras.Model(inp, layer(inp))
    layer.set_weights([(p["w2"] @ p["w1"]).T[None, None], p["b2"]])
    return model


def linear_logits(p: dict[str, np.ndarray], x: np.ndarray) -> np.ndarray:
    w = (p["w2"] @ p["w1"]).astype(np.float64)
    return np.einsum("kc,bhwc->bkhw", w, x.astype(np.float64)) + p["b2"][None, :, None, None]


def explain(framework: str, model: Any, x: np.ndarray, target: Any, method: str, **kw: Any) -> np.ndarray:
    return channel_last(
        framework, np.asarray(xk.xai.explain(model, batch(framework, x), target=target, method=method, **kw))
    )


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("kind", KINDS)
def test_lrp0_and_deeplift_of_a_linear_segmenter_are_the_analytic_gradient_times_input(
    framework: str, kind: str, params: dict[str, np.ndarray]
) -> None:
    model = linear(framework, params)
    x = params["x"]
    if kind == "region_none":  # the linear model's own predicted region of each sample's main class
        labels = linear_logits(params, x).argmax(axis=1)
        classes = [int(np.bincount(row.ravel(), minlength=K).argmax()) for row in labels]
        t = np.zeros((B, K, H, W))
        for i, k in enumerate(classes):
            t[i, k] = labels[i] == k
        target: Any = xk.targets.ClassRegion(classes)
    else:
        t = weights_of(kind, linear_logits(params, x), params)
        target = target_of(kind, framework, params)
    g = np.einsum("bkhw,kc->bhwc", t, (params["w2"] @ params["w1"]).astype(np.float64))
    off = t.sum(axis=1) == 0
    lrp0 = explain(framework, model, x, target, "lrp_epsilon", epsilon=0.0)
    np.testing.assert_allclose(lrp0, x * g, rtol=1e-5, atol=1e-6)
    dl = explain(framework, model, x, target, "deeplift", baseline="zeros")
    np.testing.assert_allclose(dl, x * g, rtol=1e-5, atol=1e-6)
    refs = np.random.default_rng(3).normal(size=(3, H, W, C)).astype(np.float32)
    shap = explain(framework, model, x, target, "deepliftshap", baselines=batch(framework, refs))
    want = (x[:, None] - refs[None]).mean(axis=1) * g
    np.testing.assert_allclose(shap, want, rtol=1e-4, atol=1e-5)
    if kind != "similarity":
        for a in (lrp0, dl, shap):
            assert np.all(a[off] == 0)


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("kind", KINDS)
def test_modified_backprops_and_lrp_of_a_relu_segmenter(
    framework: str, kind: str, params: dict[str, np.ndarray]
) -> None:
    model = build(framework, params)
    x = params["x"]
    z, _, logits = forward(params, x)
    t = weights_of(kind, logits, params)
    target = target_of(kind, framework, params)
    w1 = params["w1"].astype(np.float64)
    da = np.einsum("bkhw,kf->bfhw", t, params["w2"].astype(np.float64))
    cases = {
        "guided_backprop": np.einsum("bfhw,fc->bhwc", da * (da > 0) * (z > 0), w1),
        "deconvnet": np.einsum("bfhw,fc->bhwc", np.maximum(da, 0), w1),
        "lrp_epsilon": x * np.einsum("bfhw,fc->bhwc", da * (z > 0), w1),  # LRP-0 = gradient x input
    }
    for method, want in cases.items():
        kw = {"epsilon": 0.0} if method == "lrp_epsilon" else {}
        got = explain(framework, model, x, target, method, **kw)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max(), err_msg=method)
    if kind != "similarity":
        off = t.sum(axis=1) == 0
        for method in RULES:
            got = explain(framework, model, x, target, method)
            assert np.abs(got).max() > 0, method
            assert np.all(got[off] == 0), method


@pytest.mark.parametrize("kind", KINDS)
def test_torch_and_keras_rules_agree_on_the_same_weights(kind: str, params: dict[str, np.ndarray]) -> None:
    models = {fw: build(fw, params) for fw in FRAMEWORKS}
    refs = np.random.default_rng(4).normal(size=(2, H, W, C)).astype(np.float32)
    for method in RULES:
        kw = {"baselines": refs} if method == "deepliftshap" else {}
        maps = [
            explain(
                fw,
                models[fw],
                params["x"],
                target_of(kind, fw, params),
                method,
                **({"baselines": batch(fw, refs)} if kw else {}),
            )
            for fw in FRAMEWORKS
        ]
        np.testing.assert_allclose(
            maps[0], maps[1], rtol=1e-4, atol=1e-5 * np.abs(maps[0]).max(), err_msg=method
        )


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_class_object_and_callable_are_bit_equal_to_an_int_target(
    framework: str, params: dict[str, np.ndarray]
) -> None:
    model = build(framework, params, pool=True)
    if framework == "torch":
        before = [t.detach().clone().numpy() for t in model.state_dict().values()]
    else:
        before = [np.array(v) for v in model.get_weights()]

    def pick(out: Any) -> Any:
        return out[:, 1]

    for method in RULES:
        ref = explain(framework, model, params["x"], 1, method)
        for target in (xk.targets.Class(1), pick):
            np.testing.assert_array_equal(
                explain(framework, model, params["x"], target, method), ref, err_msg=method
            )
    after = (
        [t.detach().numpy() for t in model.state_dict().values()]
        if framework == "torch"
        else model.get_weights()
    )
    for u, v in zip(before, after):
        np.testing.assert_array_equal(np.asarray(u), np.asarray(v))


def test_keras_rule_steps_traced_once_for_new_masks(params: dict[str, np.ndarray]) -> None:
    model = build("tf", params)
    bk = xk.backend.get_backend(model)
    for i in range(3):
        mask = np.zeros((H, W), dtype=bool)
        mask[i : i + 2, :] = True
        target = xk.targets.ClassRegion(i, mask=mask)
        for method in ("lrp", "deeplift", "deconvnet"):
            explain("tf", model, params["x"], target, method)
    assert bk.traces(model, "lrp") == 1
    assert bk.traces(model, "deconvnet") == 1
    assert bk.traces(model, "deeplift") == 1


def test_rules_bad_targets_are_refused_naming_target(params: dict[str, np.ndarray]) -> None:
    model = build("torch", params)
    with pytest.raises(xk.errors.XaikitValueError, match=r"target=ClassRegion.*mask must be"):
        explain("torch", model, params["x"], xk.targets.ClassRegion(KCLS, mask=np.ones((2, 2))), "lrp")
    with pytest.raises(xk.errors.XaikitValueError, match=r"target=Output.*index"):
        explain("torch", model, params["x"], xk.targets.Output(K * H * W), "deeplift")
