"""Explain a whole dataset: :func:`explain_dataset` streams attributions into a resumable,
sharded Zarr store; :class:`DatasetExplanation` reads them back.

The dataset is cut into shards (contiguous ranges of ``shard_size`` samples); each shard is
explained batch by batch with :func:`xaikit.xai.explain` under a seed derived from
``(seed, shard, batch)``, written to the store and committed by one atomic write of its
completion record (see :mod:`xaikit.xai._store`). A crashed run resumes where it stopped, and a
shard's values are the same bits whether it ran alone, in a resumed run or on another worker.

Example:
    >>> import tempfile, numpy as np, torch, xaikit as xk
    >>> model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(12, 3))
    >>> x = np.random.default_rng(0).random((10, 3, 2, 2), dtype=np.float32)
    >>> out = tempfile.mkdtemp() + "/x.zarr"
    >>> res = xk.xai.explain_dataset(model, x, method="vanilla", out=out, batch_size=4, progress=False)
    >>> res.attributions.shape, len(res.table), res.complete
    ((10, 3, 2, 2), 10, True)
"""

from __future__ import annotations

import importlib
import json
import os
import socket
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from xaikit.backend import framework_of, get_backend
from xaikit.backend.serialized import (
    fingerprint_of_file,
    load_model_file,
    model_file_kind,
    weights_fingerprint,
)
from xaikit.checks import check_int
from xaikit.errors import XaikitError, XaikitTypeError, XaikitValueError, describe
from xaikit.files import write_text
from xaikit.xai import health
from xaikit.xai._engine import check_max_batch, check_memory_budget, stream_seed
from xaikit.xai._progress import Progress
from xaikit.xai._sources import ImageFilesSource, Rows, Source, as_source
from xaikit.xai._store import FORMAT, ShardResult, Store, StoreLockedError, jsonable
from xaikit.xai.explain import run
from xaikit.xai.methods import Pinned, check_targets, logits, pin, prepare
from xaikit.xai.registry import get_method

__all__ = ["DatasetExplanation", "ModelSpec", "StoreLockedError", "explain_dataset"]

#: rows per fused chunk unless given: a fixed size, so that every process gives the same bits
#: (``max_batch="auto"`` times chunk sizes per process and may choose differently)
DEFAULT_MAX_BATCH = 128
#: the engines of explain_dataset
ENGINES = ("local", "ray")


# ---- the model ---------------------------------------------------------------------------------
@dataclass
class ModelSpec:
    """How to build the model: ``kind`` is ``"model"`` (the object itself), ``"file"`` (a
    ``.keras`` or TorchScript file), ``"import"`` (``"package.module:factory"``) or
    ``"factory"`` (a callable of no arguments). Picklable when its value is, so that Ray workers
    build their own model.

    Example:
        >>> ModelSpec.of("my_models.nets:lenet").kind
        'import'
    """

    kind: str
    value: Any
    framework: str | None = None

    @classmethod
    def of(cls, model_or_factory: Any, framework: str | None = None) -> ModelSpec:
        """The spec of what ``explain_dataset`` was given, or a clear error."""
        if isinstance(model_or_factory, ModelSpec):
            return model_or_factory
        if isinstance(model_or_factory, (str, os.PathLike)):
            text = os.fspath(model_or_factory)
            if model_file_kind(text) is not None:
                return cls("file", os.path.abspath(text), framework)
            module, sep, name = text.partition(":")
            if sep and module and name.isidentifier():
                return cls("import", text, framework)
            raise XaikitValueError(
                "model_or_factory: a str must be a model file (.keras, or TorchScript .pt/.pth/.ts) or "
                f"'package.module:factory'; got {text!r}"
            )
        if framework_of(model_or_factory) is not None or (
            framework is not None and callable(model_or_factory)
        ):
            return cls("model", model_or_factory, framework)
        if callable(model_or_factory):
            return cls("factory", model_or_factory, framework)
        raise XaikitTypeError(
            "model_or_factory must be a torch or Keras model, a function of no arguments that builds one, "
            f"a model file or 'package.module:factory'; got {describe(model_or_factory)}"
        )

    def build(self) -> Any:
        """The model (the object itself for ``"model"``; a fresh one otherwise)."""
        if self.kind == "model":
            return self.value
        if self.kind == "file":
            return load_model_file(self.value)
        factory = self.value
        if self.kind == "import":
            module, _, name = self.value.partition(":")
            try:
                factory = getattr(importlib.import_module(module), name)
            except (ImportError, AttributeError) as exc:
                raise XaikitValueError(
                    f"model_or_factory: cannot import {self.value!r} ({type(exc).__name__}: {exc})"
                ) from exc
        model = factory()
        if model is None or (framework_of(model) is None and self.framework is None):
            raise XaikitTypeError(
                f"model_or_factory: the factory {self.describe()} must return a torch or Keras model; "
                f"got {describe(model)}"
            )
        return model

    def fingerprint(self, model: Any) -> str:
        """The file's hash for a file, else the hash of the built model's weights."""
        if self.kind == "file":
            return fingerprint_of_file(self.value)
        return weights_fingerprint(model, self.framework)

    def describe(self) -> str:
        if self.kind in ("file", "import"):
            return str(self.value)
        return getattr(self.value, "__qualname__", type(self.value).__qualname__)


# ---- the settings and one shard -----------------------------------------------------------------
@dataclass
class Settings:
    """What a worker needs to explain a shard (everything in it is picklable)."""

    method: str
    options: dict[str, Any]
    length: int
    batch_size: int
    shard_size: int
    seed: int
    target: str | None
    framework: str | None
    fingerprint: str = ""
    #: how the data source reads samples where it changes their values (resize, channels)
    data: dict[str, Any] | None = None

    @property
    def n_shards(self) -> int:
        return -(-self.length // self.shard_size)

    def shard_range(self, k: int) -> tuple[int, int]:
        start = k * self.shard_size
        return start, min(start + self.shard_size, self.length)

    def manifest(self, spec: ModelSpec) -> dict[str, Any]:
        from importlib.metadata import PackageNotFoundError, version

        try:
            xaikit_version = version("xaikit")
        except PackageNotFoundError:  # pragma: no cover - a source tree without an install
            xaikit_version = "unknown"
        return {
            "format": FORMAT,
            "xaikit": xaikit_version,
            "fingerprint": self.fingerprint,
            "model": spec.describe(),
            "method": self.method,
            "options": jsonable(self.options),
            "length": self.length,
            "shard_size": self.shard_size,
            "batch_size": self.batch_size,
            "seed": self.seed,
            "target": self.target,
            "data": self.data,
            "created": time.time(),
        }


def _softmax_of(scores: np.ndarray, classes: np.ndarray) -> np.ndarray:
    """The probability of ``classes`` per row: a row that already is a probability vector (in
    [0, 1], summing to 1 within 1e-4: a model ending in a softmax, like xaikit's LeNet) as it is,
    any other row through a softmax; a one-score model's raw score.

    Example:
        >>> s = np.array([[0.7, 0.2, 0.1], [2.0, 0.0, 0.0]], np.float32)
        >>> [round(float(v), 4) for v in _softmax_of(s, np.array([0, 0]))]
        [0.7, 0.787]
    """
    if scores.ndim == 1:
        return scores.astype(np.float32)
    s = scores.astype(np.float64)
    z = s - s.max(axis=1, keepdims=True)
    p = np.exp(z)
    p /= p.sum(axis=1, keepdims=True)
    p = np.where(health.probability_rows(s)[:, None], s, p)
    return p[np.arange(len(p)), classes].astype(np.float32)


def model_scores(model: Any, x: np.ndarray, settings: Settings) -> np.ndarray:
    """The model's explained output for a batch, forward only: (n, classes) or (n,)."""
    opts = settings.options
    bk = get_backend(model, settings.framework)
    inp = prepare(bk, model, [x], ["x"], model_kwargs=opts.get("model_kwargs"))
    with bk.inference(model):
        return np.asarray(bk.to_numpy(logits(inp, opts.get("output", 0))))


def explain_rows(
    model: Any, x: np.ndarray, labels: np.ndarray | None, settings: Settings, seed: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(attributions, predictions, scores, deltas, map_status)`` of one batch: the predicted
    class and its probability (the model's output where it gives probabilities, else its softmax;
    the raw score for a one-score model), the attributions of the predicted class (of the label
    with ``target="label"``) and their status (:func:`xaikit.xai.health.map_status`, judged
    against the explained scores of this batch's output; reported once, by
    :func:`explain_dataset`). The batch is prepared once and its classes pinned by the one
    forward pass that also gives the table's predictions and scores."""
    method = get_method(settings.method)
    shared, own = method.split_options({k: v for k, v in settings.options.items() if k not in ENGINE_OPTIONS})
    engine = {k: settings.options[k] for k in ENGINE_OPTIONS if k in settings.options}
    output = shared.get("output", 0)
    bk = get_backend(model, settings.framework)
    inp = prepare(bk, model, [x], ["x"], model_kwargs=shared.get("model_kwargs"))
    if settings.target == "label" and labels is None:
        raise XaikitValueError('target="label" needs labels, and the dataset has none')
    with bk.inference(model):
        pinned = pin(inp, None, output)  # the predictions, and the classes explained by default
        scores = np.asarray(pinned.output)
        predicted = pinned.host_targets(bk)
        if settings.target == "label":
            pinned = Pinned(
                bk.index(check_targets(bk, labels, inp.batch, pinned.n_classes or 1), bk.model_device(model)),
                pinned.predictions, pinned.output, pinned.n_classes,
            )  # fmt: skip
        with health.deferred():  # checked below against the whole batch's scores
            result, _ = run(
                method, inp, pinned, own, seed=seed, output=output, with_delta=method.delta,
                progress=False, **engine,
            )  # fmt: skip
    if method.result == "input" and len(result.values) != 1:
        raise XaikitTypeError(
            f"method {method.name!r} gave {len(result.values)} arrays; explain_dataset stores one per sample"
        )
    attr = np.asarray(result.values[0])
    target = pinned.host_targets(bk)
    score = _softmax_of(scores, predicted)  # type: ignore[arg-type]
    deltas = (
        np.full(len(x), np.nan, np.float32) if result.delta is None else np.asarray(result.delta, np.float32)
    )
    kind, squared = health.map_kind(method.name, own.get("magnitude"), own.get("nintegration"))
    spans = np.ptp(x.reshape(len(x), -1), axis=1) if kind == "gradient" and x.dtype.kind in "biuf" else None
    status = health.map_status(
        attr, scores=health.explained_scores(scores, target), kind=kind, squared=squared, spans=spans
    )
    return attr.astype(np.float32, copy=False), predicted.astype(np.int64), score, deltas, status  # type: ignore[union-attr]


def _where(start: int, stop: int, files: list[str] | None, shard: int | None = None) -> str:
    """Where samples ``start`` .. ``stop - 1`` are, for a message: their dataset indices (and
    shard) and their files."""
    if stop - start == 1:
        where = f"dataset sample {start}" + (f" (shard {shard})" if shard is not None else "")
        return where + (f", file {files[0]!r}" if files and files[0] else "")
    where = f"dataset samples {start}..{stop - 1}" + (f" (shard {shard})" if shard is not None else "")
    if files:
        where += f", files {files[0]!r}..{files[-1]!r}"
    return where


def explain_shard(model: Any, source: Source, settings: Settings, k: int) -> ShardResult:
    """Explain shard ``k`` batch by batch; batch ``j`` of shard ``k`` is seeded with
    ``stream_seed(seed, k, j)``. Samples the source skipped (unreadable files) get NaN maps,
    prediction and label -1 and NaN score and delta, and are listed in the result."""
    t0 = time.perf_counter()
    start, stop = settings.shard_range(k)
    batches: list[tuple[np.ndarray, tuple[np.ndarray, ...] | None]] = []
    labels: list[np.ndarray] = []
    files: list[str] = []
    skipped: list[dict[str, Any]] = []
    has_labels = has_files = True
    for j, b0 in enumerate(range(start, stop, settings.batch_size)):
        b1 = min(b0 + settings.batch_size, stop)
        rows = source.get(b0, b1)
        if len(rows.x) + len(rows.skipped) != b1 - b0:
            raise XaikitValueError(f"data gave {len(rows.x)} samples for indices {b0}..{b1 - 1}")
        read = rows.read
        part = None
        if read.any():
            try:
                part = explain_rows(
                    model,
                    rows.x,
                    None if rows.labels is None else rows.labels[read],
                    settings,
                    stream_seed(settings.seed, k, j),
                )
            except (XaikitValueError, XaikitTypeError) as exc:
                # the engine's message counts samples within the batch: say where the batch is
                where = _where(b0, b1, rows.files, k)
                raise type(exc)(f"{exc}; in {where}, counting from 0 at the first") from exc
        batches.append((read, part))
        for offset, reason in sorted(rows.skipped.items()):
            name = rows.files[offset] if rows.files else ""
            skipped.append({"index": b0 + offset, "file": name, "error": reason})
        has_labels &= rows.labels is not None
        has_files &= rows.files is not None
        labels.append(rows.labels if rows.labels is not None else np.full(b1 - b0, -1, np.int64))
        files.extend(rows.files or [""] * (b1 - b0))
    attr, pred, score, delta, status = _scatter(batches, stop - start)
    label = np.concatenate(labels) if has_labels else np.full(stop - start, -1, np.int64)
    if skipped:
        label[[item["index"] - start for item in skipped]] = -1
    return ShardResult(
        k,
        start,
        stop,
        attr,
        label,
        pred,
        score,
        delta,
        files if has_files else None,
        time.perf_counter() - t0,
        skipped,
        status,
    )


def _scatter(
    batches: list[tuple[np.ndarray, tuple[np.ndarray, ...] | None]], n: int
) -> tuple[np.ndarray | None, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """A shard's ``(attributions, predictions, scores, deltas, map_status)`` from its batches'
    results on the samples read (``read`` masks): NaN maps (None when no sample was read),
    prediction -1, NaN score and delta and no status where a sample was skipped."""
    shape = next((part[0].shape[1:] for _, part in batches if part is not None), None)
    attr = None if shape is None else np.full((n, *shape), np.nan, np.float32)
    pred, score, delta = (
        np.full(n, -1, np.int64),
        np.full(n, np.nan, np.float32),
        np.full(n, np.nan, np.float32),
    )
    status = np.full(n, "", dtype=object)
    r0 = 0
    for read, part in batches:
        where = r0 + np.flatnonzero(read)
        if part is not None:
            if attr is not None:
                attr[where] = part[0]
            pred[where], score[where], delta[where], status[where] = part[1], part[2], part[3], part[4]
        r0 += len(read)
    return attr, pred, score, delta, status


def _status_column(record: dict[str, Any]) -> np.ndarray:
    """The ``map_status`` of a shard's samples from its record's sparse ``{index: status}``."""
    start, stop = int(record["start"]), int(record["stop"])
    column = np.full(stop - start, "", dtype=object)
    for index, status in (record.get("map_status") or {}).items():
        if start <= int(index) < stop:
            column[int(index) - start] = str(status)
    return column


# ---- the handle ----------------------------------------------------------------------------------
class DatasetExplanation:
    """The results of :func:`explain_dataset`, read from its store (nothing held in memory).

    Args:
        path: the store folder.

    Example:
        >>> import tempfile, numpy as np, torch, xaikit as xk
        >>> model = torch.nn.Linear(4, 2)
        >>> out = tempfile.mkdtemp() + "/x.zarr"
        >>> _ = xk.xai.explain_dataset(model, np.ones((6, 4), np.float32), method="vanilla", out=out, progress=False)
        >>> res = xk.xai.DatasetExplanation.open(out)
        >>> res.manifest["method"], res.table["prediction"].shape
        ('vanilla', (6,))
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.store = Store(path)
        self.path = str(path)
        #: the shards that the :func:`explain_dataset` call that returned this handle found
        #: committed and kept (a resumed run), and those it explained; empty for a handle of
        #: :meth:`open`
        self.resumed: list[int] = []
        self.explained: list[int] = []

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> DatasetExplanation:
        """Open an existing store (refused with a clear error when ``path`` is not one)."""
        handle = cls(path)
        handle.manifest  # noqa: B018 - raises for a folder that is not a store
        return handle

    @property
    def manifest(self) -> dict[str, Any]:
        """The store's manifest: format, model fingerprint, method, options, length, shard size,
        map shape, ..."""
        return self.store.manifest()

    @property
    def attributions(self) -> Any:
        """The (N, *map shape) float32 maps as a lazy, read-only Zarr array (NaN where a shard is
        not committed); index it to read, e.g. ``res.attributions[100:200]``."""
        return self.store.group(writable=False)["attributions"]

    @property
    def committed(self) -> list[int]:
        """The committed shards (by their completion records), in order."""
        return sorted(self.store.records())

    @property
    def complete(self) -> bool:
        """Whether every shard is committed."""
        m = self.manifest
        return len(self.committed) == -(-int(m["length"]) // int(m["shard_size"]))

    @property
    def classes(self) -> list[str] | None:
        """The class names of the run (``classes=``, or the model's own), or None."""
        names = self.manifest.get("classes")
        return None if names is None else [str(n) for n in names]

    @property
    def skipped(self) -> list[dict[str, Any]]:
        """The samples skipped as unreadable files (``skip_bad=True``), by index: ``{"index",
        "file", "error"}`` each; they are not in :attr:`table` and their maps are NaN."""
        return self.store.skipped()

    @property
    def table(self) -> Any:
        """A pandas DataFrame of the committed samples (the skipped ones left out): ``index``,
        ``label`` (-1: none), ``prediction``, ``score`` (the probability of the prediction),
        ``delta`` (completeness delta; NaN for methods without one), ``file`` ("" for none) and
        ``map_status`` ("" for a sound map, else ``"non-finite"``, ``"zero"``, ``"constant"`` or
        ``"underflow"``: see :mod:`xaikit.xai.health`); with class names (:attr:`classes`) also
        ``label_name`` ("" for no label) and ``prediction_name``."""
        import pandas as pd

        root = self.store.group(writable=False)
        parts = []
        for rec in sorted(self.store.records().values(), key=lambda r: int(r["start"])):
            sl = slice(int(rec["start"]), int(rec["stop"]))
            cols = {name: root[name][sl] for name in ("index", "label", "prediction", "score", "delta")}
            cols["file"] = np.asarray([str(f) for f in root["file"][sl]], dtype=object)
            cols["map_status"] = _status_column(rec)
            part = pd.DataFrame(cols)
            gone = [int(item["index"]) for item in rec.get("skipped") or ()]
            parts.append(part[~part["index"].isin(gone)] if gone else part)
        if not parts:
            table = pd.DataFrame(
                {
                    "index": np.zeros(0, np.int64),
                    "label": np.zeros(0, np.int64),
                    "prediction": np.zeros(0, np.int64),
                    "score": np.zeros(0, np.float32),
                    "delta": np.zeros(0, np.float32),
                    "file": np.zeros(0, object),
                    "map_status": np.zeros(0, object),
                }
            )
        else:
            table = pd.concat(parts, ignore_index=True)
        names = self.classes
        if names is not None:
            table["label_name"] = _names_of(table["label"].to_numpy(), names)
            table["prediction_name"] = _names_of(table["prediction"].to_numpy(), names)
        return table

    def write_table(self, path: str | os.PathLike[str] | None = None, table: Any = None) -> Path:
        """Write :attr:`table` (or ``table``, when the caller has read it already) as CSV,
        atomically, to ``path`` (default: ``<store>/table.csv``, where ``xaikit report`` looks):
        ``index, file, label[, label_name], prediction[, prediction_name], score, delta``, then
        any other column of the table. Returns the path."""
        frame = self.table if table is None else table
        first = ("index", "file", "label", "label_name", "prediction", "prediction_name", "score", "delta")
        order = [c for c in first if c in frame.columns] + [c for c in frame.columns if c not in first]
        dest = Path(self.path) / "table.csv" if path is None else Path(path)
        return write_text(dest, frame[order].to_csv(index=False))

    def map_status_counts(self) -> dict[str, int]:
        """How many committed samples have each degenerate map status (from the shard records,
        without reading the table); empty when every map is sound.

        Example:
            >>> import tempfile, numpy as np, torch, xaikit as xk
            >>> out = tempfile.mkdtemp() + "/x.zarr"
            >>> res = xk.xai.explain_dataset(torch.nn.Linear(4, 2), np.ones((3, 4), np.float32), method="vanilla", out=out, progress=False)
            >>> res.map_status_counts()
            {}
        """
        counts: dict[str, int] = {}
        for rec in self.store.records().values():
            for status in (rec.get("map_status") or {}).values():
                counts[str(status)] = counts.get(str(status), 0) + 1
        return counts

    def __repr__(self) -> str:
        m = self.manifest
        return (
            f"DatasetExplanation({self.path!r}: {m['method']}, {m['length']} samples, "
            f"{len(self.committed)}/{-(-int(m['length']) // int(m['shard_size']))} shards)"
        )


def _names_of(indices: np.ndarray, names: list[str]) -> np.ndarray:
    """The class name of each index ("" for -1 or an index past the names)."""
    table = np.asarray([*names, ""], dtype=object)
    return table[np.where((indices >= 0) & (indices < len(names)), indices, len(names))]


# ---- the method, its options and the class names: checked before the model is built -------------
#: ``explain``'s own keywords that a store's options may hold (the engine's settings)
ENGINE_OPTIONS = ("max_batch", "memory_budget", "xla")


def check_method_options(method: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """The options of ``method`` as ``explain_dataset`` runs them (``max_batch`` 128 unless
    given), checked without the model: the names against the method's record (an unknown one is
    refused with the list of the method's), and the values that can be told without a model
    (the record's ``check``). The model-dependent ones (a CAM's ``layer``) are checked when it
    runs.

    Raises:
        XaikitTypeError: an unknown option, an option ``explain_dataset`` sets itself, a value of
            the wrong type.
        XaikitValueError: a value out of range.
    """
    record = get_method(method)
    opts = dict(options)
    for bad in ("x", "target", "return_delta", "seed", "progress"):
        if bad in opts:
            raise XaikitTypeError(
                f"explain_dataset sets {bad!r} itself (seed=, target= are its own arguments); got {bad}="
                f"{describe(opts[bad])}"
            )
    _, own = record.split_options({k: v for k, v in opts.items() if k not in ENGINE_OPTIONS})
    if own.get("raw"):
        raise XaikitValueError(
            "raw=True (layer-resolution or region results) is not stored by explain_dataset"
        )
    opts.setdefault("max_batch", DEFAULT_MAX_BATCH)
    if opts["max_batch"] == "auto":
        raise XaikitValueError(
            "max_batch='auto' chooses chunk sizes per process, so shards run by different processes "
            "would not give the same bits; give an int (default 128)"
        )
    check_max_batch(opts["max_batch"])
    if "memory_budget" in opts:
        check_memory_budget(opts["memory_budget"])
    return opts


def read_classes(classes: Any) -> list[str] | None:
    """Class names from ``classes``: None; a list of names (index i is class i); or the path of
    a text file (one name per line) or of a JSON file (a list of names, or an object
    ``{"0": name, ...}`` with every index from 0).

    Example:
        >>> read_classes(["cat", "dog"])
        ['cat', 'dog']
    """
    if classes is None:
        return None
    if isinstance(classes, (str, os.PathLike)):
        path = os.fspath(classes)
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise XaikitValueError(
                f"classes: cannot read the class names file {path!r} ({type(exc).__name__}: {exc})"
            ) from None
        if path.lower().endswith(".json") or text.lstrip().startswith(("[", "{")):
            try:
                found = json.loads(text)
            except ValueError as exc:
                raise XaikitValueError(f"classes: {path!r} is not valid JSON ({exc})") from None
            return _names_list(found, f"the JSON in {path!r}")
        lines = text.splitlines()
        while lines and not lines[-1].strip():
            lines.pop()
        empty = [i + 1 for i, line in enumerate(lines) if not line.strip()]
        if empty or not lines:
            raise XaikitValueError(
                f"classes: {path!r} must hold one class name per line; "
                + (f"line {empty[0]} is empty" if empty else "it is empty")
            )
        return [line.strip() for line in lines]
    return _names_list(classes, "classes")


def _names_list(found: Any, what: str) -> list[str]:
    if isinstance(found, Mapping):
        try:
            by_index = {int(k): v for k, v in found.items()}
        except (TypeError, ValueError):
            by_index = {}
        if not by_index or sorted(by_index) != list(range(len(by_index))):
            raise XaikitValueError(
                f"classes: {what} must map every class index from 0 to a name; got keys {sorted(found)[:8]}"
            )
        found = [by_index[i] for i in range(len(by_index))]
    if isinstance(found, (str, bytes)) or not isinstance(found, (list, tuple)) or not found:
        raise XaikitTypeError(
            f"classes: {what} must be a non-empty list of class names; got {describe(found)}"
        )
    if not all(isinstance(n, str) and n.strip() for n in found):
        bad = next(n for n in found if not (isinstance(n, str) and n.strip()))
        raise XaikitTypeError(f"classes: {what} must hold non-empty strings; got {describe(bad)}")
    return [n.strip() for n in found]


def model_classes(model: Any, n_outputs: int | None) -> list[str] | None:
    """The class names a model carries (a Hugging Face model's ``config.id2label``), when they
    name each of its ``n_outputs`` outputs; else None."""
    id2label = getattr(getattr(model, "config", None), "id2label", None)
    if not isinstance(id2label, Mapping) or n_outputs is None:
        return None
    try:
        names = _names_list(id2label, "the model's config.id2label")
    except XaikitError:
        return None
    return names if len(names) == n_outputs else None


def _first_readable(source: Source, limit: int) -> tuple[int, Rows] | None:
    """The first sample of ``source`` that can be read, among the first ``limit``, with its index
    (a data error of the first sample stops here, before the model is built)."""
    for i in range(min(limit, len(source))):
        rows = source.get(i, i + 1)
        if len(rows.x):
            return i, rows
    return None


def _channel_hint(model: Any, source: Source, x: np.ndarray, settings: Settings) -> str | None:
    """For image files the model cannot be called on: ``"the images have 1 channel, the model
    expects 3 ..."`` when the model reads the other channel count (its first convolution says
    so, or it can be called with it), else None."""
    if not isinstance(source, ImageFilesSource) or source.transform is not None or x.ndim != 4:
        return None
    have = int(x.shape[-1])
    if have not in (1, 3):
        return None
    want = 3 if have == 1 else 1
    expects = get_backend(model, settings.framework).model_layout(model).channels
    if expects is None:
        other = np.repeat(x, 3, axis=-1) if have == 1 else x[..., :1]
        try:
            model_scores(model, other, settings)
        except XaikitError:
            return None
    elif expects != want:
        return None
    return (
        f"data: the images have {have} channel{'' if have == 1 else 's'}, the model expects {want}: "
        f"pass channels={want} to read every image as {'RGB' if want == 3 else 'grayscale'}"
    )


def _preflight(model: Any, source: Source, first: tuple[int, Rows], settings: Settings) -> int | None:
    """Call the model on the first readable sample before anything is written: an error names
    the sample and its file (and, for image files of the wrong channel count, says so); returns
    the number of the model's outputs (None for a one-score model)."""
    i, rows = first
    try:
        scores = model_scores(model, rows.x, settings)
    except (XaikitValueError, XaikitTypeError) as exc:
        hint = _channel_hint(model, source, rows.x, settings)
        where = _where(i, i + 1, [source.files[i]] if isinstance(source, ImageFilesSource) else rows.files)
        raise type(exc)(f"{hint or exc}; in {where}, the first sample read") from exc
    return int(scores.shape[1]) if scores.ndim == 2 else None


# ---- the entry point -----------------------------------------------------------------------------


def explain_dataset(
    model_or_factory: Any,
    data: Any,
    method: str = "smint",
    out: str | os.PathLike[str] = "runs/x.zarr",
    batch_size: int = 64,
    engine: str = "local",
    workers: int | None = None,
    resume: bool = True,
    *,
    seed: int = 0,
    shard_size: int | None = None,
    target: str | None = None,
    framework: str | None = None,
    x_key: str = "x",
    label_key: str | None = None,
    labels: Any = None,
    transform: Callable[[str], Any] | None = None,
    resize: tuple[int, int] | None = None,
    channels: int | None = None,
    skip_bad: bool = False,
    classes: Any = None,
    progress: bool | None = None,
    address: str | None = None,
    num_gpus: float | None = None,
    **method_options: Any,
) -> DatasetExplanation:
    """Explain every sample of a dataset into a resumable, sharded Zarr store.

    Args:
        model_or_factory: a torch or Keras model; a function of no arguments that builds one;
            ``"package.module:factory"``; or a model file (``.keras``, TorchScript ``.pt``).
        data: a numpy array (N, ...), a :class:`~xaikit.dataset.NumpyDataset` (input column
            ``x_key``), a torch ``Dataset`` or ``DataLoader`` (read by index from its dataset; a
            sample is an array, an ``(x, y)`` tuple or a dict), a ``tf.data.Dataset`` of single
            samples with a known cardinality, or a folder or glob of PNG/JPEG files (sorted; read
            as float32 RGB in [0, 1], grayscale files as one channel, or with ``transform``).
        method: any method of :func:`xaikit.xai.explain` by name.
        out: the store folder (a local or shared file system path).
        batch_size: samples per :func:`~xaikit.xai.explain` call.
        engine: ``"local"`` (this process) or ``"ray"`` (Ray workers, see :mod:`xaikit.xai._ray`).
        workers: Ray workers (default: the CPUs Ray sees, or its GPUs); ignored by ``"local"``.
        resume: keep the shards an earlier run of the same settings committed (False: start over).
        seed: the run's seed; shard ``k``'s batch ``j`` runs with a seed derived from ``(seed, k, j)``.
        shard_size: samples per shard, the unit of commit and of work (default 4 batches).
        target: None (explain each sample's predicted class) or ``"label"`` (its label).
        framework: ``"torch"`` or ``"tf"`` for a model that is a plain function.
        x_key: the input key of dict samples and NumpyDataset columns.
        label_key: the label key (default: the first of ``y``, ``label``, ``labels``, ``target``).
        labels: labels of a numpy array ``data``.
        transform: for image files: a function of the path that returns the sample's array.
        resize: for image files: ``(H, W)``, every image resized (bilinear) as it is read.
        channels: for image files: 3 reads every image as RGB, 1 as grayscale (default: each
            file's own; files of another channel count than the first are refused).
        skip_bad: for image files: skip files that cannot be decoded (truncated, corrupt, not
            an image) instead of stopping: their maps are NaN, they are left out of the table
            and listed in :attr:`DatasetExplanation.skipped` and ``<out>/skipped.json``.
        classes: class names: a list (index i names class i), or the path of a text file (one
            name per line) or a JSON file (a list, or ``{"0": name, ...}``); default: the model's
            own (a Hugging Face model's ``config.id2label``), if any. The table then has
            ``label_name`` and ``prediction_name``.
        progress: show progress (None: a tqdm bar on a terminal, plain lines otherwise).
        address: the Ray cluster to join (``"auto"`` or ``"ray://host:port"``); None starts a local one.
        num_gpus: GPUs per Ray worker (default 1 when the cluster has GPUs, else 0).
        **method_options: options of the method, passed to :func:`~xaikit.xai.explain` (and its
            ``max_batch``, default 128 here: a fixed chunk size keeps shards bit-equal across
            processes).

    Returns:
        A :class:`DatasetExplanation` of the store.

    Raises:
        XaikitValueError: a bad argument, or a store written with other settings (the message
            names what differs; a store whose earlier run committed no shard is started over).
            Arguments, the method's options and the first sample are checked, and the model
            called on that sample, before anything is written.
        StoreLockedError: another run is writing the store.

    Example:
        >>> import tempfile, numpy as np, torch, xaikit as xk
        >>> model = torch.nn.Linear(4, 2)
        >>> x = np.random.default_rng(0).random((5, 4), dtype=np.float32)
        >>> res = xk.xai.explain_dataset(model, x, method="vanilla", out=tempfile.mkdtemp() + "/x.zarr", progress=False)
        >>> bool(np.allclose(res.attributions[:], model.weight.detach().numpy()[res.table["prediction"]]))
        True
    """
    name = get_method(method).name
    batch_size = check_int(batch_size, "batch_size", 1)
    seed = check_int(seed, "seed", 0, kind=XaikitTypeError)
    shard_size = 4 * batch_size if shard_size is None else check_int(shard_size, "shard_size", 1)
    if engine not in ENGINES:
        raise XaikitValueError(f"engine must be one of {ENGINES}; got {describe(engine)}")
    if workers is not None:
        workers = check_int(workers, "workers", 1)
    if not isinstance(resume, bool):
        raise XaikitTypeError(f"resume must be True or False; got {describe(resume)}")
    if target not in (None, "label"):
        raise XaikitValueError(
            f"target must be None (the predicted class) or 'label'; got {describe(target)}"
        )
    if not isinstance(out, (str, os.PathLike)) or "://" in os.fspath(out):
        raise XaikitValueError(
            "out must be a folder on a local or shared file system (the store commits shards with "
            f"atomic renames, which object stores lack); got {describe(out)}"
        )
    opts = check_method_options(name, method_options)
    names = read_classes(classes)
    source = as_source(
        data,
        x_key=x_key,
        label_key=label_key,
        transform=transform,
        labels=labels,
        resize=resize,
        channels=channels,
        skip_bad=skip_bad,
    )
    n = len(source)
    if n == 0:
        raise XaikitValueError("data must hold at least one sample; got an empty dataset")
    first = _first_readable(source, batch_size)
    if target == "label" and first is not None and first[1].labels is None:
        raise XaikitValueError('target="label" needs labels, and the dataset has none')
    spec = ModelSpec.of(model_or_factory, framework)
    model = spec.build()
    settings = Settings(
        name, opts, n, batch_size, shard_size, seed, target, framework, data=source.settings()
    )
    n_outputs = None if first is None else _preflight(model, source, first, settings)
    if names is None:
        names = model_classes(model, n_outputs)
    elif n_outputs is not None and len(names) != n_outputs:
        raise XaikitValueError(
            f"classes: {len(names)} class names for a model with {n_outputs} outputs; give one name per output"
        )
    settings.fingerprint = spec.fingerprint(model)
    store = Store(os.path.abspath(out))  # absolute: Ray workers run in other working directories
    with store.lock():
        store.prepare({**settings.manifest(spec), "classes": names}, resume)
        store.update_manifest({"classes": names})
        done = store.committed(settings.n_shards, settings.shard_range)
        todo = [k for k in range(settings.n_shards) if k not in done]
        rows_done = sum(settings.shard_range(k)[1] - settings.shard_range(k)[0] for k in done)
        bar = Progress(n, rows_done, progress)
        if done:
            bar.say(
                f"explain_dataset: resuming {str(store.path)!r}: {len(done)} of {settings.n_shards} shards "
                f"({rows_done} of {n} rows) already committed, kept; "
                + (f"{len(todo)} to do" if todo else "nothing to do")
            )
        try:
            if engine == "ray":
                from xaikit.xai._ray import run_ray

                run_ray(spec, source, settings, store, todo, bar, workers, address, num_gpus)
            else:
                _run_local(model, source, settings, store, todo, bar)
        finally:
            bar.close()
        store.write_skipped()
    handle = DatasetExplanation(out)
    handle.resumed, handle.explained = sorted(done), todo
    _warn_degenerate(handle, name, settings.fingerprint, n)
    return handle


def _warn_degenerate(handle: DatasetExplanation, method: str, fingerprint: str, n: int) -> None:
    """One warning for the run's degenerate maps (all committed shards, counted from their
    records), once per (model weights, method, status) in this process."""
    counts = handle.map_status_counts()
    if not counts:
        return
    status = np.full(n, "", dtype=object)
    filled = 0
    for key, count in counts.items():
        status[filled : filled + count] = key
        filled += count
    health.warn_degenerate(
        status.astype(str), method=method, model=fingerprint,
        where=" in explain_dataset (per sample: DatasetExplanation.table['map_status'])",
    )  # fmt: skip


def _run_local(
    model: Any, source: Source, settings: Settings, store: Store, todo: list[int], bar: Progress
) -> None:
    shaped = store.manifest().get("map_shape") is not None
    worker = f"local:{socket.gethostname()}:{os.getpid()}"
    for k in todo:
        result = explain_shard(model, source, settings, k)
        if not shaped and result.attributions is not None:
            store.ensure_attributions(result.attributions.shape[1:])
            shaped = True
        store.write_shard(result, worker)
        bar.update(result.stop - result.start)
