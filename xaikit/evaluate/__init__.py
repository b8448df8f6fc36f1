"""Is an explanation faithful to the model? One-call checks for torch and Keras models.

* :func:`randomization_test` — the model-parameter randomization test (Adebayo et al., 2018).
* :func:`random_logit`, :func:`efficient_mprt`, :func:`smooth_mprt` — the random-logit test
  (Sixt et al., 2020) and the efficient / smooth MPRT (Hedström et al., 2023).
* :func:`deletion`, :func:`insertion` — perturbation curves and their AUC (Petsiuk et al., 2018).
* :func:`localization` — energy inside and pointing game against ground-truth masks.
* :func:`completeness` — how well IG-based attributions add up to f(x) - f(baseline).
* :class:`DeletionAUC`, :class:`SaliencyStability` — traces that follow faithfulness and the
  stability of the maps of a fixed sample set over training.

Every function leaves the model exactly as it found it.
"""

from __future__ import annotations

from xaikit.evaluate.completeness import CompletenessResult, completeness
from xaikit.evaluate.localization import localization
from xaikit.evaluate.perturbation import CurveResult, deletion, insertion
from xaikit.evaluate.randomization import RandomizationResult, model_layers, randomization_test
from xaikit.evaluate.randomization_more import (
    EfficientMPRTResult,
    RandomLogitResult,
    SmoothMPRTResult,
    efficient_mprt,
    random_logit,
    smooth_mprt,
)
from xaikit.evaluate.saving import save_evaluation
from xaikit.evaluate.traces import DeletionAUC, SaliencyStability

__all__ = [
    "CompletenessResult",
    "CurveResult",
    "DeletionAUC",
    "EfficientMPRTResult",
    "RandomLogitResult",
    "RandomizationResult",
    "SaliencyStability",
    "SmoothMPRTResult",
    "completeness",
    "deletion",
    "efficient_mprt",
    "insertion",
    "localization",
    "model_layers",
    "random_logit",
    "randomization_test",
    "save_evaluation",
    "smooth_mprt",
]
