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
    (:class:`xaikit.xai._engine.job.Job` ``path``): step m of a noise sample's images ``ends`` is the
    blur at ``sigma_m``; its gradient is multiplied by ``-(sigma_{m+1} - sigma_m) *
    (blur(sigma_m + grad_step) - blur(sigma_m)) / grad_step``.

    ``axes`` gives each input's two spatial axes (model layout). All the steps of a chunk are
    blurred by two batched matrix products: a stack of blur matrices, one per step, against the
    images, built once per (size, sigmas) and kept on the device.
    """

    def __init__(
        self,
        bk: Backend,
        axes: Sequence[tuple[int, int]],
        levels: np.ndarray,
        grad_step: float,
        device: object,
        dtype: str,
    ) -> None:
        self.bk, self.axes = bk, list(axes)
        self.levels = np.asarray(levels, dtype=np.float64)
        self.grad_step = float(grad_step)
        self.device, self.dtype = device, dtype
        self._stacks: dict[tuple[int, int, tuple[float, ...]], T] = {}

    @property
    def steps(self) -> int:
        return len(self.levels) - 1

    def _stack(self, n: int, rank: int, sigmas: tuple[float, ...]) -> T:
        """The (k, 1, ..., n, n) stack of blur matrices for ``sigmas``, shaped to broadcast
        against (1, B, ..., n, n) images of ``rank`` axes (batch included)."""
        key = (n, rank, sigmas)
        if key not in self._stacks:
            mats = np.stack([blur_matrix(n, s) for s in sigmas])
            shape = (len(sigmas),) + (1,) * (rank - 2) + (n, n)
            self._stacks[key] = self.bk.as_tensor(mats.reshape(shape), self.device, self.dtype)
        return self._stacks[key]

    def blur(self, x: T, i: int, sigmas: Sequence[float]) -> T:
        """Input i's rows ``x`` (B, ...) blurred at each of ``sigmas`` along its two spatial
        axes: (k * B, ...), sigma by sigma."""
        bk = self.bk
        nd = len(x.shape)
        # the two spatial axes last: (B, C, H, W) or (B, H, W); blur = K_h @ x @ K_w^T
        rest = [d for d in range(1, nd) if d not in self.axes[i]]
        channel = rest[0] if rest else 1
        moved = channel != 1
        t = bk.moveaxis(x, channel, 1) if moved else x
        h, w = int(t.shape[-2]), int(t.shape[-1])
        key = tuple(float(s) for s in sigmas)
        t = bk.reshape(t, (1, *t.shape))
        out = bk.matmul(bk.matmul(self._stack(h, nd, key), t), self._stack(w, nd, key))  # K_w symmetric
        out = bk.reshape(out, (len(key) * int(x.shape[0]), *out.shape[2:]))
        return bk.moveaxis(out, 1, channel) if moved else out

    def __call__(self, ends: list[T], steps: np.ndarray) -> tuple[list[T], list[T]]:
        here_s = self.levels[steps]
        factors = -(self.levels[steps + 1] - here_s) / self.grad_step  # per step, shaped per row below
        rows: list[T] = []
        mults: list[T] = []
        for i, x in enumerate(ends):
            here = self.blur(x, i, here_s)
            ahead = self.blur(x, i, here_s + self.grad_step)
            per_row = np.repeat(factors, int(x.shape[0])).reshape((-1,) + (1,) * (len(x.shape) - 1))
            rows.append(here)
            mults.append((ahead - here) * self.bk.as_tensor(per_row, self.device, self.dtype))
        return rows, mults

    def baseline(self, ends: list[T]) -> list[T]:
        """The path's start for each input: the images blurred at ``max_sigma``."""
        return [self.blur(x, i, [float(self.levels[-1])]) for i, x in enumerate(ends)]
