"""``output=`` and ``model_kwargs=`` in the traces that explain: ``Saliency``, ``DeletionAUC``,
``SaliencyStability``, and the evaluate functions. A model returning a dict or a Hugging
Face-style object gives the same values as the bare model."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import xaikit as xk
from tests.xai.models import images, model_for
from tests.xai.test_model_interfaces import FakeHFOutput, wrap
from xaikit.errors import XaikitTypeError
from xaikit.trace.base import Data, System
from xaikit.trace.xai import Saliency

WRAPS = {
    "hf": (lambda z, x: FakeHFOutput(logits=z, hidden_states=x), 0),
    "dict": (lambda z, x: {"aux": z[:, :2] * 3.0, "logits": z}, "logits"),
}


def _run(trace: Any, batch: dict[str, np.ndarray]) -> Data:
    trace.system = System()
    trace.system.mode = "eval"
    trace.on_batch_end(Data(batch))
    data = Data()
    trace.on_epoch_end(data)
    return data


@pytest.mark.parametrize("kind", sorted(WRAPS))
def test_saliency_trace_output_gives_the_bare_models_masks(
    framework: str, rng: np.random.Generator, kind: str
) -> None:
    model, layout = model_for(framework)
    make, output = WRAPS[kind]
    wrapped = wrap(framework, model, make)
    x = layout(images(rng, batch=3))
    opts: dict[str, Any] = {"samples": 3, "smoothing": 2, "integrating": (3, 2), "seed": 0}
    plain = _run(Saliency(model, "x", "y_pred", **opts), {"x": x})["saliency"]
    trace = Saliency(wrapped, "x", "y_pred", output=output, **opts)
    got = _run(trace, {"x": x})["saliency"]
    assert got.columns == plain.columns
    for col in ["saliency", "Smoothed saliency", "Integrated saliency", "SmInt saliency"]:
        np.testing.assert_allclose(np.asarray(got[col][0]), np.asarray(plain[col][0]), rtol=1e-5, atol=1e-6)
    assert got["y_pred"][0] == plain["y_pred"][0]
    # the trace's vanilla masks are SaliencyNet's
    net = xk.xai.SaliencyNet(wrapped, "x", "y_pred", seed=0, output=output).get_masks({"x": x})
    mask = np.asarray(got["saliency"][0])
    np.testing.assert_allclose(mask, net["saliency"].reshape(mask.shape), rtol=1e-6)  # channel axis of 1


def test_saliency_trace_passes_model_kwargs(rng: np.random.Generator) -> None:
    torch = pytest.importorskip("torch")
    model, layout = model_for("torch")

    class Tempered(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = model

        def forward(self, x: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
            return self.inner(x) / temperature

    x = layout(images(rng, batch=2))
    opts: dict[str, Any] = {"samples": 2, "smoothing": 0, "integrating": 0, "seed": 0}
    trace = Saliency(Tempered(), "x", "y", model_kwargs={"temperature": 4.0}, **opts)
    got = _run(trace, {"x": x})["saliency"]
    raw = xk.xai.SaliencyNet(model, "x", "y", seed=0).get_masks({"x": x}, raw=True)
    want = xk.xai.SaliencyNet(Tempered(), "x", "y", seed=0).get_masks(
        {"x": x}, raw=True, model_kwargs={"temperature": 4.0}
    )
    np.testing.assert_allclose(want["saliency"], raw["saliency"] / 4.0, rtol=1e-5, atol=1e-8)
    mask = np.asarray(got["saliency"][0])
    bare = xk.xai.SaliencyNet(model, "x", "y").get_masks({"x": x})["saliency"]
    np.testing.assert_allclose(mask, bare.reshape(mask.shape), atol=1e-6)  # display masks are scale-free


def test_evaluate_traces_and_functions_take_output(framework: str, rng: np.random.Generator) -> None:
    model, layout = model_for(framework)
    wrapped = wrap(framework, model, WRAPS["dict"][0])
    x = layout(images(rng, batch=3))
    # functions
    want = xk.evaluate.deletion(model, x, "vanilla", steps=3)
    got = xk.evaluate.deletion(wrapped, x, "vanilla", steps=3, output="logits")
    np.testing.assert_allclose(got.scores, want.scores, rtol=1e-6)
    got_i = xk.evaluate.insertion(wrapped, x, "integrated", steps=3, output="logits", baseline="zeros")
    want_i = xk.evaluate.insertion(model, x, "integrated", steps=3, baseline="zeros")
    np.testing.assert_allclose(got_i.scores, want_i.scores, rtol=1e-6)
    opts = {"nsamples": 4, "baseline": "zeros"}
    comp = xk.evaluate.completeness(wrapped, x, output="logits", method_options=opts)
    np.testing.assert_allclose(
        comp.delta,
        xk.evaluate.completeness(model, x, method_options=opts).delta,
        rtol=1e-5,
        atol=1e-7,
    )
    two_heads = wrapped
    if framework == "tf":  # randomization needs the Keras layers in view, not a tf.Module around them
        import keras

        two_heads = keras.Model(model.inputs, {"aux": model.outputs[0] * 3.0, "logits": model.outputs[0]})
    rand = xk.evaluate.randomization_test(two_heads, x, output="logits", random_baseline=False)
    rand0 = xk.evaluate.randomization_test(model, x, random_baseline=False)
    np.testing.assert_allclose(rand.maps["original"], rand0.maps["original"], rtol=1e-6)
    np.testing.assert_allclose(rand.table["spearman_abs"], rand0.table["spearman_abs"], rtol=1e-6)
    # traces
    batch = {"x": x}
    plain = xk.evaluate.DeletionAUC(model, samples=3, steps=3)
    traced = xk.evaluate.DeletionAUC(wrapped, samples=3, steps=3, output="logits")
    _run(plain, batch)
    _run(traced, batch)
    np.testing.assert_allclose(traced.last_auc, plain.last_auc, rtol=1e-6)
    np.testing.assert_allclose(traced.last_auc, want.auc, rtol=1e-6)
    stab = xk.evaluate.SaliencyStability(wrapped, samples=3, output="logits")
    _run(stab, batch)
    stab.on_epoch_end(Data())
    assert stab.last_spearman is not None and np.allclose(stab.last_spearman, 1.0)
    with pytest.raises(
        XaikitTypeError, match=r"output must be an index \(int\), a dict key or an attribute name"
    ):
        xk.evaluate.DeletionAUC(wrapped, output=["logits"])
    with pytest.raises(XaikitTypeError, match=r"output must be an index \(int\)"):
        xk.evaluate.deletion(wrapped, x, "vanilla", output=None)


@pytest.mark.parametrize("kind", ["tabular", "gru"])
def test_saliency_trace_on_tabular_and_sequence_inputs(
    framework: str, rng: np.random.Generator, kind: str
) -> None:
    """A (B, F) batch is drawn as one 1 x F strip per sample (no overlay), a (B, T, F) batch as a
    T x F picture; the masks are SaliencyNet's display masks of the same shape."""
    from tests.xai.test_input_ranks import sequence, tabular

    model = tabular(framework) if kind == "tabular" else sequence(framework, "gru")
    shape = (3, 3) if kind == "tabular" else (3, 5, 3)
    x = rng.standard_normal(shape).astype(np.float32)
    trace = Saliency(model, "x", "y", samples=3, smoothing=2, integrating=(3, 2), seed=0)
    img = _run(trace, {"x": x})["saliency"]
    assert img.batch_sizes == [3]
    assert ("x saliency" in img.columns) == (kind != "tabular")
    want = xk.xai.SaliencyNet(model, "x", "y", seed=0).get_masks({"x": x})["saliency"]
    mask = np.asarray(img["saliency"][0])
    np.testing.assert_allclose(mask, want.reshape(mask.shape), rtol=1e-6)
    assert mask.shape[1:] == ((1, 3) if kind == "tabular" else (5, 3))
    assert img.paint_numpy(dpi=20).shape[0] == 1
