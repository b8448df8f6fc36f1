"""Guided backprop and deconvnet as methods of their own (torch): equal to captum's
``GuidedBackprop`` / ``Deconvolution`` where captum sees the ReLUs (``nn.ReLU`` modules), and
correct where it does not (a ``torch.relu`` call inside ``forward``, which captum leaves with its
plain gradient)."""

from __future__ import annotations

import numpy as np
import pytest

import xaikit as xk
from xaikit.errors import XaikitValueError

torch = pytest.importorskip("torch")
captum_attr = pytest.importorskip("captum.attr")


class Modules(torch.nn.Module):
    """conv-ReLU-pool-conv-ReLU-dense-ReLU-dense, every ReLU an nn.ReLU module (one in place)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 6, 3, padding=1)
        self.relu1 = torch.nn.ReLU(inplace=True)
        self.pool = torch.nn.MaxPool2d(2)
        self.conv2 = torch.nn.Conv2d(6, 8, 3)
        self.relu2 = torch.nn.ReLU()
        self.fc1 = torch.nn.Linear(8 * 2 * 2, 16)
        self.relu3 = torch.nn.ReLU()
        self.fc2 = torch.nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(self.relu1(self.conv1(x)))
        x = self.relu2(self.conv2(x))
        return self.fc2(self.relu3(self.fc1(x.flatten(1))))


class Functional(Modules):
    """The same weights, every ReLU a function call."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(torch.relu(self.conv1(x)))
        x = torch.nn.functional.relu(self.conv2(x))
        return self.fc2(self.fc1(x.flatten(1)).relu())


def _models() -> tuple[Modules, Functional]:
    torch.manual_seed(0)
    mod = Modules().eval()
    fun = Functional().eval()
    fun.load_state_dict(mod.state_dict())
    return mod, fun


def _numpy_reference(model: Modules, x: np.ndarray, target: int, mode: str) -> np.ndarray:
    """The modified backward written out layer by layer (float64, autograd for the linear maps
    only): every ReLU's backward replaced as the method says."""
    xs = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    m = {k: v.double() for k, v in model.state_dict().items()}
    F = torch.nn.functional
    a1 = F.conv2d(xs, m["conv1.weight"], m["conv1.bias"], padding=1)
    r1 = a1.clamp(min=0).detach().requires_grad_(True)
    p = F.max_pool2d(r1, 2)
    a2 = F.conv2d(p, m["conv2.weight"], m["conv2.bias"])
    r2 = a2.clamp(min=0).detach().requires_grad_(True)
    a3 = F.linear(r2.flatten(1), m["fc1.weight"], m["fc1.bias"])
    r3 = a3.clamp(min=0).detach().requires_grad_(True)
    out = F.linear(r3, m["fc2.weight"], m["fc2.bias"])

    def relu_back(g: torch.Tensor, pre: torch.Tensor) -> torch.Tensor:
        g = g.clamp(min=0)
        return g * (pre > 0) if mode == "guided" else g

    (g3,) = torch.autograd.grad(out[:, target].sum(), r3)
    (g2,) = torch.autograd.grad(a3, r2, relu_back(g3, a3))
    (g1,) = torch.autograd.grad(a2, r1, relu_back(g2, a2), retain_graph=True)
    (gx,) = torch.autograd.grad(a1, xs, relu_back(g1, a1))
    return gx.numpy()


@pytest.mark.parametrize(("method", "peer", "mode"), [
    ("guided_backprop", "GuidedBackprop", "guided"), ("deconvnet", "Deconvolution", "deconvnet"),
])  # fmt: skip
def test_equal_to_captum_and_to_the_written_out_backward(method: str, peer: str, mode: str) -> None:
    mod, fun = _models()
    x = np.random.default_rng(0).normal(size=(5, 3, 8, 8)).astype(np.float32)
    ref = _numpy_reference(mod, x, 2, mode)
    ours_mod = xk.xai.explain(mod, x, target=2, method=method)
    ours_fun = xk.xai.explain(fun, x, target=2, method=method)
    theirs = getattr(captum_attr, peer)(mod).attribute(torch.from_numpy(x), target=2).detach().numpy()
    scale = np.abs(ref).max()
    np.testing.assert_allclose(ours_mod, ref, atol=1e-6 * scale)
    np.testing.assert_allclose(ours_fun, ref, atol=1e-6 * scale)  # function-call ReLUs modified too
    np.testing.assert_allclose(ours_mod, theirs, atol=1e-6 * scale)
    # captum cannot see function-call ReLUs: its map of the same weights is the plain gradient
    captum_fun = getattr(captum_attr, peer)(fun).attribute(torch.from_numpy(x), target=2).detach().numpy()
    vanilla = xk.xai.explain(fun, x, target=2, method="vanilla")
    np.testing.assert_allclose(captum_fun, vanilla, atol=1e-6 * scale)
    assert np.abs(captum_fun - ref).max() > 0.05 * scale


class InPlace(Modules):
    """The same weights, every ReLU in place with its return value ignored (three spellings)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv1(x)
        h.relu_()
        x = self.pool(h)
        h = self.conv2(x)
        torch.nn.functional.relu(h, inplace=True)
        h = self.fc1(h.flatten(1))
        torch.relu_(h)
        return self.fc2(h)


@pytest.mark.filterwarnings("ignore::xaikit.errors.DegenerateMapWarning")  # a 2 x 2 layer: one Grad-CAM is 0
@pytest.mark.parametrize(("method", "mode"), [("guided_backprop", "guided"), ("deconvnet", "deconvnet")])
def test_a_relu_in_place_whose_result_is_ignored_is_modified(method: str, mode: str) -> None:
    # the mode used to return a new tensor: the model's own tensor stayed unrectified and its
    # map was 1.2-2.2x of its largest value off
    mod, _ = _models()
    inplace = InPlace().eval()
    inplace.load_state_dict(mod.state_dict())
    x = np.random.default_rng(1).normal(size=(4, 3, 8, 8)).astype(np.float32)
    ref = _numpy_reference(mod, x, 1, mode)
    ours = xk.xai.explain(inplace, x, target=1, method=method)
    np.testing.assert_allclose(ours, ref, atol=1e-6 * np.abs(ref).max())
    ggc = xk.xai.explain(inplace, x, target=1, method="guided_gradcam", layer="conv2")
    np.testing.assert_array_equal(
        ggc, xk.xai.explain(mod, x, target=1, method="guided_gradcam", layer="conv2")
    )


def test_model_unchanged_and_modes_end(rng: np.random.Generator) -> None:
    mod, _ = _models()
    before = {k: v.clone() for k, v in mod.state_dict().items()}
    x = rng.normal(size=(3, 3, 8, 8)).astype(np.float32)
    xk.xai.explain(mod, x, method="guided_backprop", max_batch=2)
    for k, v in mod.state_dict().items():
        assert torch.equal(v, before[k])
    assert not mod.training and all(not m._forward_hooks and not m._backward_hooks for m in mod.modules())
    # after the call, a ReLU is a ReLU again: the plain gradient of the model is unchanged
    xt = torch.from_numpy(x).requires_grad_(True)
    mod(xt)[:, 1].sum().backward()
    np.testing.assert_allclose(xt.grad.numpy(), xk.xai.explain(mod, x, target=1, method="vanilla"), atol=1e-7)


def test_chunks_equal_one_pass(rng: np.random.Generator) -> None:
    mod, _ = _models()
    x = rng.normal(size=(5, 3, 8, 8)).astype(np.float32)
    for method in ("guided_backprop", "deconvnet"):
        whole = xk.xai.explain(mod, x, method=method, max_batch=5)
        np.testing.assert_allclose(xk.xai.explain(mod, x, method=method, max_batch=2), whole, atol=1e-7)


def test_a_model_without_relus_is_refused() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh(), torch.nn.Linear(3, 2))
    with pytest.raises(XaikitValueError, match=r"guided backprop modifies .* called no torch.relu"):
        xk.xai.explain(model, np.ones((2, 4), np.float32), method="guided_backprop")
    with pytest.raises(XaikitValueError, match=r"deconvnet modifies"):
        xk.xai.explain(model, np.ones((2, 4), np.float32), method="deconvnet")


@pytest.mark.parametrize("method", ["vanilla", "smoothgrad", "guided_backprop", "lrp"])
def test_a_model_that_writes_its_input_in_place_gets_a_clear_error(method: str) -> None:
    # nn.ReLU(inplace=True) on the model input: autograd's raw "a leaf Variable that requires grad
    # is being used in an in-place operation" (guided backprop: "could not be called ... shape")
    model = torch.nn.Sequential(
        torch.nn.ReLU(inplace=True), torch.nn.Flatten(), torch.nn.Linear(16, 3)
    ).eval()
    x = np.random.default_rng(0).normal(size=(2, 1, 4, 4)).astype(np.float32)
    with pytest.raises(XaikitValueError, match=r"writes its input in place.*nn.ReLU\(inplace=False\)"):
        xk.xai.explain(model, x, target=0, method=method)
