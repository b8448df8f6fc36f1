"""A saliency grid per method on ``shapes``: vanilla, SmoothGrad, Integrated Gradients, SmInt.

Trains a LeNet on the bundled data, explains a few evaluation images with every method and
writes ``docs/img/saliency_methods_<framework>.png``.

    python -m gallery.saliency_methods --framework torch
    python -m gallery.saliency_methods --framework tf [--out PATH] [--epochs 6] [--n-train 6000]
"""

from __future__ import annotations

import numpy as np

import xaikit as xk
from gallery._common import CLASS_NAMES, model_layout, out_path, parser, pick_samples, train_lenet


def main(argv: list[str] | None = None) -> str:
    args = parser(__doc__.splitlines()[0], "saliency_methods_{framework}.png").parse_args(argv)
    out = out_path(args, "saliency_methods_{framework}.png")
    model, data = train_lenet(args.framework, epochs=args.epochs, n_train=args.n_train)
    idx = pick_samples(data, 5)
    x = data["x"][idx]
    net = xk.xai.SaliencyNet(model, "x", "y_pred", seed=0)
    batch = {"x": model_layout(args.framework, x)}
    vanilla = net.get_masks(batch)
    smooth = net.get_smoothed_masks(batch, nsamples=25)
    ig = net.get_integrated_masks(batch, nsamples=50, baseline="black")
    smint = net.get_smoothed_masks(batch, nsamples=6, nintegration=50, baseline="black")
    names = lambda labels: np.array([CLASS_NAMES[int(v)] for v in labels])  # noqa: E731
    grid = xk.ImgData(
        {
            "label": names(data["y"][idx]),
            "prediction": names(vanilla["y_pred"]),
            "image": x,
            "object mask": data["mask"][idx].astype(np.float32),
            "vanilla": vanilla["saliency"],
            "SmoothGrad (25)": smooth["saliency"],
            "IG (50, black)": ig["saliency"],
            "SmInt (6x50)": smint["saliency"],
            "x SmInt": xk.viz.overlay(
                x, smint["saliency"] if args.framework == "tf" else smint["saliency"].transpose(0, 2, 3, 1)
            ),
        },
        colormap="inferno",
        colormaps={"object mask": "gray"},
    )
    grid.paint_figure(save_path=out, dpi=args.dpi)
    print(f"wrote {out}")
    return out


if __name__ == "__main__":
    main()
