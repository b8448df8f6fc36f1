"""One shard of ``explain_dataset``, the unit of work and of commit: what a worker (this process
or a Ray actor) runs. :class:`Settings` holds everything a worker needs (picklable);
:func:`explain_shard` explains a shard batch by batch, :func:`explain_rows` one batch: prepared
once, its classes pinned by the forward pass that also gives the table's predictions and
scores, the method run through the front door's :func:`~xaikit.xai.explain.run`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from xaikit.backend import get_backend
from xaikit.errors import XaikitTypeError, XaikitValueError
from xaikit.targets import Class
from xaikit.xai import health
from xaikit.xai._engine.inputs import prepare
from xaikit.xai._engine.seeds import stream_seed
from xaikit.xai._engine.targets import Pinned, check_targets, logits, pin
from xaikit.xai.dataset._sources import Source
from xaikit.xai.dataset._store import FORMAT, ShardResult, jsonable
from xaikit.xai.dataset.options import ENGINE_OPTIONS
from xaikit.xai.dataset.spec import ModelSpec
from xaikit.xai.dataset.targets import batch_target, batch_values, per_sample_fields
from xaikit.xai.explain import run
from xaikit.xai.registry import get_method


@dataclass
class Settings:
    """What a worker needs to explain a shard (everything in it is picklable)."""

    method: str
    options: dict[str, Any]
    length: int
    batch_size: int
    shard_size: int
    seed: int
    #: None, "label", or a target object's description (:mod:`xaikit.xai.dataset.targets`)
    target: str | dict[str, Any] | None
    framework: str | None
    fingerprint: str = ""
    #: how the data source reads samples where it changes their values (resize, channels)
    data: dict[str, Any] | None = None
    #: the values of the target's per-sample fields given as arrays: ``{field: (N, ...)}``
    target_arrays: dict[str, np.ndarray] | None = None

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


def batch_object(settings: Settings, values: dict[str, np.ndarray] | None = None) -> Any:
    """The target of a batch: None, ``"label"`` or the run's target object with the batch's
    per-sample ``values`` (``{field: (n, ...)}``, :func:`~xaikit.xai.dataset.targets.batch_values`)."""
    if not isinstance(settings.target, dict):
        return settings.target
    return batch_target(settings.target, values or {})


def _scored_object(target: Any) -> Any:
    """The batch's target object when it is scored as one (not ``Class(k)``, a class), else None."""
    return None if target is None or isinstance(target, (str, Class)) else target


def model_scores(model: Any, x: np.ndarray, settings: Settings, target: Any = None) -> np.ndarray:
    """The model's explained output for a batch, forward only: (n, classes) or (n,); with a
    target object (``target``, the batch's: :func:`batch_object`), its (n,) clean scores (the
    object checked against the model's output)."""
    opts = settings.options
    bk = get_backend(model, settings.framework)
    inp = prepare(bk, model, [x], ["x"], model_kwargs=opts.get("model_kwargs"))
    with bk.inference(model):
        if (obj := _scored_object(target)) is not None:
            return np.asarray(pin(inp, obj, opts.get("output", 0), objects=True).output)
        return np.asarray(bk.to_numpy(logits(inp, opts.get("output", 0))))


def explain_rows(
    model: Any, x: np.ndarray, labels: np.ndarray | None, settings: Settings, seed: int, target: Any = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(attributions, predictions, scores, deltas, map_status)`` of one batch: the predicted
    class and its probability (the model's output where it gives probabilities, else its softmax;
    the raw score for a one-score model), the attributions of the predicted class (of the label
    with ``target="label"``) and their status (:func:`xaikit.xai.health.map_status`, judged
    against the explained scores of this batch's output; reported once, by
    :func:`explain_dataset`). The batch is prepared once and its classes pinned by the one
    forward pass that also gives the table's predictions and scores. ``target``: the batch's
    target (:func:`batch_object`; None for the predicted class)."""
    method = get_method(settings.method)
    shared, own = method.split_options({k: v for k, v in settings.options.items() if k not in ENGINE_OPTIONS})
    engine = {k: settings.options[k] for k in ENGINE_OPTIONS if k in settings.options}
    output = shared.get("output", 0)
    bk = get_backend(model, settings.framework)
    inp = prepare(bk, model, [x], ["x"], model_kwargs=shared.get("model_kwargs"))
    if settings.target == "label" and labels is None:
        raise XaikitValueError('target="label" needs labels, and the dataset has none')
    with bk.inference(model):
        if (obj := _scored_object(target)) is not None:  # its clean scores, no class
            pinned = pin(inp, obj, output, objects=True)
            scores = np.asarray(pinned.output)
            predicted: np.ndarray | None = np.full(inp.batch, -1, np.int64)
        else:
            pinned = pin(inp, None, output)  # the predictions, and the classes explained by default
            scores = np.asarray(pinned.output)
            predicted = pinned.host_targets(bk)
        given = labels if settings.target == "label" else target
        if isinstance(given, Class) or settings.target == "label":  # Class(k): the class k
            pinned = Pinned(
                bk.index(check_targets(bk, given, inp.batch, pinned.n_classes or 1), bk.model_device(model)),
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
    score = scores.astype(np.float32) if pinned.spec is not None else _softmax_of(scores, predicted)  # type: ignore[arg-type]
    deltas = (
        np.full(len(x), np.nan, np.float32) if result.delta is None else np.asarray(result.delta, np.float32)
    )
    kind, squared = health.map_kind(method.name, own.get("magnitude"), own.get("nintegration"))
    spans = np.ptp(x.reshape(len(x), -1), axis=1) if kind == "gradient" and x.dtype.kind in "biuf" else None
    status = health.map_status(
        attr, scores=health.explained_scores(scores, target), kind=kind, squared=squared, spans=spans
    )
    return attr.astype(np.float32, copy=False), predicted.astype(np.int64), score, deltas, status  # type: ignore[union-attr]


def where_samples(start: int, stop: int, files: list[str] | None, shard: int | None = None) -> str:
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
    fields = per_sample_fields(settings.target)
    targets: dict[str, list[np.ndarray]] = {name: [] for name in fields}
    skipped: list[dict[str, Any]] = []
    has_labels = has_files = True
    for j, b0 in enumerate(range(start, stop, settings.batch_size)):
        b1 = min(b0 + settings.batch_size, stop)
        rows = source.get(b0, b1)
        if len(rows.x) + len(rows.skipped) != b1 - b0:
            raise XaikitValueError(f"data gave {len(rows.x)} samples for indices {b0}..{b1 - 1}")
        read = rows.read
        part = None
        try:
            values = (
                batch_values(settings.target, settings.target_arrays, rows.fields, b0, b1)  # type: ignore[arg-type]
                if fields
                else {}
            )
        except XaikitValueError as exc:
            raise XaikitValueError(f"{exc}; in {where_samples(b0, b1, rows.files, k)}") from exc
        for name, vals in values.items():
            targets[name].append(vals)
        if read.any():
            try:
                part = explain_rows(
                    model,
                    rows.x,
                    None if rows.labels is None else rows.labels[read],
                    settings,
                    stream_seed(settings.seed, k, j),
                    batch_object(settings, {name: vals[read] for name, vals in values.items()}),
                )
            except (XaikitValueError, XaikitTypeError) as exc:
                # the engine's message counts samples within the batch: say where the batch is
                where = where_samples(b0, b1, rows.files, k)
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
        {name: np.concatenate(parts) for name, parts in targets.items()},
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
