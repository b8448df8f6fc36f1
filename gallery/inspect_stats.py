"""Train a torch LeNet a few steps on scikit-learn's digits with a ModuleTracker and plot the std
of each layer's output and each weight's gradient norm over the steps.

Usage: python -m gallery.inspect_stats [--out docs/img/inspect_stats.png] [--steps 120] [--every 4]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np
import torch
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from sklearn.datasets import load_digits

from xaikit.architecture.torch import LeNet
from xaikit.inspect import ModuleTracker
from xaikit.viz.inspect_plot import plot_module_stats


def digits_32() -> tuple[torch.Tensor, torch.Tensor]:
    """scikit-learn's 8x8 digits, scaled to [0, 1] and enlarged to 1x32x32 (nearest neighbour)."""
    digits = load_digits()
    x = digits.images.astype(np.float32) / 16.0
    x = np.kron(x, np.ones((4, 4), dtype=np.float32))[:, None]
    return torch.from_numpy(x), torch.from_numpy(digits.target.astype(np.int64))


def train(steps: int, every: int, log_dir: Path, seed: int = 0) -> ModuleTracker:
    torch.manual_seed(seed)
    x, y = digits_32()
    model = LeNet(input_shape=(1, 32, 32), classes=10, softmax=False)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(seed)
    tracker = ModuleTracker(model, log_dir, every_n_steps=every, kinds=("output", "grad"))
    with tracker:
        for _ in range(steps):
            idx = torch.randint(0, len(x), (64,), generator=gen)
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x[idx]), y[idx])
            loss.backward()
            opt.step()
            tracker.step()
    return tracker


def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="docs/img/inspect_stats.png")
    parser.add_argument("--steps", type=int, default=120)
    parser.add_argument("--every", type=int, default=4)
    parser.add_argument("--log-dir", default=None, help="run folder (default: a temporary folder)")
    parser.add_argument("--dpi", type=float, default=110)
    args = parser.parse_args(argv)
    if args.log_dir:
        df = train(args.steps, args.every, Path(args.log_dir)).df
    else:  # the records are only needed for the picture
        with tempfile.TemporaryDirectory(prefix="inspect-gallery-") as tmp:
            df = train(args.steps, args.every, Path(tmp)).df
    # the shared pooling module (called twice per step) would be drawn as "model.pool #0" / "#1"
    layers = ["model.conv1", "model.conv2", "model.conv3", "model.fc1", "model.fc2"]

    fig = Figure(figsize=(12.0, 4.4), dpi=args.dpi, layout="constrained")
    FigureCanvasAgg(fig)
    left, right = fig.subplots(1, 2)
    plot_module_stats(df, "std", "output", modules=layers, ax=left, title="std of layer outputs")
    grads = df[(df["kind"] == "grad") & (df["tname"] == "weight")]
    plot_module_stats(
        grads, "norm", "grad", modules=layers, tname="weight", ax=right, title="L2 norm of weight gradients"
    )
    fig.suptitle(f"LeNet on digits, Adam 1e-3, batch 64: ModuleTracker every {args.every} steps")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=args.dpi)
    print(f"wrote {out} ({len(df)} records{f' in {args.log_dir}' if args.log_dir else ''})")
    return out


if __name__ == "__main__":
    main()
