"""The explanation methods of issue 14 (CAM family, occlusion, RISE) against their peers, on the
torch ResNet-18 at 224x224.

Usage:
    python benchmarks/methods_bench.py [--cases cam,scorecam,rise,occlusion] [--reps 2]
        [--device cpu|cuda] [--threads N] [--quick] [--profile]
        [--gradient-json benchmarks/results/DATE-gradient-family.json]
        [--json benchmarks/results/DATE-methods.json] [--out docs/benchmarks.md]

Model: ``xaikit.architecture.torch.ResNet18`` (1000 classes, torchvision's module names), random
weights, ``calibrate_batchnorm`` on a random batch; inputs uniform in [0, 1); targets: each image's
predicted class, given explicitly to every implementation. Nothing downloads.

Cases:

* ``cam`` (B=8, layer ``layer4``): xaikit ``explain(method=m, layer="layer4")`` against
  pytorch-grad-cam's class of the same method (its batch call, ``ClassifierOutputTarget``-style
  targets) for gradcam, gradcam++, xgradcam, layercam, hirescam and eigencam; captum
  ``LayerGradCam`` (ReLU, upsampled to the input) for gradcam and ``GuidedGradCam`` for
  guided_gradcam; and the bounds: one forward + backward of the batch down to ``layer4`` (the least
  any Grad-CAM can cost), down to the input (the least Guided Grad-CAM can cost) and one forward
  (Eigen-CAM).
* ``scorecam`` (B=2; layer4 has 512 channels, so 1,024 masked forward rows): xaikit
  ``max_batch="auto"`` against pytorch-grad-cam ``ScoreCAM`` at its default batch size (16) and
  at a few larger ones (its ``batch_size`` attribute; the best is marked).
* ``rise`` (B=2, N=1000 masks, 8x8 grid, p=0.5): xaikit ``max_batch="auto"`` against
  :class:`ReferenceRISE`, written here in the style of the RISE authors' PyTorch code, plus the
  peak memory of both as N grows (N = 250, 500, 1000, 2000; one call each).
* ``occlusion`` (B=2, window 28, stride 14: xaikit's default at 224): xaikit against captum
  ``Occlusion`` at ``perturbations_per_eval`` = 1 (its default), 16, 64 and 256 (the best is
  marked); the largest absolute difference of the attributions is reported.

Scorecam, rise and occlusion also get a *bound* line (issue 26): a plain ``torch.inference_mode()``
forward loop over exactly as many masked rows as xaikit runs (the batch repeated times a random
mask, built once), at the best of a few batch sizes (16 to 256, and 512 on cuda; capped by the rows) and both
memory formats (contiguous; channels-last rows and a channels-last copy of the model), found by a
short search before the timed rounds (``benchmarks/_forward_only.py``). ``--profile`` runs
torch.profiler over one xaikit call of each of the three (CPU and CUDA activities on a GPU) with
the model's forward in a ``record_function`` range: the top ops by self time and the share of the
call spent outside the model's forward. ``--gradient-json`` takes the ``--json`` of
``gradient_family_bench.py`` for the XRAI / Guided IG rows of the targets table.

Device: ``--device cuda`` (the default when torch sees a GPU) puts the model and the inputs on the
GPU; the peers get device tensors (pytorch-grad-cam follows the model's device, captum and the
RISE reference take device tensors), every timed call ends with ``torch.cuda.synchronize()``,
and the tables get each call's peak GPU memory (``torch.cuda.max_memory_allocated`` above the
allocation at its start, after ``reset_peak_memory_stats``).

Timing: one untimed warm-up of every line, then ``--reps`` interleaved rounds; medians; with
glibc's default malloc and no memory sampler. Memory, after every case's timed rounds: glibc is
switched (``_measure.trimmed_malloc``: what ``MALLOC_MMAP_THRESHOLD_``/``MALLOC_TRIM_THRESHOLD_``
= 128 KiB do at start) to return freed buffers to the OS, so that each call's peak is its own,
and each line is called once more, untimed, under the resident-set sampler (its peak increase
over the value just before it, after ``gc.collect()`` and ``malloc_trim``); the RISE memory sweep
runs then too. Timing under that setting was wrong: its page faults slowed torch's CPU kernels
(2.7x for a LeNet on an AMD EPYC) and chunked calls more than small loops. The section between the ``methods`` markers of
``--out`` is replaced (added at the end if absent); the rest of the file is kept.
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(HERE), str(ROOT)]

import _device  # noqa: E402
from _device import Device  # noqa: E402
from _forward_only import best_bound, forward_loop, profile_call  # noqa: E402
from _measure import PeakRSS, machine, trimmed_malloc, write_section  # noqa: E402

from xaikit.backend.memory import trim_heap  # noqa: E402

START = "<!-- methods:start -->"
END = "<!-- methods:end -->"
CASES = ("cam", "scorecam", "rise", "occlusion")
#: the CAM methods compared with pytorch-grad-cam (Score-CAM has its own case)
GRADCAM_PEERS = ("gradcam", "gradcam++", "xgradcam", "layercam", "hirescam", "eigencam")
LAYER = "layer4"
#: pytorch-grad-cam ScoreCAM's batch size when its ``batch_size`` attribute is unset
SCORECAM_DEFAULT_BATCH = 16
#: the forward-only cases: a bound line each, profiled with --profile
FORWARD_ONLY = ("scorecam", "rise", "occlusion")


@dataclass
class Settings:
    """The workload; :meth:`quick_run` shrinks it to check that everything runs."""

    size: int = 224
    cam_batch: int = 8
    score_batch: int = 2
    rise_batch: int = 2
    rise_masks: int = 1000
    rise_sweep: tuple[int, ...] = (250, 500, 1000, 2000)
    rise_cell: int = 8
    rise_p: float = 0.5
    rise_ref_batch: int = 100  # the authors' gpu_batch
    occ_batch: int = 2
    occ_window: int = 28
    occ_stride: int = 14
    occ_ppe: tuple[int, ...] = (1, 16, 64, 256)
    score_peer_batches: tuple[int, ...] = (16, 64, 128)  # pytorch-grad-cam ScoreCAM batch_size
    #: the bound loop's batch sizes searched: from 4, as the plan's forward-only chunks on a CPU
    #: run 6-8 rows of a ResNet-18 at 224x224 (a search from 16 would flatter xaikit there)
    bound_sizes: tuple[int, ...] = (4, 8, 16, 32, 64, 128, 256)
    #: extra xaikit lines of the forward-only cases at these fixed max_batch (--sizes): where the
    #: plan's own choice stands among fixed chunk sizes
    xaikit_sizes: tuple[int, ...] = ()
    calib: int = 32
    reps: int = 2
    device: str = "cpu"

    @classmethod
    def quick_run(cls) -> Settings:
        return cls(
            occ_ppe=(1, 16),
            score_peer_batches=(16, 64),
            bound_sizes=(16, 32),
            size=48,  # layer4 2x2: Score-CAM maps that are not constant
            cam_batch=2,
            score_batch=1,
            rise_batch=1,
            rise_masks=32,
            rise_sweep=(16, 32),
            occ_batch=1,
            occ_window=16,
            occ_stride=16,
            calib=8,
            reps=1,
        )


#: a resident-set difference below this is noise, not growth (bytes)
RSS_NOISE = 16 * 2**20


def log(msg: str) -> None:
    print(msg, flush=True)


class Line:
    """One benchmarked call and its timings / peak RSS increases.

    ``kind``: "xaikit", "peer" or "bound"; ``method``: the xaikit method it stands beside.
    :attr:`dev` (set once by :func:`main`) synchronizes before the timer stops and gives each
    call's peak GPU memory on cuda.
    """

    dev: Device = Device("cpu")

    def __init__(
        self, case: str, method: str, name: str, rows: int, fn: Callable[[], Any], kind: str
    ) -> None:
        self.case, self.method, self.name, self.rows, self.fn, self.kind = case, method, name, rows, fn, kind
        self.times: list[float] = []
        self.rss: list[int] = []
        self.gpu: list[int] = []
        self.extra: dict[str, Any] = {}
        self.result: Any = None

    def once(self, keep: bool = False) -> None:
        """One timed call, without the resident-set sampler (its thread takes the GIL every
        millisecond from the call's Python, which on a GPU is what launches the kernels: it made
        xaikit's occlusion call 6 ms slower on an H100, 31 ms against 25) and without trimming
        the heap first (freed buffers handed back cost page faults in the call);
        :meth:`memory_once` measures the resident set in a call of its own."""
        self.result = None
        gc.collect()
        self.dev.reset_peak()
        t0 = time.perf_counter()
        out = self.fn()
        self.dev.sync()
        elapsed = time.perf_counter() - t0
        self.times.append(elapsed)
        gpu = self.dev.peak()
        if gpu is not None:
            self.gpu.append(gpu)
        if keep:
            self.result = out
        del out

    def memory_once(self, timed: bool = False) -> None:
        """One call under the resident-set sampler (the memory phase, after
        :func:`_measure.trimmed_malloc`); with ``timed`` its time is kept too (the RISE memory
        sweep's lines, whose times are only reported beside their memory)."""
        gc.collect()
        trim_heap()
        with PeakRSS() as peak:
            t0 = time.perf_counter()
            out = self.fn()
            self.dev.sync()
            elapsed = time.perf_counter() - t0
        self.rss.append(peak.increase)
        if timed:
            self.times.append(elapsed)
        del out

    @property
    def median(self) -> float:
        return statistics.median(self.times) if self.times else float("nan")

    @property
    def peak(self) -> int:
        return max(self.rss) if self.rss else 0

    @property
    def gpu_peak(self) -> int | None:
        return max(self.gpu) if self.gpu else None

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Line:
        """A line of an earlier ``--json`` file (its timings; nothing to call)."""
        line = cls(d["case"], d["method"], d["name"], int(d["rows"]), lambda: None, d["kind"])
        line.times = [float(t) for t in d["times_s"]]
        line.rss = [int(r) for r in d["peak_rss_increase_bytes"]]
        line.gpu = [int(g) for g in d.get("peak_gpu_bytes", [])]
        known = {
            "case",
            "method",
            "name",
            "kind",
            "rows",
            "times_s",
            "median_s",
            "peak_rss_increase_bytes",
            "peak_gpu_bytes",
        }
        line.extra = {k: v for k, v in d.items() if k not in known}
        return line

    def as_dict(self) -> dict[str, Any]:
        return {
            "case": self.case,
            "method": self.method,
            "name": self.name,
            "kind": self.kind,
            "rows": self.rows,
            "times_s": self.times,
            "median_s": self.median,
            "peak_rss_increase_bytes": self.rss,
            "peak_gpu_bytes": self.gpu,
            **self.extra,
        }


# ---- model and data -------------------------------------------------------------------------------
def build(st: Settings, batch: int, seed: int) -> tuple[Any, Any, list[int]]:
    """The calibrated ResNet-18, a batch of ``batch`` images and their predicted classes."""
    import torch

    from xaikit.architecture.torch import ResNet18, calibrate_batchnorm

    torch.manual_seed(0)
    model = ResNet18(classes=1000).eval()
    calib = torch.rand(st.calib, 3, st.size, st.size, generator=torch.Generator().manual_seed(1))
    calibrate_batchnorm(model, calib)
    x = torch.rand(batch, 3, st.size, st.size, generator=torch.Generator().manual_seed(seed))
    model, x = model.to(st.device), x.to(st.device)  # calibrated on the CPU, then moved
    with torch.no_grad():
        targets = [int(t) for t in model(x).argmax(1)]
    return model, x, targets


def _to_numpy(out: Any) -> Any:
    import numpy as np

    if hasattr(out, "maps"):  # a CamResult
        out = out.maps
    if hasattr(out, "detach"):
        out = out.detach().cpu().numpy()
    return np.asarray(out, dtype=np.float64)


# ---- CAM family -----------------------------------------------------------------------------------
def _layer_bound(model: Any, x: Any, targets: list[int], to_input: bool) -> Any:
    """One forward + backward of the batch: the gradient of the target scores with respect to
    ``layer4``'s output (or to the input)."""
    import torch

    acts: list[Any] = []
    handle = model.layer4.register_forward_hook(lambda _m, _i, out: acts.append(out))
    try:
        xs = x.detach().requires_grad_(to_input)
        score = model(xs).gather(1, torch.tensor(targets, device=x.device)[:, None]).sum()
        wrt = xs if to_input else acts[0]
        (g,) = torch.autograd.grad(score, wrt)
    finally:
        handle.remove()
    return g


def cam_lines(st: Settings, gradcam: dict[str, Any] | None) -> list[Line]:
    import torch
    from captum.attr import GuidedGradCam, LayerAttribution, LayerGradCam

    import xaikit as xk

    B = st.cam_batch
    model, x, targets = build(st, B, seed=10)
    tt = torch.tensor(targets, device=x.device)

    def ours(method: str) -> Callable[[], Any]:
        return lambda: xk.xai.explain(model, x, target=targets, method=method, layer=LAYER)

    def theirs(cls: Any) -> Callable[[], Any]:
        from _gradcam import class_target

        def fn() -> Any:
            # constructed per call: the object's hooks stay on the model while it lives
            with cls(model=model, target_layers=[model.layer4]) as cam:
                out = cam(input_tensor=x, targets=[class_target(t) for t in targets])
            model.zero_grad(set_to_none=True)  # its loss.backward() leaves parameter gradients
            return out

        return fn

    def captum_gradcam() -> Any:
        attr = LayerGradCam(model, model.layer4).attribute(x, target=tt, relu_attributions=True)
        return LayerAttribution.interpolate(attr, (st.size, st.size), "bilinear")[:, 0]

    def captum_guided() -> Any:
        return GuidedGradCam(model, model.layer4).attribute(x, target=tt)

    lines: list[Line] = []
    for m in (*GRADCAM_PEERS, "guided_gradcam"):
        lines.append(Line("cam", m, f"xaikit {m}", B, ours(m), "xaikit"))
        if gradcam is not None and m in gradcam:
            lines.append(
                Line("cam", m, f"pytorch-grad-cam {gradcam[m].__name__}", B, theirs(gradcam[m]), "peer")
            )
        if m == "gradcam":
            lines.append(Line("cam", m, "captum LayerGradCam (+interpolate)", B, captum_gradcam, "captum"))
        if m == "guided_gradcam":
            lines.append(Line("cam", m, "captum GuidedGradCam", B, captum_guided, "captum"))

    def forward() -> Any:
        with torch.no_grad():
            return model(x)

    # the bounds first in each round (then every method beside its peers)
    bounds: list[Line] = []
    bounds.append(
        Line(
            "cam",
            "*",
            f"bound: forward + backward to {LAYER}",
            B,
            lambda: _layer_bound(model, x, targets, False),
            "bound",
        )
    )
    bounds.append(
        Line("cam", "guided_gradcam", "bound: forward + backward to the input", B, lambda: _layer_bound(model, x, targets, True), "bound")
    )  # fmt: skip
    bounds.append(Line("cam", "eigencam", "bound: forward only", B, forward, "bound"))
    return bounds + lines


def bound_line(case: str, model: Any, x: Any, targets: list[int], rows: int, st: Settings) -> Line:
    """The case's bound (issue 26): a plain ``inference_mode`` forward loop over ``rows`` masked
    rows at the best batch size and memory format of a short search (``_forward_only``)."""
    bs, fmt, rates, cl = best_bound(model, x, targets, rows, st.bound_sizes, Line.dev, log)
    line = Line(
        case,
        case,
        f"bound: inference_mode forward loop, {rows:,} rows, batch {bs}, {fmt}",
        rows,
        forward_loop(model, x, targets, rows, bs, fmt, cl),
        "bound",
    )
    line.extra.update({"bound_batch": bs, "bound_format": fmt, "bound_search_rows_per_s": rates})
    return line


def sized_lines(case: str, rows: int, st: Settings, call: Callable[[int], Any]) -> list[Line]:
    """xaikit's ``case`` at each fixed ``max_batch`` of ``--sizes`` below the rows (kind
    ``xaikit-size``: shown in the table, not used by the targets)."""
    return [
        Line(case, case, f"xaikit {case} max_batch={mb}", rows, lambda mb=mb: call(mb), "xaikit-size")
        for mb in st.xaikit_sizes
        if mb < rows
    ]


def scorecam_lines(st: Settings, gradcam: dict[str, Any] | None) -> list[Line]:
    import xaikit as xk

    B = st.score_batch
    model, x, targets = build(st, B, seed=20)
    rows = B * 512
    lines = [
        bound_line("scorecam", model, x, targets, rows, st),
        Line(
            "scorecam",
            "scorecam",
            'xaikit scorecam max_batch="auto"',
            rows,
            lambda: xk.xai.explain(model, x, target=targets, method="scorecam", layer=LAYER),
            "xaikit",
        ),
    ]
    lines += sized_lines(
        "scorecam",
        rows,
        st,
        lambda mb: xk.xai.explain(model, x, target=targets, method="scorecam", layer=LAYER, max_batch=mb),
    )
    if gradcam is not None and "scorecam" in gradcam:
        from _gradcam import class_target

        cls = gradcam["scorecam"]

        def theirs(batch: int) -> Callable[[], Any]:
            def fn() -> Any:
                with cls(model=model, target_layers=[model.layer4]) as cam:
                    if batch != SCORECAM_DEFAULT_BATCH:
                        cam.batch_size = batch  # read by its get_cam_weights (default 16)
                    return cam(input_tensor=x, targets=[class_target(t) for t in targets])

            return fn

        for bs in sorted({SCORECAM_DEFAULT_BATCH, *st.score_peer_batches}):
            name = f"pytorch-grad-cam ScoreCAM batch_size={bs}"
            if bs == SCORECAM_DEFAULT_BATCH:
                name += " (its default)"
            lines.append(Line("scorecam", "scorecam", name, rows, theirs(bs), "peer"))
            lines[-1].extra["peer_batch"] = bs
    return lines


# ---- RISE -----------------------------------------------------------------------------------------
class ReferenceRISE:
    """RISE in the style of the authors' PyTorch code (github.com/eclique/RISE, ``explanations.py``,
    class ``RISE``), the reference this benchmark compares with. Not xaikit's implementation.

    As there: all N masks are generated up front at full resolution (a grid of ``s`` x ``s`` cells
    kept with probability ``p1``, ``skimage.transform.resize(order=1, mode="reflect")`` to
    (s + 1) x ceil(H / s) pixels, cut to H x W at a random shift) into one float64 array, kept as one
    float32 tensor; for each image the masked stack of all N copies is built at once and forwarded
    in batches of ``gpu_batch`` (100) rows under ``torch.no_grad()``; the maps of all classes are
    one matrix product with the masks, divided by N p1. Here the target class's map is kept.
    """

    def __init__(
        self, model: Any, input_size: tuple[int, int], gpu_batch: int = 100, device: Any = "cpu"
    ) -> None:
        self.model, self.input_size, self.gpu_batch, self.device = model, input_size, gpu_batch, device

    def generate_masks(self, N: int, s: int, p1: float, seed: int = 0) -> None:
        import numpy as np
        import torch
        from skimage.transform import resize

        rng = np.random.RandomState(seed)
        cell_size = np.ceil(np.array(self.input_size) / s)
        up_size = (s + 1) * cell_size
        grid = (rng.rand(N, s, s) < p1).astype("float32")
        masks = np.empty((N, *self.input_size))
        for i in range(N):
            x = rng.randint(0, cell_size[0])
            y = rng.randint(0, cell_size[1])
            masks[i, :, :] = resize(grid[i], up_size, order=1, mode="reflect", anti_aliasing=False)[
                x : x + self.input_size[0], y : y + self.input_size[1]
            ]
        self.masks = torch.from_numpy(masks.reshape(-1, 1, *self.input_size)).float().to(self.device)
        self.N, self.p1 = N, p1

    def __call__(self, x: Any) -> Any:
        import torch

        N = self.N
        _, _, H, W = x.size()
        with torch.no_grad():
            stack = torch.mul(self.masks, x.data)
            p = torch.cat(
                [self.model(stack[i : min(i + self.gpu_batch, N)]) for i in range(0, N, self.gpu_batch)]
            )
            sal = torch.matmul(p.data.transpose(0, 1), self.masks.view(N, H * W))
        return sal.view(p.size(1), H, W) / N / self.p1


def reference_rise(model: Any, x: Any, targets: list[int], n: int, st: Settings) -> Any:
    """One reference call: generate the N masks, then explain each image (its target's map)."""
    import torch

    ref = ReferenceRISE(model, (st.size, st.size), st.rise_ref_batch, x.device)
    ref.generate_masks(n, st.rise_cell, st.rise_p, seed=0)
    return torch.stack([ref(x[i : i + 1])[t] for i, t in enumerate(targets)])


def rise_lines(st: Settings) -> tuple[list[Line], Callable[[int], list[Line]]]:
    import xaikit as xk

    B, N = st.rise_batch, st.rise_masks
    model, x, targets = build(st, B, seed=30)

    def ours(n: int, **kw: Any) -> Callable[[], Any]:
        return lambda: xk.xai.explain(
            model, x, target=targets, method="rise", nsamples=n, cell=st.rise_cell, p=st.rise_p, **kw
        )

    def theirs(n: int) -> Callable[[], Any]:
        return lambda: reference_rise(model, x, targets, n, st)

    lines = [
        bound_line("rise", model, x, targets, B * N, st),
        Line("rise", "rise", f'xaikit rise N={N} max_batch="auto"', B * N, ours(N), "xaikit"),
        Line("rise", "rise", f"reference RISE N={N} (authors' style, batch {st.rise_ref_batch})", B * N, theirs(N), "peer"),
    ]  # fmt: skip
    lines += sized_lines("rise", B * N, st, lambda mb: ours(N, max_batch=mb)())

    def sweep(n: int) -> list[Line]:
        return [
            Line("rise-memory", "rise", f"xaikit rise N={n}", B * n, ours(n), "xaikit"),
            Line("rise-memory", "rise", f"reference RISE N={n}", B * n, theirs(n), "peer"),
        ]

    return lines, sweep


def rise_agreement(st: Settings, n: int = 100) -> dict[str, float]:
    """The reference fed xaikit's own masks (``perturb.rise_masks``) against xaikit, on the RISE
    case's batch with ``n`` masks: the same estimator, so the maps must agree to float rounding
    (with their own masks the two are independent Monte Carlo estimates, too noisy to compare on a
    random-weight model)."""
    import numpy as np
    import torch

    import xaikit as xk
    from xaikit.xai.perturbation.rise import rise_masks

    model, x, targets = build(st, st.rise_batch, seed=30)
    H = W = st.size
    ours = np.asarray(
        xk.xai.explain(model, x, target=targets, method="rise", nsamples=n, cell=st.rise_cell, p=st.rise_p)
    )
    ref = ReferenceRISE(model, (H, W), st.rise_ref_batch, x.device)
    masks = torch.from_numpy(rise_masks(0, 0, n, (H, W), st.rise_cell, st.rise_p)).reshape(n, 1, H, W)
    ref.masks = masks.to(x.device)
    ref.N, ref.p1 = n, st.rise_p
    theirs = np.stack([ref(x[i : i + 1])[t].cpu().numpy() for i, t in enumerate(targets)])
    return {
        "n_masks": n,
        "max_abs_diff": float(np.abs(ours - theirs).max()),
        "max_abs": float(np.abs(ours).max()),
    }


# ---- occlusion ------------------------------------------------------------------------------------
def occlusion_lines(st: Settings) -> list[Line]:
    import math

    from captum.attr import Occlusion

    import xaikit as xk

    B, w, s = st.occ_batch, st.occ_window, st.occ_stride
    model, x, targets = build(st, B, seed=40)
    windows = (math.ceil((st.size - w) / s) + 1) ** 2
    rows = B * (1 + windows)
    lines = [
        bound_line("occlusion", model, x, targets, rows, st),
        Line(
            "occlusion",
            "occlusion",
            f'xaikit occlusion window={w} stride={s} max_batch="auto"',
            rows,
            lambda: xk.xai.explain(model, x, target=targets, method="occlusion", window=w, stride=s),
            "xaikit",
        ),
    ]
    lines += sized_lines(
        "occlusion", rows, st,
        lambda mb: xk.xai.explain(model, x, target=targets, method="occlusion", window=w, stride=s, max_batch=mb),
    )  # fmt: skip
    for ppe in st.occ_ppe:

        def theirs(ppe: int = ppe) -> Any:
            import torch

            with torch.no_grad():
                return Occlusion(model).attribute(
                    x,
                    target=targets,
                    sliding_window_shapes=(3, w, w),
                    strides=(3, s, s),
                    baselines=0.0,
                    perturbations_per_eval=ppe,
                )

        lines.append(
            Line(
                "occlusion",
                "occlusion",
                f"captum Occlusion perturbations_per_eval={ppe}",
                rows,
                theirs,
                "peer",
            )
        )
        lines[-1].extra["peer_batch"] = ppe
    lines[1].extra["windows"] = windows
    return lines


# ---- orchestration --------------------------------------------------------------------------------
def run_case(lines: list[Line], reps: int, keep: bool = False) -> None:
    """One untimed warm-up of every line, then ``reps`` interleaved rounds (the results of the last
    round are kept with ``keep``, for the agreement checks)."""
    for line in lines:
        t0 = time.perf_counter()
        line.fn()
        line.dev.sync()
        log(f"  warm-up {line.case} {line.name}: {time.perf_counter() - t0:.1f}s")
    for r in range(reps):
        t0 = time.perf_counter()
        for line in lines:
            line.once(keep=keep and r == reps - 1)
        log(f"  round {r + 1}/{reps} of {lines[0].case}: {time.perf_counter() - t0:.1f}s")


def memory_phase(
    lines: list[Line], sweeps: list[tuple[Callable[[int], list[Line]], tuple[int, ...]]]
) -> list[Line]:
    """After every timed round: glibc returns freed buffers from now on (one way), each line is
    called once under the resident-set sampler, and the RISE memory sweep runs (one sampled call
    per N, its time kept for the log; on a GPU one more call for its peak GPU memory); returns
    the sweep's lines."""
    log(
        "memory (glibc malloc now returns freed buffers: " + ("yes" if trimmed_malloc() else "no glibc") + ")"
    )
    for line in lines:
        line.memory_once()
        log(f"  memory {line.case} {line.name}: {_mib(line.peak)} MiB")
    out: list[Line] = []
    for sweep, sizes in sweeps:
        for n in sizes:
            for ln in sweep(n):
                if ln.dev.cuda:  # its time and peak GPU memory, without the sampler
                    ln.once()
                ln.memory_once(timed=not ln.dev.cuda)
                gpu = "" if ln.gpu_peak is None else f", GPU {_mib(ln.gpu_peak)} MiB"
                log(f"  memory N={n} {ln.name}: {ln.median:.1f}s, {_mib(ln.peak)} MiB{gpu}")
                out.append(ln)
    return out


def measure(cases: list[str], st: Settings) -> tuple[list[Line], dict[str, Any]]:
    import numpy as np

    lines: list[Line] = []
    sweeps: list[tuple[Callable[[int], list[Line]], tuple[int, ...]]] = []
    facts: dict[str, Any] = {}
    gradcam = None
    if {"cam", "scorecam"} & set(cases):
        import _gradcam

        if _gradcam.available():
            gradcam = _gradcam.load_classes()
        else:
            facts["gradcam_missing"] = "pytorch-grad-cam not installed: its lines are absent"
            log(facts["gradcam_missing"])
    if "cam" in cases:
        log(f"cam: ResNet-18 {st.size}x{st.size}, B={st.cam_batch}, layer {LAYER}")
        case = cam_lines(st, gradcam)
        run_case(case, st.reps)
        lines += case
    if "scorecam" in cases:
        log(f"scorecam: B={st.score_batch}, {st.score_batch * 512} masked rows")
        case = scorecam_lines(st, gradcam)
        run_case(case, st.reps)
        lines += case
    if "rise" in cases:
        log(f"rise: B={st.rise_batch}, N={st.rise_masks}; memory sweep N={st.rise_sweep}")
        case, sweep = rise_lines(st)
        run_case(case, st.reps)
        facts["rise_same_masks"] = rise_agreement(st)
        lines += case
        sweeps.append((sweep, st.rise_sweep))
    if "occlusion" in cases:
        log(f"occlusion: B={st.occ_batch}, window {st.occ_window}, stride {st.occ_stride}")
        case = occlusion_lines(st)
        run_case(case, st.reps, keep=True)
        ours = _to_numpy(next(ln for ln in case if ln.kind == "xaikit").result)
        facts["occlusion_max_abs_diff"] = {
            ln.name: float(np.abs(ours - _to_numpy(ln.result)).max()) for ln in case if ln.kind == "peer"
        }
        facts["occlusion_max_abs_attr"] = float(np.abs(ours).max())
        for ln in case:
            ln.result = None
        lines += case
    lines += memory_phase(lines, sweeps)
    return lines, facts


def profile(cases: list[str], st: Settings) -> dict[str, Any]:
    """torch.profiler over one xaikit call of each forward-only case (after a warm-up call that
    fixes the chunk plan), on the case's own model and batch (see ``_forward_only.profile_call``)."""
    import xaikit as xk

    out: dict[str, Any] = {}
    for case in (c for c in FORWARD_ONLY if c in cases):
        if case == "scorecam":
            model, x, targets = build(st, st.score_batch, seed=20)
            opts: dict[str, Any] = {"method": "scorecam", "layer": LAYER}
        elif case == "rise":
            model, x, targets = build(st, st.rise_batch, seed=30)
            opts = {"method": "rise", "nsamples": st.rise_masks, "cell": st.rise_cell, "p": st.rise_p}
        else:
            model, x, targets = build(st, st.occ_batch, seed=40)
            opts = {"method": "occlusion", "window": st.occ_window, "stride": st.occ_stride}

        def call(
            model: Any = model, x: Any = x, targets: list[int] = targets, opts: dict[str, Any] = opts
        ) -> Any:
            return xk.xai.explain(model, x, target=targets, **opts)

        out[case] = profile_call(model, call, Line.dev)
        p = out[case]
        log(
            f"  profile {case}: {p['wall_s']:.3f}s, {p['forward_calls']} forward calls, outside the forward "
            f"{p['outside_forward_share_wall']:.0%} of the wall time"
            + (
                f", {p['outside_forward_share_kernels']:.0%} of the kernel time"
                if "gpu_kernel_s" in p
                else ""
            )
        )
    return out


def _mib(b: float) -> str:
    return f"{b / 2**20:,.0f}"


def _find(
    lines: list[Line], case: str, kind: str, method: str | None = None, prefix: str = ""
) -> Line | None:
    for ln in lines:
        if ln.case == case and ln.kind == kind and (method is None or ln.method == method):
            if ln.name.startswith(prefix):
                return ln
    return None


def summarize(lines: list[Line], st: Settings) -> dict[str, Any]:
    """The ratios the targets are about (peer median / xaikit median: > 1 means xaikit is faster)."""
    out: dict[str, Any] = {}
    bound = _find(lines, "cam", "bound", "*")
    for m in (*GRADCAM_PEERS, "guided_gradcam"):
        x = _find(lines, "cam", "xaikit", m)
        if x is None:
            continue
        s: dict[str, Any] = {"xaikit_s": x.median}
        for kind in ("peer", "captum"):
            p = _find(lines, "cam", kind, m)
            if p is not None:
                s[f"{kind}_s"] = p.median
                s[f"speedup_vs_{kind}"] = p.median / x.median
        b = _find(lines, "cam", "bound", m) if m in ("guided_gradcam", "eigencam") else None
        for key, ln in (("x_bound", bound), ("x_own_bound", b)):
            if ln is not None:
                s[key] = ln.median / x.median  # the fraction of the bound's speed xaikit reaches
        out[f"cam/{m}"] = s
    for case in ("scorecam", "rise"):
        x = _find(lines, case, "xaikit")
        peers = [ln for ln in lines if ln.case == case and ln.kind == "peer"]
        if x is not None and peers:
            p = next((ln for ln in peers if ln.extra.get("peer_batch") == SCORECAM_DEFAULT_BATCH), peers[0])
            best = _best(peers)
            out[case] = {
                "xaikit_s": x.median,
                "peer_s": p.median,
                "speedup": p.median / x.median,
                "xaikit_rss": x.peak,
                "peer_rss": p.peak,
                "best_peer": best.name,
                "best_peer_s": best.median,
                "speedup_vs_best": best.median / x.median,
            }
    for case in FORWARD_ONLY:
        x, b = _find(lines, case, "xaikit"), _find(lines, case, "bound")
        if x is not None and b is not None:
            out[f"bound/{case}"] = {
                "rows": x.rows,
                "xaikit_s": x.median,
                "bound_s": b.median,
                "x_bound": b.median / x.median,  # xaikit's rows/s as a fraction of the bound's
                "xaikit_rows_per_s": x.rows / x.median,
                "bound_rows_per_s": b.rows / b.median,
                "bound_batch": b.extra.get("bound_batch"),
                "bound_format": b.extra.get("bound_format"),
            }
    sweep = [ln for ln in lines if ln.case == "rise-memory"]
    if sweep:
        out["rise_memory"] = {
            kind: {ln.rows // st.rise_batch: ln.peak for ln in sweep if ln.kind == kind} for kind in ("xaikit", "peer")
        }  # fmt: skip
        if any(ln.gpu for ln in sweep):
            out["rise_memory_gpu"] = {
                kind: {ln.rows // st.rise_batch: ln.gpu_peak or 0 for ln in sweep if ln.kind == kind}
                for kind in ("xaikit", "peer")
            }
    x = _find(lines, "occlusion", "xaikit")
    peers = [ln for ln in lines if ln.case == "occlusion" and ln.kind == "peer"]
    if x is not None and peers:
        out["occlusion"] = {
            ln.name: {"speedup": ln.median / x.median, "peer_s": ln.median, "peer_rss": ln.peak}
            for ln in peers
        }
        best = _best(peers)
        out["occlusion"]["xaikit_s"] = x.median
        out["occlusion"]["best"] = {
            "name": best.name,
            "ppe": best.extra.get("peer_batch"),
            "speedup": best.median / x.median,
        }
    return out


def _best(lines: list[Line]) -> Line:
    """The fastest of ``lines`` (smallest median)."""
    return min(lines, key=lambda ln: ln.median)


def _verdict(ok: bool) -> str:
    return "held" if ok else "missed"


def render(lines: list[Line], summary: dict[str, Any], meta: dict[str, Any], st: Settings) -> str:
    gpu = any(ln.gpu for ln in lines)
    r: list[str] = [START, "## Explanation methods: CAM, occlusion, RISE (issues 14 and 26)", ""]
    if meta["quick"]:
        r += ["**Quick run (`--quick`): tiny settings that only check the script runs; the numbers mean nothing.**", ""]  # fmt: skip
    mc = meta["machine"]
    r.append(
        f"Generated by `{meta['command']}` on {meta['date']} (xaikit commit {meta['commit']}); "
        f"{st.reps} timed rounds after a warm-up; whole run {meta['wall_s']:.0f} s. "
        f"CPU: {mc.get('cpu')}, {mc.get('cores')} cores, {mc.get('ram_gib')} GiB RAM; load average at start "
        f"{meta['load_start']}, at end {meta['load_end']}; torch threads {meta['torch_threads']}; "
        f"device `{meta.get('device', 'cpu')}`: {meta.get('device_info', 'CPU only (no GPU used)')}; "
        f"versions: {', '.join(f'{k} {v}' for k, v in meta['versions'].items())}."
    )
    if meta.get("kept_from"):
        r.append(
            f"This run measured {', '.join(meta['cases_measured'])}; the other cases are kept from "
            f"{meta['kept_from']}, the same settings on the same machine."
        )
    r.append("")
    r.append(
        f"`xaikit.architecture.torch.ResNet18` (1000 classes) at {st.size}×{st.size}, random weights, batch norm "
        "calibrated on a random batch; targets are each image's predicted class, given to every "
        "implementation. Times are medians of interleaved rounds of the whole call, with glibc's default "
        "malloc and no memory sampler; *peak ΔRSS* is the largest resident-set increase during one more, "
        "untimed call of the line over its value just before it (after `gc.collect()` and `malloc_trim`), "
        "taken after every timed round with glibc switched to return freed buffers to the OS (so that each "
        "call's peak is its own; timing so would add page faults to every chunk). *xaikit speed-up* is the "
        "line's median time over xaikit's (> 1: xaikit is faster); *× bound* is the bound's time over the "
        "line's (1 = as fast as the bound)."
        + (
            " *Peak GPU MiB*: `torch.cuda.max_memory_allocated` during the call above the allocation at its start "
            "(after `reset_peak_memory_stats`), the maximum over rounds; every timed call ends with "
            "`torch.cuda.synchronize()`."
            if gpu
            else ""
        )
    )
    r.append("")
    if "gradcam_missing" in meta["facts"]:
        r += [f"*{meta['facts']['gradcam_missing']}.*", ""]
    for case, title in (
        ("cam", f"### Grad-CAM family (B={st.cam_batch}, layer `{LAYER}`)"),
        ("scorecam", f"### Score-CAM (B={st.score_batch}, {st.score_batch * 512} masked forward rows)"),
        ("rise", f"### RISE (B={st.rise_batch}, N={st.rise_masks}, {st.rise_cell}×{st.rise_cell} grid, p={st.rise_p})"),
        ("occlusion", f"### Occlusion (B={st.occ_batch}, window {st.occ_window}, stride {st.occ_stride})"),
    ):  # fmt: skip
        mine = [ln for ln in lines if ln.case == case]
        if not mine:
            continue
        head = "| method | line | median s | rows/s | peak ΔRSS MiB |" + (" peak GPU MiB |" if gpu else "")
        r += [title, "", head + " xaikit speed-up | × bound |", "|---|---|---:|---:|---:|" + ("---:|" if gpu else "") + "---:|---:|"]  # fmt: skip
        bound = _find(lines, "cam", "bound", "*") if case == "cam" else _find(lines, case, "bound")
        peers = [ln for ln in mine if ln.kind == "peer"]  # one method's peers at several settings
        fastest = _best(peers) if case in FORWARD_ONLY and len(peers) > 1 else None
        for ln in mine:
            x = _find(lines, case, "xaikit", ln.method if case == "cam" else None)
            speed = f"{ln.median / x.median:.2f}" if x is not None and ln.kind != "xaikit" else ""
            own = (
                _find(lines, "cam", "bound", ln.method)
                if ln.method in ("guided_gradcam", "eigencam")
                else None
            )
            b = own or bound
            xb = f"{b.median / ln.median:.2f}" if b is not None and ln.kind != "bound" else ""
            name = ln.name + (" **(best)**" if ln is fastest else "")
            g = f" {_mib(ln.gpu_peak or 0)} |" if gpu else ""
            rate = f"{ln.rows / ln.median:,.0f}" if case != "cam" else ""
            r.append(
                f"| {ln.method} | {name} | {ln.median:.3f} | {rate} | {_mib(ln.peak)} |{g} {speed} | {xb} |"
            )
        r.append("")
        if case in FORWARD_ONLY and bound is not None and "bound_search_rows_per_s" in bound.extra:
            found = bound.extra["bound_search_rows_per_s"]
            r.append(
                "The bound: a plain `torch.inference_mode()` forward loop over the same number of masked rows (the "
                "batch repeated times a random mask, built once; the target scores copied to the host at the end), "
                "at the best of a search over batch sizes and memory formats (rows/s: "
                + ", ".join(f"{k} {v:,.0f}" for k, v in found.items())
                + "; channels_last means channels-last rows and a channels-last copy of the model, "
                "channels_last_rows channels-last rows and the model as given, which is what xaikit runs)."
            )
            r.append("")
        if case == "cam":
            r.append(
                f"The bounds: one forward + backward of the batch to `{LAYER}`'s output (hooked; what every "
                "gradient CAM needs at least), to the input (Guided Grad-CAM's least) and one forward (Eigen-CAM's "
                "least). Guided Grad-CAM and Eigen-CAM are set against their own bound, the others against the first. "
                "pytorch-grad-cam's objects are built inside each call (their hooks stay on the model while "
                "they live); its min-max scaled, resized maps and xaikit's upsampled maps are both (B, H, W)."
            )
            r.append("")
        if case == "rise":
            ref = st.rise_ref_batch
            agree = meta["facts"].get("rise_same_masks", {})
            r.append(
                "*reference RISE* is written in the benchmark (`ReferenceRISE`) in the style of the authors' "
                f"PyTorch code (github.com/eclique/RISE): all N masks at full resolution up front, the masked stack "
                f"of all N copies of an image at once, forward passes of {ref} rows under `no_grad`, every class's "
                "map by one matrix product. Its masks differ from xaikit's (another generator), so the maps are "
                "two Monte Carlo estimates of the same expectation. Fed xaikit's own masks, the reference "
                f"gives xaikit's maps: largest absolute difference {agree.get('max_abs_diff', float('nan')):.2g} "
                f"(largest |value| {agree.get('max_abs', float('nan')):.3g}; N={agree.get('n_masks')})."
            )
            r.append("")
            mem = summary.get("rise_memory")
            if mem:
                ns = sorted(mem["xaikit"])
                r += ["Peak ΔRSS (MiB) as N grows (one call each; N=" + ", ".join(map(str, ns)) + "):", ""]
                r.append("| line | " + " | ".join(f"N={n}" for n in ns) + " |")
                r.append("|---|" + "---:|" * len(ns))
                r.append("| xaikit rise | " + " | ".join(_mib(mem["xaikit"][n]) for n in ns) + " |")
                r.append("| reference RISE | " + " | ".join(_mib(mem["peer"].get(n, 0)) for n in ns) + " |")
                gmem = summary.get("rise_memory_gpu")
                if gmem:
                    r.append(
                        "| xaikit rise, peak GPU | "
                        + " | ".join(_mib(gmem["xaikit"].get(n, 0)) for n in ns)
                        + " |"
                    )
                    r.append(
                        "| reference RISE, peak GPU | "
                        + " | ".join(_mib(gmem["peer"].get(n, 0)) for n in ns)
                        + " |"
                    )
                r.append("")
        if case == "occlusion":
            diffs = meta["facts"].get("occlusion_max_abs_diff", {})
            r.append(
                "Agreement with captum (largest absolute difference of the attributions; largest |attribution| "
                f"{meta['facts'].get('occlusion_max_abs_attr', float('nan')):.3g}): "
                + "; ".join(f"{k}: {v:.2g}" for k, v in diffs.items())
                + "."
            )
            r.append("")
    r += ["### Targets (issue 14)", "", "| target | measured | |", "|---|---|---|"]
    for m in GRADCAM_PEERS:
        s = summary.get(f"cam/{m}", {})
        if "speedup_vs_peer" in s:
            r.append(
                f"| {m}: xaikit ≥ 1.0× pytorch-grad-cam | {s['speedup_vs_peer']:.2f}× "
                f"({s['xaikit_s']:.3f} s vs {s['peer_s']:.3f} s; xaikit at {s.get('x_own_bound', s.get('x_bound', 0)):.2f}× "
                f"the bound) | {_verdict(s['speedup_vs_peer'] >= 1.0)} |"
            )
    for m in ("gradcam", "guided_gradcam"):
        s = summary.get(f"cam/{m}", {})
        if "speedup_vs_captum" in s:
            r.append(f"| {m}: vs captum (no target) | {s['speedup_vs_captum']:.2f}× | |")
    for case, label in (("scorecam", "Score-CAM: xaikit ≥ 2× pytorch-grad-cam (batch_size 16)"),
                        ("rise", f"RISE: xaikit ≥ 2× the reference at batch {st.rise_ref_batch}")):  # fmt: skip
        s = summary.get(case)
        if s:
            r.append(
                f"| {label} | {s['speedup']:.2f}× ({s['xaikit_s']:.1f} s vs {s['peer_s']:.1f} s; peak ΔRSS "
                f"{_mib(s['xaikit_rss'])} vs {_mib(s['peer_rss'])} MiB) | {_verdict(s['speedup'] >= 2.0)} |"
            )
    mem = summary.get("rise_memory")
    if mem and len(mem["xaikit"]) >= 2:
        ns = sorted(mem["xaikit"])
        grow_x = mem["xaikit"][ns[-1]] / max(mem["xaikit"][ns[0]], 1)
        grow_p = mem["peer"][ns[-1]] / max(mem["peer"][ns[0]], 1)
        # a few MiB is the resident set's noise (the sampler's resolution), not growth
        flat_x = mem["xaikit"][ns[-1]] - mem["xaikit"][ns[0]] < RSS_NOISE
        r.append(
            f"| RISE memory: xaikit flat in N, the reference grows with N | N={ns[0]}→{ns[-1]}: xaikit "
            f"{_mib(mem['xaikit'][ns[0]])}→{_mib(mem['xaikit'][ns[-1]])} MiB ({grow_x:.1f}×), reference "
            f"{_mib(mem['peer'][ns[0]])}→{_mib(mem['peer'][ns[-1]])} MiB ({grow_p:.1f}×) | "
            f"{_verdict((grow_x < 1.5 or flat_x) and grow_p > grow_x)} |"
        )
    occ = summary.get("occlusion")
    if occ:
        for name, s in occ.items():
            if isinstance(s, dict) and name != "best":
                r.append(f"| occlusion vs {name} (no target) | {s['speedup']:.2f}× | |")
    r += [""]
    r += render_targets(summary, meta)
    r += render_profile(meta.get("profile") or {}, gpu)
    r += [END]
    return "\n".join(r) + "\n"


def gradient_targets(path: Path | None) -> dict[str, Any]:
    """XRAI's and Guided IG's speed-up over PAIR from a ``gradient_family_bench.py --json`` file
    (the 224×224 ResNet-18 rows where present, else the first model's), or a note why absent."""
    if path is None:
        return {
            "missing": "not measured in this run: run benchmarks/gradient_family_bench.py --json F and pass --gradient-json F"
        }
    data = json.loads(path.read_text())
    out: dict[str, Any] = {
        "source": f"{path.name} ({data['meta'].get('date')}, commit {data['meta'].get('commit')})"
    }
    for method in ("xrai", "guided_ig"):
        found = [
            r
            for r in data["rows"]
            if r["method"] == method and r["group"] == "peer" and r["name"].startswith("PAIR")
        ]
        found.sort(key=lambda r: r["model"] != "resnet18")
        if found:
            r = found[0]
            out[method] = {"model": r["model"], "speedup": r["speedup"], "peer_s": r["median_s"]}
    return out


def render_targets(summary: dict[str, Any], meta: dict[str, Any]) -> list[str]:
    """The issue-26 targets with the measured ratios and held / missed."""
    r = ["### Targets (issue 26): forward-only methods at the bound", ""]
    r += ["| target | measured | |", "|---|---|---|"]
    titles = {"scorecam": "Score-CAM", "rise": "RISE", "occlusion": "Occlusion"}
    for case in FORWARD_ONLY:
        b = summary.get(f"bound/{case}")
        if b:
            r.append(
                f"| {titles[case]}: xaikit ≥ 0.9× a plain `inference_mode` forward loop over the same {b['rows']:,} rows "
                f"| {b['x_bound']:.2f}× ({b['xaikit_rows_per_s']:,.0f} vs {b['bound_rows_per_s']:,.0f} rows/s; loop at "
                f"batch {b['bound_batch']}, {b['bound_format']}) | {_verdict(b['x_bound'] >= 0.9)} |"
            )
    s = summary.get("scorecam")
    if s:
        r.append(
            f"| Score-CAM: xaikit ≥ 2× pytorch-grad-cam ScoreCAM at its default batch_size {SCORECAM_DEFAULT_BATCH} "
            f"| {s['speedup']:.2f}× ({s['xaikit_s']:.3f} s vs {s['peer_s']:.3f} s) | {_verdict(s['speedup'] >= 2.0)} |"
        )
        r.append(
            f"| Score-CAM: xaikit ≥ 2× pytorch-grad-cam at its best batch_size ({s['best_peer']}) "
            f"| {s['speedup_vs_best']:.2f}× ({s['xaikit_s']:.3f} s vs {s['best_peer_s']:.3f} s) "
            f"| {_verdict(s['speedup_vs_best'] >= 2.0)} |"
        )
    s = summary.get("rise")
    if s:
        r.append(
            f"| RISE: xaikit ≥ 2× the reference ({s['best_peer']}) | {s['speedup']:.2f}× "
            f"({s['xaikit_s']:.3f} s vs {s['peer_s']:.3f} s) | {_verdict(s['speedup'] >= 2.0)} |"
        )
    occ = summary.get("occlusion")
    if occ and "best" in occ:
        best = occ["best"]
        r.append(
            f"| Occlusion: xaikit ≥ 1.5× captum at its best perturbations_per_eval ({best['ppe']}) | "
            f"{best['speedup']:.2f}× ({occ['xaikit_s']:.3f} s vs {occ[best['name']]['peer_s']:.3f} s) "
            f"| {_verdict(best['speedup'] >= 1.5)} |"
        )
    grad = meta.get("gradient") or {}
    for method, title in (("xrai", "XRAI"), ("guided_ig", "Guided IG")):
        g = grad.get(method)
        if g:
            note = (
                "" if g["model"] == "resnet18" else " (not the 224×224 ResNet-18: the target is not judged)"
            )
            verdict = _verdict(g["speedup"] >= 3.0) if not note else ""
            r.append(
                f"| {title}: xaikit ≥ 3× PAIR on a 224×224 ResNet-18 | {g['speedup']:.2f}× on {g['model']}{note} | {verdict} |"
            )
        else:
            r.append(
                f"| {title}: xaikit ≥ 3× PAIR on a 224×224 ResNet-18 | {grad.get('missing', 'absent from the file')} | |"
            )
    r.append("")
    if grad.get("source"):
        r += [f"XRAI and Guided IG come from `gradient_family_bench.py`'s run {grad['source']}.", ""]
    return r


def render_profile(prof: dict[str, Any], gpu: bool) -> list[str]:
    """The "where the time goes" tables of ``--profile``."""
    if not prof:
        return []
    r = ["### Where the time goes (`--profile`)", ""]
    r.append(
        "torch.profiler over one xaikit call of each forward-only method (after an unprofiled warm-up call that "
        "fixes the chunk plan), with the model's forward wrapped in a `record_function` range. *Outside the "
        "forward (wall)* is (the call's wall time − the CPU time inside the forward ranges) / the wall time: mask "
        "building, upsampling, normalisation, host copies, Python"
        + (
            "; on the GPU the forward's CPU range is mostly kernel launches, so also: *kernels busy* (the sum of "
            "GPU kernel time / the wall time) and *outside the forward (kernels)* (the kernel time not launched "
            "inside a forward range / all kernel time). Ops are ranked by self CUDA time."
            if gpu
            else ". Ops are ranked by self CPU time (the profiler's overhead inflates small ops)."
        )
    )
    r.append("")
    for case, p in prof.items():
        line = (
            f"**{case}**: {p['wall_s']:.3f} s wall under the profiler, {p['forward_calls']} forward calls; outside "
            f"the forward (wall) {p['outside_forward_share_wall']:.0%}"
        )
        if "gpu_kernel_s" in p:
            line += (
                f"; kernels busy {p['gpu_busy_share']:.0%} ({p['gpu_kernel_s']:.3f} s); outside the forward (kernels) "
                f"{p['outside_forward_share_kernels']:.0%}"
            )
        r += [line + ".", ""]
        r += ["| op | calls | self CPU ms | " + ("self CUDA ms | " if gpu else "") + "share of self time |"]
        r += ["|---|---:|---:|" + ("---:|" if gpu else "") + "---:|"]
        for op in p["top_ops"]:
            cuda = f" {op['self_cuda_ms']:.2f} |" if gpu else ""
            r.append(
                f"| `{op['op'].replace('|', '/')}` | {op['calls']} | {op['self_cpu_ms']:.2f} |{cuda} {op['share']:.1%} |"
            )
        r.append("")
    return r


def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for pkg in ("torch", "captum", "grad-cam"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = "absent"
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cases", default=",".join(CASES), help=f"comma-separated, of {', '.join(CASES)}")
    p.add_argument("--reps", type=int, default=None, help="timed rounds (default 2; 1 with --quick)")
    p.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    p.add_argument(
        "--quick", action="store_true", help="tiny settings: checks that it runs; numbers mean nothing"
    )
    _device.add_argument(p)
    p.add_argument(
        "--profile",
        action="store_true",
        help="torch.profiler over one xaikit call of each forward-only method: where the time goes",
    )
    p.add_argument(
        "--gradient-json",
        type=Path,
        default=None,
        help="the --json of gradient_family_bench.py: XRAI and Guided IG rows of the targets table",
    )
    p.add_argument(
        "--sizes",
        default="",
        help="comma-separated max_batch values: extra xaikit lines of the forward-only cases at "
        "those fixed chunk sizes, beside the plan's own (max_batch='auto')",
    )
    p.add_argument("--json", type=Path, default=None, help="write every raw timing here")
    p.add_argument(
        "--keep",
        type=Path,
        default=None,
        help="an earlier --json file: the cases not measured now are taken from it (the report "
        "then says which cases come from which run)",
    )
    p.add_argument(
        "--out",
        type=Path,
        default=None,
        help="markdown file whose methods section is replaced (default docs/benchmarks.md; "
        "a --quick run writes only an --out given, never docs/benchmarks.md)",
    )
    args = p.parse_args(argv)
    docs = ROOT / "docs" / "benchmarks.md"
    if args.quick and args.out is not None and args.out.resolve() == docs.resolve():
        p.error(
            "--quick numbers mean nothing: write them elsewhere (--out /tmp/bench_quick.md), not to docs/benchmarks.md"
        )
    if args.out is None and not args.quick:
        args.out = docs
    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    unknown = sorted(set(cases) - set(CASES))
    if unknown:
        p.error(f"unknown case(s) {unknown}; expected some of {', '.join(CASES)}")
    os.environ.setdefault("TQDM_DISABLE", "1")  # pytorch-grad-cam's ScoreCAM progress bars
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    st = Settings.quick_run() if args.quick else Settings()
    if args.reps:
        st.reps = args.reps
    if args.sizes:
        st.xaikit_sizes = tuple(int(v) for v in args.sizes.split(",") if v.strip())
    Line.dev = Device.pick(args.device)
    st.device = Line.dev.name
    if Line.dev.cuda and not args.quick:  # a GPU's best batch can be larger; its forward passes are cheap
        st.bound_sizes = (*st.bound_sizes, 512)
        st.score_peer_batches = (*st.score_peer_batches, 256)
    load_start = [round(v, 2) for v in os.getloadavg()]
    t0 = time.perf_counter()
    lines, facts = measure(cases, st)
    prof = profile(cases, st) if args.profile else {}
    kept_from = None
    if args.keep:  # an earlier run's other cases, re-rendered beside this run's
        earlier = json.loads(args.keep.read_text())
        # a case's own lines and its sub-cases' ("rise" and "rise-memory") come from this run
        lines += [Line.from_dict(d) for d in earlier["lines"] if d["case"].split("-")[0] not in cases]
        facts = {**earlier.get("facts", {}), **facts}
        kept_from = f"{args.keep.name} ({earlier['date']}, commit {earlier['commit']})"
    summary = summarize(lines, st)
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=False
        ).stdout.strip()
    except OSError:
        commit = "unknown"
    meta = {
        "command": "python benchmarks/methods_bench.py "
        + " ".join(argv if argv is not None else sys.argv[1:]),
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": commit or "unknown",
        "quick": args.quick,
        "wall_s": time.perf_counter() - t0,
        "machine": machine(),
        "load_start": load_start,
        "load_end": [round(v, 2) for v in os.getloadavg()],
        "torch_threads": torch.get_num_threads(),
        "versions": _versions(),
        "device": Line.dev.name,
        "device_info": Line.dev.describe(),
        "profile": prof,
        "gradient": gradient_targets(args.gradient_json),
        "facts": facts,
        "kept_from": kept_from,
        "cases_measured": sorted(cases),
    }
    for key, s in summary.items():
        log(f"{key}: {s}")
    if args.out is not None:
        write_section(args.out, render(lines, summary, meta, st), START, END)
        log(f"wrote {args.out}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        payload = {
            **meta,
            "settings": asdict(st),
            "summary": summary,
            "lines": [ln.as_dict() for ln in lines],
        }
        args.json.write_text(json.dumps(payload, indent=1, default=str))
        log(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
