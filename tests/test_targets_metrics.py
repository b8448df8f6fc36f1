"""Target objects (``xk.targets``) through every metric of ``xk.evaluate``: a metric scores the
same thing the explanation explains (the issue's "a faithfulness score of a segmentation map
must be the score of the same region").

The matrix checks each metric with a target object against the same metric on a wrapped model
whose one output per row *is* that object's score (class 0 of a (B,) output): the two must agree
for every kind (a region with a mask and with ``mask=None``, an output unit, a similarity, a
callable), and ``Class(k)`` must equal ``target=k`` bit for bit. Analytic checks on a 1x1
convolution segmenter (deleting a region's pixels lowers its score by exactly their
contribution; infidelity of the exact region gradient is 0; Integrated Gradients' completeness
delta is 0), torch and Keras on the same weights, and a two-region segmenter whose region-A map
scores differently against region A than against the argmax class, as computed by hand."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import xaikit as xk
from xaikit.errors import XaikitValueError

torch = pytest.importorskip("torch")
ev = xk.evaluate
T = xk.targets

C, K, H, W, B, D = 3, 4, 8, 8, 2, 5
MASK = np.zeros((H, W), dtype=bool)
MASK[2:6, 1:5] = True


_Module: Any = torch.nn.Module  # torch comes from importorskip: a value, not a module mypy sees


class Wrapped(_Module):
    """``net`` followed by ``score``: one output per row, the target object's score."""

    def __init__(self, net: Any, score: Callable[[Any], Any]) -> None:
        super().__init__()
        self.net = net
        self.score = score

    def forward(self, x: Any) -> Any:
        return self.score(self.net(x))


def _segmenter() -> Any:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv2d(C, 6, 1), torch.nn.Tanh(), torch.nn.Conv2d(6, K, 1)).eval()


def _embedder() -> Any:
    torch.manual_seed(1)
    return torch.nn.Sequential(
        torch.nn.Conv2d(C, 6, 1), torch.nn.Tanh(), torch.nn.Conv2d(6, D, 1), torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
    ).eval()  # fmt: skip


def _predicted_region(net: Any, x: Any) -> tuple[int, np.ndarray]:
    """A class the segmenter predicts on some pixels but not all, and its (B, H, W) region."""
    with torch.no_grad():
        pred = net(x).argmax(1).numpy()
    counts = np.bincount(pred.ravel(), minlength=K)
    k = int(np.argmax(np.where(counts < pred.size, counts, 0)))
    assert 0 < counts[k] < pred.size  # the test's premise: a real region
    return k, pred == k


def _x(kind: str = "") -> Any:
    """The images; for ``region_none`` one image twice (the wrapped model's region is one (H, W))."""
    x = np.random.default_rng(2).normal(size=(B, C, H, W)).astype(np.float32)
    if kind == "region_none":
        x[1:] = x[0]
    return torch.as_tensor(x)


@functools.cache
def _kind(kind: str) -> tuple[Any, Any, Any]:
    """``(model, target object, wrapped model scoring that object)`` of one target kind, built once
    per module (a fresh model pays its first metric's plan tuning again); each test checks the model's
    parameters are unchanged by what it ran."""
    x = _x(kind)
    if kind in ("region", "region_none", "callable"):
        net = _segmenter()
        if kind == "region":
            m = torch.as_tensor(MASK, dtype=torch.float32)
            return net, T.ClassRegion(1, mask=MASK), Wrapped(net, lambda o: (o[:, 1] * m).sum((1, 2)))
        if kind == "region_none":  # the region the model predicts for class k on the clean input
            k, region = _predicted_region(net, x)
            r = torch.as_tensor(region[0], dtype=torch.float32)  # the samples are one image twice
            return net, T.ClassRegion(k), Wrapped(net, lambda o: (o[:, k] * r).sum((1, 2)))

        def fn(o: Any) -> Any:
            return o[:, 2, 1:6, 2:7].mean((1, 2)) - o[:, 0].mean((1, 2))

        return net, fn, Wrapped(net, fn)
    net = _embedder()
    if kind == "output":
        return net, T.Output(3), Wrapped(net, lambda o: o[:, 3])
    ref = np.random.default_rng(3).normal(size=D).astype(np.float32)
    r = torch.as_tensor(ref / np.linalg.norm(ref))
    return net, T.Similarity(ref), Wrapped(net, lambda o: (o @ r) / o.norm(dim=1))


def _values(result: Any) -> list[np.ndarray]:
    """The numbers a result holds (its scores and the arrays behind them)."""
    out = []
    for name in ("scores", "curve", "deltas", "ai", "sums", "delta", "gap", "max_abs"):
        value = getattr(result, name, None)
        if isinstance(value, np.ndarray):
            out.append(np.asarray(value, dtype=np.float64))
    maps = getattr(result, "maps", None)
    if isinstance(maps, dict):
        out += [np.asarray(v, dtype=np.float64) for v in maps.values()]
    per_sample = getattr(result, "per_sample", None)
    if per_sample is not None and hasattr(per_sample, "select_dtypes"):
        out.append(per_sample.select_dtypes("number").to_numpy(dtype=np.float64))
    assert out, f"no numbers read from {type(result).__name__}"
    return out


METRICS: dict[str, Callable[[Any, Any, Any], Any]] = {
    "deletion": lambda m, x, t: ev.deletion(m, x, "vanilla", target=t, steps=4),
    "insertion": lambda m, x, t: ev.insertion(m, x, "input_x_gradient", target=t, steps=4),
    "road": lambda m, x, t: ev.road(m, x, "vanilla", target=t, fractions=[0.1, 0.5]),
    "infidelity": lambda m, x, t: ev.infidelity(m, x, "integrated", target=t, nsamples=4),
    "faithfulness_correlation": lambda m, x, t: ev.faithfulness_correlation(
        m, x, "vanilla", target=t, subset_size=6, nsamples=5
    ),
    "faithfulness_estimate": lambda m, x, t: ev.faithfulness_estimate(
        m, x, "vanilla", target=t, features_in_step=16
    ),
    "monotonicity": lambda m, x, t: ev.monotonicity(m, x, "vanilla", target=t, features_in_step=16),
    "monotonicity_correlation": lambda m, x, t: ev.monotonicity_correlation(
        m, x, "vanilla", target=t, features_in_step=16, nsamples=3
    ),
    "sensitivity_n": lambda m, x, t: ev.sensitivity_n(m, x, "vanilla", target=t, nsamples=3),
    "pixel_flipping": lambda m, x, t: ev.region_perturbation(
        m, x, "vanilla", target=t, patch_size=1, steps=6
    ),
    "region_perturbation": lambda m, x, t: ev.region_perturbation(
        m, x, "vanilla", target=t, patch_size=4, steps=3
    ),
    "selectivity": lambda m, x, t: ev.selectivity(m, x, "vanilla", target=t, patch_size=4),
    "irof": lambda m, x, t: ev.irof(m, x, "vanilla", target=t),
    "non_sensitivity": lambda m, x, t: ev.non_sensitivity(m, x, "vanilla", target=t, features_in_step=16),
    "input_invariance": lambda m, x, t: ev.input_invariance(m, x, "vanilla", target=t),
    "completeness": lambda m, x, t: ev.completeness(m, x, "integrated", target=t),
    "max_sensitivity": lambda m, x, t: ev.max_sensitivity(m, x, "vanilla", target=t, nsamples=3),
    "avg_sensitivity": lambda m, x, t: ev.avg_sensitivity(m, x, "vanilla", target=t, nsamples=2),
    "local_lipschitz": lambda m, x, t: ev.local_lipschitz(m, x, "vanilla", target=t, nsamples=3),
    "randomization": lambda m, x, t: ev.randomization_test(m, x, "vanilla", target=t, random_baseline=False),
    "efficient_mprt": lambda m, x, t: ev.efficient_mprt(m, x, "vanilla", target=t, n_bins=5),
    "smooth_mprt": lambda m, x, t: ev.smooth_mprt(m, x, "vanilla", target=t, nsamples=2),
    "relative_input_stability": lambda m, x, t: ev.relative_input_stability(
        m, x, "vanilla", target=t, nsamples=3
    ),
    "relative_output_stability": lambda m, x, t: ev.relative_output_stability(
        m, x, "vanilla", target=t, nsamples=3
    ),
    "continuity": lambda m, x, t: ev.continuity(m, x, "vanilla", target=t, nsteps=2),
    "sparseness": lambda m, x, t: ev.sparseness("vanilla", model=m, x=x, target=t),
    "compare": lambda m, x, t: ev.compare(
        m, x, ["integrated"], target=t, metrics=["deletion_auc", "completeness_delta", "infidelity"]
    ),
}
KINDS = ("region", "region_none", "output", "similarity", "callable")


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("metric", sorted(METRICS))
def test_metric_scores_the_target_object(metric: str, kind: str) -> None:
    model, target, wrapped = _kind(kind)
    x = _x(kind)
    before = [p.detach().clone() for p in model.parameters()]
    got = _values(METRICS[metric](model, x, target))
    want = _values(METRICS[metric](wrapped, x, None))
    assert len(got) == len(want)
    # relative stabilities divide by small float32 differences of two computation paths (the
    # object's score vs a wrapper's): 3.7e-4 apart under SSE4.1 oneDNN kernels (within 2e-4 under AVX2)
    rtol = 2e-3 if metric.startswith("relative_") else 2e-4
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=rtol, atol=2e-5, equal_nan=True)
    for p, q in zip(model.parameters(), before, strict=True):  # the model is left unchanged
        assert torch.equal(p, q)


@pytest.mark.parametrize(
    "metric", ["deletion", "road", "infidelity", "max_sensitivity", "randomization", "compare"]
)
def test_class_object_is_the_class_index_bit_for_bit(metric: str) -> None:
    model, x = _embedder(), _x()
    a, b = _values(METRICS[metric](model, x, T.Class(2))), _values(METRICS[metric](model, x, 2))
    for g, w in zip(a, b, strict=True):
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize(
    ("metric", "words"),
    [
        (lambda m, x, t: ev.random_logit(m, x, "vanilla", target=t), "random_logit"),
        (lambda m, x, t: ev.consistency(m, x, "vanilla", target=t), "consistency"),
        (lambda m, x, t: ev.sufficiency(m, x, "vanilla", target=t), "sufficiency"),
    ],
)
def test_metrics_of_the_predicted_class_refuse_objects(metric: Any, words: str) -> None:
    model, x = _segmenter(), _x()
    with pytest.raises(XaikitValueError, match=rf"target=ClassRegion\(\.\.\.\).*not taken by {words}.*class"):
        metric(model, x, T.ClassRegion(1, mask=MASK))


# ---- analytic checks on a 1x1 convolution segmenter, torch and Keras on the same weights ----------------
@functools.cache
def _linear(framework: str) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray]:
    """``(model, x in its layout, w (K, C), b (K,))``: class k's logit at a pixel is w[k].x + b[k]
    (built once per module: the analytic checks below read w and b, so a changed model fails them)."""
    rng = np.random.default_rng(4)
    w, b = rng.normal(size=(K, C)).astype(np.float32), rng.normal(size=K).astype(np.float32)
    x = rng.normal(size=(B, H, W, C)).astype(np.float32)  # channel last
    if framework == "torch":
        conv = torch.nn.Conv2d(C, K, 1)
        with torch.no_grad():
            conv.weight.copy_(torch.as_tensor(w[:, :, None, None]))
            conv.bias.copy_(torch.as_tensor(b))
        return conv, torch.as_tensor(np.ascontiguousarray(x.transpose(0, 3, 1, 2))), w, b
    keras = pytest.importorskip("keras")
    inp = keras.Input((H, W, C))
    layer = keras.layers.Conv2D(K, 1)
    model = keras.Model(inp, layer(inp))
    layer.set_weights([w.T[None, None], b])
    return model, x, w, b


def _host_last(framework: str, x: Any) -> np.ndarray:
    a = np.asarray(x.numpy() if hasattr(x, "numpy") else x, dtype=np.float64)
    return a.transpose(0, 2, 3, 1) if framework == "torch" else a


@pytest.mark.parametrize("framework", ["torch", "tf"])
def test_deleting_the_region_lowers_its_score_by_its_contribution(framework: str) -> None:
    model, x, w, b = _linear(framework)
    xl = _host_last(framework, x)
    k = 2
    saliency = np.broadcast_to(MASK.astype(np.float32), (B, H, W)).copy()  # the region first
    r = ev.deletion(model, x, saliency, target=T.ClassRegion(k, mask=MASK), steps=4, baseline="zeros")
    n = int(MASK.sum())  # 16 of 64 pixels: step 1 removes exactly the region
    contribution = (xl @ w[k].astype(np.float64))[:, MASK].sum(axis=1)
    clean = contribution + n * b[k]
    np.testing.assert_allclose(r.scores[:, 0], clean, rtol=1e-5)
    np.testing.assert_allclose(r.scores[:, 1], clean - contribution, rtol=1e-5, atol=1e-5)  # = n b[k]
    np.testing.assert_allclose(r.scores[:, 1:], n * b[k], rtol=1e-5)  # outside pixels do not count
    np.testing.assert_array_equal(r.targets, [-1, -1])  # an object names no class


@pytest.mark.parametrize("framework", ["torch", "tf"])
def test_infidelity_of_the_region_gradient_is_zero(framework: str) -> None:
    model, x, w, _ = _linear(framework)
    k = 1
    grad_last = MASK[None, :, :, None] * w[k][None, None, None, :]  # d(region score)/dx, (1, H, W, C)
    grad = np.broadcast_to(grad_last, (B, H, W, C)).astype(np.float32)
    if framework == "torch":
        grad = np.ascontiguousarray(grad.transpose(0, 3, 1, 2))
    region = ev.infidelity(model, x, grad, target=T.ClassRegion(k, mask=MASK), nsamples=8)
    np.testing.assert_allclose(region.scores, 0.0, atol=1e-9)
    whole = ev.infidelity(model, x, grad, target=T.ClassRegion(k, mask=np.ones((H, W))), nsamples=8)
    assert np.all(whole.scores > 1e-4)  # the same map is unfaithful to another region


@pytest.mark.parametrize("framework", ["torch", "tf"])
def test_completeness_delta_is_zero_for_a_region(framework: str) -> None:
    model, x, _, _ = _linear(framework)
    r = ev.completeness(model, x, "integrated", target=T.ClassRegion(3, mask=MASK))
    np.testing.assert_allclose(r.delta, 0.0, atol=1e-4)


def test_torch_and_keras_agree_on_a_region() -> None:
    (mt, xt, _, _), (mk, xkr, _, _) = _linear("torch"), _linear("tf")
    target = T.ClassRegion(0, mask=MASK, reduce="mean")
    a = ev.faithfulness_correlation(mt, xt, "input_x_gradient", target=target, subset_size=6, nsamples=6)
    b = ev.faithfulness_correlation(mk, xkr, "input_x_gradient", target=target, subset_size=6, nsamples=6)
    np.testing.assert_allclose(a.deltas, b.deltas, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(a.scores, b.scores, rtol=1e-4, atol=1e-5)


# ---- the case that proves the point ---------------------------------------------------------------------
def test_faithfulness_of_a_region_map_is_scored_on_that_region() -> None:
    """Two regions: a region-A map's faithfulness correlation against region A differs from the
    one against the argmax class over the whole image, and each matches the hand computation."""
    model, x, w, b = _linear("torch")
    xl = _host_last("torch", x)
    per_pixel = xl @ w.T.astype(np.float64) + b  # (B, H, W, K) logits
    region_a = np.zeros((H, W), dtype=bool)
    region_a[:, : W // 2] = True  # region A: the left half (region B: the right half)
    k = 1
    a_map = np.where(region_a[None], xl @ w[k].astype(np.float64), 0.0).astype(np.float32)  # x.w on A
    argmax = int(per_pixel.sum(axis=(1, 2)).mean(axis=0).argmax())
    rng = np.random.default_rng(5)
    subsets = np.stack([np.stack([rng.choice(H * W, 10, replace=False) for _ in range(B)]) for _ in range(6)])

    def hand(cls: int, region: np.ndarray) -> np.ndarray:
        contrib = (xl @ w[cls].astype(np.float64)) * region[None]  # each pixel's part of the score
        drops = np.stack([contrib.reshape(B, -1)[np.arange(B)[:, None], s].sum(1) for s in subsets], 1)
        sums = np.stack([a_map.reshape(B, -1)[np.arange(B)[:, None], s].sum(1) for s in subsets], 1)
        return np.array([np.corrcoef(sums[i], drops[i])[0, 1] for i in range(B)])

    on_a = ev.faithfulness_correlation(
        model, x, a_map, target=T.ClassRegion(k, mask=region_a), subsets=subsets, baseline="zeros"
    )
    on_argmax = ev.faithfulness_correlation(
        model, x, a_map, target=T.ClassRegion(argmax, mask=np.ones((H, W))), subsets=subsets, baseline="zeros"
    )
    np.testing.assert_allclose(on_a.scores, hand(k, region_a), rtol=1e-4)
    np.testing.assert_allclose(on_argmax.scores, hand(argmax, np.ones((H, W), dtype=bool)), rtol=1e-4)
    np.testing.assert_allclose(on_a.scores, 1.0, rtol=1e-5)  # the region's own score: exactly linear
    assert np.all(np.abs(on_a.scores - on_argmax.scores) > 0.05)


def test_randomization_explains_the_region_of_the_original_model() -> None:
    """``ClassRegion(mask=None)`` is resolved once on the original model: the randomized model's
    maps explain that region (equal to the maps of the same region given as a mask)."""
    model, x = _segmenter(), _x()
    k, region = _predicted_region(model, x)
    a = ev.randomization_test(model, x, "vanilla", target=T.ClassRegion(k), random_baseline=False)
    b = ev.randomization_test(
        model, x, "vanilla", target=T.ClassRegion(k, mask=region), random_baseline=False
    )
    for name in a.maps:
        np.testing.assert_allclose(a.maps[name], b.maps[name], rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("metric", sorted(METRICS))
def test_results_name_no_class_for_a_target_object(metric: str) -> None:
    """A target object names no class: a result's ``targets`` (or ``classes``) read -1 per sample,
    never the row indices the object's scoring pins internally."""
    model, target, _ = _kind("callable")
    result = METRICS[metric](model, _x("callable"), target)
    for name in ("targets", "classes"):
        value = getattr(result, name, None)
        if isinstance(value, np.ndarray):
            np.testing.assert_array_equal(value, np.full(B, -1), err_msg=f"{metric}: {name}")
