"""A torch model whose forward changes its buffers while it is explained (a BatchNorm traced or
exported in train mode, a forward that keeps a counter or a running mean) is refused, and every
buffer is put back as it was: its maps would be of a model that changes from row to row."""

from __future__ import annotations

import copy
import warnings
from typing import Any

import numpy as np
import pytest

import xaikit as xk
from xaikit.errors import XaikitValueError

torch = pytest.importorskip("torch")
nn = torch.nn

METHODS = [("vanilla", {}), ("integrated", {"nsamples": 4}), ("occlusion", {"window": 4}), ("gradcam", {})]


def _bn_net() -> Any:
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 64, 3)
    )
    with torch.no_grad():
        model.train()(torch.rand(8, 3, 8, 8) * 3)  # running statistics away from their start
    return model


def _state(model: Any) -> dict[str, Any]:
    return {k: v.clone() for k, v in model.state_dict().items()}


def _assert_same_state(model: Any, before: dict[str, Any]) -> None:
    after = model.state_dict()
    assert list(after) == list(before)
    for key, value in before.items():
        assert torch.equal(after[key], value), key


class Drifting(nn.Module):
    """Counts its calls and subtracts a running mean of its inputs that it updates in forward."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(1)
        self.net = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 64, 3))
        self.register_buffer("calls", torch.zeros((), dtype=torch.long))
        self.register_buffer("ema", torch.zeros(1, 3, 1, 1))

    def forward(self, x: Any) -> Any:
        self.calls += 1
        out = self.net(x - self.ema)
        with torch.no_grad():
            self.ema.mul_(0.5).add_(0.5 * x.mean((0, 2, 3), keepdim=True))
        return out


class Replacing(nn.Module):
    """Replaces its buffer by a new tensor on each call (no in-place write)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(2)
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(3 * 64, 3))
        self.register_buffer("shift", torch.zeros(1))

    def forward(self, x: Any) -> Any:
        out = self.net(x) + self.shift
        self.shift = self.shift + 1.0
        return out


class Scratch(nn.Module):
    """Writes a scratch buffer in place with the same values on every call: nothing changes."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(3)
        self.net = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 64, 3))
        self.register_buffer("scratch", torch.full((4,), float("nan")))

    def forward(self, x: Any) -> Any:
        self.scratch.fill_(float("nan"))
        return self.net(x)


def _trace(model: Any) -> Any:
    with warnings.catch_warnings():  # TorchScript deprecation and tracer notices
        warnings.simplefilter("ignore")
        return torch.jit.trace(model, torch.rand(2, 3, 8, 8))


def _x() -> np.ndarray:
    return np.random.default_rng(0).random((2, 3, 8, 8)).astype(np.float32)


@pytest.mark.parametrize("method, opts", METHODS[:3])  # a trace runs no hooks: no CAM
def test_a_trace_made_in_train_mode_is_refused_and_its_statistics_are_put_back(
    method: str, opts: Any
) -> None:
    # the trace normalized with the rows' statistics (the map 4.5x the eval-mode gradient off)
    # and moved the running statistics of the trace and of the module it was made from
    model = _bn_net()
    traced = _trace(model)
    before = _state(model)
    with pytest.raises(
        XaikitValueError, match=r"changed its buffers \['1.running_mean'.*after model.eval\(\)"
    ):
        xk.xai.explain(traced, _x(), target=[0, 1], method=method, **opts)
    _assert_same_state(model, before)
    _assert_same_state(traced, before)
    assert model.training  # the user's mode, as it was


def test_a_trace_made_in_eval_mode_gives_the_eval_maps() -> None:
    model = _bn_net().eval()
    traced = _trace(model)
    before = _state(model)
    for method, opts in METHODS[:3]:  # a TorchScript module has no layers for a CAM
        np.testing.assert_allclose(
            xk.xai.explain(traced, _x(), target=[0, 1], method=method, **opts),
            xk.xai.explain(model, _x(), target=[0, 1], method=method, **opts),
            rtol=1e-5,
            atol=1e-7,
        )
    _assert_same_state(model, before)


def test_an_export_made_in_train_mode_is_refused_and_put_back() -> None:
    model = _bn_net()
    batch = torch.export.Dim("batch")
    exported = torch.export.export(model, (torch.rand(2, 3, 8, 8),), dynamic_shapes=({0: batch},)).module()
    before = _state(exported)
    with pytest.raises(XaikitValueError, match=r"changed its buffers .*running_mean"):
        xk.xai.explain(exported, _x(), target=[0, 1], method="vanilla")
    _assert_same_state(exported, before)


@pytest.mark.parametrize("method, opts", METHODS)
def test_a_forward_that_updates_its_own_buffers_is_refused_and_put_back(method: str, opts: Any) -> None:
    model = Drifting().eval()
    before = _state(model)
    with pytest.raises(XaikitValueError, match=r"changed its buffers \['calls', 'ema'\]"):
        xk.xai.explain(model, _x(), target=[0, 1], method=method, **opts)
    _assert_same_state(model, before)
    assert int(model.calls) == 0


def test_a_replaced_buffer_is_refused_and_the_original_tensor_put_back() -> None:
    model = Replacing().eval()
    shift = model.shift
    with pytest.raises(XaikitValueError, match=r"changed its buffers \['shift'\]"):
        xk.xai.explain(model, _x(), target=[0, 1], method="vanilla")
    assert model.shift is shift and float(model.shift) == 0.0


def test_writing_a_buffer_with_the_values_it_had_is_not_a_change() -> None:
    # the version counter moves on every call (a scratch buffer, here NaN): the values decide
    model = Scratch().eval()
    plain = copy.deepcopy(model.net)
    for method, opts in METHODS[:3]:
        np.testing.assert_array_equal(
            xk.xai.explain(model, _x(), target=[0, 1], method=method, **opts),
            xk.xai.explain(plain, _x(), target=[0, 1], method=method, **opts),
        )


def test_an_evaluate_metric_on_a_batchnorm_model_in_train_mode_leaves_it_as_it_was() -> None:
    # explain runs inside the metric's own eval mode: the buffers are watched once, not refused
    model = _bn_net()
    before = _state(model)
    maps = xk.xai.explain(model, _x(), target=[0, 1], method="vanilla")
    result = xk.evaluate.deletion(model, _x(), maps, target=[0, 1], steps=4)
    assert np.isfinite(result.scores).all()
    _assert_same_state(model, before)
    assert model.training


def test_a_batchnorm_without_running_statistics_is_warned_about_once() -> None:
    # it normalizes every pass with the pass's own rows: the maps moved with max_batch (0.59
    # relative for vanilla), with no word
    torch.manual_seed(4)
    model = nn.Sequential(
        nn.Conv2d(3, 4, 3, padding=1),
        nn.BatchNorm2d(4, track_running_stats=False),
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(4 * 64, 3),
    ).eval()
    x = _x()
    with pytest.warns(xk.XaikitWarning, match=r"BatchNorm layers \['1'\] keep no running statistics"):
        together = xk.xai.explain(model, x, target=[0, 1], method="vanilla")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per model
        alone = xk.xai.explain(model, x, target=[0, 1], method="vanilla", max_batch=1)
        first = xk.xai.explain(model, x[:1], target=[0], method="vanilla")
    assert not np.allclose(together, alone)  # what the warning is about
    np.testing.assert_allclose(alone[:1], first, rtol=1e-5, atol=1e-8)  # its way out
