"""Every method against closed-form answers on analytic models, in both frameworks."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import xaikit as xk
from tests.xai.models import analytic, analytic_f, analytic_grad

KINDS = ["linear", "quadratic", "sin"]

#: the module's analytic models, one per framework, kind and weights (the seeded ``rng`` gives
#: most tests the same weights): a TF step is traced, and an ``"auto"`` chunk plan probed, once
#: per model and input shape, not once per test
_MODELS: dict[tuple[Any, ...], Any] = {}


@pytest.fixture(scope="module", autouse=True)
def _forget_models() -> Iterator[None]:
    yield
    _MODELS.clear()


def _analytic(framework: str, kind: str, w: np.ndarray) -> Any:
    """``analytic(framework, kind, w)``, made once per module (read-only: explain never changes it)."""
    w = np.asarray(w, dtype=np.float32)
    key = (framework, kind, w.shape, w.tobytes())
    if key not in _MODELS:
        _MODELS[key] = analytic(framework, kind, w)
    return _MODELS[key]


def _setup(framework: str, kind: str, rng: np.random.Generator, batch: int = 5, dim: int = 6):
    w = rng.normal(size=(3, dim))
    x = rng.uniform(-1.5, 1.5, size=(batch, dim)).astype(np.float32)
    model = _analytic(framework, kind, w)
    return w, x, model


@pytest.mark.parametrize("kind", KINDS)
def test_vanilla_is_the_analytic_gradient(framework: str, kind: str, rng: np.random.Generator) -> None:
    w, x, model = _setup(framework, kind, rng)
    target = np.array([0, 1, 2, 1, 0])
    attr = xk.xai.explain(model, x, target=target, method="vanilla", framework=framework)
    np.testing.assert_allclose(
        attr, analytic_grad(kind, w, x.astype(np.float64), target), rtol=1e-5, atol=1e-5
    )


@pytest.mark.parametrize("kind", KINDS)
def test_integrated_gradients_are_exact(framework: str, kind: str, rng: np.random.Generator) -> None:
    """IG from a zero baseline: w * x (linear), w * x^2 (quadratic), w * sin(x) (sin)."""
    w, x, model = _setup(framework, kind, rng)
    target = np.array([2, 0, 1, 1, 0])
    attr, delta = xk.xai.explain(
        model,
        x,
        target=target,
        method="integrated",
        framework=framework,
        nsamples=32,
        baseline="zeros",
        return_delta=True,
    )
    g = {"linear": x, "quadratic": x * x, "sin": np.sin(x)}[kind].astype(np.float64)
    np.testing.assert_allclose(attr, w[target] * g, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(delta, 0.0, atol=1e-5)


@pytest.mark.parametrize("rule", ["riemann_left", "riemann_right", "riemann_middle", "riemann_trapezoid"])
def test_riemann_rules_match_their_closed_form(framework: str, rule: str, rng: np.random.Generator) -> None:
    """For the quadratic model the IG integrand is 2*w*alpha*x^2: each rule's error is known."""
    w, x, model = _setup(framework, "quadratic", rng)
    target = np.zeros(len(x), dtype=np.int64)
    n = 4
    attr = xk.xai.explain(
        model,
        x,
        target=target,
        method="integrated",
        framework=framework,
        nsamples=n,
        baseline="zeros",
        quadrature=rule,
    )
    alpha_mean = {
        "riemann_left": (n - 1) / (2 * n),
        "riemann_right": (n + 1) / (2 * n),
        "riemann_middle": 0.5,
        "riemann_trapezoid": 0.5,
    }[rule]
    expected = w[0] * 2 * alpha_mean * x.astype(np.float64) ** 2
    np.testing.assert_allclose(attr, expected, rtol=1e-5, atol=1e-6)


def test_smoothgrad_of_sine_matches_its_expectation(framework: str, rng: np.random.Generator) -> None:
    """E[cos(x + n)] = cos(x) exp(-s^2/2) and E[cos^2(x + n)] = (1 + cos(2x) exp(-2 s^2)) / 2
    for n ~ N(0, s^2): many noise samples must land within a few standard errors."""
    w = rng.normal(size=(2, 4))
    x = np.array([[-1.0, 0.0, 0.5, 1.0], [0.2, -0.7, 1.0, 0.0]], dtype=np.float32)  # range 2 and 1.7
    model = _analytic(framework, "sin", w)
    S, spread = 4000, 0.25
    sigma = spread * (x.max(axis=1) - x.min(axis=1))[:, None]
    target = np.array([0, 1])
    mean = xk.xai.explain(
        model,
        x,
        target=target,
        method="smoothgrad",
        framework=framework,
        nsamples=S,
        stdev_spread=spread,
        magnitude=False,
        seed=3,
    )
    expected = w[target] * np.cos(x) * np.exp(-(sigma**2) / 2)
    np.testing.assert_allclose(mean, expected, atol=4 * np.abs(w[target]).max() / np.sqrt(S))
    sq = xk.xai.explain(
        model,
        x,
        target=target,
        method="smoothgrad",
        framework=framework,
        nsamples=S,
        stdev_spread=spread,
        magnitude=True,
        seed=3,
    )
    expected_sq = w[target] ** 2 * (1 + np.cos(2 * x) * np.exp(-2 * sigma**2)) / 2
    np.testing.assert_allclose(sq, expected_sq, atol=4 * (w[target] ** 2).max() / np.sqrt(S))


def test_smint_of_a_linear_model_is_linear_in_the_mean_noise(
    framework: str, rng: np.random.Generator
) -> None:
    """SmInt (mean) of f = w.x from zeros is w * mean_s(x + n_s): with many samples, w * x."""
    w, x, model = _setup(framework, "linear", rng, batch=3)
    target = np.array([0, 1, 2])
    attr = xk.xai.explain(
        model,
        x,
        target=target,
        method="smint",
        framework=framework,
        nsamples=2000,
        nintegration=3,
        stdev_spread=0.1,
        magnitude=False,
        baseline="zeros",
        seed=1,
    )
    sigma = 0.1 * (x.max(axis=1) - x.min(axis=1))[:, None]
    np.testing.assert_allclose(
        attr, w[target] * x, atol=float(4 * np.abs(w).max() * sigma.max() / np.sqrt(2000))
    )


def test_completeness_on_analytic_models(framework: str, rng: np.random.Generator) -> None:
    """sum(attr) = f(x) - f(baseline) for an explicit random baseline."""
    w, x, model = _setup(framework, "sin", rng)
    base = rng.uniform(-1, 1, size=x.shape).astype(np.float32)
    target = np.array([0, 1, 2, 0, 1])
    attr, delta = xk.xai.explain(
        model,
        x,
        target=target,
        method="integrated",
        framework=framework,
        nsamples=48,
        baseline=base,
        return_delta=True,
    )
    gap = analytic_f("sin", w, x.astype(np.float64), target) - analytic_f(
        "sin", w, base.astype(np.float64), target
    )
    np.testing.assert_allclose(attr.sum(axis=1), gap, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(delta, attr.sum(axis=1) - gap, atol=1e-4)


def test_multi_input_model_gets_one_mask_per_input(framework: str, rng: np.random.Generator) -> None:
    """f(a, b) = Wa a + Wb b: the gradient w.r.t. each input is its own weight row."""
    wa, wb = rng.normal(size=(3, 4)).astype(np.float32), rng.normal(size=(3, 5)).astype(np.float32)
    a = rng.normal(size=(2, 4)).astype(np.float32)
    b = rng.normal(size=(2, 5)).astype(np.float32)
    if framework == "torch":
        import torch

        class Two(torch.nn.Module):
            def forward(self, p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
                return p @ torch.as_tensor(wa).T + q @ torch.as_tensor(wb).T

        model = Two()
    else:
        import tensorflow as tf

        ia, ib = tf.keras.Input((4,)), tf.keras.Input((5,))
        la, lb = tf.keras.layers.Dense(3, use_bias=False), tf.keras.layers.Dense(3, use_bias=False)
        model = tf.keras.Model([ia, ib], la(ia) + lb(ib))
        la.set_weights([wa.T])
        lb.set_weights([wb.T])
    net = xk.xai.SaliencyNet(
        model, model_inputs=["a", "b"], model_outputs="pred", outputs=["sa", "sb"], seed=0
    )
    res = net.get_masks({"a": a, "b": b}, target=[2, 1], raw=True)
    np.testing.assert_allclose(res["sa"], wa[[2, 1]], rtol=1e-5)
    np.testing.assert_allclose(res["sb"], wb[[2, 1]], rtol=1e-5)
    ig = net.get_integrated_masks({"a": a, "b": b}, nsamples=8, baseline="zeros", target=[2, 1], raw=True)
    np.testing.assert_allclose(ig["sa"], wa[[2, 1]] * a, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ig["sb"], wb[[2, 1]] * b, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ig["sa_delta"], 0.0, atol=1e-5)


def test_smint_delta_needs_unsquared_attributions(framework: str, rng: np.random.Generator) -> None:
    """SmInt squares each path's attributions by default (magnitude=True): no sum to compare with
    f(x) - f(baseline). Asking for the delta then is an error that says why, never a None."""
    _w, x, model = _setup(framework, "sin", rng)
    target = np.array([0, 1, 2, 0, 1])
    opts = {"target": target, "method": "smint", "framework": framework, "nsamples": 4, "nintegration": 48}
    with pytest.raises(
        xk.XaikitValueError, match=r"return_delta: SmInt \(smint\) has no completeness delta.*magnitude=False"
    ):
        xk.xai.explain(model, x, return_delta=True, **opts)
    attr, delta = xk.xai.explain(model, x, return_delta=True, magnitude=False, **opts)
    assert delta is not None and delta.shape == (5,)
    assert np.all(np.abs(delta) < 1e-3 * np.abs(attr).sum(axis=1).max() + 1e-4)
