"""Localization: does the saliency map point at the object? (against ground-truth masks)

* *energy* (the "energy-based pointing game" of Score-CAM, or Quantus's relevance mass
  accuracy): the fraction of the map's positive mass that lies inside the mask.
* *pointing game* (Zhang et al., 2016): whether the map's maximum lies inside the mask (grown
  by ``tolerance`` pixels).
* *relevance rank accuracy* (Arras et al., "CLEVR-XAI", Information Fusion 2022,
  https://arxiv.org/abs/2003.07258; Quantus's ``RelevanceRankAccuracy``): with K the mask's
  pixel count, the fraction of the K highest-ranked pixels that lie inside the mask.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from xaikit.checks import check_number
from xaikit.errors import XaikitTypeError, XaikitValueError, describe
from xaikit.evaluate._common import check_bool, host, maps_alone_or_explain, to_spatial
from xaikit.evaluate._conventions import public
from xaikit.evaluate._options import RunOptions, RunSettings, Unpack

__all__ = ["localization", "relevance_rank_accuracy"]


def _disk(radius: float, ndim: int) -> np.ndarray:
    r = int(np.floor(radius))
    grids = np.meshgrid(*[np.arange(-r, r + 1)] * ndim, indexing="ij")
    dist2 = np.sum([g.astype(np.float64) ** 2 for g in grids], axis=0)
    return np.asarray(dist2 <= radius**2 + 1e-9)


def _masks(mask: Any, batch: int | None) -> np.ndarray:
    arr = host(mask, "mask")
    if arr.dtype.kind not in "biuf":
        raise XaikitTypeError(f"mask must hold booleans or 0/1 numbers; got {describe(mask)}")
    if arr.ndim >= 3 and arr.shape[-1] == 1:
        arr = arr[..., 0]
    elif arr.ndim >= 4 and arr.shape[1] == 1:
        arr = arr[:, 0]
    if arr.ndim < 2 or arr.shape[0] == 0:
        raise XaikitValueError(f"mask must be a batch of masks (B, H, W); got {describe(mask)}")
    if arr.dtype.kind != "b":
        values = np.unique(arr)
        if not np.all(np.isin(values, (0, 1))):
            raise XaikitValueError(
                f"mask must hold booleans or 0/1 values; got values {values[:6].tolist()}"
                + (" ..." if values.size > 6 else "")
            )
    return arr.astype(bool)


#: the options :func:`localization` and :func:`relevance_rank_accuracy` took by position before
#: every option became keyword-only
_OLD_ORDER = ("saliency", "mask", "tolerance", "absolute")


@public(old_order=_OLD_ORDER)
def localization(
    saliency: Any,
    mask: Any,
    *,
    tolerance: float = 0.0,
    absolute: bool = True,
    model: Any = None,
    x: Any = None,
    target: Any = None,
    **run: Unpack[RunOptions],
) -> dict[str, np.ndarray]:
    """Energy inside the mask and the pointing game, per sample.

    Args:
        saliency: one map per sample: ``(B, H, W)``, ``(B, H, W, C)`` or ``(B, C, H, W)`` (raw
            attributions or display masks; channels are summed by magnitude), or a method name
            (any :func:`xaikit.xai.explain` takes: ``"integrated"``, ``"gradcam"``, ``"rise"``,
            ...), computed on ``model`` and ``x`` first.
        mask: ground-truth object masks ``(B, H, W)`` (``(B, H, W, 1)`` / ``(B, 1, H, W)`` too),
            booleans or 0/1.
        tolerance: the pointing game counts a hit within this many pixels (Euclidean) of the
            mask (Zhang et al. use 15 px on full-size images).
        absolute: score the magnitude of the map (default); with False, channels are summed with
            their signs and only the positive part counts as mass.
        model: with a method name: the model to explain.
        x: with a method name: the input batch the masks belong to.
        target: with a method name: the class explained (None: the prediction, pinned).
        **run: with a method name: the shared run options (seed, max_batch, framework, output,
            model_kwargs, method_options), see :class:`~xaikit.evaluate.RunOptions`.

    Returns:
        ``{"energy": (B,) float, "pointing": (B,) bool, "rank_accuracy": (B,) float}``.
        ``energy`` is the positive mass inside the mask divided by the total positive mass (NaN
        for a map without positive mass or an empty mask).
        ``pointing`` is True when the map's maximum lies inside the (grown) mask; when several
        positions share the maximum (e.g. clipped display masks), when at least half of them
        do; a constant map points nowhere (False). ``rank_accuracy`` is
        :func:`relevance_rank_accuracy`.

    Example:
        >>> sal = np.zeros((1, 4, 4)); sal[0, 1, 1] = 3.0; sal[0, 3, 3] = 1.0
        >>> gt = np.zeros((1, 4, 4), dtype=bool); gt[0, :2, :2] = True
        >>> out = localization(sal, gt)
        >>> out["energy"].tolist(), out["pointing"].tolist()
        ([0.75], [True])
    """
    tolerance = check_number(tolerance, "tolerance (in pixels)", low=0, kind=XaikitTypeError)
    smap, masks = maps_and_masks(
        saliency, mask, absolute, model=model, x=x, target=target, run=RunSettings.of(run)
    )
    batch, spatial = masks.shape[0], tuple(masks.shape[1:])
    inside = masks.reshape(batch, -1)
    energy = positive_share(smap, masks)
    if tolerance > 0:
        from scipy.ndimage import binary_dilation

        disk = _disk(float(tolerance), len(spatial))
        grown = np.stack([binary_dilation(m, structure=disk) for m in masks]).reshape(batch, -1)
    else:
        grown = inside
    flat = smap.reshape(batch, -1)
    top = flat.max(axis=1, keepdims=True)
    ties = flat == top
    hit_share = (ties & grown).sum(axis=1) / ties.sum(axis=1)
    pointing = (hit_share >= 0.5) & (flat.min(axis=1) < top[:, 0])
    return {
        "energy": energy.astype(np.float64),
        "pointing": pointing.astype(bool),
        "rank_accuracy": _rank_accuracy(smap, masks),
    }


def maps_and_masks(
    saliency: Any, mask: Any, absolute: bool, *, model: Any, x: Any, target: Any, run: RunSettings
) -> tuple[np.ndarray, np.ndarray]:
    """The (B, *spatial) maps (computed first for a method name, as
    :func:`~xaikit.evaluate._common.maps_alone_or_explain` does) and the boolean masks."""
    absolute = check_bool(absolute, "absolute")  # a truthy string is not a choice
    masks = _masks(mask, None)
    saliency, _ = maps_alone_or_explain(saliency, model=model, x=x, target=target, run=run)
    batch, spatial = masks.shape[0], tuple(masks.shape[1:])
    sal_shape = tuple(getattr(saliency, "shape", np.shape(saliency)))
    if not sal_shape or sal_shape[0] != batch:
        given = tuple(np.shape(mask))
        if len(sal_shape) > len(given) and tuple(sal_shape[-len(given) :]) == given:
            raise XaikitValueError(
                f"mask must hold one mask per sample ({sal_shape[0]}); got one mask of shape {given} "
                f"for saliency {describe(saliency)}: pass np.broadcast_to(mask, "
                f"{(sal_shape[0], *given)}) to use it for every sample"
            )
        raise XaikitValueError(
            f"saliency and mask must have the same batch size; mask has {batch} masks of shape {spatial}, "
            f"saliency is {describe(saliency)}"
        )
    values = host(saliency, "saliency")
    if values.dtype.kind in "fc" and values.size:  # a NaN is not a shape mismatch: say so first
        bad = np.flatnonzero(~np.isfinite(values.reshape(values.shape[0], -1)).all(axis=1))
        if bad.size:
            raise XaikitValueError(
                f"saliency holds NaN or infinite values (samples {bad[:10].tolist()}"
                f"{', ...' if bad.size > 10 else ''})"
            )
    try:
        smap = to_spatial(saliency, spatial, batch, channels=None, absolute=absolute)
    except XaikitValueError as exc:
        raise XaikitValueError(
            f"saliency and mask must cover the same pixels; the mask's shape is {masks.shape}: {exc}"
        ) from None
    return smap, masks


def positive_share(smap: np.ndarray, masks: np.ndarray) -> np.ndarray:
    """Per sample, the positive mass of ``smap`` (B, *spatial) inside ``masks`` divided by its
    total positive mass (NaN for a map without positive mass, and for an empty mask: there is
    nothing to find, not a miss): the energy of :func:`localization`, also the share that
    :func:`~xaikit.evaluate.focus`, :func:`~xaikit.evaluate.attribution_localisation` and
    :func:`~xaikit.evaluate.relevance_mass_accuracy` score."""
    batch = smap.shape[0]
    positive = np.maximum(smap, 0.0).reshape(batch, -1)
    total = positive.sum(axis=1)
    flat = masks.reshape(batch, -1)
    inside = (positive * flat).sum(axis=1)
    safe = np.where(total > 0, total, 1.0)
    defined = (total > 0) & flat.any(axis=1)
    return np.where(defined, inside / safe, np.nan).astype(np.float64)


def top_k_share(smap: np.ndarray, masks: np.ndarray, k: np.ndarray) -> np.ndarray:
    """Per sample, the share of the ``k[i]`` best-ranked positions inside the mask, ties at the
    k-th value shared in proportion (the mean over random tie orders); NaN where k is 0."""
    batch = smap.shape[0]
    flat = smap.reshape(batch, -1)
    inside = masks.reshape(batch, -1)
    kk = np.asarray(k, dtype=np.int64).reshape(batch)
    ok = kk > 0
    # the k-th largest value of each row (one sort of every row: no loop over samples)
    kth = -np.sort(-flat, axis=1)[np.arange(batch), np.maximum(kk, 1) - 1][:, None]
    above, tied = flat > kth, flat == kth
    slots = kk - above.sum(axis=1)
    share = (
        (above & inside).sum(axis=1) + slots * (tied & inside).sum(axis=1) / tied.sum(axis=1)
    ) / np.maximum(kk, 1)
    return np.where(ok, share, np.nan)


def _rank_accuracy(smap: np.ndarray, masks: np.ndarray) -> np.ndarray:
    """Per sample, the share of the K best-ranked positions inside the mask (K = the mask's
    size), ties at the K-th value shared in proportion (the mean over random tie orders)."""
    return top_k_share(smap, masks, masks.reshape(masks.shape[0], -1).sum(axis=1))


@public(old_order=("saliency", "mask", "absolute"))
def relevance_rank_accuracy(
    saliency: Any,
    mask: Any,
    *,
    absolute: bool = True,
    model: Any = None,
    x: Any = None,
    target: Any = None,
    **run: Unpack[RunOptions],
) -> np.ndarray:
    """Relevance rank accuracy: the share of the K top-ranked pixels inside the mask.

    With K the number of pixels in a sample's mask, the K pixels of highest relevance are
    taken and the fraction of them that lie inside the mask is returned (Arras et al. 2022;
    Quantus 0.6's ``RelevanceRankAccuracy``). Higher is better: 1 when the mask's pixels are
    exactly the K most relevant ones; a map that ignores the object scores about K / (H * W),
    the mask's share of the image. Pixels tied at the K-th value share the remaining places in
    proportion (the mean over every order of the ties), so the score does not depend on how
    ties are broken: a constant map scores exactly K / (H * W). Quantus sorts ties in numpy's
    order instead; on maps without ties the two agree exactly (``benchmarks/quantus_robustness.py``).
    This is also the ``"rank_accuracy"`` entry of :func:`localization`.

    Args:
        saliency: one map per sample, as :func:`localization` takes it (or a method name with
            ``model=`` and ``x=``).
        mask: ground-truth object masks ``(B, H, W)`` (``(B, H, W, 1)`` / ``(B, 1, H, W)`` too),
            booleans or 0/1.
        absolute: rank by magnitude (default; channels summed by magnitude); with False,
            channels are summed with their signs and the largest signed values rank first
            (Quantus's default ``abs=False``).
        model: with a method name: the model to explain.
        x: with a method name: the input batch the masks belong to.
        target: with a method name: the class explained (None: the prediction, pinned).
        **run: with a method name: the shared run options (seed, max_batch, framework, output,
            model_kwargs, method_options), see :class:`~xaikit.evaluate.RunOptions`.

    Returns:
        (B,) float64 scores in [0, 1]; NaN for an empty mask.

    Example:
        >>> sal = np.zeros((1, 4, 4)); sal[0, 0, 0], sal[0, 3, 3], sal[0, 1, 1], sal[0, 3, 2] = 4, 3, 2, 1
        >>> gt = np.zeros((1, 4, 4), dtype=bool); gt[0, :2, :2] = True  # K = 4 pixels
        >>> relevance_rank_accuracy(sal, gt).tolist()  # the top 4: two inside, two outside
        [0.5]
    """
    smap, masks = maps_and_masks(
        saliency, mask, absolute, model=model, x=x, target=target, run=RunSettings.of(run)
    )
    return _rank_accuracy(smap, masks)
