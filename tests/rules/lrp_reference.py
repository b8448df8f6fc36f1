"""LRP rules written out in numpy (float64) from their definitions, for the tests to check the
backends against: no xaikit code is used.

A layer is a matrix ``M`` (outputs x inputs) and a bias ``b``: a dense layer's weight, one
receptive field of a convolution (:func:`unfold` cuts an image into its patches and
:func:`fold` adds the patches' relevance back into the image), or the whole matrix of any
linear map. Definitions (Bach et al., 2015; Montavon et al., 2017 and 2019; Andéol et al., 2021;
the same as zennit 0.5.1's rules), with ``stab(z) = z + eps * sign(z)``, ``sign(0) = +1``:

* epsilon: ``R_x = x * M^T (R / stab(M x + b))`` (eps = 0: a zero denominator gives 0);
* zplus: ``x+ * M+^T s + x- * M-^T s``, ``s = R / stab(M+ x+ + M- x- + b+)``;
* alpha_beta: ``alpha (x+ M+^T p + x- M-^T p) - beta (x+ M-^T q + x- M+^T q)``,
  ``p = R / stab(M+ x+ + M- x- + b+)``, ``q = R / stab(M- x+ + M+ x- + b-)``;
* gamma: with ``G+ = M + g M+``, ``G- = M + g M-``: ``p = [z > 0] R / stab(G+ x+ + G- x- + b + g b+)``,
  ``n = [z < 0] R / stab(G- x+ + G+ x- + b + g b-)``,
  ``R_x = x+ (G+^T p + G-^T n) + x- (G-^T p + G+^T n)``;
* zbox: ``x * M^T s - l * M+^T s - h * M-^T s``, ``s = R / stab(M x - M+ l - M- h)``;
* flat: ``C^T (R / stab(C 1))`` with ``C`` the connectivity (ones where an input feeds an output);
* wsquare: ``(M^2)^T (R / stab(M^2 1 + b^2))``.

``ones`` is the layer's all-ones input as the layer sees it (zeros where a convolution pads).
"""

from __future__ import annotations

from typing import Any

import numpy as np


def stab(z: np.ndarray, eps: float) -> np.ndarray:
    """``z + eps * sign(z)`` with sign(0) = +1."""
    return z + eps * np.where(z >= 0, 1.0, -1.0)


def ratio(r: np.ndarray, d: np.ndarray, eps: float) -> np.ndarray:
    """``r / stab(d)``; with eps = 0 a zero denominator gives 0."""
    if eps > 0:
        return r / stab(d, eps)
    safe = np.where(d == 0, 1.0, d)
    return np.where(d == 0, 0.0, r / safe)


def rule(
    kind: str,
    x: np.ndarray,
    m: np.ndarray,
    b: np.ndarray,
    r: np.ndarray,
    *,
    eps: float = 1e-6,
    gamma: float = 0.25,
    alpha: float = 2.0,
    beta: float = 1.0,
    low: np.ndarray | None = None,
    high: np.ndarray | None = None,
    ones: np.ndarray | None = None,
    conn: np.ndarray | None = None,
) -> np.ndarray:
    """The relevance of the input ``x`` (n,) of the layer ``M x + b`` (M: (m, n)) whose output
    has relevance ``r`` (m,)."""
    mp, mn = np.maximum(m, 0), np.minimum(m, 0)
    bp, bn = np.maximum(b, 0), np.minimum(b, 0)
    xp, xn = np.maximum(x, 0), np.minimum(x, 0)
    ones = np.ones_like(x) if ones is None else ones
    if kind == "epsilon":
        return x * (m.T @ ratio(r, m @ x + b, eps))
    if kind == "zplus":
        s = ratio(r, mp @ xp + mn @ xn + bp, eps)
        return xp * (mp.T @ s) + xn * (mn.T @ s)
    if kind == "alpha_beta":
        p = ratio(r, mp @ xp + mn @ xn + bp, eps)
        q = ratio(r, mn @ xp + mp @ xn + bn, eps)
        return alpha * (xp * (mp.T @ p) + xn * (mn.T @ p)) - beta * (xp * (mn.T @ q) + xn * (mp.T @ q))
    if kind == "gamma":
        gp, gn = m + gamma * mp, m + gamma * mn
        z = m @ x + b
        p = (z > 0) * ratio(r, gp @ xp + gn @ xn + b + gamma * bp, eps)
        n = (z < 0) * ratio(r, gn @ xp + gp @ xn + b + gamma * bn, eps)
        return xp * (gp.T @ p + gn.T @ n) + xn * (gn.T @ p + gp.T @ n)
    if kind == "zbox":
        if low is None or high is None:
            raise ValueError("zbox needs low and high")
        s = ratio(r, m @ x - mp @ low - mn @ high, eps)
        return x * (m.T @ s) - low * (mp.T @ s) - high * (mn.T @ s)
    if kind == "flat":
        c = np.ones_like(m) if conn is None else conn
        return c.T @ ratio(r, c @ ones, eps)
    if kind == "wsquare":
        w2 = m * m
        return w2.T @ ratio(r, w2 @ ones + b * b, eps)
    raise ValueError(kind)


def unfold(x: np.ndarray, k: int, stride: int, pad: int) -> tuple[np.ndarray, tuple[int, int]]:
    """The receptive fields of a 2-D convolution: ``x`` (C, H, W) zero-padded, cut into patches
    (L, C*k*k) in the order of ``weight.reshape(out, -1)``; and the output's (h, w)."""
    c, h, w = x.shape
    xp = np.pad(x, ((0, 0), (pad, pad), (pad, pad)))
    oh, ow = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
    patches = np.empty((oh * ow, c * k * k))
    for i in range(oh):
        for j in range(ow):
            patches[i * ow + j] = xp[:, i * stride : i * stride + k, j * stride : j * stride + k].reshape(-1)
    return patches, (oh, ow)


def fold(rp: np.ndarray, shape: tuple[int, int, int], k: int, stride: int, pad: int) -> np.ndarray:
    """The transpose of :func:`unfold`: each patch's values added back into the (C, H, W) image
    (what falls on the padding dropped)."""
    c, h, w = shape
    out = np.zeros((c, h + 2 * pad, w + 2 * pad))
    ow = (w + 2 * pad - k) // stride + 1
    for idx in range(rp.shape[0]):
        i, j = divmod(idx, ow)
        out[:, i * stride : i * stride + k, j * stride : j * stride + k] += rp[idx].reshape(c, k, k)
    return out[:, pad : pad + h, pad : pad + w]


def conv_rule(
    kind: str, x: np.ndarray, w: np.ndarray, b: np.ndarray, r: np.ndarray, stride: int, pad: int, **opts: Any
) -> np.ndarray:
    """A rule on a 2-D convolution of one sample, field by field: ``x`` (C, H, W), ``w``
    (O, C, k, k), ``r`` (O, h, w) the output's relevance; ``low`` / ``high`` images (C, H, W)
    for zbox."""
    k = w.shape[-1]
    m = w.reshape(w.shape[0], -1)
    px, _ = unfold(x, k, stride, pad)
    ones, _ = unfold(np.ones_like(x), k, stride, pad)
    fields = {key: unfold(opts.pop(key), k, stride, pad)[0] for key in ("low", "high") if key in opts}
    rf = r.reshape(r.shape[0], -1)
    out = np.empty_like(px)
    for loc in range(px.shape[0]):
        extra = {key: v[loc] for key, v in fields.items()}
        out[loc] = rule(kind, px[loc], m, b, rf[:, loc], ones=ones[loc], **extra, **opts)
    return fold(out, x.shape, k, stride, pad)
