"""Paint masks as outlines with ``Contour`` over images and signed maps (no model, no download).

Usage: python -m gallery.imgdata_contour [--out docs/img/imgdata_contour.png] [--dpi 96]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from gallery.imgdata_grid import make_samples
from xaikit.viz import Contour, ImgData


def build_grid(samples: dict[str, np.ndarray]) -> ImgData:
    """Images, their region mask (the blob above half its height) as an overlay and as an
    outline, and the outline over a signed attribution."""
    x, attr = samples["x"][:3], samples["attr"][:3]
    mask = samples["mask"][:3, ..., 0] > 0.5
    return ImgData(
        {
            "x": x,
            "x + mask (overlay)": [x, mask.astype(np.float32)],
            "x + Contour(mask)": [x, Contour(mask)],
            "attribution + Contour": [attr, Contour(mask, color="k")],
        },
        colormap="inferno",
        signed={"attribution + Contour"},
    )


def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="docs/img/imgdata_contour.png", help="PNG, SVG or PDF path")
    parser.add_argument("--dpi", type=float, default=96)
    args = parser.parse_args(argv)
    build_grid(make_samples()).paint_figure(save_path=args.out, dpi=args.dpi)
    print(f"wrote {args.out}")
    return Path(args.out)


if __name__ == "__main__":
    main()
