"""Agreement with captum on torch models (the de-facto reference implementation)."""

from __future__ import annotations

import numpy as np
import pytest

import xaikit as xk
from tests.xai.models import images, model_for

torch = pytest.importorskip("torch")
captum_attr = pytest.importorskip("captum.attr")


@pytest.fixture
def cnn_and_x(rng: np.random.Generator):
    model, layout = model_for("torch", seed=1)
    x = torch.as_tensor(layout(images(rng, batch=5)))
    target = torch.as_tensor([0, 1, 2, 3, 4])
    return model, x, target


def test_vanilla_matches_captum_saliency(cnn_and_x) -> None:
    model, x, target = cnn_and_x
    ours = xk.xai.explain(model, x, target=target, method="vanilla")
    theirs = captum_attr.Saliency(model).attribute(x, target=target, abs=False).detach().numpy()
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize(
    "rule", ["gausslegendre", "riemann_left", "riemann_right", "riemann_middle", "riemann_trapezoid"]
)
@pytest.mark.parametrize("baseline", ["zeros", "array"])
def test_integrated_gradients_match_captum(
    cnn_and_x, rng: np.random.Generator, rule: str, baseline: str
) -> None:
    model, x, target = cnn_and_x
    base = (
        torch.zeros_like(x)
        if baseline == "zeros"
        else torch.as_tensor(rng.random(x.shape).astype(np.float32))
    )
    ours, delta = xk.xai.explain(
        model,
        x,
        target=target,
        method="integrated",
        nsamples=20,
        quadrature=rule,
        baseline="zeros" if baseline == "zeros" else base,
        max_batch=32,
        return_delta=True,
    )
    ig = captum_attr.IntegratedGradients(model)
    theirs, their_delta = ig.attribute(
        x, baselines=base, target=target, n_steps=20, method=rule, return_convergence_delta=True
    )
    theirs = theirs.detach().numpy()
    if rule == "riemann_trapezoid":
        # captum weights the n trapezoid nodes on linspace(0, 1, n) by 1/n (ends halved), which
        # sums to (n - 1)/n; the trapezoid rule's weights are 1/(n - 1) (ends halved), summing to
        # 1 (see test_exact.py::test_riemann_rules_match_their_closed_form). Same nodes, so the
        # two differ by exactly that factor.
        ours = ours * (20 - 1) / 20
    else:
        # The completeness error is the quadrature's own: the same for both implementations.
        np.testing.assert_allclose(delta, their_delta.detach().numpy(), rtol=1e-3, atol=1e-5)
    scale = float(np.abs(theirs).max())
    np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-5 * scale)


def test_smoothgrad_squared_matches_captum_with_zero_noise(cnn_and_x) -> None:
    model, x, target = cnn_and_x
    ours = xk.xai.explain(
        model, x, target=target, method="smoothgrad", nsamples=3, stdev_spread=0.0, magnitude=True
    )
    nt = captum_attr.NoiseTunnel(captum_attr.Saliency(model))
    theirs = nt.attribute(x, nt_type="smoothgrad_sq", nt_samples=3, stdevs=0.0, target=target, abs=False)
    np.testing.assert_allclose(ours, theirs.detach().numpy(), rtol=1e-5, atol=1e-9)
