"""Occlusion and RISE on ``shapes``: forward-only attributions beside the objects' masks.

Trains a LeNet on the bundled data, explains a few evaluation images with occlusion (the default
4x4 window, stride 2, and an 8x8 window) and RISE (1000 masks, 8x8 grid), and writes
``docs/img/perturbation.png``.

    python -m gallery.perturbation [--framework torch|tf] [--out PATH] [--epochs 6] [--n-train 6000]
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # also `python gallery/<script>.py`

import xaikit as xk
from gallery._common import CLASS_NAMES, model_layout, out_path, parser, pick_samples, train_lenet


def main(argv: list[str] | None = None) -> str:
    p = parser(__doc__.splitlines()[0], "perturbation.png")
    p.add_argument("--masks", type=int, default=1000, help="RISE masks")
    args = p.parse_args(argv)
    out = out_path(args, "perturbation.png")
    model, data = train_lenet(args.framework, epochs=args.epochs, n_train=args.n_train)
    idx = pick_samples(data, 5)
    x = data["x"][idx]
    xm = model_layout(args.framework, x)
    explain = xk.xai.explain
    # occlusion repeats its map on every channel: keep one, (B, H, W)
    one = (lambda a: a[:, 0]) if args.framework == "torch" else (lambda a: a[..., 0])
    occ = one(explain(model, xm, method="occlusion"))
    occ8 = one(explain(model, xm, method="occlusion", window=8, stride=4))
    rise = explain(model, xm, method="rise", nsamples=args.masks)
    lo = rise.min(axis=(1, 2), keepdims=True)
    shown = (rise - lo) / np.maximum(rise.max(axis=(1, 2), keepdims=True) - lo, 1e-12)  # [0, 1] each
    names = lambda labels: np.array([CLASS_NAMES[int(v)] for v in labels])  # noqa: E731
    grid = xk.ImgData(
        {
            "label": names(data["y"][idx]),
            "image": x,
            "object mask": data["mask"][idx].astype(np.float32),
            "occlusion 4x4 /2": occ,
            "occlusion 8x8 /4": occ8,
            f"RISE ({args.masks})": shown,
            "x RISE": xk.viz.overlay(x, shown, channel_axis=-1),
        },
        colormap="inferno",
        colormaps={"object mask": "gray"},
    )
    grid.paint_figure(save_path=out, dpi=args.dpi)
    print(f"wrote {out}")
    return out


if __name__ == "__main__":
    main()
