"""Robustness: does the explanation stay put when the input barely moves?

* :func:`max_sensitivity`, :func:`avg_sensitivity` (Yeh et al., "On the (In)fidelity and
  Sensitivity of Explanations", NeurIPS 2019, https://arxiv.org/abs/1901.09392): the largest
  (mean) relative change ``||Φ(x + δ) - Φ(x)|| / ||Φ(x)||`` of the map over ``nsamples`` copies of
  the input with uniform noise ``δ`` in ``[-radius, radius]`` on every element.
* :func:`local_lipschitz` (Alvarez-Melis & Jaakkola, "On the Robustness of Interpretability
  Methods", 2018, https://arxiv.org/abs/1806.08049): the largest ratio
  ``||Φ(x') - Φ(x)|| / ||x' - x||`` over ``nsamples`` copies ``x' = x + δ`` with Gaussian noise
  ``δ ~ N(0, stdev²)``.

Lower is better for all three. Norms are Frobenius norms of the whole map (every element of
every channel). The class explained is the same for the clean input and all of its perturbed
copies: ``target`` or, by default, the model's prediction on the clean input.

All perturbed copies are explained together: the ``nsamples x B`` perturbed rows are stacked
and explained by one call of :func:`xaikit.xai.explain` (its fused, chunked engine), in groups of
whole noise samples when the stack would be large (see :data:`GROUP_BYTES`), never one call per
noise sample.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from xaikit.backend import get_backend
from xaikit.backend.outputs import check_output
from xaikit.checks import check_int, check_number
from xaikit.errors import XaikitTypeError, XaikitValueError, describe
from xaikit.evaluate._common import (
    PerSample,
    check_bool,
    check_method_options,
    host,
    input_layout,
    tile_object,
)
from xaikit.evaluate._conventions import check_method, public
from xaikit.evaluate._options import BaseRunOptions, RunSettings, Unpack
from xaikit.xai.internal import check_max_batch, pin, prepare

__all__ = [
    "GROUP_BYTES",
    "Explained",
    "LipschitzResult",
    "SensitivityResult",
    "avg_sensitivity",
    "explain_copies",
    "local_lipschitz",
    "max_sensitivity",
]

#: host memory (bytes) a group of perturbed copies may take (their inputs and maps here and in
#: the engine, about 24 bytes per element): ``nsamples x B`` rows are explained in one call
#: when they fit, else in groups of whole noise samples
GROUP_BYTES = 512 << 20

_RESERVED = {
    "target": "the target argument",
    "method": "the method argument",
    "seed": "the seed argument",
    "max_batch": "the max_batch argument",
    "output": "the output argument",
    "framework": "the framework argument",
    "model_kwargs": "nothing: models with extra keyword arguments are not supported here",
    "return_delta": "nothing: the robustness metrics compare maps only",
    "raw": "nothing: the robustness metrics compare the maps themselves",
}

#: the positional parameters of the robustness metrics before the options became keyword-only
_OLD_ORDER = ("model", "x", "method", "target")

#: draws perturbed copies k0..k1-1 of the batch: (k1 - k0, B, ...) numpy
Perturb = Callable[[int, int], np.ndarray]


@dataclass
class SensitivityResult(PerSample):
    """Max- or average-sensitivity of a method's maps, per sample. Lower is better.

    Attributes:
        kind: ``"max"`` or ``"avg"``.
        scores: (B,) float64 the maximum (mean) of ``ratios`` over the noise samples; NaN for a
            sample whose clean map is all zeros (the relative change is undefined).
        ratios: (B, nsamples) ``||Φ(x + δ_k) - Φ(x)|| / ||Φ(x)||`` for each noise sample k.
        targets: (B,) the class explained, the same for the clean and the perturbed inputs.
        method: the method's canonical name.
        radius: the noise's half-width.
        groups: the rows of each call of :func:`xaikit.xai.explain` on the perturbed copies.
    """

    kind: str
    scores: np.ndarray
    ratios: np.ndarray
    targets: np.ndarray
    method: str
    radius: float
    groups: list[int] = field(default_factory=list)

    def __repr__(self) -> str:
        return (
            f"SensitivityResult({self.kind}, method={self.method}, samples={self.scores.shape[0]}, "
            f"nsamples={self.ratios.shape[1]}, radius={self.radius:g}, mean={self.mean:.4g})"
        )


@dataclass
class LipschitzResult(PerSample):
    """The local Lipschitz estimate of a method's maps, per sample. Lower is better.

    Attributes:
        scores: (B,) float64 the maximum of ``ratios`` over the noise samples.
        ratios: (B, nsamples) ``||Φ(x + δ_k) - Φ(x)|| / ||δ_k||`` for each noise sample k.
        targets: (B,) the class explained, the same for the clean and the perturbed inputs.
        method: the method's canonical name.
        stdev: the noise's standard deviation.
        groups: the rows of each call of :func:`xaikit.xai.explain` on the perturbed copies.
    """

    scores: np.ndarray
    ratios: np.ndarray
    targets: np.ndarray
    method: str
    stdev: float
    groups: list[int] = field(default_factory=list)

    def __repr__(self) -> str:
        return (
            f"LipschitzResult(method={self.method}, samples={self.scores.shape[0]}, "
            f"nsamples={self.ratios.shape[1]}, stdev={self.stdev:g}, mean={self.mean:.4g})"
        )


@public(old_order=_OLD_ORDER)
def max_sensitivity(
    model: Any,
    x: Any,
    method: str,
    *,
    target: Any = None,
    nsamples: int = 200,
    radius: float = 0.2,
    normalize: bool = False,
    **run: Unpack[BaseRunOptions],
) -> SensitivityResult:
    """Max-sensitivity: the largest relative change of the map under small input noise.

    ``score = max_k ||Φ(x + δ_k) - Φ(x)||_F / ||Φ(x)||_F`` with ``δ_k`` uniform in
    ``[-radius, radius]`` on every element of x, k = 1..nsamples. Lower is better.

    The defaults are Quantus 0.6's ``MaxSensitivity`` ones (200 samples, ``lower_bound=0.2``:
    uniform noise in [-0.2, 0.2] in the input's units, Frobenius norms, no normalisation); the
    scores equal Quantus's on the same perturbed inputs (``benchmarks/quantus_robustness.py``).
    Memory: the ``nsamples x B`` perturbed rows are explained in one call of
    :func:`xaikit.xai.explain` when their inputs and maps fit in :data:`GROUP_BYTES`, else in
    groups of whole noise samples; each call runs the fused engine in chunks of ``max_batch``.

    Args:
        model: a torch or Keras/TF model returning (batch, classes).
        x: the input batch (numpy or tensor), in the model's layout.
        method: the explanation method, by name (any of
            :data:`xaikit.xai.METHODS`); it is re-run on every perturbed copy.
        target: class per sample (or one for all); None = the model's prediction on the clean
            x. The perturbed copies explain the same class as their clean sample.
        nsamples: perturbed copies per sample (Quantus's ``nr_samples``; the method's own noise
            samples, if it draws any, go in ``method_options={"nsamples": ...}``).
        radius: the half-width of the uniform noise, in the input's units (> 0).
        normalize: divide every map by its own largest magnitude first (Quantus's
            ``normalise=True``, but per sample: Quantus divides by the largest magnitude of
            the whole batch).
        **run: the shared run options (seed, max_batch, framework, output, method_options),
            see :class:`~xaikit.evaluate.RunOptions`; no ``model_kwargs`` (see
            :class:`~xaikit.evaluate.BaseRunOptions`). ``seed`` draws the noise too.

    Returns:
        A :class:`SensitivityResult` (``kind="max"``).

    Example:
        >>> import torch
        >>> model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16, 2))
        >>> r = max_sensitivity(model, torch.rand(3, 1, 4, 4), "vanilla", nsamples=4)
        >>> r.scores.tolist()  # the gradient of a linear model does not depend on x
        [0.0, 0.0, 0.0]
    """
    return _sensitivity("max", model, x, method, target, nsamples, radius, normalize, RunSettings.of(run))


@public(old_order=_OLD_ORDER)
def avg_sensitivity(
    model: Any,
    x: Any,
    method: str,
    *,
    target: Any = None,
    nsamples: int = 200,
    radius: float = 0.2,
    normalize: bool = False,
    **run: Unpack[BaseRunOptions],
) -> SensitivityResult:
    """Average-sensitivity: the mean relative change of the map under small input noise.

    ``score = mean_k ||Φ(x + δ_k) - Φ(x)||_F / ||Φ(x)||_F``; the same arguments, noise and
    defaults as :func:`max_sensitivity` (Quantus 0.6's ``AvgSensitivity``). Lower is better.

    Example:
        >>> import torch
        >>> model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16, 2))
        >>> r = avg_sensitivity(model, torch.rand(2, 1, 4, 4), "input_x_gradient", nsamples=8)
        >>> r.ratios.shape, bool(np.all(r.scores > 0))
        ((2, 8), True)
    """
    return _sensitivity("avg", model, x, method, target, nsamples, radius, normalize, RunSettings.of(run))


@public(old_order=_OLD_ORDER)
def local_lipschitz(
    model: Any,
    x: Any,
    method: str,
    *,
    target: Any = None,
    nsamples: int = 200,
    stdev: float = 0.1,
    normalize: bool = False,
    **run: Unpack[BaseRunOptions],
) -> LipschitzResult:
    """The local Lipschitz estimate: how fast the map moves per unit of input change.

    ``score = max_k ||Φ(x + δ_k) - Φ(x)||_2 / ||δ_k||_2`` with Gaussian noise
    ``δ_k ~ N(0, stdev²)`` on every element, k = 1..nsamples (Alvarez-Melis & Jaakkola 2018,
    estimated by sampling as Quantus 0.6's ``LocalLipschitzEstimate``: 200 samples, std 0.1,
    Euclidean distances). Lower is better. Quantus normalizes the maps by default, by the
    largest magnitude of the whole batch, so that a sample's score depends on the other
    samples; here ``normalize=False`` is the default (the paper's definition) and
    ``normalize=True`` divides each map by its own largest magnitude. Quantus also adds 1e-10
    to the denominator; the ratios here are exact. Memory: as :func:`max_sensitivity`.

    Args:
        model: a torch or Keras/TF model returning (batch, classes).
        x: the input batch (numpy or tensor), in the model's layout.
        method: the explanation method, by name; it is re-run on every perturbed copy.
        target: class per sample (or one for all); None = the model's prediction on the clean x.
        nsamples: perturbed copies per sample (Quantus's ``nr_samples``; the method's own noise
            samples, if it draws any, go in ``method_options={"nsamples": ...}``).
        stdev: the standard deviation of the Gaussian noise, in the input's units (> 0).
        normalize: divide every map by its own largest magnitude first.
        **run: the shared run options (seed, max_batch, framework, output, method_options),
            see :class:`~xaikit.evaluate.RunOptions`; no ``model_kwargs`` (see
            :class:`~xaikit.evaluate.BaseRunOptions`). ``seed`` draws the noise too.

    Returns:
        A :class:`LipschitzResult`.

    Example:
        >>> import torch
        >>> model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16, 2))
        >>> local_lipschitz(model, torch.rand(2, 1, 4, 4), "vanilla", nsamples=4).scores.tolist()
        [0.0, 0.0]
    """
    nsamples, stdev = check_noise(method, nsamples, stdev, "stdev")
    settings = RunSettings.of(run)
    shape = _checked_shape(model, x, settings.framework)
    rng = np.random.default_rng(settings.seed)

    def perturb(k0: int, k1: int) -> np.ndarray:
        noise = rng.standard_normal(size=(k1 - k0, *shape), dtype=np.float32) * np.float32(stdev)
        return np.asarray(host(x, "x"), dtype=np.float32)[None] + noise

    ratios, visit = _ratios("lipschitz", x, shape, nsamples)
    done = explain_copies(model, x, method, target, perturb, nsamples, normalize, settings, visit)
    return LipschitzResult(
        _reduce("max", ratios), ratios, done.targets, done.method, float(stdev), done.groups
    )


def check_noise(method: str, nsamples: Any, scale: Any, name: str) -> tuple[int, float]:
    """``nsamples`` (>= 1) and the noise's ``scale`` (> 0, the argument ``name``) of a metric that
    re-explains noisy copies, checked; the method first."""
    check_method(method)  # before the model is touched: a misplaced argument is named first
    nsamples = check_int(nsamples, "nsamples", 1)
    scale = check_number(scale, f"{name} (of the input noise)", low=0, low_open=True, kind=XaikitTypeError)
    return nsamples, scale


def uniform_noise(x: Any, shape: tuple[int, ...], radius: float, rng: np.random.Generator) -> Perturb:
    """Perturbed copies of x (of shape ``shape``): uniform noise in [-radius, radius] drawn from
    ``rng`` added to every element, as float32."""
    clean = np.asarray(host(x, "x"), dtype=np.float32)

    def perturb(k0: int, k1: int) -> np.ndarray:
        u = rng.random(size=(k1 - k0, *shape), dtype=np.float32)
        return clean[None] + (u * np.float32(2 * radius) - np.float32(radius))

    return perturb


def _checked_shape(model: Any, x: Any, framework: str | None) -> tuple[int, ...]:
    bk = get_backend(model, framework)
    shape, _ = input_layout(x, bk)
    return shape


def _sensitivity(
    kind: str,
    model: Any,
    x: Any,
    method: str,
    target: Any,
    nsamples: int,
    radius: float,
    normalize: bool,
    settings: RunSettings,
) -> SensitivityResult:
    nsamples, radius = check_noise(method, nsamples, radius, "radius")
    shape = _checked_shape(model, x, settings.framework)
    perturb = uniform_noise(x, shape, radius, np.random.default_rng(settings.seed))
    ratios, visit = _ratios("sensitivity", x, shape, nsamples)
    done = explain_copies(model, x, method, target, perturb, nsamples, normalize, settings, visit)
    return SensitivityResult(
        kind, _reduce(kind, ratios), ratios, done.targets, done.method, float(radius), done.groups
    )


def _reduce(kind: str, ratios: np.ndarray) -> np.ndarray:
    # a NaN ratio (a clean map of zeros) is NaN for every noise sample of that row
    if kind == "avg":
        return np.asarray(ratios.mean(axis=1), dtype=np.float64)
    return np.asarray(ratios.max(axis=1), dtype=np.float64)


def _from_perturbed(
    kind: str,
    model: Any,
    x: Any,
    method: str,
    perturbed: Any,
    *,
    target: Any = None,
    normalize: bool = False,
    **run: Unpack[BaseRunOptions],
) -> np.ndarray:
    """The scores of ``kind`` (``"max"``, ``"avg"`` or ``"lipschitz"``) on given perturbed
    copies ``perturbed`` of shape (nsamples, *x.shape): the same computation as the public
    functions without drawing the noise (to compare with another tool on its own draws)."""
    settings = RunSettings.of(run)
    arr = host(perturbed, "perturbed")
    shape = _checked_shape(model, x, settings.framework)
    if arr.ndim != len(shape) + 1 or tuple(arr.shape[1:]) != shape:
        raise XaikitValueError(f"perturbed must have shape (nsamples, *{shape}); got {describe(perturbed)}")

    def perturb(k0: int, k1: int) -> np.ndarray:
        return np.asarray(arr[k0:k1])

    ratios, visit = _ratios("lipschitz" if kind == "lipschitz" else "sensitivity", x, shape, arr.shape[0])
    explain_copies(model, x, method, target, perturb, arr.shape[0], normalize, settings, visit)
    return _reduce("max" if kind == "lipschitz" else kind, ratios)


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """num / den, NaN where den is 0."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)


def _normalized(maps: np.ndarray) -> np.ndarray:
    """Each row divided by its largest magnitude (a row of zeros unchanged)."""
    top = np.abs(maps).max(axis=1, keepdims=True)
    return maps / np.where(top > 0, top, 1.0)


#: receives each group of explained copies: ``visit(clean, k0, xs, maps)`` with the clean maps
#: (B, features) float64, the perturbed inputs ``xs`` (g, B, ...) of noise samples k0..k0+g-1
#: and their maps (g, B, features) float32
Visit = Callable[[np.ndarray, int, np.ndarray, np.ndarray], None]


@dataclass
class Explained:
    """The clean maps of a metric that re-explains perturbed copies, and what it explained."""

    clean: np.ndarray  # (B, features) float64
    targets: np.ndarray  # (B,) int64
    groups: list[int]
    method: str


def explain_copies(
    model: Any,
    x: Any,
    method: str,
    target: Any,
    perturb: Perturb,
    nsamples: int,
    normalize: bool,
    settings: RunSettings,
    visit: Visit,
) -> Explained:
    """Explain x and ``nsamples`` perturbed copies of it (``perturb(k0, k1)``) for the same
    classes: the copies stacked and explained by one call of :func:`xaikit.xai.explain` per
    group of whole noise samples (see :data:`GROUP_BYTES`), each group handed to ``visit``.
    The maps are flattened per sample, each divided by its largest magnitude when ``normalize``."""
    from xaikit.xai import explain

    name = check_method(method)
    check_bool(normalize, "normalize")
    seed = check_int(settings.seed, "seed", 0)
    output = check_output(settings.output)
    max_batch = check_max_batch(settings.max_batch)
    options = check_method_options(settings.method_options, _RESERVED)
    framework = settings.framework
    bk = get_backend(model, framework)
    shape, _ = input_layout(x, bk)
    batch = shape[0]
    inp = prepare(bk, model, [x], ["x"])
    with bk.inference(model):
        pinned = pin(inp, target, output, predict=target is None, objects=True)  # given: no forward pass
    spec = pinned.spec
    targets = (
        np.full(batch, -1, dtype=np.int64)
        if spec is not None
        else bk.to_numpy(pinned.targets).astype(np.int64)
    )
    del inp

    def explained(copies: int) -> Any:
        """What ``copies`` stacked copies of the batch explain: the classes, or the target object
        as it resolved on the clean batch (a region fixed by the clean prediction)."""
        if spec is None:
            return np.tile(targets, copies)
        return tile_object(target, spec, copies)

    def maps_of(rows: Any, tgt: Any, s: int) -> np.ndarray:
        out = explain(
            model, rows, target=tgt, method=name, framework=framework, seed=s, max_batch=max_batch,
            output=output, **options,
        )  # fmt: skip
        flat = np.asarray(out, dtype=np.float32).reshape(int(np.shape(rows)[0]), -1)
        return _normalized(flat) if normalize else flat

    clean = maps_of(x, explained(1), seed).astype(np.float64)
    per_sample = int(np.prod(shape))  # elements of the whole batch, one noise sample
    group = max(1, min(nsamples, GROUP_BYTES // max(1, 24 * per_sample)))
    groups: list[int] = []
    for j, k0 in enumerate(range(0, nsamples, group)):
        k1 = min(nsamples, k0 + group)
        g = k1 - k0
        xs = perturb(k0, k1)
        rows = xs.astype(np.float32, copy=False).reshape((g * batch, *shape[1:]))
        maps = maps_of(rows, explained(g), seed + 1 + j).reshape(g, batch, -1)
        groups.append(g * batch)
        visit(clean, k0, xs, maps)
    return Explained(clean, targets, groups, name)


def _ratios(what: str, x: Any, shape: tuple[int, ...], nsamples: int) -> tuple[np.ndarray, Visit]:
    """The per-sample ratios (B, nsamples) of ``what`` (``"sensitivity"``: ||ΔΦ|| / ||Φ(x)||,
    ``"lipschitz"``: ||ΔΦ|| / ||Δx||) of x (of shape ``shape``), and the ``visit`` of
    :func:`explain_copies` that fills them."""
    batch = shape[0]
    x_flat = np.asarray(host(x, "x"), dtype=np.float64).reshape(batch, -1)
    ratios = np.empty((batch, nsamples), dtype=np.float64)

    def visit(clean: np.ndarray, k0: int, xs: np.ndarray, maps: np.ndarray) -> None:
        clean32, denom = clean.astype(np.float32), np.linalg.norm(clean, axis=1)
        for k in range(maps.shape[0]):  # one noise sample at a time: temporaries of one batch only
            num = np.linalg.norm((maps[k] - clean32).astype(np.float64), axis=1)
            if what == "sensitivity":
                ratios[:, k0 + k] = _ratio(num, denom)
            else:
                step = np.linalg.norm(np.asarray(xs[k], dtype=np.float64).reshape(batch, -1) - x_flat, axis=1)
                ratios[:, k0 + k] = _ratio(num, step)

    return ratios, visit
