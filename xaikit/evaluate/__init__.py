"""Is an explanation faithful to the model? One-call checks for torch and Keras models.

* :func:`randomization_test` — the model-parameter randomization test (Adebayo et al., 2018).
* :func:`deletion`, :func:`insertion` — perturbation curves and their AUC (Petsiuk et al., 2018).
* :func:`localization` — energy inside and pointing game against ground-truth masks.
* :func:`completeness` — how well IG-based attributions add up to f(x) - f(baseline).
* :func:`road`, :func:`infidelity`, :func:`faithfulness_correlation` — faithfulness by
  perturbation: remove-and-debias curves, captum's infidelity, Bhatt et al.'s correlation.
* :class:`DeletionAUC`, :class:`SaliencyStability` — traces that follow faithfulness and the
  stability of the maps of a fixed sample set over training.

Every function leaves the model exactly as it found it.
"""

from __future__ import annotations

from xaikit.evaluate.completeness import CompletenessResult, completeness
from xaikit.evaluate.faithfulness import (
    FaithfulnessCorrelationResult,
    InfidelityResult,
    ROADCurve,
    ROADResult,
    faithfulness_correlation,
    infidelity,
    road,
)
from xaikit.evaluate.localization import localization
from xaikit.evaluate.perturbation import CurveResult, deletion, insertion
from xaikit.evaluate.randomization import RandomizationResult, model_layers, randomization_test
from xaikit.evaluate.saving import save_evaluation
from xaikit.evaluate.traces import DeletionAUC, SaliencyStability

__all__ = [
    "CompletenessResult",
    "CurveResult",
    "DeletionAUC",
    "FaithfulnessCorrelationResult",
    "InfidelityResult",
    "ROADCurve",
    "ROADResult",
    "RandomizationResult",
    "SaliencyStability",
    "completeness",
    "deletion",
    "faithfulness_correlation",
    "infidelity",
    "insertion",
    "localization",
    "model_layers",
    "randomization_test",
    "road",
    "save_evaluation",
]
