"""Degenerate maps (xaikit.xai.health): the criteria on arrays with known answers, on real models
(a saturated softmax: gradients ~1e-31; its logits: sound; a dead ReLU layer; a model that treats
every input alike; an infinite gradient), the one warning per call and per (model, method,
status), and where the status is recorded (SaliencyNet, explain_dataset)."""

from __future__ import annotations

import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import xaikit as xk
from tests.xai.models import model_for
from xaikit.errors import DegenerateMapWarning, XaikitValueError
from xaikit.xai import health
from xaikit.xai.health import EPS32, OutputFacts, map_kind, map_status

D = 8
#: logit gap of the saturated model: p(class 1) = exp(-GAP) ~ 1e-30, still a normal float32
GAP = 69.0


@pytest.fixture(autouse=True)
def _fresh_registry() -> Any:
    health.forget_warnings()
    yield
    health.forget_warnings()


def _model(framework: str, head: str | None) -> Any:
    """f(x) = x @ W.T + b (B, 2) with W = [w, -w], b = [GAP, 0], then ``head``:

    * ``"softmax"``: probabilities; class 0 saturates (p1 = exp(-GAP - 2 w.x) ~ 1e-30), so its
      gradient is p0 p1 * 2w ~ 1e-31: below float32 resolution of p0 = 1;
    * None: the logits (gradient w, sound);
    * ``"dead"``: relu(x @ W.T - 100): every unit off, the gradient is exactly 0;
    * ``"sqrt"``: sqrt(x) @ W.T: an infinite gradient where x = 0;
    * ``"flat"``: W = [[0.5] * D, [-0.5] * D]: the same gradient for every element.
    """
    w = np.linspace(0.02, 0.08, D).astype(np.float32)
    weight = np.stack([w, -w]).astype(np.float32)
    bias = np.array([GAP, 0.0], np.float32)
    if head == "dead":
        bias = np.array([-100.0, -100.0], np.float32)
    if head == "flat":
        weight = np.stack([np.full(D, 0.5), np.full(D, -0.5)]).astype(np.float32)
        bias = np.zeros(2, np.float32)
    if framework == "torch":
        import torch

        lin = torch.nn.Linear(D, 2)
        with torch.no_grad():
            lin.weight.copy_(torch.as_tensor(weight))
            lin.bias.copy_(torch.as_tensor(bias))
        layers: list[Any] = [lin]
        if head == "softmax":
            layers.append(torch.nn.Softmax(dim=1))
        if head == "dead":
            layers.append(torch.nn.ReLU())

        class Sqrt(torch.nn.Module):
            def forward(self, x: torch.Tensor) -> torch.Tensor:
                return torch.sqrt(x)

        if head == "sqrt":
            layers.insert(0, Sqrt())
        return torch.nn.Sequential(*layers)
    import tensorflow as tf

    wt, bt = tf.constant(weight.T), tf.constant(bias)
    ops = {
        "softmax": lambda x: tf.nn.softmax(tf.matmul(x, wt) + bt, axis=1),
        None: lambda x: tf.matmul(x, wt) + bt,
        "dead": lambda x: tf.nn.relu(tf.matmul(x, wt) + bt),
        "sqrt": lambda x: tf.matmul(tf.sqrt(x), wt) + bt,
        "flat": lambda x: tf.matmul(x, wt) + bt,
    }
    return tf.function(ops[head])


def _x(rng: np.random.Generator, batch: int = 4) -> np.ndarray:
    return rng.uniform(0.0, 1.0, size=(batch, D)).astype(np.float32)


# ---- the criteria, on arrays ------------------------------------------------------------------------
def test_each_status_on_arrays() -> None:
    maps = np.ones((6, 3, 4), np.float32)
    maps[0, 1, 2] = np.nan
    maps[1] = 0.0
    maps[2] = -2.5
    maps[3, 0, 0] = np.inf
    maps[4] = 1e-39  # subnormal float32: underflow whatever the score
    maps[4, 0, 0] = 0.0
    maps[5, 0, 0] = 1.0 + 1e-3  # not constant
    got = map_status(maps).tolist()
    assert got == ["non-finite", "zero", "constant", "non-finite", "underflow", ""]
    # a constant to within float32 resolution of its own size is constant; beyond it is not
    near = np.full((2, 10), 3.0, np.float32)
    near[0, 0] = np.nextafter(np.float32(3.0), np.float32(4.0))
    near[1, 0] = 3.0 * (1 + 16 * EPS32)
    assert map_status(near).tolist() == ["constant", ""]
    # one element per sample is never constant
    assert map_status(np.array([[2.0], [0.0]])).tolist() == ["", "zero"]


def test_underflow_threshold_is_eps32_times_the_score() -> None:
    """attribution maps: D = sum |m|; gradient maps: D = sum |m| * span; squared: on sqrt(|m|)."""
    score = 3.0
    resolution = EPS32 * score
    m = np.zeros((2, 100), np.float32)
    m[0, :4] = 0.99 * resolution / 4  # D just below
    m[1, :4] = 1.01 * resolution / 4  # D just above
    assert map_status(m, scores=np.array([score, score])).tolist() == ["underflow", ""]
    # the sign does not matter, the score's sign neither
    assert map_status(-m, scores=-score).tolist() == ["underflow", ""]
    # gradient maps: the input's value range multiplies (a zero range counts as 1)
    assert map_status(m, scores=score, kind="gradient", spans=np.array([1.0, 0.5])).tolist() == [
        "underflow",
        "underflow",
    ]
    assert map_status(m, scores=score, kind="gradient", spans=np.array([2.0, 0.0])).tolist() == ["", ""]
    # squared maps: sqrt of each value
    assert map_status(m**2, scores=score, squared=True).tolist() == ["underflow", ""]
    # the bounds alone decide most maps: one element above the resolution is enough
    big = np.zeros((1, 1000))
    big[0, 7] = 2 * resolution
    assert map_status(big, scores=score).tolist() == [""]
    # float64 maps (a float64 model's) are held to float64 resolution
    assert map_status(m.astype(np.float64), scores=score).tolist() == ["", ""]
    tiny64 = np.full((1, 4), 1e-12)
    tiny64[0, 0] = 0.0
    assert map_status(tiny64, scores=score).tolist() == [""]
    assert map_status(tiny64.astype(np.float32), scores=score).tolist() == ["underflow"]
    # maps without a score scale are not tested for underflow; unknown scores neither
    assert map_status(m, scores=score, kind="none").tolist() == ["", ""]
    assert map_status(m).tolist() == ["", ""]


def test_a_half_precision_model_is_held_to_its_own_resolution() -> None:
    """A model computing in float16 (bfloat16) rounds its score and gradients to 2**-10 (2**-7)
    of their size, whatever the maps' dtype: D is compared with that resolution."""
    score = 1.0
    m = np.zeros((3, 50), np.float32)
    m[0, :5] = 1e-4 / 5  # D = 1e-4: sound in float32, below float16's 9.8e-4
    m[1, :5] = 2e-3 / 5  # D = 2e-3: sound in float16, below bfloat16's 7.8e-3
    m[2, :5] = 1e-2 / 5  # sound in both
    assert map_status(m, scores=score).tolist() == ["", "", ""]
    assert map_status(m, scores=score, precision="float16").tolist() == ["underflow", "", ""]
    assert map_status(m, scores=score, precision="bfloat16").tolist() == ["underflow", "underflow", ""]
    # a float32 or float64 model keeps the rule by the maps' dtype
    assert map_status(m, scores=score, precision="float32").tolist() == ["", "", ""]
    assert map_status(m.astype(np.float64), scores=score, precision="float64").tolist() == ["", "", ""]


def _nearly_saturated(framework: str, half: bool) -> Any:
    """softmax(x @ W.T + b) with p(class 1) ~ 1e-5: its class-0 gradient (~1e-6) is resolved in
    float32 and lost in float16, where p0 rounds to 1."""
    w = np.linspace(0.02, 0.08, D).astype(np.float32)
    weight, bias = np.stack([w, -w]), np.array([11.5, 0.0], np.float32)
    if framework == "torch":
        import torch

        lin = torch.nn.Linear(D, 2)
        with torch.no_grad():
            lin.weight.copy_(torch.as_tensor(weight))
            lin.bias.copy_(torch.as_tensor(bias))
        model = torch.nn.Sequential(lin, torch.nn.Softmax(dim=1))
        return model.half() if half else model
    import keras

    if half:
        keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        model = keras.Sequential([keras.Input((D,)), keras.layers.Dense(2, activation="softmax")])
    finally:
        keras.mixed_precision.set_global_policy("float32")
    model.set_weights([weight.T, bias])
    return model


def test_a_float16_model_gets_the_warning_its_float32_copy_does_not(
    framework: str, rng: np.random.Generator
) -> None:
    """The same weights in float32 and float16 (torch .half(), Keras mixed_float16): the float16
    maps are round-off of a score stuck at 1, and the warning says so and names float16; the
    float32 model's maps are sound (no warning)."""
    x = _x(rng)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DegenerateMapWarning)
        xk.xai.explain(_nearly_saturated(framework, half=False), x, method="vanilla")
    with pytest.warns(DegenerateMapWarning) as caught:
        xk.xai.explain(_nearly_saturated(framework, half=True), x, method="vanilla")
    (w,) = caught
    text = str(w.message)
    assert "4 of 4 maps" in text and "the model computes in float16" in text
    assert "explain a float32 copy of the model" in text and "classifier_activation=None" in text


def test_several_inputs_share_one_status() -> None:
    a = np.zeros((2, 3, 4))
    b = np.zeros((2, 5))
    b[1, 0] = 1.0
    assert map_status([a, b], scores=1.0).tolist() == ["zero", ""]
    # gradient maps of two inputs: each with its own span
    g = [np.array([[1e-9, 2e-9, 0.0, 1e-9]], np.float32), np.array([[3e-9, 0.0]], np.float32)]
    assert map_status(g, scores=1.0, kind="gradient", spans=[1.0, 1.0]).tolist() == ["underflow"]
    assert map_status(g, scores=1.0, kind="gradient", spans=[1.0, 1e3]).tolist() == [""]


def test_bad_arguments() -> None:
    with pytest.raises(XaikitValueError, match="kind must be one of"):
        map_status(np.ones((1, 2)), kind="logits")
    with pytest.raises(XaikitValueError, match=r"one batch size"):
        map_status([np.ones((1, 2)), np.ones((2, 2))])
    with pytest.raises(XaikitValueError, match=r"scores must hold one value per sample \(3\)"):
        map_status(np.ones((3, 2)), scores=np.ones(2))
    with pytest.raises(XaikitValueError, match=r"spans must hold one entry per map \(2\)"):
        map_status([np.ones((1, 2))] * 2, scores=1.0, kind="gradient", spans=[1.0, 1.0, 1.0])


def test_method_kinds() -> None:
    assert map_kind("vanilla") == ("gradient", False)
    assert map_kind("smoothgrad", magnitude=False) == ("gradient", False)
    assert map_kind("smint") == ("attribution", True)
    assert map_kind("vargrad") == map_kind("vargrad", nintegration=10) == ("none", False)
    assert map_kind("Grad-CAM") == ("attribution", False)
    assert map_kind("occlusion") == ("attribution", False)
    assert [map_kind(m)[0] for m in ("eigencam", "scorecam", "rise", "guided_gradcam")] == ["none"] * 4


def test_output_facts() -> None:
    assert OutputFacts.of(None) == OutputFacts()
    assert OutputFacts.of(np.array([[0.2, 0.8]])) == OutputFacts(True, 0.8, 2)
    assert OutputFacts.of(np.array([[2.0, -1.0]])) == OutputFacts(False, None, 2)
    assert OutputFacts.of(np.array([0.5, 0.7])) == OutputFacts(probabilities=False)


# ---- real models --------------------------------------------------------------------------------------
def test_saturated_softmax_is_underflow_and_its_logits_are_sound(
    framework: str, rng: np.random.Generator
) -> None:
    x = _x(rng)
    model = _model(framework, "softmax")
    with pytest.warns(DegenerateMapWarning) as caught:
        g = xk.xai.explain(model, x, method="vanilla", framework=framework)
    # a real gradient, not a zero one: ~1e-31 (p1 * 2 * 0.05)
    assert 0 < np.abs(g).max() < 1e-29
    (w,) = caught
    text = str(w.message)
    assert "Vanilla (vanilla) in explain" in text and "4 of 4 maps" in text and "'underflow'" in text
    assert "saturated (largest probability 1)" in text
    assert "classifier_activation=None" in text and "calibrate" in text and "filterwarnings" in text
    assert w.filename == __file__  # points at the caller's line
    # the same model and method again: not repeated; another method: reported
    xk.xai.explain(model, x, method="vanilla", framework=framework)
    with pytest.warns(DegenerateMapWarning, match=r"Integrated \(integrated\).*4 of 4 maps.*'underflow'"):
        xk.xai.explain(model, x, method="integrated", nsamples=8, framework=framework)
    # the logits of the same model: gradients w, no warning
    with warnings.catch_warnings():
        warnings.simplefilter("error", DegenerateMapWarning)
        g = xk.xai.explain(_model(framework, None), x, method="vanilla", framework=framework)
    np.testing.assert_allclose(g, np.broadcast_to(np.linspace(0.02, 0.08, D), g.shape), rtol=1e-6)


def test_explained_scores_decide_not_the_largest_output(framework: str, rng: np.random.Generator) -> None:
    """Class 1 of the saturated softmax has p ~ 1e-30 and a gradient ~ p * 2w: tiny, but resolved
    relative to its own score, so not underflow when its scores are known (target=None would
    explain class 0). With given classes only row 0 of the output is read, and its largest value
    stands for the scores: then it is reported."""
    x = _x(rng)
    model = _model(framework, "softmax")
    net = xk.xai.SaliencyNet(model, "x", "pred", class_key="y", framework=framework, seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DegenerateMapWarning)
        net.get_masks({"x": x, "y": np.ones(4, np.int64)}, raw=True)
    assert net.last_status.tolist() == [""] * 4
    with pytest.warns(DegenerateMapWarning, match=r"4 of 4 maps.*'underflow'.*saturated"):
        net.get_masks({"x": x, "y": np.zeros(4, np.int64)}, raw=True)
    assert net.last_status.tolist() == ["underflow"] * 4


def test_dead_relu_is_zero(framework: str, rng: np.random.Generator) -> None:
    with pytest.warns(DegenerateMapWarning, match=r"3 of 3 maps are exactly 0.*'zero'.*dead ReLU layer"):
        g = xk.xai.explain(_model(framework, "dead"), _x(rng, 3), method="vanilla", framework=framework)
    assert np.all(g == 0)


def test_flat_model_is_constant_and_infinite_gradient_is_non_finite(
    framework: str, rng: np.random.Generator
) -> None:
    with pytest.warns(DegenerateMapWarning, match=r"2 of 2 maps hold one value everywhere \('constant'\)"):
        g = xk.xai.explain(
            _model(framework, "flat"), _x(rng, 2), target=0, method="vanilla", framework=framework
        )
    assert np.all(g == 0.5)
    x = _x(rng, 3)
    x[1, 2] = 0.0  # d sqrt(x) / dx = inf there
    with pytest.warns(DegenerateMapWarning, match=r"1 of 3 maps hold NaN or inf \('non-finite'\)"):
        g = xk.xai.explain(_model(framework, "sqrt"), x, target=0, method="vanilla", framework=framework)
    assert not np.isfinite(g[1]).all() and np.isfinite(g[[0, 2]]).all()


def test_dead_cam_layer_is_zero(framework: str, rng: np.random.Generator) -> None:
    """The CNN's first convolution with a bias of -100: Grad-CAM at it is 0 (no activation
    passes its ReLU), and the warning points at layer=."""
    model, layout = model_for(framework, seed=0)
    if framework == "torch":
        import torch

        with torch.no_grad():
            model[0].bias.fill_(-100.0)
        layer = "1"  # the ReLU after the convolution
    else:
        conv = model.layers[0]
        conv.set_weights([conv.get_weights()[0], np.full(8, -100.0, np.float32)])
        layer = conv.name
    x = layout(rng.random((2, 12, 12, 3)).astype(np.float32))
    with pytest.warns(DegenerateMapWarning, match=r"Grad-CAM \(gradcam\).*2 of 2 maps are exactly 0.*layer="):
        maps = xk.xai.explain(model, x, target=0, method="gradcam", layer=layer)
    assert np.all(maps == 0)


def test_once_per_model_method_and_status_and_silencing(rng: np.random.Generator) -> None:
    pytest.importorskip("torch")
    x = _x(rng)
    dead, dead2 = _model("torch", "dead"), _model("torch", "dead")
    with pytest.warns(DegenerateMapWarning):
        xk.xai.explain(dead, x, method="vanilla")
    with warnings.catch_warnings():
        warnings.simplefilter("error", DegenerateMapWarning)
        for _ in range(3):  # an epoch loop: said once
            xk.xai.explain(dead, x, method="vanilla")
    with pytest.warns(DegenerateMapWarning):  # another model object
        xk.xai.explain(dead2, x, method="vanilla")
    health.forget_warnings()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.filterwarnings("ignore", category=xk.DegenerateMapWarning)
        xk.xai.explain(dead, x, method="vanilla")
    assert caught == []
    # a call inside health.deferred() neither checks nor warns
    health.forget_warnings()
    with health.deferred(), warnings.catch_warnings():
        warnings.simplefilter("error", DegenerateMapWarning)
        xk.xai.explain(dead, x, method="vanilla")


def test_warning_lists_every_status_of_a_call() -> None:
    status = np.array(["", "zero", "underflow", "underflow", "non-finite"])
    facts = OutputFacts(probabilities=True, largest=0.001, classes=1000)
    with pytest.warns(DegenerateMapWarning) as caught:
        assert health.warn_degenerate(status, method="ig", model="key", facts=facts)
    text = str(caught[0].message)
    assert "1 of 5 maps hold NaN or inf" in text and "1 of 5 maps are exactly 0" in text
    assert "2 of 5 maps account for a change of the explained score below the resolution" in text
    assert "near uniform (largest probability 0.001 over 1000 classes" in text
    assert text.index("'non-finite'") < text.index("'zero'") < text.index("'underflow'")
    # all known: nothing; a new status of the same key: said, with every status of the call
    assert not health.warn_degenerate(status, method="ig", model="key", facts=facts)
    with pytest.warns(DegenerateMapWarning, match=r"'constant'.*"):
        assert health.warn_degenerate(np.array(["zero", "constant"]), method="ig", model="key")
    assert not health.warn_degenerate(np.array(["", ""]), method="ig", model="other")


def test_saliency_net_records_the_status(rng: np.random.Generator) -> None:
    pytest.importorskip("torch")
    net = xk.xai.SaliencyNet(_model("torch", "softmax"), "x", "y", seed=0)
    with pytest.warns(
        DegenerateMapWarning, match=r"Smoothed \(smoothgrad\) in SaliencyNet.*4 of 4.*'underflow'"
    ):
        res = net.get_smoothed_masks({"x": _x(rng)}, nsamples=4, magnitude=False)
    assert net.last_status.tolist() == ["underflow"] * 4
    # squared, the gradients (~1e-31) flush to 0 in float32
    with pytest.warns(
        DegenerateMapWarning, match=r"4 of 4 maps are exactly 0.*too small for float32.*saturated"
    ):
        net.get_smoothed_masks({"x": _x(rng)}, nsamples=4)
    assert net.last_status.tolist() == ["zero"] * 4
    assert res["saliency"].shape == (4, D)
    net = xk.xai.SaliencyNet(_model("torch", None), "x", "y", seed=0)
    net.get_integrated_masks({"x": _x(rng)}, nsamples=8)
    assert net.last_status.tolist() == [""] * 4


def test_explain_dataset_table_column_and_one_warning(tmp_path: Path, rng: np.random.Generator) -> None:
    pytest.importorskip("torch")
    x = _x(rng, 10)
    x[3] = 0.0  # the sqrt model's gradient is inf where x = 0 (every element of sample 3)
    x[7, 1] = 0.0
    model = _model("torch", "sqrt")
    with pytest.warns(DegenerateMapWarning) as caught:
        res = xk.xai.explain_dataset(
            model, x, method="vanilla", out=tmp_path / "s.zarr", batch_size=3, shard_size=6, progress=False
        )
    assert len(caught) == 1  # one for the run, not one per batch or shard
    text = str(caught[0].message)
    assert "in explain_dataset" in text and "table['map_status']" in text and "2 of 10 maps hold NaN" in text
    table = res.table
    assert table["map_status"].tolist() == ["", "", "", "non-finite", "", "", "", "non-finite", "", ""]
    assert res.map_status_counts() == {"non-finite": 2}
    assert xk.xai.DatasetExplanation.open(tmp_path / "s.zarr").table["map_status"].tolist()[3] == "non-finite"
    # a sound model: an all-"" column, no warning
    res = xk.xai.explain_dataset(
        _model("torch", None), x, method="vanilla", out=tmp_path / "t.zarr", batch_size=4, progress=False
    )
    assert res.table["map_status"].tolist() == [""] * 10 and res.map_status_counts() == {}


def test_explain_dataset_judges_against_each_samples_explained_score(
    tmp_path: Path, rng: np.random.Generator
) -> None:
    """With target="label", class 1 of the saturated softmax (p ~ 1e-30) is resolved, class 0
    (p = 1) is not: per sample, from the scores explain_dataset reads anyway."""
    pytest.importorskip("torch")
    labels = np.array([0, 1, 1, 0, 1])
    with pytest.warns(DegenerateMapWarning, match=r"2 of 5 maps.*'underflow'"):
        res = xk.xai.explain_dataset(
            _model("torch", "softmax"), _x(rng, 5), method="vanilla", out=tmp_path / "l.zarr",
            labels=labels, target="label", progress=False,
        )  # fmt: skip
    assert res.table["map_status"].tolist() == ["underflow", "", "", "underflow", ""]


def test_check_cost_on_a_large_batch() -> None:
    """The check is two reductions over the maps (max and min) for sound maps; printed for the
    report (not a timed assertion beyond a loose bound)."""
    maps = np.random.default_rng(0).standard_normal((64, 3, 224, 224), dtype=np.float32) * 1e-3
    scores = np.full(64, 5.0)
    spans = np.full(64, 2.0)
    best = np.inf
    for _ in range(3):
        t0 = time.perf_counter()
        status = map_status(maps, scores=scores, kind="gradient", spans=spans)
        best = min(best, time.perf_counter() - t0)
    assert status.tolist() == [""] * 64
    print(f"map_status of 64x3x224x224 float32: {best * 1e3:.1f} ms")
    assert best < 2.0


def test_randomized_models_of_the_evaluations_are_not_reported() -> None:
    """randomization_test re-draws the weights of the user's model object (and restores them):
    the randomized model's all-zero Grad-CAM maps are not the user's model's, so they are neither
    reported nor do they use up the model's warning."""
    pytest.importorskip("torch")
    from tests.test_trace_xai_saliency import batches, tiny_model

    model = tiny_model("torch")
    x = np.concatenate([b["x"] for b in batches(2)])[:3].transpose(0, 3, 1, 2).copy()
    with warnings.catch_warnings():
        warnings.simplefilter("error", DegenerateMapWarning)
        rt = xk.evaluate.randomization_test(model, x, method="gradcam")
    randomized = [m for k, m in rt.maps.items() if k != "original"]
    assert any((np.asarray(m).reshape(len(m), -1).max(axis=1) == 0).any() for m in randomized)
    assert (np.asarray(rt.maps["original"]).reshape(3, -1).max(axis=1) > 0).all()
    # the model's own degenerate maps are still reported: its dead version, same object
    import torch

    with torch.no_grad():
        model[0].bias.fill_(-100.0)
    with pytest.warns(DegenerateMapWarning, match=r"Grad-CAM \(gradcam\).*3 of 3 maps are exactly 0"):
        xk.xai.explain(model, x, method="gradcam")
