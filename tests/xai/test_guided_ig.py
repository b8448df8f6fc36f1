"""Guided IG (``method="guided_ig"``): PAIR ``saliency`` agreement, closed forms, fusion invariants.

PAIR works one image at a time; xaikit advances every path of the batch (and of the noise
samples) together, one chunked gradient evaluation per step. Agreement with PAIR is checked per
image. PAIR 0.2.1 needs numpy 2's ``np.quantile(method=)`` for its ``interpolation=``:
``benchmarks._guided_ig.pair_numpy`` runs it with that one keyword renamed (and, for
``GetSmoothedMask``, with xaikit's seeded noise draws injected in order).
"""

from __future__ import annotations

import numpy as np
import pytest

import xaikit as xk
from benchmarks._guided_ig import pair_guided_ig, pair_numpy, torch_call_model
from tests.xai.models import analytic, analytic_f, cnn, cnn_weights, from_layout, images, model_for
from xaikit.backend import get_backend
from xaikit.errors import DegenerateMapWarning, XaikitTypeError, XaikitValueError
from xaikit.xai._engine.inputs import prepare
from xaikit.xai.gradient import guided_ig

pytest.importorskip("saliency.core")

#: (steps, fraction, max_dist): PAIR's defaults at fewer steps, uneven steps with the extremes
#: (every feature per pass, an unbounded path), the straight line, a middle case
SETTINGS = [(12, 0.25, 0.02), (7, 1.0, 1.0), (9, 0.1, 0.0), (5, 0.5, 1.0)]


def _torch_cnn(dtype: str = "float32", seed: int = 1, activation: str = "relu"):
    import torch

    model, layout = model_for("torch", seed=seed, activation=activation)
    return model.to(getattr(torch, dtype)), layout


def _keras_call(model):
    import saliency.core as sc
    import tensorflow as tf

    def call(xb, call_model_args=None, expected_keys=None):
        t = tf.convert_to_tensor(np.asarray(xb, dtype=np.float32))
        with tf.GradientTape() as tape:
            tape.watch(t)
            score = model(t, training=False)[:, int(call_model_args["target"])]
        return {sc.INPUT_OUTPUT_GRADIENTS: tape.gradient(score, t).numpy()}

    return call


# ---- agreement with PAIR ---------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize(("steps", "fraction", "max_dist"), SETTINGS)
def test_matches_pair_torch(
    rng: np.random.Generator, dtype: str, steps: int, fraction: float, max_dist: float
) -> None:
    """Per image equal to PAIR's GuidedIG.GetMask. A float64 model keeps float64 rows (so
    the gradients are PAIR's to the last bits); a float32 one agrees as closely: the chunked and
    the one-row gradients round alike here, and no quantile selection flips."""
    model, layout = _torch_cnn(dtype)
    x = layout(images(rng, batch=3)).astype(dtype)
    x[1] = 0.0  # an image equal to the baseline: zero attributions, no gradient needed
    targets = np.array([0, 3, 4])
    with pytest.warns(DegenerateMapWarning, match=r"1 of 3 maps are exactly 0.*equals the baseline"):
        ours = xk.xai.explain(
            model,
            x,
            targets,
            method="guided_ig",
            steps=steps,
            fraction=fraction,
            max_dist=max_dist,
            max_batch=3,
        )
    assert ours.dtype == np.dtype(dtype) and ours.shape == x.shape
    theirs = pair_guided_ig(model, x, targets, steps=steps, fraction=fraction, max_dist=max_dist)
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-5 * np.abs(theirs).max())
    assert np.all(ours[1] == 0)
    if dtype == "float64":
        np.testing.assert_allclose(ours, theirs, rtol=1e-10, atol=1e-12)


def test_matches_pair_with_a_baseline_array(rng: np.random.Generator) -> None:
    model, layout = _torch_cnn("float64")
    x = layout(images(rng, batch=3)).astype(np.float64)
    base = rng.random(x.shape)
    base[:, :, :4] = x[:, :, :4]  # features with no span stay at their baseline
    targets = np.array([2, 2, 0])
    ours = xk.xai.explain(model, x, targets, method="guided_ig", steps=15, baseline=base)
    theirs = pair_guided_ig(model, x, targets, steps=15, baseline=base)
    np.testing.assert_allclose(ours, theirs, rtol=1e-10, atol=1e-12)
    assert np.all(ours[:, :, :4] == 0)


def test_matches_pair_keras(rng: np.random.Generator) -> None:
    pytest.importorskip("tensorflow")
    model, _ = model_for("tf", seed=1)
    x = images(rng, batch=2)
    targets = np.array([1, 4])
    ours = xk.xai.explain(model, x, targets, method="guided_ig", steps=10, baseline="mean")
    base = np.broadcast_to(x.astype(np.float64).mean(axis=(1, 2), keepdims=True), x.shape)
    call = _keras_call(model)
    with pair_numpy() as sc:
        gig = sc.GuidedIG()
        theirs = np.stack(
            [
                gig.GetMask(x[i], call, {"target": int(targets[i])}, x_baseline=base[i], x_steps=10)
                for i in range(len(x))
            ]
        )
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-5 * np.abs(theirs).max())


@pytest.mark.parametrize("magnitude", [True, False])
def test_smoothed_matches_pair_with_the_same_noise(rng: np.random.Generator, magnitude: bool) -> None:
    """SmoothGrad over Guided IG == PAIR's GetSmoothedMask when PAIR's np.random.normal returns
    xaikit's draws: noise sample s of image b is ``noisy_inputs(inp, sigma, seed, s)[b] - x[b]``
    (xaikit's SmoothGrad stream), handed to PAIR in the order it asks (s = 0, 1, ... per image).
    PAIR's requested standard deviation is xaikit's sigma."""
    import torch

    model, layout = _torch_cnn("float64")
    x = layout(images(rng, batch=3)).astype(np.float64)
    targets = np.array([0, 1, 2])
    S, seed, spread = 3, 7, 0.2
    ours = xk.xai.explain(
        model, x, targets, method="guided_ig", steps=10, nsamples=S, stdev_spread=spread,
        magnitude=magnitude, seed=seed,
    )  # fmt: skip
    bk = get_backend(model)
    inp = prepare(bk, model, [torch.as_tensor(x)], ["x"])
    sigma = spread * (bk.sample_max(inp.tensors[0]) - bk.sample_min(inp.tensors[0]))
    noisy = [bk.to_numpy(guided_ig.noisy_inputs(inp, sigma, seed, s)) for s in range(S)]
    call = torch_call_model(model)
    theirs = []
    for b in range(len(x)):
        draws = [noisy[s][b] - x[b] for s in range(S)]
        with pair_numpy(draws) as sc:
            theirs.append(
                sc.GuidedIG().GetSmoothedMask(
                    x[b],
                    call,
                    {"target": int(targets[b])},
                    stdev_spread=spread,
                    nsamples=S,
                    magnitude=magnitude,
                    x_steps=10,
                )
            )
            from saliency.core import base as pair_base

            assert pair_base.np._draws == []  # every draw was used
    theirs_arr = np.stack(theirs)
    # PAIR sums the noisy masks in float32
    np.testing.assert_allclose(ours, theirs_arr, rtol=1e-5, atol=1e-6 * np.abs(theirs_arr).max())
    assert not np.allclose(ours, xk.xai.explain(model, x, targets, method="guided_ig", steps=10))


# ---- closed forms ------------------------------------------------------------------------------
@pytest.mark.parametrize(("steps", "fraction", "max_dist"), [*SETTINGS, (1, 0.25, 0.02), (200, 0.25, 0.02)])
def test_linear_model_gives_integrated_gradients(
    framework: str, rng: np.random.Generator, steps: int, fraction: float, max_dist: float
) -> None:
    """A constant gradient makes every path give (x - baseline) * w, whatever it chooses."""
    w = rng.normal(size=(3, 10))
    x = rng.uniform(-1, 1, size=(4, 10)).astype(np.float32)
    targets = np.array([0, 2, 1, 2])
    model = analytic(framework, "linear", w)
    base = rng.uniform(-1, 1, size=10)
    attr, delta = xk.xai.explain(
        model, x, targets, method="guided_ig", steps=steps, fraction=fraction, max_dist=max_dist,
        baseline=base, return_delta=True,
    )  # fmt: skip
    expected = (x.astype(np.float64) - base) * np.asarray(w, dtype=np.float32).astype(np.float64)[targets]
    np.testing.assert_allclose(attr, expected, rtol=1e-5, atol=1e-6)
    assert delta.dtype == np.float64 and delta.shape == (4,)
    np.testing.assert_allclose(delta, 0.0, atol=1e-5)


def test_completeness_on_a_smooth_model(framework: str, rng: np.random.Generator) -> None:
    """delta = sum(attributions) - (f(x) - f(baseline)), from the model's own scores; it shrinks
    as the steps grow, to about 1% of the score change at 200 steps on a sin model."""
    w = rng.normal(size=(3, 12))
    x = rng.uniform(-1.5, 1.5, size=(3, 12)).astype(np.float32)
    targets = np.array([1, 0, 2])
    model = analytic(framework, "sin", w)
    gaps = analytic_f("sin", w, x.astype(np.float64), targets)  # f(0) = 0
    errors = []
    for steps in (10, 200):
        attr, delta = xk.xai.explain(
            model, x, targets, method="guided_ig", steps=steps, return_delta=True, framework=framework
        )
        total = attr.astype(np.float64).sum(axis=1)
        np.testing.assert_allclose(delta, total - gaps, rtol=1e-4, atol=1e-5)
        errors.append(np.abs(delta) / np.abs(gaps))
    assert np.all(errors[1] < 0.02) and np.all(errors[1] < errors[0])


def test_completeness_on_a_smooth_cnn_with_noise(rng: np.random.Generator) -> None:
    """With noise (magnitude=False), delta compares with the mean over noise samples of
    f(noisy x) - f(baseline): a softplus CNN in float64 keeps it within 2.5% at 60 steps (it
    was about 2% at 50, 1% at 100, 0.5% at 200 when measured), and fewer steps do worse."""
    import torch

    model, layout = _torch_cnn("float64", activation="softplus")
    x = layout(images(rng, batch=2)).astype(np.float64)
    with torch.no_grad():
        gap = (model(torch.as_tensor(x)) - model(torch.zeros_like(torch.as_tensor(x))))[[0, 1], [0, 1]]
    errors = []
    for steps in (15, 60):
        _, delta = xk.xai.explain(
            model, x, [0, 1], method="guided_ig", steps=steps, nsamples=2, magnitude=False, return_delta=True
        )
        errors.append(np.abs(delta) / np.abs(gap.numpy()))
    assert np.all(errors[1] < 0.025) and np.all(errors[1] < errors[0])
    # magnitude (the default with noise) squares: no delta, and asking for one says so
    with pytest.raises(
        xk.XaikitValueError, match=r"Guided IG \(guided_ig\) has no completeness delta.*magnitude=False"
    ):
        xk.xai.explain(model, x, [0, 1], method="guided_ig", steps=5, nsamples=2, return_delta=True)
    squared = xk.xai.explain(model, x, [0, 1], method="guided_ig", steps=5, nsamples=2)
    assert np.all(squared >= 0)


def test_input_equal_to_baseline_gives_zeros(framework: str) -> None:
    model, layout = model_for(framework, seed=0)
    x = layout(np.zeros((2, 12, 12, 3), dtype=np.float32))
    with pytest.warns(DegenerateMapWarning, match=r"2 of 2 maps are exactly 0.*equals the baseline"):
        attr, delta = xk.xai.explain(model, x, [0, 1], method="guided_ig", steps=5, return_delta=True)
    assert np.all(attr == 0) and np.all(np.isfinite(delta)) and np.allclose(delta, 0)
    base = layout(images(np.random.default_rng(3), batch=2))
    # the same model, method and status: not said again (the suite turns warnings into errors)
    attr = xk.xai.explain(model, base, [0, 1], method="guided_ig", steps=5, baseline=base)
    assert np.all(attr == 0)


# ---- frameworks, chunking, reproducibility, model state ------------------------------------------------
def test_torch_equals_keras_on_copied_weights(rng: np.random.Generator) -> None:
    """The same CNN in both frameworks (noise is drawn by each framework's own generator, so
    this compares the plain method)."""
    pytest.importorskip("tensorflow")
    weights = cnn_weights(2)
    x = images(rng, batch=3)
    targets = np.array([3, 1, 0])
    out = {}
    for fw in ("torch", "tf"):
        model = cnn(fw, weights, activation="softplus")
        xin = x if fw == "tf" else np.ascontiguousarray(x.transpose(0, 3, 1, 2))
        a = xk.xai.explain(model, xin, targets, method="guided_ig", steps=15, baseline="black")
        out[fw] = from_layout(fw, a)
    np.testing.assert_allclose(out["torch"], out["tf"], rtol=1e-4, atol=1e-4 * np.abs(out["tf"]).max())


def test_chunked_equals_unchunked_and_groups(rng: np.random.Generator) -> None:
    """max_batch 1, 3 and auto, and paths run in groups (a tiny memory budget), give the same
    bits on a float64 model; with noise too (B = 3, S = 2: groups cross noise samples)."""
    model, layout = _torch_cnn("float64")
    x = layout(images(rng, batch=3)).astype(np.float64)
    kw = {"method": "guided_ig", "steps": 8, "nsamples": 2, "seed": 5, "magnitude": False}
    ref = xk.xai.explain(model, x, [0, 1, 2], max_batch="auto", **kw)
    for mb in (1, 3):
        np.testing.assert_array_equal(xk.xai.explain(model, x, [0, 1, 2], max_batch=mb, **kw), ref)
    per_path = int(np.prod(x.shape[1:])) * 8 * guided_ig._HOST_ARRAYS
    assert guided_ig._group_rows(6, int(np.prod(x.shape[1:])), 2 * per_path) == 2
    grouped = xk.xai.explain(model, x, [0, 1, 2], memory_budget=2 * per_path, **kw)
    np.testing.assert_array_equal(grouped, ref)
    # float32: the chunking changes nothing beyond float32 rounding either
    m32, _ = _torch_cnn("float32")
    x32 = x.astype(np.float32)
    a1 = xk.xai.explain(m32, x32, [0, 1, 2], max_batch=1, **kw)
    np.testing.assert_allclose(xk.xai.explain(m32, x32, [0, 1, 2], **kw), a1, rtol=1e-5, atol=1e-7)


def test_seeded_and_reproducible(rng: np.random.Generator) -> None:
    model, layout = _torch_cnn()
    x = layout(images(rng, batch=2))
    kw = {"method": "guided_ig", "steps": 6, "nsamples": 3}
    a = xk.xai.explain(model, x, seed=11, **kw)
    np.testing.assert_array_equal(xk.xai.explain(model, x, seed=11, **kw), a)
    assert not np.allclose(xk.xai.explain(model, x, seed=12, **kw), a)


def test_model_state_is_unchanged(framework: str, rng: np.random.Generator) -> None:
    model, layout = model_for(framework, seed=0)
    x = layout(images(rng, batch=2))
    if framework == "torch":
        import torch

        model.train()
        before = {k: v.clone() for k, v in model.state_dict().items()}
        xk.xai.explain(model, x, method="guided_ig", steps=4, nsamples=2)
        assert model.training and all(m.training for m in model.modules())
        assert all(torch.equal(v, model.state_dict()[k]) for k, v in before.items())
        assert all(p.grad is None for p in model.parameters())
    else:
        before = [w.copy() for w in model.get_weights()]
        xk.xai.explain(model, x, method="guided_ig", steps=4, nsamples=2)
        for w0, w1 in zip(before, model.get_weights()):
            np.testing.assert_array_equal(w0, w1)


# ---- the explain() route ---------------------------------------------------------------------------
def test_channel_last_input_to_a_channel_first_model(rng: np.random.Generator) -> None:
    model, layout = _torch_cnn()
    x = images(rng, batch=3)  # channel-last
    moved = xk.xai.explain(model, x, [0, 1, 2], method="guidedig", steps=6, baseline="blur")
    direct = xk.xai.explain(
        model, layout(x), [0, 1, 2], method="guided_integrated_gradients", steps=6, baseline="blur"
    )
    assert moved.shape == x.shape
    np.testing.assert_allclose(moved, from_layout("torch", direct), rtol=1e-6, atol=1e-9)


def test_per_sample_model_kwargs_follow_the_rows(rng: np.random.Generator) -> None:
    """A per-sample forward argument reaches every row of its sample, noise copies included
    (zero noise: each copy is the plain path, so the batch equals one call per sample)."""
    import torch

    class Scaled(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net, _ = model_for("torch", seed=4, activation="softplus")

        def forward(self, x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
            return self.net(x * scale[:, None, None, None])

    model = Scaled()
    x = images(rng, batch=3).transpose(0, 3, 1, 2).copy()
    scale = torch.tensor([0.5, 1.0, 2.0])
    kw = {"method": "guided_ig", "steps": 6, "nsamples": 3, "stdev_spread": 0.0, "magnitude": False}
    batch = xk.xai.explain(model, x, [0, 1, 2], model_kwargs={"scale": scale}, max_batch=4, **kw)
    for b in range(3):
        one = xk.xai.explain(model, x[b : b + 1], [b], model_kwargs={"scale": scale[b : b + 1]}, **kw)
        np.testing.assert_allclose(batch[b : b + 1], one, rtol=1e-5, atol=1e-7)


def test_bad_options_are_refused_by_name() -> None:
    import torch

    model = torch.nn.Linear(4, 2)
    x = np.ones((2, 4), dtype=np.float32)
    with pytest.raises(XaikitTypeError, match=r"unknown option\(s\) \['nintegration'\].*steps, fraction"):
        xk.xai.explain(model, x, method="guided_ig", nintegration=3)
    cases = [
        ({"steps": 0}, XaikitValueError, "steps"),
        ({"steps": 2.5}, XaikitValueError, "steps"),
        ({"fraction": 1.5}, XaikitValueError, "fraction"),
        ({"max_dist": -0.1}, XaikitValueError, "max_dist"),
        ({"nsamples": 0}, XaikitValueError, "nsamples"),
        ({"stdev_spread": -1.0}, XaikitValueError, "stdev_spread"),
        ({"magnitude": "yes"}, XaikitTypeError, "magnitude"),
        ({"baseline": "uniform"}, XaikitValueError, "baseline must be one of 'zeros'"),
        ({"baseline": np.ones(3)}, XaikitValueError, "baseline for input 'x' must broadcast"),
        ({"baseline": np.full(4, np.nan)}, XaikitValueError, "baseline.* must hold finite"),
    ]
    for opts, kind, msg in cases:
        with pytest.raises(kind, match=msg):
            xk.xai.explain(model, x, method="guided_ig", **opts)

    class Two(torch.nn.Module):
        def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
            return a + b

    with pytest.raises(XaikitValueError, match=r"one input; got 2 model inputs.*model_kwargs"):
        xk.xai.explain(Two(), [x, x], method="guided_ig")


def test_lower_quantile_index_is_numpys() -> None:
    """The per-path threshold is numpy's 'lower' quantile, by np.partition at numpy's index."""
    values = np.random.default_rng(0).standard_normal((4, 97))
    values[:, :10] = np.inf  # features at their upper limit
    for n in (1, 2, 3, 10, 97, 432, 1000):
        for q in (0.0, 0.1, 0.25, 1 / 3, 0.5, 0.7, 0.99, 1.0):
            k = guided_ig.lower_index(n, q)
            assert k == int(np.quantile(np.arange(n), q, method="lower"))
    k = guided_ig.lower_index(97, 0.25)
    np.testing.assert_array_equal(
        np.partition(values, k, axis=1)[:, k], np.quantile(values, 0.25, axis=1, method="lower")
    )


def test_paths_that_cannot_move_end_their_step() -> None:
    """NaN gradients select nothing (PAIR loops forever there): every step still ends, and
    the paths whose gradients are finite are unaffected by the others."""
    x_in = np.array([[1.0, 2.0, 3.0], [1.0, -1.0, 0.5]])
    w = np.array([0.5, -1.0, 2.0])

    def grad_fn(points: np.ndarray, rows: np.ndarray) -> np.ndarray:
        g = np.repeat(w[None], len(rows), axis=0)
        g[rows == 0] = np.nan
        return g

    attr = guided_ig.guided_paths(x_in, np.zeros_like(x_in), grad_fn, steps=5)
    assert np.all(np.isnan(attr[0]))
    np.testing.assert_allclose(attr[1], x_in[1] * w, rtol=1e-12)


@pytest.mark.parametrize(("steps", "fraction", "max_dist"), SETTINGS)
def test_threads_share_the_paths_with_the_same_bits(steps: int, fraction: float, max_dist: float) -> None:
    """A step's selection is split over threads by paths (``workers``): any count gives the
    same bits as one thread, with paths whose inner loops end at different passes (ties, a
    constant path, features with no span), and each path equals its own single-path run."""
    rng = np.random.default_rng(7)
    n, d = 5, 97
    x_in, base = rng.random((n, d)), rng.random((n, d)) * 0.3
    base[2] = x_in[2]  # a constant path: no gradient call, zeros
    base[:, :4] = x_in[:, :4]  # features with no span
    w = rng.standard_normal((n, d))
    w[:, ::5] = 0.0  # ties at the threshold

    def grad_fn(points: np.ndarray, rows: np.ndarray) -> np.ndarray:
        return w[rows] * np.cos(3 * points) + points**2

    one = guided_ig.guided_paths(x_in, base, grad_fn, steps, fraction, max_dist, workers=1)
    assert np.all(one[2] == 0) and np.abs(one).sum() > 0
    for workers in (2, 3, 8, None):
        got = guided_ig.guided_paths(x_in, base, grad_fn, steps, fraction, max_dist, workers=workers)
        np.testing.assert_array_equal(got, one)
    for i in (0, 4):
        alone = guided_ig.guided_paths(
            x_in[i : i + 1], base[i : i + 1], lambda p, r, i=i: grad_fn(p, r + i), steps, fraction, max_dist
        )
        np.testing.assert_array_equal(alone[0], one[i])
