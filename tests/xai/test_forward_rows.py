"""The forward-only row path (occlusion, RISE, Score-CAM): its masked passes run in torch's
``inference_mode``, copy no index from the host per chunk (indices and masks are made on the
device), and the plan gives their rows channels-last on an accelerator (gradient sweeps keep
contiguous rows there); the on-device RISE masks are the host reference's to float32 rounding,
and the backend's ``arange``/``forward_only`` work in both frameworks."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import xaikit as xk
from tests.xai.models import images, model_for
from xaikit.xai._engine.job import Job
from xaikit.xai._engine.plan import ChunkPlan
from xaikit.xai.perturbation import rise

CASES = [
    ("occlusion", {"window": 4, "stride": 2}),
    ("rise", {"nsamples": 24, "cell": 3}),
    ("scorecam", {"layer": "3"}),
]


@pytest.mark.parametrize(("method", "options"), CASES)
def test_masked_passes_run_in_inference_mode(method: str, options: dict[str, Any]) -> None:
    torch = pytest.importorskip("torch")
    inner, layout = model_for("torch", seed=1)
    seen: list[tuple[int, bool, bool]] = []

    class Recording(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, x: Any) -> Any:
            seen.append((len(x), torch.is_inference_mode_enabled(), torch.is_grad_enabled()))
            return self.inner(x)

    model = Recording()
    x = layout(images(np.random.default_rng(0), batch=1))
    kw = {"layer": "inner.3"} if method == "scorecam" else options
    xk.xai.explain(model, x, target=[2], method=method, max_batch=4, **kw)
    masked = [s for s in seen if s[0] > 1]  # the pin and activation passes run the 1 sample
    assert masked, seen
    assert all(mode and not grad for _, mode, grad in masked), seen
    assert not torch.is_inference_mode_enabled()  # left as it was


@pytest.mark.parametrize(("method", "options"), CASES)
def test_no_host_index_per_chunk(
    monkeypatch: pytest.MonkeyPatch, method: str, options: dict[str, Any]
) -> None:
    """``bk.index`` copies host indices to the device: the row path calls it no more for many
    chunks than for few (each chunk's indices come from ``bk.arange`` on the device)."""
    pytest.importorskip("torch")
    from xaikit.backend.torch.core import TorchBackend

    model, layout = model_for("torch", seed=1)
    x = layout(images(np.random.default_rng(0), batch=2))
    real = TorchBackend.index
    calls: list[int] = []

    def counting(self: Any, idx: np.ndarray, device: Any) -> Any:
        calls.append(len(idx))
        return real(self, idx, device)

    monkeypatch.setattr(TorchBackend, "index", counting)
    counts, maps = {}, {}
    for chunk in (2, 16):
        calls.clear()
        maps[chunk] = np.asarray(
            xk.xai.explain(model, x, target=[1, 3], method=method, max_batch=chunk, **options)
        )
        counts[chunk] = len(calls)
    assert counts[2] == counts[16], counts
    np.testing.assert_allclose(maps[2], maps[16], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("forward_only", [True, False])
@pytest.mark.parametrize("max_batch", [8, "auto"])
def test_plan_layout_on_an_accelerator(
    monkeypatch: pytest.MonkeyPatch, forward_only: bool, max_batch: int | str
) -> None:
    """On an accelerator nothing is timed: forward-only rows are channels-last (1.3x faster on
    an H100), gradient sweeps keep contiguous rows; on a CPU the untimed default stays
    channels-last for both."""
    torch = pytest.importorskip("torch")
    from xaikit.backend.torch.core import TorchBackend

    model, _ = model_for("torch", seed=1)
    bk = xk.backend.get_backend(model)
    job = Job(
        bk=bk,
        model=model,
        inputs=[torch.zeros(2, 3, 12, 12)],
        targets=torch.zeros(2, dtype=torch.int64),
        n_noise=4,
        max_batch=max_batch,
        forward_only=forward_only,
    )
    assert ChunkPlan(job).layout == "channels_last"  # a CPU
    monkeypatch.setattr(TorchBackend, "is_accelerator", lambda self, device: True)
    monkeypatch.setattr(TorchBackend, "free_memory", lambda self, device: 2**30)
    job.model = model_for("torch", seed=2)[0]  # a fresh plan
    plan = ChunkPlan(job)
    assert plan.layout == ("channels_last" if forward_only else "contiguous")
    assert plan.trials() == []  # nothing timed on an accelerator


@pytest.mark.parametrize("hw", [(16, 16), (30, 17), (224, 224)])
@pytest.mark.parametrize("framework", ["torch", "tf"])
def test_device_rise_masks_match_the_host_reference(framework: str, hw: tuple[int, int]) -> None:
    """The masks the rows get (made on the device from the host's seeded grids and shifts) are
    :func:`rise.rise_masks`'s to float32 rounding, for any chunk boundaries."""
    pytest.importorskip("torch" if framework == "torch" else "tensorflow")
    model, _ = model_for(framework, seed=1)
    bk = xk.backend.get_backend(model)
    x = bk.as_tensor(np.zeros((1, 3, *hw) if framework == "torch" else (1, *hw, 3)), None)
    made = rise._DeviceMasks(bk, 7, 70, hw, 4, 0.5, x)
    for start, stop in ((0, 5), (3, 40), (31, 70)):
        host = rise.rise_masks(7, start, stop, hw, 4, 0.5)
        device = bk.to_numpy(made(start, stop))
        assert device.dtype == np.float32 and device.shape == host.shape
        np.testing.assert_allclose(device, host, rtol=0, atol=1e-6)


@pytest.mark.parametrize("framework", ["torch", "tf"])
def test_backend_arange_and_forward_only(framework: str) -> None:
    pytest.importorskip("torch" if framework == "torch" else "tensorflow")
    model, _ = model_for(framework, seed=1)
    bk = xk.backend.get_backend(model)
    r = bk.arange(3, 11, bk.model_device(model))
    assert bk.dtype_name(r) == "int64"
    np.testing.assert_array_equal(bk.to_numpy(r % 4), np.arange(3, 11) % 4)
    np.testing.assert_array_equal(bk.to_numpy(r // 4 - 1), np.arange(3, 11) // 4 - 1)
    with bk.forward_only():
        out = bk.to_numpy(bk.forward(model, [bk.as_tensor(np.zeros((2, *_shape(framework))), None)]))
    assert out.shape == (2, 5)


def _shape(framework: str) -> tuple[int, ...]:
    return (3, 12, 12) if framework == "torch" else (12, 12, 3)


def _probe_job(forward_only: bool, n_noise: int) -> Job:
    """A torch job of 2 samples x ``n_noise`` rows of a small CNN, for plans probed with made-up
    row costs."""
    import torch

    model, _ = model_for("torch", seed=3)
    return Job(
        bk=xk.backend.get_backend(model),
        model=model,
        inputs=[torch.zeros(2, 3, 12, 12)],
        targets=torch.zeros(2, dtype=torch.int64),
        n_noise=n_noise,
        forward_only=forward_only,
    )


@pytest.mark.parametrize("forward_only", [True, False])
@pytest.mark.parametrize(
    ("row_mib", "budget_rows", "expected_forward"),
    [
        (6.0, 4000, 512),  # a ResNet-18 at 224x224: 4 GiB / 6 MiB = 682 rows -> 512
        (6.0, 300, 256),  # the memory budget below the working set decides
        (0.05, 100_000, 8192),  # a small model: the 8192 ceiling, as before
        (400.0, 4000, 16),  # a huge row: never below 16 rows for the working set
    ],
)
def test_accelerator_forward_only_chunks_stay_within_the_working_set(
    monkeypatch: pytest.MonkeyPatch,
    forward_only: bool,
    row_mib: float,
    budget_rows: int,
    expected_forward: int,
) -> None:
    """On an accelerator a forward-only chunk holds at most ``_GPU_FORWARD_SET`` bytes of rows
    (a power of two, at least 16 rows) within the budget; a gradient sweep keeps the largest
    power of two the budget allows (at most 8192)."""
    pytest.importorskip("torch")
    from xaikit.backend.torch.core import TorchBackend
    from xaikit.xai._engine import plan as plan_mod

    monkeypatch.setattr(TorchBackend, "is_accelerator", lambda self, device: True)
    monkeypatch.setattr(TorchBackend, "free_memory", lambda self, device: 2**34)
    row = row_mib * 2**20
    job = _probe_job(forward_only, n_noise=5000)
    plan = ChunkPlan(job, int(budget_rows * row))
    assert plan.pending
    peaks = {2: 2 * row, 8: 8 * row}
    plan.probe(lambda n, layout: peaks[n], lambda n, layout: 1.0)
    assert plan.row_bytes == pytest.approx(row)
    cap = min(budget_rows, 8192)
    whole = 1 << (cap.bit_length() - 1)
    assert plan.size == (min(expected_forward, whole) if forward_only else whole)
    assert plan.size <= plan_mod._GPU_FORWARD_SET // row or not forward_only or plan.size == 16


@pytest.mark.parametrize(
    ("forward_only", "row_mib", "expected"),
    [
        (True, 10.0, 6),  # a ResNet-18 at 224x224: 64 MiB of rows
        (True, 7.6, 8),
        (True, 100.0, 4),  # a huge row: the floor of 4 rows
        (True, 0.05, 256),  # a small model: the CPU default, as before
        (False, 10.0, 32),  # a gradient sweep: 512 MiB of rows, as before
    ],
)
def test_cpu_forward_only_chunks_keep_their_rows_within_the_forward_set(
    forward_only: bool, row_mib: float, expected: int
) -> None:
    """On a CPU a forward-only chunk holds at most ``_CPU_FORWARD_SET`` bytes of rows (at least
    4 rows): big activations reused from the heap rather than page-faulted in every chunk."""
    pytest.importorskip("torch")
    from xaikit.xai._engine import plan as plan_mod

    row = row_mib * 2**20
    job = _probe_job(forward_only, n_noise=20)  # 40 rows: more than one chunk, too few to time
    plan = ChunkPlan(job, 2**40)
    assert plan.pending

    def untimed(n: int, layout: str) -> float:
        raise AssertionError("a job this small must not time candidates")

    peaks = {2: 2 * row, 8: 8 * row}
    plan.probe(lambda n, layout: peaks[n], untimed)
    assert plan.size == expected
    if forward_only and expected > plan_mod._CPU_FORWARD_FLOOR and row_mib > 1:
        assert plan.size * row <= plan_mod._CPU_FORWARD_SET
