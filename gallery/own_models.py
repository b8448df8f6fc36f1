"""Masks of the models users bring: a torch ResNet-18, a Keras MobileNetV2 and a Hugging Face ViT.

Each model is built at 224x224 with random weights (nothing is downloaded; batch norm calibrated
on the pictures), fed ``shapes`` pictures normalized the way its pipeline does it, and explained
with vanilla gradients, SmoothGrad and Integrated Gradients. The image and overlay columns are
drawn de-normalized (``denormalize=``), so they show the real picture. Random weights make the
masks noise-like: the pictures show the plumbing (layouts, ``.logits``, normalization), not
evidence. The PNGs are stored with a 256-colour palette to keep them small.

Writes ``docs/img/own_models_resnet18.png``, ``own_models_mobilenetv2.png`` and
``own_models_vit.png`` (the page ``docs/own_models.md``).

    python -m gallery.own_models [--out docs/img] [--n 3] [--smooth 16] [--steps 16]
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # also `python gallery/<script>.py`

import xaikit as xk
from xaikit.dataset.data import shapes

SIZE = 224
CLASSES = len(shapes.label_mapping)
NAMES = {v: k for k, v in shapes.label_mapping.items()}
IMAGENET = ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
KERAS_TF_MODE = (127.5, 127.5)  # mobilenet_v2.preprocess_input: x / 127.5 - 1 on 0..255
VIT = (0.5, 0.5)  # ViTImageProcessor's image_mean / image_std
PICTURES = ("own_models_resnet18.png", "own_models_mobilenetv2.png", "own_models_vit.png")


def resnet18(x: np.ndarray) -> Any:
    import torch

    from xaikit.architecture.torch import ResNet18, calibrate_batchnorm

    torch.manual_seed(0)
    return calibrate_batchnorm(ResNet18(classes=CLASSES), torch.as_tensor(x))


def mobilenetv2(x: np.ndarray) -> Any:
    import keras

    from xaikit.architecture.tensorflow import calibrate_batchnorm

    keras.utils.set_random_seed(0)
    model = keras.applications.MobileNetV2(
        weights=None, input_shape=(SIZE, SIZE, 3), classes=CLASSES, classifier_activation=None
    )
    return calibrate_batchnorm(model, x)


def vit(x: np.ndarray) -> Any:
    import torch
    from transformers import ViTConfig, ViTForImageClassification

    torch.manual_seed(0)
    config = ViTConfig(
        image_size=SIZE,
        patch_size=16,
        hidden_size=192,
        num_hidden_layers=4,
        num_attention_heads=3,
        intermediate_size=768,
        num_labels=CLASSES,
    )
    return ViTForImageClassification(config).eval()


#: picture -> (title, builder, normalization (mean, std), model takes channel-first)
MODELS: dict[str, tuple[str, Callable[[np.ndarray], Any], tuple[Any, Any], bool]] = {
    PICTURES[0]: ("torch ResNet-18, ImageNet mean/std", resnet18, IMAGENET, True),
    PICTURES[1]: ("Keras MobileNetV2, x / 127.5 - 1", mobilenetv2, KERAS_TF_MODE, False),
    PICTURES[2]: ("Hugging Face ViT (.logits), mean = std = 0.5", vit, VIT, True),
}


def normalized(pixels: np.ndarray, stats: tuple[Any, Any], first: bool) -> np.ndarray:
    """What the model's pipeline feeds it: ``(pixels - mean) / std`` in the pixels' own scale."""
    mean, std = (np.asarray(v, dtype=np.float64) for v in stats)
    scale = 255.0 if np.abs(mean).max() > 1 or np.abs(std).max() > 1 else 1.0
    x = ((pixels / 255.0 * scale - mean) / std).astype(np.float32)
    return np.ascontiguousarray(x.transpose(0, 3, 1, 2)) if first else x


def paint(picture: str, pixels: np.ndarray, labels: np.ndarray, args: argparse.Namespace) -> Path:
    title, build, stats, first = MODELS[picture]
    x = normalized(pixels, stats, first)
    model = build(x)
    x = x[: args.n]
    net = xk.xai.SaliencyNet(model, "x", "y_pred", seed=0, max_batch=32)
    batch = {"x": x}
    vanilla = net.get_masks(batch)
    smooth = net.get_smoothed_masks(batch, nsamples=args.smooth)
    ig = net.get_integrated_masks(batch, nsamples=args.steps, baseline="zeros")
    names = lambda ids: [NAMES[int(v)] for v in ids]  # noqa: E731
    grid = xk.ImgData(
        {
            "shape": names(labels[: args.n]),
            "prediction": names(vanilla["y_pred"]),
            "image": x,
            "vanilla": vanilla["saliency"],
            f"SmoothGrad ({args.smooth})": smooth["saliency"],
            f"IG ({args.steps}, zeros)": ig["saliency"],
            "x SmoothGrad": xk.viz.overlay(x, smooth["saliency"], smooth=4.0, denormalize=stats),
            "x IG": xk.viz.overlay(x, ig["saliency"], smooth=4.0, denormalize=stats),
        },
        colormap="inferno",
        denormalize={"image": stats},
        figure_title=f"{title}: random weights, so the masks are noise-like (not evidence)",
    )
    out = Path(args.out) / picture
    grid.paint_figure(save_path=out, dpi=args.dpi)
    _shrink(out)
    return out


def _shrink(path: Path) -> None:
    """Rewrite the PNG with a 256-colour palette (octree, no dither): noise-like masks make an
    RGB file of ~800 kB; the palette keeps the pictures' colours within a few levels at ~200 kB."""
    from PIL import Image

    with Image.open(path) as img:
        small = img.convert("RGB").quantize(
            colors=256, method=Image.Quantize.FASTOCTREE, dither=Image.Dither.NONE
        )
    tmp = path.with_suffix(".tmp.png")
    small.save(tmp, optimize=True)
    tmp.replace(path)


def main(argv: list[str] | None = None) -> list[Path]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="docs/img", help="the folder of the pictures")
    parser.add_argument("--n", type=int, default=3, help="pictures explained per model")
    parser.add_argument("--smooth", type=int, default=16, help="SmoothGrad noise samples")
    parser.add_argument("--steps", type=int, default=16, help="Integrated Gradients steps")
    parser.add_argument("--dpi", type=int, default=80)
    parser.add_argument("--only", nargs="*", default=None, help="some of " + ", ".join(PICTURES))
    args = parser.parse_args(argv)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    data, _ = shapes.load_data(image_size=SIZE, n_train=max(8, args.n), n_eval=1, seed=0)
    pixels, labels = data["x"], data["y"]
    firsts = [int(np.flatnonzero(labels == c)[0]) for c in np.unique(labels)]  # one of each shape
    order = firsts + [i for i in range(len(labels)) if i not in firsts]
    pixels, labels = pixels[order], labels[order]
    written = []
    for picture in PICTURES:
        if args.only is None or picture in args.only:
            written.append(paint(picture, pixels, labels, args))
            print(f"wrote {written[-1]}", flush=True)
    return written


if __name__ == "__main__":
    main()
