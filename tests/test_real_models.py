"""Real architectures at 224x224 (random weights, normalized inputs): values, not shapes.

torch ResNet-18 against captum; Keras MobileNetV2 against a ``tf.GradientTape`` reference of the
same quadrature; a Hugging Face ViT (``.logits`` output, positional ``pixel_values``) against
autograd and captum, with IG completeness; every model left exactly as it was.

Completeness, sum(IG) = f(x) - f(baseline), is asserted to a tolerance on the ViT, whose path
integral is smooth (LayerNorm, GELU): |delta| < 2e-3 |f(x) - f(b)| at 16 Gauss-Legendre steps
(measured ~5e-4). Randomly initialised batch-norm ReLU CNNs have "shattered" input gradients:
the gradient at a single point of the path is dominated by fine-scale kinks, so a few-step
quadrature misses f(x) - f(b) by 5-70% (ResNet-18, 8-64 steps) or more than 100% (MobileNetV2,
32 steps), for captum exactly as for xaikit. There the tests assert what is exact: the attributions equal an
independent implementation of the same quadrature, and the reported delta equals sum(IG)
- (f(x) - f(b)) with f from separate forward passes.

The same kinks make those gradients sensitive to float32 rounding: the interpolated points of
two implementations differ in the last bit, a few ReLUs sitting at their kink flip, and captum's
own float32 IG differs from its float64 IG by 0.6% (relative L2, ResNet-18, 4 steps). So IG on
the CNNs is compared in relative L2, with bounds about 3x the measured distance (still far below
the O(1) distance of a wrong node, weight or scaling); vanilla gradients at x itself, and
everything on the ViT, agree element by element to 1e-4 of the largest value.

Budget: B=2 and 2-16 steps; the non-slow tests take 37 s in one process on 2 CPU cores (load
~2.5; most of it importing TensorFlow and tracing MobileNetV2), 97 s when three other jobs load
the cores. EfficientNetB0 / ResNet50 are marked slow; the docs page's code runs in
tests/test_own_models_page.py (not a numerics file: it is not rerun under another CPU capability).
"""

from __future__ import annotations

import os

import numpy as np
import pytest

import xaikit as xk
from tests.real_models import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    VIT_MEAN,
    VIT_STD,
    channel_first,
    keras_application,
    normalize,
    pictures,
    tiny_vit,
    torch_resnet18,
    torch_scores,
)
from xaikit.errors import XaikitValueError

BACKENDS = {b.strip() for b in os.environ.get("XAIKIT_TEST_BACKENDS", "torch,tf").split(",") if b.strip()}
needs_torch = pytest.mark.skipif("torch" not in BACKENDS, reason="torch is not in XAIKIT_TEST_BACKENDS")
needs_tf = pytest.mark.skipif("tf" not in BACKENDS, reason="tf is not in XAIKIT_TEST_BACKENDS")

#: samples explained (B) and pictures the batch norm is calibrated on
B, N_CALIBRATION = 2, 8


def close(ours: np.ndarray, theirs: np.ndarray, rtol: float = 1e-4) -> None:
    """Equal up to ``rtol`` relative to the largest magnitude of the reference."""
    theirs = np.asarray(theirs, dtype=np.float64)
    scale = float(np.abs(theirs).max())
    assert scale > 0
    np.testing.assert_allclose(ours, theirs, rtol=rtol, atol=rtol * scale)


def near(ours: np.ndarray, theirs: np.ndarray, l2: float) -> None:
    """Relative L2 distance at most ``l2``: for gradients at path points, where float32 rounding
    flips a few ReLUs that sit at their kink (see the module docstring)."""
    theirs = np.asarray(theirs, dtype=np.float64)
    err = float(np.linalg.norm(np.asarray(ours, dtype=np.float64) - theirs) / np.linalg.norm(theirs))
    print(f"relative L2 distance {err:.2e}")
    assert err <= l2, (err, l2)


def check_delta(attr: np.ndarray, delta: np.ndarray, f_x: np.ndarray, f_b: np.ndarray) -> None:
    """The reported delta is sum(attributions) - (f(x) - f(b)), f from separate forward passes."""
    total = attr.reshape(len(attr), -1).astype(np.float64).sum(axis=1)
    gap = f_x - f_b
    scale = max(1.0, float(np.abs(total).max()), float(np.abs(gap).max()))  # float32 sums
    np.testing.assert_allclose(delta, total - gap, rtol=0, atol=1e-5 * scale)


# ---------------------------------------------------------------------------------- torch ResNet-18
@pytest.fixture(scope="module")
def resnet():
    """ResNet-18 (5 classes, calibrated) and B normalized pictures, channel-first numpy."""
    pixels, _ = pictures(N_CALIBRATION)
    x = channel_first(normalize(pixels, IMAGENET_MEAN, IMAGENET_STD))
    model = torch_resnet18(x)
    return model, x[:B], pixels[:B]


@needs_torch
def test_resnet18_vanilla_and_integrated_gradients_equal_captum(resnet) -> None:
    import torch

    captum = pytest.importorskip("captum.attr")
    model, x, _ = resnet
    xt = torch.as_tensor(x)
    f_x = torch_scores(model, xt)
    target = f_x.argmax(axis=1)
    assert np.abs(f_x).max() > 0.05  # calibrated: not a dead net
    ours = xk.xai.explain(model, xt, method="vanilla")  # the predicted class, pinned
    theirs = captum.Saliency(model).attribute(xt, target=torch.as_tensor(target), abs=False)
    assert float(theirs.abs().max()) > 1e-5  # gradients that mean something (uncalibrated: ~1e-12)
    close(ours, theirs.numpy(), rtol=1e-4)

    ig, delta = xk.xai.explain(
        model, xt, method="integrated", nsamples=4, baseline="zeros", max_batch=16, return_delta=True
    )
    theirs, their_delta = captum.IntegratedGradients(model).attribute(
        xt,
        baselines=torch.zeros_like(xt),
        target=torch.as_tensor(target),
        n_steps=4,
        method="gausslegendre",
        internal_batch_size=16,
        return_convergence_delta=True,
    )
    near(ig, theirs.detach().numpy(), l2=1.5e-2)  # measured 4.8e-3; captum's f32 vs f64: 6.2e-3
    # captum's delta differs from ours only by the sums of those float32-level differences
    assert np.abs(delta - their_delta.numpy()).max() <= 1e-2 * np.abs(ig).reshape(B, -1).sum(1).max()
    rows = np.arange(B)
    check_delta(ig, delta, f_x[rows, target], torch_scores(model, torch.zeros_like(xt))[rows, target])


@needs_torch
def test_resnet18_is_left_exactly_as_it_was(resnet) -> None:
    import torch

    model, x, _ = resnet
    model.train()  # as inside a training loop: batch norm must not update from explaining
    model.layer4[1].bn2.eval()  # a mixed state comes back mixed
    for p in model.conv1.parameters():
        p.requires_grad_(False)  # a frozen stem stays frozen
    try:
        before = {k: v.clone() for k, v in model.state_dict().items()}
        flags = [m.training for m in model.modules()]
        wants = [p.requires_grad for p in model.parameters()]
        net = xk.xai.SaliencyNet(model, "x", "y_pred", seed=0, max_batch=16)
        net.get_masks({"x": x})
        net.get_smoothed_masks({"x": x}, nsamples=2, nintegration=2)  # noise and path rows
        after = model.state_dict()
        assert before.keys() == after.keys()
        for k, v in before.items():
            assert torch.equal(v, after[k]), k  # bit-identical, running statistics included
        assert [m.training for m in model.modules()] == flags
        assert [p.requires_grad for p in model.parameters()] == wants
        assert all(p.grad is None for p in model.parameters())
        assert xk.xai.explain(model, x[:1], method="vanilla").shape == (1, 3, 224, 224)
        assert model.training and not model.layer4[1].bn2.training
    finally:
        for p in model.conv1.parameters():
            p.requires_grad_(True)
        model.eval()


@needs_torch
def test_resnet18_channel_last_numpy_gives_the_masks_of_channel_first(resnet) -> None:
    model, x, _ = resnet
    last = np.ascontiguousarray(x.transpose(0, 2, 3, 1))  # (B, 224, 224, 3), as images are decoded
    net = xk.xai.SaliencyNet(model, "x", "y_pred", seed=3, max_batch=16)
    first = net.get_masks({"x": x}, raw=True)
    other = net.get_masks({"x": last}, raw=True)
    np.testing.assert_array_equal(other["y_pred"], first["y_pred"])
    assert other["saliency"].shape == last.shape  # given back in the caller's layout
    close(other["saliency"], first["saliency"].transpose(0, 2, 3, 1), rtol=1e-5)


@needs_torch
def test_saliency_trace_on_resnet18_draws_the_denormalized_picture(resnet) -> None:
    from xaikit.trace.xai import Saliency

    model, x, pixels = resnet
    trace = Saliency(
        model,
        "x",
        "y_pred",
        smoothing=0,
        integrating=(2, 0),
        max_batch=16,
        denormalize=(IMAGENET_MEAN, IMAGENET_STD),
    )
    grid = trace.explain({"x": x})
    # the image column is the decoded picture again (channel-last for painting), to float error
    np.testing.assert_allclose(grid["x"][0], pixels / 255.0, atol=2e-6)
    mask = grid["Integrated saliency"][0]  # computed on the normalized input the model takes
    assert mask.max() == pytest.approx(1.0)
    # the overlay is drawn over the real picture (smooth: the trace's auto sigma, 224 / 32)
    expected = xk.viz.overlay(pixels / 255.0, mask, smooth=7.0)
    np.testing.assert_allclose(grid["x saliency"][0], expected, atol=1e-5)


# ---------------------------------------------------------------------------- Keras MobileNetV2
@pytest.fixture(scope="module")
def mobilenet():
    """MobileNetV2(weights=None) with 5 logits, calibrated; inputs x / 127.5 - 1 (its own rule)."""
    pixels, _ = pictures(N_CALIBRATION)
    x = (pixels.astype(np.float32) / 127.5 - 1.0).astype(np.float32)
    return keras_application("MobileNetV2", x), x[:B]


def tape_gradients(model, x: np.ndarray, target: np.ndarray, graph: bool = False) -> np.ndarray:
    """d score[target] / d x by a ``tf.GradientTape``, run eagerly or (``graph``) inside a
    ``tf.function``: the two run different kernels (Grappler fuses convolution, bias and
    activation in a graph), so their float32 results differ by the model's conditioning."""
    import tensorflow as tf

    def grads(xt):
        with tf.GradientTape() as tape:
            tape.watch(xt)
            scores = model(xt, training=False)
            chosen = tf.gather(scores, target, axis=1, batch_dims=1)
        return tape.gradient(chosen, xt)

    run = tf.function(grads) if graph else grads
    return run(tf.convert_to_tensor(x)).numpy()


def keras_float64(name: str, model):
    """The same ``keras.applications.<name>`` in float64 (same weights): the reference that
    float32 rounding is measured against."""
    import keras

    policy = keras.config.dtype_policy()
    keras.config.set_dtype_policy("float64")
    try:
        twin = getattr(keras.applications, name)(
            weights=None, input_shape=model.input_shape[1:], classes=model.output_shape[-1],
            classifier_activation=None,
        )  # fmt: skip
    finally:
        keras.config.set_dtype_policy(policy)
    twin.set_weights([np.asarray(w, dtype=np.float64) for w in model.get_weights()])
    return twin


def relative_l2(a: np.ndarray, b: np.ndarray) -> float:
    b = np.asarray(b, dtype=np.float64)
    return float(np.linalg.norm(np.asarray(a, dtype=np.float64) - b) / np.linalg.norm(b))


def as_accurate_as(ours: np.ndarray, reference: np.ndarray, exact: np.ndarray, factor: float = 3.0) -> None:
    """``ours`` is no further from the float64 result ``exact`` than ``factor`` times TensorFlow's
    own float32 ``reference`` is: the tolerance is the model's conditioning, measured on this
    machine in this run, not a number from one CPU. Kink flips are few, discrete events, so two
    float32 evaluations' distances to float64 vary by up to 1.7x (measured: IG 1.6e-2 against
    the tape's 9.8e-3); a wrong node, class or layout is O(1) away."""
    floor = relative_l2(reference, exact)
    err = relative_l2(ours, exact)
    print(f"relative L2 to float64: ours {err:.2e}, TensorFlow's float32 tape {floor:.2e}")
    assert err <= factor * floor + 1e-6, (err, floor)


@needs_tf
def test_mobilenetv2_vanilla_and_integrated_gradients_equal_a_tape_reference(mobilenet) -> None:
    """The gradients of a random-weight MobileNetV2 are ill-conditioned in float32: ReLU6 units
    sit at their kinks, and a last-bit difference in a convolution flips a few of them. Two
    float32 evaluations that differ only in kernel choice (TensorFlow's eager tape and the same
    tape in a ``tf.function``; or one CPU and another) differ by 0.3% (AMD EPYC, AVX2) to 1.8%
    (Xeon, AVX-512) in relative L2, and each is ~0.8% from the float64 result. So: xaikit runs
    the graph-mode tape's own computation (equal to it, element by element), and it is as
    accurate as TensorFlow's eager tape, both measured against float64."""
    model, x = mobilenet
    f_x = np.asarray(model(x, training=False), dtype=np.float64)
    target = f_x.argmax(axis=1)
    exact = keras_float64("MobileNetV2", model)
    ours = xk.xai.explain(model, x, method="vanilla")
    graph = tape_gradients(model, x, target, graph=True)
    assert np.abs(graph).max() > 1e-5
    close(ours, graph, rtol=1e-5)  # the same graph, the same kernels: measured equal bit for bit
    as_accurate_as(
        ours, tape_gradients(model, x, target), tape_gradients(exact, x.astype(np.float64), target)
    )

    steps = 4
    ig, delta = xk.xai.explain(
        model, x, method="integrated", nsamples=steps, baseline="zeros", max_batch=16, return_delta=True
    )
    nodes, weights = np.polynomial.legendre.leggauss(steps)  # Gauss-Legendre on [0, 1]

    def path_integral(m, xs):
        return sum(
            w / 2 * tape_gradients(m, ((a + 1) / 2 * xs).astype(xs.dtype), target) * xs
            for a, w in zip(nodes, weights)
        )

    # xaikit's 8 path rows run as one chunk, the reference's as 4 calls of 2 rows: other kernels
    as_accurate_as(ig, path_integral(model, x), path_integral(exact, x.astype(np.float64)))
    rows = np.arange(B)
    f_b = np.asarray(model(np.zeros_like(x), training=False), dtype=np.float64)
    check_delta(ig, delta, f_x[rows, target], f_b[rows, target])


@needs_tf
def test_mobilenetv2_is_left_exactly_as_it_was(mobilenet) -> None:
    model, x = mobilenet
    before = [w.numpy().copy() for w in model.weights]  # moving mean/variance included
    trainable = [layer.trainable for layer in model.layers]
    net = xk.xai.SaliencyNet(model, "x", "y_pred", seed=0, max_batch=16)
    net.get_masks({"x": x})
    net.get_smoothed_masks({"x": x}, nsamples=2, nintegration=2)  # noise and path rows
    after = [w.numpy() for w in model.weights]
    assert len(before) == len(after)
    for w, b, a in zip(model.weights, before, after):
        np.testing.assert_array_equal(a, b, err_msg=w.path)
    assert [layer.trainable for layer in model.layers] == trainable


# -------------------------------------------------------------------------- Hugging Face ViT
@pytest.fixture(scope="module")
def vit():
    """A small ViTForImageClassification (hidden 64, 2 layers) and B pictures, mean = std = 0.5."""
    pytest.importorskip("transformers")
    pixels, _ = pictures(B)
    return tiny_vit(), channel_first(normalize(pixels, VIT_MEAN, VIT_STD))


@needs_torch
def test_vit_logits_are_explained_by_default_and_equal_autograd(vit) -> None:
    import torch

    model, x = vit
    f_x = torch_scores(model, x)
    target = f_x.argmax(axis=1)
    ours = xk.xai.explain(model, x, method="vanilla")  # the output object's .logits, by default
    named = xk.xai.explain(model, x, method="vanilla", output="logits")
    np.testing.assert_array_equal(named, ours)
    xt = torch.as_tensor(x).requires_grad_(True)
    chosen = model(xt).logits.gather(1, torch.as_tensor(target)[:, None]).sum()
    (reference,) = torch.autograd.grad(chosen, xt)
    assert float(reference.abs().max()) > 1e-5
    close(ours, reference.numpy(), rtol=1e-4)
    # the batch-dict API: pixel_values fed positionally, predictions of the logits
    res = xk.xai.SaliencyNet(model, "pixel_values", "label", seed=0).get_masks({"pixel_values": x})
    np.testing.assert_array_equal(res["label"], target)
    assert res["saliency"].shape == (B, 1, 224, 224) and res["saliency"].max() == pytest.approx(1.0)


@needs_torch
def test_vit_integrated_gradients_are_complete_and_equal_captum(vit) -> None:
    import torch

    captum = pytest.importorskip("captum.attr")
    model, x = vit
    xt = torch.as_tensor(x)
    f_x, f_b = torch_scores(model, x), torch_scores(model, np.zeros_like(x))
    target = np.abs(f_x - f_b).argmax(axis=1)  # the class whose score moves most: a gap to check
    rows = np.arange(B)
    gap = f_x[rows, target] - f_b[rows, target]
    ig, delta = xk.xai.explain(
        model,
        x,
        target=target,
        method="integrated",
        nsamples=16,
        baseline="zeros",
        max_batch=32,
        return_delta=True,
    )
    total = ig.reshape(B, -1).astype(np.float64).sum(axis=1)
    assert np.all(np.abs(gap) > 1e-2)
    np.testing.assert_array_less(np.abs(total - gap), 2e-3 * np.abs(gap))  # completeness
    check_delta(ig, delta, f_x[rows, target], f_b[rows, target])
    theirs = captum.IntegratedGradients(lambda t: model(t).logits).attribute(
        xt,
        baselines=torch.zeros_like(xt),
        target=torch.as_tensor(target),
        n_steps=16,
        method="gausslegendre",
        internal_batch_size=32,
    )
    close(ig, theirs.detach().numpy(), rtol=1e-4)


@needs_torch
def test_vit_is_left_exactly_as_it_was(vit) -> None:
    import torch

    model, x = vit
    model.train()
    try:
        before = {k: v.clone() for k, v in model.state_dict().items()}
        net = xk.xai.SaliencyNet(model, "pixel_values", "label", seed=0)
        net.get_smoothed_masks({"pixel_values": x}, nsamples=2, nintegration=2)
        after = model.state_dict()
        for k, v in before.items():
            assert torch.equal(v, after[k]), k
        assert all(m.training for m in model.modules())
        assert all(p.grad is None and p.requires_grad for p in model.parameters())
    finally:
        model.eval()


# ----------------------------------------------------------------------- heavier Keras models
@needs_tf
@pytest.mark.slow
@pytest.mark.parametrize("name", ["EfficientNetB0", "ResNet50"])
def test_keras_applications_equal_a_tape_reference(name: str) -> None:
    pixels, _ = pictures(N_CALIBRATION)
    if name == "EfficientNetB0":  # rescales and normalizes inside: takes 0..255
        x = pixels.astype(np.float32)
    else:  # resnet50.preprocess_input: BGR, minus the Caffe means
        x = (pixels[..., ::-1] - np.array([103.939, 116.779, 123.68])).astype(np.float32)
    model = keras_application(name, x)
    x = x[:B]
    before = [w.numpy().copy() for w in model.weights]
    f_x = np.asarray(model(x, training=False), dtype=np.float64)
    target = f_x.argmax(axis=1)
    ours = xk.xai.explain(model, x, method="vanilla")
    close(ours, tape_gradients(model, x, target, graph=True), rtol=1e-5)  # the same computation
    exact = tape_gradients(keras_float64(name, model), x.astype(np.float64), target)
    as_accurate_as(ours, tape_gradients(model, x, target), exact)  # and as accurate as the eager tape
    ig, delta = xk.xai.explain(
        model, x, method="integrated", nsamples=4, baseline="black", max_batch=16, return_delta=True
    )
    base = x.reshape(B, -1).min(axis=1)[:, None, None, None] * np.ones_like(x)  # "black"
    rows = np.arange(B)
    f_b = np.asarray(model(base, training=False), dtype=np.float64)
    check_delta(ig, delta, f_x[rows, target], f_b[rows, target])
    for w, b in zip(model.weights, before):
        np.testing.assert_array_equal(w.numpy(), b, err_msg=w.path)


def test_calibrate_batchnorm_refuses_an_empty_batch_and_a_bad_batch_size() -> None:
    """An empty batch would reset every statistic to 0 / 1 silently (no pass runs)."""
    torch = pytest.importorskip("torch")
    from xaikit.architecture.torch import calibrate_batchnorm

    model = torch.nn.Sequential(torch.nn.Conv2d(3, 2, 3), torch.nn.BatchNorm2d(2))
    with pytest.raises(XaikitValueError, match=r"batch_size must be an int >= 1; got int 0"):
        calibrate_batchnorm(model, torch.rand(2, 3, 8, 8), batch_size=0)
    with pytest.raises(XaikitValueError, match=r"needs a non-empty batch x; got 0 samples"):
        calibrate_batchnorm(model, torch.rand(0, 3, 8, 8))
    pytest.importorskip("tensorflow")
    import keras

    from xaikit.architecture.tensorflow import calibrate_batchnorm as calibrate_keras

    kmodel = keras.Sequential(
        [keras.Input((8, 8, 3)), keras.layers.Conv2D(2, 3), keras.layers.BatchNormalization()]
    )
    with pytest.raises(XaikitValueError, match=r"needs a non-empty batch x; got 0 samples"):
        calibrate_keras(kmodel, np.zeros((0, 8, 8, 3), np.float32))
