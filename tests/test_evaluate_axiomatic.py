"""Effective complexity, MST-C, non-sensitivity and input invariance: known answers, the
definitional differences from Quantus, agreement with Quantus's recorded outputs
(tests/data/quantus_axiomatic.npz, written by benchmarks/quantus_axiomatic.py in an environment
with Quantus), torch == Keras, chunking, seeding, the model left unchanged, bad options."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import xaikit as xk
from tests.evaluate_models import seeded_lenet, weights_of
from xaikit.errors import XaikitError, XaikitTypeError, XaikitValueError
from xaikit.evaluate.complexity import emst_length

DATA = Path(__file__).resolve().parent / "data" / "quantus_axiomatic.npz"
SIDE = 6


@pytest.fixture(scope="module")
def recorded() -> Any:
    with np.load(DATA) as data:
        return {k: data[k] for k in data.files}


def conv_net(framework: str, seed: int = 0, padding: int = 0, bias: bool = True) -> Any:
    """Conv(1 -> 3, 3x3, bias) -> ReLU -> Flatten -> Dense(3) on 6 x 6 grey images, the same
    weights in both frameworks (torch channel-first, Keras channel-last)."""
    rng = np.random.default_rng(seed)
    kernel = rng.normal(size=(3, 1, 3, 3)).astype(np.float32)
    kbias = rng.normal(size=3).astype(np.float32)
    out = SIDE - 2 + 2 * padding
    dense = (rng.normal(size=(3, 3 * out * out)) / 4).astype(np.float32)
    dbias = rng.normal(size=3).astype(np.float32)
    if framework == "torch":
        import torch

        model = torch.nn.Sequential(
            torch.nn.Conv2d(1, 3, 3, padding=padding, bias=bias),
            torch.nn.ReLU(),
            torch.nn.Flatten(),
            torch.nn.Linear(3 * out * out, 3),
        )
        with torch.no_grad():
            model[0].weight.copy_(torch.as_tensor(kernel))
            if bias:
                model[0].bias.copy_(torch.as_tensor(kbias))
            model[3].weight.copy_(torch.as_tensor(dense))
            model[3].bias.copy_(torch.as_tensor(dbias))
        return model.eval()
    import tensorflow as tf

    layers = tf.keras.layers
    model = tf.keras.Sequential(
        [
            layers.Input((SIDE, SIDE, 1)),
            layers.Conv2D(3, 3, padding="same" if padding else "valid", use_bias=bias),
            layers.ReLU(),
            layers.Flatten(),
            layers.Dense(3),
        ]
    )
    conv = [kernel.transpose(2, 3, 1, 0)] + ([kbias] if bias else [])
    model.layers[0].set_weights(conv)
    keras_dense = dense.reshape(3, 3, out, out).transpose(2, 3, 1, 0).reshape(-1, 3)
    model.layers[3].set_weights([keras_dense, dbias])
    return model


def images(framework: str, batch: int = 3, seed: int = 1) -> np.ndarray:
    x = np.random.default_rng(seed).uniform(size=(batch, 1, SIDE, SIDE)).astype(np.float32)
    return x if framework == "torch" else x.transpose(0, 2, 3, 1)


def same_weights(before: list[np.ndarray], after: list[np.ndarray]) -> bool:
    return len(before) == len(after) and all(np.array_equal(a, b) for a, b in zip(before, after))


# ---- effective complexity ----------------------------------------------------------------------------
def test_effective_complexity_known_answers():
    maps = np.zeros((3, 4, 4))
    maps[0, 0, :3] = [1.0, -0.5, 1e-7]  # 1e-7 of the peak: below eps
    maps[1] = 2.0
    maps[2, 1, 1] = 1e-3  # alone: its own peak
    ec = xk.evaluate.effective_complexity
    assert ec(maps).scores.tolist() == [2.0, 16.0, 1.0]
    assert ec(maps, normalize=False, eps=1e-4).scores.tolist() == [2.0, 16.0, 1.0]
    assert ec(maps, normalize=False, eps=0.9).scores.tolist() == [1.0, 16.0, 0.0]
    assert ec(np.zeros((2, 3, 3))).scores.tolist() == [0.0, 0.0]
    # channels: summed by magnitude (a pixel counts once) or every value
    rgb = np.zeros((1, 3, 5, 5))
    rgb[0, :, 0, 0] = [1.0, -1.0, 1.0]
    rgb[0, 1, 2, 2] = 0.5
    assert ec(rgb).scores.tolist() == [2.0]
    assert ec(rgb, channels="flatten").scores.tolist() == [4.0]


def test_effective_complexity_agrees_with_quantus(recorded):
    maps = recorded["maps_input_x_gradient"]
    ec = xk.evaluate.effective_complexity
    np.testing.assert_array_equal(ec(maps).scores, recorded["quantus_ec_per_sample"])
    np.testing.assert_array_equal(ec(maps).scores, recorded["quantus_ec_default"])  # one scale here
    np.testing.assert_array_equal(ec(maps, normalize=False, eps=1e-3).scores, recorded["quantus_ec_raw"])


def test_effective_complexity_does_not_depend_on_the_batch(recorded):
    """The definitional difference: Quantus divides by the batch's largest magnitude, so a map
    1e-6 times smaller than its neighbours counts 0 there; each map by its own here."""
    scaled = recorded["ec_scaled_maps"]
    ours = xk.evaluate.effective_complexity(scaled).scores
    alone = xk.evaluate.effective_complexity(scaled[:1]).scores
    assert ours[0] == alone[0] == recorded["quantus_ec_per_sample"][0] == 899.0
    assert recorded["quantus_ec_scaled"].tolist() == [0.0, 900.0, 900.0]
    np.testing.assert_array_equal(ours[1:], recorded["quantus_ec_scaled"][1:])


# ---- MST-C ---------------------------------------------------------------------------------------------
def test_emst_length_is_the_minimum_spanning_tree():
    from scipy.sparse.csgraph import minimum_spanning_tree
    from scipy.spatial.distance import cdist

    rng = np.random.default_rng(0)
    for n in (3, 10, 60):
        pts = np.unique(rng.integers(0, 12, size=(n, 2)), axis=0).astype(np.float64)
        dense = float(minimum_spanning_tree(cdist(pts, pts)).sum())  # the complete graph
        assert emst_length(pts) == pytest.approx(dense, rel=1e-12)
    grid = np.argwhere(np.ones((5, 7))).astype(np.float64)  # cocircular points everywhere
    assert emst_length(grid) == pytest.approx(34.0)
    assert emst_length(np.array([[0.0, 0.0], [0.0, 3.0], [0.0, 1.0]])) == pytest.approx(3.0)  # a line


def test_mst_c_known_answers():
    maps = np.zeros((4, 8, 8))
    maps[0, 2:4, 2:4] = 1.0  # a 2x2 blob: hull area 1, tree 3
    maps[1, 0, :] = 1.0  # a line: the hull is flat (diagonal), tree 7
    maps[3, 5, 5] = 1.0  # one point
    r = xk.evaluate.mst_c(maps, threshold=95, scale=False)
    diagonal = np.hypot(8, 8)
    np.testing.assert_allclose(r.spread[:2], [1.0, 1 / diagonal])
    np.testing.assert_allclose(r.cohesion[:2], [4 / 3, 8 / 7])
    np.testing.assert_allclose(r.scores[:2], [4 / 3, 8 / 7 / diagonal])
    assert r.points.tolist() == [4, 8, 0, 64]  # the 95th percentile of one pixel's map is 0: all
    assert r.scores[2] == 0.0
    single = xk.evaluate.mst_c(maps[3:], threshold=99)  # above 0: the one pixel, no tree
    assert single.points.tolist() == [1] and np.isnan(single.scores[0]) and np.isnan(single.mean)
    scaled = xk.evaluate.mst_c(maps, threshold=95)
    np.testing.assert_allclose(scaled.scores[:2], r.scores[:2] * diagonal * 100)
    assert r.mean == pytest.approx(np.mean(r.scores))
    # sign and scale free; channels summed by magnitude
    rng = np.random.default_rng(2)
    m = rng.normal(size=(2, 3, 10, 10))
    base = xk.evaluate.mst_c(np.abs(m).sum(axis=1)).scores
    np.testing.assert_allclose(xk.evaluate.mst_c(-3.0 * m).scores, base, rtol=1e-12)


def test_mst_c_spans_separate_blobs_where_quantus_drops_the_gap(recorded):
    """The definitional difference: two 5x5 blobs 12 columns apart. The tree spans the gap:
    L = 2 * 24 + 12 = 60; Quantus's k-nearest-neighbour graph (k=20) falls apart and its forest
    is 48 long. Hull: 4 x 20."""
    a = np.zeros((1, 8, 24))
    a[0, 0:5, 0:5] = 1.0
    a[0, 0:5, 16:21] = 1.0
    r = xk.evaluate.mst_c(a)
    scale = np.hypot(8, 24) * 100
    assert r.points.tolist() == [50]
    np.testing.assert_allclose(r.scores, [1 / np.sqrt(80) * 50 / 60 * scale], rtol=1e-12)
    np.testing.assert_allclose(recorded["quantus_mst_blobs"], [1 / np.sqrt(80) * 50 / 48 * scale], rtol=1e-12)


def test_mst_c_agrees_with_quantus_main(recorded):
    ours = xk.evaluate.mst_c(recorded["maps_input_x_gradient"]).scores
    np.testing.assert_allclose(ours, recorded["quantus_mst_maps"], rtol=1e-9)


@pytest.mark.parametrize(
    ("fn", "kwargs", "match"),
    [
        ("mst_c", {"threshold": 100}, "threshold must be a percentile in \\[0, 100\\); got 100"),
        ("mst_c", {"threshold": -1}, "threshold"),
        ("mst_c", {"threshold": "high"}, "threshold"),
        ("mst_c", {"scale": "yes"}, "scale must be True or False; got"),
        ("effective_complexity", {"eps": -1e-5}, "eps"),
        ("effective_complexity", {"normalize": 1}, "normalize must be True or False"),
        ("effective_complexity", {"channels": "max"}, "channels must be one of 'sum', 'flatten'; got 'max'"),
    ],
)
def test_map_metrics_refuse_bad_options(fn, kwargs, match):
    with pytest.raises(XaikitError, match=match):
        getattr(xk.evaluate, fn)(np.ones((1, 4, 4)), **kwargs)


def test_mst_c_refuses_maps_that_are_not_images():
    with pytest.raises(XaikitValueError, match="mst_c needs image maps"):
        xk.evaluate.mst_c(np.ones((2, 16)))


# ---- non-sensitivity -----------------------------------------------------------------------------------
def linear_model(framework: str, weights: np.ndarray) -> Any:
    """f(x) = weights . x on 2 x 2 grey images (one class), no bias."""
    if framework == "torch":
        import torch

        model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(4, 1, bias=False))
        with torch.no_grad():
            model[1].weight.copy_(torch.as_tensor(weights.reshape(1, 4)))
        return model.eval()
    import tensorflow as tf

    model = tf.keras.Sequential(
        [
            tf.keras.layers.Input((2, 2, 1)),
            tf.keras.layers.Flatten(),
            tf.keras.layers.Dense(1, use_bias=False),
        ]
    )
    model.layers[-1].set_weights([weights.reshape(4, 1)])
    return model


def test_non_sensitivity_known_answers(framework):
    """The model reads the bottom row; the map credits pixels 1 (top right) and 2 (bottom
    left): pixel 3 is used but not credited (missed), pixel 1 is credited but not used
    (spurious)."""
    model = linear_model(framework, np.array([0.0, 0.0, 1.0, 2.0], np.float32))
    x = np.array([[[[1.0, 2.0], [3.0, 4.0]]]], np.float32)
    x = x if framework == "torch" else x.transpose(0, 2, 3, 1)
    a = np.array([[[0.0, 5.0], [5.0, 0.0]]])
    r = xk.evaluate.non_sensitivity(model, x, a, target=0)  # black: the sample's minimum, 1
    assert (r.scores.tolist(), r.missed.tolist(), r.spurious.tolist()) == ([2.0], [1.0], [1.0])
    assert r.zero.tolist() == [[True, False, False, True]]
    assert r.changed.tolist() == [[False, False, True, True]]  # pixel 0 is already black
    np.testing.assert_allclose(r.deltas, [[0.0, 0.0, 2.0, 6.0]], atol=1e-6)
    assert r.mean == 2.0
    # an exact map: no violation; a map that credits nothing: every used pixel missed
    exact = np.array([[[0.0, 0.0], [1.0, 2.0]]])
    assert xk.evaluate.non_sensitivity(model, x, exact, target=0).scores.tolist() == [0.0]
    none = xk.evaluate.non_sensitivity(model, x, np.zeros((1, 2, 2)), target=0)
    assert (none.missed.tolist(), none.spurious.tolist()) == ([2.0], [0.0])
    # output_eps: a change of 2 counts as no change under a tolerance of 3
    loose = xk.evaluate.non_sensitivity(model, x, exact, target=0, output_eps=3.0)
    assert loose.changed.tolist() == [[False, False, False, True]] and loose.scores.tolist() == [1.0]


def test_non_sensitivity_takes_a_baseline_tensor_as_an_array(framework):
    # an array baseline was handed on without being read to the host (every other metric reads it)
    model = linear_model(framework, np.array([0.0, 0.0, 1.0, 2.0], np.float32))
    x = np.array([[[[1.0, 2.0], [3.0, 4.0]]]], np.float32)
    x = x if framework == "torch" else x.transpose(0, 2, 3, 1)
    a = np.array([[[0.0, 5.0], [5.0, 0.0]]])
    base = np.full_like(x, 0.5)
    want = xk.evaluate.non_sensitivity(model, x, a, target=0, baseline=base)
    if framework == "torch":
        import torch

        tensor = torch.from_numpy(base)
    else:
        import tensorflow as tf

        tensor = tf.constant(base)
    got = xk.evaluate.non_sensitivity(model, x, a, target=0, baseline=tensor)
    np.testing.assert_array_equal(got.deltas, want.deltas)
    assert got.scores.tolist() == want.scores.tolist()


def test_non_sensitivity_groups_stay_within_one_class(framework):
    """The definitional difference (Quantus 0.6's features_in_step): a 2 x 2 image, a model of
    the bottom row, attributions on the top row. Perturbed together but each group within one
    class, the answer stays the paper's 4; Quantus 0.6 perturbs all four pixels as one group
    and blames every pixel for the change: 2 (recorded)."""
    model = linear_model(framework, np.array([0.0, 0.0, 1.0, 1.0], np.float32))
    x = np.array([[[[1.0, 2.0], [3.0, 4.0]]]], np.float32)
    x = x if framework == "torch" else x.transpose(0, 2, 3, 1)
    a = np.array([[[10.0, 10.0], [0.0, 0.0]]])
    for step in (1, 2, 4):
        r = xk.evaluate.non_sensitivity(model, x, a, target=0, features_in_step=step, normalize=False)
        assert r.scores.tolist() == [4.0], step
    with np.load(DATA) as data:
        assert data["quantus_ns_bottom_row_step4"].tolist() == [2.0]


def test_non_sensitivity_agrees_with_quantus(recorded):
    model = seeded_lenet(1, softmax=False)
    x, y, maps = recorded["x"], recorded["y"], recorded["maps_input_x_gradient"]
    before = weights_of("torch", model)
    # one sample each (1025 LeNet rows): a sample's score does not depend on the batch around it
    # a score change within float32 rounding (a few ulp of the ~0.05 scores) of the threshold
    # may fall either side on another CPU's kernels: those pixels may differ, no other
    black = xk.evaluate.non_sensitivity(model, x[:1], maps[:1], target=y[:1])
    draws = recorded["ns_uniform_draws"][2:]
    uniform = xk.evaluate.non_sensitivity(model, x[2:], maps[2:], target=y[2:], baseline=draws)
    for ours, theirs in (
        (black, recorded["quantus_ns_black"][:1]),
        (uniform, recorded["quantus_ns_uniform"][2:]),
    ):
        borderline = int((np.abs(ours.deltas - 1e-5) < 3e-8).sum())
        assert borderline <= 3
        assert abs(ours.scores[0] - theirs[0]) <= borderline, (ours.scores, theirs, borderline)
    assert same_weights(before, weights_of("torch", model))


def test_non_sensitivity_chunks_seeds_and_frameworks(framework):
    model = conv_net(framework)
    x = images(framework)
    maps = np.random.default_rng(3).normal(size=(3, SIDE, SIDE))
    maps[:, :2] = 0.0  # a third of the pixels credited with nothing
    before = weights_of(framework, model)
    auto = xk.evaluate.non_sensitivity(model, x, maps, target=0, baseline="uniform", seed=4, output_eps=1e-4)
    one = xk.evaluate.non_sensitivity(
        model, x, maps, target=0, baseline="uniform", seed=4, output_eps=1e-4, max_batch=1
    )
    np.testing.assert_array_equal(auto.scores, one.scores)
    np.testing.assert_allclose(auto.deltas, one.deltas, atol=1e-5)
    assert one.chunks == [1] * (SIDE * SIDE + 1) * 3
    other = xk.evaluate.non_sensitivity(model, x, maps, target=0, baseline="uniform", seed=5, output_eps=1e-4)
    assert not np.allclose(other.deltas, auto.deltas)
    # each sample's score does not depend on the batch around it
    alone = xk.evaluate.non_sensitivity(model, x[1:2], maps[1:2], target=0, output_eps=1e-4)
    full = xk.evaluate.non_sensitivity(model, x, maps, target=0, output_eps=1e-4)
    assert alone.scores[0] == full.scores[1]
    assert same_weights(before, weights_of(framework, model))


def test_non_sensitivity_torch_equals_keras():
    scores = {}
    for fw in ("torch", "tf"):
        maps = np.random.default_rng(3).normal(size=(3, SIDE, SIDE))
        maps[:, :2] = 0.0
        r = xk.evaluate.non_sensitivity(conv_net(fw), images(fw), maps, target=1, output_eps=1e-4)
        scores[fw] = (r.scores, r.deltas)
    np.testing.assert_array_equal(scores["torch"][0], scores["tf"][0])
    np.testing.assert_allclose(scores["torch"][1], scores["tf"][1], atol=1e-5)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"eps": -1.0}, "eps"),
        ({"output_eps": "small"}, "output_eps"),
        ({"features_in_step": 0}, "features_in_step"),
        (
            {"baseline": "white"},
            "baseline must be one of 'zeros', 'black', 'mean', 'blur', 'uniform' or an array",
        ),
        ({"normalize": "yes"}, "normalize must be True or False"),
        ({"baseline": np.ones((2, 7))}, "baseline for input 'x' must broadcast"),
    ],
)
def test_non_sensitivity_refuses_bad_options(kwargs, match):
    model = conv_net("torch")
    with pytest.raises(XaikitError, match=match):
        xk.evaluate.non_sensitivity(model, images("torch"), np.ones((3, SIDE, SIDE)), target=0, **kwargs)


# ---- input invariance ----------------------------------------------------------------------------------
def test_input_invariance_vanilla_is_invariant_input_x_gradient_is_not(framework):
    model = conv_net(framework)
    x = images(framework)
    before = weights_of(framework, model)
    vanilla = xk.evaluate.input_invariance(model, x, "vanilla")
    assert vanilla.invariant.tolist() == [True] * 3 and vanilla.mean == 1.0
    assert vanilla.max_abs.max() < 1e-5 and vanilla.output_diff.max() < 1e-5
    assert vanilla.layer in ("0", model.layers[0].name if framework == "tf" else "0")
    assert same_weights(before, weights_of(framework, model))
    ixg = xk.evaluate.input_invariance(model, x, "input_x_gradient", shift=-1.0)
    assert ixg.invariant.tolist() == [False] * 3 and ixg.scores.tolist() == [0.0] * 3
    # input x gradient of the shifted input: (x + m) g, so it moves by |m g|
    grads = np.abs(np.asarray(xk.xai.explain(model, x, target=vanilla.targets, method="vanilla")))
    np.testing.assert_allclose(ixg.max_abs, grads.reshape(3, -1).max(axis=1), rtol=1e-4)
    assert same_weights(before, weights_of(framework, model))


def test_input_invariance_torch_equals_keras():
    out = {
        fw: xk.evaluate.input_invariance(conv_net(fw), images(fw), "input_x_gradient", shift=0.5)
        for fw in ("torch", "tf")
    }
    np.testing.assert_allclose(out["torch"].max_abs, out["tf"].max_abs, rtol=1e-4)
    np.testing.assert_array_equal(out["torch"].targets, out["tf"].targets)


def test_input_invariance_agrees_with_quantus(recorded):
    model = seeded_lenet(1, softmax=False)
    x, y = recorded["x"], recorded["y"]
    before = weights_of("torch", model)
    for method in ("vanilla", "input_x_gradient"):
        r = xk.evaluate.input_invariance(model, x, method, target=y)
        np.testing.assert_array_equal(r.scores, recorded[f"quantus_ii_{method}"])
        np.testing.assert_allclose(r.max_abs, recorded[f"quantus_ii_{method}_max_abs"], atol=1e-5)
    # the definitional difference: Quantus's default shift leaves each sample's first value
    # unshifted, so its shifted model is another function and vanilla gradients "fail"
    assert recorded["quantus_ii_vanilla_default"].tolist() == [0.0, 0.0, 0.0]
    assert xk.evaluate.input_invariance(model, x, "vanilla", target=y).invariant.all()
    assert same_weights(before, weights_of("torch", model))


def test_input_invariance_refuses_models_it_cannot_shift(framework):
    x = images(framework)
    for model, match in (
        (conv_net(framework, bias=False), "needs a bias in the model's first layer"),
        (conv_net(framework, padding=1), "pads its input with zeros"),
    ):
        before = weights_of(framework, model)
        with pytest.raises(XaikitValueError, match=match):
            xk.evaluate.input_invariance(model, x, "vanilla")
        assert same_weights(before, weights_of(framework, model))


def test_input_invariance_refuses_a_first_layer_that_is_not_dense_or_conv():
    import torch

    model = torch.nn.Sequential(torch.nn.BatchNorm2d(1), torch.nn.Flatten(), torch.nn.Linear(36, 2)).eval()
    with pytest.raises(XaikitValueError, match="its first layer '0' is a BatchNorm2d"):
        xk.evaluate.input_invariance(model, images("torch"), "vanilla")


def test_input_invariance_refuses_a_model_that_rescales_its_input():
    """The premise check: a model that scales its input before the first layer is another
    function after the shift; refused, and restored."""
    import torch

    class Scaled(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = conv_net("torch")

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.net(2.0 * x)

    model = Scaled().eval()
    before = weights_of("torch", model)
    with pytest.raises(XaikitValueError, match="the layer does not see the raw input"):
        xk.evaluate.input_invariance(model, images("torch"), "vanilla")
    assert same_weights(before, weights_of("torch", model))


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "match"),
    [
        (
            (np.ones((3, SIDE, SIDE)),),
            {},
            XaikitTypeError,
            "method must be the name of an explanation method",
        ),
        (("no_such_method",), {}, XaikitValueError, "no_such_method"),
        (("vanilla",), {"shift": "one"}, XaikitError, "shift"),
        (("vanilla",), {"atol": -1.0}, XaikitError, "atol"),
        (("vanilla",), {"rtol": float("nan")}, XaikitError, "rtol"),
    ],
)
def test_input_invariance_refuses_bad_options(args, kwargs, error, match):
    with pytest.raises(error, match=match):
        xk.evaluate.input_invariance(conv_net("torch"), images("torch"), *args, **kwargs)


# ---- compare -------------------------------------------------------------------------------------------
def test_compare_runs_the_new_metrics():
    model = conv_net("torch")
    x = images("torch")
    names = ["effective_complexity", "mst_c", "non_sensitivity", "input_invariance"]
    res = xk.evaluate.compare(model, x, ("vanilla", "input_x_gradient"), metrics=names, target=0)
    table = res.table.set_index("method")
    maps = np.asarray(xk.xai.explain(model, x, target=0, method="input_x_gradient"))
    assert (
        table.loc["input_x_gradient", "effective_complexity"] == xk.evaluate.effective_complexity(maps).mean
    )
    assert table.loc["input_x_gradient", "mst_c"] == pytest.approx(xk.evaluate.mst_c(maps).mean, rel=1e-12)
    ns = xk.evaluate.non_sensitivity(model, x, maps, target=0)
    assert table.loc["input_x_gradient", "non_sensitivity"] == ns.mean
    assert table.loc["vanilla", "input_invariance"] == 1.0
    assert table.loc["input_x_gradient", "input_invariance"] == 0.0
    # a model whose first layer cannot absorb the shift: NaN, not an error
    padded = xk.evaluate.compare(conv_net("torch", padding=1), x, ("vanilla",), metrics=["input_invariance"])
    assert np.isnan(padded.table.set_index("method").loc["vanilla", "input_invariance"])
