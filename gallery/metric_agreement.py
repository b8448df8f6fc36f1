"""Do the metrics agree? The metric-of-metrics view of ``xk.evaluate.compare`` on the shapes LeNet.

Trains xaikit's LeNet on the bundled ``shapes`` images (PyTorch, the loop and seed of
``gallery/compare_methods.py``), compares seven methods and a random map on
held-out images with their object masks by every default metric (the cheap ones and the mask
metrics), and paints :meth:`~xaikit.evaluate.CompareResult.metric_agreement`: the rank
correlation of every pair of metrics over the methods, direction-adjusted, grouped by family.

Writes the heatmap (PNG) and a markdown text (the verdict lines of both views, and a table of
the pairs within each family) into ``docs/evaluate.md`` between its ``metric_agreement`` markers
when the picture goes to ``docs/img``, else ``metric_agreement.md`` beside the picture.

Usage: python -m gallery.metric_agreement [--out docs/img/metric_agreement.png] [--n-train 6000]
    [--epochs 8] [--samples 24]
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout

import xaikit as xk
from gallery.compare_methods import OPTIONS, write_table
from gallery.evaluate_methods import accuracy, load, train_torch

DOCS = Path(__file__).resolve().parent.parent / "docs"
MARKERS = ("<!-- metric_agreement:text -->", "<!-- /metric_agreement:text -->")
METHODS = {
    "vanilla": "vanilla",
    "SmoothGrad": "smoothgrad",
    "Integrated Gradients": "integrated",
    "input × gradient": "input_x_gradient",
    "guided backprop": "guided_backprop",
    "Grad-CAM": "gradcam",
    "Grad-CAM++": "gradcam++",
}


def markdown(result: Any, note: str) -> str:
    """The verdict lines of both views and a table of the pairs of metrics of one family."""
    means = result.metric_agreement()
    samples = result.metric_agreement(over="samples")
    lines = [note, "", "Over the methods' mean scores (the default):", ""]
    lines += [f"* {line}" for line in means.note.splitlines()]
    lines += ["", 'Over each sample\'s ranking, averaged (`over="samples"`):', ""]
    lines += [f"* {line}" for line in samples.lines] or ["* no two metrics of one family disagree on average"]
    lines += [
        "",
        "| family | metric | metric | ρ over methods | methods | p (exact) | mean ρ per sample (spread, samples) |",
        "|---|---|---|---:|---:|---:|---:|",
    ]
    for a, b in itertools.combinations(means.metrics, 2):
        if a.family != b.family:
            continue
        rho, p = means.matrix.loc[a.name, b.name], means.p_value.loc[a.name, b.name]
        if not np.isfinite(rho):
            continue
        s = samples.matrix.loc[a.name, b.name]
        per = (
            f"{s:.2f} ({samples.spread.loc[a.name, b.name]:.2f}, {samples.samples.loc[a.name, b.name]})"
            if np.isfinite(s)
            else "–"
        )
        lines.append(
            f"| {a.family} | `{a.name}` | `{b.name}` | {rho:.2f} | {means.methods.loc[a.name, b.name]} "
            f"| {p:.2g} | {per} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=str(DOCS / "img" / "metric_agreement.png"), help="the figure")
    parser.add_argument("--text", default="auto", help="where the text goes ('auto': see the docstring)")
    parser.add_argument("--n-train", type=int, default=6000)
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--samples", type=int, default=24, help="held-out images scored")
    args = parser.parse_args(argv)
    picture = Path(args.out)
    picture.parent.mkdir(parents=True, exist_ok=True)
    train, test = load(args.n_train, max(args.samples, 500))
    t0 = time.perf_counter()
    model = train_torch(train, test, args.epochs)
    acc = accuracy(model, np.ascontiguousarray(test["x"].transpose(0, 3, 1, 2)), test["y"])
    trained = time.perf_counter() - t0
    x = np.ascontiguousarray(test["x"][: args.samples].transpose(0, 3, 1, 2))
    mask = test["mask"][: args.samples]
    methods: dict[str, Any] = dict(METHODS)
    methods["random map (chance)"] = np.random.default_rng(0).random(mask.shape)
    t0 = time.perf_counter()
    result = xk.evaluate.compare(model, x, methods, mask=mask, method_options=OPTIONS)
    scored = time.perf_counter() - t0
    agreement = result.metric_agreement()
    agreement.figure(picture, dpi=90)
    print(result.table.to_string())
    print(agreement)
    note = (
        f"PyTorch LeNet trained {args.epochs} epochs on {args.n_train} `shapes` images (held-out accuracy "
        f"{acc:.1%}; trained as for the comparison table above); {len(methods)} methods ({', '.join(methods)}) on "
        f"{args.samples} held-out images with their object masks, every default metric; trained in "
        f"{trained:.0f} s, compared in {scored:.0f} s on a shared 2-core CPU."
    )
    path = write_table(markdown(result, note), picture, args.text, MARKERS, "metric_agreement.md")
    print(f"figure written to {picture}, text to {path}")
    return path


if __name__ == "__main__":
    main()
