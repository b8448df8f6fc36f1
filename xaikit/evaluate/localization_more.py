"""More localization scores against ground-truth masks: the rest of Quantus 0.6's localisation
metrics (Focus, which needs mosaics instead of masks, is in :mod:`xaikit.evaluate.focus`).

* *attribution localisation* (Kohlbrenner et al., "Towards best practice in explaining neural
  network decisions with LRP", IJCNN 2020, https://arxiv.org/abs/1910.09840): the share of
  the positive relevance inside the mask, optionally weighted by the inverse of the mask's
  share of the image (1 at chance level).
* *top-k intersection* (Theiner et al., "Interpretable semantic photo geolocation", WACV 2022,
  https://arxiv.org/abs/2104.14995): the share of the k most relevant pixels inside the mask.
* *relevance mass accuracy* (Arras et al., "CLEVR-XAI", Information Fusion 2022): the energy
  of :func:`~xaikit.evaluate.localization` under its Quantus name.
* *localization AUC* (Fawcett, "An introduction to ROC analysis", 2006; Quantus's ``AUC``):
  the ROC AUC of the map's values as a score for "inside the mask", ties counted as half.

Every function takes the maps and masks as :func:`~xaikit.evaluate.localization` does (or a
method name with ``model=`` and ``x=``) and returns (B,) float64 scores, NaN where a score is
undefined (an empty mask, a map without positive mass).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from xaikit.checks import check_int, check_number
from xaikit.errors import XaikitTypeError
from xaikit.evaluate._common import check_bool, ranks
from xaikit.evaluate._conventions import public
from xaikit.evaluate._options import RunOptions, RunSettings, Unpack
from xaikit.evaluate.localization import maps_and_masks, positive_share, top_k_share

__all__ = [
    "attribution_localisation",
    "localization_auc",
    "relevance_mass_accuracy",
    "top_k_intersection",
]

#: Quantus's default ``k`` of :func:`top_k_intersection` (1000) and the image size it was
#: chosen for (224 x 224): ``k=None`` keeps that share of the image's pixels
TOP_K_PIXELS, TOP_K_IMAGE = 1000, 224 * 224


def _maps_and_masks(
    saliency: Any, mask: Any, absolute: Any, model: Any, x: Any, target: Any, run: Mapping[str, Any]
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`~xaikit.evaluate.localization.maps_and_masks` of a metric's arguments (``absolute``
    checked, ``run`` its run options)."""
    return maps_and_masks(
        saliency, mask, check_bool(absolute, "absolute"), model=model, x=x, target=target,
        run=RunSettings.of(run),
    )  # fmt: skip


@public()
def attribution_localisation(
    saliency: Any,
    mask: Any,
    *,
    weighted: bool = False,
    max_size: float = 1.0,
    absolute: bool = False,
    model: Any = None,
    x: Any = None,
    target: Any = None,
    **run: Unpack[RunOptions],
) -> np.ndarray:
    """Attribution localisation: the share of the positive relevance that lies inside the mask.

    Kohlbrenner et al. (2020) define the inside-total relevance ratio ``mu = R_in / R_tot`` of
    the positive relevance, and a weighted variant ``mu_w = mu * S_tot / S_in`` (``S_in`` the
    mask's pixels, ``S_tot`` the image's) that divides by the chance level: a map spread
    evenly over the image has ``mu = S_in / S_tot`` and ``mu_w = 1``, so a small object is not
    judged by the same yardstick as one that fills the image. Quantus 0.6 multiplies by
    ``S_in / S_tot`` instead (and computes ``S_tot`` as the size of ``x_batch[2:]``, all but
    two samples of the batch); see ``docs/evaluate.md``, "More localisation metrics and Focus".

    Args:
        saliency: one map per sample, as :func:`~xaikit.evaluate.localization` takes it (or a
            method name with ``model=`` and ``x=``).
        mask: ground-truth object masks ``(B, H, W)`` (``(B, H, W, 1)`` / ``(B, 1, H, W)``
            too), booleans or 0/1.
        weighted: return ``mu_w = mu * S_tot / S_in`` (1 at chance level, up to S_tot / S_in).
        max_size: the largest share of the image a mask may cover, in (0, 1]; a sample whose
            mask covers more scores NaN (the ratio says little about objects that fill the
            image; Quantus only warns). Default 1: every sample is scored.
        absolute: score the magnitude of the map; default False, the paper's positive
            relevance of the signed map (channels summed with their signs).
        model: with a method name: the model to explain.
        x: with a method name: the input batch the masks belong to.
        target: with a method name: the class explained (None: the prediction, pinned).
        **run: with a method name: the shared run options, see
            :class:`~xaikit.evaluate.RunOptions`.

    Returns:
        (B,) float64: ``mu`` in [0, 1] (``mu_w`` in [0, S_tot / S_in] with ``weighted``); NaN
        for an empty mask, a mask larger than ``max_size`` or a map without positive relevance.

    Example:
        >>> sal = np.zeros((1, 4, 4)); sal[0, 0, 0], sal[0, 3, 3] = 3.0, 1.0
        >>> gt = np.zeros((1, 4, 4), dtype=bool); gt[0, :2, :2] = True
        >>> attribution_localisation(sal, gt).tolist(), attribution_localisation(sal, gt, weighted=True).tolist()
        ([0.75], [3.0])
    """
    weighted = check_bool(weighted, "weighted")
    max_size = check_number(max_size, "max_size (a share of the image)", low=0, high=1, low_open=True)
    smap, masks = _maps_and_masks(saliency, mask, absolute, model, x, target, run)
    batch = masks.shape[0]
    inside = masks.reshape(batch, -1).sum(axis=1)
    size = masks[0].size
    mu = positive_share(smap, masks)
    mu[inside > max_size * size] = np.nan  # (an empty mask is NaN already)
    if weighted:
        mu = mu * size / np.maximum(inside, 1)
    return mu


def _check_k(k: Any, pixels: int) -> int:
    if k is None:
        return max(1, round(pixels * TOP_K_PIXELS / TOP_K_IMAGE))
    return int(
        check_int(
            k, f"k (the number of top pixels; the map has {pixels})", 1, pixels,
            alternative="None (Quantus's 1000 of 224 x 224 pixels, scaled to the image) or ",
            kind=XaikitTypeError,
        )
    )  # fmt: skip


@public()
def top_k_intersection(
    saliency: Any,
    mask: Any,
    *,
    k: int | None = None,
    concept_influence: bool = False,
    absolute: bool = True,
    model: Any = None,
    x: Any = None,
    target: Any = None,
    **run: Unpack[RunOptions],
) -> np.ndarray:
    """Top-k intersection: the share of the k most relevant pixels that lie inside the mask.

    Theiner et al. (2022) binarize the explanation to its k most relevant pixels and measure
    their overlap with the object mask. Pixels tied at the k-th value share the remaining places
    in proportion (the mean over every order of the ties), as :func:`relevance_rank_accuracy`
    does; Quantus takes the first of numpy's sort instead (the same on maps without ties).

    Args:
        saliency: one map per sample, as :func:`~xaikit.evaluate.localization` takes it (or a
            method name with ``model=`` and ``x=``).
        mask: ground-truth object masks ``(B, H, W)`` (``(B, H, W, 1)`` / ``(B, 1, H, W)``
            too), booleans or 0/1.
        k: the number of top pixels, 1 to H * W. None (default): Quantus's 1000 pixels of a
            224 x 224 image scaled to the image's size (about 2 %: 20 of 32 x 32).
        concept_influence: divide by the mask's share of the image (Quantus's
            ``concept_influence``): 1 at chance level, as ``weighted`` of
            :func:`attribution_localisation`.
        absolute: rank by magnitude (default; channels summed by magnitude); with False,
            channels are summed with their signs and the largest signed values rank first
            (Quantus's default ``abs=False``).
        model: with a method name: the model to explain.
        x: with a method name: the input batch the masks belong to.
        target: with a method name: the class explained (None: the prediction, pinned).
        **run: with a method name: the shared run options, see
            :class:`~xaikit.evaluate.RunOptions`.

    Returns:
        (B,) float64 in [0, 1] (in [0, H * W / |mask|] with ``concept_influence``); NaN for an
        empty mask.

    Example:
        >>> sal = np.zeros((1, 4, 4)); sal[0, 0, 0], sal[0, 3, 3], sal[0, 1, 1] = 3.0, 2.0, 1.0
        >>> gt = np.zeros((1, 4, 4), dtype=bool); gt[0, :2, :2] = True
        >>> top_k_intersection(sal, gt, k=2).tolist()  # the top 2: one inside, one outside
        [0.5]
    """
    concept_influence = check_bool(concept_influence, "concept_influence")
    smap, masks = _maps_and_masks(saliency, mask, absolute, model, x, target, run)
    batch, pixels = masks.shape[0], masks[0].size
    kk = _check_k(k, pixels)
    inside = masks.reshape(batch, -1).sum(axis=1)
    out = top_k_share(smap, masks, np.full(batch, kk))
    out[inside == 0] = np.nan
    if concept_influence:
        out = out * pixels / np.maximum(inside, 1)
    return out


@public()
def relevance_mass_accuracy(
    saliency: Any,
    mask: Any,
    *,
    absolute: bool = True,
    model: Any = None,
    x: Any = None,
    target: Any = None,
    **run: Unpack[RunOptions],
) -> np.ndarray:
    """Relevance mass accuracy: the share of the map's positive mass inside the mask.

    Arras et al. (2022), Quantus's ``RelevanceMassAccuracy``: ``R_within / R_total``. This is
    exactly the ``"energy"`` of :func:`~xaikit.evaluate.localization` (the same numbers,
    computed without the pointing game); on non-negative maps it equals Quantus's to the last
    bit (``benchmarks/quantus_localization.py``). Quantus sums signed maps as they are, so
    negative relevance outside the mask can push its ratio above 1 (or to infinity); the paper
    scores non-negative heatmaps, and ours counts the positive part only.

    Args:
        saliency: one map per sample, as :func:`~xaikit.evaluate.localization` takes it (or a
            method name with ``model=`` and ``x=``).
        mask: ground-truth object masks ``(B, H, W)`` (``(B, H, W, 1)`` / ``(B, 1, H, W)``
            too), booleans or 0/1.
        absolute: score the magnitude of the map (default); with False, channels are summed
            with their signs and only the positive part counts as mass.
        model: with a method name: the model to explain.
        x: with a method name: the input batch the masks belong to.
        target: with a method name: the class explained (None: the prediction, pinned).
        **run: with a method name: the shared run options, see
            :class:`~xaikit.evaluate.RunOptions`.

    Returns:
        (B,) float64 in [0, 1]; NaN for a map without positive mass or an empty mask.

    Example:
        >>> sal = np.zeros((1, 4, 4)); sal[0, 1, 1] = 3.0; sal[0, 3, 3] = 1.0
        >>> gt = np.zeros((1, 4, 4), dtype=bool); gt[0, :2, :2] = True
        >>> relevance_mass_accuracy(sal, gt).tolist()
        [0.75]
    """
    smap, masks = _maps_and_masks(saliency, mask, absolute, model, x, target, run)
    return positive_share(smap, masks)  # NaN for an empty mask


@public()
def localization_auc(
    saliency: Any,
    mask: Any,
    *,
    absolute: bool = True,
    model: Any = None,
    x: Any = None,
    target: Any = None,
    **run: Unpack[RunOptions],
) -> np.ndarray:
    """The ROC AUC of the map as a detector of the mask's pixels (Quantus's ``AUC``).

    Every pixel is a case, the mask says which are positive, the map's value is the score:
    the area under the ROC curve (Fawcett 2006) is the probability that a random pixel inside
    the mask has a higher value than a random pixel outside, ties counting one half. It is
    computed exactly from average ranks (the Mann-Whitney U statistic), equal to
    ``sklearn.metrics.roc_auc_score`` (and to Quantus's ``roc_curve`` + ``auc``).

    Args:
        saliency: one map per sample, as :func:`~xaikit.evaluate.localization` takes it (or a
            method name with ``model=`` and ``x=``).
        mask: ground-truth object masks ``(B, H, W)`` (``(B, H, W, 1)`` / ``(B, 1, H, W)``
            too), booleans or 0/1.
        absolute: score the magnitude (default; channels summed by magnitude); with False,
            channels are summed with their signs (Quantus's default ``abs=False``).
        model: with a method name: the model to explain.
        x: with a method name: the input batch the masks belong to.
        target: with a method name: the class explained (None: the prediction, pinned).
        **run: with a method name: the shared run options, see
            :class:`~xaikit.evaluate.RunOptions`.

    Returns:
        (B,) float64 in [0, 1]: 1 when every pixel inside ranks above every pixel outside, 0.5
        for a constant map; NaN when the mask is empty or covers the whole image.

    Example:
        >>> sal = np.array([[[4.0, 3.0], [1.0, 2.0]]])
        >>> gt = np.array([[[True, False], [False, True]]])
        >>> localization_auc(sal, gt).tolist()  # inside 4, 2; outside 3, 1: 3 of 4 pairs right
        [0.75]
    """
    smap, masks = _maps_and_masks(saliency, mask, absolute, model, x, target, run)
    batch = masks.shape[0]
    inside = masks.reshape(batch, -1)
    pos = inside.sum(axis=1).astype(np.float64)
    neg = inside.shape[1] - pos
    r = ranks(smap)
    u = (r * inside).sum(axis=1) - pos * (pos + 1) / 2
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where((pos > 0) & (neg > 0), u / (pos * neg), np.nan)
