"""The model's own compute dtype: a float16/bfloat16 model (torch ``.half()`` / ``.bfloat16()``,
a Keras layer under a ``mixed_float16`` / ``mixed_bfloat16`` policy) gets its inputs cast to its
dtype inside the step, while noise, path rows, gradients and the fold over noise samples and
path steps stay float32, and the results are float32. (CPU here: both dtypes run on the CPU
builds of torch and TensorFlow used by the tests.)"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pytest

import xaikit as xk
from tests.tf_isa import skip_if_tf_bfloat16_crashes

B, F, C = 4, 6, 3
#: relative tolerance (of the largest reference value) against the float32 model with the same
#: (rounded) weights: bfloat16 keeps 8 significant bits, float16 11
TOL = {"bfloat16": 2e-2, "float16": 3e-3}
METHODS = [
    ("vanilla", {}),
    ("smoothgrad", {"nsamples": 6}),
    ("integrated", {"nsamples": 8, "baseline": "zeros"}),
    ("smint", {"nsamples": 3, "nintegration": 4, "baseline": "zeros"}),
    # the model-agnostic methods: one feature per column (F = 6), forward rows only (a fixed
    # max_batch: no timing probes of each chunk size)
    ("feature_ablation", {"max_batch": 256}),
    ("shapley_sampling", {"nsamples": 4, "max_batch": 256}),
    ("kernel_shap", {"nsamples": 62, "max_batch": 256}),  # every coalition of 6 features: exact
    ("lime", {"nsamples": 32, "max_batch": 256}),
    ("sobol", {"nsamples": 8, "max_batch": 256}),
    ("hsic", {"nsamples": 32, "max_batch": 256}),
]


def half_pair(framework: str, dtype: str, linear: bool = False) -> tuple[Any, Any]:
    """(the model in ``dtype``, the same model in float32 with the same weights)."""
    if framework != "torch" and dtype == "bfloat16":
        skip_if_tf_bfloat16_crashes()
    if framework == "torch":
        import torch

        torch.manual_seed(0)
        if linear:
            m = torch.nn.Linear(F, C, bias=False)
        else:
            m = torch.nn.Sequential(torch.nn.Linear(F, 16), torch.nn.Tanh(), torch.nn.Linear(16, C))
        half = copy.deepcopy(m).to(getattr(torch, dtype))
        return half, copy.deepcopy(half).float()  # the float32 reference holds the rounded weights
    import keras

    keras.utils.set_random_seed(0)
    policy = f"mixed_{dtype}"

    def build(dt: Any) -> Any:
        if linear:
            layers = [keras.layers.Dense(C, use_bias=False, dtype=dt)]
        else:
            layers = [keras.layers.Dense(16, activation="tanh", dtype=dt), keras.layers.Dense(C, dtype=dt)]
        return keras.Sequential([keras.layers.Input((F,)), *layers])

    half, ref = build(policy), build(None)
    ref.set_weights(half.get_weights())  # mixed policies keep float32 variables: same weights
    return half, ref


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_half_models_match_float32_within_their_precision(
    framework: str, rng: np.random.Generator, dtype: str
) -> None:
    half, ref = half_pair(framework, dtype)
    assert xk.backend.get_backend(half).model_dtype(half) == dtype
    x = rng.standard_normal((B, F)).astype(np.float32)
    target = np.array([0, 1, 2, 1])
    for method, opts in METHODS:
        got = xk.xai.explain(half, x, target=target, method=method, **opts)
        want = xk.xai.explain(ref, x, target=target, method=method, **opts)
        assert got.dtype == np.float32, method
        scale = float(np.abs(want).max())
        np.testing.assert_allclose(got, want, rtol=0, atol=TOL[dtype] * scale, err_msg=method)
    res = xk.xai.SaliencyNet(half, "x", "y", seed=0).get_integrated_masks(
        {"x": x}, nsamples=8, baseline="zeros", raw=True
    )
    assert res["saliency"].dtype == np.float32 and res["saliency_delta"].dtype == np.float64
    assert res["y"].shape == (B,)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_many_steps_accumulate_in_float32(framework: str, rng: np.random.Generator, dtype: str) -> None:
    """A bias-free linear model: every gradient is exactly its (half-precision) weight row, so
    IG over 2,000 steps and SmoothGrad over 300 noise samples are closed forms. Summed in the
    model's dtype they drift by far more than float32 rounding (checked below)."""
    half, _ = half_pair(framework, dtype, linear=True)
    # the gradient: the weight row as the model computes with it (Keras' mixed policies keep
    # float32 variables and round them to the compute dtype in the step)
    w = xk.xai.explain(half, np.zeros((1, F), np.float32), target=np.array([1]), method="vanilla")[0]
    x = rng.standard_normal((B, F)).astype(np.float32)
    target = np.ones(B, dtype=np.int64)
    steps = 2000
    ig = xk.xai.explain(
        half, x, target=target, method="integrated", nsamples=steps, quadrature="riemann_middle",
        baseline="zeros", max_batch=300,
    )  # fmt: skip
    np.testing.assert_allclose(ig, x * w, rtol=2e-5, atol=1e-6)
    sg = xk.xai.explain(
        half, x, target=target, method="smoothgrad", nsamples=300, magnitude=True, max_batch=256
    )
    np.testing.assert_allclose(sg, np.broadcast_to(w * w, x.shape), rtol=2e-5, atol=1e-7)
    # the same sums folded in the half dtype are off by far more than the tolerance above
    torch = pytest.importorskip("torch")
    acc = torch.zeros((), dtype=getattr(torch, dtype))
    term = torch.tensor(float(np.abs(w).max()) / steps, dtype=getattr(torch, dtype))
    for _ in range(steps):
        acc = acc + term
    assert abs(float(acc) - float(np.abs(w).max())) > 1e-3 * float(np.abs(w).max())


def small_scores_pair(framework: str, scale: float) -> tuple[Any, Any]:
    """A float16 model whose last layer is multiplied by ``scale`` (scores and gradients about
    ``scale`` x the usual: at 1e-6 most input gradients lie below float16's smallest normal value) and a
    float32 copy with the same rounded weights."""
    if framework == "torch":
        import torch

        torch.manual_seed(0)
        m = torch.nn.Sequential(torch.nn.Linear(F, 16), torch.nn.Tanh(), torch.nn.Linear(16, C))
        with torch.no_grad():
            m[2].weight.mul_(scale)
            m[2].bias.mul_(scale)
        half = copy.deepcopy(m).half()
        return half, copy.deepcopy(half).float()
    import keras

    keras.utils.set_random_seed(0)

    def build(dt: Any) -> Any:
        return keras.Sequential(
            [
                keras.layers.Input((F,)),
                keras.layers.Dense(16, activation="tanh", dtype=dt),
                keras.layers.Dense(C, dtype=dt),
            ]
        )

    ref = build(None)
    w = [a * np.float32(scale) if i >= 2 else a for i, a in enumerate(ref.get_weights())]
    w = [a.astype(np.float16).astype(np.float32) for a in w]
    half = build("mixed_float16")
    ref.set_weights(w)
    half.set_weights(w)
    return half, ref


@pytest.mark.parametrize("scale", [1e-3, 1e-6])
def test_float16_gradients_are_loss_scaled(framework: str, rng: np.random.Generator, scale: float) -> None:
    """Gradients below float16's range are brought into it by a per-row power of two on the
    score (and divided by it after, in float32). At scale 1e-6 the unscaled float16 backward
    pass was 15 % (torch) and 6 % (Keras) off the float32 copy's vanilla map; scaled, the maps
    match it to float16's precision (0.05 % measured)."""
    half, ref = small_scores_pair(framework, scale)
    x = rng.standard_normal((B, F)).astype(np.float32)
    target = np.array([0, 1, 2, 1])
    for method, opts in METHODS[:4]:
        got = xk.xai.explain(half, x, target=target, method=method, seed=0, **opts)
        want = xk.xai.explain(ref, x, target=target, method=method, seed=0, **opts)
        assert np.abs(want).max() < 10 * scale  # the gradients are as small as intended
        np.testing.assert_allclose(
            got, want, rtol=0, atol=TOL["float16"] * np.abs(want).max(), err_msg=method
        )


def test_float16_loss_scaling_keeps_rows_that_would_overflow() -> None:
    """A row whose scaled backward pass overflows inside the model (a hidden gradient of 1e3 x
    the scale, past float16's 65504) keeps its unscaled gradient: finite, and the float32 copy's
    to float16's precision. The other rows are scaled."""
    torch = pytest.importorskip("torch")

    m = torch.nn.Sequential(torch.nn.Linear(2, 1, bias=False), torch.nn.Linear(1, 1, bias=False))
    with torch.no_grad():
        m[0].weight.copy_(torch.tensor([[1e-7, 2e-7]]))  # input gradients 1e-4 and 2e-4
        m[1].weight.fill_(1e3)  # the hidden unit's gradient: 1e3 x the score's scale
    half = m.half()
    x = np.ones((2, 2), np.float32)
    got = xk.xai.explain(half, x, target=np.array([0, 0]), method="vanilla")
    want = xk.xai.explain(copy.deepcopy(half).float(), x, target=np.array([0, 0]), method="vanilla")
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, want, rtol=3e-3)
