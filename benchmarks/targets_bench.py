"""Stacked detection targets against a loop of single-target calls (issue 28).

A small YOLO-style conv detector (torch, random weights, (B, N, 4 + K) output) and 8 boxes per
image: one ``explain`` call with ``Box(boxes (B, 8, 4), k)`` (B*8 logical samples explained in
large chunks) against 8 calls with ``Box(boxes[:, t], k)``. Prints a markdown table (median
of ``--repeats`` timings after a warm-up call).

Run: ``python benchmarks/targets_bench.py --repeats 3``.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np
import torch

import xaikit as xk

T = 8


def detector(size: int, anchors: int, classes: int) -> tuple[torch.nn.Module, np.ndarray]:
    """A conv net whose anchors have fixed boxes (a grid) and class scores from pooled features."""
    torch.manual_seed(0)
    grid = int(np.sqrt(anchors))
    step = size / grid
    boxes = np.array(
        [[i * step, j * step, (i + 1) * step, (j + 1) * step] for j in range(grid) for i in range(grid)],
        dtype=np.float32,
    )

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.body = torch.nn.Sequential(
                torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.ReLU(),
                torch.nn.Conv2d(16, 32, 3, padding=1, stride=2), torch.nn.ReLU(),
                torch.nn.Conv2d(32, classes, 3, padding=1), torch.nn.AdaptiveAvgPool2d(grid),
            )  # fmt: skip
            self.register_buffer("boxes", torch.tensor(boxes))

        def forward(self, x: Any) -> Any:
            scores = self.body(x).flatten(2).transpose(1, 2)  # (B, grid*grid, K)
            return torch.cat([self.boxes.expand(x.shape[0], -1, -1), scores], dim=-1)

    return Net().eval(), boxes


def timed(fn: Any, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--methods", default="vanilla,smoothgrad,integrated")
    args = parser.parse_args()
    model, anchors = detector(args.size, 16, 5)
    x = np.random.default_rng(0).uniform(0, 1, (args.batch, 3, args.size, args.size)).astype(np.float32)
    with torch.no_grad():
        out = model(torch.tensor(x)).numpy()
    labels = out[..., 4:].argmax(-1)  # each image's 8 boxes: its first 8 anchors, their predicted labels
    boxes = np.broadcast_to(anchors[:T], (args.batch, T, 4)).copy()
    k = labels[:, :T]
    opts = {"smoothgrad": {"nsamples": 8}, "integrated": {"nintegration": 8, "baseline": "zeros"}}
    print(f"torch {torch.__version__} CPU, {torch.get_num_threads()} threads; B={args.batch}, {args.size}x{args.size}, "
          f"{T} boxes per image; median of {args.repeats}\n")  # fmt: skip
    print("| method | stacked (1 call) s | looped (8 calls) s | speed-up |")
    print("|---|---:|---:|---:|")
    for method in args.methods.split(","):
        o = {"magnitude": False, **opts.get(method, {})}

        def stacked(method: str = method, o: dict[str, Any] = o) -> Any:
            return xk.xai.explain(model, x, target=xk.targets.Box(boxes, k), method=method, **o)

        def looped(method: str = method, o: dict[str, Any] = o) -> Any:
            return [
                xk.xai.explain(model, x, target=xk.targets.Box(boxes[:, t], k[:, t]), method=method, **o)
                for t in range(T)
            ]

        a, b = stacked(), np.stack(looped(), axis=1)
        err = float(np.abs(a - b).max())
        s, lo = timed(stacked, args.repeats), timed(looped, args.repeats)
        print(f"| {method} | {s:.3f} | {lo:.3f} | {lo / s:.1f}x (max diff {err:.1e}) |")


if __name__ == "__main__":
    main()
