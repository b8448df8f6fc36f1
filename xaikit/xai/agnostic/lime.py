"""LIME — Ribeiro et al., 2016, https://arxiv.org/abs/1602.04938, as the ``lime`` package
explains images: ``nsamples`` random coalitions (each feature kept with probability 1/2; the
first one keeps every feature), each weighted by the similarity kernel
exp(-d^2 / (2 w^2)) of its cosine distance d to the full coalition (w = ``kernel_width``,
0.25 as in ``lime``'s image explainer), and a ridge regression (``alpha``, intercept not
penalized) of the scores on the coalitions. The attribution of a feature is its coefficient.

How well the linear surrogate fits is part of the answer: ``raw=True`` returns a
:class:`LimeResult` with each sample's weighted R^2 (the ``score`` ``lime`` reports), its
coefficients and intercept.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from xaikit.checks import check_int, check_number
from xaikit.errors import XaikitTypeError
from xaikit.xai.agnostic.coalitions import coalition_scores, space_of
from xaikit.xai.agnostic.common import check_common, per_count, register_agnostic, rng_for
from xaikit.xai.registry import Call, Explained, flag

__all__ = ["LimeResult", "lime", "lime_coalitions", "lime_weights", "ridge"]

#: default coalitions of LIME
DEFAULT_COALITIONS = 512


@dataclass
class LimeResult:
    """What ``explain(method="lime", raw=True)`` returns.

    Attributes:
        attributions: the attributions, as ``raw=False`` returns them (the input's shape).
        coefficients: float64 (B, F) each feature's coefficient (NaN past a sample's F_b).
        intercept: float64 (B,) the surrogate's intercept.
        r2: float64 (B,) the surrogate's weighted coefficient of determination on the coalitions
            (1: the scores are linear in the features there; near 0 or below: the map says little).
        features: int64 (B, P) the feature id of each pixel (row-major) or column.
    """

    attributions: np.ndarray
    coefficients: np.ndarray
    intercept: np.ndarray
    r2: np.ndarray
    features: np.ndarray


def lime_coalitions(rng: np.random.Generator, features: int, n: int) -> np.ndarray:
    """(n, F) binary coalitions: the first keeps every feature, the others each feature with
    probability 1/2."""
    z = (rng.random((n, features)) < 0.5).astype(np.float64)
    z[0] = 1.0
    return z


def lime_weights(z: np.ndarray, kernel_width: float) -> np.ndarray:
    """exp(-d^2 / (2 w^2)) with d the cosine distance of each coalition to the full one (1 for
    the empty coalition)."""
    norms = np.sqrt(z.sum(axis=1)) * np.sqrt(z.shape[1])
    cos = np.divide(z.sum(axis=1), norms, out=np.zeros(len(z)), where=norms > 0)
    d = 1.0 - cos
    return np.exp(-(d**2) / (2.0 * kernel_width**2))


def ridge(z: np.ndarray, y: np.ndarray, w: np.ndarray, alpha: float) -> tuple[np.ndarray, float, float]:
    """Weighted ridge regression with an unpenalized intercept (scikit-learn's ``Ridge`` with
    ``sample_weight``): (coefficients, intercept, weighted R^2)."""
    sw = w / w.sum()
    zm, ym = sw @ z, float(sw @ y)
    zc, yc = z - zm, y - ym
    gram = (zc * w[:, None]).T @ zc + alpha * np.eye(z.shape[1])
    coef = np.linalg.lstsq(gram, (zc * w[:, None]).T @ yc, rcond=None)[0]  # alpha = 0 may be singular
    intercept = ym - float(zm @ coef)
    resid = y - intercept - z @ coef
    total = float(w @ yc**2)
    r2 = 1.0 - float(w @ resid**2) / total if total > 0 else 1.0
    return coef, intercept, r2


def lime(
    call: Call,
    *,
    features: Any = None,
    segments: int = 64,
    baseline: Any = 0.0,
    nsamples: int | None = None,
    kernel_width: float = 0.25,
    alpha: float = 1.0,
    raw: bool = False,
) -> Explained:
    """LIME attributions: the coefficients of a kernel-weighted ridge fit of the scores of
    ``nsamples`` random coalitions (default 512)."""
    width = check_number(kernel_width, "kernel_width", 0, low_open=True, kind=XaikitTypeError)
    reg = check_number(alpha, "alpha", 0, kind=XaikitTypeError)
    space = space_of(call, "lime", features, baseline, segments)
    counts, F = space.features.counts, space.features.width
    n = DEFAULT_COALITIONS if nsamples is None else check_int(nsamples, "nsamples", 2, kind=XaikitTypeError)
    drawn: dict[int, np.ndarray] = {}

    def draw(fb: int) -> np.ndarray:
        drawn[fb] = lime_coalitions(rng_for(call.seed, "lime", fb), fb, n)
        return drawn[fb]

    z = per_count(counts, F, n, draw)
    s = coalition_scores(space, z, "lime")
    B = call.batch
    coef = np.full((B, F), np.nan)
    icpt, r2 = np.zeros(B), np.zeros(B)
    for b, fb in enumerate(counts):
        zb = drawn[int(fb)]
        coef[b, : int(fb)], icpt[b], r2[b] = ridge(zb, s[:, b], lime_weights(zb, width), reg)
    values = space.to_user(np.nan_to_num(coef))
    detail = LimeResult(values, coef, icpt, r2, space.features.ids) if raw else None
    return Explained([values], detail=detail)


def _check_lime(options: dict[str, Any]) -> None:
    check_common(options, fewest=2)  # one coalition (the full one) fits nothing
    if "kernel_width" in options:
        check_number(options["kernel_width"], "kernel_width", 0, low_open=True, kind=XaikitTypeError)
    if "alpha" in options:
        check_number(options["alpha"], "alpha", 0, kind=XaikitTypeError)
    if "raw" in options:
        flag(options["raw"], "raw")


register_agnostic(
    "lime",
    "LIME",
    lime,
    {"nsamples": None, "kernel_width": 0.25, "alpha": 1.0, "raw": False},
    check=_check_lime,
    summary="the coefficients of a local linear surrogate fitted to the scores of random coalitions",
    reference="Ribeiro et al., 2016, https://arxiv.org/abs/1602.04938",
)
