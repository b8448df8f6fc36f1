"""The method registry (issue 26): a method of one's own is a runner and one record. Registered
from this test module in a few lines, it is everywhere a method is taken by name: ``explain``
(its options checked against the record), the ``Saliency`` trace's ``methods=`` (a column with
its title), ``explain_dataset`` (stored, bit-equal to ``explain``), ``xk.evaluate.compare`` (a
row), the CLI (``xaikit explain --method``, its help and ``xaikit methods``) and
``xk.xai.METHODS``; a CAM of one's own is one formula, in the ``GradCAM`` trace too. Then the
registry's own rules: names, aliases and titles are unique, ``replace=True``, bad records are
refused with a message that says what is wrong.

``SaliencyNet`` is not among those places: its three methods are the core gradient methods
(``get_masks``, ``get_smoothed_masks``, ``get_integrated_masks``); a method of one's own goes
through ``explain`` or the trace.
"""

from __future__ import annotations

import dataclasses
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import xaikit as xk
from tests.test_trace_xai_saliency import batches, run_epoch, tiny_model
from xaikit.backend import Rows
from xaikit.errors import XaikitTypeError, XaikitValueError
from xaikit.trace.xai import GradCAM, Saliency
from xaikit.xai import Call, Explained, Method, get_method, method_names, register_method, unregister_method
from xaikit.xai.internal import to_display

sys.path.insert(0, str(Path(__file__).parent))  # dataset_models, as the CLI imports it by name
from dataset_models import images, tiny_cnn

TOY = "toy_gradient"


# ---- the toy method: a runner and its record ---------------------------------------------------------
def toy_run(call: Call, *, scale: float = 1.0) -> Explained:
    """The sign of the explained score's gradient at the input, times ``scale``."""
    bk, inp = call.bk, call.inp
    kw = inp.kwargs.rows(np.arange(inp.batch)) if inp.kwargs else None
    _, grads, _ = bk.grad_step(Rows(inp.model, inp.tensors, call.targets, call.output, kw))
    return Explained(inp.to_user([scale * np.sign(bk.to_numpy(g)) for g in grads]))


def _check_toy(options: dict[str, Any]) -> None:
    scale = options.get("scale", 1.0)
    if isinstance(scale, bool) or not isinstance(scale, (int, float)):
        raise XaikitTypeError(f"scale must be a number; got {scale!r}")


TOY_METHOD = Method(
    TOY, "gradient", "Toy Gradient", toy_run, {"scale": 1.0}, aliases=("toy",), short="TG",
    check=_check_toy, summary="the sign of the gradient, times scale",
)  # fmt: skip


@pytest.fixture
def toy() -> Iterator[Method]:
    register_method(TOY_METHOD)
    yield TOY_METHOD
    unregister_method(TOY)


def _channel_first(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x.transpose(0, 3, 1, 2))


# ---- everywhere a method is taken by name ---------------------------------------------------------
def test_a_registered_method_is_in_explain_with_its_options_checked(toy: Method, framework: str) -> None:
    model = tiny_model(framework)
    x = batches(1, bs=3)[0]["x"]
    x = x if framework == "tf" else _channel_first(x)
    got = xk.xai.explain(model, x, target=2, method="toy", scale=2.0, max_batch=3)
    vanilla = xk.xai.explain(model, x, target=2, method="vanilla", max_batch=3)  # the same one pass
    np.testing.assert_array_equal(got, 2.0 * np.sign(vanilla))
    assert got.dtype == np.float32 and got.shape == x.shape and np.abs(got).sum() > 0
    assert TOY in xk.xai.METHODS and method_names("gradient", noise=False)[-1] == TOY
    assert get_method("Toy Gradient") is get_method("TOY") is get_method(toy) is toy
    with pytest.raises(
        XaikitTypeError,
        match=r"^explain\(method='toy_gradient'\) got unknown option\(s\) \['scal'\]; its options are "
        r"scale, and output and model_kwargs$",
    ):
        xk.xai.explain(model, x, method="toy", scal=2.0)
    with pytest.raises(XaikitTypeError, match=r"^scale must be a number; got 'big'$"):
        xk.xai.explain(model, x, method="toy", scale="big")
    with pytest.raises(XaikitValueError, match=r"method 'toy_gradient' has none"):
        xk.xai.explain(model, x, method="toy", return_delta=True)
    unregister_method(TOY)
    try:
        assert TOY not in xk.xai.METHODS
        with pytest.raises(
            XaikitValueError, match=r"method must be one of 'vanilla', .*'rise', 'lrp'.*; got 'toy'"
        ):
            xk.xai.explain(model, x, method="toy")
    finally:
        register_method(TOY_METHOD)


def test_a_registered_method_is_a_saliency_trace_column(toy: Method) -> None:
    from xaikit.viz import overlay

    model = tiny_model("torch")
    x = batches(1, bs=3, seed=1)[0]["x"]
    trace = Saliency(
        model, "x", "y_pred", samples={"x": x}, smoothing=0, integrating=0, methods={"toy": {"scale": 3.0}},
        overlay="Toy Gradient", overlay_smooth=0,
    )  # fmt: skip
    img = run_epoch(trace, [])["saliency"]
    assert img.columns == ["y_pred", "x", "x saliency", "saliency", "Toy Gradient saliency"]
    raw = xk.xai.explain(model, _channel_first(x), method="toy", scale=3.0)
    want = np.moveaxis(to_display(raw, 1), 1, -1)
    got = np.asarray(img["Toy Gradient saliency"][0]).reshape(want.shape)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_allclose(np.asarray(img["x saliency"][0]), overlay(x, want), atol=1e-6)  # overlay=
    with pytest.raises(
        XaikitTypeError,
        match=r"^methods\['toy'\]: explain\(method='toy_gradient'\) got unknown option\(s\) \['scal'\]",
    ):
        Saliency(model, "x", "y_pred", methods={"toy": {"scal": 3.0}})


def test_a_registered_method_is_stored_by_explain_dataset(toy: Method, tmp_path: Path) -> None:
    model = tiny_cnn()
    x = images(6)
    res = xk.xai.explain_dataset(
        model, x, method="Toy Gradient", out=tmp_path / "t.zarr", batch_size=3, progress=False, scale=2.0
    )
    assert res.manifest["method"] == TOY and res.manifest["options"] == {"max_batch": 128, "scale": 2.0}
    want = np.concatenate([xk.xai.explain(model, x[i : i + 3], method="toy", scale=2.0) for i in (0, 3)])
    np.testing.assert_array_equal(res.attributions[:], want)
    assert np.isnan(res.table["delta"]).all()  # the record has no delta


def test_a_registered_method_is_a_row_of_compare(toy: Method) -> None:
    model = tiny_cnn()
    x = images(4, seed=1)
    r = xk.evaluate.compare(
        model,
        x,
        ["vanilla", "toy"],
        metrics=["deletion_auc", "sparseness"],
        method_options={"toy": {"scale": 2.0}},
    )
    assert list(r.table["method"]) == ["vanilla", "toy"]
    want = xk.xai.explain(model, x, target=r.targets, method="toy", scale=2.0)
    np.testing.assert_array_equal(r.maps["toy"], want)
    assert np.isfinite(r.table.loc[1, ["deletion_auc", "sparseness"]].to_numpy(dtype=float)).all()
    deletion = xk.evaluate.deletion(model, x, want, target=r.targets)
    assert r.table.loc[1, "deletion_auc"] == pytest.approx(float(np.mean(deletion.auc)))


def _toy_complete_run(call: Call) -> Explained:
    """x times the gradient, with the delta against a gap of f(x) (a zero baseline whose score the
    toy leaves out): what a record with ``delta=True`` hands back when ``call.with_delta``."""
    bk, inp = call.bk, call.inp
    scores, grads, _ = bk.grad_step(Rows(inp.model, inp.tensors, call.targets, call.output, None))
    attr = [bk.to_numpy(g) * bk.to_numpy(t) for g, t in zip(grads, inp.tensors)]
    total = sum(a.reshape(len(a), -1).sum(axis=1, dtype=np.float64) for a in attr)
    delta = total - bk.to_numpy(scores).astype(np.float64) if call.with_delta else None
    return Explained(inp.to_user(attr), delta=delta)


def test_a_registered_method_with_a_delta_is_checked_for_completeness(framework: str) -> None:
    """A record with ``delta=True`` is taken by ``return_delta``, ``completeness`` and ``compare``'s
    ``completeness_delta``: the delta its runner reports, not a list of path methods."""
    record = Method("toy_complete", "gradient", "Toy Complete", _toy_complete_run, {}, delta=True)
    register_method(record)
    try:
        model = tiny_model(framework)
        x = batches(1, bs=3, seed=4)[0]["x"]
        x = x if framework == "tf" else _channel_first(x)
        attr, delta = xk.xai.explain(model, x, target=1, method="toy_complete", return_delta=True)
        c = xk.evaluate.completeness(model, x, "toy_complete", target=1)
        np.testing.assert_array_equal(c.delta, delta)
        assert attr.shape == x.shape and np.abs(delta).max() > 0
        if framework == "torch":
            import torch

            f = model(torch.as_tensor(x)).detach().numpy()[:, 1]
        else:
            f = np.asarray(model(x))[:, 1]
        np.testing.assert_allclose(c.gap, f, rtol=1e-5, atol=1e-6)  # the toy's gap: f(x)
        r = xk.evaluate.compare(
            model, x, ["toy_complete", "vanilla"], metrics=["completeness_delta"], target=1
        )
        got = r.table.set_index("method")["completeness_delta"]
        assert got["toy_complete"] == pytest.approx(float(np.mean(np.abs(delta))))
        assert np.isnan(got["vanilla"])
    finally:
        unregister_method("toy_complete")


def test_a_registered_method_is_in_the_cli(
    toy: Method, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from xaikit.cli import main

    x = images(4)
    np.save(tmp_path / "x.npy", x)
    argv = ["explain", "--model", "dataset_models:tiny_cnn", "--data", str(tmp_path / "x.npy")]
    out = tmp_path / "t.zarr"
    assert main([*argv, "--out", str(out), "--method", "toy", "-o", "scale=2", "--grid-size", "0"]) == 0
    res = xk.xai.DatasetExplanation.open(out)
    assert res.manifest["method"] == TOY
    np.testing.assert_array_equal(res.attributions[:], xk.xai.explain(tiny_cnn(), x, method="toy", scale=2))
    capsys.readouterr()
    with pytest.raises(SystemExit) as bad:
        main([*argv, "--out", str(tmp_path / "u.zarr"), "--method", "toy", "-o", "scal=2"])
    assert bad.value.code == 2
    assert capsys.readouterr().err.startswith(
        "xaikit: error: argument --option: --method toy_gradient got unknown option(s) ['scal']; its options are scale"
    )
    # the help lists it in its family, with its title
    with pytest.raises(SystemExit):
        main(["explain", "--help"])
    shown = " ".join(capsys.readouterr().out.split())
    assert "gradient: vanilla (Vanilla), smoothgrad (Smoothed)," in shown
    assert "xrai (XRAI), toy_gradient (Toy Gradient) cam: gradcam (Grad-CAM)," in shown
    # xaikit methods: name, title, other names, what it answers, options with defaults
    assert main(["methods", "TOY"]) == 0
    assert capsys.readouterr().out == (
        "\ngradient\n"
        "  toy_gradient  Toy Gradient  (also: toy)\n"
        "      the sign of the gradient, times scale\n"
        "      options: scale=1.0\n"
        "      gradients; input-shaped attributions\n"
    )
    assert main(["methods"]) == 0
    listed = capsys.readouterr().out
    assert listed.startswith(f"xaikit methods: {len(xk.xai.METHODS)} explanation methods;")
    assert (
        listed.index("  xrai  XRAI") < listed.index("  toy_gradient  Toy Gradient") < listed.index("\ncam\n")
    )


def test_the_cli_finds_a_method_the_model_module_registers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--method`` names a method that no module imported so far registers: the module of a
    ``package.module:factory`` ``--model`` is imported, and it registers the method."""
    from xaikit.cli import main

    module = "toy_plugin_models"
    (tmp_path / f"{module}.py").write_text(
        "import numpy as np\n"
        "from xaikit.xai import Explained, Method, register_method\n"
        "from dataset_models import tiny_cnn  # the factory\n\n\n"
        "def run(call, *, scale=1.0):  # input times a constant\n"
        "    return Explained(call.inp.to_user([scale * call.bk.to_numpy(t) for t in call.inp.tensors]))\n\n\n"
        'register_method(Method("plugin_input", "gradient", "Plugin Input", run, {"scale": 1.0}, gradients=False))\n'
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    x = images(3)
    np.save(tmp_path / "x.npy", x)
    argv = ["explain", "--model", f"{module}:tiny_cnn", "--data", str(tmp_path / "x.npy"), "--grid-size", "0"]
    try:
        assert (
            main([*argv, "--out", str(tmp_path / "p.zarr"), "--method", "plugin_input", "-o", "scale=3"]) == 0
        )
        res = xk.xai.DatasetExplanation.open(tmp_path / "p.zarr")
        np.testing.assert_allclose(res.attributions[:], 3 * x, rtol=1e-6)
        capsys.readouterr()
        with pytest.raises(SystemExit):  # still unknown once the module is imported: the list says so
            main([*argv, "--out", str(tmp_path / "q.zarr"), "--method", "plugin_inputs"])
        assert "argument --method: method must be one of 'vanilla'," in capsys.readouterr().err
    finally:
        sys.modules.pop(module, None)
        if "plugin_input" in method_names():
            unregister_method("plugin_input")


def test_a_cam_of_ones_own_is_a_formula(framework: str) -> None:
    """A CAM record with the gradient CAMs' runner and its own ``formula(A, dA)`` (here twice the
    square of Grad-CAM's) runs in ``explain`` and in the ``GradCAM`` trace, on the model and from
    batch keys."""
    from xaikit.xai.internal import upsample

    gradcam = get_method("gradcam")

    def formula(a: np.ndarray, da: np.ndarray) -> np.ndarray:
        return 2.0 * gradcam.formula(a, da) ** 2  # type: ignore[misc]

    record = dataclasses.replace(
        gradcam, name="toy_cam", title="Toy CAM", short="TC", aliases=(), formula=formula
    )
    register_method(record)
    try:
        model = tiny_model(framework)
        x = batches(1, bs=3)[0]["x"]
        x = x if framework == "tf" else _channel_first(x)
        raw = xk.xai.explain(model, x, method="Toy CAM", raw=True)
        plain = xk.xai.explain(model, x, method="gradcam", raw=True)
        assert raw.layer == plain.layer and plain.maps.max() > 0
        np.testing.assert_allclose(raw.maps, 2.0 * plain.maps.astype(np.float64) ** 2, rtol=1e-6)
        trace = GradCAM("x", model=model, n_samples=3, method="toy_cam")
        img = run_epoch(trace, [{"x": x}])["gradcam"]
        assert img.columns == ["x", "x Toy CAM", "Toy CAM"]
        keyed = GradCAM("x", grads="g", activations="acts", n_samples=3, method="toy_cam")
        rng = np.random.default_rng(0)
        acts, grads = rng.uniform(size=(3, 4, 2, 2)), rng.normal(size=(3, 4, 2, 2))
        grads[:, 0] = np.abs(grads[:, 0]) + 1.0  # a strongly positive channel: no all-zero map
        batch = {"x": np.zeros((3, 3, 8, 8), np.float32), "acts": acts, "g": grads}
        shown = run_epoch(keyed, [batch])["gradcam"]
        want = upsample(formula(acts, grads), (8, 8))
        want = want / want.reshape(3, -1).max(axis=1)[:, None, None]
        np.testing.assert_allclose(np.asarray(shown["Toy CAM"][0]).reshape(want.shape), want, atol=1e-6)
    finally:
        unregister_method("toy_cam")


# ---- the registry's rules ----------------------------------------------------------------------
def test_an_in_pass_runner_that_skips_the_class_check_is_checked_by_the_front_door(framework: str) -> None:
    """Given classes reach a ``targets="in_pass"`` runner unchecked (it checks them on its own
    first pass); one that never calls ``call.check_classes`` still gets no map of a class the
    model lacks: the front door checks before returning."""
    seen: list[Any] = []

    def run(call: Call) -> Explained:
        seen.append(call.unchecked)
        return Explained([np.zeros((call.batch, 8, 8), np.float32)])

    record = Method("toy_in_pass", "cam", "Toy In-Pass", run, {}, targets="in_pass", gradients=False)
    register_method(record)
    try:
        model = tiny_model(framework, classes=3)
        x = batches(1, bs=3)[0]["x"]
        x = x if framework == "tf" else _channel_first(x)
        with pytest.raises(XaikitValueError, match=r"target classes must lie in \[0, 2\]"):
            xk.xai.explain(model, x, target=3, method="toy_in_pass")
        assert seen[-1].tolist() == [3, 3, 3]  # unchecked when handed over
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", xk.DegenerateMapWarning)  # the toy's maps are all zero
            xk.xai.explain(model, x, target=[0, 1, 0], method="toy_in_pass")
        xk.xai.explain(model, x, method="toy_in_pass")
        assert seen[-1] is None  # no classes given: nothing to check
    finally:
        unregister_method("toy_in_pass")


def test_call_settings_carry_the_calls_settings(framework: str) -> None:
    """``Call.settings()`` hands a runner's own loop the call's seed, output, chunking, memory
    budget, XLA flag, progress and target object as one frozen ``CallSettings``."""
    seen: list[xk.xai.CallSettings] = []

    def run(call: Call) -> Explained:
        seen.append(call.settings())
        return toy_run(call)

    register_method(dataclasses.replace(TOY_METHOD, run=run, options={}, check=None))
    try:
        model = tiny_model(framework)
        x = batches(1, bs=3)[0]["x"]
        x = x if framework == "tf" else _channel_first(x)
        xk.xai.explain(model, x, method=TOY, seed=5, max_batch=7, memory_budget=0.25, progress=False)
    finally:
        unregister_method(TOY)
    assert seen == [xk.xai.CallSettings(seed=5, output=0, max_batch=7, memory_budget=0.25, progress=False)]
    with pytest.raises(dataclasses.FrozenInstanceError):
        seen[0].seed = 1  # type: ignore[misc]


def test_names_aliases_and_titles_are_unique(toy: Method) -> None:
    with pytest.raises(
        XaikitValueError, match=r"^a method named 'toy_gradient' is registered already; pass replace=True"
    ):
        register_method(TOY_METHOD)
    clash = dataclasses.replace(TOY_METHOD, name="other_toy", title="Other Toy", aliases=("ig",))
    with pytest.raises(
        XaikitValueError,
        match=r"^method 'other_toy': the name, title or alias \['ig'\] already names \['integrated'\]$",
    ):
        register_method(clash)
    titled = dataclasses.replace(TOY_METHOD, name="other_toy", title="Grad-CAM", aliases=())
    with pytest.raises(
        XaikitValueError, match=r"the name, title or alias \['gradcam'\] already names \['gradcam'\]"
    ):
        register_method(titled)
    assert "other_toy" not in method_names()
    # replace=True: the new record, and the old one's aliases are gone
    new = dataclasses.replace(TOY_METHOD, aliases=("toy2",), options={"scale": 5.0})
    assert register_method(new, replace=True) is new
    assert get_method("toy2") is new and get_method(TOY).options["scale"] == 5.0
    with pytest.raises(XaikitValueError, match=r"got 'toy'$"):
        get_method("toy")
    # a refused replacement changes nothing
    with pytest.raises(XaikitValueError, match=r"already names \['integrated'\]"):
        register_method(dataclasses.replace(TOY_METHOD, aliases=("ig",)), replace=True)
    assert get_method("toy2") is new
    register_method(TOY_METHOD, replace=True)
    with pytest.raises(XaikitValueError, match=r"method must be one of .*got 'no_such_method'"):
        unregister_method("no_such_method")


def test_lookup_by_name_alias_title_and_case(toy: Method) -> None:
    for name in ("toy_gradient", "TOY_GRADIENT", "Toy Gradient", "toy", "Toy"):
        assert get_method(name) is toy, name
    assert method_names("gradient")[-1] == TOY and TOY not in method_names("cam")
    assert TOY not in method_names(core=True) and TOY in method_names(gradients=True, delta=False)
    assert toy.cost == "gradients" and toy.option_texts() == ["scale=1.0"]
    lazy = dataclasses.replace(TOY_METHOD, run="tests.test_registry:toy_run")  # imported on first use
    assert lazy.runner() is toy_run


def test_records_pickle(toy: Method) -> None:
    """A record goes to another process (or into a pickled trace) whole: options, runner, check."""
    import pickle

    for name in method_names():
        record = get_method(name)
        again = pickle.loads(pickle.dumps(record))
        assert (
            again == record
            and again.runner() is record.runner()
            and dict(again.options) == dict(record.options)
        )
    assert pickle.loads(pickle.dumps(toy)).check is _check_toy


@pytest.mark.parametrize(
    ("change", "error", "message"),
    [
        ({"name": "Toy"}, XaikitValueError, r"^Method name must be a non-empty lower-case str; got 'Toy'$"),
        ({"family": "gradients"}, XaikitValueError, r"^Method 'toy_gradient': family must be one of \('gradient', 'cam', 'perturbation', 'rules', 'agnostic', 'transformer'\); got str 'gradients'$"),
        ({"title": " "}, XaikitTypeError, r"^Method 'toy_gradient': title must be a non-empty str; got str ' '$"),
        ({"summary": None}, XaikitTypeError, r"^Method 'toy_gradient': summary must be a str; got NoneType None$"),
        ({"aliases": "toy"}, XaikitTypeError, r"^Method 'toy_gradient': aliases must be a tuple of non-empty str, e.g. \('ig',\); got str 'toy'$"),
        ({"options": ["scale"]}, XaikitTypeError, r"^Method 'toy_gradient': options must be a dict \{option name: default\}"),
        ({"options": {"output": 0}}, XaikitValueError, r"^Method 'toy_gradient': \['output'\] are shared options, not the method's own$"),
        ({"result": "maps"}, XaikitValueError, r"^Method 'toy_gradient': result must be 'input' or 'map'; got 'maps'$"),
        ({"targets": "given"}, XaikitValueError, r"^Method 'toy_gradient': targets must be one of \('pinned', 'in_pass'\); got 'given'$"),
        ({"run": 3}, XaikitTypeError, r"^Method 'toy_gradient': run must be a runner or 'module:function'; got int 3$"),
        ({"run": "toy_run"}, XaikitTypeError, r"run must be a runner or 'module:function'; got str 'toy_run'$"),
        ({"noise": "yes"}, XaikitTypeError, r"^Method 'toy_gradient': \['noise'\] must be True or False$"),
        ({"formula": 1.5}, XaikitTypeError, r"^Method 'toy_gradient': formula must be a function or None; got float 1.5$"),
    ],
)  # fmt: skip
def test_bad_records_are_refused(change: dict[str, Any], error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        dataclasses.replace(TOY_METHOD, **change)
    with pytest.raises(XaikitTypeError, match=r"^register_method takes a Method record; got str 'toy'$"):
        register_method("toy")  # type: ignore[arg-type]


def test_an_option_given_as_none_takes_its_default() -> None:
    """None means "the method's default" for every option: a flag whose default is True
    (KernelSHAP's ``paired``, LRP's ``canonize``) is not turned off by None."""
    model = tiny_cnn()
    x = images(2, seed=3)
    for method, option, other in (
        ("kernel_shap", "paired", {"segments": 9, "nsamples": 20}),
        ("lrp", "canonize", {}),
    ):
        assert get_method(method).options[option] is True
        default = xk.xai.explain(model, x, method=method, **other)
        none = xk.xai.explain(model, x, method=method, **other, **{option: None})
        off = xk.xai.explain(model, x, method=method, **other, **{option: False})
        np.testing.assert_array_equal(none, default)
        if method == "kernel_shap":  # tiny_cnn has no BatchNorm, so canonize changes nothing in LRP
            assert not np.array_equal(off, default)


def test_a_records_units_decide_the_underflow_check() -> None:
    """A map far below float32's resolution of the score is an "underflow" for a method whose
    values are shares of the score (the default units), and nothing for one whose record says
    its values have no unit of the score (``units="none"``)."""
    model = tiny_cnn()
    x = images(2, seed=5)
    tiny = {"scale": 1e-30}
    for units, warned in (("attribution", True), ("none", False)):
        record = dataclasses.replace(
            TOY_METHOD, name=f"toy_{units}", title=f"Toy {units}", aliases=(), units=units
        )
        register_method(record)
        try:
            with warnings.catch_warnings(record=True) as seen:
                warnings.simplefilter("always")
                xk.xai.explain(model, x, method=record.name, **tiny)
            underflow = [w for w in seen if issubclass(w.category, xk.DegenerateMapWarning)]
            assert bool(underflow) is warned, units
            if warned:
                assert "'underflow'" in str(underflow[0].message)
        finally:
            unregister_method(record.name)
    with pytest.raises(XaikitValueError, match=r"units must be one of \('gradient', 'attribution', 'none'\)"):
        dataclasses.replace(TOY_METHOD, units="percent")
