"""Extra forward arguments, ``model_kwargs=``: per-sample tensors follow the rows (sliced and
repeated, never interpolated), everything else is passed unchanged. Checked by value against
closed forms and captum's ``additional_forward_args``."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import pytest

import xaikit as xk
from xaikit.errors import XaikitTypeError, XaikitValueError

B, F, C = 5, 6, 3


def scaled_model(framework: str, w: np.ndarray) -> Any:
    """f_c(x; scale, square) = scale_b * sum_j w[c, j] g(x_j), g = x**2 if square else x."""
    w = np.asarray(w, dtype=np.float32)
    if framework == "torch":
        import torch

        class Scaled(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.w = torch.nn.Parameter(torch.as_tensor(w))

            def forward(self, x: torch.Tensor, scale: Any = None, square: bool = False) -> torch.Tensor:
                z = x * x if square else x
                return (z @ self.w.T) * scale[:, None]

        return Scaled()
    import keras
    import tensorflow as tf

    class ScaledTF(keras.Model):
        def __init__(self) -> None:
            super().__init__()
            self.w = self.add_weight(shape=w.shape, initializer="zeros")
            self.w.assign(w)

        def call(self, x: Any, scale: Any = None, square: bool = False, training: Any = None) -> Any:
            z = x * x if square else x
            return tf.matmul(z, self.w, transpose_b=True) * tf.cast(scale, z.dtype)[:, None]

    model = ScaledTF()
    model(np.zeros((1, w.shape[1]), np.float32), scale=np.ones(1, np.float32))
    return model


def _tensor(framework: str, a: np.ndarray) -> Any:
    if framework == "torch":
        import torch

        return torch.as_tensor(a)
    import tensorflow as tf

    return tf.constant(a)


@pytest.fixture
def case(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    w = rng.standard_normal((C, F)).astype(np.float32)
    x = rng.standard_normal((B, F)).astype(np.float32)
    scale = rng.uniform(0.5, 2.0, B).astype(np.float32)
    target = np.array([0, 1, 2, 1, 0])
    return w, x, scale, target


@pytest.mark.parametrize("square", [False, True])
@pytest.mark.parametrize("max_batch", [2, 7, "auto"])  # part of a slice, slices + partial, whole
def test_per_sample_kwargs_give_the_analytic_gradients(
    framework: str, case, square: bool, max_batch: Any
) -> None:
    w, x, scale, target = case
    model = scaled_model(framework, w)
    kw = {"scale": _tensor(framework, scale), "square": square}
    dg = 2 * x if square else np.ones_like(x)
    want = scale[:, None] * w[target] * dg
    got = xk.xai.explain(model, x, target=target, method="vanilla", model_kwargs=kw, max_batch=max_batch)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    # IG from zeros: exact for square (Gauss-Legendre, degree 2) and linear; completeness holds
    ig, delta = xk.xai.explain(
        model, x, target=target, method="integrated", nsamples=3, baseline="zeros",
        model_kwargs=kw, max_batch=max_batch, return_delta=True,
    )  # fmt: skip
    g = x * x if square else x
    np.testing.assert_allclose(ig, scale[:, None] * w[target] * g, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(delta, 0.0, atol=1e-5)
    # SmoothGrad of a linear model: every noisy copy has the same gradient
    if not square:
        sg = xk.xai.explain(
            model, x, target=target, method="smoothgrad", nsamples=4, magnitude=False,
            model_kwargs=kw, max_batch=max_batch,
        )  # fmt: skip
        np.testing.assert_allclose(sg, want, rtol=1e-5, atol=1e-6)


def test_numpy_per_sample_kwargs_and_saliencynet_merge(framework: str, case) -> None:
    """A numpy array becomes a tensor that follows the rows; the net's kwargs and a call's
    merge (the call wins); predictions use the kwargs too."""
    w, x, scale, target = case
    model = scaled_model(framework, w)
    net = xk.xai.SaliencyNet(model, "x", "y", seed=0, model_kwargs={"scale": -np.ones(B, np.float32)})
    res = net.get_smoothed_masks(
        {"x": x}, nsamples=3, magnitude=False, raw=True, target=target, model_kwargs={"scale": scale}
    )
    np.testing.assert_allclose(res["saliency"], scale[:, None] * w[target], rtol=1e-5, atol=1e-6)
    pred = net.get_masks({"x": x}, raw=True)  # the net's kwargs: scores * -1
    np.testing.assert_array_equal(pred["y"], (x @ w.T * -1).argmax(axis=1))
    np.testing.assert_allclose(pred["saliency"], -w[pred["y"]], rtol=1e-6)


def test_kwargs_match_captum_additional_forward_args(case) -> None:
    torch = pytest.importorskip("torch")
    captum_attr = pytest.importorskip("captum.attr")
    _w, x, scale, target = case
    inner = torch.nn.Sequential(torch.nn.Linear(F, 8), torch.nn.Tanh(), torch.nn.Linear(8, C))

    class WithScale(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, x: torch.Tensor, scale: torch.Tensor, shift: float) -> torch.Tensor:
            return self.inner(x * scale[:, None] + shift)

    model = WithScale()
    xt, st = torch.as_tensor(x), torch.as_tensor(scale)
    ours = xk.xai.explain(
        model, xt, target=target, method="integrated", nsamples=16, quadrature="riemann_middle",
        baseline="zeros", model_kwargs={"scale": st, "shift": 0.25}, max_batch=12,
    )  # fmt: skip
    ig = captum_attr.IntegratedGradients(model)
    theirs = ig.attribute(
        xt, baselines=torch.zeros_like(xt), target=torch.as_tensor(target), n_steps=16,
        method="riemann_middle", additional_forward_args=(st, 0.25),
    ).detach().numpy()  # fmt: skip
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-5 * float(np.abs(theirs).max()))


def test_deletion_and_completeness_take_model_kwargs(framework: str, case) -> None:
    w, x, scale, target = case
    model = scaled_model(framework, w)
    kw = {"scale": _tensor(framework, scale)}
    curve = xk.evaluate.deletion(
        model, x, np.abs(x), target=target, steps=2, baseline="zeros", model_kwargs=kw, max_batch=4
    )
    # step 0: the clean scores; last step: every feature zeroed
    np.testing.assert_allclose(curve.scores[:, 0], scale * (x @ w.T)[np.arange(B), target], rtol=1e-5)
    np.testing.assert_allclose(curve.scores[:, -1], 0.0, atol=1e-6)
    opts = {"nsamples": 4, "baseline": "zeros"}
    comp = xk.evaluate.completeness(model, x, target=target, model_kwargs=kw, method_options=opts)
    np.testing.assert_allclose(comp.gap, scale * (x @ w.T)[np.arange(B), target], rtol=1e-5)
    np.testing.assert_allclose(comp.delta, 0.0, atol=1e-5)
    if framework == "torch":  # (the Keras model holds its weight itself, in no layer to randomize)
        rand = xk.evaluate.randomization_test(model, x, target=target, model_kwargs=kw, random_baseline=False)
        np.testing.assert_allclose(rand.maps["original"], scale[:, None] * w[target], rtol=1e-6)
        assert not np.allclose(rand.maps[rand.table["layer"][0]], rand.maps["original"])


def test_bound_per_sample_tensor_gives_a_clear_error(case) -> None:
    """The old raw RuntimeError: a per-sample tensor bound in the model fails on chunks of other
    than B rows; the message names the cause and model_kwargs; model_kwargs then works."""
    torch = pytest.importorskip("torch")
    w, x, scale, target = case
    model = scaled_model("torch", w)
    st = torch.as_tensor(scale)

    class Bound(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = model

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.inner(x, scale=st)

    bound = Bound()
    np.testing.assert_allclose(  # B rows: fine
        xk.xai.explain(bound, x, target=target, method="vanilla"), scale[:, None] * w[target], rtol=1e-6
    )
    with pytest.raises(
        XaikitValueError,
        match=r"the model ran on the 5 samples but raised RuntimeError on a chunk of 15 rows",
    ) as info:
        xk.xai.explain(bound, x, target=target, method="smoothgrad", nsamples=3)
    assert "functools.partial" in str(info.value) and "model_kwargs={name: tensor}" in str(info.value)
    partial = functools.partial(model, scale=st)
    with pytest.raises(XaikitValueError, match="pass such values with model_kwargs"):
        xk.xai.explain(partial, x, target=target, method="integrated", nsamples=4, framework="torch")
    got = xk.xai.explain(
        model, x, target=target, method="smoothgrad", nsamples=3, magnitude=False, model_kwargs={"scale": st}
    )
    np.testing.assert_allclose(got, scale[:, None] * w[target], rtol=1e-5)


def test_model_kwargs_errors_name_the_fix(framework: str, case) -> None:
    w, x, scale, _target = case
    model = scaled_model(framework, w)
    with pytest.raises(
        XaikitTypeError, match=r"model_kwargs must be a dict \{argument name: value\}.*got tuple"
    ):
        xk.xai.explain(model, x, method="vanilla", model_kwargs=(scale,))
    with pytest.raises(XaikitTypeError, match=r"model_kwargs keys must be argument names \(str\); got key 0"):
        xk.xai.explain(model, x, method="vanilla", model_kwargs={0: scale})
    with pytest.raises(
        XaikitValueError,
        match=r"model_kwargs\['scale'\] is a list of 5 items, one per sample .*pass np.asarray\(value\) "
        r"or a tensor .* or tuple\(value\)",
    ):
        xk.xai.explain(model, x, method="vanilla", model_kwargs={"scale": scale.tolist()})
    with pytest.raises(XaikitTypeError, match=r"SaliencyNet|model_kwargs must be a dict"):
        xk.xai.SaliencyNet(model, "x", "y", model_kwargs=[1, 2])
    # a model that does not take the argument: the call's error lists the kwargs passed
    with pytest.raises(
        XaikitValueError, match=r"model_kwargs passed: 'scale': per-sample .*'nope': fixed bool True"
    ):
        xk.xai.explain(model, x, method="vanilla", model_kwargs={"scale": scale, "nope": True})


class Config:
    """An unhashable configuration object (``__eq__`` without ``__hash__``)."""

    def __init__(self, k: float) -> None:
        self.k = k

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Config) and other.k == self.k


def configured_model(framework: str, w: np.ndarray) -> Any:
    """f(x) = (x W^T) * cfg.k + bias, when mode == "affine" (else x W^T); bias has C entries."""
    if framework == "torch":
        import torch

        class Configured(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.w = torch.nn.Parameter(torch.as_tensor(w))

            def forward(
                self, x: Any, mode: str = "", cfg: Any = None, bias: Any = None, extra: Any = 0
            ) -> Any:
                z = x @ self.w.T
                return z * cfg.k + bias if mode == "affine" else z

        return Configured()
    import tensorflow as tf

    class ConfiguredTF(tf.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = tf.Variable(w)

        def __call__(self, x: Any, mode: str = "", cfg: Any = None, bias: Any = None, extra: Any = 0) -> Any:
            z = tf.matmul(x, self.w, transpose_b=True)
            return z * cfg.k + bias if mode == "affine" else z

    return ConfiguredTF()


def test_fixed_kwargs_pass_unchanged(framework: str, case) -> None:
    """Strings, None, unhashable objects and tensors whose first axis is not B reach every chunk
    as they are (TF: as constants of the compiled step, one step per distinct value)."""
    w, x, _scale, target = case
    model = configured_model(framework, w)
    bias = _tensor(framework, np.arange(C, dtype=np.float32))  # (C,), C != B: fixed
    for k in (2.0, -0.5):
        kw = {"mode": "affine", "cfg": Config(k), "bias": bias, "extra": None}
        for method, opts in [("vanilla", {}), ("smoothgrad", {"nsamples": 3, "magnitude": False})]:
            got = xk.xai.explain(model, x, target=target, method=method, model_kwargs=kw, max_batch=4, **opts)
            np.testing.assert_allclose(got, k * w[target], rtol=1e-5, atol=1e-6)
        curve = xk.evaluate.deletion(
            model, x, np.abs(x), target=target, steps=1, baseline="zeros", model_kwargs=kw
        )
        np.testing.assert_allclose(curve.scores[:, -1], np.arange(C)[target], atol=1e-6)  # x = 0: the bias
