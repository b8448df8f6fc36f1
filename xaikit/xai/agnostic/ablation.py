"""Feature ablation (captum's ``FeatureAblation`` over a feature mask): a feature's attribution
is score(x) - score(x with that feature set to the baseline), the same on each of its pixels.
Rows: the clean input, then one coalition per feature (F + 1 per sample).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from xaikit.xai.agnostic.coalitions import coalition_scores, space_of
from xaikit.xai.agnostic.common import check_common, register_agnostic
from xaikit.xai.registry import Call, Explained

__all__ = ["ablation_coalitions", "feature_ablation"]


def ablation_coalitions(counts: np.ndarray, width: int) -> np.ndarray:
    """(1 + width, B, width) coalitions: all kept, then feature j off (j < F_b; rows past a
    sample's F_b repeat the clean input)."""
    z = np.ones((1 + width, len(counts), width))
    for j in range(width):
        z[1 + j, counts > j, j] = 0.0
    return z


def feature_ablation(
    call: Call, *, features: Any = None, segments: int = 64, baseline: Any = 0.0
) -> Explained:
    """Feature ablation attributions: score(x) - score(x with the feature at the baseline)."""
    space = space_of(call, "feature_ablation", features, baseline, segments)
    F = space.features.width
    s = coalition_scores(space, ablation_coalitions(space.features.counts, F), "feature_ablation")
    drop = s[0][None, :] - s[1:]  # (F, B)
    return Explained([space.to_user(np.ascontiguousarray(drop.T))])


register_agnostic(
    "feature_ablation",
    "Feature ablation",
    feature_ablation,
    {},
    aliases=("ablation",),
    short="Ablation",
    noise=False,
    check=check_common,
    summary="the score's drop when one feature (a patch, a superpixel, a column) is set to a baseline",
    reference="captum's FeatureAblation; Zeiler & Fergus, 2014, https://arxiv.org/abs/1311.2901",
)
