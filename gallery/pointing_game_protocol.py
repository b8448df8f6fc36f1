"""The pointing-game protocol of Zhang et al. (2016/2018) and RISE (2018), reproduced on data built here.

A hit is a map whose maximum lies within 15 pixels of the tested class's object (at 224x224;
scaled here to ``15 * size / 224`` pixels), scored for every (image, class present) pair; the
"Difficult" column keeps the pairs whose object's box covers less than a quarter of the image
and whose image shows another class too. Methods: vanilla gradient and guided backprop (the max
over channels of the magnitude, as Simonyan et al. and Zhang et al. draw them), Grad-CAM and
RISE, beside the "center" baseline (a map peaked at the image's centre pixel).

Two data sets, each with its own torch LeNet trained here (seeded, a few epochs):

* ``shapes`` (32x32, one object per image, single-label; its "Difficult" set is empty: no image
  holds a second class);
* ``shape_scenes`` (64x64, one or two shapes of different classes, multi-label).

Prints and writes the table (hit rates with 95% bootstrap intervals over images) and the
published ordering's verdicts (paired bootstrap of the difference), and paints examples of the
difficult scenes (the map's maximum boxed, the tolerance band around the object outlined).

Usage: python -m gallery.pointing_game_protocol [--out docs/img/pointing_game.png]
    [--table auto] [--json PATH] [--epochs 8] [--n-train 4000] [--n-eval 200] [--masks 300]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout

import xaikit as xk
from xaikit.dataset.data import shape_scenes, shapes

DOCS = Path(__file__).resolve().parent.parent / "docs"
PAGE = "pointing-game.md"
MARKER = "pointing_game"
#: the published tolerance: 15 pixels at 224x224
TOLERANCE_224 = 15.0
#: method label -> (xk.xai method, its options, whether the explained score is a probability)
METHODS: dict[str, tuple[str, dict[str, Any], bool]] = {
    "Gradient": ("vanilla", {}, False),
    "Guided backprop": ("guided_backprop", {}, False),
    "Grad-CAM": ("gradcam", {}, False),
    "RISE": ("rise", {"cell": 8, "p": 0.5}, True),
}
CENTER = "Center (baseline)"
#: the published ordering, (better, worse): Zhang et al. 2018 and Petsiuk et al. 2018
CLAIMS = (("Grad-CAM", "Gradient"), ("RISE", "Gradient"), ("Gradient", CENTER))
SUBSETS = ("All", "Difficult")


@dataclass
class Pairs:
    """The protocol's rows: one per (image, class present)."""

    name: str
    x: np.ndarray  # (P, H, W, 3) float32 in [0, 1], an image repeated once per class it holds
    target: np.ndarray  # (P,) int64 class tested
    mask: np.ndarray  # (P, H, W) bool, the tested class's pixels
    image: np.ndarray  # (P,) int64 index of the image (the bootstrap's unit)
    difficult: np.ndarray  # (P,) bool

    @property
    def size(self) -> int:
        return int(self.mask.shape[-1])

    @property
    def tolerance(self) -> float:
        return TOLERANCE_224 * self.size / 224.0


def difficult(mask: np.ndarray, classes_in_image: np.ndarray) -> np.ndarray:
    """Zhang et al.'s "Difficult": the tested object's box covers less than 1/4 of the image
    and the image holds another class."""
    rows, cols = mask.any(axis=2), mask.any(axis=1)
    height = rows.shape[1] - rows[:, ::-1].argmax(axis=1) - rows.argmax(axis=1)
    width = cols.shape[1] - cols[:, ::-1].argmax(axis=1) - cols.argmax(axis=1)
    box = np.where(rows.any(axis=1), height * width, 0)
    return np.asarray((box < mask.shape[1] * mask.shape[2] / 4.0) & (classes_in_image >= 2))


def shapes_pairs(n_train: int, n_eval: int, seed: int) -> tuple[dict[str, np.ndarray], Pairs]:
    train, test = shapes.load_data(n_train=n_train, n_eval=n_eval, seed=seed)
    x = test["x"].astype(np.float32) / 255.0
    pairs = Pairs(
        "shapes (32x32)", x, test["y"].astype(np.int64), test["mask"], np.arange(len(x)),
        difficult(test["mask"], np.ones(len(x), dtype=np.int64)),
    )  # fmt: skip
    return {"x": train["x"].astype(np.float32) / 255.0, "y": train["y"].astype(np.int64)}, pairs


def scenes_pairs(n_train: int, n_eval: int, seed: int) -> tuple[dict[str, np.ndarray], Pairs]:
    train, test = shape_scenes.load_data(n_train=n_train, n_eval=n_eval, seed=seed)
    image, target = np.nonzero(test["y"])
    mask = shape_scenes.class_masks(test["segmentation"][image], target)
    x = test["x"][image].astype(np.float32) / 255.0
    count = test["y"].sum(axis=1).astype(np.int64)[image]
    pairs = Pairs("shape_scenes (64x64)", x, target.astype(np.int64), mask, image, difficult(mask, count))
    return {"x": train["x"].astype(np.float32) / 255.0, "y": train["y"]}, pairs


def train(data: dict[str, np.ndarray], multilabel: bool, epochs: int, seed: int) -> Any:
    """A torch LeNet returning logits: cross-entropy, or per-class sigmoid cross-entropy."""
    import torch

    from xaikit.architecture.torch import LeNet

    torch.manual_seed(seed)
    x = torch.as_tensor(data["x"]).permute(0, 3, 1, 2).contiguous()
    y = torch.as_tensor(data["y"])
    model = LeNet(input_shape=tuple(x.shape[1:]), classes=len(shapes.label_mapping), softmax=False)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = (
        torch.nn.functional.binary_cross_entropy_with_logits
        if multilabel
        else torch.nn.functional.cross_entropy
    )
    gen = torch.Generator().manual_seed(seed)
    model.train()
    for _ in range(epochs):
        for idx in torch.randperm(len(x), generator=gen).split(32):
            loss = loss_fn(model(x[idx]), y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
    return model.eval()


def accuracy(model: Any, pairs: Pairs, multilabel: bool) -> float:
    """Held-out accuracy: the tested class is the top one (single-label) or scores above 0.5
    (multi-label), over the pairs."""
    import torch

    with torch.no_grad():
        logits = model(torch.as_tensor(chw(pairs.x))).numpy()
    rows = np.arange(len(logits))
    if multilabel:
        return float((logits[rows, pairs.target] > 0).mean())
    return float((logits.argmax(axis=1) == pairs.target).mean())


def chw(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x.transpose(0, 3, 1, 2))


def center_map(batch: int, size: int) -> np.ndarray:
    """The "center" baseline: a non-negative map peaked at the centre pixel ``(size // 2, size // 2)``
    (its squared distance to the farthest corner, less the pixel's own)."""
    grid = (np.arange(size, dtype=np.float64) - size // 2) ** 2
    dist2 = grid[:, None] + grid[None, :]
    return np.broadcast_to(dist2.max() - dist2, (batch, size, size)).copy()


def maps(model: Any, pairs: Pairs, multilabel: bool, masks: int, seed: int) -> dict[str, np.ndarray]:
    """One (P, H, W) map per method (and the center baseline)."""
    import torch

    squash = torch.nn.Sigmoid() if multilabel else torch.nn.Softmax(dim=-1)
    out: dict[str, np.ndarray] = {}
    for label, (method, opts, probability) in METHODS.items():
        net = torch.nn.Sequential(model, squash).eval() if probability else model
        extra = {"nsamples": masks} if method == "rise" else {}
        t0 = time.perf_counter()
        with warnings.catch_warnings():  # an all-zero Grad-CAM map is a miss: counted, not warned
            warnings.simplefilter("ignore", xk.DegenerateMapWarning)
            m = xk.xai.explain(
                net, chw(pairs.x), target=pairs.target, method=method, seed=seed, **opts, **extra
            )
        if m.ndim == 4:  # per channel: the magnitude's maximum over channels (Simonyan et al.)
            m = np.abs(m).max(axis=1)
        out[label] = m
        print(f"  {pairs.name}: {label} maps in {time.perf_counter() - t0:.1f} s", flush=True)
    out[CENTER] = center_map(len(pairs.x), pairs.size)
    return out


def hits(maps_: dict[str, np.ndarray], pairs: Pairs) -> dict[str, np.ndarray]:
    """Per method, (P,) bool: the pointing game with the scaled tolerance, on the maps as they
    are (``absolute=False``: each is one non-negative (P, H, W) map already)."""
    return {
        label: xk.evaluate.localization(m, pairs.mask, tolerance=pairs.tolerance, absolute=False)["pointing"]
        for label, m in maps_.items()
    }


def bootstrap_weights(pairs: Pairs, reps: int, seed: int) -> np.ndarray:
    """(reps, P) how often each pair is drawn when the images are resampled with replacement."""
    images = np.unique(pairs.image)
    rng = np.random.default_rng(seed)
    counts = rng.multinomial(len(images), np.full(len(images), 1.0 / len(images)), size=reps)
    return counts[:, np.searchsorted(images, pairs.image)].astype(np.float64)


def class_mean(weights: np.ndarray, hit: np.ndarray, target: np.ndarray) -> np.ndarray:
    """The protocol's accuracy, hits / (hits + misses) per class, averaged over the classes that
    have pairs; for each row of ``weights`` (R, P) (how often each pair counts)."""
    rates = []
    for c in np.unique(target):
        w = weights[:, target == c]
        total = w.sum(axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            rates.append(np.where(total > 0, (w @ hit[target == c]) / total, np.nan))
    stacked = np.stack(rates, axis=1)
    counted = np.isfinite(stacked).sum(axis=1)  # 0 for a resample without any of these pairs
    return np.where(counted > 0, np.nansum(stacked, axis=1) / np.maximum(counted, 1), np.nan)


def summarize(hit: dict[str, np.ndarray], pairs: Pairs, reps: int, seed: int) -> dict[str, Any]:
    """Per subset: n, and per method the mean per-class hit rate with its 95% bootstrap interval
    (images resampled); the claims, by the paired difference over the same resamples."""
    weights = bootstrap_weights(pairs, reps, seed)
    result: dict[str, Any] = {"name": pairs.name, "tolerance_px": pairs.tolerance, "subsets": {}}
    for subset in SUBSETS:
        keep = np.ones(len(pairs.target), dtype=bool) if subset == "All" else pairs.difficult
        entry: dict[str, Any] = {"n": int(keep.sum()), "images": int(np.unique(pairs.image[keep]).size)}
        if keep.any():
            t = pairs.target[keep]
            point = {
                label: float(class_mean(np.ones((1, len(t))), h[keep], t)[0]) for label, h in hit.items()
            }
            w = weights[:, keep]
            w = w[w.sum(axis=1) > 0]  # resamples that drew none of these images say nothing
            draws = {label: class_mean(w, h[keep], t) for label, h in hit.items()}
            entry["rates"] = {
                label: [point[label], *np.percentile(draws[label], [2.5, 97.5]).tolist()] for label in hit
            }
            entry["claims"] = []
            for better, worse in CLAIMS:
                low, high = np.percentile(draws[better] - draws[worse], [2.5, 97.5]).tolist()
                verdict = "holds" if low > 0 else "reversed" if high < 0 else "tie (interval holds 0)"
                entry["claims"].append(
                    {
                        "better": better,
                        "worse": worse,
                        "diff": point[better] - point[worse],
                        "ci": [low, high],
                        "verdict": verdict,
                    }
                )
        result["subsets"][subset] = entry
    return result


def markdown(results: list[dict[str, Any]], notes: list[str]) -> str:
    """The table as published: one row per method, All / Difficult per data set; the claims."""
    head = "| method | " + " | ".join(f"{r['name']}: {s}" for r in results for s in SUBSETS) + " |"
    lines = [head, "|---|" + "---:|" * (len(results) * len(SUBSETS))]
    for label in [*METHODS, CENTER]:
        cells = []
        for r in results:
            for s in SUBSETS:
                rate = r["subsets"][s].get("rates", {}).get(label)
                cells.append(
                    "n/a"
                    if rate is None
                    else f"{100 * rate[0]:.1f} ({100 * rate[1]:.0f}–{100 * rate[2]:.0f})"
                )
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    counts = [
        f"{r['subsets'][s]['n']} pairs / {r['subsets'][s]['images']} images" for r in results for s in SUBSETS
    ]
    lines.append("| *pairs scored* | " + " | ".join(counts) + " |")
    lines += [
        "",
        "| published ordering | " + " | ".join(f"{r['name']}: {s}" for r in results for s in SUBSETS) + " |",
    ]
    lines.append("|---|" + "---|" * (len(results) * len(SUBSETS)))
    for k, (better, worse) in enumerate(CLAIMS):
        cells = []
        for r in results:
            for s in SUBSETS:
                claims = r["subsets"][s].get("claims")
                if not claims:
                    cells.append("n/a")
                    continue
                c = claims[k]
                cells.append(
                    f"{c['verdict']}: {100 * c['diff']:+.1f} ({100 * c['ci'][0]:+.0f} to {100 * c['ci'][1]:+.0f})"
                )
        lines.append(f"| {better} > {worse} | " + " | ".join(cells) + " |")
    lines += ["", *(f"* {note}" for note in notes)]
    return "\n".join(lines) + "\n"


def figure(
    pairs: Pairs, maps_: dict[str, np.ndarray], hit: dict[str, np.ndarray], out: Path, rows: int
) -> None:
    """Difficult scenes: per method, the map over the image, its maximum boxed, the object
    outlined (white) and the tolerance band's edge (yellow)."""
    from scipy.ndimage import binary_erosion, distance_transform_edt

    pool = np.flatnonzero(pairs.difficult) if pairs.difficult.any() else np.arange(len(pairs.target))
    pick = pool[np.linspace(0, len(pool) - 1, min(rows, len(pool))).astype(int)]
    edge = lambda m: m & ~binary_erosion(m)  # noqa: E731
    object_edge = np.stack([edge(pairs.mask[i]) for i in pick])
    band = np.stack([edge(distance_transform_edt(~pairs.mask[i]) <= pairs.tolerance) for i in pick])
    names = {v: k for k, v in shapes.label_mapping.items()}
    columns: dict[str, Any] = {"class tested": np.array([names[int(t)] for t in pairs.target[pick]])}

    def outlined(rgb: np.ndarray) -> np.ndarray:
        rgb = rgb.copy()
        rgb[band] = (1.0, 0.9, 0.0)
        rgb[object_edge] = (1.0, 1.0, 1.0)
        return rgb

    columns["image"] = outlined(pairs.x[pick])
    for label, m in maps_.items():
        sel = m[pick].astype(np.float64)
        low = sel.min(axis=(1, 2), keepdims=True)
        shown = (sel - low) / np.maximum(sel.max(axis=(1, 2), keepdims=True) - low, 1e-12)
        peak = np.array([np.unravel_index(np.argmax(s), s.shape) for s in sel])
        boxes = np.stack(
            [peak[:, 1] - 2.0, peak[:, 0] - 2.0, np.full(len(pick), 4.0), np.full(len(pick), 4.0)], axis=1
        )
        columns[label] = [outlined(xk.viz.overlay(pairs.x[pick], shown, channel_axis=-1)), boxes[:, None, :]]
    columns["hit?"] = np.array(
        [
            "\n".join(f"{label.split(' (')[0]}: {'hit' if hit[label][i] else 'miss'}" for label in maps_)
            for i in pick
        ]
    )
    xk.ImgData(columns).paint_figure(save_path=str(out), dpi=90)


def write_table(table: str, picture: Path, target: str) -> Path:
    """Into ``docs/pointing-game.md`` between its markers when the picture goes to ``docs/img``
    (``target="auto"``), else into ``pointing_game_table.md`` beside the picture (or ``target``)."""
    page = picture.resolve().parent.parent / PAGE
    head, tail = f"<!-- {MARKER}:table -->", f"<!-- /{MARKER}:table -->"
    if target == "auto" and picture.resolve().parent == (DOCS / "img").resolve() and page.exists():
        text = page.read_text()
        if head in text and tail in text:
            before, rest = text.split(head, 1)
            _, after = rest.split(tail, 1)
            return _write(page, f"{before}{head}\n{table.strip()}\n{tail}{after}")
    path = picture.with_name("pointing_game_table.md") if target == "auto" else Path(target)
    return _write(path, table)


def _write(path: Path, text: str) -> Path:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
    return path


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=str(DOCS / "img" / "pointing_game.png"), help="the figure")
    parser.add_argument("--table", default="auto", help=f"where the table goes ('auto': into docs/{PAGE} "
                        "when --out is in docs/img, else pointing_game_table.md beside the figure)")  # fmt: skip
    parser.add_argument("--json", default="auto", help="the results as JSON ('auto': beside the figure "
                        "unless it goes to docs/img; 'none': not written)")  # fmt: skip
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--n-train", type=int, default=4000, help="training images per data set")
    parser.add_argument("--n-eval", type=int, default=200, help="held-out images per data set")
    parser.add_argument("--masks", type=int, default=300, help="RISE masks")
    parser.add_argument("--boot", type=int, default=2000, help="bootstrap resamples")
    parser.add_argument("--rows", type=int, default=4, help="examples in the figure")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    picture = Path(args.out)
    picture.parent.mkdir(parents=True, exist_ok=True)
    results, notes = [], []
    for multilabel, make in ((False, shapes_pairs), (True, scenes_pairs)):
        t0 = time.perf_counter()
        data, pairs = make(args.n_train, args.n_eval, args.seed)
        model = train(data, multilabel, args.epochs, args.seed)
        acc = accuracy(model, pairs, multilabel)
        print(
            f"{pairs.name}: trained in {time.perf_counter() - t0:.0f} s, held-out accuracy {acc:.3f}",
            flush=True,
        )
        m = maps(model, pairs, multilabel, args.masks, args.seed)
        hit = hits(m, pairs)
        result = summarize(hit, pairs, args.boot, args.seed)
        result["accuracy"] = acc
        result["pairs"] = {
            "image": pairs.image.tolist(),
            "target": pairs.target.tolist(),
            "difficult": pairs.difficult.tolist(),
            "hits": {label: h.tolist() for label, h in hit.items()},
        }
        result["zero_maps"] = {
            label: int((v.reshape(len(v), -1).max(axis=1) == v.reshape(len(v), -1).min(axis=1)).sum())
            for label, v in m.items()
        }
        results.append(result)
        kind = "top-1 accuracy" if not multilabel else "share of the tested classes scored above 0.5"
        notes.append(
            f"{pairs.name}: LeNet, {args.epochs} epochs on {args.n_train} images, held-out {kind} "
            f"{acc:.1%}; tolerance 15 × {pairs.size}/224 = {pairs.tolerance:.2f} px; constant (e.g. "
            f"all-zero) maps, a miss: {', '.join(f'{k} {v}' for k, v in result['zero_maps'].items() if v) or 'none'}."
        )
        if multilabel:
            figure(pairs, m, hit, picture, args.rows)
    notes.append(
        "Accuracy in %: hits / (hits + misses) per class, averaged over the classes, as published "
        f"(95% bootstrap interval over images, {args.boot} resamples); orderings: the "
        "paired difference in points, its 95% interval, and 'holds' only when the interval excludes 0. "
        f"RISE: {args.masks} masks, 8×8 grid, p = 0.5, on the probabilities; the others on the logits."
    )
    table = markdown(results, notes)
    print(table)
    print(f"table written to {write_table(table, picture, args.table)}")
    in_docs = picture.resolve().parent == (DOCS / "img").resolve()
    if args.json != "none" and not (args.json == "auto" and in_docs):
        path = picture.with_name("pointing_game_table.json") if args.json == "auto" else Path(args.json)
        settings = {k: getattr(args, k) for k in ("epochs", "n_train", "n_eval", "masks", "boot", "seed")}
        _write(path, json.dumps({"settings": settings, "results": results}, indent=1))
        print(f"results written to {path}")
    print(f"wrote {picture}")
    return {"results": results, "table": table}


if __name__ == "__main__":
    main()
