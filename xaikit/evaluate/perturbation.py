"""Deletion and insertion curves (Petsiuk et al., "RISE", BMVC 2018, https://arxiv.org/abs/1806.07421).

Pixels (spatial positions, all channels at once) are ranked by a saliency map, most salient
first: by the signed value for a signed map (positive evidence first, negative evidence last),
by magnitude for a non-negative one (see ``rank=``). *Deletion* replaces them with a baseline in ``steps`` equal steps and records the target
class's score after each step: a faithful map makes the score fall fast (low AUC). *Insertion*
starts from the baseline and puts the pixels back, most salient first: the score should rise
fast (high AUC).

All ``(steps + 1) x B`` perturbed images are built on the model's device, chunk by chunk, from
one rank tensor (a pixel is replaced at step k exactly when its rank is below the step's pixel
count), and scored in forward passes of ``max_batch`` rows: never one pass per step.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from xaikit.checks import check_int
from xaikit.evaluate._conventions import public
from xaikit.evaluate._options import RunOptions, RunSettings, Unpack
from xaikit.evaluate._ranks import RANKS, check_rank, pixel_counts, rank_positions
from xaikit.evaluate.faithfulness import _rank_scores, _ranked_map, _start
from xaikit.xai.internal import FIXED_BASELINES, check_baseline
from xaikit.xai.internal import baseline_values as baseline_values  # re-exported: imported from here

__all__ = ["BASELINES", "RANKS", "CurveResult", "deletion", "insertion"]

#: the positional parameters of :func:`deletion` and :func:`insertion` before the options became
#: keyword-only (for the error of an old positional call)
_OLD_ORDER = ("model", "x", "saliency", "target", "steps", "baseline", "max_batch")

#: baseline names of :func:`deletion` and :func:`insertion` (an array is accepted too)
BASELINES = FIXED_BASELINES


@dataclass
class CurveResult:
    """A deletion or insertion curve for each sample.

    Attributes:
        kind: ``"deletion"`` or ``"insertion"``.
        fractions: (steps + 1,) the fraction of pixels deleted (inserted) at each step, from 0
            to 1 (exact pixel counts divided by the number of pixels).
        scores: (B, steps + 1) the target class's score (the model's output as it returns it,
            e.g. a probability) at each step.
        auc: (B,) area under each curve (trapezoid rule over ``fractions``).
        targets: (B,) the class whose score is recorded.
        chunks: rows of each forward pass that produced the scores.
        rank: the pixel order used, ``"signed"`` or ``"magnitude"`` (``"auto"`` resolved).
    """

    kind: str
    fractions: np.ndarray
    scores: np.ndarray
    auc: np.ndarray
    targets: np.ndarray
    chunks: list[int] = field(default_factory=list)
    rank: str = "magnitude"

    @property
    def curve_mean(self) -> np.ndarray:
        """(steps + 1,) the mean curve over samples."""
        return self.scores.mean(axis=0)

    @property
    def auc_mean(self) -> float:
        """The mean AUC over samples."""
        return float(self.auc.mean())

    def __repr__(self) -> str:
        return (
            f"CurveResult({self.kind}, samples={self.scores.shape[0]}, steps={len(self.fractions) - 1}, "
            f"rank={self.rank}, auc_mean={self.auc_mean:.4f})"
        )


@public(old_order=_OLD_ORDER)
def deletion(
    model: Any,
    x: Any,
    saliency: Any,
    *,
    target: Any = None,
    steps: int = 20,
    baseline: Any = "black",
    rank: str = "auto",
    **run: Unpack[RunOptions],
) -> CurveResult:
    """The deletion curve: remove the most salient pixels first and watch the score fall.

    Args:
        model: a torch or Keras/TF model returning (batch, classes).
        x: the input batch (numpy or tensor), in the model's layout.
        saliency: one map per sample: ``(B, H, W)``, ``(B, H, W, 1)``, ``(B, 1, H, W)`` or x's
            full shape; raw or display masks. Ties are broken in a random order drawn from
            ``seed``. A method name (any of :data:`xaikit.xai.METHODS`: ``"vanilla"``,
            ``"integrated"``, ``"gradcam"``, ``"occlusion"``, ``"rise"``, ...) computes the
            maps with :func:`xaikit.xai.explain` first (the signed attributions of the gradient
            and occlusion methods, the (B, H, W) maps of CAM and RISE).
        target: class per sample (or one for all); None = the model's prediction on x.
        steps: number of deletion steps (the curve has ``steps + 1`` points).
        baseline: what a deleted pixel becomes: ``"black"`` (the sample's minimum), ``"zeros"``,
            ``"mean"`` (the sample's mean colour), ``"blur"`` (a Gaussian blur of the sample) or
            an array broadcastable to x's shape.
        rank: the pixel order. ``"signed"``: channels summed with their signs, the largest
            value first, so positive evidence goes first and negative evidence last (for a
            signed attribution such as IG or gradient x input, ranking by magnitude would also
            delete the evidence *against* the class early, and an exact map could score worse
            than a random one). ``"magnitude"``: channels summed by absolute value, the largest
            first (the order before ``rank=`` existed). ``"auto"`` (default): ``"signed"`` when
            the map holds a negative value, else ``"magnitude"`` (on a non-negative map both
            orders agree). Quantus's ``PixelFlipping`` sorts the attribution as given after its
            own ``abs`` option: ``abs=False`` matches ``"signed"``, ``abs=True`` ``"magnitude"``.
        **run: the shared run options (seed, max_batch, framework, output, model_kwargs,
            method_options), see :class:`~xaikit.evaluate.RunOptions`. ``seed`` also draws the
            tie-breaking order.

    Returns:
        A :class:`CurveResult`; lower AUC means a more faithful map. ``.rank`` says which order
        was used.

    Example:
        >>> import torch
        >>> model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16, 2))
        >>> x = torch.rand(3, 1, 4, 4)
        >>> d = deletion(model, x, torch.rand(3, 4, 4), steps=4)
        >>> d.fractions.tolist(), d.scores.shape, d.auc.shape
        ([0.0, 0.25, 0.5, 0.75, 1.0], (3, 5), (3,))
    """
    return _curve("deletion", model, x, saliency, target, steps, baseline, rank, RunSettings.of(run))


@public(old_order=_OLD_ORDER)
def insertion(
    model: Any,
    x: Any,
    saliency: Any,
    *,
    target: Any = None,
    steps: int = 20,
    baseline: Any = "blur",
    rank: str = "auto",
    **run: Unpack[RunOptions],
) -> CurveResult:
    """The insertion curve: start from the baseline, put the most salient pixels back first.

    Same arguments as :func:`deletion` (the default baseline is ``"blur"``: a blurred copy of
    the image, as in RISE; ``rank="signed"`` puts the positive evidence back first). Higher AUC
    means a more faithful map.

    Example:
        >>> import torch
        >>> model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16, 2))
        >>> ins = insertion(model, torch.rand(2, 1, 4, 4), torch.rand(2, 4, 4), steps=2, baseline="zeros")
        >>> ins.scores.shape
        (2, 3)
    """
    return _curve("insertion", model, x, saliency, target, steps, baseline, rank, RunSettings.of(run))


def _check_baseline(baseline: Any) -> None:
    check_baseline(baseline, BASELINES)


def _curve(
    kind: str,
    model: Any,
    x: Any,
    saliency: Any,
    target: Any,
    steps: int,
    baseline: Any,
    rank_by: str,
    run: RunSettings,
) -> CurveResult:
    steps = check_int(steps, "steps", 1)
    check_rank(rank_by)
    _check_baseline(baseline)
    job = _start(model, x, saliency, target, run)
    rank_by, smap = _ranked_map(job, rank_by)
    n_pixels = int(np.prod(job.spatial))
    counts = pixel_counts(n_pixels, steps)
    rank, base_t = rank_positions(smap, run.seed), job.baseline_tensor(baseline)
    sizes: list[int] = []
    scores, classes = _rank_scores(
        job, model, target, run.output, rank, base_t, counts, kind == "insertion", sizes
    )
    fractions = counts / float(n_pixels)
    auc = np.asarray(np.trapezoid(scores, fractions, axis=1))
    return CurveResult(kind, fractions, scores, auc, classes, sizes, rank_by)
