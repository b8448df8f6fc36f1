"""Picture of docs/tasks.md's segmentation section: per-class ``ClassRegion`` maps of a small
hand-set colour segmenter (background, red disc, blue square), Integrated Gradients and
Grad-CAM, each class's predicted region drawn over the image. Synthetic, seconds to run.

Run: ``python gallery/tasks_segmentation.py`` (writes ``docs/img/tasks_segmentation.png``).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np
import torch

import xaikit as xk

SIZE = 48
CLASSES = ("background", "red disc", "blue square")


class Segmenter(torch.nn.Module):
    """(B, 3, H, W) -> (B, 3 classes, H, W): a 5x5 averaging conv of colour contrasts (red - blue,
    blue - red), a ReLU, and a 1x1 head; weights set by hand, so class k's logits at a pixel read
    the colours around it."""

    def __init__(self) -> None:
        super().__init__()
        self.features = torch.nn.Conv2d(3, 2, 5, padding=2)
        self.head = torch.nn.Conv2d(2, 3, 1)
        with torch.no_grad():
            contrast = torch.tensor([[1.0, 0.0, -1.0], [-1.0, 0.0, 1.0]])  # red - blue, blue - red
            self.features.weight.copy_(contrast[:, :, None, None].expand(2, 3, 5, 5) / 25.0)
            self.features.bias.fill_(-0.1)
            self.head.weight.copy_(torch.tensor([[-4.0, -4.0], [6.0, 0.0], [0.0, 6.0]])[:, :, None, None])
            self.head.bias.copy_(torch.tensor([0.5, 0.0, 0.0]))

    def forward(self, x: Any) -> Any:
        return self.head(torch.relu(self.features(x)))


def image() -> np.ndarray:
    yy, xx = np.mgrid[:SIZE, :SIZE]
    img = np.full((3, SIZE, SIZE), 0.3, np.float32)
    disc = (xx - 14) ** 2 + (yy - 16) ** 2 < 64
    img[0][disc], img[2][disc] = 0.9, 0.2
    square = (abs(xx - 33) < 8) & (abs(yy - 32) < 8)
    img[0][square], img[2][square] = 0.2, 0.9
    img += np.random.default_rng(0).normal(0, 0.04, img.shape).astype(np.float32)
    return np.clip(img, 0, 1)[None]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument(
        "--out",
        default=str(Path(__file__).resolve().parent.parent / "docs" / "img" / "tasks_segmentation.png"),
    )
    args = p.parse_args()
    model, x = Segmenter().eval(), image()
    with torch.no_grad():
        predicted = model(torch.tensor(x)).argmax(1).numpy()  # (1, H, W)
    regions, maps = [], {"Integrated Gradients": [], "Grad-CAM": []}
    for k in (1, 2):  # one row per class: where the clean image is predicted k, and why
        regions.append((predicted == k).astype(np.float32))
        target = xk.targets.ClassRegion(k)
        ig = np.asarray(xk.xai.explain(model, x, target=target, method="integrated", nsamples=32))
        maps["Integrated Gradients"].append(np.abs(ig).sum(axis=1))
        maps["Grad-CAM"].append(
            np.asarray(xk.xai.explain(model, x, target=target, method="gradcam", layer="features"))
        )
    both = np.concatenate([x, x])
    cols: dict[str, list[Any]] = {
        "image": [both],
        "predicted region (row 1: red disc, row 2: blue square)": [both, np.concatenate(regions)],
    }
    cols.update({title: [np.concatenate(m)] for title, m in maps.items()})
    xk.viz.ImgData(cols, colormap="inferno").paint_figure().savefig(args.out, dpi=110)
    print("wrote", args.out)


if __name__ == "__main__":
    main()
