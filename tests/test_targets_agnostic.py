"""Target objects (``xk.targets``) through the perturbation methods (occlusion, RISE), the
model-agnostic methods (feature ablation, Shapley sampling, KernelSHAP, LIME, Sobol, HSIC),
Guided IG and XRAI, torch and Keras on the same weights.

Every target of a 1x1-convolution segmenter below is linear in the input: its score is
sum over pixels and channels of G[b, p, c] x[b, p, c] + const, with G known (a class's weight
inside a region, one pixel's class weight, a reference's weighted sum of class weights). So a
patch's occlusion, ablation and Shapley value is exactly sum over the patch of G (x - baseline),
and Guided IG's attribution is G (x - 0) (a constant gradient along any path)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from target_models import batch, channel_last, linear_segmenter

import xaikit as xk
from tests.evaluate_models import weights_of
from tests.xai.models import ModelCache
from xaikit.errors import XaikitError

FRAMEWORKS = ("torch", "tf")
C, K, H, W, B = 3, 4, 4, 4, 2
BASE = 0.5  # the baseline of the perturbation and agnostic methods
PATCHES = (np.arange(H)[:, None] // 2) * 2 + np.arange(W)[None, :] // 2  # four 2x2 patches
MASK = np.zeros((H, W), dtype=bool)
MASK[1:3, 0:3] = True
PIXEL, PIXEL_CLASS = (1, 2), 3


@pytest.fixture(scope="module")
def weights() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return rng.normal(size=(K, C)).astype(np.float32), rng.normal(size=K).astype(np.float32)


@pytest.fixture(scope="module")
def images() -> np.ndarray:
    """(B, H, W, C) channel-last images."""
    return np.random.default_rng(1).normal(size=(B, H, W, C)).astype(np.float32)


@pytest.fixture(scope="module")
def reference() -> np.ndarray:
    """A (H, W, K) channel-last reference embedding of the segmenter's output."""
    return np.random.default_rng(2).normal(size=(H, W, K)).astype(np.float32)


#: the segmenters, built once per module (see ``ModelCache``), each checked unchanged after every test
_SEGMENTERS = ModelCache()


def segmenter(framework: str, w: np.ndarray, b: np.ndarray, pool: bool = False) -> Any:
    """The segmenter of these weights, built once per module: a fresh model pays its first
    explanation's plan tuning (and, for Keras, its construction and step tracing) again, ~1-2 s
    a call on these 4x4 images."""
    make = lambda: (linear_segmenter(framework, w, b, (H, W), pool), None)  # noqa: E731
    return _SEGMENTERS.get(framework, (pool, w.tobytes(), b.tobytes()), make)[0]


_shared_models_stay_unchanged, _forget_models = _SEGMENTERS.fixtures()


def target_of(kind: str, framework: str, ref: np.ndarray) -> Any:
    """The target object of a kind, spelled for the framework's output layout."""
    if kind == "region_mask":
        return xk.targets.ClassRegion(2, mask=MASK)
    if kind == "region_predicted":
        return xk.targets.ClassRegion(2)
    if kind == "region_per_sample":
        masks = np.stack([MASK, ~MASK]).astype(np.float32)
        return xk.targets.ClassRegion([1, 3], mask=masks)
    if kind == "output":
        i, j = PIXEL
        index = PIXEL_CLASS * H * W + i * W + j if framework == "torch" else (i * W + j) * K + PIXEL_CLASS
        return xk.targets.Output(index)
    if kind in ("similarity", "cosine"):
        flat = ref.transpose(2, 0, 1).ravel() if framework == "torch" else ref.ravel()
        return xk.targets.Similarity(flat, normalize=kind == "cosine")
    if kind == "callable":
        if framework == "torch":
            import torch

            m = torch.as_tensor(MASK.astype(np.float32))
            return lambda out: (out[:, 1] * m).sum(dim=(1, 2))
        import keras

        return lambda out: keras.ops.sum(out[..., 1] * MASK.astype(np.float32), axis=(1, 2))
    raise AssertionError(kind)


def gradient_of(kind: str, w: np.ndarray, b: np.ndarray, x: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """G (B, H, W, C): the constant gradient of the kind's score (all of them linear)."""
    if kind == "region_mask":
        g = MASK[None, :, :, None] * w[2]
    elif kind == "region_predicted":
        pred = (x @ w.T + b).argmax(-1) == 2  # (B, H, W): where the clean image is predicted 2
        g = pred[..., None] * w[2]
    elif kind == "region_per_sample":
        g = np.stack([MASK[..., None] * w[1], (~MASK)[..., None] * w[3]])
    elif kind == "output":
        g = np.zeros((H, W, C))
        g[PIXEL] = w[PIXEL_CLASS]
    elif kind == "similarity":
        g = ref @ w  # (H, W, C): sum_k ref[p, k] w[k]
    elif kind == "callable":
        g = MASK[None, :, :, None] * w[1]
    else:
        raise AssertionError(kind)
    return np.broadcast_to(g, x.shape).astype(np.float64)


def per_patch(values: np.ndarray) -> np.ndarray:
    """(B, H, W, C) values summed over each 2x2 patch and channels, spread back on the patch."""
    s = values.sum(-1).reshape(B, H // 2, 2, W // 2, 2).sum(axis=(2, 4))  # (B, 2, 2)
    return np.repeat(np.repeat(s, 2, axis=1), 2, axis=2)[..., None] * np.ones(C)


LINEAR_KINDS = ["region_mask", "region_predicted", "region_per_sample", "output", "similarity", "callable"]
PATCH_METHODS: dict[str, dict[str, Any]] = {
    "occlusion": {"window": 2, "stride": 2, "baseline": BASE},
    "feature_ablation": {"features": PATCHES, "baseline": BASE},
    "shapley_sampling": {"features": PATCHES, "baseline": BASE, "nsamples": 3},
    "kernel_shap": {"features": PATCHES, "baseline": BASE},
}


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("kind", LINEAR_KINDS)
@pytest.mark.parametrize("method", sorted(PATCH_METHODS))
def test_a_patch_gets_exactly_its_contribution_to_the_target_score(
    framework: str, kind: str, method: str, weights: Any, images: np.ndarray, reference: np.ndarray
) -> None:
    """Linear score: occluding / ablating a patch changes it by sum over the patch of
    G (x - baseline), and that is also each patch's exact Shapley value."""
    w, b = weights
    model = segmenter(framework, w, b)
    target = target_of(kind, framework, reference)
    a = xk.xai.explain(model, batch(framework, images), target=target, method=method, **PATCH_METHODS[method])
    expected = per_patch(gradient_of(kind, w, b, images, reference) * (images - BASE))
    np.testing.assert_allclose(channel_last(framework, a), expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("kind", ["region_mask", "region_predicted", "output", "callable"])
def test_guided_ig_of_a_linear_target_is_gradient_times_input_and_complete(
    framework: str, kind: str, weights: Any, images: np.ndarray, reference: np.ndarray
) -> None:
    w, b = weights
    model = segmenter(framework, w, b)
    target = target_of(kind, framework, reference)
    a, delta = xk.xai.explain(
        model, batch(framework, images), target=target, method="guided_ig", steps=8, return_delta=True
    )
    expected = gradient_of(kind, w, b, images, reference) * images
    np.testing.assert_allclose(channel_last(framework, a), expected, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(delta, 0.0, atol=1e-4)


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("kind", ["region_mask", "similarity"])
def test_xrai_ranks_the_integrated_gradients_of_the_target(
    framework: str, kind: str, weights: Any, images: np.ndarray, reference: np.ndarray
) -> None:
    """XRAI's IG part explains the target: with a zero baseline its attributions are G x, and
    a region gets the mean of their channel maxima over its pixels."""
    w, b = weights
    model = segmenter(framework, w, b)
    regions = [MASK, ~MASK]
    result = xk.xai.explain(
        model, batch(framework, images), target=target_of(kind, framework, reference), method="xrai",
        steps=4, baselines=["zeros"], segments=[regions] * B, min_pixel_diff=1, raw=True,
    )  # fmt: skip
    attr = gradient_of(kind, w, b, images, reference) * images
    np.testing.assert_allclose(channel_last(framework, result.attributions), attr, rtol=1e-4, atol=1e-5)
    peak = attr.max(axis=-1)
    for i in range(B):
        for region in regions:
            np.testing.assert_allclose(result.maps[i][region], peak[i][region].mean(), rtol=1e-4, atol=1e-5)


TWIN_METHODS: dict[str, dict[str, Any]] = {
    "occlusion": {"window": 2, "stride": 1},
    "rise": {"nsamples": 16, "cell": 2},
    "lime": {"features": PATCHES, "nsamples": 32},
    "sobol": {"features": PATCHES, "nsamples": 8},
    "hsic": {"features": PATCHES, "nsamples": 16},
    "kernel_shap": {"features": PATCHES},
}


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["region_mask", "region_predicted", "output", "cosine", "callable"])
@pytest.mark.parametrize("method", sorted(TWIN_METHODS))
def test_torch_and_keras_agree_on_the_same_weights(
    kind: str, method: str, weights: Any, images: np.ndarray, reference: np.ndarray
) -> None:
    w, b = weights
    maps = []
    for fw in FRAMEWORKS:
        target = target_of(kind, fw, reference)
        a = xk.xai.explain(
            segmenter(fw, w, b),
            batch(fw, images),
            target=target,
            method=method,
            seed=3,
            **TWIN_METHODS[method],
        )
        maps.append(channel_last(fw, a))
    assert np.abs(maps[0]).max() > 1e-3  # not a vacuous agreement
    np.testing.assert_allclose(maps[0], maps[1], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("method", ["rise", "lime", "sobol", "hsic"])
def test_a_callable_equals_the_region_it_computes(method: str, weights: Any, images: np.ndarray) -> None:
    """The same region score written as a ClassRegion and as a callable: the same maps."""
    torch = pytest.importorskip("torch")
    w, b = weights
    model, x = segmenter("torch", w, b), batch("torch", images)
    m = torch.as_tensor(MASK.astype(np.float32))
    opts = TWIN_METHODS[method]
    region = xk.xai.explain(
        model, x, target=xk.targets.ClassRegion(1, mask=MASK), method=method, seed=5, **opts
    )
    fn = xk.xai.explain(
        model, x, target=lambda out: (out[:, 1] * m).sum(dim=(1, 2)), method=method, seed=5, **opts
    )
    np.testing.assert_allclose(region, fn, rtol=1e-5, atol=1e-5)


ALL_METHODS: dict[str, dict[str, Any]] = {
    **PATCH_METHODS,
    **TWIN_METHODS,
    "guided_ig": {"steps": 4},
    "xrai": {"steps": 4, "segments": [[MASK, ~MASK]] * B, "min_pixel_diff": 1},
}


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("method", sorted(ALL_METHODS))
def test_class_k_is_bit_equal_to_the_int_and_registered(
    framework: str, method: str, weights: Any, images: np.ndarray
) -> None:
    w, b = weights
    model, x = segmenter(framework, w, b, pool=True), batch(framework, images)
    opts = ALL_METHODS[method]
    plain = xk.xai.explain(model, x, target=1, method=method, seed=7, **opts)
    wrapped = xk.xai.explain(model, x, target=xk.targets.Class(1), method=method, seed=7, **opts)
    np.testing.assert_array_equal(plain, wrapped)
    assert np.abs(plain).max() > 0
    assert xk.xai.registry.get_method(method).target_objects


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("method", ["occlusion", "kernel_shap", "guided_ig"])
def test_the_model_is_unchanged_after_explaining_a_region(
    framework: str, method: str, weights: Any, images: np.ndarray
) -> None:
    w, b = weights
    model = linear_segmenter(framework, w, b, (H, W))  # a fresh model: its very first explanation too
    before = weights_of(framework, model)
    xk.xai.explain(
        model,
        batch(framework, images),
        target=xk.targets.ClassRegion(0, mask=MASK),
        method=method,
        **ALL_METHODS[method],
    )
    for old, new in zip(before, weights_of(framework, model)):
        np.testing.assert_array_equal(old, new)


@pytest.mark.parametrize(
    ("method", "target", "pool", "message"),
    [
        ("occlusion", xk.targets.ClassRegion(1), True, "target=ClassRegion.*segmentation output"),
        (
            "kernel_shap",
            xk.targets.ClassRegion(1, mask=np.ones((H + 1, W))),
            False,
            "target=ClassRegion.*mask must be",
        ),
        ("rise", xk.targets.ClassRegion(K), False, "target=ClassRegion.*class"),
        ("guided_ig", xk.targets.Output(K * H * W), False, r"target=Output.*index must lie"),
        ("lime", xk.targets.Similarity(np.ones(3)), False, "target=Similarity.*reference must be"),
        ("sobol", [xk.targets.Output(0), xk.targets.Output(1)], False, "target must be one target object"),
        ("feature_ablation", lambda out: out.sum(), False, "target=<lambda>.*one score per row"),
        ("hsic", xk.targets.Output([0, 1, 2]), False, r"target=Output.*one per sample \(2\)"),
    ],
)
def test_bad_targets_are_refused_naming_target(
    method: str, target: Any, pool: bool, message: str, weights: Any, images: np.ndarray
) -> None:
    w, b = weights
    model = segmenter("torch", w, b, pool=pool)
    with pytest.raises(XaikitError, match=message):
        xk.xai.explain(model, batch("torch", images), target=target, method=method, **ALL_METHODS[method])
