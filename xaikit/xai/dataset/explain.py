"""The entry point of dataset explanations: :func:`explain_dataset` streams attributions into a
resumable, sharded Zarr store (:class:`~xaikit.xai.dataset.results.DatasetExplanation` reads
them back).

The dataset is cut into shards (contiguous ranges of ``shard_size`` samples); each shard is
explained batch by batch (:mod:`xaikit.xai.dataset._shard`) under a seed derived from
``(seed, shard, batch)``, written to the store and committed by one atomic write of its
completion record (see :mod:`xaikit.xai.dataset._store`). A crashed run resumes where it
stopped, and a shard's values are the same bits whether it ran alone, in a resumed run or on
another worker. Arguments, the method's options and the first sample are checked, and the model
called on that sample, before anything is written; the shards then run here (``engine="local"``)
or on Ray workers (:mod:`xaikit.xai.dataset._ray`).

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

import os
import socket
from collections.abc import Callable
from typing import Any

import numpy as np

from xaikit.backend import get_backend
from xaikit.checks import check_choice, check_int
from xaikit.errors import XaikitError, XaikitTypeError, XaikitValueError, describe
from xaikit.targets import Class, is_target
from xaikit.xai import health
from xaikit.xai._engine.progress import Progress
from xaikit.xai._engine.targets import check_class_range, refused
from xaikit.xai.dataset._shard import Settings, batch_object, explain_shard, model_scores, where_samples
from xaikit.xai.dataset._sources import ImageFilesSource, Rows, Source, as_source
from xaikit.xai.dataset._store import Store
from xaikit.xai.dataset.options import check_features, check_method_options, model_classes, read_classes
from xaikit.xai.dataset.results import DatasetExplanation
from xaikit.xai.dataset.spec import ModelSpec
from xaikit.xai.dataset.targets import batch_values, complete_keys, describe_target, per_sample_fields
from xaikit.xai.registry import get_method

__all__ = ["explain_dataset"]


#: the engines of explain_dataset
ENGINES = ("local", "ray")


def _first_readable(source: Source, limit: int) -> tuple[int, Rows] | None:
    """The first sample of ``source`` that can be read, among the first ``limit``, with its index
    (a data error of the first sample stops here, before the model is built)."""
    for i in range(min(limit, len(source))):
        rows = source.get(i, i + 1)
        if len(rows.x):
            return i, rows
    return None


def _first_target(first: tuple[int, Rows], settings: Settings) -> Any:
    """The target of the first sample read (its per-sample values from the given arrays or
    its dataset keys)."""
    if not per_sample_fields(settings.target):
        return batch_object(settings)
    i, rows = first
    values = batch_values(settings.target, settings.target_arrays, rows.fields, i, i + 1)  # type: ignore[arg-type]
    return batch_object(settings, values)


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
            model_scores(model, other, settings, _first_target((0, Rows(other)), settings))
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
        target = _first_target(first, settings)
        scores = model_scores(model, rows.x, settings, target)
        if isinstance(target, Class) and scores.ndim == 2:  # its class range, before the store
            check_class_range(np.asarray(target.k, dtype=np.int64).reshape(-1), int(scores.shape[1]))
    except (XaikitValueError, XaikitTypeError) as exc:
        hint = _channel_hint(model, source, rows.x, settings)
        where = where_samples(
            i, i + 1, [source.files[i]] if isinstance(source, ImageFilesSource) else rows.files
        )
        raise type(exc)(f"{hint or exc}; in {where}, the first sample read{_given(settings)}") from exc
    return int(scores.shape[1]) if scores.ndim == 2 else None


def _given(settings: Settings) -> str:
    """What the target's per-sample fields were given as, for an error met on one sample's
    values (whose message shows that sample's slice): ``"; the target's per-sample values:
    mask=ndarray of shape (40, 8, 8) and dtype float64 (one per sample)"``, or ``""``."""
    parts = []
    for name, entry in per_sample_fields(settings.target).items():
        if entry["per_sample"] == "array" and settings.target_arrays and name in settings.target_arrays:
            parts.append(f"{name}={describe(settings.target_arrays[name])} (one per sample)")
        elif entry["per_sample"] == "key":
            parts.append(f"{name}=the dataset key {entry['key']!r}")
    return f"; the target's per-sample values: {', '.join(parts)}" if parts else ""


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
    target: Any = None,
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
        engine: ``"local"`` (this process) or ``"ray"`` (Ray workers, see :mod:`xaikit.xai.dataset._ray`).
        workers: Ray workers (default: the CPUs Ray sees, or its GPUs); ignored by ``"local"``.
        resume: keep the shards an earlier run of the same settings committed (False: start over).
        seed: the run's seed; shard ``k``'s batch ``j`` runs with a seed derived from ``(seed, k, j)``.
        shard_size: samples per shard, the unit of commit and of work (default 4 batches).
        target: None (explain each sample's predicted class), ``"label"`` (its label), a class
            number for every sample (stored as ``Class(k)``), or a
            target object of :mod:`xaikit.targets` (``Class(k)``, ``ClassRegion(k, mask)``,
            ``Output(i)``, ``Similarity(reference)``, ``Box(box, k)``) whose fields are one
            value for every sample, one per dataset sample (``mask`` (N, H, W), ``box`` (N, 4),
            ``k`` (N,)) or the name of a dataset key read with each batch
            (``Box(box="box", k="label")``): the store records it and the per-sample values
            (``DatasetExplanation.target`` / ``targets_of(indices)``), the table's ``score`` is
            then its clean score and ``prediction`` -1. A callable and stacked boxes are
            refused (see :mod:`xaikit.xai.dataset.targets`).
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
            processes). ``raw=True`` is refused (the store holds maps); a model-agnostic
            method's ``features=`` is a name or one sample's feature ids ((H, W) or (F,)), which
            every sample gets (a per-sample array is refused: the batches would not follow it).

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
    check_choice(engine, "engine", ENGINES)
    if workers is not None:
        workers = check_int(workers, "workers", 1)
    if not isinstance(resume, bool):
        raise XaikitTypeError(f"resume must be True or False; got {describe(resume)}")
    if isinstance(target, (int, np.integer)) and not isinstance(target, (bool, np.bool_)):
        target = Class(int(target))  # one class for every sample, as explain takes it
    stored: Any = target
    if is_target(target):  # described once the dataset's length is known
        if not isinstance(target, Class) and not get_method(name).target_objects:
            raise refused(target)
    elif target not in (None, "label"):
        raise XaikitValueError(
            "target must be None (the predicted class), 'label', one class number for every sample "
            f"or a target object of xk.targets (e.g. Class(k), ClassRegion(k)); got {describe(target)}"
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
    arrays: dict[str, np.ndarray] = {}
    if is_target(target):  # refused (naming target) unless each field is fixed, per sample or a key
        stored, arrays = describe_target(target, n)
        keys = {e["key"]: f for f, e in per_sample_fields(stored).items() if e["per_sample"] == "key"}
        if keys:
            source.read_keys(tuple(keys), f"target={type(target).__name__}({next(iter(keys.values()))}=...)")
    first = _first_readable(source, batch_size)
    if first is not None and isinstance(stored, dict):
        stored = complete_keys(stored, first[1].fields)
    if first is not None:
        check_features(name, opts, tuple(int(d) for d in first[1].x.shape[1:]))
    if target == "label" and first is not None and first[1].labels is None:
        raise XaikitValueError('target="label" needs labels, and the dataset has none')
    spec = ModelSpec.of(model_or_factory, framework)
    model = spec.build()
    settings = Settings(
        name, opts, n, batch_size, shard_size, seed, stored, framework, data=source.settings(),
        target_arrays=arrays or None,
    )  # fmt: skip
    n_outputs = None if first is None else _preflight(model, source, first, settings)
    if names is None:
        names = model_classes(model, n_outputs)
    elif n_outputs is not None and len(names) != n_outputs:
        raise XaikitValueError(
            f"classes: {len(names)} class names for a model with {n_outputs} outputs; give one name per output"
        )
    settings.fingerprint = spec.fingerprint(model)
    store = Store(os.path.abspath(out))  # absolute: Ray workers run in other working directories
    with store.writing(), store.lock():
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
                from xaikit.xai.dataset._ray import run_ray

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
