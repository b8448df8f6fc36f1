"""Model-agnostic methods (issue 29): xaikit against captum at the same number of model
evaluations, and against the forward-only bound; time and peak memory.

Usage:
    python benchmarks/agnostic_bench.py [--batch 4] [--size 224] [--segments 50] [--orders 1]
        [--coalitions 64] [--sobol 2] [--hsic 64] [--ppe 1,4,16,64] [--memory-coalitions 16,32]
        [--reps 3] [--bound-sizes 4,16,64] [--xaikit-max-batch 4] [--captum-channels-last]
        [--profile kernel_shap,lime]
        [--device cpu|cuda] [--threads N] [--quick] [--notes FILE]
        [--json benchmarks/results/DATE-agnostic.json] [--out docs/benchmarks.md]

Model and data: ``xaikit.architecture.torch.ResNet18`` (1000 classes), random weights, BatchNorm
calibrated on a random batch (``methods_bench.build``); ``--batch`` smooth random images of
``--size`` x ``--size`` (a 6x6 grid of random colours, bilinearly upsampled, plus Gaussian noise of
0.02, clipped to [0, 1]: uniform noise gives SLIC a single segment); targets: each image's
predicted class, given to every implementation. Features: SLIC superpixels from xaikit's
``feature_ids`` (the ``n_segments`` between ``--segments`` / 2 and 2 ``--segments`` whose images
average the closest to ``--segments`` superpixels), computed once; the same (B, H, W) integer
mask (relabelled 0 ... F_b - 1 per image) goes to xaikit (``features=``) and to captum
(``feature_mask``, (B, 1, H, W)). Baseline 0.

Lines, each method at the same number of model evaluations (rows) in both libraries, F = the
most superpixels of any image:

* feature ablation: xaikit ``feature_ablation``; captum ``FeatureAblation``: B (1 + F) rows.
* Shapley sampling: xaikit ``shapley_sampling(nsamples=orders)``; captum
  ``ShapleyValueSampling(n_samples=orders)``: B (1 + orders F) rows.
* KernelSHAP: captum ``KernelShap(n_samples=N)`` (its first two coalitions are the full and the
  empty one); xaikit ``kernel_shap(nsamples=N - 2)`` (which adds those two): B N rows.
* LIME: captum ``Lime(n_samples=N)``, xaikit ``lime(nsamples=N)``: B N rows.
  captum's KernelShap and Lime run one forward of the whole batch first (to see that the model
  gives one score per example) and then explain the examples one at a time: B (N + 1) rows.
* Sobol (``nsamples=--sobol`` designs, B d (F + 2) rows) and HSIC (``nsamples=--hsic``, B n rows):
  xaikit only (no captum peer), one call each, for the record.

captum runs at ``perturbations_per_eval`` = each of ``--ppe`` in turn (one call each, under
``torch.no_grad``); the sweep of a method stops at the first setting more than 10% slower than its
best so far, at one whose resident set grew past ``--max-rss-gib`` or that ran out of GPU memory,
or once a setting covers every evaluation in one pass. The fastest is captum's *best*, which is
then called again in every round. ``--captum-channels-last`` adds one call of captum at its best
setting with a channels-last input (what a user could do by hand), in the last round.

The bound: a plain ``torch.inference_mode()`` forward loop over pre-built masked rows, already on
the device (``_forward_only.forward_loop``), as many rows as each method's xaikit call, at the
chunk size and memory layout xaikit's plan chose and, with ``--bound-sizes``, also at the best of
a search over those batch sizes and both layouts (``_forward_only.best_bound``, on the run's
clock); the bound of a method is the faster of the two. Sobol's and HSIC's bounds are scaled from the largest
of those loops (rows / its rate). ``--xaikit-max-batch N`` adds xaikit's four methods at a fixed
chunk of N rows (``max_batch=N``) to the rounds: how much of a gap to the bound is the plan's
choice of chunk size rather than the engine.

A forward pre-hook on the model counts the rows each call gives it (``model_rows`` in ``--json``):
xaikit's calls give one more row than the table's (the single row of its target check), captum's
the table's.

Timing: xaikit's first call (which fixes the chunk plan: memory and timing probes) is made and
reported on its own; then ``--reps`` rounds, each running, method by method, the bound, xaikit
(and xaikit at ``--xaikit-max-batch``) and captum's best next to each other (in an order rotated
from round to round). Each call's wall
time and its CPU time are kept. **Clock**: on a CPU with one torch thread (``--threads 1``; BLAS
and OpenMP are then pinned to one thread too) the ratios use the CPU time of the calling thread
(``time.thread_time``), which a machine shared with other jobs does not inflate by preempting
the call (its wall time does, by up to 3x over a run on the shared 2-core machine this was
written on; its CPU time still moves by 20-50% with the other jobs' use of the caches and memory);
with more threads on a CPU, the process's CPU time; on cuda, wall time. *best* is the
fastest of a line's calls (load only ever slows a call down). Memory: each call's peak
resident-set increase over its value before it (sampled every ms; ``gc.collect()`` and
``malloc_trim`` first; the script re-executes itself with the ``MALLOC_`` thresholds of
``_measure.MALLOC_ENV``), and on cuda its peak ``torch.cuda.max_memory_allocated`` above the
allocation at its start. xaikit's KernelSHAP and LIME are also called once at each of
``--memory-coalitions``: their peak memory should not grow with N.

``--profile m1,m2``: torch.profiler over one xaikit call of each named method
(``_forward_only.profile_call``: the model's forward in a range, the share of the call outside
it, the top ops). The section between the ``agnostic`` markers of ``--out`` is replaced (added at
the end if absent); ``--notes FILE`` is appended inside it. ``--quick`` (64x64, B=2, a dozen
superpixels, a few coalitions) only checks that everything runs.
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
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(HERE), str(ROOT)]

import _device  # noqa: E402
from _device import Device  # noqa: E402
from _forward_only import best_bound, channels_last_copy, forward_loop, profile_call  # noqa: E402
from _measure import MALLOC_ENV, Case, machine, tuned_chunk, write_section  # noqa: E402
from methods_bench import Settings as MethodsSettings  # noqa: E402
from methods_bench import build, render_profile  # noqa: E402

START = "<!-- agnostic:start -->"
END = "<!-- agnostic:end -->"
#: the methods with a captum peer, and that peer's class
PEERS = {
    "feature_ablation": "FeatureAblation",
    "shapley_sampling": "ShapleyValueSampling",
    "kernel_shap": "KernelShap",
    "lime": "Lime",
}
#: xaikit-only methods, called once for the record
RECORD = ("sobol", "hsic")
TITLES = {
    "feature_ablation": "feature ablation",
    "shapley_sampling": "Shapley sampling",
    "kernel_shap": "KernelSHAP",
    "lime": "LIME",
    "sobol": "Sobol",
    "hsic": "HSIC",
}
#: the order of a method's lines in the table (by group)
ORDER = ("xaikit", "xaikit-mb", "record", "bound", "peer", "peer-cl")
#: a captum sweep stops at the first setting this much slower than its best so far
SWEEP_STOP = 1.10
#: what the ratios are taken on (see the module doc); set by :func:`main`
CLOCKS = {
    "thread": "CPU time of the calling thread",
    "process": "CPU time of the process",
    "wall": "wall time",
}


@dataclass
class Settings:
    """The workload; :meth:`quick_run` shrinks it to check that everything runs."""

    size: int = 224
    batch: int = 4
    segments: int = 50
    orders: int = 1
    coalitions: int = 64
    sobol: int = 2
    hsic: int = 64
    ppe: tuple[int, ...] = (1, 4, 16, 64)
    memory_coalitions: tuple[int, ...] = (16, 32)
    reps: int = 3
    bound_sizes: tuple[int, ...] = ()
    max_rss_gib: float = 6.0
    captum_channels_last: bool = False
    xaikit_max_batch: int | None = None
    calib: int = 32
    clock: str = "wall"

    @classmethod
    def quick_run(cls) -> Settings:
        return cls(
            size=64, batch=2, segments=12, coalitions=16, hsic=16, ppe=(1, 4), memory_coalitions=(8,), reps=1,
            calib=8,
        )  # fmt: skip


def log(msg: str) -> None:
    print(msg, flush=True)


# ---- model, images, superpixels ------------------------------------------------------------------
def images(batch: int, size: int, seed: int = 29) -> Any:
    """Smooth random images (B, 3, size, size) in [0, 1]: a 6x6 grid of random colours, bilinearly
    upsampled, plus Gaussian noise of 0.02 (SLIC finds superpixels in them; in uniform noise it
    finds a single segment)."""
    import torch

    g = torch.Generator().manual_seed(seed)
    low = torch.rand(batch, 3, 6, 6, generator=g)
    x = torch.nn.functional.interpolate(low, size=(size, size), mode="bilinear", align_corners=False)
    return (x + 0.02 * torch.randn(x.shape, generator=g)).clamp(0.0, 1.0)


def superpixels(x_host: Any, target: int) -> tuple[Any, int]:
    """xaikit's SLIC features of a (B, 3, H, W) batch with the ``n_segments`` (scanned from
    ``target`` / 2 to 2 ``target``) whose images average the closest to ``target`` superpixels (SLIC
    merges small segments, so it finds fewer than it aims at, and not monotonically);
    (features, n_segments)."""
    from xaikit.xai.agnostic.features import feature_ids

    step = max(1, round(0.04 * target))
    found = []
    for n in range(max(1, target // 2), 2 * target + 1, step):
        feats = feature_ids("slic", x_host, 1, n, "agnostic_bench")
        found.append((abs(float(feats.counts.mean()) - target), n, feats))
    _, n, feats = min(found, key=lambda t: t[:2])
    return feats, n


# ---- lines -----------------------------------------------------------------------------------------
def cpu_clock(clock: str) -> Callable[[], float]:
    """The CPU clock of ``clock`` (the thread's or the process's; on cuda the process's, kept for
    the record)."""
    return time.thread_time if clock == "thread" else time.process_time


@dataclass
class Job:
    """What every line of one run shares."""

    model: Any
    x: Any
    targets: list[int]
    mask: Any  # numpy (B, H, W) int64
    mask_t: Any  # torch (B, 1, H, W) on the device
    F: int
    st: Settings
    dev: Device
    #: rows the model has been given so far (a forward pre-hook counts them)
    seen: list[int] = field(default_factory=lambda: [0])

    def count_rows(self) -> Any:
        """Count every row the model is called on (the hook's handle; remove it when done)."""

        def hook(_module: Any, args: Any) -> None:
            self.seen[0] += int(args[0].shape[0])

        return self.model.register_forward_pre_hook(hook)

    def case(self, name: str, group: str, method: str, rows: int, fn: Callable[[], Any]) -> Case:
        """A line whose every call also records its CPU time (``extra["cpu_s"]``) and the rows it
        gave the model (``extra["model_rows"]``; the bound's channels-last loops run a copy of the
        model and count none)."""
        clock = cpu_clock(self.st.clock)
        c = Case(
            name, group, "torch", "resnet18", self.st.batch, rows, fn, method=method, sync=self.dev.sync,
            gpu_peak=self.dev.peak, gpu_reset=self.dev.reset_peak,
        )  # fmt: skip
        c.extra["cpu_s"] = []
        c.extra["model_rows"] = []

        def timed() -> Any:
            n0, t0 = self.seen[0], clock()
            out = fn()
            self.dev.sync()
            c.extra["cpu_s"].append(clock() - t0)
            c.extra["model_rows"].append(self.seen[0] - n0)
            return out

        c.fn = timed
        return c


def xaikit_options(method: str, st: Settings, coalitions: int | None = None) -> dict[str, Any]:
    """The xaikit options that give the evaluations of captum's settings (see the module doc)."""
    n = st.coalitions if coalitions is None else coalitions
    return {
        "feature_ablation": {},
        "shapley_sampling": {"nsamples": st.orders},
        "kernel_shap": {"nsamples": n - 2},
        "lime": {"nsamples": n},
        "sobol": {"nsamples": st.sobol},
        "hsic": {"nsamples": st.hsic},
    }[method]


def rows_of(method: str, job: Job, peer: bool = False, coalitions: int | None = None) -> int:
    """Forward rows of one call (captum's KernelShap and Lime: one more pass of the batch)."""
    B, F, st = job.st.batch, job.F, job.st
    n = st.coalitions if coalitions is None else coalitions
    per = {
        "feature_ablation": 1 + F,
        "shapley_sampling": 1 + st.orders * F,
        "kernel_shap": n + (1 if peer else 0),
        "lime": n + (1 if peer else 0),
        "sobol": st.sobol * (F + 2),
        "hsic": st.hsic,
    }[method]
    return B * per


def evaluations(method: str, job: Job) -> int:
    """captum's perturbed evaluations of one example (what ``perturbations_per_eval`` groups)."""
    return {
        "feature_ablation": job.F,
        "shapley_sampling": job.st.orders * job.F,
        "kernel_shap": job.st.coalitions,
        "lime": job.st.coalitions,
    }[method]


def xaikit_call(
    job: Job, method: str, keep: dict[str, Any], coalitions: int | None = None, max_batch: int | str = "auto"
) -> Callable[[], Any]:
    import xaikit as xk

    opts = {**xaikit_options(method, job.st, coalitions), "max_batch": max_batch}

    def fn() -> Any:
        out = xk.xai.explain(
            job.model, job.x, target=job.targets, method=method, features=job.mask, seed=0, progress=False, **opts
        )  # fmt: skip
        keep[f"xaikit {method}"] = out
        return out

    return fn


def captum_call(
    job: Job, method: str, ppe: int, keep: dict[str, Any], channels_last: bool = False
) -> Callable[[], Any]:
    import torch
    from captum import attr

    x = job.x.contiguous(memory_format=torch.channels_last) if channels_last else job.x
    explainer = getattr(attr, PEERS[method])(job.model)
    kw: dict[str, Any] = {"baselines": 0.0, "target": job.targets, "feature_mask": job.mask_t,
                          "perturbations_per_eval": ppe}  # fmt: skip
    if method == "shapley_sampling":
        kw["n_samples"] = job.st.orders
    elif method in ("kernel_shap", "lime"):
        kw["n_samples"] = job.st.coalitions

    def fn() -> Any:
        torch.manual_seed(0)
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "You are providing multiple inputs for Lime / Kernel SHAP"
            out = explainer.attribute(x, **kw)
        keep[f"captum {method}"] = out
        return out

    return fn


def run(case: Case) -> None:
    """One timed call of a line (after ``gc.collect()`` and ``malloc_trim``)."""
    from xaikit.backend.memory import trim_heap

    gc.collect()
    trim_heap()
    case.run_once()


def clocked(c: Case, clock: str) -> list[float]:
    """A line's times on the run's clock."""
    return list(c.times) if clock == "wall" else list(c.extra["cpu_s"])


def best(c: Case, clock: str) -> float:
    t = clocked(c, clock)
    return min(t) if t else float("nan")


def _oom(exc: BaseException) -> bool:
    return "out of memory" in str(exc).lower() or type(exc).__name__ == "OutOfMemoryError"


def sweep(job: Job, method: str, keep: dict[str, Any]) -> tuple[list[Case], Case]:
    """captum at each ``perturbations_per_eval`` of ``st.ppe`` once (see the module doc for where the
    sweep stops); returns its lines and the fastest."""
    lines: list[Case] = []
    top: Case | None = None
    evals = evaluations(method, job)
    rows = rows_of(method, job, peer=True)
    clock = job.st.clock
    for ppe in job.st.ppe:
        name = f"captum {PEERS[method]} perturbations_per_eval={ppe}"
        case = job.case(name, "peer", method, rows, captum_call(job, method, ppe, keep))
        case.extra["ppe"] = ppe
        try:
            run(case)
        except RuntimeError as exc:  # a CUDA out-of-memory error: this setting does not fit
            if not _oom(exc):
                raise
            log(f"  captum {method} ppe={ppe}: out of memory; sweep stopped")
            job.dev.reset_peak()
            break
        case.warmed = True
        lines.append(case)
        gpu = f", GPU {case.gpu[-1] / 2**20:,.0f} MiB" if case.gpu else ""
        log(
            f"  captum {method} ppe={ppe}: {case.times[-1]:.2f} s wall, {case.extra['cpu_s'][-1]:.2f} s CPU, "
            f"peak ΔRSS {case.rss[-1] / 2**20:,.0f} MiB{gpu}"
        )
        if top is None or best(case, clock) < best(top, clock):
            top = case
        elif best(case, clock) > SWEEP_STOP * best(top, clock):
            case.extra["stop"] = "slower than the best so far"
            break
        if case.rss[-1] > job.st.max_rss_gib * 2**30:
            case.extra["stop"] = "resident set grew past --max-rss-gib"
            break
        if ppe >= evals:
            case.extra["stop"] = "one pass held every evaluation"
            break
    if top is None:
        raise SystemExit(f"captum {PEERS[method]}: out of memory at perturbations_per_eval={job.st.ppe[0]}")
    top.extra["best"] = True
    return lines, top


def bound_cases(job: Job, rows_by_method: dict[str, int]) -> tuple[dict[str, list[Case]], dict[str, Any]]:
    """Each method's bound lines: at xaikit's chunk and layout, and at the best of ``st.bound_sizes``."""
    chunk, layout = tuned_chunk(job.model)
    chunk = chunk or max(rows_by_method.values())
    settings = [(chunk, layout, "xaikit's chunk and layout")]
    facts: dict[str, Any] = {"xaikit_chunk": chunk, "xaikit_layout": layout}
    cl = channels_last_copy(job.model)
    if job.st.bound_sizes:
        bs, fmt, rates, _ = best_bound(
            job.model,
            job.x,
            job.targets,
            max(rows_by_method.values()),
            job.st.bound_sizes,
            job.dev,
            log,
            clock=cpu_clock(job.st.clock) if job.st.clock != "wall" else time.perf_counter,
        )
        facts["search_rows_per_s"] = rates
        top = max(rows_by_method.values())
        facts["search_rows"] = min(top, 2 * max(min(v, top) for v in job.st.bound_sizes))
        if (bs, fmt) != (chunk, layout):
            settings.append((bs, fmt, "best of the search"))
    out: dict[str, list[Case]] = {}
    for method, rows in rows_by_method.items():
        for bs, fmt, why in settings:
            loop = forward_loop(job.model, job.x, job.targets, rows, bs, fmt, cl)
            c = job.case(f"bound: chunk {min(bs, rows)}, {fmt} ({why})", "bound", method, rows, loop)
            c.extra.update(
                {"chunk": bs, "layout": fmt, "why": "xaikit" if why.startswith("xaikit") else "search"}
            )
            out.setdefault(method, []).append(c)
    return out, facts


# ---- the run ---------------------------------------------------------------------------------------
def measure(st: Settings, dev: Device, profile: list[str]) -> tuple[list[Case], dict[str, Any]]:
    import numpy as np
    import torch

    model, _, _ = build(MethodsSettings(size=st.size, calib=st.calib, device=dev.name), st.batch, seed=29)
    x = dev.to(images(st.batch, st.size))
    with torch.no_grad():
        targets = [int(t) for t in model(x).argmax(1)]
    feats, n_segments = superpixels(x.cpu().numpy(), st.segments)
    B, H, W = st.batch, st.size, st.size
    mask = feats.ids.reshape(B, H, W)
    job = Job(model, x, targets, mask, dev.to(torch.as_tensor(mask)[:, None]), feats.width, st, dev)
    job.count_rows()  # stays on the model for the run (one Python call per forward pass)
    facts: dict[str, Any] = {"counts": feats.counts.tolist(), "F": job.F, "n_segments": n_segments,
                             "targets": targets}  # fmt: skip
    log(f"ResNet-18 {H}x{W}, B={B}; SLIC n_segments={n_segments}: F_b = {feats.counts.tolist()}, F = {job.F}")
    keep: dict[str, Any] = {}

    # xaikit's first call fixes the plan (shared by every method: same model, input shape, output)
    first = job.case("xaikit feature_ablation, first call (fixes the chunk plan)", "first", "feature_ablation",
                     rows_of("feature_ablation", job), xaikit_call(job, "feature_ablation", keep))  # fmt: skip
    run(first)
    log(f"  xaikit first call: {first.times[0]:.2f} s; plan {tuned_chunk(model)}")
    ours = {
        m: job.case(f"xaikit {m}", "xaikit", m, rows_of(m, job), xaikit_call(job, m, keep)) for m in PEERS
    }
    fixed: dict[str, list[Case]] = {m: [] for m in PEERS}
    if st.xaikit_max_batch:  # the same calls at a fixed chunk size, beside the plan's
        mb = st.xaikit_max_batch
        for m in PEERS:
            c = job.case(f"xaikit {m} max_batch={mb}", "xaikit-mb", m, rows_of(m, job),
                         xaikit_call(job, m, keep, max_batch=mb))  # fmt: skip
            c.extra["max_batch"] = mb
            fixed[m].append(c)

    lines: list[Case] = [first]
    tops: dict[str, Case] = {}
    for m in PEERS:
        log(f"captum {PEERS[m]} sweep ({rows_of(m, job, peer=True)} rows)")
        swept, tops[m] = sweep(job, m, keep)
        lines += swept
    bounds, facts["bound"] = bound_cases(job, {m: rows_of(m, job) for m in PEERS})
    for group in bounds.values():  # kernel selection of the loop's shapes; not timed
        for c in group:
            c.fn()
            c.extra["cpu_s"].clear()
    facts["load_after_sweep"] = [round(v, 2) for v in os.getloadavg()]
    cl_lines: list[Case] = []
    for r in range(st.reps):
        t0 = time.perf_counter()
        for m in PEERS:
            trio = [*bounds[m], ours[m], *fixed[m], tops[m]]
            for c in trio[r % len(trio) :] + trio[: r % len(trio)]:
                run(c)
            if m == "feature_ablation":  # the two attributions of the same ablation
                a = np.asarray(keep["xaikit feature_ablation"], dtype=np.float64)
                b = keep["captum feature_ablation"].detach().cpu().double().numpy()
                facts["ablation_max_abs_diff"] = max(
                    facts.get("ablation_max_abs_diff", 0.0), float(np.abs(a - b).max())
                )
                facts["ablation_max_abs"] = float(np.abs(b).max())
            keep.clear()
            if st.captum_channels_last and r == st.reps - 1:
                ppe = tops[m].extra["ppe"]
                c = job.case(f"captum {PEERS[m]} perturbations_per_eval={ppe}, channels-last input", "peer-cl", m,
                             tops[m].rows, captum_call(job, m, ppe, keep, channels_last=True))  # fmt: skip
                c.extra["ppe"] = ppe
                run(c)
                keep.clear()
                cl_lines.append(c)
        facts.setdefault("load_rounds", []).append(round(os.getloadavg()[0], 2))
        log(
            f"  round {r + 1}/{st.reps}: {time.perf_counter() - t0:.1f} s wall, load {facts['load_rounds'][-1]}"
        )
    lines += [*ours.values(), *(c for group in fixed.values() for c in group), *cl_lines]
    lines += [c for group in bounds.values() for c in group]

    for m in RECORD:  # for the record: one call each
        c = job.case(f"xaikit {m}", "record", m, rows_of(m, job), xaikit_call(job, m, keep))
        run(c)
        log(f"  xaikit {m}: {c.times[0]:.2f} s wall, {c.extra['cpu_s'][0]:.2f} s CPU")
        lines.append(c)
        keep.clear()
    for m in ("kernel_shap", "lime"):  # memory as N grows
        for n in st.memory_coalitions:
            c = job.case(f"xaikit {m} N={n}", "memory", m, rows_of(m, job, coalitions=n),
                         xaikit_call(job, m, keep, n))  # fmt: skip
            c.extra["coalitions"] = n
            run(c)
            log(f"  memory {m} N={n}: {c.times[0]:.2f} s, peak ΔRSS {c.rss[0] / 2**20:,.0f} MiB")
            lines.append(c)
            keep.clear()
    prof: dict[str, Any] = {}
    for m in profile:
        prof[m] = profile_call(model, xaikit_call(job, m, keep), dev)
        keep.clear()
        share = prof[m]["outside_forward_share_wall"]
        log(f"  profile {m}: {prof[m]['wall_s']:.2f} s, outside the forward {share:.0%}")
    facts["profile"] = prof
    return lines, facts


# ---- the report -----------------------------------------------------------------------------------
def bound_of(lines: list[Case], method: str, rows: int, clock: str) -> tuple[float, Case]:
    """The fastest bound for ``rows`` rows of ``method``: its own lines, else the largest loop's
    rate (Sobol, HSIC)."""
    own = [(best(c, clock), c) for c in lines if c.group == "bound" and c.method == method]
    if own:
        return min(own, key=lambda t: t[0])
    loops = [c for c in lines if c.group == "bound"]
    big = max(c.rows for c in loops)
    return min(((best(c, clock) * rows / c.rows, c) for c in loops if c.rows == big), key=lambda t: t[0])


def summarize(lines: list[Case], clock: str) -> dict[str, Any]:
    """Per method: xaikit's, captum's best and the bound's best times on ``clock`` and on the wall,
    and the ratios."""
    out: dict[str, Any] = {}
    for m in (*PEERS, *RECORD):
        ours = next((c for c in lines if c.group in ("xaikit", "record") and c.method == m), None)
        if ours is None:
            continue
        s: dict[str, Any] = {"rows": ours.rows}
        for key, clk in (("", clock), ("wall_", "wall")):
            b, bc = bound_of(lines, m, ours.rows, clk)
            s.update(
                {f"{key}xaikit_s": best(ours, clk), f"{key}bound_s": b, f"{key}x_bound": b / best(ours, clk)}
            )
            top = next(
                (c for c in lines if c.group == "peer" and c.method == m and c.extra.get("best")), None
            )
            if top is not None:
                s.update({f"{key}captum_s": best(top, clk), "captum_ppe": top.extra["ppe"],
                          f"{key}speedup": best(top, clk) / best(ours, clk)})  # fmt: skip
            cl = next((c for c in lines if c.group == "peer-cl" and c.method == m), None)
            if cl is not None:
                s.update(
                    {f"{key}captum_cl_s": best(cl, clk), f"{key}speedup_cl": best(cl, clk) / best(ours, clk)}
                )
            own = [
                c for c in lines if c.group == "bound" and c.method == m and c.extra.get("why") == "xaikit"
            ]
            if own:
                s[f"{key}x_bound_own_chunk"] = best(own[0], clk) / best(ours, clk)
            mb = next((c for c in lines if c.group == "xaikit-mb" and c.method == m), None)
            if mb is not None:
                s.update({"max_batch": mb.extra["max_batch"], f"{key}mb_s": best(mb, clk),
                          f"{key}mb_x_bound": b / best(mb, clk)})  # fmt: skip
                if top is not None:
                    s[f"{key}mb_speedup"] = best(top, clk) / best(mb, clk)
        s["bound_line"] = bc.name
        out[m] = s
    return out


def _mib(b: float | None) -> str:
    return "" if b is None else f"{b / 2**20:,.0f}"


def render(lines: list[Case], summary: dict[str, Any], meta: dict[str, Any], st: Settings) -> str:
    facts, clock = meta["facts"], st.clock
    gpu = any(c.gpu for c in lines)
    cpu_col = clock != "wall"
    r = [START, "## Model-agnostic methods (issue 29)", ""]
    r.append(
        f"Generated by `{meta['command']}` on {meta['date']} (xaikit commit {meta['commit']}); whole run "
        f"{meta['seconds']:.0f} s. CPU: {meta['machine'].get('cpu')}, {meta['machine'].get('cores')} cores, torch "
        f"threads {meta['threads']}; load average at start {meta['load_start']}, after the captum sweeps "
        f"{facts.get('load_after_sweep')}, after each round (1 min) {facts.get('load_rounds')}, at end "
        f"{meta['load_end']}; versions: {meta['versions']}. Device `{meta['device']}`: {meta['device_info']}."
    )
    r += ["", (
        f"Settings: `xaikit.architecture.torch.ResNet18` (random weights, BatchNorm calibrated), {st.size}×{st.size}, "
        f"B={st.batch} smooth random images, targets = the predicted classes; features: SLIC superpixels from "
        f"xaikit's `feature_ids` (n_segments={facts['n_segments']}, aiming at {st.segments}): F_b = "
        f"{', '.join(map(str, facts['counts']))} (F = {facts['F']}), the same (B, H, W) mask given to xaikit "
        f"(`features=`) and captum (`feature_mask`); baseline 0. Evaluations: Shapley sampling {st.orders} "
        f"order(s), KernelSHAP and LIME N = {st.coalitions} coalitions per image (captum `n_samples`; xaikit "
        f"`kernel_shap(nsamples={st.coalitions - 2})` plus its full and empty coalitions, `lime(nsamples="
        f"{st.coalitions})`), Sobol {st.sobol} designs, HSIC {st.hsic} coalitions. captum's KernelShap and Lime "
        f"add one pass of the batch (B rows) before explaining the images one by one."
    )]  # fmt: skip
    r += ["", (
        f"Ratios are on the **{CLOCKS[clock]}**. *calls*: xaikit, captum's best and the bound {st.reps} rounds "
        "(method by method, the three next to each other, their order rotated each round); captum's other "
        "settings one call each (the sweep; its best setting's sweep call counts among its calls). *best*: the "
        "fastest call"
        + (f" (wall and {CLOCKS[clock]})" if cpu_col else "")
        + ". *× bound*: the bound's best time for the line's rows / the line's. *speed-up*: the line's best "
        "time / xaikit's (> 1: xaikit is faster). *peak ΔRSS*: the largest resident-set increase during a call, "
        "the maximum over its calls" + ("; *peak GPU*: `max_memory_allocated` above the call's start." if gpu else ".")
    )]  # fmt: skip
    first = next(c for c in lines if c.group == "first")
    b = facts["bound"]
    r += ["", f"xaikit's plan: chunks of {b['xaikit_chunk']} rows, {b['xaikit_layout']}; its first call (feature "
          f"ablation, with the plan's memory and timing probes) took {first.times[0]:.1f} s wall, "
          f"{first.extra['cpu_s'][0]:.1f} s CPU.", ""]  # fmt: skip
    if b.get("search_rows_per_s"):
        rates = ", ".join(f"{k} {v:,.1f}" for k, v in b["search_rows_per_s"].items())
        r += [f"Bound search (rows/s on the {CLOCKS[clock]}, {b['search_rows']} rows each): {rates}.", ""]
    cols = ["method", "line", "rows", "calls", "best wall s"] + (["best CPU s"] if cpu_col else [])
    cols += ["rows/s", "× bound", "speed-up", "peak ΔRSS MiB"] + (["peak GPU MiB"] if gpu else [])
    r += ["| " + " | ".join(cols) + " |", "|---|---|" + "---:|" * (len(cols) - 2)]
    for m in (*PEERS, *RECORD):
        s = summary.get(m)
        if s is None:
            continue
        group = [c for c in lines if c.method == m and c.group in ORDER]
        for c in sorted(group, key=lambda c: ORDER.index(c.group)):
            t = best(c, clock)
            xb = bound_of(lines, m, c.rows, clock)[0] / t
            spd = f"{t / s['xaikit_s']:.2f}×" if c.group.startswith("peer") else ""
            name = c.name + (" **(best)**" if c.extra.get("best") else "")
            cells = [TITLES[m], name, f"{c.rows:,}", str(len(c.times)), f"{min(c.times):.2f}"]
            cells += [f"{t:.2f}"] if cpu_col else []
            cells += [f"{c.rows / t:,.1f}", f"{xb:.2f}", spd, _mib(c.peak_rss)]
            cells += [_mib(max(c.gpu)) if c.gpu else ""] if gpu else []
            r.append("| " + " | ".join(cells) + " |")
        if m in RECORD:
            r.append(f"| {TITLES[m]} | bound: scaled from {s['bound_line']} ({bound_of(lines, m, s['rows'], clock)[1].rows} "
                     f"rows) | {s['rows']:,} | | | " + ("| " if cpu_col else "") + "| 1.00 | | |" + (" |" if gpu else ""))  # fmt: skip
    wall = " (wall)" if cpu_col else ""
    r += ["", "Targets of issue 29: xaikit ≥ 2× captum at its best `perturbations_per_eval` at the same number of "
          "model evaluations, and ≥ 0.9× the forward-only bound" + (f"; judged on the {CLOCKS[clock]}, the wall-time "
          "ratios beside them" if cpu_col else "") + ":", ""]  # fmt: skip
    mb = next((v["max_batch"] for v in summary.values() if "max_batch" in v), None)
    heads = ["method", "captum's best ppe", "speed-up (≥ 2×)"] + ([f"speed-up{wall}"] if cpu_col else [])
    heads += ["× bound (≥ 0.9)"] + ([f"× bound{wall}"] if cpu_col else []) + ["× the bound at xaikit's chunk"]
    heads += [f"max_batch={mb}: speed-up", f"max_batch={mb}: × bound"] if mb else []
    r += ["| " + " | ".join(heads) + " |", "|---|---:|---|" + ("---:|" if cpu_col else "") + "---|"
          + ("---:|" if cpu_col else "") + "---:|" + ("---:|---:|" if mb else "")]  # fmt: skip
    for m in PEERS:
        s = summary.get(m)
        if s is None or "speedup" not in s:
            continue
        cells = [
            TITLES[m],
            str(s["captum_ppe"]),
            f"{s['speedup']:.2f}× {'held' if s['speedup'] >= 2 else 'missed'}",
        ]
        cells += [f"{s['wall_speedup']:.2f}×"] if cpu_col else []
        cells += [f"{s['x_bound']:.2f} {'held' if s['x_bound'] >= 0.9 else 'missed'}"]
        cells += [f"{s['wall_x_bound']:.2f}"] if cpu_col else []
        cells += [f"{s['x_bound_own_chunk']:.2f}" if "x_bound_own_chunk" in s else ""]
        if mb:
            cells += [f"{s['mb_speedup']:.2f}×", f"{s['mb_x_bound']:.2f}"] if "mb_s" in s else ["", ""]
        r.append("| " + " | ".join(cells) + " |")
    mem = [c for c in lines if c.group == "memory"]
    if mem:
        sizes = sorted({*st.memory_coalitions, st.coalitions})
        r += ["", "xaikit's peak memory as the coalitions grow (one call each; N = "
              f"{st.coalitions}: the maximum over the rounds):", ""]  # fmt: skip
        r += ["| line | " + " | ".join(f"N={n}" for n in sizes) + " |", "|---|" + "---:|" * len(sizes)]
        for m in ("kernel_shap", "lime"):
            at = {c.extra["coalitions"]: c for c in mem if c.method == m}
            at[st.coalitions] = next(c for c in lines if c.group == "xaikit" and c.method == m)
            r.append(
                f"| {TITLES[m]}, peak ΔRSS MiB | " + " | ".join(_mib(at[n].peak_rss) for n in sizes) + " |"
            )
            if gpu:
                r.append(
                    f"| {TITLES[m]}, peak GPU MiB | " + " | ".join(_mib(max(at[n].gpu)) for n in sizes) + " |"
                )
            r.append(f"| {TITLES[m]}, rows | " + " | ".join(f"{at[n].rows:,}" for n in sizes) + " |")
    if "ablation_max_abs_diff" in facts:
        r += ["", f"Agreement: xaikit's feature ablation against captum's (same mask, same baseline): largest "
              f"absolute difference {facts['ablation_max_abs_diff']:.2g} (largest |attribution| "
              f"{facts['ablation_max_abs']:.3g})."]  # fmt: skip
    r += [""] + render_profile(facts.get("profile", {}), gpu)
    if meta.get("notes"):
        r += ["", meta["notes"].strip(), ""]
    r += [END, ""]
    return "\n".join(r)


def _versions() -> str:
    import importlib.metadata as md

    found = []
    for pkg in ("torch", "captum", "scikit-image", "scikit-learn", "numpy"):
        try:
            found.append(f"{pkg} {md.version(pkg)}")
        except md.PackageNotFoundError:
            pass
    return ", ".join(found)


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(v) for v in text.split(",") if v.strip())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    d = Settings()
    p.add_argument("--batch", type=int, default=None, help=f"images (default {d.batch})")
    p.add_argument("--size", type=int, default=None, help=f"image side (default {d.size})")
    p.add_argument(
        "--segments", type=int, default=None, help=f"superpixels SLIC aims at (default {d.segments})"
    )
    p.add_argument("--orders", type=int, default=None, help=f"Shapley sampling orders (default {d.orders})")
    p.add_argument("--coalitions", type=int, default=None,
                   help=f"KernelSHAP/LIME evaluations per image (default {d.coalitions})")  # fmt: skip
    p.add_argument("--sobol", type=int, default=None, help=f"Sobol designs, a power of 2 (default {d.sobol})")
    p.add_argument("--hsic", type=int, default=None, help=f"HSIC coalitions (default {d.hsic})")
    p.add_argument("--ppe", default=None, help="captum perturbations_per_eval sweep (default 1,4,16,64)")
    p.add_argument("--memory-coalitions", default=None, help="extra N for the memory calls (default 16,32)")
    p.add_argument("--reps", type=int, default=None, help=f"rounds (default {d.reps})")
    p.add_argument(
        "--bound-sizes", default=None, help="also search the bound at these batch sizes, both layouts"
    )
    p.add_argument(
        "--max-rss-gib", type=float, default=None, help="a captum sweep stops past this ΔRSS (default 6)"
    )
    p.add_argument(
        "--captum-channels-last", action="store_true", help="captum's best also on a channels-last input"
    )
    p.add_argument("--xaikit-max-batch", type=int, default=None,
                   help="also xaikit at this fixed chunk size (max_batch), in the rounds")  # fmt: skip
    p.add_argument(
        "--profile", default="", help="xaikit methods to run under torch.profiler (comma-separated)"
    )
    p.add_argument("--threads", type=int, default=None, help="torch (and BLAS) threads (default: torch's)")
    p.add_argument(
        "--quick", action="store_true", help="tiny settings: checks that it runs; numbers mean nothing"
    )
    _device.add_argument(p)
    p.add_argument(
        "--notes", type=Path, default=None, help="markdown appended inside the section (the reading)"
    )
    p.add_argument("--json", type=Path, default=None, help="write every raw timing here")
    p.add_argument("--out", type=Path, default=None, help="markdown file whose agnostic section is replaced")
    args = p.parse_args(argv)
    docs = ROOT / "docs" / "benchmarks.md"
    if args.quick and args.out is not None and args.out.resolve() == docs.resolve():
        p.error("--quick numbers mean nothing: write them elsewhere (--out /tmp/agnostic_quick.md)")
    profile = [m for m in args.profile.split(",") if m]
    bad = sorted(set(profile) - set(PEERS) - set(RECORD))
    if bad:
        p.error(f"--profile: unknown method(s) {bad}; expected some of {(*PEERS, *RECORD)}")
    if any(os.environ.get(k) != v for k, v in MALLOC_ENV.items()):  # each call's peak its own
        env = {**os.environ, **MALLOC_ENV}
        if args.threads:  # BLAS (captum's and xaikit's host-side fits) and OpenMP on as many threads
            env.update(
                {k: str(args.threads) for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}
            )
        return subprocess.call(
            [sys.executable, __file__, *(argv if argv is not None else sys.argv[1:])], env=env
        )
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    dev = Device.pick(args.device)
    st = Settings.quick_run() if args.quick else Settings()
    for key in ("batch", "size", "segments", "orders", "coalitions", "sobol", "hsic", "reps", "max_rss_gib"):
        if getattr(args, key) is not None:
            setattr(st, key, getattr(args, key))
    if args.ppe:
        st.ppe = _ints(args.ppe)
    if args.memory_coalitions:
        st.memory_coalitions = _ints(args.memory_coalitions)
    if args.bound_sizes:
        st.bound_sizes = _ints(args.bound_sizes)
    st.captum_channels_last = args.captum_channels_last
    st.xaikit_max_batch = args.xaikit_max_batch
    st.clock = "wall" if dev.cuda else ("thread" if torch.get_num_threads() == 1 else "process")
    if (
        st.coalitions < 3
        or st.sobol < 2
        or st.sobol & (st.sobol - 1)
        or min(st.memory_coalitions, default=3) < 3
    ):
        p.error("--coalitions and --memory-coalitions must be >= 3, --sobol a power of two >= 2")
    load_start, t0 = [round(v, 2) for v in os.getloadavg()], time.perf_counter()
    lines, facts = measure(st, dev, profile)
    summary = summarize(lines, st.clock)
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT
    ).stdout.strip()
    meta = {
        "command": "python benchmarks/agnostic_bench.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "commit": commit or "unknown",
        "seconds": time.perf_counter() - t0, "machine": machine(), "threads": torch.get_num_threads(),
        "load_start": load_start, "load_end": [round(v, 2) for v in os.getloadavg()], "versions": _versions(),
        "device": dev.name, "device_info": dev.describe(), "facts": facts,
        "notes": args.notes.read_text() if args.notes else "",
    }  # fmt: skip
    for m, s in summary.items():
        log(
            f"{m}: " + ", ".join(f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}" for k, v in s.items())
        )
    text = render(lines, summary, meta, st)
    print(text)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        tmp = args.json.with_name(args.json.name + ".tmp")
        rows = [{**c.as_dict(), "median_cpu_s": statistics.median(c.extra["cpu_s"]) if c.extra["cpu_s"] else None}
                for c in lines]  # fmt: skip
        payload = {"meta": meta, "settings": asdict(st), "summary": summary, "lines": rows}
        tmp.write_text(json.dumps(payload, indent=1, default=str))
        os.replace(tmp, args.json)
    if args.out:
        write_section(args.out, text, START, END)
    return 0


if __name__ == "__main__":
    sys.exit(main())
