"""Convergence of a map in its steps or samples: how far the map at a few steps is from the map
at many.

A path method's map is a quadrature of an integral (Integrated Gradients' ``nsamples``, SmInt's
``nintegration``, Blur IG's and Guided IG's ``steps``), a noise method's a Monte Carlo mean
(SmoothGrad's ``nsamples``, RISE's masks). Where the model's gradient turns fast along the path,
the default steps give a picture of the quadrature's error, and the completeness delta does not
tell: measured on random-weight models at 25 IG steps (zero baseline, 4 pictures), a torch
ResNet-18 sample whose map had cosine 0.983 with its 400-step map missed
``f(x) - f(baseline)`` by 146 % (its score barely changed), while Keras MobileNetV2 maps with
cosine 0.50 to 0.53 missed by 55 % to 280 %. :func:`convergence` measures the map itself: the
method runs at each count of ``values`` with everything else the same (seed included, so a
random baseline is the same draw), and each map is compared with the map at the largest count.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from xaikit.checks import check_int
from xaikit.errors import XaikitTypeError, XaikitValueError, describe
from xaikit.evaluate._common import RESERVED, check_method_options
from xaikit.evaluate._conventions import check_method, public
from xaikit.evaluate._options import RunOptions, RunSettings, Unpack

__all__ = ["STEP_OPTIONS", "ConvergenceResult", "convergence"]

#: the options that set a method's steps or samples, in the order :func:`convergence` looks for
#: one when ``option`` is not given: the path's steps before the noise samples
STEP_OPTIONS = ("nintegration", "steps", "nsamples")


@dataclass
class ConvergenceResult:
    """How far each sample's map at each count is from its map at the largest count.

    Attributes:
        option: the method's option that was varied (``"nsamples"``, ``"steps"``, ...).
        values: the counts, increasing; the last one gives the reference maps.
        relative: (len(values) - 1, B) ``||m_v - m_ref|| / ||m_ref||`` (L2 over every element of
            a sample's maps; NaN where the reference map is 0).
        cosine: (len(values) - 1, B) the cosine similarity of ``m_v`` and ``m_ref`` (NaN where
            either is 0).
        delta: (len(values), B) the completeness delta at each count, for a method that has one
            with these options (``xk.xai.method_names(delta=True)``); None otherwise.
    """

    option: str
    values: tuple[int, ...]
    relative: np.ndarray
    cosine: np.ndarray
    delta: np.ndarray | None

    def converged(self, tol: float = 0.1) -> np.ndarray:
        """(B,) bool: the map at the second largest count is within ``tol`` (relative L2) of the
        map at the largest, so that the steps between them changed it by less than that."""
        with np.errstate(invalid="ignore"):
            return np.asarray(self.relative[-1] <= tol)

    @property
    def summary(self) -> dict[str, float]:
        """For each count but the last: the largest relative distance and the smallest cosine over
        the samples (``"max_relative@25"``, ``"min_cosine@25"``, ...)."""
        out: dict[str, float] = {}
        for i, v in enumerate(self.values[:-1]):
            out[f"max_relative@{v}"] = (
                float(np.nanmax(self.relative[i])) if self.relative.shape[1] else np.nan
            )
            out[f"min_cosine@{v}"] = float(np.nanmin(self.cosine[i])) if self.cosine.shape[1] else np.nan
        return out

    def __repr__(self) -> str:
        parts = ", ".join(f"{k}={v:.3g}" for k, v in self.summary.items())
        return f"ConvergenceResult({self.option}={self.values}, samples={self.relative.shape[1]}, {parts})"


def _check_values(values: Any, option: str, default: int) -> tuple[int, ...]:
    if values is None:
        return (default, 4 * default)
    if not isinstance(values, (list, tuple)) or len(values) < 2:
        raise XaikitValueError(
            f"values must be a list or tuple of at least two counts of {option} (e.g. (25, 100)), the "
            f"last one the reference; got {describe(values)}"
        )
    counts = tuple(check_int(v, f"values[{i}]", 1) for i, v in enumerate(values))
    if any(b <= a for a, b in itertools.pairwise(counts)):
        raise XaikitValueError(f"values must increase (the last one is the reference); got {counts}")
    return counts


def _counts(options: Mapping[str, Any]) -> list[str]:
    """A method's options that take a count: those of :data:`STEP_OPTIONS`, in that order, then
    any other whose default is an int (a registered method's own name for its steps)."""
    own = [o for o, d in options.items() if o not in STEP_OPTIONS and type(d) is int]
    return [o for o in STEP_OPTIONS if o in options] + own


def _option(name: str, option: Any, options: Mapping[str, Any]) -> str:
    counts = _counts(options)
    if option is None:
        if not counts:
            raise XaikitValueError(
                f"method {name!r} has no option that sets steps or samples ({', '.join(STEP_OPTIONS)}, "
                f"or an option of its own with an int default): nothing to vary; its options are "
                f"{', '.join(options) or 'none'}"
            )
        return counts[0]
    if not isinstance(option, str):
        raise XaikitTypeError(
            f"option must be the name of one of method {name!r}'s options; got {describe(option)}"
        )
    if option not in counts:
        raise XaikitValueError(
            f"option must be one of method {name!r}'s options that take a count "
            f"({', '.join(counts) or 'none'}); got {option!r}"
        )
    return option


def _flat(maps: Any, batch: int) -> np.ndarray:
    """A sample's maps (one array, or one per model input) as one float64 row per sample."""
    arrays = maps if isinstance(maps, list) else [maps]
    return np.concatenate([np.asarray(a, dtype=np.float64).reshape(batch, -1) for a in arrays], axis=1)


@public()
def convergence(
    model: Any,
    x: Any,
    method: str = "integrated",
    *,
    target: Any = None,
    option: str | None = None,
    values: Any = None,
    **run: Unpack[RunOptions],
) -> ConvergenceResult:
    """How far a method's maps at a few steps (or samples) are from its maps at many.

    Args:
        model: a torch or Keras/TF model.
        x: the input batch.
        method: an explanation method with a count option (``"integrated"``, ``"smint"``,
            ``"blur_ig"``, ``"guided_ig"``, ``"smoothgrad"``, ``"expected_gradients"``,
            ``"rise"``, ...).
        target: classes (None = the prediction, pinned).
        option: the count to vary: one of :data:`STEP_OPTIONS` that the method takes, or an
            option of its own whose default is an int; default the first of
            :data:`STEP_OPTIONS` it takes (the path's steps before the noise samples: SmInt's
            ``nintegration``).
        values: the counts, at least two, increasing; the map at the last one is the reference.
            Default ``(d, 4 d)``, ``d`` the option's default (where that is None: the gradient
            sweep's default count, 25).
        **run: the shared run options (seed, max_batch, framework, output, model_kwargs,
            method_options), see :class:`~xaikit.evaluate.RunOptions`; ``method_options`` holds
            the method's other options (the varied one is refused there).

    Returns:
        A :class:`ConvergenceResult`; ``.converged(tol)`` says per sample whether the last step
        up changed the map by less than ``tol``.

    Example:
        >>> import torch
        >>> model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))
        >>> r = convergence(model, torch.rand(2, 4), values=(4, 64), method_options={"baseline": "zeros"})
        >>> r.relative.shape, bool(r.converged(0.05).all())
        ((1, 2), True)
    """
    name = check_method(method)
    settings = RunSettings.of(run)
    from xaikit.xai import get_method
    from xaikit.xai.internal import DEFAULT_NSAMPLES, explain_with_delta

    record = get_method(name)
    key = _option(name, option, record.options)
    options = check_method_options(settings.method_options, {**RESERVED, key: "the values argument"})
    default = record.options[key]
    counts = _check_values(values, key, default if isinstance(default, int) else DEFAULT_NSAMPLES)
    flats, deltas = [], []
    for count in counts:
        maps, delta = explain_with_delta(
            model, x, target, name, framework=settings.framework, seed=settings.seed,
            max_batch=settings.max_batch, output=settings.output, model_kwargs=settings.model_kwargs,
            **options, **{key: count},
        )  # fmt: skip
        batch = int(np.shape(maps[0] if isinstance(maps, list) else maps)[0])
        flats.append(_flat(maps, batch))
        deltas.append(delta)
    ref = flats[-1]
    ref_norm = np.linalg.norm(ref, axis=1)
    rel, cos = [], []
    with np.errstate(invalid="ignore", divide="ignore"):
        for m in flats[:-1]:
            norm = np.linalg.norm(m, axis=1)
            rel.append(np.where(ref_norm > 0, np.linalg.norm(m - ref, axis=1) / ref_norm, np.nan))
            both = (ref_norm > 0) & (norm > 0)
            cos.append(np.where(both, (m * ref).sum(axis=1) / (norm * ref_norm), np.nan))
    delta_rows = (
        None if any(d is None for d in deltas) else np.stack([np.asarray(d, np.float64) for d in deltas])
    )
    return ConvergenceResult(key, counts, np.stack(rel), np.stack(cos), delta_rows)
