"""Rule-based attribution side by side: LRP with its composites, DeepLIFT, guided backprop and
deconvnet, next to the plain gradient, for a LeNet trained on ``shapes`` and for a ResNet-18
with random weights (BatchNorm calibrated on the images; labelled as such).

Writes ``docs/img/rules_shapes.png`` and ``docs/img/rules_resnet18.png`` (torch).

    python -m gallery.rules_methods [--out DIR] [--epochs 6] [--n-train 6000] [--size 96]
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # also `python gallery/<script>.py`

import xaikit as xk
from gallery._common import CLASS_NAMES, model_layout, parser, pick_samples, train_lenet

#: (column title, method, options)
METHODS: list[tuple[str, str, dict[str, object]]] = [
    ("gradient", "vanilla", {}),
    ("input x gradient", "input_x_gradient", {}),
    ("LRP eps+flat", "lrp", {"composite": "epsilon_plus_flat"}),
    ("LRP eps+gamma+box", "lrp", {"composite": "epsilon_gamma_box"}),
    ("LRP eps+a2b1", "lrp", {"composite": "epsilon_alpha2_beta1"}),
    ("LRP-eps 0.1", "lrp_epsilon", {"epsilon": 0.1}),
    ("DeepLIFT", "deeplift", {}),
    ("guided backprop", "guided_backprop", {}),
    ("deconvnet", "deconvnet", {}),
]


def _columns(model: object, x: np.ndarray, xin: np.ndarray, framework: str) -> dict[str, np.ndarray]:
    """Each method's map summed over channels, each on its own symmetric scale (red: evidence
    for the class, blue: against)."""
    axis = 1 if framework == "torch" else -1
    columns: dict[str, np.ndarray] = {}
    for name, method, options in METHODS:
        if method not in xk.xai.METHODS:  # a method of this page not in this version
            continue
        m = np.asarray(xk.xai.explain(model, xin, method=method, **options)).sum(axis=axis)
        peak = np.abs(m).reshape(len(m), -1).max(axis=1).reshape(-1, 1, 1)
        columns[name] = m / np.maximum(peak, 1e-12)
    return columns


def shapes_grid(out: Path, epochs: int, n_train: int, dpi: int) -> Path:
    model, data = train_lenet("torch", epochs=epochs, n_train=n_train, logits=True)
    idx = pick_samples(data, 5)
    x = data["x"][idx]
    columns: dict[str, np.ndarray] = {
        "label": np.array([CLASS_NAMES[int(v)] for v in data["y"][idx]]),
        "image": x,
        **_columns(model, x, model_layout("torch", x), "torch"),
    }
    path = out / "rules_shapes.png"
    signed = [name for name, *_ in METHODS if name in columns]  # symmetric around 0: red for, blue against
    xk.ImgData(columns, signed=signed).paint_figure(save_path=str(path), dpi=dpi)
    return path


def resnet_grid(out: Path, size: int, dpi: int) -> Path:
    import torch

    from xaikit.architecture.torch import ResNet18, calibrate_batchnorm
    from xaikit.dataset.data import shapes

    torch.manual_seed(0)
    pixels = shapes.load_data(image_size=size, n_train=4, n_eval=1, seed=0)[0]["x"]
    mean, std = np.array([0.485, 0.456, 0.406]), np.array([0.229, 0.224, 0.225])  # ImageNet's
    x = ((pixels / 255.0 - mean) / std).astype(np.float32)
    xin = np.ascontiguousarray(x.transpose(0, 3, 1, 2))
    model = ResNet18(classes=10).eval()
    calibrate_batchnorm(model, torch.from_numpy(xin))
    columns: dict[str, np.ndarray] = {
        "ResNet-18, random weights": np.array(["random"] * len(x)),
        "image": pixels.astype(np.float32) / 255.0,
        **_columns(model, x, xin, "torch"),
    }
    path = out / "rules_resnet18.png"
    signed = [name for name, *_ in METHODS if name in columns]
    xk.ImgData(columns, signed=signed).paint_figure(save_path=str(path), dpi=dpi)
    return path


def main(argv: list[str] | None = None) -> list[str]:
    p = parser(__doc__.splitlines()[0], ".")
    p.add_argument("--size", type=int, default=96, help="ResNet-18 input size")
    args = p.parse_args(argv)
    out = Path(args.out or "docs/img")
    out.mkdir(parents=True, exist_ok=True)
    written = [shapes_grid(out, args.epochs, args.n_train, args.dpi), resnet_grid(out, args.size, args.dpi)]
    for path in written:
        print(f"wrote {path}")
    return [str(p) for p in written]


if __name__ == "__main__":
    main()
