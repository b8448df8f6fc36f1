"""Inputs of other ranks than images: (B, F) tabular and (B, T, F) sequences, torch and Keras.
Masks keep the input's shape (no axis is moved, no channel is reduced), IG adds up, and torch
agrees with captum."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import xaikit as xk
from xaikit.errors import XaikitValueError

B, T, F, C = 4, 5, 3, 2


def tabular(framework: str, seed: int = 0) -> Any:
    """A (B, F) -> (B, C) tanh MLP."""
    if framework == "torch":
        import torch

        torch.manual_seed(seed)
        return torch.nn.Sequential(torch.nn.Linear(F, 8), torch.nn.Tanh(), torch.nn.Linear(8, C))
    import keras

    keras.utils.set_random_seed(seed)
    return keras.Sequential(
        [keras.layers.Input((F,)), keras.layers.Dense(8, activation="tanh"), keras.layers.Dense(C)]
    )


def sequence(framework: str, kind: str, seed: int = 0) -> Any:
    """A (B, T, F) -> (B, C) model: a GRU read at its last step, or a Conv1d over time."""
    if framework == "torch":
        import torch

        torch.manual_seed(seed)

        class Seq(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                if kind == "gru":
                    self.body: Any = torch.nn.GRU(F, 6, batch_first=True)
                else:
                    self.body = torch.nn.Conv1d(F, 6, 3)
                self.head = torch.nn.Linear(6, C)

            def forward(self, x: torch.Tensor) -> torch.Tensor:
                if kind == "gru":
                    h = self.body(x)[0][:, -1]
                else:
                    h = torch.tanh(self.body(x.transpose(1, 2))).mean(dim=2)
                return self.head(h)

        return Seq()
    import keras

    keras.utils.set_random_seed(seed)
    body = (
        [keras.layers.GRU(6)]
        if kind == "gru"
        else [keras.layers.Conv1D(6, 3, activation="tanh"), keras.layers.GlobalAveragePooling1D()]
    )
    return keras.Sequential([keras.layers.Input((T, F)), *body, keras.layers.Dense(C)])


def _models(framework: str) -> list[tuple[str, Any, tuple[int, ...]]]:
    return [
        ("tabular", tabular(framework), (B, F)),
        ("gru", sequence(framework, "gru"), (B, T, F)),
        ("conv1d", sequence(framework, "conv1d"), (B, T, F)),
    ]


@pytest.mark.parametrize("which", [0, 1, 2])
def test_masks_keep_the_input_shape_and_ig_adds_up(
    framework: str, rng: np.random.Generator, which: int
) -> None:
    name, model, shape = _models(framework)[which]
    x = rng.standard_normal(shape).astype(np.float32)
    for method, opts in [
        ("vanilla", {}),
        ("smoothgrad", {"nsamples": 3}),
        ("integrated", {"nsamples": 4}),
        ("smint", {"nsamples": 2, "nintegration": 3}),
    ]:
        attr = xk.xai.explain(model, x, method=method, **opts)
        assert attr.shape == shape and attr.dtype == np.float32, (name, method)
        assert np.all(np.isfinite(attr)) and np.any(attr != 0), (name, method)
    ig, delta = xk.xai.explain(
        model, x, method="integrated", nsamples=24, baseline="zeros", return_delta=True
    )
    np.testing.assert_allclose(delta, 0.0, atol=2e-4)  # Gauss-Legendre, 24 nodes, smooth model
    # SaliencyNet: display masks have the input's shape too (no image reduction), values in [0, 1]
    res = xk.xai.SaliencyNet(model, "x", "y", seed=0).get_smoothed_masks({"x": x}, nsamples=2)
    assert res["saliency"].shape == shape
    assert 0.0 <= res["saliency"].min() and res["saliency"].max() <= 1.0
    raw = xk.xai.SaliencyNet(model, "x", "y", seed=0).get_integrated_masks(
        {"x": x}, nsamples=24, baseline="zeros", raw=True
    )
    np.testing.assert_allclose(raw["saliency"], ig, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kind", ["tabular", "gru", "conv1d"])
def test_integrated_gradients_match_captum(rng: np.random.Generator, kind: str) -> None:
    torch = pytest.importorskip("torch")
    captum_attr = pytest.importorskip("captum.attr")
    model = tabular("torch") if kind == "tabular" else sequence("torch", kind)
    shape = (B, F) if kind == "tabular" else (B, T, F)
    x = torch.as_tensor(rng.standard_normal(shape).astype(np.float32))
    base = torch.as_tensor(rng.standard_normal(shape).astype(np.float32))
    target = torch.as_tensor([0, 1, 1, 0])
    ours, delta = xk.xai.explain(
        model, x, target=target, method="integrated", nsamples=20, quadrature="riemann_middle",
        baseline=base, max_batch=16, return_delta=True,
    )  # fmt: skip
    theirs, their_delta = captum_attr.IntegratedGradients(model).attribute(
        x, baselines=base, target=target, n_steps=20, method="riemann_middle", return_convergence_delta=True
    )
    theirs = theirs.detach().numpy()
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-5 * float(np.abs(theirs).max()))
    np.testing.assert_allclose(delta, their_delta.detach().numpy(), atol=1e-5)


def test_layout_is_never_moved_for_tabular_or_sequences(framework: str, rng: np.random.Generator) -> None:
    """A (B, T, 3) or (B, 3) batch looks channel-ish, but only 4-D image batches are moved."""
    from xaikit.backend import get_backend
    from xaikit.xai._engine.inputs import prepare

    for _, model, shape in _models(framework):
        x = rng.standard_normal(shape).astype(np.float32)
        inp = prepare(get_backend(model), model, [x], ["x"])
        assert inp.moves == [None] and inp.channel_axes == [None]
        assert tuple(int(d) for d in inp.tensors[0].shape) == shape


def test_unbatched_sample_is_refused_with_the_fix(framework: str, rng: np.random.Generator) -> None:
    model = tabular(framework)
    x = rng.standard_normal(F).astype(np.float32)
    with pytest.raises(
        XaikitValueError,
        match=r"model input 'x' must be a batch \(batch, \.\.\.\) with at least 2 axes; got ndarray of "
        r"shape \(3,\).*One unbatched sample: add the batch axis, e.g. x\[None\]",
    ):
        xk.xai.explain(model, x, method="vanilla")
    np.testing.assert_allclose(  # with the batch axis: the same as a row of a batch
        xk.xai.explain(model, x[None], method="vanilla", target=1)[0],
        xk.xai.explain(model, np.stack([x, x + 1]), method="vanilla", target=1)[0],
        rtol=1e-6,
    )
