"""ROAD, infidelity and faithfulness correlation against closed forms, captum and Quantus."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import xaikit as xk
from tests.evaluate_models import (
    CHANNELS,
    SIZE,
    contributions,
    layout,
    linear,
    logit_rounding,
    seeded_lenet,
    square_weights,
    weights_of,
)
from xaikit.errors import XaikitTypeError, XaikitValueError
from xaikit.evaluate.faithfulness import impute
from xaikit.evaluate.perturbation import rank_positions

DATA = Path(__file__).parent / "data" / "quantus_faithfulness.npz"
NEIGHBOURS = [(dy, dx, 1 / 12 if dy and dx else 1 / 6) for dy in (-1, 0, 1) for dx in (-1, 0, 1) if dy or dx]


def _setup(framework: str, rng: np.random.Generator, batch: int = 4):
    w = square_weights(rng)
    x = rng.uniform(0.1, 1.0, size=(batch, SIZE, SIZE, CHANNELS)).astype(np.float32)
    return w, x, linear(framework, w)


def _logits(w: np.ndarray, x: np.ndarray) -> np.ndarray:
    """(B, classes) of the bias-free linear model on channel-last x."""
    return np.einsum("chwk,bhwk->bc", w.astype(np.float64), x.astype(np.float64))


# ---- the imputation -------------------------------------------------------------------------------------
def test_imputation_is_exact_inside_a_linear_ramp(rng: np.random.Generator) -> None:
    h, w = 9, 7
    yy, xx = np.mgrid[0:h, 0:w]
    image = np.stack([3.0 * yy - 2.0 * xx + 1.0, -yy + 0.5 * xx]).reshape(2, -1)  # two channels
    interior = np.flatnonzero(((yy > 0) & (yy < h - 1) & (xx > 0) & (xx < w - 1)).ravel())
    removed = rng.choice(interior, 20, replace=False)  # neighbours of each other too
    np.testing.assert_allclose(impute(image, removed, h, w), image[:, removed], atol=1e-12)


def test_every_imputed_pixel_is_the_weighted_mean_of_its_neighbours(rng: np.random.Generator) -> None:
    h, w = 6, 8
    image = rng.normal(size=(3, h * w))
    removed = rng.choice(h * w, 30, replace=False)  # corners and borders included
    filled = image.copy()
    filled[:, removed] = impute(image, removed, h, w)
    grid = filled.reshape(3, h, w)
    for p in removed:
        y, x = divmod(int(p), w)
        nb = [(y + dy, x + dx, wt) for dy, dx, wt in NEIGHBOURS if 0 <= y + dy < h and 0 <= x + dx < w]
        mean = sum(wt * grid[:, a, b] for a, b, wt in nb) / sum(wt for _, _, wt in nb)
        np.testing.assert_allclose(grid[:, y, x], mean, atol=1e-12)


# ---- ROAD ------------------------------------------------------------------------------------------------
def _road_expected(w, x, smap, fractions, seed, noise, lerf=False):
    """Scores of the linear model on ROAD's images, built by hand: pixels in rank order, imputed,
    plus RandomState(seed) noise drawn per fraction, per sample, (channels, removed)."""
    b = len(x)
    order = np.argsort(rank_positions((-smap if lerf else smap).reshape(b, -1), seed), axis=1)
    rs = np.random.RandomState(seed)
    out = np.empty((b, len(fractions), w.shape[0]))
    for f, p in enumerate(fractions):
        k = int(np.floor(round(p * SIZE * SIZE, 6)))
        for i in range(b):
            planes = x[i].astype(np.float64).transpose(2, 0, 1).reshape(CHANNELS, -1)
            removed = order[i, :k]
            planes[:, removed] = impute(planes, removed, SIZE, SIZE) + noise * rs.randn(CHANNELS, k)
            img = planes.reshape(CHANNELS, SIZE, SIZE).transpose(1, 2, 0)
            out[i, f] = _logits(w, img[None])[0]
    return out


@pytest.mark.parametrize("noise", [0.0, 0.05])
def test_road_scores_the_hand_built_images(
    framework: str, rng: np.random.Generator, noise: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    w, x, model = _setup(framework, rng)
    smap = rng.random((4, SIZE, SIZE))
    fractions = (0.1, 0.35, 0.8)
    if noise:  # images solved one or two at a time instead of a chunk's worth together
        monkeypatch.setattr("xaikit.evaluate.faithfulness._MAX_UNKNOWNS", 40)
    res = xk.evaluate.road(model, layout(framework, x), smap, target=0, fractions=fractions, order="both",
                           stdev=noise, seed=3)  # fmt: skip
    assert res.counts.tolist() == [6, 22, 51]
    for curve, lerf in ((res.morf, False), (res.lerf, True)):
        assert curve is not None
        logits = _road_expected(w, x, smap, fractions, 3, noise, lerf)
        np.testing.assert_allclose(curve.scores, logits[..., 0], rtol=1e-5, atol=1e-5)
        assert curve.correct.tolist() == (logits.argmax(axis=2) == 0).tolist()
        np.testing.assert_allclose(curve.accuracy, curve.correct.mean(axis=0))
    assert res.lerf is not None and res.morf is not None
    np.testing.assert_allclose(res.scores, res.lerf.scores.mean(axis=1) - res.morf.scores.mean(axis=1))
    assert res.targets.tolist() == [0] * 4


def test_road_of_the_exact_map_falls_faster_than_its_reverse(
    framework: str, rng: np.random.Generator
) -> None:
    w, x, model = _setup(framework, rng, batch=3)
    exact = contributions(w, x, 0)  # positive evidence on the square only
    res = xk.evaluate.road(model, layout(framework, x), exact, target=0, order="both", stdev=0.0)
    assert res.morf is not None and res.lerf is not None
    assert np.all(res.morf.scores[:, -1] < res.lerf.scores[:, -1])
    assert np.all(res.scores > 0)
    one = xk.evaluate.road(model, layout(framework, x), exact, target=0, order="morf", stdev=0.0)
    assert one.lerf is None
    np.testing.assert_array_equal(one.scores, res.morf.scores.mean(axis=1))


# ---- infidelity -------------------------------------------------------------------------------------------
def test_infidelity_of_a_linear_model(framework: str, rng: np.random.Generator) -> None:
    w, x, model = _setup(framework, rng)
    grad = xk.xai.explain(model, layout(framework, x), target=0, method="vanilla")  # = w_0, exactly
    xs = layout(framework, x)
    exact = xk.evaluate.infidelity(model, xs, grad, target=0, nsamples=30, stdev=0.2)
    np.testing.assert_allclose(exact.scores, 0.0, atol=1e-8)
    np.testing.assert_allclose(exact.dots, exact.deltas, rtol=1e-4, atol=1e-5)  # a . I = f(x) - f(x - I)
    scaled = xk.evaluate.infidelity(model, xs, 3 * grad, target=0, nsamples=30, stdev=0.2)
    np.testing.assert_allclose(scaled.beta, 1 / 3, rtol=1e-5)  # normalize undoes the scale
    np.testing.assert_allclose(scaled.scores, 0.0, atol=1e-8)
    raw = xk.evaluate.infidelity(model, xs, 3 * grad, target=0, nsamples=30, stdev=0.2, normalize=False)
    np.testing.assert_allclose(raw.scores, 4 * (raw.deltas**2).mean(axis=1), rtol=1e-5)
    np.testing.assert_array_equal(raw.beta, 1.0)
    # Gaussian I: E[(w . I)^2] = stdev^2 |w|^2 (in distribution, 200 draws)
    many = xk.evaluate.infidelity(model, xs, 2 * grad, target=0, nsamples=200, stdev=0.2, normalize=False)
    expect = 0.04 * float((w[0].astype(np.float64) ** 2).sum())
    np.testing.assert_allclose(many.scores, expect, rtol=0.3)
    np.testing.assert_allclose(many.scores.mean(), expect, rtol=0.15)


def test_infidelity_equals_captum_on_the_same_perturbations(rng: np.random.Generator) -> None:
    torch = pytest.importorskip("torch")
    from captum.metrics import infidelity as captum_infidelity

    torch.manual_seed(1)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(2, 4, 3), torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(4 * 6 * 6, 3)
    ).eval()
    x = rng.uniform(0, 1, size=(5, 2, 8, 8)).astype(np.float32)
    attr = rng.normal(size=x.shape).astype(np.float32)
    n = 7
    pert = (0.1 * rng.normal(size=(n,) + x.shape)).astype(np.float32)
    target = [0, 2, 1, 1, 0]
    # captum repeats each sample n times (sample-major): row i * n + j is sample i, perturbation j
    flat = torch.as_tensor(pert.transpose(1, 0, 2, 3, 4).reshape((-1,) + x.shape[1:]))

    def perturb_func(inputs):
        return flat, inputs - flat

    for normalize in (True, False):
        ours = xk.evaluate.infidelity(model, x, attr, target=target, perturbation=pert, normalize=normalize)
        theirs = captum_infidelity(
            model, perturb_func, torch.as_tensor(x), torch.as_tensor(attr), target=torch.as_tensor(target),
            n_perturb_samples=n, normalize=normalize,
        ).numpy()  # fmt: skip
        np.testing.assert_allclose(ours.scores, theirs, rtol=1e-5, atol=1e-5)


# ---- faithfulness correlation ---------------------------------------------------------------------------------
def test_gradient_times_input_of_a_linear_model_correlates_exactly(
    framework: str, rng: np.random.Generator
) -> None:
    w, x, model = _setup(framework, rng)
    xs = layout(framework, x)
    gxi = xk.xai.explain(model, xs, target=0, method="input_x_gradient")
    res = xk.evaluate.faithfulness_correlation(
        model, xs, gxi, target=0, subset_size=10, nsamples=25, baseline="zeros"
    )
    np.testing.assert_allclose(res.scores, 1.0, atol=1e-6)
    np.testing.assert_allclose(res.deltas, res.attribution_sums, rtol=1e-4, atol=1e-5)
    # any map: the drops are the contributions inside each subset, the correlation by hand
    smap = rng.normal(size=(4, SIZE, SIZE))
    res = xk.evaluate.faithfulness_correlation(
        model, xs, smap, target=0, subset_size=10, nsamples=25, baseline="zeros"
    )
    contrib = contributions(w, x, 0).reshape(4, -1)
    drops = np.stack([contrib[i, res.subsets[:, i]].sum(axis=1) for i in range(4)])
    np.testing.assert_allclose(res.deltas, drops, rtol=1e-4, atol=1e-5)
    sums = np.stack([smap[i].ravel()[res.subsets[:, i]].sum(axis=1) for i in range(4)])
    np.testing.assert_allclose(res.attribution_sums, sums)
    expect = [np.corrcoef(sums[i], drops[i])[0, 1] for i in range(4)]
    np.testing.assert_allclose(res.scores, expect, atol=1e-4)
    assert res.mean == pytest.approx(float(np.mean(res.scores)))


def test_constant_drops_give_nan(framework: str, rng: np.random.Generator) -> None:
    _w, x, model = _setup(framework, rng, batch=2)
    zero = np.zeros((2, SIZE, SIZE))
    res = xk.evaluate.faithfulness_correlation(
        model, layout(framework, x), zero, target=0, subset_size=5, nsamples=4
    )
    assert np.isnan(res.scores).all() and np.isnan(res.mean)


# ---- shared behaviour -------------------------------------------------------------------------------------------
def _all(model, xs, smap, full, **kw):
    return (
        xk.evaluate.road(model, xs, smap, fractions=(0.2, 0.6), order="both", seed=5, **kw),
        xk.evaluate.infidelity(model, xs, full, nsamples=6, seed=5, **kw),
        xk.evaluate.faithfulness_correlation(model, xs, smap, subset_size=7, nsamples=6, seed=5, **kw),
    )


def _same(a, b, atol: float | None = None) -> None:
    """Equal results (``atol`` None: bit for bit; else ``atol`` is the rounding of one logit, see
    :func:`tests.evaluate_models.logit_rounding`: score differences may be off by twice that,
    an infidelity (the mean squared residual) by 2 |residual| times that, a correlation by that
    relative to the spread of the score drops)."""
    road_a, inf_a, fc_a = a
    road_b, inf_b, fc_b = b
    if atol is None:
        check = np.testing.assert_array_equal
        pairs = [
            (road_a.morf.scores, road_b.morf.scores), (road_a.lerf.scores, road_b.lerf.scores),
            (inf_a.scores, inf_b.scores), (inf_a.deltas, inf_b.deltas),
            (fc_a.deltas, fc_b.deltas), (fc_a.scores, fc_b.scores),
        ]  # fmt: skip
        for u, v in pairs:
            check(u, v)
        return
    close = np.testing.assert_allclose
    close(road_a.morf.scores, road_b.morf.scores, rtol=1e-5, atol=atol)
    close(road_a.lerf.scores, road_b.lerf.scores, rtol=1e-5, atol=atol)
    close(inf_a.deltas, inf_b.deltas, rtol=1e-5, atol=2 * atol)
    residual = np.abs(inf_a.dots - inf_a.deltas).max()
    close(inf_a.scores, inf_b.scores, rtol=1e-5, atol=2 * residual * 2 * atol + (2 * atol) ** 2)
    close(fc_a.deltas, fc_b.deltas, rtol=1e-5, atol=2 * atol)
    spread = fc_a.deltas.std(axis=1).min()
    close(fc_a.scores, fc_b.scores, rtol=1e-5, atol=4 * 2 * atol / spread)


def test_chunked_equals_unchunked_seeded_and_model_untouched(
    framework: str, rng: np.random.Generator
) -> None:
    """Chunks of other sizes run the model at other batch sizes, whose float32 kernels sum in
    another order: equal to the rounding of the logits (not bit for bit: measured 3.8e-6 on
    logits of ~1 on an AMD EPYC, while the old tolerance of 1e-6 held on a Xeon); the same
    chunks give the same bits."""
    w, x, model = _setup(framework, rng, batch=3)
    xs = layout(framework, x)
    smap = rng.random((3, SIZE, SIZE))
    full = rng.normal(size=xs.shape)
    before = weights_of(framework, model)
    ref = _all(model, xs, smap, full, max_batch=1000)
    assert [r.chunks for r in ref] == [[12], [21], [21]]
    atol = logit_rounding(w, x, spread=0.5)  # infidelity's noise: N(0, 0.1^2) per element
    for chunk in (1, 4, 7):
        res = _all(model, xs, smap, full, max_batch=chunk)
        _same(ref, res, atol=atol)
        assert all(sum(r.chunks) == s and len(r.chunks) == -(-s // chunk) for r, s in zip(res, (12, 21, 21)))
    _same(ref, _all(model, xs, smap, full, max_batch=1000))  # same seed, same everything
    other = xk.evaluate.infidelity(model, xs, full, nsamples=6, seed=6)
    assert not np.allclose(other.deltas, ref[1].deltas)
    fc = xk.evaluate.faithfulness_correlation(model, xs, smap, subset_size=7, nsamples=6, seed=6)
    assert not np.array_equal(fc.subsets, ref[2].subsets)
    for a, b in zip(before, weights_of(framework, model)):
        np.testing.assert_array_equal(a, b)


def test_torch_equals_keras_on_the_same_weights(rng: np.random.Generator) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("tensorflow")
    w, x, _ = _setup("torch", rng, batch=3)
    smap = rng.random((3, SIZE, SIZE))
    full = rng.normal(size=x.shape)  # channel-last
    pert = 0.1 * rng.normal(size=(5,) + x.shape)
    out = {}
    for fw in ("torch", "tf"):
        model = linear(fw, w)
        xs = layout(fw, x)
        to = (lambda a: a.transpose(0, 3, 1, 2)) if fw == "torch" else (lambda a: a)
        out[fw] = (
            xk.evaluate.road(model, xs, smap, fractions=(0.2, 0.6), order="both", seed=5),
            xk.evaluate.infidelity(model, xs, to(full), perturbation=np.stack([to(p) for p in pert])),
            xk.evaluate.faithfulness_correlation(model, xs, smap, subset_size=7, nsamples=6, seed=5),
        )
    _same(out["torch"], out["tf"], atol=logit_rounding(w, x, spread=float(np.abs(pert).max())))


def test_maps_by_method_name_and_layouts(framework: str, rng: np.random.Generator) -> None:
    _w, x, model = _setup(framework, rng, batch=2)
    xs = layout(framework, x)
    grads = xk.xai.explain(model, xs, method="vanilla")
    spatial = np.asarray(grads).sum(axis=1 if framework == "torch" else 3)
    by_name = _all(model, xs, "vanilla", "vanilla")
    _same(by_name, _all(model, xs, grads, grads))
    one = spatial[:, None] if framework == "torch" else spatial[..., None]
    # channels summed in float32 here, in float64 inside: equal to rounding
    _same(_all(model, xs, spatial, one), _all(model, xs, grads, np.broadcast_to(one, xs.shape)), atol=1e-7)


def test_bad_inputs(framework: str, rng: np.random.Generator) -> None:
    _w, x, model = _setup(framework, rng, batch=2)
    xs = layout(framework, x)
    smap = rng.random((2, SIZE, SIZE))
    road, inf, fc = xk.evaluate.road, xk.evaluate.infidelity, xk.evaluate.faithfulness_correlation
    cases = [
        (lambda: road(model, xs, smap, fractions=(0.5, 1.0)), XaikitValueError, "fractions"),
        (lambda: road(model, xs, smap, fractions=[]), XaikitValueError, "fractions"),
        (lambda: road(model, xs, smap, fractions="half"), XaikitTypeError, "fractions"),
        (lambda: road(model, xs, smap, order="best"), XaikitValueError, "order"),
        (lambda: road(model, xs, smap, stdev=-0.1), XaikitValueError, "stdev"),
        (lambda: road(model, xs, smap, rank="loud"), XaikitValueError, "rank"),
        (lambda: road(model, xs, smap[:1]), XaikitValueError, "saliency"),
        (lambda: road(model, xs, "nonsense"), XaikitValueError, "saliency"),
        (lambda: road(model, xs, smap, method_options={"nsamples": 3}), XaikitValueError, "method_options"),
        (lambda: road(model, xs, smap, seed=-1), XaikitValueError, "seed"),
        (lambda: inf(model, xs, smap, perturbation="uniform"), XaikitValueError, "perturbation"),
        (lambda: inf(model, xs, smap, perturbation=np.zeros((3, 2, 4))), XaikitValueError, "perturbation"),
        (
            lambda: inf(model, xs, smap, perturbation=np.zeros((3,) + xs.shape), nsamples=2),
            XaikitValueError,
            "perturbation",
        ),
        (lambda: inf(model, xs, smap, stdev=0), XaikitValueError, "stdev"),
        (lambda: inf(model, xs, smap, nsamples=0), XaikitValueError, "nsamples"),
        (lambda: inf(model, xs, smap, normalize="yes"), XaikitTypeError, "normalize"),
        (lambda: inf(model, xs, np.full((2, SIZE, SIZE), np.nan)), XaikitValueError, "saliency"),
        (lambda: fc(model, xs, smap, subset_size=SIZE * SIZE + 1), XaikitValueError, "subset_size"),
        (lambda: fc(model, xs, smap, nsamples=1), XaikitValueError, "nsamples"),
        (lambda: fc(model, xs, smap, baseline="grey"), XaikitValueError, "baseline"),
        (lambda: fc(model, xs, smap, subsets=np.zeros((3, 2, 2), dtype=int)), XaikitValueError, "subsets"),
        (lambda: fc(model, xs, smap, subsets=np.full((3, 2, 2), SIZE * SIZE)), XaikitValueError, "subsets"),
        (
            lambda: fc(model, xs, smap, subsets=np.arange(-5, 7).reshape(3, 2, 2)),
            XaikitValueError,
            rf"subsets must hold pixel indices in \[0, {SIZE * SIZE}\); got values in \[-5, 6\]",
        ),
        (lambda: fc(model, xs, smap, subsets=np.zeros((3, 1, 2), dtype=int)), XaikitValueError, "subsets"),
        (lambda: fc(model, xs, smap, subsets=np.zeros((3, 2, 1)) + 0.5), XaikitTypeError, "subsets"),
        (lambda: fc(model, xs, None), XaikitTypeError, "saliency"),
    ]
    for call, kind, name in cases:
        with pytest.raises(kind, match=name):
            call()


def test_road_needs_images(framework: str, rng: np.random.Generator) -> None:
    if framework == "torch":
        import torch

        model = torch.nn.Linear(6, 2)
    else:
        import tensorflow as tf

        model = tf.keras.Sequential([tf.keras.layers.Input((6,)), tf.keras.layers.Dense(2)])
    x = rng.random((3, 6)).astype(np.float32)
    with pytest.raises(XaikitValueError, match="image"):
        xk.evaluate.road(model, x, rng.random((3, 6)))
    res = xk.evaluate.faithfulness_correlation(model, x, rng.random((3, 6)), subset_size=2, nsamples=5)
    assert res.scores.shape == (3,)


# ---- Quantus (outputs saved by benchmarks/quantus_faithfulness.py) --------------------------------------------------
def _cumulative_patches(x: np.ndarray, patch: int) -> np.ndarray:
    b = x.shape[0]
    low = x.reshape(b, -1).min(axis=1)[:, None, None, None]
    xp, out = x.copy(), []
    for i in range(x.shape[2] // patch):
        for j in range(x.shape[3] // patch):
            xp[:, :, i * patch : (i + 1) * patch, j * patch : (j + 1) * patch] = low
            out.append(x - xp)
    return np.stack(out)


def _quantus_subsets(seed: int, n_runs: int, batch: int, n_features: int, size: int) -> np.ndarray:
    rs = np.random.RandomState(seed)
    out = []
    for _ in range(n_runs):
        out.append(np.stack([rs.choice(n_features, size, replace=False) for _ in range(batch)]))
        rs.uniform(0.0, 1.0, size=batch)
    return np.stack(out)


def test_agrees_with_quantus() -> None:
    torch = pytest.importorskip("torch")
    data = np.load(DATA)
    model = seeded_lenet(1)
    total = sum(p.detach().double().sum().item() for p in model.parameters())
    assert total == pytest.approx(float(data["checksum"]), rel=1e-12)
    x, y, raw, smap = data["x"], data["y"], data["raw"], data["smap"]
    # ROAD on a linear template classifier (the untrained LeNet's prediction never changes)
    weight = data["road_weight"]
    tmodel = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(weight.shape[1], 5)).eval()
    with torch.no_grad():
        tmodel[1].weight.copy_(torch.as_tensor(weight))
        tmodel[1].bias.zero_()
    fr = np.arange(1, 100, 2) / 100.0
    for noise in (0.0, 0.01):
        res = xk.evaluate.road(
            tmodel, data["road_x"], data["road_smap"], target=data["road_y"], fractions=fr, order="both",
            stdev=noise, seed=7,
        )  # fmt: skip
        for curve in (res.morf, res.lerf):
            assert curve is not None
            theirs = data[f"road_{curve.order}_noise{noise:g}"]
            assert len(set(theirs.tolist())) > 3  # the curve moves: a meaningful comparison
            np.testing.assert_allclose(curve.accuracy, theirs, atol=1e-5)
    order0 = np.argsort(-smap[0].ravel(), kind="stable")
    k = 0
    for noise in (0.0, 0.01):
        for p in (10, 50, 90):
            idx = order0[: int(1024 * p / 100)]
            img = x[0].reshape(1, -1).astype(np.float64).copy()
            img[:, idx] = impute(img, idx, 32, 32) + noise * np.random.RandomState(7).randn(1, len(idx))
            np.testing.assert_allclose(img.reshape(32, 32), data["imputed"][k], atol=1e-12)
            k += 1
    inf = xk.evaluate.infidelity(
        model, x, raw, target=y, perturbation=_cumulative_patches(x, 4), normalize=False
    )
    np.testing.assert_allclose(inf.scores, data["infidelity"], rtol=1e-5, atol=1e-5)
    sub = _quantus_subsets(7, 100, len(x), 1024, 224)
    fc = xk.evaluate.faithfulness_correlation(model, x, smap, target=y, subsets=sub, baseline="black")
    np.testing.assert_allclose(fc.scores, data["faithfulness_correlation"], atol=1e-5)
