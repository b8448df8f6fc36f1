"""The gradient family beyond SmoothGrad and IG, on ``shapes``: VarGrad, Input×Gradient, Expected
Gradients, Blur IG, Guided IG and XRAI beside vanilla gradients and IG.

Trains a LeNet on the bundled data, explains a few evaluation images with each method (Expected
Gradients draws its references from 64 training images) and writes
``docs/img/gradient_family.png``: the image, its object mask, then each method's map (magnitude
summed over channels, scaled per image; XRAI's map is already one per image) with its title.

    python -m gallery.gradient_family [--framework torch|tf] [--out PATH] [--epochs 6] [--n-train 6000]
        [--steps 32]
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # also `python gallery/<script>.py`

import xaikit as xk
from gallery._common import CLASS_NAMES, model_layout, out_path, parser, pick_samples, train_lenet
from xaikit.xai._engine.display import to_display
from xaikit.xai.registry import title

METHODS = (
    "vanilla",
    "integrated",
    "vargrad",
    "input_x_gradient",
    "expected_gradients",
    "blur_ig",
    "guided_ig",
    "xrai",
)


def options(method: str, steps: int, references: np.ndarray) -> dict[str, Any]:
    """Each method's settings in this picture (``steps`` path steps or noise samples)."""
    return {
        "integrated": {"nsamples": steps, "baseline": "black"},
        "vargrad": {"nsamples": steps},
        "expected_gradients": {"nsamples": steps, "baseline": references},
        "blur_ig": {"steps": steps, "max_sigma": 8.0},
        "guided_ig": {"steps": steps},
        "xrai": {"steps": steps},
    }.get(method, {})


def main(argv: list[str] | None = None) -> str:
    p = parser(__doc__.splitlines()[0], "gradient_family.png")
    p.add_argument("--steps", type=int, default=32, help="path steps / noise samples of every method")
    args = p.parse_args(argv)
    out = out_path(args, "gradient_family.png")
    model, data = train_lenet(args.framework, epochs=args.epochs, n_train=args.n_train)
    idx = pick_samples(data, 5)
    x = data["x"][idx]
    xm = model_layout(args.framework, x)
    rng = np.random.default_rng(0)
    refs = model_layout(args.framework, data["x"][rng.choice(len(data["x"]), 64, replace=False)])
    axis = 1 if args.framework == "torch" else 3
    cols: dict[str, Any] = {
        "label": np.array([CLASS_NAMES[int(v)] for v in data["y"][idx]]),
        "image": x,
        "object mask": data["mask"][idx].astype(np.float32),
    }
    for method in METHODS:
        raw = np.asarray(
            xk.xai.explain(model, xm, method=method, seed=0, **options(method, args.steps, refs))
        )
        if raw.shape == xm.shape:  # input-shaped attributions: one channel of magnitudes
            shown = to_display(raw, axis).squeeze(axis)
        else:  # XRAI: one (B, H, W) map, its regions' ranks
            shown = to_display(raw, None, percentile=100.0)
        cols[title(method)] = shown
        print(f"  {method}: done", flush=True)
    grid = xk.ImgData(cols, colormap="inferno", colormaps={"object mask": "gray"})
    grid.paint_figure(save_path=out, dpi=args.dpi)
    print(f"wrote {out}")
    return out


if __name__ == "__main__":
    main()
