"""Explaining never changes the model: flags, weights and normalization statistics."""

from __future__ import annotations

import numpy as np
import pytest

import xaikit as xk

CALLS = [
    ("get_masks", {}),
    ("get_smoothed_masks", {"nsamples": 3}),
    ("get_integrated_masks", {"nsamples": 4}),
    ("get_smoothed_masks", {"nsamples": 2, "nintegration": 3}),
]


def test_torch_model_is_unchanged(rng: np.random.Generator) -> None:
    torch = pytest.importorskip("torch")
    nn = torch.nn
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 4, 3),
        nn.BatchNorm2d(4),
        nn.ReLU(),
        nn.Dropout(0.5),
        nn.Flatten(),
        nn.Linear(4 * 6 * 6, 3),
    )
    model.train()
    model[3].eval()  # a mixed state must come back mixed
    with torch.no_grad():  # non-trivial running statistics
        model[1].running_mean.uniform_(-1, 1)
        model[1].running_var.uniform_(0.5, 2)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    flags = [m.training for m in model.modules()]
    x = rng.random((4, 3, 8, 8)).astype(np.float32)
    net = xk.xai.SaliencyNet(model, "x", "y", seed=0)
    first = {}
    for call, opts in CALLS:
        res = getattr(net, call)({"x": x}, raw=True, **opts)
        first[call + str(opts)] = res["saliency"]
        after = model.state_dict()
        for k, v in before.items():
            assert torch.equal(v, after[k]), k
        assert [m.training for m in model.modules()] == flags
        assert all(p.grad is None for p in model.parameters())
    # inference mode inside: dropout off, so explanations are deterministic
    for call, opts in CALLS:
        again = getattr(net, call)({"x": x}, raw=True, **opts)["saliency"]
        np.testing.assert_array_equal(again, first[call + str(opts)])


def test_keras_model_is_unchanged(rng: np.random.Generator) -> None:
    tf = pytest.importorskip("tensorflow")
    layers = tf.keras.layers
    model = tf.keras.Sequential(
        [
            layers.Input((8, 8, 3)),
            layers.Conv2D(4, 3),
            layers.BatchNormalization(),
            layers.ReLU(),
            layers.Dropout(0.5),
            layers.Flatten(),
            layers.Dense(3),
        ]
    )
    bn = model.layers[1]
    bn.set_weights([w + rng.random(w.shape).astype(np.float32) for w in bn.get_weights()])
    before = [w.copy() for w in model.get_weights()]
    x = rng.random((4, 8, 8, 3)).astype(np.float32)
    net = xk.xai.SaliencyNet(model, "x", "y", seed=0)
    first = {}
    for call, opts in CALLS:
        first[call + str(opts)] = getattr(net, call)({"x": x}, raw=True, **opts)["saliency"]
        for a, b in zip(before, model.get_weights()):
            np.testing.assert_array_equal(a, b)
    for call, opts in CALLS:
        np.testing.assert_array_equal(
            getattr(net, call)({"x": x}, raw=True, **opts)["saliency"], first[call + str(opts)]
        )


#: one method of each torch code path: the gradient sweep, the layer steps (CAM), the rule hooks
#: (LRP, guided backprop), DeepLIFT's own pass and the forward-only chunks
INFERENCE_METHODS = ["vanilla", "gradcam", "lrp", "guided_backprop", "deeplift", "occlusion", "smint"]


@pytest.mark.parametrize("method", INFERENCE_METHODS)
def test_torch_inference_mode_inputs_and_callers_get_the_same_maps(method: str) -> None:
    """A batch made under ``torch.inference_mode`` (a data pipeline's) and a call made inside it
    give the maps of an ordinary call: autograd cannot record or save inference tensors, so the
    explanation works on normal copies and leaves inference mode for its own steps (the CAM, rule
    and guided methods once failed with "check their shape and layout")."""
    torch = pytest.importorskip("torch")
    nn = torch.nn
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(2), nn.Flatten(), nn.Linear(16, 5)
    ).eval()
    x = torch.randn(2, 3, 8, 8)
    opts = {"nsamples": 2, "nintegration": 3} if method == "smint" else {}
    want = xk.xai.explain(model, x, target=1, method=method, seed=0, **opts)
    with torch.inference_mode():
        made_there = x.clone()
    assert made_there.is_inference()
    got = xk.xai.explain(model, made_there, target=1, method=method, seed=0, **opts)
    np.testing.assert_array_equal(got, want)
    with torch.inference_mode():
        inside = xk.xai.explain(model, x, target=1, method=method, seed=0, **opts)
        assert torch.is_inference_mode_enabled()  # the caller's mode is back
    np.testing.assert_array_equal(inside, want)
    assert not made_there.requires_grad and made_there.is_inference()
