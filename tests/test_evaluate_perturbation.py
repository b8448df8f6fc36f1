"""Deletion and insertion curves against closed-form answers, in both frameworks."""

from __future__ import annotations

import numpy as np
import pytest

import xaikit as xk
from tests.evaluate_models import SIZE, contributions, layout, linear, square_weights, weights_of
from xaikit.errors import XaikitTypeError, XaikitValueError
from xaikit.evaluate.perturbation import baseline_values, pixel_counts, rank_positions


def _setup(framework: str, rng: np.random.Generator, batch: int = 4):
    w = square_weights(rng)
    x = rng.uniform(0.1, 1.0, size=(batch, SIZE, SIZE, 3)).astype(np.float32)
    return w, x, linear(framework, w)


def _expected_curve(contrib: np.ndarray, rank: np.ndarray, counts: np.ndarray, base_contrib: np.ndarray):
    """Score after deleting the ``counts[k]`` best-ranked pixels: kept pixels contribute their own
    value, deleted ones the baseline's."""
    out = np.empty((contrib.shape[0], len(counts)))
    for k, n in enumerate(counts):
        deleted = rank < n
        out[:, k] = np.where(deleted, base_contrib, contrib).reshape(contrib.shape[0], -1).sum(axis=1)
    return out


def test_pixel_counts_and_ranks() -> None:
    assert pixel_counts(64, 4).tolist() == [0, 16, 32, 48, 64]
    assert pixel_counts(10, 3).tolist() == [0, 3, 7, 10]  # 3.33 -> 3, 6.67 -> 7
    assert pixel_counts(5, 10).tolist() == [0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5]
    smap = np.array([[[0.1, 0.9], [0.5, 0.3]]])
    assert rank_positions(smap, seed=0).tolist() == [[[3, 0], [1, 2]]]


def test_deletion_is_exact_for_a_linear_model(framework: str, rng: np.random.Generator) -> None:
    w, x, model = _setup(framework, rng)
    target = np.zeros(len(x), dtype=np.int64)
    sal = xk.xai.explain(model, layout(framework, x), target=target, method="vanilla")
    d = xk.evaluate.deletion(model, layout(framework, x), sal, target=target, steps=4, baseline="zeros")
    f = contributions(w, x, 0).reshape(len(x), -1).sum(axis=1)
    # the square's 12 pixels go first (steps of 16 pixels): the score hits f(0) = 0 at step 1
    np.testing.assert_allclose(d.scores[:, 0], f, rtol=1e-5)
    np.testing.assert_allclose(d.scores[:, 1:], 0.0, atol=1e-5)
    np.testing.assert_allclose(d.fractions, [0, 0.25, 0.5, 0.75, 1.0])
    np.testing.assert_allclose(d.auc, f * 0.25 / 2, rtol=1e-5)
    assert d.targets.tolist() == [0] * len(x)


def test_deletion_curve_step_by_step(framework: str, rng: np.random.Generator) -> None:
    w, x, model = _setup(framework, rng)
    sal = np.abs(w[0]).sum(axis=-1)[None].repeat(len(x), axis=0)  # (B, H, W), distinct values
    for kind, baseline in [("deletion", "black"), ("insertion", "mean"), ("deletion", "blur")]:
        fn = getattr(xk.evaluate, kind)
        res = fn(model, layout(framework, x), sal, target=0, steps=16, baseline=baseline)
        counts = pixel_counts(SIZE * SIZE, 16)
        rank = rank_positions(sal, seed=0)
        base = baseline_values(x, baseline, channel_axis=3)
        c, cb = contributions(w, x, 0), contributions(w, base, 0)
        expected = (
            _expected_curve(c, rank, counts, cb)
            if kind == "deletion"
            else _expected_curve(cb, rank, counts, c)
        )
        np.testing.assert_allclose(res.scores, expected, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(
            res.auc, np.trapezoid(expected, counts / 64.0, axis=1), rtol=1e-4, atol=1e-4
        )
    # the deletion curve of an exact map is steep: 12 of 64 pixels (3 steps of 4) remove everything
    d = xk.evaluate.deletion(model, layout(framework, x), sal, target=0, steps=16, baseline="zeros")
    assert np.all(np.diff(d.scores[:, :4], axis=1) < 0)
    np.testing.assert_allclose(d.scores[:, 3:], 0.0, atol=1e-5)


def test_insertion_of_the_exact_map_restores_the_score_at_once(
    framework: str, rng: np.random.Generator
) -> None:
    w, x, model = _setup(framework, rng)
    sal = xk.xai.explain(model, layout(framework, x), target=0, method="vanilla")
    ins = xk.evaluate.insertion(model, layout(framework, x), sal, target=0, steps=4, baseline="zeros")
    f = contributions(w, x, 0).reshape(len(x), -1).sum(axis=1)
    np.testing.assert_allclose(ins.scores[:, 0], 0.0, atol=1e-5)
    np.testing.assert_allclose(ins.scores[:, 1:], f[:, None].repeat(4, axis=1), rtol=1e-5)
    np.testing.assert_allclose(ins.auc, f * (0.75 + 0.125), rtol=1e-5)
    np.testing.assert_allclose(ins.curve_mean, ins.scores.mean(axis=0))


def test_auc_against_hand_computed_values() -> None:
    import torch

    # f(x) = sum(x) on 1x1x2 "images": with a zeros baseline the curve is known exactly
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(2, 1, bias=False))
    with torch.no_grad():
        model[1].weight.fill_(1.0)
    x = np.array([[[[3.0, 1.0]]]], dtype=np.float32)  # (1, 1, 1, 2): C=1, H=1, W=2
    d = xk.evaluate.deletion(model, x, np.array([[[5.0, 2.0]]]), target=0, steps=2, baseline="zeros")
    assert d.scores.tolist() == [[4.0, 1.0, 0.0]]
    assert d.auc.tolist() == [(4 + 1) / 2 * 0.5 + (1 + 0) / 2 * 0.5]
    d = xk.evaluate.deletion(model, x, np.array([[[2.0, 5.0]]]), target=0, steps=2, baseline="zeros")
    assert d.scores.tolist() == [[4.0, 3.0, 0.0]]
    assert d.auc.tolist() == [(4 + 3) / 2 * 0.5 + 3 / 2 * 0.5]
    i = xk.evaluate.insertion(
        model, x, np.array([[[5.0, 2.0]]]), target=0, steps=2, baseline=np.float32(-1.0)
    )
    assert i.scores.tolist() == [[-2.0, 2.0, 4.0]]
    assert i.auc_mean == pytest.approx(0.0 + 1.5)


def test_constant_map_is_random_order_in_expectation(framework: str, rng: np.random.Generator) -> None:
    w, x1, model = _setup(framework, rng, batch=1)
    x = np.repeat(x1, 300, axis=0)  # every copy breaks the ties of the constant map differently
    d = xk.evaluate.deletion(
        model, layout(framework, x), np.ones((300, SIZE, SIZE)), target=1, steps=8, baseline="zeros"
    )
    assert len({tuple(np.round(s, 4)) for s in d.scores}) > 250  # different orders
    total = contributions(w, x1, 1).sum()
    expected = total * (1.0 - pixel_counts(64, 8) / 64.0)
    spread = np.abs(contributions(w, x1, 1)).max() * 8 / np.sqrt(300)
    np.testing.assert_allclose(d.curve_mean, expected, atol=spread)
    np.testing.assert_allclose(d.auc.mean(), total / 2, atol=spread)


def test_chunked_equals_unchunked(framework: str, rng: np.random.Generator) -> None:
    _w, x, model = _setup(framework, rng, batch=5)
    sal = rng.random((5, SIZE, SIZE))
    ref = xk.evaluate.deletion(model, layout(framework, x), sal, steps=6, max_batch=1000)
    assert ref.chunks == [35]
    for chunk in (1, 4, 7, 34):
        res = xk.evaluate.deletion(model, layout(framework, x), sal, steps=6, max_batch=chunk)
        np.testing.assert_allclose(res.scores, ref.scores, rtol=1e-6, atol=1e-6)
        assert len(res.chunks) == -(-35 // chunk) and sum(res.chunks) == 35  # never one pass per step


def test_saliency_layouts_are_equivalent(framework: str, rng: np.random.Generator) -> None:
    _w, x, model = _setup(framework, rng, batch=2)
    raw = rng.normal(size=(2, SIZE, SIZE, 3))
    xs = layout(framework, x)
    full = raw if framework == "tf" else raw.transpose(0, 3, 1, 2)
    ref = xk.evaluate.deletion(model, xs, full, steps=5)
    assert ref.rank == "signed"  # a signed map: channels summed with their signs
    for spatial, rank in ((raw.sum(axis=-1), "auto"), (np.abs(raw).sum(axis=-1), "magnitude")):
        if rank == "magnitude":
            ref = xk.evaluate.deletion(model, xs, full, steps=5, rank="magnitude")
        for variant in (spatial, spatial[..., None], spatial[:, None]):
            res = xk.evaluate.deletion(model, xs, variant, steps=5, rank=rank)
            np.testing.assert_array_equal(res.scores, ref.scores)
    # a method name computes the maps first
    by_name = xk.evaluate.deletion(model, xs, "vanilla", steps=5)
    grads = xk.xai.explain(model, xs, method="vanilla")
    np.testing.assert_array_equal(xk.evaluate.deletion(model, xs, grads, steps=5).scores, by_name.scores)


def test_targets_default_to_predictions_and_model_is_untouched(
    framework: str, rng: np.random.Generator
) -> None:
    w, x, model = _setup(framework, rng)
    before = weights_of(framework, model)
    d = xk.evaluate.deletion(model, layout(framework, x), rng.random((4, SIZE, SIZE)), steps=3)
    logits = np.einsum("chwk,bhwk->bc", w.astype(np.float64), x.astype(np.float64))
    assert d.targets.tolist() == logits.argmax(axis=1).tolist()
    np.testing.assert_allclose(d.scores[:, 0], logits.max(axis=1), rtol=1e-5)
    for a, b in zip(before, weights_of(framework, model)):
        np.testing.assert_array_equal(a, b)


def _mixed_sign_setup(framework: str, rng: np.random.Generator, batch: int = 6):
    w = rng.normal(size=(2, SIZE, SIZE, 3)).astype(np.float32)  # evidence for and against class 0
    x = rng.uniform(0.1, 1.0, size=(batch, SIZE, SIZE, 3)).astype(np.float32)
    return w, x, linear(framework, w)


def test_signed_ranking_of_the_exact_signed_map(framework: str, rng: np.random.Generator) -> None:
    w, x, model = _mixed_sign_setup(framework, rng)
    xs = layout(framework, x)
    exact = w[0][None] * x  # w * x: the exact attribution of a linear model, channel-last
    exact = exact if framework == "tf" else exact.transpose(0, 3, 1, 2)
    contrib = contributions(w, x, 0)
    counts = pixel_counts(SIZE * SIZE, 16)
    signed = xk.evaluate.deletion(model, xs, exact, target=0, steps=16, baseline="zeros")
    assert signed.rank == "signed"  # "auto" on a map with negative values
    np.testing.assert_array_equal(
        signed.scores,
        xk.evaluate.deletion(model, xs, exact, target=0, steps=16, baseline="zeros", rank="signed").scores,
    )
    expected = _expected_curve(contrib, rank_positions(contrib, seed=0), counts, np.zeros_like(contrib))
    np.testing.assert_allclose(signed.scores, expected, rtol=1e-4, atol=1e-4)
    magnitude = xk.evaluate.deletion(model, xs, exact, target=0, steps=16, baseline="zeros", rank="magnitude")
    assert magnitude.rank == "magnitude"
    randoms = [
        xk.evaluate.deletion(
            model, xs, rng.random((len(x), SIZE, SIZE)), target=0, steps=16, baseline="zeros"
        )
        for _ in range(5)
    ]
    # positive evidence first is the steepest possible fall: below any other order at every step
    for other in (magnitude, *randoms):
        assert np.all(signed.scores <= other.scores + 1e-4)
        assert np.all(signed.auc < other.auc)
    assert signed.auc_mean < min(r.auc_mean for r in randoms)
    # insertion puts the positive evidence back first: above any other order
    ins = xk.evaluate.insertion(model, xs, exact, target=0, steps=16, baseline="zeros")
    ins_mag = xk.evaluate.insertion(model, xs, exact, target=0, steps=16, baseline="zeros", rank="magnitude")
    assert ins.rank == "signed" and np.all(ins.scores >= ins_mag.scores - 1e-4)


def test_magnitude_ranking_reproduces_the_old_order(framework: str, rng: np.random.Generator) -> None:
    w, x, model = _mixed_sign_setup(framework, rng, batch=3)
    xs = layout(framework, x)
    raw = rng.normal(size=(3, SIZE, SIZE, 3))
    full = raw if framework == "tf" else raw.transpose(0, 3, 1, 2)
    for kind, baseline in (("deletion", "black"), ("insertion", "blur")):
        fn = getattr(xk.evaluate, kind)
        res = fn(model, xs, full, target=0, steps=8, baseline=baseline, rank="magnitude")
        # before rank= existed: channels summed by magnitude, the largest first
        old_rank = rank_positions(np.abs(raw).sum(axis=-1), seed=0)
        c = contributions(w, x, 0)
        cb = contributions(w, baseline_values(x, baseline, channel_axis=3), 0)
        counts = pixel_counts(SIZE * SIZE, 8)
        expected = (
            _expected_curve(c, old_rank, counts, cb)
            if kind == "deletion"
            else _expected_curve(cb, old_rank, counts, c)
        )
        np.testing.assert_allclose(res.scores, expected, rtol=1e-4, atol=1e-4)
        # a non-negative map: "auto" is magnitude, and all three orders agree exactly
        smap = np.abs(raw).sum(axis=-1)
        by_rank = [
            fn(model, xs, smap, target=0, steps=8, baseline=baseline, rank=r)
            for r in ("auto", "signed", "magnitude")
        ]
        assert by_rank[0].rank == "magnitude"
        for other in by_rank[1:]:
            np.testing.assert_array_equal(other.scores, by_rank[0].scores)
        np.testing.assert_array_equal(by_rank[0].scores, res.scores)


def test_bad_inputs(framework: str, rng: np.random.Generator) -> None:
    _w, x, model = _setup(framework, rng, batch=2)
    xs, sal = layout(framework, x), rng.random((2, SIZE, SIZE))
    for steps in (0, -3):
        with pytest.raises(XaikitValueError, match=r"steps must be an int >= 1; got"):
            xk.evaluate.deletion(model, xs, sal, steps=steps)
    for steps in (2.5, True):
        with pytest.raises(XaikitValueError, match=r"steps must be an int >= 1"):
            xk.evaluate.insertion(model, xs, sal, steps=steps)
    with pytest.raises(
        XaikitValueError,
        match=r"baseline must be one of 'zeros', 'black', 'mean', 'blur' or an array; got 'white'",
    ):
        xk.evaluate.deletion(model, xs, sal, baseline="white")
    with pytest.raises(XaikitValueError, match=r"baseline must be one of .* got NoneType None"):
        xk.evaluate.insertion(model, xs, sal, baseline=None)
    with pytest.raises(XaikitValueError, match=r"baseline for input 'x' must broadcast to the input's shape"):
        xk.evaluate.deletion(model, xs, sal, baseline=np.zeros((5, 5)))
    with pytest.raises(
        XaikitValueError, match=r"saliency must have shape \(2, 8, 8\).*got ndarray of shape \(2, 7, 8\)"
    ):
        xk.evaluate.deletion(model, xs, sal[:, :7])
    with pytest.raises(
        XaikitValueError, match=r"saliency must have one map per sample.*got ndarray of shape \(3, 8, 8\)"
    ):
        xk.evaluate.deletion(model, xs, rng.random((3, SIZE, SIZE)))
    with pytest.raises(XaikitValueError, match=r"saliency must have shape.*channel axis of size 1 or 3"):
        xk.evaluate.deletion(model, xs, rng.random((2, SIZE, SIZE, 2)))
    with pytest.raises(XaikitValueError, match=r"saliency holds NaN"):
        xk.evaluate.deletion(model, xs, np.full((2, SIZE, SIZE), np.nan))
    with pytest.raises(
        XaikitValueError, match=r"saliency must be maps or a method name .*'rise', 'lrp'.*\); got 'gradkam'"
    ):
        xk.evaluate.deletion(model, xs, "gradkam")
    with pytest.raises(
        XaikitValueError, match=r"method_options \['nsamples'\] apply only when saliency is a method"
    ):
        xk.evaluate.deletion(model, xs, rng.random((2, SIZE, SIZE)), method_options={"nsamples": 2})
    with pytest.raises(
        XaikitValueError, match=r"rank must be one of 'auto', 'signed', 'magnitude'; got 'abs'"
    ):
        xk.evaluate.deletion(model, xs, sal, rank="abs")
    with pytest.raises(XaikitValueError, match=r"rank must be one of .* got NoneType None"):
        xk.evaluate.insertion(model, xs, sal, rank=None)
    with pytest.raises(XaikitValueError, match=r"max_batch must be 'auto' or an int >= 1; got int 0"):
        xk.evaluate.deletion(model, xs, sal, max_batch=0)
    with pytest.raises(XaikitValueError, match=r"target classes must lie in \[0, 2\]"):
        xk.evaluate.deletion(model, xs, sal, target=7)
    with pytest.raises(XaikitTypeError, match=r"saliency must be an array or tensor; got NoneType None"):
        xk.evaluate.deletion(model, xs, None)
    with pytest.raises(
        XaikitTypeError, match=r"x must be one input batch .* several inputs are not supported"
    ):
        xk.evaluate.deletion(model, [xs, xs], sal)
    with pytest.raises(XaikitTypeError, match=r"x must be one input batch"):
        xk.evaluate.randomization_test(model, [xs])


def test_tabular_inputs_and_tensor_arguments(framework: str, rng: np.random.Generator) -> None:
    from tests.xai.models import analytic

    w = rng.normal(size=(3, 6))
    x = rng.uniform(0.5, 1.5, size=(4, 6)).astype(np.float32)
    model = analytic(framework, "linear", w)
    sal = np.abs(w[[2]]).repeat(4, axis=0)  # features ranked by |w_2|
    if framework == "torch":
        import torch

        xs, ss = torch.as_tensor(x), torch.as_tensor(sal)
    else:
        import tensorflow as tf

        xs, ss = tf.constant(x), tf.constant(sal)
    d = xk.evaluate.deletion(model, xs, ss, target=2, steps=3, baseline="zeros", framework=framework)
    order = np.argsort(-np.abs(w[2]))
    contrib = w[2] * x.astype(np.float64)
    expected = [contrib.sum(axis=1) - contrib[:, order[: 2 * k]].sum(axis=1) for k in range(4)]
    np.testing.assert_allclose(d.scores, np.stack(expected, axis=1), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(d.fractions, [0, 1 / 3, 2 / 3, 1])
