"""Model-agnostic attribution side by side: feature ablation, Shapley sampling, KernelSHAP, LIME,
Sobol and HSIC, next to occlusion, for a LeNet trained on ``shapes`` (8 x 8 patches) and for a
224 x 224 ResNet-18 with random weights (SLIC superpixels; BatchNorm calibrated on the images;
labelled as such).

The signed methods (occlusion, ablation, Shapley, KernelSHAP, LIME) are painted on a symmetric
scale per image (red: for the predicted class, blue: against); Sobol and HSIC measure
dependence (>= 0) and are painted from white (0) to red. The features column outlines the
features every method switched on and off; the LIME R^2 column is its surrogate's fit
(``raw=True``).

Writes ``docs/img/agnostic_shapes.png`` and ``docs/img/agnostic_resnet18.png`` (torch).

    python -m gallery.agnostic_methods [--out DIR] [--epochs 6] [--n-train 6000] [--size 224]
        [--segments 50] [--images 2] [--light] [--part shapes|resnet|both]
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # also `python gallery/<script>.py`

import xaikit as xk
from gallery._common import CLASS_NAMES, model_layout, parser, pick_samples, train_lenet
from gallery.own_models import IMAGENET, _shrink, normalized, resnet18

#: (column title, method) of the model-agnostic family, in the registry's order
METHODS: list[tuple[str, str]] = [
    ("feature ablation", "feature_ablation"),
    ("Shapley sampling", "shapley_sampling"),
    ("KernelSHAP", "kernel_shap"),
    ("LIME", "lime"),
    ("Sobol", "sobol"),
    ("HSIC", "hsic"),
]
#: the methods whose values are dependence measures (>= 0), not signed contributions
UNSIGNED = ("Sobol", "HSIC")

#: each method's nsamples on shapes (full size, --light): 4x the defaults of the sampled Shapley
#: estimators and LIME (at the defaults, 25 orders and 512 coalitions, their maps of 64 patches
#: are visibly noisy), the defaults of Sobol (32) and HSIC (1536)
SHAPES_SAMPLES: dict[str, tuple[int, int]] = {
    "shapley_sampling": (100, 5),
    "kernel_shap": (2048, 128),
    "lime": (2048, 128),
    "sobol": (32, 8),
    "hsic": (1536, 256),
}
#: each method's nsamples on the ResNet (full size, --light): few, to keep the CPU run short
RESNET_SAMPLES: dict[str, tuple[int, int]] = {
    "shapley_sampling": (2, 1),
    "kernel_shap": (100, 16),
    "lime": (100, 16),
    "sobol": (4, 2),
    "hsic": (200, 16),
}


def _maps(
    model: Any, xin: np.ndarray, common: dict[str, Any], nsamples: dict[str, int]
) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
    """Each method's (B, H, W) map (every channel holds a feature's value: channel 0), LIME's
    R^2 (B,) and the feature ids (B, H, W) the methods used."""
    out: dict[str, np.ndarray] = {}
    r2 = ids = np.empty(0)
    for name, method in METHODS:
        opts = {**common, **({"nsamples": nsamples[method]} if method in nsamples else {})}
        if method == "lime":
            res = xk.xai.explain(model, xin, method=method, raw=True, seed=0, **opts)
            attr, r2 = np.asarray(res.attributions), res.r2
            ids = res.features.reshape(len(xin), *xin.shape[2:])
        else:
            attr = np.asarray(xk.xai.explain(model, xin, method=method, seed=0, **opts))
        out[name] = attr[:, 0]
        print(f"  {name}: done", flush=True)
    return out, r2, ids


def _outlined(images: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Channel-last images in [0, 1] with each feature's border drawn in yellow (small images
    enlarged first, nearest, so that one-pixel borders do not hide them)."""
    from skimage.segmentation import mark_boundaries

    k = max(1, 128 // images.shape[1])
    big = images.repeat(k, axis=1).repeat(k, axis=2)
    feats = ids.repeat(k, axis=1).repeat(k, axis=2)
    return np.stack([mark_boundaries(img, f, color=(1.0, 0.85, 0.0)) for img, f in zip(big, feats)])


def _paint(
    path: Path,
    first: dict[str, Any],
    images: np.ndarray,
    occlusion: np.ndarray,
    maps: dict[str, np.ndarray],
    r2: np.ndarray,
    ids: np.ndarray,
    title: str,
    dpi: int,
) -> Path:
    columns: dict[str, Any] = {
        **first,
        "image": images,
        "features": _outlined(images, ids),
        "occlusion": occlusion,
        **maps,
        "LIME R^2": np.array([f"{v:.2f}" for v in r2]),
    }
    signed = ["occlusion", *(name for name in maps if name not in UNSIGNED)]
    xk.ImgData(
        columns, signed=signed, colormaps=dict.fromkeys(UNSIGNED, "Reds"), figure_title=title
    ).paint_figure(save_path=str(path), dpi=dpi)
    return path


def _counts(table: dict[str, tuple[int, int]], light: bool) -> dict[str, int]:
    return {method: pair[1 if light else 0] for method, pair in table.items()}


def _samples_note(counts: dict[str, int]) -> str:
    return (
        f"Shapley {counts['shapley_sampling']} orders, KernelSHAP {counts['kernel_shap']}, "
        f"LIME {counts['lime']}, Sobol {counts['sobol']} designs, HSIC {counts['hsic']}"
    )


def shapes_grid(out: Path, epochs: int, n_train: int, light: bool, dpi: int) -> Path:
    model, data = train_lenet("torch", epochs=epochs, n_train=n_train, logits=True)
    model.eval()
    idx = pick_samples(data, 5)
    x = data["x"][idx]
    xin = model_layout("torch", x)
    occ = np.asarray(xk.xai.explain(model, xin, method="occlusion", window=4, stride=2))[:, 0]
    counts = _counts(SHAPES_SAMPLES, light)
    maps, r2, ids = _maps(model, xin, {"features": "patches", "segments": 64, "baseline": "mean"}, counts)
    title = (
        "LeNet trained on shapes (logits), 64 patches of 4x4, baseline: each image's mean colour "
        f"(occlusion: 0); nsamples: {_samples_note(counts)}"
    )
    labels = {"label": np.array([CLASS_NAMES[int(v)] for v in data["y"][idx]])}
    return _paint(out / "agnostic_shapes.png", labels, x, occ, maps, r2, ids, title, dpi)


def resnet_grid(out: Path, size: int, segments: int, images: int, light: bool, dpi: int) -> Path:
    from xaikit.dataset.data import shapes

    data = shapes.load_data(image_size=size, n_train=max(4, images), n_eval=1, seed=0)[0]
    xin = normalized(data["x"], IMAGENET, True)
    model = resnet18(xin)  # random weights, BatchNorm calibrated on these images
    xin, pixels = xin[:images], data["x"][:images].astype(np.float32) / 255.0
    window = max(2, size // 7)
    occ = np.asarray(xk.xai.explain(model, xin, method="occlusion", window=window, stride=window))[:, 0]
    counts = _counts(RESNET_SAMPLES, light)
    maps, r2, ids = _maps(model, xin, {"features": "slic", "segments": segments}, counts)
    title = (
        f"ResNet-18, RANDOM weights, {size}x{size}, SLIC ~{segments} superpixels, baseline 0 (the mean colour); "
        f"nsamples: {_samples_note(counts)}; occlusion {window}x{window}"
    )
    first = {"ResNet-18": np.array(["random"] * len(xin))}
    path = _paint(out / "agnostic_resnet18.png", first, pixels, occ, maps, r2, ids, title, dpi)
    _shrink(path)  # a 256-colour palette: the superpixel borders make a large RGB file
    return path


def main(argv: list[str] | None = None) -> list[str]:
    p = parser(__doc__.splitlines()[0], ".")
    p.add_argument("--size", type=int, default=224, help="ResNet-18 input size")
    p.add_argument("--segments", type=int, default=50, help="SLIC superpixels of the ResNet's images")
    p.add_argument("--images", type=int, default=2, help="images of the ResNet picture")
    p.add_argument("--light", action="store_true", help="fewest samples (a check, not a picture to read)")
    p.add_argument("--part", choices=["shapes", "resnet", "both"], default="both", help="which picture")
    args = p.parse_args(argv)
    out = Path(args.out or "docs/img")
    out.mkdir(parents=True, exist_ok=True)
    written = []
    if args.part != "resnet":
        written.append(shapes_grid(out, args.epochs, args.n_train, args.light, args.dpi))
    if args.part != "shapes":
        written.append(resnet_grid(out, args.size, args.segments, args.images, args.light, args.dpi))
    for path in written:
        print(f"wrote {path}")
    return [str(p) for p in written]


if __name__ == "__main__":
    main()
