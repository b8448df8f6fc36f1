"""Every torch model form gives the maps of the plain nn.Module with the same weights, or a clear
refusal: never a silent map of zeros, a plain gradient in place of a guided one, or a wrong layer.

Forms: the nn.Module; ``torch.jit.script``; ``torch.jit.trace``; a TorchScript file saved and
loaded; ``torch.compile`` (backend ``"aot_eager"`` here: dynamo's graph capture and AOT
autograd's forward/backward graphs, without inductor's C++ build, which takes minutes on two
cores; the inductor run is the ``slow`` test); ``torch.export`` (its module, with a dynamic batch
axis); ``torch.fx.symbolic_trace`` (a GraphModule that calls its leaf modules); a model that
takes a dict (keyword argument, ``model_kwargs=``) and returns a dict
(``output=``); a Hugging Face ResNet built from a config (its output object's ``.logits``).

Also: a gradient that does not reach an input or the CAM layer is an error naming it (was a map
of zeros), channel-last images are moved for every form (a TorchScript model took them as
channel-first), the hint for an unbatched image, and ``xaikit explain`` on a TorchScript file and
on a factory over a folder of PNGs.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import xaikit as xk  # noqa: E402
from tests.agnostic.fast_options import FAST  # noqa: E402
from xaikit.backend.serialized import load_model_file  # noqa: E402
from xaikit.errors import XaikitTypeError, XaikitValueError  # noqa: E402
from xaikit.xai.registry import family, method_names  # noqa: E402

#: the attention methods read transformers' attentions only (tests/test_attention_methods.py)
ALL_METHODS = tuple(m for m in method_names() if family(m) != "transformer")

B, SIZE = 2, 16


def blocks(size: int) -> list[np.ndarray]:
    """XRAI's regions for a size x size image: 4 x 4 blocks (no segmentation to wait for)."""
    cell = np.ones((size // 4, size // 4))
    return [np.kron(np.eye(16)[i].reshape(4, 4), cell).astype(bool) for i in range(16)]


#: small settings that keep every method under a second on the tiny net
OPTIONS: dict[str, dict[str, Any]] = {
    "smoothgrad": {"nsamples": 3},
    "integrated": {"nsamples": 4},
    "smint": {"nsamples": 2, "nintegration": 3},
    "vargrad": {"nsamples": 3},
    "expected_gradients": {"nsamples": 3},
    "blur_ig": {"steps": 4},
    "guided_ig": {"steps": 4},
    "xrai": {"steps": 4, "algorithm": "fast", "segments": [blocks(SIZE)] * B, "min_pixel_diff": 1},
    "occlusion": {"window": 4, "stride": 4},
    "rise": {"nsamples": 16, "cell": 4},
    **FAST,  # the model-agnostic methods: forward passes only, so every form runs them
}
#: the methods that hook layers (CAMs) or ReLU modules (guided backprop)
HOOKED = tuple(m for m in ALL_METHODS if family(m) in ("cam", "rules"))
#: the forms whose submodule hooks never fire and that cannot be rewritten: TorchScript
HOOKLESS = ("script", "trace", "script_file", "frozen")
FORMS = ("module", "script", "trace", "script_file", "frozen", "compile", "export", "fx", "dict_io")


class Net(torch.nn.Module):
    """Two convolutions with ReLU modules, global average pooling, a linear head."""

    def __init__(self, channels: int = 3, classes: int = 5) -> None:
        super().__init__()
        self.conv1 = torch.nn.Conv2d(channels, 4, 3, padding=1)
        self.relu1 = torch.nn.ReLU()
        self.conv2 = torch.nn.Conv2d(4, 6, 3, padding=1)
        self.relu2 = torch.nn.ReLU()
        self.pool = torch.nn.AdaptiveAvgPool2d(1)
        self.fc = torch.nn.Linear(6, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.relu2(self.conv2(self.relu1(self.conv1(x))))
        return self.fc(self.pool(x).flatten(1))


def make_net() -> Net:
    """The seeded net (a factory for ``xaikit explain --model tests.test_model_forms_torch:make_net``)."""
    gen = torch.Generator().manual_seed(0)
    net = Net()
    with torch.no_grad():
        for p in net.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.5)
    return net.eval()


class DictIO(torch.nn.Module):
    """Takes a dict (a keyword argument) and a per-sample gain, returns a dict of outputs."""

    def __init__(self, body: torch.nn.Module) -> None:
        super().__init__()
        self.body = body

    def forward(self, x: torch.Tensor, extra: dict[str, torch.Tensor], gain: torch.Tensor) -> dict[str, Any]:
        logits = self.body(x) * gain[:, None] + extra["shift"]
        return {"features": x.mean(dim=(2, 3)), "logits": logits}


DICT_KW = {"output": "logits", "model_kwargs": {"extra": {"shift": torch.zeros(5)}, "gain": torch.ones(B)}}


def images(n: int = B, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-1, 1, (n, 3, SIZE, SIZE)).astype(np.float32)


def quiet(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """Call ``fn`` with torch's deprecation notices of TorchScript silenced."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return fn(*args, **kwargs)


def build(form: str, net: Net, tmp: Path) -> Any:
    x = torch.as_tensor(images())
    if form == "module":
        return net
    if form == "script":
        return quiet(torch.jit.script, net)
    if form == "trace":
        return quiet(torch.jit.trace, net, x)
    if form == "script_file":
        path = tmp / "net.pt"
        quiet(torch.jit.save, quiet(torch.jit.script, net), str(path))
        return load_model_file(path)
    if form == "frozen":  # torch.jit.freeze: no training flag left on the module, its mode is fixed
        return quiet(torch.jit.freeze, quiet(torch.jit.script, net))
    if form == "compile":
        return torch.compile(net, backend="aot_eager")
    if form == "export":
        batch = torch.export.Dim("batch")
        return torch.export.export(net, (x,), dynamic_shapes=({0: batch},)).module()
    if form == "fx":
        return torch.fx.symbolic_trace(net)
    if form == "dict_io":
        return DictIO(net)
    raise AssertionError(form)


@pytest.fixture(scope="module")
def net() -> Net:
    return make_net()


@pytest.fixture(scope="module")
def forms(net: Net, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("forms")
    return {form: build(form, net, tmp) for form in FORMS}


@pytest.fixture(scope="module")
def reference(net: Net) -> dict[str, np.ndarray]:
    """The nn.Module's maps, per method (filled on first use)."""
    return {}


def explain(model: Any, method: str, x: Any = None, **kw: Any) -> np.ndarray:
    x = images() if x is None else x
    opts = {**OPTIONS.get(method, {}), **kw}
    if method == "xrai":  # regions of the image's size, whatever the layout
        opts["segments"] = [blocks(max(x.shape[1:]))] * len(x)
    return xk.xai.explain(model, x, method=method, seed=0, **opts)  # type: ignore[no-any-return]


def module_maps(reference: dict[str, np.ndarray], net: Net, method: str) -> np.ndarray:
    if method not in reference:
        reference[method] = explain(net, method)
        assert np.abs(reference[method]).max() > 0, f"the module's {method} map is all zero"
    return reference[method]


def close(got: np.ndarray, want: np.ndarray, what: str) -> None:
    assert got.shape == want.shape, what
    assert np.abs(got).max() > 0, f"{what}: an all-zero map"
    scale = float(np.abs(want).max())
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * scale, err_msg=what)


# ---- the matrix: every method x every form ------------------------------------------------------
@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("method", ALL_METHODS)
def test_every_form_gives_the_module_maps_or_a_clear_refusal(
    forms: dict[str, Any], net: Net, reference: dict[str, np.ndarray], method: str, form: str
) -> None:
    model = forms[form]
    kw = DICT_KW if form == "dict_io" else {}
    if form in HOOKLESS and method in HOOKED:
        with pytest.raises(
            XaikitValueError, match=r"cannot be computed for .*TorchScript module.*hook the model's layers"
        ) as err:
            explain(model, method, **kw)
        assert "Explain the Python nn.Module with the same weights" in str(err.value)
        assert "vanilla, smoothgrad, integrated" in str(err.value)  # what works instead
        works = str(err.value).rsplit("use a method that needs no hooks: ", 1)[1]
        missing = [m for m in ALL_METHODS if m not in HOOKED and m not in works]
        assert not missing, f"the refusal does not name {missing}, which work on TorchScript"
        return
    if form == "export" and method in ("lrp", "lrp_epsilon"):  # rules attach to modules it never calls
        with pytest.raises(XaikitTypeError, match=r"cannot be computed for .*calls aten operators"):
            explain(model, method, **kw)
        return
    close(explain(model, method, **kw), module_maps(reference, net, method), f"{method} on {form}")


# ---- Hugging Face: an output object, channel-last input ---------------------------------------
@pytest.fixture(scope="module")
def hf_resnet() -> tuple[Any, Any]:
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.ResNetConfig(
        num_channels=3, embedding_size=8, hidden_sizes=[8, 12], depths=[1, 1], layer_type="basic",
        num_labels=5,
    )  # fmt: skip
    hf = transformers.ResNetForImageClassification(config).eval()
    with torch.no_grad():  # batch-norm statistics of typical activations (random weights only)
        from xaikit.architecture.torch import calibrate_batchnorm

        calibrate_batchnorm(hf, torch.as_tensor(images(8, seed=1)))

    class Logits(torch.nn.Module):
        """The plain module: the same network, returning the logits tensor."""

        def __init__(self) -> None:
            super().__init__()
            self.hf = hf

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.hf(x).logits

    return hf, Logits().eval()


@pytest.mark.parametrize("method", ALL_METHODS)
def test_hugging_face_model_gives_the_plain_module_maps(hf_resnet: tuple[Any, Any], method: str) -> None:
    hf, plain = hf_resnet
    x = images(B, seed=2)
    want = explain(plain, method, x)
    got = explain(hf, method, np.ascontiguousarray(x.transpose(0, 2, 3, 1)))  # channel-last
    if got.ndim == 4:
        got = got.transpose(0, 3, 1, 2)
    close(got, want, f"{method} on the Hugging Face ResNet")


# ---- layers of each form ----------------------------------------------------------------------
def test_cam_layer_names_are_those_of_the_form(forms: dict[str, Any], net: Net) -> None:
    x = images()
    want = xk.xai.explain(net, x, method="gradcam", layer="relu1", raw=True)
    assert want.layer == "relu1"
    compiled = forms["compile"]
    assert "_orig_mod.relu1" in dict(compiled.named_modules())
    for layer in ("_orig_mod.relu1", "relu1", compiled._orig_mod.relu1):
        got = xk.xai.explain(compiled, x, method="gradcam", layer=layer, raw=True)
        assert got.layer == "_orig_mod.relu1"
        np.testing.assert_allclose(got.maps, want.maps, rtol=1e-5, atol=1e-7)
    auto = xk.xai.explain(compiled, x, method="gradcam", raw=True)
    assert auto.layer == "_orig_mod.relu2"  # the last spatial module, as on the module ("relu2")
    assert xk.xai.explain(net, x, method="gradcam", raw=True).layer == "relu2"
    got = xk.xai.explain(forms["dict_io"], x, method="layercam", layer="body.relu1", raw=True, **DICT_KW)
    np.testing.assert_allclose(
        got.maps,
        xk.xai.explain(net, x, method="layercam", layer="relu1", raw=True).maps,
        rtol=1e-5,
        atol=1e-7,
    )
    # an exported program: the module paths its graph records (those of the original module),
    # also for modules without weights, which its named_modules() lacks; or a weight holder
    exported = forms["export"]
    assert "relu1" not in dict(exported.named_modules())
    got = xk.xai.explain(exported, x, method="gradcam", layer="relu1", raw=True)
    assert got.layer == "relu1"
    np.testing.assert_allclose(got.maps, want.maps, rtol=1e-5, atol=1e-7)
    assert xk.xai.explain(exported, x, method="gradcam", raw=True).layer == "relu2"
    by_object = xk.xai.explain(exported, x, method="gradcam", layer=exported.conv2, raw=True)
    assert by_object.layer == "conv2"
    want2 = xk.xai.explain(net, x, method="gradcam", layer="conv2", raw=True)
    np.testing.assert_allclose(by_object.maps, want2.maps, rtol=1e-5, atol=1e-7)
    with pytest.raises(
        XaikitValueError,
        match=r"layer 'relu9' is not a module that ran in the exported program; .*'relu2', 'pool', 'fc'\]",
    ):
        xk.xai.explain(exported, x, method="gradcam", layer="relu9")


def test_a_torchscript_part_of_a_python_model_is_refused_as_a_layer_and_for_modified_relus(net: Net) -> None:
    """A Python model around a scripted backbone: the backbone's layers cannot be hooked (the
    ReLUs of its guided backprop and deconvnet neither); a Python layer around it can."""
    scripted = quiet(torch.jit.script, torch.nn.Sequential(net.conv1, net.relu1, net.conv2, net.relu2))
    outer = torch.nn.Sequential(scripted, torch.nn.ReLU(), net.pool, torch.nn.Flatten(), net.fc).eval()
    x = images()
    with pytest.raises(
        XaikitValueError, match=r"layer '0.1' is a TorchScript module or part of a torch.export"
    ):
        xk.xai.explain(outer, x, method="gradcam", layer="0.1")
    got = xk.xai.explain(outer, x, method="gradcam", raw=True)  # layer=None: skips the scripted part
    assert got.layer == "1"
    np.testing.assert_allclose(got.maps, xk.xai.explain(net, x, method="gradcam", raw=True).maps, rtol=1e-5)
    with pytest.raises(
        XaikitValueError,
        match=r"guided backprop \(guided_backprop, guided_gradcam\) replaces the gradient of every ReLU",
    ):
        xk.xai.explain(outer, x, method="guided_gradcam", layer="1")
    # guided backprop and deconvnet alone too: the scripted ReLUs would run unmodified, a map
    # modified only in part (deconvnet returned one without a word before)
    for method, name in (
        ("guided_backprop", r"guided backprop \(guided_backprop"),
        ("deconvnet", "deconvnet"),
    ):
        with pytest.raises(
            XaikitValueError, match=rf"{name}.* replaces the gradient of every ReLU.*only in part"
        ):
            xk.xai.explain(outer, x, method=method, target=0)


def test_exported_program_needs_a_dynamic_batch_axis(net: Net) -> None:
    x = torch.as_tensor(images())
    fixed = torch.export.export(net, (x,)).module()
    np.testing.assert_allclose(explain(fixed, "vanilla"), explain(net, "vanilla"), rtol=1e-6)  # B rows: runs
    with pytest.raises(
        XaikitValueError, match=r"it was exported for a fixed batch size.*dynamic_shapes="
    ) as err:
        explain(fixed, "smoothgrad")
    assert "Guard failed" in str(err.value)  # what torch said


def test_a_dict_taking_forward_is_refused_with_the_way_to_wrap_it(net: Net) -> None:
    with pytest.raises(
        XaikitTypeError, match=r"model input 'x' must be an array or tensor; got dict: for a model"
    ):
        xk.xai.explain(net, {"image": images()}, method="vanilla")


# ---- channel-last images: moved for every form ---------------------------------------------------
@pytest.mark.parametrize("form", [f for f in FORMS if f != "dict_io"])
def test_channel_last_images_are_moved_for_every_form(forms: dict[str, Any], net: Net, form: str) -> None:
    from xaikit.backend import get_backend

    model = forms[form]
    assert get_backend(model).model_layout(model).channels == 3
    x = images()
    last = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    for method in ("vanilla", "occlusion"):
        got = explain(model, method, last)
        assert got.shape == last.shape, method
        close(got.transpose(0, 3, 1, 2), explain(net, method, x), f"{method} on {form}")


def test_traced_grouped_first_convolution_reads_its_channels() -> None:
    """A traced Conv2d keeps neither in_channels nor groups: the groups come from its graph."""
    from xaikit.backend import get_backend

    model = torch.nn.Sequential(torch.nn.Conv2d(3, 6, 3, groups=3), torch.nn.Flatten()).eval()
    x = torch.zeros(1, 3, 8, 8)
    for form in (quiet(torch.jit.trace, model, x), quiet(torch.jit.script, model)):
        assert get_backend(form).model_layout(form).channels == 3


# ---- gradients that do not reach: errors, never zeros -------------------------------------------
class TwoInputs(torch.nn.Module):
    """``use`` says what happens to the second input: used, unused, detached or cast to int."""

    def __init__(self, use: str) -> None:
        super().__init__()
        self.net = make_net()
        self.use = use

    def forward(self, x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        y = self.net(x)
        if self.use == "used":
            return y * scale[:, :1]
        if self.use == "detach":
            return y * scale.detach()[:, :1]
        if self.use == "int":
            return y * scale.long()[:, :1]
        return y


@pytest.mark.parametrize("use", ["unused", "detach", "int"])
def test_an_input_the_gradient_does_not_reach_is_an_error(use: str) -> None:
    x, scale = images(), np.full((B, 3), 2.0, dtype=np.float32)
    good = xk.xai.explain(TwoInputs("used"), [x, scale], method="vanilla")
    assert np.abs(good[1]).max() > 0
    for method in ("vanilla", "integrated", "guided_gradcam"):
        with pytest.raises(
            XaikitValueError,
            match=r"of a torch.nn.Module \(TwoInputs\) does not reach model input 1 \(position in the model's "
            r"call, from 0, of 2 input\(s\)\).*does not use that input.*\.detach\(\).*model_kwargs=",
        ):
            xk.xai.explain(TwoInputs(use), [x, scale], method=method, **OPTIONS.get(method, {}))


class NoGrad(torch.nn.Module):
    """A forward that computes (all, or the part after ``conv2``) under torch.no_grad()."""

    def __init__(self, part: str) -> None:
        super().__init__()
        self.net = make_net()
        self.part = part

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = self.net
        if self.part == "all":
            with torch.no_grad():
                return n(x)
        h = n.relu2(n.conv2(n.relu1(n.conv1(x))))
        with torch.inference_mode():
            return n.fc(n.pool(h).flatten(1))


@pytest.mark.parametrize("part", ["all", "head"])
@pytest.mark.parametrize("method", ["vanilla", "gradcam", "guided_gradcam"])
def test_an_output_cut_from_the_graph_is_an_error(part: str, method: str) -> None:
    what = "the model inputs" if method == "vanilla" else "layer 'net.relu2'"
    with pytest.raises(
        XaikitValueError,
        match=rf"the explained output \(output=0\) of a torch.nn.Module \(NoGrad\) does not require grad, so no "
        rf"gradient reaches {what}.*torch.no_grad\(\) / torch.inference_mode\(\)",
    ):
        xk.xai.explain(NoGrad(part), images(), method=method)


class AuxBranch(torch.nn.Module):
    """A second head (``aux``, output 1) computed beside the explained one (output 0)."""

    def __init__(self) -> None:
        super().__init__()
        self.net = make_net()
        self.aux = torch.nn.Conv2d(3, 2, 3, padding=1)
        self.side = torch.nn.ReLU()

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        aux = self.side(self.aux(x)).mean(dim=(2, 3))
        n = self.net
        return n(x), aux


def test_a_layer_the_gradient_does_not_reach_is_an_error() -> None:
    model, x = AuxBranch().eval(), images()
    want = xk.xai.explain(model.net, x, method="gradcam", layer="relu2", raw=True)
    got = xk.xai.explain(model, x, method="gradcam", layer="net.relu2", raw=True)  # on the path: fine
    np.testing.assert_allclose(got.maps, want.maps, rtol=1e-6)
    for method in ("gradcam", "gradcam++", "layercam", "hirescam", "xgradcam", "guided_gradcam"):
        with pytest.raises(
            XaikitValueError,
            match=r"the gradient of the explained output \(output=0\) of a torch.nn.Module \(AuxBranch\) does "
            r"not reach the output of layer 'side': .*an auxiliary head.*Pass layer= a module on the path",
        ):
            xk.xai.explain(model, x, method=method, layer="side")
    aux = xk.xai.explain(model, x, method="gradcam", layer="side", output=1, raw=True)  # its own head
    assert aux.layer == "side" and np.abs(aux.maps).max() > 0


# ---- hints for images without an axis ----------------------------------------------------------
def test_unbatched_rgb_image_gets_the_batch_axis_hint(net: Net) -> None:
    one = images(1)[0]  # (3, 16, 16)
    for given in (one, np.ascontiguousarray(one.transpose(1, 2, 0))):
        with pytest.raises(
            XaikitValueError, match=r"looks like one image without its batch axis: add it, e\.g\. x\[None\]"
        ) as err:
            xk.xai.explain(net, given, method="vanilla")
        assert "x[:, None]" not in str(err.value)
    gray = Net(channels=1).eval()
    with pytest.raises(
        XaikitValueError, match=r"batch of grayscale images without a channel axis.*x\[:, None\]"
    ):
        xk.xai.explain(gray, images(1)[:, 0], method="vanilla")


# ---- the command line -----------------------------------------------------------------------------
def _pngs(folder: Path, n: int) -> np.ndarray:
    from PIL import Image

    folder.mkdir()
    pixels = np.random.default_rng(3).integers(0, 256, (n, SIZE, SIZE, 3), dtype=np.uint8)
    for i, p in enumerate(pixels):
        Image.fromarray(p).save(folder / f"{i:02d}.png")
    return pixels


@pytest.mark.parametrize("method", ["vanilla", "gradcam"])
def test_cli_on_a_torchscript_file_and_a_factory_gives_the_module_maps(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], net: Net, method: str
) -> None:
    """``xaikit explain`` over channel-last PNGs: the stored maps are the Python API's on the
    nn.Module (a TorchScript file took the images as channel-first; its Grad-CAM is refused)."""
    from xaikit.cli import main

    pixels = _pngs(tmp_path / "pngs", 5)
    script = tmp_path / "scripted.pt"
    quiet(torch.jit.save, quiet(torch.jit.script, net), str(script))
    direct = xk.xai.explain_dataset(
        net, pixels.astype(np.float32) / 255, method=method, out=tmp_path / "api.zarr", progress=False
    )
    want = direct.attributions[:]
    assert np.abs(want).max() > 0
    models = [str(script), "tests.test_model_forms_torch:make_net"]
    for i, model in enumerate(models):
        out = tmp_path / f"cli{i}.zarr"
        args = ["--model", model, "--data", str(tmp_path / "pngs"), "--method", method, "--out", str(out)]
        status = main(["explain", *args, "--grid-size", "0"])
        err = capsys.readouterr().err
        if method == "gradcam" and i == 0:  # TorchScript: refused, with the reason
            assert status == 2
            assert "cannot be computed for a TorchScript module" in err
            continue
        assert status == 0, err
        got = xk.xai.DatasetExplanation.open(out).attributions[:]
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7, err_msg=model)


# ---- torch.compile with its default backend (inductor: a C++ build) -----------------------------
#: ATen held to its scalar kernels (make test-numerics): inductor's generated C++ still calls the
#: vector helpers (at::vec::transpose_mxn), which that setting leaves undeclared, so the build fails
#: before any map is computed; make test runs these tests
SCALAR_ATEN = os.environ.get("ATEN_CPU_CAPABILITY", "").lower() == "default"


@pytest.mark.slow
@pytest.mark.skipif(
    SCALAR_ATEN,
    reason="inductor's C++ does not compile under ATEN_CPU_CAPABILITY=default (torch 2.13); make test runs it",
)
@pytest.mark.parametrize("method", ["vanilla", "integrated", "gradcam", "guided_gradcam", "occlusion"])
def test_inductor_compiled_model_gives_the_module_maps(
    net: Net, reference: dict[str, np.ndarray], method: str
) -> None:
    compiled = quiet(torch.compile, make_net())  # importing inductor warns of torch.jit.script_method
    close(explain(compiled, method), module_maps(reference, net, method), f"{method} on inductor")
