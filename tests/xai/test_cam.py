"""Class-activation maps: analytic values, torch == Keras on the same weights, captum, the model
left untouched, and bad input."""

from __future__ import annotations

import contextlib
from typing import Any

import numpy as np
import pytest

import xaikit as xk
from tests.xai.models import from_layout, images, model_for
from xaikit.errors import DegenerateMapWarning, XaikitTypeError, XaikitValueError
from xaikit.xai.cam import CamResult, combine, eigen_projection, upsample
from xaikit.xai.registry import method_names

CAM_METHODS = method_names("cam")

MAPS = [m for m in CAM_METHODS if m != "guided_gradcam"]


def _gap_model(framework: str, conv: np.ndarray, head: np.ndarray) -> Any:
    """conv 3x3 (valid) -> ReLU ("feat") -> global average pool -> linear head, no biases."""
    if framework == "torch":
        import torch

        nn = torch.nn
        model = nn.Sequential()
        model.add_module("conv", nn.Conv2d(conv.shape[1], conv.shape[0], 3, bias=False))
        model.add_module("feat", nn.ReLU())
        model.add_module("pool", nn.AdaptiveAvgPool2d(1))
        model.add_module("flat", nn.Flatten())
        model.add_module("head", nn.Linear(head.shape[1], head.shape[0], bias=False))
        with torch.no_grad():
            model.conv.weight.copy_(torch.as_tensor(conv))
            model.head.weight.copy_(torch.as_tensor(head))
        return model
    import keras

    layers = keras.layers
    model = keras.Sequential(
        [
            layers.Input((8, 8, conv.shape[1])),
            layers.Conv2D(conv.shape[0], 3, use_bias=False, activation="relu", name="feat"),
            layers.GlobalAveragePooling2D(name="pool"),
            layers.Dense(head.shape[0], use_bias=False, name="head"),
        ]
    )
    model.get_layer("feat").set_weights([conv.transpose(2, 3, 1, 0)])
    model.get_layer("head").set_weights([head.T])
    return model


def _conv_relu(x: np.ndarray, conv: np.ndarray) -> np.ndarray:
    """(B, H, W, Cin) x (Cout, Cin, 3, 3) valid conv + ReLU, channel-first out, float64."""
    b, h, w, _ = x.shape
    out = np.zeros((b, conv.shape[0], h - 2, w - 2))
    for i in range(h - 2):
        for j in range(w - 2):
            out[:, :, i, j] = np.einsum("bpqc,ocpq->bo", x[:, i : i + 3, j : j + 3].astype(np.float64), conv)
    return np.maximum(out, 0)


def test_gradcam_on_global_average_pooling_is_cam(framework: str, rng: np.random.Generator) -> None:
    """A linear head on GAP: dA_c = W[t, c] / (h * w) everywhere, so Grad-CAM is CAM scaled by
    1 / (h * w) and HiResCAM equals Grad-CAM; LayerCAM keeps only the positive weights."""
    conv = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    head = rng.standard_normal((3, 4)).astype(np.float32)
    x = rng.random((2, 8, 8, 3)).astype(np.float32)
    model = _gap_model(framework, conv, head)
    xin = np.transpose(x, (0, 3, 1, 2)) if framework == "torch" else x
    target = np.array([0, 2])
    a = _conv_relu(x, conv)  # (B, 4, 6, 6)
    w = head[target].astype(np.float64) / 36.0  # (B, C)
    cam = np.einsum("bc,bchw->bhw", w, a)
    res = xk.xai.explain(model, xin, target=target, method="gradcam", layer="feat", raw=True)
    assert isinstance(res, CamResult) and res.layer == "feat"
    np.testing.assert_allclose(res.maps, np.maximum(cam, 0), rtol=1e-5, atol=1e-6)
    hires = xk.xai.explain(model, xin, target=target, method="hirescam", layer="feat", raw=True)
    np.testing.assert_allclose(hires.maps, np.maximum(cam, 0), rtol=1e-5, atol=1e-6)
    layer = xk.xai.explain(model, xin, target=target, method="layercam", layer="feat", raw=True)
    np.testing.assert_allclose(
        layer.maps, np.einsum("bc,bchw->bhw", np.maximum(w, 0), a), rtol=1e-5, atol=1e-6
    )
    # the default layer is the last spatial one, and the map is upsampled bilinearly
    up = xk.xai.explain(model, xin, target=target, method="gradcam")
    np.testing.assert_allclose(up, upsample(np.maximum(cam, 0), (8, 8)), rtol=1e-5, atol=1e-6)
    eig = xk.xai.explain(model, xin, target=target, method="eigencam", layer="feat", raw=True)
    np.testing.assert_allclose(eig.maps, np.maximum(eigen_projection(a), 0), rtol=1e-4, atol=1e-5)


def test_formulas_by_hand() -> None:
    a = np.array([[[[1.0, 2.0], [0.0, 1.0]], [[2.0, 0.0], [1.0, 1.0]]]])  # (1, 2, 2, 2)
    g = np.array([[[[0.5, -0.5], [1.0, 0.0]], [[-1.0, 0.0], [0.5, 0.5]]]])
    s = a.sum(axis=(2, 3))[0]  # (4, 4)
    # XGrad-CAM: w_c = sum(g * a) / sum(a)
    wx = np.array([(0.5 - 1.0 + 0 + 0) / s[0], (-2.0 + 0 + 0.5 + 0.5) / s[1]])
    np.testing.assert_allclose(
        combine("xgradcam", a, g)[0], np.maximum(np.tensordot(wx, a[0], 1), 0), atol=1e-6
    )
    # Grad-CAM++: alpha = g^2 / (2 g^2 + sum(a) g^3), w_c = sum(alpha * relu(g))
    g2, g3 = g**2, g**3
    alpha = np.where(g != 0, g2 / (2 * g2 + s[None, :, None, None] * g3 + 1e-6), 0)
    wpp = (alpha * np.maximum(g, 0)).sum(axis=(2, 3))[0]
    np.testing.assert_allclose(combine("gradcam++", a, g)[0], np.maximum(np.tensordot(wpp, a[0], 1), 0))
    np.testing.assert_allclose(combine("hirescam", a, g)[0], np.maximum((g * a).sum(axis=1)[0], 0))


#: the random CNN has no positive Grad-CAM evidence at its last convolution for one of these
#: (image, class) pairs: that map is exactly 0 (as its Guided Grad-CAM), and said so
ZERO_MAP = ("gradcam", "guided_gradcam")


def _zero_maps(method: str, count: str) -> Any:
    """Expect the warning for the all-zero maps of ``ZERO_MAP`` methods (``count``: "1 of 4")."""
    if method not in ZERO_MAP:
        return contextlib.nullcontext()
    return pytest.warns(DegenerateMapWarning, match=rf"{count} maps are exactly 0 .*'zero'.*layer=")


def _both(method: str, x: np.ndarray, **kw: Any) -> tuple[np.ndarray, np.ndarray]:
    out = []
    for fw in ("torch", "tf"):
        model, layout = model_for(fw, seed=1)
        with _zero_maps(method, "1 of 4"):
            res = xk.xai.explain(model, layout(x), target=[0, 1, 2, 3], method=method, **kw)
        out.append(from_layout(fw, res) if method == "guided_gradcam" else res)
    return out[0], out[1]


@pytest.mark.parametrize("method", CAM_METHODS)
def test_torch_equals_keras_on_the_same_weights(method: str, rng: np.random.Generator) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("tensorflow")
    x = images(rng, batch=4)
    t, k = _both(method, x, max_batch=3)  # two chunks, the second padded for TF
    assert t.shape == ((4, 12, 12, 3) if method == "guided_gradcam" else (4, 12, 12))
    assert np.abs(t).max() > 0
    np.testing.assert_allclose(t, k, rtol=1e-4, atol=1e-4 * np.abs(t).max())


@pytest.mark.parametrize("method", ["gradcam", "scorecam", "guided_gradcam"])
def test_chunked_equals_unchunked(framework: str, method: str, rng: np.random.Generator) -> None:
    model, layout = model_for(framework, seed=2)
    x = layout(images(rng, batch=5))
    with _zero_maps(method, "1 of 5"):
        one = xk.xai.explain(model, x, target=[0, 1, 2, 3, 4], method=method, max_batch=64)
    small = xk.xai.explain(model, x, target=[0, 1, 2, 3, 4], method=method, max_batch=2)  # said once
    np.testing.assert_allclose(small, one, rtol=1e-5, atol=1e-7)


def test_captum_layer_gradcam_and_guided_gradcam(rng: np.random.Generator) -> None:
    torch = pytest.importorskip("torch")
    captum_attr = pytest.importorskip("captum.attr")
    model, layout = model_for("torch", seed=1)
    x = torch.as_tensor(layout(images(rng, batch=4)))
    target = torch.as_tensor([0, 1, 2, 3])
    with _zero_maps("gradcam", "1 of 4"):
        ours = xk.xai.explain(model, x, target=target, method="gradcam", layer="4", raw=True)
    theirs = captum_attr.LayerGradCam(model, model[4]).attribute(x, target=target, relu_attributions=True)
    np.testing.assert_allclose(ours.maps, theirs[:, 0].detach().numpy(), rtol=1e-5, atol=1e-7)
    with _zero_maps("guided_gradcam", "1 of 4"):
        ours_g = xk.xai.explain(model, x, target=target, method="guided_gradcam", layer=model[4])
    theirs_g = captum_attr.GuidedGradCam(model, model[4]).attribute(
        x, target=target, interpolate_mode="bilinear"
    )
    np.testing.assert_allclose(ours_g, theirs_g.detach().numpy(), rtol=1e-5, atol=1e-8)


def test_guided_backprop_torch_inplace_relu(rng: np.random.Generator) -> None:
    """Guided hooks work on ReLU(inplace=True) modules and give captum's GuidedBackprop."""
    torch = pytest.importorskip("torch")
    captum_attr = pytest.importorskip("captum.attr")
    from xaikit.xai._engine.inputs import prepare
    from xaikit.xai._engine.targets import pin_targets
    from xaikit.xai.cam import guided_backprop

    model, layout = model_for("torch", seed=3)
    model[1].inplace = True
    x = torch.as_tensor(layout(images(rng, batch=3)))
    bk = xk.backend.get_backend(model)
    inp = prepare(bk, model, [x], ["x"])
    targets, _ = pin_targets(inp, [1, 2, 3])
    ours = guided_backprop(inp, targets, xk.xai.CallSettings())[0]
    model[1].inplace = False
    theirs = captum_attr.GuidedBackprop(model).attribute(x, target=[1, 2, 3]).detach().numpy()
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-8)


def _vit(framework: str, rng: np.random.Generator) -> tuple[Any, np.ndarray, np.ndarray]:
    """Patch embedding (4x4 patches, 8 channels) -> tokens with a class token -> per-token
    linear "block" -> mean over tokens -> head: the block's output is (B, 1 + 3*3, 8)."""
    pw = rng.standard_normal((8, 3, 4, 4)).astype(np.float32) * 0.3
    bw = rng.standard_normal((8, 8)).astype(np.float32) * 0.5
    cls = rng.standard_normal(8).astype(np.float32)
    hw = rng.standard_normal((3, 8)).astype(np.float32)
    import torch

    nn = torch.nn

    class ViT(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.patch = nn.Conv2d(3, 8, 4, stride=4, bias=False)
            self.cls = nn.Parameter(torch.as_tensor(cls)[None, None])
            self.block = nn.Linear(8, 8, bias=False)
            self.head = nn.Linear(8, 3, bias=False)
            with torch.no_grad():
                self.patch.weight.copy_(torch.as_tensor(pw))
                self.block.weight.copy_(torch.as_tensor(bw))
                self.head.weight.copy_(torch.as_tensor(hw))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            t = self.patch(x).flatten(2).transpose(1, 2)  # (B, 9, 8)
            t = torch.cat([self.cls.expand(len(x), -1, -1), t], dim=1)
            return self.head(torch.tanh(self.block(t)).mean(dim=1))

    x = rng.random((2, 3, 12, 12)).astype(np.float32)
    tokens = np.einsum("bcpiqj,ocij->bpqo", x.reshape(2, 3, 3, 4, 3, 4).astype(np.float64), pw)  # (B,3,3,8)
    tokens = np.concatenate([np.broadcast_to(cls, (2, 1, 8)), tokens.reshape(2, 9, 8)], axis=1)
    block = tokens @ bw.T.astype(np.float64)  # (B, 10, 8)
    return ViT(), x, block


def test_vit_tokens_reshaped_to_a_grid(rng: np.random.Generator) -> None:
    pytest.importorskip("torch")
    model, x, block = _vit("torch", rng)
    target = np.array([0, 2])
    # d score / d block_token = head[t] * (1 - tanh^2) / N: Grad-CAM on the block's output tokens
    g = (
        model.head.weight.detach().numpy().astype(np.float64)[target][:, None, :]
        * (1 - np.tanh(block) ** 2)
        / 10
    )
    a = block[:, 1:].reshape(2, 3, 3, 8).transpose(0, 3, 1, 2)
    da = g[:, 1:].reshape(2, 3, 3, 8).transpose(0, 3, 1, 2)
    want = combine("gradcam", a, da)
    auto = xk.xai.explain(model, x, target=target, method="gradcam", layer="block", raw=True)
    np.testing.assert_allclose(auto.maps, want, rtol=1e-5, atol=1e-7)
    pair = xk.xai.explain(model, x, target=target, method="gradcam", layer="block", reshape=(3, 3), raw=True)
    np.testing.assert_allclose(pair.maps, want, rtol=1e-5, atol=1e-7)

    def fn(t: Any) -> Any:
        return t[:, 1:].reshape(len(t), 3, 3, 8).permute(0, 3, 1, 2)

    custom = xk.xai.explain(model, x, target=target, method="gradcam", layer="block", reshape=fn, raw=True)
    np.testing.assert_allclose(custom.maps, want, rtol=1e-5, atol=1e-7)
    # Score-CAM's ReLU clips the map of one image: the tokens' activations are signed here (tanh)
    with pytest.warns(DegenerateMapWarning, match=r"Score-CAM \(scorecam\).*1 of 2 maps are exactly 0"):
        assert xk.xai.explain(model, x, target=target, method="scorecam", layer="block").shape == (2, 12, 12)


def _torch_state(model: Any) -> tuple[Any, ...]:
    return (
        {k: v.clone() for k, v in model.state_dict().items()},
        [m.training for m in model.modules()],
        [(len(m._forward_hooks), len(m._backward_hooks), len(m._forward_pre_hooks)) for m in model.modules()],
        [p.grad for p in model.parameters()],
        [p.requires_grad for p in model.parameters()],
    )


@pytest.mark.parametrize("method", CAM_METHODS)
def test_model_untouched_even_when_the_call_raises(
    framework: str, method: str, rng: np.random.Generator
) -> None:
    model, layout = model_for(framework, seed=4)
    x = layout(images(rng, batch=2))
    if framework == "torch":
        model.train()
        before = _torch_state(model)
    else:
        before = (
            [w.copy() for w in model.get_weights()],
            [getattr(la, "activation", None) for la in model.layers],
        )
    xk.xai.explain(model, x, method=method)
    with pytest.raises(XaikitValueError):
        xk.xai.explain(model, x, target=[0, 99], method=method)
    if framework == "torch":
        after = _torch_state(model)
        for b, a in zip(before[0].values(), after[0].values()):
            assert torch_equal(b, a)
        assert before[1:] == after[1:]
        assert all(g is None for g in after[3])
    else:
        for b, a in zip(before[0], model.get_weights()):
            np.testing.assert_array_equal(b, a)
        assert all(b is getattr(la, "activation", None) for b, la in zip(before[1], model.layers))


def torch_equal(a: Any, b: Any) -> bool:
    import torch

    return bool(torch.equal(a, b))


def test_keras_guided_relu_restored_after_an_error(rng: np.random.Generator) -> None:
    keras = pytest.importorskip("keras")
    from xaikit.backend.tf.cam import _guided_relus

    model, _ = model_for("tf", seed=4)
    outer = keras.Sequential([keras.layers.Input((12, 12, 3)), keras.layers.ReLU(), model])
    acts = [la.activation for la in model.layers if hasattr(la, "activation")]
    with pytest.raises(RuntimeError, match="boom"), _guided_relus(outer):
        assert "call" in outer.layers[0].__dict__  # swapped inside, nested model included
        swapped = [la.activation for la in model.layers if hasattr(la, "activation")]
        assert sum(a is not b for a, b in zip(acts, swapped)) == 3  # two convs and one dense ReLU
        raise RuntimeError("boom")
    assert [la.activation for la in model.layers if hasattr(la, "activation")] == acts
    assert "call" not in outer.layers[0].__dict__


def test_bad_input(framework: str, rng: np.random.Generator) -> None:
    model, layout = model_for(framework, seed=0)
    x = layout(images(rng, batch=2))
    with pytest.raises(XaikitValueError, match="layer 'nope' is not a"):
        xk.xai.explain(model, x, method="gradcam", layer="nope")
    dense = "8" if framework == "torch" else model.layers[-1].name
    with pytest.raises(XaikitValueError, match=r"must give a spatial .* output"):
        xk.xai.explain(model, x, method="gradcam", layer=dense)
    with pytest.raises(XaikitTypeError, match=r"unknown option\(s\) \['nsamples'\]"):
        xk.xai.explain(model, x, method="gradcam", nsamples=3)
    with pytest.raises(XaikitTypeError, match="layer must be"):
        xk.xai.explain(model, x, method="gradcam", layer=3.5)
    with pytest.raises(XaikitTypeError, match="reshape must be"):
        xk.xai.explain(model, x, method="gradcam", reshape="square")
    with pytest.raises(XaikitValueError, match=r"reshape=.* is for a token output"):
        xk.xai.explain(model, x, method="gradcam", reshape=(2, 2))
    with pytest.raises(XaikitValueError, match="raw=True"):
        xk.xai.explain(model, x, method="guided_gradcam", raw=True)
    with pytest.raises(XaikitTypeError, match="raw must be"):
        xk.xai.explain(model, x, method="gradcam", raw="yes")
    # one image without its batch axis: the hint says to add it (not a channel axis)
    with pytest.raises(
        XaikitValueError,
        match=r"could not be called on the model inputs .*looks like one image without its batch axis: "
        r"add it, e\.g\. x\[None\]",
    ):
        xk.xai.explain(model, x[0], method="gradcam")


def test_default_layer_is_logged(
    framework: str, rng: np.random.Generator, caplog: pytest.LogCaptureFixture
) -> None:
    model, layout = model_for(framework, seed=0)
    with caplog.at_level("INFO", logger="xaikit.xai.cam"):
        res = xk.xai.explain(model, layout(images(rng, batch=1)), method="gradcam", raw=True)
    assert res.layer == ("4" if framework == "torch" else model.layers[2].name)
    assert f"chose layer {res.layer!r}" in caplog.text


def _two_heads(framework: str) -> Any:
    """A stem convolution feeding two heads, each with a convolution of its own: ``"logits"`` (5
    classes, through ``main``) and ``"aux"`` (2, through ``auxconv``, which runs last)."""
    if framework == "torch":
        import torch

        nn = torch.nn

        class TwoHeads(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                torch.manual_seed(0)
                self.stem = nn.Conv2d(3, 4, 3)
                self.main = nn.Conv2d(4, 6, 3)
                self.head = nn.Linear(6, 5)
                self.auxconv = nn.Conv2d(4, 3, 3)
                self.auxhead = nn.Linear(3, 2)

            def forward(self, x: Any) -> dict[str, Any]:
                h = torch.relu(self.stem(x))
                main = self.head(torch.relu(self.main(h)).mean((2, 3)))
                aux = self.auxhead(torch.relu(self.auxconv(h)).mean((2, 3)))
                return {"logits": main, "aux": aux}

        return TwoHeads().eval()
    import keras

    L = keras.layers
    keras.utils.set_random_seed(0)
    i = keras.Input((12, 12, 3))
    h = L.Conv2D(4, 3, activation="relu", name="stem")(i)
    main = L.Dense(5)(L.GlobalAveragePooling2D()(L.Conv2D(6, 3, activation="relu", name="main")(h)))
    aux = L.Dense(2)(L.GlobalAveragePooling2D()(L.Conv2D(3, 3, activation="relu", name="auxconv")(h)))
    return keras.Model(i, {"logits": main, "aux": aux})


@pytest.mark.parametrize("method", ["gradcam", "scorecam", "eigencam"])
def test_default_layer_of_a_two_head_model_follows_output(
    framework: str, method: str, rng: np.random.Generator
) -> None:
    """layer=None on a model with two outputs takes the last spatial layer that the explained
    output depends on: the aux head's convolution runs last, and once was taken for
    output="logits" too (Score-CAM and Eigen-CAM then explained the other head without a word,
    Grad-CAM refused a layer the user never named)."""
    model = _two_heads(framework)
    x = images(rng, batch=2)
    x = np.ascontiguousarray(np.moveaxis(x, -1, 1)) if framework == "torch" else x
    for output, layer in (("logits", "main"), ("aux", "auxconv")):
        res = xk.xai.explain(model, x, method=method, output=output, raw=True)
        assert res.layer == layer
        named = xk.xai.explain(model, x, method=method, output=output, layer=layer, raw=True)
        np.testing.assert_array_equal(res.maps, named.maps)


def test_keras_dict_output_and_guided_step_do_not_hold_the_model(rng: np.random.Generator) -> None:
    """A Keras model with a dict output explains the output named by ``output=`` (the sub-model
    keeps the dict's keys), and the cached guided step holds its model weakly."""
    import gc
    import weakref

    import keras

    # seeded: unseeded weights gave, in some runs, one class no positive Grad-CAM evidence at "c"
    # (an all-zero map, reported as degenerate); with this seed both maps are non-zero
    keras.utils.set_random_seed(2)
    inp = keras.Input((8, 8, 3))
    h = keras.layers.Conv2D(4, 3, padding="same", activation="relu", name="c")(inp)
    g = keras.layers.GlobalAveragePooling2D()(keras.layers.ReLU(name="r")(h))
    head = keras.layers.Dense(3, name="head")
    model = keras.Model(inp, {"logits": head(g), "aux": keras.layers.Dense(2)(g)})
    single = keras.Model(inp, head(g))
    x = rng.uniform(size=(2, 8, 8, 3)).astype(np.float32)
    by_key = xk.xai.explain(model, x, method="gradcam", layer="c", output="logits", target=[0, 2])
    alone = xk.xai.explain(single, x, method="gradcam", layer="c", target=[0, 2])
    assert (by_key.reshape(2, -1).max(axis=1) > 0).all()
    np.testing.assert_allclose(by_key, alone, atol=1e-6)
    xk.xai.explain(model, x, method="guided_gradcam", layer="c", output="logits")
    relu = model.get_layer("r")
    assert "call" not in relu.__dict__  # the class's call shows through again
    ref = weakref.ref(model)
    del model, relu
    gc.collect()
    assert ref() is None


def test_keras_layer_nested_in_a_sub_model_is_reachable(rng: np.random.Generator) -> None:
    """The chosen layer's output is captured while the whole model runs, so a layer nested in a
    sub-model (by name or object) gives the maps of the same layer in a flat model."""
    import keras

    model, _ = model_for("tf", seed=2)
    outer = keras.Sequential([keras.layers.Input((12, 12, 3)), model])
    conv = model.layers[2]  # the second convolution
    x = images(rng, batch=2)
    target = [1, 0]  # classes with positive evidence at this layer in both samples ([0, 1]: a zero map)
    flat = xk.xai.explain(model, x, method="gradcam", layer=conv.name, target=target)
    assert (flat.reshape(2, -1).max(axis=1) > 0).all()
    for layer in (conv.name, conv):
        np.testing.assert_allclose(
            xk.xai.explain(outer, x, method="gradcam", layer=layer, target=target), flat, rtol=1e-5, atol=1e-7
        )
    assert "call" not in conv.__dict__
    stray = keras.layers.Conv2D(2, 3, name="stray")
    with pytest.raises(XaikitValueError, match="got the layer 'stray', which is not one"):
        xk.xai.explain(outer, x, method="gradcam", layer=stray)


def test_keras_cam_takes_model_kwargs(rng: np.random.Generator) -> None:
    """A per-sample argument of a subclassed model's call follows the rows: scaling the scores by
    s_b > 0 scales every gradient CAM by s_b (and leaves Eigen-CAM, which reads A only, alone)."""
    import keras

    class Scaled(keras.Model):
        def __init__(self) -> None:
            super().__init__()
            self.conv = keras.layers.Conv2D(4, 3, activation="relu", name="conv")
            self.pool = keras.layers.GlobalAveragePooling2D()
            self.head = keras.layers.Dense(3)

        def call(self, x: Any, scale: Any = None) -> Any:
            out = self.head(self.pool(self.conv(x)))
            return out if scale is None else out * scale

    keras.utils.set_random_seed(1)  # weights whose maps are not all zero for these targets
    model = Scaled()
    x = images(rng, batch=3, size=8)
    scale = np.array([[0.5], [2.0], [3.0]], np.float32)
    for method in ("gradcam", "layercam", "hirescam"):
        plain = xk.xai.explain(model, x, method=method, target=[0, 1, 2], raw=True).maps
        assert np.all(plain.max(axis=(1, 2)) > 0), method
        scaled = xk.xai.explain(
            model, x, method=method, target=[0, 1, 2], raw=True, model_kwargs={"scale": scale}, max_batch=2
        ).maps
        np.testing.assert_allclose(scaled, plain * scale[:, :, None], rtol=1e-5, atol=1e-7)
    eigen = xk.xai.explain(model, x, method="eigencam", raw=True, model_kwargs={"scale": scale}).maps
    np.testing.assert_allclose(eigen, xk.xai.explain(model, x, method="eigencam", raw=True).maps, rtol=1e-6)


def test_given_classes_are_checked_on_the_layer_probe(framework: str, rng: np.random.Generator) -> None:
    """A CAM with given classes reads the class count off the row its layer probe runs (no pass
    of its own): a class the model lacks is refused before any row of the batch runs, and valid
    classes give the same maps as before. torch: counted by a hook on the model's forward."""
    conv = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    head = rng.standard_normal((3, 4)).astype(np.float32)
    model = _gap_model(framework, conv, head)
    x = rng.random((2, 8, 8, 3)).astype(np.float32)
    x = np.transpose(x, (0, 3, 1, 2)) if framework == "torch" else x
    calls: list[int] = []
    if framework == "torch":
        model.register_forward_pre_hook(lambda _m, args: calls.append(int(args[0].shape[0])))
    for method in MAPS:
        for bad in (3, [0, 5], -1):
            calls.clear()
            with pytest.raises(
                XaikitValueError, match=r"target classes must lie in \[0, 2\] for a model with 3 outputs"
            ):
                xk.xai.explain(model, x, target=bad, method=method, layer="feat")
            if framework == "torch":
                assert calls == [1], (method, calls)  # the probe's row only
        with pytest.raises(XaikitValueError, match="target must be one class or one class per sample"):
            xk.xai.explain(model, x, target=[0, 1, 2], method=method)
        calls.clear()
        given = xk.xai.explain(model, x, target=[0, 2], method=method, layer="feat")
        if framework == "torch" and method != "scorecam":  # a one-pass CAM: the probe and the batch
            assert calls == [1, 2], (method, calls)
        assert given.shape == (2, 8, 8) and np.isfinite(given).all()
