"""Invariants of the fused engine on a small ReLU CNN, in both frameworks."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import xaikit as xk
from tests.xai.models import ModelCache, cnn, cnn_weights, from_layout, images, model_for, to_channel_first
from xaikit.errors import DegenerateMapWarning

#: the module's CNNs, per (framework, seed, options) (see ``ModelCache``), each checked
#: unchanged after every test
_MODELS = ModelCache()


def shared_model(framework: str, seed: int = 0, **kw: Any) -> tuple[Any, Any]:
    """``model_for(framework, seed, **kw)``, made once per module (explaining never changes a model).
    Tests that count traces, expect a once-per-model warning or inject failures build their own."""
    return _MODELS.get(framework, (seed, tuple(sorted(kw.items()))), lambda: model_for(framework, seed, **kw))


_shared_models_stay_unchanged, _forget_models = _MODELS.fixtures()


@pytest.fixture
def setup(framework: str, rng: np.random.Generator):
    model, layout = shared_model(framework)
    return model, layout(images(rng, batch=4))


@pytest.fixture
def fresh_setup(framework: str, rng: np.random.Generator):
    """``setup`` on a model of its own: for tests whose point needs a model nothing explained yet."""
    model, layout = model_for(framework)
    return model, layout(images(rng, batch=4))


def test_ig_completeness_on_a_smooth_cnn(framework: str, rng: np.random.Generator) -> None:
    """Relative completeness error below 1e-3 with 64 Gauss-Legendre steps on a smooth CNN.

    (On a ReLU CNN the path integrand has kinks and the error is the quadrature's own; see
    test_peers.py, where xaikit's delta equals captum's for the same rule and steps.)
    """
    model, layout = model_for(framework, size=12, activation="softplus")
    x = layout(images(rng, batch=6))
    for baseline in ("zeros", "black", "blur"):
        attr, delta = xk.xai.explain(
            model, x, method="integrated", nsamples=64, baseline=baseline, return_delta=True
        )
        gap = attr.reshape(len(x), -1).sum(axis=1) - delta
        assert np.all(np.abs(delta) <= 1e-3 * np.abs(gap)), (baseline, delta, gap)


def test_ig_delta_shrinks_with_steps_on_a_relu_cnn(framework: str, rng: np.random.Generator) -> None:
    model, layout = shared_model(framework)  # size 12, the default: setup's model
    x = layout(images(rng, batch=4))
    errors = []
    for steps in (16, 256):
        attr, delta = xk.xai.explain(
            model, x, method="integrated", nsamples=steps, baseline="zeros", return_delta=True
        )
        gap = attr.reshape(len(x), -1).sum(axis=1) - delta
        errors.append(np.abs(delta / gap).max())
    assert errors[1] < errors[0] / 5, errors


def test_zero_noise_smoothgrad_is_vanilla(setup) -> None:
    model, x = setup
    van = xk.xai.explain(model, x, method="vanilla")
    mean = xk.xai.explain(model, x, method="smoothgrad", nsamples=3, stdev_spread=0.0, magnitude=False)
    sq = xk.xai.explain(model, x, method="smoothgrad", nsamples=3, stdev_spread=0.0, magnitude=True)
    np.testing.assert_allclose(mean, van, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(sq, van**2, rtol=1e-5, atol=1e-9)


@pytest.mark.parametrize("baseline", ["zeros", "black", "blur"])
def test_zero_noise_smint_is_ig(setup, baseline: str) -> None:
    model, x = setup
    ig = xk.xai.explain(model, x, method="integrated", nsamples=10, baseline=baseline)
    smint = xk.xai.explain(
        model,
        x,
        method="smint",
        nsamples=3,
        nintegration=10,
        stdev_spread=0.0,
        magnitude=False,
        baseline=baseline,
    )
    np.testing.assert_allclose(smint, ig, rtol=1e-4, atol=1e-7)


@pytest.mark.parametrize(
    "method,opts",
    [
        ("vanilla", {}),
        ("smoothgrad", {"nsamples": 5}),
        ("integrated", {"nsamples": 9}),
        ("smint", {"nsamples": 3, "nintegration": 6, "magnitude": False}),
        ("smint", {"nsamples": 3, "nintegration": 6, "magnitude": True}),
    ],
)
def test_chunked_equals_unchunked(setup, method: str, opts: dict) -> None:
    model, x = setup
    big = xk.xai.explain(model, x, method=method, max_batch=10_000, seed=5, **opts)
    for size in (7, 3, 4, 1):
        small = xk.xai.explain(model, x, method=method, max_batch=size, seed=5, **opts)
        np.testing.assert_allclose(small, big, rtol=1e-4, atol=1e-7 * max(1.0, float(np.abs(big).max())))


def test_chunk_sizes_respect_max_batch(framework: str, setup) -> None:
    model, x = setup
    net = xk.xai.SaliencyNet(model, "x", "y", max_batch=7, seed=0)
    net.get_smoothed_masks({"x": x}, nsamples=4, nintegration=5)
    assert sum(net.last_chunks) == 4 * 4 * 5
    assert max(net.last_chunks) <= 7


@pytest.mark.parametrize("method", ["vanilla", "integrated"])
def test_batch_equals_per_sample(setup, method: str) -> None:
    model, x = setup
    opts = {"nsamples": 8, "baseline": "blur"} if method == "integrated" else {}
    whole = xk.xai.explain(model, x, method=method, **opts)
    for i in range(len(x)):
        one = xk.xai.explain(model, x[i : i + 1], method=method, **opts)
        np.testing.assert_allclose(one[0], whole[i], rtol=1e-4, atol=1e-7)


def test_seeds(setup) -> None:
    model, x = setup
    a = xk.xai.explain(model, x, method="smint", nsamples=2, nintegration=4, seed=11)
    b = xk.xai.explain(model, x, method="smint", nsamples=2, nintegration=4, seed=11)
    c = xk.xai.explain(model, x, method="smint", nsamples=2, nintegration=4, seed=12)
    np.testing.assert_array_equal(a, b)
    assert not np.allclose(a, c)
    net = xk.xai.SaliencyNet(model, "x", "y", seed=4)
    m1 = net.get_smoothed_masks({"x": x}, nsamples=3)["saliency"]
    m2 = net.get_smoothed_masks({"x": x}, nsamples=3)["saliency"]
    m3 = net.get_smoothed_masks({"x": x}, nsamples=3, seed=5)["saliency"]
    np.testing.assert_array_equal(m1, m2)
    assert not np.array_equal(m1, m3)


def test_torch_equals_tf_on_the_same_weights(rng: np.random.Generator) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("tensorflow")
    w = cnn_weights(3)
    tm, km = cnn("torch", w), cnn("tf", w)
    x = images(rng, batch=3)
    base = rng.random(x.shape).astype(np.float32)
    cases = [
        ("vanilla", {}),
        ("integrated", {"nsamples": 16, "baseline": "zeros"}),
        ("integrated", {"nsamples": 8, "baseline": "black", "quadrature": "riemann_trapezoid"}),
        ("integrated", {"nsamples": 8, "baseline": "blur"}),
        (
            "smint",
            {"nsamples": 2, "nintegration": 8, "stdev_spread": 0.0, "baseline": "zeros", "magnitude": False},
        ),
    ]
    for method, opts in cases:
        a = from_layout("torch", xk.xai.explain(tm, to_channel_first(x), method=method, **opts))
        b = xk.xai.explain(km, x, method=method, **opts)
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4 * float(np.abs(b).max()), err_msg=method)
    a = from_layout(
        "torch", xk.xai.explain(tm, to_channel_first(x), method="integrated", baseline=to_channel_first(base))
    )
    b = xk.xai.explain(km, x, method="integrated", baseline=base)
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4 * float(np.abs(b).max()))
    dt = xk.xai.SaliencyNet(tm, "x", "y").get_masks({"x": to_channel_first(x)})
    dk = xk.xai.SaliencyNet(km, "x", "y").get_masks({"x": x})
    np.testing.assert_array_equal(dt["y"], dk["y"])
    np.testing.assert_allclose(from_layout("torch", dt["saliency"]), dk["saliency"], atol=1e-4)


def test_reference_call_returns_a_grid_ready_dict(framework: str, setup) -> None:
    model, x = setup
    labels = np.arange(len(x))
    net = xk.xai.SaliencyNet(model, model_inputs="x", model_outputs="y_pred", outputs="saliency")
    res = net.get_smoothed_masks({"x": x, "y": labels}, nsamples=6, nintegration=100)
    assert set(res) == {"x", "y", "y_pred", "saliency"}
    assert res["y_pred"].shape == (len(x),) and res["y_pred"].dtype == np.int64
    expected = (len(x), 1, 12, 12) if framework == "torch" else (len(x), 12, 12, 1)
    assert res["saliency"].shape == expected
    assert np.isfinite(res["saliency"]).all()
    assert res["saliency"].min() >= 0.0 and res["saliency"].max() == 1.0
    assert res["x"] is x and res["y"] is labels


def test_predicted_class_is_pinned_and_reported(setup) -> None:
    model, x = setup
    net = xk.xai.SaliencyNet(model, "x", "pred", seed=0)
    res = net.get_integrated_masks({"x": x}, nsamples=4, raw=True)
    explicit = net.get_integrated_masks({"x": x}, nsamples=4, raw=True, target=res["pred"])
    np.testing.assert_array_equal(res["saliency"], explicit["saliency"])


def test_class_key_and_target_are_honoured_by_every_method(setup) -> None:
    model, x = setup
    other = np.array([1, 2, 3, 4])
    net = xk.xai.SaliencyNet(model, "x", "pred", class_key="label", seed=0)
    plain = xk.xai.SaliencyNet(model, "x", "pred", seed=0)
    batch = {"x": x, "label": other}
    for call, opts in [
        ("get_masks", {}),
        ("get_smoothed_masks", {"nsamples": 2}),
        ("get_integrated_masks", {"nsamples": 3}),
        ("get_smoothed_masks", {"nsamples": 2, "nintegration": 3}),
    ]:
        by_key = getattr(net, call)(batch, raw=True, **opts)["saliency"]
        by_target = getattr(plain, call)(batch, raw=True, target=other, **opts)["saliency"]
        predicted = getattr(plain, call)(batch, raw=True, **opts)["saliency"]
        np.testing.assert_array_equal(by_key, by_target)
        assert not np.allclose(by_key, predicted)


def test_display_masks(framework: str, fresh_setup) -> None:
    model, x = fresh_setup  # its own model: a degenerate map is warned about once per model
    net = xk.xai.SaliencyNet(model, "x", "y")
    flat = x * 0.0 + 0.5
    res = net.get_masks({"x": flat})
    assert np.isfinite(res["saliency"]).all()
    zero = net.get_integrated_masks({"x": flat}, baseline="zeros", nsamples=4)
    assert np.isfinite(zero["saliency"]).all()
    with pytest.warns(DegenerateMapWarning, match=r"4 of 4 maps are exactly 0.*equals the baseline"):
        const = net.get_integrated_masks({"x": flat}, baseline=flat, nsamples=4)  # attribution exactly 0
    np.testing.assert_array_equal(const["saliency"], 0.0)
    assert net.last_status.tolist() == ["zero"] * 4


def test_tf_step_traces_once_per_shape(rng: np.random.Generator) -> None:
    pytest.importorskip("tensorflow")
    model, _ = model_for("tf")
    bk = xk.backend.get_backend(model)
    x = images(rng, batch=5)
    for _ in range(3):
        xk.xai.explain(model, x, method="smint", nsamples=3, nintegration=7, max_batch=8)
        xk.xai.SaliencyNet(model, "x", "y", max_batch=8).get_smoothed_masks(
            {"x": x}, nsamples=2, nintegration=9
        )
    # whole-slice chunks run built, stepped and folded in one compiled call ("sweep"): one
    # 5-row slice a chunk here, so one input signature for both calls
    assert bk.traces(model, "sweep") == 1
    assert bk.traces(model, "grad") == 0


def test_tf_fused_sweep_traces_once_per_signature(rng: np.random.Generator) -> None:
    """Fused chunks that span one or two noise samples, and a shorter tail, share input
    signatures: repeating the calls traces nothing more, and another number of noise samples or
    path steps traces no more than the eager step does for the same padded chunks (another
    model, the same calls through the eager path)."""
    pytest.importorskip("tensorflow")
    model, _ = model_for("tf")
    eager_model, _ = model_for("tf")
    bk = xk.backend.get_backend(model)
    x = images(rng, batch=5)

    def calls(m: Any, settings: list[tuple[int, int]]) -> None:
        for nsamples, nintegration in settings:
            xk.xai.explain(m, x, method="smint", nsamples=nsamples, nintegration=nintegration, max_batch=60)
        xk.xai.explain(m, x, method="integrated", nsamples=12, max_batch=60)

    settings = [(3, 12), (2, 12), (5, 20), (11, 13)]
    calls(model, settings[:1])
    first = bk.traces(model, "sweep")
    assert first >= 1
    calls(model, settings[:1])
    assert bk.traces(model, "sweep") == first
    calls(model, settings)
    calls(model, settings)
    assert bk.traces(model, "grad") == 0  # every chunk fused: 12 slices span at most 2 paths
    orig = type(bk).fuses_chunks
    try:
        type(bk).fuses_chunks = lambda self: False  # type: ignore[method-assign]
        calls(eager_model, settings)
    finally:
        type(bk).fuses_chunks = orig  # type: ignore[method-assign]
    assert bk.traces(model, "sweep") <= bk.traces(eager_model, "grad")


def test_out_of_memory_halves_the_chunk_and_retries(framework: str, fresh_setup, monkeypatch) -> None:
    model, x = fresh_setup  # its own model: the simulated out-of-memory errors stay in this test
    bk = xk.backend.get_backend(model)
    monkeypatch.setattr(type(bk), "fuses_chunks", lambda self: False)  # chunks through grad_step
    reference = xk.xai.explain(model, x, method="integrated", nsamples=6, max_batch=100)

    class FakeOOM(RuntimeError):
        pass

    real_step = bk.grad_step
    seen: list[int] = []

    def step(rows, xla=False):
        seen.append(int(rows.inputs[0].shape[0]))
        if int(rows.inputs[0].shape[0]) > 5:
            raise FakeOOM("CUDA out of memory (simulated)")
        return real_step(rows)

    monkeypatch.setattr(bk, "grad_step", step)
    monkeypatch.setattr(bk, "is_oom", lambda exc: isinstance(exc, FakeOOM))
    got = xk.xai.explain(model, x, method="integrated", nsamples=6, max_batch=24)
    np.testing.assert_allclose(got, reference, rtol=1e-4, atol=1e-7)
    assert seen[:2] == [24, 12] and max(seen[2:]) <= 5  # halved until it fits (aligned to B=4)

    def always(rows, xla=False):
        raise FakeOOM("out of memory")

    monkeypatch.setattr(bk, "grad_step", always)
    with pytest.raises(FakeOOM):
        xk.xai.explain(model, x, method="vanilla", max_batch=4)


def test_tf_xla_step_gives_the_same_attributions(rng: np.random.Generator) -> None:
    pytest.importorskip("tensorflow")
    model, _ = shared_model("tf")
    x = images(rng, batch=3)
    plain = xk.xai.explain(model, x, method="integrated", nsamples=8, baseline="zeros")
    compiled = xk.xai.explain(model, x, method="integrated", nsamples=8, baseline="zeros", xla=True)
    np.testing.assert_allclose(compiled, plain, rtol=1e-4, atol=1e-6)


FUSED_CASES = [
    ("vanilla", {}),
    ("smoothgrad", {"nsamples": 7}),
    ("integrated", {"nsamples": 13}),  # IG's steps (``nintegration`` is SmInt's, refused here)
    ("smint", {"nsamples": 3, "nintegration": 11}),
    # fewer path steps than slices: chunks of 40 rows (10 slices) may span up to 4 and 6 noise
    # samples and take the eager step
    ("smint", {"nsamples": 5, "nintegration": 3}),
    ("smint", {"nsamples": 4, "nintegration": 2}),
    # at 40 rows an eager chunk (10 slices > 7 steps) leaves a path open and the fused tail
    # (4 slices) completes it from the eager chunk's carry
    ("smint", {"nsamples": 2, "nintegration": 7}),
    ("vargrad", {"nsamples": 5}),
    ("expected_gradients", {"nsamples": 9}),
    ("input_x_gradient", {}),
]


@pytest.mark.parametrize("max_batch", [None, 40, 12, 3])
def test_fused_chunks_give_the_eager_chunks_maps(framework: str, setup, monkeypatch, max_batch) -> None:
    """A whole-slice chunk built, stepped and folded in one ``folded_grads`` call (compiled
    into one graph on TensorFlow) gives what the eager build, step and fold give, for chunks of
    one slice, of several slices spanning one or several noise samples, of part of a slice (3
    rows of 4 samples, which stays eager) and padded tails; both frameworks are run both ways.

    To float32 rounding, not always bit for bit: the rows are the same bits, but the fold's
    matrix product has padded shapes, which oneDNN blocks by the instruction set (identical on
    an AVX-512 CPU, last-bit differences in SmInt under ``ONEDNN_MAX_CPU_ISA=AVX2``)."""
    model, x = setup
    bk = type(xk.backend.get_backend(model))
    chunk = {} if max_batch is None else {"max_batch": max_batch}

    def maps(fuse: bool) -> list[np.ndarray]:
        monkeypatch.setattr(bk, "fuses_chunks", lambda self: fuse)
        return [
            np.asarray(xk.xai.explain(model, x, method=m, seed=3, **kw, **chunk)) for m, kw in FUSED_CASES
        ]

    fused, eager = maps(True), maps(False)
    for (method, _), a, b in zip(FUSED_CASES, fused, eager):
        assert np.isfinite(a).all() and np.abs(a).max() > 0, method
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6 * float(np.abs(b).max()), err_msg=method)


@pytest.mark.parametrize(
    ("opts", "body", "slices", "samples"),
    [
        ({"method": "smint", "nsamples": 3, "nintegration": 6}, "fused_chunk", 3, 5),
        # SmoothGrad's noisy copies drawn, stepped and summed in one call
        ({"method": "smoothgrad", "nsamples": 6, "seed": 5}, "noise_chunk", 3, 4),
    ],
)
def test_out_of_memory_in_a_fused_chunk_halves_it_and_retries(
    framework: str, fresh_setup, monkeypatch, opts, body, slices, samples
) -> None:
    """A fused chunk (built, stepped and folded in one ``folded_grads`` call: ``fused_chunk``
    for a path, ``noise_chunk`` for SmoothGrad) halves on an out-of-memory error like the eager
    step, to the maps of the eager chunks. ``slices``/``samples``: the body's arguments whose
    first axes are the chunk's slices and the batch's samples."""
    import xaikit.xai._engine.sweep as sweep

    model, x = fresh_setup  # its own model: the simulated out-of-memory errors stay in this test
    bk = xk.backend.get_backend(model)
    monkeypatch.setattr(type(bk), "fuses_chunks", lambda self: False)
    eager = xk.xai.explain(model, x, max_batch=100, **opts)
    monkeypatch.setattr(type(bk), "fuses_chunks", lambda self: True)

    class FakeOOM(RuntimeError):
        pass

    real = bk.folded_grads
    seen: list[int] = []

    def folded(m, fn, args, output=0, xla=False):
        assert fn is getattr(sweep, body)
        rows = int(args[slices].shape[0]) * int(args[samples].shape[0])
        seen.append(rows)
        if rows > 8:
            raise FakeOOM("CUDA out of memory (simulated)")
        return real(m, fn, args, output, xla)

    monkeypatch.setattr(bk, "folded_grads", folded)
    monkeypatch.setattr(bk, "is_oom", lambda exc: isinstance(exc, FakeOOM))
    got = xk.xai.explain(model, x, max_batch=24, **opts)
    np.testing.assert_allclose(got, eager, rtol=1e-5, atol=1e-6 * float(np.abs(eager).max()))
    assert seen[:2] == [24, 12] and max(seen[2:]) <= 8  # halved until it fits (aligned to B=4)


def test_tf_smoothgrad_chunks_run_as_one_compiled_step(rng: np.random.Generator) -> None:
    """On TensorFlow a SmoothGrad chunk is one compiled ``"sweep"`` call (no eager op per noisy
    copy), traced once per padded chunk shape: more noise samples or another seed trace nothing
    new, and the maps are those of the eager chunks."""
    pytest.importorskip("tensorflow")
    model, layout = model_for("tf")
    x = layout(images(rng, batch=4))
    bk = xk.backend.get_backend(model)
    xk.xai.explain(model, x, method="smoothgrad", nsamples=3, max_batch=8, seed=1)
    traced = bk.traces(model, "sweep")
    assert traced >= 1
    a = xk.xai.explain(model, x, method="smoothgrad", nsamples=5, max_batch=8, seed=2)
    assert bk.traces(model, "sweep") == traced  # 8-row chunks again: the same signature
    assert bk.traces(model, "grad") == 0  # no eager-built chunk took the plain gradient step
    from unittest import mock

    with mock.patch.object(type(bk), "fuses_chunks", lambda self: False):
        b = xk.xai.explain(model, x, method="smoothgrad", nsamples=5, max_batch=8, seed=2)
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6 * float(np.abs(b).max()))
    # XLA draws other values for the same seeds: with xla=True the noise stays eager, so the
    # flag does not change the noise (the maps agree with the non-XLA ones to rounding)
    c = xk.xai.explain(model, x, method="smoothgrad", nsamples=5, max_batch=8, seed=2, xla=True)
    np.testing.assert_allclose(c, b, rtol=1e-4, atol=1e-5 * float(np.abs(b).max()))
