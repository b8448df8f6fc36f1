"""Sensitivity-n, faithfulness estimate, monotonicity, monotonicity correlation and sufficiency
against closed forms on linear models and against Quantus 0.6 (recorded)."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

import xaikit as xk
from tests.evaluate_models import (
    CHANNELS,
    SIZE,
    contributions,
    float32_spread,
    layout,
    linear,
    logit_rounding,
    seeded_lenet,
    square_weights,
    weights_of,
)
from xaikit.errors import XaikitTypeError, XaikitValueError

DATA = Path(__file__).parent / "data" / "quantus_faithfulness_more.npz"
P = SIZE * SIZE


def _setup(framework: str, rng: np.random.Generator, batch: int = 4):
    w = square_weights(rng)
    x = rng.uniform(0.1, 1.0, size=(batch, SIZE, SIZE, CHANNELS)).astype(np.float32)
    return w, x, linear(framework, w)


def _rank_groups(values: np.ndarray, step: int, descending: bool) -> np.ndarray:
    """(B, G, step) flat pixel indices of each group, sorted by ``values`` (B, P)."""
    order = np.argsort(-values if descending else values, axis=1, kind="stable")
    return order.reshape(len(values), -1, step)


# ---- known answers on a linear model ------------------------------------------------------------------
def test_input_x_gradient_of_a_linear_model_is_exact(framework: str, rng: np.random.Generator) -> None:
    """With a zero baseline, f(x) - f(x_S) is the contribution inside S: gradient x input is
    sensitivity-n for every n and has faithfulness estimate 1, for any grouping."""
    w, x, model = _setup(framework, rng)
    xs = layout(framework, x)
    gxi = xk.xai.explain(model, xs, target=0, method="input_x_gradient")
    sn = xk.evaluate.sensitivity_n(model, xs, gxi, target=0, features_in_step=8, nsamples=6, baseline="zeros")
    assert sn.ns.tolist() == list(range(8, int(0.8 * P) + 1, 8)) and sn.curve.shape == (4, 6)
    np.testing.assert_allclose(sn.curve, 1.0, atol=1e-5)
    np.testing.assert_allclose(sn.scores, 1.0, atol=1e-5)
    np.testing.assert_allclose(sn.deltas, sn.attribution_sums, rtol=1e-4, atol=1e-5)
    for step in (1, 5):
        fe = xk.evaluate.faithfulness_estimate(
            model, xs, gxi, target=0, features_in_step=step, baseline="zeros"
        )
        np.testing.assert_allclose(fe.scores, 1.0, atol=1e-6)
        assert fe.deltas.shape == (4, -(-P // step))
    # any map: the drops are the contributions of each removed group, the correlation by hand
    smap = rng.normal(size=(4, SIZE, SIZE))
    contrib = contributions(w, x, 1).reshape(4, -1)
    fe = xk.evaluate.faithfulness_estimate(model, xs, smap, target=1, features_in_step=4, baseline="zeros")
    groups = _rank_groups(smap.reshape(4, -1), 4, descending=True)
    drops = np.take_along_axis(contrib[:, None], groups, axis=2).sum(axis=2)
    sums = np.take_along_axis(smap.reshape(4, 1, -1), groups, axis=2).sum(axis=2)
    np.testing.assert_allclose(fe.deltas, drops, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(fe.attribution_sums, sums)
    np.testing.assert_allclose(fe.scores, [np.corrcoef(sums[i], drops[i])[0, 1] for i in range(4)], atol=1e-4)
    sn = xk.evaluate.sensitivity_n(
        model, xs, smap, target=1, features_in_step=20, nsamples=5, baseline="zeros"
    )
    for k, sub in enumerate(sn.subsets):
        by_hand = np.stack([contrib[i, sub[:, i]].sum(axis=1) for i in range(4)])
        np.testing.assert_allclose(sn.deltas[:, k], by_hand, rtol=1e-4, atol=1e-5)
        assert all(len(set(s.tolist())) == sn.ns[k] for s in sub.reshape(-1, sn.ns[k]))
    assert sn.mean == pytest.approx(float(np.mean(sn.scores))) and sn.mean_curve.shape == (len(sn.ns),)


def test_monotonicity_of_a_linear_model(framework: str, rng: np.random.Generator) -> None:
    """Putting pixels back onto zeros raises class 0's score by each pixel's contribution: the
    curve is their cumulative sum in increasing order of the map; a step falls exactly where the
    added contribution is negative."""
    w, x, model = _setup(framework, rng)
    xs = layout(framework, x)
    contrib = contributions(w, x, 0)  # class 0 looks only at the square: every contribution >= 0
    res = xk.evaluate.monotonicity(model, xs, contrib, target=0, baseline="zeros")
    assert res.monotone.all() and np.all(res.scores == 1.0) and res.curve.shape == (4, P)
    signed = contributions(w, x, 1)  # class 1: contributions of both signs
    smap = rng.normal(size=(4, SIZE, SIZE))
    for step in (1, 3):
        res = xk.evaluate.monotonicity(model, xs, smap, target=1, features_in_step=step, baseline="zeros")
        groups = -(-P // step)
        order = np.argsort(smap.reshape(4, -1), axis=1, kind="stable")
        added = np.take_along_axis(signed.reshape(4, -1), order, axis=1)
        added = np.pad(added, ((0, 0), (0, groups * step - P))).reshape(4, groups, step).sum(axis=2)
        np.testing.assert_allclose(res.curve, np.cumsum(added, axis=1), rtol=1e-4, atol=1e-4)
        np.testing.assert_array_equal(res.scores, (added[:, 1:] >= 0).mean(axis=1))
        assert not res.monotone.any() and res.mean == pytest.approx(res.scores.mean())


def test_monotonicity_correlation_of_a_linear_model(framework: str, rng: np.random.Generator) -> None:
    """Replacing a group g by u changes the score by sum_{i in g} w_i (u - x_i): the loss is the
    mean of its squares over the draws divided by f(x)^2 (not its variance: a change that is the
    same at every draw still counts)."""
    w, x, model = _setup(framework, rng, batch=3)
    xs = layout(framework, x)
    smap = rng.normal(size=(3, SIZE, SIZE))
    res = xk.evaluate.monotonicity_correlation(
        model, xs, smap, target=1, features_in_step=4, nsamples=3, seed=2
    )
    assert res.values.shape == (16, 3, 3) and np.all((res.values >= 0) & (res.values < 1))
    groups = _rank_groups(np.abs(smap).reshape(3, -1), 4, descending=False)
    wt = w[1].sum(axis=-1).reshape(-1).astype(np.float64)  # every channel of a pixel takes u
    wx = (w[1][None] * x).sum(axis=-1).reshape(3, -1).astype(np.float64)
    f0 = wx.sum(axis=1)
    u = res.values.transpose(2, 0, 1)  # (B, G, nsamples)
    change = np.stack(
        [[u[b, g] * wt[groups[b, g]].sum() - wx[b, groups[b, g]].sum() for g in range(16)] for b in range(3)]
    )
    np.testing.assert_allclose(res.losses, (change**2).mean(axis=2) / f0[:, None] ** 2, rtol=1e-3, atol=1e-7)
    np.testing.assert_allclose(
        res.attributions, np.take_along_axis(np.abs(smap).reshape(3, 1, -1), groups, axis=2).sum(axis=2)
    )
    from scipy.stats import spearmanr

    np.testing.assert_allclose(
        res.scores, [spearmanr(res.attributions[b], res.losses[b])[0] for b in range(3)]
    )
    # the same value at every draw: a variance would be 0, the expected squared loss is not
    same = np.broadcast_to(np.full((16, 1, 3), 0.5), (16, 4, 3))
    res = xk.evaluate.monotonicity_correlation(model, xs, smap, target=1, features_in_step=4, values=same)
    assert np.all(res.losses > 0)
    # a constant map ranks nothing: NaN, as scipy's spearmanr (and Quantus) say; it read 0.0
    flat = np.ones((3, SIZE, SIZE))
    res = xk.evaluate.monotonicity_correlation(model, xs, flat, target=1, features_in_step=4, nsamples=2)
    assert np.isnan(res.scores).all() and np.isnan(res.mean)
    with np.errstate(invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # scipy's ConstantInputWarning
        assert np.isnan(spearmanr(res.attributions[0], res.losses[0])[0])


def test_sufficiency_by_hand(framework: str, rng: np.random.Generator) -> None:
    w, x, model = _setup(framework, rng, batch=5)
    xs = layout(framework, x)
    maps = np.zeros((5, SIZE, SIZE))
    maps[[0, 1, 2], 0, 0] = 1.0  # 0, 1, 2 explained alike, 3 and 4 alone
    maps[3, 7, 7] = 1.0
    maps[4, 3, 3] = 5.0
    pred = (np.einsum("chwk,bhwk->bc", w.astype(np.float64), x.astype(np.float64))).argmax(axis=1)
    res = xk.evaluate.sufficiency(model, xs, maps, distance="euclidean", threshold=0.1)
    same = [(pred[[j for j in (0, 1, 2) if j != i]] == pred[i]).mean() for i in (0, 1, 2)]
    np.testing.assert_allclose(res.scores[:3], same)
    assert np.isnan(res.scores[3:]).all() and res.predictions.tolist() == pred.tolist()
    assert res.distances.max() == pytest.approx(1.0) and np.allclose(np.diag(res.distances), 0)
    # every map alike: every other sample is a neighbour
    res = xk.evaluate.sufficiency(model, xs, np.ones((5, SIZE, SIZE)), threshold=0.0)
    expect = [(np.delete(pred, i) == pred[i]).mean() for i in range(5)]
    np.testing.assert_allclose(res.scores, expect)
    # the standardized distance by hand (pixels that do not vary left out)
    maps = np.abs(rng.normal(size=(5, SIZE, SIZE)))
    maps[:, 0, 0] = 2.0
    res = xk.evaluate.sufficiency(model, xs, maps, threshold=0.5)
    flat = maps.reshape(5, -1)
    var = flat.var(axis=0, ddof=1)
    z = flat[:, var > 0] / np.sqrt(var[var > 0])
    d = np.sqrt(((z[:, None] - z[None]) ** 2).sum(axis=2))
    np.testing.assert_allclose(res.distances, d / d.max(), atol=1e-12)


# ---- Quantus (outputs saved by benchmarks/quantus_faithfulness_more.py) ------------------------------------
def _cumulative_subsets(smap: np.ndarray, step: int, steps: int) -> list[np.ndarray]:
    order = np.argsort(-smap.reshape(len(smap), -1), axis=1, kind="stable")
    return [np.stack([order[:, : k * step], order[:, ::-1][:, : k * step]]) for k in range(1, steps + 1)]


def _template(data) -> object:
    import torch

    weight = data["t_weight"]
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(weight.shape[1], 5)).eval()
    with torch.no_grad():
        model[1].weight.copy_(torch.as_tensor(weight))
        model[1].bias.zero_()
    return model


def test_agrees_with_quantus() -> None:
    pytest.importorskip("torch")
    data = np.load(DATA)
    model = seeded_lenet(1)
    total = sum(p.detach().double().sum().item() for p in model.parameters())
    assert total == pytest.approx(float(data["checksum"]), rel=1e-12)
    x, y, smap = data["x"], data["y"], data["smap"]
    # a 16-pixel group's score drop is small: float32 rounding (and the CPU's kernels) move the
    # correlation by up to ~3e-5, so the tolerance is measured (tests/evaluate_models.float32_spread)
    fe, spread = float32_spread(
        lambda m, xs: xk.evaluate.faithfulness_estimate(m, xs, smap, target=y, features_in_step=16).scores,
        model,
        x,
    )
    np.testing.assert_allclose(fe, data["faithfulness_estimate_step16"], atol=1e-5 + 10 * spread.max())
    # SensitivityN: Quantus's cumulative removals as subsets; its across-batch curve rebuilt
    flat = smap.reshape(len(x), -1)
    order = np.argsort(-flat, axis=1, kind="stable")
    step_sums = np.stack(
        [flat[np.arange(len(x))[:, None], order[:, k * 16 : (k + 1) * 16]].sum(1) for k in range(51)]
    )

    def quantus_curve(m: object, xs: np.ndarray) -> np.ndarray:
        sn = xk.evaluate.sensitivity_n(m, xs, smap, target=y, subsets=_cumulative_subsets(smap, 16, 51))
        return np.array([np.corrcoef(sn.deltas[:, k, 0], step_sums[k])[0, 1] for k in range(51)])

    curve, spread = float32_spread(quantus_curve, model, x)  # small drops: rounding is measured
    np.testing.assert_allclose(curve, data["sensitivity_n"], atol=1e-5 + 10 * spread.max())
    assert abs(np.mean(curve) - data["sensitivity_n_aggregate"][0]) < 1e-5 + 10 * spread.max()
    # MonotonicityCorrelation with Quantus's recorded uniform draws
    mc = xk.evaluate.monotonicity_correlation(
        model, x, smap, target=y, features_in_step=16, values=data["mc_values"]
    )
    np.testing.assert_allclose(mc.scores, data["monotonicity_correlation"], atol=1e-5)
    # Sufficiency: equal where a sample has a neighbour; Quantus gives 0 where ours is NaN
    tmodel = _template(data)
    for threshold in (0.6, 0.3):
        suf = xk.evaluate.sufficiency(tmodel, data["t_x"], data["t_smap"], threshold=threshold)
        theirs = data[f"sufficiency_{threshold:g}"]
        has = ~np.isnan(suf.scores)
        assert 0 < has.sum() < len(has)  # both cases occur
        np.testing.assert_allclose(suf.scores[has], theirs[has], atol=1e-12)
        np.testing.assert_array_equal(theirs[~has], 0.0)


@pytest.mark.slow
def test_faithfulness_estimate_pixel_by_pixel_agrees_with_quantus() -> None:
    """Quantus's default features_in_step=1: 1024 groups, 8200 LeNet rows."""
    pytest.importorskip("torch")
    data = np.load(DATA)
    fe, spread = float32_spread(
        lambda m, xs: xk.evaluate.faithfulness_estimate(m, xs, data["smap"], target=data["y"]).scores,
        seeded_lenet(1),
        data["x"],
    )  # one pixel's score drop: float32 rounding matters (see test_agrees_with_quantus)
    np.testing.assert_allclose(fe, data["faithfulness_estimate_step1"], atol=1e-5 + 10 * spread.max())


def test_quantus_monotonicity_departs_from_the_paper() -> None:
    """Quantus 0.6 returns True for every sample (it never puts x's pixels back: recorded); on
    the same LeNet and maps the score does fall on the way (ours: not monotone), and on a linear
    model built to fall (negative contributions added last) ours says so."""
    pytest.importorskip("torch")
    import torch

    data = np.load(DATA)
    assert data["monotonicity"].all()
    res = xk.evaluate.monotonicity(
        seeded_lenet(1), data["x"], data["smap"], target=data["y"], features_in_step=16
    )
    assert not res.monotone.any() and np.all(res.scores < 1)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(4, 1, bias=False))
    with torch.no_grad():
        model[1].weight.copy_(torch.tensor([[1.0, 2.0, 3.0, -4.0]]))
    x = np.ones((1, 1, 2, 2), np.float32)
    res = xk.evaluate.monotonicity(model, x, np.array([[[0.1, 0.2], [0.3, 0.4]]]), target=0, baseline="zeros")
    np.testing.assert_allclose(res.curve, [[1.0, 3.0, 6.0, 2.0]])
    assert res.monotone.tolist() == [False] and res.scores.tolist() == [2 / 3]


# ---- shared behaviour ---------------------------------------------------------------------------------------
def _all(model, xs, smap, **kw):
    return (
        xk.evaluate.sensitivity_n(model, xs, smap, features_in_step=16, nsamples=3, seed=5, **kw),
        xk.evaluate.faithfulness_estimate(model, xs, smap, features_in_step=8, **kw),
        xk.evaluate.monotonicity(model, xs, smap, features_in_step=8, **kw),
        xk.evaluate.monotonicity_correlation(model, xs, smap, features_in_step=8, nsamples=2, seed=5, **kw),
    )


def _same(a, b, atol: float | None = None) -> None:
    """Equal score drops / curves (bit for bit, or to ``atol``, the rounding of one logit: a drop
    to twice that, a squared loss relative to the scores); correlations where the drops vary."""
    pairs = [(a[0].deltas, b[0].deltas), (a[1].deltas, b[1].deltas), (a[2].curve, b[2].curve)]
    if atol is None:
        for u, v in pairs + [
            (a[3].losses, b[3].losses),
            (a[0].scores, b[0].scores),
            (a[1].scores, b[1].scores),
        ]:
            np.testing.assert_array_equal(u, v)
        return
    for u, v in pairs:
        np.testing.assert_allclose(u, v, rtol=1e-5, atol=2 * atol)
    np.testing.assert_allclose(a[3].losses, b[3].losses, rtol=1e-3, atol=1e-6)
    for i in (0, 1):
        np.testing.assert_allclose(a[i].scores, b[i].scores, atol=1e-3)


def test_chunked_equals_unchunked_seeded_and_model_untouched(
    framework: str, rng: np.random.Generator
) -> None:
    w, x, model = _setup(framework, rng, batch=3)
    xs = layout(framework, x)
    smap = rng.random((3, SIZE, SIZE))
    before = weights_of(framework, model)
    ref = _all(model, xs, smap, max_batch=10_000)
    rows = [(3 * 3 + 1) * 3, (8 + 1) * 3, (8 + 1) * 3, (8 * 2 + 1) * 3]
    assert [r.chunks for r in ref] == [[n] for n in rows]
    atol = logit_rounding(w, x, spread=1.0)
    for chunk in (1, 7):
        res = _all(model, xs, smap, max_batch=chunk)
        _same(ref, res, atol=atol)
        assert all(sum(r.chunks) == n and len(r.chunks) == -(-n // chunk) for r, n in zip(res, rows))
    _same(ref, _all(model, xs, smap, max_batch=10_000))  # same seed, same everything
    other = xk.evaluate.sensitivity_n(model, xs, smap, features_in_step=16, nsamples=3, seed=6)
    assert not all(np.array_equal(s, t) for s, t in zip(other.subsets, ref[0].subsets))
    mc = xk.evaluate.monotonicity_correlation(model, xs, smap, features_in_step=8, nsamples=2, seed=6)
    assert not np.array_equal(mc.values, ref[3].values)
    for u, v in zip(before, weights_of(framework, model)):
        np.testing.assert_array_equal(u, v)


def test_torch_equals_keras_on_the_same_weights(rng: np.random.Generator) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("tensorflow")
    w, x, _ = _setup("torch", rng, batch=3)
    smap = rng.random((3, SIZE, SIZE))
    out, suff = {}, {}
    for fw in ("torch", "tf"):
        model = linear(fw, w)
        out[fw] = _all(model, layout(fw, x), smap)
        suff[fw] = xk.evaluate.sufficiency(model, layout(fw, x), smap, threshold=0.9)
    _same(out["torch"], out["tf"], atol=logit_rounding(w, x, spread=1.0))
    np.testing.assert_array_equal(suff["torch"].scores, suff["tf"].scores)
    np.testing.assert_array_equal(suff["torch"].predictions, suff["tf"].predictions)


def test_maps_by_method_name(framework: str, rng: np.random.Generator) -> None:
    _w, x, model = _setup(framework, rng, batch=2)
    xs = layout(framework, x)
    grads = xk.xai.explain(model, xs, method="vanilla")
    _same(_all(model, xs, "vanilla"), _all(model, xs, grads))
    a = xk.evaluate.sufficiency(model, xs, "vanilla")
    np.testing.assert_array_equal(a.distances, xk.evaluate.sufficiency(model, xs, grads).distances)


def test_bad_inputs(framework: str, rng: np.random.Generator) -> None:
    _w, x, model = _setup(framework, rng, batch=2)
    xs = layout(framework, x)
    smap = rng.random((2, SIZE, SIZE))
    ev = xk.evaluate
    sub = np.zeros((2, 2, 3), dtype=int) + np.arange(3)
    cases = [
        (lambda: ev.sensitivity_n(model, xs, smap, n_max_percentage=0), XaikitValueError, "n_max_percentage"),
        (lambda: ev.sensitivity_n(model, xs, smap, n_max_percentage=1.5), XaikitValueError, "n_max_percentage"),
        (lambda: ev.sensitivity_n(model, xs, smap, n_max_percentage=0.01), XaikitValueError, "n_max_percentage"),
        (lambda: ev.sensitivity_n(model, xs, smap, features_in_step=P), XaikitValueError, "features_in_step"),
        (lambda: ev.sensitivity_n(model, xs, smap, nsamples=1), XaikitValueError, "nsamples"),
        (lambda: ev.sensitivity_n(model, xs, smap, baseline="grey"), XaikitValueError, "baseline"),
        (lambda: ev.sensitivity_n(model, xs, smap, subsets=sub), XaikitTypeError, "subsets"),
        (lambda: ev.sensitivity_n(model, xs, smap, subsets=[]), XaikitTypeError, "subsets"),
        (lambda: ev.sensitivity_n(model, xs, smap, subsets=[sub, sub[:1]]), XaikitValueError, "subsets"),
        (lambda: ev.sensitivity_n(model, xs, smap, subsets=[sub + P]), XaikitValueError, "subsets"),
        (lambda: ev.sensitivity_n(model, xs, smap, subsets=[sub, np.stack([sub[0]] * 3)]), XaikitValueError,
         "nsamples"),
        (lambda: ev.faithfulness_estimate(model, xs, smap, features_in_step=0), XaikitValueError, "features_in_step"),
        (lambda: ev.faithfulness_estimate(model, xs, smap, features_in_step=1.5), XaikitValueError, "features_in_step"),
        (lambda: ev.faithfulness_estimate(model, xs, smap[:1]), XaikitValueError, "saliency"),
        (lambda: ev.monotonicity(model, xs, smap, features_in_step=P + 1), XaikitValueError, "features_in_step"),
        (lambda: ev.monotonicity(model, xs, smap, baseline=None), XaikitValueError, "baseline"),
        (lambda: ev.monotonicity(model, xs, "nonsense"), XaikitValueError, "saliency"),
        (lambda: ev.monotonicity_correlation(model, xs, smap, nsamples=0), XaikitValueError, "nsamples"),
        (lambda: ev.monotonicity_correlation(model, xs, smap, value_range=(1, 0)), XaikitValueError, "value_range"),
        (lambda: ev.monotonicity_correlation(model, xs, smap, eps=-1), XaikitValueError, "eps"),
        (lambda: ev.monotonicity_correlation(model, xs, smap, values=np.zeros((3, 2, 2))), XaikitValueError,
         "values"),
        (lambda: ev.monotonicity_correlation(model, xs, smap, values=np.full((P, 2, 2), np.nan)),
         XaikitValueError, "values"),
        (lambda: ev.sufficiency(model, xs, smap, threshold=2), XaikitValueError, "threshold"),
        (lambda: ev.sufficiency(model, xs, smap, distance="nearest"), XaikitValueError, "distance"),
        (lambda: ev.sufficiency(model, xs, smap, distance=3), XaikitTypeError, "distance"),
        (lambda: ev.sufficiency(model, xs, smap, seed=-1), XaikitValueError, "seed"),
        (lambda: ev.sufficiency(model, xs, smap, method_options={"nsamples": 3}), XaikitValueError,
         "method_options"),
    ]  # fmt: skip
    for call, kind, name in cases:
        with pytest.raises(kind, match=name):
            call()


def test_registered_for_compare() -> None:
    torch = pytest.importorskip("torch")
    names = [
        "sensitivity_n",
        "faithfulness_estimate",
        "monotonicity",
        "monotonicity_correlation",
        "sufficiency",
    ]
    assert all(
        xk.evaluate.METRICS[n].family == "faithfulness" and not xk.evaluate.METRICS[n].cheap for n in names
    )
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 3))
    x = np.random.default_rng(0).random((4, 1, 8, 8)).astype(np.float32)
    res = xk.evaluate.compare(model, x, methods=["input_x_gradient"], metrics=names)
    assert res.table.shape[0] == 1 and set(names) <= set(res.table.columns)
