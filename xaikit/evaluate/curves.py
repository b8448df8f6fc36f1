"""Perturbation curves over regions: region perturbation (AOPC), IROF and selectivity.

Each metric cuts an image into regions, orders the regions by the relevance the map gives them
and removes them one after another, *cumulatively* (step k has the first k regions replaced by
a baseline), recording the target class's score after every step:

* :func:`region_perturbation` — Samek et al., "Evaluating the visualization of what a deep
  neural network has learned", IEEE TNNLS 2017 (https://arxiv.org/abs/1509.06321): square
  patches ordered by their summed relevance, replaced by uniform random values; the AOPC (area
  over the perturbation curve) ``1/(L+1) sum_{k=0..L} f(x) - f(x_k)``.
* :func:`irof` — Rieger & Hansen, "IROF: a low resource evaluation metric for explanation
  methods", 2020 (https://arxiv.org/abs/2003.08747): superpixels (SLIC) ordered by their mean
  relevance, replaced by the image's mean colour; the area over the curve of ``f(x_k) / f(x)``
  against the fraction of superpixels removed.
* :func:`selectivity` — Montavon et al., "Methods for interpreting and understanding deep neural
  networks", Digital Signal Processing 2018 (https://arxiv.org/abs/1706.07979): square patches
  set to black one after another; the area under the score curve.

Pixel flipping (Bach et al., 2015) is :func:`~xaikit.evaluate.deletion` (pixels instead of
regions). Every removal image of every step of every sample is built on the device, chunk by
chunk, from one rank tensor (a pixel is replaced at step k exactly when its region's place in
the order is below k) and all of them are scored by one chunked
:func:`~xaikit.xai.internal.forward_scores` call per metric: never one pass per step. The model
is left unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from xaikit.checks import check_choice, check_int
from xaikit.errors import XaikitValueError, describe
from xaikit.evaluate._conventions import public
from xaikit.evaluate._options import RunOptions, RunSettings, Unpack
from xaikit.evaluate._ranks import check_rank, rank_positions
from xaikit.evaluate.faithfulness import _rank_scores, _ranked_map, _Run, _start
from xaikit.xai.agnostic.features import feature_ids
from xaikit.xai.internal import check_baseline

__all__ = ["CURVE_BASELINES", "RegionCurveResult", "irof", "patch_grid", "region_perturbation", "selectivity"]

#: the baseline names of the region curves (an array is accepted too): ``"uniform"`` draws
#: uniform random values in each sample's value range, the others are fixed images
CURVE_BASELINES = ("uniform", "zeros", "black", "mean", "blur")
#: region orders: most relevant first, least relevant first
REGION_ORDERS = ("morf", "lerf")


@dataclass
class RegionCurveResult:
    """A region-removal curve for each sample.

    Attributes:
        kind: ``"region_perturbation"``, ``"irof"`` or ``"selectivity"``.
        curve: (B, K + 1) the target class's score (the model's output as it returns it) after
            removing 0, 1, ..., K regions (K: the most steps of any sample; NaN past a sample's
            own last step, which only IROF's per-image superpixel counts leave).
        scores: (B,) the metric: the AOPC (region perturbation; MoRF: higher is better), the
            area over the normalized curve (IROF: higher is better) or the area under the
            curve (selectivity: lower is better).
        steps: (B,) the regions removed by each sample's last step.
        regions: (B, *spatial) int: the region of each pixel, ``0 ... R_b - 1``.
        order: (B, R) the regions in removal order (-1 past a sample's own R_b).
        targets: (B,) the class whose score is recorded.
        chunks: rows of each forward pass.
    """

    kind: str
    curve: np.ndarray
    scores: np.ndarray
    steps: np.ndarray
    regions: np.ndarray
    order: np.ndarray
    targets: np.ndarray
    chunks: list[int] = field(default_factory=list)

    @property
    def drops(self) -> np.ndarray:
        """(B, K + 1) ``f(x) - f(x_k)``: the score lost after k regions."""
        return self.curve[:, :1] - self.curve

    @property
    def relative(self) -> np.ndarray:
        """(B, K + 1) ``f(x_k) / f(x)``: the curve relative to the clean score (IROF's curve)."""
        with np.errstate(divide="ignore", invalid="ignore"):
            return self.curve / self.curve[:, :1]

    @property
    def mean(self) -> float:
        """The mean of :attr:`scores` over samples, NaNs left out (NaN if all are)."""
        ok = ~np.isnan(self.scores)
        return float(self.scores[ok].mean()) if ok.any() else float("nan")

    def __repr__(self) -> str:
        return (
            f"RegionCurveResult({self.kind}, samples={len(self.scores)}, steps={int(self.steps.max())}, "
            f"mean={self.mean:.4f})"
        )


def patch_grid(spatial: tuple[int, int], patch_size: int) -> np.ndarray:
    """The square patches of an (H, W) image: the patch id of each pixel, in raster order.

    The grid is centred: when a side is not a multiple of ``patch_size``, the patches of both
    borders are cut, the top (left) one by ``floor(t / 2)`` pixels and the bottom (right) one by
    ``ceil(t / 2)``, ``t`` the missing pixels (Quantus pads the image so).

    Example:
        >>> patch_grid((4, 5), 2).tolist()
        [[0, 0, 1, 1, 2], [0, 0, 1, 1, 2], [3, 3, 4, 4, 5], [3, 3, 4, 4, 5]]
        >>> patch_grid((5, 3), 2)[:, 0].tolist()
        [0, 0, 2, 2, 4]
    """
    h, w = spatial
    per_side = []
    for side in (h, w):
        missing = -side % patch_size
        per_side.append((np.arange(side) + missing // 2) // patch_size)
    cols = -(-w // patch_size)
    return per_side[0][:, None] * cols + per_side[1][None, :]


def _region_start(
    model: Any, x: Any, saliency: Any, target: Any, baseline: Any, rank: Any, run: Mapping[str, Any]
) -> tuple[_Run, RunSettings]:
    """The checked ``baseline`` and ``rank`` of a region curve, and its run and settings."""
    check_baseline(baseline, CURVE_BASELINES)
    check_rank(rank)
    settings = RunSettings.of(run)
    return _start(model, x, saliency, target, settings), settings


def _check_image(run: _Run, x: Any, name: str) -> tuple[int, int]:
    if len(run.spatial) != 2:
        raise XaikitValueError(
            f"{name} needs image inputs (batch, H, W[, C]) or (batch, C, H, W); got {describe(x)}"
        )
    return run.spatial[0], run.spatial[1]


def _check_order(order: Any) -> str:
    return check_choice(order, "order", REGION_ORDERS)


def _fill(run: _Run, baseline: Any, seed: int) -> np.ndarray:
    """The value each input element takes when its region is removed (x's layout, float64):
    a fixed baseline image, an explicit array, or uniform draws in each sample's [min, max]
    from ``default_rng((seed, 1))``, sample after sample, channel-first (C, H, W) order whatever
    x's layout (so torch and Keras draw the same values)."""
    if not isinstance(baseline, str) or baseline != "uniform":
        return run.baseline_image(baseline)
    values = run.x_host()
    axis = run.channel_axis
    canon = values if axis in (None, 1) else np.moveaxis(values, axis, 1)
    rng = np.random.default_rng((seed, 1))
    flat = canon.reshape(canon.shape[0], -1)
    out = np.stack([rng.uniform(lo, hi, size=canon.shape[1:]) for lo, hi in zip(flat.min(1), flat.max(1))])
    return out if axis in (None, 1) else np.moveaxis(out, 1, axis)


def _orders(values: np.ndarray, counts: np.ndarray, order: str, seed: int) -> np.ndarray:
    """(B, R) each sample's regions in removal order (ties in a seeded random order), -1 past
    its own count; ``values`` (B, R) the regions' relevance (anything past a count is ignored)."""
    keyed = np.where(np.arange(values.shape[1])[None] < counts[:, None], values, -np.inf)
    keyed = keyed if order == "morf" else np.where(np.isfinite(keyed), -keyed, -np.inf)
    out = np.argsort(rank_positions(keyed, seed), axis=1)
    out[np.arange(values.shape[1])[None] >= counts[:, None]] = -1
    return out


def _curve(
    run: _Run,
    model: Any,
    regions: np.ndarray,
    order: np.ndarray,
    steps: int,
    fill: np.ndarray,
    target: Any,
    output: int | str,
) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """The target scores (B, steps + 1) after removing 0 ... steps regions of each sample in
    ``order`` (B, R), each removed element taking its ``fill`` value: all rows through one
    chunked :func:`forward_scores` call (row r: sample r % B, step r // B)."""
    rank = np.empty(regions.shape, dtype=np.float32)
    for b in range(run.batch):
        rank[b] = _rank_of(order[b])[regions[b]]
    sizes: list[int] = []
    curve, reported = _rank_scores(
        run, model, target, output, rank, run.upload(fill), np.arange(steps + 1), False, sizes
    )
    return curve, reported, sizes


def _rank_of(order: np.ndarray) -> np.ndarray:
    """Region -> its place in the removal ``order`` (-1 entries ignored)."""
    valid = order[order >= 0]
    out = np.empty(len(valid), dtype=np.int64)
    out[valid] = np.arange(len(valid))
    return out


def _patches(run: _Run, x: Any, name: str, patch_size: int) -> tuple[np.ndarray, int]:
    """(B, H, W) patch ids of every sample and the patch count."""
    spatial = _check_image(run, x, name)
    grid = patch_grid(spatial, patch_size)
    return np.broadcast_to(grid, (run.batch,) + spatial).copy(), int(grid.max()) + 1


def _region_values(smap: np.ndarray, regions: np.ndarray, size: int) -> np.ndarray:
    """(B, size) the map summed over each region."""
    return np.stack(
        [np.bincount(r.ravel(), weights=m.ravel(), minlength=size) for r, m in zip(regions, smap)]
    )


def _patch_curve(
    kind: str,
    model: Any,
    x: Any,
    saliency: Any,
    target: Any,
    patch_size: int,
    steps: int | None,
    order: str,
    baseline: Any,
    rank: str,
    run: Mapping[str, Any],
    score: Callable[[np.ndarray], np.ndarray],
) -> RegionCurveResult:
    """The result of a patch metric (``kind``): the patches ordered by the map summed over each
    (``order``), the first ``steps`` of them (None: all) removed one after another, and
    ``score(curve)`` (B,) its scores."""
    job, settings = _region_start(model, x, saliency, target, baseline, rank, run)
    regions, count = _patches(job, x, kind, patch_size)
    values = _region_values(_ranked_map(job, rank)[1], regions, count)
    removal = _orders(values, np.full(job.batch, count), order, settings.seed)
    n = count if steps is None else min(steps, count)
    fill = _fill(job, baseline, settings.seed)
    curve, targets, sizes = _curve(job, model, regions, removal, n, fill, target, settings.output)
    return RegionCurveResult(
        kind, curve, score(curve), np.full(job.batch, n), regions, removal, targets, sizes
    )


@public()
def region_perturbation(
    model: Any,
    x: Any,
    saliency: Any,
    *,
    target: Any = None,
    patch_size: int = 8,
    steps: int = 100,
    order: str = "morf",
    baseline: Any = "uniform",
    rank: str = "auto",
    **run: Unpack[RunOptions],
) -> RegionCurveResult:
    """Region perturbation (Samek et al., 2017): remove the most relevant patches first, the AOPC.

    The image is cut into ``patch_size`` x ``patch_size`` patches (:func:`patch_grid`, centred),
    ordered by the map summed over each patch (``order="morf"``: most relevant first; ``"lerf"``:
    least relevant first), and the first ``L = min(steps, patches)`` of them are replaced one
    after another, cumulatively. ``.scores`` is the paper's area over the perturbation curve

        ``AOPC = 1 / (L + 1) * sum_{k=0..L} (f(x) - f(x_k))``

    (the k = 0 term is 0): with MoRF a faithful map makes the score fall fast, a high AOPC.

    Quantus's ``RegionPerturbation`` (0.6) builds the same patches, order and images (given the
    same fill), but returns only the drops ``f(x) - f(x_k)`` for k = 1 ... L (``.drops[:, 1:]``
    here), whose mean is ``(L + 1) / L`` times the AOPC; its default fill is ``"black"`` and its
    ``"uniform"`` draws one value U(0, 1) per patch, not per pixel.

    Args:
        model: a torch or Keras/TF model returning (batch, classes).
        x: the input batch of images (numpy or tensor), in the model's layout.
        saliency: one map per sample (shapes as in :func:`~xaikit.evaluate.deletion`) or a
            method name that computes the maps with :func:`xaikit.xai.explain`.
        target: class per sample (or one for all); None = the model's prediction on x.
        patch_size: the side of the square patches (Quantus's default 8; the paper used 9x9
            neighbourhoods).
        steps: the patches removed, L (capped at the number of patches; Quantus's
            ``regions_evaluation``).
        order: ``"morf"`` (most relevant first) or ``"lerf"`` (least relevant first).
        baseline: what a removed pixel becomes: ``"uniform"`` (the paper's: values drawn
            uniformly between the sample's minimum and maximum, independently per element, from
            ``seed``), ``"black"`` (the sample's minimum), ``"zeros"``, ``"mean"`` (the sample's
            mean colour), ``"blur"``, or an array broadcastable to x: the value each element
            takes when its patch is removed (how a recorded random fill is handed over).
        rank: how the map is read, as in :func:`~xaikit.evaluate.deletion` (``"auto"``: signed
            when it holds a negative value, else by magnitude).
        **run: the shared run options (seed, max_batch, framework, output, model_kwargs,
            method_options), see :class:`~xaikit.evaluate.RunOptions`. ``seed`` also draws the
            uniform fill and the order of tied patches.

    Returns:
        A :class:`RegionCurveResult` (``.curve`` has L + 1 points per sample).

    Example:
        >>> import torch
        >>> model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 2))
        >>> res = region_perturbation(model, torch.rand(3, 1, 8, 8), torch.rand(3, 8, 8), patch_size=4)
        >>> res.curve.shape, res.steps.tolist(), res.scores.shape
        ((3, 5), [4, 4, 4], (3,))
    """
    patch_size = check_int(patch_size, "patch_size", 1)
    steps = check_int(steps, "steps", 1)
    order = _check_order(order)
    return _patch_curve(
        "region_perturbation", model, x, saliency, target, patch_size, steps, order, baseline, rank, run,
        lambda curve: (curve[:, :1] - curve).mean(axis=1),  # the AOPC
    )  # fmt: skip


@public()
def selectivity(
    model: Any,
    x: Any,
    saliency: Any,
    *,
    target: Any = None,
    patch_size: int = 8,
    baseline: Any = "black",
    rank: str = "auto",
    **run: Unpack[RunOptions],
) -> RegionCurveResult:
    """Selectivity (Montavon et al., 2018): set the most relevant patches to black one by one.

    The image is cut into ``patch_size`` x ``patch_size`` patches (:func:`patch_grid`), ordered
    by the map summed over each patch, most relevant first, and every patch is removed, one
    after another, cumulatively. ``.scores`` is the area under the score curve against the
    fraction of patches removed, from 0 (x itself) to 1 (trapezoid rule): a faithful map makes
    the score drop sharply, a low area.

    Quantus's ``Selectivity`` (0.6) removes the same patches in the same order but returns the
    scores after each removal only (``.curve[:, 1:]`` here, without f(x)); its area
    (``get_auc_score``) is the trapezoid over those N points with unit spacing,
    ``N * .scores - (f(x) + f(x_1)) / 2``.

    Args:
        model: a torch or Keras/TF model returning (batch, classes).
        x: the input batch of images (numpy or tensor), in the model's layout.
        saliency: one map per sample (shapes as in :func:`~xaikit.evaluate.deletion`) or a method name.
        target: class per sample (or one for all); None = the model's prediction on x.
        patch_size: the side of the square patches (Quantus's default 8; the paper shows 4x4 on
            small images).
        baseline: what a removed pixel becomes: ``"black"`` (the paper's: the sample's minimum),
            ``"zeros"``, ``"mean"``, ``"blur"``, ``"uniform"`` or an array broadcastable to x (see
            :func:`region_perturbation`).
        rank: how the map is read, as in :func:`~xaikit.evaluate.deletion`.
        **run: the shared run options (seed, max_batch, framework, output, model_kwargs,
            method_options), see :class:`~xaikit.evaluate.RunOptions`. ``seed`` also orders
            tied patches (and draws a uniform fill).

    Returns:
        A :class:`RegionCurveResult` (``.curve`` has patches + 1 points per sample); lower
        ``.scores`` is better.

    Example:
        >>> import torch
        >>> model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 2))
        >>> res = selectivity(model, torch.rand(2, 1, 8, 8), torch.rand(2, 8, 8), patch_size=4)
        >>> res.curve.shape, res.scores.shape
        ((2, 5), (2,))
    """
    patch_size = check_int(patch_size, "patch_size", 1)
    return _patch_curve(
        "selectivity", model, x, saliency, target, patch_size, None, "morf", baseline, rank, run,
        lambda curve: np.asarray(np.trapezoid(curve, dx=1.0 / (curve.shape[1] - 1), axis=1)),  # the AUC
    )  # fmt: skip


@public()
def irof(
    model: Any,
    x: Any,
    saliency: Any,
    *,
    target: Any = None,
    features: Any = "slic",
    segments: int = 100,
    baseline: Any = "mean",
    rank: str = "auto",
    **run: Unpack[RunOptions],
) -> RegionCurveResult:
    """IROF, iterative removal of features (Rieger & Hansen, 2020): the area over the curve.

    Each image is cut into superpixels (SLIC, as Quantus), ordered by the map's *mean* over each
    superpixel, most relevant first, and all of them are removed one after another,
    cumulatively, each replaced by the image's mean colour. With ``c_k = f(x_k) / f(x)`` the
    score after k of the image's S superpixels relative to the clean score, ``.scores`` is the
    area over that curve on the unit square,

        ``AOC = 1 - trapezoid(c_0 ... c_S, spacing 1 / S)``,

    so images with different superpixel counts compare (the paper averages the AOC over
    images); a faithful map makes the score fall fast, a high AOC. NaN where ``f(x)`` is 0.

    Quantus's ``IROF`` (0.6) returns ``S - trapezoid(c_1 ... c_S, spacing 1)`` (superpixel
    units, the k = 0 point left out; a sample with fewer superpixels than another of its batch
    also loses ``c_S / 2``, its curve padded with zeros), and its default ``"mean"`` fill is the
    mean of the whole *batch* (every sample and channel) recomputed from the already perturbed
    images at every step, so a sample's score depends on the other samples of its batch; here
    the fill is each image's own mean colour, fixed.

    Args:
        model: a torch or Keras/TF model returning (batch, classes); its output should be
            positive for the target (a probability), the curve being relative to it.
        x: the input batch of images (numpy or tensor), in the model's layout.
        saliency: one map per sample (shapes as in :func:`~xaikit.evaluate.deletion`) or a method name.
        target: class per sample (or one for all); None = the model's prediction on x.
        features: the superpixels: ``"slic"`` (scikit-image's SLIC at its defaults, on each
            image rescaled to [0, 1]), ``"felzenszwalb"``, ``"quickshift"``, ``"patches"`` (a
            grid of about ``segments`` cells) or an integer array of region ids, (H, W) or
            (B, H, W) (see ``xaikit.xai.agnostic.features``).
        segments: how many superpixels SLIC (and ``"patches"``) aims at (scikit-image's
            default, 100, as Quantus).
        baseline: what a removed pixel becomes: ``"mean"`` (the image's mean colour, per
            channel), ``"black"``, ``"zeros"``, ``"blur"``, ``"uniform"`` or an array
            broadcastable to x (see :func:`region_perturbation`).
        rank: how the map is read, as in :func:`~xaikit.evaluate.deletion`.
        **run: the shared run options (seed, max_batch, framework, output, model_kwargs,
            method_options), see :class:`~xaikit.evaluate.RunOptions`. ``seed`` also orders
            tied superpixels (and draws a uniform fill).

    Returns:
        A :class:`RegionCurveResult` (``.relative`` is IROF's normalized curve; ``.steps`` the
        superpixels of each image); higher ``.scores`` is better.

    Example:
        >>> import torch
        >>> model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 2), torch.nn.Softmax(1))
        >>> res = irof(model, torch.rand(2, 1, 8, 8), torch.rand(2, 8, 8), features="patches", segments=4)
        >>> res.steps.tolist(), res.curve.shape
        ([4, 4], (2, 5))
    """
    segments = check_int(segments, "segments", 1)
    job, settings = _region_start(model, x, saliency, target, baseline, rank, run)
    spatial = _check_image(job, x, "irof")
    values = job.x_host()
    if job.channel_axis is None:
        found = feature_ids(features, values[:, None], 1, segments, method="irof")
    else:
        found = feature_ids(features, values, job.channel_axis, segments, method="irof")
    regions = found.ids.reshape((job.batch,) + spatial)
    counts = found.counts
    width = int(counts.max())
    _, smap = _ranked_map(job, rank)
    sizes_of = np.stack([np.bincount(r.ravel(), minlength=width) for r in regions]).astype(np.float64)
    means = _region_values(smap, regions, width) / np.maximum(sizes_of, 1.0)
    removal = _orders(means, counts, "morf", settings.seed)
    fill = _fill(job, baseline, settings.seed)
    curve, targets, sizes = _curve(job, model, regions, removal, width, fill, target, settings.output)
    curve[np.arange(width + 1)[None] > counts[:, None]] = np.nan
    scores = np.empty(job.batch)
    with np.errstate(divide="ignore", invalid="ignore"):
        for b, s in enumerate(counts):
            rel = curve[b, : s + 1] / curve[b, 0]
            scores[b] = 1.0 - float(np.trapezoid(rel, dx=1.0 / s)) if curve[b, 0] != 0 else np.nan
    return RegionCurveResult("irof", curve, scores, counts.astype(np.int64), regions, removal, targets, sizes)
