"""What the model-agnostic methods take (torch): tabular rows with one feature per column or a
grouping, every ``features=`` kind on images, every baseline, channel-last inputs to a
channel-first model, and the refusals of what they do not take.

A linear model y = w . x + c is its own Shapley game: feature ablation, Shapley sampling,
KernelSHAP and LIME without a penalty give w_i (x_i - b_i) per column (per group: the sum over
its columns) exactly, Sobol the shares (w_i (x_i - b_i))^2 / sum_j (w_j (x_j - b_j))^2.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import xaikit as xk  # noqa: E402
from xaikit.errors import XaikitTypeError, XaikitValueError  # noqa: E402
from xaikit.xai.agnostic.features import feature_ids  # noqa: E402

METHODS = ("feature_ablation", "shapley_sampling", "kernel_shap", "lime", "sobol", "hsic")
#: small settings: a few hundred rows per sample
FAST: dict[str, dict[str, Any]] = {
    "shapley_sampling": {"nsamples": 3},
    "kernel_shap": {"nsamples": 64},
    "lime": {"nsamples": 64},
    "sobol": {"nsamples": 16},
    "hsic": {"nsamples": 64},
}
#: Sobol with 1024 designs: |estimate - exact| measured below 1e-3 (tests/agnostic/test_gsa.py)
SOBOL_TOL = 3e-3


def _linear(w: np.ndarray, bias: float = 0.7) -> Any:
    lin = torch.nn.Linear(len(w), 1)
    with torch.no_grad():
        lin.weight.copy_(torch.as_tensor(np.asarray(w, np.float32)[None]))
        lin.bias.fill_(bias)
    return lin


class ImageLinear(torch.nn.Module):
    """y = sum(W * x) over (C, H, W), recording every batch it is given."""

    def __init__(self, weights: np.ndarray) -> None:
        super().__init__()
        self.register_buffer("w", torch.as_tensor(weights.astype(np.float32)))
        self.seen: list[np.ndarray] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.seen.append(x.detach().numpy().copy())
        return (x * self.w).sum(dim=(1, 2, 3))[:, None]


def _group_sums(values: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """(P,) each entry replaced by the sum of ``values`` over its id's entries."""
    inv = np.unique(ids, return_inverse=True)[1].reshape(-1)
    return np.bincount(inv, weights=values.reshape(-1))[inv].reshape(values.shape)


# ---- tabular rows ---------------------------------------------------------------------------
W6 = np.array([1.0, -2.0, 3.0, 0.5, 0.0, 1.5])
GROUPINGS: dict[str, Any] = {
    "columns": None,
    "shared": np.array([5, 5, -2, 9, 4, 9]),  # any integers: 4 features
    "per_sample": np.array([[0, 0, 1, 1, 2, 2], [3, 1, 1, 1, 1, 3], [0, 1, 2, 3, 7, 5]]),
}


@pytest.mark.parametrize("grouping", list(GROUPINGS))
def test_tabular_rows_all_six_methods(grouping: str) -> None:
    rng = np.random.default_rng(3)
    x = rng.normal(size=(3, 6)).astype(np.float32)
    base = rng.normal(size=(3, 6) if grouping == "per_sample" else (6,)).astype(np.float32)
    groups = GROUPINGS[grouping]
    ids = np.broadcast_to(np.arange(6) if groups is None else groups, (3, 6))
    model = _linear(W6)
    contrib = W6 * (x - base)
    effect = np.stack([_group_sums(contrib[b], ids[b]) for b in range(3)])  # per column: its group's sum

    def run(method: str, **kw: Any) -> Any:
        return xk.xai.explain(model, x, target=0, method=method, features=groups, baseline=base, seed=1, **kw)

    exact = {
        "feature_ablation": {},
        "shapley_sampling": {"nsamples": 2},
        "kernel_shap": {"nsamples": 64},  # >= 2^F - 2: every coalition with its kernel weight
        "lime": {"nsamples": 64, "alpha": 0.0},
    }
    for method, kw in exact.items():
        got = run(method, **kw)
        assert got.shape == x.shape and got.dtype == np.float32
        np.testing.assert_allclose(got, effect, rtol=1e-5, atol=1e-5, err_msg=method)
    # KernelSHAP on drawn coalitions (fewer than 2^F - 2) and LIME's surrogate: still exact on a linear model
    np.testing.assert_allclose(run("kernel_shap", nsamples=30), effect, rtol=1e-5, atol=1e-5)
    lime = run("lime", nsamples=64, alpha=0.0, raw=True)
    np.testing.assert_allclose(lime.r2, 1.0, atol=1e-6)
    f_base = np.broadcast_to(base, x.shape).astype(np.float64) @ W6 + 0.7
    np.testing.assert_allclose(lime.intercept, f_base, rtol=1e-5, atol=1e-5)  # the empty coalition's score
    np.testing.assert_array_equal(
        lime.features, np.stack([np.unique(r, return_inverse=True)[1] for r in ids])
    )
    # Sobol: the shares of the squared group effects
    sob = run("sobol", nsamples=1024)
    share = np.stack([_sobol_shares(effect[b], ids[b]) for b in range(3)])
    np.testing.assert_allclose(sob, share, atol=SOBOL_TOL)
    # HSIC: one value per group, zero for a group the score does not depend on
    hs = run("hsic", nsamples=256)
    for b in range(3):
        for g in np.unique(ids[b]):
            vals = hs[b, ids[b] == g]
            assert np.all(vals == vals[0])
            if np.all(contrib[b, ids[b] == g] == 0):
                assert abs(vals[0]) < 1e-9 * hs[b].max()
    if grouping == "columns":
        assert np.all(hs[:, 4] == 0) or np.abs(hs[:, 4]).max() < 1e-9 * hs.max()


def _sobol_shares(effect: np.ndarray, ids: np.ndarray) -> np.ndarray:
    _, first, inv = np.unique(ids, return_index=True, return_inverse=True)
    sq = effect[first] ** 2
    return (sq / sq.sum())[inv.reshape(-1)]


# ---- image features ----------------------------------------------------------------------------
def _cells(sizes: list[int]) -> np.ndarray:
    return np.repeat(np.arange(len(sizes)), sizes)


@pytest.mark.parametrize(
    ("hw", "segments", "rows", "cols"),
    [
        ((12, 12), 16, [3, 3, 3, 3], [3, 3, 3, 3]),
        ((10, 10), 9, [3, 3, 4], [3, 3, 4]),  # the last cell takes the remainder
        ((8, 12), 10, [2, 2, 4], [4, 4, 4]),  # round(sqrt(10)) = 3 cells a side
        ((12, 12), 64, [1] * 7 + [5], [1] * 7 + [5]),
        ((6, 6), 400, [1] * 6, [1] * 6),  # at most one cell per pixel
        ((8, 8), 2, [8], [8]),  # round(sqrt(2)) = 1: the whole image
    ],
)
def test_patches_grid(hw: tuple[int, int], segments: int, rows: list[int], cols: list[int]) -> None:
    x = np.random.default_rng(0).random((2, 3, *hw))
    expected = (_cells(rows)[:, None] * len(cols) + _cells(cols)[None, :]).reshape(-1)
    f = feature_ids("patches", x, 1, segments)
    np.testing.assert_array_equal(f.counts, [len(rows) * len(cols)] * 2)
    np.testing.assert_array_equal(f.ids, np.stack([expected, expected]))
    assert feature_ids(None, x, 1, segments).ids.tobytes() == f.ids.tobytes()  # the default
    last = feature_ids("patches", np.moveaxis(x, 1, -1), 3, segments)
    np.testing.assert_array_equal(last.ids, f.ids)


def test_patches_attributions_are_cell_sums() -> None:
    rng = np.random.default_rng(1)
    wmap = rng.normal(size=(3, 10, 10))
    x = rng.uniform(-2, 7, (2, 3, 10, 10)).astype(np.float32)
    ids = (_cells([3, 3, 4])[:, None] * 3 + _cells([3, 3, 4])[None, :]).reshape(-1)
    got = xk.xai.explain(ImageLinear(wmap), x, target=0, method="feature_ablation", segments=9)
    for b in range(2):
        per_pixel = (wmap * x[b]).sum(axis=0).reshape(-1)  # the drop of setting a pixel to 0
        want = _group_sums(per_pixel, ids).reshape(10, 10)
        np.testing.assert_allclose(got[b], np.broadcast_to(want, (3, 10, 10)), rtol=1e-5, atol=1e-4)
    assert len(np.unique(got[0])) == 9
    # the same grid given as a mask, a numpy array or a tensor (on the model's device)
    mask = torch.as_tensor(ids.reshape(10, 10))
    explicit = xk.xai.explain(ImageLinear(wmap), x, target=0, method="feature_ablation", features=mask)
    np.testing.assert_array_equal(explicit, got)


def _scene(rng: np.random.Generator, channels: int, size: int = 32) -> np.ndarray:
    """Two (C, size, size) images of four flat colour quadrants with mild noise, in [-50, 300]."""
    img = np.zeros((2, channels, size, size))
    h = size // 2
    for b in range(2):
        for k, (r, c) in enumerate([(0, 0), (0, h), (h, 0), (h, h)]):
            img[b, :, r : r + h, c : c + h] = rng.uniform(0, 1, channels)[:, None, None] + 0.4 * k / 3
    img += rng.normal(0, 0.02, img.shape)
    return (-50 + 350 * img / img.max()).astype(np.float32)


@pytest.mark.parametrize("channels", [1, 3])
@pytest.mark.parametrize("kind", ["slic", "felzenszwalb", "quickshift"])
def test_superpixels(kind: str, channels: int) -> None:
    rng = np.random.default_rng({"slic": 0, "felzenszwalb": 1, "quickshift": 2}[kind] + 10 * channels)
    x = _scene(rng, channels)
    f = feature_ids(kind, x, 1, 16)
    assert f.ids.shape == (2, 32 * 32) and f.ids.dtype == np.int64
    for b in range(2):  # a partition of the pixels, numbered 0 ... F_b - 1 without a gap
        np.testing.assert_array_equal(np.unique(f.ids[b]), np.arange(f.counts[b]))
        assert f.counts[b] >= 3, "the segmentation must split the image for the test to mean something"
    # the value range does not matter (each image is rescaled to [0, 1] first), nor the layout
    lo, hi = x.min(axis=(1, 2, 3), keepdims=True), x.max(axis=(1, 2, 3), keepdims=True)
    np.testing.assert_array_equal(feature_ids(kind, (x - lo) / (hi - lo), 1, 16).ids, f.ids)
    np.testing.assert_array_equal(feature_ids(kind, np.moveaxis(x, 1, -1), 3, 16).ids, f.ids)
    # explain segments the same way: feature ablation gives each segment's sum, and equals the
    # explicit (B, H, W) mask
    wmap = rng.normal(size=(channels, 32, 32))
    got = xk.xai.explain(
        ImageLinear(wmap), x, target=0, method="feature_ablation", features=kind, segments=16
    )
    for b in range(2):
        want = _group_sums((wmap * x[b]).sum(axis=0).reshape(-1), f.ids[b]).reshape(32, 32)
        np.testing.assert_allclose(got[b], np.broadcast_to(want, got[b].shape), rtol=1e-4, atol=1e-3)
    mask = f.ids.reshape(2, 32, 32) * 7 - 3  # any integers
    explicit = xk.xai.explain(ImageLinear(wmap), x, target=0, method="feature_ablation", features=mask)
    np.testing.assert_array_equal(explicit, got)


# ---- baselines ---------------------------------------------------------------------------------
def _blur(img: np.ndarray, sigma: float) -> np.ndarray:
    """(C, H, W) blurred pixel by pixel: each output the Gaussian-weighted mean of the whole image."""
    H, W = img.shape[1:]
    out = np.empty_like(img, dtype=np.float64)
    for i in range(H):
        for j in range(W):
            g = np.exp(
                -0.5 * ((np.arange(H)[:, None] - i) ** 2 + (np.arange(W)[None, :] - j) ** 2) / sigma**2
            )
            out[:, i, j] = (img * g).sum(axis=(1, 2)) / g.sum()
    return out


IMG_IDS = np.repeat(np.repeat(np.arange(4).reshape(2, 2), 4, axis=0), 4, axis=1)  # 8x8, 4 quadrants


def _expected_baseline(name: str, x: np.ndarray, value: Any) -> np.ndarray:
    x = x.astype(np.float64)
    if name == "zeros":
        return np.zeros_like(x)
    if name == "black":  # each sample's minimum
        return np.broadcast_to(x.min(axis=(1, 2, 3), keepdims=True), x.shape)
    if name == "mean":  # each sample's mean colour
        return np.broadcast_to(x.mean(axis=(2, 3), keepdims=True), x.shape)
    if name == "blur":  # sigma = max(1, longest side / 8) = 1
        return np.stack([_blur(s, 1.0) for s in x])
    return np.broadcast_to(np.asarray(value, np.float64), x.shape)


@pytest.mark.parametrize("name", ["zeros", "black", "mean", "blur", "number", "sample", "batch"])
def test_the_model_sees_x_times_m_plus_baseline_times_one_minus_m(name: str) -> None:
    rng = np.random.default_rng(4)
    x = rng.uniform(-3, 5, (2, 3, 8, 8)).astype(np.float32)
    value = {
        "number": 0.25,
        "sample": rng.normal(size=(3, 8, 8)),
        "batch": rng.normal(size=(2, 3, 8, 8)),
    }.get(name, name)
    base = _expected_baseline(name, x, value)
    model = ImageLinear(rng.normal(size=(3, 8, 8)))
    xk.xai.explain(model, x, target=0, method="feature_ablation", segments=4, baseline=value)
    rows = np.concatenate(model.seen)[-5 * 2 :]  # coalition r // B of sample r % B
    for k in range(5):
        m = np.ones((8, 8)) if k == 0 else (IMG_IDS != k - 1).astype(np.float64)
        want = x * m + base * (1 - m)
        np.testing.assert_allclose(
            rows[2 * k : 2 * k + 2], want, rtol=1e-6, atol=1e-5, err_msg=f"coalition {k}"
        )
    model.seen.clear()
    xk.xai.explain(model, x, target=0, method="shapley_sampling", segments=4, baseline=value, nsamples=1)
    rows = np.concatenate(model.seen)[-(1 + 4) * 2 :]
    np.testing.assert_allclose(rows[:2], base, rtol=1e-6, atol=1e-5)  # the empty coalition
    np.testing.assert_allclose(rows[-2:], x, rtol=1e-6, atol=1e-6)  # every feature added


# ---- layouts, and what a map looks like ----------------------------------------------------------
def _conv() -> Any:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3), torch.nn.Tanh(), torch.nn.Flatten(), torch.nn.Linear(4 * 6 * 6, 3)
    )


@pytest.mark.parametrize("features", ["patches", "mask"])
def test_channel_last_input_to_a_channel_first_model(features: str) -> None:
    """A channel-last batch (and baseline) for a channel-first CNN is moved to its layout and the
    maps moved back: the channel-first call's maps, transposed. Every map is constant on each
    feature and over the channels."""
    rng = np.random.default_rng(5)
    last = rng.uniform(-1, 2, (2, 8, 8, 3)).astype(np.float32)
    first = np.ascontiguousarray(last.transpose(0, 3, 1, 2))
    base_last = rng.normal(size=(8, 8, 3)).astype(np.float32)
    feats: Any = "patches" if features == "patches" else (IMG_IDS * 3 + (np.arange(8)[None, :] >= 6))
    model = _conv()
    for method in METHODS:
        kw = {
            "target": [0, 2],
            "method": method,
            "features": feats,
            "segments": 4,
            "seed": 2,
            **FAST.get(method, {}),
        }
        a_last = xk.xai.explain(model, last, baseline=base_last, **kw)
        a_first = xk.xai.explain(model, first, baseline=base_last.transpose(2, 0, 1), **kw)
        assert a_last.shape == last.shape and a_first.shape == first.shape
        np.testing.assert_allclose(
            a_last, a_first.transpose(0, 2, 3, 1), rtol=1e-5, atol=1e-6, err_msg=method
        )
        ids = feature_ids(feats, first, 1, 4).ids.reshape(2, 8, 8)
        assert np.abs(a_first).max() > 0, method
        for b in range(2):
            np.testing.assert_array_equal(
                a_first[b], np.broadcast_to(a_first[b, :1], (3, 8, 8)), err_msg=method
            )
            for g in np.unique(ids[b]):
                vals = a_first[b, 0][ids[b] == g]
                assert np.all(vals == vals[0]), (method, g)


# ---- refusals ----------------------------------------------------------------------------------
class _TwoInputs(torch.nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a.sum(1, keepdim=True) + b.sum(1, keepdim=True)


IMAGES = np.ones((2, 3, 8, 8), np.float32)
BAD: list[tuple[str, Any, Any, dict[str, Any], type[Exception], str]] = [
    (
        "3-D input",
        lambda: torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(20, 2)),
        np.ones((2, 5, 4), np.float32),
        {},
        XaikitValueError,
        r"explains image batches or tabular rows: x must be \(B, C, H, W\), \(B, H, W, C\) or \(B, F\); "
        r"got shape \(2, 5, 4\): flatten each sample",
    ),
    (
        "two inputs",
        _TwoInputs,
        [np.ones((2, 3), np.float32), np.ones((2, 3), np.float32)],
        {},
        XaikitValueError,
        r"explains one input x \(images or rows\); got 2 inputs .*model_kwargs=",
    ),
    (
        "mask of the wrong shape",
        _conv,
        IMAGES,
        {"features": np.zeros((7, 8), np.int64)},
        XaikitValueError,
        r"features must give one id per pixel: shape \(8, 8\) \(the same for every sample\) or \(2, 8, 8\) "
        r"\(one per sample\); got shape \(7, 8\)",
    ),
    (
        "grouping of the wrong length",
        lambda: torch.nn.Linear(6, 2),
        np.ones((2, 6), np.float32),
        {"features": np.arange(5)},
        XaikitValueError,
        r"features must give one id per column: shape \(6,\) \(the same for every sample\) or .*got shape \(5,\)",
    ),
    (
        "bool mask",
        _conv,
        IMAGES,
        {"features": np.zeros((8, 8), bool)},
        XaikitTypeError,
        r"features must be an integer array of feature ids .*got ndarray of shape \(8, 8\) and dtype bool: "
        r"a boolean mask is one region: give ids, e\.g\. mask\.astype\(int\)",
    ),
    (
        "float mask",
        _conv,
        IMAGES,
        {"features": np.zeros((8, 8))},
        XaikitTypeError,
        r"features must be an integer array .*dtype float64: cast whole-number ids with \.astype\(int\)",
    ),
    (
        "ragged mask",
        _conv,
        IMAGES,
        {"features": [[0, 1], [0]]},
        XaikitValueError,
        r"features must be an integer array of feature ids with one id per pixel; got list that is not a rectangular",
    ),
    (
        "segments=0",
        _conv,
        IMAGES,
        {"segments": 0},
        XaikitValueError,
        r"segments must be an int >= 1; got int 0",
    ),
    (
        "unknown features",
        _conv,
        IMAGES,
        {"features": "watershed"},
        XaikitValueError,
        r"features must be one of \('patches', 'slic', 'felzenszwalb', 'quickshift'\), None or an integer array",
    ),
    (
        "superpixels of rows",
        lambda: torch.nn.Linear(6, 2),
        np.ones((2, 6), np.float32),
        {"features": "slic"},
        XaikitValueError,
        r"features='slic' segments images; .* got rows of shape \(6,\): pass features=None",
    ),
    (
        "uniform baseline",
        _conv,
        IMAGES,
        {"baseline": "uniform"},
        XaikitValueError,
        r"baseline must be one of 'zeros', 'black', 'mean', 'blur' or an array; got 'uniform'",
    ),
    (
        "baseline of the wrong shape",
        _conv,
        IMAGES,
        {"baseline": np.zeros((3, 7, 8))},
        XaikitValueError,
        r"baseline for input 'x' must broadcast to the input's shape \(2, 3, 8, 8\)",
    ),
]


@pytest.mark.parametrize("method", ["feature_ablation", "kernel_shap", "sobol"])
@pytest.mark.parametrize("case", BAD, ids=[c[0] for c in BAD])
def test_bad_input_is_refused_naming_the_argument(case: tuple[Any, ...], method: str) -> None:
    _, make, x, kw, kind, pattern = case
    with pytest.raises(kind, match=pattern):
        xk.xai.explain(make(), x, target=0, method=method, **kw)
