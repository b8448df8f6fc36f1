"""Undo an input normalization for display: ``x * std + mean``, so overlays show the real picture.

Real pipelines feed models ``(x - mean) / std`` (ImageNet's mean and std for torchvision
models, ``x / 127.5 - 1`` for many Keras applications). Painted as such, those inputs come out
as a per-image min-max stretch with shifted colours. The ``denormalize=`` option of
:func:`xaikit.viz.overlay`, :class:`xaikit.viz.ImgData` and the ``Saliency`` trace maps them
back with this module.

Framework-free (numpy only) and below ``viz/`` and the traces, so both read the option the same
way and a trace can check it when it is built, without loading matplotlib.

The option is ``None`` (nothing to undo), a pair ``(mean, std)`` of numbers or per-channel
sequences, or a function from the batch (a numpy array, in its own layout) to the images to
show (same batch size; e.g. a BGR-to-RGB flip after Caffe-style preprocessing).

Pixel range of the result (from the statistics, so every batch is treated alike): when every
``mean`` and ``std`` value lies within [-1, 1] (and the images were in [0, 1]), the result is
float32 clipped to [0, 1]; otherwise (``mean=127.5, std=127.5``, Caffe means, ``std=255``) the
images were 0..255 and the result is uint8, rounded and clipped to 0..255. Both are what the
painter's display rule draws as they are.

Example:
    >>> import numpy as np
    >>> mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
    >>> pixels = np.full((1, 2, 2, 3), 0.5, dtype=np.float32)
    >>> x = (pixels - np.array(mean)) / np.array(std)  # what the model sees
    >>> bool(np.allclose(denormalize(x, mean, std), pixels, atol=1e-6))
    True
    >>> denormalize(np.zeros((1, 2, 2)), 127.5, 127.5).tolist()  # 0..255 data comes back as uint8
    [[[128, 128], [128, 128]]]
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from xaikit.checks import check_floats
from xaikit.errors import XaikitTypeError, XaikitValueError, describe
from xaikit.layout import channel_axis_of

__all__ = ["Denormalizer", "denormalize", "to_denormalizer"]

#: what the option takes, for messages
_EXPECTED = (
    "None, (mean, std) with numbers or one value per channel (e.g. ImageNet's "
    "((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))), or a function images -> display images"
)


def _values(value: Any, what: str, name: str) -> np.ndarray:
    """A number or a flat sequence of numbers as a float64 vector, finite."""
    label, expected = f"{name}: {what}", "a number or one number per channel"
    if isinstance(value, (bool, np.bool_, str, bytes)):
        raise XaikitTypeError(f"{label} must be {expected}; got {describe(value)}")
    arr = check_floats(value, label, expected)
    if arr.ndim > 1 or arr.size == 0:
        raise XaikitValueError(
            f"{name}: {what} must be a number or a flat sequence of one number per channel; "
            f"got {describe(value)}"
        )
    if not np.all(np.isfinite(arr)):
        raise XaikitValueError(f"{name}: {what} must be finite; got {arr.tolist()}")
    return arr.reshape(-1)


@dataclass(frozen=True)
class Denormalizer:
    """A checked ``denormalize=`` option: statistics to undo, or a display function.

    Build it with :func:`to_denormalizer`; apply it with :meth:`apply`.
    """

    mean: np.ndarray | None = None
    std: np.ndarray | None = None
    fn: Callable[[np.ndarray], Any] | None = None
    name: str = "denormalize"

    @staticmethod
    def checked(spec: Any, name: str = "denormalize") -> Denormalizer:
        """:func:`to_denormalizer` of an option that is not None."""
        den = to_denormalizer(spec, name)
        if den is None:
            raise XaikitTypeError(f"{name} must be {_EXPECTED}; got None")
        return den

    @property
    def byte_range(self) -> bool:
        """Whether the statistics say the images were 0..255 (else [0, 1])."""
        if self.mean is None or self.std is None:
            return False
        return bool(np.abs(self.mean).max() > 1.0 or np.abs(self.std).max() > 1.0)

    def apply(self, images: Any, channel_axis: int | None = None, prefer_first: bool = False) -> np.ndarray:
        """The images to show for a batch of model inputs (numpy; the batch's own layout).

        Args:
            images: ``(B, H, W)`` (one channel), ``(B, C, H, W)`` or ``(B, H, W, C)`` values.
            channel_axis: the channel axis (batch axis included) when it is known.
            prefer_first: read an ambiguous 4-D shape as channel-first (torch's convention).

        Raises:
            XaikitValueError: per-channel statistics whose length is not the images' channel
                count, or a function that changes the batch size.
        """
        arr = np.asarray(images)
        if self.fn is not None:
            out = np.asarray(self.fn(arr))
            if out.ndim == 0 or out.shape[0] != arr.shape[0]:
                raise XaikitValueError(
                    f"{self.name}: the display function must return one image per sample "
                    f"({arr.shape[0]}); got {describe(out)}"
                )
            return out
        mean, std = self.mean, self.std
        if mean is None or std is None:  # built without statistics nor function
            raise XaikitValueError(f"{self.name} must be {_EXPECTED}; got neither")
        if arr.ndim not in (3, 4):
            raise XaikitValueError(
                f"{self.name} applies to image batches (B, H, W), (B, C, H, W) or (B, H, W, C); "
                f"got {describe(arr)}"
            )
        axis = None
        if arr.ndim == 4:
            axis = channel_axis % 4 if channel_axis is not None else channel_axis_of(arr.shape, prefer_first)
        channels = 1 if axis is None else int(arr.shape[axis])
        shape = [1] * arr.ndim
        if axis is not None:
            shape[axis] = channels
        stats = []
        for what, values in (("mean", mean), ("std", std)):
            if values.size not in (1, channels):
                raise XaikitValueError(
                    f"{self.name}: {what} has {values.size} values, but the images have {channels} "
                    f"channel(s) ({describe(arr)}, channel axis {axis}); expected one value per "
                    f"channel or a single number"
                )
            stats.append(np.broadcast_to(values, (channels,)).reshape(shape) if axis is not None else values)
        out = arr.astype(np.float64) * stats[1] + stats[0]
        out = np.nan_to_num(out, nan=0.0)
        if self.byte_range:
            return np.clip(np.rint(out), 0, 255).astype(np.uint8)
        return np.clip(out, 0.0, 1.0).astype(np.float32)


def to_denormalizer(spec: Any, name: str = "denormalize") -> Denormalizer | None:
    """Check a ``denormalize=`` option once: ``None``, ``(mean, std)`` or a function.

    ``std`` must be positive. Per-channel lengths are checked against the images when applied.

    Example:
        >>> to_denormalizer(None) is None, to_denormalizer((0.5, 0.5)).byte_range
        (True, False)
        >>> to_denormalizer((0.5, 0.0))
        Traceback (most recent call last):
        ...
        xaikit.errors.XaikitValueError: denormalize: std must be positive (the inputs were divided by it); got [0.0]
    """
    if spec is None:
        return None
    if isinstance(spec, Denormalizer):
        return spec
    if callable(spec):
        return Denormalizer(fn=spec, name=name)
    if isinstance(spec, (str, bytes)) or not isinstance(spec, (Sequence, np.ndarray)) or len(spec) != 2:
        raise XaikitTypeError(f"{name} must be {_EXPECTED}; got {describe(spec)}")
    mean = _values(spec[0], "mean", name)
    std = _values(spec[1], "std", name)
    if np.any(std <= 0):
        raise XaikitValueError(
            f"{name}: std must be positive (the inputs were divided by it); got {std.tolist()}"
        )
    if mean.size > 1 and std.size > 1 and mean.size != std.size:
        raise XaikitValueError(
            f"{name}: mean and std must have one value per channel each (or be single numbers); "
            f"got {mean.size} and {std.size} values"
        )
    return Denormalizer(mean=mean, std=std, name=name)


def denormalize(images: Any, mean: Any, std: Any, channel_axis: int | None = None) -> np.ndarray:
    """``images * std + mean`` per channel, clipped to the pixel range (see the module docstring).

    Args:
        images: a numpy batch ``(B, H, W)``, ``(B, C, H, W)`` or ``(B, H, W, C)`` of normalized
            model inputs (tensors: convert them with ``.numpy()`` first, or use the option of
            :func:`xaikit.viz.overlay` / :class:`xaikit.viz.ImgData`, which take tensors).
        mean: the normalization's mean: a number or one per channel.
        std: its standard deviation: a positive number or one per channel.
        channel_axis: the channel axis when the shape is ambiguous (default: a channel-sized
            last axis, else axis 1).

    Returns:
        float32 in [0, 1], or uint8 when the statistics are those of 0..255 data; same layout.
    """
    return Denormalizer.checked((mean, std)).apply(images, channel_axis)
