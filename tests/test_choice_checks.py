"""Arguments that pick one of a few strings: a wrong type (a numpy array, a list) or a misspelt
name is refused with a message naming the argument and its choices, never with numpy's "truth
value of an array is ambiguous" or an "unhashable type" TypeError; a valid value still works."""

from __future__ import annotations

import os
import tempfile
from typing import Any

import numpy as np
import pytest

from xaikit.errors import XaikitTypeError, XaikitValueError

BACKENDS = {b.strip() for b in os.environ.get("XAIKIT_TEST_BACKENDS", "torch,tf").split(",") if b.strip()}
needs_torch = pytest.mark.skipif("torch" not in BACKENDS, reason="torch is not in XAIKIT_TEST_BACKENDS")
needs_tf = pytest.mark.skipif("tf" not in BACKENDS, reason="tf is not in XAIKIT_TEST_BACKENDS")

#: wrong types: two strings in an array (compared element-wise, ``in`` raised numpy's ambiguity
#: error), a list (unhashable), None and an int; with the ``got`` each message ends on
WRONG: list[tuple[Any, str]] = [
    (np.array(["a", "b"]), r"got ndarray of shape \(2,\) and dtype str32$"),
    (["a"], r"got list"),
    (None, r"got NoneType None$"),
    (3, r"got int 3$"),
]


def refused(
    call: Any, name: str, choices: str, error: type = XaikitValueError, none_taken: bool = False
) -> None:
    """``call`` refuses every wrong type (None too unless ``none_taken``) and a misspelt name, each
    message naming ``name`` and ``choices`` (a regex of the start of the list)."""
    for value, came in WRONG:
        if value is None and none_taken:
            continue
        with pytest.raises(error, match=rf"^{name} must be one of {choices}.*; {came}"):
            call(value)
    with pytest.raises(XaikitValueError, match=rf"^{name} must be one of {choices}.*; got 'zzz'$"):
        call("zzz")


def test_metric_average() -> None:
    from xaikit.trace.metric import F1Score, Precision, Recall

    for cls in (Precision, Recall, F1Score):
        refused(lambda v, cls=cls: cls(average=v), "average", "'auto'", none_taken=True)
        assert cls(average="macro").average == "macro" and cls(average=None).average is None
    with pytest.raises(XaikitValueError, match=r"^average must be one of 'auto', 'binary', .* or None; got"):
        Recall(average=np.array(["micro", "macro"]))


def test_health_kind() -> None:
    from xaikit.xai.health import map_status

    refused(lambda v: map_status(np.ones((1, 2)), kind=v), "kind", "'gradient', 'attribution', 'none'")
    assert map_status(np.array([[0.0, 1.0]]), kind="attribution").tolist() == [""]


def test_quadrature_rule() -> None:
    from xaikit.xai._engine.quadrature import quadrature

    refused(lambda v: quadrature(v, 4), "quadrature", "'gausslegendre', 'riemann_left'")
    for rule, nodes in (("riemann_left", [0, 0.25, 0.5, 0.75]), ("linspace", [0, 1 / 3, 2 / 3, 1])):
        x, w = quadrature(rule, 4)
        np.testing.assert_allclose(x, nodes)
        assert w.sum() == pytest.approx(1.0)


def test_lrp_rule_kind() -> None:
    from xaikit.xai.rules import Rule

    refused(Rule, "rule kind", "'epsilon', 'zplus'")
    assert Rule("zplus").kind == "zplus"


def test_to_tensor_target_type() -> None:
    from xaikit.backend import to_tensor

    refused(lambda v: to_tensor({"x": [1.0]}, v), "target_type", "'np', 'torch', 'tf'")
    assert to_tensor({"x": [1.0]}, "numpy")["x"].dtype == np.float64


def test_trace_runner_mode() -> None:
    from xaikit.integrations import TraceRunner
    from xaikit.trace.metric import Accuracy

    runner = TraceRunner([Accuracy()])
    runner.on_begin()
    refused(runner.on_epoch_begin, "mode", "'train', 'eval', 'test', 'infer'")
    runner.on_epoch_begin("eval")


def test_pad_if_needed_border_mode() -> None:
    from xaikit.op.numpyop.multivariate import PadIfNeeded

    refused(lambda v: PadIfNeeded(4, 4, inputs="x", border_mode=v), "border_mode", "'constant', 'reflect'")
    assert PadIfNeeded(4, 4, inputs="x", border_mode="wrap").border_mode == "wrap"


def test_shortcut_corner_and_tag_class() -> None:
    from xaikit.dataset.data import shortcut

    refused(lambda v: shortcut.tag_mask(16, 2, v), "corner", "'top-left', 'top-right'")
    refused(lambda v: shortcut.load_data(16, 2, 2, corner=v), "corner", "'top-left'")
    assert shortcut.tag_mask(16, 2, "top-right")[0, 15]
    # tag_class: a wrong type stays a TypeError (it says what a class name is); a misspelt one
    with pytest.raises(XaikitTypeError, match=r"tag_class must be a class name \(str\); got ndarray"):
        shortcut.load_data(16, 2, 2, tag_class=np.array(["circle", "ring"]))
    with pytest.raises(XaikitValueError, match=r"^tag_class must be one of 'circle', .*; got 'zzz'$"):
        shortcut.load_data(16, 2, 2, tag_class="zzz")
    train, _ = shortcut.load_data(16, 2, 2, tag_class="ring", corner="bottom-left")
    assert len(train) == 2


# ---- through explain / explain_dataset ---------------------------------------------------------------
@pytest.fixture(scope="module")
def torch_model() -> tuple[Any, Any]:
    torch = pytest.importorskip("torch")
    from tests.xai.models import images, model_for

    model, layout = model_for("torch", seed=0, size=16)
    return model, torch.as_tensor(layout(images(np.random.default_rng(0), batch=2, size=16)))


@needs_torch
def test_explain_xrai_algorithm(torch_model: tuple[Any, Any]) -> None:
    import xaikit as xk

    model, x = torch_model
    refused(
        lambda v: xk.xai.explain(model, x, method="xrai", steps=2, algorithm=v), "algorithm", "'full', 'fast'"
    )
    res = xk.xai.explain(model, x, method="xrai", steps=2, algorithm="fast")
    assert np.asarray(res).shape[0] == 2


@needs_torch
def test_explain_quadrature(torch_model: tuple[Any, Any]) -> None:
    import xaikit as xk

    model, x = torch_model
    refused(
        lambda v: xk.xai.explain(model, x, method="integrated", nsamples=2, quadrature=v),
        "quadrature",
        "'gausslegendre', 'riemann_left'",
    )
    res = xk.xai.explain(model, x, method="integrated", nsamples=2, quadrature="riemann_trapezoid")
    assert np.asarray(res).shape == tuple(x.shape)


@needs_torch
def test_explain_dataset_engine() -> None:
    torch = pytest.importorskip("torch")
    import xaikit as xk

    model = torch.nn.Linear(4, 2)
    x = np.random.default_rng(0).random((5, 4), dtype=np.float32)

    def run(engine: Any) -> Any:
        out = tempfile.mkdtemp() + "/x.zarr"
        return xk.xai.explain_dataset(model, x, method="vanilla", out=out, progress=False, engine=engine)

    refused(run, "engine", "'local', 'ray'")
    assert run("local").attributions.shape == (5, 4)


@needs_torch
def test_explain_head_fusion() -> None:
    pytest.importorskip("transformers")
    import xaikit as xk
    from tests.test_attention_methods import images, vit

    model, x = vit(), images()
    names = "'mean', 'max', 'min'"
    refused(
        lambda v: xk.xai.explain(model, x, method="attention_rollout", head_fusion=v),
        "head_fusion",
        names,
        error=XaikitTypeError,  # a wrong type is a TypeError here, as before
    )
    assert np.asarray(xk.xai.explain(model, x, method="attention_rollout", head_fusion="min")).shape[0] == 2


@needs_tf
def test_tf_trace_kind() -> None:
    tf = pytest.importorskip("tensorflow")
    from xaikit.backend import get_backend

    bk = get_backend(tf.zeros(1))
    model = tf.keras.Sequential([tf.keras.layers.Input((3,)), tf.keras.layers.Dense(2)])
    refused(lambda v: bk.traces(model, v), "kind", "'cam_acts', 'cam_grad'")
    assert bk.traces(model, "grad") == 0


def test_two_way_choices_written_out() -> None:
    """The checks that say "must be 'a' or 'b'": safe for arrays and lists too."""
    import xaikit as xk
    from xaikit.trace.adapt import EarlyStopping

    calls = [
        (lambda v: EarlyStopping(compare=v), "compare must be 'min' or 'max'", XaikitValueError),
        (lambda v: xk.targets.ClassRegion(1, reduce=v), "reduce must be 'sum' or 'mean'", XaikitValueError),
        (
            lambda v: xk.xai.explain(lambda t: t, np.zeros((1, 2), np.float32), framework=v),
            "framework must be 'torch' or 'tf'",
            XaikitTypeError,
        ),
    ]
    for call, message, error in calls:
        for value, came in WRONG:
            if value is None and "framework" in message:
                continue  # framework=None: not given
            with pytest.raises(error, match=rf"{message}; {came}"):
                call(value)
        with pytest.raises(error, match=rf"{message}; got 'zzz'$"):
            call("zzz")
    assert EarlyStopping(compare="max").compare == "max"
    assert xk.targets.ClassRegion(1, reduce="mean").reduce == "mean"
