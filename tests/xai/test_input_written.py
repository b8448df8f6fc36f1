"""A torch model that writes its input in place (``nn.ReLU(inplace=True)`` first, ``x.mul_(2)``)
is refused by every method, and the caller's array or tensor comes back unchanged.

Before, the prepared input shared the caller's memory (a float32 numpy array, a torch tensor),
so the first pass wrote the caller's values; the forward-only methods then explained the
written input (``x.mul_(2)``: a doubled input at each pass, a silently different map)."""

from __future__ import annotations

import numpy as np
import pytest

import xaikit as xk
from xaikit.errors import XaikitValueError

torch = pytest.importorskip("torch")

_CAM = ("gradcam", "gradcam++", "xgradcam", "layercam", "hirescam", "scorecam", "eigencam", "guided_gradcam")


class _Doubler(torch.nn.Module):
    def __init__(self, clone: bool = False) -> None:
        super().__init__()
        self.clone = clone
        self.net = torch.nn.Sequential(
            torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(4 * 6 * 6, 3)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.clone:
            x = x.clone()
        x.mul_(2.0)
        return self.net(x)


def _options(method: str, model: _Doubler) -> dict[str, object]:
    return {"layer": model.net[0]} if method in _CAM else {}


@pytest.mark.parametrize("method", xk.xai.METHODS)
def test_every_method_refuses_and_leaves_the_callers_values(method: str) -> None:
    torch.manual_seed(0)
    model = _Doubler().eval()
    x = np.random.default_rng(0).normal(size=(2, 3, 8, 8)).astype(np.float32)
    t = torch.from_numpy(x.copy())
    for given, target in ((x, None), (t, 1)):
        before = given.copy() if isinstance(given, np.ndarray) else given.numpy().copy()
        with pytest.raises(
            XaikitValueError, match=r"writes its input in place.*array you passed is unchanged"
        ):
            xk.xai.explain(model, given, method=method, target=target, **_options(method, model))
        np.testing.assert_array_equal(given if isinstance(given, np.ndarray) else given.numpy(), before)


@pytest.mark.parametrize("method", ["vanilla", "occlusion", "rise", "scorecam"])
def test_a_model_that_copies_first_is_explained_as_its_out_of_place_twin(method: str) -> None:
    torch.manual_seed(0)
    copying = _Doubler(clone=True).eval()
    plain = _Doubler().eval()
    plain.load_state_dict(copying.state_dict())
    plain.forward = lambda x: plain.net(x * 2.0)  # type: ignore[method-assign]
    x = np.random.default_rng(1).normal(size=(2, 3, 8, 8)).astype(np.float32)
    before = x.copy()
    got = xk.xai.explain(copying, x, method=method, seed=0, **_options(method, copying))
    want = xk.xai.explain(plain, x, method=method, seed=0, **_options(method, plain))
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(x, before)


def test_saliency_net_and_a_relu_first_model() -> None:
    model = torch.nn.Sequential(
        torch.nn.ReLU(inplace=True), torch.nn.Conv2d(3, 4, 3), torch.nn.Flatten(), torch.nn.Linear(144, 3)
    ).eval()
    x = np.random.default_rng(2).normal(size=(2, 3, 8, 8)).astype(np.float32)
    before = x.copy()
    net = xk.xai.SaliencyNet(model, "x", "y", seed=0)
    with pytest.raises(XaikitValueError, match=r"writes its input in place"):
        net.get_masks({"x": x})
    np.testing.assert_array_equal(x, before)


def test_the_copy_is_made_only_where_memory_is_shared() -> None:
    from xaikit.backend import load_backend

    bk = load_backend("torch")
    x = np.ones((2, 3), np.float32)
    shared = bk.as_tensor(x, "cpu", "float32")
    assert np.may_share_memory(shared.numpy(), x)  # as_tensor alone shares: the reason for unshared
    assert not np.may_share_memory(bk.unshared(shared, x).numpy(), x)
    cast = bk.as_tensor(x.astype(np.uint8), "cpu", "float32")  # a new tensor already: kept as it is
    assert bk.unshared(cast, x) is cast
    t = torch.ones(2, 3)
    assert bk.unshared(bk.as_tensor(t, "cpu", "float32"), t).data_ptr() != t.data_ptr()
    assert bk.unshared(bk.as_tensor(t[:, 1:], "cpu", "float32"), t[:, 1:]).data_ptr() != t[:, 1:].data_ptr()


def test_a_caller_in_inference_mode_gets_a_normal_copy() -> None:
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.Flatten(), torch.nn.Linear(144, 3)).eval()
    x = torch.randn(2, 3, 8, 8)
    want = xk.xai.explain(model, x, method="vanilla", target=0)
    with torch.inference_mode():
        got = xk.xai.explain(model, x, method="vanilla", target=0)
    np.testing.assert_array_equal(got, want)


class _ScaleWriter(torch.nn.Module):
    """``forward(x, scale, shift)``: writes ``scale`` (per sample) or ``shift`` (fixed) in place."""

    def __init__(self, writes: str) -> None:
        super().__init__()
        self.writes = writes
        self.net = torch.nn.Sequential(
            torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(4 * 6 * 6, 3)
        )

    def forward(self, x: torch.Tensor, scale: torch.Tensor, shift: torch.Tensor) -> torch.Tensor:
        if self.writes == "scale":
            scale.mul_(2.0)
        elif self.writes == "shift":
            shift.add_(1.0)
        return self.net(x * scale.view(-1, 1, 1, 1)) + shift


@pytest.mark.parametrize("method", xk.xai.METHODS)
@pytest.mark.parametrize("writes", ["scale", "shift"])
def test_a_model_writing_its_model_kwargs_is_refused_and_the_callers_values_kept(
    method: str, writes: str
) -> None:
    """Before, the per-sample ``scale`` was the caller's own memory and ``shift`` was passed as
    it came: every pass doubled the caller's values and the map was silently another model's."""
    torch.manual_seed(0)
    model = _ScaleWriter(writes).eval()
    x = np.random.default_rng(0).normal(size=(2, 3, 8, 8)).astype(np.float32)
    for scale in (np.array([1.0, 3.0], np.float32), torch.tensor([1.0, 3.0])):
        shift = torch.tensor([0.5, -0.5, 0.0])
        with pytest.raises(XaikitValueError, match=rf"writes model_kwargs\['{writes}'\] in place.*unchanged"):
            xk.xai.explain(
                model,
                x,
                method=method,
                model_kwargs={"scale": scale, "shift": shift},
                **_options(method, model),
            )
        np.testing.assert_array_equal(np.asarray(scale), [1.0, 3.0])
        np.testing.assert_array_equal(shift.numpy(), [0.5, -0.5, 0.0])


def test_model_kwargs_the_model_only_reads_give_each_samples_own_map() -> None:
    """The copies change nothing for a model that only reads its kwargs: each sample's map is the
    map of that sample alone with its own scale (a per-sample-independent option set)."""
    torch.manual_seed(0)
    model = _ScaleWriter("nothing").eval()
    x = np.random.default_rng(3).normal(size=(2, 3, 8, 8)).astype(np.float32)
    scale, shift = torch.tensor([1.0, 3.0]), torch.tensor([0.5, -0.5, 0.0])
    for method, options in (
        ("vanilla", {}),
        ("integrated_gradients", {"baseline": "zeros"}),
        ("occlusion", {}),
    ):
        got = xk.xai.explain(
            model, x, method=method, target=[0, 2], model_kwargs={"scale": scale, "shift": shift}, **options
        )
        for b, target in enumerate((0, 2)):
            one = xk.xai.explain(
                model,
                x[b : b + 1],
                method=method,
                target=target,
                model_kwargs={"scale": scale[b : b + 1].clone(), "shift": shift.clone()},
                **options,
            )
            np.testing.assert_allclose(got[b], one[0], rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(scale.numpy(), [1.0, 3.0])
