"""Pictures of docs/tasks.md: a toy detector's per-box maps (stacked ``Box`` targets), the
explained boxes drawn on the image and on each map. Synthetic model and image, seconds to run.

Run: ``python gallery/tasks.py`` (writes ``docs/img/tasks_box.png``).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np
import torch

import xaikit as xk

SIZE = 48
#: three anchors (x0, y0, x1, y1) and the shapes drawn in the image under two of them
ANCHORS = np.array([[4, 6, 22, 26], [24, 20, 44, 44], [2, 30, 18, 46]], dtype=np.float32)


class Detector(torch.nn.Module):
    """YOLO-style (B, 3, 4 + 2): each anchor's class scores read a smoothed feature map
    (a 3x3 conv of the image) inside the anchor's box only."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch.nn.Conv2d(3, 2, 5, padding=2)
        masks = np.zeros((len(ANCHORS), SIZE, SIZE), np.float32)
        for i, (x0, y0, x1, y1) in enumerate(ANCHORS.astype(int)):
            masks[i, y0:y1, x0:x1] = 1.0 / ((x1 - x0) * (y1 - y0))
        self.register_buffer("masks", torch.tensor(masks))
        self.register_buffer("boxes", torch.tensor(ANCHORS))

    def forward(self, x: Any) -> Any:
        feat = torch.tanh(self.conv(x))  # (B, 2, H, W)
        scores = torch.einsum("bkhw,nhw->bnk", feat, self.masks) * 10
        return torch.cat([self.boxes.expand(x.shape[0], -1, -1), scores], dim=-1)


def image() -> np.ndarray:
    yy, xx = np.mgrid[:SIZE, :SIZE]
    img = np.full((3, SIZE, SIZE), 0.15, np.float32)
    disc = (xx - 13) ** 2 + (yy - 16) ** 2 < 49
    img[0][disc], img[1][disc] = 0.9, 0.3
    square = (abs(xx - 34) < 7) & (abs(yy - 32) < 7)
    img[2][square], img[1][square] = 0.9, 0.7
    img += np.random.default_rng(0).normal(0, 0.03, img.shape).astype(np.float32)
    return img[None]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument(
        "--out", default=str(Path(__file__).resolve().parent.parent / "docs" / "img" / "tasks_box.png")
    )
    args = p.parse_args()
    model, x = Detector().eval(), image()
    with torch.no_grad():
        labels = model(torch.tensor(x))[0, :, 4:].argmax(-1).numpy()
    boxes = ANCHORS[None, :2]  # explain the first two anchors' detections, one call
    k = labels[:2]
    maps = xk.xai.explain(model, x, target=xk.targets.Box(boxes, k), method="smoothgrad", nsamples=16)
    drawn = np.concatenate([boxes[0, :, :2], boxes[0, :, 2:] - boxes[0, :, :2], k[:, None]], axis=1)
    cols = {"image + boxes": [x, drawn[None]]}
    for t in range(2):
        cols[f"box {t} (class {k[t]})"] = [maps[:, t].sum(axis=1), drawn[None, t : t + 1]]
    xk.viz.ImgData(cols, colormap="inferno").paint_figure().savefig(args.out, dpi=110)
    print("wrote", args.out)


if __name__ == "__main__":
    main()
