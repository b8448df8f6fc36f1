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

from xaikit.backend import Backend
from xaikit.backend._base import T
from xaikit.errors import XaikitError, XaikitTypeError, XaikitValueError, describe
from xaikit.xai._baselines import baseline_array, check_baseline, gaussian_blur, spatial_axes
from xaikit.xai._display import channel_axis_of
from xaikit.xai._engine import Job, endpoint_scores, stream_seed, sweep
from xaikit.xai._quadrature import QUADRATURES, quadrature

METHODS = ("vanilla", "smoothgrad", "integrated", "smint")
_ALIASES = {
    "gradient": "vanilla",
    "gradients": "vanilla",
    "saliency": "vanilla",
    "ig": "integrated",
    "integrated_gradients": "integrated",
    "smoothgrad_ig": "smint",
}


def canonical_method(method: str) -> str:
    """The canonical name of a method (``"ig"`` -> ``"integrated"``), or a clear error."""
    name = _ALIASES.get(method, method) if isinstance(method, str) else method
    if name not in METHODS:
        raise XaikitValueError(f"method must be one of {', '.join(map(repr, METHODS))}; got {method!r}")
    return str(name)


@dataclass
class Inputs:
    """Validated model inputs on the model's device."""

    bk: Backend
    model: Any
    keys: list[str]
    tensors: list[T]
    channel_axes: list[int | None]
    dtype: str

    @property
    def batch(self) -> int:
        return int(self.tensors[0].shape[0])


def prepare(
    bk: Backend, model: Any, values: Sequence[Any], keys: Sequence[str], channel_axis: int | None = None
) -> Inputs:
    """Check the inputs (floating, finite, same non-zero batch size) and move them to the device."""
    device = bk.model_device(model)
    dtype = bk.model_dtype(model)
    tensors, axes = [], []
    batch = None
    for key, value in zip(keys, values):
        if value is None or isinstance(value, (str, bytes, Mapping)):
            raise XaikitTypeError(f"model input {key!r} must be an array or tensor; got {describe(value)}")
        host = value if bk.is_tensor(value) else np.asarray(value)
        kind = str(getattr(getattr(host, "dtype", None), "kind", ""))
        is_float = kind == "f" if isinstance(host, np.ndarray) else "float" in bk.dtype_name(host)
        if not is_float and not (isinstance(host, np.ndarray) and kind and kind in "iub"):
            raise XaikitTypeError(
                f"model input {key!r} must hold floating-point values; got {describe(value)}"
            )
        shape = tuple(int(d) for d in host.shape)
        if len(shape) < 2 or shape[0] == 0:
            raise XaikitValueError(
                f"model input {key!r} must be a non-empty batch (batch, ...) with at least 2 axes; "
                f"got {describe(value)}"
            )
        if batch is not None and shape[0] != batch:
            raise XaikitValueError(
                f"all model inputs must have the same batch size; {keys[0]!r} has {batch}, {key!r} has {shape[0]}"
            )
        batch = shape[0]
        t = bk.as_tensor(host, device, dtype)
        finite = bk.to_numpy(bk.reshape(bk.sample_sum(t * 0.0), (-1,)))
        if not np.all(np.isfinite(finite)):
            bad = [int(i) for i in np.flatnonzero(~np.isfinite(finite))[:5]]
            raise XaikitValueError(f"model input {key!r} holds NaN or infinite values (samples {bad})")
        tensors.append(t)
        axes.append(
            channel_axis
            if channel_axis is not None and len(shape) == 4
            else channel_axis_of(shape, bk.channel_first)
        )
    return Inputs(bk, model, list(keys), tensors, axes, dtype)


def logits(inp: Inputs, output: int | str, chunk: int = 1024) -> T:
    """The explained model output (B, classes) for the clean inputs, forward only."""
    bk = inp.bk
    parts = []
    for r0 in range(0, inp.batch, chunk):
        rows = [t[r0 : r0 + chunk] for t in inp.tensors]
        try:
            parts.append(bk.forward(inp.model, rows, output))
        except XaikitError:
            raise
        except Exception as exc:
            if bk.is_oom(exc):
                raise
            shapes = ", ".join(
                f"{k!r}: {tuple(int(d) for d in t.shape)}" for k, t in zip(inp.keys, inp.tensors)
            )
            raise XaikitValueError(
                f"the model could not be called on the model inputs ({shapes}); "
                f"check their shape and layout. The model raised {type(exc).__name__}: {exc}"
            ) from exc
    return bk.cat(parts)


def resolve_targets(inp: Inputs, target: Any, n_classes: int | None) -> T:
    """Per-sample target classes as an int64 (B,) tensor; -1 = predicted class (vanilla only)."""
    bk, B = inp.bk, inp.batch
    device = getattr(inp.tensors[0], "device", None)
    if target is None:
        return bk.index(np.full(B, -1, dtype=np.int64), device)
    host = np.asarray(bk.to_numpy(target) if bk.is_tensor(target) else target)
    if host.dtype.kind not in "iu" and not (host.dtype.kind == "f" and np.all(host == np.round(host))):
        raise XaikitTypeError(f"target must be integer class indices; got {describe(target)}")
    host = host.astype(np.int64).reshape(-1) if host.ndim <= 2 else host
    if host.ndim != 1 or host.size not in (1, B):
        raise XaikitValueError(
            f"target must be one class or one class per sample ({B}); got {describe(target)}"
        )
    if host.size == 1:
        host = np.full(B, int(host[0]), dtype=np.int64)
    if n_classes is not None and (host.min() < 0 or host.max() >= n_classes):
        raise XaikitValueError(
            f"target classes must lie in [0, {n_classes - 1}] for a model with {n_classes} outputs; "
            f"got values {sorted(set(host.tolist()))[:10]}"
        )
    return bk.index(host, device)


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
    for key, spec, x, axis in zip(inp.keys, specs, inp.tensors, inp.channel_axes):
        if isinstance(spec, str) or spec is None:
            check_baseline(spec)
        device = getattr(x, "device", None)
        if isinstance(spec, str):
            if spec == "zeros":
                fixed.append(x * 0.0)
            elif spec == "black":
                fixed.append(x * 0.0 + bk.sample_min(x))
            elif spec == "blur":
                host = bk.to_numpy(x)
                axes = spatial_axes(host.ndim, axis if axis is None else axis % host.ndim)
                sigma = max(1.0, max(host.shape[a] for a in axes) / 8.0) if axes else 0.0
                fixed.append(bk.as_tensor(gaussian_blur(host, sigma, axes), device, inp.dtype))
            else:
                fixed.append(None)  # uniform: drawn per noise sample
        else:
            arr = bk.to_numpy(spec) if bk.is_tensor(spec) else spec
            fixed.append(
                bk.as_tensor(baseline_array(arr, tuple(int(d) for d in x.shape), key), device, inp.dtype)
            )
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


def _positive_int(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise XaikitValueError(f"{name} must be an integer >= 1; got {value!r}")
    return int(value)


@dataclass
class Attribution:
    """Raw attributions (one numpy array per input), the completeness delta of IG-based
    methods (B,) when asked for, and the rows each chunk held."""

    arrays: list[np.ndarray]
    delta: np.ndarray | None
    chunks: list[int]
    layout: str


def attribute(
    inp: Inputs,
    targets: T,
    method: str,
    *,
    nsamples: int = 25,
    nintegration: int | None = None,
    stdev_spread: float = 0.15,
    magnitude: bool = True,
    baseline: Any = "uniform",
    quadrature_rule: str = "gausslegendre",
    seed: int = 0,
    max_batch: int | str = "auto",
    output: int | str = 0,
    with_delta: bool = False,
) -> Attribution:
    """Run one method on validated inputs and return raw, signed attributions.

    ``nsamples`` is the number of noise samples (SmoothGrad, SmInt) or of path steps
    (Integrated Gradients); ``nintegration`` the path steps of SmInt.
    """
    method = canonical_method(method)
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
    )
    if method in ("smoothgrad", "smint"):
        job.n_noise = _positive_int(nsamples, "nsamples")
        if (
            isinstance(stdev_spread, bool)
            or not isinstance(stdev_spread, (int, float))
            or not np.isfinite(stdev_spread)
            or stdev_spread < 0
        ):
            raise XaikitValueError(f"stdev_spread must be a finite number >= 0; got {stdev_spread!r}")
        job.sigma = [float(stdev_spread) * (bk.sample_max(x) - bk.sample_min(x)) for x in inp.tensors]
        job.magnitude = bool(magnitude)
    if method in ("integrated", "smint"):
        steps = _positive_int(
            nsamples if method == "integrated" else nintegration,
            "nsamples" if method == "integrated" else "nintegration",
        )
        if not isinstance(quadrature_rule, str) or quadrature_rule not in QUADRATURES:
            raise XaikitValueError(
                f"quadrature must be one of {', '.join(map(repr, QUADRATURES))}; got {quadrature_rule!r}"
            )
        job.alphas, job.weights = quadrature(quadrature_rule, steps)
        check_baseline(baseline) if isinstance(baseline, str) or baseline is None else None
        job.baselines = _baseline_fn(inp, baseline, seed)
    result = sweep(job)
    delta = None
    if with_delta and job.alphas is not None and not job.magnitude:
        f_end, f_base = endpoint_scores(job, max(result.chunks))
        gap = bk.sum0(f_end - f_base) / float(job.n_noise)
        total = sum(bk.sample_sum(a) for a in result.attributions)
        delta = bk.to_numpy(total - gap).astype(np.float64)
    arrays = [bk.to_numpy(a) for a in result.attributions]
    return Attribution(arrays, delta, result.chunks, result.layout)
