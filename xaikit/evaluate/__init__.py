"""Is an explanation faithful to the model? One-call checks for torch and Keras models.

* :func:`randomization_test` — the model-parameter randomization test (Adebayo et al., 2018).
* :func:`random_logit`, :func:`efficient_mprt`, :func:`smooth_mprt` — the random-logit test
  (Sixt et al., 2020) and the efficient / smooth MPRT (Hedström et al., 2023).
* :func:`deletion`, :func:`insertion` — perturbation curves and their AUC (Petsiuk et al., 2018).
* :func:`localization` — energy inside, pointing game and relevance rank accuracy against
  ground-truth masks (:func:`relevance_rank_accuracy` alone); :func:`attribution_localisation`,
  :func:`top_k_intersection`, :func:`relevance_mass_accuracy`, :func:`localization_auc` — the
  rest of Quantus's mask scores; :func:`focus` on mosaics from :func:`make_mosaics`.
* :func:`max_sensitivity`, :func:`avg_sensitivity`, :func:`local_lipschitz` — robustness: how
  much the map moves when the input barely moves (Yeh et al., 2019; Alvarez-Melis & Jaakkola,
  2018).
* :func:`relative_input_stability`, :func:`relative_output_stability`,
  :func:`relative_representation_stability`, :func:`continuity`, :func:`consistency` — more
  robustness: relative stability (Agarwal et al., 2022), continuity along translations
  (Montavon et al., 2018), consistency of predictions under equal explanations (Dasgupta et
  al., 2022).
* :func:`completeness` — how well IG-based attributions add up to f(x) - f(baseline).
* :func:`convergence` — how far a map at a few steps (or samples) is from the map at many.
* :func:`sparseness`, :func:`complexity`, :func:`effective_complexity`, :func:`mst_c` — how
  concise a map is (Gini index, entropy, attributions above a threshold, spanning-tree compactness).
* :func:`non_sensitivity`, :func:`input_invariance` — axioms: zero attribution exactly where the
  model ignores a feature (Nguyen & Martinez, 2020); the same map when the input is shifted and the
  first layer absorbs the shift (Kindermans et al., 2017).
* :func:`compare` — several methods, every metric (:data:`METRICS`), one table with ranks and
  verdicts; :class:`Compare` runs it over training; :meth:`CompareResult.metric_agreement`
  says whether its metrics rank the methods alike (:class:`MetricAgreement`).
* :func:`road`, :func:`infidelity`, :func:`faithfulness_correlation` — faithfulness by
  perturbation: remove-and-debias curves, captum's infidelity, Bhatt et al.'s correlation.
* :func:`region_perturbation`, :func:`irof`, :func:`selectivity` — region-removal curves:
  Samek et al.'s AOPC, Rieger & Hansen's IROF over superpixels, Montavon et al.'s selectivity.
* :func:`sensitivity_n`, :func:`faithfulness_estimate`, :func:`monotonicity`,
  :func:`monotonicity_correlation`, :func:`sufficiency` — faithfulness by removing or restoring
  pixel groups (Ancona et al.; Alvarez-Melis & Jaakkola; Arya et al.; Nguyen & Martínez) and the
  batch-level sufficiency (Dasgupta et al.).
* :class:`DeletionAUC`, :class:`SaliencyStability` — traces that follow faithfulness and the
  stability of the maps of a fixed sample set over training.

Every function leaves the model exactly as it found it, and follows one calling convention:
``(model, x, saliency)`` or ``(model, x, method)`` by position for a metric that runs the model
(``saliency``: maps or a method name; ``method``: a method the metric re-runs itself),
``(saliency, ...)`` for a metric of maps alone, and every option by keyword, spelled the same
everywhere (``target=``, ``nsamples=``, ``normalize=``, ...). The run options every metric
shares (``seed=``, ``max_batch=``, ``framework=``, ``output=``, ``model_kwargs=``,
``method_options=``) are typed and described once, in :class:`RunOptions` (``**run``). An old
spelling or an option given by position fails with a message that names the keyword to use.
"""

from __future__ import annotations

from xaikit.evaluate._options import BaseRunOptions, RunOptions
from xaikit.evaluate.agreement import MetricAgreement
from xaikit.evaluate.axiomatic import (
    InputInvarianceResult,
    NonSensitivityResult,
    input_invariance,
    non_sensitivity,
)
from xaikit.evaluate.compare import CompareResult, compare
from xaikit.evaluate.completeness import CompletenessResult, completeness
from xaikit.evaluate.complexity import (
    ComplexityResult,
    EffectiveComplexityResult,
    MSTCResult,
    SparsenessResult,
    complexity,
    effective_complexity,
    mst_c,
    sparseness,
)
from xaikit.evaluate.convergence import ConvergenceResult, convergence
from xaikit.evaluate.curves import RegionCurveResult, irof, region_perturbation, selectivity
from xaikit.evaluate.faithfulness import (
    FaithfulnessCorrelationResult,
    InfidelityResult,
    ROADCurve,
    ROADResult,
    faithfulness_correlation,
    infidelity,
    road,
)
from xaikit.evaluate.feature_removal import (
    FaithfulnessEstimateResult,
    MonotonicityCorrelationResult,
    MonotonicityResult,
    SensitivityNResult,
    SufficiencyResult,
    faithfulness_estimate,
    monotonicity,
    monotonicity_correlation,
    sensitivity_n,
    sufficiency,
)
from xaikit.evaluate.focus import FocusResult, Mosaics, focus, make_mosaics
from xaikit.evaluate.localization import localization, relevance_rank_accuracy
from xaikit.evaluate.localization_more import (
    attribution_localisation,
    localization_auc,
    relevance_mass_accuracy,
    top_k_intersection,
)
from xaikit.evaluate.logit_randomization import RandomLogitResult, random_logit
from xaikit.evaluate.mprt_variants import EfficientMPRTResult, SmoothMPRTResult, efficient_mprt, smooth_mprt
from xaikit.evaluate.perturbation import CurveResult, deletion, insertion
from xaikit.evaluate.randomization import RandomizationResult, model_layers, randomization_test
from xaikit.evaluate.registry import METRICS, Metric, MetricContext
from xaikit.evaluate.robustness import (
    LipschitzResult,
    SensitivityResult,
    avg_sensitivity,
    local_lipschitz,
    max_sensitivity,
)
from xaikit.evaluate.saving import save_evaluation
from xaikit.evaluate.stability import (
    ConsistencyResult,
    ContinuityResult,
    RelativeStabilityResult,
    consistency,
    continuity,
    relative_input_stability,
    relative_output_stability,
    relative_representation_stability,
)
from xaikit.evaluate.traces import Compare, DeletionAUC, SaliencyStability

__all__ = [
    "METRICS",
    "BaseRunOptions",
    "Compare",
    "CompareResult",
    "CompletenessResult",
    "ComplexityResult",
    "ConsistencyResult",
    "ContinuityResult",
    "ConvergenceResult",
    "CurveResult",
    "DeletionAUC",
    "EffectiveComplexityResult",
    "EfficientMPRTResult",
    "FaithfulnessCorrelationResult",
    "FaithfulnessEstimateResult",
    "FocusResult",
    "InfidelityResult",
    "InputInvarianceResult",
    "LipschitzResult",
    "MSTCResult",
    "Metric",
    "MetricAgreement",
    "MetricContext",
    "MonotonicityCorrelationResult",
    "MonotonicityResult",
    "Mosaics",
    "NonSensitivityResult",
    "ROADCurve",
    "ROADResult",
    "RandomLogitResult",
    "RandomizationResult",
    "RegionCurveResult",
    "RelativeStabilityResult",
    "RunOptions",
    "SaliencyStability",
    "SensitivityNResult",
    "SensitivityResult",
    "SmoothMPRTResult",
    "SparsenessResult",
    "SufficiencyResult",
    "attribution_localisation",
    "avg_sensitivity",
    "compare",
    "completeness",
    "complexity",
    "consistency",
    "continuity",
    "convergence",
    "deletion",
    "effective_complexity",
    "efficient_mprt",
    "faithfulness_correlation",
    "faithfulness_estimate",
    "focus",
    "infidelity",
    "input_invariance",
    "insertion",
    "irof",
    "local_lipschitz",
    "localization",
    "localization_auc",
    "make_mosaics",
    "max_sensitivity",
    "model_layers",
    "monotonicity",
    "monotonicity_correlation",
    "mst_c",
    "non_sensitivity",
    "random_logit",
    "randomization_test",
    "region_perturbation",
    "relative_input_stability",
    "relative_output_stability",
    "relative_representation_stability",
    "relevance_mass_accuracy",
    "relevance_rank_accuracy",
    "road",
    "save_evaluation",
    "selectivity",
    "sensitivity_n",
    "smooth_mprt",
    "sparseness",
    "sufficiency",
    "top_k_intersection",
]
