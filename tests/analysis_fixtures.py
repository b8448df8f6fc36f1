"""A fake but realistic dataset analysis for the report's tests: a real ``explain_dataset``
store (a tiny torch model, smooth random 32 x 32 images, vanilla gradients), and beside it an
``analysis/`` folder written here with numpy and json in the exact on-disk format of the issue 30
contract (format 1: ``arrays.npz`` then ``analysis.json`` with its sha256), so the report can be
tested without ``xaikit.analyze``. The clusters are made up (per class, by the map's centre of
mass), the embedding places them in blobs; everything else follows from the store's maps.
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

CLASSES = ["circle", "square", "triangle"]


def smooth_images(n: int, side: int = 32, seed: int = 0) -> np.ndarray:
    """``n`` smooth random RGB images (n, 3, side, side) in [0, 1]: a 4 x 4 colour field
    upsampled, plus one bright disc (so that thumbnails look like pictures, not noise)."""
    rng = np.random.default_rng(seed)
    coarse = rng.random((n, 3, 4, 4), dtype=np.float32)
    ramp = np.linspace(0, 3, side, dtype=np.float32)
    i0 = np.floor(ramp).astype(int).clip(0, 2)
    f = (ramp - i0)[None, None]
    rows = coarse[:, :, i0, :] * (1 - f[..., None]) + coarse[:, :, i0 + 1, :] * f[..., None]
    img = rows[..., i0] * (1 - f[:, :, None, :]) + rows[..., i0 + 1] * f[:, :, None, :]
    yy, xx = np.mgrid[0:side, 0:side].astype(np.float32)
    cy, cx = rng.uniform(6, side - 6, (2, n, 1, 1)).astype(np.float32)
    disc = ((yy - cy) ** 2 + (xx - cx) ** 2 < 16).astype(np.float32)[:, None]
    return np.clip(img * 0.6 + disc * 0.5, 0, 1).astype(np.float32)


def make_explained_store(folder: Path, n: int, side: int = 32, seed: int = 0) -> tuple[Path, np.ndarray]:
    """An ``explain_dataset`` store of ``n`` smooth random images (labels ``i % 3``, class names
    :data:`CLASSES`); returns the store and the images (n, 3, side, side)."""
    import torch

    import xaikit as xk

    torch.manual_seed(seed)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(8), torch.nn.Flatten(),
        torch.nn.Linear(4 * 8 * 8, 3),
    )  # fmt: skip
    x = smooth_images(n, side, seed)
    labels = np.arange(n) % 3
    xk.xai.explain_dataset(
        model, x, method="vanilla", out=folder, labels=labels, classes=CLASSES, progress=False, batch_size=256
    )
    return folder, x


def _downsample(maps: np.ndarray, s: int) -> np.ndarray:
    """(n, H, W) -> (n, s, s) by area means (H a multiple of s)."""
    n, h, w = maps.shape
    return maps.reshape(n, s, h // s, s, w // s).mean(axis=(2, 4))


def _to_uint8(maps: np.ndarray) -> np.ndarray:
    top = maps.reshape(len(maps), -1).max(axis=1)
    top = np.where(top > 0, top, 1.0)
    return np.round(maps / top[:, None, None] * 255).astype(np.uint8)


def records_digest(store: Path) -> tuple[list[int], str]:
    """The committed shards and a sha256 over their records' checksums in shard order
    (``f"{shard}:{sha256}\\n"`` each, as xaikit.analyze writes ``store.records``)."""
    recs = {}
    for p in (store / "shards").glob("*.json"):
        rec = json.loads(p.read_text())
        recs[int(rec["shard"])] = str(rec["sha256"])
    h = hashlib.sha256("".join(f"{k}:{recs[k]}\n" for k in sorted(recs)).encode())
    return sorted(recs), h.hexdigest()


def write_analysis(
    store: Path,
    images: np.ndarray | None = None,
    *,
    size: int = 8,
    clusters_per_class: int = 2,
    max_display: int = 10_000,
    concepts: int = 2,
    ablation: bool = True,
    seed: int = 0,
) -> Path:
    """Write ``<store>/analysis/`` in format 1 from the store's maps; ``images`` (n, 3, H, W) in
    [0, 1] gives ``thumb_image`` (else maps-only). Cluster ``c`` of class ``k`` is the samples
    whose map's centre of mass lies in the ``c``-th horizontal band; cluster 0 of class 0 gets an
    ablation whose accuracy drops 0.9 -> 0.2 (the "relies on this region" sentence), the others a
    small drop. Returns the analysis folder."""
    import zarr

    rng = np.random.default_rng(seed)
    manifest = json.loads((store / "manifest.json").read_text())
    root = zarr.open_group(str(store), mode="r")
    raw = np.asarray(root["attributions"][:], dtype=np.float32)
    index = np.asarray(root["index"][:], dtype=np.int64)
    label = np.asarray(root["label"][:], dtype=np.int64)
    prediction = np.asarray(root["prediction"][:], dtype=np.int64)
    maps = np.abs(raw).sum(axis=1) if raw.ndim == 4 else np.abs(raw)
    n, h, _w = maps.shape
    t = min(32, h)
    small = _downsample(maps, size)
    small = small / np.maximum(small.sum(axis=(1, 2), keepdims=True), 1e-12)
    klass = prediction.copy()
    class_ids = np.unique(klass)
    cy = (small.sum(axis=2) * np.arange(size)).sum(axis=1)  # centre of mass (rows), 0..size-1
    cluster = np.full(n, -1, np.int32)
    centres = []
    cluster_mean, class_docs = [], []
    class_mean, class_std = [], []
    concept_class, concept_importance, concept_direction, concept_top, concept_heatmaps = [], [], [], [], []
    embedding = np.full((n, 2), np.nan, np.float32)
    atyp = np.zeros(n, np.float32)
    next_id = 0
    for ci, k in enumerate(class_ids):
        rows = np.flatnonzero(klass == k)
        mean = small[rows].mean(axis=0)
        class_mean.append(mean)
        class_std.append(small[rows].std(axis=0))
        dist = np.abs(small[rows] - mean).sum(axis=(1, 2))
        atyp[rows] = dist / max(float(dist.mean()), 1e-12)
        edges = np.quantile(cy[rows], np.linspace(0, 1, clusters_per_class + 1)[1:-1])
        band = np.searchsorted(edges, cy[rows])
        clusters = []
        for c in range(clusters_per_class):
            members = rows[band == c]
            if not len(members):
                continue
            gid = next_id
            next_id += 1
            cluster[members] = gid
            cmean = small[members].mean(axis=0)
            cluster_mean.append(cmean)
            order = members[np.argsort(np.abs(small[members] - cmean).sum(axis=(1, 2)), kind="stable")]
            correct = label[members] == prediction[members]
            acc = float(correct.mean())
            abl = None
            if ablation:
                after = 0.2 if gid == 0 else max(0.0, acc - 0.05)
                before = 0.9 if gid == 0 else acc
                abl = {"fraction": 0.1, "n": len(members), "accuracy_before": before, "accuracy_after": after,
                       "score_before": 0.8, "score_after": 0.3 if gid == 0 else 0.75}  # fmt: skip
            clusters.append(
                {
                    "id": gid,
                    "size": len(members),
                    "accuracy": acc,
                    "members": [int(index[i]) for i in order[:20]],
                    "ablation": abl,
                }
            )
            centres.append((3.0 * ci, 2.0 * c))
            embedding[members] = np.array(centres[-1], np.float32) + rng.normal(
                0, 0.45, (len(members), 2)
            ).astype(np.float32)
        cdocs = []
        for r in range(concepts):
            top = rows[rng.permutation(len(rows))[:8]]
            rid = len(concept_class)
            concept_class.append(int(k))
            concept_importance.append(float(0.5 / (r + 1)))
            concept_direction.append(rng.random(4).astype(np.float32))
            concept_top.append(np.pad(index[top], (0, 8 - len(top)), constant_values=-1))
            heat = np.zeros((8, 8, 8), np.float32)
            heat[:, r * 3 : r * 3 + 3, 2:5] = 1.0
            concept_heatmaps.append(heat.astype(np.float16))
            cdocs.append(
                {"id": rid, "importance": concept_importance[-1], "top": [int(i) for i in index[top]]}
            )
        eig = [0.0, *np.sort(rng.random(5))[: clusters_per_class - 1].tolist(), 0.9, 0.95, 0.97]
        correct_k = label[rows] == prediction[rows]
        class_docs.append(
            {
                "klass": int(k),
                "name": CLASSES[int(k)] if int(k) < len(CLASSES) else str(int(k)),
                "n": len(rows),
                "accuracy": float(correct_k.mean()),
                "eigenvalues": eig,
                "k": len(clusters),
                "atypical": [int(index[i]) for i in rows[np.argsort(-atyp[rows], kind="stable")][:10]],
                "clusters": clusters,
                "concepts": cdocs,
            }
        )
    displayed = np.arange(n)
    if n > max_display:
        displayed = np.sort(rng.choice(n, max_display, replace=False))
        hidden = np.setdiff1d(np.arange(n), displayed)
        embedding[hidden] = np.nan
    thumb_map = _to_uint8(_downsample(maps[displayed], t) if h != t else maps[displayed])
    arrays: dict[str, np.ndarray] = {
        "index": index, "klass": klass, "label": label, "prediction": prediction, "cluster": cluster,
        "embedding": embedding, "atypicality": atyp,
        "class_ids": class_ids.astype(np.int64), "class_mean": np.array(class_mean, np.float32),
        "class_std": np.array(class_std, np.float32), "cluster_mean": np.array(cluster_mean, np.float32),
        "concept_class": np.array(concept_class, np.int64),
        "concept_importance": np.array(concept_importance, np.float32),
        "concept_direction": np.array(concept_direction, np.float32).reshape(len(concept_class), 4),
        "concept_top": np.array(concept_top, np.int64).reshape(len(concept_class), 8),
        "concept_heatmaps": np.array(concept_heatmaps, np.float16).reshape(len(concept_class), 8, 8, 8),
        "thumb_index": index[displayed], "thumb_map": thumb_map,
    }  # fmt: skip
    if images is not None:
        img = np.moveaxis(images[displayed], 1, -1)
        if img.shape[1] != t:
            img = img.reshape(len(img), t, img.shape[1] // t, t, img.shape[2] // t, 3).mean(axis=(2, 4))
        arrays["thumb_image"] = np.round(img * 255).astype(np.uint8)
    out = store / "analysis"
    out.mkdir(exist_ok=True)
    np.savez(out / "arrays.npz", **arrays)  # type: ignore[arg-type]
    committed, digest = records_digest(store)
    doc: dict[str, Any] = {
        "format": 1,
        "xaikit": "test",
        "created": time.time(),
        "store": {
            "method": manifest.get("method"),
            "fingerprint": manifest.get("fingerprint"),
            "length": manifest.get("length"),
            "committed": committed,
            "records": digest,
        },
        "settings": {
            "size": size,
            "max_clusters": 8,
            "neighbors": 10,
            "concepts": concepts,
            "max_display": max_display,
            "min_samples": 10,
            "seed": seed,
        },
        "arrays": {"file": "arrays.npz", "sha256": sha256_file(out / "arrays.npz")},
        "layer": "1" if concepts else None,
        "classes": class_docs,
        "skipped": {"zero": 0, "non-finite": 0},
        "has_images": images is not None,
    }
    (out / "analysis.json").write_text(json.dumps(doc))
    return out


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def make_analysed_store(folder: Path, n: int, *, images: bool = True, **options: Any) -> Path:
    """A store of ``n`` samples with its ``analysis/`` folder (see :func:`write_analysis`)."""
    store, x = make_explained_store(folder, n)
    write_analysis(store, x if images else None, **options)
    return store
