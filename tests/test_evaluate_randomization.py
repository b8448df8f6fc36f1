"""The model-parameter randomization test: exact new maps, similarity, restoring the weights."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import xaikit as xk
from tests.evaluate_models import SIZE, layout, linear, square_weights, weights_of
from tests.xai.models import images, model_for
from xaikit.errors import XaikitTypeError, XaikitValueError
from xaikit.evaluate._common import spearman


def _assert_same(before: list[np.ndarray], after: list[np.ndarray]) -> None:
    assert len(before) == len(after)
    for a, b in zip(before, after):
        assert a.dtype == b.dtype and a.tobytes() == b.tobytes()  # bit-identical


def test_spearman_matches_scipy_and_handles_constants(rng: np.random.Generator) -> None:
    from scipy.stats import spearmanr

    a, b = rng.normal(size=(4, 30)), rng.normal(size=(4, 30))
    b[1] = a[1] * 3 + 1  # monotone: 1
    b[2] = -a[2]  # reversed: -1
    a[3, :10] = 0.0  # ties
    got = spearman(a, b)
    want = [spearmanr(a[i], b[i]).statistic for i in range(4)]
    np.testing.assert_allclose(got, want, atol=1e-12)
    assert got[1] == pytest.approx(1.0) and got[2] == pytest.approx(-1.0)
    const = np.zeros((2, 5))
    assert spearman(const, const).tolist() == [1.0, 1.0]
    assert spearman(const, rng.normal(size=(2, 5))).tolist() == [0.0, 0.0]


def _randomized_linear(
    framework: str, rng: np.random.Generator
) -> tuple[Any, Any, np.ndarray, np.ndarray, list[Any]]:
    """``(model, result, x, w, weights before)``: a randomization test (seed 5) of a linear model
    of weights ``w``, whose weights are checked to be restored bit for bit afterwards."""
    w = square_weights(rng)
    x = rng.uniform(size=(3, SIZE, SIZE, 3)).astype(np.float32)
    model = linear(framework, w)
    before = weights_of(framework, model)
    r = xk.evaluate.randomization_test(model, layout(framework, x), seed=5)
    _assert_same(before, weights_of(framework, model))  # bit-identical after every copy
    return model, r, x, w, before


def test_randomizing_a_linear_model_gives_the_new_weights(framework: str, rng: np.random.Generator) -> None:
    model, r, x, w, before = _randomized_linear(framework, rng)
    assert r.table.columns.tolist() == ["step", "layer", "spearman_abs", "spearman", "ssim"]
    assert len(r.table) == 1 and list(r.maps) == ["original", r.table["layer"][0]]
    targets = np.einsum("chwk,bhwk->bc", w, x).argmax(axis=1)
    assert r.targets.tolist() == targets.tolist()
    # the new weights are a seeded normal draw with the old weights' spread, in the framework's layout
    name = xk.evaluate.model_layers(model)[0]
    assert name == r.table["layer"][0]
    new = np.random.default_rng([5, 0]).normal(
        0.0, float(before[0].astype(np.float64).std()), size=before[0].shape
    )
    new = new.astype(np.float32)
    if framework == "torch":
        rows = new.reshape(3, 3, SIZE, SIZE).transpose(0, 2, 3, 1)  # (classes, H, W, C)
    else:
        rows = new.T.reshape(3, SIZE, SIZE, 3)
    expected = rows[targets]  # the ORIGINAL predictions stay the targets
    got = r.maps[name] if framework == "tf" else r.maps[name].transpose(0, 2, 3, 1)
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)
    orig = np.abs(w[targets]).sum(axis=-1).reshape(3, -1)
    np.testing.assert_allclose(
        r.per_sample["spearman_abs"], spearman(orig, np.abs(expected).sum(axis=-1).reshape(3, -1)), atol=1e-9
    )
    # an unrelated random draw: the rank correlation is small (64 positions: sd about 0.125)
    assert abs(r.table["spearman_abs"][0]) < 0.4 and abs(r.table["spearman"][0]) < 0.4


def test_cascading_and_independent_orders(framework: str, rng: np.random.Generator) -> None:
    model, to_layout = model_for(framework)
    x = to_layout(images(rng, 3))
    before = weights_of(framework, model)
    names = xk.evaluate.model_layers(model)
    assert len(names) == 4
    casc = xk.evaluate.randomization_test(model, x, order="cascading", seed=1)
    _assert_same(before, weights_of(framework, model))
    indep = xk.evaluate.randomization_test(model, x, order="independent", seed=1)
    _assert_same(before, weights_of(framework, model))
    assert casc.table["layer"].tolist() == names[::-1] == indep.table["layer"].tolist()
    assert casc.table["step"].tolist() == [1, 2, 3, 4]
    np.testing.assert_array_equal(casc.maps["original"], indep.maps["original"])
    # step 1 randomizes the same (top) layer with the same weights in both orders
    np.testing.assert_array_equal(casc.maps[names[-1]], indep.maps[names[-1]])
    # an independent step is the cascading test of that layer alone
    alone = xk.evaluate.randomization_test(model, x, layers=[names[0]], seed=1)
    np.testing.assert_array_equal(alone.maps[names[0]], indep.maps[names[0]])
    assert not np.allclose(casc.maps[names[0]], indep.maps[names[0]])
    # the fully randomized model's maps are unrelated to the original ones
    last = casc.per_sample[casc.per_sample["step"] == 4]
    assert np.all(np.abs(last["spearman"]) < 0.35), last
    assert casc.table["spearman_abs"].iloc[-1] < 0.6
    assert casc.per_sample.shape == (12, 6)
    for col in ("spearman_abs", "spearman", "ssim"):
        means = casc.per_sample.groupby("step")[col].mean().to_numpy()
        np.testing.assert_allclose(casc.table[col].to_numpy(), means)


def test_unused_layer_keeps_the_maps_identical() -> None:
    import torch

    class WithSpare(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.used = torch.nn.Linear(16, 3)
            self.spare = torch.nn.Linear(16, 3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.used(x.flatten(1))

    torch.manual_seed(0)
    model = WithSpare()
    r = xk.evaluate.randomization_test(model, torch.rand(2, 1, 4, 4), layers=["spare"])
    assert r.table.loc[0, "spearman_abs"] == 1.0 and r.table.loc[0, "spearman"] == 1.0
    assert r.table.loc[0, "ssim"] == pytest.approx(1.0)


def test_weights_buffers_and_flags_restored_even_on_error(
    framework: str, rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch
) -> None:
    if framework == "torch":
        import torch

        model: Any = torch.nn.Sequential(
            torch.nn.Conv2d(3, 4, 3),
            torch.nn.BatchNorm2d(4),
            torch.nn.ReLU(),
            torch.nn.Flatten(),
            torch.nn.Linear(4 * 6 * 6, 3),
        )
        with torch.no_grad():
            model[1].running_mean.uniform_(-1, 1)
            model[1].running_var.uniform_(0.5, 2)
        model.train()
        x = layout(framework, rng.uniform(size=(2, SIZE, SIZE, 3)).astype(np.float32))
    else:
        import tensorflow as tf

        layers = tf.keras.layers
        model = tf.keras.Sequential(
            [
                layers.Input((SIZE, SIZE, 3)),
                layers.Conv2D(4, 3),
                layers.BatchNormalization(),
                layers.ReLU(),
                layers.Flatten(),
                layers.Dense(3),
            ]
        )
        bn = model.layers[1]
        bn.moving_mean.assign(rng.uniform(-1, 1, 4).astype(np.float32))
        x = rng.uniform(size=(2, SIZE, SIZE, 3)).astype(np.float32)
    before = weights_of(framework, model)
    xk.evaluate.randomization_test(model, x, method="smoothgrad", nsamples=3)
    _assert_same(before, weights_of(framework, model))
    if framework == "torch":
        assert all(m.training for m in model.modules())

    from xaikit.evaluate import randomization as metric

    real, calls = metric.explain, []

    def failing(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 3:  # after two layers were randomized
            raise RuntimeError("injected failure")
        return real(*args, **kwargs)

    monkeypatch.setattr(metric, "explain", failing)
    with pytest.raises(RuntimeError, match="injected failure"):
        xk.evaluate.randomization_test(model, x)
    assert len(calls) == 3
    _assert_same(before, weights_of(framework, model))
    calls.clear()
    with pytest.raises(RuntimeError, match="injected failure"):
        xk.evaluate.randomization_test(model, x, order="independent")
    _assert_same(before, weights_of(framework, model))


def test_grid_columns_and_titles(framework: str, rng: np.random.Generator) -> None:
    model, to_layout = model_for(framework)
    x = to_layout(images(rng, 2))
    r = xk.evaluate.randomization_test(model, x, layers=xk.evaluate.model_layers(model)[-2:])
    grid = r.grid
    names = r.table["layer"].tolist()
    assert grid.columns == ["input", "original", *names, "random vs random"]
    assert grid.title("random vs random") == f"2 random copies ρ={r.baseline.mean['spearman_abs']:.2f}"
    assert grid.batch_sizes == [2]
    assert grid.title("original") == "original (vanilla)"
    for row in r.table.itertuples():
        assert grid.title(row.layer) == f"{row.layer} ρ={row.spearman_abs:.2f}"
    image = grid["input"][0]
    assert image.shape == (2, 12, 12, 3)
    np.testing.assert_allclose(image, images(np.random.default_rng(0), 2), atol=1e-6)
    assert grid[names[0]][0].shape == (2, 12, 12)
    assert grid.paint_numpy(dpi=20).shape[0] == 1
    assert (
        xk.evaluate.randomization_test(model, x, random_baseline=False).grid.columns[-1] != "random vs random"
    )


def test_baseline_compares_two_independent_random_copies(framework: str, rng: np.random.Generator) -> None:
    model, r, x, _, before = _randomized_linear(framework, rng)
    base = r.baseline
    assert base is not None and base.seeds == (6, 7)
    targets = r.targets
    std = float(before[0].astype(np.float64).std())
    copies = []
    for copy_seed in (6, 7):  # two different seeds, each re-drawn from the trained weights' spread
        new = np.random.default_rng([copy_seed, 0]).normal(0.0, std, size=before[0].shape).astype(np.float32)
        rows = (
            new.reshape(3, 3, SIZE, SIZE).transpose(0, 2, 3, 1)
            if framework == "torch"
            else new.T.reshape(3, SIZE, SIZE, 3)
        )
        copies.append(rows[targets])
    for got, expected in zip(base.maps, copies):
        got = got if framework == "tf" else got.transpose(0, 2, 3, 1)
        np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)
    assert not np.allclose(copies[0], copies[1])
    a, b = (np.abs(c).sum(axis=-1).reshape(3, -1) for c in copies)
    np.testing.assert_allclose(base.per_sample["spearman_abs"], spearman(a, b), atol=1e-9)
    np.testing.assert_allclose(
        base.per_sample["spearman"], spearman(*(c.sum(axis=-1).reshape(3, -1) for c in copies)), atol=1e-9
    )
    assert base.per_sample.columns.tolist() == ["sample", "spearman_abs", "spearman", "ssim"]
    assert base.mean["spearman_abs"] == pytest.approx(float(spearman(a, b).mean()), abs=1e-12)
    assert base.mean["ssim"] == pytest.approx(float(base.per_sample["ssim"].mean()), abs=1e-12)
    # the same recipe as a randomization step with that seed
    step = xk.evaluate.randomization_test(model, layout(framework, x), seed=6, random_baseline=False)
    assert step.baseline is None
    np.testing.assert_array_equal(step.maps[r.table["layer"][0]], base.maps[0])
    _assert_same(before, weights_of(framework, model))


def test_figure_caption_explains_rho_and_names_the_baseline(rng: np.random.Generator) -> None:
    model, to_layout = model_for("torch")
    r = xk.evaluate.randomization_test(model, to_layout(images(rng, 2)))
    value = f"{r.baseline.mean['spearman_abs']:.2f}"
    assert f"ρ = {value}" in r.caption and "Spearman" in r.caption
    fig = r.paint_figure(dpi=30, cell_size=1.0)
    texts = {t.get_label(): t.get_text() for t in fig.texts}
    assert "caption" in texts and f"ρ = {value}" in texts["caption"].replace("\n", " ")
    plain = r.grid.paint_figure(dpi=30, cell_size=1.0)
    assert fig.get_figheight() > plain.get_figheight()
    no_base = xk.evaluate.randomization_test(model, to_layout(images(rng, 2)), random_baseline=False)
    assert "Baseline" not in no_base.caption


def test_randomization_bad_inputs(framework: str, rng: np.random.Generator) -> None:
    model, to_layout = model_for(framework)
    with pytest.raises(XaikitTypeError, match=r"random_baseline must be True or False; got str 'yes'"):
        xk.evaluate.randomization_test(model, to_layout(images(rng, 1)), random_baseline="yes")
    model, to_layout = model_for(framework)
    x = to_layout(images(rng, 2))
    names = xk.evaluate.model_layers(model)
    with pytest.raises(
        XaikitValueError,
        match=r"layers \['nope'\] are not layers with weights of this model; the layers are \[",
    ):
        xk.evaluate.randomization_test(model, x, layers=[names[0], "nope"])
    with pytest.raises(
        XaikitValueError, match=r"order must be one of 'cascading', 'independent'; got 'bottom_up'"
    ):
        xk.evaluate.randomization_test(model, x, order="bottom_up")
    with pytest.raises(XaikitValueError, match=r"method must be one of"):
        xk.evaluate.randomization_test(model, x, method="no_such_method")
    with pytest.raises(XaikitValueError, match=r"layers must not repeat a name"):
        xk.evaluate.randomization_test(model, x, layers=[names[0], names[0]])
    with pytest.raises(XaikitValueError, match=r"layers must name at least one layer"):
        xk.evaluate.randomization_test(model, x, layers=[])
    with pytest.raises(XaikitTypeError, match=r"layers must be None or a list of layer names"):
        xk.evaluate.randomization_test(model, x, layers=3)
    with pytest.raises(XaikitTypeError, match=r"unknown option"):
        xk.evaluate.randomization_test(model, x, n_samples=3)


def test_method_baseline_option_still_reaches_the_method(rng: np.random.Generator) -> None:
    model, to_layout = model_for("torch")
    x = to_layout(images(rng, 2))
    r = xk.evaluate.randomization_test(model, x, method="integrated", nsamples=4, baseline="black")
    want = xk.xai.explain(model, x, target=r.targets, method="integrated", nsamples=4, baseline="black")
    np.testing.assert_allclose(r.maps["original"], want, rtol=1e-6, atol=1e-8)
    assert r.baseline is not None
