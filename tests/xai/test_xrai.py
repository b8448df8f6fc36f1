"""XRAI (``explain(method="xrai")``) against PAIR ``saliency``'s XRAI, and its own invariants.

PAIR explains one channel-last image at a time through a ``call_model_function`` (written here
for each framework); xaikit explains the batch. Segments are compared bit for bit, maps to 1e-5
(the IG part runs in float32 in both, along paths rounded differently), and the region part
alone, PAIR given xaikit's attributions, to 1e-9 with identical region lists.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import xaikit as xk
from tests.xai.models import images, model_for
from xaikit.errors import XaikitTypeError, XaikitValueError
from xaikit.xai.gradient import xrai

xrai_core = pytest.importorskip("saliency.core.xrai")
SIZE = 32


@pytest.fixture(scope="module")
def xs() -> np.ndarray:
    """Three channel-last float32 images (3, 32, 32, 3) in [0, 1]."""
    return images(np.random.default_rng(3), batch=3, size=SIZE)


@pytest.fixture(scope="module")
def segs(xs: np.ndarray) -> list[np.ndarray]:
    """xaikit's candidate regions of each image, (n, H, W) bool (computed once: segmentation is
    the slow part, and most tests here are about something else)."""
    return [xrai.candidate_masks(im).reshape(-1, SIZE, SIZE) for im in xs]


_MODELS: dict[tuple[str, int, str], tuple[Any, Any]] = {}


def model_of(framework: str, seed: int, activation: str = "relu") -> tuple[Any, Any]:
    """``model_for`` at 32 x 32, built once per module (a Keras model's traced steps and chunk
    plan are kept between tests; tests that change a model build their own)."""
    key = (framework, seed, activation)
    if key not in _MODELS:
        _MODELS[key] = model_for(framework, seed=seed, size=SIZE, activation=activation)
    return _MODELS[key]


def pair_call(framework: str, model: Any) -> Any:
    """PAIR's call_model_function: gradients of the target's score w.r.t. a channel-last batch."""
    if framework == "torch":
        import torch

        def call(xb: np.ndarray, call_model_args: Any = None, expected_keys: Any = None) -> dict[str, Any]:
            t = torch.as_tensor(np.asarray(xb, dtype=np.float32)).permute(0, 3, 1, 2).requires_grad_(True)
            (g,) = torch.autograd.grad(model(t)[:, call_model_args["target"]].sum(), t)
            return {"INPUT_OUTPUT_GRADIENTS": g.permute(0, 2, 3, 1).numpy()}

        return call
    import tensorflow as tf

    def call_tf(xb: np.ndarray, call_model_args: Any = None, expected_keys: Any = None) -> dict[str, Any]:
        t = tf.convert_to_tensor(np.asarray(xb, dtype=np.float32))
        with tf.GradientTape() as tape:
            tape.watch(t)
            score = model(t)[:, call_model_args["target"]]
        return {"INPUT_OUTPUT_GRADIENTS": tape.gradient(score, t).numpy()}

    return call_tf


def pair_xrai(framework: str, model: Any, xs: np.ndarray, targets: np.ndarray, **kw: Any) -> list[Any]:
    """PAIR's XRAIOutput per image; ``kw``: steps, algorithm, area_threshold, baselines,
    segments (per image), base_attribution (per image)."""
    params = xrai_core.XRAIParameters(
        steps=kw.pop("steps", 100),
        area_threshold=kw.pop("area_threshold", 1.0),
        algorithm=kw.pop("algorithm", "full"),
        return_xrai_segments=True,
        flatten_xrai_segments=False,
        return_ig_attributions=True,
    )
    segments = kw.pop("segments", None)
    base = kw.pop("base_attribution", None)
    call = pair_call(framework, model)
    out = []
    for i, x in enumerate(xs):
        out.append(
            xrai_core.XRAI().GetMaskWithDetails(
                x, call, {"target": int(targets[i])}, batch_size=params.steps, extra_parameters=params,
                segments=None if segments is None else list(segments[i]),
                base_attribution=None if base is None else base[i], **kw,
            )
        )  # fmt: skip
    return out


def _argmax(framework: str, model: Any, x: np.ndarray) -> np.ndarray:
    if framework == "torch":
        import torch

        with torch.no_grad():
            return model(torch.as_tensor(x)).argmax(1).numpy()
    return np.asarray(model(x)).argmax(1)


def channel_last(framework: str, a: np.ndarray) -> np.ndarray:
    return np.transpose(a, (0, 2, 3, 1)) if framework == "torch" else a


# ---- segmentation ---------------------------------------------------------------------------------
@pytest.mark.parametrize("shape", [(32, 32, 3), (36, 50, 3), (30, 30, 1)])
def test_candidates_equal_pair_segments(shape: tuple[int, ...]) -> None:
    """Felzenszwalb at PAIR's six scales, labels unpacked and dilated by a disk of radius 5: the
    same masks, in the same order, bit for bit (non-square, non-224 and grayscale images)."""
    im = np.random.default_rng(sum(shape)).random(shape).astype(np.float32)
    theirs = np.stack(xrai_core._get_segments_felzenszwalb(im))
    ours = xrai.candidate_masks(im)
    assert ours.dtype == bool
    np.testing.assert_array_equal(ours.reshape(theirs.shape), theirs)


@pytest.mark.slow
def test_candidates_equal_pair_segments_at_224() -> None:
    """At the working size itself (both resizes are then to the same shape), and on a smooth
    image whose segments are large (dilations that reach the image border)."""
    rng = np.random.default_rng(5)
    from scipy.ndimage import gaussian_filter

    im = gaussian_filter(rng.random((224, 224, 3)), (6, 6, 0)).astype(np.float32)
    theirs = np.stack(xrai_core._get_segments_felzenszwalb(im))
    np.testing.assert_array_equal(xrai.candidate_masks(im).reshape(theirs.shape), theirs)


def test_dilation_equals_skimage_per_mask() -> None:
    """The one-scatter dilation of every label equals scikit-image's dilation of each mask,
    for labels touching the border, a label absent from the map (an empty row) and radius 0."""
    from skimage.morphology import dilation, disk

    rng = np.random.default_rng(0)
    seg = rng.integers(2, 9, size=(17, 23))
    seg[seg == 5] = 6  # label 5 absent: its row is empty
    seg[:4, :4] = 2
    for radius in (0, 1, 3, 5):
        ours = xrai.dilated_masks([seg], radius).reshape(-1, 17, 23)
        assert len(ours) == 9 - 2
        for i, label in enumerate(range(2, 9)):
            want = seg == label if radius == 0 else dilation(seg == label, footprint=disk(radius))
            np.testing.assert_array_equal(ours[i], want)


# ---- ranking --------------------------------------------------------------------------------------
@pytest.mark.parametrize(("algorithm", "threshold"), [("full", 1.0), ("full", 0.4), ("fast", 1.0)])
def test_ranking_equals_pair(segs: list[np.ndarray], algorithm: str, threshold: float) -> None:
    """Given the same candidates and attributions (smooth, signed, float64), the map and the
    ranked region list (remainder last) equal PAIR's ``_xrai`` / ``_xrai_fast``."""
    from scipy.ndimage import gaussian_filter

    rng = np.random.default_rng(1)
    for masks in segs:
        attr = gaussian_filter(rng.standard_normal((SIZE, SIZE)), 2.0)
        fn = xrai_core.XRAI._xrai if algorithm == "full" else xrai_core.XRAI._xrai_fast
        kw = {"area_perc_th": threshold} if algorithm == "full" else {}
        want_map, want_regions = fn(
            attr=attr, segs=list(masks), min_pixel_diff=50, integer_segments=False, **kw
        )
        got_map, regions, _gains, rest = xrai.rank_regions(
            masks, attr, algorithm=algorithm, area_threshold=threshold
        )
        np.testing.assert_allclose(got_map, want_map, rtol=0, atol=1e-12)
        assert len(regions) == len(want_regions) and len(regions) > 3
        for got, want in zip(regions, want_regions):
            np.testing.assert_array_equal(got, want)
        assert rest == (threshold < 1.0)


def test_ranking_ties_go_to_the_earliest_candidate() -> None:
    """Candidates adding the same density: PAIR takes the first; so does the vectorized greedy
    (duplicates and equal-valued distinct regions), and min_pixel_diff drops small additions."""
    attr = np.zeros((4, 6))
    attr[:, :3] = 1.0
    attr[:, 3:] = 1.0
    left = np.zeros((4, 6), bool)
    left[:, :3] = True
    right = ~left
    masks = np.stack([right, left, right, left[:, :]])
    for algorithm in ("full", "fast"):
        fn = xrai_core.XRAI._xrai if algorithm == "full" else xrai_core.XRAI._xrai_fast
        want_map, want = fn(attr=attr, segs=list(masks), min_pixel_diff=3, integer_segments=False)
        got_map, regions, _gains, _ = xrai.rank_regions(masks, attr, algorithm=algorithm, min_pixel_diff=3)
        np.testing.assert_array_equal(got_map, want_map)
        np.testing.assert_array_equal(regions, np.stack(want))
        np.testing.assert_array_equal(regions[0], right)  # the first candidate of the tie
    # a candidate adding fewer than min_pixel_diff pixels is dropped: one region, then the rest
    small = np.zeros((4, 6), bool)
    small[0, 0] = True
    _, regions, _gains, rest = xrai.rank_regions(np.stack([left, small]), attr, min_pixel_diff=2)
    assert len(regions) == 2 and rest
    np.testing.assert_array_equal(regions[1], ~left)


# ---- the method against PAIR ----------------------------------------------------------------------
@pytest.mark.parametrize("algorithm", ["full", "fast"])
def test_maps_equal_pair(framework: str, xs: np.ndarray, algorithm: str) -> None:
    """End to end: IG (two constant baselines, PAIR's linspace rule) in one fused sweep, Felzenszwalb
    candidates, greedy regions; the maps equal PAIR's to 1e-5 and its IG attributions (mean over
    the baselines) to 1e-5 of their scale."""
    model, layout = model_of(framework, 1)
    n = 2 if (framework, algorithm) == ("torch", "full") else 1  # segmentation is the slow part
    x = layout(xs[:n])
    targets = _argmax(framework, model, x)
    res = xk.xai.explain(model, x, method="xrai", steps=20, algorithm=algorithm, raw=True)
    theirs = pair_xrai(framework, model, xs[:n], targets, steps=20, algorithm=algorithm)
    np.testing.assert_allclose(res.maps, np.stack([t.attribution_mask for t in theirs]), rtol=0, atol=1e-5)
    pair_ig = np.stack([np.mean(t.ig_attribution, axis=0) for t in theirs])
    ours_ig = channel_last(framework, res.attributions)
    np.testing.assert_allclose(ours_ig, pair_ig, rtol=0, atol=1e-5 * np.abs(pair_ig).max())
    for got, t in zip(res.regions, theirs):
        assert len(got) == len(t.segments)
        for g, w in zip(got, t.segments):
            np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize(("algorithm", "threshold"), [("full", 1.0), ("full", 0.3), ("fast", 1.0)])
def test_region_part_equals_pair_given_our_attributions(
    framework: str, xs: np.ndarray, segs: list[np.ndarray], algorithm: str, threshold: float
) -> None:
    """PAIR given xaikit's IG attributions as ``base_attribution``: the region part alone, maps to
    1e-9 and identical region lists (PAIR segments itself in the first case; then, to save time,
    both get the same candidates)."""
    model, layout = model_of(framework, 1)
    x = layout(xs[2:])
    targets = _argmax(framework, model, x)
    given = None if (algorithm, threshold) == ("full", 1.0) else segs[2:]
    res = xk.xai.explain(
        model, x, method="xrai", steps=10, algorithm=algorithm, area_threshold=threshold, raw=True,
        segments=given,
    )  # fmt: skip
    base = channel_last(framework, res.attributions).astype(np.float64)
    theirs = pair_xrai(
        framework, model, xs[2:], targets, algorithm=algorithm, area_threshold=threshold,
        base_attribution=base, segments=given,
    )  # fmt: skip
    for b, t in enumerate(theirs):
        np.testing.assert_allclose(res.maps[b], t.attribution_mask, rtol=0, atol=1e-9)
        np.testing.assert_array_equal(res.regions[b], np.stack(t.segments))
    if threshold < 1.0:  # (at 1.0 too when the candidates leave pixels uncovered)
        assert res.remainder.all()
    assert len(res.regions[0]) > 3


def test_baselines_and_segments_equal_pair(xs: np.ndarray, segs: list[np.ndarray]) -> None:
    """Explicit baselines (an array, a name) and given segments, as PAIR takes them."""
    torch = pytest.importorskip("torch")
    model, layout = model_of("torch", 1)
    x = layout(xs)
    targets = _argmax("torch", model, x)
    gray = np.full((3, SIZE, SIZE), 0.5, dtype=np.float32)
    ours = xk.xai.explain(
        model, torch.as_tensor(x), targets, method="xrai", steps=12, baselines=[gray, "zeros"], segments=segs
    )
    theirs = pair_xrai(
        "torch", model, xs, targets, steps=12, segments=segs,
        baselines=[np.full((SIZE, SIZE, 3), 0.5, np.float32), np.zeros((SIZE, SIZE, 3), np.float32)],
    )  # fmt: skip
    np.testing.assert_allclose(ours, np.stack([t.attribution_mask for t in theirs]), rtol=0, atol=1e-5)


# ---- invariants -----------------------------------------------------------------------------------
def test_torch_equals_keras_on_copied_weights(xs: np.ndarray, segs: list[np.ndarray]) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("tensorflow")
    maps = {}
    for fw in ("torch", "tf"):
        model, layout = model_of(fw, 1)
        maps[fw] = xk.xai.explain(model, layout(xs), method="xrai", steps=16, segments=segs)
    assert maps["torch"].shape == (3, SIZE, SIZE)
    np.testing.assert_allclose(maps["torch"], maps["tf"], rtol=0, atol=1e-4 * np.abs(maps["tf"]).max())


def test_chunked_equals_unchunked_and_layouts_agree(xs: np.ndarray, segs: list[np.ndarray]) -> None:
    """max_batch cuts paths and baselines across chunks; a channel-last batch for a
    channel-first torch model is moved and gives the same maps. (A smooth model: PAIR's default
    baselines are constant images, where a max-pooling model's gradient is a tie that kernels
    for different batch sizes may break differently.)"""
    torch = pytest.importorskip("torch")
    model, layout = model_of("torch", 1, "softplus")
    x = torch.as_tensor(layout(xs[:2]))
    kw: dict[str, Any] = {"method": "xrai", "steps": 5, "segments": segs[:2], "raw": True}
    whole = xk.xai.explain(model, x, max_batch=256, **kw)
    for chunk in (3, 7):
        part = xk.xai.explain(model, x, max_batch=chunk, **kw)
        np.testing.assert_allclose(part.attributions, whole.attributions, rtol=1e-5, atol=1e-8)
        np.testing.assert_allclose(part.maps, whole.maps, rtol=1e-5, atol=1e-8)
    moved = xk.xai.explain(model, torch.as_tensor(xs[:2]), max_batch=256, **kw)
    np.testing.assert_allclose(moved.maps, whole.maps, rtol=1e-5, atol=1e-8)
    assert moved.attributions.shape == xs[:2].shape


def test_noise_is_seeded_and_zero_noise_is_plain(
    framework: str, xs: np.ndarray, segs: list[np.ndarray]
) -> None:
    """nsamples: SmoothGrad of the IG part, reproducible per seed; stdev_spread=0 gives the plain
    map; random baselines follow the seed too."""
    model, layout = model_of(framework, 1)
    x = layout(xs)
    kw: dict[str, Any] = {"method": "xrai", "steps": 6, "segments": segs}
    plain = xk.xai.explain(model, x, **kw)
    a = xk.xai.explain(model, x, seed=3, nsamples=3, stdev_spread=0.2, **kw)
    b = xk.xai.explain(model, x, seed=3, nsamples=3, stdev_spread=0.2, **kw)
    c = xk.xai.explain(model, x, seed=4, nsamples=3, stdev_spread=0.2, **kw)
    np.testing.assert_array_equal(a, b)
    assert np.abs(a - c).max() > 1e-6
    zero = xk.xai.explain(model, x, seed=3, nsamples=2, stdev_spread=0.0, **kw)
    np.testing.assert_allclose(zero, plain, rtol=1e-5, atol=1e-7)
    u1 = xk.xai.explain(model, x, seed=5, baselines=["uniform"], **kw)
    u2 = xk.xai.explain(model, x, seed=5, baselines=["uniform"], **kw)
    np.testing.assert_array_equal(u1, u2)


def test_raw_regions_are_consistent_with_the_map(
    framework: str, xs: np.ndarray, segs: list[np.ndarray]
) -> None:
    """raw=True: the regions are disjoint and cover the image; the map equals each region's gain
    on it; gains descend (the remainder, when there is one, last); raw=False is the same map."""
    model, layout = model_of(framework, 1)
    x = layout(xs)
    for threshold in (1.0, 0.25):
        kw: dict[str, Any] = {"method": "xrai", "steps": 6, "segments": segs, "area_threshold": threshold}
        res = xk.xai.explain(model, x, raw=True, **kw)
        assert isinstance(res, xrai.XraiResult)
        np.testing.assert_array_equal(res.maps, xk.xai.explain(model, x, **kw))
        assert res.maps.dtype == np.float32 and res.maps.shape == (3, SIZE, SIZE)
        assert res.attributions.shape == x.shape
        for b in range(3):
            regions, gains = res.regions[b], res.gains[b]
            np.testing.assert_array_equal(regions.sum(axis=0), np.ones((SIZE, SIZE)))
            for region, gain in zip(regions, gains):
                np.testing.assert_allclose(res.maps[b][region], np.float32(gain), rtol=0, atol=0)
            ranked = gains[:-1] if res.remainder[b] else gains
            assert np.all(np.diff(ranked) <= 0)
            # each region's gain is its mean attribution (channel maximum)
            amax = channel_last(framework, res.attributions)[b].max(axis=-1)
            np.testing.assert_allclose(gains, [amax[r].mean() for r in regions], rtol=1e-5, atol=1e-9)
        if threshold < 1.0:
            assert res.remainder.all()


def test_model_is_unchanged(xs: np.ndarray, segs: list[np.ndarray]) -> None:
    torch = pytest.importorskip("torch")
    model, layout = model_for("torch", seed=1, size=SIZE)
    model.train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    xk.xai.explain(model, torch.as_tensor(layout(xs)), method="xrai", steps=4, segments=segs)
    assert model.training
    assert all(p.grad is None for p in model.parameters())
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k]), k


# ---- refusals -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        (
            {"windows": 3},
            XaikitTypeError,
            r"unknown option\(s\) \['windows'\]; its options are steps, baselines",
        ),
        ({"algorithm": "slow"}, XaikitValueError, r"algorithm must be one of 'full', 'fast'; got 'slow'"),
        ({"steps": 0}, XaikitValueError, r"steps must be an int >= 1; got int 0"),
        ({"area_threshold": 1.5}, XaikitValueError, r"area_threshold must be a number in \[0, 1\]"),
        ({"min_pixel_diff": 0}, XaikitValueError, r"min_pixel_diff must be an int >= 1"),
        ({"raw": "yes"}, XaikitTypeError, r"raw must be True or False; got str"),
        ({"baselines": "zeros"}, XaikitTypeError, r"baselines must be None .* or a list of baselines"),
        ({"baselines": []}, XaikitValueError, r"baselines must hold at least one baseline"),
        ({"baselines": ["grey"]}, XaikitValueError, r"baselines\[0\] must be one of 'uniform'"),
        ({"nsamples": 0}, XaikitValueError, r"nsamples must be None or an int >= 1; got int 0"),
        ({"return_delta": True}, XaikitValueError, r"method 'xrai' has none"),
        (
            {"segments": [[]]},
            XaikitValueError,
            r"segments must be None or one list .* \(2 images\); got 1 entries",
        ),
        (
            {"segments": [[np.ones((4, 4), bool)]] * 2},
            XaikitValueError,
            r"segments\[0\]\[0\] is ndarray of shape \(4, 4\)",
        ),
        (
            {"segments": [[np.full((SIZE, SIZE), 2)]] * 2},
            XaikitValueError,
            r"holds values other than 0 and 1",
        ),
    ],
)
def test_bad_options_are_refused(
    framework: str, xs: np.ndarray, options: dict[str, Any], error: type, message: str
) -> None:
    model, layout = model_of(framework, 1)
    with pytest.raises(error, match=message):
        xk.xai.explain(model, layout(xs[:2]), method="xrai", **options)


def test_non_images_and_multi_input_models_are_refused() -> None:
    torch = pytest.importorskip("torch")
    dense = torch.nn.Linear(6, 2)
    with pytest.raises(
        XaikitValueError, match=r"x must be \(B, C, H, W\) or \(B, H, W, C\); got shape \(3, 6\)"
    ):
        xk.xai.explain(dense, torch.rand(3, 6), method="xrai")

    class Two(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(2 * 3 * 8 * 8, 2)

        def forward(self, a: Any, b: Any) -> Any:
            return self.lin(torch.cat([a.flatten(1), b.flatten(1)], 1))

    with pytest.raises(XaikitValueError, match=r"method 'xrai' explains one image input; got 2 inputs"):
        xk.xai.explain(Two(), [torch.rand(2, 3, 8, 8), torch.rand(2, 3, 8, 8)], method="xrai")
