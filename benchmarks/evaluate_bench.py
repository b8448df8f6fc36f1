"""Speed and memory of ``xk.evaluate``'s metrics against Quantus at equal settings.

Quantus is not a dependency of xaikit: run this in an environment with Quantus and torch, this
repository on the path::

    PYTHONPATH=. /tmp/qvenv/bin/python benchmarks/evaluate_bench.py [--reps 3] [--batch 32] \
        [--models lenet,resnet18]

For each metric of :data:`PAIRS` (a list to extend: one :class:`Pair` per metric, our call and
Quantus's at equal settings), on a seeded torch LeNet (one grey channel, 32x32, 5 classes:
Quantus's pixel flipping checks its step size against the spatial size only) and a batch of
``shapes`` images with their object masks (``--models resnet18``: also a random-weight
ResNet-18 on 224x224 pictures, ``tests/real_models.py``, without the pixel-flipping and ROAD
pairs, whose Quantus side needs one channel): one untimed warm-up call each, then ``--reps``
interleaved rounds; the median wall time, the speed-up (Quantus / xaikit) and the peak
resident-memory growth of a call (sampled every millisecond, ``benchmarks/_measure.py``).

The **bound** column is the model's own cost at the same row counts: a plain torch loop, in
chunks of 256 rows, of forward passes (``torch.no_grad``) over the rows our implementation
scores and forward+backward passes over the rows it explains (each pair's ``rows``), without
any metric logic, timed in the same interleaved rounds. ``xaikit / bound`` shows how far a
metric is from that floor; where Quantus sends the same rows through the model, its speed-up
cannot exceed ``Quantus / bound`` either. Metrics with no model work have no bound ("–").

Maps are given (vanilla gradients, made tie-free) to the metrics of maps; the metrics that
re-explain get the same explanation function on both sides (``xk.xai.explain``, vanilla), so
the timing compares the metrics' own loops (sMPRT: Quantus's ``quantus.explain``, which it
calls on the noisy copies, is pointed at the same function). The settings of the faithfulness,
robustness and randomization pairs are those of ``benchmarks/quantus_faithfulness.py``,
``quantus_robustness.py`` and ``quantus_randomization.py`` (where the two tools were checked to
agree), with fewer noise samples (:data:`ROBUST_N`, :data:`SMPRT_N`) to keep a run short. Writes its table into ``docs/benchmarks.md``
between the ``evaluate-bench`` markers and the raw figures to
``benchmarks/results/evaluate_bench.json``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import quantus
import torch

import xaikit as xk
from benchmarks._measure import Case, interleave, machine, write_section
from xaikit.architecture.torch import LeNet
from xaikit.dataset.data import shapes
from xaikit.files import write_json

if not hasattr(np, "trapz"):  # numpy 2.4 removed it; Quantus 0.6's IROF calls it
    np.trapz = np.trapezoid  # type: ignore[attr-defined]  # noqa: NPY201

ROOT = Path(__file__).resolve().parent.parent
#: the default section of docs/benchmarks.md (``--section`` names another, e.g. for a subset run)
SECTION = "evaluate-bench"
STEPS = 16


@dataclass
class Setup:
    """What every pair works on."""

    model: Any
    x: np.ndarray  # (B, 1, 32, 32) float32 in [0, 1]
    y: np.ndarray  # (B,) the predicted classes
    maps: np.ndarray  # (B, H, W) tie-free non-negative maps
    mask: np.ndarray  # (B, H, W) bool object masks
    raw: np.ndarray  # (B, C, H, W) the signed vanilla gradients
    classes: int  # the model's classes
    cache: dict[str, Any] = field(default_factory=dict)  # inputs built once per setup (untimed)

    @property
    def grey(self) -> bool:
        return self.x.shape[1] == 1


@dataclass
class Pair:
    """One metric: our call and Quantus's, each ``fn(setup)`` doing the whole work once."""

    name: str
    ours: Callable[[Setup], Any]
    theirs: Callable[[Setup], Any]
    note: str = ""
    grey_only: bool = False  # Quantus's side needs a one-channel model (left out on ResNet-18)
    #: (forward rows, gradient rows) our implementation sends to the model
    rows: Callable[[Setup], tuple[int, int]] = lambda s: (0, 0)


def _xk_explain(model: Any, inputs: np.ndarray, targets: np.ndarray, **_: Any) -> np.ndarray:
    """Quantus's ``explain_func`` protocol around ``xk.xai.explain`` (vanilla gradients)."""
    return np.asarray(xk.xai.explain(model, inputs, target=targets, method="vanilla"))


def _q(metric: Any, s: Setup, **kw: Any) -> Any:
    return metric(model=s.model, x_batch=s.x, y_batch=s.y, channel_first=True, device="cpu", **kw)


def _n_layers(s: Setup) -> int:
    """The layers with weights (the randomization tests' steps)."""
    return len(xk.evaluate.model_layers(s.model))


#: pixels per group / step of the feature-removal metrics, both sides (Quantus's default is 1)
FR_STEP = 16
#: random subsets per size of sensitivity-n (ours; Quantus draws none)
SN_N = 2
#: uniform draws per group of the monotonicity correlation, both sides (Quantus's default is 100)
MC_N = 5


def _pixels(s: Setup) -> int:
    return int(np.prod(s.x.shape[2:]))


def _fr_groups(s: Setup) -> int:
    return -(-_pixels(s) // FR_STEP)


#: ROAD's percentages: Quantus's default 1, 3, ..., 99 (its ROAD needs one channel: LeNet only)
ROAD_PERCENTAGES = list(range(1, 100, 2))
#: noise samples of the robustness metrics, both sides (Quantus's default is 200)
ROBUST_N = 16
#: noisy copies per map of sMPRT, both sides (Quantus's default is 50)
SMPRT_N = 5


def _fc_runs(s: Setup) -> int:
    """Faithfulness-correlation runs (of 224 features): Quantus's 100 on the LeNet, 10 on 224x224."""
    return 100 if s.grey else 10


def _patch(s: Setup) -> int:
    """Infidelity's patch size: 4 on 32x32 (64 patches), 56 on 224x224 (16 patches)."""
    return 4 if s.x.shape[-1] <= 32 else 56


def _cumulative_patches(s: Setup) -> np.ndarray:
    """Quantus's Infidelity perturbations ``I = x - x_k`` (its ``n_perturb_samples=1``): square
    patches set to the sample's minimum one after another in raster order, cumulatively;
    (K, B, C, H, W), built once per setup (``benchmarks/quantus_faithfulness.py`` checks them
    against the ones Quantus makes)."""
    if "patches" not in s.cache:
        x, patch = s.x, _patch(s)
        b, _, h, w = x.shape
        low = x.reshape(b, -1).min(axis=1)[:, None, None, None]
        xp = x.copy()
        out = []
        for i in range(h // patch):
            for j in range(w // patch):
                xp[:, :, i * patch : (i + 1) * patch, j * patch : (j + 1) * patch] = low
                out.append(x - xp)
        s.cache["patches"] = np.stack(out)
    return s.cache["patches"]


def _q_smooth_mprt(s: Setup) -> Any:
    """Quantus's SmoothMPRT calls ``quantus.explain`` on the noisy copies: pointed at ours."""
    real = quantus.explain
    quantus.explain = _xk_explain
    try:
        return _q(quantus.SmoothMPRT(nr_samples=SMPRT_N, disable_warnings=True), s, explain_func=_xk_explain)
    finally:
        quantus.explain = real


def _robust(cls: Any, n: int, s: Setup, **kw: Any) -> Any:
    metric = cls(nr_samples=n, normalise=False, disable_warnings=True, **kw)
    return _q(metric, s, a_batch=None, explain_func=_xk_explain, batch_size=len(s.x))


#: the layer whose representation the relative representation stability compares (LeNet's)
STABILITY_LAYER = "conv2"
#: translations of continuity, both sides (Quantus's default is 28)
CONTINUITY_N = 8


#: the metrics compared; add a Pair per new metric (ours, Quantus's at equal settings)
PAIRS: list[Pair] = [
    Pair(
        "deletion / PixelFlipping",
        lambda s: xk.evaluate.deletion(s.model, s.x, s.maps, target=s.y, steps=STEPS, baseline="black", rank="signed"),
        lambda s: _q(
            quantus.PixelFlipping(
                features_in_step=32 * 32 // STEPS, perturb_baseline="black", normalise=False, abs=False,
                disable_warnings=True,
            ),
            s, a_batch=s.maps[:, None], softmax=False,
        ),
        f"{STEPS} steps, black baseline",
        grey_only=True,
        rows=lambda s: ((STEPS + 1) * len(s.x), 0),
    ),
    Pair(
        "pointing game / PointingGame",
        lambda s: xk.evaluate.localization(s.maps, s.mask),
        lambda s: _q(quantus.PointingGame(disable_warnings=True), s, a_batch=s.maps[:, None],
                     s_batch=s.mask[:, None].astype(float)),
        "ours also computes the energy",
    ),
    Pair(
        "energy / RelevanceMassAccuracy",
        lambda s: xk.evaluate.localization(s.maps, s.mask),
        lambda s: _q(quantus.RelevanceMassAccuracy(normalise=False, disable_warnings=True), s,
                     a_batch=s.maps[:, None], s_batch=s.mask[:, None].astype(float)),
        "ours also computes the pointing game",
    ),
    Pair(
        "randomization_test / MPRT",
        lambda s: xk.evaluate.randomization_test(s.model, s.x, "vanilla", target=s.y, random_baseline=False),
        lambda s: _q(quantus.MPRT(disable_warnings=True), s, a_batch=None, explain_func=_xk_explain),
        "cascading, every layer, vanilla maps by xk.xai.explain on both sides",
        rows=lambda s: (0, (_n_layers(s) + 1) * len(s.x)),
    ),
    Pair(
        "sparseness / Sparseness",
        lambda s: xk.evaluate.sparseness(s.maps),
        lambda s: _q(quantus.Sparseness(disable_warnings=True), s, a_batch=s.maps[:, None]),
    ),
    Pair(
        "complexity / Complexity",
        lambda s: xk.evaluate.complexity(s.maps),
        lambda s: _q(quantus.Complexity(disable_warnings=True), s, a_batch=s.maps[:, None]),
    ),
    Pair(
        "road / ROAD",
        lambda s: xk.evaluate.road(s.model, s.x, s.maps, target=s.y,
                                   fractions=np.array(ROAD_PERCENTAGES) / 100.0, order="morf", stdev=0.01),
        lambda s: _q(quantus.ROAD(percentages=ROAD_PERCENTAGES, noise=0.01, normalise=False, abs=False,
                                  disable_warnings=True), s, a_batch=s.maps[:, None], softmax=False),
        f"MoRF, {len(ROAD_PERCENTAGES)} percentages (1, 3, ..., 99 %), noise 0.01",
        grey_only=True,
        rows=lambda s: (len(ROAD_PERCENTAGES) * len(s.x), 0),
    ),
    Pair(
        "infidelity / Infidelity",
        lambda s: xk.evaluate.infidelity(s.model, s.x, s.raw, target=s.y, perturbation=_cumulative_patches(s),
                                         normalize=False),
        lambda s: _q(quantus.Infidelity(perturb_patch_sizes=[_patch(s)], n_perturb_samples=1, normalise=False,
                                        abs=False, disable_warnings=True), s, a_batch=s.raw, softmax=False),
        "Quantus's cumulative patch perturbations (4x4 on 32x32: 64; 56x56 on 224x224: 16), given to ours "
        "as an array; signed vanilla maps",
        rows=lambda s: ((len(_cumulative_patches(s)) + 1) * len(s.x), 0),
    ),
    Pair(
        "faithfulness_correlation / FaithfulnessCorrelation",
        lambda s: xk.evaluate.faithfulness_correlation(s.model, s.x, s.maps, target=s.y, subset_size=224,
                                                       nsamples=_fc_runs(s), baseline="black"),
        lambda s: _q(quantus.FaithfulnessCorrelation(nr_runs=_fc_runs(s), subset_size=224, normalise=False,
                                                     abs=False, return_aggregate=False, disable_warnings=True),
                     s, a_batch=s.maps[:, None], softmax=False),
        "224 features per subset, 100 runs (LeNet) / 10 runs (224x224), black baseline (on RGB ours "
        "removes 224 pixels, Quantus 224 channel elements)",
        rows=lambda s: ((_fc_runs(s) + 1) * len(s.x), 0),
    ),
    Pair(
        "max_sensitivity / MaxSensitivity",
        lambda s: xk.evaluate.max_sensitivity(s.model, s.x, "vanilla", target=s.y, nsamples=ROBUST_N, radius=0.2),
        lambda s: _robust(quantus.MaxSensitivity, ROBUST_N, s, lower_bound=0.2),
        f"{ROBUST_N} noise samples, uniform ±0.2, vanilla maps by xk.xai.explain on both sides",
        rows=lambda s: (0, (ROBUST_N + 1) * len(s.x)),
    ),
    Pair(
        "avg_sensitivity / AvgSensitivity",
        lambda s: xk.evaluate.avg_sensitivity(s.model, s.x, "vanilla", target=s.y, nsamples=ROBUST_N, radius=0.2),
        lambda s: _robust(quantus.AvgSensitivity, ROBUST_N, s, lower_bound=0.2),
        f"{ROBUST_N} noise samples, uniform ±0.2, vanilla maps by xk.xai.explain on both sides",
        rows=lambda s: (0, (ROBUST_N + 1) * len(s.x)),
    ),
    Pair(
        "local_lipschitz / LocalLipschitzEstimate",
        lambda s: xk.evaluate.local_lipschitz(s.model, s.x, "vanilla", target=s.y, nsamples=ROBUST_N, stdev=0.1),
        lambda s: _robust(quantus.LocalLipschitzEstimate, ROBUST_N, s, perturb_std=0.1),
        f"{ROBUST_N} noise samples, Gaussian std 0.1, vanilla maps by xk.xai.explain on both sides",
        rows=lambda s: (0, (ROBUST_N + 1) * len(s.x)),
    ),
    Pair(
        "relevance_rank_accuracy / RelevanceRankAccuracy",
        lambda s: xk.evaluate.relevance_rank_accuracy(s.maps, s.mask, absolute=False),
        lambda s: _q(quantus.RelevanceRankAccuracy(abs=False, normalise=False, disable_warnings=True), s,
                     a_batch=s.maps[:, None], s_batch=s.mask[:, None].astype(float)),
        "signed (non-negative) maps, no normalisation",
    ),
    Pair(
        "random_logit / RandomLogit",
        lambda s: xk.evaluate.random_logit(s.model, s.x, "vanilla", target=s.y, num_classes=s.classes, seed=42,
                                           similarity="spearman"),
        lambda s: _q(quantus.RandomLogit(num_classes=s.classes, seed=42,
                                         similarity_func=quantus.similarity_func.correlation_spearman,
                                         abs=True, normalise=False, disable_warnings=True),
                     s, explain_func=_xk_explain),
        "Spearman of the absolute maps, vanilla maps by xk.xai.explain on both sides",
        rows=lambda s: (0, 2 * len(s.x)),
    ),
    Pair(
        "efficient_mprt / EfficientMPRT",
        lambda s: xk.evaluate.efficient_mprt(s.model, s.x, "vanilla", target=s.y),
        lambda s: _q(quantus.EfficientMPRT(disable_warnings=True), s, explain_func=_xk_explain),
        "Quantus's defaults (100 bins, every layer), vanilla maps by xk.xai.explain on both sides",
        rows=lambda s: (0, 2 * len(s.x)),
    ),
    Pair(
        "smooth_mprt / SmoothMPRT",
        lambda s: xk.evaluate.smooth_mprt(s.model, s.x, "vanilla", target=s.y, nsamples=SMPRT_N),
        _q_smooth_mprt,
        f"bottom-up, every layer, {SMPRT_N} noisy copies (noise 0.1), vanilla maps by xk.xai.explain on both sides",
        rows=lambda s: (0, (_n_layers(s) + 1) * SMPRT_N * len(s.x)),
    ),
    # localization_more (issue 31): the remaining localisation metrics; maps and masks as above
    Pair(
        "attribution_localisation / AttributionLocalisation",
        lambda s: xk.evaluate.attribution_localisation(s.maps, s.mask),
        lambda s: _q(quantus.AttributionLocalisation(disable_warnings=True), s, a_batch=s.maps[:, None],
                     s_batch=s.mask[:, None].astype(float)),
        "unweighted (Quantus's weighted variant differs by definition)",
    ),
    Pair(
        "top_k_intersection / TopKIntersection",
        lambda s: xk.evaluate.top_k_intersection(s.maps, s.mask, k=_top_k(s)),
        lambda s: _q(quantus.TopKIntersection(k=_top_k(s), normalise=False, disable_warnings=True), s,
                     a_batch=s.maps[:, None], s_batch=s.mask[:, None].astype(float)),
        "k = 1000 of 224 x 224 pixels, scaled (20 on 32 x 32)",
    ),
    Pair(
        "relevance_mass_accuracy / RelevanceMassAccuracy",
        lambda s: xk.evaluate.relevance_mass_accuracy(s.maps, s.mask),
        lambda s: _q(quantus.RelevanceMassAccuracy(normalise=False, disable_warnings=True), s,
                     a_batch=s.maps[:, None], s_batch=s.mask[:, None].astype(float)),
        "the energy alone, under Quantus's name",
    ),
    Pair(
        "localization_auc / AUC",
        lambda s: xk.evaluate.localization_auc(s.maps, s.mask),
        lambda s: _q(quantus.AUC(normalise=False, disable_warnings=True), s, a_batch=s.maps[:, None],
                     s_batch=s.mask[:, None].astype(float)),
        "ROC AUC per sample (ours from average ranks, Quantus sklearn's roc_curve + auc)",
    ),
    Pair(
        "focus / Focus (maps)",
        lambda s: xk.evaluate.focus(s.model, s.x, s.maps, quadrants=_quadrants(s)),
        lambda s: _q(quantus.Focus(disable_warnings=True), s, a_batch=s.maps[:, None], custom_batch=_quadrants(s)),
        "the batch's images scored as mosaics with 2 random target quadrants each (the scoring is timed)",
    ),
    Pair(
        "focus / Focus (vanilla)",
        lambda s: xk.evaluate.focus(s.model, s.x, "vanilla", target=s.y, quadrants=_quadrants(s)),
        lambda s: _q(quantus.Focus(disable_warnings=True), s, a_batch=None, explain_func=_xk_explain,
                     custom_batch=_quadrants(s)),
        "vanilla maps by xk.xai.explain on both sides",
        rows=lambda s: (0, len(s.x)),
    ),
    # ---- curves (issue 31): region perturbation, IROF, selectivity; settings of
    # benchmarks/quantus_curves.py (black fill, Quantus's patch grid; IROF with a per-image mean fill)
    Pair(
        "region_perturbation / RegionPerturbation",
        lambda s: xk.evaluate.region_perturbation(s.model, s.x, s.maps, target=s.y, patch_size=_region_patch(s),
                                                  steps=100, baseline="black"),
        lambda s: _q(quantus.RegionPerturbation(patch_size=_region_patch(s), regions_evaluation=100,
                                                perturb_baseline="black", normalise=False, abs=False,
                                                disable_warnings=True), s, a_batch=s.maps[:, None], softmax=False),
        "MoRF, 4x4 patches on 32x32 (64 steps) / 16x16 on 224x224 (100 of 196), black fill",
        rows=lambda s: ((min(100, _n_patches(s, _region_patch(s))) + 1) * len(s.x), 0),
    ),
    Pair(
        "selectivity / Selectivity",
        lambda s: xk.evaluate.selectivity(s.model, s.x, s.maps, target=s.y, patch_size=_select_patch(s)),
        lambda s: _q(quantus.Selectivity(patch_size=_select_patch(s), perturb_baseline="black", normalise=False,
                                         abs=False, disable_warnings=True), s, a_batch=s.maps[:, None],
                     softmax=False),
        "every patch, 4x4 on 32x32 (64) / 28x28 on 224x224 (64), black fill",
        rows=lambda s: ((_n_patches(s, _select_patch(s)) + 1) * len(s.x), 0),
    ),
    Pair(
        "irof / IROF",
        lambda s: xk.evaluate.irof(s.model, s.x, s.maps, target=s.y),
        lambda s: _q(quantus.IROF(perturb_baseline=_image_means(s), normalise=False, abs=False,
                                  return_aggregate=False, disable_warnings=True),
                     s, a_batch=s.maps[:, None], softmax=False),
        "SLIC at scikit-image's defaults (about 100 superpixels), each image's mean colour as the fill "
        "(Quantus: as an explicit perturb_baseline array; grey only: its mask must match the image's shape)",
        grey_only=True,
        rows=lambda s: ((_n_segments(s) + 1) * len(s.x), 0),
    ),
    # stability (relative stability, continuity, consistency): benchmarks/quantus_stability.py
    Pair(
        "relative_input_stability / RelativeInputStability",
        lambda s: xk.evaluate.relative_input_stability(s.model, s.x, "vanilla", target=s.y, nsamples=ROBUST_N),
        lambda s: _robust(quantus.RelativeInputStability, ROBUST_N, s),
        f"{ROBUST_N} noise samples (ours uniform ±0.2, Quantus's default U[0.02, 0.2]), vanilla maps by "
        "xk.xai.explain on both sides",
        rows=lambda s: ((ROBUST_N + 1) * len(s.x), (ROBUST_N + 1) * len(s.x)),
    ),
    Pair(
        "relative_output_stability / RelativeOutputStability",
        lambda s: xk.evaluate.relative_output_stability(s.model, s.x, "vanilla", target=s.y, nsamples=ROBUST_N),
        lambda s: _robust(quantus.RelativeOutputStability, ROBUST_N, s),
        f"{ROBUST_N} noise samples, as RIS",
        rows=lambda s: ((ROBUST_N + 1) * len(s.x), (ROBUST_N + 1) * len(s.x)),
    ),
    Pair(
        "relative_representation_stability / RelativeRepresentationStability",
        lambda s: xk.evaluate.relative_representation_stability(
            s.model, s.x, "vanilla", target=s.y, nsamples=ROBUST_N, layer=STABILITY_LAYER),
        lambda s: _robust(quantus.RelativeRepresentationStability, ROBUST_N, s, layer_names=[STABILITY_LAYER]),
        f"{ROBUST_N} noise samples, as RIS, layer {STABILITY_LAYER!r}",
        grey_only=True,
        rows=lambda s: (2 * (ROBUST_N + 1) * len(s.x), (ROBUST_N + 1) * len(s.x)),
    ),
    Pair(
        "continuity / Continuity",
        lambda s: xk.evaluate.continuity(s.model, s.x, "vanilla", target=s.y, nsteps=CONTINUITY_N, pairs="origin",
                                         absolute=True),
        lambda s: _q(quantus.Continuity(nr_steps=CONTINUITY_N, abs=True, normalise=False, disable_warnings=True),
                     s, explain_func=_xk_explain),
        f"{CONTINUITY_N} translations, x against each (Quantus's pairs), absolute maps",
        rows=lambda s: (0, (CONTINUITY_N + 1) * len(s.x)),
    ),
    Pair(
        "consistency / Consistency",
        lambda s: xk.evaluate.consistency(s.model, s.x, s.raw, discretize="sign", absolute=False),
        lambda s: _q(quantus.Consistency(discretise_func=quantus.discretise_func.sign, abs=False, normalise=False,
                                         disable_warnings=True), s, a_batch=s.raw),
        "the signs of the vanilla maps as the discretisation",
        rows=lambda s: (len(s.x), 0),
    ),
    # ---- issue 31, faithfulness_more: feature_removal.py (groups of FR_STEP pixels, logits, no
    # normalisation on both sides; Quantus's SensitivityN removes cumulatively, ours draws
    # SN_N random subsets per size, see docs/evaluate.md)
    Pair(
        "faithfulness_estimate / FaithfulnessEstimate",
        lambda s: xk.evaluate.faithfulness_estimate(s.model, s.x, s.maps, target=s.y, features_in_step=FR_STEP),
        lambda s: _q(quantus.FaithfulnessEstimate(features_in_step=FR_STEP, normalise=False, abs=False,
                                                  disable_warnings=True), s, a_batch=s.maps[:, None], softmax=False),
        f"groups of {FR_STEP} pixels, black baseline",
        grey_only=True,
        rows=lambda s: ((_fr_groups(s) + 1) * len(s.x), 0),
    ),
    Pair(
        "sensitivity_n / SensitivityN",
        lambda s: xk.evaluate.sensitivity_n(s.model, s.x, s.maps, target=s.y, features_in_step=FR_STEP, nsamples=SN_N),
        lambda s: _q(quantus.SensitivityN(features_in_step=FR_STEP, normalise=False, abs=False, disable_warnings=True),
                     s, a_batch=s.maps[:, None], softmax=False),
        f"sizes {FR_STEP}, {2 * FR_STEP}, ... up to 80 %; ours {SN_N} random subsets per size, Quantus one "
        "cumulative removal per size",
        grey_only=True,
        rows=lambda s: ((int(0.8 * _pixels(s)) // FR_STEP * SN_N + 1) * len(s.x), 0),
    ),
    Pair(
        "monotonicity / Monotonicity",
        lambda s: xk.evaluate.monotonicity(s.model, s.x, s.maps, target=s.y, features_in_step=FR_STEP),
        lambda s: _q(quantus.Monotonicity(features_in_step=FR_STEP, normalise=False, abs=False, disable_warnings=True),
                     s, a_batch=s.maps[:, None], softmax=False),
        f"steps of {FR_STEP} pixels onto black (Quantus's never restores x: see docs/evaluate.md)",
        grey_only=True,
        rows=lambda s: ((_fr_groups(s) + 1) * len(s.x), 0),
    ),
    Pair(
        "monotonicity_correlation / MonotonicityCorrelation",
        lambda s: xk.evaluate.monotonicity_correlation(s.model, s.x, s.maps, target=s.y, features_in_step=FR_STEP,
                                                       nsamples=MC_N),
        lambda s: _q(quantus.MonotonicityCorrelation(features_in_step=FR_STEP, nr_samples=MC_N, normalise=False,
                                                     disable_warnings=True), s, a_batch=s.maps[:, None], softmax=False),
        f"groups of {FR_STEP} pixels, {MC_N} uniform draws each",
        grey_only=True,
        rows=lambda s: ((_fr_groups(s) * MC_N + 1) * len(s.x), 0),
    ),
    Pair(
        "sufficiency / Sufficiency",
        lambda s: xk.evaluate.sufficiency(s.model, s.x, s.maps),
        lambda s: _q(quantus.Sufficiency(disable_warnings=True), s, a_batch=s.maps[:, None]),
        "threshold 0.6, standardized Euclidean distance, one forward pass",
        rows=lambda s: (len(s.x), 0),
    ),
    # axiomatic group (issue 31): effective complexity, non-sensitivity, input invariance (MST-C
    # is on Quantus's main branch only, not in 0.6: no pair)
    Pair(
        "effective_complexity / EffectiveComplexity",
        lambda s: xk.evaluate.effective_complexity(s.maps),
        lambda s: _q(quantus.EffectiveComplexity(disable_warnings=True), s, a_batch=s.maps[:, None]),
        "eps 1e-5, maps divided by their peak (Quantus: by the batch's), no model call",
    ),
    Pair(
        "non_sensitivity / NonSensitivity",
        lambda s: xk.evaluate.non_sensitivity(s.model, s.x, s.maps, target=s.y),
        lambda s: _q(quantus.NonSensitivity(disable_warnings=True), s, a_batch=s.maps[:, None], softmax=False),
        "every pixel perturbed alone to black, eps 1e-5, the model's output as it returns it",
        grey_only=True,
        rows=lambda s: ((int(np.prod(s.x.shape[2:])) + 1) * len(s.x), 0),
    ),
    Pair(
        "input_invariance / InputInvariance",
        lambda s: xk.evaluate.input_invariance(s.model, s.x, "vanilla", target=s.y),
        lambda s: _q(quantus.InputInvariance(disable_warnings=True), s, a_batch=None, explain_func=_xk_explain),
        "shift -1 absorbed by the first layer's bias, vanilla maps by xk.xai.explain on both sides",
        grey_only=True,
        rows=lambda s: (2 * len(s.x), 2 * len(s.x)),
    ),
]  # fmt: skip


def _top_k(s: Setup) -> int:
    """Quantus's default k of TopKIntersection (1000 of 224 x 224 pixels) scaled to the image."""
    return max(1, round(s.maps[0].size * 1000 / (224 * 224)))


def _quadrants(s: Setup) -> np.ndarray:
    """(B, 4) Focus quadrant flags, two target quadrants per image, drawn once per setup."""
    if "quadrants" not in s.cache:
        rng = np.random.default_rng(0)
        flags = np.zeros((len(s.x), 4), dtype=np.int64)
        for row in flags:
            row[rng.permutation(4)[:2]] = 1
        s.cache["quadrants"] = flags
    return s.cache["quadrants"]


def _region_patch(s: Setup) -> int:
    return 4 if s.x.shape[-1] <= 32 else 16


def _select_patch(s: Setup) -> int:
    return 4 if s.x.shape[-1] <= 32 else 28


def _n_patches(s: Setup, patch: int) -> int:
    return int(-(-s.x.shape[-2] // patch) * -(-s.x.shape[-1] // patch))


def _image_means(s: Setup) -> np.ndarray:
    """Each image's mean (grey: its mean colour) broadcast to the batch: Quantus's fill array."""
    return np.broadcast_to(s.x.mean(axis=(2, 3), keepdims=True), s.x.shape).astype(np.float64)


def _n_segments(s: Setup) -> int:
    """The most SLIC superpixels of any image (ours scores that many steps for every sample)."""
    if "segments" not in s.cache:
        from xaikit.xai.agnostic.features import feature_ids

        s.cache["segments"] = int(feature_ids("slic", s.x, 1, 100).counts.max())
    return int(s.cache["segments"])


def setup(batch: int) -> Setup:
    torch.manual_seed(0)
    model = LeNet(input_shape=(1, 32, 32), classes=5).eval()
    _, test = shapes.load_data(n_train=0, n_eval=batch, seed=3)
    x = np.ascontiguousarray(
        test["x"].astype(np.float32).mean(axis=3, keepdims=True).transpose(0, 3, 1, 2) / 255.0
    )
    with torch.no_grad():
        y = model(torch.as_tensor(x)).argmax(1).numpy()
    raw = np.asarray(xk.xai.explain(model, x, target=y, method="vanilla"))
    smap = np.abs(raw).sum(axis=1)
    smap = smap + 1e-9 * smap.max() * np.random.default_rng(0).random(smap.shape)  # tie-free
    return Setup(model, x, y, smap, test["mask"].astype(bool), raw.astype(np.float32), 5)


def setup_resnet(batch: int) -> Setup:
    """ResNet-18 (random weights, batch norm calibrated) on 224x224 ``shapes`` pictures."""
    sys.path.insert(0, str(ROOT / "tests"))
    from real_models import IMAGENET_MEAN, IMAGENET_STD, channel_first, normalize, torch_resnet18

    data, _ = shapes.load_data(image_size=224, n_train=batch, n_eval=1, seed=0)
    x = channel_first(normalize(data["x"], IMAGENET_MEAN, IMAGENET_STD))
    model = torch_resnet18(x).eval()
    with torch.no_grad():
        y = model(torch.as_tensor(x)).argmax(1).numpy()
    raw = np.asarray(xk.xai.explain(model, x, target=y, method="vanilla"))
    smap = np.abs(raw).sum(axis=1)
    smap = smap + 1e-9 * smap.max() * np.random.default_rng(0).random(smap.shape)
    with torch.no_grad():
        classes = int(model(torch.as_tensor(x[:1])).shape[1])
    return Setup(model, x, y, smap, data["mask"].astype(bool), raw.astype(np.float32), classes)


def model_loop(s: Setup, forward_rows: int, gradient_rows: int, chunk: int = 256) -> None:
    """The model's own work at the given row counts: the batch's rows cycled, in chunks of
    ``chunk``, forward passes under ``torch.no_grad`` then forward+backward passes (the input
    gradient of the target logits); no metric logic."""
    xt, yt = torch.as_tensor(s.x), torch.as_tensor(s.y)
    batch = len(xt)
    with torch.no_grad():
        for r0 in range(0, forward_rows, chunk):
            s.model(xt[torch.arange(r0, min(forward_rows, r0 + chunk)) % batch])
    for r0 in range(0, gradient_rows, chunk):
        idx = torch.arange(r0, min(gradient_rows, r0 + chunk)) % batch
        rows = xt[idx].requires_grad_(True)
        out = s.model(rows)
        torch.autograd.grad(out[torch.arange(len(idx)), yt[idx]].sum(), rows)


MODELS = {
    "lenet": (setup, "LeNet (1×32×32, 5 classes)"),
    "resnet18": (setup_resnet, "ResNet-18 (3×224×224, 5 classes, random weights)"),
}


def markdown(
    rows: list[dict[str, Any]],
    info: dict[str, Any],
    batch: int,
    reps: int,
    model: str,
    section: str = SECTION,
) -> str:
    lines = [
        f"<!-- {section}:start -->",
        f"Metrics against Quantus {quantus.__version__} (`benchmarks/evaluate_bench.py`): torch "
        f"{torch.__version__.split('+')[0]} {model}, batch {batch}, median of {reps} "
        f"interleaved runs after a warm-up, on {info.get('cpu', 'a CPU')} ({info.get('cores')} cores, load "
        f"average {info.get('load_avg', ['?'])[0]} at the start; above 1, other work "
        "shared the cores and the times are rough). Memory: the peak resident-set growth of one call. Bound: a plain torch loop of the "
        "model's passes at our row counts (forward rows under no_grad, gradient rows forward+backward, "
        'chunks of 256), no metric logic; "–": no model work.',
        "",
        "| model | metric (xaikit / Quantus) | xaikit s | Quantus s | speed-up | bound s | xaikit / bound "
        "| xaikit peak RSS MiB | Quantus peak RSS MiB | note |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        b = r["bound_s"]
        bound, over = (f"{b:.4f}", f"{r['ours_s'] / b:.1f}×") if b else ("–", "–")
        lines.append(
            f"| {r['model']} | {r['name']} | {r['ours_s']:.4f} | {r['theirs_s']:.4f} | {r['speedup']:.1f}× | "
            f"{bound} | {over} | {r['ours_rss_mib']:.1f} | {r['theirs_rss_mib']:.1f} | {r['note']} |"
        )
    lines.append(f"<!-- {section}:end -->")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--models", default="lenet", help="comma-separated: lenet, resnet18")
    parser.add_argument("--only", default="", help="comma-separated substrings of pair names")
    parser.add_argument(
        "--no-write", action="store_true", help="print only; leave the docs and results alone"
    )
    parser.add_argument(
        "--section",
        default=SECTION,
        help="the marked section of docs/benchmarks.md to rewrite (and benchmarks/results/SECTION.json); "
        "a subset run (--only) writes its own section so the full table stays",
    )
    args = parser.parse_args(argv)
    info = machine()
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    cases: list[tuple[str, Pair, Case, Case, Case | None, tuple[int, int]]] = []
    bounds: dict[tuple[str, int, int], Case] = {}  # one loop per model and row counts
    for model in models:
        s = MODELS[model][0](args.batch)
        for p in PAIRS:
            if (args.only and not any(k in p.name for k in args.only.split(","))) or (
                p.grey_only and s.x.shape[1] != 1
            ):
                continue
            ours = Case(p.name, "xaikit", "torch", model, args.batch, args.batch, lambda p=p, s=s: p.ours(s))
            theirs = Case(
                p.name, "peer", "torch", model, args.batch, args.batch, lambda p=p, s=s: p.theirs(s)
            )
            fwd, grad = p.rows(s)
            bound = None
            if fwd + grad:
                key = (model, fwd, grad)
                if key not in bounds:
                    bounds[key] = Case(
                        f"model loop {fwd} forward + {grad} gradient rows", "bound", "torch", model,
                        args.batch, fwd + grad, lambda s=s, fwd=fwd, grad=grad: model_loop(s, fwd, grad),
                    )  # fmt: skip
                bound = bounds[key]
            cases.append((model, p, ours, theirs, bound, (fwd, grad)))
    timed = [c for _, _, a, b, _, _ in cases for c in (a, b)] + list(bounds.values())
    interleave(timed, args.reps)
    rows = []
    for model, p, ours, theirs, bound, (fwd, grad) in cases:
        bound_s = bound.median if bound is not None else 0.0
        rows.append(
            {
                "model": model,
                "name": p.name,
                "note": p.note,
                "ours_s": ours.median,
                "theirs_s": theirs.median,
                "speedup": theirs.median / ours.median,
                "bound_s": bound_s,
                "forward_rows": fwd,
                "gradient_rows": grad,
                "ours_rss_mib": ours.peak_rss / 2**20,
                "theirs_rss_mib": theirs.peak_rss / 2**20,
                "ours_times": ours.times,
                "theirs_times": theirs.times,
                "bound_times": bound.times if bound is not None else [],
            }
        )
        over = f", xaikit / bound {ours.median / bound_s:.1f}" if bound_s else ""
        print(
            f"{p.name}: xaikit {ours.median:.4f}s, Quantus {theirs.median:.4f}s, "
            f"{theirs.median / ours.median:.1f}x; bound {bound_s:.4f}s ({fwd} forward, {grad} gradient rows){over}"
        )
    text = markdown(rows, info, args.batch, args.reps, "; ".join(MODELS[m][1] for m in models), args.section)
    print(text)
    if args.no_write:
        return
    name = "evaluate_bench" if args.section == SECTION else args.section.replace("-", "_")
    out = ROOT / "benchmarks" / "results" / f"{name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    doc = {"machine": info, "quantus": quantus.__version__, "torch": torch.__version__, "batch": args.batch,
           "reps": args.reps, "models": models, "rows": rows}  # fmt: skip
    write_json(out, doc)
    write_section(
        ROOT / "docs" / "benchmarks.md",
        text,
        f"<!-- {args.section}:start -->",
        f"<!-- {args.section}:end -->",
    )
    print(f"wrote {out} and docs/benchmarks.md")


if __name__ == "__main__":
    main()
