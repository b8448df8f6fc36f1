"""Spatial pipeline ops that move pixels: the same change is applied to every input of a sample
(an image and its mask stay aligned).

Inputs are ``(B, H, W, ...)`` arrays (channel-last images, or masks without a channel axis).
Keys may be given as ``inputs``/``outputs`` or, like the reference, as ``image_in``/``image_out``
and ``mask_in``/``mask_out``; all of them are transformed together.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from xaikit.checks import check_choice
from xaikit.errors import XaikitValueError, describe
from xaikit.op.numpyop.numpyop import NumpyOp
from xaikit.op.op import keys_of

__all__ = ["HorizontalFlip", "PadIfNeeded", "RandomCrop"]

Keys = str | Iterable[str] | None

_BORDER_MODES = ("constant", "reflect", "symmetric", "edge", "wrap")


class _Spatial(NumpyOp):
    def __init__(
        self,
        inputs: Keys = None,
        outputs: Keys = None,
        mode: Keys = None,
        image_in: Keys = None,
        image_out: Keys = None,
        mask_in: Keys = None,
        mask_out: Keys = None,
    ) -> None:
        ins = keys_of(inputs, "inputs") + keys_of(image_in, "image_in") + keys_of(mask_in, "mask_in")
        outs = (
            keys_of(inputs if outputs is None else outputs, "outputs")
            + keys_of(image_in if image_out is None else image_out, "image_out")
            + keys_of(mask_in if mask_out is None else mask_out, "mask_out")
        )
        super().__init__(ins, outs, mode)
        name = type(self).__name__
        if not ins:
            raise XaikitValueError(f"{name} needs at least one input key (inputs=, image_in= or mask_in=)")
        if len(ins) != len(outs):
            raise XaikitValueError(
                f"{name} needs as many outputs as inputs; got inputs {ins} and outputs {outs}"
            )

    def _check(self, data: list[np.ndarray]) -> tuple[int, int, int]:
        name = type(self).__name__
        first = data[0]
        if first.ndim < 3:
            raise XaikitValueError(
                f"{name} needs (B, H, W, ...) arrays; {self.inputs[0]!r} is {describe(first)}"
            )
        for key, d in zip(self.inputs[1:], data[1:]):
            if d.ndim < 3 or d.shape[:3] != first.shape[:3]:
                raise XaikitValueError(
                    f"{name} inputs must share batch, height and width; {self.inputs[0]!r} is "
                    f"{describe(first)} but {key!r} is {describe(d)}"
                )
        return int(first.shape[0]), int(first.shape[1]), int(first.shape[2])


class PadIfNeeded(_Spatial):
    """Pad images to at least ``min_height`` x ``min_width``, keeping them centred.

    Args:
        min_height: the smallest height after padding.
        min_width: the smallest width after padding.
        border_mode: ``"reflect"`` (mirror without repeating the edge, the reference's default),
            ``"constant"``, ``"symmetric"``, ``"edge"`` or ``"wrap"``.
        value: fill value for ``"constant"``.

    Example:
        >>> op = PadIfNeeded(4, 3, inputs="x", border_mode="constant", value=9)
        >>> op.forward_batch([np.zeros((1, 2, 2))], None)[0][0].tolist()
        [[9.0, 9.0, 9.0], [0.0, 0.0, 9.0], [0.0, 0.0, 9.0], [9.0, 9.0, 9.0]]
    """

    def __init__(
        self,
        min_height: int,
        min_width: int,
        inputs: Keys = None,
        outputs: Keys = None,
        mode: Keys = None,
        image_in: Keys = None,
        image_out: Keys = None,
        mask_in: Keys = None,
        mask_out: Keys = None,
        border_mode: str = "reflect",
        value: float = 0,
    ) -> None:
        super().__init__(inputs, outputs, mode, image_in, image_out, mask_in, mask_out)
        check_choice(border_mode, "border_mode", _BORDER_MODES)
        self.min_height, self.min_width = int(min_height), int(min_width)
        self.border_mode, self.value = border_mode, value

    def forward_batch(self, data: list[np.ndarray], rng: np.random.Generator) -> list[np.ndarray]:
        _, h, w = self._check(data)
        dh, dw = max(0, self.min_height - h), max(0, self.min_width - w)
        pads = [(0, 0), (dh // 2, dh - dh // 2), (dw // 2, dw - dw // 2)]
        out = []
        for d in data:
            pad = pads + [(0, 0)] * (d.ndim - 3)
            if self.border_mode == "constant":
                out.append(np.pad(d, pad, mode="constant", constant_values=self.value))
            else:
                out.append(np.pad(d, pad, mode=self.border_mode))  # type: ignore[call-overload]
        return out


class RandomCrop(_Spatial):
    """Crop a ``height`` x ``width`` window at a random position of each sample.

    Example:
        >>> op = RandomCrop(2, 2, inputs="x")
        >>> op.forward_batch([np.arange(16).reshape(1, 4, 4)], np.random.default_rng(0))[0].shape
        (1, 2, 2)
    """

    def __init__(
        self,
        height: int,
        width: int,
        inputs: Keys = None,
        outputs: Keys = None,
        mode: Keys = None,
        image_in: Keys = None,
        image_out: Keys = None,
        mask_in: Keys = None,
        mask_out: Keys = None,
    ) -> None:
        super().__init__(inputs, outputs, mode, image_in, image_out, mask_in, mask_out)
        if int(height) < 1 or int(width) < 1:
            raise XaikitValueError(f"RandomCrop height and width must be at least 1; got {height}, {width}")
        self.height, self.width = int(height), int(width)

    def forward_batch(self, data: list[np.ndarray], rng: np.random.Generator) -> list[np.ndarray]:
        b, h, w = self._check(data)
        if self.height > h or self.width > w:
            raise XaikitValueError(
                f"RandomCrop of {self.height}x{self.width} does not fit images of {h}x{w} "
                f"(key {self.inputs[0]!r}); pad them first (PadIfNeeded)"
            )
        top = rng.integers(0, h - self.height + 1, size=b)
        left = rng.integers(0, w - self.width + 1, size=b)
        rows = (top[:, None] + np.arange(self.height))[:, :, None]
        cols = (left[:, None] + np.arange(self.width))[:, None, :]
        batch = np.arange(b)[:, None, None]
        return [d[batch, rows, cols] for d in data]


class HorizontalFlip(_Spatial):
    """Mirror every sample left-right (wrap it in ``Sometimes`` for a random flip).

    Example:
        >>> HorizontalFlip(inputs="x").forward_batch([np.array([[[1, 2]]])], None)[0].tolist()
        [[[2, 1]]]
    """

    def forward_batch(self, data: list[np.ndarray], rng: np.random.Generator) -> list[np.ndarray]:
        self._check(data)
        return [np.ascontiguousarray(d[:, :, ::-1]) for d in data]
