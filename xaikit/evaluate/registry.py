"""The metrics that :func:`xaikit.evaluate.compare` runs, by name: what each answers and how to score.

A :class:`Metric` says what family a metric belongs to, whether higher is better, whether it
needs ground-truth masks, whether it must re-explain (it needs a method name rather than maps),
the question it answers, how figures and verdicts name it (``label``, ``short``), and an adapter
``score(context) -> (B,)`` that computes its per-sample scores from a :class:`MetricContext`
(the model, the inputs, the pinned targets, one method's maps computed once by ``compare``,
...). :data:`METRICS` lists them in the order of the table.

Adding a metric is one entry: a ``Metric(...)`` in the tuple that builds :data:`METRICS` (its
position is its column in the table); ``_robustness(...)`` and ``_mask_metric(...)`` build the
entries of a family whose flags are shared (re-explaining robustness metrics, localization
metrics of maps and masks). A metric that follows the calling convention of
``xk.evaluate`` (``name(model, x, saliency, *, target=, seed=, max_batch=, framework=, ...)``
returning a result with ``.scores`` (B,)) is wrapped by :func:`maps_adapter`; one that
re-explains (``name(model, x, method, *, target=, seed=, max_batch=, framework=,
method_options=, ...)``) by :func:`method_adapter` (it scores NaN for custom maps, which cannot
be re-explained). Every metric of ``xk.evaluate`` is registered below; the settings ``compare``
uses for each (fewer noise samples than the standalone defaults where a metric re-explains many
copies) are in its entry.

Check each signature and direction of better when adding it (the positional fields are
``name, family, higher_is_better, needs_mask, re_explains, question, score``; ``label`` and
``short`` are keywords): the adapters pass ``model, x, maps-or-method`` positionally and
``target``, ``seed``, ``max_batch``, ``framework`` (and ``method_options``) by keyword; fixed
settings go as keywords of the adapter, e.g. ``maps_adapter(road, order="morf")``; ``attr=``
names the result's per-sample field when it is not ``scores``. Add a line to the metric table
of ``docs/evaluate.md`` and a ``Pair`` to ``benchmarks/evaluate_bench.py`` (the figure and the
report name it from ``label``).

``cheap`` metrics (at most one more explanation per method; ``compare`` adds two for the
randomization check's random-model baseline) are the default set of ``compare(metrics=None)``,
with the mask metrics when a mask is given.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from xaikit.errors import XaikitTypeError, XaikitValueError
from xaikit.evaluate._common import host, spearman, to_spatial
from xaikit.evaluate._rerun import MethodRun, randomized_maps
from xaikit.evaluate.axiomatic import input_invariance, non_sensitivity
from xaikit.evaluate.complexity import complexity, effective_complexity, mst_c, sparseness
from xaikit.evaluate.curves import irof, region_perturbation, selectivity
from xaikit.evaluate.faithfulness import faithfulness_correlation, infidelity, road
from xaikit.evaluate.feature_removal import (
    faithfulness_estimate,
    monotonicity,
    monotonicity_correlation,
    sensitivity_n,
    sufficiency,
)
from xaikit.evaluate.localization import localization, relevance_rank_accuracy
from xaikit.evaluate.localization_more import (
    attribution_localisation,
    localization_auc,
    relevance_mass_accuracy,
    top_k_intersection,
)
from xaikit.evaluate.logit_randomization import random_logit
from xaikit.evaluate.mprt_variants import complexity_rise, smooth_mprt
from xaikit.evaluate.perturbation import deletion, insertion
from xaikit.evaluate.robustness import avg_sensitivity, local_lipschitz, max_sensitivity
from xaikit.evaluate.stability import (
    consistency,
    continuity,
    relative_input_stability,
    relative_output_stability,
    relative_representation_stability,
    spatial_layer,
)

__all__ = ["FAMILIES", "METRICS", "Metric", "MetricContext", "maps_adapter", "method_adapter"]

#: the metric families, in the order of the table
FAMILIES = ("faithfulness", "robustness", "complexity", "randomization", "localization", "axiomatic")


@dataclass
class MetricContext:
    """What a metric adapter may read about one method of a comparison.

    Attributes:
        model: the model.
        x: the input batch, as given to ``compare``.
        method: the method's name (canonical), or None for custom maps.
        label: the method's label in the table.
        maps: the raw maps of the method (computed once by ``compare``).
        targets: (B,) the classes explained and scored (pinned once for every method).
        spatial: the spatial shape of one input, e.g. ``(H, W)``.
        channels: the input's channel count (None without a channel axis).
        mask: (B, *spatial) ground-truth masks, or None.
        seed: the seed of the methods' noise and the metrics' draws.
        max_batch: rows per forward pass.
        framework: ``"torch"``, ``"tf"`` or None (the model's own).
        method_options: the options the method's maps were computed with.
        delta: (B,) the completeness delta of a path method's maps (None for other methods).
        explained: the target object of :mod:`xaikit.targets` every metric explains and scores
            (as it resolved on the clean inputs; ``targets`` is then -1 per sample), or None.
    """

    model: Any
    x: Any
    method: str | None
    label: str
    maps: np.ndarray
    targets: np.ndarray
    spatial: tuple[int, ...]
    channels: int | None
    mask: np.ndarray | None = None
    seed: int = 0
    max_batch: int | str = "auto"
    framework: str | None = None
    method_options: dict[str, Any] = field(default_factory=dict)
    delta: np.ndarray | None = None
    explained: Any = None
    _magnitudes: np.ndarray | None = field(default=None, repr=False)
    _randomized: np.ndarray | None = field(default=None, repr=False)

    @property
    def batch(self) -> int:
        """The number of samples."""
        return int(self.targets.shape[0])

    @property
    def target(self) -> Any:
        """What the metrics take as ``target=``: the target object, or the classes."""
        return self.targets if self.explained is None else self.explained

    @property
    def magnitudes(self) -> np.ndarray:
        """(B, *spatial) the maps' magnitudes, channels summed (computed once)."""
        if self._magnitudes is None:
            self._magnitudes = to_spatial(self.maps, self.spatial, self.batch, channels=self.channels)
        return self._magnitudes

    @property
    def randomized_maps(self) -> np.ndarray:
        """The method's raw maps on the model with every layer with weights re-drawn (the recipe
        of every randomization check, seeded by ``seed``; the weights are restored afterwards).
        Computed once, shared by the randomization metrics; needs a method name."""
        if self._randomized is None:
            from xaikit.backend import get_backend

            run = self.method_run(self.seed)  # first: custom maps are named before the model is touched
            bk = get_backend(self.model, self.framework)
            self._randomized, _ = randomized_maps(bk, self.model, self.x, self.target, run, layers=None)
        return self._randomized

    def method_run(self, seed: int) -> MethodRun:
        """How a randomization metric re-runs the method: with its options, on the model's first
        output, and ``seed``; needs a method name."""
        if self.method is None:
            raise XaikitValueError("randomized maps need a method name; custom maps cannot be re-explained")
        return MethodRun(
            method=self.method, seed=seed, max_batch=self.max_batch, framework=self.framework,
            method_options=dict(self.method_options), options=dict(self.method_options),
        )  # fmt: skip

    def nan(self) -> np.ndarray:
        """(B,) NaN: the score of a metric that does not apply to this method."""
        return np.full(self.batch, np.nan)


@dataclass(frozen=True)
class Metric:
    """One metric of :func:`xaikit.evaluate.compare`.

    Attributes:
        name: the key in :data:`METRICS` and the column of the table.
        family: one of :data:`FAMILIES`.
        higher_is_better: whether a higher score means a better explanation.
        needs_mask: whether it needs ground-truth masks (``compare(mask=...)``).
        re_explains: whether it computes new maps itself (it needs a method name; custom maps
            score NaN).
        question: the one-line question it answers.
        score: the adapter, ``score(context) -> (B,)`` per-sample scores (NaN where it does not
            apply).
        cheap: in the default set (at most one more explanation per method).
        label: how figures, verdicts and the run report name it, e.g. ``"deletion AUC"``
            (default: the name with spaces for underscores, ``auc`` as ``AUC``).
        short: an abbreviation for narrow places such as a plot's ticks, e.g. ``"del"``
            (default: the label); :meth:`~xaikit.evaluate.CompareResult.figure` writes labels
            in full.
    """

    name: str
    family: str
    higher_is_better: bool
    needs_mask: bool
    re_explains: bool
    question: str
    score: Callable[[MetricContext], np.ndarray] = field(repr=False, compare=False)
    cheap: bool = True
    label: str = ""
    short: str = ""

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            raise XaikitValueError(f"family must be one of {FAMILIES}; got {self.family!r}")
        if not self.label:
            object.__setattr__(
                self, "label", " ".join("AUC" if w == "auc" else w for w in self.name.split("_"))
            )
        if not self.short:
            object.__setattr__(self, "short", self.label)


def _scores(result: Any, attr: str) -> np.ndarray:
    return np.asarray(getattr(result, attr), dtype=np.float64).reshape(-1)


def maps_adapter(
    fn: Callable[..., Any], attr: str = "scores", **settings: Any
) -> Callable[[MetricContext], np.ndarray]:
    """An adapter for a metric of the maps: ``fn(model, x, maps, targets, seed=, max_batch=,
    framework=, **settings).<attr>``.

    Example:
        >>> from xaikit.evaluate.perturbation import deletion
        >>> score = maps_adapter(deletion, attr="auc", steps=10)
        >>> callable(score)
        True
    """

    def score(ctx: MetricContext) -> np.ndarray:
        result = fn(
            ctx.model, ctx.x, ctx.maps, target=ctx.target, seed=ctx.seed, max_batch=ctx.max_batch,
            framework=ctx.framework, **settings,
        )  # fmt: skip
        return _scores(result, attr)

    return score


def method_adapter(
    fn: Callable[..., Any], attr: str = "scores", **settings: Any
) -> Callable[[MetricContext], np.ndarray]:
    """An adapter for a metric that re-explains: ``fn(model, x, method, targets, seed=,
    max_batch=, framework=, method_options=, **settings).<attr>``; NaN for custom maps.

    Example:
        >>> callable(method_adapter(lambda *a, **k: None))
        True
    """

    def score(ctx: MetricContext) -> np.ndarray:
        if ctx.method is None:
            return ctx.nan()
        result = fn(
            ctx.model, ctx.x, ctx.method, target=ctx.target, seed=ctx.seed, max_batch=ctx.max_batch,
            framework=ctx.framework, method_options=dict(ctx.method_options), **settings,
        )  # fmt: skip
        return _scores(result, attr)

    return score


# ------------------------------------------------------------------------------------ adapters
def _localization(key: str) -> Callable[[MetricContext], np.ndarray]:
    def score(ctx: MetricContext) -> np.ndarray:
        return np.asarray(localization(ctx.magnitudes, ctx.mask)[key], dtype=np.float64)

    return score


def _randomization(ctx: MetricContext) -> np.ndarray:
    """Spearman ρ between the |maps| of the trained model and of the model with every layer
    re-drawn (the last step of the cascading :func:`randomization_test`, same seed and recipe)."""
    if ctx.method is None or not _has_weights(ctx):
        return ctx.nan()
    random = to_spatial(ctx.randomized_maps, ctx.spatial, ctx.batch, channels=ctx.channels)
    return spearman(ctx.magnitudes, random)


def _efficient_mprt(ctx: MetricContext) -> np.ndarray:
    """:func:`efficient_mprt` (100 bins, every layer) from the maps ``compare`` already has and the
    randomized maps the randomization metric shares: no explanation of its own."""
    if ctx.method is None or not _has_weights(ctx):
        return ctx.nan()
    return complexity_rise(ctx.maps, ctx.randomized_maps, 100)[0]


def _has_weights(ctx: MetricContext) -> bool:
    from xaikit.backend import get_backend

    return bool(get_backend(ctx.model, ctx.framework).eval.weighted_layers(ctx.model))


def _completeness(ctx: MetricContext) -> np.ndarray:
    if ctx.delta is None:
        return ctx.nan()
    return np.abs(np.asarray(ctx.delta, dtype=np.float64).reshape(-1))


def _rank_accuracy(ctx: MetricContext) -> np.ndarray:
    return np.asarray(relevance_rank_accuracy(ctx.magnitudes, ctx.mask), dtype=np.float64).reshape(-1)


def _mask_score(fn: Callable[..., np.ndarray], **settings: Any) -> Callable[[MetricContext], np.ndarray]:
    """An adapter for a score of maps and masks, ``fn(magnitudes, mask, **settings)`` (B,)."""

    def score(ctx: MetricContext) -> np.ndarray:
        return np.asarray(fn(ctx.magnitudes, ctx.mask, **settings), dtype=np.float64).reshape(-1)

    return score


def _faithfulness_correlation(ctx: MetricContext) -> np.ndarray:
    """Bhatt et al.'s correlation over 50 random subsets of 1/8 of the pixels (at most 224, the
    paper's and Quantus's subset size at 224x224)."""
    pixels = int(np.prod(ctx.spatial))
    return maps_adapter(faithfulness_correlation, subset_size=max(1, min(224, pixels // 8)), nsamples=50)(ctx)


def _selectivity(ctx: MetricContext) -> np.ndarray:
    """Selectivity over at most 8 x 8 patches (patches of 8 pixels, or longest side / 8): every
    patch is a forward pass per sample, 785 of them at 224x224 with 8x8 patches."""
    patch = max(8, -(-max(ctx.spatial) // 8))
    return maps_adapter(selectivity, patch_size=patch)(ctx)


def _grouped(fn: Callable[..., Any], groups: int, **settings: Any) -> Callable[[MetricContext], np.ndarray]:
    """A metric of pixel groups with about ``groups`` groups of ``ceil(pixels / groups)`` pixels
    (Quantus's ``features_in_step``), so that its rows do not grow with the image."""

    def score(ctx: MetricContext) -> np.ndarray:
        step = -(-int(np.prod(ctx.spatial)) // groups)
        return maps_adapter(fn, features_in_step=step, **settings)(ctx)

    return score


def _monotonicity_correlation(ctx: MetricContext) -> np.ndarray:
    """Nguyen & Martinez's correlation over about 32 groups, 5 uniform draws each from the
    batch's value range (Quantus's default range, [0, 1], assumes pixels in [0, 1])."""
    values = host(ctx.x, "x")
    low, high = float(np.min(values)), float(np.max(values))
    return _grouped(
        monotonicity_correlation, 32, nsamples=5, value_range=(low, high if high > low else low + 1.0)
    )(ctx)


def _input_invariance(ctx: MetricContext) -> np.ndarray:
    """:func:`input_invariance` (shift -1); NaN for custom maps and for a model whose first layer
    cannot absorb a shift (no bias, zero padding, not dense or convolution)."""
    try:
        return method_adapter(input_invariance)(ctx)
    except (XaikitValueError, XaikitTypeError) as exc:
        if str(exc).startswith("input_invariance"):  # the model cannot be shifted: not a failure of the map
            return ctx.nan()
        raise


#: compare's robustness noise, as fractions of the batch's value range (max - min): "small"
#: must mean small for the data at hand (the standalone defaults, Quantus's 0.2 and 0.1, assume
#: standardized inputs and, on pixels in [0, 1], flip a softmax model into saturation)
ROBUST_RADIUS = 0.02
ROBUST_STDEV = 0.01


def _robust(
    fn: Callable[..., Any], scale_name: str, fraction: float, **settings: Any
) -> Callable[[MetricContext], np.ndarray]:
    def score(ctx: MetricContext) -> np.ndarray:
        if ctx.method is None:
            return ctx.nan()
        values = host(ctx.x, "x")
        span = float(np.max(values) - np.min(values)) or 1.0
        scale: dict[str, Any] = {scale_name: fraction * span}
        return method_adapter(fn, **scale, **settings)(ctx)

    return score


def _representation_stability(ctx: MetricContext) -> np.ndarray:
    """RRS at the last layer with a spatial output; NaN for a model without one."""
    if ctx.method is None or spatial_layer(ctx.model, ctx.x, ctx.framework) is None:
        return ctx.nan()
    return _robust(relative_representation_stability, "radius", ROBUST_RADIUS, nsamples=20)(ctx)


def _continuity(ctx: MetricContext) -> np.ndarray:
    """Continuity along 8 translations; NaN where the images are too narrow for 8 (2W + 1 < 8)."""
    if ctx.method is None or 2 * ctx.spatial[-1] + 1 < 8:
        return ctx.nan()
    return method_adapter(continuity, nsteps=8)(ctx)


def _map_score(fn: Callable[..., Any]) -> Callable[[MetricContext], np.ndarray]:
    def score(ctx: MetricContext) -> np.ndarray:
        return np.asarray(fn(ctx.magnitudes).scores, dtype=np.float64)

    return score


def _robustness(
    name: str, question: str, score: Callable[[MetricContext], np.ndarray], **more: Any
) -> Metric:
    """A robustness metric that re-explains perturbed inputs: lower is better, no mask, not in
    the default set."""
    return Metric(name, "robustness", False, False, True, question, score, cheap=False, **more)


def _mask_metric(
    name: str, question: str, score: Callable[[MetricContext], np.ndarray], **more: Any
) -> Metric:
    """A localization metric of the maps and the masks: higher is better, no new explanation."""
    return Metric(name, "localization", True, True, False, question, score, **more)


#: every metric ``compare`` knows, in the order of the table (see the module docstring to add one)
METRICS: OrderedDict[str, Metric] = OrderedDict(
    (m.name, m)
    for m in (
        Metric(
            "deletion_auc", "faithfulness", False, False, False,
            "Does removing the most salient pixels first (to black, 20 steps) kill the score fast?",
            maps_adapter(deletion, attr="auc", steps=20, baseline="black"),
            label="deletion AUC", short="del",
        ),
        Metric(
            "insertion_auc", "faithfulness", True, False, False,
            "Does putting the most salient pixels back first (onto a blurred copy) restore the score fast?",
            maps_adapter(insertion, attr="auc", steps=20, baseline="blur"),
            label="insertion AUC", short="ins",
        ),
        Metric(
            "completeness_delta", "faithfulness", False, False, False,
            "Do the attributions add up to f(x) - f(baseline)? |delta| (methods with a delta only, NaN otherwise)",
            _completeness,
            label="completeness delta", short="|Δ|",
        ),
        Metric(
            "road", "faithfulness", False, False, False,
            "Does removing the top pixels (filled by noisy linear imputation, so no out-of-distribution "
            "holes) kill the score fast? (mean target score over 10-90% removed, most relevant first)",
            maps_adapter(road, order="morf"),
            label="ROAD", short="road",
        ),
        Metric(
            "infidelity", "faithfulness", False, False, False,
            "Does the map predict how the score changes under small Gaussian perturbations? (captum's "
            "definition, 20 perturbations)",
            maps_adapter(infidelity, nsamples=20),
            label="infidelity", short="infd",
        ),
        Metric(
            "faithfulness_correlation", "faithfulness", True, False, False,
            "Do the attributions of random pixel sets correlate with the score drop when those pixels "
            "are removed? (Pearson, 50 sets)",
            _faithfulness_correlation,
            label="faithfulness correlation", short="fcor",
        ),
        Metric(
            "region_perturbation", "faithfulness", True, False, False,
            "Does replacing the most relevant 8x8 patches by uniform noise, one after another, lower the "
            "score fast? (AOPC over up to 100 patches, Samek et al.)",
            maps_adapter(region_perturbation, patch_size=8, steps=100, order="morf"),
            cheap=False,
            label="region perturbation AOPC", short="aopc",
        ),
        Metric(
            "irof", "faithfulness", True, False, False,
            "Does removing the most relevant superpixels (SLIC, to the image's mean colour) lower the "
            "score fast? (area over the relative score curve, Rieger & Hansen)",
            maps_adapter(irof),
            cheap=False,
            label="IROF", short="irof",
        ),
        Metric(
            "selectivity", "faithfulness", False, False, False,
            "Does setting the most relevant patches to black, one by one, make the score drop sharply? "
            "(area under the curve over at most 8x8 patches, Montavon et al.)",
            _selectivity,
            cheap=False,
            label="selectivity AUC", short="sel",
        ),
        Metric(
            "sensitivity_n", "faithfulness", True, False, False,
            "Does the attribution of random pixel subsets predict the score drop when they are removed, at "
            "every subset size? (Pearson per size, 10 sizes up to 80% of the pixels, 10 subsets each; mean)",
            maps_adapter(sensitivity_n, nsamples=10),
            cheap=False,
            label="sensitivity-n", short="sensN",
        ),
        Metric(
            "faithfulness_estimate", "faithfulness", True, False, False,
            "Does each pixel group's attribution correlate with the score drop when that group alone is "
            "removed? (Pearson over ~64 groups, black baseline)",
            _grouped(faithfulness_estimate, 64),
            cheap=False,
            label="faithfulness estimate", short="fest",
        ),
        Metric(
            "monotonicity", "faithfulness", True, False, False,
            "Does the score keep rising as pixels come back onto a black image, least relevant first? "
            "(fraction of ~32 steps where it does not fall)",
            _grouped(monotonicity, 32),
            cheap=False,
            label="monotonicity", short="mono",
        ),
        Metric(
            "monotonicity_correlation", "faithfulness", True, False, False,
            "Do larger |attributions| mark the pixel groups whose random replacement changes the score "
            "more? (Spearman over ~32 groups, 5 uniform draws each)",
            _monotonicity_correlation,
            cheap=False,
            label="monotonicity correlation", short="mcor",
        ),
        Metric(
            "sufficiency", "faithfulness", True, False, False,
            "Do samples with similar maps get the same prediction? (share of each sample's neighbours in the "
            "batch, normalized standardized-Euclidean distance <= 0.6, with its class; NaN without one)",
            maps_adapter(sufficiency),
            cheap=False,
            label="sufficiency", short="suff",
        ),
        _robustness(
            "max_sensitivity",
            "How much can the map change under a small input perturbation? (largest relative change over "
            "20 uniform draws of radius 2% of the inputs' range)",
            _robust(max_sensitivity, "radius", ROBUST_RADIUS, nsamples=20),
            label="max-sensitivity", short="maxS",
        ),
        _robustness(
            "avg_sensitivity",
            "How much does the map change on average under a small input perturbation? (mean relative "
            "change over 20 draws of radius 2% of the range)",
            _robust(avg_sensitivity, "radius", ROBUST_RADIUS, nsamples=20),
            label="avg-sensitivity", short="avgS",
        ),
        _robustness(
            "local_lipschitz",
            "How fast can the map change relative to the input around x? (20 Gaussian draws, std 1% of "
            "the range; each map divided by its maximum, so methods of any scale compare)",
            _robust(local_lipschitz, "stdev", ROBUST_STDEV, nsamples=20, normalize=True),
            label="local Lipschitz estimate", short="lip",
        ),
        _robustness(
            "relative_input_stability",
            "How much does the map change, relative to itself, per relative change of the input? (RIS, "
            "largest over 20 uniform draws of radius 2% of the range that keep the predicted class)",
            _robust(relative_input_stability, "radius", ROBUST_RADIUS, nsamples=20),
            label="relative input stability", short="RIS",
        ),
        _robustness(
            "relative_output_stability",
            "How much does the map change, relative to itself, per change of the logits? (ROS, 20 draws "
            "as RIS)",
            _robust(relative_output_stability, "radius", ROBUST_RADIUS, nsamples=20),
            label="relative output stability", short="ROS",
        ),
        _robustness(
            "relative_representation_stability",
            "How much does the map change, relative to itself, per relative change of the last spatial "
            "layer's output? (RRS, 20 draws as RIS; NaN for a model without a spatial layer)",
            _representation_stability,
            label="relative representation stability", short="RRS",
        ),
        _robustness(
            "continuity",
            "How fast can the map change along horizontal translations of the input? (largest "
            "||ΔR||_1 / ||Δx||_2 over pairs of 8 translations)",
            _continuity,
            label="continuity", short="cont",
        ),
        Metric(
            "consistency", "robustness", True, False, False,
            "Do samples whose maps share their top-5 pixels (and signs) get the same prediction? "
            "(fraction of such other samples of the batch; NaN without one)",
            maps_adapter(consistency),
            cheap=False,
            label="consistency", short="cons",
        ),
        Metric(
            "sparseness", "complexity", True, False, False,
            "Is the map concentrated on few pixels? (Gini index of its magnitudes)",
            _map_score(sparseness),
            label="sparseness", short="gini",
        ),
        Metric(
            "complexity", "complexity", False, False, False,
            "How spread out is the map? (entropy of its normalized magnitudes)",
            _map_score(complexity),
            label="complexity", short="H",
        ),
        Metric(
            "effective_complexity", "complexity", False, False, False,
            "How many pixels carry attribution? (those above 1e-5 of the map's peak)",
            _map_score(effective_complexity),
            cheap=False,
            label="effective complexity", short="EC",
        ),
        Metric(
            "mst_c", "complexity", True, False, False,
            "Do the top 20% pixels form few tight blobs? (minimum spanning tree compactness)",
            _map_score(mst_c),
            cheap=False,
            label="MST-C", short="mstc",
        ),
        Metric(
            "randomization", "randomization", False, False, True,
            "Does the map change when every weight is re-drawn? (Spearman rho of |maps|, trained vs random)",
            _randomization,
            label="randomization", short="ρ",
        ),
        Metric(
            "random_logit", "randomization", False, False, True,
            "Does the map change when another (random) class is explained? (SSIM of the two maps)",
            method_adapter(random_logit),
            label="random logit", short="rlog",
        ),
        Metric(
            "efficient_mprt", "randomization", True, False, True,
            "Does the map lose its structure once every weight is re-drawn? (relative rise of the "
            "histogram entropy, eMPRT)",
            _efficient_mprt,
            label="eMPRT", short="eMPRT",
        ),
        Metric(
            "smooth_mprt", "randomization", False, False, True,
            "Does the denoised map change as the layers are re-drawn bottom up? (Spearman rho of |maps| "
            "at the last step, 5 noisy copies, sMPRT)",
            method_adapter(smooth_mprt, nsamples=5),
            cheap=False,
            label="sMPRT", short="sMPRT",
        ),
        _mask_metric(
            "localization_energy",
            "How much of the map's mass lies inside the object mask?",
            _localization("energy"),
            label="localization energy", short="E",
        ),
        _mask_metric(
            "pointing_game",
            "Does the map's maximum lie inside the object mask?",
            _localization("pointing"),
            label="pointing game", short="pg",
        ),
        _mask_metric(
            "relevance_rank_accuracy",
            "Do the top-ranked pixels (as many as the mask has) lie in the mask?",
            _rank_accuracy,
            label="relevance rank accuracy", short="rra",
        ),
        # localization_more (issue 31): maps and masks only, no model call, but not in the default
        # set (cheap=False): energy, pointing game and rank accuracy already ask the default
        # table's localization questions, and three more columns of one family would tilt the
        # mean rank. Focus needs mosaics and their quadrant labels, which compare's inputs do
        # not have, and scores mosaics, not the samples of x: it is standalone
        _mask_metric(
            "attribution_localisation",
            "How much of the map's positive relevance lies inside the object mask, relative to the mask's "
            "share of the image? (weighted attribution localisation: 1 = chance)",
            _mask_score(attribution_localisation, weighted=True),
            cheap=False,
            label="attribution localisation (weighted)", short="μw",
        ),
        _mask_metric(
            "top_k_intersection",
            "Do the map's top pixels (2 % of the image, Quantus's 1000 of 224 x 224) lie in the object mask?",
            _mask_score(top_k_intersection),
            cheap=False,
            label="top-k intersection", short="tki",
        ),
        _mask_metric(
            "relevance_mass_accuracy",
            "How much of the map's mass lies inside the object mask? (the same number as localization_energy, "
            "under Quantus's name)",
            _mask_score(relevance_mass_accuracy),
            cheap=False,
            label="relevance mass accuracy", short="rma",
        ),
        _mask_metric(
            "localization_auc",
            "Does the map rank the object's pixels above the background's? (ROC AUC of the map against the mask)",
            _mask_score(localization_auc),
            cheap=False,
            label="localization AUC", short="auc",
        ),
        Metric(
            "non_sensitivity", "axiomatic", False, False, False,
            "Do the pixels credited with nothing match those whose removal changes nothing? (pixels "
            "where they disagree; one pass per pixel and sample)",
            maps_adapter(non_sensitivity),
            cheap=False,
            label="non-sensitivity", short="NS",
        ),
        Metric(
            "input_invariance", "axiomatic", True, False, True,
            "Is the map unchanged when the input is shifted by -1 and the first layer's bias absorbs "
            "the shift? (share of invariant samples; NaN for a model whose first layer cannot)",
            _input_invariance,
            cheap=False,
            label="input invariance", short="inv",
        ),
    )
)  # fmt: skip
