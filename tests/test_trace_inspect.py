"""xaikit.trace.inspect.ActivationStats: the tracker inside a (simulated) and a real Estimator loop."""

from __future__ import annotations

import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from inspect_models import N_MODULES, N_PARAMS, Kit

from xaikit.errors import XaikitValueError
from xaikit.inspect import read_log
from xaikit.trace.inspect import ActivationStats


class _Data(dict):  # type: ignore[type-arg]
    def __init__(self) -> None:
        super().__init__()
        self.logged: dict[str, Any] = {}

    def write_with_log(self, key: str, value: Any) -> None:
        self[key] = self.logged[key] = value

    def write_without_log(self, key: str, value: Any) -> None:
        self[key] = value


def test_activation_stats_records_sampled_training_steps(
    framework: str, rng: np.random.Generator, tmp_path: Path
) -> None:
    kit = Kit(framework)
    trace = ActivationStats(kit.model, tmp_path, every_n_steps=3)
    assert trace.outputs == ["activation_stats", "activation_stats_flags"]
    trace.system = types.SimpleNamespace(global_step=0, mode="train", epoch_idx=1)
    x = rng.normal(size=(2, 16, 16, 3)).astype(np.float32)
    trace.on_begin(_Data())
    trace.on_epoch_begin(_Data())
    seen = []
    for _ in range(7):
        trace.system.global_step += 1
        data = _Data()
        trace.on_batch_begin(data)
        if framework == "torch":
            kit.model.zero_grad()
            (kit.model(kit.tensor(x)) ** 2).sum().backward()
        else:
            kit.forward(x)
        trace.on_batch_end(data)
        seen.append("activation_stats" in data)
        # no hooks left between batches
        if framework == "torch":
            assert all(not m._forward_hooks and not m._forward_pre_hooks for m in kit.model.modules())
        else:
            assert all("call" not in layer.__dict__ for layer in kit.model._flatten_layers())
    end = _Data()
    trace.on_epoch_end(end)
    trace.on_end(_Data())
    assert seen == [True, False, True, False, False, True, False]
    df = read_log(tmp_path)
    assert sorted(set(df["step"])) == [1, 3, 6]
    per_step = 2 * N_MODULES + 2 * N_PARAMS
    assert len(df) == 3 * per_step
    grads = df[df["kind"] == "grad"]
    assert grads["absent"].tolist() == [framework != "torch"] * 3 * N_PARAMS
    assert end.logged == {"activation_stats_flags": len(trace.tracker.flags)}


def test_activation_stats_skips_eval_and_checks_arguments(
    framework: str, rng: np.random.Generator, tmp_path: Path
) -> None:
    kit = Kit(framework)
    trace = ActivationStats(kit.model, tmp_path, every_n_steps=1)
    trace.system = types.SimpleNamespace(global_step=5, mode="eval", epoch_idx=1)
    data = _Data()
    trace.on_batch_begin(data)
    kit.forward(rng.normal(size=(1, 16, 16, 3)).astype(np.float32))
    trace.on_batch_end(data)
    assert "activation_stats" not in data and len(trace.tracker.df) == 0
    with pytest.raises(XaikitValueError, match=r"every_n_steps.* must be an int >= 1"):
        ActivationStats(kit.model, tmp_path, every_n_steps=0)
    with pytest.raises(XaikitValueError, match=r"unknown options \['dead'\]"):
        ActivationStats(kit.model, tmp_path, dead=0.5)


@pytest.mark.slow
def test_activation_stats_in_a_real_estimator_run(framework: str, tmp_path: Path) -> None:
    from test_estimator_integration import setup  # the shared small LeNet-on-shapes set-up

    import xaikit as xk

    pipeline, model, network = setup(framework)  # 64 training samples, batch 16: 4 steps
    trace = xk.trace.inspect.ActivationStats(model, tmp_path, every_n_steps=2)
    xk.Estimator(pipeline, network, epochs=1, traces=[trace], log_steps=None).fit()
    df = read_log(tmp_path)
    assert sorted(set(df["step"])) == [1, 2, 4]
    counts = df.groupby("kind").size().to_dict()
    assert counts["weight"] == counts["grad"] == 3 * 10  # LeNet: 5 layers with weight and bias
    if framework == "torch":
        assert counts["output"] == 3 * 8  # 7 modules, the shared pool called twice
        assert not df.loc[df["kind"] == "grad", "absent"].any()
    else:  # the Keras network step runs in a tf.function: only eager calls are recorded
        assert "output" not in counts
        assert df.loc[df["kind"] == "grad", "absent"].all()
