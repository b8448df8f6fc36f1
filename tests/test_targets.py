"""Target objects (``xk.targets``) through the gradient sweep methods, torch and Keras: analytic
gradients of a class region of a 1x1-convolution segmenter, of a regression unit and of a cosine
similarity; a callable equal to a class gives the class's maps bit for bit; Integrated Gradients
stays complete for a region; bad targets are refused with messages naming ``target``."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest
from target_models import batch, channel_last, linear_segmenter

import xaikit as xk
from tests.tf_isa import skip_if_tf_bfloat16_crashes
from xaikit.errors import XaikitError, XaikitValueError

FRAMEWORKS = ("torch", "tf")
C, K, H, W, B = 3, 4, 5, 6, 2


@pytest.fixture(scope="module")
def weights() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return rng.normal(size=(K, C)).astype(np.float32), rng.normal(size=K).astype(np.float32)


@pytest.fixture(scope="module")
def images() -> np.ndarray:
    """(B, H, W, C) channel-last images."""
    return np.random.default_rng(1).normal(size=(B, H, W, C)).astype(np.float32)


def segmenter(framework: str, w: np.ndarray, b: np.ndarray) -> Any:
    """A 1x1 convolution C -> K: class k's logit at a pixel is w[k] . x[pixel] + b[k]."""
    return linear_segmenter(framework, w, b, (H, W))


def logits_of(framework: str, model: Any, x: np.ndarray) -> np.ndarray:
    """(B, H, W, K) logits."""
    if framework == "torch":
        import torch

        with torch.no_grad():
            return model(batch("torch", x)).numpy().transpose(0, 2, 3, 1)
    return np.asarray(model(x))


MASK = np.zeros((H, W), dtype=bool)
MASK[1:4, 2:5] = True


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("method", ["vanilla", "smoothgrad", "input_x_gradient"])
def test_class_region_gradient_is_the_class_weight_inside_the_mask(
    framework: str, method: str, weights: Any, images: np.ndarray
) -> None:
    w, b = weights
    model = segmenter(framework, w, b)
    target = xk.targets.ClassRegion(2, mask=MASK)
    a = channel_last(
        framework,
        xk.xai.explain(model, batch(framework, images), target=target, method=method, magnitude=False),
    )
    grad = MASK[None, :, :, None] * w[2][None, None, None, :]  # (1, H, W, C)
    expected = images * grad if method == "input_x_gradient" else np.broadcast_to(grad, images.shape)
    np.testing.assert_allclose(a, expected, rtol=1e-5, atol=1e-6)
    assert np.all(a[:, ~MASK] == 0)  # exactly zero outside the mask


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_class_region_per_sample_masks_classes_and_mean(
    framework: str, weights: Any, images: np.ndarray
) -> None:
    w, b = weights
    model = segmenter(framework, w, b)
    masks = np.zeros((B, H, W), dtype=np.float32)
    masks[0, 0, 0] = masks[0, 4, 5] = 1.0
    masks[1, 2:, :3] = 1.0
    target = xk.targets.ClassRegion([1, 3], mask=masks, reduce="mean")
    a = channel_last(
        framework, xk.xai.explain(model, batch(framework, images), target=target, method="vanilla")
    )
    for i, k in enumerate([1, 3]):
        expected = masks[i][:, :, None] * w[k][None, None, :] / masks[i].sum()
        np.testing.assert_allclose(a[i], expected, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("method", ["vanilla", "smoothgrad"])
def test_class_region_without_mask_is_the_predicted_region(
    framework: str, method: str, weights: Any, images: np.ndarray
) -> None:
    """The region is where the clean image is predicted k, fixed once: SmoothGrad's noisy copies
    (whose argmax moves) still differentiate the clean region."""
    w, b = weights
    model = segmenter(framework, w, b)
    predicted = logits_of(framework, model, images).argmax(axis=-1) == 1  # (B, H, W)
    assert predicted.any() and not predicted.all()
    target = xk.targets.ClassRegion(1)
    noise = {"stdev_spread": 0.5} if method == "smoothgrad" else {}
    a = channel_last(
        framework,
        xk.xai.explain(
            model, batch(framework, images), target=target, method=method, magnitude=False, **noise
        ),
    )
    np.testing.assert_allclose(a, predicted[..., None] * w[1][None, None, None, :], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_class_region_torch_and_keras_agree(weights: Any, images: np.ndarray, framework: str) -> None:
    """Integrated Gradients of the same region, same weights: the same maps in both frameworks."""
    w, b = weights
    maps = {}
    for fw in FRAMEWORKS:
        model = segmenter(fw, w, b)
        target = xk.targets.ClassRegion(1, mask=MASK)
        maps[fw] = channel_last(
            fw, xk.xai.explain(model, batch(fw, images), target=target, method="integrated", baseline="zeros")
        )
    np.testing.assert_allclose(maps["torch"], maps["tf"], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(maps[framework], images * MASK[None, :, :, None] * w[1], rtol=1e-5, atol=1e-6)


def nonlinear_segmenter(framework: str) -> Any:
    """3x3 conv, softplus, 1x1 conv: a region's score is not linear in the input."""
    if framework == "torch":
        torch = pytest.importorskip("torch")
        torch.manual_seed(0)
        return torch.nn.Sequential(
            torch.nn.Conv2d(C, 8, 3, padding=1), torch.nn.Softplus(), torch.nn.Conv2d(8, K, 1)
        ).double()
    keras = pytest.importorskip("keras")
    keras.utils.set_random_seed(0)
    inp = keras.Input((H, W, C), dtype="float64")
    h = keras.layers.Conv2D(8, 3, padding="same", activation="softplus", dtype="float64")(inp)
    return keras.Model(inp, keras.layers.Conv2D(K, 1, dtype="float64")(h))


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("method", ["integrated", "smint"])
def test_integrated_gradients_complete_for_a_region(framework: str, method: str, images: np.ndarray) -> None:
    model = nonlinear_segmenter(framework)
    x = batch(framework, images.astype(np.float64))
    target = xk.targets.ClassRegion(3, mask=MASK)
    steps = {"nsamples": 64} if method == "integrated" else {"nsamples": 2, "nintegration": 64}
    a, delta = xk.xai.explain(
        model, x, target=target, method=method, baseline="zeros", magnitude=False, return_delta=True, **steps
    )
    # the explained score at x and at the baseline, by hand
    logits = logits_of(framework, model, images.astype(np.float64))
    zero = logits_of(framework, model, np.zeros_like(images, dtype=np.float64))
    gap = (logits[..., 3] * MASK).sum(axis=(1, 2)) - (zero[..., 3] * MASK).sum(axis=(1, 2))
    total = a.reshape(B, -1).sum(axis=1)
    assert np.all(np.abs(delta) < 1e-3 * np.abs(gap).max())
    if method == "integrated":  # noise-free: the delta is exactly the sum's error against the gap
        np.testing.assert_allclose(total - gap, delta, rtol=1e-6, atol=1e-9)


def regressor(framework: str, units: int) -> tuple[Any, np.ndarray]:
    rng = np.random.default_rng(3)
    wt = rng.normal(size=(units, 5)).astype(np.float32)
    if framework == "torch":
        torch = pytest.importorskip("torch")
        lin = torch.nn.Linear(5, units)
        with torch.no_grad():
            lin.weight.copy_(torch.as_tensor(wt))
            lin.bias.zero_()
        return lin, wt
    keras = pytest.importorskip("keras")
    inp = keras.Input((5,))
    dense = keras.layers.Dense(units)
    model = keras.Model(inp, dense(inp))
    dense.set_weights([wt.T, np.zeros(units, np.float32)])
    return model, wt


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_output_unit_is_the_weight_row(framework: str) -> None:
    model, wt = regressor(framework, 3)
    x = np.random.default_rng(4).normal(size=(4, 5)).astype(np.float32)
    a = xk.xai.explain(model, x, target=xk.targets.Output(1), method="vanilla")
    np.testing.assert_allclose(a, np.broadcast_to(wt[1], x.shape), rtol=1e-6)
    per_sample = xk.xai.explain(model, x, target=xk.targets.Output([0, 2, 2, 1]), method="vanilla")
    np.testing.assert_allclose(per_sample, wt[[0, 2, 2, 1]], rtol=1e-6)


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_similarity_is_the_analytic_cosine_gradient(framework: str) -> None:
    model, wt = regressor(framework, 4)  # a linear embedding e = W x (D = 4)
    rng = np.random.default_rng(5)
    x = rng.normal(size=(3, 5)).astype(np.float64)
    ref = rng.normal(size=4)
    a = xk.xai.explain(model, x.astype(np.float32), target=xk.targets.Similarity(ref), method="vanilla")
    e = x @ wt.T.astype(np.float64)
    en, rn = np.linalg.norm(e, axis=1, keepdims=True), np.linalg.norm(ref)
    cos = (e @ ref)[:, None] / (en * rn)
    d_e = ref[None] / (en * rn) - cos * e / en**2  # d cos / d e
    np.testing.assert_allclose(a, d_e @ wt.astype(np.float64), rtol=1e-4, atol=1e-6)
    dot = xk.xai.explain(
        model, x.astype(np.float32), target=xk.targets.Similarity(ref, normalize=False), method="vanilla"
    )
    np.testing.assert_allclose(dot, np.broadcast_to(ref @ wt, x.shape), rtol=1e-5)


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("method", ["vanilla", "smoothgrad", "integrated", "smint", "input_x_gradient"])
def test_callable_and_class_object_equal_an_int_target_bit_for_bit(framework: str, method: str) -> None:
    model, _ = regressor(framework, 3)
    x = np.random.default_rng(6).normal(size=(4, 5)).astype(np.float32)
    opts: dict[str, Any] = {"nsamples": 3, "nintegration": 4} if method == "smint" else {"nsamples": 4}
    if method == "vanilla":
        opts = {}
    by_int = xk.xai.explain(model, x, target=2, method=method, seed=7, **opts)
    by_fn = xk.xai.explain(model, x, target=lambda out: out[:, 2], method=method, seed=7, **opts)
    by_class = xk.xai.explain(model, x, target=xk.targets.Class(2), method=method, seed=7, **opts)
    if framework == "tf":
        # an int target's TF chunks fold the paths inside the compiled step (in-graph reduction),
        # a target object's on the host: the same sums in another order, equal to float rounding
        # (1 ulp seen with TensorFlow 2.21), not bit for bit
        np.testing.assert_allclose(by_fn, by_int, rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(by_class, by_int, rtol=1e-6, atol=1e-7)
        return
    assert np.array_equal(by_int, by_fn)
    assert np.array_equal(by_int, by_class)


class _Logits:
    """A Hugging Face-like output object."""

    def __init__(self, logits: Any) -> None:
        self.logits = logits


def test_outputs_read_from_dicts_tuples_and_objects(weights: Any, images: np.ndarray) -> None:
    torch = pytest.importorskip("torch")
    w, b = weights
    conv = segmenter("torch", w, b)
    wrappers = {
        "dict": lambda t: {"aux": t.mean(), "logits": conv(t)},
        "tuple": lambda t: (conv(t), t.sum()),
        "object": lambda t: _Logits(conv(t)),
    }
    x = batch("torch", images)
    expected = xk.xai.explain(conv, x, target=xk.targets.ClassRegion(2, mask=MASK), method="vanilla")
    for name, fn in wrappers.items():

        class Wrapped(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.conv = conv

            def forward(self, t: Any, fn: Any = fn) -> Any:
                return fn(t)

        got = xk.xai.explain(Wrapped(), x, target=xk.targets.ClassRegion(2, mask=MASK), method="vanilla")
        assert np.array_equal(got, expected), name


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_bad_targets_are_refused_naming_target(framework: str, weights: Any, images: np.ndarray) -> None:
    w, b = weights
    model = segmenter(framework, w, b)
    x = batch(framework, images)
    cases = [
        (xk.targets.ClassRegion(1, mask=np.ones((H + 1, W), bool)), "mask must be"),
        (xk.targets.ClassRegion(1, mask=np.ones((B + 1, H, W), bool)), "mask must be"),
        (xk.targets.ClassRegion(K), r"must lie in \[0, 3\]"),
        (xk.targets.ClassRegion([0, 1, 2]), "one per sample"),
        (lambda out: out[:, :1, 0, 0] if framework == "torch" else out[:, 0, 0, :1], "one score per row"),
        (xk.targets.Output(K * H * W), r"must lie in \[0,"),
        (xk.targets.Similarity(np.ones(3)), "reference must be"),
        ([xk.targets.ClassRegion(0), xk.targets.ClassRegion(1)], "one target object for the whole batch"),
    ]
    for target, match in cases:
        with pytest.raises(XaikitError, match=match) as info:
            xk.xai.explain(model, x, target=target, method="vanilla")
        assert "target" in str(info.value), str(info.value)
    with pytest.raises(XaikitValueError, match="reduce must be 'sum' or 'mean'"):
        xk.targets.ClassRegion(1, reduce="max")
    with pytest.raises(xk.XaikitTypeError, match="target=ClassRegion"):
        xk.targets.ClassRegion(1.5)


def test_region_on_a_classifier_and_objects_elsewhere_are_refused(images: np.ndarray) -> None:
    torch = pytest.importorskip("torch")
    model, _ = regressor("torch", 3)
    with pytest.raises(
        XaikitValueError, match=r"target=ClassRegion\(1, \.\.\.\) explains a segmentation output"
    ):
        xk.xai.explain(model, np.ones((2, 5), np.float32), target=xk.targets.ClassRegion(1), method="vanilla")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(C * H * W, 3))
    x = batch("torch", images)
    with pytest.raises(
        XaikitValueError,
        match=r"target=Output\(\.\.\.\) \(a target object\) is not taken by this method or metric",
    ):
        from xaikit.backend import get_backend
        from xaikit.xai.internal import pin, prepare

        # a caller that takes class indices only (objects=False), e.g. a metric not ported yet
        pin(prepare(get_backend(model), model, [x], ["x"]), xk.targets.Output(1))
    # Class is class indices everywhere, metrics included
    a = xk.xai.explain(model, x, target=xk.targets.Class(1), method="occlusion")
    assert np.array_equal(a, xk.xai.explain(model, x, target=1, method="occlusion"))


def test_keras_step_traced_once_for_new_masks(weights: Any, images: np.ndarray) -> None:
    """A target's per-sample tensors are arguments of the compiled step: another mask, class or
    batch of the same shapes reuses it (no retrace); another target kind is its own step."""
    from xaikit.backend import get_backend

    w, b = weights
    model = segmenter("tf", w, b)
    bk = get_backend(model)
    for k, mask in [(1, MASK), (2, ~MASK), (3, None)]:
        xk.xai.explain(model, images, target=xk.targets.ClassRegion(k, mask=mask), method="vanilla")
    assert bk.traces(model, "grad") == 1
    xk.xai.explain(model, images, target=xk.targets.Output(3), method="vanilla")
    assert bk.traces(model, "grad") == 2


def test_keras_trace_counts_die_with_their_model(weights: Any, images: np.ndarray) -> None:
    """A model's trace counts go when it is collected: Python reuses a dead object's id, and a new
    model that got it started with the dead one's count (the test above failed in a long run)."""
    import gc

    from xaikit.backend import get_backend

    w, b = weights
    model = segmenter("tf", w, b)
    bk = get_backend(model)
    xk.xai.explain(model, images, target=xk.targets.ClassRegion(1, mask=MASK), method="vanilla")
    ident = id(model)
    assert bk.traces(model, "grad") == 1
    del model
    gc.collect()
    assert not [k for k in bk.trace_counts if k[0] == ident]


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_precision_model_scores_in_float32(framework: str, dtype: str) -> None:
    """A float16/bfloat16 model's output is cast to float32 before a target scores it (a float32
    reference of a Keras mixed-precision model would not multiply a float16 output)."""
    rng = np.random.default_rng(8)
    wt = rng.normal(size=(3, 5)).astype(np.float32)
    if framework == "torch":
        torch = pytest.importorskip("torch")
        lin = torch.nn.Linear(5, 3, bias=False)
        with torch.no_grad():
            lin.weight.copy_(torch.as_tensor(wt))
        model = lin.to(getattr(torch, dtype))
        rounded = model.weight.detach().float().numpy()
    else:
        keras = pytest.importorskip("keras")
        if dtype == "bfloat16":
            skip_if_tf_bfloat16_crashes()
        inp = keras.Input((5,))
        dense = keras.layers.Dense(3, use_bias=False, dtype=f"mixed_{dtype}")
        model = keras.Model(inp, dense(inp))
        dense.set_weights([wt.T])
        rounded = np.asarray(keras.ops.cast(keras.ops.cast(wt, dtype), "float32"))
    x = rng.normal(size=(4, 5)).astype(np.float32)
    ref = rng.normal(size=3)
    for target, expected in [
        (xk.targets.Output(2), np.broadcast_to(rounded[2], x.shape)),
        (xk.targets.Similarity(ref, normalize=False), np.broadcast_to(ref @ rounded, x.shape)),
    ]:
        a = xk.xai.explain(model, x, target=target, method="vanilla")
        assert a.dtype == np.float32
        np.testing.assert_allclose(a, expected, rtol=2e-2, atol=2e-2)


def test_keras_dict_output_reads_its_logits(weights: Any, images: np.ndarray) -> None:
    keras = pytest.importorskip("keras")
    w, b = weights
    inp = keras.Input((H, W, C))
    conv = keras.layers.Conv2D(K, 1)
    seg = conv(inp)
    model = keras.Model(inp, {"aux": keras.layers.GlobalAveragePooling2D()(seg), "logits": seg})
    conv.set_weights([w.T[None, None], b])
    a = xk.xai.explain(model, images, target=xk.targets.ClassRegion(2, mask=MASK), method="vanilla")
    np.testing.assert_allclose(a, np.broadcast_to(MASK[None, :, :, None] * w[2], images.shape), rtol=1e-6)
    # output= still names another output: the pooled (B, K) scores, as a regression unit
    pooled = xk.xai.explain(model, images, target=xk.targets.Output(2), method="vanilla", output="aux")
    np.testing.assert_allclose(pooled, np.broadcast_to(w[2] / (H * W), images.shape), rtol=1e-5)


def test_forward_scores_refuses_predicted_classes_with_a_target_object() -> None:
    """A target object names no class: asking for per-row predicted classes beside its scores is
    refused by name instead of failing inside the model call."""
    torch = pytest.importorskip("torch")
    from xaikit.backend import get_backend
    from xaikit.xai._engine.chunks import forward_scores
    from xaikit.xai.internal import pin, prepare

    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    x = torch.rand(2, 4)
    bk = get_backend(model)
    pinned = pin(prepare(bk, model, [x], ["x"]), xk.targets.Output(1), objects=True)
    with pytest.raises(XaikitValueError, match=r"target= a target object \(kind 'output'\) with predicted"):
        forward_scores(
            bk,
            model,
            lambda r0, r1: ([x[r0:r1]], pinned.targets[r0:r1]),
            2,
            2,
            predicted=[],
            target=pinned.spec,
        )


def test_an_empty_region_is_named_before_its_zero_maps() -> None:
    """Class k predicted nowhere on a sample (mask=None), or an empty mask: its region score is 0
    whatever the input, so its map is 0; a warning names target, the samples and the reason."""
    torch = pytest.importorskip("torch")
    w = np.eye(K, C, dtype=np.float32)
    b = np.array([0.0, 0.0, -50.0, 0.0], np.float32)  # class 2 never wins
    model = linear_segmenter("torch", w, b, (H, W))
    x = torch.rand(B, C, H, W)
    with pytest.warns(
        xk.XaikitWarning,
        match=r"target=ClassRegion\(2, \.\.\.\): class 2 is predicted nowhere on samples \[0, 1\] of 2",
    ):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", xk.DegenerateMapWarning)
            maps = np.asarray(xk.xai.explain(model, x, method="vanilla", target=xk.targets.ClassRegion(2)))
    assert not maps.any()
    mask = np.zeros((B, H, W), bool)
    mask[0, 1, 1] = True
    with pytest.warns(xk.XaikitWarning, match=r"the mask is empty on samples \[1\] of 2"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", xk.DegenerateMapWarning)
            maps = np.asarray(
                xk.xai.explain(model, x, method="vanilla", target=xk.targets.ClassRegion(0, mask=mask))
            )
    assert maps[0].any() and not maps[1].any()
