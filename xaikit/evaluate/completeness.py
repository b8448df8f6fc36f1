"""Completeness of attributions: sum(attributions) = f(x) - f(baseline) (Sundararajan et al.).

It applies to the methods whose record says ``delta=True`` (``xk.xai.method_names(delta=True)``:
the path methods, DeepLIFT, DeepLiftShap, and any registered method that reports a delta).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from xaikit.errors import XaikitValueError
from xaikit.evaluate._common import RESERVED, check_method_options
from xaikit.evaluate._conventions import check_method, public
from xaikit.evaluate._options import RunOptions, RunSettings, Unpack

__all__ = ["CompletenessResult", "completeness"]


@dataclass
class CompletenessResult:
    """Per-sample completeness of attributions (the methods with a completeness delta).

    Attributes:
        delta: (B,) sum(attributions) - (f(x) - f(baseline)).
        gap: (B,) f(x) - f(baseline) (for SmInt, averaged over the noisy copies).
        total: (B,) sum(attributions).
        relative: (B,) |delta| / |gap| (NaN where the gap is 0).
    """

    delta: np.ndarray
    gap: np.ndarray
    total: np.ndarray
    relative: np.ndarray

    @property
    def summary(self) -> dict[str, float]:
        """``mean_abs``, ``max_abs``, ``mean_relative``, ``max_relative`` of the delta."""
        rel = self.relative[np.isfinite(self.relative)]
        return {
            "mean_abs": float(np.mean(np.abs(self.delta))),
            "max_abs": float(np.max(np.abs(self.delta))),
            "mean_relative": float(rel.mean()) if rel.size else float("nan"),
            "max_relative": float(rel.max()) if rel.size else float("nan"),
        }

    def __repr__(self) -> str:
        s = self.summary
        return (
            f"CompletenessResult(samples={self.delta.shape[0]}, mean_abs={s['mean_abs']:.3g}, "
            f"max_abs={s['max_abs']:.3g}, max_relative={s['max_relative']:.3g})"
        )


@public(old_order=("model", "x", "method", "target"))
def completeness(
    model: Any,
    x: Any,
    method: str = "integrated",
    *,
    target: Any = None,
    **run: Unpack[RunOptions],
) -> CompletenessResult:
    """How far attributions are from adding up to f(x) - f(baseline).

    Args:
        model: a torch or Keras/TF model.
        x: the input batch.
        method: a method with a completeness delta (``xk.xai.method_names(delta=True)``):
            ``"integrated"``, ``"smint"`` (run with ``magnitude=False``, the signed average that
            completeness applies to), ``"blur_ig"`` (the baseline is the fully blurred image),
            ``"guided_ig"``, ``"expected_gradients"`` (complete in expectation over the
            reference draws: the delta shrinks like 1 / sqrt(nsamples)), ``"deeplift"`` and
            ``"deepliftshap"`` (complete by construction: the delta is float rounding), or a
            registered method whose record has ``delta=True``.
        target: classes (None = the prediction, pinned).
        **run: the shared run options (seed, max_batch, framework, output, model_kwargs,
            method_options), see :class:`~xaikit.evaluate.RunOptions`. ``seed`` seeds the method
            (Expected Gradients' reference draws, SmInt's noise); ``method_options`` holds
            ``nsamples``, ``baseline``, ``quadrature``, ...

    Returns:
        A :class:`CompletenessResult`; ``.summary`` has the mean / max absolute and relative delta.

    Example:
        >>> import torch
        >>> model = torch.nn.Linear(4, 3)
        >>> r = completeness(model, torch.rand(2, 4), method_options={"nsamples": 8, "baseline": "zeros"})
        >>> r.summary["max_abs"] < 1e-5
        True
    """
    name = check_method(method)
    settings = RunSettings.of(run)
    options = check_method_options(
        settings.method_options,
        {**RESERVED, "return_delta": "nothing: completeness asks for the delta itself"},
    )
    from xaikit.xai import explain, get_method, method_names

    complete = method_names(delta=True)
    if name not in complete:
        raise XaikitValueError(
            f"completeness applies to the methods with a completeness delta {', '.join(map(repr, complete))}; "
            f"got method {method!r}"
        )
    if options.get("magnitude", False):
        raise XaikitValueError(
            f"completeness of {name!r} needs magnitude=False (squared attributions do not add up); "
            "got magnitude=True"
        )
    if "magnitude" in get_method(name).options:  # SmInt's (and Guided IG's) default squares the paths
        options["magnitude"] = False

    attr, delta = explain(
        model, x, target=target, method=name, framework=settings.framework, seed=settings.seed,
        max_batch=settings.max_batch, output=settings.output, model_kwargs=settings.model_kwargs, return_delta=True,
        **options,
    )  # fmt: skip
    arrays = attr if isinstance(attr, list) else [attr]
    total = sum(np.asarray(a, dtype=np.float64).reshape(a.shape[0], -1).sum(axis=1) for a in arrays)
    delta = np.asarray(delta, dtype=np.float64)
    gap = total - delta
    with np.errstate(invalid="ignore", divide="ignore"):
        relative = np.where(gap != 0, np.abs(delta) / np.abs(np.where(gap != 0, gap, 1.0)), np.nan)
    return CompletenessResult(delta=delta, gap=gap, total=np.asarray(total), relative=relative)
