"""Shapley values of the features, by permutation sampling and by KernelSHAP.

The game: v(S) = score(x with the features outside S at the baseline). Its Shapley values add up
to v(all) - v(none) = score(x) - score(baseline) (efficiency).

* :func:`shapley_sampling` (Castro et al., 2009; captum's ``ShapleyValueSampling``): ``nsamples``
  random orders of the features; each adds the features one by one to the empty coalition and
  credits each with the score's change; the mean over the orders. ``antithetic=True`` pairs each
  order with its reverse (Mitchell et al., 2022), which lowers the variance for the same cost.
  The orders depend on (seed, F_b) only: samples with the same number of features share them
  (captum's one order per draw for the whole batch), and a sample gets the same ones alone and
  in any batch. Rows: the baseline once, then F per order.
* :func:`kernel_shap` (Lundberg & Lee, 2017): the weighted least-squares fit of
  v(S) ~ phi_0 + sum_{i in S} phi_i with the Shapley kernel's weights, under the constraints
  phi_0 = v(none) and sum(phi) = v(all) - v(none), solved exactly (the last phi eliminated).
  When ``nsamples`` covers every coalition (2^F - 2 besides the empty and full ones) they are all
  used with their kernel weights and the fit *is* the Shapley values; otherwise coalitions are
  drawn from the kernel (a size s with probability proportional to (F - 1) / (s (F - s)), then a
  uniform subset of that size), paired with their complements, each of weight 1.
* :func:`exact_shapley`: the Shapley values of any small game by enumeration (tests, docs).
"""

from __future__ import annotations

import itertools
import math
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from xaikit.checks import check_int
from xaikit.errors import XaikitTypeError, XaikitWarning
from xaikit.xai.agnostic.coalitions import coalition_scores, space_of
from xaikit.xai.agnostic.common import check_common, per_count, register_agnostic, rng_for
from xaikit.xai.registry import Call, Explained, flag

__all__ = [
    "exact_shapley",
    "kernel_coalitions",
    "kernel_shap",
    "kernel_solve",
    "permutations",
    "shapley_sampling",
]

#: default orders of Shapley sampling (captum's default n_samples)
DEFAULT_ORDERS = 25
#: default coalitions of KernelSHAP
DEFAULT_COALITIONS = 512


def exact_shapley(value: Callable[[np.ndarray], float], n: int) -> np.ndarray:
    """The Shapley values of the game ``value(z)`` (z a bool (n,) coalition) by enumeration:
    phi_i = sum_S |S|! (n - |S| - 1)! / n! (v(S + i) - v(S)). 2^n calls; for n up to ~16.

    Example:
        >>> exact_shapley(lambda z: float(z[0] and z[1]) + 2.0 * z[2], 3).tolist()
        [0.5, 0.5, 2.0]
    """
    table = {}
    for bits in itertools.product((False, True), repeat=n):
        table[bits] = float(value(np.array(bits)))
    phi = np.zeros(n)
    for bits, v in table.items():
        s = sum(bits)
        for i in range(n):
            if not bits[i]:
                w = math.factorial(s) * math.factorial(n - s - 1) / math.factorial(n)
                phi[i] += w * (table[bits[:i] + (True,) + bits[i + 1 :]] - v)
    return phi


def permutations(seed: int, orders: int, features: int, antithetic: bool = False) -> np.ndarray:
    """The feature orders of :func:`shapley_sampling` for samples with ``features`` features:
    int (orders, features); with ``antithetic`` every odd order is the reverse of the one before."""
    rng = rng_for(seed, "shapley_sampling", features)
    out = np.empty((orders, features), dtype=np.int64)
    for k in range(orders):
        out[k] = out[k - 1][::-1] if antithetic and k % 2 else rng.permutation(features)
    return out


def _order_coalitions(perms: dict[int, np.ndarray], counts: np.ndarray, width: int) -> np.ndarray:
    """(1 + orders F, B, F) coalitions (the empty one, then each order's growing prefixes; a
    sample with F_b < F repeats its full coalition past step F_b) from the (orders, F_b) orders
    of each number of features."""
    F = width
    orders = len(next(iter(perms.values())))
    B = len(counts)
    z = np.ones((1 + orders * F, B, F))
    z[0] = 0.0
    steps = np.arange(F)[None, :, None]
    for b, fb in enumerate(counts):
        mine = perms[int(fb)]  # (orders, F_b)
        rank = np.full((orders, F), -1)  # each feature's place in each order (-1: not the sample's)
        np.put_along_axis(rank, mine, np.arange(int(fb))[None, :], axis=1)
        # step t of order k keeps the features placed at or before t
        z[1:, b] = (rank[:, None, :] <= steps).reshape(orders * F, F)
    return z


def shapley_sampling(
    call: Call,
    *,
    features: Any = None,
    segments: int = 64,
    baseline: Any = 0.0,
    nsamples: int | None = None,
    antithetic: bool = False,
) -> Explained:
    """Shapley value sampling: the mean credit of each feature over ``nsamples`` random orders
    (default 25)."""
    space = space_of(call, "shapley_sampling", features, baseline, segments)
    counts, F = space.features.counts, space.features.width
    orders = DEFAULT_ORDERS if nsamples is None else check_int(nsamples, "nsamples", 1, kind=XaikitTypeError)
    perms = {int(f): permutations(call.seed, orders, int(f), bool(antithetic)) for f in np.unique(counts)}
    z = _order_coalitions(perms, counts, F)
    s = coalition_scores(space, z, "shapley_sampling")
    B = call.batch
    phi = np.zeros((B, F))
    for b in range(B):
        fb = int(counts[b])
        blocks = s[1:, b].reshape(orders, F)[:, :fb]  # each order's scores after each step
        before = np.concatenate([np.full((orders, 1), s[0, b]), blocks[:, :-1]], axis=1)
        np.add.at(phi[b], perms[fb], blocks - before)
    return Explained([space.to_user(phi / orders)])


def kernel_weight(features: int, size: np.ndarray) -> np.ndarray:
    """The Shapley kernel (F - 1) / (C(F, s) s (F - s)) of coalitions of ``size`` (0 < s < F)."""
    s = np.asarray(size, dtype=np.float64)
    binom = np.array([math.comb(features, int(k)) for k in np.ravel(s)], dtype=np.float64).reshape(s.shape)
    return (features - 1) / (binom * s * (features - s))


def kernel_coalitions(
    rng: np.random.Generator, features: int, n: int, paired: bool = True
) -> tuple[np.ndarray, np.ndarray]:
    """``n`` coalitions of KernelSHAP over ``features`` features (besides the empty and full
    ones) and their regression weights: every coalition with its kernel weight when ``n`` covers
    all 2^F - 2 of them (the rows past them get weight 0), else draws from the kernel (weight
    1), each paired with its complement when ``paired``."""
    F = features
    if F <= 1:
        return np.ones((n, F)), np.zeros(n)
    total = 2**F - 2 if F < 63 else None
    if total is not None and n >= total:
        z = np.ones((n, F))
        w = np.zeros(n)
        grid = (np.arange(1, total + 1)[:, None] >> np.arange(F)[None, :]) & 1
        z[:total] = grid
        w[:total] = kernel_weight(F, grid.sum(axis=1))
        return z, w
    sizes = np.arange(1, F)
    p = (F - 1) / (sizes * (F - sizes))
    p = p / p.sum()
    half = (n + 1) // 2 if paired else n
    s = rng.choice(sizes, size=half, p=p)
    keys = rng.random((half, F))
    cut = np.sort(keys, axis=1)[np.arange(half), s - 1]
    z = (keys <= cut[:, None]).astype(np.float64)
    if paired:
        z = np.concatenate([z, 1.0 - z])[:n]
    return z, np.ones(n)


def kernel_solve(z: np.ndarray, w: np.ndarray, y: np.ndarray, full: float, empty: float) -> np.ndarray:
    """phi minimizing sum_i w_i (y_i - empty - z_i . phi)^2 subject to sum(phi) = full - empty
    (the last phi eliminated; least squares by SVD, so a rank-deficient draw still solves)."""
    F = z.shape[1]
    delta = full - empty
    if F == 1:
        return np.array([delta])
    keep = w > 0
    z, w, y = z[keep], w[keep], y[keep]
    a = z[:, :-1] - z[:, -1:]
    t = y - empty - z[:, -1] * delta
    root = np.sqrt(w)
    rest = np.linalg.lstsq(a * root[:, None], t * root, rcond=None)[0]
    return np.concatenate([rest, [delta - rest.sum()]])


def _warn_if_underdetermined(z: np.ndarray, features: int, n: int) -> None:
    """Warn when the coalitions cannot tell every feature apart (the fit then splits credit
    between the features it cannot separate, whatever the model does)."""
    if features <= 1:
        return
    rank = int(np.linalg.matrix_rank(z[:, :-1] - z[:, -1:])) if len(z) else 0
    if rank < features - 1:
        warnings.warn(
            f"kernel_shap: the {n} coalitions drawn cannot tell the {features} features apart (rank "
            f"{rank} of the {features - 1} needed), so the fit splits credit between features it cannot "
            f"separate; pass a larger nsamples"
            + (f" ({2**features - 2} uses every coalition)" if features < 20 else ""),
            XaikitWarning,
            stacklevel=2,
        )


def kernel_shap(
    call: Call,
    *,
    features: Any = None,
    segments: int = 64,
    baseline: Any = 0.0,
    nsamples: int | None = None,
    paired: bool = True,
) -> Explained:
    """KernelSHAP: the constrained weighted linear fit of the scores of ``nsamples`` coalitions
    (default 512) plus the full and empty ones."""
    space = space_of(call, "kernel_shap", features, baseline, segments)
    counts, F = space.features.counts, space.features.width
    n = DEFAULT_COALITIONS if nsamples is None else check_int(nsamples, "nsamples", 1, kind=XaikitTypeError)
    drawn: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def draw(fb: int) -> np.ndarray:
        drawn[fb] = kernel_coalitions(rng_for(call.seed, "kernel_shap", fb), fb, n, bool(paired))
        return np.concatenate([np.ones((1, fb)), np.zeros((1, fb)), drawn[fb][0]])

    z = per_count(counts, F, n + 2, draw)
    for fb, (zb, wb) in drawn.items():
        _warn_if_underdetermined(zb[wb > 0], fb, n)
    s = coalition_scores(space, z, "kernel_shap")
    phi = np.zeros((call.batch, F))
    for b, fb in enumerate(counts):
        zb, wb = drawn[int(fb)]
        phi[b, : int(fb)] = kernel_solve(zb, wb, s[2:, b], s[0, b], s[1, b])
    return Explained([space.to_user(phi)])


def _check_flag(options: dict[str, Any], name: str) -> None:
    check_common(options)
    if name in options:
        flag(options[name], name)


def _check_sampling(options: dict[str, Any]) -> None:
    """Shapley sampling's options (module level: a record pickles its check by reference)."""
    _check_flag(options, "antithetic")


def _check_kernel(options: dict[str, Any]) -> None:
    """KernelSHAP's options."""
    _check_flag(options, "paired")


register_agnostic(
    "shapley_sampling",
    "Shapley sampling",
    shapley_sampling,
    {"nsamples": None, "antithetic": False},
    aliases=("shapley", "shapley_value_sampling"),
    short="Shapley",
    check=_check_sampling,
    summary="each feature's mean change of the score when added to random orders of the features",
    reference="Castro et al., 2009, https://doi.org/10.1016/j.cor.2008.04.004",
)

register_agnostic(
    "kernel_shap",
    "KernelSHAP",
    kernel_shap,
    {"nsamples": None, "paired": True},
    aliases=("kernelshap",),
    check=_check_kernel,
    summary="Shapley values as the Shapley-kernel-weighted linear fit of the scores of random coalitions",
    reference="Lundberg & Lee, 2017, https://arxiv.org/abs/1705.07874",
)
