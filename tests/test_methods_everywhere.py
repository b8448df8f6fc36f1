"""Every method by name, everywhere: the name registry, ``xk.evaluate`` given a method name, and
the ``Saliency`` trace's ``methods=`` columns (values equal to ``explain`` on the same samples)."""

from __future__ import annotations

import numpy as np
import pytest

import xaikit as xk
from tests.evaluate_models import SIZE, layout, linear, square_mask, square_weights
from tests.test_trace_xai_saliency import batches, run_epoch, tiny_model
from xaikit.errors import XaikitTypeError, XaikitValueError
from xaikit.trace.xai import Saliency
from xaikit.xai import registry as names
from xaikit.xai._engine.display import to_display


# ---- the registry ------------------------------------------------------------------------------
def test_every_method_has_one_canonical_name_family_and_title() -> None:
    every = names.method_names()
    assert len(set(every)) == len(every) == 34
    for m in every:
        assert names.canonical(m) == m
        assert names.canonical(names.title(m).upper()) == m  # a title names its method too
    aliases = {
        "ig": "integrated",
        "Grad-CAM": "gradcam",
        "grad_cam": "gradcam",
        "GradCAM++": "gradcam++",
        "gradcam_plus_plus": "gradcam++",
        "Score-CAM": "scorecam",
        "eigen_cam": "eigencam",
        "Guided Grad-CAM": "guided_gradcam",
        "RISE": "rise",
        "GradientShap": "expected_gradients",
        "Input×Gradient": "input_x_gradient",
        "gradient_x_input": "input_x_gradient",
        "VarGrad": "vargrad",
        "blur-ig": "blur_ig",
        "Guided IG": "guided_ig",
        "DeepLIFT": "deeplift",
        "Deep-SHAP": "deepliftshap",
        "ablation": "feature_ablation",
        "Feature ablation": "feature_ablation",
        "shapley": "shapley_sampling",
        "Shapley value sampling": "shapley_sampling",
        "KernelSHAP": "kernel_shap",
        "LIME": "lime",
        "Sobol": "sobol",
        "HSIC": "hsic",
        "Attention rollout": "attention_rollout",
        "TRANSFORMER ATTRIBUTION": "transformer_attribution",
    }
    for alias, name in aliases.items():
        assert names.canonical(alias) == name
    assert [
        names.family(m) for m in ("smint", "layercam", "occlusion", "lrp", "kernel_shap", "attention_rollout")
    ] == ["gradient", "cam", "perturbation", "rules", "agnostic", "transformer"]
    with pytest.raises(
        XaikitValueError,
        match=r"method must be one of 'vanilla'.*'rise', 'lrp'.*'lime'.*; got 'no_such_method'",
    ):
        names.canonical("no_such_method")
    with pytest.raises(XaikitTypeError, match=r"method must be a method name \(str\); got int 3"):
        names.canonical(3)


# ---- evaluate: a method name computes the maps with explain ------------------------------------
def test_evaluate_takes_perturbation_methods_by_name(framework: str, rng: np.random.Generator) -> None:
    w = square_weights(rng)
    x = layout(framework, rng.uniform(size=(3, SIZE, SIZE, 3)).astype(np.float32))
    model = linear(framework, w)
    # a 1x1 occlusion window of a linear model is each pixel's contribution: all inside the square
    loc = xk.evaluate.localization(
        "occlusion", square_mask(3), model=model, x=x, target=0, method_options={"window": 1, "stride": 1}
    )
    np.testing.assert_allclose(loc["energy"], 1.0)
    assert loc["pointing"].tolist() == [True] * 3
    maps = xk.xai.explain(model, x, target=0, method="occlusion", window=1, stride=1)
    np.testing.assert_array_equal(loc["energy"], xk.evaluate.localization(maps, square_mask(3))["energy"])
    # deletion with a method name == deletion with the maps explain gives (same seed, same target)
    by_name = xk.evaluate.deletion(model, x, "rise", target=0, steps=4, method_options={"nsamples": 32})
    rise = xk.xai.explain(model, x, target=0, method="rise", nsamples=32, seed=0)
    assert rise.shape == (3, SIZE, SIZE)
    by_maps = xk.evaluate.deletion(model, x, rise, target=0, steps=4)
    np.testing.assert_array_equal(by_name.scores, by_maps.scores)
    ins = xk.evaluate.insertion(model, x, "occlusion", target=0, steps=4, method_options={"window": 2})
    with pytest.raises(
        XaikitValueError, match=r"method options \['output'\] are set by the evaluation itself"
    ):
        xk.evaluate.deletion(model, x, "rise", method_options={"output": 0})
    assert ins.scores.shape == (3, 5)


def test_randomization_test_takes_a_perturbation_method(framework: str, rng: np.random.Generator) -> None:
    model = linear(framework, square_weights(rng))
    x = layout(framework, rng.uniform(size=(2, SIZE, SIZE, 3)).astype(np.float32))
    rt = xk.evaluate.randomization_test(model, x, target=0, method="occlusion", window=2, stride=1)
    assert rt.method == "occlusion"
    assert list(rt.maps) == ["original", rt.table["layer"].iloc[-1]]
    # the randomized model reads everywhere: the map changes
    assert rt.table["spearman_abs"].iloc[-1] < 0.9


def test_localization_method_name_needs_model_and_x() -> None:
    with pytest.raises(XaikitValueError, match=r"saliency='rise' is a method name: pass model= and x="):
        xk.evaluate.localization("rise", square_mask(1))
    with pytest.raises(
        XaikitValueError, match=r"saliency must be maps or a method name \('vanilla'.*got 'no_such_method'"
    ):
        xk.evaluate.localization("no_such_method", square_mask(1), model=object(), x=np.zeros((1, 8, 8)))
    with pytest.raises(XaikitValueError, match=r"method_options applies only when saliency is a method name"):
        xk.evaluate.localization(np.ones((1, SIZE, SIZE)), square_mask(1), method_options={"n_masks": 4})
    with pytest.raises(XaikitTypeError, match=r"localization\(\) has no option 'n_masks'.*method_options="):
        xk.evaluate.localization(np.ones((1, SIZE, SIZE)), square_mask(1), n_masks=4)


# ---- the Saliency trace's methods= -------------------------------------------------------------
def test_saliency_trace_shows_more_methods_as_columns(framework: str) -> None:
    model = tiny_model(framework)
    opts = {"occlusion": {"window": 4, "stride": 2}, "rise": {"nsamples": 16}}
    trace = Saliency(
        model,
        "x",
        "y_pred",
        samples=3,
        smoothing=0,
        integrating=0,
        methods=opts,
        overlay="rise",
        overlay_smooth=0,
    )
    img = run_epoch(trace, batches(2))["saliency"]
    assert img.columns == ["y_pred", "x", "x saliency", "saliency", "Occlusion saliency", "RISE saliency"]
    x = batches(2)[0]["x"]
    x = np.concatenate([x, batches(2)[1]["x"][:1]])  # the first 3 samples
    feed = np.ascontiguousarray(x.transpose(0, 3, 1, 2)) if framework == "torch" else x
    occ = xk.xai.explain(model, feed, method="occlusion", window=4, stride=2, seed=0)
    want = to_display(occ, 1 if framework == "torch" else 3)[:, 0 if framework == "torch" else ...]
    if framework == "tf":
        want = want[..., 0]
    got = np.asarray(img["Occlusion saliency"][0]).reshape(want.shape)  # ImgData keeps (B, H, W)
    np.testing.assert_allclose(got, want, atol=1e-6)
    rise = xk.xai.explain(model, feed, method="rise", nsamples=16, seed=0)
    got = np.asarray(img["RISE saliency"][0]).reshape(rise.shape)
    np.testing.assert_allclose(got, to_display(rise, None, percentile=100.0), atol=1e-6)
    # overlay="rise": the heat map over the image is the RISE column
    np.testing.assert_allclose(
        np.asarray(img["x saliency"][0]),
        xk.viz.overlay(x, np.asarray(img["RISE saliency"][0]).reshape(rise.shape)),
        atol=1e-6,
    )


def test_saliency_trace_methods_are_checked() -> None:
    model = tiny_model("torch")
    with pytest.raises(XaikitValueError, match=r"methods must be one of 'vanilla'.*got 'no_such_method'"):
        Saliency(model, "x", "y_pred", methods=["no_such_method"])
    with pytest.raises(XaikitTypeError, match=r"methods\['rise'\] must be a dict of options; got int 3"):
        Saliency(model, "x", "y_pred", methods={"rise": 3})
    with pytest.raises(XaikitValueError, match=r"methods='ig': the trace computes the gradient masks itself"):
        Saliency(model, "x", "y_pred", methods=["ig"])
    with pytest.raises(XaikitTypeError, match=r"methods must be a list of method names or a dict"):
        Saliency(model, "x", "y_pred", methods=5)
    with pytest.raises(XaikitValueError, match=r"methods needs a model with a single input.*\['a', 'b'\]"):
        Saliency(model, ["a", "b"], "y_pred", methods=["rise"])
    with pytest.raises(XaikitValueError, match=r"or one of methods \['rise'\]; got str 'gradcam'"):
        Saliency(model, "x", "y_pred", methods=["rise"], overlay="gradcam")
    # options are checked against the method's record when the trace is built, not at epoch end
    with pytest.raises(
        XaikitTypeError,
        match=r"methods\['RISE'\]: explain\(method='rise'\) got unknown option\(s\) \['n_mask'\]; its "
        r"options are nsamples, cell, p",
    ):
        Saliency(model, "x", "y_pred", methods={"RISE": {"n_mask": 8}})
    with pytest.raises(XaikitValueError, match=r"methods\['rise'\]: nsamples must be an int >= 1; got int 0"):
        Saliency(model, "x", "y_pred", methods={"rise": {"nsamples": 0}})
    with pytest.raises(
        XaikitValueError, match=r"methods\['rise'\]: \['output'\] are the trace's own arguments"
    ):
        Saliency(model, "x", "y_pred", methods={"rise": {"output": 1}})
    trace = Saliency(model, "x", "y_pred", methods={"rise": {"nsamples": 8}}, overlay="RISE")
    assert trace.methods == {"rise": {"nsamples": 8, "cell": 8, "p": 0.5}}  # the record's defaults filled in


def test_cam_methods_by_name_in_evaluate_and_the_trace(framework: str) -> None:
    model = tiny_model(framework)
    x = np.concatenate([b["x"] for b in batches(2)])[:3]
    feed = np.ascontiguousarray(x.transpose(0, 3, 1, 2)) if framework == "torch" else x
    cam = xk.xai.explain(model, feed, method="gradcam")
    assert cam.shape == (3, 8, 8)
    by_name = xk.evaluate.deletion(model, feed, "gradcam", steps=4)
    np.testing.assert_array_equal(by_name.scores, xk.evaluate.deletion(model, feed, cam, steps=4).scores)
    rt = xk.evaluate.randomization_test(model, feed, method="grad_cam")
    assert rt.method == "gradcam" and len(rt.table) == 2  # conv, dense
    assert rt.grid.columns[:2] == ["input", "original"]  # (B, H, W) maps paint as such
    trace = Saliency(model, "x", "y_pred", samples=3, smoothing=0, integrating=0, methods=["Grad-CAM"])
    img = run_epoch(trace, batches(2))["saliency"]
    got = np.asarray(img["Grad-CAM saliency"][0]).reshape(cam.shape)
    np.testing.assert_allclose(got, to_display(cam, None, percentile=100.0), atol=1e-6)


def test_new_gradient_methods_by_name_in_evaluate_and_the_trace(framework: str) -> None:
    """VarGrad, Input x Gradient, Expected Gradients and Blur IG: input-shaped attributions that
    the trace shows as one-channel masks and the evaluations take by name."""
    model = tiny_model(framework)
    x = np.concatenate([b["x"] for b in batches(2)])[:3]
    feed = np.ascontiguousarray(x.transpose(0, 3, 1, 2)) if framework == "torch" else x
    axis = 1 if framework == "torch" else 3
    opts = {
        "vargrad": {"nsamples": 4},
        "input_x_gradient": {},
        "expected_gradients": {"nsamples": 4},
        "blur_ig": {"steps": 6, "max_sigma": 3.0},
    }
    trace = Saliency(model, "x", "y_pred", samples=3, smoothing=0, integrating=0, methods=opts)
    img = run_epoch(trace, batches(2))["saliency"]
    for method, o in opts.items():
        raw = xk.xai.explain(model, feed, method=method, seed=0, **o)
        assert raw.shape == feed.shape
        want = to_display(raw, axis)
        got = np.asarray(img[f"{names.title(method)} saliency"][0]).reshape(want.shape)
        np.testing.assert_allclose(got, want, atol=1e-6, err_msg=method)
        by_name = xk.evaluate.deletion(model, feed, method, steps=4, method_options=o)
        by_maps = xk.evaluate.deletion(model, feed, raw, steps=4)
        np.testing.assert_array_equal(by_name.scores, by_maps.scores, err_msg=method)
