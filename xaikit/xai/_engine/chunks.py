"""Chunked forward passes and what every chunk loop shares.

:func:`forward_scores` scores a row space ``chunk`` rows at a time on the device, an
out-of-memory error halving the chunk; :func:`forward_rows` runs the forward-only methods' row
spaces (occlusion, RISE, Score-CAM) through it with a :class:`~xaikit.xai._engine.plan.ChunkPlan`
of their own. :func:`padded_rows` and :func:`pad_rows` pad a short chunk for frameworks whose
compiled step retraces on every new shape; :func:`kwargs_of` cuts ``model_kwargs`` to a chunk's
rows; :func:`chunk_error` is the message for a model that runs on the samples but fails on a
chunk of rows.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from xaikit.backend import Backend, T
from xaikit.backend.outputs import as_matrix
from xaikit.errors import XaikitError, XaikitValueError
from xaikit.xai._engine.job import Job, device_of
from xaikit.xai._engine.kwargs import ModelKwargs
from xaikit.xai._engine.plan import ChunkPlan, probes


def kwargs_of(mk: ModelKwargs | None, r0: int, r1: int, rows: int) -> dict[str, Any]:
    """``{"model_kwargs": ...}`` for rows [r0, r1) padded to ``rows`` (sample r % B), or {}."""
    return {"model_kwargs": mk.span(r0, r1, rows)} if mk else {}


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
    zeros_t = bk.index(np.zeros(extra, dtype=np.int64), device_of(targets))
    return padded, bk.cat([targets, zeros_t])


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
) -> T:
    """Target-class scores of ``total`` rows built by ``rows_fn(r0, r1)``: forward only, ``chunk``
    rows at a time, on the device; returns a (total,) tensor. An out-of-memory error halves the
    chunk and redoes the rows (``sizes``, when given, receives the rows of each pass).
    ``model_kwargs`` are cut to the rows: row r belongs to sample r % B (the order of every
    caller's row space). ``predicted``, when given, receives each pass's predicted class per row
    (numpy int64, the argmax of the selected output; the scores then come from the same pass)."""
    chunk = max(1, int(chunk))
    pad = bk.pads_chunks()
    out: list[T] = []
    r0 = 0
    while r0 < total:
        r1 = min(total, r0 + chunk)
        n = r1 - r0
        calling = False  # an error while building the rows is not the model's
        try:
            rows, targets = rows_fn(r0, r1)
            if pad and (size := padded_rows(r1 - r0, chunk)) > r1 - r0:
                rows, targets = pad_rows(bk, rows, targets, size - (r1 - r0))
            n = int(targets.shape[0])
            kw = kwargs_of(model_kwargs, r0, r1, n)
            calling = True
            if predicted is None:
                out.append(bk.scores(model, rows, targets, output, xla, **kw)[: r1 - r0])
            else:
                full = bk.to_numpy(as_matrix(bk.forward(model, rows, output, **kw)))[: r1 - r0]
                picked = full[np.arange(r1 - r0), bk.to_numpy(targets)[: r1 - r0]]
                out.append(bk.as_tensor(picked, bk.model_device(model), "float32"))
                predicted.append(full.argmax(axis=1).astype(np.int64))
        except XaikitError:
            raise
        except Exception as exc:
            if not bk.is_oom(exc) or chunk <= 1:
                if calling and batch is not None and not bk.is_oom(exc) and n != batch:
                    raise chunk_error(exc, n, batch, bk) from exc
                raise
            bk.empty_cache(bk.model_device(model))
            chunk = max(1, chunk // 2)
            continue
        if sizes is not None:
            sizes.append(r1 - r0)
        r0 = r1
    return bk.cat(out)


def forward_rows(
    inp: Any,
    targets: T,
    per_sample: int,
    rows_fn: Callable[[int, int], list[T]],
    *,
    seed: int,
    output: int | str,
    max_batch: int | str,
    memory_budget: int | float,
    xla: bool,
    progress: Callable[[int], None] | None = None,
) -> np.ndarray:
    """Scores of the B x ``per_sample`` rows ``rows_fn(r0, r1)`` builds (row r: sample r % B),
    forward passes only, chunked by a :class:`ChunkPlan` of their own (``forward_only``: their
    row cost is measured apart from the gradient jobs'), within ``memory_budget``, an
    out-of-memory error halving the chunk; returns them on the host as float64 (per_sample, B).
    The occlusion, RISE and Score-CAM row spaces run through it. ``progress`` is told the rows
    handed to the model so far (as each chunk is built: no synchronization), and all of them at
    the end (the chunk-size probe's rows are not counted)."""
    bk, model, B = inp.bk, inp.model, inp.batch
    device = getattr(inp.tensors[0], "device", None)
    total = B * per_sample
    job = Job(
        bk=bk,
        model=model,
        inputs=inp.tensors,
        targets=targets,
        n_noise=per_sample,
        seed=seed,
        output=output,
        max_batch=max_batch,
        dtype=inp.dtype,
        xla=xla,
        model_kwargs=inp.kwargs,
        forward_only=True,
    )
    plan = ChunkPlan(job, memory_budget)

    def laid(
        layout: str, tell: Callable[[int], None] | None = None
    ) -> Callable[[int, int], tuple[list[T], T]]:
        def fn(r0: int, r1: int) -> tuple[list[T], T]:
            if tell is not None:
                tell(r0)
            b = bk.index(np.arange(r0, r1) % B, device)
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
            bk, model, laid(layout, tell), n, size, output, xla, sizes=sizes, model_kwargs=inp.kwargs, batch=B
        )

    def throwaway(size: int, layout: str) -> None:
        scores(min(total, size), size, layout)
        bk.synchronize(device)

    plan.probe(*probes(bk, device, throwaway))
    sizes: list[int] = []
    out = bk.to_numpy(scores(total, plan.size, plan.layout, sizes, progress)).astype(np.float64)
    if progress is not None:
        progress(total)
    if sizes and max(sizes) < min(plan.size, total):  # an out-of-memory error halved the chunk
        while plan.size > max(sizes):
            plan.halve()
    return out.reshape(per_sample, B)
