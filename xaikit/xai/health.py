"""Degenerate maps: find them (framework-free, on the host) and say so once.

A map is *degenerate* when it cannot be an explanation, whatever the picture looks like after
scaling:

* ``"non-finite"``: it holds NaN or inf;
* ``"zero"``: every value is exactly 0;
* ``"constant"``: every value is the same (within float32 resolution of its own size), and
  not 0; a one-element map is never called constant;
* ``"underflow"``: it accounts for a change of the explained score that float32 (or the half
  type a model computes in) cannot even represent (below).

:func:`map_status` gives one status per sample, ``""`` (:data:`OK`) when none applies.

**The underflow criterion.** A map is a statement about the score ``f(x)`` of the explained
class. Read each method's map as the change of that score it accounts for:

* a gradient map (``vanilla``, ``smoothgrad`` without ``magnitude``), ``kind="gradient"``:
  moving each input element across the sample's value range (max - min of the sample, per
  input) changes the score, to first order, by at most ``D = sum |m| * span``;
* an attribution map (IG and its relatives, Input x Gradient, occlusion, the Grad-CAM family,
  XRAI, feature ablation, Shapley sampling, KernelSHAP, LIME), ``kind="attribution"``: its values
  are shares of the score, ``D = sum |m|``;
* a squared map (``magnitude=True``, VarGrad's variance): the same on ``sqrt(|m|)``.

The score itself is a float32 number: its resolution is ``eps32 * |f(x)|`` (``eps32`` =
2**-23, about 1.2e-7; float64 maps, those of a float64 model, are held to float64's, and a
model that computes in float16 or bfloat16 to that type's, 2**-10 or 2**-7). A map with ``D < eps32 * |f(x)|`` describes changes of the score below
that resolution, that is round-off, not an explanation (a softmax output of a random Keras
MobileNetV2: ``f(x)`` = 0.001, ``D`` ~ 6e-13 < 1.2e-10). ``D`` is the most generous reading
(every element moved across the whole range, all contributions of one sign), so the test calls
a map underflow only when even that reading is below resolution. When the score is not known
the test is skipped, except for maps whose every value is below float32's smallest normal
number (1.2e-38): those are underflow whatever the score. Maps without a score scale
(Eigen-CAM, Score-CAM, RISE, Guided Grad-CAM, Sobol and HSIC indices: ``kind="none"``) are only
checked for the first three statuses.

**The warning.** :func:`warn_degenerate` emits one :class:`~xaikit.errors.DegenerateMapWarning`
per call, naming the method, how many maps of how many have each status, the likely cause and
the fix; it is shown once per (model, method, status) in a process, so a trace that explains
every epoch does not repeat it (:func:`forget_warnings` starts over). Silence it with
``warnings.filterwarnings("ignore", category=xaikit.DegenerateMapWarning)``; the per-sample
status is still recorded where the caller keeps one (``SaliencyNet.last_status``,
``DatasetExplanation.table["map_status"]``).

Example:
    >>> import numpy as np
    >>> maps = np.stack([np.ones((2, 2)), np.zeros((2, 2)), np.full((2, 2), 7.0), [[1e-20, 0], [0, 0]]])
    >>> maps[0, 0, 0] = np.nan
    >>> map_status(maps, scores=np.ones(4)).tolist()
    ['non-finite', 'zero', 'constant', 'underflow']
    >>> map_status(np.array([[0.5, -0.25]]), scores=np.array([2.0])).tolist()
    ['']
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import warnings
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from xaikit.checks import check_choice
from xaikit.errors import DegenerateMapWarning, XaikitError, XaikitValueError, caller_level, describe
from xaikit.xai.registry import UNITS, canonical, family, get_method, title

__all__ = [
    "KINDS",
    "OK",
    "STATUSES",
    "OutputFacts",
    "check_maps",
    "deferred",
    "explained_scores",
    "forget_warnings",
    "map_kind",
    "map_status",
    "probability_rows",
    "warn_degenerate",
    "warn_once",
]

#: the status of a map that is not degenerate
OK = ""
#: the statuses of a degenerate map, in the order they are tested
STATUSES = ("non-finite", "zero", "constant", "underflow")
#: how a map relates to the score (see the module): its values are gradients, shares of the
#: score, or have no score scale (a method's record says which: ``Method.units``)
KINDS = UNITS
#: float32 resolution: the gap between 1 and the next float32
EPS32 = float(np.finfo(np.float32).eps)
#: float32's smallest normal number: below it a value has lost precision
TINY32 = float(np.finfo(np.float32).tiny)
#: the resolution of the half types a model may compute in (the gap between 1 and the next value)
HALF_EPS = {"float16": float(np.finfo(np.float16).eps), "bfloat16": 2.0**-7}
#: a map whose range is within this many eps32 of its size is constant
CONSTANT_EPS = 4.0
#: rows of a (B, classes) output that lie in [0, 1] and sum to 1 within this are probabilities
PROBABILITY_TOL = 1e-4


def map_kind(method: str, magnitude: bool | None = None, nintegration: int | None = None) -> tuple[str, bool]:
    """``(kind, squared)`` of a method's raw map for :func:`map_status`: the kind is its record's
    ``units`` (:data:`~xaikit.xai.registry.UNITS`), ``squared`` whether the map holds squares.

    Args:
        method: a method name or alias of :func:`xaikit.xai.explain`.
        magnitude: the call's ``magnitude`` option (None: the method's default: True for
            SmoothGrad and SmInt).
        nintegration: accepted for symmetry with the methods' options; VarGrad (of gradients
            or of IG attributions) has no score scale either way.

    Example:
        >>> map_kind("smoothgrad"), map_kind("ig"), map_kind("vargrad"), map_kind("rise")
        (('gradient', True), ('attribution', False), ('none', False), ('none', False))
    """
    name = canonical(method)
    squared = bool(name in ("smoothgrad", "smint") if magnitude is None else magnitude)
    return get_method(name).units, squared


def _flat(maps: Any) -> list[np.ndarray]:
    arrays = [np.asarray(m) for m in (maps if isinstance(maps, (list, tuple)) else [maps])]
    if not arrays or any(a.ndim < 1 for a in arrays) or len({a.shape[0] for a in arrays}) != 1:
        raise XaikitValueError(
            "maps must be a (B, ...) array or a list of them with one batch size; got "
            + ", ".join(describe(a) for a in arrays)
        )
    return [a.reshape(a.shape[0], -1) for a in arrays]


def _per_sample(values: Any, batch: int, name: str) -> np.ndarray:
    arr = np.abs(np.asarray(values, dtype=np.float64)).reshape(-1)
    if arr.size == 1:
        return np.full(batch, float(arr[0]))
    if arr.size != batch:
        raise XaikitValueError(
            f"{name} must hold one value per sample ({batch}) or one for all; got {arr.size}"
        )
    return arr


def map_status(
    maps: Any,
    *,
    scores: Any = None,
    kind: str = "attribution",
    squared: bool = False,
    spans: Any = None,
    precision: str | None = None,
) -> np.ndarray:
    """The status of each sample's map: ``""`` (ok), ``"non-finite"``, ``"zero"``,
    ``"constant"`` or ``"underflow"`` (see the module for the criteria).

    Args:
        maps: the raw maps, (B, ...) (any method's raw output: input-shaped attributions, (B, H, W)
            CAM / RISE / XRAI maps), or a list of them for a model with several inputs (a sample's
            status then covers all of its maps). float64 maps are held to float64 resolution,
            any other to float32's.
        scores: the explained score f(x) of each sample (B,), or one number for all (the
            magnitude of the model's output, when only that is known); None: unknown, and the
            underflow test only catches maps below float32's smallest normal number.
        kind: ``"gradient"``, ``"attribution"`` or ``"none"`` (:func:`map_kind` gives a method's).
        squared: the map holds squares (``magnitude=True``, VarGrad): tested on ``sqrt(|m|)``.
        spans: for ``kind="gradient"``: each sample's input value range (max - min), (B,) or one
            per input; a zero range counts as 1. None: 1.
        precision: the dtype the model computes in, when it is a half type (``"float16"``,
            ``"bfloat16"``: Keras mixed precision, a half torch model): the underflow test then
            uses that type's resolution (2**-10, 2**-7), since the score and the gradients were
            rounded to it whatever the maps' dtype; any other value (or None) leaves the rule
            by the maps' dtype.

    Returns:
        A (B,) array of str.

    Example:
        >>> g = np.full((2, 3), 1e-12, np.float32); g[:, 0] = 0.0
        >>> map_status(g, scores=np.array([1.0, 1e-9]), kind="gradient", spans=np.array([1.0, 1.0])).tolist()
        ['underflow', '']
    """
    check_choice(kind, "kind", KINDS)
    flats = _flat(maps)
    batch = flats[0].shape[0]
    hi = np.full(batch, -np.inf)
    lo = np.full(batch, np.inf)
    size = 0
    for f in flats:
        if f.shape[1] == 0:
            continue
        hi = np.maximum(hi, f.max(axis=1).astype(np.float64))  # NaN and inf propagate: one pass each
        lo = np.minimum(lo, f.min(axis=1).astype(np.float64))
        size += f.shape[1]
    status = np.full(batch, OK, dtype=object)
    if size == 0:
        return status.astype(str)
    finite = np.isfinite(hi) & np.isfinite(lo)
    hi, lo = np.where(finite, hi, 0.0), np.where(finite, lo, 0.0)
    top = np.maximum(np.abs(hi), np.abs(lo))
    status[~finite] = "non-finite"
    zero = finite & (top == 0)
    status[zero] = "zero"
    # float32 resolution; float64's for float64 maps (those of a float64 model)
    wide = any(f.dtype == np.float64 for f in flats)
    eps, tiny = (
        (float(np.finfo(np.float64).eps), float(np.finfo(np.float64).tiny)) if wide else (EPS32, TINY32)
    )
    eps = max(eps, HALF_EPS.get(precision or "", 0.0))
    constant = finite & ~zero & (hi - lo <= CONSTANT_EPS * eps * top) & (size > 1)
    status[constant] = "constant"
    live = finite & ~zero & ~constant
    underflow = live & (top < tiny)
    if scores is not None and kind != "none":
        resolution = eps * _per_sample(scores, batch, "scores")
        underflow |= live & _below(flats, kind, squared, spans, top, size, resolution, batch)
    status[underflow] = "underflow"
    return status.astype(str)


def _below(
    flats: list[np.ndarray],
    kind: str,
    squared: bool,
    spans: Any,
    top: np.ndarray,
    size: int,
    resolution: np.ndarray,
    batch: int,
) -> np.ndarray:
    """Whether each sample's accounted change D (see the module) is below ``resolution``. Bounds
    first: ``t <= D <= size * t`` with ``t`` the largest element's term, so the sum over the map
    is only taken for samples that the bounds leave open (healthy maps never need it)."""
    if kind == "gradient":
        span_list = spans if isinstance(spans, (list, tuple)) else [spans] * len(flats)
        if len(span_list) != len(flats):
            raise XaikitValueError(f"spans must hold one entry per map ({len(flats)}); got {len(span_list)}")
        per_input = [np.ones(batch) if s is None else _per_sample(s, batch, "spans") for s in span_list]
        per_input = [np.where(s > 0, s, 1.0) for s in per_input]
    else:
        per_input = [np.ones(batch)] * len(flats)
    scale = np.sqrt(top) if squared else top
    widest = np.max(np.stack(per_input), axis=0)
    narrowest = np.min(np.stack(per_input), axis=0)
    low_bound = scale * narrowest
    high_bound = scale * widest * size
    below = high_bound < resolution
    open_ = ~below & (low_bound < resolution)
    if open_.any():
        rows = np.flatnonzero(open_)
        total = np.zeros(len(rows))
        for f, s in zip(flats, per_input):
            part = np.abs(f[rows].astype(np.float64))
            total += (np.sqrt(part) if squared else part).sum(axis=1) * s[rows]
        below[rows] = total < resolution[rows]
    return below


def explained_scores(output: Any, targets: Any) -> np.ndarray:
    """The explained score of each sample: ``output[b, targets[b]]`` of a (B, classes) output, the
    output itself of a (B,) one.

    Example:
        >>> explained_scores(np.array([[0.1, 0.9], [0.7, 0.3]]), np.array([1, 1])).tolist()
        [0.9, 0.3]
    """
    out = np.asarray(output, dtype=np.float64)
    if out.ndim == 1:
        return out
    idx = np.asarray(targets, dtype=np.int64).reshape(-1)
    return out[np.arange(out.shape[0]), idx]


def probability_rows(output: Any) -> np.ndarray:
    """Whether each row of a (B, classes) output is a probability vector: in [0, 1] and summing to
    1 within :data:`PROBABILITY_TOL` (a model ending in a softmax). A (B,) output has none.

    Example:
        >>> probability_rows(np.array([[0.7, 0.2, 0.1], [2.0, 0.0, -1.0]])).tolist()
        [True, False]
    """
    s = np.asarray(output, dtype=np.float64)
    if s.ndim != 2 or s.shape[1] < 2:
        return np.zeros(s.shape[:1], dtype=bool)
    return np.all((s >= 0) & (s <= 1), axis=1) & (np.abs(s.sum(axis=1) - 1) <= PROBABILITY_TOL)


@dataclass(frozen=True)
class OutputFacts:
    """What is known of the explained model output, for the warning's likely cause.

    Attributes:
        probabilities: the rows seen are probability vectors (None: no output seen).
        largest: the largest value of those rows (a saturated softmax gives ~1, one over near-
            equal logits ~1 / classes).
        classes: the output's class count (None: unknown or one score per sample).
        precision: the half type the model computes in (``"float16"``, ``"bfloat16"``), or None.
    """

    probabilities: bool | None = None
    largest: float | None = None
    classes: int | None = None
    precision: str | None = dataclasses.field(default=None, repr=False)

    @classmethod
    def of(cls, output: Any) -> OutputFacts:
        """The facts of a (B, classes) or (B,) output array (or None: nothing known).

        Example:
            >>> OutputFacts.of(np.full((2, 4), 0.25))
            OutputFacts(probabilities=True, largest=0.25, classes=4)
        """
        if output is None:
            return cls()
        s = np.asarray(output, dtype=np.float64)
        if s.ndim != 2 or s.size == 0:
            return cls(probabilities=False)
        probs = bool(probability_rows(s).all())
        largest = float(np.nanmax(s)) if probs else None
        return cls(probabilities=probs, largest=largest, classes=int(s.shape[1]))


# ---- the warning -----------------------------------------------------------------------------------
_WHAT = {
    "non-finite": "hold NaN or inf",
    "zero": "are exactly 0 everywhere",
    "constant": "hold one value everywhere",
    "underflow": (
        "account for a change of the explained score below the resolution of that score (about "
        "1.2e-7 x |score| in float32, 1e-3 x |score| in float16): round-off, not an explanation"
    ),
}

_LOGITS = (
    "explain the logits instead: output= (the logits output of a model with several), a model "
    "without the final softmax, or classifier_activation=None for keras.applications"
)
_CALIBRATE = (
    "a model with random weights: calibrate its BatchNorm statistics on real data "
    "(xaikit.architecture.torch.calibrate_batchnorm / xaikit.architecture.tensorflow."
    "calibrate_batchnorm) or load trained weights"
)


def _softmax_cause(facts: OutputFacts) -> str:
    largest, classes = facts.largest, facts.classes
    shape = ""
    if largest is not None and largest >= 1 - 1e-3:
        shape = f" and saturated (largest probability {largest:.6g})"
    elif largest is not None and classes and largest <= 2.0 / classes:
        shape = (
            f" and near uniform (largest probability {largest:.3g} over {classes} classes: the logits "
            "barely differ, as in a random model whose BatchNorm statistics were never calibrated)"
        )
    return f"the explained output is a probability (rows in [0, 1] summing to 1){shape}"


def _cause(status: str, group: str, method: str, facts: OutputFacts) -> tuple[str, str]:
    """``(likely cause, fix)`` of one status for a method family and what is known of the output."""
    probs = facts.probabilities
    if status == "non-finite":
        return (
            "the model's activations or output overflow (inf, then NaN), e.g. BatchNorm statistics "
            "never calibrated or float16 overflow, or the input holds NaN / inf",
            "check that model(x) is finite and x holds no NaN; calibrate BatchNorm statistics; "
            "compute in float32",
        )
    if facts.precision is not None and status in ("underflow", "zero") and group != "cam":
        eps = HALF_EPS[facts.precision]
        return (
            f"the model computes in {facts.precision}: its score and gradients are rounded to about "
            f"{eps:.1g} x their size, and smaller gradients become 0"
            + (f"; {_softmax_cause(facts)}" if probs else ""),
            "explain a float32 copy of the model (torch: a copy with .float(); Keras: build it under "
            "keras.mixed_precision.set_global_policy('float32') and set_weights) with the same "
            f"weights{'; ' + _LOGITS if probs else ''}",
        )
    if status == "underflow":
        if probs:
            return _softmax_cause(facts), f"{_LOGITS}; for {_CALIBRATE}"
        return (
            "the score barely changes with the input: saturated activations (a sigmoid or softmax "
            "inside or at the end), BatchNorm statistics never calibrated, or vanishing weights",
            f"if the output is a probability, {_LOGITS}; for {_CALIBRATE}",
        )
    if status == "zero":
        if method == "vargrad":
            return (
                "VarGrad is the variance of noisy gradients: 0 where they do not vary "
                "(stdev_spread=0, or a model linear in its input)",
                "raise stdev_spread, or explain with a method that is not a variance",
            )
        if group == "cam":
            return (
                "the layer's activations are 0 (a dead layer), the layer is not on the path to the "
                "explained output (its gradient is 0), or the class evidence is negative everywhere "
                "(the map's ReLU clips it)",
                "pick another layer with layer= (e.g. an earlier convolution), or check the class",
            )
        if group == "agnostic":
            cause = (
                "switching the features to the baseline does not change the score: the model ignores "
                "them, or the input equals the baseline (baseline=) there"
            )
            if probs:
                cause += f"; {_softmax_cause(facts)}"
            return cause, f"check the baseline (baseline=) and the input; {_LOGITS}"
        if group == "perturbation":
            cause = "masking the input does not change the score"
            if probs:
                cause += f": {_softmax_cause(facts)}"
            return cause, f"{_LOGITS}; or use larger windows (occlusion) / cells (RISE)"
        cause = (
            "the score's gradient is exactly 0: a dead ReLU layer (every unit off for these inputs), "
            "a score that does not depend on the input (detached, argmax, integer operations), or "
            "gradients too small for float32"
        )
        fix = f"check model(x) on these inputs; {_LOGITS}; re-initialize or train a dead layer"
        if get_method(method).units != "gradient":  # a path from a baseline: x = baseline leaves nothing
            cause = (
                "the input equals the baseline, so there is nothing to attribute (the attributions "
                "add up to f(x) - f(baseline); Input x Gradient: x = 0; Expected Gradients: every "
                f"reference drawn was the sample itself), or {cause}"
            )
            fix = f"check the baseline (baseline=) and the input; {fix}"
        if probs:
            cause += f"; {_softmax_cause(facts)}"
        return cause, fix
    if group == "cam":
        return (
            "the layer's maps have a single spatial position (1x1) or are uniform, so the upsampled "
            "map is flat",
            "pick an earlier layer with a spatial output: layer=",
        )
    if group == "agnostic":
        return (
            "every feature got the same value: one feature covers the whole input (segments=1, or a "
            "features= mask with one id)",
            "more features: segments=, features='slic', or a features= mask with several ids",
        )
    if method == "occlusion":
        return (
            "one occlusion window covers the whole input, so every element gets the same score change",
            "a smaller window=",
        )
    return (
        "the score depends on the input only through a global quantity (e.g. its mean over the "
        "image), or the input itself is constant",
        "check the model and the input",
    )


#: (model key) -> {(method, status)} already warned about in this process
_WARNED: weakref.WeakKeyDictionary[Any, set[tuple[str, str]]] = weakref.WeakKeyDictionary()
_WARNED_BY_ID: dict[Any, set[tuple[str, str]]] = {}
_QUIET: contextvars.ContextVar[bool] = contextvars.ContextVar("xaikit_quiet_health", default=False)


def _warned(key: Any) -> set[tuple[str, str]]:
    try:
        return _WARNED.setdefault(key, set())
    except TypeError:  # not weak-referenceable (a str, a number): kept by value, or by id
        pass
    try:
        hash(key)
    except TypeError:
        key = ("id", id(key))
    return _WARNED_BY_ID.setdefault(key, set())


def forget_warnings() -> None:
    """Forget which (model, method, status) were warned about: the next degenerate map of each
    is reported again."""
    _WARNED.clear()
    _WARNED_BY_ID.clear()


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """Within the block, :func:`xaikit.xai.explain` and ``SaliencyNet`` neither check nor warn: a
    caller that knows more (``explain_dataset``: the scores of the whole batch) checks the maps
    itself, and the randomization checks of :mod:`xaikit.evaluate` explain models whose weights
    they re-drew on purpose (their maps are not the user's model's)."""
    token = _QUIET.set(True)
    try:
        yield
    finally:
        _QUIET.reset(token)


def is_deferred() -> bool:
    """Whether a :func:`deferred` block is active."""
    return _QUIET.get()


def degenerate_message(method: str, status: np.ndarray, facts: OutputFacts, where: str = "") -> str:
    """The text of the warning for the statuses of one call (every degenerate status counted)."""
    name = canonical(method)
    group = family(name)
    n = len(status)
    parts = []
    for s in STATUSES:
        count = int(np.sum(status == s))
        if not count:
            continue
        cause, fix = _cause(s, group, name, facts)
        parts.append(f"{count} of {n} maps {_WHAT[s]} ({s!r}). Likely cause: {cause}. Fix: {fix}.")
    head = f"{title(name)} ({name}){where}: degenerate maps. "
    tail = (
        " (Shown once per model, method and status; silence it with warnings.filterwarnings("
        "'ignore', category=xaikit.DegenerateMapWarning).)"
    )
    return head + " ".join(parts) + tail


def warn_degenerate(
    status: np.ndarray,
    *,
    method: str,
    model: Any,
    facts: OutputFacts | None = None,
    where: str = "",
) -> bool:
    """Emit one :class:`~xaikit.errors.DegenerateMapWarning` for a call's statuses, unless every
    degenerate (model, method, status) of it was reported before in this process.

    Args:
        status: the (B,) statuses of :func:`map_status`.
        method: the method's name.
        model: the model (or any hashable key standing for it, e.g. a fingerprint).
        facts: what is known of the model's output (for the likely cause).
        where: a few words on the call, e.g. ``" in explain_dataset"``.

    Returns:
        Whether a warning was emitted.
    """
    status = np.asarray(status)
    found = {str(s) for s in np.unique(status) if s != OK}
    if not found:
        return False
    name = canonical(method)
    seen = _warned(model)
    new = {s for s in found if (name, s) not in seen}
    if not new:
        return False
    seen.update((name, s) for s in found)
    message = degenerate_message(name, status, facts or OutputFacts(), where)
    warnings.warn(message, DegenerateMapWarning, stacklevel=caller_level())
    return True


def warn_once(message: str, category: type[Warning], *, method: str, model: Any, status: str) -> bool:
    """Emit ``message`` as a ``category`` warning unless this (model, method, status) was warned
    about before in this process: the once-per-model rule of :func:`warn_degenerate`, for the
    warnings a method gives itself (DeepLIFT's :class:`~xaikit.errors.IncompleteMapWarning`,
    status ``"incomplete"``); :func:`forget_warnings` starts over. Returns whether it was emitted."""
    name = canonical(method)
    seen = _warned(model)
    if (name, status) in seen:
        return False
    seen.add((name, status))
    warnings.warn(message, category, stacklevel=caller_level())
    return True


def check_maps(
    maps: Any,
    *,
    method: str,
    model: Any,
    output: Any = None,
    targets: Any = None,
    magnitude: bool | None = None,
    nintegration: int | None = None,
    spans: Any = None,
    where: str = "",
) -> np.ndarray:
    """:func:`map_status` of a call's maps and, when any is degenerate, :func:`warn_degenerate`.

    Args:
        maps: the raw maps (an array, a list for several inputs).
        method: the method's name.
        model: the model (the key of the once-per-model rule).
        output: the model output read for this call: (B, classes) or (B,) for the whole batch
            (the explained scores are taken at ``targets``), or (1, ...) of one row only (its
            largest |value| then stands for every sample's score), or None.
        targets: the explained class of each sample (for a (B, classes) ``output``).
        magnitude: the call's ``magnitude`` option (see :func:`map_kind`).
        nintegration: the call's ``nintegration`` option (see :func:`map_kind`).
        spans: the input value range of each sample (gradient maps).
        where: as :func:`warn_degenerate`.

    Returns:
        The (B,) statuses.
    """
    kind, squared = map_kind(method, magnitude, nintegration)
    flats = maps if isinstance(maps, (list, tuple)) else [maps]
    batch = int(np.shape(flats[0])[0])
    scores: Any = None
    if output is not None:
        out = np.asarray(output)
        if out.shape[0] == batch and (out.ndim == 1 or targets is not None):
            scores = explained_scores(out, targets)
        elif out.size:
            scores = float(np.nanmax(np.abs(out)))
    precision = _precision(model)
    status = map_status(maps, scores=scores, kind=kind, squared=squared, spans=spans, precision=precision)
    half = precision if precision in HALF_EPS else None
    facts = dataclasses.replace(OutputFacts.of(output), precision=half)
    warn_degenerate(status, method=method, model=model, facts=facts, where=where)
    return status


def _precision(model: Any) -> str | None:
    """The dtype ``model`` computes in (its backend's reading), or None for a model of no known
    framework (a plain function)."""
    from xaikit.backend import get_backend

    try:
        return get_backend(model).model_dtype(model)
    except XaikitError:  # a model no backend reads: the rule by the maps' dtype
        return None
