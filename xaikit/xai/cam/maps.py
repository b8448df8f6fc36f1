"""The maps of one CAM method for a batch: :func:`maps_and_scores` runs the fused
forward+backward of the backend's CAM facet (``bk.cam``, which returns a layer's activations
``A`` and their gradients ``dA`` channel-first for both frameworks) in chunks of rows and
applies the method's formula (:mod:`xaikit.xai.cam.formulas`); Eigen-CAM reads the activations
alone (:func:`layer_activations`), Score-CAM scores the B x C masked images through the
engine's forward-only plan.

Stacked targets (``inp.repeats = T``: each image's rows repeated T times, one per target): the
gradient CAMs run the layers below the layer once per image and spread the layer's output to
the T targets' rows (:func:`chunked`'s ``shared`` step, ``spread`` of
:meth:`~xaikit.backend.facets.CamFacet.grad_step`); Score-CAM runs each image's masked passes
once and scores them by its T targets (:func:`_shared_score_cam`); Eigen-CAM runs the repeated
rows (it has no target).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from xaikit.backend import Rows, T
from xaikit.backend.facets import CamLayer
from xaikit.xai._engine.chunks import chunk_error, forward_rows, halves_on, padded_rows, run_chunks
from xaikit.xai._engine.inputs import Inputs, call_error, prepare
from xaikit.xai._engine.plan import check_max_batch, default_rows
from xaikit.xai._engine.progress import for_method
from xaikit.xai._engine.targets import pin
from xaikit.xai.cam.formulas import combine, eigen_projection, relu
from xaikit.xai.cam.layers import Reshape, check_reshape, find_layer, grid_size, to_chw
from xaikit.xai.cam.resize import bilinear_matrix, image_size
from xaikit.xai.registry import CallSettings


class CamResult(NamedTuple):
    """A layer-resolution class-activation map (B, h, w) and the name of its layer."""

    maps: np.ndarray
    layer: str


Step = Callable[[list[T], T, "dict[str, Any] | None"], Any]
#: a step whose rows are the chunk's distinct images and whose last argument ``spread`` is the
#: image (index into those rows) of each of the chunk's rows (see :meth:`CamFacet.grad_step`)
SharedStep = Callable[[list[T], T, "dict[str, Any] | None", T], Any]


def chunked(
    inp: Inputs,
    targets: T | None,
    max_batch: int | str,
    step: Step,
    forward_only: bool = False,
    shared: SharedStep | None = None,
) -> Any:
    """``step(rows, targets, model_kwargs)`` over the batch in chunks of ``max_batch`` rows
    (``"auto"``: the engine's default), halving the chunk on out-of-memory (the engine's one
    chunk loop, :func:`~xaikit.xai._engine.chunks.run_chunks`); the results stacked
    (a step that returns a tuple of arrays gets a tuple of stacked arrays).
    For a framework whose compiled step retraces on each new shape (TF) a short chunk is padded
    with copies of its last row, as the engine pads (its results are cut off).

    ``shared``: for inputs whose rows come in groups of copies of one image
    (``inp.repeats > 1``, stacked targets), each chunk runs ``shared(images, targets,
    model_kwargs, spread)`` instead: ``images`` are the chunk's distinct images (once each, a
    chunk boundary may fall inside a group) and ``spread`` the image of each of its rows, so
    the work that does not depend on the target runs once per image. When a chunk's shared step
    raises anything but an out-of-memory error (a model that does not let its rows be spread),
    that chunk and the rest run ``step`` on the repeated rows instead: the same result, slower
    (an error of the model itself is raised by ``step``)."""
    bk = inp.bk
    device = bk.model_device(inp.model)
    if max_batch == "auto":
        row_elems = sum(int(np.prod(t.shape[1:])) for t in inp.tensors)
        chunk = default_rows(bk, device, row_elems, forward_only=forward_only)
    else:
        chunk = int(max_batch)
    pad = bk.pads_chunks()
    where = getattr(inp.tensors[0], "device", None)

    def rows_of(r0: int, r1: int, size: int) -> np.ndarray:
        """The rows a chunk [r0, r1) hands the step: padded with copies of its last row."""
        n = r1 - r0
        return np.minimum(np.arange(r0, r0 + (padded_rows(n, size) if pad else n)), r1 - 1)

    group = inp.repeats if shared is not None else 1
    state = {"shared": group > 1}

    def spread_run(idx: np.ndarray) -> Any:
        """``shared`` on the distinct images of rows ``idx`` (padded to a fixed count, as the
        rows are, for a framework that retraces on each new shape)."""
        images = idx // group
        first = np.unique(images)
        spread = np.searchsorted(first, images)
        if pad:  # a chunk of len(idx) rows spans at most this many images
            first = np.concatenate([first, np.repeat(first[-1], len(idx) // group + 2 - len(first))])
        rows = bk.index(first * group, where)
        tg = None if targets is None else bk.gather(targets, bk.index(idx, where))
        kw = inp.kwargs.rows(first * group) if inp.kwargs else None
        return shared([bk.gather(t, rows) for t in inp.tensors], tg, kw, bk.index(spread, where))  # type: ignore[misc]

    def run(r0: int, r1: int, size: int) -> Any:
        n = r1 - r0
        idx = rows_of(r0, r1, size)
        if state["shared"]:
            try:
                out = spread_run(idx)
            except Exception as exc:
                if halves_on(bk, exc):  # run_chunks halves the chunk
                    raise
                # this model does not let its rows be spread (a chunk of one image may have, by
                # broadcasting, equal to the repeated rows): repeat them from here on; an error of
                # the model itself comes again from the repeated rows
                state["shared"] = False
            else:
                return tuple(o[:n] for o in out) if isinstance(out, tuple) else out[:n]
        if len(idx) == n:
            rows, tg = [t[r0:r1] for t in inp.tensors], None if targets is None else targets[r0:r1]
        else:
            ti = bk.index(idx, where)
            rows = [bk.gather(t, ti) for t in inp.tensors]
            tg = None if targets is None else bk.gather(targets, ti)
        out = step(rows, tg, inp.kwargs.rows(idx) if inp.kwargs else None)
        return tuple(o[:n] for o in out) if isinstance(out, tuple) else out[:n]

    def error(exc: Exception, r0: int, r1: int, size: int) -> Exception:
        if not r0:  # nothing ran before the first chunk: the model cannot take x
            return call_error(inp, exc)
        return chunk_error(exc, len(rows_of(r0, r1, size)), inp.batch, bk)

    parts = run_chunks(bk, device, inp.batch, chunk, run, error=error).results
    if isinstance(parts[0], tuple):
        return tuple(np.concatenate(column) for column in zip(*parts))
    return np.concatenate(parts)


def per_input(inp: Inputs, targets: T, max_batch: int | str, step: Step) -> list[np.ndarray]:
    """:func:`chunked` for a step that returns one tensor per input with the input's shape
    (gradients or relevance w.r.t. each input): the results, float32 (B, ...) per input in the
    model's layout (what guided backprop, deconvnet and LRP return)."""
    bk = inp.bk
    shapes = [tuple(int(d) for d in t.shape[1:]) for t in inp.tensors]

    def flat(rows: list[T], tg: T, kw: dict[str, Any] | None) -> np.ndarray:
        n = int(rows[0].shape[0])
        values = [np.asarray(bk.to_numpy(v), dtype=np.float32).reshape(n, -1) for v in step(rows, tg, kw)]
        return np.concatenate(values, axis=1)

    joined = chunked(inp, targets, max_batch, flat)  # (B, sum of the inputs' sizes)
    ends = np.cumsum([0] + [int(np.prod(s)) for s in shapes])
    return [joined[:, ends[i] : ends[i + 1]].reshape(inp.batch, *shapes[i]) for i in range(len(shapes))]


def maps_and_scores(
    inp: Inputs,
    targets: T | None,
    method: str,
    settings: CallSettings,
    *,
    layer: Any = None,
    reshape: Reshape = None,
    check_classes: Callable[[Any], None] | None = None,
) -> tuple[CamResult, np.ndarray | None]:
    """The layer-resolution maps (B, h, w) of one CAM method and the layer's name, and for the
    one-pass gradient methods the (B,) explained score of each row as their pass read it (None
    for Eigen-CAM and Score-CAM).

    Args:
        inp: the prepared inputs (:func:`~xaikit.xai._engine.inputs.prepare`).
        targets: int64 (B,) classes on the model's device
            (:func:`~xaikit.xai._engine.targets.pin`), or None: each row's highest score in the
            same forward pass (the predicted class; Eigen-CAM needs none, Score-CAM pins them
            first).
        method: the canonical name of a CAM method (``xk.xai.registry.method_names("cam")``).
        settings: how the call runs (:class:`~xaikit.xai.registry.CallSettings`): the model
            ``output`` explained, ``max_batch`` (rows per fused chunk, or ``"auto"``), the
            ``memory_budget`` Score-CAM's B x C masked rows may use (the one-pass methods run B
            rows), Score-CAM's ``progress`` (the one-pass methods have none to report) and the
            bound ``target`` object (``Call.spec``) when one was given: ``targets`` are then
            each sample's index and the rows are scored by it.
        layer: a layer name / object, or None: the last layer with a spatial output.
        reshape: how a non-4-D layer output becomes a map (see :func:`to_chw`).
        check_classes: called with what the model returned on the layer probe's row, before
            any row of the batch runs (:meth:`~xaikit.xai.registry.Call.check_classes`).
    """
    bk = inp.bk
    facet = bk.cam
    found = find_layer(inp, layer, reshape, settings.output)
    if check_classes is not None:
        check_classes(found.probe)
    first = facet.channel_first(inp.model)
    size = grid_size(inp)

    def host(t: T) -> np.ndarray:
        if callable(reshape):
            t = reshape(t)
        return to_chw(np.asarray(bk.to_numpy(t), dtype=np.float64), first, reshape, size)

    output, max_batch = settings.output, settings.max_batch
    if method == "eigencam":
        maps = relu(eigen_projection(_layer_values(inp, found, output, max_batch, reshape)))
        return CamResult(maps, found.name), None
    if method == "scorecam":
        if inp.repeats > 1 and settings.target is not None and not inp.kwargs:  # stacked targets
            return CamResult(_shared_score_cam(inp, targets, found, settings, reshape), found.name), None  # type: ignore[arg-type]
        all_acts = _layer_values(inp, found, output, max_batch, reshape)
        if targets is None:
            targets = pin(inp, None, output).targets
        return CamResult(_score_cam(inp, targets, all_acts, settings), found.name), None  # type: ignore[arg-type]

    def grads(
        rows: list[T], tg: T, kw: dict[str, Any] | None, spread: T | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        step = Rows(inp.model, rows, tg, output, kw, settings.target)
        a, da, scores = facet.grad_step(step, found, spread)
        return combine(method, host(a), host(da)), np.asarray(bk.to_numpy(scores), dtype=np.float64)

    # stacked targets (inp.repeats > 1): the layers below the layer run once per image
    maps, scores = chunked(inp, targets, max_batch, grads, shared=grads)
    return CamResult(maps, found.name), scores


def layer_activations(
    model: Any,
    x: Any,
    layer: Any = None,
    *,
    reshape: Reshape = None,
    output: int | str = 0,
    model_kwargs: Any = None,
    max_batch: int | str = "auto",
    framework: str | None = None,
) -> CamResult:
    """A layer's activations for a batch, channel-first (B, C, h, w) float64 whatever the
    framework, and the layer's name: what Eigen-CAM decomposes, for more than its first
    component (the ``EigenCAM`` trace's ``n_components``). Forward passes only, chunked.

    Args:
        model: a torch module or Keras model.
        x: the input batch (numpy or tensor) in the model's layout or the other one.
        layer: a layer name / object, or None: the last layer with a spatial output.
        reshape: how a token output becomes a map (see :func:`to_chw`).
        output: the model output to run when the model returns several.
        model_kwargs: extra keyword arguments of the model's forward call.
        max_batch: rows per chunk, or ``"auto"``.
        framework: ``"torch"`` or ``"tf"`` when the model is a plain function.
    """
    from xaikit.backend import get_backend

    max_batch = check_max_batch(max_batch)
    reshape = check_reshape(reshape)
    bk = get_backend(model, framework)
    inp = prepare(bk, model, [x], ["x"], model_kwargs=model_kwargs)
    with bk.inference(model):
        found = find_layer(inp, layer, reshape, output)
        return CamResult(_layer_values(inp, found, output, max_batch, reshape), found.name)


def _layer_values(
    inp: Inputs, found: CamLayer, output: int | str, max_batch: int | str, reshape: Reshape
) -> np.ndarray:
    """The layer's activations for the whole batch, (B, C, h, w) float64 on the host: forward
    passes only, chunked (what Eigen-CAM, Score-CAM and :func:`layer_activations` read)."""
    bk, facet = inp.bk, inp.bk.cam
    first = facet.channel_first(inp.model)
    size = grid_size(inp)

    def acts(rows: list[T], _tg: T, kw: dict[str, Any] | None) -> np.ndarray:
        t = facet.activations(inp.model, found, rows, output, kw)
        if callable(reshape):
            t = reshape(t)
        return to_chw(np.asarray(bk.to_numpy(t), dtype=np.float64), first, reshape, size)

    return chunked(inp, None, max_batch, acts, forward_only=True)


def _score_cam(inp: Inputs, targets: T, acts: np.ndarray, settings: CallSettings) -> np.ndarray:
    """Score-CAM: the B x C masked copies of the image input, scored in chunks of rows
    ``r = c * B + b`` (forward only); each chunk's masks are built from the (small) layer
    activations ``acts`` (B, C, h, w) on the device (upsampled and min-max normalised there, in
    the working dtype), so memory stays one chunk whatever C is. The chunk is
    the engine's forward-only plan (:func:`~xaikit.xai._engine.chunks.forward_rows`: the settings'
    ``max_batch`` and ``memory_budget``, halving on out-of-memory)."""
    B, C = acts.shape[:2]
    rows_fn = _masked_rows(inp, acts)
    with for_method(settings.progress, B * C, "scorecam") as bar:
        scores = forward_rows(inp, targets, C, rows_fn, settings, bar.advance_to)
    return _weighted(scores.T, acts)  # (B, C): row r = c * B + b


def _weighted(scores: np.ndarray, acts: np.ndarray) -> np.ndarray:
    """Score-CAM's maps (B, h, w): the ReLU of the activations (B, C, h, w) weighted by the
    softmax over the channels of the masked images' scores (B, C)."""
    s = np.exp(scores - scores.max(axis=1, keepdims=True))
    w = s / s.sum(axis=1, keepdims=True)
    return relu(np.einsum("bc,bchw->bhw", w, acts))


def _masked_rows(inp: Inputs, acts: np.ndarray) -> Callable[[int, int], list[T]]:
    """``rows(r0, r1)``: rows [r0, r1) of Score-CAM's B x C masked copies of the image input
    (row ``r = c * B + b``: image b masked by its upsampled, min-max scaled channel c), built on
    the device from the activations ``acts`` (B, C, h, w) in the working dtype."""
    bk = inp.bk
    B, C = acts.shape[:2]
    which, (H, W) = image_size(inp)
    image = inp.tensors[which]
    device = getattr(image, "device", None)
    first = inp.channel_axes[which] == 1
    four = len(image.shape) == 4
    # on the device once, in the working dtype: the (align-corners bilinear) upsampling matrices
    # and the activations in row order (row r = c * B + b is acts[b, c])
    ry = bk.as_tensor(bilinear_matrix(acts.shape[2], H, align_corners=True), device, inp.dtype)
    rxt = bk.as_tensor(bilinear_matrix(acts.shape[3], W, align_corners=True).T, device, inp.dtype)
    rows_acts = bk.as_tensor(np.ascontiguousarray(acts.transpose(1, 0, 2, 3)), device, inp.dtype)
    rows_acts = bk.reshape(rows_acts, (B * C, *acts.shape[2:]))
    shape = (H, W, 1) if four and not first else (1, H, W) if four else (H, W)

    def rows_fn(r0: int, r1: int) -> list[T]:
        up = bk.matmul(bk.matmul(ry, rows_acts[r0:r1]), rxt)  # (rows, H, W)
        lo, hi = bk.sample_min(up), bk.sample_max(up)
        m = bk.reshape((up - lo) / (hi - lo + 1e-8), (r1 - r0, *shape))
        idx = bk.arange(r0, r1, device) % B
        return [bk.gather(t, idx) * m if i == which else bk.gather(t, idx) for i, t in enumerate(inp.tensors)]

    return rows_fn


def _shared_score_cam(
    inp: Inputs, targets: T, found: CamLayer, settings: CallSettings, reshape: Reshape
) -> np.ndarray:
    """Score-CAM of stacked targets (``inp.repeats = T`` rows per image, a bound target object):
    the masks depend on the image only, so the layer's activations and the Bu x C masked images
    run once per image (Bu = B / T), and each masked pass's output, repeated T times
    (:func:`~xaikit.xai._engine.targets.spread_output`), is scored by the image's T targets.
    Chunks of the settings' ``max_batch`` masked rows (``"auto"``: the engine's forward-only
    default; the ``memory_budget`` plan of the unstacked passes is not used), halving on
    out-of-memory.
    A model output that cannot be repeated row by row runs the repeated rows (every target's
    masked passes) as the unstacked Score-CAM does."""
    from xaikit.xai._engine.targets import spread_output

    bk, group = inp.bk, inp.repeats
    output, max_batch, target = settings.output, settings.max_batch, settings.target
    device = getattr(inp.tensors[0], "device", None)
    first = bk.index(np.arange(0, inp.batch, group), device)
    once = dataclasses.replace(inp, tensors=[bk.gather(t, first) for t in inp.tensors], repeats=1)
    acts = _layer_values(once, found, output, max_batch, reshape)  # (Bu, C, h, w)
    Bu, C = acts.shape[:2]
    rows_fn = _masked_rows(once, acts)
    model_device = bk.model_device(inp.model)
    if max_batch == "auto":
        chunk = default_rows(bk, model_device, sum(int(np.prod(t.shape[1:])) for t in inp.tensors), True)
    else:
        chunk = int(max_batch)
    per_row = np.arange(group)
    samples = np.asarray(bk.to_numpy(targets)).reshape(-1)

    with for_method(settings.progress, Bu * C, "scorecam") as bar, bk.forward_only():

        def run(r0: int, r1: int, _size: int) -> np.ndarray:
            bar.advance_to(r0)
            raw = bk.outputs(inp.model, rows_fn(r0, r1))
            spread = spread_output(bk, raw, r1 - r0, group)
            if spread is None:
                raise _Unspreadable
            # row r = c * Bu + b: image b's targets are the samples b * T + t
            rows = (np.arange(r0, r1) % Bu)[:, None] * group + per_row
            which = bk.index(samples[rows.reshape(-1)], device)
            return np.asarray(bk.to_numpy(target.scores(bk, spread, which)), dtype=np.float64).reshape(
                -1, group
            )

        def unspreadable(exc: Exception, r0: int, r1: int, _size: int) -> Exception | None:
            return None if isinstance(exc, _Unspreadable) else chunk_error(exc, r1 - r0, Bu * C, bk)

        try:
            parts = run_chunks(bk, model_device, Bu * C, chunk, run, error=unspreadable).results
        except _Unspreadable:
            parts = []
        bar.advance_to(Bu * C)
    if not parts:  # every target's masked passes, as without a stack
        every = _layer_values(inp, found, output, max_batch, reshape)
        return _score_cam(inp, targets, every, settings)
    scores = np.concatenate(parts).reshape(C, Bu, group).transpose(1, 2, 0)  # (Bu, T, C)
    maps = _weighted(scores.reshape(Bu * group, C), np.repeat(acts, group, axis=0))
    return maps  # (Bu * T, h, w): sample b * T + t


class _Unspreadable(Exception):
    """A masked pass's output that :func:`spread_output` cannot repeat row by row."""
