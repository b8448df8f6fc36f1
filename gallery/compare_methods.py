"""Which explanation can you trust? ``xk.evaluate.compare`` on a LeNet trained on ``shapes``.

Trains xaikit's LeNet on the bundled ``shapes`` images (PyTorch, the loop of
``gallery/evaluate_methods.py``), then compares vanilla gradients, SmoothGrad, Integrated
Gradients, Grad-CAM and a random map (the chance level) on held-out images with their object
masks in one call: every metric of ``xk.evaluate.METRICS`` (the robustness and MPRT ones too).

Writes the side-by-side figure (PNG) and the table and verdicts (markdown, into
``docs/evaluate.md`` between its ``compare_methods`` markers when the picture goes to
``docs/img``, else ``compare_table.md`` beside the picture).

With ``--resnet-samples N`` (default 4; 0 skips it), the same comparison (vanilla, Grad-CAM and
a random map) also runs on a random-weight ResNet-18 at 224x224 (``tests/real_models.py``): its
scores mean nothing (random weights), its timing says what ``compare`` costs at that size.

Usage: python -m gallery.compare_methods [--out docs/img/compare.png] [--n-train 6000]
    [--epochs 8] [--samples 24] [--resnet-samples 4]
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
from gallery.evaluate_methods import accuracy, load, train_torch
from xaikit.dataset.data import shapes

DOCS = Path(__file__).resolve().parent.parent / "docs"
MARKERS = ("<!-- compare_methods:table -->", "<!-- /compare_methods:table -->")
METHODS = {
    "vanilla": "vanilla",
    "SmoothGrad": "smoothgrad",
    "Integrated Gradients": "integrated",
    "Grad-CAM": "gradcam",
}
OPTIONS = {"smoothgrad": {"nsamples": 16}, "integrated": {"nsamples": 32, "baseline": "black"}}


def markdown(result: Any, note: str) -> str:
    """The table (one row per metric, one column per method: the mean score, its rank in
    brackets; then the mean rank and the seconds) and the verdicts, as markdown."""
    rows = result.table.to_dict("records")
    methods = [r["method"] for r in rows]
    lines = [
        f"{note}",
        "",
        "| metric | " + " | ".join(methods) + " |",
        "|---|" + "---:|" * len(methods),
    ]
    for m in result.metrics:
        cells = []
        for r in rows:
            v, rank = r[m.name], r[f"rank {m.name}"]
            cells.append("–" if not np.isfinite(v) else f"{v:.3g} ({rank:.0f})")
        lines.append(f"| {m.name} {'↑' if m.higher_is_better else '↓'} | " + " | ".join(cells) + " |")
    lines.append("| **mean rank** | " + " | ".join(f"**{r['mean rank']:.2f}**" for r in rows) + " |")
    lines.append("| seconds (maps) | " + " | ".join(f"{r['seconds']:.2f}" for r in rows) + " |")
    lines += ["", "Verdicts:", ""]
    lines += [f"* **{m}**: {v}" for m, v in result.verdicts.items()]
    return "\n".join(lines) + "\n"


def resnet_table(samples: int) -> str:
    """The comparison on a random-weight ResNet-18 at 224x224, as markdown (cost, not trust)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    from real_models import IMAGENET_MEAN, IMAGENET_STD, channel_first, normalize, torch_resnet18

    data, _ = shapes.load_data(image_size=224, n_train=samples, n_eval=1, seed=0)
    x = channel_first(normalize(data["x"], IMAGENET_MEAN, IMAGENET_STD))
    model = torch_resnet18(x).eval()
    methods: dict[str, Any] = {"vanilla": "vanilla", "Grad-CAM": "gradcam"}
    methods["random map (chance)"] = np.random.default_rng(0).random(data["mask"].shape)
    t0 = time.perf_counter()
    result = xk.evaluate.compare(model, x, methods, mask=data["mask"])
    took = time.perf_counter() - t0
    print(result.table.to_string())
    note = (
        f"ResNet-18 at 224×224 with **random weights** (batch norm calibrated; `tests/real_models.py`), "
        f"{samples} `shapes` pictures: the scores say nothing about trust, the run says what `compare` "
        f"costs at this size: {took:.0f} s for the whole call on the shared 2-core CPU (the deletion and "
        f"insertion curves alone are 2 × 21 forward passes per image and method: {2 * 21 * samples * 3} here)."
    )
    return markdown(result, note).split("\nVerdicts:")[0]


def write_table(
    text: str,
    picture: Path,
    target: str,
    markers: tuple[str, str] = MARKERS,
    fallback: str = "compare_table.md",
) -> Path:
    """Write ``text`` into docs/evaluate.md between ``markers`` (``target="auto"`` and the picture
    in ``docs/img``), else into ``fallback`` beside the picture, or into ``target``."""
    page = picture.resolve().parent.parent / "evaluate.md"
    head, tail = markers
    if target == "auto" and page.exists() and head in page.read_text() and tail in page.read_text():
        before, rest = page.read_text().split(head, 1)
        _, after = rest.split(tail, 1)
        path, content = page, f"{before}{head}\n{text.strip()}\n{tail}{after}"
    else:
        path = picture.with_name(fallback) if target == "auto" else Path(target)
        content = text
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(content)
    os.replace(tmp, path)
    return path


def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=str(DOCS / "img" / "compare.png"), help="the figure")
    parser.add_argument("--table", default="auto", help="where the table goes ('auto': see the docstring)")
    parser.add_argument("--n-train", type=int, default=6000)
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--samples", type=int, default=24, help="held-out images scored")
    parser.add_argument("--resnet-samples", type=int, default=4, help="224x224 ResNet-18 pictures (0: skip)")
    args = parser.parse_args(argv)
    picture = Path(args.out)
    picture.parent.mkdir(parents=True, exist_ok=True)
    train, test = load(args.n_train, max(args.samples, 500))
    t0 = time.perf_counter()
    model = train_torch(train, test, args.epochs)
    acc = accuracy(model, np.ascontiguousarray(test["x"].transpose(0, 3, 1, 2)), test["y"])
    trained = time.perf_counter() - t0
    x = np.ascontiguousarray(test["x"][: args.samples].transpose(0, 3, 1, 2))
    mask = test["mask"][: args.samples]
    methods: dict[str, Any] = dict(METHODS)
    methods["random map (chance)"] = np.random.default_rng(0).random(mask.shape)
    t0 = time.perf_counter()
    result = xk.evaluate.compare(
        model,
        x,
        methods,
        metrics=list(xk.evaluate.METRICS),
        mask=mask,
        method_options=OPTIONS,
        samples_in_figure=4,
    )
    scored = time.perf_counter() - t0
    result.figure(picture, dpi=80, cell_size=1.5)
    print(result.table.to_string())
    print(result.note)
    note = (
        f"PyTorch LeNet trained {args.epochs} epochs on {args.n_train} `shapes` images (held-out accuracy "
        f"{acc:.1%}); {args.samples} held-out images with their object masks; trained in {trained:.0f} s, "
        f"compared in {scored:.0f} s on a shared 2-core CPU."
    )
    text = markdown(result, note)
    if args.resnet_samples > 0:
        text += "\n" + resnet_table(args.resnet_samples)
    path = write_table(text, picture, args.table)
    print(f"figure written to {picture}, table to {path}")
    return path


if __name__ == "__main__":
    main()
