"""The sweep methods of the gradient family: parameters of the one fused sweep
(:mod:`xaikit.xai._engine.sweep`), their runner and their records.

* vanilla gradients — Simonyan et al., 2013, https://arxiv.org/abs/1312.6034
* SmoothGrad — Smilkov et al., 2017, https://arxiv.org/abs/1706.03825
* Integrated Gradients — Sundararajan et al., 2017, https://arxiv.org/abs/1703.01365
* SmInt — SmoothGrad of Integrated Gradients (noise wrapped around IG)
* VarGrad, Input x Gradient, Expected Gradients and Blur IG: the same sweep with other
  parameters (see :func:`attribute` and ``docs/gradient_methods.md``)

Smoothing is a wrapper around any base method: it only sets the number of noisy copies S and
their noise level; the base method (plain gradient or a path integral) is unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from xaikit.backend import T
from xaikit.checks import check_choice, check_int, check_number
from xaikit.errors import XaikitError, XaikitTypeError, XaikitValueError, describe
from xaikit.layout import move, move_back
from xaikit.xai._engine.baselines import baseline_array, baseline_values, check_baseline, real_array
from xaikit.xai._engine.blur import BlurPath, sigmas
from xaikit.xai._engine.inputs import Inputs
from xaikit.xai._engine.job import Job
from xaikit.xai._engine.plan import check_memory_budget
from xaikit.xai._engine.quadrature import QUADRATURES
from xaikit.xai._engine.quadrature import quadrature as quadrature_nodes
from xaikit.xai._engine.seeds import stream_seed
from xaikit.xai._engine.sweep import endpoint_scores, sweep
from xaikit.xai.registry import (
    Call,
    CallSettings,
    Explained,
    Method,
    count,
    flag,
    non_negative,
    register_method,
)


def baseline_fn(inp: Inputs, baseline: Any, seed: int) -> Any:
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
            arr = bk.to_numpy(spec) if bk.is_tensor(spec) else spec  # baseline_array checks and casts
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
    settings: CallSettings,
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
    with_delta: bool = False,
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
    are Blur IG's (see :mod:`xaikit.xai._engine.blur`). The call's ``settings``: its seed, output,
    XLA flag, ``max_batch`` and ``memory_budget``, which caps the rows of a ``max_batch="auto"``
    chunk (bytes, or a fraction of the available memory; see
    :class:`xaikit.xai._engine.plan.ChunkPlan`); its target object (``settings.target``, a
    :class:`xaikit.targets.Bound`) is differentiated instead of the class scores (``targets``
    then holds each sample's index).
    """
    if method not in SWEEP:
        raise XaikitError(f"internal error: {method!r} is not a sweep method ({', '.join(SWEEP)})")
    memory_budget = check_memory_budget(settings.memory_budget)
    seed = settings.seed
    bk = inp.bk
    job = Job.over(inp, targets, settings)
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
        job.baselines = baseline_fn(inp, spec, seed)
    elif method == "input_x_gradient":  # the gradient at the end of a one-step path from zero
        job.alphas, job.weights = np.ones(1), np.ones(1)
        job.baselines = baseline_fn(inp, "zeros", seed)
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


def reference_set(
    inp: Inputs, references: Any, option: str = "baseline", method: str = "expected_gradients"
) -> list[T]:
    """The reference samples of each model input, (N, ...) in the model's layout on its device:
    ``references`` checked (an array of N samples in the caller's layout, or already in the
    model's when the inputs were moved to it; a list of them for several inputs), or the batch
    itself (None). ``option`` and ``method`` name them in the
    messages (Expected Gradients' ``baseline``, DeepLiftShap's ``baselines``)."""
    bk = inp.bk
    if references is None:
        return list(inp.tensors)
    given = list(references) if isinstance(references, (list, tuple)) and len(inp.keys) > 1 else [references]
    if len(given) != len(inp.keys):
        raise XaikitValueError(
            f"{option} (the reference set of {method}) must have one array per model "
            f"input ({len(inp.keys)}); got {len(given)}"
        )
    refs = []
    for key, ref, x, how in zip(inp.keys, given, inp.tensors, inp.moves):
        if isinstance(ref, str) or ref is None:
            raise XaikitTypeError(
                f"{option} of {method} must be an array of reference samples (N, ...) "
                f"for model input {key!r}; got {describe(ref)}"
            )
        arr = real_array(bk.to_numpy(ref) if bk.is_tensor(ref) else ref, f"{option} of {method} ({key!r})")
        own = tuple(int(d) for d in x.shape[1:])  # the model's layout
        want = move_back(np.empty((1, *own)), how).shape[1:]  # the caller's
        if arr.ndim != len(want) + 1 or arr.shape[0] < 1 or arr.shape[1:] not in (want, own):
            raise XaikitValueError(
                f"{option} of {method} must be reference samples shaped (N, "
                f"{', '.join(map(str, want))}) like model input {key!r}'s samples; got {describe(ref)}"
            )
        if not np.all(np.isfinite(arr)):
            raise XaikitValueError(f"{option} of {method} holds NaN or infinite values ({key!r})")
        if arr.shape[1:] == want:  # the caller's layout (which the model's may equal)
            arr = move(arr, how)
        refs.append(bk.as_tensor(arr, getattr(x, "device", None), inp.dtype))
    sizes = [int(r.shape[0]) for r in refs]
    if len(set(sizes)) > 1:
        raise XaikitValueError(
            f"{option} of {method} must hold the same number of reference samples N for every model "
            f"input (reference n of each input is one sample); got N = {sizes}"
        )
    return refs


def _reference_draws(inp: Inputs, references: Any, seed: int) -> tuple[Any, Any]:
    """Expected Gradients' draws: ``(baselines(s), factors(s))``, for noise sample s one
    reference row per sample (uniform over the N references) and one position on the straight
    path from it to the input (uniform in [0, 1)), both from the call's seed alone (so results do
    not depend on the chunking). ``references`` is an array of N samples (caller's layout), a
    list of them for several inputs, or None (the batch itself): :func:`reference_set`."""
    bk = inp.bk
    refs = reference_set(inp, references)
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
    check_choice(value, "quadrature", QUADRATURES)


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


def _check_vargrad(options: dict[str, Any]) -> None:
    """VarGrad's options: those of every sweep method, and a path's ``baseline`` and
    ``quadrature`` only with ``nintegration`` (VarGrad of IG); without it they would be unused."""
    check_sweep_options(options)
    if options.get("nintegration") is None:
        unused = [k for k in ("baseline", "quadrature") if options.get(k) is not None]
        if unused:
            raise XaikitTypeError(
                f"vargrad got {', '.join(unused)} without nintegration: they set the path of VarGrad "
                "of Integrated Gradients; pass nintegration= (its steps) too, or leave them out "
                "for VarGrad of plain gradients"
            )


def run_sweep(call: Call, **options: Any) -> Explained:
    """The runner of every sweep method: one :func:`attribute` call."""
    result = attribute(
        call.inp,
        call.targets,  # type: ignore[arg-type]  # sweep methods are pinned
        call.method.name,
        call.settings(),
        with_delta=call.with_delta,
        **options,
    )
    return Explained(result.arrays, result.delta, result.chunks)


#: the options of the sweep methods: each method lists the ones it reads, so that an option it
#: would ignore (``nsamples`` of vanilla, ``stdev_spread`` of IG, ``nintegration`` of SmoothGrad,
#: which SmInt reads) is refused with the methods that take it instead of dropped without a word
_SMOOTH = {"nsamples": None, "stdev_spread": None, "magnitude": None}
_PATH = {"baseline": None, "quadrature": "gausslegendre"}
_CORE = {"nsamples": None, "nintegration": None, "stdev_spread": None, "magnitude": None, **_PATH}


def _sweep(name: str, title: str, options: dict[str, Any], **facts: Any) -> Method:
    facts.setdefault("check", check_sweep_options)
    return register_method(Method(name, "gradient", title, run_sweep, options, target_objects=True, **facts))


#: the methods of one precomputed sweep (:func:`attribute`), by name
SWEEP: dict[str, Method] = {
    m.name: m
    for m in (
        _sweep(
            "vanilla",
            "Vanilla",
            {"magnitude": None},
            aliases=("gradient", "gradients", "saliency"),
            core=True,
            units="gradient",
            summary="d score / d input at the input: what moves the score locally",
            reference="Simonyan et al., 2013, https://arxiv.org/abs/1312.6034",
        ),
        _sweep(
            "smoothgrad",
            "Smoothed",
            _SMOOTH,
            aliases=("SmoothGrad",),
            core=True,
            noise=True,
            units="gradient",
            summary="gradients averaged over noisy copies: the local sensitivity without its noise",
            reference="Smilkov et al., 2017, https://arxiv.org/abs/1706.03825",
        ),
        _sweep(
            "integrated",
            "Integrated",
            {"nsamples": None, "magnitude": None, **_PATH},
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
            check=_check_vargrad,
            noise=True,
            units="none",  # a variance: resolved exactly while tiny next to the score (a near-linear model)
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
