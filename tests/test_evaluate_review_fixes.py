"""Review fixes in xk.evaluate: numpy scalar options, compare's duplicate method options, the
image layout of make_mosaics, the NaN message of the localisation metrics, and the documented
relevance-mass example."""

from __future__ import annotations

import numpy as np
import pytest

import xaikit as xk
from xaikit.errors import XaikitError, XaikitValueError
from xaikit.evaluate._common import short_channel_axis

torch = pytest.importorskip("torch")


def _linear_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16, 3)).eval()


# 1. numpy scalars as number options


def test_monotonicity_correlation_value_range_accepts_numpy_scalars() -> None:
    """value_range=(x.min(), x.max()) of a float32 batch gives float32 scalars: same draws and
    scores as the equal Python floats (they were refused)."""
    model = _linear_model()
    x = np.random.RandomState(0).rand(2, 1, 4, 4).astype(np.float32)
    maps = np.random.RandomState(1).rand(2, 4, 4).astype(np.float32)
    kw = {"features_in_step": 4, "nsamples": 3}
    want = xk.evaluate.monotonicity_correlation(
        model, x, maps, value_range=(float(x.min()), float(x.max())), **kw
    ).scores
    got = xk.evaluate.monotonicity_correlation(model, x, maps, value_range=(x.min(), x.max()), **kw).scores
    assert isinstance(x.min(), np.float32)
    np.testing.assert_array_equal(got, want)
    ints = xk.evaluate.monotonicity_correlation(model, x, maps, value_range=(0, np.int64(1)), **kw).scores
    floats = xk.evaluate.monotonicity_correlation(model, x, maps, value_range=(0.0, 1.0), **kw).scores
    np.testing.assert_array_equal(ints, floats)


@pytest.mark.parametrize(
    ("value_range", "named"),
    [
        ((False, True), r"value_range\[0\]"),
        ((0.0, "1"), r"value_range\[1\]"),
        ((0.0, np.float32(np.nan)), r"value_range\[1\]"),
        ((np.float32(1.0), np.float32(0.5)), r"value_range must be \(low, high\) with low < high"),
        ((0.0,), r"value_range must be \(low, high\)"),
    ],
)
def test_monotonicity_correlation_value_range_refusals(value_range: tuple, named: str) -> None:
    model = _linear_model()
    x = np.zeros((1, 1, 4, 4), np.float32)
    with pytest.raises(XaikitValueError, match=named):
        xk.evaluate.monotonicity_correlation(model, x, np.ones((1, 4, 4)), value_range=value_range)


def test_smooth_mprt_stdev_spread_accepts_numpy_scalars() -> None:
    model = _linear_model()
    x = np.random.RandomState(0).rand(2, 1, 4, 4).astype(np.float32)
    want = xk.evaluate.smooth_mprt(model, x, "vanilla", nsamples=2, stdev_spread=0.25)
    got = xk.evaluate.smooth_mprt(model, x, "vanilla", nsamples=2, stdev_spread=np.float32(0.25))
    np.testing.assert_array_equal(got.scores, want.scores)
    assert got.stdev_spread == 0.25 and type(got.stdev_spread) is float
    zero = xk.evaluate.smooth_mprt(model, x, "vanilla", nsamples=2, stdev_spread=np.int64(0))
    np.testing.assert_array_equal(
        zero.scores, xk.evaluate.smooth_mprt(model, x, "vanilla", nsamples=2, stdev_spread=0.0).scores
    )
    for bad in (True, np.float64(-0.1), np.float32(np.inf), "0.1"):
        with pytest.raises(XaikitError, match="stdev_spread"):
            xk.evaluate.smooth_mprt(model, x, "vanilla", nsamples=2, stdev_spread=bad)


# 2. compare: one method's options under its label and its name


def _conv_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(1, 4, 3), torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(144, 3)
    ).eval()


def test_compare_refuses_options_under_label_and_name() -> None:
    model = _conv_model()
    x = np.random.RandomState(0).rand(2, 1, 8, 8).astype(np.float32)
    few, many = {"nsamples": 4, "baseline": "black"}, {"nsamples": 64, "baseline": "black"}

    def delta(opts: dict) -> float:
        res = xk.evaluate.compare(
            model, x, {"a": "integrated"}, metrics=["completeness_delta"], method_options=opts
        )
        return float(res.table["completeness_delta"].iloc[0])

    by_label, by_name = delta({"a": few}), delta({"integrated": many})
    assert by_label != by_name  # the options are used, under either key
    for opts in ({"a": few, "integrated": many}, {"integrated": many, "a": few}):
        with pytest.raises(
            XaikitValueError, match=r"method_options: '(a|integrated)' and '(a|integrated)' both"
        ):
            delta(opts)
    with pytest.raises(ValueError, match=r"'a'.*'integrated'|'integrated'.*'a'"):
        delta({"integrated": few, "a": few})  # even equal options: one key per method


def test_compare_label_key_is_the_label_in_either_order() -> None:
    """A key that is a label ("ig", also the method name of "ig2") gives that label's options
    only; "ig2"'s own key gives its options, whatever the order of the keys (the later key used
    to win)."""
    from xaikit.evaluate.compare import _methods, _options

    entries = _methods({"integrated": "integrated", "ig2": "integrated"})
    few, many = {"nsamples": 4}, {"nsamples": 64}
    for opts in ({"integrated": few, "ig2": many}, {"ig2": many, "integrated": few}):
        assert _options(opts, entries) == {"integrated": few, "ig2": many}
    assert _options({"ig2": many, "integrated": {}}, entries) == {"integrated": {}, "ig2": many}
    with pytest.raises(
        XaikitValueError, match=r"'integrated' is the label of one method and the method name of \['ig2'\]"
    ):
        _options({"integrated": few}, entries)  # meant for ig2 too, or not? refused, not guessed
    plain = _methods({"a": "integrated", "b": "integrated"})
    assert _options({"integrated": few}, plain) == {"a": few, "b": few}  # a method name: every label of it
    with pytest.raises(XaikitValueError, match=r"'integrated' and 'b' both give the options of method 'b'"):
        _options({"integrated": few, "b": many}, plain)


def test_compare_options_for_two_methods_still_work() -> None:
    model = _conv_model()
    x = np.random.RandomState(0).rand(2, 1, 8, 8).astype(np.float32)
    res = xk.evaluate.compare(
        model,
        x,
        {"a": "integrated", "b": "smoothgrad"},
        metrics=["sparseness"],
        method_options={"integrated": {"nsamples": 4}, "b": {"nsamples": 3}},
    )
    assert list(res.table["method"]) == ["a", "b"]


# 3. make_mosaics reads the image layout as the maps-only metrics do


def test_short_channel_axis_rule() -> None:
    assert short_channel_axis((2, 1, 4, 4), None) == 1
    assert short_channel_axis((2, 4, 4, 1), None) == -1
    assert short_channel_axis((2, 3, 8, 8), None) == 1
    assert short_channel_axis((2, 8, 8, 3), None) == -1
    assert short_channel_axis((2, 3, 4, 4), None) is None
    assert short_channel_axis((2, 8, 8, 8), None) is None
    assert short_channel_axis((2, 3, 4, 4), torch.zeros(1)) == 1
    assert short_channel_axis((2, 3, 4, 4), None, first=False) == -1
    assert short_channel_axis((2, 1, 4, 1), None, first=False) == -1


def _quadrant(m: np.ndarray, q: int, rows: int, cols: int) -> np.ndarray:
    """Quadrant q of mosaics m, spatial axes (rows, cols)."""
    h, w = m.shape[rows] // 2, m.shape[cols] // 2
    index = [slice(None)] * m.ndim
    index[rows] = slice(0, h) if q < 2 else slice(h, None)
    index[cols] = slice(0, w) if q % 2 == 0 else slice(w, None)
    return m[tuple(index)]


def test_make_mosaics_grey_channel_first_small_images() -> None:
    """(B, 1, 4, 4) is 4 x 4 grey images: (n, 1, 8, 8) mosaics, each quadrant one source image
    (it was read as channel-last and gave (n, 2, 8, 4))."""
    y = np.array([0, 1, 2] * 4)
    x = np.random.RandomState(0).rand(12, 1, 4, 4).astype(np.float32)
    m = xk.evaluate.make_mosaics(x, y, target_class=1, n=3, seed=0)
    assert m.x.shape == (3, 1, 8, 8)
    for q in range(4):
        np.testing.assert_array_equal(_quadrant(m.x, q, 2, 3), x[m.indices[:, q]])
    flat = xk.evaluate.make_mosaics(x[:, 0], y, target_class=1, n=3, seed=0)
    np.testing.assert_array_equal(m.x[:, 0], flat.x)
    last = xk.evaluate.make_mosaics(x.transpose(0, 2, 3, 1), y, target_class=1, n=3, seed=0)
    assert last.x.shape == (3, 8, 8, 1)
    np.testing.assert_array_equal(last.x[..., 0], flat.x)


def test_make_mosaics_ambiguous_numpy_refused_torch_channel_first() -> None:
    y = np.array([0, 1, 2] * 4)
    x = np.random.RandomState(1).rand(12, 3, 4, 4).astype(np.float32)
    with pytest.raises(XaikitValueError, match="channel axis is not known"):
        xk.evaluate.make_mosaics(x, y, target_class=1, n=2, seed=0)
    m = xk.evaluate.make_mosaics(torch.tensor(x), y, target_class=1, n=2, seed=0)
    assert m.x.shape == (2, 3, 8, 8)
    for q in range(4):
        np.testing.assert_array_equal(_quadrant(m.x, q, 2, 3), x[m.indices[:, q]])
    big = np.random.RandomState(2).rand(12, 3, 6, 6).astype(np.float32)  # the short end decides
    assert xk.evaluate.make_mosaics(big, y, target_class=1, n=2, seed=0).x.shape == (2, 3, 12, 12)
    with pytest.raises(XaikitValueError, match="channel axis is not known"):
        xk.evaluate.make_mosaics(np.zeros((12, 5, 6, 7)), y, target_class=1, n=2, seed=0)


# 4. a NaN in the maps of a localisation metric is reported as such, not as a shape mismatch


_LOCALISATION = [
    xk.evaluate.localization,
    xk.evaluate.localization_auc,
    xk.evaluate.top_k_intersection,
    xk.evaluate.attribution_localisation,
    xk.evaluate.relevance_mass_accuracy,
    xk.evaluate.relevance_rank_accuracy,
]


@pytest.mark.parametrize("metric", _LOCALISATION, ids=lambda f: f.__name__)
@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_localisation_non_finite_maps_message(metric, bad: float) -> None:
    maps = np.random.RandomState(0).rand(3, 4, 4)
    maps[1, 2, 2] = bad
    mask = np.zeros((3, 4, 4), bool)
    mask[:, :2, :2] = True
    with pytest.raises(XaikitValueError, match=r"^saliency holds NaN or infinite values \(samples \[1\]\)$"):
        metric(maps, mask)
    with pytest.raises(XaikitValueError, match=r"samples \[1\]"):  # channel axis too
        metric(np.stack([maps, maps], axis=1), mask)
    with pytest.raises(XaikitValueError, match="cover the same pixels"):  # finite: the shape is the problem
        metric(np.ones((3, 5, 5)), mask)


# 5. the documented relevance-mass example (docs/evaluate.md)


def test_documented_relevance_mass_example() -> None:
    """+1 on the 4 mask pixels, -0.25 on the 12 others: 1.0 with absolute=False, 4 / 7 by default."""
    gt = np.zeros((1, 4, 4), bool)
    gt[0, :2, :2] = True
    m = np.full((1, 4, 4), -0.25)
    m[gt] = 1.0
    np.testing.assert_allclose(xk.evaluate.relevance_mass_accuracy(m, gt, absolute=False), [1.0])
    np.testing.assert_allclose(xk.evaluate.relevance_mass_accuracy(m, gt), [4 / 7])
    assert set(xk.evaluate.localization(m, gt)) == {"energy", "pointing", "rank_accuracy"}
