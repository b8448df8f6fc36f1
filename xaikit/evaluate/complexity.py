"""Complexity: is the explanation concise? Four scores of the map alone (no model calls).

* :func:`sparseness` — the Gini index of the map's magnitudes (Chalasani et al., "Concise
  Explanations of Neural Networks using Adversarial Training", ICML 2020): 0 when every pixel
  carries the same weight, towards 1 when a few pixels carry it all. Higher = sparser.
* :func:`complexity` — the Shannon entropy of the map's magnitudes normalized to a distribution
  (Bhatt et al., "Evaluating and Aggregating Feature-based Model Explanations", IJCAI 2020):
  0 when one pixel carries everything, log(n) for a uniform map of n pixels. Lower = simpler.

* :func:`effective_complexity` — the number of attributions whose magnitude exceeds ``eps``
  (Nguyen & Martinez, "On quantitative aspects of model interpretability", 2020). Lower = simpler.
* :func:`mst_c` — minimum spanning tree compactness (Mesgari et al., "Structural Compactness as a
  Complementary Criterion for Explanation Quality", 2026): how small an area the salient pixels
  cover and how tightly they hang together. Higher = more compact.

A concise map is easier to read; it is not by itself a faithful one (a map of a single random
pixel is perfectly sparse), so read these beside the faithfulness scores.

Both agree with Quantus 0.6's ``Sparseness`` and ``Complexity`` (``abs=True``) on the same maps
to 1e-6 (``benchmarks/quantus_complexity.py``; Quantus adds 1e-7 to every value before the Gini
sum and 1e-12 inside the log, which we do not: the only difference).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from xaikit.backend import get_backend
from xaikit.checks import check_choice, check_number
from xaikit.errors import XaikitValueError, describe
from xaikit.evaluate._common import (
    PerSample,
    check_bool,
    host,
    input_layout,
    maps_alone_or_explain,
    short_channel_axis,
)
from xaikit.evaluate._conventions import public
from xaikit.evaluate._options import RunOptions, RunSettings, Unpack

__all__ = [
    "CHANNELS",
    "ComplexityResult",
    "EffectiveComplexityResult",
    "MSTCResult",
    "SparsenessResult",
    "complexity",
    "effective_complexity",
    "mst_c",
    "sparseness",
]

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
class ComplexityResult(PerSample):
    """Per-sample complexity (entropy of the normalized map magnitudes, in nats); lower = simpler.

    Attributes:
        scores: (B,) the entropy of each map, in [0, log n] (NaN for an all-zero map).
        targets: (B,) the classes explained when the maps were computed by name, else None.
    """

    scores: np.ndarray
    targets: np.ndarray | None = None


def _check_channels(channels: Any) -> str:
    return check_choice(channels, "channels", CHANNELS)


def _magnitudes(saliency: Any, channels: str, first: bool | None = None) -> np.ndarray:
    """(B, ...) magnitudes of the maps: (B, *spatial) with ``channels="sum"``, as given with
    ``"flatten"``. ``first``: whether 4-D maps that could be read either way have their channels
    first (the layout of the inputs they were computed for), or None (see :func:`_channel_axis`)."""
    arr = host(saliency, "saliency").astype(np.float64)
    if arr.ndim < 2 or arr.shape[0] == 0:
        raise XaikitValueError(f"saliency must be a batch of maps (B, ...); got {describe(saliency)}")
    if not np.all(np.isfinite(arr)):
        raise XaikitValueError("saliency holds NaN or infinite values")
    mag = np.abs(arr)
    if channels == "sum" and mag.ndim == 4:
        mag = mag.sum(axis=_channel_axis(mag.shape, saliency, first))
    return mag


def _channel_axis(shape: tuple[int, ...], saliency: Any, first: bool | None = None) -> int:
    """The channel axis of 4-D maps, (B, C, H, W) or (B, H, W, C), by the rule of
    :func:`~xaikit.evaluate._common.short_channel_axis`: the short one (at most 4) at either end;
    where both ends are short, the one of size 1 (a grayscale map: (B, 1, 4, 4) is 4 x 4 pixels,
    not 1 x 4), else the layout of the inputs the maps were computed for (``first``) or of the
    maps' framework (a torch tensor: first; TF: last); where nothing decides (a numpy
    (B, 3, 4, 4)), an error, never a guess.

    Example:
        >>> _channel_axis((2, 1, 4, 4), None), _channel_axis((2, 8, 8, 3), None)
        (1, -1)
        >>> _channel_axis((2, 3, 4, 4), None, first=True)
        1
    """
    advice = (
        "pass (B, H, W) maps (channels summed as you want them), or channels='flatten' to score every value"
    )
    return known_channel_axis(shape, saliency, "saliency", advice, first)


def known_channel_axis(
    shape: tuple[int, ...], value: Any, name: str, advice: str, first: bool | None = None
) -> int:
    """The channel axis of the 4-D ``value`` (of shape ``shape``) by
    :func:`~xaikit.evaluate._common.short_channel_axis`, or an error that names it (``name``) and
    says what to pass instead (``advice``) where nothing decides: refused, never guessed."""
    axis = short_channel_axis(shape, value, first)
    if axis is not None:
        return axis
    what = "no channel axis (of at most 4)" if shape[1] > 4 else "a short axis at both ends"
    raise XaikitValueError(
        f"{name} {describe(value)} has 4 axes and {what} first or last, so its channel axis is not known: {advice}"
    )


def _flat_magnitudes(saliency: Any, channels: str, first: bool | None = None) -> np.ndarray:
    """(B, n) magnitudes of the maps."""
    mag = _magnitudes(saliency, channels, first)
    return mag.reshape(mag.shape[0], -1)


def _map_magnitudes(
    saliency: Any, channels: Any, model: Any, x: Any, target: Any, run: Mapping[str, Any]
) -> tuple[np.ndarray, np.ndarray | None]:
    """``(magnitudes, targets)`` of a metric of maps alone: the (B, n) magnitudes of the maps
    (computed first for a method name, see :func:`~xaikit.evaluate._common.maps_alone_or_explain`)
    and the classes explained (None for maps given)."""
    _check_channels(channels)
    settings = RunSettings.of(run)
    maps, targets = maps_alone_or_explain(saliency, model=model, x=x, target=target, run=settings)
    return _flat_magnitudes(maps, channels, _computed_first(saliency, model, x, settings)), targets


def _computed_first(saliency: Any, model: Any, x: Any, settings: RunSettings) -> bool | None:
    """For maps computed from a method name: whether they have their channels first (they are
    laid out as ``x`` is); None for maps given, or an ``x`` without a channel axis."""
    if not isinstance(saliency, str):
        return None
    _, axis = input_layout(x, get_backend(model, settings.framework))
    return None if axis is None else axis == 1


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
    flat, targets = _map_magnitudes(saliency, channels, model, x, target, run)
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
    flat, targets = _map_magnitudes(saliency, channels, model, x, target, run)
    total = flat.sum(axis=1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        p = flat / total
        terms = np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0)), 0.0)
    scores = 0.0 - terms.sum(axis=1)  # 0.0 - 0.0 is +0.0, where -(0.0) is -0.0
    scores = np.where(total[:, 0] > 0, scores, np.nan)
    return ComplexityResult(np.asarray(scores, dtype=np.float64), targets)


# ---- effective complexity ------------------------------------------------------------------
@dataclass
class EffectiveComplexityResult:
    """Per-sample effective complexity: how many attributions matter; lower = simpler.

    Attributes:
        scores: (B,) the number of values (pixels with ``channels="sum"``) whose magnitude
            exceeds ``eps`` (after dividing by the map's largest magnitude with ``normalize``).
        eps: the threshold used.
        targets: (B,) the classes explained when the maps were computed by name, else None.
    """

    scores: np.ndarray
    eps: float
    targets: np.ndarray | None = None

    @property
    def mean(self) -> float:
        """The mean count over samples."""
        return float(np.mean(self.scores))


def _normalized(mag: np.ndarray, normalize: bool) -> np.ndarray:
    """(B, n) magnitudes, each row divided by its largest value with ``normalize`` (a row of
    zeros stays zeros)."""
    if not normalize:
        return mag
    top = mag.max(axis=1, keepdims=True)
    return mag / np.where(top > 0, top, 1.0)


@public()
def effective_complexity(
    saliency: Any,
    *,
    eps: float = 1e-5,
    normalize: bool = True,
    channels: str = "sum",
    model: Any = None,
    x: Any = None,
    target: Any = None,
    **run: Unpack[RunOptions],
) -> EffectiveComplexityResult:
    r"""Effective complexity of each map: how many attributions exceed ``eps`` in magnitude.

    Nguyen & Martinez ("On quantitative aspects of model interpretability", 2020,
    https://arxiv.org/abs/2007.07584) call a feature whose attribution is at most a small
    threshold unimportant (the model should not depend on it: see
    :func:`~xaikit.evaluate.non_sensitivity`) and count the rest,

    .. math:: \mathrm{EC}_\varepsilon = \left|\{ i : |a_i| > \varepsilon \}\right|,

    so a map that needs fewer features to explain the prediction is simpler. With ``normalize``
    each map is first divided by its own largest magnitude, so ``eps`` is a fraction of the
    map's peak and the count does not depend on the method's scale.

    Quantus 0.6's ``EffectiveComplexity`` (``eps=1e-5``, ``abs=True``, ``normalise=True``)
    divides by the largest magnitude of the whole *batch* (``normalise_by_max`` over every
    axis), so a sample's count there depends on the maps beside it; here it never does. Given
    per-sample normalisation (``normalise_func_kwargs={"normalise_axes": (1, 2, 3)}``) or
    ``normalise=False``, the two agree exactly.

    Args:
        saliency: one map per sample, ``(B, H, W)``, ``(B, C, H, W)`` or ``(B, H, W, C)``, or a
            method name computed on ``model`` and ``x``.
        eps: the threshold (non-negative); a magnitude must be strictly above it.
        normalize: divide each map by its largest magnitude first (default, as Quantus; a map of
            zeros stays zeros and counts 0).
        channels: ``"sum"`` (default: the magnitudes of a multi-channel map are summed over its
            channels, one count per pixel) or ``"flatten"`` (every value counts, as Quantus does
            with a multi-channel map).
        model: with a method name: the model to explain.
        x: with a method name: the input batch.
        target: with a method name: the classes explained (None: the prediction, pinned).
        **run: with a method name: the shared run options, see :class:`~xaikit.evaluate.RunOptions`.

    Returns:
        An :class:`EffectiveComplexityResult` with ``.scores`` (B,) counts and ``.mean``.

    Example:
        >>> maps = np.zeros((2, 4, 4)); maps[0, 0, :3] = [1.0, 0.5, 1e-7]; maps[1] = 2.0
        >>> effective_complexity(maps).scores.tolist()
        [2.0, 16.0]
    """
    eps = check_number(eps, "eps", 0.0)
    normalize = check_bool(normalize, "normalize")
    flat, targets = _map_magnitudes(saliency, channels, model, x, target, run)
    mag = _normalized(flat, normalize)
    return EffectiveComplexityResult((mag > eps).sum(axis=1).astype(np.float64), eps, targets)


# ---- MST-C -----------------------------------------------------------------------------------
@dataclass
class MSTCResult(PerSample):
    """Per-sample minimum spanning tree compactness; higher = more compact.

    Attributes:
        scores: (B,) ``spread * cohesion`` (times the image diagonal and 100 with ``scale``);
            0 for a map of zeros, NaN where fewer than two pixels are salient.
        spread: (B,) ``1 / sqrt(hull area)`` of the salient pixels (``1 / diagonal`` where
            they lie on a line).
        cohesion: (B,) the number of salient pixels over the length of their Euclidean minimum
            spanning tree.
        points: (B,) how many pixels are salient.
        targets: (B,) the classes explained when the maps were computed by name, else None.
    """

    scores: np.ndarray
    spread: np.ndarray
    cohesion: np.ndarray
    points: np.ndarray
    targets: np.ndarray | None = None


def emst_length(points: np.ndarray) -> float:
    """The total length of the Euclidean minimum spanning tree of distinct 2-D ``points`` (n, 2).

    Every edge of a Euclidean minimum spanning tree is an edge of the Delaunay triangulation, so
    the tree is found among those O(n) edges (points on one line: the gaps along the line).

    Example:
        >>> emst_length(np.array([[0.0, 0.0], [0.0, 1.0], [5.0, 1.0]]))
        6.0
    """
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import minimum_spanning_tree
    from scipy.spatial import Delaunay

    pts = np.asarray(points, dtype=np.float64)
    n = pts.shape[0]
    if n < 2:
        return 0.0
    centred = pts - pts[0]
    if n == 2 or np.linalg.matrix_rank(centred) < 2:
        direction = centred[np.argmax(np.abs(centred).sum(axis=1))]
        along = np.sort(centred @ direction / np.linalg.norm(direction))
        return float(np.diff(along).sum())
    simplices = Delaunay(pts).simplices
    edges = np.concatenate([simplices[:, [0, 1]], simplices[:, [1, 2]], simplices[:, [0, 2]]])
    edges = np.unique(np.sort(edges, axis=1), axis=0)
    lengths = np.linalg.norm(pts[edges[:, 0]] - pts[edges[:, 1]], axis=1)
    graph = coo_matrix((lengths, (edges[:, 0], edges[:, 1])), shape=(n, n)).tocsr()
    return float(minimum_spanning_tree(graph).sum())


def _hull_root_area(points: np.ndarray, diagonal: float) -> float:
    """sqrt of the convex hull's area of the points; the image diagonal where the hull is flat."""
    from scipy.spatial import ConvexHull

    if points.shape[0] < 3 or np.linalg.matrix_rank(points - points[0]) < 2:
        return diagonal
    area = float(ConvexHull(points).volume)  # in 2-D, .volume is the area
    return float(np.sqrt(area)) if area > 1e-12 else diagonal


@public()
def mst_c(
    saliency: Any,
    *,
    threshold: float = 80.0,
    scale: bool = True,
    model: Any = None,
    x: Any = None,
    target: Any = None,
    **run: Unpack[RunOptions],
) -> MSTCResult:
    r"""MST-C: how compact the salient pixels of each map are (higher = more compact).

    Mesgari et al. ("Structural Compactness as a Complementary Criterion for Explanation
    Quality", 2026, https://arxiv.org/abs/2603.29491): the salient points V are the pixels whose
    magnitude is at least the ``threshold``-th percentile of the map's magnitudes (channels
    summed); with :math:`A` the area of their convex hull and :math:`L_T` the length of their
    Euclidean minimum spanning tree,

    .. math:: \mathrm{MST\text{-}C} = \underbrace{\frac{1}{\sqrt{A}}}_{\text{spread}}\cdot
              \underbrace{\frac{|V|}{L_T}}_{\text{cohesion}}
              \quad(\times\ \sqrt{H^2 + W^2} \cdot 100 \text{ with } \texttt{scale}).

    A few tight blobs score high; scattered points (a long tree) or a wide hull score low. The
    tree spans every salient point (its edges are found among the Delaunay triangulation's, so
    it is exact). Conventions of degenerate maps (as Quantus): a map of zeros scores 0, fewer
    than two salient points score NaN, and points on a line use the image diagonal for
    :math:`\sqrt{A}`.

    Quantus's ``MSTC`` (main branch, not in 0.6) approximates the tree by the minimum spanning
    *forest* of a k-nearest-neighbour graph (``k=20``): when the salient pixels form blobs more
    than k neighbours apart the graph falls apart and the gaps between the blobs are left out
    of :math:`L_T` (a warning), so scattered maps score as compact as one blob. Where that
    graph holds the tree (one connected region, or ``auto_increase_k`` reaching it) the two
    agree exactly.

    Args:
        saliency: one map per sample, ``(B, H, W)``, ``(B, C, H, W)`` or ``(B, H, W, C)`` (the
            magnitudes of a multi-channel map are summed over its channels), or a method name
            computed on ``model`` and ``x``.
        threshold: the percentile of the magnitudes a salient pixel reaches, in [0, 100)
            (default 80: the top 20 %, ties included).
        scale: multiply by the image diagonal and 100 (Quantus's ``scale_score``, default), so
            that scores of images of other sizes compare.
        model: with a method name: the model to explain.
        x: with a method name: the input batch.
        target: with a method name: the classes explained (None: the prediction, pinned).
        **run: with a method name: the shared run options, see :class:`~xaikit.evaluate.RunOptions`.

    Returns:
        An :class:`MSTCResult` with ``.scores`` (B,), its two factors and ``.mean``.

    Example:
        >>> maps = np.zeros((1, 8, 8)); maps[0, 2:4, 2:4] = 1.0  # one 2x2 blob: A = 1, L_T = 3
        >>> r = mst_c(maps, threshold=95, scale=False)
        >>> float(r.spread[0]), float(r.cohesion[0]), r.points.tolist()
        (1.0, 1.3333333333333333, [4])
    """
    threshold = check_number(threshold, "threshold", 0.0, 100.0)
    if threshold >= 100.0:
        raise XaikitValueError(f"threshold must be a percentile in [0, 100); got {threshold!r}")
    scale = check_bool(scale, "scale")
    settings = RunSettings.of(run)
    maps, targets = maps_alone_or_explain(saliency, model=model, x=x, target=target, run=settings)
    mag = _magnitudes(maps, "sum", _computed_first(saliency, model, x, settings))
    if mag.ndim != 3:
        raise XaikitValueError(
            f"mst_c needs image maps (B, H, W), (B, C, H, W) or (B, H, W, C); got {describe(maps)}"
        )
    batch, height, width = mag.shape
    diagonal = float(np.hypot(height, width))
    out = np.full((4, batch), np.nan)
    for b in range(batch):
        a = mag[b]
        if a.max() == 0.0:
            out[:, b] = (0.0, np.nan, np.nan, 0.0)
            continue
        points = np.argwhere(a >= np.percentile(a, threshold)).astype(np.float64)
        out[3, b] = len(points)
        if len(points) < 2:
            continue
        out[1, b] = 1.0 / _hull_root_area(points, diagonal)
        out[2, b] = len(points) / emst_length(points)
        out[0, b] = out[1, b] * out[2, b] * (diagonal * 100.0 if scale else 1.0)
    return MSTCResult(out[0], out[1], out[2], out[3].astype(np.int64), targets)
