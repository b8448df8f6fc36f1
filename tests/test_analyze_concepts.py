"""CRAFT-style concepts (``xaikit.analyze.craft``, ``xk.analyze.concepts``): known directions recovered from an exact
non-negative mixture, heatmaps in the right regions, the Taylor importance equal to the exact
score drop of a linear head, torch == Keras on the same weights, the model left untouched, and
bad input refused by name."""

from __future__ import annotations

import logging
import sys
from typing import Any

import numpy as np
import pytest

import xaikit as xk
from xaikit.analyze.craft import ConceptSet, extract_concepts
from xaikit.errors import XaikitError, XaikitTypeError, XaikitValueError

CH, SIDE, CLASSES = 6, 16, 3


def _directions(rng: np.random.Generator) -> np.ndarray:
    """Two non-negative, overlapping (not orthogonal) channel directions (2, CH), each with a
    zero channel where the other is large: what makes the exact NMF unique (with two strictly
    positive directions, a "wider" pair of non-negative directions fits the data exactly too)."""
    d = rng.random((2, CH)) + 0.1
    d[0, :2] += 1.0  # distinct but overlapping: cosine ~0.6
    d[1, -2:] += 1.0
    d[0, -1] = d[1, 0] = 0.0
    return d


def _mixture_images(rng: np.random.Generator, n: int = 24) -> np.ndarray:
    """(n, 2, SIDE, SIDE) non-negative amounts of each concept: concept 0 only in the top-left
    quadrant, concept 1 only in the bottom-right one; some images hold one concept, some both."""
    x = np.zeros((n, 2, SIDE, SIDE), dtype=np.float32)
    h = SIDE // 2
    x[:, 0, :h, :h] = rng.random((n, h, h)) + 0.2
    x[:, 1, h:, h:] = rng.random((n, h, h)) + 0.2
    x[: n // 3, 1] = 0  # only concept 0
    x[n // 3 : 2 * n // 3, 0] = 0  # only concept 1
    return x


def _torch_mixture(d: np.ndarray, head: np.ndarray, bias: np.ndarray) -> Any:
    """1x1 conv (the two directions) -> 2x2 average pool -> ReLU ("feat") -> GAP -> linear."""
    import torch

    nn = torch.nn
    model = nn.Sequential()
    model.add_module("mix", nn.Conv2d(2, CH, 1, bias=False))
    model.add_module("pool", nn.AvgPool2d(2))
    model.add_module("feat", nn.ReLU())
    model.add_module("gap", nn.AdaptiveAvgPool2d(1))
    model.add_module("flat", nn.Flatten())
    model.add_module("head", nn.Linear(CH, CLASSES))
    with torch.no_grad():
        model.mix.weight.copy_(torch.as_tensor(d.T.reshape(CH, 2, 1, 1), dtype=torch.float32))
        model.head.weight.copy_(torch.as_tensor(head, dtype=torch.float32))
        model.head.bias.copy_(torch.as_tensor(bias, dtype=torch.float32))
    return model.eval()


def _keras_mixture(d: np.ndarray, head: np.ndarray, bias: np.ndarray) -> Any:
    """The same model channel-last in Keras, on the same weights."""
    import keras

    layers = keras.layers
    model = keras.Sequential(
        [
            layers.Input((SIDE, SIDE, 2)),
            layers.Conv2D(CH, 1, use_bias=False, name="mix"),
            layers.AveragePooling2D(2, name="pool"),
            layers.ReLU(name="feat"),
            layers.GlobalAveragePooling2D(name="gap"),
            layers.Dense(CLASSES, name="head"),
        ]
    )
    model.get_layer("mix").set_weights([d.reshape(1, 1, 2, CH).astype(np.float32)])
    model.get_layer("head").set_weights([head.T.astype(np.float32), bias.astype(np.float32)])
    return model


@pytest.fixture
def mixture(rng: np.random.Generator) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    d = _directions(rng)
    head = rng.standard_normal((CLASSES, CH))
    bias = rng.standard_normal(CLASSES)
    return _torch_mixture(d, head, bias), _mixture_images(rng), d, head, bias


def _matched(directions: np.ndarray, d: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each true direction, the found concept of highest cosine, and that cosine."""
    unit = d / np.linalg.norm(d, axis=1, keepdims=True)
    cos = unit @ (directions / np.linalg.norm(directions, axis=1, keepdims=True)).T
    return cos.argmax(axis=1), cos.max(axis=1)


def test_exact_mixture_recovers_directions_coefficients_and_regions(mixture: Any) -> None:
    model, x, d, head, _ = mixture
    cs = extract_concepts(model, x, 2, layer="feat", rank=2, top=4, indices=np.arange(100, 124))
    assert isinstance(cs, ConceptSet) and cs.layer == "feat" and cs.klass == 2
    assert cs.directions.shape == (2, CH) and cs.coefficients.shape == (24, 8, 8, 2)
    assert cs.top.shape == (2, 4) and cs.heatmaps.shape == (2, 4, SIDE, SIDE)
    assert cs.directions.min() >= 0 and cs.coefficients.min() >= 0 and cs.clipped == 0.0
    np.testing.assert_allclose(np.linalg.norm(cs.directions, axis=1), 1.0, rtol=1e-6)
    which, cos = _matched(cs.directions, d)
    assert sorted(which) == [0, 1] and cos.min() > 0.999, cos
    assert cs.fit_error < 1e-3 and cs.converged
    # the coefficients are the pooled amounts times the direction's norm (unit-norm directions)
    pooled = x.reshape(24, 2, 8, 2, 8, 2).mean(axis=(3, 5))  # (n, 2, 8, 8)
    for k in range(2):
        expect = pooled[:, k] * np.linalg.norm(d[k])
        np.testing.assert_allclose(cs.coefficients[..., which[k]], expect, atol=2e-3 * expect.max())
    # heatmaps in the concept's quadrant, of the images that hold most of it
    h = SIDE // 2
    quadrant = [(slice(0, h), slice(0, h)), (slice(h, None), slice(h, None))]
    for k in range(2):
        maps = cs.heatmaps[which[k]]
        inside = maps[:, quadrant[k][0], quadrant[k][1]].sum(axis=(1, 2))
        assert np.all(inside / maps.sum(axis=(1, 2)) > 0.9)  # bilinear spills half a cell
        other = maps[:, h + 1 :, h + 1 :] if k == 0 else maps[:, : h - 1, : h - 1]
        assert np.all(other < 2e-3 * maps.max())  # the other quadrant, past the spilled border
        amount = x[:, k].mean(axis=(1, 2))
        np.testing.assert_array_equal(cs.top[which[k]], 100 + np.argsort(-amount, kind="stable")[:4])
    # importance: the GAP head's dA is head[k] / (h * w) everywhere: sum_p U <W, head[k]> / 64
    expect_imp = [
        (cs.coefficients[..., r].sum(axis=(1, 2)) * (cs.directions[r] @ head[2]) / 64).mean()
        for r in range(2)
    ]
    np.testing.assert_allclose(cs.importance, expect_imp, rtol=1e-5)
    assert cs.importance[0] >= cs.importance[1]
    np.testing.assert_allclose(cs.image_importance.mean(axis=0), cs.importance, rtol=1e-12)
    assert xk.analyze.concepts is extract_concepts and "ConceptSet(layer='feat'" in repr(cs)


def test_sampled_rows_and_seeds_give_the_same_exact_concepts(mixture: Any) -> None:
    """With NMF fitted on a 400-row sample of the 1,536 (seeded), every seed recovers the
    directions; every row still gets its coefficients."""
    model, x, d, _, _ = mixture
    found = [extract_concepts(model, x, 0, rank=2, seed=s, max_rows=400) for s in range(3)]
    for cs in found:
        assert cs.fit_rows == 400 and cs.coefficients.shape == (24, 8, 8, 2)
        assert _matched(cs.directions, d)[1].min() > 0.999
    np.testing.assert_allclose(found[1].directions, found[0].directions, atol=1e-3)


def _linear_head_model(rng: np.random.Generator) -> Any:
    """conv 3x3 (signed weights, bias) -> ReLU ("feat") -> flatten -> linear: the class score is
    linear in the layer's activations."""
    import torch

    torch.manual_seed(int(rng.integers(1 << 30)))
    nn = torch.nn
    model = nn.Sequential()
    model.add_module("conv", nn.Conv2d(3, 8, 3))
    model.add_module("feat", nn.ReLU())
    model.add_module("flat", nn.Flatten())
    model.add_module("head", nn.Linear(8 * 6 * 6, CLASSES))
    return model.eval()


def test_taylor_importance_is_the_exact_score_drop_of_a_linear_head(rng: np.random.Generator) -> None:
    import torch

    model = _linear_head_model(rng)
    x = rng.random((10, 3, 8, 8)).astype(np.float32)
    klass = 1
    cs = extract_concepts(model, x, klass, rank=3, batch_size=4, top=20)  # 3 blocks, top > n
    assert cs.layer == "feat" and cs.coefficients.shape == (10, 6, 6, 3)
    assert cs.top.shape == (3, 10) and all(sorted(row) == list(range(10)) for row in cs.top)
    with torch.no_grad():
        a = model.feat(model.conv(torch.as_tensor(x))).double()  # (n, 8, 6, 6)
        head = model.head.double()
        before = head(a.flatten(1))[:, klass]
        drops = []
        for r in range(3):
            part = np.einsum("nhw,c->nchw", cs.coefficients[..., r], cs.directions[r])
            after = head((a - torch.as_tensor(part, dtype=torch.float64)).flatten(1))[:, klass]
            drops.append((before - after).numpy())
        model.head.float()
    drops_arr = np.stack(drops, axis=1)  # (n, rank)
    np.testing.assert_allclose(cs.image_importance, drops_arr, atol=1e-5)
    np.testing.assert_allclose(cs.importance, drops_arr.mean(axis=0), atol=1e-5)
    assert np.all(np.diff(cs.importance) <= 0)
    assert 0 < cs.fit_error < 0.5  # a real (not exactly low-rank) factorization


def test_input_forms_give_the_same_concepts(rng: np.random.Generator) -> None:
    """Channel-last numpy for a torch CNN (moved by the layout rule), a torch tensor and the layer
    given as its module: the same concepts as channel-first numpy and the layer's name."""
    import torch

    model = _linear_head_model(rng)
    x = rng.random((6, 3, 8, 8)).astype(np.float32)
    ref = extract_concepts(model, x, 2, layer="feat", rank=2)
    for xin, layer in ((x.transpose(0, 2, 3, 1), "feat"), (torch.as_tensor(x), model.feat)):
        cs = extract_concepts(model, xin, 2, layer=layer, rank=2)
        assert cs.layer == "feat"
        np.testing.assert_allclose(cs.directions, ref.directions, atol=1e-6)
        np.testing.assert_allclose(cs.importance, ref.importance, rtol=1e-6)
        np.testing.assert_array_equal(cs.top, ref.top)


def test_model_kwargs_reach_every_block(rng: np.random.Generator) -> None:
    """model_kwargs as in explain: a per-image tensor is sliced with the images' blocks (10 images
    in blocks of 4), a fixed value is passed as it is; the concepts equal those of the same model
    with the arguments applied to the images beforehand."""
    import torch

    inner = _linear_head_model(rng)

    class Scaled(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, x: torch.Tensor, scale: torch.Tensor, shift: float = 0.0) -> torch.Tensor:
            return self.inner(x * scale[:, None, None, None] + shift)

    x = rng.random((10, 3, 8, 8)).astype(np.float32)
    scale = rng.uniform(0.5, 2.0, 10).astype(np.float32)
    kw = {"scale": torch.as_tensor(scale), "shift": 0.25}
    got = extract_concepts(Scaled().eval(), x, 1, layer="inner.feat", rank=3, batch_size=4, model_kwargs=kw)
    want = extract_concepts(
        inner, x * scale[:, None, None, None] + 0.25, 1, layer="feat", rank=3, batch_size=4
    )
    np.testing.assert_allclose(got.directions, want.directions, atol=1e-5)
    np.testing.assert_allclose(got.importance, want.importance, rtol=1e-5, atol=1e-7)
    np.testing.assert_array_equal(got.top, want.top)
    with pytest.raises(XaikitTypeError, match="model_kwargs"):
        extract_concepts(Scaled().eval(), x, 1, rank=2, model_kwargs=[("scale", scale)])


def test_keras_twin_gives_the_same_concepts(mixture: Any) -> None:
    """The same weights channel-last in Keras: the same layer (layer=None), directions,
    coefficients, importance, top images and heatmaps."""
    model, x, d, head, bias = mixture
    twin = _keras_mixture(d, head, bias)
    weights = [w.copy() for w in twin.get_weights()]
    a = extract_concepts(model, x, 1, rank=2, top=3, batch_size=10)
    b = extract_concepts(twin, x.transpose(0, 2, 3, 1), 1, rank=2, top=3, batch_size=10)
    assert all(np.array_equal(w, v) for w, v in zip(weights, twin.get_weights(), strict=True))
    assert a.layer == b.layer == "feat"
    np.testing.assert_allclose(b.directions, a.directions, atol=1e-4)
    np.testing.assert_allclose(b.coefficients, a.coefficients, atol=1e-4)
    np.testing.assert_allclose(b.importance, a.importance, rtol=1e-4, atol=1e-7)
    np.testing.assert_array_equal(b.top, a.top)
    np.testing.assert_allclose(b.heatmaps, a.heatmaps, atol=1e-4)


def test_model_unchanged_and_no_hooks_left(rng: np.random.Generator) -> None:
    import torch

    model = _linear_head_model(rng).train()  # train mode must come back as it was
    before = {k: v.clone() for k, v in model.state_dict().items()}
    extract_concepts(model, rng.random((5, 3, 8, 8)).astype(np.float32), 0, rank=2)
    assert model.training
    after = model.state_dict()
    assert before.keys() == after.keys()
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert all(p.grad is None for p in model.parameters())
    for m in model.modules():
        assert not (m._forward_hooks or m._forward_pre_hooks or m._backward_hooks)


def test_negative_activations_clipped_or_refused(rng: np.random.Generator) -> None:
    """A layer before its ReLU: clipped by default (counted), refused with negative='raise'."""
    model = _linear_head_model(rng)
    x = rng.random((4, 3, 8, 8)).astype(np.float32)
    cs = extract_concepts(model, x, 0, layer="conv", rank=2)
    relu = extract_concepts(model, x, 0, layer="feat", rank=2)
    acts = model.conv(__import__("torch").as_tensor(x)).detach().numpy()
    assert cs.clipped == pytest.approx(float((acts < 0).mean()))
    assert 0 < cs.clipped < 1 and relu.clipped == 0
    # clipping is what the ReLU does: the same concepts as the ReLU's output; the importance
    # differs (before the ReLU the gradient is 0 where the ReLU cuts), each is exact for its layer
    np.testing.assert_allclose(cs.directions, relu.directions, atol=1e-6)
    np.testing.assert_allclose(cs.coefficients, relu.coefficients, atol=1e-6)
    with pytest.raises(XaikitValueError, match=r"layer 'conv' has negative activations .*ReLU"):
        extract_concepts(model, x, 0, layer="conv", rank=2, negative="raise")


@pytest.mark.parametrize(
    ("kwargs", "kind", "pattern"),
    [
        ({"klass": 3}, XaikitValueError, r"klass must be a class index in \[0, 2\].*got 3"),
        ({"klass": -1}, XaikitValueError, r"klass must be an int >= 0"),
        ({"klass": 1.5}, XaikitValueError, r"klass must be an int"),
        ({"rank": 0}, XaikitValueError, r"rank must be an int >= 1; got int 0"),
        (
            {"rank": 9},
            XaikitValueError,
            r"rank must be an int in \[1, 8\] \(the channels of layer 'feat'\); got 9",
        ),
        ({"x": np.zeros((0, 3, 8, 8), np.float32)}, XaikitValueError, r"x_rows must be a non-empty batch"),
        ({"layer": "nope"}, XaikitValueError, r"layer 'nope' is not a module of the model"),
        ({"indices": np.arange(3)}, XaikitTypeError, r"indices must be None or 4 integer dataset indices"),
        ({"top": 0}, XaikitValueError, r"top must be an int >= 1"),
        ({"batch_size": 0}, XaikitValueError, r"batch_size must be an int >= 1"),
        ({"negative": "abs"}, XaikitValueError, r"negative must be 'clip' or 'raise'"),
    ],
)
def test_bad_input_refused_by_name(
    rng: np.random.Generator, kwargs: dict[str, Any], kind: type[XaikitError], pattern: str
) -> None:
    model = _linear_head_model(rng)
    x = kwargs.pop("x", rng.random((4, 3, 8, 8)).astype(np.float32))
    klass = kwargs.pop("klass", 0)
    with pytest.raises(kind, match=pattern):
        extract_concepts(model, x, klass, **kwargs)


def test_nmf_stopping_early_is_reported_not_raised(
    mixture: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """scikit-learn's ConvergenceWarning (an error under this suite's filterwarnings) is caught:
    ``converged`` is False and the analysis logger says so."""
    model, x, _, _, _ = mixture
    monkeypatch.setattr(sys.modules["xaikit.analyze.craft"], "MAX_ITER", 1)
    with caplog.at_level(logging.INFO, logger="xaikit.analyze"):
        cs = extract_concepts(model, x, 0, rank=2)
    assert not cs.converged and "NMF stopped at max_iter=1" in caplog.text


def test_all_zero_activations_refused(rng: np.random.Generator) -> None:
    import torch

    model = _linear_head_model(rng)
    with torch.no_grad():
        model.conv.weight.zero_()
        model.conv.bias.fill_(-1.0)
    with pytest.raises(XaikitValueError, match=r"layer 'feat''s activations are all zero"):
        extract_concepts(model, rng.random((3, 3, 8, 8)).astype(np.float32), 0, rank=2)
