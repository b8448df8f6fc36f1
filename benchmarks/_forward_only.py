"""The forward-only methods' bound and profile (issue 26).

* :func:`forward_loop` / :func:`best_bound`: a plain ``torch.inference_mode()`` forward loop over
  ``rows`` masked rows (the batch repeated, times a random mask, built once: the cost is the
  forward passes), ``batch`` rows a pass, in one memory format (``channels_last``: the rows and a
  channels-last copy of the model), the target scores gathered on the device and copied to the
  host at the end; the best of a few batch sizes and both formats is the bound.
* :func:`profile_call`: torch.profiler over one call (CPU, and CUDA activities on a GPU) with the
  model's forward wrapped in ``record_function``, so the time outside the forward (mask building,
  upsampling, normalisation, host copies) can be told apart.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from typing import Any

from _device import Device

#: the memory formats the bound searches: contiguous rows and model; channels-last rows and a
#: channels-last copy of the model; channels-last rows and the model as given (what xaikit can
#: do, since it never changes the user's model)
FORMATS = ("contiguous", "channels_last", "channels_last_rows")
#: the name of the profiler range around each call of the model's forward
FORWARD = "model.forward"


def channels_last_copy(model: Any) -> Any:
    """A copy of ``model`` with its 4-D weights in channels-last (the model is not touched)."""
    import torch

    return copy.deepcopy(model).to(memory_format=torch.channels_last)


def forward_loop(
    model: Any, x: Any, targets: list[int], rows: int, batch: int, fmt: str, cl_model: Any = None
) -> Callable[[], Any]:
    """A call that forwards ``rows`` masked rows ``batch`` at a time under ``inference_mode`` and
    returns their target scores on the host; row r is image r % B times a random mask."""
    import torch

    B, _, H, W = x.shape
    n0 = max(1, min(rows, batch))
    gen = torch.Generator(device=x.device).manual_seed(5)
    mask = torch.rand(n0, 1, H, W, generator=gen, device=x.device)
    idx = torch.arange(n0, device=x.device) % B
    chunk = x.index_select(0, idx) * mask
    t = torch.as_tensor(targets, device=x.device).index_select(0, idx)
    m = model
    if fmt in ("channels_last", "channels_last_rows"):
        chunk = chunk.contiguous(memory_format=torch.channels_last)
    if fmt == "channels_last":
        m = cl_model if cl_model is not None else channels_last_copy(model)

    def run() -> Any:
        out = []
        with torch.inference_mode():
            for r0 in range(0, rows, n0):
                n = min(n0, rows - r0)
                out.append(m(chunk[:n]).gather(1, t[:n, None])[:, 0])
            return torch.cat(out).cpu()

    return run


def best_bound(
    model: Any,
    x: Any,
    targets: list[int],
    rows: int,
    sizes: tuple[int, ...],
    dev: Device,
    log: Callable[[str], None] = print,
    clock: Callable[[], float] = time.perf_counter,
) -> tuple[int, str, dict[str, float], Any]:
    """Search the batch sizes ``sizes`` (capped by ``rows``) in both formats on
    ``min(rows, 2 * max(sizes))`` rows each (one warm-up chunk, then the best of two timed
    passes, on ``clock``: wall time by default, e.g. ``time.thread_time`` on a shared CPU);
    returns (best batch, best format, rows/s of every ``"format/batch"``, the channels-last copy
    of the model, to reuse)."""
    cl = channels_last_copy(model)
    capped = sorted({min(s, rows) for s in sizes})
    n = min(rows, 2 * max(capped))
    rates: dict[str, float] = {}
    for fmt in FORMATS:
        for bs in capped:
            forward_loop(model, x, targets, bs, bs, fmt, cl)()  # warm-up: kernel selection
            fn = forward_loop(model, x, targets, n, bs, fmt, cl)
            best = float("inf")
            for _ in range(2):
                dev.sync()
                t0 = clock()
                fn()
                dev.sync()
                best = min(best, clock() - t0)
            rates[f"{fmt}/{bs}"] = n / best
    key = max(rates, key=lambda k: rates[k])
    best_fmt, best_bs = key.split("/")
    log(
        f"  bound search ({n} rows each): "
        + ", ".join(f"{k} {v:,.0f}" for k, v in rates.items())
        + f" rows/s; best {key}"
    )
    return int(best_bs), best_fmt, rates, cl


def _dev_time(e: Any, self_only: bool) -> float:
    """An event's CUDA time in µs (``*_device_time_total``; older torch: ``*_cuda_time_total``)."""
    names = (
        ("self_device_time_total", "self_cuda_time_total")
        if self_only
        else ("device_time_total", "cuda_time_total")
    )
    for name in names:
        v = getattr(e, name, None)
        if v is not None:
            return float(v)
    return 0.0


def profile_call(model: Any, fn: Callable[[], Any], dev: Device, top: int = 12) -> dict[str, Any]:
    """Profile one ``fn()`` (after an unprofiled warm-up call) with the model's forward in a
    :data:`FORWARD` range; returns the wall seconds, the time inside the forward (CPU and, on a
    GPU, kernel time), the share outside it and the ``top`` ops by self time (the device's on a
    GPU, the CPU's otherwise)."""
    import torch
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile, record_function

    fn()
    dev.sync()
    open_ranges: list[Any] = []

    def enter(_m: Any, _a: Any) -> None:
        rf = record_function(FORWARD)
        rf.__enter__()
        open_ranges.append(rf)

    def leave(_m: Any, _a: Any, _o: Any) -> None:
        if open_ranges:
            open_ranges.pop().__exit__(None, None, None)

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.cuda else [])
    hooks = [model.register_forward_pre_hook(enter), model.register_forward_hook(leave)]
    try:
        with profile(activities=acts) as prof:
            t0 = time.perf_counter()
            fn()
            dev.sync()
            wall = time.perf_counter() - t0
    finally:
        for h in hooks:
            h.remove()
    events = [e for e in prof.events() if e.device_type == DeviceType.CPU]
    fwd = [e for e in events if e.name == FORWARD]
    fwd_cpu = sum(e.cpu_time_total for e in fwd) / 1e6
    out: dict[str, Any] = {
        "wall_s": wall,
        "forward_calls": len(fwd),
        "forward_cpu_s": fwd_cpu,
        "outside_forward_share_wall": max(0.0, wall - fwd_cpu) / wall if wall > 0 else float("nan"),
    }
    if dev.cuda:
        kernels = sum(_dev_time(e, True) for e in events) / 1e6
        fwd_k = sum(_dev_time(e, False) for e in fwd) / 1e6
        out.update(
            {
                "gpu_kernel_s": kernels,
                "forward_kernel_s": fwd_k,
                "gpu_busy_share": kernels / wall if wall > 0 else float("nan"),
                "outside_forward_share_kernels": (kernels - fwd_k) / kernels if kernels > 0 else float("nan"),
            }
        )
    avgs = [a for a in prof.key_averages() if a.key != FORWARD]
    sort = (lambda a: _dev_time(a, True)) if dev.cuda else (lambda a: float(a.self_cpu_time_total))
    total = sum(sort(a) for a in avgs) or 1.0
    out["top_ops"] = [
        {
            "op": a.key,
            "calls": int(a.count),
            "self_cpu_ms": a.self_cpu_time_total / 1e3,
            "self_cuda_ms": _dev_time(a, True) / 1e3,
            "share": sort(a) / total,
        }
        for a in sorted(avgs, key=sort, reverse=True)[:top]
    ]
    del prof
    if dev.cuda:
        torch.cuda.empty_cache()
    return out
