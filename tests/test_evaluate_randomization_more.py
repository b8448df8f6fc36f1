"""Random logit, eMPRT and sMPRT: analytic cases, Quantus's recorded outputs, restoring the weights."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import xaikit as xk
from tests.evaluate_models import SIZE, layout, linear, seeded_lenet, square_weights, weights_of
from tests.xai.models import from_layout, images, model_for
from xaikit.errors import DegenerateMapWarning, XaikitTypeError, XaikitValueError
from xaikit.evaluate import logit_randomization, mprt_variants
from xaikit.evaluate._common import spearman
from xaikit.evaluate.randomization import layer_rng, similarity_tables

DATA = Path(__file__).parent / "data" / "quantus_randomization.npz"


def _assert_same(before: list[np.ndarray], after: list[np.ndarray]) -> None:
    assert len(before) == len(after)
    for a, b in zip(before, after):
        assert a.dtype == b.dtype and a.tobytes() == b.tobytes()  # bit-identical


def _class_blind(framework: str, rng: np.random.Generator) -> Any:
    """f_c(x) = <w, x> for every class c: the output ignores the class."""
    w = np.repeat(square_weights(rng, classes=1), 4, axis=0)
    return linear(framework, w)


# ---------------------------------------------------------------- random logit


def test_random_logit_class_blind_model_is_exactly_one(framework: str, rng: np.random.Generator) -> None:
    model = _class_blind(framework, rng)
    x = layout(framework, rng.uniform(size=(5, SIZE, SIZE, 3)).astype(np.float32))
    before = weights_of(framework, model)
    for similarity in ("ssim", "spearman"):
        r = xk.evaluate.random_logit(model, x, "vanilla", similarity=similarity, seed=3)
        assert r.scores.tolist() == [1.0] * 5, (similarity, r.scores)
        assert r.mean == 1.0 and r.similarity == similarity
        assert np.all(r.others != r.targets) and np.all((r.others >= 0) & (r.others < 4))
        np.testing.assert_array_equal(r.maps, r.maps_other)
    _assert_same(before, weights_of(framework, model))


def test_random_logit_linear_model_compares_two_weight_rows(framework: str, rng: np.random.Generator) -> None:
    w = square_weights(rng, classes=4)
    model = linear(framework, w)
    x = rng.uniform(size=(6, SIZE, SIZE, 3)).astype(np.float32)
    r = xk.evaluate.random_logit(
        model, layout(framework, x), "vanilla", target=0, similarity="spearman", seed=1
    )
    assert r.targets.tolist() == [0] * 6
    assert r.others.tolist() == logit_randomization.other_classes(np.zeros(6, dtype=np.int64), 4, 1).tolist()
    # the gradient of a linear model is its weight row: spearman of |w_0| and |w_other| (channels summed)
    want = spearman(np.abs(w[[0] * 6]).sum(-1).reshape(6, -1), np.abs(w[r.others]).sum(-1).reshape(6, -1))
    np.testing.assert_allclose(r.scores, want, atol=1e-12)
    # a callable similarity gets the raw maps
    got = xk.evaluate.random_logit(
        model, layout(framework, x), "vanilla", target=0, seed=1,
        similarity=lambda a, b: np.abs(a - b).reshape(len(a), -1).max(axis=1),
    )  # fmt: skip
    want_max = np.abs(w[[0] * 6] - w[r.others]).reshape(6, -1).max(axis=1)
    np.testing.assert_allclose(got.scores, want_max, rtol=1e-6)
    assert got.similarity == "<lambda>"


def test_other_classes_are_uniform_over_the_rest_and_seeded() -> None:
    targets = np.full(20000, 2, dtype=np.int64)
    others = logit_randomization.other_classes(targets, 5, seed=7)
    assert set(others.tolist()) == {0, 1, 3, 4}
    np.testing.assert_allclose(np.bincount(others, minlength=5)[[0, 1, 3, 4]] / 20000, 0.25, atol=0.015)
    np.testing.assert_array_equal(others, logit_randomization.other_classes(targets, 5, seed=7))
    assert not np.array_equal(others, logit_randomization.other_classes(targets, 5, seed=8))


def test_random_logit_torch_equals_keras_and_is_seeded(rng: np.random.Generator) -> None:
    x = images(rng, 4)
    maps, scores = {}, {}
    for framework in ("torch", "tf"):
        model, to_layout = model_for(framework)
        before = weights_of(framework, model)
        r = xk.evaluate.random_logit(
            model, to_layout(x), "smoothgrad", seed=4, method_options={"nsamples": 3}
        )
        again = xk.evaluate.random_logit(
            model, to_layout(x), "smoothgrad", seed=4, method_options={"nsamples": 3}
        )
        np.testing.assert_array_equal(r.scores, again.scores)
        np.testing.assert_array_equal(r.maps_other, again.maps_other)
        _assert_same(before, weights_of(framework, model))
        maps[framework] = from_layout(framework, r.maps_other)
        scores[framework] = r
    assert scores["torch"].others.tolist() == scores["tf"].others.tolist()
    # the noise differs between frameworks (their own generators): compare the plain gradient
    plain = {
        f: xk.evaluate.random_logit(m, tl(x), "vanilla", seed=4)
        for f, (m, tl) in (("torch", model_for("torch")), ("tf", model_for("tf")))
    }
    np.testing.assert_allclose(
        from_layout("torch", plain["torch"].maps_other), from_layout("tf", plain["tf"].maps_other), atol=1e-5
    )
    np.testing.assert_allclose(plain["torch"].scores, plain["tf"].scores, atol=1e-4)


def test_random_logit_bad_inputs(rng: np.random.Generator) -> None:
    import torch

    model = linear("torch", square_weights(rng, classes=3))
    x = torch.rand(2, 3, SIZE, SIZE)
    with pytest.raises(XaikitValueError, match="similarity must be one of 'ssim', 'spearman'"):
        xk.evaluate.random_logit(model, x, "vanilla", similarity="pearson")
    with pytest.raises(XaikitValueError, match="similarity must be"):
        xk.evaluate.random_logit(model, x, "vanilla", similarity=3)
    with pytest.raises(XaikitValueError, match="num_classes must be at most the model's 3"):
        xk.evaluate.random_logit(model, x, "vanilla", num_classes=4)
    with pytest.raises(XaikitValueError, match="num_classes"):
        xk.evaluate.random_logit(model, x, "vanilla", num_classes=1)
    with pytest.raises(XaikitValueError, match="above every target class"):
        xk.evaluate.random_logit(model, x, "vanilla", target=2, num_classes=2)
    with pytest.raises(XaikitTypeError, match="method must be the name of an explanation method"):
        xk.evaluate.random_logit(model, x, np.zeros((2, 3, SIZE, SIZE)))  # type: ignore[arg-type]
    with pytest.raises(XaikitValueError, match="method"):
        xk.evaluate.random_logit(model, x, "no_such_method")
    with pytest.raises(XaikitValueError, match="'target'"):
        xk.evaluate.random_logit(model, x, "vanilla", method_options={"target": 1})
    with pytest.raises(XaikitValueError, match="one value per sample"):
        xk.evaluate.random_logit(model, x, "vanilla", similarity=lambda a, b: np.zeros(3))
    one = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * SIZE * SIZE, 1))
    with pytest.raises(XaikitValueError, match="at least 2 classes"):
        xk.evaluate.random_logit(one, x, "vanilla")


# ---------------------------------------------------------------- eMPRT


def test_discrete_entropy_matches_scipy(rng: np.random.Generator) -> None:
    from scipy.stats import entropy

    maps = rng.normal(size=(3, 2, 5, 5))
    maps[2] = 1.5  # constant: entropy 0
    want = [entropy(np.histogram(m, bins=7)[0]) for m in maps]
    np.testing.assert_allclose(mprt_variants.discrete_entropy(maps, n_bins=7), want, atol=1e-12)
    assert mprt_variants.discrete_entropy(maps, 7)[2] == 0.0
    with pytest.raises(XaikitValueError, match="n_bins"):
        mprt_variants.discrete_entropy(maps, 0)
    with pytest.raises(XaikitValueError, match="NaN"):
        mprt_variants.discrete_entropy(np.full((1, 4), np.nan))


def test_efficient_mprt_linear_model_is_the_entropy_of_the_new_weights(
    framework: str, rng: np.random.Generator
) -> None:
    w = square_weights(rng, classes=3)
    w[0] = rng.normal(size=w[0].shape)
    model = linear(framework, w)
    x = rng.uniform(size=(3, SIZE, SIZE, 3)).astype(np.float32)
    before = weights_of(framework, model)
    r = xk.evaluate.efficient_mprt(
        model, layout(framework, x), "vanilla", target=[0, 1, 2], seed=5, n_bins=20
    )
    _assert_same(before, weights_of(framework, model))
    new = layer_rng(5, 0).normal(0.0, float(before[0].astype(np.float64).std()), size=before[0].shape)
    new = new.astype(np.float32)
    rows = new.reshape(3, 3, SIZE, SIZE) if framework == "torch" else new.T.reshape(3, SIZE, SIZE, 3)
    orig_rows = w.transpose(0, 3, 1, 2) if framework == "torch" else w
    h0, h1 = mprt_variants.discrete_entropy(orig_rows, 20), mprt_variants.discrete_entropy(rows, 20)
    np.testing.assert_allclose(r.complexity_original, h0, atol=1e-12)
    np.testing.assert_allclose(r.complexity_randomized, h1, atol=1e-12)
    np.testing.assert_allclose(r.scores, (h1 - h0) / h0, atol=1e-12)
    np.testing.assert_allclose(r.ratio, h1 / h0, atol=1e-12)
    assert r.layers == xk.evaluate.model_layers(model) and r.n_bins == 20


def test_efficient_mprt_weight_free_map_has_ratio_exactly_one() -> None:
    import torch

    class Blind(torch.nn.Module):
        """f_c(x) = 0 * lin(x)_c + sum(x^2): the input gradient 2x ignores the weights."""

        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(16, 3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return 0.0 * self.lin(x.flatten(1)) + (x * x).flatten(1).sum(1, keepdim=True)

    torch.manual_seed(0)
    x = torch.rand(4, 1, 4, 4)
    r = xk.evaluate.efficient_mprt(Blind(), x, "vanilla", target=1)
    assert r.scores.tolist() == [0.0] * 4 and r.ratio.tolist() == [1.0] * 4
    np.testing.assert_array_equal(r.maps["original"], 2 * x.numpy())
    # a constant map: no complexity to compare (NaN), and .mean skips it
    z = torch.zeros(2, 1, 4, 4)
    z[1, 0, 0, 0] = 1.0
    with pytest.warns(DegenerateMapWarning, match=r"1 of 2 maps are exactly 0"):  # the all-zero input's
        r0 = xk.evaluate.efficient_mprt(Blind(), z, "vanilla", target=0)
    assert np.isnan(r0.scores[0]) and r0.scores[1] == 0.0 and r0.mean == 0.0


def test_efficient_mprt_cnn_seeded_and_restored_on_error(
    framework: str, rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch
) -> None:
    model, to_layout = model_for(framework)
    x = to_layout(images(rng, 3))
    before = weights_of(framework, model)
    a = xk.evaluate.efficient_mprt(model, x, "vanilla", seed=2)
    b = xk.evaluate.efficient_mprt(model, x, "vanilla", seed=2)
    c = xk.evaluate.efficient_mprt(model, x, "vanilla", seed=3)
    np.testing.assert_array_equal(a.scores, b.scores)
    assert not np.array_equal(a.maps["randomized"], c.maps["randomized"])
    np.testing.assert_array_equal(a.maps["original"], c.maps["original"])
    _assert_same(before, weights_of(framework, model))

    from xaikit.evaluate import _rerun

    real, calls = _rerun.explain, []

    def failing(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 2:  # every layer was re-drawn
            raise RuntimeError("injected failure")
        return real(*args, **kwargs)

    monkeypatch.setattr(_rerun, "explain", failing)
    with pytest.raises(RuntimeError, match="injected failure"):
        xk.evaluate.efficient_mprt(model, x, "vanilla")
    _assert_same(before, weights_of(framework, model))
    calls.clear()
    with pytest.raises(RuntimeError, match="injected failure"):
        xk.evaluate.smooth_mprt(model, x, "vanilla", nsamples=2)
    _assert_same(before, weights_of(framework, model))


def test_efficient_mprt_bad_inputs(rng: np.random.Generator) -> None:
    import torch

    model = linear("torch", square_weights(rng))
    x = torch.rand(2, 3, SIZE, SIZE)
    with pytest.raises(XaikitValueError, match="n_bins"):
        xk.evaluate.efficient_mprt(model, x, "vanilla", n_bins=0)
    with pytest.raises(XaikitValueError, match=r"layers \['nope'\]"):
        xk.evaluate.efficient_mprt(model, x, "vanilla", layers=["nope"])
    with pytest.raises(XaikitValueError, match="seed"):
        xk.evaluate.efficient_mprt(model, x, "vanilla", seed=-1)
    with pytest.raises(XaikitValueError, match="max_batch"):
        xk.evaluate.efficient_mprt(model, x, "vanilla", max_batch=0)
    with pytest.raises(XaikitValueError, match="'seed'"):
        xk.evaluate.efficient_mprt(model, x, "vanilla", method_options={"seed": 1})
    with pytest.raises(XaikitTypeError, match="method_options"):
        xk.evaluate.efficient_mprt(model, x, "vanilla", method_options=[1])  # type: ignore[arg-type]


# ---------------------------------------------------------------- sMPRT


def test_smooth_mprt_one_sample_is_the_randomization_test(framework: str, rng: np.random.Generator) -> None:
    model, to_layout = model_for(framework)
    x = to_layout(images(rng, 3))
    before = weights_of(framework, model)
    s = xk.evaluate.smooth_mprt(model, x, "vanilla", nsamples=1, order="top_down", seed=1)
    r = xk.evaluate.randomization_test(model, x, method="vanilla", seed=1, random_baseline=False)
    _assert_same(before, weights_of(framework, model))
    assert list(s.maps) == list(r.maps)
    for k in r.maps:
        np.testing.assert_array_equal(s.maps[k], r.maps[k].astype(np.float64))
    np.testing.assert_allclose(s.table[["spearman_abs", "spearman"]], r.table[["spearman_abs", "spearman"]])
    last = r.per_sample[r.per_sample["step"] == len(r.table)]["spearman_abs"].to_numpy()
    np.testing.assert_allclose(s.scores, last)
    # bottom-up visits the layers input side first; independent from the output side
    names = xk.evaluate.model_layers(model)
    up = xk.evaluate.smooth_mprt(model, x, "vanilla", nsamples=2, seed=1)
    assert up.table["layer"].tolist() == names and up.order == "bottom_up"
    ind = xk.evaluate.smooth_mprt(model, x, "vanilla", nsamples=1, order="independent", seed=1)
    np.testing.assert_array_equal(ind.maps[names[-1]], s.maps[names[-1]])  # the same first step
    _assert_same(before, weights_of(framework, model))


def test_smooth_mprt_linear_model_denoised_map_is_the_weight_row(
    framework: str, rng: np.random.Generator
) -> None:
    w = square_weights(rng)
    model = linear(framework, w)
    x = rng.uniform(size=(2, SIZE, SIZE, 3)).astype(np.float32)
    r = xk.evaluate.smooth_mprt(
        model, layout(framework, x), "vanilla", target=[0, 2], nsamples=5, stdev_spread=0.3
    )
    # the gradient of a linear model ignores the input: the mean of 5 noisy maps is the weight row
    np.testing.assert_allclose(from_layout(framework, r.maps["original"]), w[[0, 2]], rtol=1e-6)
    assert r.nsamples == 5 and r.stdev_spread == 0.3 and len(r.table) == 1


def test_noisy_copies_spread_and_clean_last_copy(rng: np.random.Generator) -> None:
    x = rng.uniform(size=(3, 2, 16, 16)).astype(np.float32)
    x[1] *= 4.0
    rows = mprt_variants._noisy_copies(x, 200, 0.1, seed=0).reshape(200, 3, 2, 16, 16)
    np.testing.assert_array_equal(rows[-1], x)
    eps = rows[:-1] - x[None]
    for b in range(3):
        span = float(x[b].max() - x[b].min())
        assert eps[:, b].std() == pytest.approx(0.1 * span, rel=0.02)
    np.testing.assert_array_equal(rows, mprt_variants._noisy_copies(x, 200, 0.1, seed=0).reshape(rows.shape))


def test_smooth_mprt_bad_inputs(rng: np.random.Generator) -> None:
    import torch

    model = linear("torch", square_weights(rng))
    x = torch.rand(2, 3, SIZE, SIZE)
    with pytest.raises(XaikitValueError, match="nsamples"):
        xk.evaluate.smooth_mprt(model, x, "vanilla", nsamples=0)
    with pytest.raises(XaikitValueError, match="stdev_spread must be a number >= 0"):
        xk.evaluate.smooth_mprt(model, x, "vanilla", stdev_spread=-0.1)
    with pytest.raises(XaikitValueError, match="stdev_spread"):
        xk.evaluate.smooth_mprt(model, x, "vanilla", stdev_spread="big")  # type: ignore[arg-type]
    with pytest.raises(XaikitValueError, match="order must be one of 'bottom_up'"):
        xk.evaluate.smooth_mprt(model, x, "vanilla", order="cascading")
    with pytest.raises(XaikitValueError, match=r"order must be one of 'bottom_up'.*; got ndarray"):
        xk.evaluate.smooth_mprt(model, x, "vanilla", order=np.array(["bottom_up", "top_down"]))
    with pytest.raises(XaikitTypeError, match="x must be one input batch"):
        xk.evaluate.smooth_mprt(model, [x, x], "vanilla")


# ---------------------------------------------------------------- Quantus 0.6 (recorded)


@pytest.fixture(scope="module")
def quantus_data() -> dict[str, Any]:
    with np.load(DATA) as f:
        return {k: f[k] for k in f.files}


def _lenet() -> Any:
    return seeded_lenet(1, softmax=False)


def _quantus_ssim(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Quantus's RandomLogit default: each batch divided by its max |value|, then a 1-D SSIM of
    the flattened maps, data range = the pair's max - min, skimage's default window."""
    from skimage.metrics import structural_similarity

    a = (a / np.abs(a).max()).reshape(len(a), -1)
    b = (b / np.abs(b).max()).reshape(len(b), -1)
    out = []
    for u, v in zip(a, b):
        both = np.concatenate([u, v])
        out.append(structural_similarity(u, v, data_range=float(both.max() - both.min())))
    return np.asarray(out)


def test_quantus_random_logit(quantus_data: dict[str, Any]) -> None:
    d = quantus_data
    model = _lenet()
    checksum = sum(float(p.detach().double().abs().sum()) for p in model.parameters())
    assert checksum == pytest.approx(float(d["checksum"]), rel=1e-9)
    r = xk.evaluate.random_logit(
        model, d["x"], "vanilla", target=d["y"], num_classes=5, seed=42, similarity="spearman"
    )
    np.testing.assert_array_equal(r.others, d["rl_other"])  # Quantus's draw with its seed
    np.testing.assert_allclose(r.maps, d["rl_a"], atol=1e-5)
    np.testing.assert_allclose(r.maps_other, d["rl_a_other"], atol=1e-5)
    np.testing.assert_allclose(r.scores, d["rl_spearman"], atol=1e-5)  # end to end
    # Quantus's default SSIM differs by definition (see docs): through a callable it agrees
    q = xk.evaluate.random_logit(
        model, d["x"], "vanilla", target=d["y"], num_classes=5, seed=42, similarity=_quantus_ssim
    )
    np.testing.assert_allclose(q.scores, d["rl_ssim"], atol=1e-5)
    named = xk.evaluate.random_logit(
        model, d["x"], "vanilla", target=d["y"], num_classes=5, seed=42, similarity="quantus"
    )
    np.testing.assert_allclose(named.scores, d["rl_ssim"], atol=1e-5)  # the same, by name
    assert named.similarity == "quantus"


def test_quantus_efficient_mprt(quantus_data: dict[str, Any]) -> None:
    d = quantus_data
    scores, h0, h1 = mprt_variants.complexity_rise(d["em_orig"], d["em_rand"], 100)
    np.testing.assert_allclose(h0, d["em_h_orig"], atol=1e-5)
    np.testing.assert_allclose(h1, d["em_h_rand"], atol=1e-5)
    np.testing.assert_allclose(scores, d["em_scores"], atol=1e-5)
    # the original maps are ours (Quantus re-draws weights with its own generator: the randomized
    # maps are compared in distribution by the benchmark only)
    ours = xk.evaluate.efficient_mprt(_lenet(), d["x"], "vanilla", target=d["y"])
    np.testing.assert_allclose(ours.maps["original"], d["em_orig"], atol=1e-5)
    np.testing.assert_allclose(ours.complexity_original, d["em_h_orig"], atol=1e-5)


def test_quantus_smooth_mprt(quantus_data: dict[str, Any]) -> None:
    d = quantus_data
    n, batch = int(d["sm_n"]), len(d["x"])
    # our denoised map of Quantus's noisy copies (the clean copy last) is Quantus's map
    from xaikit.xai import explain

    rows = d["sm_noisy"]
    np.testing.assert_array_equal(rows[-batch:], d["x"])
    maps = explain(_lenet(), rows, target=np.tile(d["y"], n), method="vanilla")
    np.testing.assert_allclose(maps.reshape(n, batch, *maps.shape[1:]).mean(0), d["sm_orig"], atol=1e-5)
    # our per-step similarity on Quantus's denoised maps is its score, layer by layer
    names = [str(s) for s in d["sm_names"]]
    layer_maps = {"original": d["sm_ref"], **dict(zip(names, d["sm_layers"]))}
    _, per = similarity_tables(layer_maps, (32, 32), batch, 1, 1)
    np.testing.assert_allclose(
        per["spearman_abs"].to_numpy().reshape(len(names), batch), d["sm_scores"], atol=1e-5
    )


def test_per_sample_model_kwargs_follow_their_rows(rng: np.random.Generator) -> None:
    import torch

    class Scaled(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(16, 3, bias=False)

        def forward(self, x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
            return self.lin(x.flatten(1)) * scale

    torch.manual_seed(0)
    model = Scaled()
    w = model.lin.weight.detach().numpy().reshape(3, 1, 4, 4)
    x, scale = torch.rand(3, 1, 4, 4), torch.tensor([[1.0], [2.0], [-3.0]])
    r = xk.evaluate.random_logit(model, x, "vanilla", target=0, model_kwargs={"scale": scale}, seed=2)
    np.testing.assert_allclose(r.maps, scale.numpy()[:, :, None, None] * w[[0, 0, 0]], rtol=1e-6)
    np.testing.assert_allclose(r.maps_other, scale.numpy()[:, :, None, None] * w[r.others], rtol=1e-6)
    s = xk.evaluate.smooth_mprt(model, x, "vanilla", target=0, nsamples=3, model_kwargs={"scale": scale})
    np.testing.assert_allclose(s.maps["original"], scale.numpy()[:, :, None, None] * w[[0, 0, 0]], rtol=1e-5)
