"""The analysis of a dataset on disk, ``<store>/analysis/`` (format :data:`FORMAT`), and its
read-only handle :class:`DatasetAnalysis`.

``arrays.npz`` holds the arrays (see docs/analyze.md for every key), ``analysis.json`` the rest
and the SHA-256 of ``arrays.npz``. Each is written atomically (a temporary file, then
``os.replace``), ``analysis.json`` last: it is the commit. A run that fails before it leaves the
previous analysis readable (its json still names the sha256 of its npz; a new npz that replaced
the old one without its json is refused by :func:`open_analysis` as a mismatch, never read as
the old one's).
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from xaikit.errors import XaikitValueError
from xaikit.files import atomic_path, write_json

__all__ = [
    "FORMAT",
    "ClassAnalysis",
    "Cluster",
    "Concept",
    "DatasetAnalysis",
    "open_analysis",
    "records_digest",
    "write_analysis",
]

#: version of the analysis layout
FORMAT = 1
#: the analysis folder inside a store, and its files
FOLDER, JSON, ARRAYS = "analysis", "analysis.json", "arrays.npz"


def records_digest(records: dict[int, dict[str, Any]]) -> str:
    """SHA-256 over the committed shards' checksums, in shard order: it changes when a shard is
    committed, redone or removed."""
    digest = hashlib.sha256()
    for k in sorted(records):
        digest.update(f"{k}:{records[k].get('sha256', '')}\n".encode())
    return digest.hexdigest()


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_analysis(
    store_path: str | os.PathLike[str], arrays: dict[str, np.ndarray], info: dict[str, Any]
) -> Path:
    """Write ``<store>/analysis/``: ``arrays.npz`` (atomically), then ``analysis.json`` (``info``
    with the npz's file name and SHA-256; atomically, last). Returns the folder."""
    folder = Path(store_path) / FOLDER
    with atomic_path(folder / ARRAYS) as tmp:
        with open(tmp, "wb") as fh:
            np.savez(fh, **arrays)  # type: ignore[arg-type]
        sha = _sha256(Path(tmp))
    write_json(folder / JSON, {**info, "arrays": {"file": ARRAYS, "sha256": sha}})
    return folder


@dataclass(frozen=True)
class Cluster:
    """One strategy cluster: its global ``id``, ``klass``, ``size``, ``accuracy`` (None without
    labels), ``mean`` (s, s) map, ``members`` (dataset indices, most typical first, at most 20)
    and ``ablation`` (None, or ``{"fraction", "accuracy_before", "accuracy_after",
    "score_before", "score_after", "n"}``: the region-ablation check)."""

    id: int
    klass: int
    size: int
    accuracy: float | None
    mean: np.ndarray
    members: list[int]
    ablation: dict[str, Any] | None


@dataclass(frozen=True)
class Concept:
    """One concept of a class: ``id``, ``klass``, ``importance``, ``direction`` (channels,),
    ``top`` (dataset indices, at most 8) and ``heatmaps`` (len(top), h, w) float32."""

    id: int
    klass: int
    importance: float
    direction: np.ndarray
    top: list[int]
    heatmaps: np.ndarray


@dataclass(frozen=True)
class ClassAnalysis:
    """One class: ``klass``, ``name`` (or None), ``n`` analysed samples, ``accuracy`` (None
    without labels), ``mean`` and ``std`` (s, s) maps, the Laplacian ``eigenvalues``, the chosen
    ``k`` (0: too few samples to cluster), its ``clusters`` and ``atypical`` samples (dataset
    indices, most atypical first)."""

    klass: int
    name: str | None
    n: int
    accuracy: float | None
    mean: np.ndarray
    std: np.ndarray
    eigenvalues: list[float]
    k: int
    clusters: list[Cluster]
    atypical: list[int]


class DatasetAnalysis:
    """The analysis of a dataset, read from ``<store>/analysis/`` (read-only; see
    :func:`xaikit.analyze.dataset`).

    Attributes:
        path: the analysis folder.
        settings: the settings it ran with.
        classes: one :class:`ClassAnalysis` per class.
        concepts: the :class:`Concept` s of all classes.
        skipped: the maps left out, by reason (``"zero"``, ``"non-finite"``).
        layer: the concepts' layer, or None.
        has_images: whether thumbnails of the images were stored.
        stale: whether the store's committed shards changed since the analysis.
    """

    def __init__(
        self, path: str | os.PathLike[str], info: dict[str, Any], arrays: dict[str, np.ndarray], stale: bool
    ) -> None:
        self.path = Path(path)
        self.info = info
        self.arrays = arrays
        self.stale = stale
        self.settings: dict[str, Any] = dict(info.get("settings") or {})
        self.skipped: dict[str, int] = {str(k): int(v) for k, v in (info.get("skipped") or {}).items()}
        self.layer: str | None = info.get("layer")
        self.has_images = bool(info.get("has_images"))
        self._clusters: dict[int, Cluster] = {}
        self.classes: list[ClassAnalysis] = []
        self.concepts: list[Concept] = []
        position = {int(c): i for i, c in enumerate(arrays["class_ids"])}
        concept_row = 0
        for entry in info.get("classes") or ():
            klass = int(entry["klass"])
            clusters = []
            for c in entry.get("clusters") or ():
                cl = Cluster(
                    int(c["id"]), klass, int(c["size"]), c.get("accuracy"), arrays["cluster_mean"][int(c["id"])],
                    [int(i) for i in c.get("members") or ()], c.get("ablation"),
                )  # fmt: skip
                clusters.append(cl)
                self._clusters[cl.id] = cl
            row = position[klass]
            self.classes.append(
                ClassAnalysis(
                    klass,
                    entry.get("name"),
                    int(entry["n"]),
                    entry.get("accuracy"),
                    arrays["class_mean"][row],
                    arrays["class_std"][row],
                    [float(v) for v in entry.get("eigenvalues") or ()],
                    int(entry["k"]),
                    clusters,
                    [int(i) for i in entry.get("atypical") or ()],
                )
            )
            for c in entry.get("concepts") or ():
                r = concept_row
                top = [int(i) for i in arrays["concept_top"][r] if i >= 0]
                self.concepts.append(
                    Concept(
                        int(c["id"]),
                        klass,
                        float(arrays["concept_importance"][r]),
                        arrays["concept_direction"][r],
                        top,
                        arrays["concept_heatmaps"][r, : len(top)].astype(np.float32),
                    )
                )
                concept_row += 1

    @property
    def samples(self) -> Any:
        """A pandas DataFrame, one row per analysed sample: ``index, klass, label, prediction,
        correct, cluster, x, y, atypicality`` (``correct``: None where there is no label;
        ``cluster``: -1 for none; ``x``, ``y``: NaN where not displayed)."""
        import pandas as pd

        a = self.arrays
        label = a["label"]
        correct = pd.array(np.where(label >= 0, a["prediction"] == label, False), dtype="boolean")
        correct[label < 0] = pd.NA
        return pd.DataFrame(
            {
                "index": a["index"], "klass": a["klass"], "label": label, "prediction": a["prediction"],
                "correct": correct, "cluster": a["cluster"], "x": a["embedding"][:, 0], "y": a["embedding"][:, 1],
                "atypicality": a["atypicality"],
            }
        )  # fmt: skip

    def cluster(self, id: int) -> Cluster:
        """The cluster of global id ``id``."""
        if id not in self._clusters:
            raise XaikitValueError(f"id: no cluster {id!r}; the analysis has ids {sorted(self._clusters)}")
        return self._clusters[id]

    def __repr__(self) -> str:
        ks = ", ".join(f"{c.name or c.klass}: k={c.k}" for c in self.classes)
        return (
            f"DatasetAnalysis({str(self.path)!r}: {len(self.arrays['index'])} samples, {len(self.classes)} classes "
            f"({ks}), {len(self._clusters)} clusters, {len(self.concepts)} concepts{', stale' if self.stale else ''})"
        )


def open_analysis(store: Any) -> DatasetAnalysis:
    """Read ``<store>/analysis/`` back (``store``: the store's path or a DatasetExplanation).

    Raises:
        XaikitValueError: no analysis there, another format, or an ``arrays.npz`` whose SHA-256
            is not the one ``analysis.json`` recorded.
    """
    from xaikit.xai import DatasetExplanation

    root = Path(getattr(store, "path", store))
    folder = root / FOLDER
    try:
        info = json.loads((folder / JSON).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise XaikitValueError(
            f"store: {str(root)!r} has no analysis ({str(folder / JSON)!r} is missing); run "
            "xk.analyze.dataset(store) or 'xaikit analyze STORE' first"
        ) from None
    if info.get("format") != FORMAT:
        raise XaikitValueError(
            f"store: the analysis {str(folder / JSON)!r} has format {info.get('format')!r}; this xaikit "
            f"reads format {FORMAT}: run the analysis again"
        )
    npz = folder / str(info["arrays"]["file"])
    if not npz.is_file() or _sha256(npz) != info["arrays"]["sha256"]:
        raise XaikitValueError(
            f"store: the analysis file {str(npz)!r} does not match the SHA-256 that {JSON} recorded "
            "(changed, truncated or missing since it was written); run the analysis again"
        )
    with np.load(npz) as data:
        arrays = {k: data[k] for k in data.files}
    try:
        records = DatasetExplanation.open(root).store.records()
        stale = records_digest(records) != info.get("store", {}).get("records")
    except XaikitValueError:
        stale = True
    return DatasetAnalysis(folder, info, arrays, stale)
