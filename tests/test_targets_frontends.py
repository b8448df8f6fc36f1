"""Target objects (``xk.targets``) through the front ends: ``SaliencyNet(...).get_*_masks(target=)``
and the ``Saliency`` trace (``target=``) explain a region of a 1x1-convolution segmenter exactly
as ``explain`` does, torch and Keras; ``explain_dataset`` refuses them, naming ``target``."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import xaikit as xk
from xaikit.errors import XaikitValueError
from xaikit.trace.xai.saliency import Saliency, _mask_axis, _method_display

FRAMEWORKS = ("torch", "tf")
C, K, H, W, B = 3, 4, 4, 4, 2
MASK = np.zeros((H, W), dtype=bool)
MASK[1:3, 0:3] = True


@pytest.fixture(scope="module")
def weights() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return rng.normal(size=(K, C)).astype(np.float32), rng.normal(size=K).astype(np.float32)


@pytest.fixture(scope="module")
def images() -> np.ndarray:
    """(B, H, W, C) channel-last images."""
    return np.random.default_rng(1).normal(size=(B, H, W, C)).astype(np.float32)


def segmenter(framework: str, w: np.ndarray, b: np.ndarray, pool: bool = False) -> Any:
    """A 1x1 convolution C -> K; with ``pool`` averaged over the image (a linear classifier)."""
    if framework == "torch":
        torch = pytest.importorskip("torch")
        conv = torch.nn.Conv2d(C, K, 1)
        with torch.no_grad():
            conv.weight.copy_(torch.as_tensor(w[:, :, None, None]))
            conv.bias.copy_(torch.as_tensor(b))
        return torch.nn.Sequential(conv, torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten()) if pool else conv
    keras = pytest.importorskip("keras")
    inp = keras.Input((H, W, C))
    layer = keras.layers.Conv2D(K, 1)
    out = layer(inp)
    model = keras.Model(inp, keras.layers.GlobalAveragePooling2D()(out) if pool else out)
    layer.set_weights([w.T[None, None], b])
    return model


def layout(framework: str, x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x.transpose(0, 3, 1, 2)) if framework == "torch" else x


def channel_last(framework: str, a: np.ndarray) -> np.ndarray:
    return a.transpose(0, 2, 3, 1) if framework == "torch" else a


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("method", ["get_masks", "get_integrated_masks", "get_smoothed_masks"])
def test_saliency_net_explains_a_region(
    framework: str, method: str, weights: Any, images: np.ndarray
) -> None:
    """Raw masks of a region: the class weight inside the mask (times x for IG from a zero
    baseline), exactly 0 outside; the prediction key holds the region's clean score."""
    w, b = weights
    net = xk.xai.SaliencyNet(segmenter(framework, w, b), "x", "score", outputs="sal", seed=0)
    x = layout(framework, images)
    opts: dict[str, Any] = {"baseline": "zeros"} if method == "get_integrated_masks" else {}
    if method == "get_smoothed_masks":
        opts = {"nsamples": 3, "magnitude": False}
    out = getattr(net, method)({"x": x}, target=xk.targets.ClassRegion(2, mask=MASK), raw=True, **opts)
    grad = np.broadcast_to(MASK[None, :, :, None] * w[2], images.shape)
    expected = grad * images if method == "get_integrated_masks" else grad
    np.testing.assert_allclose(channel_last(framework, out["sal"]), expected, rtol=1e-4, atol=1e-5)
    logits = images @ w.T + b  # (B, H, W, K)
    np.testing.assert_allclose(out["score"], logits[:, MASK, 2].sum(axis=1), rtol=1e-5)
    np.testing.assert_array_equal(out["x"], x)


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_saliency_net_class_k_is_the_int(framework: str, weights: Any, images: np.ndarray) -> None:
    w, b = weights
    net = xk.xai.SaliencyNet(segmenter(framework, w, b, pool=True), "x", "pred", outputs="sal", seed=0)
    x = {"x": layout(framework, images)}
    plain, wrapped = net.get_masks(x, target=1), net.get_masks(x, target=xk.targets.Class(1))
    np.testing.assert_array_equal(plain["sal"], wrapped["sal"])
    np.testing.assert_array_equal(plain["pred"], wrapped["pred"])
    assert plain["pred"].dtype.kind == "i"  # still the predicted class


def test_saliency_net_refuses_a_bad_target(weights: Any, images: np.ndarray) -> None:
    w, b = weights
    net = xk.xai.SaliencyNet(segmenter("torch", w, b, pool=True), "x", "pred")
    with pytest.raises(XaikitValueError, match=r"target=ClassRegion.*segmentation output"):
        net.get_masks({"x": layout("torch", images)}, target=xk.targets.ClassRegion(1))


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_saliency_trace_explains_a_region_like_explain(
    framework: str, weights: Any, images: np.ndarray
) -> None:
    w, b = weights
    model = segmenter(framework, w, b)
    x = layout(framework, images)
    target = xk.targets.ClassRegion(2, mask=MASK)
    trace = Saliency(
        model, "x", "score", samples={"x": x}, target=target, smoothing=0, integrating=0,
        methods={"occlusion": {"window": 2, "stride": 2}},
    )  # fmt: skip
    predictions, columns = trace.masks({"x": x})
    logits = images @ w.T + b
    np.testing.assert_allclose(predictions["score"], logits[:, MASK, 2].sum(axis=1), rtol=1e-5)
    occl = xk.xai.explain(model, x, target=target, method="occlusion", window=2, stride=2)
    shown = columns["Occlusion"][0]
    axis = _mask_axis(columns[""][0].shape, x.shape)
    direct = _method_display(xk.xai.get_method("occlusion"), occl, axis)
    np.testing.assert_allclose(shown, direct.astype(np.float32), rtol=1e-5, atol=1e-6)
    vanilla = columns[""][0]  # |gradient| display mask: zero outside the region
    assert np.all(channel_last(framework, vanilla)[:, ~MASK] == 0)
    assert np.all(channel_last(framework, vanilla)[:, MASK] > 0)
    image = trace.explain({"x": x}, title="t")
    assert image is not None


def test_saliency_trace_refuses_an_object_a_column_cannot_take(weights: Any) -> None:
    w, b = weights
    with pytest.raises(XaikitValueError, match=r"target=ClassRegion.*\['gradcam'\]"):
        Saliency(segmenter("torch", w, b), "x", "y", target=xk.targets.ClassRegion(1), methods=["gradcam"])


def test_explain_dataset_refuses_a_target_object_naming_target(
    tmp_path: Any, weights: Any, images: np.ndarray
) -> None:
    w, b = weights
    data = (
        xk.NumpyDataset({"x": layout("torch", images)})
        if hasattr(xk, "NumpyDataset")
        else layout("torch", images)
    )
    with pytest.raises(
        XaikitValueError, match=r"target=ClassRegion\(\.\.\.\): explain_dataset does not take"
    ):
        xk.xai.explain_dataset(
            segmenter("torch", w, b), data, method="vanilla", out=str(tmp_path / "s.zarr"),
            target=xk.targets.ClassRegion(1),
        )  # fmt: skip
    assert not (tmp_path / "s.zarr").exists()
