"""The memory-aware chunk plan: the budget caps the chunk at budget / (bytes per row), small
sizes for big rows, ``memory_budget`` validation, the plan (and its memory probe) made once per
model and input shape, and out-of-memory errors halving until the job completes, in ``explain``
and in every evaluation that runs forward passes."""

from __future__ import annotations

import math

import numpy as np
import pytest

import xaikit as xk
from tests.xai.models import cnn, cnn_weights, images, to_channel_first
from xaikit.backend.base import Backend
from xaikit.xai._engine import plan as chunk_plan

MB = 2**20


def _x(framework: str, batch: int = 4, seed: int = 0) -> np.ndarray:
    x = images(np.random.default_rng(seed), batch=batch)
    return to_channel_first(x) if framework == "torch" else x


def _net(model, **kw):
    return xk.xai.SaliencyNet(model, model_inputs="x", model_outputs="y_pred", seed=0, **kw)


@pytest.fixture
def row_cost(monkeypatch: pytest.MonkeyPatch):
    """Pretend every row costs ``cost[0]`` bytes (plus 1 MiB per chunk), and the machine has
    ``available[0]`` bytes; ``calls`` records the (stubbed) peak measurements of the probes."""
    import xaikit.backend.memory as memory

    cost, available, calls = [1 * MB], [8 * 2**30], []
    rows = chunk_plan._MEMORY_PROBE

    def fake_peak(fn, period=0.001):  # the plan measures a warm-up, then 2 rows, then 8 rows
        n = (rows[0], rows[0], rows[1])[len(calls) % 3]
        calls.append(n)
        return fn(), 1 * MB + n * cost[0]

    monkeypatch.setattr(memory, "host_peak", fake_peak)
    monkeypatch.setattr(Backend, "available_memory", lambda self, device: available[0])
    return cost, available, calls


@pytest.mark.parametrize(
    ("per_row", "budget", "chunk"),
    [
        (1 * MB, 40 * MB, 32),  # 40 rows fit: the largest candidate within is 32
        (1 * MB, 20 * MB, 16),
        (1 * MB, 10 * MB, 8),  # below every candidate: the cap (10), cut to whole slices of B=4
        (4 * MB, 0.1, 16),  # a fraction of the (stubbed) 1 GiB available: 102 MiB / 4 MiB = 25 rows
        (1 * MB, 2**40, 256),  # no cap in reach: the engine's default (128 torch, 256 TF)
    ],
)
def test_the_chunk_respects_the_budget(framework, row_cost, per_row, budget, chunk) -> None:
    cost, available, _ = row_cost
    cost[0], available[0] = per_row, 2**30
    model = cnn(framework, cnn_weights())
    net = _net(model, memory_budget=budget)
    out = net.get_integrated_masks({"x": _x(framework)}, nsamples=64, raw=True)["saliency"]  # 256 rows
    default = 128 if framework == "torch" else 256
    assert max(net.last_chunks) == min(chunk, default)
    bytes_budget = budget if isinstance(budget, int) else budget * available[0]
    assert max(net.last_chunks) * per_row <= bytes_budget
    want = xk.xai.explain(model, _x(framework), method="integrated", nsamples=64, max_batch=256)
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-6)


def test_big_rows_get_small_chunks(framework, row_cost) -> None:
    """A resnet-sized row (40 MiB) on a machine with 8 GiB available: the budget (4 GiB)
    would allow 102 rows, but the plan keeps the chunk near the 512 MiB working set: 16."""
    cost, _, _ = row_cost
    cost[0] = 40 * MB
    model = cnn(framework, cnn_weights())
    net = _net(model)
    net.get_smoothed_masks({"x": _x(framework)}, nsamples=4, nintegration=16, raw=True)  # 256 rows
    assert set(net.last_chunks) == {16}
    cost[0] = 200 * MB  # 8 GiB * 0.5 / 200 MiB = 20 rows; a new model and budget key
    model2 = cnn(framework, cnn_weights())
    net2 = _net(model2, memory_budget=2100 * MB)  # 10 rows (the probe adds 1 MiB per chunk)
    net2.get_smoothed_masks({"x": _x(framework, batch=5)}, nsamples=4, nintegration=16, raw=True)
    assert max(net2.last_chunks) == 10  # two whole slices of B=5


def test_plan_and_memory_probe_made_once_and_results_bit_identical(framework, row_cost) -> None:
    _, _, calls = row_cost
    model = cnn(framework, cnn_weights())
    net = _net(model, memory_budget=24 * MB)  # 24 rows: chunks of 16
    batch = {"x": _x(framework)}
    first = net.get_smoothed_masks(batch, nsamples=4, nintegration=16, raw=True)["saliency"]
    plan = dict(chunk_plan._TUNED[model])
    for _ in range(2):
        again = net.get_smoothed_masks(batch, nsamples=4, nintegration=16, raw=True)["saliency"]
        assert np.array_equal(first, again)
    assert len(calls) == 3 and chunk_plan._TUNED[model] == plan
    assert list(plan.values()) == [(16, plan[next(iter(plan))][1])]
    # another budget is another plan, but the row cost is not measured again
    net.get_smoothed_masks(batch, nsamples=4, nintegration=16, raw=True, memory_budget=40 * MB)
    assert set(net.last_chunks) == {32} and len(calls) == 3


def test_real_memory_probe_measures_and_keeps_results_identical() -> None:
    """The unstubbed probe (torch, CPU RSS): it measures a positive row cost for a model with
    big rows, and the first call's bits equal the later calls'."""
    import torch

    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(32, 32, 3, padding=1),
        torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(32, 4),
    )  # fmt: skip
    x = np.random.default_rng(0).random((2, 3, 128, 128), dtype=np.float32)  # ~4 MiB of activations per row
    net = _net(model)
    first = net.get_integrated_masks({"x": x}, nsamples=16, raw=True)["saliency"]
    row_bytes, cap = next(iter(chunk_plan._ROW_BYTES[model].values()))
    assert cap is None and row_bytes is not None and row_bytes > 1 * MB
    assert np.array_equal(first, net.get_integrated_masks({"x": x}, nsamples=16, raw=True)["saliency"])


@pytest.mark.parametrize("bad", [0, -3, 0.0, 1.5, -0.2, float("nan"), True, "half", None])
def test_memory_budget_validation(framework, bad) -> None:
    model = cnn(framework, cnn_weights())
    x = _x(framework, batch=2)
    kind = (
        xk.errors.XaikitTypeError
        if isinstance(bad, (bool, str)) or bad is None
        else xk.errors.XaikitValueError
    )
    pattern = r"memory_budget must be a fraction in \(0, 1\] \(float\) or bytes \(int >= 1\); got "
    with pytest.raises(kind, match=pattern):
        xk.xai.explain(model, x, method="vanilla", memory_budget=bad)
    if bad is not None:  # None means "the net's budget" per call
        with pytest.raises(kind, match=pattern):
            _net(model, memory_budget=bad)
        with pytest.raises(kind, match=pattern):
            _net(model).get_masks({"x": x}, memory_budget=bad)
    with pytest.raises(xk.errors.XaikitValueError, match=pattern + "float 1.5"):
        _net(model, memory_budget=1.5)


# ---- out of memory ---------------------------------------------------------------------------
def _limited(framework: str, model, limit: int, seen: list[int]):
    """``model`` that raises the framework's out-of-memory error on more than ``limit`` rows."""
    if framework == "torch":
        import torch

        class Limited(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.inner = model

            def forward(self, x):
                seen.append(int(x.shape[0]))
                if x.shape[0] > limit:
                    raise torch.OutOfMemoryError(f"CUDA out of memory (fake: {x.shape[0]} rows > {limit})")
                return self.inner(x)

        return Limited()
    import keras
    import tensorflow as tf

    class LimitedTF(keras.Model):
        def __init__(self) -> None:
            super().__init__()
            self.inner = model

        def call(self, x):
            seen.append(int(x.shape[0]))
            if x.shape[0] > limit:
                raise tf.errors.ResourceExhaustedError(None, None, f"OOM (fake: {x.shape[0]} rows > {limit})")
            return self.inner(x)

    wrapped = LimitedTF()
    wrapped(tf.zeros((1, 12, 12, 3)))
    return wrapped


@pytest.mark.parametrize("max_batch", ["auto", 64])
def test_out_of_memory_in_explain_halves_and_completes(framework, max_batch) -> None:
    model = cnn(framework, cnn_weights())
    x = _x(framework)
    want = xk.xai.explain(model, x, method="smint", nsamples=4, nintegration=8, max_batch=128)
    seen: list[int] = []
    small = _limited(framework, model, 5, seen)
    got = xk.xai.explain(small, x, method="smint", nsamples=4, nintegration=8, max_batch=max_batch)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)
    assert max(seen) > 5  # it did run out of memory
    if max_batch != "auto":  # (auto: the probe's 8 rows ran out of memory, so the plan caps at 4)
        # the job is redone from its first row at the halved size: the same bits as that size
        exact = xk.xai.explain(model, x, method="smint", nsamples=4, nintegration=8, max_batch=4)
        assert np.array_equal(got, exact)
    net = _net(small)
    first = net.get_smoothed_masks({"x": x}, nsamples=4, nintegration=8, raw=True)["saliency"]
    assert max(net.last_chunks) <= 5
    assert np.array_equal(
        first, net.get_smoothed_masks({"x": x}, nsamples=4, nintegration=8, raw=True)["saliency"]
    )


def test_out_of_memory_in_the_evaluations_halves_and_completes(framework) -> None:
    model = cnn(framework, cnn_weights())
    x = _x(framework, batch=6)
    seen: list[int] = []
    small = _limited(framework, model, 3, seen)
    sal = xk.xai.explain(model, x, method="integrated", nsamples=8)
    for fn in (xk.evaluate.deletion, xk.evaluate.insertion):
        want = fn(model, x, sal, steps=6)
        got = fn(small, x, sal, steps=6)
        np.testing.assert_allclose(got.scores, want.scores, rtol=1e-5, atol=1e-6)
        assert max(got.chunks) <= 3
    opts = {"nsamples": 8, "baseline": "zeros"}
    want_c = xk.evaluate.completeness(model, x, max_batch=64, method_options=opts)
    got_c = xk.evaluate.completeness(small, x, max_batch=64, method_options=opts)
    np.testing.assert_allclose(got_c.delta, want_c.delta, rtol=1e-4, atol=1e-5)
    want_r = xk.evaluate.randomization_test(model, x, layers=None, random_baseline=False, max_batch=64)
    got_r = xk.evaluate.randomization_test(small, x, layers=None, random_baseline=False, max_batch=64)
    np.testing.assert_allclose(
        got_r.table.select_dtypes("number").to_numpy(),
        want_r.table.select_dtypes("number").to_numpy(),
        rtol=1e-4,
        atol=1e-6,
    )
    assert max(seen) > 3 and not math.isnan(float(got_c.delta[0]))


@pytest.mark.parametrize("exact", [True, False])
def test_host_peak_sees_a_short_allocation(monkeypatch: pytest.MonkeyPatch, exact: bool) -> None:
    """The CPU measurement: VmHWM after a reset where Linux allows it, else the sampling thread;
    both see a 64 MiB buffer that lives for 50 ms and is freed before the call returns."""
    import time

    import xaikit.backend.memory as memory

    if not exact:
        monkeypatch.setattr(memory, "_reset_hwm", lambda: False)

    def work() -> float:
        buf = np.ones(64 * MB // 8)
        time.sleep(0.05)
        return float(buf[-1])

    out, peak = memory.host_peak(work)
    assert out == 1.0 and peak is not None and 48 * MB < peak < 256 * MB
    assert memory.available_ram() is not None and memory.available_ram() > 0
