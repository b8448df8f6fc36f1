"""LRP on torch (issue 27): xaikit against zennit 0.5.1 with the same composite, and against the
plain forward + backward bound, time and peak memory.

Usage:
    python benchmarks/lrp_bench.py [--models resnet18,vgg16_bn] [--composites epsilon_plus_flat,epsilon_gamma_box]
        [--size 224] [--batch 16] [--width 1.0] [--reps 3] [--device cpu|cuda] [--threads N]
        [--quick] [--json benchmarks/results/DATE-lrp.json] [--out docs/benchmarks.md]

Models (random weights, BatchNorm calibrated on a random batch with
``xaikit.architecture.torch.calibrate_batchnorm``; nothing downloads):

* ``resnet18``: ``xaikit.architecture.torch.ResNet18`` (1000 classes; torchvision's module names,
  so zennit's ``ResNetCanonizer`` recognizes its blocks);
* ``vgg16_bn``: torchvision's VGG-16 with BatchNorm as an ``nn.Sequential`` of features, an
  adaptive average pooling to 7x7 and the 4096-4096-1000 classifier (138 M weights);
  ``--width`` scales every channel count and the classifier's hidden width (CPU runs).

Inputs: ``--batch`` images of ``--size`` x ``--size``, uniform in [0, 1); targets: class 0..B-1
(given explicitly to every line). Lines, per model and composite:

* ``xaikit lrp_step``: ``get_backend(model).relevance.lrp_step`` on the whole batch (what
  ``explain(method="lrp")`` runs per chunk), BatchNorm merged (``canonize=True``);
* ``xaikit explain``: ``xk.xai.explain(model, x, method="lrp", composite=..., target=...,
  max_batch=B)`` end to end (input checks, layout, the numpy result);
* ``zennit``: its ``Gradient`` attributor with the composite of the same name
  (``EpsilonPlusFlat``, ``EpsilonGammaBox(low=0, high=1)``) and the model's canonizer
  (``ResNetCanonizer`` / ``SequentialMergeBatchNorm``), entered once outside the timed call
  (its hooks and canonizers are set up once, as a user explaining many batches would), output
  relevance ``out * one-hot`` (xaikit's: the target score);
* ``bound``: one forward + backward of the target scores w.r.t. the input (the input gradient):
  what the model's own autograd costs, the floor of any one-pass modified backward.

Each line's maximum difference to zennit's relevance is reported relative to zennit's largest
|relevance|: it is mostly zennit's own (its canonized model keeps BatchNorm's eps, dividing each
BatchNorm's output by sqrt(1 + eps) once more, and it stabilizes residual sums): 1e-4 to 1e-3 on
ResNet-18, 2e-3 on the ``--quick`` VGG (13 BatchNorms), 3e-6 there with BatchNorm eps = 0; see
tests/rules/test_lrp_torch_peers.py.

On a CPU loaded past its core count pass ``--threads 1`` (two OpenMP threads stalled at each
op's barrier made every convolution of the quick VGG take 30 ms).

Device: ``--device cuda`` (the default when torch sees a GPU) puts models and inputs on the GPU;
every timed call ends with ``torch.cuda.synchronize()`` and the table gets each call's peak GPU
memory above the allocation at its start. Timing: one untimed warm-up of every line, then
``--reps`` interleaved rounds; medians. CPU memory: each call's peak resident-set increase
(sampled every ms). The section between the ``lrp`` markers of ``--out`` is replaced (added if
absent); ``--quick`` (64x64, B=2, width 1/8) only checks that everything runs.
"""

from __future__ import annotations

import argparse
import copy
import datetime as dt
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(HERE), str(ROOT)]

import _device  # noqa: E402
from _device import Device  # noqa: E402
from _measure import MALLOC_ENV, Case, interleave, machine, write_section  # noqa: E402

START = "<!-- lrp:start -->"
END = "<!-- lrp:end -->"
MODELS = ("resnet18", "vgg16_bn")
COMPOSITES = {"epsilon_plus_flat": "EpsilonPlusFlat", "epsilon_gamma_box": "EpsilonGammaBox"}
#: torchvision's VGG-16 configuration ("M": max pooling)
VGG16 = (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M")


def log(msg: str) -> None:
    print(msg, flush=True)


def vgg16_bn(width: float, classes: int = 1000) -> Any:
    """VGG-16 with BatchNorm (torchvision's layout), channels and hidden width scaled by ``width``."""
    from torch import nn

    layers: list[Any] = []
    cin = 3
    for v in VGG16:
        if v == "M":
            layers.append(nn.MaxPool2d(2, 2))
            continue
        cout = max(4, int(int(v) * width))
        layers += [nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU(inplace=True)]
        cin = cout
    hidden = max(16, int(4096 * width))
    return nn.Sequential(
        *layers, nn.AdaptiveAvgPool2d(7), nn.Flatten(),
        nn.Linear(cin * 49, hidden), nn.ReLU(inplace=True), nn.Dropout(),
        nn.Linear(hidden, hidden), nn.ReLU(inplace=True), nn.Dropout(), nn.Linear(hidden, classes),
    )  # fmt: skip


def build(name: str, size: int, width: float, dev: Device) -> Any:
    import torch

    from xaikit.architecture.torch import ResNet18, calibrate_batchnorm

    torch.manual_seed(0)
    model = ResNet18(classes=1000) if name == "resnet18" else vgg16_bn(width)
    calibrate_batchnorm(model, torch.rand(16, 3, size, size), batch_size=8)
    return dev.to(model.eval())


def zennit_module() -> Any:
    """zennit through the test suite's peer loader (it stubs torchvision's ResNet import);
    None where zennit is not installed."""
    import pytest

    from tests.rules.zennit_peer import zennit

    try:
        return zennit()
    except pytest.skip.Exception:
        return None


def cases_for(
    name: str, model: Any, x: Any, tg: Any, comps: list[str], dev: Device
) -> tuple[list[Case], dict]:
    import torch

    import xaikit as xk
    from xaikit.xai.rules import composite

    bk = xk.backend.get_backend(model)
    batch = int(x.shape[0])
    common = {"framework": "torch", "model": name, "batch": batch, "rows": batch, "sync": dev.sync,
              "gpu_peak": dev.peak, "gpu_reset": dev.reset_peak}  # fmt: skip

    def bound() -> Any:
        xs = x.detach().requires_grad_(True)
        (g,) = torch.autograd.grad(model(xs).gather(1, tg[:, None]).sum(), xs)
        return g

    cases = [Case("bound: forward + backward (input gradient)", "bound", fn=bound, method="bound", **common)]
    results: dict[str, Any] = {}
    zn = zennit_module()
    for comp_name in comps:
        comp = composite(comp_name, low=0.0, high=1.0)

        def step(comp: Any = comp, key: str = comp_name) -> Any:
            rel, _ = bk.relevance.lrp_step(xk.backend.Rows(model, [x], tg), comp)
            results[f"xaikit {key}"] = rel[0]
            return rel

        def explain(key: str = comp_name) -> Any:
            return xk.xai.explain(
                model, x, method="lrp", composite=key, low=0.0, high=1.0, target=tg, max_batch=batch
            )

        cases.append(Case(f"xaikit lrp_step {comp_name}", "xaikit", fn=step, method=comp_name, **common))
        cases.append(Case(f"xaikit explain {comp_name}", "xaikit", fn=explain, method=comp_name, **common))
        if zn is None:
            continue
        cases.append(Case(f"zennit {COMPOSITES[comp_name]}", "peer", fn=zennit_call(zn, name, model, x, tg, comp_name, results), method=comp_name, **common))  # fmt: skip
    return cases, results


def zennit_call(zn: Any, name: str, model: Any, x: Any, tg: Any, comp_name: str, results: dict) -> Any:
    """zennit's Gradient attributor on a copy of the model (its canonizers write the model while
    entered), entered once; the timed call is one attribution."""
    import torch
    from zennit import canonizers, composites, torchvision
    from zennit.attribution import Gradient

    canon = torchvision.ResNetCanonizer() if name == "resnet18" else canonizers.SequentialMergeBatchNorm()
    kw: dict[str, Any] = {"canonizers": [canon]}
    if comp_name == "epsilon_gamma_box":
        kw.update(low=0.0, high=1.0)
    attributor = Gradient(copy.deepcopy(model), getattr(composites, COMPOSITES[comp_name])(**kw))
    attributor.__enter__()
    results.setdefault("_entered", []).append(attributor)  # exited after the rounds
    onehot = torch.nn.functional.one_hot(tg, 1000).to(x.dtype)

    def call() -> Any:
        _, rel = attributor(x, lambda out: out * onehot)
        results[f"zennit {comp_name}"] = rel
        return rel

    return call


def summarize(cases: list[Case], results: dict[str, Any]) -> list[dict[str, Any]]:
    bound = next(c for c in cases if c.group == "bound")
    rows = []
    for c in cases:
        row = c.as_dict()
        row["x_bound"] = c.median / bound.median
        row["peak_gpu_bytes"] = max(c.gpu) if c.gpu else None
        row["peak_rss_bytes"] = c.peak_rss
        ours, peer = results.get(f"xaikit {c.method}"), results.get(f"zennit {c.method}")
        if c.name.startswith("xaikit lrp_step") and ours is not None and peer is not None:
            row["vs_zennit"] = float((ours.double() - peer.double()).abs().max() / peer.double().abs().max())
        rows.append(row)
    return rows


def render(rows: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    gpu = any(r.get("peak_gpu_bytes") is not None for r in rows)
    out = [START, "## LRP (issue 27): xaikit, zennit and the forward + backward bound", ""]
    out.append(
        f"Generated by `{meta['command']}` on {meta['date']} (xaikit commit {meta['commit']}); {meta['reps']} timed "
        f"rounds after a warm-up, medians; whole run {meta['seconds']:.0f} s. CPU: {meta['machine'].get('cpu')}, "
        f"{meta['machine'].get('cores')} cores; load average at start {meta['load_start']}, at end "
        f"{meta['load_end']}; versions: {meta['versions']}. Device `{meta['device']}`: {meta['device_info']}."
    )
    out += ["", "Settings: " + meta["settings"] + ".", ""]
    out += [
        "| model | line | median s | × bound | peak RSS MiB |" + (" peak GPU MiB |" if gpu else "")
        + " max diff to zennit (of its max) |",
        "|---|---|---:|---:|---:|" + ("---:|" if gpu else "") + "---:|",
    ]  # fmt: skip
    for r in rows:
        g = f" {(r['peak_gpu_bytes'] or 0) / 2**20:,.0f} |" if gpu else ""
        diff = f"{r['vs_zennit']:.1e}" if "vs_zennit" in r else ""
        out.append(
            f"| {r['model']} | {r['name']} | {r['median_s']:.3f} | {r['x_bound']:.2f} | "
            f"{r['peak_rss_bytes'] / 2**20:,.0f} |{g} {diff} |"
        )
    out += ["", END, ""]
    return "\n".join(out)


def _versions() -> str:
    import importlib.metadata as md

    found = []
    for pkg in ("torch", "zennit", "numpy"):
        try:
            found.append(f"{pkg} {md.version(pkg)}")
        except md.PackageNotFoundError:
            pass
    return ", ".join(found)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--composites", default=",".join(COMPOSITES))
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--width", type=float, default=1.0, help="VGG channel / hidden width scale (CPU runs)")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    p.add_argument("--quick", action="store_true", help="64x64, B=2, VGG width 1/8: checks that it runs")
    _device.add_argument(p)
    p.add_argument("--json", type=Path, default=None)
    p.add_argument("--out", type=Path, default=None, help="markdown file to write the section into")
    args = p.parse_args(argv)
    if os.environ.get("MALLOC_MMAP_THRESHOLD_") is None and not args.quick:  # each call's peak its own
        return subprocess.call([sys.executable, *sys.argv], env={**os.environ, **MALLOC_ENV})
    models = [m for m in args.models.split(",") if m]
    comps = [c for c in args.composites.split(",") if c]
    bad = sorted((set(models) - set(MODELS)) | (set(comps) - set(COMPOSITES)))
    if bad:
        p.error(f"unknown model(s) or composite(s) {bad}; models: {MODELS}, composites: {tuple(COMPOSITES)}")
    if (
        args.quick
        and args.out is not None
        and args.out.resolve() == (ROOT / "docs" / "benchmarks.md").resolve()
    ):
        p.error("--quick numbers mean nothing: write them elsewhere (--out /tmp/lrp_quick.md)")
    if args.quick:
        args.size, args.batch, args.width, args.reps = 64, 2, 0.125, 1
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    dev = Device.pick(args.device)
    t_start, load_start = time.perf_counter(), [round(v, 2) for v in os.getloadavg()]
    rows: list[dict[str, Any]] = []
    for name in models:
        model = build(name, args.size, args.width, dev)
        g = torch.Generator().manual_seed(1)
        x = dev.to(torch.rand(args.batch, 3, args.size, args.size, generator=g))
        tg = dev.to(torch.arange(args.batch) % 1000)
        log(f"{name}: B={args.batch}, {args.size}x{args.size}")
        cases, results = cases_for(name, model, x, tg, comps, dev)
        interleave(cases, args.reps, log=log)
        for attributor in results.pop("_entered", []):
            attributor.__exit__(None, None, None)
        rows += summarize(cases, results)
        del cases, results, model
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT
    ).stdout.strip()
    meta = {
        "command": "python benchmarks/lrp_bench.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": commit, "reps": args.reps, "seconds": time.perf_counter() - t_start, "machine": machine(),
        "load_start": load_start, "load_end": [round(v, 2) for v in os.getloadavg()], "versions": _versions(),
        "settings": f"B={args.batch}, {args.size}x{args.size}, VGG width {args.width:g}, threads "
                    f"{torch.get_num_threads()}, composites {', '.join(comps)} (gamma box: low 0, high 1)",
        "device": dev.name, "device_info": dev.describe(),
    }  # fmt: skip
    text = render(rows, meta)
    print(text)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        tmp = args.json.with_name(args.json.name + ".tmp")
        tmp.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
        os.replace(tmp, args.json)
    if args.out:
        write_section(args.out, text, START, END)
    return 0


if __name__ == "__main__":
    sys.exit(main())
