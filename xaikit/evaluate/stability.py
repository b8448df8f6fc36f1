"""Relative stability, continuity and consistency: more robustness metrics of Quantus 0.6.

* :func:`relative_input_stability`, :func:`relative_output_stability`,
  :func:`relative_representation_stability` (Agarwal et al., "Rethinking Stability for
  Attribution-based Explanations", 2022, https://arxiv.org/abs/2203.06877): the largest relative
  change of the map, ``||(e_x - e_x') / e_x||_2``, over perturbed copies ``x'`` that keep the
  model's predicted class, relative to the change of the input (``||(x - x') / x||_2``), of the
  logits (``||h(x) - h(x')||_2``) or of an internal layer's representation
  (``||(L_x - L_x') / L_x||_2``), each denominator at least ``eps_min``. Lower is better.
* :func:`continuity` (Montavon et al., "Methods for interpreting and understanding deep neural
  networks", Digital Signal Processing 73, 2018, section 7.1): the strongest variation
  ``max_{x != x'} ||R(x) - R(x')||_1 / ||x - x'||_2`` of the map along a path of horizontal
  translations of the input. Lower is better.
* :func:`consistency` (Dasgupta et al., "Framework for Evaluating Faithfulness of Local
  Explanations", ICML 2022): the probability that another sample of the batch whose map has the
  same discretisation (e.g. the same top-k pixels) has the same predicted class. Higher is better.

The relative stabilities and continuity re-explain their perturbed copies through
:func:`xaikit.evaluate.robustness.explain_copies` (one stacked :func:`xaikit.xai.explain` call per
group of whole noise samples); their forward passes (predicted classes, logits, a layer's
representation) are chunked passes over the same stacked rows. The model is left unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from xaikit.backend import Rows, get_backend
from xaikit.backend.outputs import as_matrix, check_output
from xaikit.checks import check_choice, check_int, check_number
from xaikit.errors import XaikitTypeError, XaikitValueError, describe
from xaikit.evaluate._common import (
    PerSample,
    check_bool,
    host,
    input_layout,
    maps_or_explain,
    refuse_object,
)
from xaikit.evaluate._conventions import check_method, public
from xaikit.evaluate._options import BaseRunOptions, RunOptions, RunSettings, Unpack
from xaikit.evaluate.robustness import Perturb, check_noise, explain_copies, uniform_noise
from xaikit.targets import Class, is_target
from xaikit.xai.internal import check_max_batch, chunked, pin, prepare

__all__ = [
    "ConsistencyResult",
    "ContinuityResult",
    "RelativeStabilityResult",
    "consistency",
    "continuity",
    "relative_input_stability",
    "relative_output_stability",
    "relative_representation_stability",
]

#: the discretisations of :func:`consistency`
DISCRETIZE = ("top_k", "sign", "rank", "round")
#: the pairs of translated inputs :func:`continuity` compares
PAIRS = ("all", "origin")

#: the positional parameters of the metrics that re-explain
_OLD_ORDER = ("model", "x", "method", "target")


# ---- relative stability ---------------------------------------------------------------------------
@dataclass
class RelativeStabilityResult(PerSample):
    """A relative stability (Agarwal et al. 2022) of a method's maps, per sample. Lower is better.

    Attributes:
        kind: ``"input"``, ``"output"`` or ``"representation"``.
        scores: (B,) float64 the maximum of ``ratios`` over the perturbed copies that keep the
            predicted class; NaN where none does.
        ratios: (B, nsamples) the ratio of each copy; NaN where the copy's predicted class
            differs from the clean input's (the paper's maximum skips those copies).
        targets: (B,) the class explained, the same for the clean and the perturbed inputs.
        method: the method's canonical name.
        layer: the layer whose representation is compared (``kind="representation"``), else None.
        groups: the rows of each call of :func:`xaikit.xai.explain` on the perturbed copies.
    """

    kind: str
    scores: np.ndarray
    ratios: np.ndarray
    targets: np.ndarray
    method: str
    layer: str | None = None
    groups: list[int] = field(default_factory=list)

    @property
    def kept(self) -> np.ndarray:
        """(B, nsamples) whether each copy kept the clean input's predicted class."""
        return ~np.isnan(self.ratios)

    def __repr__(self) -> str:
        layer = f", layer={self.layer!r}" if self.layer else ""
        return (
            f"RelativeStabilityResult({self.kind}, method={self.method}{layer}, samples={self.scores.shape[0]}, "
            f"nsamples={self.ratios.shape[1]}, mean={self.mean:.4g})"
        )


def _relative(a: np.ndarray, b: np.ndarray, eps_min: float) -> np.ndarray:
    """``||(a - b) / a||_2`` per row, a zero of ``a`` replaced by ``eps_min`` (Quantus's
    convention; the paper leaves it open)."""
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    return np.asarray(np.linalg.norm((a64 - b64) / np.where(a64 == 0, eps_min, a64), axis=1))


def _forward(
    model: Any, rows: Any, settings: RunSettings, layer: Any, spec: Any = None, batch: int = 0
) -> tuple[np.ndarray, np.ndarray, str]:
    """Chunked forward passes over ``rows``: the model's output (rows, classes), or with
    ``spec`` (a bound target object of the ``batch`` clean samples; row r is sample r % batch)
    its score (rows, 1), and, when ``layer`` is not False, that layer's output flattened
    (rows, features) and its name (else (rows, 0) and "")."""
    bk = get_backend(model, settings.framework)
    output = check_output(settings.output)
    inp = prepare(bk, model, [rows], ["x"], model_kwargs=settings.model_kwargs)
    with bk.inference(model):

        def scores(r: list[Any], t: Any, kw: dict[str, Any] | None) -> np.ndarray:
            if spec is not None:
                picked = bk.scores(Rows(model, r, t, output, kw, spec))
                return np.asarray(bk.to_numpy(picked), dtype=np.float64).reshape(-1, 1)
            return np.asarray(
                bk.to_numpy(as_matrix(bk.forward(model, r, output, model_kwargs=kw))), dtype=np.float64
            )

        samples = None
        if spec is not None:
            samples = bk.index(np.arange(inp.batch) % batch, getattr(inp.tensors[0], "device", None))
        out = chunked(inp, samples, check_max_batch(settings.max_batch), scores, forward_only=True)
        if layer is False:
            return out, np.empty((out.shape[0], 0)), ""
        facet = bk.cam
        found = facet.resolve(model, layer, [t[:1] for t in inp.tensors], None)

        def acts(r: list[Any], _t: Any, kw: dict[str, Any] | None) -> np.ndarray:
            a = np.asarray(bk.to_numpy(facet.activations(model, found, r, output, kw)), dtype=np.float64)
            return a.reshape(a.shape[0], -1)

        return (
            out,
            chunked(inp, None, check_max_batch(settings.max_batch), acts, forward_only=True),
            found.name,
        )


def spatial_layer(model: Any, x: Any, framework: str | None = None) -> str | None:
    """The name of the layer :func:`relative_representation_stability` reads with ``layer=None``
    (the last layer with a spatial output), or None when the model has none."""
    bk = get_backend(model, framework)
    inp = prepare(bk, model, [x], ["x"])
    with bk.inference(model):
        try:
            return bk.cam.resolve(model, None, [t[:1] for t in inp.tensors], None).name
        except XaikitValueError:
            return None


def _draws(
    x: Any, shape: tuple[int, ...], nsamples: int, radius: float, perturbations: Any, seed: int
) -> tuple[Perturb, int]:
    """The perturbed copies: given (``perturbations`` (nsamples, *x.shape)) or uniform noise in
    [-radius, radius] drawn from ``seed``."""
    if perturbations is not None:
        arr = host(perturbations, "perturbations")
        if arr.ndim != len(shape) + 1 or tuple(arr.shape[1:]) != shape or arr.shape[0] == 0:
            raise XaikitValueError(
                f"perturbations must be the perturbed copies of x, shape (nsamples, *{shape}); got "
                f"{describe(perturbations)}"
            )
        return (lambda k0, k1: np.asarray(arr[k0:k1])), int(arr.shape[0])
    return uniform_noise(x, shape, radius, np.random.default_rng(seed)), nsamples


def _relative_stability(
    kind: str,
    model: Any,
    x: Any,
    method: str,
    target: Any,
    nsamples: int,
    radius: float,
    eps_min: float,
    perturbations: Any,
    normalize: bool,
    layer: Any,
    settings: RunSettings,
) -> RelativeStabilityResult:
    nsamples, radius = check_noise(method, nsamples, radius, "radius")
    eps_min = check_number(eps_min, "eps_min", low=0, low_open=True, kind=XaikitTypeError)
    seed = check_int(settings.seed, "seed", 0)
    bk = get_backend(model, settings.framework)
    shape, _ = input_layout(x, bk)
    batch = shape[0]
    perturb, nsamples = _draws(x, shape, nsamples, radius, perturbations, seed)
    want = layer if kind == "representation" else False
    spec = None
    if is_target(target) and not isinstance(target, Class):
        # a target object: the output compared is its score, and no class is kept (every copy counts)
        inp = prepare(bk, model, [x], ["x"], model_kwargs=settings.model_kwargs)
        with bk.inference(model):
            spec = pin(inp, target, check_output(settings.output), objects=True).spec
    logits, rep, layer_name = _forward(model, x, settings, want, spec, batch)
    predicted = logits.argmax(axis=1)
    x_flat = np.asarray(host(x, "x"), dtype=np.float64).reshape(batch, -1)
    ratios = np.empty((batch, nsamples), dtype=np.float64)

    def visit(clean: np.ndarray, k0: int, xs: np.ndarray, maps: np.ndarray) -> None:
        g = maps.shape[0]
        rows = np.asarray(xs, dtype=np.float32).reshape((g * batch, *shape[1:]))
        out, rep_p, _ = _forward(model, rows, settings, want, spec, batch)
        out, kept = out.reshape(g, batch, -1), out.argmax(axis=1).reshape(g, batch) == predicted[None]
        for k in range(g):
            num = _relative(clean, maps[k], eps_min)
            if kind == "input":
                den = _relative(x_flat, np.asarray(xs[k], dtype=np.float64).reshape(batch, -1), eps_min)
            elif kind == "output":
                den = np.linalg.norm(logits - out[k], axis=1)
            else:
                den = _relative(rep, rep_p.reshape(g, batch, -1)[k], eps_min)
            ratios[:, k0 + k] = np.where(kept[k], num / np.maximum(den, eps_min), np.nan)

    done = explain_copies(model, x, method, target, perturb, nsamples, normalize, settings, visit)
    return RelativeStabilityResult(
        kind, _max_kept(ratios), ratios, done.targets, done.method, layer_name or None, done.groups
    )


def _max_kept(ratios: np.ndarray) -> np.ndarray:
    """The row maxima over the non-NaN entries; NaN for a row of NaNs only."""
    none = np.isnan(ratios).all(axis=1)
    top = np.where(np.isnan(ratios), -np.inf, ratios).max(axis=1)
    return np.where(none, np.nan, top).astype(np.float64)


_RELATIVE_ARGS = """
    Args:
        model: a torch or Keras/TF model returning (batch, classes).
        x: the input batch (numpy or tensor), in the model's layout.
        method: the explanation method, by name; it is re-run on every perturbed copy.
        target: class per sample (or one for all); None = the model's prediction on the clean
            x. The perturbed copies explain the same class as their clean sample.
        nsamples: perturbed copies per sample (Quantus's ``nr_samples``).
        radius: the half-width of the uniform noise, in the input's units (> 0).
        eps_min: the smallest denominator (> 0); also what a zero element of a divisor becomes.
        perturbations: the perturbed copies themselves, (nsamples', *x.shape), instead of
            drawing them (e.g. another tool's recorded draws); ``nsamples`` and ``radius`` are
            then unused.
        normalize: divide every map by its own largest magnitude first.
        **run: the shared run options (seed, max_batch, framework, output, method_options),
            see :class:`~xaikit.evaluate.RunOptions`; no ``model_kwargs``. ``seed`` draws the
            noise too."""


@public(old_order=_OLD_ORDER)
def relative_input_stability(
    model: Any,
    x: Any,
    method: str,
    *,
    target: Any = None,
    nsamples: int = 200,
    radius: float = 0.2,
    eps_min: float = 1e-6,
    perturbations: Any = None,
    normalize: bool = False,
    **run: Unpack[BaseRunOptions],
) -> RelativeStabilityResult:
    """Relative input stability (RIS): the map's relative change per relative input change.

    ``RIS = max_{x'} ||(e_x - e_x') / e_x||_2 / max(||(x - x') / x||_2, eps_min)`` over the
    perturbed copies ``x' = x + δ`` (``δ`` uniform in [-radius, radius] on every element) whose
    predicted class is the clean input's (Agarwal et al. 2022). Divisions are element-wise;
    a zero of ``e_x`` or ``x`` divides as ``eps_min``. Lower is better. Copies that change the
    predicted class are skipped (their ratio is NaN); the score is NaN only when every copy
    changes it (Quantus 0.6 scores NaN as soon as one copy does).
    {args}

    Returns:
        A :class:`RelativeStabilityResult` (``kind="input"``).

    Example:
        >>> import torch
        >>> model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16, 2))
        >>> r = relative_input_stability(model, torch.rand(3, 1, 4, 4), "vanilla", nsamples=4, radius=0.01)
        >>> r.scores.tolist()  # the gradient of a linear model does not depend on x
        [0.0, 0.0, 0.0]
    """
    return _relative_stability(
        "input", model, x, method, target, nsamples, radius, eps_min, perturbations, normalize, None,
        RunSettings.of(run),
    )  # fmt: skip


@public(old_order=_OLD_ORDER)
def relative_output_stability(
    model: Any,
    x: Any,
    method: str,
    *,
    target: Any = None,
    nsamples: int = 200,
    radius: float = 0.2,
    eps_min: float = 1e-6,
    perturbations: Any = None,
    normalize: bool = False,
    **run: Unpack[BaseRunOptions],
) -> RelativeStabilityResult:
    """Relative output stability (ROS): the map's relative change per change of the logits.

    ``ROS = max_{x'} ||(e_x - e_x') / e_x||_2 / max(||h(x) - h(x')||_2, eps_min)`` with ``h`` the
    model's output (the ``output`` run option; logits for a model that returns logits), over the
    perturbed copies that keep the predicted class (Agarwal et al. 2022); the noise and
    the conventions of :func:`relative_input_stability`. Lower is better.
    {args}

    Returns:
        A :class:`RelativeStabilityResult` (``kind="output"``).

    Example:
        >>> import torch
        >>> model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16, 2))
        >>> r = relative_output_stability(model, torch.rand(2, 1, 4, 4), "vanilla", nsamples=3, radius=0.01)
        >>> r.scores.tolist()
        [0.0, 0.0]
    """
    return _relative_stability(
        "output", model, x, method, target, nsamples, radius, eps_min, perturbations, normalize, None,
        RunSettings.of(run),
    )  # fmt: skip


@public(old_order=_OLD_ORDER)
def relative_representation_stability(
    model: Any,
    x: Any,
    method: str,
    *,
    target: Any = None,
    layer: Any = None,
    nsamples: int = 200,
    radius: float = 0.2,
    eps_min: float = 1e-6,
    perturbations: Any = None,
    normalize: bool = False,
    **run: Unpack[BaseRunOptions],
) -> RelativeStabilityResult:
    """Relative representation stability (RRS): the map's relative change per relative change
    of an internal representation.

    ``RRS = max_{x'} ||(e_x - e_x') / e_x||_2 / max(||(L_x - L_x') / L_x||_2, eps_min)`` with
    ``L_x`` the output of ``layer`` for x, flattened (Agarwal et al. 2022), over the
    perturbed copies that keep the predicted class; the noise and the conventions of
    :func:`relative_input_stability`. Lower is better. The layer is read as the class-activation
    maps read theirs (forward hooks on torch, a sub-model on Keras), in chunked forward passes.
    {args}
        layer: the layer (a module path / Keras layer name, or the object); None = the last
            layer with a spatial output (as the CAM methods choose). Quantus concatenates every
            layer's output by default.

    Returns:
        A :class:`RelativeStabilityResult` (``kind="representation"``, ``layer`` its name).

    Example:
        >>> import torch
        >>> model = torch.nn.Sequential(torch.nn.Conv2d(1, 2, 3), torch.nn.Flatten(), torch.nn.Linear(8, 2))
        >>> r = relative_representation_stability(model, torch.rand(2, 1, 4, 4), "vanilla", nsamples=3, radius=0.01)
        >>> r.layer, r.scores.tolist()
        ('0', [0.0, 0.0])
    """
    return _relative_stability(
        "representation", model, x, method, target, nsamples, radius, eps_min, perturbations, normalize,
        layer, RunSettings.of(run),
    )  # fmt: skip


for _fn in (relative_input_stability, relative_output_stability, relative_representation_stability):
    _fn.__doc__ = (_fn.__doc__ or "").replace("{args}", _RELATIVE_ARGS)


# ---- continuity -----------------------------------------------------------------------------------
@dataclass
class ContinuityResult(PerSample):
    """The continuity (Montavon et al. 2018) of a method's maps along translations of the input,
    per sample. Lower is better.

    Attributes:
        scores: (B,) float64 the largest ``||R(x_i) - R(x_j)||_1 / ||x_i - x_j||_2`` over the
            compared pairs (NaN where no pair of distinct inputs was compared).
        shifts: the translations, in pixels along the last spatial axis (positive: rightwards).
        pairs: ``"all"`` (every pair of distinct inputs among x and its translations) or
            ``"origin"`` (x against each translation, as Quantus 0.6).
        targets: (B,) the class explained, the same for x and its translations.
        method: the method's canonical name.
        groups: the rows of each call of :func:`xaikit.xai.explain` on the translations.
    """

    scores: np.ndarray
    shifts: np.ndarray
    pairs: str
    targets: np.ndarray
    method: str
    groups: list[int] = field(default_factory=list)

    def __repr__(self) -> str:
        return (
            f"ContinuityResult(method={self.method}, samples={self.scores.shape[0]}, "
            f"shifts={self.shifts.shape[0]}, pairs={self.pairs}, mean={self.mean:.4g})"
        )


def _translate(x: np.ndarray, shift: int, axis: int, fill: np.ndarray) -> np.ndarray:
    """x moved ``shift`` positions along ``axis`` (positive: towards higher indices), the
    uncovered positions set to ``fill`` (one value per sample, broadcast)."""
    out = np.empty_like(x)
    out[...] = fill
    n = x.shape[axis]
    s = max(-n, min(n, shift))
    src = [slice(None)] * x.ndim
    dst = [slice(None)] * x.ndim
    src[axis], dst[axis] = (slice(0, n - s), slice(s, n)) if s >= 0 else (slice(-s, n), slice(0, n + s))
    out[tuple(dst)] = x[tuple(src)]
    return out


@public(old_order=_OLD_ORDER)
def continuity(
    model: Any,
    x: Any,
    method: str,
    *,
    target: Any = None,
    nsteps: int = 28,
    dx: int | None = None,
    fill: float | str = "min",
    pairs: str = "all",
    absolute: bool = False,
    normalize: bool = False,
    **run: Unpack[BaseRunOptions],
) -> ContinuityResult:
    """Continuity: the strongest variation of the map along horizontal translations of x.

    ``score = max_{x_i != x_j} ||R(x_i) - R(x_j)||_1 / ||x_i - x_j||_2`` over x and its
    ``nsteps`` translations by ``-W + dx, -W + 2 dx, ..., -W + nsteps * dx`` pixels along the
    last spatial axis (width W; the uncovered columns set to ``fill``). Montavon et al. (2018,
    section 7.1) define continuity as this maximum over pairs of nearby inputs, and measure it
    along such a translation path; ``pairs="all"`` takes every pair of distinct inputs on the
    path (neighbouring translations included), ``pairs="origin"`` only x against each
    translation (Quantus 0.6's ``Continuity``). The translations and defaults (28 steps,
    ``dx = (2W + 1) // nsteps``, the sample's minimum as fill) are Quantus's. Lower is better.
    Quantus takes the maps' magnitudes and divides them by the batch's largest by default;
    here the maps are compared as the method gives them (``absolute=False``), and
    ``normalize=True`` divides each map by its own largest magnitude. Memory: the maps of every
    translation are kept until the pairs are compared (``nsteps + 1`` maps per sample).

    Args:
        model: a torch or Keras/TF model returning (batch, classes).
        x: the input batch (numpy or tensor), in the model's layout, with a spatial axis.
        method: the explanation method, by name; it is re-run on every translation.
        target: class per sample (or one for all); None = the model's prediction on x.
        nsteps: the number of translations (Quantus's ``nr_steps``).
        dx: pixels between translations (> 0); None = ``(2W + 1) // nsteps``.
        fill: the value of the uncovered pixels: a number, or ``"min"`` (each sample's
            minimum, Quantus's ``"black"``).
        pairs: ``"all"`` (the paper's maximum over pairs) or ``"origin"`` (Quantus 0.6).
        absolute: compare the maps' magnitudes (Quantus's ``abs=True``).
        normalize: divide every map by its own largest magnitude first.
        **run: the shared run options (seed, max_batch, framework, output, method_options),
            see :class:`~xaikit.evaluate.RunOptions`; no ``model_kwargs``.

    Returns:
        A :class:`ContinuityResult`.

    Example:
        >>> import torch
        >>> model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16, 2))
        >>> continuity(model, torch.rand(2, 1, 4, 4), "vanilla", nsteps=4).scores.tolist()
        [0.0, 0.0]
    """
    check_method(method)
    settings = RunSettings.of(run)
    nsteps = check_int(nsteps, "nsteps", 1)
    check_choice(pairs, "pairs", PAIRS)
    check_bool(absolute, "absolute")
    bk = get_backend(model, settings.framework)
    shape, channel_axis = input_layout(x, bk)
    axes = [a for a in range(1, len(shape)) if a != channel_axis]
    if not axes:
        raise XaikitValueError(f"continuity translates x along a spatial axis; x has none: {describe(x)}")
    axis, width = axes[-1], shape[axes[-1]]
    step = (2 * width + 1) // nsteps if dx is None else check_int(dx, "dx", 1)
    if step < 1:
        raise XaikitValueError(
            f"nsteps={nsteps} is more than 2W + 1 = {2 * width + 1} translations of width {width}: pass "
            "fewer steps or dx="
        )
    shifts = -width + step * np.arange(1, nsteps + 1)
    clean = np.asarray(host(x, "x"), dtype=np.float32)
    if isinstance(fill, str):
        if fill != "min":
            raise XaikitValueError(f"fill must be a number or 'min'; got {fill!r}")
        value = clean.reshape(shape[0], -1).min(axis=1).reshape((-1,) + (1,) * (len(shape) - 1))
    else:
        value = np.full(
            (shape[0],) + (1,) * (len(shape) - 1), check_number(fill, "fill", kind=XaikitTypeError)
        )
    value = value.astype(np.float32)

    def perturb(k0: int, k1: int) -> np.ndarray:
        return np.stack([_translate(clean, int(s), axis, value) for s in shifts[k0:k1]])

    maps: list[np.ndarray] = []
    inputs: list[np.ndarray] = []

    def visit(ref: np.ndarray, k0: int, xs: np.ndarray, got: np.ndarray) -> None:
        maps.extend(got.astype(np.float64))
        inputs.extend(np.asarray(xs, dtype=np.float64).reshape(got.shape[0], shape[0], -1))

    done = explain_copies(model, x, method, target, perturb, nsteps, normalize, settings, visit)
    pts = [clean.reshape(shape[0], -1).astype(np.float64), *inputs]
    rs = [done.clean, *maps]
    if absolute:
        rs = [np.abs(r) for r in rs]
    best = np.full(shape[0], -np.inf)
    seen = np.zeros(shape[0], dtype=bool)
    for i in range(len(pts)):
        for j in range(i + 1, len(pts)) if pairs == "all" else (range(1, len(pts)) if i == 0 else ()):
            den = np.linalg.norm(pts[i] - pts[j], axis=1)
            ok = den > 0
            ratio = np.abs(rs[i] - rs[j]).sum(axis=1) / np.where(ok, den, 1.0)
            best = np.where(ok, np.maximum(best, ratio), best)
            seen |= ok
    scores = np.where(seen, best, np.nan)
    return ContinuityResult(scores, shifts.astype(np.int64), pairs, done.targets, done.method, done.groups)


# ---- consistency ----------------------------------------------------------------------------------
@dataclass
class ConsistencyResult(PerSample):
    """The local consistency (Dasgupta et al. 2022) of maps over a batch, per sample. Higher is
    better.

    Attributes:
        scores: (B,) float64 the fraction of the other samples with the same discretised map
            that have the same predicted class; NaN where no other sample shares the map's
            discretisation (the conditional probability is undefined).
        matches: (B,) how many other samples share each sample's discretisation.
        keys: (B,) the index of each sample's discretisation among the distinct ones.
        predictions: (B,) the model's predicted classes.
        discretize: the discretisation, by name (``"callable"`` for a function).
    """

    scores: np.ndarray
    matches: np.ndarray
    keys: np.ndarray
    predictions: np.ndarray
    discretize: str

    @property
    def overall(self) -> float:
        """The batch's consistency ``P(f(x) = f(x') | e(x) = e(x'))`` over every ordered pair of
        distinct samples with the same discretisation (NaN if there is none)."""
        pairs = float(self.matches.sum())
        same = float(np.nansum(self.scores * self.matches))
        return same / pairs if pairs else float("nan")

    def __repr__(self) -> str:
        return (
            f"ConsistencyResult({self.discretize}, samples={self.scores.shape[0]}, "
            f"classes of a key={len(np.unique(self.keys))}, mean={self.mean:.4g})"
        )


def _discretized(
    maps: np.ndarray, how: str | Callable[[np.ndarray], Hashable], k: int, decimals: int
) -> list[Hashable]:
    """One hashable key per flattened map."""
    if callable(how):
        return [how(row) for row in maps]
    if how == "top_k":
        order = np.argsort(-np.abs(maps), axis=1, kind="stable")[:, :k]
        signs = np.sign(np.take_along_axis(maps, order, axis=1))
        return [(tuple(o.tolist()), tuple(s.tolist())) for o, s in zip(order, signs)]
    if how == "sign":
        return [np.sign(row).tobytes() for row in maps]
    if how == "rank":
        return [np.argsort(-row, kind="stable").tobytes() for row in maps]
    return [np.round(row, decimals).tobytes() for row in maps]


@public()
def consistency(
    model: Any,
    x: Any,
    saliency: Any,
    *,
    target: Any = None,
    discretize: str | Callable[[np.ndarray], Hashable] = "top_k",
    k: int = 5,
    decimals: int = 2,
    absolute: bool = False,
    **run: Unpack[RunOptions],
) -> ConsistencyResult:
    """Local consistency: do samples explained alike get the same prediction?

    Each map is discretised into a key; a sample's score is the fraction of the OTHER samples
    of the batch with the same key whose predicted class equals its own, the empirical
    ``P(f(x') = f(x) | e(x') = e(x))`` (Dasgupta et al. 2022, local consistency). Higher is
    better. A sample whose key no other sample shares scores NaN (the probability is
    undefined; Quantus 0.6 scores 0). The score depends on the batch: evaluate a large one.

    Discretisations (``discretize``), of the map flattened over every element:
    ``"top_k"`` the positions of the ``k`` largest magnitudes in order and their signs (the
    top-k ranking); ``"sign"`` every element's sign; ``"rank"`` the full descending order;
    ``"round"`` the values rounded to ``decimals``; or a function of one flattened map
    returning a hashable key (Quantus's ``discretise_func``, e.g. its ``top_n_sign``, which
    takes the signs of the FIRST n elements, not of the n largest).

    Args:
        model: a torch or Keras/TF model returning (batch, classes).
        x: the input batch (numpy or tensor), in the model's layout.
        saliency: the maps (one per sample, any shape) or a method name (computed once).
        target: the class explained when ``saliency`` is a method name (None: the prediction).
        discretize: ``"top_k"``, ``"sign"``, ``"rank"``, ``"round"`` or a function (see above).
        k: the positions of ``"top_k"`` (>= 1).
        decimals: the decimals of ``"round"`` (>= 0).
        absolute: discretise the maps' magnitudes (Quantus's ``abs=True``, its default).
        **run: the shared run options, see :class:`~xaikit.evaluate.RunOptions`.

    Returns:
        A :class:`ConsistencyResult`.

    Example:
        >>> import numpy as np, torch
        >>> model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(4, 2))
        >>> maps = np.array([[1.0, 0, 0, 0], [2.0, 0, 0, 0], [0, 0, 0, 3.0]])
        >>> consistency(model, torch.rand(3, 4), maps, k=1).matches.tolist()
        [1, 1, 0]
    """
    if not (callable(discretize) or discretize in DISCRETIZE):
        raise XaikitValueError(
            f"discretize must be one of {DISCRETIZE} or a function of one flattened map; got {discretize!r}"
        )
    k = check_int(k, "k (the top-k positions)", 1)
    decimals = check_int(decimals, "decimals", 0)
    check_bool(absolute, "absolute")
    settings = RunSettings.of(run)
    bk = get_backend(model, settings.framework)
    shape, _ = input_layout(x, bk)
    batch = shape[0]
    refuse_object(
        target,
        "consistency",
        "it asks whether samples with the same discretized explanation get the same predicted class, "
        "and a target object names no class",
    )
    maps = host(maps_or_explain(model, x, saliency, target, settings), "saliency").astype(np.float64)
    if maps.ndim == 0 or maps.shape[0] != batch:
        raise XaikitValueError(f"saliency must have one map per sample ({batch}); got {describe(maps)}")
    if not np.all(np.isfinite(maps)):
        raise XaikitValueError("saliency holds NaN or infinite values")
    flat = maps.reshape(batch, -1)
    flat = np.abs(flat) if absolute else flat
    keys = _discretized(flat, discretize, k, decimals)
    index: dict[Hashable, int] = {}
    ids = np.array([index.setdefault(key, len(index)) for key in keys], dtype=np.int64)
    out, _, _ = _forward(model, x, settings, False)
    predicted = out.argmax(axis=1)
    same_key = (ids[:, None] == ids[None, :]) & ~np.eye(batch, dtype=bool)
    matches = same_key.sum(axis=1)
    agree = (same_key & (predicted[:, None] == predicted[None, :])).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        scores = np.where(matches > 0, agree / np.maximum(matches, 1), np.nan)
    name = "callable" if callable(discretize) else str(discretize)
    return ConsistencyResult(scores.astype(np.float64), matches, ids, predicted.astype(np.int64), name)
