"""Pipeline ops that transform each input on its own: value scaling, axes, dropout."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from xaikit.errors import XaikitValueError, describe
from xaikit.op.numpyop.numpyop import NumpyOp

__all__ = ["CoarseDropout", "ExpandDims", "Minmax", "Normalize"]


class _Univariate(NumpyOp):
    """An op applied to each input separately, writing the output at the same position."""

    def __init__(
        self,
        inputs: str | Iterable[str] | None,
        outputs: str | Iterable[str] | None,
        mode: str | Iterable[str] | None,
    ) -> None:
        super().__init__(inputs, outputs, mode)
        if not self.inputs:
            raise XaikitValueError(f"{type(self).__name__} needs at least one input key")
        if len(self.inputs) != len(self.outputs):
            raise XaikitValueError(
                f"{type(self).__name__} needs as many outputs as inputs; got inputs {self.inputs} "
                f"and outputs {self.outputs}"
            )

    def transform(self, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        raise NotImplementedError

    def forward_batch(self, data: list[np.ndarray], rng: np.random.Generator) -> list[np.ndarray]:
        return [self.transform(np.asarray(x), rng) for x in data]


class Normalize(_Univariate):
    """``(x - mean * max_pixel_value) / (std * max_pixel_value)`` per channel, as float32.

    ``mean`` and ``std`` are per channel (the last axis) or scalars; the defaults are ImageNet's.

    Example:
        >>> op = Normalize("x", "x", mean=0.5, std=0.25, max_pixel_value=255)
        >>> op.forward_batch([np.array([[0, 255]], dtype=np.uint8)], None)[0].tolist()
        [[-2.0, 2.0]]
    """

    def __init__(
        self,
        inputs: str | Iterable[str],
        outputs: str | Iterable[str] | None = None,
        mode: str | Iterable[str] | None = None,
        mean: float | Sequence[float] = (0.485, 0.456, 0.406),
        std: float | Sequence[float] = (0.229, 0.224, 0.225),
        max_pixel_value: float = 255.0,
    ) -> None:
        super().__init__(inputs, outputs, mode)
        self.mean = np.asarray(mean, dtype=np.float32) * np.float32(max_pixel_value)
        self.std = np.asarray(std, dtype=np.float32) * np.float32(max_pixel_value)
        if self.mean.ndim > 1 or self.std.ndim > 1 or np.any(self.std == 0):
            raise XaikitValueError(
                f"mean and std must be scalars or 1-D per channel, std non-zero; got {mean!r}, {std!r}"
            )

    def transform(self, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        for name, v in (("mean", self.mean), ("std", self.std)):
            if v.ndim == 1 and v.size not in (1, x.shape[-1]):
                raise XaikitValueError(
                    f"Normalize {name} has {v.size} values but the last (channel) axis of the input "
                    f"has {x.shape[-1]}: {describe(x)}"
                )
        return ((x.astype(np.float32) - self.mean) / self.std).astype(np.float32)


class Minmax(_Univariate):
    """Scale each sample to [0, 1]: ``(x - min) / (max - min + epsilon)``, as float32.

    Example:
        >>> Minmax("x").forward_batch([np.array([[2, 4, 6]])], None)[0].round(4).tolist()
        [[0.0, 0.5, 1.0]]
    """

    def __init__(
        self,
        inputs: str | Iterable[str],
        outputs: str | Iterable[str] | None = None,
        mode: str | Iterable[str] | None = None,
        epsilon: float = 1e-7,
    ) -> None:
        super().__init__(inputs, outputs, mode)
        self.epsilon = float(epsilon)

    def transform(self, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        x = x.astype(np.float32)
        axes = tuple(range(1, x.ndim))
        lo = x.min(axis=axes, keepdims=True) if x.size else x
        hi = x.max(axis=axes, keepdims=True) if x.size else x
        return ((x - lo) / (hi - lo + np.float32(self.epsilon))).astype(np.float32)


class ExpandDims(_Univariate):
    """Insert a size-1 axis at ``axis`` of each sample (``-1``: a channel axis for grey images).

    Example:
        >>> ExpandDims("x").forward_batch([np.zeros((5, 28, 28))], None)[0].shape
        (5, 28, 28, 1)
    """

    def __init__(
        self,
        inputs: str | Iterable[str],
        outputs: str | Iterable[str] | None = None,
        mode: str | Iterable[str] | None = None,
        axis: int = -1,
    ) -> None:
        super().__init__(inputs, outputs, mode)
        self.axis = int(axis)

    def transform(self, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        return np.expand_dims(x, self.axis + 1 if self.axis >= 0 else self.axis)


class CoarseDropout(_Univariate):
    """Fill random rectangles ("holes") of each image (B, H, W[, C]) with ``fill_value``.

    Each sample gets between ``min_holes`` and ``max_holes`` holes, each of a random height in
    ``[min_height, max_height]`` and width in ``[min_width, max_width]`` (clipped to the image),
    at a random position inside the image.

    Example:
        >>> op = CoarseDropout("x", max_holes=1, max_height=2, max_width=2, min_height=2, min_width=2)
        >>> out = op.forward_batch([np.ones((3, 5, 5, 1))], np.random.default_rng(0))[0]
        >>> (out == 0).sum(axis=(1, 2, 3)).tolist()
        [4, 4, 4]
    """

    def __init__(
        self,
        inputs: str | Iterable[str],
        outputs: str | Iterable[str] | None = None,
        mode: str | Iterable[str] | None = None,
        max_holes: int = 8,
        max_height: int = 8,
        max_width: int = 8,
        min_holes: int | None = None,
        min_height: int | None = None,
        min_width: int | None = None,
        fill_value: float = 0,
    ) -> None:
        super().__init__(inputs, outputs, mode)
        self.max_holes, self.max_height, self.max_width = int(max_holes), int(max_height), int(max_width)
        self.min_holes = self.max_holes if min_holes is None else int(min_holes)
        self.min_height = self.max_height if min_height is None else int(min_height)
        self.min_width = self.max_width if min_width is None else int(min_width)
        for lo, hi, name in (
            (self.min_holes, self.max_holes, "holes"),
            (self.min_height, self.max_height, "height"),
            (self.min_width, self.max_width, "width"),
        ):
            if not 0 <= lo <= hi or (name != "holes" and lo < 1):
                raise XaikitValueError(
                    f"CoarseDropout needs 0 <= min_{name} <= max_{name} (sizes at least 1); got {lo} and {hi}"
                )
        self.fill_value = fill_value

    def transform(self, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        if x.ndim < 3:
            raise XaikitValueError(f"CoarseDropout needs images (B, H, W[, C]); got {describe(x)}")
        b, h, w = x.shape[:3]
        k = self.max_holes
        if k == 0 or b == 0:
            return x.copy()
        n_holes = np.asarray(rng.integers(self.min_holes, self.max_holes + 1, size=b))
        hh = np.minimum(rng.integers(self.min_height, self.max_height + 1, size=(b, k)), h)
        ww = np.minimum(rng.integers(self.min_width, self.max_width + 1, size=(b, k)), w)
        top = (rng.random((b, k)) * (h - hh + 1)).astype(np.int64)
        left = (rng.random((b, k)) * (w - ww + 1)).astype(np.int64)
        active = np.arange(k)[None, :] < n_holes[:, None]
        rows = np.arange(h)[None, None, :]
        cols = np.arange(w)[None, None, :]
        in_rows = (rows >= top[..., None]) & (rows < (top + hh)[..., None]) & active[..., None]  # (b, k, h)
        in_cols = (cols >= left[..., None]) & (cols < (left + ww)[..., None])  # (b, k, w)
        holes = np.einsum("bkh,bkw->bhw", in_rows.astype(np.int32), in_cols.astype(np.int32)) > 0
        out = x.copy()
        out[holes] = self.fill_value
        return out
