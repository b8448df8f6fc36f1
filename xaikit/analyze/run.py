""":func:`dataset`: the analysis of an ``explain_dataset`` store, written into ``<store>/analysis/``.

The maps are read shard by shard (:mod:`xaikit.analyze.maps`), clustered per class
(:mod:`xaikit.analyze.clusters`), embedded for display, and, when the data and the model are
given, the displayed samples' images thumbnailed, each class's concepts extracted
(:mod:`xaikit.analyze.craft`) and each cluster's region checked by ablation
(:mod:`xaikit.analyze.ablation`). Everything is computed before anything is written; the files
are then written atomically, ``analysis.json`` last (:mod:`xaikit.analyze.results`).
"""

from __future__ import annotations

import importlib.util
import os
import sys
import time
import warnings
from typing import Any

import numpy as np

from xaikit.analyze.clusters import atypicality, cluster_class, embed, stratified_sample
from xaikit.analyze.images import read_images, thumbnails
from xaikit.analyze.maps import MapTable, area_resample, read_columns, read_maps, spatial_layout
from xaikit.analyze.results import FORMAT, DatasetAnalysis, open_analysis, write_analysis
from xaikit.checks import check_int, check_number
from xaikit.errors import XaikitTypeError, XaikitValueError, XaikitWarning, describe
from xaikit.files import records_digest

__all__ = ["dataset"]

#: members per cluster listed as its most typical; samples per class listed as atypical
MEMBERS = ATYPICAL = 20
#: the thumbnails' side (or the maps' side when smaller)
THUMB = 32
#: images per class handed to the concept extraction, at most
CONCEPT_SAMPLES = 1000
#: bytes of images per class handed to the concept extraction, at most
CONCEPT_BYTES = 256 << 20
#: members per cluster whose images the ablation check runs on, at most (a seeded sample)
ABLATION_SAMPLES = 256


def _say(progress: bool | None, text: str) -> None:
    if progress or (progress is None and sys.stderr.isatty()):
        print(f"xk.analyze: {text}", file=sys.stderr, flush=True)


def _explanation(store: Any) -> Any:
    from xaikit.xai import DatasetExplanation

    if isinstance(store, DatasetExplanation):
        return store
    if not isinstance(store, (str, os.PathLike)):
        raise XaikitTypeError(
            f"store must be the path of an explain_dataset store or a DatasetExplanation; got {describe(store)}"
        )
    try:
        return DatasetExplanation.open(store)
    except XaikitValueError as exc:
        raise XaikitValueError(
            f"store: {exc}; pass the folder that explain_dataset (xaikit explain) wrote"
        ) from None


def _map_thumbs(table: MapTable, index: np.ndarray, side: int) -> np.ndarray:
    """(M, t, t) uint8: the stored t x t maps of ``index``, each scaled to its maximum."""
    if not len(index):
        return np.zeros((0, side, side), np.uint8)
    maps = np.stack([table.thumbs[int(i)] for i in index])
    top = maps.reshape(len(maps), -1).max(axis=1)
    return np.round(maps / np.where(top > 0, top, 1.0)[:, None, None] * 255.0).astype(np.uint8)


def _check(
    size: Any, max_clusters: Any, neighbors: Any, concepts: Any, max_display: Any, min_samples: Any,
    seed: Any, batch_size: Any, fraction: Any,
) -> None:  # fmt: skip
    check_int(size, "size", 2, kind=XaikitTypeError)
    check_int(max_clusters, "max_clusters", 1, kind=XaikitTypeError)
    check_int(neighbors, "neighbors", 1, kind=XaikitTypeError)
    check_int(concepts, "concepts", 0, kind=XaikitTypeError)
    check_int(max_display, "max_display", 0, kind=XaikitTypeError)
    check_int(min_samples, "min_samples", 2, kind=XaikitTypeError)
    check_int(seed, "seed", 0, kind=XaikitTypeError)
    check_int(batch_size, "batch_size", 1, kind=XaikitTypeError)
    check_number(fraction, "fraction", 0.0, 1.0, low_open=True)


def _engine(engine: Any, explanation: Any) -> str:
    """``"local"`` or ``"ray"`` for ``engine`` (``"auto"``: Ray when a Ray worker wrote a shard of
    the store and Ray is installed)."""
    if not isinstance(engine, str) or engine not in ("auto", "local", "ray"):
        raise XaikitValueError(f"engine must be 'auto', 'local' or 'ray'; got {describe(engine)}")
    if engine == "auto":
        made_on_ray = any(
            str(r.get("worker", "")).startswith("ray:") for r in explanation.store.records().values()
        )
        engine = "ray" if made_on_ray and importlib.util.find_spec("ray") is not None else "local"
    elif engine == "ray" and importlib.util.find_spec("ray") is None:
        raise XaikitValueError("engine='ray' needs Ray (pip install 'xaikit[ray]'); use engine='local'")
    return str(engine)


def dataset(
    store: Any,
    *,
    model: Any = None,
    data: Any = None,
    layer: str | None = None,
    size: int = 16,
    max_clusters: int = 8,
    neighbors: int = 10,
    concepts: int = 5,
    max_display: int = 10_000,
    min_samples: int = 10,
    seed: int = 0,
    batch_size: int = 64,
    framework: str | None = None,
    x_key: str = "x",
    label_key: str | None = None,
    progress: bool | None = None,
    fraction: float = 0.1,
    engine: str = "auto",
    workers: int | None = None,
    address: str | None = None,
) -> DatasetAnalysis:
    """Find the strategies a model uses across a dataset, from the maps of an ``explain_dataset``
    store; the result is written into ``<store>/analysis/`` and returned.

    Per class (the class a map explains: the prediction, or the label for a store written with
    ``target="label"``): the mean and spread of the maps, the most atypical samples, and SpRAy
    strategy clusters (spectral clustering of the maps, eigengap choice of k: see
    :mod:`xaikit.analyze.clusters`), each with its mean map, size, accuracy and most typical
    members; a t-SNE embedding of up to ``max_display`` samples for display. With ``data``:
    thumbnails of the displayed samples' images. With ``model`` and ``data``: each class's
    concepts (CRAFT-style, :func:`xaikit.analyze.concepts`) and each cluster's region-ablation
    check (the top ``fraction`` of its mean map's pixels filled with each image's mean colour:
    the accuracy and explained-class score before and after).

    Args:
        store: the store's path, or a :class:`~xaikit.xai.DatasetExplanation`.
        model: the model (as ``explain_dataset`` takes it: a model, a factory,
            ``"package.module:factory"`` or a model file); needs ``data``.
        data: the dataset the store explains (as ``explain_dataset`` takes it), of the store's length;
            image files are read as the store's run read them (its ``resize`` and ``channels``;
            files that cannot be read are left out).
        layer: the concepts' layer (None: the last spatial layer).
        size: the side of the downsampled maps (at least 2).
        max_clusters: the largest k the eigengap may choose (at least 1).
        neighbors: neighbours per sample in the k-NN affinity graph.
        concepts: concepts per class (0: none).
        max_display: samples placed by the embedding (a stratified seeded sample; 0: none).
        min_samples: classes with fewer analysed samples get statistics but no clusters.
        seed: the seed of every random choice (k-means, t-SNE, the samples).
        batch_size: samples read from ``data`` and run through the model at once.
        framework: ``"torch"`` or ``"tf"`` for a model that is a plain function.
        x_key: the input key of dict samples and NumpyDataset columns.
        label_key: the label key of ``data`` (default as in ``explain_dataset``).
        progress: say what runs on stderr (None: when stderr is a terminal).
        fraction: the share of pixels the ablation check fills (0 < fraction <= 1).
        engine: where the shards are read and reduced: ``"local"`` (this process), ``"ray"``
            (Ray tasks, one shard each, reading the store's folder themselves) or ``"auto"``
            (Ray when the store was written by Ray workers and Ray is installed, else local).
            The result is the same; clustering, the embedding and the model parts run here.
        workers: CPUs of the local Ray cluster started for ``"ray"`` (default: all it sees).
        address: join this Ray cluster instead (``"auto"`` or ``ray://host:port``).

    Returns:
        The :class:`~xaikit.analyze.results.DatasetAnalysis`, as :func:`xaikit.analyze.open` reads it.

    Raises:
        XaikitValueError: not a store, a store without a committed shard of maps, maps that are
            not images, a bad argument, ``model`` without ``data``, or ``data`` of another length
            than the store's. Nothing is written then (a previous analysis stays as it was).
        XaikitTypeError: an argument of the wrong type.

    Example:
        >>> import tempfile, numpy as np, torch, xaikit as xk
        >>> x = np.random.default_rng(0).random((24, 1, 8, 8), dtype=np.float32)
        >>> model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 2))
        >>> out = tempfile.mkdtemp() + "/x.zarr"
        >>> _ = xk.xai.explain_dataset(model, x, method="vanilla", out=out, progress=False)
        >>> res = xk.analyze.dataset(out, size=4, max_display=0, progress=False)
        >>> sum(c.n for c in res.classes), {round(float(c.mean.sum()), 4) for c in res.classes}
        (24, {1.0})
    """
    _check(size, max_clusters, neighbors, concepts, max_display, min_samples, seed, batch_size, fraction)
    explanation = _explanation(store)
    manifest = explanation.manifest
    engine = _engine(engine, explanation)
    length = int(manifest["length"])
    if model is not None and data is None:
        raise XaikitValueError(
            "model: the concepts and the ablation check need the images too; pass data= (the dataset the "
            "store explains), or leave out model= for the maps-only analysis"
        )
    source = None
    if data is not None:
        from xaikit.xai.internal import as_source

        if isinstance(data, (str, os.PathLike)):  # image files, read as the store read them
            reading = manifest.get("data") or {}
            resize = reading.get("resize")
            source = as_source(
                data, resize=None if resize is None else (int(resize[0]), int(resize[1])),
                channels=reading.get("channels"), skip_bad=True,
            )  # fmt: skip
        else:
            source = as_source(data, x_key=x_key, label_key=label_key)
        if len(source) != length:
            raise XaikitValueError(
                f"data: expected the dataset the store explains, of {length} samples (the store's length); "
                f"got {len(source)} samples"
            )
        _check_images(source, manifest)
    built, spec, concepts_skipped = None, None, None
    if model is not None:
        from xaikit.xai import ModelSpec

        spec = ModelSpec.of(model, framework)
        built = spec.build()
        if concepts:  # before the costly part: a layer that cannot be read is known now
            concepts, concepts_skipped = _concepts_possible(built, source, layer, framework, concepts)
    records = explanation.store.records()
    t0 = time.perf_counter()
    columns = read_columns(explanation)
    display = (
        columns.index[stratified_sample(columns.klass, max_display, seed)]
        if max_display
        else columns.index[:0]
    )
    map_shape = manifest.get("map_shape") or (0, 0)
    thumb = min(THUMB, *spatial_layout(tuple(map_shape))[1]) if manifest.get("map_shape") else THUMB
    table = read_maps(
        explanation, columns, size, thumb, display, engine=engine, workers=workers, address=address
    )
    seconds = {"read": time.perf_counter() - t0}
    _say(
        progress,
        f"read {len(table.index)} maps in {time.perf_counter() - t0:.1f} s (skipped {table.skipped})",
    )
    if not len(table.index):
        raise XaikitValueError(
            f"store: every committed map of {explanation.path!r} is zero or non-finite ({table.skipped}); "
            "there is nothing to analyse"
        )
    names = explanation.classes
    class_ids = np.unique(table.klass)
    n = len(table.index)
    cluster = np.full(n, -1, np.int32)
    atyp = np.zeros(n, np.float32)
    class_mean = np.zeros((len(class_ids), size, size), np.float32)
    class_std = np.zeros_like(class_mean)
    cluster_means: list[np.ndarray] = []
    entries: list[dict[str, Any]] = []
    t1 = time.perf_counter()
    for row, klass in enumerate(class_ids):
        where = np.flatnonzero(table.klass == klass)
        maps = table.maps[where].astype(np.float64)
        mean = maps.mean(axis=0)
        class_mean[row], class_std[row] = mean, maps.std(axis=0)
        atyp[where] = atypicality(maps, mean)
        ranked = where[np.argsort(-atyp[where], kind="stable")[:ATYPICAL]]
        entry: dict[str, Any] = {
            "klass": int(klass),
            "name": None if names is None or not 0 <= klass < len(names) else names[int(klass)],
            "n": len(where),
            "accuracy": _accuracy(table, where),
            "eigenvalues": [],
            "k": 0,
            "atypical": [int(i) for i in table.index[ranked]],
            "clusters": [],
            "concepts": [],
        }
        if len(where) >= min_samples:
            found = cluster_class(table.maps[where], max_clusters, neighbors, seed)
            entry["eigenvalues"] = [round(float(v), 6) for v in found.eigenvalues]
            entry["k"] = found.k
            for c in range(found.k):
                members = where[found.order[c]]
                gid = len(cluster_means)
                cluster[members] = gid
                cluster_means.append(found.means[c])
                entry["clusters"].append(
                    {
                        "id": gid,
                        "size": len(members),
                        "accuracy": _accuracy(table, members),
                        "members": [int(i) for i in table.index[members[:MEMBERS]]],
                        "ablation": None,
                    }
                )
        entries.append(entry)
    seconds["cluster"] = time.perf_counter() - t1
    _say(progress, f"clustered {len(class_ids)} classes in {seconds['cluster']:.1f} s")
    t2 = time.perf_counter()
    shown = np.flatnonzero(np.isin(table.index, display))
    embedding = np.full((n, 2), np.nan, np.float32)
    if len(shown):
        embedding[shown] = embed(table.maps[shown], seed)
    seconds["embed"] = time.perf_counter() - t2
    _say(progress, f"embedded {len(shown)} samples in {seconds['embed']:.1f} s")
    arrays: dict[str, np.ndarray] = {
        "index": table.index.astype(np.int64),
        "klass": table.klass.astype(np.int64),
        "label": table.label.astype(np.int64),
        "prediction": table.prediction.astype(np.int64),
        "cluster": cluster,
        "embedding": embedding,
        "atypicality": atyp,
        "class_ids": class_ids.astype(np.int64),
        "class_mean": class_mean,
        "class_std": class_std,
        "cluster_mean": np.stack(cluster_means) if cluster_means else np.zeros((0, size, size), np.float32),
        "thumb_index": table.index[shown].astype(np.int64),
        "thumb_map": _map_thumbs(table, table.index[shown], thumb),
    }
    concept_layer = None
    if source is not None:
        spatial = table.spatial
        t3 = time.perf_counter()
        if len(shown):
            arrays["thumb_image"] = _thumb_images(source, table.index[shown], spatial, thumb, batch_size)
        seconds["thumbnails"] = time.perf_counter() - t3
        if built is not None and spec is not None:
            from xaikit.analyze.ablation import ablate_clusters

            _check_fingerprint(spec, built, manifest)
            t4 = time.perf_counter()
            ablate_clusters(
                built, source, table, cluster, entries, cluster_means, fraction, seed, batch_size, framework
            )
            seconds["ablation"] = time.perf_counter() - t4
            _say(progress, f"ablation check of {len(cluster_means)} clusters in {seconds['ablation']:.1f} s")
            t5 = time.perf_counter()
            if concepts:
                concept_layer = _concepts(
                    built, source, table, entries, arrays, layer, concepts, min_samples, seed, batch_size, framework, thumb
                )  # fmt: skip
            seconds["concepts"] = time.perf_counter() - t5
    _empty_concepts(arrays, thumb)
    info = {
        "format": FORMAT,
        "xaikit": _version(),
        "created": time.time(),
        "store": {
            "method": manifest.get("method"),
            "fingerprint": manifest.get("fingerprint"),
            "length": length,
            "committed": sorted(int(k) for k in records),
            "records": records_digest(records),
        },
        "settings": {
            "size": size, "max_clusters": max_clusters, "neighbors": neighbors, "concepts": concepts,
            "max_display": max_display, "min_samples": min_samples, "seed": seed, "fraction": fraction,
            "layer": layer, "thumb": thumb, "target": manifest.get("target"), "engine": engine,
        },
        "layer": concept_layer,
        "classes": entries,
        "skipped": dict(table.skipped),
        "has_images": "thumb_image" in arrays,
        "concepts_skipped": concepts_skipped,
        "seconds": {k: round(v, 4) for k, v in seconds.items()},
    }  # fmt: skip
    write_analysis(explanation.path, arrays, info)
    return open_analysis(explanation.path)


def _check_fingerprint(spec: Any, model: Any, manifest: dict[str, Any]) -> None:
    """Warn when ``model`` is not the model the store explains (its weights' or file's fingerprint
    is not the store's): the ablation check and the concepts then describe another model."""
    stored = manifest.get("fingerprint")
    mine = {spec.fingerprint(model)}
    if spec.kind == "file":  # the store may hold the weights' fingerprint of the same model
        from xaikit.backend.serialized import weights_fingerprint

        mine.add(weights_fingerprint(model, spec.framework))
    if stored not in mine:
        warnings.warn(
            f"model: its fingerprint {sorted(mine)[0][:12]}... is not the store's ({str(stored)[:12]}...: "
            f"{manifest.get('model')!r}); the ablation check and the concepts describe this model, not the "
            "one whose maps are analysed",
            XaikitWarning,
            stacklevel=3,
        )


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("xaikit")
    except PackageNotFoundError:  # pragma: no cover - a source tree without an install
        return "unknown"


def _accuracy(table: MapTable, where: np.ndarray) -> float | None:
    """The share of labelled samples among ``where`` that are predicted right (None: no label)."""
    lab = table.label[where]
    ok = lab >= 0
    return None if not ok.any() else round(float((table.prediction[where][ok] == lab[ok]).mean()), 6)


def _thumb_images(
    source: Any, index: np.ndarray, spatial: tuple[int, int], side: int, batch_size: int
) -> np.ndarray:
    out = np.zeros((len(index), side, side, 3), np.uint8)
    position = {int(i): p for p, i in enumerate(index)}
    for idx, x in read_images(source, index, batch_size):
        out[[position[int(i)] for i in idx]] = thumbnails(x, spatial, side)
    return out


def _check_images(source: Any, manifest: dict[str, Any]) -> None:
    """Refuse ``data`` whose images are not of the maps' height and width (another dataset)."""
    map_shape = manifest.get("map_shape")
    if not map_shape:
        return
    _, want = spatial_layout(tuple(map_shape))
    rows = source.get(0, min(1, len(source)))
    if not len(rows.x):
        return
    shape = tuple(int(d) for d in rows.x.shape[1:])
    if not np.isfinite(rows.x).all():
        raise XaikitValueError(
            "data: sample 0 holds NaN or infinite values; pass the images the store explains (finite)"
        )
    try:
        _, got = spatial_layout(shape, want)
    except XaikitValueError:
        got = None
    if got != tuple(want):
        raise XaikitValueError(
            f"data: expected the images the store explains, of {want[0]} x {want[1]} pixels (its maps' size); "
            f"got samples of shape {shape}"
        )


def _concepts_possible(
    model: Any, source: Any, layer: Any, framework: str | None, concepts: int
) -> tuple[int, str | None]:
    """``(concepts, None)`` when the concepts' layer can be read (``concepts`` lowered, with a warning,
    to the layer's channel count when it has fewer); with ``layer=None`` and a model
    whose layers cannot be read (a TorchScript module: no hooks), ``(0, why)`` and a warning, so the
    clusters and the ablation check still run; a ``layer`` given that cannot be read is refused."""
    from xaikit.analyze.craft import resolve_layer

    try:
        name, channels = resolve_layer(model, source.get(0, 1).x, layer, framework)
    except XaikitValueError as err:
        if layer is not None:
            raise XaikitValueError(f"layer: the concepts cannot read layer {layer!r}: {err}") from err
        why = f"the concepts need one layer's activations and none can be read: {err}"
        warnings.warn(f"xk.analyze.dataset: concepts skipped ({why}); pass concepts=0 to silence this",
                      XaikitWarning, stacklevel=3)  # fmt: skip
        return 0, why
    if channels < concepts:  # NMF cannot find more directions than the layer has channels
        warnings.warn(f"xk.analyze.dataset: layer {name!r} has {channels} channel(s): {channels} concept(s) per "
                      f"class instead of concepts={concepts}", XaikitWarning, stacklevel=3)  # fmt: skip
        return channels, None
    return concepts, None


def _empty_concepts(arrays: dict[str, np.ndarray], side: int) -> None:
    """The concept arrays of an analysis without concepts (R = 0)."""
    arrays.setdefault("concept_class", np.zeros(0, np.int64))
    arrays.setdefault("concept_importance", np.zeros(0, np.float32))
    arrays.setdefault("concept_direction", np.zeros((0, 0), np.float32))
    arrays.setdefault("concept_top", np.zeros((0, 0), np.int64))
    arrays.setdefault("concept_heatmaps", np.zeros((0, 0, side, side), np.float16))


def _concepts(
    model: Any, source: Any, table: MapTable, entries: list[dict[str, Any]], arrays: dict[str, np.ndarray],
    layer: str | None, rank: int, min_samples: int, seed: int, batch_size: int, framework: str | None, side: int,
) -> str | None:  # fmt: skip
    """Each class's concepts (classes of at least ``min_samples`` samples), into ``entries`` and
    ``arrays`` (``concept_*``, heatmaps area-resampled to ``side``; ``concept_image``: the top
    images' thumbnails); returns the layer."""
    from xaikit.analyze.craft import extract_concepts

    rng = np.random.default_rng(seed)
    rows: dict[str, list[Any]] = {
        "class": [],
        "importance": [],
        "direction": [],
        "top": [],
        "heat": [],
        "image": [],
    }
    found_layer = None
    gid = 0
    for entry in entries:
        where = np.flatnonzero(table.klass == entry["klass"])
        if len(where) < min_samples:
            continue
        per = (
            int(np.prod(source.get(int(table.index[where[0]]), int(table.index[where[0]]) + 1).x.shape[1:]))
            * 4
        )
        cap = max(min_samples, min(CONCEPT_SAMPLES, CONCEPT_BYTES // max(per, 1)))
        picked = np.sort(rng.choice(table.index[where], size=min(cap, len(where)), replace=False))
        parts = list(read_images(source, picked, batch_size))
        if not parts:
            continue
        idx = np.concatenate([i for i, _ in parts])
        x = np.concatenate([xb for _, xb in parts])
        cs = extract_concepts(
            model, x, int(entry["klass"]), layer=layer, rank=rank, seed=seed, batch_size=batch_size,
            framework=framework, top=8, indices=idx,
        )  # fmt: skip
        found_layer = str(cs.layer)
        lookup = {int(i): p for p, i in enumerate(idx)}
        for r in range(len(cs.importance)):
            top = np.asarray(cs.top[r], np.int64)
            heat = np.asarray(cs.heatmaps[r], np.float32)
            rows["class"].append(np.int64(entry["klass"]))
            rows["importance"].append(np.float32(cs.importance[r]))
            rows["direction"].append(np.asarray(cs.directions[r], np.float32))
            rows["top"].append(top)
            rows["heat"].append(
                area_resample(heat, side) if len(heat) else np.zeros((0, side, side), np.float32)
            )
            imgs = x[[lookup[int(i)] for i in top if int(i) in lookup]]
            rows["image"].append(
                thumbnails(imgs, table.spatial, side) if len(imgs) else np.zeros((0, side, side, 3), np.uint8)
            )
            entry["concepts"].append(
                {"id": gid, "importance": float(cs.importance[r]), "top": [int(i) for i in top]}
            )
            gid += 1
    if not rows["class"]:
        return found_layer
    width = max(len(t) for t in rows["top"])
    channels = max(len(d) for d in rows["direction"])
    count = len(rows["class"])
    top = np.full((count, width), -1, np.int64)
    heat = np.zeros((count, width, side, side), np.float16)
    image = np.zeros((count, width, side, side, 3), np.uint8)
    direction = np.zeros((count, channels), np.float32)
    for r in range(count):
        t = len(rows["top"][r])
        top[r, :t], heat[r, :t] = rows["top"][r], rows["heat"][r]
        image[r, : len(rows["image"][r])] = rows["image"][r]
        direction[r, : len(rows["direction"][r])] = rows["direction"][r]
    arrays.update(
        concept_class=np.asarray(rows["class"], np.int64), concept_importance=np.asarray(rows["importance"], np.float32),
        concept_direction=direction, concept_top=top, concept_heatmaps=heat, concept_image=image,
    )  # fmt: skip
    return found_layer
