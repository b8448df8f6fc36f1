"""Settings that cannot give a trustworthy map are refused or warned about, never silent."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import xaikit as xk
from xaikit.errors import XaikitValueError, XaikitWarning

IDS6 = np.arange(16).reshape(4, 4) % 6


def _linear() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16, 2))


def test_kernel_shap_warns_when_its_coalitions_cannot_separate_the_features() -> None:
    model, x = _linear(), torch.rand(2, 1, 4, 4)
    with pytest.warns(
        XaikitWarning,
        match=r"7 coalitions drawn cannot tell the 6 features apart .*larger nsamples \(62 uses every coalition\)",
    ):
        xk.xai.explain(model, x, target=0, method="kernel_shap", features=IDS6, nsamples=7, seed=0)


def test_kernel_shap_is_silent_with_enough_coalitions() -> None:
    model, x = _linear(), torch.rand(2, 1, 4, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        attr = xk.xai.explain(model, x, target=0, method="kernel_shap", features=IDS6, nsamples=62, seed=0)
    # every coalition (2^6 - 2 = 62): the exact Shapley values of a linear model, w . (x - 0) per feature
    w = model[1].weight[0].detach().numpy().reshape(4, 4)
    xs = x.numpy()[:, 0]
    want = np.stack([[(w * xs[b])[IDS6 == f].sum() for f in range(6)] for b in range(2)])
    got = np.stack([[attr[b, 0][IDS6 == f][0] for f in range(6)] for b in range(2)])
    np.testing.assert_allclose(got, want, atol=1e-5)


@pytest.mark.parametrize("n", [0, 1])
def test_lime_needs_two_coalitions_before_any_forward_pass(n: int) -> None:
    calls = []

    class Counting(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            calls.append(1)
            return x.flatten(1)[:, :2]

    with pytest.raises(XaikitValueError, match=r"nsamples must be an int >= 2"):
        xk.xai.explain(Counting(), torch.rand(1, 1, 4, 4), target=0, method="lime", features=IDS6, nsamples=n)
    assert calls == []


@pytest.mark.parametrize("method", ["feature_ablation", "lime", "integrated"])
@pytest.mark.parametrize("baseline", [float("nan"), "inf_array"])
def test_a_non_finite_baseline_is_refused(method: str, baseline: object) -> None:
    """A NaN or infinite baseline made NaN maps (blamed on the model) or all-zero LIME maps."""
    model, x = _linear(), torch.rand(2, 1, 4, 4)
    base = np.full((1, 4, 4), np.inf) if baseline == "inf_array" else baseline
    with pytest.raises(
        XaikitValueError, match=r"baseline for input 'x' must hold finite numbers; got .* NaN or infinite"
    ):
        xk.xai.explain(model, x, target=0, method=method, baseline=base)
