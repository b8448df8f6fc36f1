"""Speed and memory of ``xk.evaluate``'s metrics against Quantus at equal settings.

Quantus is not a dependency of xaikit: run this in an environment with Quantus and torch, this
repository on the path::

    PYTHONPATH=. /tmp/qvenv/bin/python benchmarks/evaluate_bench.py [--reps 3] [--batch 32] \
        [--models lenet,resnet18]

For each metric of :data:`PAIRS` (a list to extend: one :class:`Pair` per metric, our call and
Quantus's at equal settings), on a seeded torch LeNet (one grey channel, 32x32, 5 classes:
Quantus's pixel flipping checks its step size against the spatial size only) and a batch of
``shapes`` images with their object masks (``--models resnet18``: also a random-weight
ResNet-18 on 224x224 pictures, ``tests/real_models.py``, without the pixel-flipping pair, whose
Quantus side needs one channel): one untimed warm-up call each, then ``--reps``
interleaved rounds; the median wall time, the speed-up (Quantus / xaikit) and the peak
resident-memory growth of a call (sampled every millisecond, ``benchmarks/_measure.py``).

Maps are given (vanilla gradients, made tie-free) to the metrics of maps; the metrics that
re-explain get the same explanation function on both sides (``xk.xai.explain``, vanilla), so
the timing compares the metrics' own loops. Writes its table into ``docs/benchmarks.md``
between the ``evaluate-bench`` markers and the raw figures to
``benchmarks/results/evaluate_bench.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import quantus
import torch

import xaikit as xk
from benchmarks._measure import Case, interleave, machine, write_section
from xaikit.architecture.torch import LeNet
from xaikit.dataset.data import shapes

ROOT = Path(__file__).resolve().parent.parent
START = "<!-- evaluate-bench:start -->"
END = "<!-- evaluate-bench:end -->"
STEPS = 16


@dataclass
class Setup:
    """What every pair works on."""

    model: Any
    x: np.ndarray  # (B, 1, 32, 32) float32 in [0, 1]
    y: np.ndarray  # (B,) the predicted classes
    maps: np.ndarray  # (B, H, W) tie-free non-negative maps
    mask: np.ndarray  # (B, H, W) bool object masks


@dataclass
class Pair:
    """One metric: our call and Quantus's, each ``fn(setup)`` doing the whole work once."""

    name: str
    ours: Callable[[Setup], Any]
    theirs: Callable[[Setup], Any]
    note: str = ""
    grey_only: bool = False  # Quantus's side needs a one-channel model (left out on ResNet-18)


def _xk_explain(model: Any, inputs: np.ndarray, targets: np.ndarray, **_: Any) -> np.ndarray:
    """Quantus's ``explain_func`` protocol around ``xk.xai.explain`` (vanilla gradients)."""
    return np.asarray(xk.xai.explain(model, inputs, target=targets, method="vanilla"))


def _q(metric: Any, s: Setup, **kw: Any) -> Any:
    return metric(model=s.model, x_batch=s.x, y_batch=s.y, channel_first=True, device="cpu", **kw)


#: the metrics compared; add a Pair per new metric (ours, Quantus's at equal settings)
PAIRS: list[Pair] = [
    Pair(
        "deletion / PixelFlipping",
        lambda s: xk.evaluate.deletion(s.model, s.x, s.maps, s.y, steps=STEPS, baseline="black", rank="signed"),
        lambda s: _q(
            quantus.PixelFlipping(
                features_in_step=32 * 32 // STEPS, perturb_baseline="black", normalise=False, abs=False,
                disable_warnings=True,
            ),
            s, a_batch=s.maps[:, None], softmax=False,
        ),
        f"{STEPS} steps, black baseline",
        grey_only=True,
    ),
    Pair(
        "pointing game / PointingGame",
        lambda s: xk.evaluate.localization(s.maps, s.mask),
        lambda s: _q(quantus.PointingGame(disable_warnings=True), s, a_batch=s.maps[:, None],
                     s_batch=s.mask[:, None].astype(float)),
        "ours also computes the energy",
    ),
    Pair(
        "energy / RelevanceMassAccuracy",
        lambda s: xk.evaluate.localization(s.maps, s.mask),
        lambda s: _q(quantus.RelevanceMassAccuracy(normalise=False, disable_warnings=True), s,
                     a_batch=s.maps[:, None], s_batch=s.mask[:, None].astype(float)),
        "ours also computes the pointing game",
    ),
    Pair(
        "randomization_test / MPRT",
        lambda s: xk.evaluate.randomization_test(s.model, s.x, s.y, method="vanilla", random_baseline=False),
        lambda s: _q(quantus.MPRT(disable_warnings=True), s, a_batch=None, explain_func=_xk_explain),
        "cascading, every layer, vanilla maps by xk.xai.explain on both sides",
    ),
    Pair(
        "sparseness / Sparseness",
        lambda s: xk.evaluate.sparseness(s.maps),
        lambda s: _q(quantus.Sparseness(disable_warnings=True), s, a_batch=s.maps[:, None]),
    ),
    Pair(
        "complexity / Complexity",
        lambda s: xk.evaluate.complexity(s.maps),
        lambda s: _q(quantus.Complexity(disable_warnings=True), s, a_batch=s.maps[:, None]),
    ),
]  # fmt: skip


def setup(batch: int) -> Setup:
    torch.manual_seed(0)
    model = LeNet(input_shape=(1, 32, 32), classes=5).eval()
    _, test = shapes.load_data(n_train=0, n_eval=batch, seed=3)
    x = np.ascontiguousarray(
        test["x"].astype(np.float32).mean(axis=3, keepdims=True).transpose(0, 3, 1, 2) / 255.0
    )
    with torch.no_grad():
        y = model(torch.as_tensor(x)).argmax(1).numpy()
    raw = np.asarray(xk.xai.explain(model, x, target=y, method="vanilla"))
    smap = np.abs(raw).sum(axis=1)
    smap = smap + 1e-9 * smap.max() * np.random.default_rng(0).random(smap.shape)  # tie-free
    return Setup(model, x, y, smap, test["mask"].astype(bool))


def setup_resnet(batch: int) -> Setup:
    """ResNet-18 (random weights, batch norm calibrated) on 224x224 ``shapes`` pictures."""
    sys.path.insert(0, str(ROOT / "tests"))
    from real_models import IMAGENET_MEAN, IMAGENET_STD, channel_first, normalize, torch_resnet18

    data, _ = shapes.load_data(image_size=224, n_train=batch, n_eval=1, seed=0)
    x = channel_first(normalize(data["x"], IMAGENET_MEAN, IMAGENET_STD))
    model = torch_resnet18(x).eval()
    with torch.no_grad():
        y = model(torch.as_tensor(x)).argmax(1).numpy()
    raw = np.asarray(xk.xai.explain(model, x, target=y, method="vanilla"))
    smap = np.abs(raw).sum(axis=1)
    smap = smap + 1e-9 * smap.max() * np.random.default_rng(0).random(smap.shape)
    return Setup(model, x, y, smap, data["mask"].astype(bool))


MODELS = {
    "lenet": (setup, "LeNet (1×32×32, 5 classes)"),
    "resnet18": (setup_resnet, "ResNet-18 (3×224×224, 5 classes, random weights)"),
}


def markdown(rows: list[dict[str, Any]], info: dict[str, Any], batch: int, reps: int, model: str) -> str:
    lines = [
        START,
        f"Metrics against Quantus {quantus.__version__} (`benchmarks/evaluate_bench.py`): torch "
        f"{torch.__version__.split('+')[0]} {model}, batch {batch}, median of {reps} "
        f"interleaved runs after a warm-up, on {info.get('cpu', 'a CPU')} ({info.get('cores')} cores, load "
        f"average {info.get('load_avg', ['?'])[0]} at the start: a shared machine, so take the times as "
        "rough). Memory: the peak resident-set growth of one call.",
        "",
        "| model | metric (xaikit / Quantus) | xaikit s | Quantus s | speed-up | xaikit peak RSS MiB | Quantus peak RSS MiB | note |",
        "|---|---|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['model']} | {r['name']} | {r['ours_s']:.4f} | {r['theirs_s']:.4f} | {r['speedup']:.1f}× | "
            f"{r['ours_rss_mib']:.1f} | {r['theirs_rss_mib']:.1f} | {r['note']} |"
        )
    lines.append(END)
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--models", default="lenet", help="comma-separated: lenet, resnet18")
    parser.add_argument("--only", default="", help="comma-separated substrings of pair names")
    parser.add_argument(
        "--no-write", action="store_true", help="print only; leave the docs and results alone"
    )
    args = parser.parse_args(argv)
    info = machine()
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    cases: list[tuple[str, Pair, Case, Case]] = []
    for model in models:
        s = MODELS[model][0](args.batch)
        for p in PAIRS:
            if (args.only and not any(k in p.name for k in args.only.split(","))) or (
                p.grey_only and s.x.shape[1] != 1
            ):
                continue
            ours = Case(p.name, "xaikit", "torch", model, args.batch, args.batch, lambda p=p, s=s: p.ours(s))
            theirs = Case(
                p.name, "peer", "torch", model, args.batch, args.batch, lambda p=p, s=s: p.theirs(s)
            )
            cases.append((model, p, ours, theirs))
    interleave([c for _, _, a, b in cases for c in (a, b)], args.reps)
    rows = []
    for model, p, ours, theirs in cases:
        rows.append(
            {
                "model": model,
                "name": p.name,
                "note": p.note,
                "ours_s": ours.median,
                "theirs_s": theirs.median,
                "speedup": theirs.median / ours.median,
                "ours_rss_mib": ours.peak_rss / 2**20,
                "theirs_rss_mib": theirs.peak_rss / 2**20,
                "ours_times": ours.times,
                "theirs_times": theirs.times,
            }
        )
        print(
            f"{p.name}: xaikit {ours.median:.4f}s, Quantus {theirs.median:.4f}s, {theirs.median / ours.median:.1f}x"
        )
    text = markdown(rows, info, args.batch, args.reps, "; ".join(MODELS[m][1] for m in models))
    print(text)
    if args.no_write:
        return
    out = ROOT / "benchmarks" / "results" / "evaluate_bench.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    doc = {"machine": info, "quantus": quantus.__version__, "torch": torch.__version__, "batch": args.batch,
           "reps": args.reps, "models": models, "rows": rows}  # fmt: skip
    out.write_text(json.dumps(doc, indent=1) + "\n")
    write_section(ROOT / "docs" / "benchmarks.md", text, START, END)
    print(f"wrote {out} and docs/benchmarks.md")


if __name__ == "__main__":
    main()
