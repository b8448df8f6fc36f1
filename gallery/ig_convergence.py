"""Integrated Gradients maps of a random-weight ResNet-18 at growing steps, beside the distance
``xk.evaluate.convergence`` measures from each to the map at the most steps.

The ResNet-18 (``xaikit.architecture.torch.ResNet18``, torchvision's layers, random weights,
nothing downloaded) has its BatchNorm statistics calibrated on pictures of the bundled ``shapes``
data; IG runs from a zero baseline on ImageNet-normalized pictures. At few steps the map is a
picture of the quadrature's error; the last column says how far each map is from the reference
(relative L2) and how much each sample's attributions miss f(x) - f(baseline) at each count.

Usage: python -m gallery.ig_convergence [--out docs/img/ig_convergence.png] [--size 96]
    [--steps 4 16 64 256] [--images 2] [--dpi 96]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # also `python gallery/<script>.py`

import xaikit as xk
from xaikit.dataset.data import shapes
from xaikit.viz import ImgData

MEAN, STD = np.array([0.485, 0.456, 0.406]), np.array([0.229, 0.224, 0.225])


def build_grid(size: int, steps: tuple[int, ...], images: int, seed: int = 0) -> tuple[ImgData, str]:
    """The grid of the docs page, and the lines of its table."""
    import torch

    from xaikit.architecture.torch import ResNet18, calibrate_batchnorm

    data, _ = shapes.load_data(image_size=size, n_train=16, n_eval=1, seed=seed)
    pixels = data["x"].astype(np.float64) / 255.0
    x = np.ascontiguousarray(((pixels - MEAN) / STD).transpose(0, 3, 1, 2)).astype(np.float32)
    torch.manual_seed(seed)
    model = calibrate_batchnorm(ResNet18(classes=len(shapes.label_mapping)), torch.as_tensor(x))
    x = x[:images]
    run = {"method_options": {"baseline": "zeros"}}
    result = xk.evaluate.convergence(model, x, "integrated", values=steps, **run)  # type: ignore[arg-type]
    columns: dict[str, object] = {"image": pixels[:images]}
    assert result.delta is not None
    for n in steps:
        maps = xk.xai.explain(model, x, method="integrated", nsamples=n, baseline="zeros")
        columns[f"IG, {n} steps"] = np.abs(maps).sum(axis=1)
    # f(x) - f(baseline) of the explained class: the last maps' sum less their delta
    change = np.abs(maps.reshape(images, -1).astype(np.float64).sum(axis=1) - result.delta[-1])
    lines = []
    for b in range(images):
        parts = [f"{n}: {result.relative[i, b]:.2f}" for i, n in enumerate(steps[:-1])]
        lines.append(", ".join(parts))
    columns[f"distance to {steps[-1]} steps"] = lines
    table = [f"| steps | {' | '.join(f'sample {b}' for b in range(images))} |"]
    table.append("|---:|" + "---:|" * images)
    for i, n in enumerate(steps):
        rel = [f"{result.relative[i, b]:.3f}" if i < len(steps) - 1 else "(reference)" for b in range(images)]
        table.append(f"| {n} | {' | '.join(rel)} |")
    missed = [
        ", ".join(f"{abs(d) / c:.2f}" for d, c in zip(result.delta[i], change)) for i in range(len(steps))
    ]
    table.append("")
    table.append("|delta| / |f(x) - f(baseline)|: " + "; ".join(f"{n}: {m}" for n, m in zip(steps, missed)))
    grid = ImgData(
        columns, colormap="inferno", figure_title="Integrated Gradients of a random ResNet-18 by steps"
    )
    return grid, "\n".join(table)


def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="docs/img/ig_convergence.png", help="PNG, SVG or PDF path")
    parser.add_argument("--size", type=int, default=96, help="picture size")
    parser.add_argument("--steps", type=int, nargs="+", default=[4, 16, 64, 256])
    parser.add_argument("--images", type=int, default=2)
    parser.add_argument("--dpi", type=float, default=96)
    args = parser.parse_args(argv)
    grid, table = build_grid(args.size, tuple(args.steps), args.images)
    grid.paint_figure(save_path=args.out, dpi=args.dpi)
    print(table)
    print(f"wrote {args.out}")
    return Path(args.out)


if __name__ == "__main__":
    main()
