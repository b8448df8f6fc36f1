"""Region perturbation (AOPC), IROF and selectivity against closed forms and Quantus 0.6."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import xaikit as xk
from tests.evaluate_models import CHANNELS, SIZE, layout, linear, logit_rounding, seeded_lenet, weights_of
from xaikit.errors import XaikitTypeError, XaikitValueError
from xaikit.evaluate.curves import patch_grid

DATA = Path(__file__).parent / "data" / "quantus_curves.npz"


def _positive_linear(framework: str, rng: np.random.Generator, batch: int = 3):
    """A bias-free linear model whose class 0 has positive weights everywhere (so f_0(x) > 0 on
    positive images and removing any region to zeros lowers it by exactly its contribution)."""
    w = rng.normal(size=(3, SIZE, SIZE, CHANNELS))
    w[0] = rng.uniform(0.2, 2.0, size=w[0].shape)
    w = w.astype(np.float32)
    x = rng.uniform(0.1, 1.0, size=(batch, SIZE, SIZE, CHANNELS)).astype(np.float32)
    return w, x, linear(framework, w)


def _contrib(w: np.ndarray, x: np.ndarray) -> np.ndarray:
    """(B, H, W) per-pixel contributions of channel-last x to class 0."""
    return (w[0][None].astype(np.float64) * x.astype(np.float64)).sum(axis=-1)


def _expected_curve(
    contrib: np.ndarray, regions: np.ndarray, order_key: np.ndarray, steps: int
) -> np.ndarray:
    """f_0(x_k) for k = 0 ... steps when regions are removed to zeros in descending ``order_key``
    (one value per region): f(x) minus the cumulative sum of the removed regions' contributions."""
    out = []
    for c, key in zip(contrib, order_key):
        per_region = np.bincount(regions.ravel(), weights=c.ravel())
        removed = per_region[np.argsort(-key, kind="stable")][:steps]
        out.append(c.sum() - np.concatenate([[0.0], np.cumsum(removed)]))
    return np.stack(out)


# ---- the patch grid -----------------------------------------------------------------------------------
def test_patch_grid_is_quantus_centred_padding() -> None:
    """Quantus pads a side of n pixels by t = -n % p, floor(t / 2) before and ceil(t / 2) after."""
    for side, p in ((32, 8), (32, 5), (7, 3), (4, 5), (9, 2)):
        grid = patch_grid((side, side), p)
        t = -side % p
        rows = (np.arange(side) + t // 2) // p
        per = -(-side // p)
        np.testing.assert_array_equal(grid, rows[:, None] * per + rows[None, :])
        assert set(np.unique(grid).tolist()) == set(range(per * per))  # every patch holds a pixel


# ---- known answers ------------------------------------------------------------------------------------
@pytest.mark.parametrize("order", ["morf", "lerf"])
def test_region_perturbation_aopc_of_a_linear_model(
    framework: str, rng: np.random.Generator, order: str
) -> None:
    w, x, model = _positive_linear(framework, rng)
    contrib = _contrib(w, x)
    grid = patch_grid((SIZE, SIZE), 2)  # 16 patches
    res = xk.evaluate.region_perturbation(
        model, layout(framework, x), contrib, target=0, patch_size=2, steps=10, order=order, baseline="zeros"
    )
    per_region = np.stack([np.bincount(grid.ravel(), weights=c.ravel()) for c in contrib])
    key = per_region if order == "morf" else -per_region
    expect = _expected_curve(contrib, grid, key, 10)
    np.testing.assert_allclose(res.curve, expect, rtol=1e-5, atol=1e-5)
    assert res.curve.shape == (3, 11) and res.steps.tolist() == [10] * 3
    # the paper's AOPC: 1/(L+1) sum_{k=0..L} f(x) - f(x_k), the k = 0 term included
    aopc = (expect[:, :1] - expect).sum(axis=1) / 11
    np.testing.assert_allclose(res.scores, aopc, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(res.drops, expect[:, :1] - expect, rtol=1e-5, atol=1e-5)
    assert res.order[:, :10].tolist() == np.argsort(-key, axis=1)[:, :10].tolist()
    assert np.all(res.scores > 0)  # every contribution is positive
    if order == "lerf":  # the exact order loses the score faster: a larger AOPC
        morf = xk.evaluate.region_perturbation(
            model, layout(framework, x), contrib, target=0, patch_size=2, steps=10, baseline="zeros"
        )
        assert np.all(morf.scores > res.scores)
    assert res.targets.tolist() == [0, 0, 0] and res.mean == pytest.approx(float(res.scores.mean()))


def test_region_perturbation_steps_cap_and_padding(framework: str, rng: np.random.Generator) -> None:
    w, x, model = _positive_linear(framework, rng, batch=2)
    contrib = _contrib(w, x)
    res = xk.evaluate.region_perturbation(
        model, layout(framework, x), contrib, target=0, patch_size=3, baseline="zeros"
    )  # 8 = 1 + 3 + 3 + 1 on each side: 3 x 3 = 9 patches, the default 100 steps capped at 9
    grid = patch_grid((SIZE, SIZE), 3)
    assert res.curve.shape == (2, 10) and res.steps.tolist() == [9, 9]
    np.testing.assert_array_equal(res.regions[0], grid)
    per_region = np.stack([np.bincount(grid.ravel(), weights=c.ravel()) for c in contrib])
    expect = _expected_curve(contrib, grid, per_region, 9)
    np.testing.assert_allclose(res.curve, expect, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(res.curve[:, -1], 0.0, atol=1e-5)  # everything removed to zeros


def test_selectivity_auc_of_a_linear_model(framework: str, rng: np.random.Generator) -> None:
    w, x, model = _positive_linear(framework, rng)
    contrib = _contrib(w, x)
    res = xk.evaluate.selectivity(
        model, layout(framework, x), contrib, target=0, patch_size=4, baseline="zeros"
    )
    grid = patch_grid((SIZE, SIZE), 4)  # 4 patches
    per_region = np.stack([np.bincount(grid.ravel(), weights=c.ravel()) for c in contrib])
    expect = _expected_curve(contrib, grid, per_region, 4)
    np.testing.assert_allclose(res.curve, expect, rtol=1e-5, atol=1e-5)
    # trapezoid over the fraction of patches removed, 0, 1/4, ..., 1
    auc = (expect[:, 0] / 2 + expect[:, 1:4].sum(axis=1) + expect[:, 4] / 2) / 4
    np.testing.assert_allclose(res.scores, auc, rtol=1e-5, atol=1e-5)
    # Quantus's area: the N points after each removal, unit spacing = N * ours - (f(x) + f(x_1)) / 2
    quantus_area = np.trapezoid(res.curve[:, 1:], axis=1)
    np.testing.assert_allclose(
        quantus_area, 4 * res.scores - (res.curve[:, 0] + res.curve[:, 1]) / 2, rtol=1e-9
    )
    # the exact map beats its reverse (lower area)
    worse = xk.evaluate.selectivity(model, layout(framework, x), -contrib, target=0, patch_size=4,
                                    baseline="zeros", rank="signed")  # fmt: skip
    assert np.all(res.scores < worse.scores)


def test_irof_of_a_linear_model_orders_by_the_mean(framework: str, rng: np.random.Generator) -> None:
    w, x, model = _positive_linear(framework, rng, batch=2)
    contrib = _contrib(w, x)
    # three regions of unequal size: rows 0-3 left (16 px), rows 0-3 right (16 px), rows 4-7 (32 px)
    ids = np.zeros((SIZE, SIZE), dtype=int)
    ids[:4, 4:] = 1
    ids[4:] = 2
    smap = np.zeros((2, SIZE, SIZE))
    smap[:, 4:] = 1.0  # region 2: largest sum (32) but mean 1
    smap[:, :4, :4] = 1.5  # region 0: sum 24, mean 1.5 -> first by the mean
    smap[:, :4, 4:] = 1.2  # region 1: sum 19.2, mean 1.2 -> second
    res = xk.evaluate.irof(model, layout(framework, x), smap, target=0, features=ids, baseline="zeros")
    assert res.order.tolist() == [[0, 1, 2]] * 2 and res.steps.tolist() == [3, 3]
    expect = _expected_curve(contrib, ids, np.array([[3.0, 2.0, 1.0]] * 2), 3)
    np.testing.assert_allclose(res.curve, expect, rtol=1e-5, atol=1e-5)
    rel = expect / expect[:, :1]
    np.testing.assert_allclose(res.relative, rel, rtol=1e-5, atol=1e-6)
    aoc = 1 - (rel[:, 0] / 2 + rel[:, 1] + rel[:, 2] + rel[:, 3] / 2) / 3
    np.testing.assert_allclose(res.scores, aoc, rtol=1e-5, atol=1e-6)
    assert np.all((res.scores > 0) & (res.scores < 1))


def test_irof_per_image_superpixel_counts_and_zero_scores(rng: np.random.Generator) -> None:
    torch = pytest.importorskip("torch")
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(SIZE * SIZE, 2, bias=False))
    with torch.no_grad():
        model[1].weight.fill_(1.0)
        model[1].weight[1] = 0.0  # class 1 always scores 0
    x = rng.uniform(0.1, 1.0, size=(2, 1, SIZE, SIZE)).astype(np.float32)
    ids = np.zeros((2, SIZE, SIZE), dtype=int)
    ids[0, :, 4:] = 1  # sample 0: 2 regions
    ids[1, :4] = 5  # sample 1: 3 regions (relabelled 0, 1, 2)
    ids[1, 4:, 4:] = 9
    smap = rng.random((2, SIZE, SIZE))
    res = xk.evaluate.irof(model, x, smap, target=0, features=ids, baseline="zeros")
    assert res.steps.tolist() == [2, 3] and res.curve.shape == (2, 4)
    assert np.isnan(res.curve[0, 3]) and not np.isnan(res.curve[1]).any()
    assert res.order[0, 2] == -1
    for b, s in enumerate((2, 3)):
        rel = res.curve[b, : s + 1] / res.curve[b, 0]
        assert res.scores[b] == pytest.approx(1 - np.trapezoid(rel, dx=1 / s), rel=1e-9)
    zero = xk.evaluate.irof(model, x, smap, target=1, features=ids, baseline="zeros")
    assert np.isnan(zero.scores).all() and np.isnan(zero.mean)


def test_uniform_fill_is_drawn_per_element_in_the_sample_range(
    framework: str, rng: np.random.Generator
) -> None:
    """The paper's fill: every removed element its own uniform draw in [min, max] of its sample
    (Quantus's ``"uniform"`` gives a whole patch one U(0, 1) value). A model whose class c reads
    input element c shows the value element c took."""
    picks = [(0, 0, 0), (0, 1, 2), (1, 0, 1), (1, 1, 0)]  # (row, col, channel) inside patch 0
    w = np.zeros((4, SIZE, SIZE, CHANNELS), dtype=np.float32)
    for c, (i, j, k) in enumerate(picks):
        w[c, i, j, k] = 1.0
    model = linear(framework, w)
    x = rng.uniform(0.2, 0.7, size=(4, SIZE, SIZE, CHANNELS)).astype(np.float32)
    smap = np.zeros((4, SIZE, SIZE))
    smap[:, :2, :2] = 1.0  # patch 0 goes first
    res = xk.evaluate.region_perturbation(
        model, layout(framework, x), smap, target=[0, 1, 2, 3], patch_size=2, steps=1, seed=11
    )
    draws = np.random.default_rng((11, 1))
    expect = []
    for b, (i, j, k) in enumerate(picks):
        lo, hi = float(x[b].min()), float(x[b].max())
        values = draws.uniform(lo, hi, size=(CHANNELS, SIZE, SIZE))  # channel-first, sample after sample
        expect.append(values[k, i, j])
        assert lo <= res.curve[b, 1] <= hi
    np.testing.assert_allclose(res.curve[:, 1], expect, rtol=1e-6)
    np.testing.assert_allclose(res.curve[:, 0], [x[b][p] for b, p in enumerate(picks)], rtol=1e-6)
    assert len(np.unique(np.round(res.curve[:, 1], 6))) == 4  # not one value per patch
    again = xk.evaluate.region_perturbation(
        model, layout(framework, x), smap, target=[0, 1, 2, 3], patch_size=2, steps=1, seed=11
    )
    np.testing.assert_array_equal(again.curve, res.curve)
    other = xk.evaluate.region_perturbation(
        model, layout(framework, x), smap, target=[0, 1, 2, 3], patch_size=2, steps=1, seed=12
    )
    assert not np.allclose(other.curve[:, 1], res.curve[:, 1])


# ---- shared behaviour ---------------------------------------------------------------------------------
def _all(model, xs, smap, **kw):
    return (
        xk.evaluate.region_perturbation(model, xs, smap, patch_size=2, steps=6, seed=5, **kw),
        xk.evaluate.irof(model, xs, smap, features="patches", segments=9, seed=5, **kw),
        xk.evaluate.selectivity(model, xs, smap, patch_size=4, seed=5, **kw),
    )


def _same(a, b, atol: float | None = None) -> None:
    for u, v in zip(a, b):
        if atol is None:
            np.testing.assert_array_equal(u.curve, v.curve)
            np.testing.assert_array_equal(u.scores, v.scores)
        else:
            np.testing.assert_allclose(u.curve, v.curve, rtol=1e-5, atol=atol)
        np.testing.assert_array_equal(u.order, v.order)


def test_chunked_equals_unchunked_seeded_and_model_untouched(
    framework: str, rng: np.random.Generator
) -> None:
    w, x, model = _positive_linear(framework, rng)
    xs = layout(framework, x)
    smap = rng.normal(size=(3, SIZE, SIZE))
    before = weights_of(framework, model)
    ref = _all(model, xs, smap, max_batch=1000)
    assert [r.chunks for r in ref] == [[21], [30], [15]]  # (steps + 1) x B rows in one pass
    atol = logit_rounding(w, x, spread=1.0)
    for chunk in (1, 4):
        res = _all(model, xs, smap, max_batch=chunk)
        _same(ref, res, atol=atol)
        assert all(sum(r.chunks) == n and len(r.chunks) == -(-n // chunk) for r, n in zip(res, (21, 30, 15)))
    _same(ref, _all(model, xs, smap, max_batch=1000))  # same seed, same everything
    for a, b in zip(before, weights_of(framework, model)):
        np.testing.assert_array_equal(a, b)
    # a sample's result does not depend on the batch it is in (fixed fills)
    alone = xk.evaluate.irof(model, xs[1:2], smap[1:2], features="patches", segments=9, max_batch=1000)
    np.testing.assert_allclose(alone.curve[0], ref[1].curve[1], rtol=1e-5, atol=atol)
    assert alone.scores[0] == pytest.approx(ref[1].scores[1], abs=1e-5)


def test_torch_equals_keras_on_the_same_weights(rng: np.random.Generator) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("tensorflow")
    w, x, _ = _positive_linear("torch", rng)
    smap = rng.normal(size=(3, SIZE, SIZE))
    out = {}
    for fw in ("torch", "tf"):
        model = linear(fw, w)
        xs = layout(fw, x)
        out[fw] = _all(model, xs, smap) + (xk.evaluate.irof(model, xs, smap, segments=6, seed=5),)  # SLIC
    _same(out["torch"], out["tf"], atol=logit_rounding(w, x, spread=1.0))
    np.testing.assert_array_equal(out["torch"][3].regions, out["tf"][3].regions)


def test_maps_by_method_name(framework: str, rng: np.random.Generator) -> None:
    _w, x, model = _positive_linear(framework, rng, batch=2)
    xs = layout(framework, x)
    grads = xk.xai.explain(model, xs, method="vanilla")
    _same(_all(model, xs, "vanilla"), _all(model, xs, grads))


def test_bad_inputs(framework: str, rng: np.random.Generator) -> None:
    _w, x, model = _positive_linear(framework, rng, batch=2)
    xs = layout(framework, x)
    smap = rng.random((2, SIZE, SIZE))
    rp, io, sel = xk.evaluate.region_perturbation, xk.evaluate.irof, xk.evaluate.selectivity
    cases = [
        (lambda: rp(model, xs, smap, patch_size=0), XaikitValueError, "patch_size"),
        (lambda: rp(model, xs, smap, patch_size=2.5), XaikitValueError, "patch_size"),
        (lambda: rp(model, xs, smap, steps=0), XaikitValueError, "steps"),
        (lambda: rp(model, xs, smap, order="random"), XaikitValueError, "order"),
        (lambda: rp(model, xs, smap, order=1), XaikitValueError, "order"),
        (lambda: rp(model, xs, smap, baseline="grey"), XaikitValueError, "baseline"),
        (lambda: rp(model, xs, smap, baseline=np.full(3, np.nan)), XaikitValueError, "baseline"),
        (lambda: rp(model, xs, smap, rank="loud"), XaikitValueError, "rank"),
        (lambda: rp(model, xs, smap[:1]), XaikitValueError, "saliency"),
        (lambda: rp(model, xs, smap, n_samples=3), XaikitTypeError, "n_samples"),
        (lambda: rp(model, xs, smap, 3), XaikitTypeError, "keyword"),
        (lambda: sel(model, xs, smap, patch_size=-1), XaikitValueError, "patch_size"),
        (lambda: sel(model, xs, smap, baseline=None), XaikitValueError, "baseline"),
        (lambda: sel(model, xs, "nonsense"), XaikitValueError, "saliency"),
        (lambda: io(model, xs, smap, segments=0), XaikitValueError, "segments"),
        (lambda: io(model, xs, smap, features="voronoi"), XaikitValueError, "features"),
        (lambda: io(model, xs, smap, features=np.zeros((3, 3), dtype=int)), XaikitValueError, "features"),
        (lambda: io(model, xs, smap, features=np.zeros((SIZE, SIZE))), XaikitTypeError, "features"),
        (lambda: io(model, xs, smap, rank="loud"), XaikitValueError, "rank"),
        (lambda: io(model, xs, None), XaikitTypeError, "saliency"),
    ]
    for call, kind, name in cases:
        with pytest.raises(kind, match=name):
            call()


def test_curves_need_images(framework: str, rng: np.random.Generator) -> None:
    if framework == "torch":
        import torch

        model = torch.nn.Linear(6, 2)
    else:
        import tensorflow as tf

        model = tf.keras.Sequential([tf.keras.layers.Input((6,)), tf.keras.layers.Dense(2)])
    x = rng.random((3, 6)).astype(np.float32)
    for fn in (xk.evaluate.region_perturbation, xk.evaluate.irof, xk.evaluate.selectivity):
        with pytest.raises(XaikitValueError, match="image"):
            fn(model, x, rng.random((3, 6)))


def test_registered_for_compare(rng: np.random.Generator) -> None:
    metrics = xk.evaluate.METRICS
    names = ("region_perturbation", "irof", "selectivity")
    for name, higher in zip(names, (True, True, False)):
        m = metrics[name]
        assert m.family == "faithfulness" and m.higher_is_better is higher and not m.cheap
    w, x, model = _positive_linear("torch", rng, batch=2)
    xs = layout("torch", x)
    exact = _contrib(w, x)
    res = xk.evaluate.compare(model, xs, {"exact": exact}, metrics=list(names), target=0, seed=2)
    direct = (
        xk.evaluate.region_perturbation(model, xs, exact, target=0, seed=2),
        xk.evaluate.irof(model, xs, exact, target=0, seed=2),
        xk.evaluate.selectivity(model, xs, exact, target=0, seed=2),
    )
    for name, r in zip(names, direct):
        assert res.table[name].iloc[0] == pytest.approx(r.scores.mean(), rel=1e-9)


# ---- Quantus (outputs saved by benchmarks/quantus_curves.py) ------------------------------------------------------
def _quantus_irof(curve: np.ndarray, steps: np.ndarray) -> np.ndarray:
    """Quantus's IROF from a curve: S_b - trapezoid(c_1 ... c_Smax) with c zero past S_b."""
    rel = np.nan_to_num(curve[:, 1:] / curve[:, :1], nan=0.0)
    return steps - np.trapezoid(rel, axis=1)


def test_agrees_with_quantus() -> None:
    pytest.importorskip("torch")
    data = np.load(DATA)
    model = seeded_lenet(1)
    total = sum(p.detach().double().sum().item() for p in model.parameters())
    assert total == pytest.approx(float(data["checksum"]), rel=1e-12)
    x, y, smap = data["x"], data["y"], data["smap"]
    rp = xk.evaluate.region_perturbation
    # the patch curves of a sample do not depend on its batch (on either side): the first 4 of 8
    xs, ys, ms, n4 = x[:4], y[:4], smap[:4], slice(0, 4)
    # scores are softmax probabilities of ~0.2 moving by ~1e-3: 1e-7 is a few float32 roundings
    for patch, steps in ((4, 100), (5, 20)):
        for order in ("morf", "lerf"):
            theirs = data[f"region_{order}_p{patch}"][n4]
            ours = rp(model, xs, ms, target=ys, patch_size=patch, steps=steps, order=order, baseline="black")
            np.testing.assert_allclose(ours.drops[:, 1:], theirs, atol=1e-7)
            assert np.ptp(theirs) > 1e-3  # the curve moves: a meaningful comparison
            # paper's AOPC (k = 0 included, 1/(L+1)) vs the mean of Quantus's drops (1/L)
            n = theirs.shape[1]
            np.testing.assert_allclose(ours.scores, theirs.sum(axis=1) / (n + 1), atol=1e-7)
            np.testing.assert_allclose(ours.scores * (n + 1) / n, theirs.mean(axis=1), atol=1e-7)
    # Quantus's "uniform" fill (one value per patch and step), handed over as an array
    u = data["region_uniform_draws"]
    first = rp(model, xs, ms, target=ys, patch_size=4, steps=30, baseline="black")
    fill = np.zeros(xs.shape)
    for b in range(len(xs)):
        for k in range(30):
            fill[b, 0][first.regions[b] == first.order[b, k]] = u[k, b]
    ours = rp(model, xs, ms, target=ys, patch_size=4, steps=30, baseline=fill)
    np.testing.assert_allclose(ours.drops[:, 1:], data["region_uniform"][n4], atol=1e-7)
    for patch in (4, 5):
        theirs = data[f"selectivity_p{patch}"][n4]
        ours = xk.evaluate.selectivity(model, xs, ms, target=ys, patch_size=patch)
        np.testing.assert_allclose(ours.curve[:, 1:], theirs, atol=1e-7)
        n = theirs.shape[1]
        np.testing.assert_allclose(np.trapezoid(theirs, axis=1), n * ours.scores - (ours.curve[:, 0] + ours.curve[:, 1]) / 2, atol=1e-6)  # fmt: skip
    # IROF: the same SLIC superpixels; Quantus's value with a per-image mean fill from our curve
    ours = xk.evaluate.irof(model, x, smap, target=y)
    np.testing.assert_array_equal(ours.regions, data["irof_segments"])
    np.testing.assert_allclose(_quantus_irof(ours.curve, ours.steps), data["irof_own_mean"], atol=1e-5)
    assert np.all(np.abs(ours.scores - data["irof_own_mean"]) > 0.5)  # superpixel units vs the unit square
    # Quantus's default fill is the batch's drifting mean: a sample's score depends on its batch;
    # ours does not
    assert np.abs(data["irof_default_batch"] - data["irof_default_alone"]).max() > 0.1
    alone = xk.evaluate.irof(model, x[2:3], smap[2:3], target=y[2:3])
    np.testing.assert_allclose(alone.curve[0], ours.curve[2, : alone.curve.shape[1]], atol=1e-7)
    assert alone.scores[0] == pytest.approx(ours.scores[2], abs=1e-6)
