"""Every explanation method side by side: which one points at the object?

Two pictures and one table:

* ``methods_side_by_side_shapes.png``: a PyTorch LeNet trained on the bundled ``shapes``
  images (a coloured shape among distractors; the shape alone decides the label and the data
  carries its pixel mask). Each method explains held-out images; every column is one method's
  map laid over the image, titled with its mean *energy in the object mask* over ``--samples``
  images (the share of the map's positive mass that lies on the object; higher is better).
* ``methods_side_by_side_resnet18.png``: the same methods on xaikit's ResNet18 at 224x224 with
  random weights (batch norm calibrated; nothing is downloaded), on shapes images scaled up 7x:
  a check that every method runs at real size, not a picture of what a trained ResNet sees.
* the table of energy and pointing game per method, written into ``docs/methods.md``
  between its ``methods_side_by_side`` markers when the pictures go to ``docs/img``.

Usage: python -m gallery.methods_side_by_side [--out docs/img] [--epochs 6] [--n-train 6000]
    [--samples 32] [--show 4] [--big 2] [--scale 7] [--n-masks 2000] [--part shapes|resnet|both]
    [--light]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout

import xaikit as xk
from gallery.evaluate_methods import load, train_torch
from xaikit.dataset.data import shapes
from xaikit.xai.registry import family, method_names, title

DOCS = Path(__file__).resolve().parent.parent / "docs"
MARKER = "methods_side_by_side"


def options(method: str, size: int, n_masks: int, light: bool = False) -> dict[str, Any]:
    """The settings each method runs with (the same for every image); ``light``: the fewest
    samples that still exercise each method (a quick check, not a picture to read)."""
    window = max(2, size // 8)
    if light:
        window = max(2, size // 4)
    return {
        "smoothgrad": {"nsamples": 2 if light else 16},
        "integrated": {"nsamples": 4 if light else 32, "baseline": "black"},
        "smint": {"nsamples": 2 if light else 8, "nintegration": 2 if light else 16, "baseline": "black"},
        "vargrad": {"nsamples": 2 if light else 16},
        "expected_gradients": {"nsamples": 2 if light else 32},
        "blur_ig": {"steps": 4 if light else 32, "max_sigma": 50.0 * size / 224},
        "guided_ig": {"steps": 4 if light else 32},
        "xrai": {"steps": 4 if light else 32},
        "occlusion": {"window": window, "stride": window if light else max(1, window // 2)},
        "rise": {"nsamples": n_masks},
        # model-agnostic: 16 patches (4 when light) and a few hundred forward rows per image
        "feature_ablation": {"segments": 4 if light else 16},
        "shapley_sampling": {"segments": 4 if light else 16, "nsamples": 1 if light else 4},
        "kernel_shap": {"segments": 4 if light else 16, "nsamples": 14 if light else 128},
        "lime": {"segments": 4 if light else 16, "nsamples": 8 if light else 128},
        "sobol": {"segments": 4 if light else 16, "nsamples": 2 if light else 8},
        "hsic": {"segments": 4 if light else 16, "nsamples": 8 if light else 128},
    }.get(method, {})


def explain_all(
    model: Any, x: np.ndarray, size: int, n_masks: int, light: bool = False
) -> dict[str, tuple[np.ndarray, float]]:
    """``{method: (maps, seconds)}`` for every method, in the order of ``xk.xai.METHODS``, but
    the attention methods: they read vision transformers only (LeNet and ResNet18 here)."""
    out = {}
    for method in method_names():
        if family(method) == "transformer":
            continue
        t0 = time.perf_counter()
        opts = options(method, size, n_masks, light)
        maps = np.asarray(xk.xai.explain(model, x, method=method, seed=0, **opts))
        out[method] = (maps, time.perf_counter() - t0)
        print(f"  {method}: {out[method][1]:.1f} s", flush=True)
    return out


def display(maps: np.ndarray, x: np.ndarray) -> np.ndarray:
    """A (B, H, W) display map in [0, 1]: channels summed by magnitude, scaled per image."""
    from xaikit.xai._engine.display import to_display

    m = np.abs(maps)
    if m.shape == x.shape:  # input-shaped attributions, channel-first here
        m = m.sum(axis=1)
    return to_display(m, None, percentile=99.0)


def paint(
    x: np.ndarray,
    labels: list[str],
    maps: dict[str, np.ndarray],
    captions: dict[str, str],
    path: Path,
    title_: str,
) -> None:
    images = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    cols: dict[str, Any] = {"label": labels, "image": images}
    for method, m in maps.items():
        cols[captions[method]] = xk.viz.overlay(images, display(m, x), smooth=0.0)
    xk.ImgData(cols, figure_title=title_).paint_figure(save_path=str(path), dpi=80, cell_size=1.4)
    print(f"wrote {path}")


def table(rows: list[dict[str, Any]], note: str) -> str:
    lines = [note, "", "| method | energy in mask ↑ | pointing game ↑ |", "|---|---:|---:|"]
    for r in sorted(rows, key=lambda r: -r["energy"]):
        lines.append(f"| {r['method']} | {r['energy']:.3f} | {r['pointing']:.2f} |")
    return "\n".join(lines)


def write_table(text: str, out_dir: Path) -> Path:
    """Into docs/methods.md between the markers when the pictures go to docs/img; else a
    ``methods_table.md`` beside them. Written atomically."""
    page = out_dir.resolve().parent / "methods.md"
    head, tail = f"<!-- {MARKER} -->", f"<!-- /{MARKER} -->"
    if out_dir.resolve() == (DOCS / "img").resolve() and page.exists() and head in page.read_text():
        before, rest = page.read_text().split(head, 1)
        _, after = rest.split(tail, 1)
        content, path = f"{before}{head}\n{text.strip()}\n{tail}{after}", page
    else:
        content, path = text.strip() + "\n", out_dir / "methods_table.md"
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(content)
    os.replace(tmp, path)
    return path


def resnet_part(
    x32: np.ndarray, labels: list[str], out_dir: Path, n_masks: int, scale: int, light: bool
) -> None:
    import torch

    from xaikit.architecture.torch import ResNet18, calibrate_batchnorm

    torch.manual_seed(0)
    x = np.kron(x32, np.ones((1, 1, scale, scale), dtype=np.float32))  # 32 -> 32*scale, nearest
    size = x.shape[-1]
    model = calibrate_batchnorm(ResNet18(classes=5), torch.as_tensor(x))
    print(f"ResNet18 (random weights) on {len(x)} images at {size}x{size}:")
    got = explain_all(model, x, size, n_masks, light)
    captions = {m: title(m) for m in got}
    paint(
        x, labels, {m: v for m, (v, _) in got.items()}, captions, out_dir / "methods_side_by_side_resnet18.png",
        f"ResNet18, random weights, {size}x{size}: every method runs at real size (timings: docs/benchmarks.md)",
    )  # fmt: skip


def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=str(DOCS / "img"), help="the folder of the pictures")
    parser.add_argument("--n-train", type=int, default=6000)
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--samples", type=int, default=32, help="held-out images scored")
    parser.add_argument("--show", type=int, default=4, help="images shown")
    parser.add_argument("--big", type=int, default=2, help="images of the ResNet picture")
    parser.add_argument("--scale", type=int, default=7, help="the ResNet's images: 32 x scale pixels")
    parser.add_argument("--n-masks", type=int, default=2000, help="RISE masks")
    parser.add_argument("--part", choices=["shapes", "resnet", "both"], default="both")
    parser.add_argument("--light", action="store_true", help="fewest samples per method (a check)")
    args = parser.parse_args(argv)
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    if args.part == "resnet":  # no training: any shapes images do
        _, test = load(16, max(args.big, 1))
        names = {v: k for k, v in shapes.label_mapping.items()}
        x = np.ascontiguousarray(test["x"][: args.big].transpose(0, 3, 1, 2))
        labels = [names[int(v)] for v in test["y"][: args.big]]
        resnet_part(x, labels, out_dir, args.n_masks, args.scale, args.light)
        return out_dir / "methods_side_by_side_resnet18.png"
    train, test = load(args.n_train, max(args.samples, 200))
    model = train_torch(train, test, args.epochs)
    n = args.samples
    x = np.ascontiguousarray(test["x"][:n].transpose(0, 3, 1, 2))
    mask = test["mask"][:n]
    names = {v: k for k, v in shapes.label_mapping.items()}
    labels = [names[int(v)] for v in test["y"][:n]]
    print(f"LeNet on shapes, {n} held-out images:")
    got = explain_all(model, x, 32, args.n_masks, args.light)
    rows, captions = [], {}
    for method, (maps, _) in got.items():
        loc = xk.evaluate.localization(maps, mask)
        energy = float(np.nanmean(loc["energy"]))
        rows.append(
            {
                "method": title(method),
                "energy": energy,
                "pointing": float(loc["pointing"].mean()),
            }
        )
        captions[method] = f"{title(method)}\nE={energy:.2f}"
    k = args.show
    paint(
        x[:k], labels[:k], {m: v[:k] for m, (v, _) in got.items()}, captions,
        out_dir / "methods_side_by_side_shapes.png",
        f"LeNet on shapes: every method; E = mean energy in the object mask over {n} images",
    )  # fmt: skip
    chance = float(mask.reshape(n, -1).mean())
    note = (
        f"PyTorch LeNet trained on `shapes` ({args.epochs} epochs, {args.n_train} images), {n} held-out "
        f"images; a uniform map scores the object's share of the image, {chance:.3f}."
    )
    path = write_table(table(rows, note), out_dir)
    print(f"table written to {path}")
    if args.part == "both":
        resnet_part(x[: args.big], labels[: args.big], out_dir, args.n_masks, args.scale, args.light)
    return path


if __name__ == "__main__":
    main()
