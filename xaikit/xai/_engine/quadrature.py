"""Quadrature rules for the Integrated Gradients path integral over alpha in [0, 1]."""

from __future__ import annotations

import functools

import numpy as np

from xaikit.checks import check_choice
from xaikit.errors import XaikitValueError

QUADRATURES = (
    "gausslegendre",
    "riemann_left",
    "riemann_right",
    "riemann_middle",
    "riemann_trapezoid",
    "linspace",
)


@functools.lru_cache(maxsize=64)
def _leggauss(n: int) -> tuple[np.ndarray, np.ndarray]:
    """numpy's Gauss-Legendre nodes and weights on [-1, 1], computed once per ``n`` (read-only).

    ``leggauss`` solves an eigenproblem through LAPACK, whose OpenBLAS worker threads then spin
    for about a tenth of a second, waiting for more work, on the cores the model's kernels need:
    computed on every call, it made the first chunks of a TF SmInt sweep on a 2-core CPU 1.8x
    slower (45 ms of a 450 ms call). Caching keeps the nodes bit for bit numpy's (and captum's).
    """
    x, w = np.polynomial.legendre.leggauss(n)
    x.flags.writeable = False
    w.flags.writeable = False
    return x, w


def quadrature(rule: str, steps: int) -> tuple[np.ndarray, np.ndarray]:
    """Nodes and weights of a rule on [0, 1]: ``integral ~= sum(weights * f(nodes))``.

    Args:
        rule: one of ``"gausslegendre"`` (exact for polynomials of degree < 2*steps),
            ``"riemann_left"``, ``"riemann_right"``, ``"riemann_middle"``,
            ``"riemann_trapezoid"`` (needs ``steps >= 2``), ``"linspace"`` (PAIR
            ``saliency``'s IntegratedGradients, used by its XRAI: ``steps`` nodes from 0 to 1
            inclusive, each weighted 1 / steps; both ends get a full weight, so it is biased by
            (f'(1) + f'(0)) / (2 * steps) against the trapezoid rule).
        steps: number of nodes (gradient evaluations per path).

    Returns:
        ``(alphas, weights)``, two float64 arrays of length ``steps``; the weights sum to 1.

    Example:
        >>> a, w = quadrature("riemann_middle", 4)
        >>> a.tolist(), w.tolist()
        ([0.125, 0.375, 0.625, 0.875], [0.25, 0.25, 0.25, 0.25])
        >>> a, w = quadrature("gausslegendre", 3)
        >>> round(float(np.sum(w * a**5)), 12)   # exact: integral of a^5 = 1/6
        0.166666666667
    """
    if not isinstance(steps, (int, np.integer)) or isinstance(steps, bool) or steps < 1:
        raise XaikitValueError(f"the number of integration steps must be an integer >= 1; got {steps!r}")
    check_choice(rule, "quadrature", QUADRATURES)
    n = int(steps)
    if rule == "gausslegendre":
        x, w = _leggauss(n)
        return (x + 1.0) / 2.0, w / 2.0
    if rule == "riemann_left":
        return np.arange(n) / n, np.full(n, 1.0 / n)
    if rule == "riemann_right":
        return np.arange(1, n + 1) / n, np.full(n, 1.0 / n)
    if rule == "riemann_middle":
        return (np.arange(n) + 0.5) / n, np.full(n, 1.0 / n)
    if rule == "riemann_trapezoid":
        if n < 2:
            raise XaikitValueError(f"quadrature 'riemann_trapezoid' needs at least 2 steps; got {n}")
        w = np.full(n, 1.0 / (n - 1))
        w[0] = w[-1] = 0.5 / (n - 1)
        return np.linspace(0.0, 1.0, n), w
    return np.linspace(0.0, 1.0, n), np.full(n, 1.0 / n)  # "linspace", the last of QUADRATURES
