"""Focus (Arias-Duart et al., "Focus! Rating XAI methods and finding biases", FUZZ-IEEE 2022,
https://arxiv.org/abs/2109.15035): does the map sit on the images of the class it explains?

A *mosaic* is a 2 x 2 grid of images: some of the target class, the others of other classes.
The map of the target class should put its positive relevance on the target-class images; Focus
is the share of the positive relevance in their quadrants (the probability that a pixel drawn in
proportion to the positive relevance lies on a target-class image).

:func:`make_mosaics` builds seeded mosaics and their quadrant labels from a labelled batch;
:func:`focus` scores maps (or a method's maps) of them. Quadrants are numbered row by row: top
left, top right, bottom left, bottom right; a quadrant is half the mosaic's height (rows) by
half its width (columns).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from xaikit.checks import check_int
from xaikit.errors import XaikitTypeError, XaikitValueError, describe
from xaikit.evaluate._common import (
    PerSample,
    check_bool,
    host,
    maps_alone_or_explain,
    maps_or_explain,
    to_spatial,
)
from xaikit.evaluate._conventions import public
from xaikit.evaluate._options import RunOptions, RunSettings, Unpack
from xaikit.evaluate.complexity import known_channel_axis
from xaikit.evaluate.localization import positive_share

__all__ = ["FocusResult", "Mosaics", "focus", "make_mosaics"]

#: the quadrants' order in a row of ``quadrants``
QUADRANTS = ("top left", "top right", "bottom left", "bottom right")


class Mosaics(NamedTuple):
    """Mosaics built by :func:`make_mosaics`.

    Attributes:
        x: (n, ..., 2H, 2W) the mosaics, in the layout of the images they were built from.
        quadrants: (n, 4) int64 0/1: which quadrants hold a target-class image (top left, top
            right, bottom left, bottom right).
        target: (n,) int64 the target class of each mosaic (pass it as ``target=`` of
            :func:`focus`).
        indices: (n, 4) int64 the source image of each quadrant (rows of the batch given).
    """

    x: np.ndarray
    quadrants: np.ndarray
    target: np.ndarray
    indices: np.ndarray


@dataclass
class FocusResult(PerSample):
    """Per-mosaic Focus scores; higher = the map sits on the target class's images.

    Attributes:
        scores: (B,) the share of the positive relevance in the target-class quadrants, in
            [0, 1] (NaN for a map without positive relevance).
        targets: (B,) the classes explained when the maps were computed by name, else None.
    """

    scores: np.ndarray
    targets: np.ndarray | None = None


def _image_axes(x: Any, model: Any, framework: str | None) -> tuple[tuple[int, ...], int | None]:
    """The shape of an image batch and its channel axis (the model's convention for an
    ambiguous shape, numpy's channel-last without a model)."""
    from xaikit.backend.registry import prefers_channel_first
    from xaikit.layout import channel_axis_of

    shape = _image_shape(x)
    default = False
    if model is not None:
        from xaikit.backend import get_backend

        default = get_backend(model, framework).channel_first
    return shape, channel_axis_of(shape, prefers_channel_first(x, default=default))


def _mosaic_axes(x: Any) -> tuple[tuple[int, ...], int | None]:
    """The shape of an image batch for :func:`make_mosaics` and its channel axis (None, 1 or 3),
    by the rule of the maps-only metrics (:func:`~xaikit.evaluate._common.short_channel_axis`):
    the short end axis (at most 4), a size-1 one where both are short, else x's framework; a
    numpy batch that none of these decides is refused, never guessed."""
    shape = _image_shape(x)
    if len(shape) == 3:
        return shape, None
    advice = (
        "pass the images as a torch tensor (channels first) or a TF tensor (channels last), or grey images "
        "as (B, H, W)"
    )
    return shape, 1 if known_channel_axis(shape, x, "x", advice) == 1 else 3


def _image_shape(x: Any) -> tuple[int, ...]:
    """The shape of ``x``, checked to be a non-empty batch of images."""
    shape = tuple(int(d) for d in getattr(x, "shape", np.shape(x)))
    if len(shape) not in (3, 4) or shape[0] == 0:
        raise XaikitValueError(
            f"x must be a non-empty batch of images (B, H, W), (B, H, W, C) or (B, C, H, W); got {describe(x)}"
        )
    return shape


@public()
def make_mosaics(
    x: Any,
    y: Any,
    *,
    target_class: int,
    n: int | None = None,
    per_mosaic: int = 2,
    seed: int = 0,
) -> Mosaics:
    """2 x 2 mosaics of a labelled batch, ``per_mosaic`` images of ``target_class`` in each.

    Each mosaic takes ``per_mosaic`` distinct images of the target class and ``4 - per_mosaic``
    distinct images of other classes, at random, and places them in random quadrants (Arias-Duart
    et al. use two of each). Drawn from ``np.random.default_rng(seed)``: the same seed gives the
    same mosaics.

    Args:
        x: (B, H, W), (B, H, W, C) or (B, C, H, W) images of equal size. The channel axis is
            the short one (at most 4) at either end; where both ends are short, the one of size
            1 ((B, 1, 4, 4) is grey 4 x 4 images), else x's framework (torch: first, TF: last);
            a numpy batch none of these decides (e.g. (B, 3, 4, 4)) is refused.
        y: (B,) the integer class of each image.
        target_class: the class the mosaics are about.
        n: the number of mosaics; None: one per ``per_mosaic`` target-class images (each target
            image used about once).
        per_mosaic: target-class images per mosaic, 1 to 3.
        seed: the seed of the draws.

    Returns:
        :class:`Mosaics`: ``x`` (n, ..., 2H, 2W) as numpy, ``quadrants`` (n, 4), ``target``
        (n,) and ``indices`` (n, 4).

    Example:
        >>> imgs = np.arange(4, dtype=float)[:, None, None] * np.ones((4, 2, 2))
        >>> m = make_mosaics(imgs, np.array([1, 1, 0, 2]), target_class=1, n=1, seed=0)
        >>> m.x.shape, int(m.quadrants.sum()), m.target.tolist()
        ((1, 4, 4), 2, [1])
    """
    images = host(x, "x")
    shape, axis = _mosaic_axes(x)
    labels = host(y, "y")
    if labels.ndim != 1 or labels.shape[0] != shape[0] or labels.dtype.kind not in "iub":
        raise XaikitValueError(
            f"y must hold one integer class per image, shape ({shape[0]},); got {describe(y)}"
        )
    target_class = int(check_int(target_class, "target_class", kind=XaikitTypeError))
    per_mosaic = int(check_int(per_mosaic, "per_mosaic (target-class images per mosaic)", 1, 3))
    seed = int(check_int(seed, "seed", 0))
    own = np.flatnonzero(labels == target_class)
    other = np.flatnonzero(labels != target_class)
    if own.size < per_mosaic or other.size < 4 - per_mosaic:
        raise XaikitValueError(
            f"make_mosaics needs at least {per_mosaic} images of target_class={target_class} and "
            f"{4 - per_mosaic} of other classes; y has {own.size} and {other.size}"
        )
    count = own.size // per_mosaic if n is None else int(check_int(n, "n (the number of mosaics)", 1))
    rng = np.random.default_rng(seed)
    indices = np.empty((count, 4), dtype=np.int64)
    quadrants = np.zeros((count, 4), dtype=np.int64)
    for i in range(count):
        chosen = np.concatenate(
            [rng.choice(own, per_mosaic, replace=False), rng.choice(other, 4 - per_mosaic, replace=False)]
        )
        places = rng.permutation(4)
        indices[i, places] = chosen
        quadrants[i, places[:per_mosaic]] = 1
    # spatial axes (rows, columns) of one image in ``images``
    rows, cols = (1, 2) if axis in (None, 3) else (2, 3)
    tiles = images[indices]  # (n, 4, ...)
    top = np.concatenate([tiles[:, 0], tiles[:, 1]], axis=cols)
    bottom = np.concatenate([tiles[:, 2], tiles[:, 3]], axis=cols)
    mosaics = np.concatenate([top, bottom], axis=rows)
    return Mosaics(mosaics, quadrants, np.full(count, target_class, dtype=np.int64), indices)


def _quadrants(quadrants: Any, batch: int) -> np.ndarray:
    if quadrants is None:
        raise XaikitValueError(
            "focus needs quadrants=: (B, 4) 0/1, which quadrants (top left, top right, bottom left, "
            "bottom right) hold an image of the target class (make_mosaics returns them)"
        )
    arr = host(quadrants, "quadrants")
    if arr.shape != (batch, 4) or arr.dtype.kind not in "biuf":
        raise XaikitValueError(
            f"quadrants must have shape ({batch}, 4), one 0/1 flag per quadrant (top left, top right, "
            f"bottom left, bottom right) of each mosaic; got {describe(quadrants)}"
        )
    if not np.all(np.isin(arr, (0, 1))):
        raise XaikitValueError(f"quadrants must hold 0/1 values; got values {np.unique(arr)[:6].tolist()}")
    return arr.astype(bool)


def quadrant_masks(flags: np.ndarray, height: int, width: int) -> np.ndarray:
    """(B, height, width) masks of the flagged quadrants (rows split at height // 2, columns at
    width // 2), in :data:`QUADRANTS` order."""
    masks = np.zeros((flags.shape[0], height, width), dtype=bool)
    h, w = height // 2, width // 2
    for q, (r, c) in enumerate(((slice(0, h), slice(0, w)), (slice(0, h), slice(w, None)),
                                (slice(h, None), slice(0, w)), (slice(h, None), slice(w, None)))):  # fmt: skip
        masks[flags[:, q], r, c] = True
    return masks


@public()
def focus(
    model: Any,
    x: Any,
    saliency: Any,
    *,
    target: Any = None,
    quadrants: Any = None,
    absolute: bool = False,
    **run: Unpack[RunOptions],
) -> FocusResult:
    """Focus: the share of the map's positive relevance on the target-class images of mosaics.

    For each mosaic (a 2 x 2 grid of images, :func:`make_mosaics`) and the map of its target
    class, Arias-Duart et al. (2022) define Focus as the positive relevance in the quadrants
    that hold target-class images divided by the positive relevance of the whole mosaic. A map
    that only sees the target class scores 1; one that ignores the content scores about the
    share of target quadrants (0.5 with two of four).

    Args:
        model: the model (used only when ``saliency`` is a method name; it may be None with
            maps).
        x: (B, ..., 2H, 2W) the mosaics (``make_mosaics(...).x``).
        saliency: one map per mosaic (``(B, 2H, 2W)``, with a channel axis first or last too)
            or a method name, computed on ``model`` and ``x`` for ``target``.
        target: with a method name: the class explained, normally each mosaic's target class
            (``make_mosaics(...).target``); None: the prediction.
        quadrants: (B, 4) 0/1, which quadrants hold a target-class image (top left, top right,
            bottom left, bottom right; ``make_mosaics(...).quadrants``). Required.
        absolute: score the magnitude of the map; default False, the paper's positive
            relevance of the signed map (channels summed with their signs).
        **run: with a method name: the shared run options, see
            :class:`~xaikit.evaluate.RunOptions`.

    Returns:
        :class:`FocusResult`: ``scores`` (B,) in [0, 1], NaN for a map without positive
        relevance (Quantus: 0).

    Example:
        >>> sal = np.zeros((1, 4, 6)); sal[0, :2, 3:] = 3.0; sal[0, 2:, :3] = 1.0
        >>> focus(None, np.zeros((1, 4, 6)), sal, quadrants=[[0, 1, 0, 0]]).scores.tolist()
        [0.75]
    """
    check_bool(absolute, "absolute")
    settings = RunSettings.of(run)
    shape, axis = _image_axes(x, model, settings.framework)
    height, width = (d for a, d in enumerate(shape) if a not in (0, axis))
    if height % 2 or width % 2:
        raise XaikitValueError(
            f"x must be mosaics of 2 x 2 equal images, with an even height and width; got {describe(x)}"
        )
    flags = _quadrants(quadrants, shape[0])
    targets = None
    if isinstance(saliency, str):  # the method's maps for the pinned classes, and those classes
        maps, targets = maps_alone_or_explain(saliency, model=model, x=x, target=target, run=settings)
    else:
        maps = maps_or_explain(model, x, saliency, target, settings)
    smap = to_spatial(maps, (height, width), shape[0], absolute=bool(absolute))
    return FocusResult(positive_share(smap, quadrant_masks(flags, height, width)), targets)
