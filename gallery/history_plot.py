"""Paint an example training-history plot (per-label loss with error bands, accuracy per mode).

Usage: python gallery/history_plot.py [--out docs/img/history_plot.png] [--dpi 96]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from xaikit.summary import Summary, ValWithError
from xaikit.viz import plot_history


def make_summaries(seed: int = 0) -> list[Summary]:
    """One synthetic history per label, as LabelTracker writes them (loss as mean ± std)."""
    rng = np.random.default_rng(seed)
    out = []
    for label in ("circle", "square", "triangle"):
        s = Summary(label)
        start, speed = rng.uniform(0.6, 1.6), rng.uniform(500, 1200)
        for step in range(100, 2100, 100):
            mean = start * np.exp(-step / speed) + 0.1
            std = 0.25 * mean * (1 + 0.2 * rng.standard_normal())
            s.write("eval", "ce ($\\mu \\pm \\sigma$)", step, ValWithError(mean - std, mean, mean + std))
            s.write("train", "accuracy", step, 1 - mean / 2.2 + 0.01 * rng.standard_normal())
            s.write("eval", "accuracy", step, 1 - mean / 2)
        out.append(s)
    return out


def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="docs/img/history_plot.png", help="PNG, SVG or PDF path")
    parser.add_argument("--dpi", type=float, default=96)
    args = parser.parse_args(argv)
    plot_history(make_summaries(), save_path=args.out, dpi=args.dpi, title="per-label history")
    print(f"wrote {args.out}")
    return Path(args.out)


if __name__ == "__main__":
    main()
