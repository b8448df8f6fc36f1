"""Stacked detection targets against a loop of single-target calls (issue 28).

A small YOLO-style conv detector (torch, random weights, (B, N, 4 + K) output) and 8 boxes per
image: one ``explain`` call with ``Box(boxes (B, 8, 4), k)`` (B*8 logical samples explained in
large chunks) against 8 calls with ``Box(boxes[:, t], k)``. Prints a markdown table (median
of ``--repeats`` timings after a warm-up call).

The gradient CAMs (Grad-CAM, HiResCAM, ... on the backbone's output) run the backbone once per
image and the head once per box, Score-CAM its masked passes once per image; the gradient sweep
runs every (image, box) row. The last line
gives the one-pass figures F and B of this model and the bound they put on sharing the forward
pass in a gradient sweep.

Run: ``python benchmarks/targets_bench.py --repeats 3``.
"""

from __future__ import annotations

import argparse
import time
import warnings
from typing import Any

import numpy as np
import torch

import xaikit as xk

T = 8


def detector(size: int, anchors: int, classes: int) -> tuple[torch.nn.Module, np.ndarray]:
    """A conv net whose anchors have fixed boxes (a grid) and class scores from pooled features:
    a stride-8 backbone (four 3x3 convolutions) and a 1x1-convolution head."""
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
            conv = torch.nn.Conv2d
            self.backbone = torch.nn.Sequential(  # stride 8, where a detector's CAM layer is
                conv(3, 16, 3, padding=1), torch.nn.ReLU(),
                conv(16, 32, 3, padding=1, stride=2), torch.nn.ReLU(),
                conv(32, 64, 3, padding=1, stride=2), torch.nn.ReLU(),
                conv(64, 64, 3, padding=1, stride=2), torch.nn.ReLU(),
            )  # fmt: skip
            self.head = torch.nn.Sequential(conv(64, classes, 1), torch.nn.AdaptiveAvgPool2d(grid))
            self.register_buffer("boxes", torch.tensor(boxes))

        def forward(self, x: Any) -> Any:
            scores = self.head(self.backbone(x)).flatten(2).transpose(1, 2)  # (B, grid*grid, K)
            # the batch size of the features, not of x (as detection heads do): the gradient CAMs
            # then run the layers below their layer once per image, not once per box
            return torch.cat([self.boxes.expand(scores.shape[0], -1, -1), scores], dim=-1)

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
    parser.add_argument("--methods", default="vanilla,smoothgrad,integrated,gradcam,hirescam,scorecam")
    args = parser.parse_args()
    model, anchors = detector(args.size, 16, 5)
    warnings.filterwarnings("ignore", category=xk.DegenerateMapWarning)  # random weights: timings only
    x = np.random.default_rng(0).uniform(0, 1, (args.batch, 3, args.size, args.size)).astype(np.float32)
    with torch.no_grad():
        out = model(torch.tensor(x)).numpy()
    labels = out[..., 4:].argmax(-1)  # each image's 8 boxes: its first 8 anchors, their predicted labels
    boxes = np.broadcast_to(anchors[:T], (args.batch, T, 4)).copy()
    k = labels[:, :T]
    cam = {"layer": "backbone"}  # the backbone's output: the detection head runs above it
    opts = {
        "smoothgrad": {"nsamples": 8, "magnitude": False},
        "integrated": {"nintegration": 8, "baseline": "zeros", "magnitude": False},
        "vanilla": {"magnitude": False},
        **dict.fromkeys(("gradcam", "gradcam++", "xgradcam", "layercam", "hirescam", "scorecam"), cam),
    }
    print(f"torch {torch.__version__} CPU, {torch.get_num_threads()} threads; B={args.batch}, {args.size}x{args.size}, "
          f"{T} boxes per image; median of {args.repeats}\n")  # fmt: skip
    print("| method | stacked (1 call) s | looped (8 calls) s | speed-up |")
    print("|---|---:|---:|---:|")
    for method in args.methods.split(","):
        o = opts.get(method, {})

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
    f, fb = pass_times(model, x, args.repeats)
    bound = T * fb / (f + T * (fb - f))
    print(
        f"\nOne forward pass of the {args.batch} images F = {f * 1e3:.2f} ms, forward + input-gradient "
        f"backward F + B = {fb * 1e3:.2f} ms (B = {(fb - f) / f:.1f} F): a gradient sweep that shared the "
        f"forward pass between the {T} boxes (still {T} backward passes) would gain at most "
        f"T (F + B) / (F + T B) = {bound:.2f}x over the loop."
    )


def pass_times(model: torch.nn.Module, x: np.ndarray, repeats: int) -> tuple[float, float]:
    """Median seconds of a forward pass of ``x`` and of a forward pass with the input gradient."""
    xt = torch.tensor(x)

    def forward() -> Any:
        with torch.no_grad():
            return model(xt)

    def backward() -> Any:
        leaf = xt.clone().requires_grad_(True)
        return torch.autograd.grad(model(leaf)[..., 4:].sum(), leaf)

    return timed(forward, 5 * repeats), timed(backward, 5 * repeats)


if __name__ == "__main__":
    main()
