"""Localization (energy, pointing game) and completeness, against hand-computed answers."""

from __future__ import annotations

import numpy as np
import pytest

import xaikit as xk
from tests.evaluate_models import SIZE, layout, linear, square_mask, square_weights
from xaikit.errors import XaikitTypeError, XaikitValueError


def test_a_model_looking_at_one_region_localizes_perfectly(framework: str, rng: np.random.Generator) -> None:
    w = square_weights(rng)
    x = layout(framework, rng.uniform(size=(4, SIZE, SIZE, 3)).astype(np.float32))
    model = linear(framework, w)
    for method, opts in [("vanilla", {}), ("integrated", {"nsamples": 8, "baseline": "zeros"})]:
        sal = xk.xai.explain(model, x, target=0, method=method, **opts)
        loc = xk.evaluate.localization(sal, square_mask(4))
        np.testing.assert_allclose(loc["energy"], 1.0)
        assert loc["pointing"].tolist() == [True] * 4
        assert loc["energy"].dtype == np.float64 and loc["pointing"].dtype == np.bool_
    # the classes that look everywhere put most of their mass outside the 12-pixel square
    loc = xk.evaluate.localization(xk.xai.explain(model, x, target=1, method="vanilla"), square_mask(4))
    assert np.all(loc["energy"] < 0.5)


def test_energy_and_pointing_by_hand() -> None:
    sal = np.zeros((3, 4, 4))
    sal[0, 0, 0], sal[0, 3, 3] = 3.0, 1.0  # 3/4 inside, max inside
    sal[1, 3, 3], sal[1, 0, 1] = 5.0, 1.0  # 1/6 inside, max outside
    sal[2] = -1.0
    sal[2, 0, 0] = 2.0  # absolute: mass 2 + 15 (|-1| each), 2 inside... plus (0,1),(1,0),(1,1)
    gt = np.zeros((3, 4, 4), dtype=bool)
    gt[:, :2, :2] = True
    loc = xk.evaluate.localization(sal, gt)
    np.testing.assert_allclose(loc["energy"], [0.75, 1 / 6, (2 + 3) / 17])
    assert loc["pointing"].tolist() == [True, False, True]
    signed = xk.evaluate.localization(sal, gt, absolute=False)  # only the positive part is mass
    np.testing.assert_allclose(signed["energy"], [0.75, 1 / 6, 1.0])
    # an empty mask has nothing to find: NaN energy (it read 0.0, a miss, while relevance mass
    # accuracy, the same share, read NaN), no hit, NaN rank accuracy
    gt[1] = False
    loc = xk.evaluate.localization(sal, gt)
    np.testing.assert_allclose(loc["energy"], [0.75, np.nan, (2 + 3) / 17])
    assert loc["pointing"].tolist() == [True, False, True] and np.isnan(loc["rank_accuracy"][1])
    np.testing.assert_allclose(xk.evaluate.relevance_mass_accuracy(sal, gt), loc["energy"])


def test_pointing_tolerance_ties_and_degenerate_maps() -> None:
    gt = np.zeros((1, 6, 6), dtype=bool)
    gt[0, :2, :2] = True
    sal = np.zeros((1, 6, 6))
    sal[0, 2, 2] = 1.0  # diagonal neighbour of the mask: distance sqrt(2)
    assert not xk.evaluate.localization(sal, gt)["pointing"][0]
    assert not xk.evaluate.localization(sal, gt, tolerance=1)["pointing"][0]
    assert xk.evaluate.localization(sal, gt, tolerance=1.5)["pointing"][0]
    # ties: a hit needs at least half of the maximal positions inside
    tie = np.zeros((2, 6, 6))
    tie[:, 0, 0] = tie[:, 5, 5] = 1.0
    tie[1, 5, 4] = 1.0
    assert xk.evaluate.localization(tie, np.repeat(gt, 2, axis=0))["pointing"].tolist() == [True, False]
    # no positive mass: energy NaN, and a constant map points nowhere
    flat = xk.evaluate.localization(np.zeros((1, 6, 6)), gt)
    assert np.isnan(flat["energy"][0]) and not flat["pointing"][0]
    assert not xk.evaluate.localization(np.ones((1, 6, 6)), gt)["pointing"][0]


@pytest.mark.parametrize("tolerance", [15 * 32 / 224, 15 * 64 / 224, 3.0, 7.5])
def test_pointing_tolerance_is_the_euclidean_distance_to_the_mask(tolerance: float) -> None:
    """The pointing game's protocol (Zhang et al.): a hit when the maximum lies within
    ``tolerance`` pixels of the mask, fractional tolerances (15 px at 224 scaled) included;
    against the brute-force distance from the maximum to every mask pixel."""
    rng = np.random.default_rng(7)
    size = 24
    gt = np.zeros((200, size, size), dtype=bool)
    for i, (r0, c0, h, w) in enumerate(rng.integers(0, size - 3, size=(200, 4))):
        gt[i, r0 : r0 + h % 6 + 1, c0 : c0 + w % 6 + 1] = True  # small boxes, some at the border
    sal = rng.random((200, size, size))
    peak = np.stack(np.unravel_index(sal.reshape(200, -1).argmax(axis=1), (size, size)), axis=1)
    expected = [np.sqrt(((np.argwhere(m) - p) ** 2).sum(axis=1)).min() <= tolerance for m, p in zip(gt, peak)]
    got = xk.evaluate.localization(sal, gt, tolerance=tolerance)["pointing"]
    assert got.tolist() == expected
    assert 0 < np.mean(expected) < 1  # both hits and misses


def test_layouts_of_maps_and_masks() -> None:
    rng = np.random.default_rng(1)
    raw = rng.normal(size=(2, 5, 5, 3))
    gt = rng.random((2, 5, 5)) > 0.6
    ref = xk.evaluate.localization(np.abs(raw).sum(axis=-1), gt)
    for sal in (raw, raw.transpose(0, 3, 1, 2)):
        for mask in (gt, gt[..., None], gt[:, None], gt.astype(np.uint8), gt.astype(np.float32)):
            out = xk.evaluate.localization(sal, mask)
            np.testing.assert_allclose(out["energy"], ref["energy"])
            np.testing.assert_array_equal(out["pointing"], ref["pointing"])


def test_localization_bad_inputs() -> None:
    sal, gt = np.ones((2, 4, 4)), np.ones((2, 4, 4), dtype=bool)
    with pytest.raises(
        XaikitValueError,
        match=r"saliency and mask must cover the same pixels; the mask's shape is \(2, 4, 4\): saliency must "
        r"have shape \(2, 4, 4\).*got ndarray of shape \(2, 5, 5\)",
    ):
        xk.evaluate.localization(np.ones((2, 5, 5)), gt)
    with pytest.raises(
        XaikitValueError,
        match=r"mask must hold one mask per sample \(2\); got one mask of shape \(4, 4\) .*np.broadcast_to\(mask, "
        r"\(2, 4, 4\)\)",
    ):
        xk.evaluate.localization(sal, gt[0])
    with pytest.raises(
        XaikitValueError, match=r"saliency and mask must have the same batch size; mask has 3 masks"
    ):
        xk.evaluate.localization(sal, np.ones((3, 4, 4), dtype=bool))
    with pytest.raises(
        XaikitValueError, match=r"mask must hold booleans or 0/1 values; got values \[0.0, 0.5, 1.0\]"
    ):
        xk.evaluate.localization(sal, np.array([[[0, 0.5], [1, 1]]] * 2).repeat(2, 1).repeat(2, 2))
    with pytest.raises(XaikitValueError, match=r"mask must be a batch of masks \(B, H, W\)"):
        xk.evaluate.localization(sal, np.ones(4, dtype=bool))
    with pytest.raises(XaikitValueError, match=r"tolerance \(in pixels\) must be a number >= 0; got int -1"):
        xk.evaluate.localization(sal, gt, tolerance=-1)
    with pytest.raises(XaikitTypeError, match=r"tolerance \(in pixels\) must be a number >= 0; got str"):
        xk.evaluate.localization(sal, gt, tolerance="2")
    with pytest.raises(XaikitTypeError, match=r"mask must be an array or tensor; got NoneType None"):
        xk.evaluate.localization(sal, None)


def test_completeness_report(framework: str, rng: np.random.Generator) -> None:
    w = square_weights(rng)
    x = layout(framework, rng.uniform(size=(3, SIZE, SIZE, 3)).astype(np.float32))
    model = linear(framework, w)
    r = xk.evaluate.completeness(model, x, target=2, method_options={"nsamples": 4, "baseline": "zeros"})
    f = np.einsum(
        "hwk,bhwk->b",
        w[2].astype(np.float64),
        layout("tf", x) if framework == "tf" else x.transpose(0, 2, 3, 1),
    )
    np.testing.assert_allclose(r.gap, f, rtol=1e-4, atol=1e-4)  # f(x) - f(0)
    np.testing.assert_allclose(r.total, f, rtol=1e-4, atol=1e-4)
    assert r.summary["max_abs"] < 1e-4 and r.summary["max_relative"] < 1e-4
    assert set(r.summary) == {"mean_abs", "max_abs", "mean_relative", "max_relative"}
    s = xk.evaluate.completeness(
        model,
        x,
        method="smint",
        target=2,
        method_options={"nsamples": 3, "nintegration": 4, "baseline": "zeros"},
    )
    assert s.summary["max_abs"] < 1e-3  # linear: exact on every noisy copy
    refs = layout(framework, rng.uniform(size=(5, SIZE, SIZE, 3)).astype(np.float32))
    e = xk.evaluate.completeness(
        model, x, method="expected_gradients", target=2, method_options={"baseline": refs, "nsamples": 4}
    )
    assert e.summary["max_relative"] < 1e-4  # linear: every draw adds up
    b = xk.evaluate.completeness(
        model,
        x,
        method="blur_ig",
        target=2,
        method_options={"steps": 200, "max_sigma": 2.0, "grad_step": 1e-3},
    )
    assert b.summary["max_relative"] < 2e-2  # Riemann sum and finite difference of the blur path
    for method, options in (("deeplift", {}), ("deepliftshap", {"baselines": refs})):
        d = xk.evaluate.completeness(model, x, method, target=2, method_options=options)
        np.testing.assert_allclose(d.total, d.gap, rtol=1e-5, atol=1e-5)  # complete by construction
        assert d.summary["max_relative"] < 1e-5
    with pytest.raises(
        XaikitValueError,
        match=r"completeness applies to the methods with a completeness delta 'integrated', 'smint', .*"
        r"'deeplift', 'deepliftshap'; got method 'vanilla'",
    ):
        xk.evaluate.completeness(model, x, method="vanilla")
    with pytest.raises(XaikitValueError, match=r"completeness of 'smint' needs magnitude=False"):
        xk.evaluate.completeness(model, x, method="smint", method_options={"magnitude": True})


def test_completeness_of_a_nonlinear_model_shrinks_with_steps(
    framework: str, rng: np.random.Generator
) -> None:
    from tests.xai.models import images, model_for

    model, to_layout = model_for(framework, softmax=True)
    x = to_layout(images(rng, 3))
    coarse = xk.evaluate.completeness(model, x, method_options={"nsamples": 2, "baseline": "black"})
    fine = xk.evaluate.completeness(model, x, method_options={"nsamples": 64, "baseline": "black"})
    assert fine.summary["mean_abs"] < coarse.summary["mean_abs"]
    np.testing.assert_allclose(fine.gap, coarse.gap, rtol=1e-5, atol=1e-6)  # same endpoints


@pytest.mark.parametrize("metric", ["localization", "relevance_rank_accuracy"])
def test_absolute_must_be_a_bool(metric: str) -> None:
    # a truthy string was read as True by these two (localization_more's metrics refused it)
    sal, gt = np.ones((1, SIZE, SIZE)), square_mask(1)
    with pytest.raises(XaikitTypeError, match=r"absolute must be True or False; got str 'no'"):
        getattr(xk.evaluate, metric)(sal, gt, absolute="no")
    getattr(xk.evaluate, metric)(sal, gt, absolute=np.bool_(False))
