"""Real models at 224x224 (issue 13): the memory-aware ``max_batch="auto"`` plan against captum,
the fused forward+backward bound and the sequential loop.

Usage:
    python benchmarks/real_models_bench.py [--cases resnet18,mobilenetv2,lenet] [--reps 2]
        [--threads N] [--json benchmarks/results/DATE-real-models.json] [--out docs/benchmarks.md]

Cases (all on the CPU, random weights, batch norm calibrated on the batch; nothing downloads):

* ``resnet18``: ``xaikit.architecture.torch.ResNet18`` at 224x224, SmInt(nsamples=8,
  nintegration=8) on 4 images (256 rows): xaikit ``max_batch="auto"`` against captum
  ``NoiseTunnel(IntegratedGradients(model))`` (``smoothgrad_sq``, nt_samples=8, n_steps=8,
  ``internal_batch_size=32``) and the fused forward+backward bound over the same 256 rows.
* ``mobilenetv2``: ``tf.keras.applications.MobileNetV2(weights=None)`` at 224, the same job,
  against a ``tf.function`` forward+backward bound over the same rows.
* ``lenet``: the torch LeNet at 32x32, SmInt on B=16 with S=4, M=25 (1,600 rows), against the
  best bound (chunks 128/256, both layouts) and the reference's sequential loop.

Timing: one untimed warm-up of xaikit (it fixes the plan: memory probe, budget, timing probe),
one chunk of each bound and of captum's chunk shape (resnet18), then ``--reps`` interleaved rounds; medians. Memory: each timed call's peak
resident-set increase (sampled every ms) over the value just before it, after a garbage
collection and a ``malloc_trim`` (so memory freed by the previous case cannot hide this one's);
the maximum over rounds. The Markdown section "Real models at 224x224" of ``--out`` is replaced
(the rest of the file is kept).
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
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(HERE), str(ROOT)]

from _measure import PeakRSS, machine, write_section  # noqa: E402

from xaikit.backend.memory import trim_heap  # noqa: E402

START = "<!-- real-models:start -->"
END = "<!-- real-models:end -->"
S, M, B = 8, 8, 4  # the 224x224 job: SmInt(8, 8) on 4 images


def log(msg: str) -> None:
    print(msg, flush=True)


class Line:
    """One benchmarked call and its timings / peak RSS increases."""

    def __init__(self, case: str, name: str, rows: int, fn: Callable[[], Any], kind: str) -> None:
        self.case, self.name, self.rows, self.fn, self.kind = case, name, rows, fn, kind
        self.times: list[float] = []
        self.rss: list[int] = []
        self.extra: dict[str, Any] = {}

    def once(self) -> None:
        gc.collect()
        trim_heap()
        with PeakRSS() as peak:
            t0 = time.perf_counter()
            self.fn()
            elapsed = time.perf_counter() - t0
        self.times.append(elapsed)
        self.rss.append(peak.increase)

    @property
    def median(self) -> float:
        return statistics.median(self.times) if self.times else float("nan")

    @property
    def rate(self) -> float:
        return self.rows / self.median

    def as_dict(self) -> dict[str, Any]:
        return {
            "case": self.case,
            "name": self.name,
            "kind": self.kind,
            "rows": self.rows,
            "times_s": self.times,
            "median_s": self.median,
            "rows_per_s": self.rate,
            "peak_rss_increase_bytes": self.rss,
            **self.extra,
        }


def _plan(model: Any) -> dict[str, Any]:
    from xaikit.xai._engine import plan as chunk_plan

    plans = [v for v in chunk_plan._TUNED.get(model, {}).values() if v[0]]
    costs = list(chunk_plan._ROW_BYTES.get(model, {}).values())
    out: dict[str, Any] = {}
    if plans:
        out["plan_rows"], out["plan_layout"] = plans[0]
    if costs and costs[0][0]:
        out["row_mib"] = round(costs[0][0] / 2**20, 1)
    return out


# ---- torch ----------------------------------------------------------------------------------------
def _torch_grad(model: Any, x: Any, target: Any) -> Any:
    import torch

    xs = x.detach().requires_grad_(True)
    (g,) = torch.autograd.grad(model(xs).gather(1, target[:, None]).sum(), xs)
    return g


def _torch_bound(case: str, model: Any, x: Any, rows: int, chunk: int, layout: str) -> Line:
    import torch

    g = torch.Generator().manual_seed(1)
    xb = x[torch.randint(0, x.shape[0], (chunk,), generator=g)] * 0.9
    if layout == "channels_last":
        xb = xb.contiguous(memory_format=torch.channels_last)
    target = torch.arange(chunk) % 10
    n = -(-rows // chunk)

    def fn() -> None:
        for _ in range(n):
            _torch_grad(model, xb, target)

    line = Line(case, f"bound chunk={chunk} {layout}", n * chunk, fn, "bound")
    line.extra.update(chunk=chunk, layout=layout, warm=lambda: _torch_grad(model, xb, target))
    return line


def resnet18_lines() -> tuple[list[Line], Any]:
    import torch
    from captum.attr import IntegratedGradients, NoiseTunnel

    import xaikit as xk
    from xaikit.architecture.torch import ResNet18, calibrate_batchnorm

    torch.manual_seed(0)
    model = ResNet18().eval()
    x = torch.rand(B, 3, 224, 224, generator=torch.Generator().manual_seed(0))
    calibrate_batchnorm(model, torch.rand(32, 3, 224, 224, generator=torch.Generator().manual_seed(1)))
    net = xk.xai.SaliencyNet(model, "x", "y_pred", seed=0)
    rows = B * S * M
    xaikit = Line(
        "resnet18",
        'xaikit SmInt max_batch="auto"',
        rows,
        lambda: net.get_smoothed_masks({"x": x}, nsamples=S, nintegration=M),
        "xaikit",
    )
    with torch.no_grad():
        target = model(x).argmax(1)
    lo, hi = float(x.min()), float(x.max())
    base = lo + (hi - lo) * torch.rand(x.shape, generator=torch.Generator().manual_seed(2))
    sigma = 0.15 * (hi - lo)

    def captum() -> Any:
        return NoiseTunnel(IntegratedGradients(model)).attribute(
            x,
            nt_type="smoothgrad_sq",
            nt_samples=S,
            stdevs=sigma,
            baselines=base,
            target=target,
            n_steps=M,
            internal_batch_size=32,
        )

    peer = Line("resnet18", "captum NoiseTunnel(IG) internal_batch_size=32", rows, captum, "peer")
    # warm-up: one forward+backward of captum's chunk shape (32 contiguous rows), not a whole call
    x32 = x[torch.arange(32) % B].contiguous()
    peer.extra["warm"] = lambda: _torch_grad(model, x32, torch.arange(32) % 10)
    return [xaikit, peer], (model, x, rows)


def lenet_lines(threads: int | None) -> list[Line]:
    import torch
    from _models import torch_model

    import xaikit as xk

    model = torch_model("lenet")
    bs, s, m = 16, 4, 25
    x = torch.rand(bs, 3, 32, 32, generator=torch.Generator().manual_seed(bs))
    net = xk.xai.SaliencyNet(model, "x", "y_pred", seed=0)
    lines = [
        Line(
            "lenet",
            f'xaikit SmInt B={bs} S={s} M={m} max_batch="auto"',
            bs * s * m,
            lambda: net.get_smoothed_masks({"x": x}, nsamples=s, nintegration=m),
            "xaikit",
        )
    ]
    for layout in ("contiguous", "channels_last"):
        for chunk in (128, 256):
            lines.append(_torch_bound("lenet", model, x, 2048, chunk, layout))

    def loop() -> Any:
        with torch.no_grad():
            target = model(x).argmax(1)
        g = _torch_grad(model, x, target)
        acc = g * g
        lo, hi = float(x.min()), float(x.max())
        for _ in range(s - 1):
            base = lo + (hi - lo) * torch.rand_like(x)
            total = torch.zeros_like(x)
            for alpha in torch.linspace(0.0, 1.0, m).tolist():
                total += _torch_grad(model, base + alpha * (x - base), target)
            ig = total * (x - base)
            acc += ig * ig
        return acc / s

    passes = 1 + (s - 1) * m
    lines.append(Line("lenet", f"sequential loop ({passes} passes of B={bs})", bs * passes, loop, "loop"))
    lines[0].extra["model"] = model
    return lines


# ---- TF -------------------------------------------------------------------------------------------
def mobilenet_lines() -> tuple[list[Line], Any]:
    import numpy as np
    import tensorflow as tf

    import xaikit as xk
    from xaikit.architecture.tensorflow import calibrate_batchnorm

    tf.keras.utils.set_random_seed(0)
    model = tf.keras.applications.MobileNetV2(weights=None, input_shape=(224, 224, 3))
    rng = np.random.default_rng(0)
    x = rng.random((B, 224, 224, 3), dtype=np.float32)
    calibrate_batchnorm(model, rng.random((32, 224, 224, 3), dtype=np.float32))
    net = xk.xai.SaliencyNet(model, "x", "y_pred", seed=0)
    rows = B * S * M
    xaikit = Line(
        "mobilenetv2",
        'xaikit SmInt max_batch="auto"',
        rows,
        lambda: net.get_smoothed_masks({"x": x}, nsamples=S, nintegration=M),
        "xaikit",
    )
    return [xaikit], (model, x, rows)


def _tf_bound(model: Any, x: Any, rows: int, chunk: int) -> Line:
    import numpy as np
    import tensorflow as tf

    xb = tf.constant(x[np.arange(chunk) % x.shape[0]] * 0.9)
    target = tf.constant(np.arange(chunk) % 10, dtype=tf.int64)

    @tf.function
    def step(xb: Any, target: Any) -> Any:
        with tf.GradientTape() as tape:
            tape.watch(xb)
            out = model(xb, training=False)
            score = tf.reduce_sum(tf.gather(out, target, axis=1, batch_dims=1))
        return tape.gradient(score, xb)

    n = -(-rows // chunk)

    def fn() -> None:
        for _ in range(n):
            step(xb, target).numpy()

    line = Line("mobilenetv2", f"bound chunk={chunk} tf.function", n * chunk, fn, "bound")
    line.extra.update(chunk=chunk, warm=lambda: step(xb, target).numpy())
    return line


# ---- orchestration --------------------------------------------------------------------------------
def run_case(lines: list[Line], reps: int) -> None:
    for line in lines:
        warm = line.extra.pop("warm", None)
        t0 = time.perf_counter()
        (warm or line.fn)()
        log(f"  warm-up {line.case} {line.name}: {time.perf_counter() - t0:.1f}s")
    for r in range(reps):
        t0 = time.perf_counter()
        for line in lines:
            line.once()
        log(f"  round {r + 1}/{reps} of {lines[0].case}: {time.perf_counter() - t0:.1f}s")


def measure(cases: list[str], reps: int, threads: int | None) -> tuple[list[Line], dict[str, Any]]:
    lines: list[Line] = []
    facts: dict[str, Any] = {}
    if "resnet18" in cases:
        log("resnet18 (torch, 224x224, SmInt(8, 8) on 4 images)")
        first, (model, x, rows) = resnet18_lines()
        t0 = time.perf_counter()
        first[0].fn()  # the plan is made here (first call: memory probe, budget, timing probe)
        facts["resnet18_first_call_s"] = time.perf_counter() - t0
        plan = _plan(model)
        first[0].extra.update(plan)
        log(f"  first xaikit call {facts['resnet18_first_call_s']:.1f}s; plan {plan}")
        bounds = [
            _torch_bound(
                "resnet18",
                model,
                x,
                rows,
                plan.get("plan_rows", 16),
                plan.get("plan_layout", "channels_last"),
            )
        ]
        if plan.get("plan_rows") != 32:
            bounds.append(_torch_bound("resnet18", model, x, rows, 32, "channels_last"))
        case = first + bounds
        case[0].extra["warm"] = lambda: None  # already warm
        run_case(case, reps)
        lines += case
    if "mobilenetv2" in cases:
        log("mobilenetv2 (Keras, 224x224, SmInt(8, 8) on 4 images)")
        first, (model, x, rows) = mobilenet_lines()
        t0 = time.perf_counter()
        first[0].fn()
        facts["mobilenetv2_first_call_s"] = time.perf_counter() - t0
        plan = _plan(model)
        first[0].extra.update(plan)
        log(f"  first xaikit call {facts['mobilenetv2_first_call_s']:.1f}s; plan {plan}")
        chunk = int(plan.get("plan_rows", 16))
        case = first + [_tf_bound(model, x, rows, chunk), _tf_bound(model, x, rows, 2 * chunk)]
        case[0].extra["warm"] = lambda: None
        run_case(case, reps)
        lines += case
    if "lenet" in cases:
        log("lenet (torch, 32x32, SmInt B=16 S=4 M=25)")
        case = lenet_lines(threads)
        run_case(case, reps)
        model = case[0].extra.pop("model")
        case[0].extra.update(_plan(model))
        lines += case
    return lines, facts


def _mib(b: float) -> str:
    return f"{b / 2**20:,.0f}"


def summarize(lines: list[Line]) -> dict[str, dict[str, Any]]:
    """Per case: xaikit's line, the best bound, the peer / loop, and the target checks."""
    out: dict[str, dict[str, Any]] = {}
    for case in dict.fromkeys(line.case for line in lines):
        mine = [ln for ln in lines if ln.case == case]
        x = next(ln for ln in mine if ln.kind == "xaikit")
        bounds = [ln for ln in mine if ln.kind == "bound"]
        best = max(bounds, key=lambda ln: ln.rate) if bounds else None
        s: dict[str, Any] = {"xaikit_s": x.median, "xaikit_rss": max(x.rss)}
        if best is not None:
            s["bound"] = best.name
            s["x_bound"] = x.rate / best.rate
        for ln in mine:
            if ln.kind in ("peer", "loop"):
                s[f"{ln.kind}_s"] = ln.median
                s[f"{ln.kind}_rss"] = max(ln.rss)
                s[f"speedup_vs_{ln.kind}"] = ln.median / x.median
        out[case] = s
    return out


def render(lines: list[Line], summary: dict[str, dict[str, Any]], meta: dict[str, Any]) -> str:
    r: list[str] = [START, "## Real models at 224×224", ""]
    r.append(
        f"Generated by `{meta['command']}` on {meta['date']} (xaikit commit {meta['commit']}); "
        f"{meta['reps']} timed rounds after a warm-up; whole run {meta['wall_s']:.0f} s. "
        f"CPU: {meta['machine'].get('cpu')}, {meta['machine'].get('cores')} cores, "
        f"{meta['machine'].get('ram_gib')} GiB RAM; load average at start {meta['load_start']}, at end "
        f"{meta['load_end']}; torch threads {meta['torch_threads']}."
    )
    r.append("")
    r.append(
        "Random weights, batch norm calibrated on a random batch (`calibrate_batchnorm`). Times are "
        "medians of interleaved rounds of the whole call; *peak ΔRSS* is the largest resident-set "
        "increase during a call over its value just before it (after `gc.collect()` and "
        "`malloc_trim`), the maximum over rounds. The bound is the model's own fused "
        "forward+backward with respect to the inputs over the same number of rows, on one "
        'pre-built chunk, repeated. The xaikit line\'s chunk is the one `max_batch="auto"` chose '
        "(plan and measured per-row cost in the last column)."
    )
    r.append("")
    r.append("| case | line | rows | median s | rows/s | × best bound | peak ΔRSS MiB | note |")
    r.append("|---|---|---:|---:|---:|---:|---:|---|")
    for case, s in summary.items():
        best = s.get("bound")
        for ln in (ln for ln in lines if ln.case == case):
            ratio = ""
            if best is not None:
                b = next(b for b in lines if b.case == case and b.name == best)
                ratio = f"{ln.rate / b.rate:.2f}"
            note = ""
            if ln.kind == "xaikit" and "plan_rows" in ln.extra:
                note = f"plan: {ln.extra['plan_rows']} rows, {ln.extra['plan_layout']}"
                if "row_mib" in ln.extra:
                    note += f"; {ln.extra['row_mib']} MiB/row measured"
            if ln.name == best:
                note = (note + "; " if note else "") + "best bound"
            r.append(
                f"| {case} | {ln.name} | {ln.rows:,} | {ln.median:.2f} | {ln.rate:,.0f} | {ratio} | "
                f"{_mib(max(ln.rss))} | {note} |"
            )
    r.append("")
    r.append("| target (issue 13) | measured | |")
    r.append("|---|---|---|")
    rn = summary.get("resnet18")
    if rn and "peer_s" in rn:
        r.append(
            f"| resnet18: xaikit ≥ 1.2× faster than captum NoiseTunnel(IG, internal_batch_size=32) | "
            f"{rn['speedup_vs_peer']:.2f}× ({rn['xaikit_s']:.1f} s vs {rn['peer_s']:.1f} s) | "
            f"{'held' if rn['speedup_vs_peer'] >= 1.2 else 'missed'} |"
        )
        r.append(
            f"| resnet18: xaikit peak memory ≤ captum's | {_mib(rn['xaikit_rss'])} MiB vs "
            f"{_mib(rn['peer_rss'])} MiB | {'held' if rn['xaikit_rss'] <= rn['peer_rss'] else 'missed'} |"
        )
        r.append(f"| resnet18: × best bound (no target) | {rn['x_bound']:.2f}× | |")
    mn = summary.get("mobilenetv2")
    if mn:
        r.append(
            f"| MobileNetV2 (Keras): ≥ 0.9× the tf.function bound | {mn['x_bound']:.2f}× | "
            f"{'held' if mn['x_bound'] >= 0.9 else 'missed'} |"
        )
    ln_ = summary.get("lenet")
    if ln_:
        r.append(
            f"| LeNet 1,600 rows (B=16, S=4, M=25): ≥ 0.9× the best bound | {ln_['x_bound']:.2f}× | "
            f"{'held' if ln_['x_bound'] >= 0.9 else 'missed'} |"
        )
        r.append(
            f"| LeNet 1,600 rows: ≥ 1.5× the sequential loop | {ln_['speedup_vs_loop']:.2f}× "
            f"({ln_['xaikit_s']:.2f} s vs {ln_['loop_s']:.2f} s) | "
            f"{'held' if ln_['speedup_vs_loop'] >= 1.5 else 'missed'} |"
        )
    for key, val in meta["facts"].items():
        r.append(f"| {key.replace('_', ' ')} (plan made: probes included) | {val:.1f} s | |")
    r.append("")
    if meta.get("notes"):
        r += [meta["notes"], ""]
    r.append(END)
    return "\n".join(r) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cases", default="resnet18,mobilenetv2,lenet")
    p.add_argument("--reps", type=int, default=2)
    p.add_argument("--threads", type=int, default=None, help="intra-op threads of torch and TF")
    p.add_argument("--json", type=Path, default=None)
    p.add_argument("--out", type=Path, default=ROOT / "docs" / "benchmarks.md")
    p.add_argument("--notes", type=Path, default=None, help="a Markdown file put under the tables")
    args = p.parse_args(argv)
    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
        if "mobilenetv2" in cases:
            import tensorflow as tf

            tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    load_start = [round(v, 2) for v in os.getloadavg()]
    t0 = time.perf_counter()
    lines, facts = measure(cases, args.reps, args.threads)
    summary = summarize(lines)
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=False
        ).stdout.strip()
    except OSError:
        commit = "unknown"
    meta = {
        "command": "python benchmarks/real_models_bench.py "
        + " ".join(argv if argv is not None else sys.argv[1:]),
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": commit,
        "reps": args.reps,
        "wall_s": time.perf_counter() - t0,
        "machine": machine(),
        "load_start": load_start,
        "load_end": [round(v, 2) for v in os.getloadavg()],
        "torch_threads": torch.get_num_threads(),
        "facts": facts,
        "notes": args.notes.read_text().strip() if args.notes else "",
    }
    for case, s in summary.items():
        log(
            f"{case}: "
            + ", ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in s.items())
        )
    write_section(args.out, render(lines, summary, meta), START, END, before="## GPU")
    log(f"wrote {args.out}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        payload = {**meta, "summary": summary, "lines": [ln.as_dict() for ln in lines]}
        args.json.write_text(json.dumps(payload, indent=1, default=str))
        log(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
