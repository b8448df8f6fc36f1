"""VarGrad, Input x Gradient, Expected Gradients and Blur IG: agreement with captum and PAIR
``saliency`` (their random draws injected where they draw their own), analytic identities,
torch == Keras on copied weights, chunking, seeding and bad options."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import xaikit as xk
from tests.xai.models import analytic, cnn, cnn_weights, from_layout, images, model_for, to_channel_first
from xaikit.backend import get_backend
from xaikit.errors import DegenerateMapWarning, XaikitTypeError, XaikitValueError
from xaikit.xai._engine.seeds import stream_seed

NEW = ("vargrad", "input_x_gradient", "expected_gradients", "blur_ig")


def _close(a: np.ndarray, b: np.ndarray, rtol: float = 1e-5, msg: str = "") -> None:
    np.testing.assert_allclose(a, b, rtol=rtol, atol=rtol * float(np.abs(b).max()), err_msg=msg)


@pytest.fixture
def torch_cnn(rng: np.random.Generator) -> tuple[Any, Any, Any]:
    torch = pytest.importorskip("torch")
    model, layout = model_for("torch", seed=1, activation="softplus")
    x = torch.as_tensor(layout(images(rng, batch=4)))
    return model, x, torch.as_tensor([0, 1, 2, 3])


def _our_noise(x: Any, seed: int, n: int, spread: float) -> Any:
    """xaikit's SmoothGrad noise for a torch batch x: (n, B, ...), noise sample s of sample b at
    [s, b] (sigma = spread * (max - min) of each sample)."""
    import torch

    bk = get_backend(x)
    lo = x.flatten(1).min(1).values.view(-1, *[1] * (x.dim() - 1))
    hi = x.flatten(1).max(1).values.view(-1, *[1] * (x.dim() - 1))
    draws = [bk.normal(stream_seed(seed, 0, 0, s), x.shape, x.device, "float32") for s in range(n)]
    return torch.stack(draws) * (spread * (hi - lo))


def _captum_order(per_s: Any) -> Any:
    """(n, B, ...) draws to captum's expanded-row order: row b * n + s."""
    return per_s.transpose(0, 1).reshape(-1, *per_s.shape[2:])


# ---- captum ----------------------------------------------------------------------------------------
def test_input_x_gradient_matches_captum(torch_cnn) -> None:
    captum_attr = pytest.importorskip("captum.attr")
    model, x, target = torch_cnn
    ours = xk.xai.explain(model, x, target=target, method="input_x_gradient")
    theirs = captum_attr.InputXGradient(model).attribute(x, target=target).detach().numpy()
    _close(ours, theirs)


def test_smoothed_input_x_gradient_and_vargrad_match_captum_noise_tunnel(torch_cnn, monkeypatch) -> None:
    """captum draws its noise with torch.normal inside NoiseTunnel: it is given xaikit's draws."""
    import torch

    captum_attr = pytest.importorskip("captum.attr")
    model, x, target = torch_cnn
    n, spread, seed = 5, 0.2, 3
    noise = _captum_order(_our_noise(x, seed, n, spread))
    monkeypatch.setattr(torch, "normal", lambda mean, std, *a, **k: noise.clone())
    cases = [
        ("vargrad", captum_attr.Saliency(model), "vargrad", {"abs": False}, {}),
        ("input_x_gradient", captum_attr.InputXGradient(model), "smoothgrad", {}, {"magnitude": False}),
        ("input_x_gradient", captum_attr.InputXGradient(model), "smoothgrad_sq", {}, {"magnitude": True}),
    ]
    for method, base, nt_type, kw, opts in cases:
        ours = xk.xai.explain(
            model, x, target=target, method=method, nsamples=n, stdev_spread=spread, seed=seed, **opts
        )
        theirs = captum_attr.NoiseTunnel(base).attribute(
            x, nt_type=nt_type, nt_samples=n, stdevs=1.0, target=target, **kw
        )
        _close(ours, theirs.detach().numpy(), rtol=2e-5, msg=f"{method} {nt_type}")


def test_expected_gradients_match_captum_gradient_shap(
    torch_cnn, rng: np.random.Generator, monkeypatch
) -> None:
    """captum draws reference rows with np.random.choice, path positions with
    np.random.uniform and noise with torch.normal: all three are given xaikit's draws."""
    import torch

    captum_attr = pytest.importorskip("captum.attr")
    model, x, target = torch_cnn
    refs = torch.as_tensor(to_channel_first(images(rng, batch=7)))
    n, seed, batch = 6, 11, x.shape[0]
    for spread in (0.0, 0.1):
        draws = [np.random.default_rng(stream_seed(seed, 2, s)) for s in range(n)]
        pairs = [(g.integers(7, size=batch), g.uniform(size=batch)) for g in draws]
        idx = np.stack([p[0] for p in pairs], 1).reshape(-1)  # row b * n + s
        alpha = np.stack([p[1] for p in pairs], 1).reshape(-1)
        noise = _captum_order(_our_noise(x, seed, n, spread))
        with monkeypatch.context() as m:
            m.setattr(np.random, "choice", lambda *a, _i=idx, **k: _i.copy())
            m.setattr(np.random, "uniform", lambda *a, _a=alpha, **k: _a.copy())
            m.setattr(torch, "normal", lambda mean, std, *a, _n=noise, **k: _n.clone())
            theirs, their_delta = captum_attr.GradientShap(model).attribute(
                x, refs, n_samples=n, stdevs=1.0, target=target, return_convergence_delta=True
            )
        ours, delta = xk.xai.explain(
            model, x, target=target, method="expected_gradients", baseline=refs, nsamples=n,
            stdev_spread=spread, seed=seed, return_delta=True,
        )  # fmt: skip
        _close(ours, theirs.detach().numpy(), msg=f"spread {spread}")
        # captum's delta is per draw; xaikit's is of the mean: their means agree
        their_mean = their_delta.detach().numpy().reshape(batch, n).mean(1)
        np.testing.assert_allclose(delta, their_mean, atol=1e-5)


# ---- PAIR saliency ---------------------------------------------------------------------------------
def _pair_gradients(model: Any, cls: int) -> Any:
    """PAIR's call_model_function for a channel-first torch model and one class."""
    import torch

    def call(images: np.ndarray, call_model_args: Any = None, expected_keys: Any = None) -> dict[str, Any]:
        t = torch.as_tensor(np.asarray(images, dtype=np.float32)).permute(0, 3, 1, 2).requires_grad_(True)
        out = model(t)[:, cls].sum()
        (g,) = torch.autograd.grad(out, t)
        return {"INPUT_OUTPUT_GRADIENTS": g.permute(0, 2, 3, 1).detach().numpy()}

    return call


@pytest.mark.parametrize("sqrt", [False, True])
def test_blur_ig_matches_pair(rng: np.random.Generator, sqrt: bool) -> None:
    pytest.importorskip("torch")
    pair = pytest.importorskip("saliency.core")
    model, _ = model_for("torch", seed=2, activation="softplus")
    x = images(rng, batch=3)  # channel-last: PAIR's layout, moved for the torch model by xaikit
    opts = {"steps": 12, "max_sigma": 6.0, "grad_step": 0.05, "sqrt": sqrt}
    ours = xk.xai.explain(model, x, target=[0, 2, 4], method="blur_ig", max_batch=5, **opts)
    for b, cls in enumerate([0, 2, 4]):
        theirs = pair.BlurIG().GetMask(x[b], _pair_gradients(model, cls), batch_size=1, **opts)
        _close(ours[b], theirs, rtol=5e-5, msg=f"sample {b}")


def test_smoothed_blur_ig_matches_pair_with_its_noise_injected(rng: np.random.Generator, monkeypatch) -> None:
    import torch

    pair = pytest.importorskip("saliency.core")
    model, _ = model_for("torch", seed=2, activation="softplus")
    x = images(rng, batch=2)
    n, spread, seed = 3, 0.1, 5
    xt = torch.as_tensor(to_channel_first(x))
    noise = (
        _our_noise(xt, seed, n, spread).permute(0, 1, 3, 4, 2).numpy().astype(np.float64)
    )  # (n, B, H, W, C)
    opts = {"steps": 8, "max_sigma": 4.0, "grad_step": 0.05}
    ours = xk.xai.explain(
        model,
        x,
        target=1,
        method="blur_ig",
        nsamples=n,
        stdev_spread=spread,
        seed=seed,
        magnitude=True,
        **opts,
    )
    for b in range(len(x)):
        queue = [noise[s, b] for s in range(n)]
        monkeypatch.setattr(np.random, "normal", lambda *a, _q=queue, **k: _q.pop(0))
        theirs = pair.BlurIG().GetSmoothedMask(
            x[b],
            _pair_gradients(model, 1),
            nsamples=n,
            magnitude=True,
            stdev_spread=spread,
            batch_size=4,
            **opts,
        )
        _close(ours[b], theirs, rtol=5e-5, msg=f"sample {b}")


# ---- analytic ------------------------------------------------------------------------------------
def test_blur_ig_of_a_linear_model_is_ig_from_the_blurred_image(
    framework: str, rng: np.random.Generator
) -> None:
    """The path integral of a constant gradient w is w * (x - x_blurred): IG from the fully blurred
    image, whatever the path (Blur IG's Riemann sum telescopes up to its finite difference)."""
    size, classes = 8, 2
    w = rng.normal(size=(classes, size * size * 3)).astype(np.float32)
    x = images(rng, batch=2, size=size)
    if framework == "torch":
        torch = pytest.importorskip("torch")
        lin = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(size * size * 3, classes, bias=False))
        with torch.no_grad():  # flatten order (H, W, C) as the numpy check below
            lin[1].weight.copy_(
                torch.as_tensor(w.reshape(classes, size, size, 3).transpose(0, 3, 1, 2).reshape(classes, -1))
            )
        feed, back = to_channel_first(x), (lambda a: from_layout("torch", a))
    else:
        tf = pytest.importorskip("tensorflow")
        lin = tf.keras.Sequential(
            [
                tf.keras.layers.Input((size, size, 3)),
                tf.keras.layers.Flatten(),
                tf.keras.layers.Dense(classes, use_bias=False),
            ]
        )
        lin.layers[-1].set_weights([w.T])
        feed, back = x, (lambda a: a)
    sigma = 3.0
    attr, delta = xk.xai.explain(
        lin, feed, target=1, method="blur_ig", steps=400, max_sigma=sigma, grad_step=1e-3, return_delta=True
    )
    from scipy import ndimage

    blurred = np.stack(
        [ndimage.gaussian_filter(xi.astype(np.float64), [sigma, sigma, 0], mode="constant") for xi in x]
    )
    want = w[1].reshape(size, size, 3) * (x - blurred)
    np.testing.assert_allclose(back(attr), want, atol=2e-3 * np.abs(want).max())
    np.testing.assert_allclose(delta, 0.0, atol=2e-3 * np.abs(want).sum(axis=(1, 2, 3)).max())


def test_expected_gradients_complete_per_draw_on_a_linear_model_and_in_expectation(
    framework: str, rng: np.random.Generator
) -> None:
    w = rng.normal(size=(3, 6)).astype(np.float32)
    x = rng.normal(size=(4, 6)).astype(np.float32)
    refs = rng.normal(size=(9, 6)).astype(np.float32)
    lin = analytic(framework, "linear", w)
    attr, delta = xk.xai.explain(
        lin, x, target=2, method="expected_gradients", baseline=refs, nsamples=8, return_delta=True
    )
    np.testing.assert_allclose(delta, 0.0, atol=1e-5)
    # each draw's attribution is w * (x - reference): their mean over the same draws
    draws = [np.random.default_rng(stream_seed(0, 2, s)) for s in range(8)]
    idx = np.stack([g.integers(9, size=4) for g in draws])
    np.testing.assert_allclose(attr, (w[2] * (x[None] - refs[idx])).mean(0), rtol=1e-5, atol=1e-6)
    # a quadratic model: one random point per path is exact only on average; the mean completeness
    # error shrinks like 1 / sqrt(draws) around 0
    quad = analytic(framework, "quadratic", w)
    deltas = [
        xk.xai.explain(
            quad, x, target=0, method="expected_gradients", baseline=refs, nsamples=n, return_delta=True
        )[1]
        for n in (4, 1024)
    ]
    assert np.abs(deltas[1]).mean() < 0.25 * np.abs(deltas[0]).mean()
    gap = np.abs(np.sum(w[0] * x * x, axis=1)).mean()
    assert np.abs(deltas[1]).max() < 0.1 * gap


def test_vargrad_is_the_variance_of_the_noisy_gradients(framework: str, rng: np.random.Generator) -> None:
    """sin model: the gradient at x + e is w cos(x + e); VarGrad is its variance over the very
    draws SmoothGrad (signed) averages: E[g^2] - E[g]^2 from the two sweeps."""
    w = rng.normal(size=(2, 5)).astype(np.float32)
    x = rng.normal(size=(3, 5)).astype(np.float32)
    model = analytic(framework, "sin", w)
    common = {"nsamples": 16, "stdev_spread": 0.3, "seed": 2, "target": 1}
    var = xk.xai.explain(model, x, method="vargrad", **common)
    mean = xk.xai.explain(model, x, method="smoothgrad", magnitude=False, **common)
    sq = xk.xai.explain(model, x, method="smoothgrad", magnitude=True, **common)
    np.testing.assert_allclose(var, sq - mean**2, rtol=1e-4, atol=1e-6)
    assert (var >= -1e-6).all() and var.max() > 0
    # no noise: no variance, exactly (the moments are taken about the first noise sample, so equal
    # gradients cancel without round-off), and the all-zero maps are reported
    with pytest.warns(DegenerateMapWarning, match=r"3 of 3 maps are exactly 0.*stdev_spread=0"):
        still = xk.xai.explain(
            model, x, method="vargrad", nsamples=3, stdev_spread=0.0, target=1, max_batch=4
        )
    assert np.all(still == 0)


def test_vargrad_does_not_cancel_when_the_variance_is_small_next_to_the_mean(framework: str) -> None:
    """Quadratic f = sum(a * x^2): the gradient 2 a x has mean 2 a x0 and, with noise of std s,
    variance 4 a^2 s^2 exactly (in expectation; for the drawn noise, 4 a^2 var(noise)). With
    x0 = 1000 and s = 1e-3 the raw moments E[g^2] ~ 4e6 and E[g]^2 cancel in float32 to
    round-off (~0.5 in units where the variance is 4e-6); the shifted moments keep it."""
    model = analytic(framework, "quadratic", np.ones((1, 4), dtype=np.float32))
    x = np.full((2, 4), 1000.0, dtype=np.float32)
    x[:, 0] = 999.0  # a range, so that the noise level (a fraction of it) is 1e-3
    var = xk.xai.explain(model, x, method="vargrad", nsamples=64, stdev_spread=1e-3, seed=3, target=0)
    # E over 64 draws of 4 * noise^2 has relative spread sqrt(2 / 64) = 0.18: within 0.5x..2x
    assert np.all(var > 0.5 * 4e-6) and np.all(var < 2 * 4e-6), var


def test_input_x_gradient_is_the_input_times_the_gradient(framework: str, rng: np.random.Generator) -> None:
    w = rng.normal(size=(2, 5)).astype(np.float32)
    x = rng.normal(size=(3, 5)).astype(np.float32)
    for kind in ("linear", "quadratic"):
        model = analytic(framework, kind, w)
        got = xk.xai.explain(model, x, method="input_x_gradient", target=0)
        np.testing.assert_allclose(got, x * xk.xai.explain(model, x, method="vanilla", target=0), rtol=1e-6)


# ---- torch == Keras, chunking, seeding, the model -------------------------------------------------
def _same_noise_in_both_frameworks(monkeypatch) -> None:
    """Both backends draw their noise from numpy, channel-last, so torch == Keras holds with noise."""
    from xaikit.backend.tf.core import TFBackend
    from xaikit.backend.torch.core import TorchBackend

    def numpy_normal(self: Any, seed: int, shape: Any, device: Any, dtype: str = "float32") -> Any:
        shape = tuple(int(d) for d in shape)
        channel_first = isinstance(self, TorchBackend) and len(shape) == 4
        draw_shape = (shape[0], shape[2], shape[3], shape[1]) if channel_first else shape
        z = np.random.default_rng(seed).standard_normal(draw_shape)
        return self.as_tensor(to_channel_first(z) if channel_first else z, device, dtype)

    monkeypatch.setattr(TorchBackend, "normal", numpy_normal)
    monkeypatch.setattr(TFBackend, "normal", numpy_normal)


@pytest.mark.parametrize("method", NEW)
def test_torch_equals_keras_on_copied_weights(method: str, rng: np.random.Generator, monkeypatch) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("tensorflow")
    _same_noise_in_both_frameworks(monkeypatch)
    w = cnn_weights(4)
    tm, km = cnn("torch", w), cnn("tf", w)
    x = images(rng, batch=3)
    opts = {
        "vargrad": {"nsamples": 4},
        "input_x_gradient": {"nsamples": 3, "stdev_spread": 0.1},
        "expected_gradients": {"nsamples": 5, "baseline": images(rng, batch=6), "stdev_spread": 0.05},
        "blur_ig": {"steps": 10, "max_sigma": 5.0, "grad_step": 0.05},
    }[method]
    torch_opts = dict(opts)
    if method == "expected_gradients":
        torch_opts["baseline"] = to_channel_first(opts["baseline"])
    a = from_layout("torch", xk.xai.explain(tm, to_channel_first(x), method=method, **torch_opts))
    b = xk.xai.explain(km, x, method=method, **opts)
    _close(a, b, rtol=1e-4, msg=method)


@pytest.mark.parametrize("method", NEW)
def test_chunking_seeding_and_the_model_unchanged(
    framework: str, method: str, rng: np.random.Generator
) -> None:
    model, layout = model_for(framework, seed=5)
    x = layout(images(rng, batch=3))
    # references other than the batch: with the batch itself, a sample whose draws all pick it has
    # an all-zero map (x - reference = 0), reported as degenerate
    refs = layout(images(np.random.default_rng(9), batch=7))
    opts = {
        "vargrad": {"nsamples": 3},
        "input_x_gradient": {"nsamples": 2},
        "expected_gradients": {"nsamples": 3, "baseline": refs},
        "blur_ig": {"steps": 5, "max_sigma": 3.0, "nsamples": 2},
    }[method]
    before = [np.array(p) for p in _params(framework, model)]
    ref = xk.xai.explain(model, x, method=method, seed=1, max_batch=64, **opts)
    for chunk in (1, 2, 4, "auto"):
        got = xk.xai.explain(model, x, method=method, seed=1, max_batch=chunk, **opts)
        np.testing.assert_allclose(
            got, ref, rtol=1e-5, atol=1e-6 * float(np.abs(ref).max()), err_msg=str(chunk)
        )
    other = xk.xai.explain(model, x, method=method, seed=2, max_batch=64, **opts)
    assert not np.array_equal(other, ref)  # every one of them draws noise or references here
    for p, q in zip(before, _params(framework, model)):
        np.testing.assert_array_equal(p, np.array(q))


def _params(framework: str, model: Any) -> list[Any]:
    if framework == "torch":
        return [p.detach().numpy().copy() for p in model.parameters()]
    return [v.numpy().copy() for v in model.weights]


def test_bad_options_are_refused_by_name() -> None:
    torch = pytest.importorskip("torch")
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(12, 2))
    x = torch.rand(2, 3, 2, 2)
    with pytest.raises(
        XaikitTypeError,
        match=r"explain\(method='blur_ig'\) got unknown option\(s\) \['quadrature'\]; its options are steps, max_sigma",
    ):
        xk.xai.explain(model, x, method="blur_ig", quadrature="gausslegendre")
    with pytest.raises(XaikitTypeError, match=r"method='vargrad'.*\['magnitude'\]"):
        xk.xai.explain(model, x, method="vargrad", magnitude=True)
    with pytest.raises(
        XaikitValueError, match=r"max_sigma and grad_step of blur_ig must be > 0; got max_sigma=0"
    ):
        xk.xai.explain(model, x, method="blur_ig", max_sigma=0)
    with pytest.raises(XaikitValueError, match=r"steps must be an int >= 1; got int 0"):
        xk.xai.explain(model, x, method="blur_ig", steps=0)
    with pytest.raises(XaikitValueError, match=r"blur_ig blurs images: model input 'x' must be"):
        xk.xai.explain(torch.nn.Linear(3, 2), torch.rand(2, 3), method="blur_ig")
    with pytest.raises(
        XaikitValueError,
        match=r"reference samples shaped \(N, 3, 2, 2\) like model input 'x''s samples; got ndarray of shape \(4, 3, 2\)",
    ):
        xk.xai.explain(model, x, method="expected_gradients", baseline=np.zeros((4, 3, 2)))
    with pytest.raises(XaikitTypeError, match=r"must be an array of reference samples.*got str 'zeros'"):
        xk.xai.explain(model, x, method="expected_gradients", baseline="zeros")
    with pytest.raises(XaikitValueError, match=r"NaN or infinite"):
        xk.xai.explain(model, x, method="expected_gradients", baseline=np.full((1, 3, 2, 2), np.nan))
    with pytest.raises(XaikitValueError, match=r"nsamples must be an int >= 1; got int 0"):
        xk.xai.explain(model, x, method="vargrad", nsamples=0)


def test_vargrad_matches_pair_gradient_saliency_moments(rng: np.random.Generator, monkeypatch) -> None:
    """PAIR has no VarGrad, but its GradientSaliency.GetSmoothedMask gives both moments over the
    same draws (magnitude=True: E[g^2], False: E[g]); with xaikit's noise injected, VarGrad is
    their difference E[g^2] - E[g]^2."""
    import torch

    pair = pytest.importorskip("saliency.core")
    model, _ = model_for("torch", seed=2, activation="softplus")
    x = images(rng, batch=2)
    n, spread, seed = 6, 0.2, 7
    noise = _our_noise(torch.as_tensor(to_channel_first(x)), seed, n, spread).permute(0, 1, 3, 4, 2).numpy()
    ours = xk.xai.explain(model, x, target=3, method="vargrad", nsamples=n, stdev_spread=spread, seed=seed)
    for b in range(len(x)):
        moments = []
        for magnitude in (True, False):
            queue = [noise[s, b].astype(np.float64) for s in range(n)]
            monkeypatch.setattr(np.random, "normal", lambda *a, _q=queue, **k: _q.pop(0))
            moments.append(
                pair.GradientSaliency().GetSmoothedMask(
                    x[b], _pair_gradients(model, 3), nsamples=n, stdev_spread=spread, magnitude=magnitude
                )
            )
        _close(ours[b], moments[0] - moments[1] ** 2, rtol=1e-5, msg=f"sample {b}")
