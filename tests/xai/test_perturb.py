"""Occlusion and RISE (``xaikit.xai.perturbation``): captum agreement, torch == Keras, analytic values."""

from __future__ import annotations

import contextlib
from typing import Any

import numpy as np
import pytest

import xaikit as xk
from tests.xai.models import ModelCache, from_layout, images, model_for, to_channel_first
from xaikit.errors import DegenerateMapWarning, XaikitTypeError, XaikitValueError
from xaikit.xai.perturbation import rise

SIZE = 12


#: the module's models (see ``ModelCache``), each checked unchanged after every test
_MODELS = ModelCache()


def shared_model(framework: str, seed: int = 0) -> tuple[Any, Any]:
    """``model_for(framework, seed)``, made once per module (explaining never changes a model). Tests
    that check a model unchanged, count the masks made, wrap the model or expect a once-per-model
    warning build their own."""
    return _MODELS.get(framework, ("cnn", seed), lambda: model_for(framework, seed))


_shared_models_stay_unchanged, _forget_models = _MODELS.fixtures()


def _explain(model: Any, x: np.ndarray, framework: str, method: str, **kw: Any) -> np.ndarray:
    """explain on channel-last images, the result back in channel-last."""
    xin = to_channel_first(x) if framework == "torch" else x
    out = xk.xai.explain(model, xin, method=method, **kw)
    return from_layout(framework, out) if out.ndim == 4 else out


# ---- captum ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("window", "stride", "baseline"),
    [
        ((3, 3), (2, 2), 0.0),
        ((5, 4), (3, 2), 0.3),  # neither divides 12 - window: the last windows are cut at the edge
        ((4, 4), (4, 4), -1.0),
        ((12, 12), (1, 1), 0.0),  # one window: the whole image
        ((2, 3), (2, 1), 0.5),
        ((1, 1), (1, 1), 0.0),
    ],
)
def test_occlusion_matches_captum(
    rng: np.random.Generator, window: tuple[int, int], stride: tuple[int, int], baseline: float
) -> None:
    torch = pytest.importorskip("torch")
    captum_attr = pytest.importorskip("captum.attr")
    whole = window == (12, 12)  # one window: one score change for every pixel, a constant map
    # its own model where a degenerate map is expected: it is warned about once per model
    model, layout = model_for("torch", seed=1) if whole else shared_model("torch", seed=1)
    x = torch.as_tensor(layout(images(rng, batch=3)))
    target = torch.as_tensor([0, 3, 4])
    expect = (
        pytest.warns(DegenerateMapWarning, match=r"3 of 3 maps hold one value.*occlusion window covers")
        if whole
        else contextlib.nullcontext()
    )
    with expect:
        ours = xk.xai.explain(
            model,
            x,
            target=target,
            method="occlusion",
            window=window,
            stride=stride,
            baseline=baseline,
            max_batch=50,
        )
    theirs = captum_attr.Occlusion(model).attribute(
        x, target=target, sliding_window_shapes=(3, *window), strides=(3, *stride), baselines=baseline
    )
    assert ours.shape == tuple(x.shape) and ours.dtype == np.float32
    np.testing.assert_allclose(ours, theirs.detach().numpy(), rtol=0, atol=1e-5)


# ---- torch == Keras -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("method", "options"),
    [
        ("occlusion", {"window": 3, "stride": 2, "baseline": 0.2}),
        ("occlusion", {}),
        ("rise", {"nsamples": 120, "cell": 4}),
    ],
)
def test_torch_equals_keras_on_copied_weights(rng: np.random.Generator, method: str, options: dict) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("tensorflow")
    x = images(rng, batch=3)
    (tm, _), (km, _) = shared_model("torch", 2), shared_model("tf", 2)  # cnn(framework, cnn_weights(2))
    a = _explain(tm, x, "torch", method, seed=3, **options)
    b = _explain(km, x, "tf", method, seed=3, **options)
    assert a.shape == b.shape == ((3, SIZE, SIZE, 3) if method == "occlusion" else (3, SIZE, SIZE))
    assert np.abs(a).max() > 1e-3  # not trivially zero
    np.testing.assert_allclose(a, b, rtol=0, atol=1e-4)


# ---- analytic: a model that reads one box ---------------------------------------------------------
BOX = (3, 7, 5, 9)  # rows 3..6, columns 5..8


def box_model(framework: str) -> Any:
    """``_box_model(framework)``, made once per module."""
    return _MODELS.get(framework, ("box",), lambda: (_box_model(framework), None))[0]


def _box_model(framework: str) -> Any:
    """score = sum of the pixels (all channels) in BOX, as a (B, 1) output."""
    y0, y1, x0, x1 = BOX
    if framework == "torch":
        import torch

        class Box(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.w = torch.nn.Parameter(torch.ones(1))

            def forward(self, x: torch.Tensor) -> torch.Tensor:
                return (x[:, :, y0:y1, x0:x1].sum((1, 2, 3)) * self.w)[:, None]

        return Box()
    import tensorflow as tf

    layers = tf.keras.layers
    return tf.keras.Sequential(
        [
            layers.Input((SIZE, SIZE, 3)),
            layers.Cropping2D(((y0, SIZE - y1), (x0, SIZE - x1))),
            layers.Flatten(),
            layers.Dense(1, use_bias=False, kernel_initializer="ones"),
        ]
    )


def test_occlusion_of_one_pixel_windows_is_the_box(framework: str, rng: np.random.Generator) -> None:
    x = images(rng, batch=2)
    attr = _explain(box_model(framework), x, framework, "occlusion", window=1, stride=1)
    y0, y1, x0, x1 = BOX
    expected = np.zeros_like(x)
    expected[:, y0:y1, x0:x1, :] = x[:, y0:y1, x0:x1, :].sum(-1, keepdims=True)  # every channel
    np.testing.assert_allclose(attr, expected, rtol=0, atol=1e-5)


def test_occlusion_of_the_box_model_by_hand(framework: str, rng: np.random.Generator) -> None:
    """A window's score drop is the box's part of it, (x - baseline) summed; a pixel's attribution
    the mean of the drops of the windows covering it (captum's windows, cut at the edge)."""
    x = images(rng, batch=2)
    wh, ww, sh, sw, base = 4, 3, 3, 2, 0.25
    attr = _explain(
        box_model(framework), x, framework, "occlusion", window=(wh, ww), stride=(sh, sw), baseline=base
    )
    y0, y1, x0, x1 = BOX
    inside = np.zeros((SIZE, SIZE), bool)
    inside[y0:y1, x0:x1] = True
    total = np.zeros((2, SIZE, SIZE))
    count = np.zeros((SIZE, SIZE))
    for top in range(0, SIZE - wh + sh, sh):  # ceil((12 - 4) / 3) + 1 = 4 rows of windows
        for left in range(0, SIZE - ww + sw, sw):
            win = np.zeros((SIZE, SIZE), bool)
            win[top : top + wh, left : left + ww] = True
            drop = ((x - base) * (win & inside)[None, :, :, None]).sum((1, 2, 3))
            total += drop[:, None, None] * win
            count += win
    expected = np.repeat((total / count)[..., None], 3, axis=-1)
    np.testing.assert_allclose(attr, expected, rtol=0, atol=1e-5)
    far = np.ones((SIZE, SIZE), bool)  # pixels whose windows never reach the box
    far[max(0, y0 - wh) : y1 + wh, max(0, x0 - ww) : x1 + ww] = False
    assert far.any() and np.all(attr[:, far] == 0)


# ---- RISE -----------------------------------------------------------------------------------------
def test_mask_interpolation_is_the_papers_bilinear_resize() -> None:
    """The RISE upsampling equals scipy's order-1 interpolation at half-pixel centres with mirrored
    edges (what skimage.transform.resize(order=1, mode='reflect') of the authors' code runs)."""
    ndimage = pytest.importorskip("scipy.ndimage")
    cells, size = 5, 18
    u = (np.arange(size) + 0.5) * cells / size - 0.5
    for a in range(cells):
        e = np.zeros(cells)
        e[a] = 1.0
        ref = ndimage.map_coordinates(e, [u], order=1, mode="mirror")
        np.testing.assert_allclose(rise._interp(size, cells)[:, a], ref, atol=1e-12)


def _linear(framework: str, w: np.ndarray, c: float) -> Any:
    """score = sum(w * x) + c on (B, 8, 8, 1) images (torch: (B, 1, 8, 8))."""
    flat_w = w.reshape(1, -1).astype(np.float32)  # channel-last order; 1 channel: same in both
    if framework == "torch":
        import torch

        lin = torch.nn.Linear(flat_w.shape[1], 1)
        with torch.no_grad():
            lin.weight.copy_(torch.as_tensor(flat_w))
            lin.bias.fill_(c)
        return torch.nn.Sequential(torch.nn.Flatten(), lin)
    import tensorflow as tf

    dense = tf.keras.layers.Dense(1)
    model = tf.keras.Sequential([tf.keras.layers.Input((8, 8, 1)), tf.keras.layers.Flatten(), dense])
    dense.set_weights([flat_w.T, np.array([c], np.float32)])
    return model


def test_rise_on_a_linear_model_is_its_estimator_and_near_its_expectation(
    framework: str, rng: np.random.Generator
) -> None:
    w = rng.normal(size=(8, 8))
    x = rng.random((1, 8, 8, 1)).astype(np.float32)
    c, n, cell, p = 0.5, 3000, 4, 0.5
    sal = _explain(_linear(framework, w, c), x, framework, "rise", nsamples=n, cell=cell, p=p, seed=7)
    assert sal.shape == (1, 8, 8)
    # 1) the estimator, from the same masks: sum_i f(x * M_i) M_i / (N p)
    masks = rise.rise_masks(7, 0, n, (8, 8), cell, p).astype(np.float64)
    v = w * x[0, :, :, 0]
    f = (masks * v).sum((1, 2)) + c
    np.testing.assert_allclose(sal[0], np.tensordot(f, masks, 1) / (n * p), rtol=1e-5, atol=1e-5)
    # 2) its expectation: E[S] = c + p sum(v) + (1 - p) (Ky V Kx), K = A A^T of the interpolation
    # rows at each shift, averaged over the shifts (grid cells independent Bernoulli(p))
    up = rise._interp((cell + 1) * 2, cell)  # ceil(8 / 4) = 2 pixels per cell: shifts 0, 1
    k = np.mean([up[s : s + 8] @ up[s : s + 8].T for s in range(2)], axis=0)
    expected = c + p * v.sum() + (1 - p) * (k @ v @ k)
    stderr = np.sqrt(np.var(f[:, None, None] * masks, axis=0) / n) / p
    assert np.all(np.abs(sal[0] - expected) < 5 * stderr + 1e-6)
    assert np.corrcoef(sal[0].ravel(), expected.ravel())[0, 1] > 0.9


def test_rise_masks_are_binary_grids_upsampled() -> None:
    m = rise.rise_masks(0, 0, 200, (16, 16), 4, 0.3)
    assert m.shape == (200, 16, 16) and m.min() >= 0 and m.max() <= 1
    assert abs(m.mean() - 0.3) < 0.03  # E[M] = p: the interpolation weights sum to 1
    # the same mask whatever range it is made in: a pure function of (seed, index)
    np.testing.assert_array_equal(m[37:70], rise.rise_masks(0, 37, 70, (16, 16), 4, 0.3))


def test_rise_seeded_and_chunking_invariant(framework: str, rng: np.random.Generator) -> None:
    model, layout = shared_model(framework, seed=1)
    x = layout(images(rng, batch=3))
    run = lambda **kw: xk.xai.explain(model, x, method="rise", nsamples=70, cell=3, **kw)  # noqa: E731
    a = run(seed=1, max_batch=512)
    np.testing.assert_array_equal(a, run(seed=1, max_batch=512))
    assert np.abs(a - run(seed=2, max_batch=512)).max() > 1e-3
    for chunk in (1, 5, 64):  # chunks cutting masks across samples, and across mask blocks
        np.testing.assert_allclose(run(seed=1, max_batch=chunk), a, rtol=0, atol=1e-6)


def test_occlusion_chunking_invariant(framework: str, rng: np.random.Generator) -> None:
    model, layout = shared_model(framework, seed=1)
    x = layout(images(rng, batch=3))
    run = lambda chunk: xk.xai.explain(model, x, method="occlusion", window=3, max_batch=chunk)  # noqa: E731
    whole = run(1000)
    for chunk in (2, 7, 32):
        np.testing.assert_allclose(run(chunk), whole, rtol=0, atol=1e-6)


def test_rise_memory_is_flat_in_n(monkeypatch: pytest.MonkeyPatch, rng: np.random.Generator) -> None:
    """Masks are made per chunk: the most masks alive at once does not grow with N."""
    pytest.importorskip("torch")
    model, layout = model_for("torch", seed=1)
    x = layout(images(rng, batch=2))
    made: list[int] = []
    real = rise._DeviceMasks.__call__  # each chunk's (and fold block's) masks

    def counting(self: Any, start: int, stop: int) -> Any:
        made.append(stop - start)
        return real(self, start, stop)

    monkeypatch.setattr(rise._DeviceMasks, "__call__", counting)
    # the fold takes blocks of _FOLD_ELEMENTS mask values: here as few as allowed (32 masks)
    monkeypatch.setattr(rise, "_FOLD_ELEMENTS", 1)
    peaks = {}
    for n in (40, 400):
        made.clear()
        xk.xai.explain(model, x, method="rise", nsamples=n, cell=3, max_batch=16)
        peaks[n] = max(made)
        assert sum(made) == 2 * n  # each mask made twice: for its rows, then for the fold
    # at most one chunk's masks (16 rows of 2 samples: 8) or one fold block (32), whatever N
    assert peaks[40] == peaks[400] == rise._MASK_BLOCK
    # by default a fold block holds at most _FOLD_ELEMENTS values (or 32 masks), whatever N
    monkeypatch.setattr(rise, "_FOLD_ELEMENTS", 100 * 12 * 12)
    for n in (40, 400, 1000):
        made.clear()
        maps = xk.xai.explain(model, x, method="rise", nsamples=n, cell=3, max_batch=16)
        assert sum(made) == 2 * n and max(made) == min(n, 100)
        assert maps.shape[-2:] == (12, 12)


# ---- options like the gradient methods ------------------------------------------------------------
def test_target_output_and_model_kwargs_are_honoured(rng: np.random.Generator) -> None:
    torch = pytest.importorskip("torch")
    model, layout = model_for("torch", seed=1)
    x = torch.as_tensor(layout(images(rng, batch=3)))

    class Scaled(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = model

        def forward(self, x: torch.Tensor, scale: torch.Tensor) -> dict:
            out = self.inner(x)
            return {"other": -out, "logits": out * scale[:, None]}

    scale = torch.as_tensor([1.0, 2.0, -0.5])
    kw = {"window": 3, "stride": 2}
    plain = xk.xai.explain(model, x, method="occlusion", target=[1, 2, 3], **kw)
    both = xk.xai.explain(
        Scaled(),
        x,
        method="occlusion",
        target=[1, 2, 3],
        output="logits",
        model_kwargs={"scale": scale},
        **kw,
    )
    np.testing.assert_allclose(both, plain * scale.numpy()[:, None, None, None], rtol=1e-5, atol=1e-6)
    # target None: the predicted class, pinned
    pred = model(x).argmax(1)
    np.testing.assert_array_equal(
        xk.xai.explain(model, x, method="rise", nsamples=20, cell=3),
        xk.xai.explain(model, x, method="rise", nsamples=20, cell=3, target=pred),
    )


# ---- the model is left as it was ------------------------------------------------------------------
def test_torch_model_is_unchanged(rng: np.random.Generator) -> None:
    torch = pytest.importorskip("torch")
    nn = torch.nn
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 4, 3),
        nn.BatchNorm2d(4),
        nn.ReLU(),
        nn.Dropout(0.5),
        nn.Flatten(),
        nn.Linear(4 * 6 * 6, 3),
    )
    model.train()
    model[3].eval()  # a mixed state must come back mixed
    with torch.no_grad():
        model[1].running_mean.uniform_(-1, 1)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    flags = [m.training for m in model.modules()]
    x = rng.random((2, 3, 8, 8)).astype(np.float32)
    for method, kw in (("occlusion", {"window": 2}), ("rise", {"nsamples": 16, "cell": 2})):
        first = xk.xai.explain(model, x, method=method, **kw)
        after = model.state_dict()
        assert all(torch.equal(v, after[k]) for k, v in before.items())
        assert [m.training for m in model.modules()] == flags
        assert all(p.grad is None for p in model.parameters())
        np.testing.assert_array_equal(xk.xai.explain(model, x, method=method, **kw), first)  # dropout off


def test_keras_model_is_unchanged(rng: np.random.Generator) -> None:
    pytest.importorskip("tensorflow")
    model, _ = model_for("tf", seed=1)
    before = [w.copy() for w in model.get_weights()]
    x = images(rng, batch=2)
    for method, kw in (("occlusion", {"window": 2}), ("rise", {"nsamples": 16, "cell": 2})):
        xk.xai.explain(model, x, method=method, **kw)
        for a, b in zip(before, model.get_weights()):
            np.testing.assert_array_equal(a, b)


# ---- bad input ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("method", "options", "error", "message"),
    [
        ("occlusion", {"window": 13}, XaikitValueError, r"window must fit in the image: at most .* \(12, 12\); got \(13, 13\)"),
        ("occlusion", {"window": (2, 20)}, XaikitValueError, r"window must fit .*; got \(2, 20\)"),
        ("occlusion", {"window": (2, 2, 2)}, XaikitValueError, r"window must be an int or a pair .* length 3"),
        ("occlusion", {"window": 2.5}, XaikitTypeError, r"window must be a pair \(height, width\) or an int >= 1; got float 2.5"),
        ("occlusion", {"stride": 0}, XaikitValueError, r"stride must be .*an int >= 1; got int 0"),
        ("occlusion", {"stride": (1, -2)}, XaikitValueError, r"stride must be an int >= 1; got int -2"),
        ("occlusion", {"window": 2, "stride": 3}, XaikitValueError, r"stride must be at most the window \(2, 2\).*got \(3, 3\)"),
        ("occlusion", {"baseline": "zeros"}, XaikitTypeError, r"baseline must be a number; got str 'zeros'"),
        ("rise", {"nsamples": 0}, XaikitValueError, r"nsamples must be an int >= 1; got int 0"),
        ("rise", {"nsamples": 10.0}, XaikitTypeError, r"nsamples must be an int >= 1; got float 10.0"),
        ("rise", {"cell": 13}, XaikitValueError, r"cell must be an int in \[1, 12\]; got int 13"),
        ("rise", {"p": 0}, XaikitValueError, r"p must be a number in \(0, 1\]; got int 0"),
        ("rise", {"window": 3}, XaikitTypeError, r"unknown option\(s\) \['window'\]; its options are nsamples, cell, p"),
        ("occlusion", {"nsamples": 3}, XaikitTypeError, r"unknown option\(s\) \['nsamples'\]; its options are window, stride, baseline"),
        ("occlusion", {"return_delta": True}, XaikitValueError, r"return_delta .* method 'occlusion' has none"),
    ],
)  # fmt: skip
def test_bad_options(rng: np.random.Generator, method: str, options: dict, error: type, message: str) -> None:
    pytest.importorskip("torch")
    model, layout = shared_model("torch")
    with pytest.raises(error, match=message):
        xk.xai.explain(model, layout(images(rng, batch=2)), method=method, **options)


def test_non_image_inputs_are_refused(rng: np.random.Generator) -> None:
    torch = pytest.importorskip("torch")
    model = torch.nn.Linear(6, 2)
    with pytest.raises(XaikitValueError, match=r"'occlusion' explains image batches.*got shape \(3, 6\)"):
        xk.xai.explain(model, rng.random((3, 6)), method="occlusion")
