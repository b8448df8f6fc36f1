"""The random-logit test (Sixt et al., "When Explanations Lie: Why Many Modified BP Attributions
Fail", ICML 2020, https://arxiv.org/abs/1912.09818): explain each sample for its target class and
for a randomly drawn *other* class; an explanation of the model's decision should change with the
class (low similarity is better).

The class is what this test randomizes; :mod:`~xaikit.evaluate.randomization` (the model-parameter
randomization test) and :mod:`~xaikit.evaluate.mprt_variants` (eMPRT, sMPRT) randomize the weights.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from xaikit.checks import check_int
from xaikit.errors import XaikitValueError, describe
from xaikit.evaluate._common import (
    PerSample,
    host,
    input_layout,
    refuse_object,
    spatial_shape,
    spearman,
    ssim,
    to_spatial,
)
from xaikit.evaluate._conventions import public
from xaikit.evaluate._options import RunOptions, RunSettings, Unpack
from xaikit.evaluate._rerun import explain_rows, start, tile_kwargs
from xaikit.evaluate.randomization import display_maps

__all__ = ["SIMILARITIES", "RandomLogitResult", "other_classes", "quantus_ssim", "random_logit"]

#: similarity names of :func:`random_logit` (a callable is accepted too)
SIMILARITIES = ("ssim", "spearman", "quantus")


@dataclass
class RandomLogitResult(PerSample):
    """What :func:`random_logit` measured. Lower scores are better: the explanation of the
    target class differs from that of another class.

    Attributes:
        scores: (B,) the similarity of the map of each sample's target class to the map of its
            random other class (float64).
        targets: (B,) the explained classes.
        others: (B,) the random other classes (never equal to ``targets``).
        maps: the raw attributions for ``targets``.
        maps_other: the raw attributions for ``others``.
        similarity: the similarity's name (``"ssim"``, ``"spearman"``, ``"quantus"`` or the callable's name).
        method: the saliency method.
    """

    scores: np.ndarray
    targets: np.ndarray
    others: np.ndarray
    maps: np.ndarray = field(repr=False)
    maps_other: np.ndarray = field(repr=False)
    similarity: str = "ssim"
    method: str = "vanilla"


def other_classes(targets: np.ndarray, num_classes: int, seed: int) -> np.ndarray:
    """A random class per sample, uniform over the ``num_classes - 1`` classes other than its
    target: index ``k`` drawn by ``numpy.random.RandomState(seed).randint(0, num_classes - 1, B)``
    among the other classes in increasing order (the draw of Quantus's ``RandomLogit`` with the
    same seed, for batches of at most its ``batch_size``).

    Example:
        >>> other_classes(np.array([0, 1, 2, 2]), 3, seed=0).tolist()
        [1, 2, 1, 0]
    """
    targets = np.asarray(targets, dtype=np.int64)
    k = np.random.RandomState(int(seed)).randint(0, num_classes - 1, size=targets.shape[0])
    return (k + (k >= targets)).astype(np.int64)


@public(old_order=("model", "x", "method", "target"))
def random_logit(
    model: Any,
    x: Any,
    method: str,
    *,
    target: Any = None,
    num_classes: int | None = None,
    similarity: str | Callable[[np.ndarray, np.ndarray], Any] = "ssim",
    **run: Unpack[RunOptions],
) -> RandomLogitResult:
    """The random-logit test: how similar is the map of the target class to the map of a random
    other class? Lower is better.

    Both maps come from one call of :func:`xaikit.xai.explain` on the batch stacked twice (2B
    rows: the targets, then the other classes).

    Args:
        model: a torch or Keras model returning (batch, classes).
        x: the samples to explain (numpy or tensor, the model's layout).
        method: any method name :func:`xaikit.xai.explain` accepts (``"vanilla"``,
            ``"integrated"``, ``"gradcam"``, ...).
        target: classes to explain (None = the model's predictions on x).
        num_classes: the other class is drawn from classes ``0 .. num_classes - 1`` (default:
            all the model's classes); every target must be below it.
        similarity: ``"ssim"`` (default): a 2-D SSIM of the display masks (absolute maps summed
            over channels, scaled per sample to [0, 1] at the 99th percentile, a 7 x 7 window),
            as :func:`~xaikit.evaluate.randomization_test`; ``"spearman"``: Spearman rank
            correlation of the absolute maps (channels summed); ``"quantus"``: Quantus's
            ``RandomLogit`` default, a 1-D SSIM of the flattened *signed* maps, each batch
            divided by its largest magnitude (so a sample's score depends on the batch; see
            ``docs/evaluate.md`` for the numbers each gives). Or a callable
            ``f(maps, maps_other) -> (B,)`` on the raw maps.
        **run: the shared run options (seed, max_batch, framework, output, model_kwargs,
            method_options), see :class:`~xaikit.evaluate.RunOptions`. ``seed`` also draws the
            other classes (see :func:`other_classes`).

    Returns:
        A :class:`RandomLogitResult` (``.scores`` per sample, ``.mean``, ``.others``).

    Raises:
        XaikitValueError: a model with fewer than 2 classes, a bad ``num_classes`` or
            ``similarity``.

    Example:
        >>> import torch
        >>> torch.manual_seed(0) and None
        >>> model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 4))
        >>> r = random_logit(model, torch.rand(3, 1, 8, 8), "vanilla", similarity="spearman")
        >>> r.scores.shape, bool((r.others != r.targets).all())
        ((3,), True)
    """
    if not (callable(similarity) or (isinstance(similarity, str) and similarity in SIMILARITIES)):
        raise XaikitValueError(
            f"similarity must be one of {', '.join(map(repr, SIMILARITIES))} or a callable "
            f"f(maps, maps_other) -> (B,); got {similarity!r}"
            if isinstance(similarity, str)
            else f"similarity must be one of {', '.join(map(repr, SIMILARITIES))} or a callable; "
            f"got {describe(similarity)}"
        )
    refuse_object(
        target,
        "random_logit",
        "it compares the map of the target class with the map of another class drawn at random, and a "
        "target object (a region, an output index, a similarity, a callable) has no other class to draw",
    )
    bk, rerun, targets, n_classes = start(model, x, method, target=target, run=RunSettings.of(run))
    if n_classes < 2:
        raise XaikitValueError(
            f"random_logit needs a model with at least 2 classes; the model returns {n_classes} score per row"
        )
    if num_classes is None:
        num_classes = n_classes
    num_classes = check_int(num_classes, "num_classes", 2)
    if num_classes > n_classes:
        raise XaikitValueError(
            f"num_classes must be at most the model's {n_classes} classes; got {num_classes}"
        )
    if targets.max() >= num_classes:
        raise XaikitValueError(
            f"num_classes must be above every target class (the other class is drawn from the rest); "
            f"got num_classes={num_classes} and target {int(targets.max())}"
        )
    others = other_classes(targets, num_classes, rerun.seed)
    shape, channel_axis = input_layout(x, bk)
    batch = shape[0]
    x_host = host(x, "x")
    both = explain_rows(
        model, np.concatenate([x_host, x_host]), np.concatenate([targets, others]),
        replace(rerun, model_kwargs=tile_kwargs(rerun.model_kwargs, 2, batch)),
    )  # fmt: skip
    maps, maps_other = both[:batch], both[batch:]
    name, scores = _similarity(similarity, maps, maps_other, shape, channel_axis)
    return RandomLogitResult(scores, targets, others, maps, maps_other, name, rerun.method)


def _similarity(
    similarity: Any, a: np.ndarray, b: np.ndarray, shape: tuple[int, ...], channel_axis: int | None
) -> tuple[str, np.ndarray]:
    batch = shape[0]
    if callable(similarity):
        out = np.asarray(host(similarity(a, b), "similarity's result"), dtype=np.float64).reshape(-1)
        if out.shape != (batch,):
            raise XaikitValueError(
                f"similarity must return one value per sample, shape ({batch},); got shape {out.shape}"
            )
        return getattr(similarity, "__name__", "custom"), out
    if similarity == "ssim":
        return "ssim", ssim(display_maps(a, channel_axis), display_maps(b, channel_axis))
    if similarity == "quantus":
        return "quantus", quantus_ssim(a, b)
    spatial = spatial_shape(shape, channel_axis)
    channels = shape[channel_axis] if channel_axis is not None else None
    return "spearman", spearman(
        to_spatial(a, spatial, batch, channels=channels), to_spatial(b, spatial, batch, channels=channels)
    )


def quantus_ssim(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Quantus 0.6's ``RandomLogit`` similarity (its defaults ``normalise=True``,
    ``similarity_func=ssim``): each of the two batches divided by its own largest |value|, then
    per sample scikit-image's SSIM of the two flattened maps (channels included, a 7-value window
    that runs across row ends), with the pair's max - min as the data range. (B,) float64.

    Example:
        >>> x = np.random.default_rng(0).normal(size=(2, 1, 8, 8))
        >>> quantus_ssim(x, 3 * x).round(6).tolist()  # the same maps up to scale
        [1.0, 1.0]
    """
    from skimage.metrics import structural_similarity

    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    out = np.full(a.shape[0], np.nan)
    top_a, top_b = float(np.abs(a).max()), float(np.abs(b).max())
    if top_a == 0 or top_b == 0:
        return out
    flat_a, flat_b = (a / top_a).reshape(len(a), -1), (b / top_b).reshape(len(b), -1)
    if flat_a.shape[1] < 7:
        return out
    for i, (u, v) in enumerate(zip(flat_a, flat_b)):
        span = float(max(u.max(), v.max()) - min(u.min(), v.min()))
        out[i] = structural_similarity(u, v, data_range=span) if span > 0 else 1.0
    return out
