"""Robustness metrics (max/avg sensitivity, local Lipschitz) and relevance rank accuracy: closed
forms on linear models, Quantus 0.6's scores on the same perturbed inputs, both frameworks."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

import xaikit as xk
from tests.evaluate_models import (
    CHANNELS,
    SIZE,
    layout,
    linear,
    seeded_lenet,
    square_mask,
    square_weights,
    weights_of,
)
from xaikit.errors import DegenerateMapWarning, XaikitTypeError, XaikitValueError
from xaikit.evaluate import robustness
from xaikit.evaluate.robustness import _from_perturbed

DATA = Path(__file__).parent / "data" / "quantus_robustness.npz"
BACKENDS = {b.strip() for b in os.environ.get("XAIKIT_TEST_BACKENDS", "torch,tf").split(",") if b.strip()}
needs_torch = pytest.mark.skipif("torch" not in BACKENDS, reason="torch is not in XAIKIT_TEST_BACKENDS")


def _setup(framework: str, rng: np.random.Generator, batch: int = 3):
    w = square_weights(rng)
    x = rng.uniform(0.1, 1.0, size=(batch, SIZE, SIZE, CHANNELS)).astype(np.float32)
    return w, x, linear(framework, w)


def _uniform(x: np.ndarray, n: int, radius: float, seed: int) -> np.ndarray:
    """The perturbed copies the sensitivity metrics draw: float32 uniform noise in [-r, r]."""
    u = np.random.default_rng(seed).random(size=(n, *x.shape), dtype=np.float32)
    return x[None] + (u * np.float32(2 * radius) - np.float32(radius))


def _gaussian(x: np.ndarray, n: int, std: float, seed: int) -> np.ndarray:
    noise = np.random.default_rng(seed).standard_normal(size=(n, *x.shape), dtype=np.float32)
    return x[None] + noise * np.float32(std)


def test_gradient_maps_of_a_linear_model_do_not_move(framework: str, rng: np.random.Generator) -> None:
    w, x, model = _setup(framework, rng)
    xin = layout(framework, x)
    # the target stays the clean prediction even when the noise (radius 20) is large enough to flip it
    r = xk.evaluate.max_sensitivity(model, xin, "vanilla", nsamples=6, radius=20.0)
    np.testing.assert_allclose(r.scores, 0.0, atol=1e-6)
    assert r.ratios.shape == (3, 6) and r.scores.dtype == np.float64
    avg = xk.evaluate.avg_sensitivity(model, xin, "smoothgrad", nsamples=3, method_options={"nsamples": 2})
    np.testing.assert_allclose(avg.scores, 0.0, atol=1e-6)  # mean of squared gradients: w² everywhere
    lip = xk.evaluate.local_lipschitz(model, xin, "vanilla", nsamples=5)
    np.testing.assert_allclose(lip.scores, 0.0, atol=1e-6)
    scores = contributions_all(w, x)
    assert r.targets.tolist() == scores.argmax(axis=1).tolist()
    pert = _uniform(xin, 6, 20.0, 0)  # the copies it explained: their predictions differ
    pert = pert.transpose(0, 1, 3, 4, 2) if framework == "torch" else pert
    flipped = [contributions_all(w, p).argmax(axis=1) != r.targets for p in pert]
    assert np.mean(flipped) > 0.3


def contributions_all(w: np.ndarray, x: np.ndarray) -> np.ndarray:
    return np.einsum("chwk,bhwk->bc", w.astype(np.float64), x.astype(np.float64))


def test_input_x_gradient_of_a_linear_model_in_closed_form(framework: str, rng: np.random.Generator) -> None:
    """Φ(x) = w_t ⊙ x, so Φ(x + δ) - Φ(x) = w_t ⊙ δ exactly."""
    w, x, model = _setup(framework, rng)
    xin = layout(framework, x)
    target = np.array([0, 1, 2])
    wt = layout(framework, w[target]).astype(np.float64)  # (B, ...) in the model's layout
    n, radius, std, seed = 7, 0.3, 0.2, 5
    pert = _uniform(xin, n, radius, seed)
    delta = pert.astype(np.float64) - xin[None]
    num = np.sqrt(((wt[None] * delta) ** 2).reshape(n, 3, -1).sum(axis=2))  # (n, B)
    den = np.sqrt(((wt * xin) ** 2).reshape(3, -1).sum(axis=1))
    mx = xk.evaluate.max_sensitivity(
        model, xin, "input_x_gradient", target=target, nsamples=n, radius=radius, seed=seed
    )
    np.testing.assert_allclose(mx.ratios, (num / den).T, rtol=1e-5)
    np.testing.assert_allclose(mx.scores, (num / den).max(axis=0), rtol=1e-5)
    av = xk.evaluate.avg_sensitivity(
        model, xin, "input_x_gradient", target=target, nsamples=n, radius=radius, seed=seed
    )
    np.testing.assert_allclose(av.scores, (num / den).mean(axis=0), rtol=1e-5)
    assert mx.targets.tolist() == [0, 1, 2] and mx.kind == "max" and av.kind == "avg"

    pert = _gaussian(xin, n, std, seed)
    delta = pert.astype(np.float64) - xin[None]
    num = np.sqrt(((wt[None] * delta) ** 2).reshape(n, 3, -1).sum(axis=2))
    step = np.sqrt((delta**2).reshape(n, 3, -1).sum(axis=2))
    lip = xk.evaluate.local_lipschitz(
        model, xin, "input_x_gradient", target=target, nsamples=n, stdev=std, seed=seed
    )
    np.testing.assert_allclose(lip.ratios, (num / step).T, rtol=1e-5)
    np.testing.assert_allclose(lip.scores, (num / step).max(axis=0), rtol=1e-5)
    # normalize: each map divided by its own largest magnitude
    top0 = np.abs(wt * xin).reshape(3, -1).max(axis=1)
    maps = (wt[None] * pert).reshape(n, 3, -1)
    top = np.abs(maps).max(axis=2)
    diff = maps / top[..., None] - ((wt * xin).reshape(3, -1) / top0[:, None])[None]
    expect = (np.sqrt((diff**2).sum(axis=2)) / step).max(axis=0)
    got = xk.evaluate.local_lipschitz(
        model, xin, "input_x_gradient", target=target, nsamples=n, stdev=std, seed=seed, normalize=True
    )
    np.testing.assert_allclose(got.scores, expect, rtol=1e-5)


def test_torch_and_keras_agree_on_the_same_perturbations(rng: np.random.Generator) -> None:
    if BACKENDS != {"torch", "tf"}:
        pytest.skip("needs both frameworks")
    w, x, _ = _setup("torch", rng)
    pert = _gaussian(x, 4, 0.1, 1)  # channel-last
    out = {}
    for fw in ("torch", "tf"):
        p = pert if fw == "tf" else np.ascontiguousarray(pert.transpose(0, 1, 4, 2, 3))
        out[fw] = [
            _from_perturbed(kind, linear(fw, w), layout(fw, x), "input_x_gradient", p, target=1)
            for kind in ("max", "avg", "lipschitz")
        ]
    for a, b in zip(out["torch"], out["tf"]):
        np.testing.assert_allclose(a, b, rtol=1e-5)


def _conv(framework: str):
    if framework == "torch":
        import torch

        torch.manual_seed(0)
        return torch.nn.Sequential(
            torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU(), torch.nn.Flatten(),
            torch.nn.Linear(4 * 6 * 6, 3),
        ).train()  # fmt: skip
    import tensorflow as tf

    tf.keras.utils.set_random_seed(0)
    layers = tf.keras.layers
    return tf.keras.Sequential(
        [layers.Input((SIZE, SIZE, CHANNELS)), layers.Conv2D(4, 3), layers.BatchNormalization(),
         layers.ReLU(), layers.Flatten(), layers.Dense(3)]
    )  # fmt: skip


def test_seeded_grouped_and_model_unchanged(framework: str, rng: np.random.Generator, monkeypatch) -> None:
    model = _conv(framework)
    x = layout(framework, rng.uniform(0, 1, size=(2, SIZE, SIZE, CHANNELS)).astype(np.float32))
    before = weights_of(framework, model)
    opts = {"nsamples": 2}
    a = xk.evaluate.avg_sensitivity(model, x, "smoothgrad", nsamples=3, seed=3, method_options=opts)
    b = xk.evaluate.avg_sensitivity(model, x, "smoothgrad", nsamples=3, seed=3, method_options=opts)
    c = xk.evaluate.avg_sensitivity(model, x, "smoothgrad", nsamples=3, seed=4, method_options=opts)
    np.testing.assert_array_equal(a.ratios, b.ratios)
    assert not np.allclose(a.ratios, c.ratios)
    assert np.all(a.scores > 0) and a.groups == [6]
    # one call per group of whole noise samples when the stack is large: the same ratios
    one = xk.evaluate.local_lipschitz(model, x, "vanilla", nsamples=5, seed=2)
    monkeypatch.setattr(robustness, "GROUP_BYTES", 24 * x.size * 2)  # two noise samples per group
    grouped = xk.evaluate.local_lipschitz(model, x, "vanilla", nsamples=5, seed=2)
    assert grouped.groups == [4, 4, 2] and one.groups == [10]
    np.testing.assert_allclose(grouped.ratios, one.ratios, rtol=1e-5)
    after = weights_of(framework, model)
    assert all(np.array_equal(p, q) for p, q in zip(before, after))
    if framework == "torch":
        assert model.training


def test_a_map_of_zeros_has_no_relative_change(framework: str, rng: np.random.Generator) -> None:
    w = np.zeros((2, SIZE, SIZE, CHANNELS), dtype=np.float32)
    w[1] = 1.0
    x = layout(framework, rng.uniform(0, 1, size=(2, SIZE, SIZE, CHANNELS)).astype(np.float32))
    # the class with zero weights has an all-zero gradient map: degenerate, and said so (once per
    # model: the perturbed copies' maps are not reported again)
    with pytest.warns(DegenerateMapWarning, match=r"1 of 2 maps are exactly 0"):
        r = xk.evaluate.max_sensitivity(linear(framework, w), x, "vanilla", target=[0, 1], nsamples=3)
    assert np.isnan(r.scores[0]) and r.scores[1] == 0.0 and r.mean == 0.0
    with pytest.warns(DegenerateMapWarning, match=r"2 of 2 maps are exactly 0"):
        lip = xk.evaluate.local_lipschitz(linear(framework, w), x, "vanilla", target=0, nsamples=3)
    np.testing.assert_array_equal(lip.scores, [0.0, 0.0])
    assert "max" in repr(r) and "stdev=0.1" in repr(lip)


def test_robustness_bad_inputs(rng: np.random.Generator) -> None:
    _, x, model = _setup("torch" if "torch" in BACKENDS else "tf", rng)
    fw = "torch" if "torch" in BACKENDS else "tf"
    x = layout(fw, x)
    f = xk.evaluate.max_sensitivity
    with pytest.raises(XaikitTypeError, match="method"):
        f(model, x, np.ones_like(x))
    with pytest.raises(XaikitValueError, match="method"):
        f(model, x, "no_such_method")
    with pytest.raises(XaikitValueError, match="nsamples"):
        f(model, x, "vanilla", nsamples=0)
    with pytest.raises(XaikitValueError, match="radius"):
        f(model, x, "vanilla", radius=0.0)
    with pytest.raises(XaikitTypeError, match="radius"):
        f(model, x, "vanilla", radius="0.1")
    with pytest.raises(XaikitValueError, match="stdev"):
        xk.evaluate.local_lipschitz(model, x, "vanilla", stdev=-1.0)
    with pytest.raises(XaikitTypeError, match="normalize"):
        xk.evaluate.avg_sensitivity(model, x, "vanilla", normalize="yes")
    with pytest.raises(XaikitValueError, match="target"):
        f(model, x, "vanilla", method_options={"target": 1})
    with pytest.raises(XaikitTypeError, match="method_options"):
        f(model, x, "vanilla", method_options=[1])
    with pytest.raises(XaikitTypeError, match="x must be one input batch"):
        f(model, [x, x], "vanilla")
    with pytest.raises(XaikitValueError, match="perturbed"):
        _from_perturbed("max", model, x, "vanilla", x)
    with pytest.raises(XaikitValueError, match="target"):
        f(model, x, "vanilla", target=7)


@needs_torch
def test_quantus_reference_scores() -> None:
    """Quantus 0.6 on the same LeNet, inputs and perturbed inputs (its own np.random draws,
    recorded by benchmarks/quantus_robustness.py) and maps: equal to 1e-5."""
    data = np.load(DATA)
    model = seeded_lenet(1)
    checksum = sum(float(p.detach().double().abs().sum()) for p in model.parameters())
    assert checksum == pytest.approx(float(data["checksum"]), rel=1e-9)
    x, y = data["x"], data["y"]
    cases = {
        "max_vanilla": ("max", "vanilla", False),
        "avg_ixg": ("avg", "input_x_gradient", False),
        "lipschitz_ixg": ("lipschitz", "input_x_gradient", False),
        "lipschitz_vanilla_normalised": ("lipschitz", "vanilla", True),
    }
    for name, (kind, method, normalize) in cases.items():
        ours = _from_perturbed(
            kind, model, x, method, data[f"perturbed_{name}"], target=y, normalize=normalize
        )
        np.testing.assert_allclose(ours, data[f"quantus_{name}"], rtol=1e-5, err_msg=name)
    for absolute in (False, True):
        ours = xk.evaluate.relevance_rank_accuracy(data["rank_maps"], data["rank_masks"], absolute=absolute)
        np.testing.assert_allclose(ours, data[f"quantus_rank_abs{int(absolute)}"], atol=1e-12)


def test_relevance_rank_accuracy_by_hand() -> None:
    sal = np.array([[[2.0, 1.0], [1.0, 0.0]]])
    gt = np.array([[[True, False], [True, False]]])
    # K = 2: the 2 is inside; one of the two tied 1s fills the last place: inside half the time
    assert xk.evaluate.relevance_rank_accuracy(sal, gt).tolist() == [0.75]
    orders = []
    for first in ((0, 1), (1, 0)):
        orders.append((int(gt[0][0, 0]) + int(gt[0][first])) / 2)
    assert np.mean(orders) == 0.75
    gt6 = np.zeros((2, 6, 6), dtype=bool)
    gt6[:, 1:4, 2:5] = True  # K = 9 of 36
    assert xk.evaluate.relevance_rank_accuracy(np.ones((2, 6, 6)), gt6).tolist() == [0.25, 0.25]
    exact = np.where(gt6, 2.0, 0.0) + np.arange(36).reshape(6, 6) * 1e-3
    assert xk.evaluate.relevance_rank_accuracy(exact, gt6).tolist() == [1.0, 1.0]
    assert xk.evaluate.relevance_rank_accuracy(-exact, gt6).tolist() == [1.0, 1.0]  # magnitude
    assert xk.evaluate.relevance_rank_accuracy(-exact, gt6, absolute=False).tolist() == [0.0, 0.0]
    empty = gt6.copy()
    empty[1] = False
    out = xk.evaluate.relevance_rank_accuracy(exact, empty)
    assert out[0] == 1.0 and np.isnan(out[1])
    # channels: last or first, summed by magnitude; masks (B, H, W, 1) too
    rng = np.random.default_rng(2)
    raw = rng.normal(size=(2, 6, 6, 3))
    ref = xk.evaluate.relevance_rank_accuracy(np.abs(raw).sum(axis=-1), gt6)
    for sal3 in (raw, raw.transpose(0, 3, 1, 2)):
        np.testing.assert_allclose(xk.evaluate.relevance_rank_accuracy(sal3, gt6[..., None]), ref)
    loc = xk.evaluate.localization(raw, gt6)
    np.testing.assert_array_equal(loc["rank_accuracy"], ref)
    with pytest.raises(XaikitValueError, match="batch size"):
        xk.evaluate.relevance_rank_accuracy(np.ones((3, 6, 6)), gt6)
    with pytest.raises(XaikitValueError, match="method name"):
        xk.evaluate.relevance_rank_accuracy(raw, gt6, model=object())


def test_relevance_rank_accuracy_of_a_method(framework: str, rng: np.random.Generator, tmp_path) -> None:
    """Class 0 of the linear model looks only at the square: its gradient ranks the square first."""
    _, x, model = _setup(framework, rng)
    out = xk.evaluate.relevance_rank_accuracy(
        "vanilla", square_mask(3), model=model, x=layout(framework, x), target=0
    )
    np.testing.assert_array_equal(out, [1.0, 1.0, 1.0])
    loc = xk.evaluate.localization("vanilla", square_mask(3), model=model, x=layout(framework, x), target=0)
    path = xk.evaluate.save_evaluation(loc, tmp_path, "loc")
    doc = json.loads(Path(path).read_text())
    table = next(t for t in doc["tables"] if t["title"] == "per sample")
    assert table["columns"] == ["sample", "energy", "pointing", "rank_accuracy"]
    assert [r[3] for r in table["rows"]] == [1.0, 1.0, 1.0]
