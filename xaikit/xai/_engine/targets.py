"""The classes explained, one owner of that decision: :func:`pin` fixes the class of each sample
once (its predicted class on the clean input, from one forward pass, :func:`logits`; or the
classes given, :func:`check_targets`) before a method runs its noisy or interpolated rows. A
method that reads the class off its own pass (a gradient CAM, ``targets="in_pass"``) is not
pinned when no classes are given; classes given to it are checked against the class count of
the first pass it makes anyway (its layer probe, :func:`check_given`), not in a pass of their own.

A target object (:mod:`xaikit.targets`) is pinned the same way, by a method whose record takes
them (``Method.target_objects``): :func:`pin_object` resolves it against the model's output for
the clean batch (a region's predicted mask is fixed there) and binds its per-sample arrays to
the device; the engine then carries each row's *sample index* where it carries classes (the
same slicing, repeating and padding), and the backends score rows through the bound target.
:class:`~xaikit.targets.Class` is class indices. Everywhere else (metrics, CAMs, ...) another
target object is refused by :func:`check_targets` with a message naming ``target``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from xaikit.backend import Backend, Rows, T
from xaikit.backend.outputs import select_output
from xaikit.errors import XaikitError, XaikitTypeError, XaikitValueError, describe
from xaikit.targets import Bound, Class, Target, is_target, picked, resolve_callable
from xaikit.xai._engine.chunks import run_chunks
from xaikit.xai._engine.inputs import Inputs, call_error


def logits(inp: Inputs, output: int | str, chunk: int = 1024) -> T:
    """The explained model output for the clean inputs, forward only: (B, classes), or (B,) for a
    model that returns one score per row, ``chunk`` rows at a time (:meth:`~xaikit.backend.base.Backend.logits`: a
    compiled step where the same batch shape comes back, e.g. a trace's call every epoch). An
    out-of-memory error halves ``chunk`` and goes on (:func:`~xaikit.xai._engine.chunks.run_chunks`);
    a model that fails otherwise gets :func:`~xaikit.xai._engine.inputs.call_error`."""
    bk = inp.bk

    def step(r0: int, r1: int, _size: int) -> T:
        rows = [t[r0:r1] for t in inp.tensors]
        kw = inp.kwargs.rows(np.arange(r0, r1)) if inp.kwargs else None
        return bk.logits(Rows(inp.model, rows, None, output, kw))

    def error(exc: Exception, _r0: int, _r1: int, _size: int) -> Exception:
        return call_error(inp, exc)

    done = run_chunks(bk, bk.model_device(inp.model), inp.batch, chunk, step, error=error)
    return bk.cat(done.results)


@dataclass
class Pinned:
    """The classes explained, as :func:`pin` fixed them.

    Attributes:
        targets: int64 (B,) classes on the model's device, or None (a method that reads each
            row's predicted class off its own pass, called without classes).
        predictions: the model's predictions for the clean inputs (see :func:`predictions_of`),
            when the whole batch was run; None otherwise.
        output: the explained model output as read, on the host: (B, classes) or (B,) of the
            whole batch, or of its first row when given classes were checked on one row; None
            when nothing was run (what :mod:`xaikit.xai.health` judges maps against).
        n_classes: the output's class count (1 for a (B,) output), when it was read.
        spec: the bound target object (:class:`xaikit.targets.Bound`) when one was given;
            ``targets`` then holds each sample's index and ``output`` its (B,) clean scores.
        unchecked: given classes, int64 (B,) on the host, not yet checked against the model's
            class count (``in_pass``: the method checks them on its first pass,
            :func:`check_given`); None otherwise.
    """

    targets: T | None
    predictions: np.ndarray | None = None
    output: np.ndarray | None = None
    n_classes: int | None = None
    spec: Bound | None = None
    unchecked: np.ndarray | None = None

    def host_targets(self, bk: Backend) -> np.ndarray | None:
        """The targets as int64 numpy (None when not pinned, or pinned to a target object)."""
        if self.targets is None or self.spec is not None:
            return None
        return np.asarray(bk.to_numpy(self.targets), dtype=np.int64)


def pin(
    inp: Inputs,
    target: Any,
    output: int | str = 0,
    *,
    predict: bool = True,
    in_pass: bool = False,
    objects: bool = False,
) -> Pinned:
    """The class explained for each sample, fixed once for all of its rows: the one owner of
    that decision (methods, metrics and ``explain_dataset`` all come here).

    Args:
        inp: the prepared inputs.
        target: None (each sample's predicted class on the clean input, so that noisy and
            interpolated rows keep explaining the same class), one class for all, or one per
            sample (checked against the batch and the model's class count).
        output: which model output to read when the model returns several.
        predict: the caller needs the predictions (a forward pass of the whole batch). When
            False, given classes are checked against the class count from a forward pass of one
            row instead (a single-pass method such as Input x Gradient would otherwise pay for a
            second pass of the batch).
        in_pass: the method finds the predicted class in its own pass (a gradient CAM): without
            given classes and ``predict``, nothing is run and the targets are None; given
            classes are checked for their form here and for their range by the method
            (``Pinned.unchecked``), on the one row its layer probe runs anyway.
        objects: the caller takes target objects (:mod:`xaikit.targets`): one is resolved by
            :func:`pin_object`; otherwise only :class:`~xaikit.targets.Class` is taken.

    A model output of one score per row, (B,), is explained as class 0: ``target`` must be None
    or 0.
    """
    bk = inp.bk
    device = getattr(inp.tensors[0], "device", None)
    if isinstance(target, Class):
        target = target.k
    if isinstance(target, (list, tuple)) and any(is_target(t) for t in target):
        raise XaikitTypeError(
            f"target must be one target object for the whole batch, not a {type(target).__name__} of "
            f"them: its fields take one value per sample (e.g. ClassRegion([k0, k1, ...], mask=(B, H, W) "
            f"masks), Output([i0, i1, ...]), Similarity((B, D) references)); got {describe(target)}"
        )
    if is_target(target):
        if not objects:
            raise refused(target)
        return pin_object(inp, target, output)
    if target is None and in_pass and not predict:
        return Pinned(None)
    if target is not None and not predict:
        if in_pass:
            classes = check_targets(bk, target, inp.batch, None)
            return Pinned(bk.index(classes, device), unchecked=classes)
        one = first_row(inp, output)
        if one is not None:
            n_classes = class_count(one)
            classes = check_targets(bk, target, inp.batch, n_classes)
            return Pinned(bk.index(classes, device), None, bk.to_numpy(one), n_classes)
    scores = logits(inp, output)
    host = bk.to_numpy(scores)
    predictions = predictions_of(host)
    n_classes = class_count(scores)
    if target is None:
        classes = predictions if len(scores.shape) == 2 else np.zeros(inp.batch, dtype=np.int64)
    else:
        classes = check_targets(bk, target, inp.batch, n_classes)
    return Pinned(bk.index(classes, device), predictions, host, n_classes)


def first_row(inp: Inputs, output: int | str) -> T | None:
    """The explained output of the batch's first row, forward only; None when the model cannot
    run it alone (e.g. a model that binds per-sample values: the whole batch then says why)."""
    kw = {"model_kwargs": inp.kwargs.rows(np.arange(1))} if inp.kwargs else {}
    try:
        return inp.bk.forward(inp.model, [t[:1] for t in inp.tensors], output, **kw)
    except Exception:
        return None


def class_count(scores: Any) -> int:
    """The class count of an explained output: its width, 1 for a (B,) output of one score."""
    return int(scores.shape[1]) if len(scores.shape) == 2 else 1


def check_given(inp: Inputs, classes: np.ndarray, output: int | str, probe: Any = None) -> None:
    """Given classes (int64 (B,)) checked against the model's class count, read off ``probe``
    (what the model returned on one row, e.g. a CAM's layer probe) or, without one, off a
    forward pass of the first row (of the whole batch when one row cannot run alone)."""
    one = None
    if probe is not None:
        try:
            one = select_output(probe, output, 1)
        except Exception:  # a probe that does not show the output: run it
            one = None
    if one is None:
        one = first_row(inp, output)
    check_class_range(classes, class_count(logits(inp, output) if one is None else one))


def pin_object(inp: Inputs, target: Any, output: int | str = 0) -> Pinned:
    """A target object (or callable) resolved against the model's output for the clean batch
    (one forward pass of the whole batch, not chunked yet; errors name ``target``) and bound to
    the model's device. Stacked targets (``inp.repeats > 1``): each image runs once and its
    output is repeated for its targets (:func:`spread_output`)."""
    bk = inp.bk
    device = getattr(inp.tensors[0], "device", None)
    kw = {"model_kwargs": inp.kwargs.rows(np.arange(inp.batch))} if inp.kwargs else {}
    raw = None
    try:
        if inp.repeats > 1 and not inp.kwargs:  # stacked targets: each image once, its output repeated
            images = bk.index(np.arange(0, inp.batch, inp.repeats), device)
            once = bk.outputs(inp.model, [bk.gather(t, images) for t in inp.tensors])
            raw = spread_output(bk, once, inp.batch // inp.repeats, inp.repeats)
        if raw is None:
            raw = bk.outputs(inp.model, list(inp.tensors), **kw)
    except XaikitError:
        raise
    except Exception as exc:
        raise call_error(inp, exc) from exc
    rows = bk.arange(0, inp.batch, device)
    if hasattr(target, "resolve_raw"):  # a detection target reads the raw output itself
        resolved = target.resolve_raw(bk, raw, output, inp.batch)
    elif not isinstance(target, Target):  # a callable
        resolved = resolve_callable(target, np.asarray(bk.to_numpy(target(raw))), output, inp.batch)
    else:
        host = np.asarray(bk.to_numpy(picked(raw, output)))
        layout = bk.model_layout(inp.model)
        resolved = target.resolve(host, layout.channel_first, output, batch=inp.batch)
    tensors = {
        name: bk.index(arr, device) if arr.dtype.kind in "iu" else bk.as_tensor(arr, device, inp.dtype)
        for name, arr in resolved.arrays.items()
    }
    bound = Bound(resolved, tensors)
    clean = np.asarray(bk.to_numpy(bound.scores(bk, raw, rows)), dtype=np.float64)
    return Pinned(rows, None, clean, None, bound)


def spread_output(bk: Any, raw: Any, images: int, repeats: int) -> Any:
    """What a model returned for ``images`` images, each image's rows repeated ``repeats`` times
    in a row (as :func:`xaikit.xai.explain.expanded` repeats the images): a tensor, a list of
    per-image dicts (torchvision detectors) or a dict / output object of tensors, each with one
    row per image; None for anything else (the caller runs the repeated rows)."""
    if bk.is_tensor(raw):
        if not len(raw.shape) or int(raw.shape[0]) != images:
            return None
        return bk.gather(raw, bk.index(np.repeat(np.arange(images), repeats), getattr(raw, "device", None)))
    if isinstance(raw, (list, tuple)) and len(raw) == images and all(isinstance(d, dict) for d in raw):
        return [d for d in raw for _ in range(repeats)]
    if isinstance(raw, dict) and raw:
        values = {k: spread_output(bk, v, images, repeats) for k, v in raw.items()}
        if any(v is None for v in values.values()):
            return None
        try:
            return type(raw)(**values)
        except TypeError:  # an output class that cannot be rebuilt from its fields
            return None
    return None


def pin_targets(
    inp: Inputs, target: Any, output: int | str = 0, predict: bool = True
) -> tuple[T, np.ndarray | None]:
    """``(targets, predictions)`` of :func:`pin` for a pinned method."""
    pinned = pin(inp, target, output, predict=predict)
    return pinned.targets, pinned.predictions  # type: ignore[return-value]


def predictions_of(scores: np.ndarray) -> np.ndarray:
    """What a model predicts per sample: the argmax class (int64) of (B, classes) scores, or the
    score itself (float) of a (B,) output.

    Example:
        >>> predictions_of(np.array([[0.1, 0.9], [2.0, 1.0]])), predictions_of(np.array([-0.5, 2.0]))
        (array([1, 0]), array([-0.5,  2. ]))
    """
    if scores.ndim == 1:
        return scores.astype(np.float64)
    return scores.argmax(axis=1).astype(np.int64)


def refused(target: Any) -> XaikitValueError:
    """The error for a target object given to a method or metric that takes class indices only;
    it lists the methods that take target objects (read from the registry, so it never drifts)."""
    from xaikit.xai.registry import method_names  # the registry imports no engine module

    takers = ", ".join(method_names(target_objects=True))
    return XaikitValueError(
        f"target={type(target).__name__}(...) (a target object) is not taken by this method or "
        f"metric, which takes class indices: pass target= an int or one int per sample "
        f"(xk.targets.Class(k) is the same). The methods of xk.xai.explain that take target "
        f"objects: {takers}"
    )


def check_targets(bk: Backend, target: Any, batch: int, n_classes: int | None) -> np.ndarray:
    """User-given classes as int64 (B,), checked against the batch and the class count (None:
    not yet, :func:`check_class_range` later); :class:`~xaikit.targets.Class` is its classes,
    another target object is refused."""
    if isinstance(target, Class):
        target = target.k
    elif is_target(target):
        raise refused(target)
    host = np.asarray(bk.to_numpy(target) if bk.is_tensor(target) else target)
    if host.dtype.kind not in "iu" and not (host.dtype.kind == "f" and np.all(host == np.round(host))):
        raise XaikitTypeError(f"target must be integer class indices; got {describe(target)}")
    host = host.astype(np.int64).reshape(-1) if host.ndim <= 2 else host
    if host.ndim != 1 or host.size not in (1, batch):
        what = describe(target) if hasattr(target, "shape") else f"{type(target).__name__} of {host.size}"
        raise XaikitValueError(f"target must be one class or one class per sample ({batch}); got {what}")
    if host.size == 1:
        host = np.full(batch, int(host[0]), dtype=np.int64)
    if n_classes is not None:
        check_class_range(host, n_classes)
    return host


def check_class_range(host: np.ndarray, n_classes: int) -> None:
    """Classes (int64 (B,)) within a model output's ``n_classes`` (1: a (B,) output, class 0)."""
    if n_classes == 1 and (host.min() < 0 or host.max() > 0):
        raise XaikitValueError(
            "target must be None or 0 for a model output of one score per sample (the score is "
            f"class 0); got values {sorted(set(host.tolist()))[:10]}"
        )
    if host.min() < 0 or host.max() >= n_classes:
        raise XaikitValueError(
            f"target classes must lie in [0, {n_classes - 1}] for a model with {n_classes} outputs; "
            f"got values {sorted(set(host.tolist()))[:10]}"
        )
