"""Validated model inputs: :func:`prepare` checks a call's inputs once (numbers, finite, one batch
size), moves them to the model's device, into its floating dtype and its layout, and checks the
call's ``model_kwargs``; :class:`Inputs` holds them and moves results back to the caller's
layout. :func:`call_error` is the message for a model that cannot be called on them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from xaikit.backend import Backend, T
from xaikit.backend.base import working_dtype
from xaikit.errors import XaikitTypeError, XaikitValueError, describe
from xaikit.layout import Move, channel_axis_of, model_move, move_back
from xaikit.xai._engine.kwargs import ModelKwargs, check_model_kwargs


@dataclass
class Inputs:
    """Validated model inputs on the model's device, in the model's layout.

    ``moves`` says, per input, how its channel axis was moved to fit the model (see
    :mod:`xaikit.layout`; None: passed as given); :meth:`to_user` moves results back.
    ``channel_axes`` are the channel axes of ``tensors`` (the model's layout). ``dtype`` is the
    dtype the tensors, the rows built from them and the accumulators are held in: the model's
    compute dtype, or float32 for a float16/bfloat16 model (``compute_dtype``; the backend casts
    each chunk to it). ``kwargs`` are the call's checked ``model_kwargs``. ``repeats`` says that
    the rows come in groups of ``repeats`` copies of one image (stacked targets,
    :func:`xaikit.xai.explain.expanded`: row ``r`` is image ``r // repeats`` explained for its own
    target); a method may then run the work that does not depend on the target once per image
    (the gradient CAMs' layers below the CAM layer, :func:`xaikit.xai.cam.maps.chunked`). 1: every
    row is its own image.
    """

    bk: Backend
    model: Any
    keys: list[str]
    tensors: list[T]
    channel_axes: list[int | None]
    dtype: str
    moves: list[Move | None]
    compute_dtype: str = "float32"
    kwargs: ModelKwargs | None = None
    repeats: int = 1
    #: the keys of the inputs that came as signed integers (ids, indices; cast to ``dtype``)
    cast_integers: tuple[str, ...] = ()

    @property
    def batch(self) -> int:
        return int(self.tensors[0].shape[0])

    @property
    def user_axes(self) -> list[int | None]:
        """The channel axis of each input as the caller gave it."""
        return [a if m is None else m[0] for a, m in zip(self.channel_axes, self.moves)]

    def to_user(self, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Per-input results with the inputs' shapes, moved back to the caller's layout."""
        return [move_back(a, m) for a, m in zip(arrays, self.moves)]


def prepare(
    bk: Backend,
    model: Any,
    values: Sequence[Any],
    keys: Sequence[str],
    channel_axis: int | None = None,
    model_kwargs: Any = None,
) -> Inputs:
    """Check the inputs (numbers, finite, same non-zero batch size), move them to the device as
    the model's floating dtype (integer and bool arrays and tensors are cast, not rescaled; a
    float16/bfloat16 model's inputs are held in float32 and cast per chunk) and into the model's
    layout (a channel-last image batch for a channel-first torch CNN is moved, by the rule of
    :mod:`xaikit.layout`; inputs of other ranks, (B, F) tabular or (B, T, F) sequences, are
    never moved), and check ``model_kwargs`` (see :mod:`xaikit.xai._engine.kwargs`)."""
    device = bk.model_device(model)
    compute = bk.model_dtype(model)
    dtype = working_dtype(compute)
    layout = bk.model_layout(model)
    tensors: list[T] = []
    axes: list[int | None] = []
    moves: list[Move | None] = []
    batch = None
    integers: list[str] = []
    for key, value in zip(keys, values):
        if value is None or isinstance(value, (str, bytes, Mapping)):
            hint = (
                ": for a model with several inputs pass them as a list (explain) or name each batch "
                "key in model_inputs (SaliencyNet); extra arguments that are not explained go in "
                "model_kwargs="
                if isinstance(value, Mapping)
                else ""
            )
            raise XaikitTypeError(
                f"model input {key!r} must be an array or tensor; got {describe(value)}{hint}"
            )
        host = value if bk.is_tensor(value) else np.asarray(value)
        if isinstance(host, np.ndarray):
            kind = host.dtype.kind
            numeric = kind in "fiub"
            integer = kind == "i"  # signed: ids and indices (uint8 and bool are images and masks)
        else:  # a tensor: floating, integer and bool tensors are cast like numpy arrays
            name = bk.dtype_name(host)
            numeric = name.startswith(("float", "bfloat", "half", "int", "uint", "bool"))
            integer = name.startswith("int")
        if numeric and integer:
            integers.append(key)
        if not numeric:
            raise XaikitTypeError(
                f"model input {key!r} must hold floating-point values (integer and bool values are cast); got {describe(value)}"
            )
        shape = tuple(int(d) for d in host.shape)
        if len(shape) < 2:
            raise XaikitValueError(
                f"model input {key!r} must be a batch (batch, ...) with at least 2 axes; got "
                f"{describe(value)}. One unbatched sample: add the batch axis, e.g. x[None] "
                "(torch: x.unsqueeze(0)); one scalar feature per sample: x[:, None]"
            )
        if shape[0] == 0:
            raise XaikitValueError(
                f"model input {key!r} must be a non-empty batch (batch, ...); got {describe(value)}"
            )
        if len(shape) == 3 and layout.channels == 1:
            raise XaikitValueError(
                f"model input {key!r} is a batch of grayscale images without a channel axis, shape "
                f"{shape}, but the model's first convolution reads 1 channel: add one, e.g. x[:, None] "
                f"(channel-first) or x[..., None] (channel-last)"
            )
        if batch is not None and shape[0] != batch:
            raise XaikitValueError(
                f"all model inputs must have the same batch size; {keys[0]!r} has {batch}, {key!r} has "
                f"{shape[0]}: give every input one row per sample (an argument that is not one row per "
                "sample and is not explained goes in model_kwargs=)"
            )
        batch = shape[0]
        # a copy where the tensor would share the caller's memory: a model that writes its input
        # in place is refused after its first pass (the backend sees the write), the caller's array intact
        t = bk.unshared(bk.as_tensor(host, device, dtype), host)
        finite = bk.to_numpy(bk.reshape(bk.sample_sum(t * 0.0), (-1,)))
        if not np.all(np.isfinite(finite)):
            bad = [int(i) for i in np.flatnonzero(~np.isfinite(finite))[:5]]
            raise XaikitValueError(f"model input {key!r} holds NaN or infinite values (samples {bad})")
        how = model_move(shape, layout)
        if how is not None:
            t = bk.moveaxis(t, how[0], how[1])
        tensors.append(t)
        moves.append(how)
        if how is not None:
            axes.append(how[1])
        elif channel_axis is not None and len(shape) == 4:
            axes.append(channel_axis)
        else:
            axes.append(channel_axis_of(shape, bk.channel_first))
    kwargs = check_model_kwargs(bk, model_kwargs, int(batch or 0), device)
    return Inputs(
        bk, model, list(keys), tensors, axes, dtype, moves, compute, kwargs, cast_integers=tuple(integers)
    )


def call_error(inp: Inputs, exc: Exception) -> XaikitValueError:
    """The error for a model that cannot be called on the prepared inputs at all, in a few
    readable sentences: the shapes given, what the model expects (its declared input shapes and
    its channels, where the backend knows them), a hint for channel-less images and the
    ``model_kwargs`` passed, then what the model raised, on one line (the framework's traceback
    and any array dump left out: the original exception is chained)."""
    bk = inp.bk
    shapes = ", ".join(f"{k!r}: {tuple(int(d) for d in t.shape)}" for k, t in zip(inp.keys, inp.tensors))
    expects: list[str] = []
    declared = bk.input_shapes(inp.model)
    if declared:
        expects.append(
            "the model expects " + ", ".join(str(tuple(s)) for s in declared) + " (None: any size)"
        )
    layout = bk.model_layout(inp.model)
    if layout.channels is not None:
        for key, t in zip(inp.keys, inp.tensors):
            got = int(t.shape[layout.channel_axis]) if len(t.shape) == 4 else layout.channels
            if got != layout.channels:
                plural = "s" if got != 1 else ""
                expects.append(f"{key!r} has {got} channel{plural} where the model expects {layout.channels}")
    expected = "; " + " and ".join(expects) if expects else ""
    hint = ""
    rank3 = [tuple(int(d) for d in t.shape) for t in inp.tensors if len(t.shape) == 3]
    if rank3:
        hint = " " + rank3_hint(rank3[0], inp.bk.model_layout(inp.model).channels)
    if inp.kwargs:
        hint += f" model_kwargs passed: {_describe_kwargs(inp.kwargs)}."
    if inp.cast_integers:
        hint += (
            f" Model input(s) {list(inp.cast_integers)} came as integers and are explained as "
            f"{inp.dtype} (every method moves or replaces input values): a model that reads "
            "integer ids or indices (an nn.Embedding, a lookup) cannot be explained on them; "
            "explain it as a function of its embeddings (the embedding output as the model input)."
        )
    return XaikitValueError(
        f"the model could not be called on the model inputs ({shapes}){expected}; "
        f"check their shape and layout.{hint} The model raised {type(exc).__name__}: "
        f"{bk.error_text(exc)}"
    )


def rank3_hint(shape: tuple[int, ...], channels: int | None) -> str:
    """What a 3-D input that an image model cannot take most likely lacks: the batch axis of one
    (C, H, W) or (H, W, C) image (``x[None]``), or the channel axis of a batch of grayscale
    images (``x[:, None]``); both where the shape does not tell (``channels``: what the model's
    first convolution reads, None when unknown).

    Example:
        >>> rank3_hint((3, 32, 32), 3)
        'A (3, 32, 32) input looks like one image without its batch axis: add it, e.g. x[None] (torch: x.unsqueeze(0)).'
    """
    unbatched = (
        f"A {shape} input looks like one image without its batch axis: add it, e.g. x[None] "
        "(torch: x.unsqueeze(0))."
    )
    gray = (
        "A (batch, H, W) input is read as images without a channel axis: for grayscale images add "
        "one, e.g. x[:, None] (channel-first) or x[..., None] (channel-last)."
    )
    if channels is not None and channels > 1 and channels in (shape[0], shape[-1]):
        return unbatched
    if channels is None and (shape[0] in (3, 4) or shape[-1] in (3, 4)):
        return f"{gray} If it is one color image, add the batch axis instead, e.g. x[None]."
    return gray


def _describe_kwargs(kw: ModelKwargs) -> str:
    per = {k: f"per-sample {describe(v)}" for k, v in kw.per_sample.items()}
    fixed = {k: f"fixed {describe(v)}" for k, v in kw.fixed.items()}
    return ", ".join(f"{k!r}: {v}" for k, v in {**per, **fixed}.items())
