"""The GradCAM and EigenCAM traces: model mode equals ``explain``, key mode (the reference's
grads/activations keys) computes the published formulas, the reference's gradients-only map is
refused with the reason, and the columns, layouts and errors."""

from __future__ import annotations

import numpy as np
import pytest

import xaikit as xk
from tests.test_trace_xai_saliency import MAPPING, batches, run_epoch, tiny_model
from xaikit.errors import XaikitTypeError, XaikitValueError
from xaikit.trace.xai import EigenCAM, GradCAM
from xaikit.xai.cam import eigen_components, upsample


def unit(maps: np.ndarray) -> np.ndarray:
    m = np.maximum(maps, 0.0)
    top = m.reshape(len(m), -1).max(axis=1)
    return m / np.where(top > 0, top, 1.0)[:, None, None]


def feed(framework: str, x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x.transpose(0, 3, 1, 2)) if framework == "torch" else x


def first_samples(n: int) -> np.ndarray:
    bs = batches(3)
    return np.concatenate([b["x"] for b in bs])[:n]


@pytest.mark.parametrize("method", ["gradcam", "gradcam++", "scorecam"])
def test_gradcam_trace_in_model_mode_equals_explain(framework: str, method: str) -> None:
    model = tiny_model(framework)
    samples = {"x": feed(framework, first_samples(3)), "y": np.array([0, 1, 2])}
    trace = GradCAM("x", model=model, labels="y", label_mapping=MAPPING, n_samples=3, method=method)
    data = run_epoch(trace, [{k: v[:2] for k, v in samples.items()}, {k: v[2:] for k, v in samples.items()}])
    img = data["gradcam"]
    title = {"gradcam": "Grad-CAM", "gradcam++": "Grad-CAM++", "scorecam": "Score-CAM"}[method]
    assert img.columns == ["y", "x", f"x {title}", title]
    assert trace.layer_name is not None  # found automatically
    raw = xk.xai.explain(model, samples["x"], method=method, raw=True)
    assert raw.layer == trace.layer_name
    want = unit(upsample(np.asarray(raw.maps, dtype=np.float64), (8, 8)))
    np.testing.assert_allclose(np.asarray(img[title][0]).reshape(want.shape), want, atol=1e-6)
    assert img["y"][0] == ["circle", "square", "triangle"]


def test_gradcam_trace_key_mode_is_the_published_formula(framework: str, rng: np.random.Generator) -> None:
    """Activations and gradients from batch keys, in the framework's layout: the map is
    relu(sum_c mean_ij(dA_c) A_c), not the reference's relu(mean_c dA_c)."""
    import_torch = framework == "torch"
    a = rng.uniform(size=(3, 4, 2, 2)).astype(np.float32)  # (B, C, h, w)
    da = rng.normal(size=(3, 4, 2, 2)).astype(np.float32)
    da[:, 0] = np.abs(da[:, 0]) + 1.0  # one strongly positive channel: the map is not all zero
    if import_torch:
        import torch

        acts, grads = torch.as_tensor(a), torch.as_tensor(da)
        images = torch.as_tensor(rng.uniform(size=(3, 3, 8, 8)).astype(np.float32))
    else:
        import tensorflow as tf

        acts, grads = tf.constant(a.transpose(0, 2, 3, 1)), tf.constant(da.transpose(0, 2, 3, 1))
        images = tf.constant(rng.uniform(size=(3, 8, 8, 3)).astype(np.float32))
    trace = GradCAM("x", grads="g", activations="a", n_samples=3)
    img = run_epoch(trace, [{"x": images, "a": acts, "g": grads}])["gradcam"]
    weights = da.astype(np.float64).mean(axis=(2, 3), keepdims=True)
    published = np.maximum((weights * a).sum(axis=1), 0.0)
    want = unit(upsample(published, (8, 8)))
    np.testing.assert_allclose(np.asarray(img["Grad-CAM"][0]).reshape(want.shape), want, atol=1e-6)
    reference_style = unit(upsample(np.maximum(da.mean(axis=1), 0.0), (8, 8)))
    assert np.abs(want - reference_style).max() > 0.05  # the two definitions differ here
    # key mode takes the first n_samples of every epoch: a second epoch shows new values
    img2 = run_epoch(trace, [{"x": images, "a": acts, "g": grads * -1.0}])["gradcam"]
    assert not np.allclose(np.asarray(img2["Grad-CAM"][0]), np.asarray(img["Grad-CAM"][0]))


def test_eigencam_trace_components(framework: str, rng: np.random.Generator) -> None:
    model = tiny_model(framework)
    x = feed(framework, first_samples(4))
    trace = EigenCAM("x", model=model, n_components=2, n_samples=4, outputs="eig")
    img = run_epoch(trace, [{"x": x}])["eig"]
    assert img.columns == ["x", "x Component 0", "Component 0", "x Component 1", "Component 1"]
    acts, name = xk.xai.cam.layer_activations(model, x)
    assert name == trace.layer_name
    comps = eigen_components(acts, 2)
    for k in range(2):
        want = unit(upsample(np.maximum(comps[k], 0.0), (8, 8)))
        np.testing.assert_allclose(np.asarray(img[f"Component {k}"][0]).reshape(want.shape), want, atol=1e-6)
    # the first component is Eigen-CAM's map
    first = xk.xai.explain(model, x, method="eigencam", raw=True).maps
    np.testing.assert_allclose(np.maximum(comps[0], 0.0), first, atol=1e-5)
    # key mode: activations given as a batch key in the framework's layout
    a = rng.uniform(size=(4, 5, 3, 3)).astype(np.float32)
    given = a if framework == "torch" else a.transpose(0, 2, 3, 1)
    if framework == "torch":
        import torch

        given = torch.as_tensor(given)
    keyed = EigenCAM("x", activations="a", n_components=1, n_samples=4)
    img = run_epoch(keyed, [{"x": x, "a": given}])["eigencam"]
    want = unit(upsample(np.maximum(eigen_components(a.astype(np.float64), 1)[0], 0.0), (8, 8)))
    np.testing.assert_allclose(np.asarray(img["Component 0"][0]).reshape(want.shape), want, atol=1e-6)


def test_cam_traces_refuse_what_cannot_work() -> None:
    model = tiny_model("torch")
    with pytest.raises(XaikitValueError, match=r"gradients alone are not enough.*docs/migrating.md"):
        GradCAM("x", grads="g")
    with pytest.raises(
        XaikitValueError, match=r"either model= .* or grads=/activations= batch keys, not both"
    ):
        GradCAM("x", grads="g", activations="a", model=model)
    with pytest.raises(XaikitValueError, match=r"method='scorecam' needs the model"):
        GradCAM("x", grads="g", activations="a", method="scorecam")
    with pytest.raises(XaikitValueError, match=r"Eigen-CAM has its own trace, EigenCAM"):
        GradCAM("x", model=model, method="eigencam")
    with pytest.raises(  # input-shaped attributions: refused when built, not at the end of an epoch
        XaikitValueError,
        match=r"GradCAM traces a class-activation map \(gradcam, .*scorecam\); got method='Guided Grad-CAM' "
        r"\(Guided Grad-CAM is not a class-activation map: show it as a Saliency trace column, "
        r"methods=\['guided_gradcam'\]\)",
    ):
        GradCAM("x", model=model, method="Guided Grad-CAM")
    with pytest.raises(XaikitValueError, match=r"method must be one of .*got 'no_such_method'"):
        GradCAM("x", model=model, method="no_such_method")
    with pytest.raises(XaikitValueError, match=r"EigenCAM needs exactly one of model= .* or activations="):
        EigenCAM("x")
    with pytest.raises(XaikitValueError, match=r"n_components must be an int >= 1; got int 0"):
        EigenCAM("x", model=model, n_components=0)
    with pytest.raises(XaikitTypeError, match=r"grads must be a batch key \(str\) or None; got int 3"):
        GradCAM("x", grads=3, activations="a")
    bad = GradCAM("x", grads="g", activations="a", n_samples=2)
    with pytest.raises(XaikitValueError, match=r"activations 'a' and grads 'g' must have one shape"):
        run_epoch(
            bad, [{"x": np.zeros((2, 8, 8, 3)), "a": np.ones((2, 2, 2, 4)), "g": np.ones((2, 2, 2, 5))}]
        )
