"""A planted shortcut found by ``xk.analyze``: a LeNet that reads a corner tag instead of the shape.

The data (:mod:`xaikit.dataset.data.shortcut`): the ``shapes`` images, with a magenta 6x6 tag in
the top-left corner of 90% of the triangles' training images and of 2% of the others'. A torch
LeNet trained briefly on it learns the tag: it calls tagged images triangles and misses most
tag-free triangles. Its test images (half of the triangles tagged) are explained with LRP
(composite ``epsilon_plus``: of the methods compared here, the one whose maps put the largest
share of their energy on the tag) into an ``explain_dataset`` store, and ``xk.analyze.dataset``
clusters the maps and extracts concepts without being told where the tag is.

Writes three pictures into ``--out`` (a folder; default docs/img):

* ``planted_shortcut_clusters.png``: the triangle class's strategy clusters: mean maps (the share
  of the energy in the tag's cells), size, accuracy, the region-ablation check, typical members;
* ``planted_shortcut_concepts.png``: the triangle class's concepts: heatmaps over the top images;
* ``planted_shortcut_accuracy.png``: the same test images with and without the tag, predicted;
* ``planted_shortcut_clusters_label.png``: the triangle clusters of a second store whose maps
  explain the label (``target="label"``): the tag-free triangles the model misses form their own
  cluster.

and prints (``--json PATH``: writes) the figures: training time, accuracies with and without the
tag, the tag's share of the energy per explanation method, and the analysis's clusters/concepts.

    python -m gallery.planted_shortcut [--out docs/img] [--n-train 3000] [--n-eval 2000] [--epochs 4]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout

import xaikit as xk
from xaikit.analyze.maps import area_resample
from xaikit.dataset import NumpyDataset
from xaikit.dataset.data import shortcut

DOCS_IMG = Path(__file__).resolve().parent.parent / "docs" / "img"
PICTURES = (
    "planted_shortcut_clusters.png",
    "planted_shortcut_concepts.png",
    "planted_shortcut_accuracy.png",
    "planted_shortcut_clusters_label.png",
)
TAG_CLASS = "triangle"
#: the tag's side in pixels at 32x32 (3.5% of the image; 3x3 cells of the analysis's 16x16 maps)
TAG_SIZE = 6
KLASS = shortcut.label_mapping[TAG_CLASS]
NAMES = sorted(shortcut.label_mapping, key=shortcut.label_mapping.get)
#: the store's method: of those compared, the one whose maps show the tag best
METHOD: tuple[str, dict[str, Any]] = ("lrp", {"composite": "epsilon_plus"})
#: label -> (method, options), compared by the share of the map's energy on the tag
COMPARED: dict[str, tuple[str, dict[str, Any]]] = {
    "Gradient": ("vanilla", {}),
    "Input x Gradient": ("input_x_gradient", {}),
    "SmoothGrad": ("smoothgrad", {}),
    "Integrated Gradients": ("integrated_gradients", {}),
    "Guided backprop": ("guided_backprop", {}),
    "DeepLIFT": ("deeplift", {}),
    "Grad-CAM": ("gradcam", {}),
    "LRP epsilon_plus_flat": ("lrp", {}),
    "LRP epsilon_plus": METHOD,
}


def load(n_train: int, n_eval: int, seed: int) -> tuple[NumpyDataset, NumpyDataset]:
    """The planted-shortcut train and test sets: triangles tagged (90% of train, 50% of test)."""
    return shortcut.load_data(
        n_train=n_train, n_eval=n_eval, seed=seed, tag_class=TAG_CLASS, tag_size=TAG_SIZE
    )


def chw(x: np.ndarray) -> np.ndarray:
    """uint8 (N, H, W, 3) -> float32 (N, 3, H, W) in [0, 1], as the LeNet takes them."""
    return np.ascontiguousarray(np.asarray(x, dtype=np.float32).transpose(0, 3, 1, 2) / 255.0)


def train(data: NumpyDataset, epochs: int = 4, seed: int = 0, batch_size: int = 64, lr: float = 2e-3) -> Any:
    """A torch LeNet (logits) trained with Adam and cross-entropy: a plain loop, seeded.

    Short training on purpose: the tag is learned in the first epoch, the shapes more slowly,
    so a few epochs leave a model that leans on the tag (as real shortcuts are learned first).
    """
    import torch

    from xaikit.architecture.torch import LeNet

    torch.manual_seed(seed)
    x = torch.as_tensor(chw(data["x"]))
    y = torch.as_tensor(data["y"])
    model = LeNet(input_shape=tuple(x.shape[1:]), classes=len(NAMES), softmax=False)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    gen = torch.Generator().manual_seed(seed)
    model.train()
    for _ in range(epochs):
        for idx in torch.randperm(len(x), generator=gen).split(batch_size):
            loss = torch.nn.functional.cross_entropy(model(x[idx]), y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
    return model.eval()


def predict(model: Any, x: np.ndarray) -> np.ndarray:
    """Predicted classes of uint8 (N, H, W, 3) images."""
    import torch

    with torch.no_grad():
        return np.asarray(model(torch.as_tensor(chw(x))).argmax(dim=1).numpy())


def accuracies(y: np.ndarray, tag: np.ndarray, pred: np.ndarray, pred_clean: np.ndarray) -> dict[str, float]:
    """Accuracy of the tagged class with and without the tag, and of the other classes."""
    right, right_clean, own = pred == y, pred_clean == y, y == KLASS
    return {
        "tagged class, tagged images": float(right[own & tag].mean()),
        "tagged class, tag-free images": float(right[own & ~tag].mean()),
        "tagged class, the tagged images with the tag removed": float(right_clean[own & tag].mean()),
        "other classes, tag-free images": float(right[~own & ~tag].mean()),
        "other classes, tagged images": float(right[~own & tag].mean()),
        "all test images": float(right.mean()),
    }


def tag_share(maps: np.ndarray, region: np.ndarray) -> np.ndarray:
    """(N,) the share of each map's energy (sum of absolute values over channels) on ``region``."""
    a = np.abs(np.asarray(maps, dtype=np.float64))
    if a.ndim == 4:
        a = a.sum(axis=1)
    total = a.sum(axis=(1, 2))
    return np.asarray((a * region).sum(axis=(1, 2)) / np.where(total > 0, total, np.nan))


def cells(size: int, image_size: int = 32) -> np.ndarray:
    """The tag mask area-downsampled to the analysis's ``size`` (as the analysis downsamples maps)."""
    return np.asarray(area_resample(region(image_size)[None].astype(np.float32), size)[0])


def region(image_size: int = 32) -> np.ndarray:
    """The tag's pixels (the test knows them; the analysis is not told)."""
    return shortcut.tag_mask(image_size, TAG_SIZE * image_size // 32)


def share_in(mean: np.ndarray, weights: np.ndarray) -> float:
    """The share of a non-negative map's energy on the (downsampled) tag ``weights``."""
    return float((mean * weights).sum() / mean.sum())


def compare_methods(model: Any, x: np.ndarray, seed: int) -> dict[str, float]:
    """Per method of :data:`COMPARED`, the mean share of the maps' energy on the tag, over ``x``
    (tagged images of the tagged class, explained for that class)."""
    where = region(x.shape[1])
    out = {}
    for label, (method, opts) in COMPARED.items():
        with warnings.catch_warnings():  # an all-zero Grad-CAM map counts as no energy on the tag
            warnings.simplefilter("ignore", xk.DegenerateMapWarning)
            maps = xk.xai.explain(
                model, chw(x), target=np.full(len(x), KLASS), method=method, seed=seed, **opts
            )
        out[label] = float(np.nanmean(tag_share(maps, where)))
    return out


def analyse(
    model: Any, test: NumpyDataset, store: Path, seed: int, concepts: int = 5, target: str | None = None
) -> tuple[Any, Any]:
    """The test images explained into ``store`` with :data:`METHOD`, then ``xk.analyze.dataset``
    (``target="label"``: each map explains the label, and the analysis groups by label)."""
    data = NumpyDataset({"x": chw(test["x"]), "y": test["y"]})
    method, opts = METHOD
    explained = xk.xai.explain_dataset(
        model, data, method=method, out=store, seed=seed, target=target, classes=NAMES, progress=False, **opts
    )
    result = xk.analyze.dataset(store, model=model, data=data, concepts=concepts, seed=seed, progress=False)
    return explained, result


def summary(result: Any, tag: np.ndarray) -> dict[str, Any]:
    """The analysis's figures for the tagged class: clusters (tag share of each mean map,
    ablation) and concepts (importance, where their heatmaps peak, how many top images are tagged)."""
    weights = cells(int(result.settings["size"]))
    where = region(32)
    own = next(c for c in result.classes if c.klass == KLASS)
    clusters = [
        {
            "id": c.id,
            "size": c.size,
            "accuracy": c.accuracy,
            "tag_share": share_in(c.mean, weights),
            "tagged_members": float(
                np.mean(tag[result.samples["index"][result.samples["cluster"] == c.id].to_numpy()])
            ),
            "ablation": c.ablation,
        }
        for c in own.clusters
    ]
    concepts = []
    for c in (c for c in result.concepts if c.klass == KLASS):
        heat = np.asarray(c.heatmaps, dtype=np.float64)
        peaks = [np.unravel_index(int(np.argmax(h)), h.shape) for h in heat]
        concepts.append(
            {
                "id": c.id,
                "importance": float(c.importance),
                "peak_on_tag": float(np.mean([bool(where[p]) for p in peaks])),
                "tag_share": float(np.mean(tag_share(heat, where))),
                "top_tagged": float(np.mean(tag[np.asarray(c.top)])),
            }
        )
    return {
        "class_n": own.n,
        "k": own.k,
        "eigenvalues": [round(float(v), 4) for v in own.eigenvalues[:6]],
        "class_mean_tag_share": share_in(own.mean, weights),
        "clusters": clusters,
        "concepts": concepts,
    }


def paint_clusters(result: Any, test: NumpyDataset, out: Path, title: str) -> None:
    """Per cluster of the tagged class: its mean map (upsampled), figures, typical members."""
    own = next(c for c in result.classes if c.klass == KLASS)
    weights = cells(int(result.settings["size"]))
    side = test["x"].shape[1]
    up = area_resample(np.stack([c.mean for c in own.clusters]), side)
    members = [np.asarray(c.members[:4]) for c in own.clusters]
    columns: dict[str, Any] = {
        "cluster": np.array(
            [
                f"cluster {c.id}\n{c.size} samples\naccuracy {c.accuracy:.2f}\n"
                f"tag share {share_in(c.mean, weights):.2f}" + _ablation_text(c.ablation)
                for c in own.clusters
            ]
        ),
        "mean map": up,
    }
    for j in range(4):
        pick = np.array([m[j] if len(m) > j else m[0] for m in members])
        columns[f"member {j + 1}"] = test["x"][pick]
    xk.ImgData(columns, colormap="inferno", figure_title=title).paint_figure(save_path=str(out), dpi=110)


def _ablation_text(ablation: Any) -> str:
    if not ablation:
        return ""
    return f"\nablation: {ablation['accuracy_before']:.2f} -> {ablation['accuracy_after']:.2f}"


def paint_concepts(result: Any, test: NumpyDataset, out: Path, show: int = 4) -> None:
    """Per concept of the tagged class: its heatmaps over its top images."""
    concepts = sorted((c for c in result.concepts if c.klass == KLASS), key=lambda c: -c.importance)
    rows_text, images, heats = [], [], []
    for c in concepts:
        top = np.asarray(c.top[:show])
        heat = np.asarray(c.heatmaps[: len(top)], dtype=np.float32)
        if len(top) < show:  # pad with the last image so every row has `show` cells
            top = np.concatenate([top, np.repeat(top[-1:], show - len(top))])
            heat = np.concatenate([heat, np.repeat(heat[-1:], show - len(heat), axis=0)])
        rows_text.append(f"concept {c.id}\nimportance {c.importance:.2f}")
        images.append(test["x"][top].astype(np.float32) / 255.0)
        heats.append(heat / np.maximum(heat.max(axis=(1, 2), keepdims=True), 1e-12))
    columns: dict[str, Any] = {"concept": np.array(rows_text)}
    for j in range(show):
        base = np.stack([im[j] for im in images])
        columns[f"top {j + 1}"] = xk.viz.overlay(base, np.stack([h[j] for h in heats]), channel_axis=-1)
    xk.ImgData(
        columns, figure_title=f"'{TAG_CLASS}' concepts (NMF of conv3): heatmaps over top images"
    ).paint_figure(save_path=str(out), dpi=110)


def paint_accuracy(
    test: NumpyDataset, pred: np.ndarray, pred_clean: np.ndarray, acc: dict[str, float], out: Path
) -> None:
    """Tagged test triangles with and without their tag, and what the model says of each."""
    pick = np.flatnonzero((test["y"] == KLASS) & test["tag"])[:6]
    colour = lambda p: ["#1a7f37" if int(v) == KLASS else "#c62828" for v in p]  # noqa: E731
    xk.ImgData(
        {
            "with the tag": test["x"][pick],
            "predicted": np.array([NAMES[int(v)] for v in pred[pick]]),
            "tag removed": test["x_clean"][pick],
            "predicted ": np.array([NAMES[int(v)] for v in pred_clean[pick]]),
        },
        text_colors={"predicted": colour(pred[pick]), "predicted ": colour(pred_clean[pick])},
        figure_title=(
            f"'{TAG_CLASS}' accuracy: {acc['tagged class, tagged images']:.2f} with the tag, "
            f"{acc['tagged class, tag-free images']:.2f} without"
        ),
    ).paint_figure(save_path=str(out), dpi=110)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=str(DOCS_IMG), help="the folder of the pictures")
    p.add_argument("--json", default=None, help="also write the figures to this JSON file")
    p.add_argument("--n-train", type=int, default=3000)
    p.add_argument("--n-eval", type=int, default=2000, help="test images (explained and analysed)")
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--compare", type=int, default=100, help="tagged test triangles for the method comparison")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    import torch

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    train_set, test = load(args.n_train, args.n_eval, args.seed)
    t0 = time.perf_counter()
    model = train(train_set, args.epochs, args.seed)
    figures: dict[str, Any] = {"train_seconds": round(time.perf_counter() - t0, 1)}
    pred, pred_clean = predict(model, test["x"]), predict(model, test["x_clean"])
    figures["accuracy"] = accuracies(test["y"], test["tag"], pred, pred_clean)
    tagged = test["x"][(test["y"] == KLASS) & test["tag"]][: args.compare]
    figures["tag_share_by_method"] = compare_methods(model, tagged, args.seed)
    with tempfile.TemporaryDirectory(prefix="xaikit-shortcut-") as tmp:
        store = Path(tmp) / "shortcut.zarr"
        t1 = time.perf_counter()
        _, result = analyse(model, test, store, args.seed)
        figures["explain_and_analyse_seconds"] = round(time.perf_counter() - t1, 1)
        figures["analysis"] = summary(result, test["tag"])
        paint_clusters(
            result, test, out / PICTURES[0], f"'{TAG_CLASS}' strategy clusters (LRP maps of the prediction)"
        )
        paint_concepts(result, test, out / PICTURES[1])
        shutil.rmtree(store, ignore_errors=True)
        # the same maps for the label: every triangle, the ones the model misses too
        _, by_label = analyse(model, test, Path(tmp) / "by_label.zarr", args.seed, concepts=0, target="label")
        figures["analysis_by_label"] = summary(by_label, test["tag"])
        figures["analysis_by_label"]["other_classes_on_the_tag"] = [
            {
                "klass": ca.klass,
                "id": c.id,
                "size": c.size,
                "accuracy": c.accuracy,
                "tag_share": share_in(c.mean, cells(16)),
            }
            for ca in by_label.classes
            if ca.klass != KLASS
            for c in ca.clusters
            if share_in(c.mean, cells(16)) > 0.2
        ]
        paint_clusters(
            by_label, test, out / PICTURES[3], f"'{TAG_CLASS}' clusters, maps of the label (target='label')"
        )
    paint_accuracy(test, pred, pred_clean, figures["accuracy"], out / PICTURES[2])
    text = json.dumps(figures, indent=1, default=float)
    print(text)
    if args.json:
        Path(args.json).write_text(text + "\n", encoding="utf-8")
    return figures


if __name__ == "__main__":
    main()
