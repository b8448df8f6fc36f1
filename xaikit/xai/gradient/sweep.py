"""Saliency methods as parameters of the one fused sweep (see ``_engine``).

* vanilla gradients — Simonyan et al., 2013, https://arxiv.org/abs/1312.6034
* SmoothGrad — Smilkov et al., 2017, https://arxiv.org/abs/1706.03825
* Integrated Gradients — Sundararajan et al., 2017, https://arxiv.org/abs/1703.01365
* SmInt — SmoothGrad of Integrated Gradients (noise wrapped around IG)

Smoothing is a wrapper around any base method: it only sets the number of noisy copies S and
their noise level; the base method (plain gradient or a path integral) is unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from xaikit.backend import Backend, T
from xaikit.backend.base import working_dtype
from xaikit.checks import check_int, check_number
from xaikit.errors import XaikitError, XaikitTypeError, XaikitValueError, describe
from xaikit.layout import Move, channel_axis_of, model_move, move, move_back
from xaikit.xai._baselines import baseline_array, baseline_values, check_baseline
from xaikit.xai._blur import BlurPath, sigmas
from xaikit.xai._engine import DEFAULT_BUDGET, Job, check_memory_budget, endpoint_scores, stream_seed, sweep
from xaikit.xai._kwargs import ModelKwargs, check_model_kwargs
from xaikit.xai._quadrature import QUADRATURES
from xaikit.xai._quadrature import quadrature as quadrature_nodes
from xaikit.xai.registry import Call, Explained, Method, count, flag, non_negative, register_method


@dataclass
class Inputs:
    """Validated model inputs on the model's device, in the model's layout.

    ``moves`` says, per input, how its channel axis was moved to fit the model (see
    :mod:`xaikit.layout`; None: passed as given); :meth:`to_user` moves results back.
    ``channel_axes`` are the channel axes of ``tensors`` (the model's layout). ``dtype`` is the
    dtype the tensors, the rows built from them and the accumulators are held in: the model's
    compute dtype, or float32 for a float16/bfloat16 model (``compute_dtype``; the backend casts
    each chunk to it). ``kwargs`` are the call's checked ``model_kwargs``.
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
    never moved), and check ``model_kwargs`` (see :mod:`xaikit.xai._kwargs`)."""
    device = bk.model_device(model)
    compute = bk.model_dtype(model)
    dtype = working_dtype(compute)
    layout = bk.model_layout(model)
    tensors: list[T] = []
    axes: list[int | None] = []
    moves: list[Move | None] = []
    batch = None
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
        else:  # a tensor: floating, integer and bool tensors are cast like numpy arrays
            numeric = bk.dtype_name(host).startswith(("float", "bfloat", "half", "int", "uint", "bool"))
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
        t = bk.as_tensor(host, device, dtype)
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
    return Inputs(bk, model, list(keys), tensors, axes, dtype, moves, compute, kwargs)


def logits(inp: Inputs, output: int | str, chunk: int = 1024) -> T:
    """The explained model output for the clean inputs, forward only: (B, classes), or (B,) for a
    model that returns one score per row. An out-of-memory error halves ``chunk`` and goes on."""
    bk = inp.bk
    parts = []
    r0 = 0
    while r0 < inp.batch:
        rows = [t[r0 : r0 + chunk] for t in inp.tensors]
        kw = {"model_kwargs": inp.kwargs.rows(np.arange(r0, r0 + len(rows[0])))} if inp.kwargs else {}
        try:
            parts.append(bk.forward(inp.model, rows, output, **kw))
        except XaikitError:
            raise
        except Exception as exc:
            if bk.is_oom(exc):
                if chunk <= 1:
                    raise
                bk.empty_cache(bk.model_device(inp.model))
                chunk = max(1, min(chunk, inp.batch - r0) // 2)
                continue
            raise call_error(inp, exc) from exc
        r0 += int(rows[0].shape[0])
    return bk.cat(parts)


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
    """

    targets: T | None
    predictions: np.ndarray | None = None
    output: np.ndarray | None = None
    n_classes: int | None = None

    def host_targets(self, bk: Backend) -> np.ndarray | None:
        """The targets as int64 numpy (None when not pinned)."""
        return None if self.targets is None else np.asarray(bk.to_numpy(self.targets), dtype=np.int64)


def pin(
    inp: Inputs, target: Any, output: int | str = 0, *, predict: bool = True, in_pass: bool = False
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
            given classes and ``predict``, nothing is run and the targets are None.

    A model output of one score per row, (B,), is explained as class 0: ``target`` must be None
    or 0.
    """
    bk = inp.bk
    device = getattr(inp.tensors[0], "device", None)
    if target is None and in_pass and not predict:
        return Pinned(None)
    if target is not None and not predict:
        kw = {"model_kwargs": inp.kwargs.rows(np.arange(1))} if inp.kwargs else {}
        try:
            one = bk.forward(inp.model, [t[:1] for t in inp.tensors], output, **kw)
        except Exception:  # e.g. a model that binds per-sample values: the whole batch says why
            one = None
        if one is not None:
            n_classes = int(one.shape[1]) if len(one.shape) == 2 else 1
            classes = check_targets(bk, target, inp.batch, n_classes)
            return Pinned(bk.index(classes, device), None, bk.to_numpy(one), n_classes)
    scores = logits(inp, output)
    host = bk.to_numpy(scores)
    predictions = predictions_of(host)
    n_classes = int(scores.shape[1]) if len(scores.shape) == 2 else 1
    if target is None:
        classes = predictions if len(scores.shape) == 2 else np.zeros(inp.batch, dtype=np.int64)
    else:
        classes = check_targets(bk, target, inp.batch, n_classes)
    return Pinned(bk.index(classes, device), predictions, host, n_classes)


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


def check_targets(bk: Backend, target: Any, batch: int, n_classes: int) -> np.ndarray:
    """User-given classes as int64 (B,), checked against the batch and the class count."""
    host = np.asarray(bk.to_numpy(target) if bk.is_tensor(target) else target)
    if host.dtype.kind not in "iu" and not (host.dtype.kind == "f" and np.all(host == np.round(host))):
        raise XaikitTypeError(f"target must be integer class indices; got {describe(target)}")
    host = host.astype(np.int64).reshape(-1) if host.ndim <= 2 else host
    if host.ndim != 1 or host.size not in (1, batch):
        raise XaikitValueError(
            f"target must be one class or one class per sample ({batch}); got {describe(target)}"
        )
    if host.size == 1:
        host = np.full(batch, int(host[0]), dtype=np.int64)
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
    return host


def _baseline_fn(inp: Inputs, baseline: Any, seed: int) -> Any:
    bk = inp.bk
    specs: list[Any]
    if isinstance(baseline, Mapping):
        missing = [k for k in inp.keys if k not in baseline]
        if missing:
            raise XaikitValueError(
                f"baseline dict has no entry for model input(s) {missing}; got keys {sorted(baseline)}"
            )
        specs = [baseline[k] for k in inp.keys]
    elif isinstance(baseline, (list, tuple)) and len(inp.keys) > 1:
        if len(baseline) != len(inp.keys):
            raise XaikitValueError(
                f"baseline list must have one entry per model input ({len(inp.keys)}); got {len(baseline)}"
            )
        specs = list(baseline)
    else:
        specs = [baseline] * len(inp.keys)
    fixed: list[T | None] = []
    for key, spec, x, axis, how in zip(inp.keys, specs, inp.tensors, inp.channel_axes, inp.moves):
        check_baseline(spec)
        if isinstance(spec, str) and spec == "uniform":
            fixed.append(None)  # drawn per noise sample
            continue
        if isinstance(spec, str):
            values = baseline_values(bk.to_numpy(x), spec, axis, key)
        else:  # an array in the caller's layout
            arr = np.asarray(bk.to_numpy(spec) if bk.is_tensor(spec) else spec, dtype=np.float64)
            shape = tuple(int(d) for d in x.shape)
            values = move(baseline_array(arr, move_back(np.empty(shape), how).shape, key), how)
        fixed.append(bk.as_tensor(values, getattr(x, "device", None), inp.dtype))
    lows = [bk.sample_min(x) for x in inp.tensors]
    spans = [bk.sample_max(x) - lo for x, lo in zip(inp.tensors, lows)]

    def make(s: int) -> list[T]:
        out = []
        for i, (x, f) in enumerate(zip(inp.tensors, fixed)):
            if f is not None:
                out.append(f)
            else:
                u = bk.uniform(stream_seed(seed, 1, i, s), x.shape, getattr(x, "device", None), inp.dtype)
                out.append(lows[i] + spans[i] * u)
        return out

    return make


@dataclass
class Attribution:
    """Raw attributions (one numpy array per input, in the caller's layout), the completeness
    delta of IG-based methods (B,) when asked for, and the rows each chunk held."""

    arrays: list[np.ndarray]
    delta: np.ndarray | None
    chunks: list[int]
    layout: str


#: the noise samples (SmoothGrad, SmInt, VarGrad, Expected Gradients' draws) or IG path steps
#: when ``nsamples`` is not given; Input x Gradient and Blur IG are not smoothed unless asked
DEFAULT_NSAMPLES = 25
#: SmoothGrad noise level when smoothing is asked for and ``stdev_spread`` is not given
DEFAULT_SPREAD = 0.15


def attribute(
    inp: Inputs,
    targets: T,
    method: str,
    *,
    nsamples: int | None = None,
    nintegration: int | None = None,
    stdev_spread: float | None = None,
    magnitude: bool | None = None,
    baseline: Any = None,
    quadrature: str = "gausslegendre",
    steps: int = 100,
    max_sigma: float = 50.0,
    grad_step: float = 0.01,
    sqrt: bool = False,
    seed: int = 0,
    max_batch: int | str = "auto",
    output: int | str = 0,
    with_delta: bool = False,
    xla: bool = False,
    memory_budget: int | float = DEFAULT_BUDGET,
) -> Attribution:
    """Run one sweep method on validated inputs and return raw, signed attributions.

    ``nsamples`` is the number of noise samples (SmoothGrad, SmInt, VarGrad; Input x Gradient
    and Blur IG smoothed when > 1), of baseline draws (Expected Gradients) or of path steps
    (Integrated Gradients); ``nintegration`` the path steps of SmInt (and of VarGrad over IG).
    ``stdev_spread`` is the noise level (a fraction of each sample's value range; default 0.15
    where noise is drawn, 0 for Expected Gradients). ``magnitude`` averages squared per-path
    attributions (default: True for SmoothGrad and SmInt, as PAIR; False otherwise). ``baseline``
    is IG's path start (default ``"uniform"``) or Expected Gradients' reference set (an array of
    N samples; default: the batch itself). ``steps``, ``max_sigma``, ``grad_step`` and ``sqrt``
    are Blur IG's (see :mod:`xaikit.xai._blur`). ``memory_budget`` caps the rows of a
    ``max_batch="auto"`` chunk (bytes, or a fraction of the available memory; see
    :class:`xaikit.xai._engine.ChunkPlan`).
    """
    if method not in SWEEP:
        raise XaikitError(f"internal error: {method!r} is not a sweep method ({', '.join(SWEEP)})")
    memory_budget = check_memory_budget(memory_budget)
    bk = inp.bk
    job = Job(
        bk=bk,
        model=inp.model,
        inputs=inp.tensors,
        targets=targets,
        seed=seed,
        output=output,
        max_batch=max_batch,
        dtype=inp.dtype,
        xla=bool(xla),
        model_kwargs=inp.kwargs,
    )
    smoothed = method in ("smoothgrad", "smint", "vargrad")
    if method in ("input_x_gradient", "blur_ig"):  # smoothed only when asked
        smoothed = (nsamples is not None and nsamples != 1) or bool(stdev_spread)
    if method == "expected_gradients":
        smoothed = bool(stdev_spread)
    n_default = 1 if method in ("input_x_gradient", "blur_ig") else DEFAULT_NSAMPLES
    n_noise = check_int(n_default if nsamples is None else nsamples, "nsamples", 1)
    if magnitude is not None and not isinstance(magnitude, (bool, np.bool_)):
        raise XaikitTypeError(f"magnitude must be True or False; got {describe(magnitude)}")
    if method == "vargrad" and magnitude:
        raise XaikitValueError(
            "magnitude=True squares each attribution; VarGrad is their variance: leave it out"
        )
    job.magnitude = bool(method in ("smoothgrad", "smint") if magnitude is None else magnitude)
    job.variance = method == "vargrad"
    if smoothed or method == "expected_gradients":
        job.n_noise = n_noise
    if smoothed:
        spread = DEFAULT_SPREAD if stdev_spread is None else stdev_spread
        check_number(spread, "stdev_spread", low=0)
        job.sigma = [float(spread) * (bk.sample_max(x) - bk.sample_min(x)) for x in inp.tensors]
    ig_steps = {"integrated": nsamples, "smint": nintegration, "vargrad": nintegration}.get(method)
    if method in ("integrated", "smint") or (method == "vargrad" and nintegration is not None):
        name = "nsamples" if method == "integrated" else "nintegration"
        m = check_int(DEFAULT_NSAMPLES if ig_steps is None else ig_steps, name, 1)
        _check_quadrature(quadrature)
        job.alphas, job.weights = quadrature_nodes(quadrature, m)
        spec = "uniform" if baseline is None else baseline
        if not isinstance(spec, (Mapping, list, tuple)):
            check_baseline(spec)
        job.baselines = _baseline_fn(inp, spec, seed)
    elif method == "input_x_gradient":  # the gradient at the end of a one-step path from zero
        job.alphas, job.weights = np.ones(1), np.ones(1)
        job.baselines = _baseline_fn(inp, "zeros", seed)
    elif method == "expected_gradients":
        job.alphas, job.weights = np.ones(1), np.ones(1)
        job.baselines, job.row_alpha = _reference_draws(inp, baseline, seed)
    elif method == "blur_ig":
        path = _blur_path(inp, steps, max_sigma, grad_step, sqrt)
        job.path, job.path_steps, job.path_base = path, path.steps, path.baseline
    result = sweep(job, memory_budget)
    delta = None
    if with_delta and SWEEP[method].delta and not job.magnitude:
        f_end, f_base = endpoint_scores(job, max(result.chunks))
        gap = bk.sum0(f_end - f_base) / float(job.n_noise)
        total = sum(bk.sample_sum(a) for a in result.attributions)
        delta = bk.to_numpy(total - gap).astype(np.float64)
    arrays = inp.to_user([bk.to_numpy(a) for a in result.attributions])
    return Attribution(arrays, delta, result.chunks, result.layout)


def _reference_draws(inp: Inputs, references: Any, seed: int) -> tuple[Any, Any]:
    """Expected Gradients' draws: ``(baselines(s), factors(s))``, for noise sample s one
    reference row per sample (uniform over the N references) and one position on the straight
    path from it to the input (uniform in [0, 1)), both from the call's seed alone (so results do
    not depend on the chunking). ``references`` is an array of N samples (caller's layout), a
    list of them for several inputs, or None (the batch itself)."""
    bk = inp.bk
    if references is None:
        refs = list(inp.tensors)
    else:
        given = (
            list(references) if isinstance(references, (list, tuple)) and len(inp.keys) > 1 else [references]
        )
        if len(given) != len(inp.keys):
            raise XaikitValueError(
                f"baseline (the reference set of expected_gradients) must have one array per model "
                f"input ({len(inp.keys)}); got {len(given)}"
            )
        refs = []
        for key, ref, x, how in zip(inp.keys, given, inp.tensors, inp.moves):
            if isinstance(ref, str) or ref is None:
                raise XaikitTypeError(
                    f"baseline of expected_gradients must be an array of reference samples (N, ...) "
                    f"for model input {key!r}; got {describe(ref)}"
                )
            arr = np.asarray(bk.to_numpy(ref) if bk.is_tensor(ref) else ref, dtype=np.float64)
            want = move_back(np.empty((1, *(int(d) for d in x.shape[1:]))), how).shape[1:]
            if arr.ndim != len(want) + 1 or arr.shape[1:] != want or arr.shape[0] < 1:
                raise XaikitValueError(
                    f"baseline of expected_gradients must be reference samples shaped (N, "
                    f"{', '.join(map(str, want))}) like model input {key!r}'s samples; got {describe(ref)}"
                )
            if not np.all(np.isfinite(arr)):
                raise XaikitValueError(
                    f"baseline of expected_gradients holds NaN or infinite values ({key!r})"
                )
            refs.append(bk.as_tensor(move(arr, how), getattr(x, "device", None), inp.dtype))
    n_refs, batch = int(refs[0].shape[0]), inp.batch
    device = getattr(inp.tensors[0], "device", None)

    def draw(s: int) -> tuple[np.ndarray, np.ndarray]:
        rng = np.random.default_rng(stream_seed(seed, 2, s))
        return rng.integers(n_refs, size=batch), rng.uniform(size=batch)

    def baselines(s: int) -> list[T]:
        idx = bk.index(draw(s)[0], device)
        return [bk.gather(r, idx) for r in refs]

    return baselines, lambda s: draw(s)[1]


def _blur_path(inp: Inputs, steps: Any, max_sigma: Any, grad_step: Any, sqrt: Any) -> BlurPath:
    """Blur IG's path over the inputs' spatial axes (images only), options checked."""
    steps = check_int(steps, "steps", 1)
    check_number(max_sigma, "max_sigma", low=0)
    check_number(grad_step, "grad_step", low=0)
    if not float(max_sigma) > 0 or not float(grad_step) > 0:
        raise XaikitValueError(
            f"max_sigma and grad_step of blur_ig must be > 0; got max_sigma={max_sigma!r}, grad_step={grad_step!r}"
        )
    if not isinstance(sqrt, (bool, np.bool_)):
        raise XaikitTypeError(f"sqrt must be True or False; got {describe(sqrt)}")
    axes = []
    for key, x, axis in zip(inp.keys, inp.tensors, inp.channel_axes):
        nd = len(x.shape)
        spatial = [a for a in range(1, nd) if a != axis]
        if nd not in (3, 4) or len(spatial) != 2:
            raise XaikitValueError(
                f"blur_ig blurs images: model input {key!r} must be (B, C, H, W), (B, H, W, C) or "
                f"(B, H, W); got shape {tuple(int(d) for d in x.shape)}"
            )
        axes.append((spatial[0], spatial[1]))
    device = getattr(inp.tensors[0], "device", None)
    return BlurPath(
        inp.bk, axes, sigmas(float(max_sigma), steps, bool(sqrt)), float(grad_step), device, inp.dtype
    )


# ---- the sweep methods: records and their runner ---------------------------------------------------
def _check_quadrature(value: Any) -> None:
    if not isinstance(value, str) or value not in QUADRATURES:
        raise XaikitValueError(
            f"quadrature must be one of {', '.join(map(repr, QUADRATURES))}; got {value!r}"
        )


def check_sweep_options(options: dict[str, Any]) -> None:
    """The values of a sweep method's options that can be told without a model: counts are ints
    >= 1, ``stdev_spread`` and Blur IG's sigmas are numbers >= 0, flags are bools, ``quadrature``
    a known rule (a baseline is checked against the inputs when the method runs)."""
    for key in ("nsamples", "nintegration", "steps"):
        count(options.get(key), key)
    for key in ("stdev_spread", "max_sigma", "grad_step"):
        non_negative(options.get(key), key)
    for key in ("magnitude", "sqrt"):
        flag(options.get(key), key)
    if "quadrature" in options:
        _check_quadrature(options["quadrature"])


def run_sweep(call: Call, **options: Any) -> Explained:
    """The runner of every sweep method: one :func:`attribute` call."""
    result = attribute(
        call.inp,
        call.targets,  # type: ignore[arg-type]  # sweep methods are pinned
        call.method.name,
        seed=call.seed,
        max_batch=call.max_batch,
        memory_budget=call.memory_budget,
        output=call.output,
        with_delta=call.with_delta,
        xla=call.xla,
        **options,
    )
    return Explained(result.arrays, result.delta, result.chunks)


#: the options of the four core methods: one list for all four, as the reference had it
_CORE = {
    "nsamples": None,
    "nintegration": None,
    "stdev_spread": None,
    "magnitude": None,
    "baseline": None,
    "quadrature": "gausslegendre",
}
_SMOOTH = {"nsamples": None, "stdev_spread": None, "magnitude": None}


def _sweep(name: str, title: str, options: dict[str, Any], **facts: Any) -> Method:
    return register_method(
        Method(name, "gradient", title, run_sweep, options, check=check_sweep_options, **facts)
    )


#: the methods of one precomputed sweep (:func:`attribute`), by name
SWEEP: dict[str, Method] = {
    m.name: m
    for m in (
        _sweep(
            "vanilla",
            "Vanilla",
            _CORE,
            aliases=("gradient", "gradients", "saliency"),
            core=True,
            summary="d score / d input at the input: what moves the score locally",
            reference="Simonyan et al., 2013, https://arxiv.org/abs/1312.6034",
        ),
        _sweep(
            "smoothgrad",
            "Smoothed",
            _CORE,
            aliases=("SmoothGrad",),
            core=True,
            noise=True,
            summary="gradients averaged over noisy copies: the local sensitivity without its noise",
            reference="Smilkov et al., 2017, https://arxiv.org/abs/1706.03825",
        ),
        _sweep(
            "integrated",
            "Integrated",
            _CORE,
            aliases=("ig", "integrated_gradients"),
            core=True,
            noise=True,
            delta=True,
            summary="gradients along a path from a baseline, times the difference: sums to f(x) - f(baseline)",
            reference="Sundararajan et al., 2017, https://arxiv.org/abs/1703.01365",
        ),
        _sweep(
            "smint",
            "SmInt",
            {**_CORE, "nsamples": 8, "nintegration": 50},
            aliases=("smoothgrad_ig",),
            core=True,
            noise=True,
            delta=True,
            summary="Integrated Gradients averaged over noisy copies (SmoothGrad of IG)",
        ),
        _sweep(
            "vargrad",
            "VarGrad",
            {
                "nsamples": None,
                "stdev_spread": None,
                "nintegration": None,
                "baseline": None,
                "quadrature": "gausslegendre",
            },
            aliases=("var_grad",),
            noise=True,
            summary="the variance of noisy gradients: where the explanation is unstable",
            reference="Adebayo et al., 2018, https://arxiv.org/abs/1810.03307",
        ),
        _sweep(
            "input_x_gradient",
            "Input×Gradient",
            _SMOOTH,
            aliases=("inputxgradient", "input_times_gradient", "gradient_x_input", "gradientxinput"),
            summary="x times d score / d x: a first-order share of the score per element",
            reference="Shrikumar et al., 2016, https://arxiv.org/abs/1605.01713",
        ),
        _sweep(
            "expected_gradients",
            "Expected Gradients",
            {"nsamples": None, "stdev_spread": None, "baseline": None},
            aliases=("expectedgradients", "gradientshap", "gradient_shap"),
            noise=True,
            delta=True,
            summary="IG from reference samples at random path points: Shapley values in expectation",
            reference="Erion et al., 2021, https://arxiv.org/abs/1906.10670",
        ),
        _sweep(
            "blur_ig",
            "Blur IG",
            {"steps": 100, "max_sigma": 50.0, "grad_step": 0.01, "sqrt": False, **_SMOOTH},
            aliases=("blurig", "blur_integrated_gradients"),
            delta=True,
            summary="IG along a path of blurred images: no baseline to choose",
            reference="Xu et al., 2020, https://arxiv.org/abs/2004.03383",
        ),
    )
}
