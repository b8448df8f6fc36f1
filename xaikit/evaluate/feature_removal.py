"""Faithfulness by removing (or restoring) feature groups: sensitivity-n, faithfulness estimate,
monotonicity, monotonicity correlation, and the batch-level sufficiency.

* :func:`sensitivity_n` — Ancona et al., ICLR 2018 (https://arxiv.org/abs/1711.06104): for
  each subset size n, the Pearson correlation, over random subsets of n pixels, between the
  attribution they hold and the score lost when they are set to a baseline.
* :func:`faithfulness_estimate` — Alvarez-Melis & Jaakkola, NeurIPS 2018
  (https://arxiv.org/abs/1806.07538): the Pearson correlation, over pixel groups, between a
  group's attribution and the score lost when that group alone is removed.
* :func:`monotonicity` — Arya et al., 2019 (https://arxiv.org/abs/1909.03012): pixels put back
  onto a baseline in increasing order of attribution; does the score never fall?
* :func:`monotonicity_correlation` — Nguyen & Martínez, 2020 (https://arxiv.org/abs/2007.07584):
  the Spearman correlation between a group's |attribution| and the expected squared change of
  the score when the group is replaced by random values.
* :func:`sufficiency` — Dasgupta et al., ICML 2022 (https://arxiv.org/abs/2202.00734): among the
  other samples of the batch whose maps lie within a distance threshold, the share with the
  same prediction (one forward pass; a metric of the batch, not of one sample alone).

A "pixel" is one spatial position with all its channels (the maps are summed over channels);
on one-channel images a pixel is one of Quantus's features. Every perturbed row of a metric is
scored by one run of the chunked :func:`xaikit.xai.internal.forward_scores` (the clean inputs
first, then perturbation ``j`` of sample ``b`` as row ``(j + 1) * B + b``), each chunk built
when it is scored. The model is left unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from xaikit.checks import check_int, check_number
from xaikit.errors import XaikitTypeError, XaikitValueError, describe
from xaikit.evaluate._common import PerSample, finite_mean, host, refuse_object, spearman
from xaikit.evaluate._conventions import public
from xaikit.evaluate._options import RunOptions, RunSettings, Unpack
from xaikit.evaluate.faithfulness import (
    _check_subsets,
    _pearson,
    _PlainMean,
    _removal_scores,
    _Run,
    _signed_start,
    _spatial_map,
    _start,
    _subset_drop,
    _subset_sums,
)
from xaikit.xai.internal import FIXED_BASELINES, check_baseline, pin_targets

__all__ = [
    "FaithfulnessEstimateResult",
    "MonotonicityCorrelationResult",
    "MonotonicityResult",
    "SensitivityNResult",
    "SufficiencyResult",
    "faithfulness_estimate",
    "monotonicity",
    "monotonicity_correlation",
    "sensitivity_n",
    "sufficiency",
]


# ---- shared: pixel groups ------------------------------------------------------------------------
def _groups(smap: np.ndarray, step: int, descending: bool) -> np.ndarray:
    """Each pixel's group, (B, P): pixels sorted by the map (stable; decreasing or increasing)
    and cut into consecutive groups of ``step`` (the last one may be smaller)."""
    order = np.argsort(-smap if descending else smap, axis=1, kind="stable")
    group = np.empty_like(order)
    np.put_along_axis(group, order, np.arange(smap.shape[1])[None] // step, axis=1)
    return group


def _group_sums(values: np.ndarray, group: np.ndarray, n_groups: int) -> np.ndarray:
    """(B, G) the sum of ``values`` (B, P) over each group."""
    out = np.zeros((values.shape[0], n_groups))
    np.add.at(out, (np.arange(values.shape[0])[:, None], group), values)
    return out


def _check_step(features_in_step: Any, n_pixels: int) -> int:
    return check_int(features_in_step, "features_in_step", 1, n_pixels)


def _signed_groups(
    model: Any,
    x: Any,
    saliency: Any,
    target: Any,
    features_in_step: Any,
    baseline: Any,
    run: Mapping[str, Any],
    descending: bool,
) -> tuple[_Run, RunSettings, np.ndarray, np.ndarray, int]:
    """The set-up of a metric that sets pixel groups to a fixed ``baseline``: the run, its
    checked settings, the signed map (B, P), each pixel's group (B, P) (:func:`_groups` of
    ``features_in_step`` pixels) and the number of groups."""
    check_baseline(baseline, FIXED_BASELINES)
    job, settings, smap = _signed_start(model, x, saliency, target, run)
    step = _check_step(features_in_step, smap.shape[1])
    return job, settings, smap, _groups(smap, step, descending), -(-smap.shape[1] // step)


# ---- sensitivity-n ------------------------------------------------------------------------------
@dataclass
class SensitivityNResult(PerSample):
    """Sensitivity-n of each sample: one correlation per subset size n.

    Attributes:
        scores: (B,) the mean of :attr:`curve` over the sizes (NaNs left out); higher is better.
        ns: (N,) the subset sizes.
        curve: (B, N) the Pearson correlation, over the random subsets of size n, between
            :attr:`attribution_sums` and :attr:`deltas` (NaN where either is constant).
        attribution_sums: (B, N, nsamples) the attribution inside each subset.
        deltas: (B, N, nsamples) ``f(x) - f(x with the subset set to the baseline)``.
        subsets: one array (nsamples, B, n) of flat pixel indices per size.
        targets: (B,) the class whose score is used.
        chunks: rows of each forward pass.
    """

    scores: np.ndarray
    ns: np.ndarray
    curve: np.ndarray
    attribution_sums: np.ndarray
    deltas: np.ndarray
    subsets: list[np.ndarray]
    targets: np.ndarray
    chunks: list[int] = field(default_factory=list)

    @property
    def mean_curve(self) -> np.ndarray:
        """(N,) the correlation per size averaged over samples (Ancona et al.'s plot)."""
        out = np.full(self.curve.shape[1], np.nan)
        for k in range(self.curve.shape[1]):
            out[k] = finite_mean(self.curve[:, k])
        return out


@public()
def sensitivity_n(
    model: Any,
    x: Any,
    saliency: Any,
    *,
    target: Any = None,
    n_max_percentage: float = 0.8,
    features_in_step: int | None = None,
    nsamples: int = 20,
    baseline: Any = "black",
    subsets: Any = None,
    **run: Unpack[RunOptions],
) -> SensitivityNResult:
    """Sensitivity-n (Ancona et al., 2018): does a subset's attribution predict its removal's effect?

    For each size ``n`` in ``features_in_step, 2 * features_in_step, ...`` up to
    ``n_max_percentage`` of the pixels, ``nsamples`` random subsets S of n pixels are drawn; the
    score of the sample is the Pearson correlation, over the subsets, between ``sum_{i in S} a_i``
    (the map, channels summed with their signs) and ``f(x) - f(x_S)`` (``x_S``: S set to the
    baseline), one per n (:attr:`SensitivityNResult.curve`), and ``scores`` their mean over n.
    An attribution is *sensitivity-n* when this correlation is 1: input x gradient of a linear
    model with a zero baseline is, for every n. Subsets come from ``np.random.default_rng(seed)``:
    one random permutation of the pixels per draw and sample, whose first n pixels are the
    subset of size n (each size's subsets are uniformly random; the sizes share their draws,
    so the permutations are held once, not once per size); all
    ``(N * nsamples + 1) x B`` rows are scored in chunked forward passes.

    Quantus's ``SensitivityN`` (0.6) departs from the paper: it draws no random subsets; it
    removes the pixels cumulatively in decreasing order of attribution (``features_in_step`` at
    a time, like pixel flipping), pairs the score drop of the first k steps with the attribution
    of the k-th step alone, and correlates them *across the samples of the batch*, one value per
    step (its output: a curve of ``n_max_percentage * features / features_in_step`` values, by
    default on softmax probabilities). Given its cumulative subsets through ``subsets``, our
    :attr:`~SensitivityNResult.deltas` are its score drops.

    Args:
        model: a torch or Keras/TF model returning (batch, classes).
        x: the input batch (numpy or tensor), in the model's layout.
        saliency: one map per sample (shapes as in :func:`~xaikit.evaluate.deletion`) or a method name.
        target: class per sample (or one for all); None = the model's prediction on x.
        n_max_percentage: the largest subset size, as a fraction of the pixels, in (0, 1].
        features_in_step: the step between sizes (None: a tenth of the largest size, so ten sizes).
        nsamples: random subsets per size (at least 2).
        baseline: what a pixel of S becomes: ``"black"`` (the sample's minimum), ``"zeros"``,
            ``"mean"``, ``"blur"`` or an array broadcastable to x.
        subsets: explicit subsets instead of random ones: a sequence of N int arrays
            (nsamples, B, n_k) of flat row-major pixel indices (the sizes and ``nsamples`` are read
            from it; ``n_max_percentage`` and ``features_in_step`` are then unused).
        **run: the shared run options (seed, max_batch, framework, output, model_kwargs,
            method_options), see :class:`~xaikit.evaluate.RunOptions`. ``seed`` also draws
            the subsets.

    Returns:
        A :class:`SensitivityNResult`; higher is better.

    Example:
        >>> import torch
        >>> model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16, 2, bias=False))
        >>> x = torch.rand(2, 1, 4, 4)
        >>> w = model[1].weight[0].detach().reshape(1, 1, 4, 4)
        >>> res = sensitivity_n(model, x, w * x, target=0, features_in_step=4, baseline="zeros")
        >>> res.ns.tolist(), res.scores.round(6).tolist()
        ([4, 8, 12], [1.0, 1.0])
    """
    check_baseline(baseline, FIXED_BASELINES)
    job, settings, smap = _signed_start(model, x, saliency, target, run)
    batch, n_pixels = smap.shape
    if subsets is None:
        frac = check_number(n_max_percentage, "n_max_percentage", 0.0, 1.0, low_open=True)
        nsamples = check_int(nsamples, "nsamples", 2)
        largest = int(frac * n_pixels)
        if largest < 1:
            raise XaikitValueError(
                f"n_max_percentage must leave at least one pixel of the {n_pixels}; got {n_max_percentage}"
            )
        step = max(1, largest // 10) if features_in_step is None else _check_step(features_in_step, largest)
        ns = np.arange(step, largest + 1, step)
        rng = np.random.default_rng(settings.seed)
        perms = np.argsort(rng.random((nsamples, batch, n_pixels)), axis=2).astype(np.int32)
        sets = [perms[..., :n] for n in ns]  # views: one permutation per draw and sample
    else:
        if isinstance(subsets, (str, bytes)) or not isinstance(subsets, Sequence) or not subsets:
            raise XaikitTypeError(
                f"subsets must be a non-empty sequence of int arrays (nsamples, {batch}, n); got {describe(subsets)}"
            )
        sets = [_check_subsets(s, batch, n_pixels) for s in subsets]
        nsamples = sets[0].shape[0]
        if any(s.shape[0] != nsamples for s in sets):
            raise XaikitValueError(
                f"subsets must have the same nsamples for every size; got {[s.shape[0] for s in sets]}"
            )
        ns = np.array([s.shape[2] for s in sets])
    drop = _subset_drop(sets, n_pixels)
    sizes: list[int] = []
    f0, scored, targets = _removal_scores(
        job, model, target, settings.output, len(ns) * nsamples, drop, job.baseline_tensor(baseline), sizes
    )
    deltas = (f0[None] - scored).T.reshape(batch, len(ns), nsamples)
    sums = np.stack([_subset_sums(smap, s) for s in sets], axis=1)  # (B, N, nsamples)
    curve = _pearson(sums.reshape(-1, nsamples), deltas.reshape(-1, nsamples)).reshape(batch, len(ns))
    scores = np.array([finite_mean(row) for row in curve])
    return SensitivityNResult(scores, ns.astype(np.int64), curve, sums, deltas, sets, targets, sizes)


# ---- faithfulness estimate -----------------------------------------------------------------------
@dataclass
class FaithfulnessEstimateResult(PerSample):
    """Faithfulness estimate of each sample (in [-1, 1]; NaN where the group attributions or
    the score drops do not vary).

    Attributes:
        scores: (B,) Pearson correlation between :attr:`attribution_sums` and :attr:`deltas`.
        attribution_sums: (B, G) the attribution of each group, in decreasing order.
        deltas: (B, G) ``f(x) - f(x with that group alone set to the baseline)``.
        targets: (B,) the class whose score is used.
        chunks: rows of each forward pass.
    """

    scores: np.ndarray
    attribution_sums: np.ndarray
    deltas: np.ndarray
    targets: np.ndarray
    chunks: list[int] = field(default_factory=list)


@public()
def faithfulness_estimate(
    model: Any,
    x: Any,
    saliency: Any,
    *,
    target: Any = None,
    features_in_step: int = 1,
    baseline: Any = "black",
    **run: Unpack[RunOptions],
) -> FaithfulnessEstimateResult:
    """Faithfulness estimate (Alvarez-Melis & Jaakkola, 2018): one group removed at a time.

    The pixels are sorted by decreasing attribution (the map, channels summed with their signs)
    and cut into groups of ``features_in_step``; each group alone is set to the baseline. The
    score is the Pearson correlation, over the groups, between the group's attribution and the
    score drop ``f(x) - f(x without the group)``. All ``(G + 1) x B`` rows
    (``G = ceil(pixels / features_in_step)``) are scored in chunked forward passes.

    Quantus's ``FaithfulnessEstimate`` (0.6) is the same quantity (its default: logits,
    ``softmax=False``; features = channel elements; ``features_in_step`` must divide their
    count); on one-channel images the two agree to float precision. The paper uses the class
    probability: pass a model ending in a softmax to score probabilities.

    Args:
        model: a torch or Keras/TF model returning (batch, classes).
        x: the input batch (numpy or tensor), in the model's layout.
        saliency: one map per sample or a method name.
        target: class per sample (or one for all); None = the model's prediction on x.
        features_in_step: pixels per group (the last group may be smaller).
        baseline: what the group becomes: ``"black"``, ``"zeros"``, ``"mean"``, ``"blur"`` or an
            array broadcastable to x.
        **run: the shared run options, see :class:`~xaikit.evaluate.RunOptions`.

    Returns:
        A :class:`FaithfulnessEstimateResult`; higher is better.

    Example:
        >>> import torch
        >>> model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16, 2, bias=False))
        >>> x = torch.rand(2, 1, 4, 4)
        >>> w = model[1].weight[0].detach().reshape(1, 1, 4, 4)
        >>> faithfulness_estimate(model, x, w * x, target=0, baseline="zeros").scores.round(6).tolist()
        [1.0, 1.0]
    """
    job, settings, smap, group, n_groups = _signed_groups(
        model, x, saliency, target, features_in_step, baseline, run, descending=True
    )

    def drop(j: np.ndarray, b: np.ndarray) -> np.ndarray:
        return group[b] == j[:, None]

    sizes: list[int] = []
    f0, scored, targets = _removal_scores(
        job, model, target, settings.output, n_groups, drop, job.baseline_tensor(baseline), sizes
    )
    deltas = (f0[None] - scored).T
    sums = _group_sums(smap, group, n_groups)
    return FaithfulnessEstimateResult(_pearson(sums, deltas), sums, deltas, targets, sizes)


# ---- monotonicity ---------------------------------------------------------------------------------
@dataclass
class MonotonicityResult(_PlainMean):
    """Monotonicity (Arya et al.) of each sample.

    Attributes:
        scores: (B,) the fraction of steps where the score does not fall (1: monotone).
        monotone: (B,) whether the score never falls (Quantus's output).
        curve: (B, G) the score after putting back the groups 1..g.
        targets: (B,) the class whose score is used.
        chunks: rows of each forward pass.
    """

    scores: np.ndarray
    monotone: np.ndarray
    curve: np.ndarray
    targets: np.ndarray
    chunks: list[int] = field(default_factory=list)


@public()
def monotonicity(
    model: Any,
    x: Any,
    saliency: Any,
    *,
    target: Any = None,
    features_in_step: int = 1,
    baseline: Any = "black",
    **run: Unpack[RunOptions],
) -> MonotonicityResult:
    """Monotonicity (Arya et al., 2019): does the score rise as pixels come back, least relevant first?

    Starting from the baseline, the pixels of x are put back in increasing order of attribution
    (the map, channels summed with their signs), ``features_in_step`` at a time; the curve of
    the target's score after each step should never fall. ``monotone`` says whether it never
    does (AIX360's ``monotonicity_metric`` and Quantus's output); ``scores`` is the fraction of
    the ``G - 1`` steps where it does not fall. All ``(G + 1) x B`` rows are scored in chunked
    forward passes (the first B, x itself, are not part of the curve).

    Quantus's ``Monotonicity`` (0.6) departs from the paper: it replaces the selected features
    *of the baseline image* by the baseline value again instead of by x's values, so its curve
    is ``f(baseline)`` at every step and it returns True for every sample, whatever the model
    and the map. It also sorts ``|a|`` by default (``abs=True``); pass ``abs(maps)`` for that.

    Args:
        model: a torch or Keras/TF model returning (batch, classes).
        x: the input batch (numpy or tensor), in the model's layout.
        saliency: one map per sample or a method name.
        target: class per sample (or one for all); None = the model's prediction on x.
        features_in_step: pixels put back per step (the last step may add fewer).
        baseline: the image the pixels are put back onto: ``"black"``, ``"zeros"``, ``"mean"``,
            ``"blur"`` or an array broadcastable to x.
        **run: the shared run options, see :class:`~xaikit.evaluate.RunOptions`.

    Returns:
        A :class:`MonotonicityResult`; higher is better.

    Example:
        >>> import torch
        >>> model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16, 2, bias=False))
        >>> x = torch.rand(2, 1, 4, 4)
        >>> w = model[1].weight[0].detach().reshape(1, 1, 4, 4)
        >>> res = monotonicity(model, x, (w * x).abs(), target=0, baseline="zeros")
        >>> res.curve.shape  # contributions |w x| put back smallest first: rises where w x > 0
        (2, 16)
    """
    job, settings, _, group, n_steps = _signed_groups(
        model, x, saliency, target, features_in_step, baseline, run, descending=False
    )

    def drop(j: np.ndarray, b: np.ndarray) -> np.ndarray:
        return group[b] > j[:, None]  # groups not yet put back keep the baseline

    sizes: list[int] = []
    _, scored, targets = _removal_scores(
        job, model, target, settings.output, n_steps, drop, job.baseline_tensor(baseline), sizes
    )
    curve = scored.T
    rises = np.diff(curve, axis=1) >= 0
    scores = rises.mean(axis=1) if n_steps > 1 else np.ones(job.batch)
    return MonotonicityResult(scores, np.asarray(rises.all(axis=1)), curve, targets, sizes)


# ---- monotonicity correlation ---------------------------------------------------------------------
@dataclass
class MonotonicityCorrelationResult(PerSample):
    """Monotonicity correlation (Nguyen & Martínez) of each sample.

    Attributes:
        scores: (B,) Spearman correlation between :attr:`attributions` and :attr:`losses`; NaN
            where either is constant (a constant map ranks nothing).
        attributions: (B, G) the |attribution| of each group, in increasing order.
        losses: (B, G) the mean over the draws of ``(f(x') - f(x))^2 / f(x)^2`` (``/ 1`` where
            ``|f(x)| < eps``), x' having the group replaced by a random value.
        values: (G, nsamples, B) the random value each group took.
        targets: (B,) the class whose score is used.
        chunks: rows of each forward pass.
    """

    scores: np.ndarray
    attributions: np.ndarray
    losses: np.ndarray
    values: np.ndarray
    targets: np.ndarray
    chunks: list[int] = field(default_factory=list)


@public()
def monotonicity_correlation(
    model: Any,
    x: Any,
    saliency: Any,
    *,
    target: Any = None,
    features_in_step: int = 1,
    nsamples: int = 100,
    value_range: tuple[float, float] = (0.0, 1.0),
    eps: float = 1e-5,
    values: Any = None,
    **run: Unpack[RunOptions],
) -> MonotonicityCorrelationResult:
    """Monotonicity correlation (Nguyen & Martínez, 2020): are larger |attributions| the pixels whose change matters more?

    The pixels are sorted by |attribution| (channels summed by magnitude) and cut into groups
    of ``features_in_step``. For each group, ``nsamples`` copies of x have the group set to one
    value drawn uniformly from ``value_range`` (every pixel and channel of the group the same
    value, a new one per draw and sample); the group's effect is the paper's expected loss
    ``E[(f(x') - f(x))^2] / f(x)^2`` (the normalisation by ``f(x)^2``, 1 where
    ``|f(x)| < eps``, does not change the ranks). The score is the Spearman correlation, over
    the groups, between the group's summed |attribution| and its effect. Values come from
    ``np.random.default_rng(seed)``; all ``(G * nsamples + 1) x B`` rows are scored in chunked
    forward passes.

    Quantus's ``MonotonicityCorrelation`` (0.6, ``perturb_baseline="uniform"``) computes this
    quantity (by default on softmax probabilities); it draws the values from numpy's global
    generator, group after group, draw after draw, one per sample: given them through
    ``values`` (G, nsamples, B), the two agree to float precision on one-channel images. Its
    expected loss is a mean of squared changes, not their variance around their own mean.

    Args:
        model: a torch or Keras/TF model returning (batch, classes).
        x: the input batch (numpy or tensor), in the model's layout.
        saliency: one map per sample or a method name.
        target: class per sample (or one for all); None = the model's prediction on x.
        features_in_step: pixels per group (the last group may be smaller).
        nsamples: random draws per group (Quantus's ``nr_samples``).
        value_range: ``(low, high)`` of the uniform draws, in the input's units.
        eps: below this ``|f(x)|`` the loss is not divided by ``f(x)^2``.
        values: explicit values (G, nsamples, B) instead of random ones.
        **run: the shared run options, see :class:`~xaikit.evaluate.RunOptions`. ``seed`` also
            draws the values.

    Returns:
        A :class:`MonotonicityCorrelationResult`; higher is better.

    Example:
        >>> import torch
        >>> model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16, 2, bias=False))
        >>> x = torch.zeros(2, 1, 4, 4)  # from 0, a value u changes the score by w u
        >>> w = model[1].weight[0].detach().reshape(1, 1, 4, 4)
        >>> u = np.broadcast_to(np.linspace(0.1, 1.0, 10)[None, :, None], (16, 10, 2))  # same draws per pixel
        >>> res = monotonicity_correlation(model, x, w.expand(2, 1, 4, 4), target=0, values=u)
        >>> res.scores.round(6).tolist()  # |w| ranks the pixels exactly as their effect w^2 mean(u^2)
        [1.0, 1.0]
    """
    eps = check_number(eps, "eps", 0.0)
    if not isinstance(value_range, (tuple, list)) or len(value_range) != 2:
        raise XaikitValueError(f"value_range must be (low, high) with low < high; got {value_range!r}")
    low = check_number(value_range[0], "value_range[0] (low)")
    high = check_number(value_range[1], "value_range[1] (high)")
    if not low < high:
        raise XaikitValueError(f"value_range must be (low, high) with low < high; got {value_range!r}")
    settings = RunSettings.of(run)
    job = _start(model, x, saliency, target, settings)
    batch = job.batch
    magnitude = _spatial_map(job, absolute=True).reshape(batch, -1)
    step = _check_step(features_in_step, magnitude.shape[1])
    n_groups = -(-magnitude.shape[1] // step)
    if values is None:
        nsamples = check_int(nsamples, "nsamples", 1)
        drawn = np.random.default_rng(settings.seed).uniform(low, high, (n_groups, nsamples, batch))
    else:
        drawn = host(values, "values").astype(np.float64)
        if drawn.ndim != 3 or drawn.shape[0] != n_groups or drawn.shape[2] != batch or drawn.shape[1] < 1:
            raise XaikitValueError(
                f"values must be an array (groups={n_groups}, nsamples, {batch}); got {describe(values)}"
            )
        if not np.all(np.isfinite(drawn)):
            raise XaikitValueError("values holds NaN or infinite values")
        nsamples = drawn.shape[1]
    group = _groups(magnitude, step, descending=False)
    row_shape = job.shape[1:]

    def drop(j: np.ndarray, b: np.ndarray) -> np.ndarray:
        return group[b] == (j // nsamples)[:, None]

    def base(j: np.ndarray, b: np.ndarray) -> np.ndarray:
        u = drawn[j // nsamples, j % nsamples, b]
        return np.broadcast_to(u.reshape((-1,) + (1,) * len(row_shape)), (len(j),) + row_shape).copy()

    sizes: list[int] = []
    f0, scored, targets = _removal_scores(
        job, model, target, settings.output, n_groups * nsamples, drop, base, sizes
    )
    change = (scored.reshape(n_groups, nsamples, batch) - f0[None, None]) ** 2
    scale = np.where(np.abs(f0) >= eps, 1.0 / np.where(f0 != 0, f0, 1.0) ** 2, 1.0)
    losses = change.mean(axis=1).T * scale[:, None]
    attributions = _group_sums(magnitude, group, n_groups)
    # a constant map (or a model no group moves) ranks nothing: NaN, as in Quantus (the 0 / 1
    # convention would read as "unrelated" / "perfect")
    scores = spearman(attributions, losses, undefined_nan=True)
    return MonotonicityCorrelationResult(scores, attributions, losses, drawn, targets, sizes)


# ---- sufficiency ------------------------------------------------------------------------------------
@dataclass
class SufficiencyResult(PerSample):
    """Sufficiency (Dasgupta et al.) of each sample within its batch.

    Attributes:
        scores: (B,) among the other samples whose maps lie within the threshold, the share
            predicted as this one; NaN for a sample with no such neighbour.
        distances: (B, B) the distances between the maps, divided by their largest.
        predictions: (B,) the class the model predicts for each sample.
    """

    scores: np.ndarray
    distances: np.ndarray
    predictions: np.ndarray


def _pairwise(maps: np.ndarray, distance: str) -> np.ndarray:
    """(B, B) distances between flat maps; ``"seuclidean"`` standardizes each pixel by its
    variance over the batch (ddof 1), pixels that do not vary left out."""
    from scipy.spatial.distance import cdist

    if distance == "seuclidean":
        var = maps.var(axis=0, ddof=1) if len(maps) > 1 else np.zeros(maps.shape[1])
        ok = var > 0
        scaled = maps[:, ok] / np.sqrt(var[ok])
        return np.asarray(cdist(scaled, scaled, "euclidean"), dtype=np.float64)
    try:
        return np.asarray(cdist(maps, maps, distance), dtype=np.float64)
    except ValueError as exc:
        raise XaikitValueError(
            f"distance must be 'seuclidean' or a metric of scipy.spatial.distance.cdist; got {distance!r}"
        ) from exc


@public()
def sufficiency(
    model: Any,
    x: Any,
    saliency: Any,
    *,
    target: Any = None,
    threshold: float = 0.6,
    distance: str = "seuclidean",
    **run: Unpack[RunOptions],
) -> SufficiencyResult:
    """Sufficiency (Dasgupta et al., 2022): do samples explained alike get the same prediction?

    A metric of the batch, not of each sample alone: the maps' magnitudes (channels summed)
    are compared pairwise with ``distance`` (by default the standardized Euclidean distance,
    each pixel divided by its standard deviation over the batch), the distances divided by their
    largest, and two samples are neighbours when that is at most ``threshold``. A sample's
    score is the share of its neighbours (itself left out) that the model predicts as the same
    class; a sample without a neighbour gets NaN (the share is undefined). Adding or removing a
    sample changes the others' scores. One forward pass (chunked) for the predictions.

    Quantus's ``Sufficiency`` (0.6) is the same computation (scipy's ``seuclidean``, the
    distances divided by their maximum, ``<= threshold``), except that a sample without a
    neighbour scores 0 (a division by infinity) rather than NaN, which pulls the mean down
    for an explanation that merely tells samples apart.

    Args:
        model: a torch or Keras/TF model returning (batch, classes).
        x: the input batch (numpy or tensor), in the model's layout.
        saliency: one map per sample or a method name.
        target: the classes a method name explains (None: the predictions); the score always
            compares the model's predictions.
        threshold: the largest normalized distance of two neighbours, in [0, 1].
        distance: ``"seuclidean"`` or a metric name of ``scipy.spatial.distance.cdist``.
        **run: the shared run options, see :class:`~xaikit.evaluate.RunOptions`.

    Returns:
        A :class:`SufficiencyResult`; higher is better.

    Example:
        >>> import torch
        >>> model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(4, 2))
        >>> maps = torch.tensor([[1.0, 0, 0, 0], [1.0, 0, 0, 0], [0, 0, 0, 1.0]]).reshape(3, 1, 2, 2)
        >>> res = sufficiency(model, torch.rand(3, 1, 2, 2), maps, distance="euclidean", threshold=0.1)
        >>> np.isnan(res.scores).tolist()  # the third map has no neighbour
        [False, False, True]
    """
    threshold = check_number(threshold, "threshold", 0.0, 1.0)
    if not isinstance(distance, str):
        raise XaikitTypeError(
            f"distance must be a metric name such as 'seuclidean'; got {describe(distance)}"
        )
    refuse_object(
        target,
        "sufficiency",
        "it asks whether samples with nearby explanations get the same predicted class, and a target "
        "object names no class",
    )
    settings = RunSettings.of(run)
    job = _start(model, x, saliency, target, settings)
    maps = _spatial_map(job, absolute=True).reshape(job.batch, -1)
    dist = _pairwise(maps, distance)
    top = dist.max() if dist.size else 0.0
    if top > 0:
        dist = dist / top
    near = dist <= threshold
    np.fill_diagonal(near, False)
    with job.bk.inference(model):
        pred_t, _ = pin_targets(job.inp, None, settings.output)
    predictions = job.bk.to_numpy(pred_t).astype(np.int64).reshape(-1)
    if predictions.size == 1:
        predictions = np.repeat(predictions, job.batch)
    same = predictions[None] == predictions[:, None]
    count = near.sum(axis=1)
    scores = np.full(job.batch, np.nan)
    has = count > 0
    scores[has] = (near & same).sum(axis=1)[has] / count[has]
    return SufficiencyResult(scores, dist, predictions)
