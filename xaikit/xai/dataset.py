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
import os
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
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
from xaikit.errors import XaikitTypeError, XaikitValueError, describe
from xaikit.xai import health
from xaikit.xai._engine import stream_seed
from xaikit.xai._sources import Source, as_source
from xaikit.xai._store import FORMAT, ShardResult, Store, StoreLockedError, jsonable
from xaikit.xai.methods import COMPLETE_METHODS, logits, predictions_of, prepare
from xaikit.xai.names import canonical, family

__all__ = ["DatasetExplanation", "ModelSpec", "StoreLockedError", "explain_dataset"]

#: methods whose results come with a completeness delta (NaN for the others)
DELTA_METHODS = (*COMPLETE_METHODS, "guided_ig")
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


def explain_rows(
    model: Any, x: np.ndarray, labels: np.ndarray | None, settings: Settings, seed: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(attributions, predictions, scores, deltas, map_status)`` of one batch: the predicted
    class and its probability (the model's output where it gives probabilities, else its softmax;
    the raw score for a one-score model), the attributions of the predicted class (of the label
    with ``target="label"``) and their status (:func:`xaikit.xai.health.map_status`, judged
    against the explained scores of this batch's output; reported once, by
    :func:`explain_dataset`)."""
    from xaikit.xai.saliency import explain

    opts = dict(settings.options)
    bk = get_backend(model, settings.framework)
    inp = prepare(bk, model, [x], ["x"], model_kwargs=opts.get("model_kwargs"))
    output = opts.get("output", 0)
    with bk.inference(model):
        scores = bk.to_numpy(logits(inp, output))
    del inp
    pred = predictions_of(scores)
    predicted = pred if scores.ndim == 2 else np.zeros(len(x), dtype=np.int64)
    score = _softmax_of(scores, predicted)
    if settings.target == "label":
        if labels is None:
            raise XaikitValueError('target="label" needs labels, and the dataset has none')
        target = labels
    else:
        target = predicted
    with_delta = settings.method in DELTA_METHODS
    with health.deferred():  # checked below against the whole batch's scores
        result = explain(
            model, x, target=target, method=settings.method, seed=seed, return_delta=with_delta, **opts
        )
    attr, delta = result if with_delta else (result, None)
    if not isinstance(attr, np.ndarray):
        raise XaikitTypeError(
            f"method {settings.method!r} gave {describe(attr)}; explain_dataset stores arrays"
        )
    deltas = np.full(len(x), np.nan, np.float32) if delta is None else np.asarray(delta, np.float32)
    kind, squared = health.map_kind(settings.method, opts.get("magnitude"), opts.get("nintegration"))
    spans = np.ptp(x.reshape(len(x), -1), axis=1) if kind == "gradient" and x.dtype.kind in "biuf" else None
    status = health.map_status(
        attr, scores=health.explained_scores(scores, target), kind=kind, squared=squared, spans=spans
    )
    return attr.astype(np.float32, copy=False), predicted.astype(np.int64), score, deltas, status


def explain_shard(model: Any, source: Source, settings: Settings, k: int) -> ShardResult:
    """Explain shard ``k`` batch by batch; batch ``j`` of shard ``k`` is seeded with
    ``stream_seed(seed, k, j)``."""
    t0 = time.perf_counter()
    start, stop = settings.shard_range(k)
    parts: list[tuple[np.ndarray, ...]] = []
    labels: list[np.ndarray] = []
    files: list[str] = []
    has_labels = has_files = True
    for j, b0 in enumerate(range(start, stop, settings.batch_size)):
        b1 = min(b0 + settings.batch_size, stop)
        rows = source.get(b0, b1)
        if len(rows.x) != b1 - b0:
            raise XaikitValueError(f"data gave {len(rows.x)} samples for indices {b0}..{b1 - 1}")
        try:
            parts.append(explain_rows(model, rows.x, rows.labels, settings, stream_seed(settings.seed, k, j)))
        except (XaikitValueError, XaikitTypeError) as exc:
            # the engine's message counts samples within the batch: say where the batch is
            where = f"dataset samples {b0}..{b1 - 1} (shard {k})"
            if rows.files:
                where += f", files {rows.files[0]!r}..{rows.files[-1]!r}"
            raise type(exc)(f"{exc}; in {where}, counting from 0 at the first") from exc
        has_labels &= rows.labels is not None
        has_files &= rows.files is not None
        labels.append(rows.labels if rows.labels is not None else np.full(b1 - b0, -1, np.int64))
        files.extend(rows.files or [""] * (b1 - b0))
    attr, pred, score, delta, status = (np.concatenate([p[i] for p in parts]) for i in range(5))
    return ShardResult(
        k,
        start,
        stop,
        attr,
        np.concatenate(labels) if has_labels else np.full(stop - start, -1, np.int64),
        pred,
        score,
        delta,
        files if has_files else None,
        time.perf_counter() - t0,
        status,
    )


# ---- progress ------------------------------------------------------------------------------------
class Progress:
    """Rows done, rows/s and an ETA: a tqdm bar on a terminal, else a plain line every
    ``every`` seconds (and at the end) on stderr; nothing when ``enabled`` is False."""

    def __init__(self, total: int, done: int, enabled: bool | None, every: float = 10.0) -> None:
        self.total, self.done, self.first = total, done, done
        self.enabled = True if enabled is None else bool(enabled)
        self.t0 = self.last = time.perf_counter()
        self.every = every
        self.bar = None
        if self.enabled and sys.stderr.isatty():
            from tqdm import tqdm

            self.bar = tqdm(total=total, initial=done, unit="rows", desc="explain_dataset", file=sys.stderr)

    def update(self, rows: int) -> None:
        self.done += rows
        if self.bar is not None:
            self.bar.update(rows)
            return
        now = time.perf_counter()
        if self.enabled and (now - self.last >= self.every or self.done >= self.total):
            self.last = now
            rate = (self.done - self.first) / max(now - self.t0, 1e-9)
            eta = (self.total - self.done) / rate if rate > 0 else float("inf")
            sys.stderr.write(
                f"explain_dataset: {self.done}/{self.total} rows ({100 * self.done / max(self.total, 1):.0f}%), "
                f"{rate:.1f} rows/s, ETA {eta:.0f} s\n"
            )
            sys.stderr.flush()

    def say(self, line: str) -> None:
        """One line on stderr (through the bar on a terminal); nothing when not enabled."""
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.write(line, file=sys.stderr)
            return
        sys.stderr.write(line + "\n")
        sys.stderr.flush()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


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
    def table(self) -> Any:
        """A pandas DataFrame of the committed samples: ``index``, ``label`` (-1: none),
        ``prediction``, ``score`` (the probability of the prediction), ``delta``
        (completeness delta; NaN for methods without one), ``file`` ("" for none) and
        ``map_status`` ("" for a sound map, else ``"non-finite"``, ``"zero"``, ``"constant"`` or
        ``"underflow"``: see :mod:`xaikit.xai.health`)."""
        import pandas as pd

        root = self.store.group(writable=False)
        parts = []
        for rec in sorted(self.store.records().values(), key=lambda r: int(r["start"])):
            sl = slice(int(rec["start"]), int(rec["stop"]))
            cols = {name: root[name][sl] for name in ("index", "label", "prediction", "score", "delta")}
            cols["file"] = np.asarray([str(f) for f in root["file"][sl]], dtype=object)
            cols["map_status"] = _status_column(rec)
            parts.append(pd.DataFrame(cols))
        if not parts:
            return pd.DataFrame(
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
        return pd.concat(parts, ignore_index=True)

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


# ---- the entry point -----------------------------------------------------------------------------
def _check_method_options(options: dict[str, Any]) -> dict[str, Any]:
    opts = dict(options)
    for bad in ("x", "target", "return_delta", "seed"):
        if bad in opts:
            raise XaikitTypeError(
                f"explain_dataset sets {bad!r} itself (seed=, target= are its own arguments); got {bad}="
                f"{describe(opts[bad])}"
            )
    if opts.get("raw"):
        raise XaikitValueError("raw=True (CAM's layer-resolution maps) is not stored by explain_dataset")
    opts.setdefault("max_batch", DEFAULT_MAX_BATCH)
    if opts["max_batch"] == "auto":
        raise XaikitValueError(
            "max_batch='auto' chooses chunk sizes per process, so shards run by different processes "
            "would not give the same bits; give an int (default 128)"
        )
    return opts


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
            as float32 RGB in [0, 1], or with ``transform``).
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
            names what differs).
        StoreLockedError: another run is writing the store.

    Example:
        >>> import tempfile, numpy as np, torch, xaikit as xk
        >>> model = torch.nn.Linear(4, 2)
        >>> x = np.random.default_rng(0).random((5, 4), dtype=np.float32)
        >>> res = xk.xai.explain_dataset(model, x, method="vanilla", out=tempfile.mkdtemp() + "/x.zarr", progress=False)
        >>> bool(np.allclose(res.attributions[:], model.weight.detach().numpy()[res.table["prediction"]]))
        True
    """
    name = canonical(method)
    family(name)
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
    opts = _check_method_options(method_options)
    source = as_source(data, x_key=x_key, label_key=label_key, transform=transform, labels=labels)
    n = len(source)
    if n == 0:
        raise XaikitValueError("data must hold at least one sample; got an empty dataset")
    spec = ModelSpec.of(model_or_factory, framework)
    model = spec.build()
    settings = Settings(name, opts, n, batch_size, shard_size, seed, target, framework)
    settings.fingerprint = spec.fingerprint(model)
    store = Store(os.path.abspath(out))  # absolute: Ray workers run in other working directories
    with store.lock():
        store.prepare(settings.manifest(spec), resume)
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
        if not shaped:
            store.ensure_attributions(result.attributions.shape[1:])
            shaped = True
        store.write_shard(result, worker)
        bar.update(result.stop - result.start)
