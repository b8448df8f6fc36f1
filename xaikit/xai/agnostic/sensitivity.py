"""Global sensitivity analysis of the score over the features: Sobol and HSIC attributions.

* :func:`sobol` — Fel et al., 2021, "Look at the Variance! Efficient Black-box Explanations with
  Sobol-based Sensitivity Analysis", https://arxiv.org/abs/2111.04138. Each feature is blended
  with the baseline by a value u_i in [0, 1] (x u + baseline (1 - u)); the attribution is the
  total Sobol index of u_i, Jansen's estimator on a scrambled Sobol sequence:
  two designs A and B of N points in [0, 1]^F, and for each feature i the design C_i (A with
  column i from B); S_Ti = sum_j (f(A_j) - f(C_ij))^2 / (2 N Var f(A)), Var with N - 1.
  Rows: N (F + 2) per sample, N = ``nsamples`` (a power of two; default 32, the paper's).
* :func:`hsic` — Novello et al., 2022, "Making Sense of Dependence: Efficient Black-box
  Explanations Using Dependence Measure", https://arxiv.org/abs/2206.06219. ``nsamples`` binary
  coalitions (a scrambled Sobol sequence rounded, default 1536); the attribution of feature i is
  the HSIC between its on/off indicator and the score, the biased estimator
  tr(K_i H L H) / (n - 1)^2 with the Dirac kernel K_i = [z_i = z'_i] on the indicator and a
  Gaussian kernel L on the scores whose bandwidth is the median distance between scores (the
  usual heuristic). With a Dirac kernel this is 2 z_i^T (H L H) z_i / (n - 1)^2.

Both are measures of dependence, not signed contributions: every value is >= 0.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from xaikit.checks import check_int
from xaikit.errors import XaikitTypeError, XaikitValueError
from xaikit.xai._engine.seeds import stream_seed
from xaikit.xai.agnostic.coalitions import coalition_scores, space_of
from xaikit.xai.agnostic.common import STREAMS, check_common, per_count, register_agnostic
from xaikit.xai.registry import Call, Explained

__all__ = ["hsic", "hsic_scores", "jansen", "sobol", "sobol_design"]

#: default designs of Sobol attribution (the paper's N)
DEFAULT_DESIGNS = 32
#: default coalitions of HSIC attribution
DEFAULT_HSIC = 1536


def _qmc(seed: int, method: str, dim: int, n: int) -> np.ndarray:
    """The first ``n`` points of a scrambled Sobol sequence in [0, 1]^dim (2^ceil(log2 n) drawn,
    so scipy's balance rule holds), seeded by (seed, method, dim)."""
    from scipy.stats import qmc

    engine = qmc.Sobol(dim, scramble=True, seed=stream_seed(seed, STREAMS[method], dim))
    return engine.random_base2(max(0, int(np.ceil(np.log2(n)))))[:n]


def sobol_design(seed: int, features: int, n: int) -> np.ndarray:
    """(n (F + 2), F) blends of Sobol attribution: A, B, then C_0 ... C_{F-1}."""
    ab = _qmc(seed, "sobol", 2 * features, n)
    a, b = ab[:, :features], ab[:, features:]
    c = np.repeat(a[None], features, axis=0)
    idx = np.arange(features)
    c[idx, :, idx] = b[:, idx].T
    return np.concatenate([a, b, c.reshape(features * n, features)])


def jansen(scores: np.ndarray, features: int, n: int) -> np.ndarray:
    """Jansen's total Sobol indices (F,) from the scores of :func:`sobol_design`'s rows."""
    fa = scores[:n]
    fc = scores[2 * n :].reshape(features, n)
    var = np.var(fa, ddof=1) if n > 1 else 0.0
    if var <= 0:
        return np.zeros(features)
    return ((fa[None, :] - fc) ** 2).sum(axis=1) / (2.0 * n * var)


def sobol(
    call: Call, *, features: Any = None, segments: int = 64, baseline: Any = 0.0, nsamples: int | None = None
) -> Explained:
    """Sobol attribution: each feature's total Sobol index (Jansen) over ``nsamples`` designs."""
    n = DEFAULT_DESIGNS if nsamples is None else _power_of_two(nsamples)
    space = space_of(call, "sobol", features, baseline, segments)
    counts, F = space.features.counts, space.features.width
    z = per_count(counts, F, n * (F + 2), lambda fb: _padded(sobol_design(call.seed, fb, n), n * (F + 2)))
    s = coalition_scores(space, z, "sobol")
    st = np.zeros((call.batch, F))
    for b, fb in enumerate(counts):
        st[b, : int(fb)] = jansen(s[: n * (int(fb) + 2), b], int(fb), n)
    return Explained([space.to_user(st)])


def _padded(z: np.ndarray, rows: int) -> np.ndarray:
    """Coalitions padded with full ones to ``rows`` rows (samples with fewer features)."""
    return np.concatenate([z, np.ones((rows - len(z), z.shape[1]))]) if len(z) < rows else z


def _power_of_two(value: Any) -> int:
    n = check_int(value, "nsamples", 2, kind=XaikitTypeError)
    if n & (n - 1):
        raise XaikitValueError(
            f"nsamples of sobol is the number of Sobol-sequence designs and must be a power of two "
            f"(8, 16, 32, ...); got {n}"
        )
    return n


def _check_sobol(options: dict[str, Any]) -> None:
    check_common(options, fewest=2)
    if options.get("nsamples") is not None:
        _power_of_two(options["nsamples"])


def _check_hsic(options: dict[str, Any]) -> None:
    check_common(options, fewest=2)


def hsic_scores(z: np.ndarray, y: np.ndarray) -> np.ndarray:
    """HSIC (F,) of each binary column of ``z`` (n, F) with the scores ``y`` (n,): Dirac kernel on
    the column, Gaussian kernel on y with the median-distance bandwidth, biased estimator
    tr(K H L H) / (n - 1)^2."""
    n = len(y)
    dist = np.abs(y[:, None] - y[None, :])
    upper = dist[np.triu_indices(n, 1)]
    width = float(np.median(upper)) if upper.size else 0.0
    if width <= 0:  # the scores do not vary: nothing depends on anything
        return np.zeros(z.shape[1])
    gram = np.exp(-(dist**2) / (2.0 * width**2))
    centred = gram - gram.mean(axis=0, keepdims=True)
    centred = centred - centred.mean(axis=1, keepdims=True)  # H L H
    return 2.0 * np.einsum("if,ij,jf->f", z, centred, z, optimize=True) / (n - 1) ** 2


def hsic(
    call: Call, *, features: Any = None, segments: int = 64, baseline: Any = 0.0, nsamples: int | None = None
) -> Explained:
    """HSIC attribution: the dependence of the score on each feature's presence over
    ``nsamples`` binary coalitions (default 1536)."""
    n = DEFAULT_HSIC if nsamples is None else check_int(nsamples, "nsamples", 2, kind=XaikitTypeError)
    space = space_of(call, "hsic", features, baseline, segments)
    counts, F = space.features.counts, space.features.width
    drawn: dict[int, np.ndarray] = {}

    def draw(fb: int) -> np.ndarray:
        drawn[fb] = np.round(_qmc(call.seed, "hsic", fb, n))
        return drawn[fb]

    z = per_count(counts, F, n, draw)
    s = coalition_scores(space, z, "hsic")
    out = np.zeros((call.batch, F))
    for b, fb in enumerate(counts):
        out[b, : int(fb)] = hsic_scores(drawn[int(fb)], s[:, b])
    return Explained([space.to_user(out)])


register_agnostic(
    "sobol",
    "Sobol",
    sobol,
    {"nsamples": None},
    check=_check_sobol,
    units="none",  # a share of the score's variance
    summary="each feature's total Sobol index: the share of the score's variance it takes part in",
    reference="Fel et al., 2021, https://arxiv.org/abs/2111.04138",
)

register_agnostic(
    "hsic",
    "HSIC",
    hsic,
    {"nsamples": None},
    check=_check_hsic,
    units="none",  # a dependence measure
    summary="the statistical dependence (HSIC) of the score on each feature's presence",
    reference="Novello et al., 2022, https://arxiv.org/abs/2206.06219",
)
