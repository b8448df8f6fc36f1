"""Complexity: is the explanation concise? Two scores of the map alone (no model calls).

* :func:`sparseness` — the Gini index of the map's magnitudes (Chalasani et al., "Concise
  Explanations of Neural Networks using Adversarial Training", ICML 2020): 0 when every pixel
  carries the same weight, towards 1 when a few pixels carry it all. Higher = sparser.
* :func:`complexity` — the Shannon entropy of the map's magnitudes normalized to a distribution
  (Bhatt et al., "Evaluating and Aggregating Feature-based Model Explanations", IJCAI 2020):
  0 when one pixel carries everything, log(n) for a uniform map of n pixels. Lower = simpler.

A concise map is easier to read; it is not by itself a faithful one (a map of a single random
pixel is perfectly sparse), so read these beside the faithfulness scores.

Both agree with Quantus 0.6's ``Sparseness`` and ``Complexity`` (``abs=True``) on the same maps
to 1e-6 (``benchmarks/quantus_complexity.py``; Quantus adds 1e-7 to every value before the Gini
sum and 1e-12 inside the log, which we do not: the only difference).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from xaikit.errors import XaikitValueError, describe
from xaikit.evaluate._common import host, maps_alone_or_explain
from xaikit.evaluate._conventions import public
from xaikit.evaluate._options import RunOptions, RunSettings, Unpack

__all__ = ["CHANNELS", "ComplexityResult", "SparsenessResult", "complexity", "sparseness"]

#: how the channels of a multi-channel map are treated by :func:`sparseness` and :func:`complexity`
CHANNELS = ("sum", "flatten")

#: the positional parameters of :func:`sparseness` and :func:`complexity` before the options
#: became keyword-only: ``complexity(maps, model, x)`` is now ``complexity(maps, model=, x=)``
_OLD_ORDER = ("saliency", "model", "x", "target")


@dataclass
class SparsenessResult:
    """Per-sample sparseness (Gini index of the map's magnitudes); higher = sparser.

    Attributes:
        scores: (B,) the Gini index of each map, in [0, 1 - 1/n] (0 for a constant map).
        targets: (B,) the classes explained when the maps were computed by name, else None.
    """

    scores: np.ndarray
    targets: np.ndarray | None = None

    @property
    def mean(self) -> float:
        """The mean score over samples."""
        return float(np.mean(self.scores))


@dataclass
class ComplexityResult:
    """Per-sample complexity (entropy of the normalized map magnitudes, in nats); lower = simpler.

    Attributes:
        scores: (B,) the entropy of each map, in [0, log n] (NaN for an all-zero map).
        targets: (B,) the classes explained when the maps were computed by name, else None.
    """

    scores: np.ndarray
    targets: np.ndarray | None = None

    @property
    def mean(self) -> float:
        """The mean score over samples (NaN scores left out)."""
        ok = self.scores[np.isfinite(self.scores)]
        return float(ok.mean()) if ok.size else float("nan")


def _check_channels(channels: Any) -> str:
    if not isinstance(channels, str) or channels not in CHANNELS:
        raise XaikitValueError(
            f"channels must be one of {', '.join(map(repr, CHANNELS))}; got "
            + (repr(channels) if isinstance(channels, str) else describe(channels))
        )
    return channels


def _flat_magnitudes(saliency: Any, channels: str) -> np.ndarray:
    """(B, n) magnitudes of the maps."""
    arr = host(saliency, "saliency").astype(np.float64)
    if arr.ndim < 2 or arr.shape[0] == 0:
        raise XaikitValueError(f"saliency must be a batch of maps (B, ...); got {describe(saliency)}")
    if not np.all(np.isfinite(arr)):
        raise XaikitValueError("saliency holds NaN or infinite values")
    mag = np.abs(arr)
    if channels == "sum" and mag.ndim == 4:
        # (B, C, H, W) or (B, H, W, C): the channel axis is the short one at either end
        axis = 1 if mag.shape[1] <= 4 and mag.shape[-1] > 4 else -1 if mag.shape[-1] <= 4 else None
        if axis is None:
            raise XaikitValueError(
                f"saliency {describe(saliency)} has 4 axes but no channel axis (of at most 4) first or "
                "last: pass (B, H, W) maps, or channels='flatten' to score every value"
            )
        mag = mag.sum(axis=axis)
    return mag.reshape(mag.shape[0], -1)


def gini(values: np.ndarray) -> np.ndarray:
    """The Gini index of each row of non-negative ``values`` (B, n); 0 for a constant row.

    Example:
        >>> gini(np.array([[1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 1.0]])).tolist()
        [0.0, 0.75]
    """
    v = np.sort(np.asarray(values, dtype=np.float64), axis=1)
    n = v.shape[1]
    weights = 2.0 * np.arange(1, n + 1) - n - 1
    total = v.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = (v * weights).sum(axis=1) / (n * total)
    return np.where(total > 0, out, 0.0)


@public(old_order=_OLD_ORDER)
def sparseness(
    saliency: Any,
    *,
    channels: str = "sum",
    model: Any = None,
    x: Any = None,
    target: Any = None,
    **run: Unpack[RunOptions],
) -> SparsenessResult:
    r"""Sparseness of each map: the Gini index of its magnitudes (higher = sparser).

    With the magnitudes sorted ascending, :math:`a_{(1)} \le \dots \le a_{(n)}`,

    .. math:: G = \frac{\sum_{i=1}^{n} (2i - n - 1)\, a_{(i)}}{n \sum_i a_{(i)}}

    0 for a constant map, :math:`1 - 1/n` when a single pixel carries everything; a map of zeros
    scores 0.

    Args:
        saliency: one map per sample, ``(B, H, W)``, ``(B, C, H, W)`` or ``(B, H, W, C)`` (raw
            attributions or display masks; a 4-axis map's channel axis is the one of at most 4
            at either end, the last when both qualify), or a method name computed on ``model``
            and ``x``.
        channels: ``"sum"`` (default): the magnitudes of a multi-channel map are summed over its
            channels first, one value per pixel, like every other xaikit evaluation. ``"flatten"``:
            every value counts on its own, as Quantus does with a multi-channel map (Quantus
            flattens whatever it is given; give it ``(B, 1, H, W)`` maps to score pixels).
        model: with a method name: the model to explain.
        x: with a method name: the input batch.
        target: with a method name: the classes explained (None: the prediction, pinned).
        **run: with a method name: the shared run options (seed, max_batch, framework, output,
            model_kwargs, method_options), see :class:`~xaikit.evaluate.RunOptions`.

    Returns:
        A :class:`SparsenessResult` with ``.scores`` (B,) and ``.mean``.

    Example:
        >>> maps = np.zeros((2, 4, 4)); maps[0] = 1.0; maps[1, 0, 0] = 5.0
        >>> sparseness(maps).scores.round(4).tolist()
        [0.0, 0.9375]
    """
    _check_channels(channels)
    maps, targets = maps_alone_or_explain(saliency, model=model, x=x, target=target, run=RunSettings.of(run))
    flat = _flat_magnitudes(maps, channels)
    return SparsenessResult(gini(flat), targets)


@public(old_order=_OLD_ORDER)
def complexity(
    saliency: Any,
    *,
    channels: str = "sum",
    model: Any = None,
    x: Any = None,
    target: Any = None,
    **run: Unpack[RunOptions],
) -> ComplexityResult:
    r"""Complexity of each map: the entropy of its normalized magnitudes (lower = simpler).

    With :math:`p_i = |a_i| / \sum_j |a_j|`,

    .. math:: H = -\sum_i p_i \log p_i \quad (0 \log 0 = 0)

    in nats: 0 when one pixel carries everything, :math:`\log n` for a uniform map; NaN for a map
    of zeros (no distribution).

    Args:
        saliency: one map per sample, ``(B, H, W)``, ``(B, C, H, W)`` or ``(B, H, W, C)``, or a
            method name computed on ``model`` and ``x``.
        channels: ``"sum"`` (default, one value per pixel) or ``"flatten"`` (every value, as
            Quantus does with a multi-channel map); see :func:`sparseness`.
        model: with a method name: the model to explain.
        x: with a method name: the input batch.
        target: with a method name: the classes explained (None: the prediction, pinned).
        **run: with a method name: the shared run options (seed, max_batch, framework, output,
            model_kwargs, method_options), see :class:`~xaikit.evaluate.RunOptions`.

    Returns:
        A :class:`ComplexityResult` with ``.scores`` (B,) and ``.mean``.

    Example:
        >>> maps = np.zeros((2, 4, 4)); maps[0] = 1.0; maps[1, 0, 0] = 5.0
        >>> complexity(maps).scores.round(4).tolist()  # log(16) = 2.7726
        [2.7726, 0.0]
    """
    _check_channels(channels)
    maps, targets = maps_alone_or_explain(saliency, model=model, x=x, target=target, run=RunSettings.of(run))
    flat = _flat_magnitudes(maps, channels)
    total = flat.sum(axis=1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        p = flat / total
        terms = np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0)), 0.0)
    scores = 0.0 - terms.sum(axis=1)  # 0.0 - 0.0 is +0.0, where -(0.0) is -0.0
    scores = np.where(total[:, 0] > 0, scores, np.nan)
    return ComplexityResult(np.asarray(scores, dtype=np.float64), targets)
