"""Sparseness (Gini) and complexity (entropy): closed forms, channel handling, bad inputs, and
agreement with Quantus 0.6 on saved maps (tests/data/quantus_complexity.npz, written by
benchmarks/quantus_complexity.py in an environment with Quantus)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import xaikit as xk
from tests.evaluate_models import seeded_lenet
from xaikit.errors import XaikitValueError

DATA = Path(__file__).resolve().parent / "data" / "quantus_complexity.npz"


def test_closed_forms():
    n = 16
    maps = np.zeros((4, 4, 4))
    maps[0] = 2.0  # uniform
    maps[1, 1, 2] = -3.0  # one pixel, negative sign
    maps[2, :2] = 1.0  # half the pixels
    maps[3] = np.arange(n).reshape(4, 4)  # a ramp 0..15
    sp = xk.evaluate.sparseness(maps).scores
    cx = xk.evaluate.complexity(maps).scores
    # ramp: sorted a_i = i - 1, sum (2i - n - 1)(i - 1) / (n * sum a) with sum a = n(n-1)/2
    i = np.arange(1, n + 1)
    ramp_gini = ((2 * i - n - 1) * (i - 1)).sum() / (n * n * (n - 1) / 2)
    np.testing.assert_allclose(sp, [0.0, 1 - 1 / n, 0.5, ramp_gini], atol=1e-12)
    p = np.arange(n) / (n * (n - 1) / 2)
    ramp_entropy = -(p[1:] * np.log(p[1:])).sum()
    np.testing.assert_allclose(cx, [np.log(n), 0.0, np.log(n / 2), ramp_entropy], atol=1e-12)


def test_scale_invariant_and_zero_maps():
    rng = np.random.default_rng(0)
    maps = rng.normal(size=(3, 5, 5))
    for fn in (xk.evaluate.sparseness, xk.evaluate.complexity):
        np.testing.assert_allclose(fn(maps).scores, fn(7.5 * maps).scores, rtol=1e-12)
        np.testing.assert_allclose(fn(maps).scores, fn(-maps).scores, rtol=1e-12)
    zero = np.zeros((2, 3, 3))
    assert xk.evaluate.sparseness(zero).scores.tolist() == [0.0, 0.0]
    res = xk.evaluate.complexity(np.concatenate([zero[:1], maps[:1, :3, :3]]))
    assert np.isnan(res.scores[0]) and np.isfinite(res.scores[1])
    assert res.mean == pytest.approx(res.scores[1])


@pytest.mark.parametrize("layout", ["first", "last"])
def test_channels_sum_by_magnitude_or_flatten(layout):
    rng = np.random.default_rng(1)
    maps = rng.normal(size=(2, 3, 6, 6))
    summed = np.abs(maps).sum(axis=1)
    given = maps if layout == "first" else maps.transpose(0, 2, 3, 1)
    for fn in (xk.evaluate.sparseness, xk.evaluate.complexity):
        np.testing.assert_allclose(fn(given).scores, fn(summed).scores, rtol=1e-12)
        np.testing.assert_allclose(
            fn(given, channels="flatten").scores, fn(np.abs(maps).reshape(2, -1, 1)).scores, rtol=1e-12
        )


def test_method_name_computes_maps():
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(48, 3))
    x = torch.rand(2, 3, 4, 4)
    before = [p.detach().clone() for p in model.parameters()]
    res = xk.evaluate.sparseness("vanilla", model=model, x=x, target=1)
    maps = xk.xai.explain(model, x, target=1, method="vanilla")
    # x is (B, C, H, W) with C = 3 and H = W = 4: the channels are summed on axis 1, as x has them
    np.testing.assert_allclose(
        res.scores, xk.evaluate.sparseness(np.abs(maps.astype(np.float64)).sum(1)).scores, rtol=1e-12
    )
    assert res.targets.tolist() == [1, 1]
    pred = model(x).argmax(1).numpy()
    assert xk.evaluate.complexity("vanilla", model=model, x=x).targets.tolist() == pred.tolist()
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_channel_axis_of_small_maps():
    """4-D maps whose two end axes are both short (at most 4): a size-1 axis is the channel axis
    ((B, 1, 4, 4) is 4 x 4 pixels, which was read as 1 x 4 pixels of 4 channels); a torch
    tensor has its channels first; a numpy (B, 3, 4, 4) cannot be told and is refused."""
    import torch

    maps = np.random.default_rng(0).standard_normal((2, 4, 4))
    want = xk.evaluate.sparseness(maps).scores
    for same in (maps[:, None], maps[..., None], torch.tensor(maps)[:, None]):
        np.testing.assert_allclose(xk.evaluate.sparseness(same).scores, want, rtol=1e-12)
        np.testing.assert_allclose(
            xk.evaluate.complexity(same).scores, xk.evaluate.complexity(maps).scores, rtol=1e-12
        )
    rgb = np.stack([maps, 2 * maps, -maps], axis=1)  # (2, 3, 4, 4): |channels| sum to 4 |maps|
    np.testing.assert_allclose(xk.evaluate.sparseness(torch.tensor(rgb)).scores, want, rtol=1e-12)
    with pytest.raises(XaikitValueError, match=r"short axis at both ends.*channel axis is not known"):
        xk.evaluate.sparseness(rgb)
    np.testing.assert_allclose(xk.evaluate.sparseness(np.abs(rgb).sum(1)).scores, want, rtol=1e-12)


def test_bad_inputs():
    with pytest.raises(XaikitValueError, match="channels"):
        xk.evaluate.sparseness(np.ones((1, 3, 3)), channels="mean")
    with pytest.raises(XaikitValueError, match="model= and x="):
        xk.evaluate.complexity("vanilla")
    with pytest.raises(XaikitValueError, match="only when saliency is a method name"):
        xk.evaluate.complexity(np.ones((1, 3, 3)), x=np.ones((1, 3, 3)))
    with pytest.raises(XaikitValueError, match="NaN"):
        xk.evaluate.sparseness(np.full((1, 3, 3), np.nan))
    with pytest.raises(XaikitValueError, match="batch of maps"):
        xk.evaluate.sparseness(np.ones(4))


def test_agrees_with_quantus_on_saved_maps():
    """Quantus's scores of the saved maps (its defaults: normalise by the batch max, abs), and
    the maps themselves recomputed on the same seeded LeNet."""
    pytest.importorskip("torch")
    data = np.load(DATA)
    model = seeded_lenet(3)
    checksum = sum(p.detach().double().sum().item() for p in model.parameters())
    assert checksum == pytest.approx(float(data["checksum"]), rel=1e-9)
    maps = np.asarray(xk.xai.explain(model, data["x"], target=data["y"], method="vanilla"))
    np.testing.assert_allclose(maps, data["maps"], atol=1e-6)
    for channels in ("flatten", "sum"):
        ours_s = xk.evaluate.sparseness(data["maps"], channels=channels).scores
        ours_c = xk.evaluate.complexity(data["maps"], channels=channels).scores
        np.testing.assert_allclose(ours_s, data[f"sparseness_{channels}"], atol=1e-5, rtol=0)
        np.testing.assert_allclose(ours_c, data[f"complexity_{channels}"], atol=1e-5, rtol=0)
