"""Edge cases of ModuleTracker: nested inputs/outputs, in-place modules, failing forwards, graph
mode in Keras, integer tensors, the repr."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from xaikit.inspect import ModuleTracker


def test_torch_nested_inputs_and_outputs_get_stable_names(tmp_path: Path) -> None:
    import torch
    from torch import nn

    class Heads(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.body = nn.Linear(3, 4)

        def forward(self, x, extra=None, *, mask=None):  # type: ignore[no-untyped-def]
            h = self.body(x[0] + x[1]["b"])
            return {"logits": h, "aux": (h * 2, h.sum())}

    model = Heads()
    with ModuleTracker(model, tmp_path) as tracker:
        a, b = torch.ones(2, 3), torch.full((2, 3), 2.0)
        model((a, {"b": b}), 7, mask=torch.tensor([True, False]))
        df = tracker.df
    root = df[df["module"] == "model"]
    assert root[root["kind"] == "input"]["tname"].tolist() == ["x.0.0", "x.0.1.b", "x.mask"]
    assert root[root["kind"] == "output"]["tname"].tolist() == ["out.logits", "out.aux.0", "out.aux.1"]
    mask = root[root["tname"] == "x.mask"].iloc[0]
    assert mask["dtype"] == "bool" and mask["mean"] == 0.5 and mask["zero_frac"] == 0.5
    scalar = root[root["tname"] == "out.aux.1"].iloc[0]
    assert scalar["shape"] == [] and scalar["std"] == 0.0
    assert np.isnan(scalar["dead_units"])  # no unit axis on a scalar


def test_torch_inplace_relu_input_is_measured_before_the_call(tmp_path: Path) -> None:
    import torch
    from torch import nn

    model = nn.Sequential(nn.Identity(), nn.ReLU(inplace=True))
    x = torch.tensor([[-1.0, 2.0, -3.0, 4.0]])
    with ModuleTracker(model, tmp_path) as tracker:
        model(x.clone())
        df = tracker.df
    relu = df[df["module"] == "model.1"].set_index("kind")
    assert relu.loc["input", "min"] == -3.0 and relu.loc["input", "mean"] == 0.5
    assert relu.loc["output", "min"] == 0.0 and relu.loc["output", "zero_frac"] == 0.5


def test_torch_failing_forward_keeps_the_tracker_consistent(tmp_path: Path) -> None:
    import torch
    from torch import nn

    model = nn.Sequential(nn.Linear(3, 2), nn.Linear(5, 1))
    with ModuleTracker(model, tmp_path, auto_step=True) as tracker:
        with pytest.raises(RuntimeError):
            model(torch.ones(1, 3))
        assert tracker.current_step == 0  # a failed pass does not end a step
        model[1] = nn.Linear(2, 1)  # a new child is not hooked: the tree was taken at construction
        model(torch.ones(1, 3))
        assert tracker.current_step == 1
    df = tracker.df
    assert tracker.call_order == ["model", "model.0"]
    # both passes fell in step 0; the failed one recorded what ran before the error
    outs = df[(df["step"] == 0) & (df["kind"] == "output")]
    assert outs["module"].tolist() == ["model.0", "model.0", "model"]
    assert outs["call"].tolist() == [0, 1, 1]  # the root was entered twice


def test_keras_graph_mode_calls_pass_through(tmp_path: Path) -> None:
    import keras
    import tensorflow as tf

    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2, name="d")])
    x = tf.ones((4, 3))
    eager = model(x).numpy()
    with ModuleTracker(model, tmp_path) as tracker:
        graph = tf.function(lambda t: model(t))(x).numpy()
        assert len(tracker.df) == 0
        model(x)
        assert len(tracker.df) == 4
    np.testing.assert_array_equal(eager, graph)


def test_keras_failing_call_is_restored(tmp_path: Path) -> None:
    import keras
    import tensorflow as tf

    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2, name="d")])
    with ModuleTracker(model, tmp_path) as tracker:
        with pytest.raises(Exception):  # noqa: B017 - Keras raises its own shape error type
            model(tf.ones((4, 5)))
        model(tf.ones((4, 3)))
        assert tracker.call_order == ["model", "model.d"]
    assert all("call" not in layer.__dict__ for layer in model._flatten_layers())


def test_repr_and_current_step_setter(framework: str, tmp_path: Path) -> None:
    from inspect_models import Kit

    kit = Kit(framework)
    tracker = ModuleTracker(kit.model, tmp_path, every_n_steps=5)
    assert "15 modules" in repr(tracker) and "attached" in repr(tracker)
    tracker.current_step = 10
    assert tracker.recording
    tracker.current_step = 11
    assert not tracker.recording
    with pytest.raises(ValueError, match="current_step must be an int >= 0"):
        tracker.current_step = -1
    tracker.detach()
    assert "detached" in repr(tracker) and not tracker.recording
