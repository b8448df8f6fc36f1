"""The models users bring: several outputs (tuple, dict, Hugging Face-style objects), one score per
row, integer tensors and float64 Keras layers. Each case is checked by value against the plain
model or a closed form."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

import xaikit as xk
from tests.xai.models import images, model_for
from xaikit.errors import XaikitTypeError, XaikitValueError


@dataclass
class FakeHFOutput:
    """What a Hugging Face classifier returns: an object with ``.logits`` (and more)."""

    logits: Any
    hidden_states: Any = None


@dataclass
class NoLogits:
    scores: Any
    features: Any


def wrap(framework: str, model: Any, make: Any) -> Any:
    """A model returning ``make(logits, x)`` instead of ``model(x)``."""
    if framework == "torch":
        import torch

        class Wrapped(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.inner = model

            def forward(self, x: torch.Tensor) -> Any:
                return make(self.inner(x), x)

        return Wrapped()
    import tensorflow as tf

    class WrappedTF(tf.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = model

        def __call__(self, x: Any) -> Any:
            return make(self.inner(x, training=False), x)

    return WrappedTF()


def _setup(framework: str, rng: np.random.Generator) -> tuple[Any, np.ndarray]:
    model, layout = model_for(framework)
    return model, layout(images(rng, batch=3))


OUTPUTS = {
    "hf": (lambda z, x: FakeHFOutput(logits=z, hidden_states=x), {}),
    "hf_named": (lambda z, x: FakeHFOutput(logits=z, hidden_states=x), {"output": "logits"}),
    "dict": (lambda z, x: {"aux": z[:, :2] * 3.0, "logits": z}, {"output": "logits"}),
    "dict_index": (lambda z, x: {"aux": z[:, :2] * 3.0, "logits": z}, {"output": 1}),
    # the default output of a dict is its "logits" key, wherever it stands (a Hugging Face output
    # given labels has "loss" first)
    "dict_default": (lambda z, x: {"aux": z[:, :2] * 3.0, "logits": z}, {}),
    "dict_loss_first": (lambda z, x: {"loss": z[:, :1] * z[:, :1], "logits": z}, {}),
    "tuple": (lambda z, x: (z[:, :2] * 3.0, z), {"output": 1}),
    "object_attr": (lambda z, x: NoLogits(scores=z, features=x), {"output": "scores"}),
}


@pytest.mark.parametrize("kind", sorted(OUTPUTS))
@pytest.mark.parametrize("method", ["vanilla", "integrated"])
def test_selected_output_explains_like_the_bare_model(
    framework: str, rng: np.random.Generator, kind: str, method: str
) -> None:
    model, x = _setup(framework, rng)
    make, opts = OUTPUTS[kind]
    wrapped = wrap(framework, model, make)
    kw: dict[str, Any] = {"nsamples": 4, "baseline": "black"} if method == "integrated" else {}
    want = xk.xai.explain(model, x, method=method, **kw)
    got = xk.xai.explain(wrapped, x, method=method, **kw, **opts)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    # the same through SaliencyNet(output=...): predicted classes and masks
    plain = xk.xai.SaliencyNet(model, "x", "y_pred", seed=0).get_masks({"x": x}, raw=True)
    net = xk.xai.SaliencyNet(wrapped, "x", "y_pred", seed=0, **opts)
    res = net.get_masks({"x": x}, raw=True)
    np.testing.assert_array_equal(res["y_pred"], plain["y_pred"])
    np.testing.assert_allclose(res["saliency"], plain["saliency"], rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("method", ["vanilla", "gradcam", "occlusion"])
def test_class_targets_and_target_objects_read_the_same_dict_output(
    framework: str, rng: np.random.Generator, method: str
) -> None:
    """A class number and the target objects (Class, Output) explain the same entry of a dict:
    its "logits" key by default, the named one with output= (they once read the first entry and
    "logits" respectively)."""
    model, x = _setup(framework, rng)
    if framework == "torch":
        wrapped = wrap(framework, model, lambda z, x: {"aux": z * 3.0, "logits": z})
    else:  # a Keras model with a dict of outputs (Grad-CAM reads a layer of a Keras model)
        import keras

        z = model.outputs[0]
        wrapped = keras.Model(model.inputs, {"aux": keras.layers.Rescaling(3.0)(z), "logits": z})
    want = xk.xai.explain(model, x, target=1, method=method)
    for target in (1, xk.targets.Class(1), xk.targets.Output(1)):
        got = xk.xai.explain(wrapped, x, target=target, method=method)
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6 * float(np.abs(want).max()))
    aux = xk.xai.explain(wrapped, x, target=1, method=method, output="aux")
    for target in (xk.targets.Class(1), xk.targets.Output(1)):
        got = xk.xai.explain(wrapped, x, target=target, method=method, output="aux")
        np.testing.assert_allclose(got, aux, rtol=1e-6, atol=1e-6 * float(np.abs(aux).max()))
    assert not np.allclose(aux, want)


def test_several_model_outputs_keys_get_each_output(framework: str, rng: np.random.Generator) -> None:
    """model_outputs with two keys: each key gets its output's prediction; output= picks the
    explained one (here the second)."""
    model, x = _setup(framework, rng)
    wrapped = wrap(framework, model, lambda z, x: (-z, z))
    plain = xk.xai.SaliencyNet(model, "x", "y", seed=0).get_masks({"x": x}, raw=True)
    res = xk.xai.SaliencyNet(wrapped, "x", ["neg", "pos"], seed=0, output=1).get_masks({"x": x}, raw=True)
    np.testing.assert_array_equal(res["pos"], plain["y"])
    assert not np.array_equal(res["neg"], res["pos"])
    np.testing.assert_allclose(res["saliency"], plain["saliency"], rtol=1e-6, atol=1e-7)


def test_a_dict_output_index_counts_the_keys_in_the_order_returned(
    framework: str, rng: np.random.Generator
) -> None:
    # the message listed the keys sorted (as Keras's output_names does) while output=0 picked the
    # first key returned: a reader of the message would pick the wrong output by index
    model, x = _setup(framework, rng)
    both = wrap(framework, model, lambda z, x: {"zeta": -z, "alpha": z})
    with pytest.raises(XaikitValueError, match=r"dict with keys \['zeta', 'alpha'\] \(in the order"):
        xk.xai.explain(both, x, method="vanilla", output=2)
    np.testing.assert_array_equal(
        xk.xai.explain(both, x, method="vanilla", output=0, target=0),
        xk.xai.explain(both, x, method="vanilla", output="zeta", target=0),
    )


def test_output_errors_name_the_fix(framework: str, rng: np.random.Generator) -> None:
    model, x = _setup(framework, rng)
    no_logits = wrap(framework, model, lambda z, x: NoLogits(scores=z, features=x))
    with pytest.raises(
        XaikitTypeError,
        match=r"returned a NoLogits object with tensor attributes \['scores', 'features'\] and no "
        r"'logits' \(output=0\): pass output='scores'",
    ):
        xk.xai.explain(no_logits, x, method="vanilla")
    with pytest.raises(XaikitValueError, match=r"it has no attribute 'logit': pass output= one of them"):
        xk.xai.SaliencyNet(no_logits, "x", "y", output="logit").get_masks({"x": x})
    with pytest.raises(
        XaikitValueError, match="the model returned a single tensor; output 'logits' does not exist"
    ):
        xk.xai.explain(model, x, method="vanilla", output="logits")
    as_dict = wrap(framework, model, lambda z, x: {"logits": z})
    with pytest.raises(
        XaikitValueError,
        match=r"dict with keys \['logits'\] \(in the order it returned them: output=i picks the i-th\); output 'scores' is not one",
    ):
        xk.xai.explain(as_dict, x, method="vanilla", output="scores")
    pair = wrap(framework, model, lambda z, x: (z, z))
    with pytest.raises(XaikitValueError, match=r"2 outputs in a tuple; output index 2 is out of range"):
        xk.xai.explain(pair, x, method="vanilla", output=2)
    with pytest.raises(XaikitTypeError, match=r"output must be an index \(int\), a dict key"):
        xk.xai.SaliencyNet(model, "x", "y", output=1.5)


def score_model(framework: str, w: np.ndarray) -> Any:
    """f(x) = sum_j w_j x_j: one score per row, shape (B,)."""
    if framework == "torch":
        import torch

        wt = torch.nn.Parameter(torch.as_tensor(w))

        class Score(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.w = wt

            def forward(self, x: torch.Tensor) -> torch.Tensor:
                return (x * self.w).sum(dim=1)

        return Score()
    import tensorflow as tf

    class ScoreTF(tf.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = tf.Variable(w)

        def __call__(self, x: Any) -> Any:
            return tf.reduce_sum(x * self.w, axis=1)

    return ScoreTF()


def test_one_score_per_row(framework: str, rng: np.random.Generator) -> None:
    w = rng.standard_normal(6).astype(np.float32)
    x = rng.standard_normal((4, 6)).astype(np.float32)
    model = score_model(framework, w)
    grad = xk.xai.explain(model, x, method="vanilla")
    np.testing.assert_array_equal(grad, np.broadcast_to(w, x.shape))
    np.testing.assert_array_equal(xk.xai.explain(model, x, target=0, method="vanilla"), grad)
    ig, delta = xk.xai.explain(
        model, x, method="integrated", nsamples=3, baseline=np.zeros_like(x), return_delta=True
    )
    np.testing.assert_allclose(ig, x * w, rtol=1e-5, atol=1e-6)  # linear: IG = (x - 0) * w
    np.testing.assert_allclose(delta, 0.0, atol=1e-5)
    res = xk.xai.SaliencyNet(model, "x", "score", seed=0).get_smoothed_masks(
        {"x": x}, nsamples=3, magnitude=False, raw=True
    )
    np.testing.assert_allclose(res["score"], x.astype(np.float64) @ w, rtol=1e-5)  # the score itself
    assert res["score"].dtype == np.float64
    np.testing.assert_allclose(res["saliency"], np.broadcast_to(w, x.shape), rtol=1e-6)
    with pytest.raises(XaikitValueError, match=r"target must be None or 0 for a model output of one score"):
        xk.xai.explain(model, x, target=1, method="vanilla")


def _tensor(framework: str, a: np.ndarray) -> Any:
    if framework == "torch":
        import torch

        return torch.as_tensor(a)
    import tensorflow as tf

    return tf.constant(a)


@pytest.mark.parametrize("dtype", ["uint8", "int32", "bool"])
def test_integer_tensors_are_cast_like_numpy(framework: str, rng: np.random.Generator, dtype: str) -> None:
    model, layout = model_for(framework)
    pixels = layout(rng.integers(0, 256, (2, 12, 12, 3)))
    raw = (pixels > 127) if dtype == "bool" else pixels.astype(dtype)
    want = xk.xai.explain(model, raw.astype(np.float32), method="integrated", nsamples=3, baseline="black")
    for given in (raw, _tensor(framework, raw)):
        got = xk.xai.explain(model, given, method="integrated", nsamples=3, baseline="black")
        np.testing.assert_array_equal(got, want)


def test_string_tensors_are_still_refused() -> None:
    tf = pytest.importorskip("tensorflow")
    model, _ = model_for("tf")
    with pytest.raises(
        XaikitTypeError,
        match=r"model input .x. must hold floating-point values \(integer and bool values are cast\); got",
    ):
        xk.xai.explain(model, tf.constant([["a", "b"]]), method="vanilla")


def float64_model(framework: str, w1: np.ndarray, b1: np.ndarray, w2: np.ndarray) -> Any:
    """f(x) = tanh(x W1 + b1) W2, computed in float64 (Keras: float64 layers under the float32
    global policy, so that ``model.compute_dtype`` still says float32)."""
    if framework == "torch":
        import torch

        m = torch.nn.Sequential(torch.nn.Linear(w1.shape[0], w1.shape[1]), torch.nn.Tanh())
        m.append(torch.nn.Linear(w2.shape[0], w2.shape[1], bias=False))
        m = m.double()
        with torch.no_grad():
            m[0].weight.copy_(torch.as_tensor(w1.T))
            m[0].bias.copy_(torch.as_tensor(b1))
            m[2].weight.copy_(torch.as_tensor(w2.T))
        return m
    import keras

    model = keras.Sequential(
        [
            keras.layers.Input((w1.shape[0],), dtype="float64"),  # a float32 Input would cast x down
            keras.layers.Dense(w1.shape[1], activation="tanh", dtype="float64"),
            keras.layers.Dense(w2.shape[1], use_bias=False, dtype="float64"),
        ]
    )
    model.layers[0].set_weights([w1, b1])
    model.layers[1].set_weights([w2])
    assert model.compute_dtype == "float32"  # the model says float32; its layers compute in float64
    return model


def test_float64_models_compute_in_float64(framework: str, rng: np.random.Generator) -> None:
    w1, b1, w2 = rng.standard_normal((5, 7)), rng.standard_normal(7), rng.standard_normal((7, 3))
    x = rng.standard_normal((4, 5))
    model = float64_model(framework, w1, b1, w2)
    target = np.array([0, 2, 1, 2])
    for given in (x, x.astype(np.float32)):  # float32 input: cast up, computed in float64
        # d f_c / d x = W1 diag(1 - tanh(x W1 + b1)^2) W2[:, c]
        x64 = given.astype(np.float64)
        ref = ((1.0 - np.tanh(x64 @ w1 + b1) ** 2) * w2[:, target].T) @ w1.T
        got = xk.xai.explain(model, given, target=target, method="vanilla")
        assert got.dtype == np.float64
        np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12)
    ig = xk.xai.explain(model, x, target=target, method="integrated", nsamples=4, baseline="black")
    assert ig.dtype == np.float64


REFUSALS = {
    # what the model returns, output=, the error type, what the message must say
    "none": (
        lambda z, x: None,
        0,
        XaikitTypeError,
        r"it returned NoneType None: pass output= the index, key",
    ),
    "dict_entry": (
        lambda z, x: {"logits": z, "meta": "abc"},
        "meta",
        XaikitTypeError,
        r"it returned str 'abc' as output 'meta': pass output= the index, key or attribute name",
    ),
    "per_step": (
        lambda z, x: z[:, None, :] * (z[:, :2, None] * 0 + 1),
        0,
        XaikitValueError,
        r"must have shape \(batch, classes\) = \(3, classes\).*of shape \(3, 2, 5\) and dtype float32: pass output= another "
        r"output, or wrap the model so that it returns one score per class and row",
    ),
    "no_batch_axis": (
        lambda z, x: z[0],
        0,
        XaikitValueError,
        r"must have one row per input row, shape \(3, classes\) or \(3,\); it returned .* of shape \(5,\) and dtype float32: "
        r"the model must keep the batch axis",
    ),
    "object_index": (
        lambda z, x: FakeHFOutput(logits=z, hidden_states=x),
        1,
        XaikitValueError,
        r"FakeHFOutput object with tensor attributes \['logits', 'hidden_states'\]; its outputs are named, "
        r"not numbered \(output=1\): pass output= one of those attribute names",
    ),
}


@pytest.mark.parametrize("kind", sorted(REFUSALS))
def test_refusals_name_what_came_and_the_fix(framework: str, rng: np.random.Generator, kind: str) -> None:
    model, x = _setup(framework, rng)
    make, output, error, message = REFUSALS[kind]
    with pytest.raises(error, match=message):
        xk.xai.explain(wrap(framework, model, make), x, method="vanilla", output=output)


def test_input_refusals_name_the_fix(framework: str, rng: np.random.Generator) -> None:
    model, x = _setup(framework, rng)
    with pytest.raises(
        XaikitTypeError,
        match=r"model input 'x' must be an array or tensor; got dict: for a model with several inputs pass "
        r"them as a list \(explain\) or name each batch key in model_inputs \(SaliencyNet\)",
    ):
        xk.xai.explain(model, {"x": x}, method="vanilla")
    with pytest.raises(
        XaikitValueError,
        match=r"'input_0' has 3, 'input_1' has 2: give every input one row per sample .*model_kwargs=",
    ):
        xk.xai.explain(model, [x, x[:2]], method="vanilla")
    # a nested Python list of numbers is one batch written out, not several inputs: it used to be
    # read as 3 unbatched inputs and refused with a hint to add a batch axis
    with pytest.raises(
        XaikitTypeError, match=r"x: a list is read as one batch per model input .*np.asarray\(x\)"
    ):
        xk.xai.explain(model, np.asarray(x).tolist(), method="vanilla")
    with pytest.raises(
        XaikitTypeError, match=r"unknown option\(s\) \['outputs'\]; its options are .*output and model_kwargs"
    ):
        xk.xai.explain(model, x, method="vanilla", outputs=1)
