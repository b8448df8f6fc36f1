"""Blur IG's path: from a maximally blurred image to the image, on the model's device.

Blur Integrated Gradients (Xu et al., 2020, https://arxiv.org/abs/2004.03383) integrates the
gradients along the scale-space path ``x(sigma) = G_sigma * x`` from ``sigma_max`` down to 0. Its
Riemann sum over ``steps`` values ``sigma_0 = 0 < sigma_1 < ... < sigma_steps = max_sigma``
(linear, or with ``sqrt`` the square roots of linear steps in sigma^2) is

    attribution = - sum_m grad f(x(sigma_m)) * dx/dsigma(sigma_m) * (sigma_{m+1} - sigma_m)

with ``dx/dsigma`` a forward difference of ``grad_step``; it sums to about
f(x) - f(x(max_sigma)) (completeness, with the fully blurred image as the baseline).

A Gaussian blur with zero padding (scipy's ``gaussian_filter(mode="constant")``, kernel
truncated at 4 sigma, as PAIR ``saliency`` blurs) is linear along each spatial axis, so it is the
product with an (n, n) banded matrix per axis: ``K_h @ x @ K_w^T`` over a whole chunk of rows at
once, with any framework's matmul.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from xaikit.backend import Backend, T

#: scipy's default truncation of the Gaussian kernel, in sigmas
TRUNCATE = 4.0


def blur_matrix(n: int, sigma: float, truncate: float = TRUNCATE) -> np.ndarray:
    """The (n, n) matrix of a 1-D Gaussian blur with zero padding: ``out = K @ in``.

    The kernel is scipy's: weights exp(-x^2 / (2 sigma^2)) for |x| <= int(truncate * sigma + 0.5),
    normalized to sum 1 before the edges cut it (so the image fades towards its borders, as
    ``scipy.ndimage.gaussian_filter(..., mode="constant")`` does). sigma 0 is the identity.

    Example:
        >>> k = blur_matrix(9, 1.0)  # radius 4: the middle row holds the whole kernel
        >>> bool(np.allclose(k, k.T)), round(float(k[4].sum()), 6), round(float(k[0].sum()), 3)
        (True, 1.0, 0.699)
    """
    if sigma <= 0:
        return np.eye(n)
    radius = int(truncate * float(sigma) + 0.5)
    offsets = np.arange(-radius, radius + 1, dtype=np.float64)
    weights = np.exp(-0.5 * (offsets / float(sigma)) ** 2)
    weights /= weights.sum()
    i = np.arange(n)
    d = i[None, :] - i[:, None]  # column j minus row i
    inside = np.abs(d) <= radius
    return np.where(inside, weights[np.clip(d + radius, 0, 2 * radius)], 0.0)


def sigmas(max_sigma: float, steps: int, sqrt: bool = False) -> np.ndarray:
    """The ``steps + 1`` blur levels from 0 to ``max_sigma``: linear, or (``sqrt``) square roots
    of linear steps, which spend more steps on small blurs.

    Example:
        >>> sigmas(4.0, 4).tolist(), sigmas(4.0, 4, sqrt=True).round(3).tolist()
        ([0.0, 1.0, 2.0, 3.0, 4.0], [0.0, 1.0, 1.414, 1.732, 2.0])
    """
    levels = np.arange(steps + 1, dtype=np.float64) * float(max_sigma) / float(steps)
    return np.sqrt(levels) if sqrt else levels


class BlurPath:
    """The rows and gradient multipliers of Blur IG for the engine's custom path
    (:class:`xaikit.xai._engine.Job` ``path``): step m of a noise sample's images ``ends`` is the
    blur at ``sigma_m``; its gradient is multiplied by ``-(sigma_{m+1} - sigma_m) *
    (blur(sigma_m + grad_step) - blur(sigma_m)) / grad_step``.

    ``shapes``/``axes`` give each input's (B, ...) shape and its two spatial axes (model layout).
    Blur matrices are built once per (size, sigma) and kept on the device.
    """

    def __init__(
        self,
        bk: Backend,
        shapes: Sequence[tuple[int, ...]],
        axes: Sequence[tuple[int, int]],
        levels: np.ndarray,
        grad_step: float,
        device: object,
        dtype: str,
    ) -> None:
        self.bk, self.shapes, self.axes = bk, list(shapes), list(axes)
        self.levels = np.asarray(levels, dtype=np.float64)
        self.grad_step = float(grad_step)
        self.device, self.dtype = device, dtype
        self._matrices: dict[tuple[int, float], T] = {}

    @property
    def steps(self) -> int:
        return len(self.levels) - 1

    def _matrix(self, n: int, sigma: float) -> T:
        key = (n, float(sigma))
        if key not in self._matrices:
            self._matrices[key] = self.bk.as_tensor(blur_matrix(n, sigma), self.device, self.dtype)
        return self._matrices[key]

    def blur(self, x: T, i: int, sigma: float) -> T:
        """Input i's rows ``x`` blurred at ``sigma`` along its two spatial axes."""
        if sigma <= 0:
            return x
        bk = self.bk
        nd = len(x.shape)
        # the two spatial axes last: (B, C, H, W) or (B, H, W); blur = K_h @ x @ K_w^T
        rest = [d for d in range(1, nd) if d not in self.axes[i]]
        channel = rest[0] if rest else 1
        moved = channel != 1
        t = bk.moveaxis(x, channel, 1) if moved else x
        h, w = int(t.shape[-2]), int(t.shape[-1])
        out = bk.matmul(bk.matmul(self._matrix(h, sigma), t), self._matrix(w, sigma))  # K_w symmetric
        return bk.moveaxis(out, 1, channel) if moved else out

    def __call__(self, ends: list[T], steps: np.ndarray) -> tuple[list[T], list[T]]:
        rows: list[T] = []
        mults: list[T] = []
        for i, x in enumerate(ends):
            r, m = [], []
            for step in steps:
                s0, s1 = float(self.levels[step]), float(self.levels[step + 1])
                here = self.blur(x, i, s0)
                ahead = self.blur(x, i, s0 + self.grad_step)
                r.append(here)
                m.append((ahead - here) * (-(s1 - s0) / self.grad_step))
            rows.append(self.bk.cat(r))
            mults.append(self.bk.cat(m))
        return rows, mults

    def baseline(self, ends: list[T]) -> list[T]:
        """The path's start for each input: the images blurred at ``max_sigma``."""
        return [self.blur(x, i, float(self.levels[-1])) for i, x in enumerate(ends)]
