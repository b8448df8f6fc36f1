"""Paint an example ImgData grid from synthetic images (no model, no download).

Usage: python gallery/imgdata_grid.py [--out docs/img/imgdata_grid.png] [--dpi 96]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from xaikit.viz import ImgData, overlay

SIZE = 32
CLASSES = ("circle", "square", "triangle")


def make_samples(n: int = 5, seed: int = 0) -> dict[str, np.ndarray]:
    """Coloured shapes on noisy backgrounds, their class, a box and a blob mask around them."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:SIZE, 0:SIZE].astype(np.float32)
    images = np.empty((n, SIZE, SIZE, 3), dtype=np.float32)
    labels, boxes, masks, attrs = (
        [],
        np.zeros((n, 2, 5)),
        np.empty((n, SIZE, SIZE)),
        np.empty((n, SIZE, SIZE)),
    )
    for i in range(n):
        cls = i % len(CLASSES)
        background = 0.25 + 0.15 * rng.random(3)
        img = np.clip(background + 0.08 * rng.standard_normal((SIZE, SIZE, 3)), 0, 1)
        r = rng.uniform(6, 9)
        cx, cy = rng.uniform(r + 1, SIZE - r - 1, size=2)
        if cls == 0:
            inside = (xx - cx) ** 2 + (yy - cy) ** 2 <= r**2
        elif cls == 1:
            inside = (np.abs(xx - cx) <= r) & (np.abs(yy - cy) <= r)
        else:
            inside = (yy >= cy - r) & (yy <= cy + r) & (np.abs(xx - cx) <= (yy - (cy - r)) / 2)
        color = rng.uniform(0.5, 1.0, size=3)
        color[rng.integers(3)] *= 0.3
        img[inside] = color
        images[i] = img
        labels.append(CLASSES[cls])
        boxes[i, 0] = (cx - r, cy - r, 2 * r, 2 * r, cls)
        blob = np.exp(-((xx - cx) ** 2 + (yy - cy) ** 2) / (2 * (0.8 * r) ** 2))
        blob += 0.15 * rng.random((SIZE, SIZE))
        masks[i] = (blob - blob.min()) / (blob.max() - blob.min())
        # a fake signed attribution: positive on the shape, negative on a ring around it
        ring = np.exp(-((np.hypot(xx - cx, yy - cy) - 1.5 * r) ** 2) / 8.0)
        attrs[i] = (inside * 1.0 - 0.6 * ring) * rng.uniform(0.5, 3.0)
    preds = [lab if i != 3 else CLASSES[(CLASSES.index(lab) + 1) % 3] for i, lab in enumerate(labels)]
    return {
        "x": images,
        "y": np.array(labels),
        "y_pred": np.array(preds),
        "boxes": boxes,
        "mask": masks[..., None].astype(np.float32),
        "attr": attrs.astype(np.float32),
    }


def build_grid(samples: dict[str, np.ndarray]) -> ImgData:
    """The grid of the docs page: text, images, overlays, masks, signed attributions, boxes."""
    x = samples["x"]
    normalized = (x - x.mean(axis=(1, 2, 3), keepdims=True)) / x.std(axis=(1, 2, 3), keepdims=True)
    columns = {
        "y": samples["y"],
        "prediction": samples["y_pred"],
        "x": x,
        "x saliency": overlay(x, samples["mask"]),
        "saliency": samples["mask"],
        "attribution": samples["attr"],
        "x + boxes": [x, samples["boxes"]],
        "normalized x": normalized,
        "grey, channel-first": np.moveaxis(x.mean(axis=-1, keepdims=True), -1, 1),
        "note": "columns with another batch size get their own row group",
    }
    return ImgData(
        columns,
        colormap="inferno",
        colormaps={"grey, channel-first": "gray"},
        signed={"attribution"},
        colorbars={"saliency", "attribution"},
    )


def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="docs/img/imgdata_grid.png", help="PNG, SVG or PDF path")
    parser.add_argument("--dpi", type=float, default=96)
    args = parser.parse_args(argv)
    grid = build_grid(make_samples())
    grid.paint_figure(save_path=args.out, dpi=args.dpi)
    print(f"wrote {args.out}")
    return Path(args.out)


if __name__ == "__main__":
    main()
