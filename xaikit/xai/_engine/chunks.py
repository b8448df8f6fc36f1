"""Chunked passes and what every chunk loop shares.

:func:`run_chunks` is the one chunk loop: every sweep (:func:`~xaikit.xai._engine.sweep.sweep`),
forward-only scoring (:func:`forward_scores`), the clean logits
(:func:`~xaikit.xai._engine.targets.logits`) and the CAM chunks
(:func:`~xaikit.xai.cam.maps.chunked`) run their rows through it, and it alone halves a chunk on
an out-of-memory error. :func:`forward_scores` scores a row space ``chunk`` rows at a time on the
device; :func:`forward_rows` runs the forward-only methods' row spaces (occlusion, RISE,
Score-CAM) through it with a :class:`~xaikit.xai._engine.plan.ChunkPlan` of their own.
:func:`padded_rows` and :func:`pad_rows` pad a short chunk for frameworks whose compiled step
retraces on every new shape; :func:`kwargs_of` cuts ``model_kwargs`` to a chunk's rows;
:func:`chunk_error` is the message for a model that runs on the samples but fails on a chunk of
rows, :func:`model_call` raises it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import numpy as np

from xaikit.backend import Backend, Rows, T
from xaikit.backend.outputs import as_matrix
from xaikit.errors import XaikitError, XaikitValueError
from xaikit.xai._engine.job import Job, device_of
from xaikit.xai._engine.kwargs import ModelKwargs
from xaikit.xai._engine.plan import ChunkPlan, probes

if TYPE_CHECKING:
    from xaikit.xai.registry import CallSettings

R = TypeVar("R")


def kwargs_of(mk: ModelKwargs | None, r0: int, r1: int, rows: int) -> dict[str, Any] | None:
    """The model_kwargs of rows [r0, r1) padded to ``rows`` (sample r % B), or None."""
    return mk.span(r0, r1, rows) if mk else None


def chunk_error(exc: Exception, rows: int, batch: int, bk: Backend | None = None) -> XaikitValueError:
    """The error for a model that ran on the B clean samples but fails on a chunk of rows (what
    the model raised on one line, through ``bk.error_text`` when the backend is given)."""
    text = bk.error_text(exc) if bk is not None else str(exc)
    return XaikitValueError(
        f"the model ran on the {batch} samples but raised {type(exc).__name__} on a chunk of {rows} "
        f"rows (an explanation feeds the model perturbed copies of the samples, many rows at a "
        f"time): {text}. A model that holds per-sample values of its own (a tensor of {batch} rows "
        "bound with functools.partial, a closure, an attribute) cannot follow the rows: pass such "
        "values with model_kwargs={name: tensor} instead, so that each row gets its sample's value"
    )


@dataclass
class Chunks(Generic[R]):
    """What :func:`run_chunks` returns.

    Attributes:
        results: each chunk's result, in row order (of the pass that completed).
        sizes: the rows of each of those chunks.
        size: the chunk size at the end (smaller than the one given when out-of-memory errors
            halved it).
    """

    results: list[R] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)
    size: int = 1


def halves_on(bk: Backend, exc: Exception) -> bool:
    """Whether :func:`run_chunks` halves the chunk on ``exc`` (an out-of-memory error). A step
    that falls back to another path on other errors re-raises these, so that the one chunk loop
    stays the one place that decides what halves."""
    return bool(bk.is_oom(exc))


def run_chunks(
    bk: Backend,
    device: Any,
    total: int,
    size: int,
    step: Callable[[int, int, int], R],
    *,
    end: Callable[[int, int], int] | None = None,
    restart: bool = False,
    on_halve: Callable[[int], None] | None = None,
    error: Callable[[Exception, int, int, int], Exception | None] | None = None,
) -> Chunks[R]:
    """Rows [0, total) chunk by chunk: ``step(r0, r1, size)`` runs rows [r0, r1) at chunk size
    ``size`` and returns that chunk's result. The one chunk loop of the engine, and the one
    place a chunk halves on an out-of-memory error.

    Args:
        bk: the backend (``bk.is_oom`` tells an out-of-memory error, ``bk.empty_cache`` frees).
        device: the device whose cache an out-of-memory error frees.
        total: the rows.
        size: rows per chunk (at least 1).
        step: runs one chunk.
        end: the end of the chunk that starts at r0 with chunk size ``size`` (default
            ``min(total, r0 + size)``; the sweep aligns its chunks on slices of B rows).
        restart: what follows an out-of-memory error: False, go on at the failed chunk's first
            row with the halved size; True, drop every result and start again from row 0, so
            that the result is exactly that of a call at the halved size (the sweep's rule: its
            chunks carry sums from one to the next).
        on_halve: told each new size after an out-of-memory error, before the cache is freed
            (a caller drops what its dropped rows held, a plan remembers the size).
        error: for an exception of the step that is neither an out-of-memory error nor an
            ``XaikitError``, given ``(exc, r0, r1, size)``: the error to raise instead (chained
            to it), or None to raise the step's as it is.

    An out-of-memory error halves the size, and halves it again while the failed chunk would
    still have as many rows (a size above the rows left does not help), down to 1; at size 1 the
    error is raised. ``XaikitError`` always passes through.
    """
    stop = end if end is not None else (lambda r0, s: min(total, r0 + s))
    size = max(1, int(size))
    done: Chunks[R] = Chunks(size=size)
    r0 = 0
    while r0 < total:
        r1 = stop(r0, size)
        try:
            result = step(r0, r1, size)
        except XaikitError:
            raise
        except Exception as exc:
            if not bk.is_oom(exc):
                if error is not None and (mapped := error(exc, r0, r1, size)) is not None:
                    raise mapped from exc
                raise
            if size <= 1:
                raise
        else:
            done.results.append(result)
            done.sizes.append(r1 - r0)
            r0 = r1
            continue
        # out of memory; handled after the except clause, whose traceback holds the failed
        # chunk's tensors until it ends
        size = max(1, size // 2)
        while size > 1 and stop(r0, size) >= r1:
            size //= 2
        done.size = size
        if restart:
            done.results, done.sizes, r0 = [], [], 0
        if on_halve is not None:
            on_halve(size)
        bk.empty_cache(device)
    return done


def model_call(bk: Backend, call: Callable[[], R], rows: int, batch: int | None) -> R:
    """``call()``, the model on a chunk of ``rows`` rows: an error other than out-of-memory (or
    an ``XaikitError``) on a chunk of other than the ``batch`` samples' rows becomes
    :func:`chunk_error` (None: errors pass as they are)."""
    try:
        return call()
    except XaikitError:
        raise
    except Exception as exc:
        if batch is None or rows == batch or bk.is_oom(exc):
            raise
        raise chunk_error(exc, rows, batch, bk) from exc


def padded_rows(n: int, chunk: int) -> int:
    """Rows a chunk of ``n`` real rows is padded to, for frameworks whose compiled step
    retraces on every new shape: full chunks stay as they are, a smaller (tail or single)
    chunk is padded to the next power of two, so a model sees at most log2(chunk) + 2 shapes
    over its lifetime while padding wastes less than the chunk's own rows.

    Example:
        >>> padded_rows(256, 256), padded_rows(32, 256), padded_rows(33, 256), padded_rows(200, 256)
        (256, 32, 64, 256)
    """
    if n >= chunk:
        return n
    return min(chunk, 1 << max(0, (n - 1).bit_length()))


def pad_rows(bk: Backend, rows: list[T], targets: T, extra: int) -> tuple[list[T], T]:
    padded = [
        bk.cat([x, bk.zeros((extra,) + tuple(x.shape[1:]), device_of(x), bk.dtype_name(x))]) for x in rows
    ]
    return padded, bk.cat([targets, bk.zeros((extra,), device_of(targets), "int64")])


def forward_scores(
    bk: Backend,
    model: Any,
    rows_fn: Callable[[int, int], tuple[list[T], T]],
    total: int,
    chunk: int,
    output: int | str = 0,
    xla: bool = False,
    sizes: list[int] | None = None,
    model_kwargs: ModelKwargs | None = None,
    batch: int | None = None,
    predicted: list[np.ndarray] | None = None,
    target: Any = None,
) -> T:
    """Target-class scores of ``total`` rows built by ``rows_fn(r0, r1)``: forward only, ``chunk``
    rows at a time, on the device (:func:`run_chunks`); returns a (total,) tensor. An
    out-of-memory error halves the chunk and redoes the failed chunk's rows (``sizes``, when
    given, receives the rows of each chunk).
    ``model_kwargs`` are cut to the rows: row r belongs to sample r % B (the order of every
    caller's row space). ``predicted``, when given, receives each pass's predicted class per row
    (numpy int64, the argmax of the selected output; the scores then come from the same pass).
    ``target``, a bound target object (:class:`xaikit.targets.Bound`), scores the rows instead of
    the classes (``rows_fn``'s second value is then each row's sample index)."""
    if predicted is not None and target is not None:  # a target object names no class to predict
        raise XaikitValueError(
            f"target= a target object (kind {target.resolved.kind!r}) with predicted classes per row: "
            "the predicted class is defined for class targets only; score the target without predicted="
        )
    pad = bk.pads_chunks()

    def step(r0: int, r1: int, size: int) -> tuple[T, np.ndarray | None]:
        rows, targets = rows_fn(r0, r1)  # an error while building the rows is not the model's
        if pad and (full := padded_rows(r1 - r0, size)) > r1 - r0:
            rows, targets = pad_rows(bk, rows, targets, full - (r1 - r0))
        n = int(targets.shape[0])
        kw = kwargs_of(model_kwargs, r0, r1, n)
        if predicted is None:
            asked = Rows(model, rows, targets, output, kw, target)
            scores = model_call(bk, lambda: bk.scores(asked, xla), n, batch)
            return scores[: r1 - r0], None
        out = model_call(bk, lambda: bk.logits(Rows(model, rows, targets, output, kw)), n, batch)
        host = bk.to_numpy(as_matrix(out))[: r1 - r0]
        picked = host[np.arange(r1 - r0), bk.to_numpy(targets)[: r1 - r0]]
        return bk.as_tensor(picked, bk.model_device(model), "float32"), host.argmax(axis=1).astype(np.int64)

    done = run_chunks(bk, bk.model_device(model), total, chunk, step)
    if sizes is not None:
        sizes.extend(done.sizes)
    if predicted is not None:
        predicted.extend(p for _, p in done.results if p is not None)
    return bk.cat([s for s, _ in done.results])


def forward_rows(
    inp: Any,
    targets: T,
    per_sample: int,
    rows_fn: Callable[[int, int], list[T]],
    settings: CallSettings,
    progress: Callable[[int], None] | None = None,
) -> np.ndarray:
    """Scores of the B x ``per_sample`` rows ``rows_fn(r0, r1)`` builds (row r: sample r % B),
    forward passes only, chunked by a :class:`ChunkPlan` of their own (``forward_only``: their
    row cost is measured apart from the gradient jobs'), within the call's ``memory_budget``
    (``settings``: also its output, ``max_batch``, XLA flag and target object), an
    out-of-memory error halving the chunk; returns them on the host as float64 (per_sample, B).
    The occlusion, RISE and Score-CAM row spaces run through it. ``progress`` is told the rows
    handed to the model so far (as each chunk is built: no synchronization), and all of them at
    the end (the chunk-size probe's rows are not counted). It all runs in the backend's
    :meth:`~xaikit.backend.base.Backend.forward_only` mode (torch: ``inference_mode``), ``rows_fn``
    too: a chunk's row indices are made on the device (:meth:`~xaikit.backend.base.Backend.arange`)
    and the callers build their masks there, so a chunk copies nothing from the host.
    A target object (``settings.target``) scores the rows instead of the classes (``targets``
    are then sample indices, gathered by ``r % B`` like classes)."""
    bk, model, B = inp.bk, inp.model, inp.batch
    device = getattr(inp.tensors[0], "device", None)
    total = B * per_sample
    output, xla, target = settings.output, settings.xla, settings.target
    job = Job.over(inp, targets, settings)
    job.n_noise, job.forward_only = per_sample, True
    plan = ChunkPlan(job, settings.memory_budget)

    def laid(
        layout: str, tell: Callable[[int], None] | None = None
    ) -> Callable[[int, int], tuple[list[T], T]]:
        def fn(r0: int, r1: int) -> tuple[list[T], T]:
            if tell is not None:
                tell(r0)
            b = bk.arange(r0, r1, device) % B  # made on the device: no host copy per chunk
            return [bk.to_layout(t, layout) for t in rows_fn(r0, r1)], bk.gather(targets, b)

        return fn

    def scores(
        n: int,
        size: int,
        layout: str,
        sizes: list[int] | None = None,
        tell: Callable[[int], None] | None = None,
    ) -> T:
        return forward_scores(
            bk,
            model,
            laid(layout, tell),
            n,
            size,
            output,
            xla,
            sizes=sizes,
            model_kwargs=inp.kwargs,
            batch=B,
            target=target,
        )

    def throwaway(size: int, layout: str) -> None:
        scores(min(total, size), size, layout)
        bk.synchronize(device)

    with bk.forward_only():  # torch: inference mode, no autograd bookkeeping
        plan.probe(*probes(bk, device, throwaway))
        sizes: list[int] = []
        out = bk.to_numpy(scores(total, plan.size, plan.layout, sizes, progress)).astype(np.float64)
    if progress is not None:
        progress(total)
    if sizes and max(sizes) < min(plan.size, total):  # an out-of-memory error halved the chunk
        while plan.size > max(sizes):
            plan.halve()
    return out.reshape(per_sample, B)
