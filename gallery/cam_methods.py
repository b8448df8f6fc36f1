"""The class-activation maps side by side on ``shapes``: Grad-CAM and its variants.

Trains a LeNet on the bundled data, explains a few evaluation images with every CAM method of
``xk.xai.explain`` (the default layer: the last one with a spatial output) and writes
``docs/img/cam_methods.png``.

    python -m gallery.cam_methods [--framework torch|tf] [--out PATH] [--epochs 6] [--n-train 6000]
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # also `python gallery/<script>.py`

import xaikit as xk
from gallery._common import CLASS_NAMES, model_layout, out_path, parser, pick_samples, train_lenet

METHODS = [
    "gradcam",
    "hirescam",
    "xgradcam",
    "gradcam++",
    "layercam",
    "scorecam",
    "eigencam",
    "guided_gradcam",
]


def main(argv: list[str] | None = None) -> str:
    args = parser(__doc__.splitlines()[0], "cam_methods.png").parse_args(argv)
    out = out_path(args, "cam_methods.png")
    model, data = train_lenet(args.framework, epochs=args.epochs, n_train=args.n_train)
    idx = pick_samples(data, 5)
    x = data["x"][idx]
    xin = model_layout(args.framework, x)
    names = lambda labels: np.array([CLASS_NAMES[int(v)] for v in labels])  # noqa: E731
    columns: dict[str, np.ndarray] = {
        "label": names(data["y"][idx]),
        "image": x,
        "object mask": data["mask"][idx].astype(np.float32),
    }
    for method in METHODS:
        m = xk.xai.explain(model, xin, method=method)
        if method == "guided_gradcam":  # per pixel and channel: the magnitude over channels
            m = np.abs(m).sum(axis=1 if args.framework == "torch" else -1)
        peak = np.abs(m).reshape(len(m), -1).max(axis=1).reshape(-1, 1, 1)
        columns[method] = m / np.maximum(peak, 1e-12)  # display: each map on its own scale
    grid = xk.ImgData(columns, colormap="inferno", colormaps={"object mask": "gray"})
    grid.paint_figure(save_path=out, dpi=args.dpi)
    print(f"wrote {out}")
    return out


if __name__ == "__main__":
    main()
