"""Explicit numpy LRP for the Keras tests: each layer as a matrix ``z = M x + b`` (built here by
loops over the kernel, not by TensorFlow), and each rule of :mod:`xaikit.xai.rules.spec` in
matrix form, in float64."""

from __future__ import annotations

import math
from typing import Any

import numpy as np


def _same_pad(size: int, k: int, s: int) -> tuple[int, int]:
    out = math.ceil(size / s)
    return out, max((out - 1) * s + k - size, 0) // 2


def conv2d_matrix(kernel: np.ndarray, shape: tuple[int, int, int], strides: int, padding: str) -> np.ndarray:
    """The matrix of a channels-last Conv2D (kernel (kh, kw, C, O)) on an (H, W, C) input."""
    h, w, c = shape
    kh, kw, _, o = kernel.shape
    if padding == "same":
        (oh, top), (ow, left) = _same_pad(h, kh, strides), _same_pad(w, kw, strides)
    else:
        oh, ow, top, left = (h - kh) // strides + 1, (w - kw) // strides + 1, 0, 0
    m = np.zeros((oh, ow, o, h, w, c))
    for i in range(oh):
        for j in range(ow):
            for di in range(kh):
                for dj in range(kw):
                    p, q = i * strides + di - top, j * strides + dj - left
                    if 0 <= p < h and 0 <= q < w:
                        m[i, j, :, p, q, :] += kernel[di, dj].T
    return m.reshape(oh * ow * o, h * w * c)


def depthwise_matrix(
    kernel: np.ndarray, shape: tuple[int, int, int], strides: int, padding: str
) -> np.ndarray:
    """The matrix of a channels-last DepthwiseConv2D (kernel (kh, kw, C, mult)): output channel
    ``c * mult + m`` reads input channel ``c`` only."""
    h, w, c = shape
    kh, kw, _, mult = kernel.shape
    if padding == "same":
        (oh, top), (ow, left) = _same_pad(h, kh, strides), _same_pad(w, kw, strides)
    else:
        oh, ow, top, left = (h - kh) // strides + 1, (w - kw) // strides + 1, 0, 0
    m = np.zeros((oh, ow, c * mult, h, w, c))
    for i in range(oh):
        for j in range(ow):
            for di in range(kh):
                for dj in range(kw):
                    p, q = i * strides + di - top, j * strides + dj - left
                    if 0 <= p < h and 0 <= q < w:
                        for ch in range(c):
                            for k in range(mult):
                                m[i, j, ch * mult + k, p, q, ch] += kernel[di, dj, ch, k]
    return m.reshape(oh * ow * c * mult, h * w * c)


def conv2d_transpose_matrix(kernel: np.ndarray, shape: tuple[int, int, int], strides: int) -> np.ndarray:
    """The matrix of a channels-last Conv2DTranspose with padding 'valid' (kernel (kh, kw, O, C)):
    ``y[i s + di, j s + dj, o] += x[i, j, c] K[di, dj, o, c]``."""
    h, w, c = shape
    kh, kw, o, _ = kernel.shape
    oh, ow = (h - 1) * strides + kh, (w - 1) * strides + kw
    m = np.zeros((oh, ow, o, h, w, c))
    for i in range(h):
        for j in range(w):
            for di in range(kh):
                for dj in range(kw):
                    m[i * strides + di, j * strides + dj, :, i, j, :] += kernel[di, dj]
    return m.reshape(oh * ow * o, h * w * c)


def avgpool_matrix(shape: tuple[int, int, int], pool: int) -> np.ndarray:
    """The matrix of AveragePooling2D(pool) (strides = pool, 'valid'); pool = H: global."""
    h, w, c = shape
    oh, ow = h // pool, w // pool
    m = np.zeros((oh, ow, c, h, w, c))
    for i in range(oh):
        for j in range(ow):
            for di in range(pool):
                for dj in range(pool):
                    m[i, j, np.arange(c), i * pool + di, j * pool + dj, np.arange(c)] = 1.0 / pool**2
    return m.reshape(oh * ow * c, h * w * c)


def rule(
    r: Any, m: np.ndarray, b: np.ndarray, x: np.ndarray, rel: np.ndarray, *, ones: np.ndarray | None = None,
    z: np.ndarray | None = None, low: np.ndarray | None = None, high: np.ndarray | None = None,
) -> np.ndarray:  # fmt: skip
    """The input relevance of ``z = m x + b`` (``z`` given: the layer's output, else m x + b)
    for the output relevance ``rel`` under the rule ``r`` (a spec.Rule); ``ones``: the matrix of
    the layer with a kernel of ones (the flat rule), ``low``/``high``: z^B's bounds, shaped like x."""
    e = r.epsilon

    def stab(v: np.ndarray) -> np.ndarray:
        return v + e * np.where(v >= 0, 1.0, -1.0)

    def div(a: np.ndarray, d: np.ndarray) -> np.ndarray:
        return np.divide(a, d, out=np.zeros_like(a), where=d != 0)

    z = m @ x + b if z is None else z
    mp, mn, xp, xn = np.maximum(m, 0), np.minimum(m, 0), np.maximum(x, 0), np.minimum(x, 0)
    bp, bn = np.maximum(b, 0), np.minimum(b, 0)
    if r.kind == "gradient":
        return x * (m.T @ div(rel, z))
    if r.kind == "epsilon":
        return x * (m.T @ div(rel, stab(z)))
    if r.kind == "zplus":
        p = div(rel, stab(mp @ xp + bp + mn @ xn))
        return xp * (mp.T @ p) + xn * (mn.T @ p)
    if r.kind == "alpha_beta":
        p = div(rel, stab(mp @ xp + bp + mn @ xn))
        q = div(rel, stab(mn @ xp + bn + mp @ xn))
        return r.alpha * (xp * (mp.T @ p) + xn * (mn.T @ p)) - r.beta * (xp * (mn.T @ q) + xn * (mp.T @ q))
    if r.kind == "gamma":
        g = r.gamma
        up, down = m + g * mp, m + g * mn
        p = div(rel * (z > 0), stab(up @ xp + (b + g * bp) + down @ xn))
        n = div(rel * (z < 0), stab(down @ xp + (b + g * bn) + up @ xn))
        return xp * (up.T @ p) + xn * (down.T @ p) + xp * (down.T @ n) + xn * (up.T @ n)
    if r.kind == "zbox":
        assert low is not None and high is not None
        q = div(rel, stab(m @ x - mp @ low - mn @ high))
        return x * (m.T @ q) - low * (mp.T @ q) - high * (mn.T @ q)
    if r.kind == "flat":
        assert ones is not None
        return ones.T @ div(rel, stab(ones @ np.ones_like(x)))
    if r.kind == "wsquare":
        m2 = m**2
        return m2.T @ div(rel, stab(m2 @ np.ones_like(x) + b**2))
    if r.kind == "norm":
        return x * (m.T @ div(rel, stab(z)))
    raise ValueError(r.kind)
