"""Small options of the model-agnostic methods for the tests that run every method (the model
forms, ``explain_dataset``, the compute dtypes, ``compare``): a 2 x 2 grid of patches and a few
coalitions, so that each call is a few dozen forward rows instead of hundreds (the defaults:
64 patches, 25 orders, 512 or 1536 coalitions, 32 Sobol designs)."""

from __future__ import annotations

from typing import Any

#: method -> options: 4 features; rows per sample: ablation 5, Shapley 1 + 2 x 4 = 9, KernelSHAP
#: 2 + 14 (every coalition of 4 features: the exact Shapley values), LIME 12, Sobol 4 x 6 = 24, HSIC 16
FAST: dict[str, dict[str, Any]] = {
    "feature_ablation": {"segments": 4},
    "shapley_sampling": {"segments": 4, "nsamples": 2},
    "kernel_shap": {"segments": 4, "nsamples": 14},
    "lime": {"segments": 4, "nsamples": 12},
    "sobol": {"segments": 4, "nsamples": 4},
    "hsic": {"segments": 4, "nsamples": 16},
}
