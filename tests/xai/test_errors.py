"""Bad input gets an XaikitError naming the argument or key, what was expected and what came."""

from __future__ import annotations

import numpy as np
import pytest

import xaikit as xk
from tests.xai.models import images, model_for
from xaikit.errors import XaikitError, XaikitTypeError, XaikitValueError


@pytest.fixture
def net_and_batch(framework: str, rng: np.random.Generator):
    model, layout = model_for(framework)
    return model, xk.xai.SaliencyNet(model, "x", "y_pred", seed=0), {"x": layout(images(rng, batch=3))}


def test_wrong_input_key(net_and_batch) -> None:
    model, _, batch = net_and_batch
    net = xk.xai.SaliencyNet(model, "image", "y_pred")
    with pytest.raises(
        XaikitValueError,
        match=r"model_inputs key\(s\) \['image'\] not found in the batch; the batch has keys \['x'\]",
    ):
        net.get_masks(batch)


def test_outputs_must_match_inputs(net_and_batch) -> None:
    model, _, _ = net_and_batch
    with pytest.raises(
        XaikitValueError, match=r"outputs must name one mask per model input \(1: \['x'\]\); got \['a', 'b'\]"
    ):
        xk.xai.SaliencyNet(model, "x", "y", outputs=["a", "b"])
    with pytest.raises(XaikitTypeError, match="model_outputs must be a non-empty string"):
        xk.xai.SaliencyNet(model, "x", [])


def test_model_outputs_naming_an_output_the_model_lacks(net_and_batch) -> None:
    model, _, batch = net_and_batch
    net = xk.xai.SaliencyNet(model, "x", ["y_pred", "aux"])
    with pytest.raises(XaikitValueError, match="the model returned a single tensor; output 1 does not exist"):
        net.get_masks(batch)


def test_class_key_missing(net_and_batch) -> None:
    model, _, batch = net_and_batch
    net = xk.xai.SaliencyNet(model, "x", "y_pred", class_key="label")
    with pytest.raises(XaikitValueError, match=r"class_key 'label' not found in the batch"):
        net.get_smoothed_masks(batch, nsamples=2)


def test_batch_must_be_a_dict(net_and_batch) -> None:
    _, net, batch = net_and_batch
    with pytest.raises(
        XaikitTypeError,
        match=r"batch must be a dict of arrays or tensors keyed by name; got ndarray of shape \(3,",
    ):
        net.get_masks(batch["x"])


def test_non_finite_input(net_and_batch) -> None:
    _, net, batch = net_and_batch
    bad = np.array(batch["x"], copy=True)
    bad[1, 0, 0, 0] = np.nan
    bad[2, 0, 0, 0] = np.inf
    with pytest.raises(
        XaikitValueError, match=r"model input 'x' holds NaN or infinite values \(samples \[1, 2\]\)"
    ):
        net.get_integrated_masks({"x": bad})


def test_empty_batch_and_wrong_types(net_and_batch) -> None:
    _, net, batch = net_and_batch
    with pytest.raises(XaikitValueError, match="model input 'x' must be a non-empty batch"):
        net.get_masks({"x": batch["x"][:0]})
    with pytest.raises(XaikitTypeError, match="model input 'x' must be an array or tensor; got str"):
        net.get_masks({"x": "pixels"})
    with pytest.raises(XaikitTypeError, match="model input 'x' must hold floating-point values"):
        net.get_masks({"x": np.array([["a", "b"]])})


@pytest.mark.parametrize(
    "call,kwargs,message",
    [
        ("get_smoothed_masks", {"nsamples": 0}, r"nsamples must be an int >= 1; got int 0"),
        ("get_smoothed_masks", {"nsamples": 2.5}, r"nsamples must be an int >= 1; got float 2.5"),
        ("get_integrated_masks", {"nsamples": -3}, r"nsamples must be an int >= 1; got int -3"),
        (
            "get_smoothed_masks",
            {"nsamples": 2, "nintegration": -1},
            r"nintegration must be an int >= 1; got int -1",
        ),
        (
            "get_smoothed_masks",
            {"stdev_spread": -0.1},
            r"stdev_spread must be a number >= 0; got float -0.1",
        ),
        (
            "get_integrated_masks",
            {"baseline": "gray"},
            r"baseline must be one of 'uniform', 'zeros', 'black', 'mean', 'blur' or an array; got 'gray'",
        ),
        (
            "get_integrated_masks",
            {"quadrature": "simpson"},
            r"quadrature must be one of 'gausslegendre', .*; got 'simpson'",
        ),
        (
            "get_integrated_masks",
            {"nsamples": 1, "quadrature": "riemann_trapezoid"},
            r"'riemann_trapezoid' needs at least 2 steps; got 1",
        ),
        (
            "get_masks",
            {"target": 5},
            r"target classes must lie in \[0, 4\] for a model with 5 outputs; got values \[5\]",
        ),
        (
            "get_masks",
            {"target": [0, 1]},
            r"target must be one class or one class per sample \(3\); got list of 2$",
        ),
        ("get_integrated_masks", {"target": [0.5, 1, 2]}, r"target must be integer class indices"),
        (
            "get_integrated_masks",
            {"baseline": np.zeros((2, 2))},
            r"baseline for input 'x' must broadcast to the input's shape",
        ),
    ],
)
def test_bad_options(net_and_batch, call: str, kwargs: dict, message: str) -> None:
    _, net, batch = net_and_batch
    with pytest.raises(XaikitError, match=message):
        getattr(net, call)(batch, **kwargs)


@pytest.mark.parametrize(
    ("method", "option"),
    [
        ("integrated", "baseline"),
        ("smint", "baseline"),
        ("guided_ig", "baseline"),
        ("expected_gradients", "baseline"),
        ("deepliftshap", "baselines"),
    ],
)
def test_a_baseline_that_is_not_real_numbers_is_refused(framework: str, method: str, option: str) -> None:
    """Complex values lost their imaginary part with only numpy's ComplexWarning (a map of another
    baseline); text, objects and ragged lists gave numpy's bare TypeError or ValueError."""
    model, layout = model_for(framework)
    x = layout(images(np.random.default_rng(0), batch=2))
    sample = np.ones(x.shape[1:])
    for bad in (sample * 1j, sample[None].astype(np.complex64), [["a"] * 3], [[1.0, 2.0], [3.0]], object()):
        with pytest.raises(XaikitTypeError, match=rf"{option}.* must be real numbers.*; got "):
            xk.xai.explain(model, x, method=method, **{option: bad})
    if option == "baseline" and method != "expected_gradients":  # a named baseline or one number
        with pytest.raises(XaikitTypeError, match=r"baseline must be one of .* or real numbers; got complex"):
            xk.xai.explain(model, x, method=method, baseline=2j)


def test_model_output_must_be_batch_by_classes(framework: str, rng: np.random.Generator) -> None:
    x = rng.random((2, 6)).astype(np.float32)
    if framework == "torch":
        import torch

        model = torch.nn.Sequential(torch.nn.Linear(6, 6), torch.nn.Unflatten(1, (3, 2)))
    else:
        import tensorflow as tf

        model = tf.keras.Sequential(
            [tf.keras.layers.Input((6,)), tf.keras.layers.Dense(6), tf.keras.layers.Reshape((3, 2))]
        )
    with pytest.raises(
        XaikitValueError,
        match=r"must have shape \(batch, classes\) = \(2, classes\), or \(2,\) for one score per row; it returned .* of shape \(2, 3, 2\)",
    ):
        xk.xai.explain(model, x, method="vanilla")


def test_explain_rejects_unknown_methods_and_options(net_and_batch) -> None:
    model, _, batch = net_and_batch
    with pytest.raises(
        XaikitValueError,
        match=r"method must be one of 'vanilla', 'smoothgrad', 'integrated', 'smint', 'vargrad'.*'xrai', 'gradcam'.*'rise', 'lrp'.*'lime'.*; got 'no_such_method'",
    ):
        xk.xai.explain(model, batch["x"], method="no_such_method")
    with pytest.raises(
        XaikitTypeError, match=r"explain\(method='integrated'\) got unknown option\(s\) \['n_steps'\]"
    ):
        xk.xai.explain(model, batch["x"], method="integrated", n_steps=5)
    with pytest.raises(XaikitValueError, match="max_batch must be 'auto' or an int >= 1; got int 0"):
        xk.xai.explain(model, batch["x"], method="vanilla", max_batch=0)


@pytest.mark.parametrize(
    ("method", "option", "value", "takers"),
    [
        ("vanilla", "nsamples", 50, "smoothgrad, integrated, smint"),
        ("vanilla", "stdev_spread", 0.3, "smoothgrad, smint, vargrad"),
        ("vanilla", "baseline", "black", "integrated, smint, vargrad"),
        ("smoothgrad", "nintegration", 50, "smint, vargrad"),
        ("smoothgrad", "baseline", "zeros", "integrated, smint, vargrad"),
        ("integrated", "stdev_spread", 0.2, "smoothgrad, smint, vargrad"),
        ("integrated", "nintegration", 8, "smint, vargrad"),
    ],
)
def test_an_option_the_method_would_not_read_is_refused(net_and_batch, method, option, value, takers) -> None:
    """Each sweep method takes only the options it reads: before, the core four shared one list,
    and ``nsamples`` of vanilla, ``nintegration`` of SmoothGrad (SmInt reads it) or
    ``stdev_spread`` of IG were dropped without a word. The message names the methods that
    take the option, the method's own family first."""
    model, _, batch = net_and_batch
    with pytest.raises(
        XaikitTypeError,
        match=rf"^explain\(method='{method}'\) got unknown option\(s\) \['{option}'\]; its options are "
        rf".*\({option} is an option of: {takers}",
    ):
        xk.xai.explain(model, batch["x"], method=method, **{option: value})


def test_path_options_of_smoothgrad_and_vargrad_need_nintegration(net_and_batch) -> None:
    """``baseline`` and ``quadrature`` set an IG path: SaliencyNet's SmoothGrad and VarGrad take
    them only with ``nintegration`` (SmInt, VarGrad of IG), and use them then."""
    model, net, batch = net_and_batch
    for option, value in (("baseline", "black"), ("quadrature", "riemann_left")):
        with pytest.raises(XaikitTypeError, match=rf"^get_smoothed_masks got {option} without nintegration"):
            net.get_smoothed_masks(batch, nsamples=2, **{option: value})
        with pytest.raises(XaikitTypeError, match=rf"^vargrad got {option} without nintegration"):
            xk.xai.explain(model, batch["x"], method="vargrad", nsamples=2, **{option: value})
    x, target = batch["x"], [0] * len(batch["x"])
    smint = net.get_smoothed_masks(
        batch, nsamples=2, nintegration=3, baseline="black", target=target, raw=True
    )
    want = xk.xai.explain(
        model, x, method="smint", target=target, nsamples=2, nintegration=3, baseline="black", seed=0
    )
    np.testing.assert_array_equal(smint["saliency"], want)
    other = xk.xai.explain(model, x, method="smint", target=target, nsamples=2, nintegration=3, seed=0)
    assert not np.array_equal(want, other)  # the baseline is used, not dropped
    var = xk.xai.explain(
        model, x, method="vargrad", target=target, nsamples=2, nintegration=3, quadrature="riemann_left"
    )
    assert var.shape == np.shape(x)


def test_model_of_no_framework() -> None:
    with pytest.raises(
        XaikitTypeError,
        match=r"model must be a torch.nn.Module, a Keras model or a TensorFlow callable .*got function",
    ):
        xk.xai.SaliencyNet(lambda x: x, "x", "y")


def test_framework_that_does_not_match_the_model(framework: str, rng: np.random.Generator) -> None:
    """framework= naming the other framework is refused up front (it once failed inside the
    model with "check their shape and layout")."""
    model, layout = model_for(framework)
    other = "tf" if framework == "torch" else "torch"
    match = rf"framework='{other}' does not match the model, a \w+ of .*: pass framework='{framework}'"
    with pytest.raises(XaikitTypeError, match=match):
        xk.xai.explain(model, layout(images(rng, batch=2)), method="vanilla", framework=other)


def test_input_the_model_cannot_take(framework: str, rng: np.random.Generator) -> None:
    """A wrong image size fails inside the model: the error names the inputs and their shapes."""
    model, layout = model_for(framework)  # built for 12x12 images
    x = layout(rng.random((2, 20, 20, 3)).astype(np.float32))
    net = xk.xai.SaliencyNet(model, "x", "y_pred")
    with pytest.raises(
        XaikitValueError, match=r"the model could not be called on the model inputs \('x': \(2, "
    ):
        net.get_integrated_masks({"x": x})


def test_integer_ids_the_model_cannot_take_are_named() -> None:
    """A model that reads token ids (an nn.Embedding) fails on the float copy every method
    explains, also a forward-only one: the error says that the ids were cast and what to explain."""
    torch = pytest.importorskip("torch")

    class Tokens(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed, self.head = torch.nn.Embedding(10, 4), torch.nn.Linear(4, 3)

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            return self.head(self.embed(ids).mean(1))

    ids = torch.randint(0, 10, (2, 6))
    for method in ("vanilla", "kernel_shap"):
        with pytest.raises(
            XaikitValueError,
            match=r"Model input\(s\) \['x'\] came as integers and are explained as float32 .* explain it as "
            r"a function of its embeddings",
        ):
            xk.xai.explain(Tokens().eval(), ids, method=method)


@pytest.mark.parametrize(
    ("seed", "error", "got"),
    [
        ("a", XaikitTypeError, "str 'a'"),
        (1.5, XaikitTypeError, "float 1.5"),
        (True, XaikitTypeError, "bool True"),
        (-1, XaikitValueError, "int -1"),
    ],
)
def test_a_seed_is_an_int_or_none(net_and_batch, seed, error, got) -> None:
    """A float seed is not truncated (1.5 gave seed 1's map), a string not parsed, and a negative
    one not folded onto a large positive one: each is an error naming seed."""
    model, net, batch = net_and_batch
    message = rf"^seed must be None or an int >= 0; got {got}$"
    with pytest.raises(error, match=message):
        xk.xai.explain(model, batch["x"], method="smoothgrad", seed=seed)
    with pytest.raises(error, match=message):
        net.get_smoothed_masks(batch, seed=seed)
    with pytest.raises(error, match=message):
        xk.xai.SaliencyNet(model, "x", "y_pred", seed=seed)
    with pytest.raises(error, match=message):
        xk.xai.explain(model, batch["x"], method="feature_ablation", seed=seed)


def test_a_numpy_integer_seed_is_the_same_seed(net_and_batch) -> None:
    model, _, batch = net_and_batch
    a = xk.xai.explain(model, batch["x"], method="smoothgrad", seed=np.int64(3), nsamples=2)
    np.testing.assert_array_equal(
        a, xk.xai.explain(model, batch["x"], method="smoothgrad", seed=3, nsamples=2)
    )
