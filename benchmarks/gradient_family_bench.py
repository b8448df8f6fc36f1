"""The gradient methods of issue 15 (VarGrad, Input x Gradient, Expected Gradients, Blur IG,
Guided IG, XRAI) against captum and PAIR ``saliency`` at equal settings, with the fused bound.

Usage:
    python benchmarks/gradient_family_bench.py [--models lenet,resnet18] [--methods ...]
        [--reps 3] [--device cpu|cuda] [--quick]
        [--json benchmarks/results/DATE-gradient-family.json] [--out docs/benchmarks.md]

Models (torch, random weights, nothing downloads; ``--device cuda``, the default when torch sees a
GPU, puts the model and inputs on the GPU: captum gets device tensors, PAIR gets numpy images and
its ``call_model_function`` moves them to the device and the gradients back; every timed call ends
with ``torch.cuda.synchronize()`` and the table gets each call's peak GPU memory):

* ``lenet``: the LeNet of ``xaikit.architecture`` (32x32x3, 10 classes), a batch of 16.
* ``resnet18``: ``xaikit.architecture.torch.ResNet18`` at 224x224 (1000 classes), batch-norm
  statistics calibrated on a random batch; a batch of 4 and fewer steps (its rows cost ~100x).

Every implementation explains the same inputs (uniform in [0, 1)) for the same classes (each
image's predicted class, given explicitly). Per method, one line each:

* ``xaikit``: ``xk.xai.explain(model, x, method=..., target=...)`` with ``max_batch="auto"``;
* the peers: captum ``NoiseTunnel(Saliency, "vargrad")``, ``InputXGradient``, ``GradientShap``
  (all rows in one call, captum's default); PAIR ``BlurIG``, ``GuidedIG`` and ``XRAI``, which
  explain one image at a time, called per image with ``batch_size`` = the steps where they take
  one (their fastest setting);
* ``bound``: one forward + backward of the method's gradient rows, pre-built and fed in chunks of
  xaikit's chunk size: what any implementation of the method has to pay for its gradients.

Also the peak memory of xaikit as the steps (Blur IG, Guided IG) and noise samples (VarGrad)
grow, on the LeNet: one call each.

Timing: one untimed warm-up of every line, then ``--reps`` interleaved rounds; medians. Memory:
each call's peak resident-set increase over its value just before it (sampled every ms). The
section between the ``gradient-family`` markers of ``--out`` is replaced (added if absent).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(HERE), str(ROOT)]

import _device  # noqa: E402
from _device import Device  # noqa: E402
from _measure import MALLOC_ENV, Case, interleave, machine, tuned_chunk, write_section  # noqa: E402

START = "<!-- gradient-family:start -->"
END = "<!-- gradient-family:end -->"
METHODS = ("vargrad", "input_x_gradient", "expected_gradients", "blur_ig", "guided_ig", "xrai")
MODELS = ("lenet", "resnet18")
#: the issue's targets: peer median / xaikit median
TARGETS = {"guided_ig": ("PAIR", 3.0), "xrai": ("PAIR", 3.0), "vargrad": ("captum", 1.3),
           "input_x_gradient": ("captum", 1.3), "expected_gradients": ("captum", 1.3)}  # fmt: skip


@dataclass
class Settings:
    """One model's workload."""

    model: str
    batch: int
    noise: int  # VarGrad noise samples, Expected Gradients draws
    steps: int  # Blur IG, Guided IG and XRAI path steps
    max_sigma: float
    refs: int = 64  # Expected Gradients' reference samples
    sweep: tuple[int, ...] = ()  # steps / samples of the memory sweep


SETTINGS = {
    "lenet": Settings("lenet", batch=16, noise=25, steps=50, max_sigma=8.0, sweep=(25, 50, 100, 200)),
    "resnet18": Settings("resnet18", batch=4, noise=8, steps=16, max_sigma=50.0),
}


def log(msg: str) -> None:
    print(msg, flush=True)


def build(st: Settings, dev: Device) -> tuple[Any, Any, Any, list[int], int]:
    """(model, x, references, targets, image size), on ``dev``."""
    import torch

    if st.model == "lenet":
        from _models import torch_model

        model, size = torch_model("lenet"), 32
    else:
        from xaikit.architecture.torch import ResNet18, calibrate_batchnorm

        torch.manual_seed(0)
        model, size = ResNet18(classes=1000).eval(), 224
        calibrate_batchnorm(model, torch.rand(8, 3, size, size, generator=torch.Generator().manual_seed(1)))
    x = torch.rand(st.batch, 3, size, size, generator=torch.Generator().manual_seed(2))
    refs = torch.rand(st.refs, 3, size, size, generator=torch.Generator().manual_seed(3))
    model, x, refs = dev.to(model), dev.to(x), dev.to(refs)  # built (and calibrated) on the CPU
    with torch.no_grad():
        targets = [int(t) for t in model(x).argmax(1)]
    return model, x, refs, targets, size


def bound(model: Any, rows: int, size: int, chunk: int, targets: list[int]) -> Any:
    """The gradient of ``rows`` pre-built rows, ``chunk`` at a time: the least the method pays."""
    import torch

    device = next(model.parameters()).device
    data = torch.rand(min(rows, chunk), 3, size, size, generator=torch.Generator().manual_seed(4)).to(device)
    t = torch.as_tensor([targets[i % len(targets)] for i in range(len(data))], device=device)

    def run() -> None:
        done = 0
        while done < rows:
            n = min(chunk, rows - done)
            xr = data[:n].clone().requires_grad_(True)
            out = model(xr)
            torch.autograd.grad(out.gather(1, t[:n, None]).sum(), xr)
            done += n

    return run


def xaikit_call(model: Any, x: Any, targets: list[int], method: str, **opts: Any) -> Any:
    import xaikit as xk

    return lambda: xk.xai.explain(model, x, target=targets, method=method, seed=0, **opts)


def _pair_call_model(model: Any) -> Any:
    """PAIR's call_model_function for the channel-first torch model: the gradient of the class in
    ``call_model_args`` for a (n, H, W, C) numpy batch, moved to the model's device and back."""
    import torch
    from saliency.core import base

    device = next(model.parameters()).device

    def call(images: Any, call_model_args: Any = None, expected_keys: Any = None) -> dict[str, Any]:
        t = (
            torch.as_tensor(images, dtype=torch.float32, device=device)
            .permute(0, 3, 1, 2)
            .requires_grad_(True)
        )
        out = model(t)[:, call_model_args["class"]].sum()
        (g,) = torch.autograd.grad(out, t)
        return {base.INPUT_OUTPUT_GRADIENTS: g.permute(0, 2, 3, 1).cpu().numpy()}

    return call


def pair_call(model: Any, x: Any, targets: list[int], method: str, st: Settings) -> Any:
    """PAIR ``saliency`` one image at a time, at the same settings (Guided IG through
    ``_guided_ig``'s numpy-2 shim: PAIR 0.9.0 calls ``np.quantile(interpolation=...)``)."""
    import numpy as np
    import saliency.core as pair
    from _guided_ig import pair_guided_ig
    from _xrai import pair_xrai

    xc = x.cpu().numpy()  # PAIR works on numpy images; its call_model_function moves them
    images = np.ascontiguousarray(np.transpose(xc, (0, 2, 3, 1)))
    call = _pair_call_model(model)
    device = x.device

    def run() -> None:
        if method == "guided_ig":
            pair_guided_ig(model, xc, targets, steps=st.steps, baseline=np.zeros_like(xc), device=device)
        elif method == "xrai":
            pair_xrai(model, xc, np.asarray(targets), steps=st.steps, batch_size=st.steps)
        else:  # blur_ig
            for img, cls in zip(images, targets):
                pair.BlurIG().GetMask(
                    img, call, {"class": cls}, max_sigma=st.max_sigma, steps=st.steps, batch_size=st.steps
                )

    return run


def captum_call(model: Any, x: Any, refs: Any, targets: list[int], method: str, st: Settings) -> Any:
    import torch
    from captum import attr

    target = torch.as_tensor(targets, device=x.device)
    sigma = 0.15  # the inputs span [0, 1): xaikit's stdev_spread 0.15 is this absolute sigma
    if method == "vargrad":
        nt = attr.NoiseTunnel(attr.Saliency(model))
        return lambda: nt.attribute(
            x, nt_type="vargrad", nt_samples=st.noise, stdevs=sigma, target=target, abs=False
        )
    if method == "input_x_gradient":
        return lambda: attr.InputXGradient(model).attribute(x, target=target)
    if method == "expected_gradients":
        return lambda: attr.GradientShap(model).attribute(x, refs, n_samples=st.noise, target=target)
    return None


def rows_of(method: str, st: Settings) -> int:
    return (
        st.batch
        * {
            "vargrad": st.noise,
            "input_x_gradient": 1,
            "expected_gradients": st.noise,
            "blur_ig": st.steps,
            "guided_ig": st.steps,
            "xrai": 2 * st.steps,
        }[method]
    )


def xaikit_options(method: str, st: Settings, refs: Any) -> dict[str, Any]:
    return {
        "vargrad": {"nsamples": st.noise, "stdev_spread": 0.15},
        "input_x_gradient": {},
        "expected_gradients": {"nsamples": st.noise, "baseline": refs},
        "blur_ig": {"steps": st.steps, "max_sigma": st.max_sigma},
        "guided_ig": {"steps": st.steps, "baseline": "zeros"},
        "xrai": {"steps": st.steps},
    }[method]


def cases_for(st: Settings, methods: list[str], dev: Device) -> tuple[list[Case], Any]:
    import xaikit as xk

    model, x, refs, targets, size = build(st, dev)
    # fix xaikit's plan once (its chunk is what the bound uses)
    xk.xai.explain(model, x, target=targets, method="vanilla")
    xk.xai.explain(model, x, target=targets, method="vargrad", nsamples=st.noise)
    chunk = tuned_chunk(model)[0] or 128  # 0: a job too small to fix a size (the CPU default then)
    out: list[Case] = []
    for method in methods:
        rows = rows_of(method, st)
        common: dict[str, Any] = {
            "framework": "torch",
            "model": st.model,
            "batch": st.batch,
            "method": method,
            "sync": dev.sync,
            "gpu_reset": dev.reset_peak,
            "gpu_peak": dev.peak,
        }
        opts = xaikit_options(method, st, refs)
        out.append(
            Case(
                name="xaikit",
                group="xaikit",
                rows=rows,
                fn=xaikit_call(model, x, targets, method, **opts),
                **common,
            )
        )
        peer = captum_call(model, x, refs, targets, method, st)
        if peer is not None:
            out.append(Case(name="captum", group="peer", rows=rows, fn=peer, **common))
        if method in ("blur_ig", "guided_ig", "xrai"):
            out.append(
                Case(
                    name="PAIR (per image)",
                    group="peer",
                    rows=rows,
                    fn=pair_call(model, x, targets, method, st),
                    **common,
                )
            )
        out.append(
            Case(
                name=f"bound (chunk {chunk})",
                group="bound",
                rows=rows,
                fn=bound(model, rows, size, chunk, targets),
                **common,
            )
        )
    return out, (model, x, refs, targets)


def memory_sweep(st: Settings, handle: Any, dev: Device) -> list[dict[str, Any]]:
    """xaikit's peak RSS increase and seconds as steps / samples grow (one call each)."""
    from _measure import PeakRSS

    import xaikit as xk

    model, x, _refs, targets = handle
    out = []
    for method, key in (("blur_ig", "steps"), ("guided_ig", "steps"), ("vargrad", "nsamples")):
        for n in st.sweep:
            opts: dict[str, Any] = {key: n, **({"max_sigma": st.max_sigma} if method == "blur_ig" else {})}
            dev.reset_peak()
            with PeakRSS() as peak:
                t0 = time.perf_counter()
                xk.xai.explain(model, x, target=targets, method=method, **opts)
                dev.sync()
                secs = time.perf_counter() - t0
            gpu = dev.peak()
            out.append(
                {
                    "method": method,
                    key: n,
                    "rows": st.batch * n,
                    "seconds": secs,
                    "peak_rss_increase_bytes": peak.increase,
                    "peak_gpu_bytes": gpu,
                }
            )
            log(f"  memory {method} {key}={n}: {secs:.2f}s, {peak.increase / 2**20:.0f} MiB")
    return out


def _median(c: Case) -> float:
    return statistics.median(c.times) if c.times else float("nan")


def summarize(cases: list[Case]) -> list[dict[str, Any]]:
    rows = []
    for c in cases:
        ours = next(o for o in cases if o.model == c.model and o.method == c.method and o.group == "xaikit")
        rows.append({
            "model": c.model, "method": c.method, "name": c.name, "group": c.group, "rows": c.rows,
            "median_s": _median(c), "times_s": c.times, "peak_rss_increase_bytes": max(c.rss) if c.rss else 0,
            "peak_gpu_bytes": max(c.gpu) if c.gpu else None,
            "speedup": _median(c) / _median(ours) if c.group != "xaikit" else 1.0,
        })  # fmt: skip
    return rows


def render(rows: list[dict[str, Any]], sweep: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    from xaikit.xai.registry import title

    gpu = any(r.get("peak_gpu_bytes") is not None for r in rows)
    out = [
        START,
        "## The gradient family (issue 15): VarGrad, Input×Gradient, Expected Gradients, Blur IG, Guided IG, XRAI",
        "",
    ]
    out.append(
        f"Generated by `{meta['command']}` on {meta['date']} (xaikit commit {meta['commit']}); {meta['reps']} timed "
        f"rounds after a warm-up, medians; whole run {meta['seconds']:.0f} s. CPU: {meta['machine'].get('cpu')}, "
        f"{meta['machine'].get('cores')} cores, {meta['machine'].get('ram_gib')} GiB RAM; load average at start "
        f"{meta['load_start']}, at end {meta['load_end']}; versions: {meta['versions']}. Device "
        f"`{meta.get('device', 'cpu')}`: {meta.get('device_info', 'CPU only (no GPU used)')}."
    )
    out += ["", "Settings: " + "; ".join(meta["settings"]) + ".", ""]
    out += [
        'Peers at equal settings: captum `NoiseTunnel(Saliency, nt_type="vargrad")` (σ = 0.15: the inputs span [0, 1), '
        "so xaikit's `stdev_spread=0.15` is the same σ), `InputXGradient`, `GradientShap` (the same 64 references, "
        "n_samples = xaikit's draws), each in one call over all its rows (captum's default); PAIR `BlurIG`, `GuidedIG` "
        "(zero baseline) and `XRAI` (`XRAIParameters(steps=...)`, its two min/max baselines) per image with "
        "`batch_size` = the steps where they take one. The bound is one forward + backward of the method's gradient "
        "rows, pre-built, in chunks of xaikit's chunk size.",
        "",
        "| model | method | implementation | rows | median s | rows/s | peak RSS MiB |"
        + (" peak GPU MiB |" if gpu else "")
        + " peer s / xaikit s |",
        "|---|---|---|---:|---:|---:|---:|" + ("---:|" if gpu else "") + "---:|",
    ]
    for r in rows:
        rate = r["rows"] / r["median_s"] if r["median_s"] > 0 else float("nan")
        ratio = "" if r["group"] == "xaikit" else f"{r['speedup']:.2f}×"
        g = f" {(r['peak_gpu_bytes'] or 0) / 2**20:,.0f} |" if gpu else ""
        out.append(
            f"| {r['model']} | {title(r['method'])} | {r['name']} | {r['rows']:,} | {r['median_s']:.3f} | {rate:,.0f} | "
            f"{r['peak_rss_increase_bytes'] / 2**20:,.0f} |{g} {ratio} |"
        )
    out += ["", "Targets of issue 15 (peer median / xaikit median; > 1: xaikit is faster):", "",
            "| target | model | measured | verdict |", "|---|---|---:|---|"]  # fmt: skip
    for r in rows:
        want = TARGETS.get(r["method"])
        if not want or r["group"] != "peer" or not r["name"].startswith(want[0]):
            continue
        ok = r["speedup"] >= want[1]
        out.append(
            f"| {title(r['method'])} ≥ {want[1]}× {r['name']} | {r['model']} | {r['speedup']:.2f}× | {'held' if ok else 'missed'} |"
        )
    bounds = {(r["model"], r["method"]): r for r in rows if r["group"] == "bound"}
    out += [
        "",
        "xaikit against the bound (bound s / xaikit s; 1.0 = no overhead beyond the gradient rows):",
        "",
    ]
    out += ["| model | method | xaikit / bound |", "|---|---|---:|"]
    for r in rows:
        if r["group"] == "xaikit" and (r["model"], r["method"]) in bounds:
            out.append(
                f"| {r['model']} | {title(r['method'])} | {bounds[(r['model'], r['method'])]['median_s'] / r['median_s']:.2f} |"
            )
    if sweep:
        out += ["", "Peak memory of xaikit as the steps or noise samples grow (LeNet, one call each):", "",
                "| method | steps / samples | rows | seconds | peak RSS increase MiB |", "|---|---:|---:|---:|---:|"]  # fmt: skip
        for s in sweep:
            n = s.get("steps", s.get("nsamples"))
            out.append(
                f"| {title(s['method'])} | {n} | {s['rows']:,} | {s['seconds']:.2f} | {s['peak_rss_increase_bytes'] / 2**20:,.0f} |"
            )
    out += ["", END, ""]
    return "\n".join(out)


def _versions() -> str:
    import importlib.metadata as md

    found = []
    for pkg in ("torch", "captum", "saliency", "scikit-image", "numpy"):
        try:
            found.append(f"{pkg} {md.version(pkg)}")
        except md.PackageNotFoundError:
            pass
    return ", ".join(found)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--methods", default=",".join(METHODS))
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--quick", action="store_true", help="tiny settings: check that everything runs")
    _device.add_argument(p)
    p.add_argument("--json", type=Path, default=None)
    p.add_argument("--out", type=Path, default=None, help="markdown file to write the section into")
    args = p.parse_args(argv)
    if os.environ.get("MALLOC_MMAP_THRESHOLD_") is None and not args.quick:  # each call's peak its own
        env = {**os.environ, **MALLOC_ENV}
        return subprocess.call([sys.executable, *sys.argv], env=env)
    models = args.models.split(",")
    methods = args.methods.split(",")
    bad = sorted((set(models) - set(MODELS)) | (set(methods) - set(METHODS)))
    if bad:
        p.error(f"unknown model(s) or method(s) {bad}; models: {MODELS}, methods: {METHODS}")
    import torch

    torch.set_num_threads(os.cpu_count() or 1)
    dev = Device.pick(args.device)
    if (
        args.quick
        and args.out is not None
        and args.out.resolve() == (ROOT / "docs" / "benchmarks.md").resolve()
    ):
        p.error(
            "--quick numbers mean nothing: write them elsewhere (--out /tmp/bench_quick.md), not to docs/benchmarks.md"
        )
    t_start, load_start = time.perf_counter(), [round(v, 2) for v in os.getloadavg()]
    all_rows: list[dict[str, Any]] = []
    sweep: list[dict[str, Any]] = []
    settings = []
    for name in models:
        st = SETTINGS[name]
        if args.quick:
            st = replace(st, batch=2, noise=2, steps=3, refs=4, sweep=(2, 4) if st.sweep else ())
        settings.append(
            f"{name}: B={st.batch}, noise samples/draws {st.noise}, steps {st.steps}, max_sigma {st.max_sigma:g}"
        )
        log(f"{name}: {settings[-1]}")
        cases, handle = cases_for(st, methods, dev)
        interleave(cases, 1 if args.quick else args.reps, log=log)
        all_rows += summarize(cases)
        if st.sweep:
            sweep += memory_sweep(st, handle, dev)
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT
    ).stdout.strip()
    meta = {
        "command": "python benchmarks/gradient_family_bench.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": commit, "reps": 1 if args.quick else args.reps, "seconds": time.perf_counter() - t_start,
        "machine": machine(), "load_start": load_start, "load_end": [round(v, 2) for v in os.getloadavg()],
        "versions": _versions(), "settings": settings, "device": dev.name, "device_info": dev.describe(),
    }  # fmt: skip
    text = render(all_rows, sweep, meta)
    print(text)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        tmp = args.json.with_name(args.json.name + ".tmp")
        tmp.write_text(json.dumps({"meta": meta, "rows": all_rows, "memory": sweep}, indent=1))
        os.replace(tmp, args.json)
    if args.out:
        write_section(args.out, text, START, END)
    return 0


if __name__ == "__main__":
    sys.exit(main())
