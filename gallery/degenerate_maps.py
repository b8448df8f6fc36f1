"""Raw Grad-CAM maps of a LeNet with random weights (no training, nothing downloaded): on a fixed
0..1 scale they are black (max ~1e-4); ImgData paints each by its own range; a dead layer gives
all-zero maps, reported by a DegenerateMapWarning and painted as zero with a note.

Usage: python -m gallery.degenerate_maps [--out docs/img/degenerate_maps.png] [--dpi 96]
"""

from __future__ import annotations

import argparse
import copy
import warnings
from pathlib import Path

import numpy as np

import xaikit as xk
from xaikit.dataset.data import shapes
from xaikit.viz import ImgData


def build_grid(n: int = 3, seed: int = 0) -> tuple[ImgData, str]:
    """The grid of the docs page and the text of the warning for the dead layer."""
    import torch

    from xaikit.architecture.torch import LeNet

    torch.manual_seed(seed)
    model = LeNet(input_shape=(3, 32, 32), classes=len(shapes.label_mapping)).eval()
    data, _ = shapes.load_data(n_train=n, n_eval=1, seed=seed)
    x = np.moveaxis(data["x"].astype(np.float32) / 255.0, -1, 1)
    cam = xk.xai.explain(model, x, method="gradcam", layer="conv3")
    dead = copy.deepcopy(model)
    with torch.no_grad():
        dead.conv3.bias.fill_(-100.0)  # every unit of conv3 stays below its ReLU
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        zero = xk.xai.explain(dead, x, method="gradcam", layer="conv3")
    message = "; ".join(str(w.message) for w in caught if issubclass(w.category, xk.DegenerateMapWarning))
    grid = ImgData(
        {
            "image": x,
            "raw Grad-CAM on 0…1": cam,
            "raw Grad-CAM, own range": cam,
            "dead layer": zero,
            "largest value": [f"{m:.2g}" for m in cam.max(axis=(1, 2))],
        },
        colormap="inferno",
        vranges={"raw Grad-CAM on 0…1": (0.0, 1.0)},
        figure_title="Grad-CAM of a LeNet with random weights",
    )
    return grid, message


def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="docs/img/degenerate_maps.png", help="PNG, SVG or PDF path")
    parser.add_argument("--dpi", type=float, default=96)
    args = parser.parse_args(argv)
    grid, message = build_grid()
    grid.paint_figure(save_path=args.out, dpi=args.dpi)
    print(message)
    print(f"wrote {args.out}")
    return Path(args.out)


if __name__ == "__main__":
    main()
