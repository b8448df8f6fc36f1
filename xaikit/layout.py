"""Channel layout of image batches: the one place that decides where the channel axis is.

Framework-free (numpy only) and at the bottom of the package, so the backend, the saliency
engine, evaluation, traces and the painter all read layouts the same way:

* :func:`channel_axis_of`: the channel axis of a batch, from its shape;
* :class:`ModelLayout`: what a model takes (a backend reports it: ``bk.model_layout(model)``);
* :func:`model_move`: whether a batch must be moved to fit a model, and :func:`move` /
  :func:`move_back` to apply it (and undo it on results).

The rule: a 4-D batch is an image batch. An axis of size 1, 3 or 4 at position 1 (and not at
the end) is channel-first; at the end (and not at 1) channel-last; when both or neither fit, the
framework's convention decides (torch: first; Keras: last). A model whose first convolution
reads ``C`` channels and takes channel-first input gets a ``(B, H, W, C)`` batch moved to
``(B, C, H, W)`` when axis 1 is not ``C`` (and the other way round for a channel-last model);
anything else is passed as it is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["CHANNEL_SIZES", "ModelLayout", "channel_axis_of", "model_move", "move", "move_back"]

#: channel counts recognised from a shape alone (grey, RGB, RGBA)
CHANNEL_SIZES = (1, 3, 4)

#: a move of the channel axis, ``(from, to)`` (batch axis included)
Move = tuple[int, int]


@dataclass(frozen=True)
class ModelLayout:
    """The image layout a model takes.

    Attributes:
        channel_first: True for ``(B, C, H, W)`` (torch convolutions), False for ``(B, H, W, C)``.
        channels: channels its first convolution reads; None when it has none or it is unknown.
    """

    channel_first: bool
    channels: int | None = None

    @property
    def channel_axis(self) -> int:
        """The channel axis of a 4-D batch in this layout."""
        return 1 if self.channel_first else 3


def channel_axis_of(
    shape: tuple[int, ...], prefer_first: bool, sizes: tuple[int, ...] = CHANNEL_SIZES
) -> int | None:
    """The channel axis of a batch of inputs, or None when it has none.

    4-D batches are images (see the module's rule); 3-D batches (B, H, W) and 2-D batches have
    no channel axis. ``sizes`` are the channel counts recognised (the painter reads 1 or 3).

    Example:
        >>> channel_axis_of((8, 3, 32, 32), False), channel_axis_of((8, 32, 32, 3), True)
        (1, 3)
        >>> channel_axis_of((8, 3, 5, 3), True), channel_axis_of((8, 28, 28), True) is None
        (1, True)
    """
    if len(shape) != 4:
        return None
    first, last = shape[1] in sizes, shape[-1] in sizes
    if first and not last:
        return 1
    if last and not first:
        return 3
    return 1 if prefer_first else 3


def model_move(shape: tuple[int, ...], layout: ModelLayout) -> Move | None:
    """The move that brings a batch of ``shape`` into the model's layout, or None.

    Only 4-D batches whose channel count matches the model's first convolution, on the wrong
    side, are moved.

    Example:
        >>> model_move((8, 32, 32, 3), ModelLayout(channel_first=True, channels=3))
        (3, 1)
        >>> model_move((8, 3, 32, 32), ModelLayout(channel_first=True, channels=3)) is None
        True
        >>> model_move((8, 1, 28, 28), ModelLayout(channel_first=False, channels=1))
        (1, 3)
        >>> model_move((8, 32, 32, 3), ModelLayout(channel_first=True, channels=None)) is None
        True
    """
    c = layout.channels
    if len(shape) != 4 or c is None:
        return None
    if layout.channel_first and shape[1] != c and shape[-1] == c:
        return (3, 1)
    if not layout.channel_first and shape[-1] != c and shape[1] == c:
        return (1, 3)
    return None


def move(x: Any, how: Move | None) -> Any:
    """Apply a move to a numpy batch (a contiguous copy), or return it unchanged for None."""
    if how is None:
        return x
    return np.ascontiguousarray(np.moveaxis(np.asarray(x), how[0], how[1]))


def move_back(x: Any, how: Move | None) -> Any:
    """Undo :func:`move` on a result with the moved batch's shape (e.g. an attribution map)."""
    if how is None or np.ndim(x) != 4:
        return x
    return np.ascontiguousarray(np.moveaxis(np.asarray(x), how[1], how[0]))


def moved_axis(axis: int | None, how: Move | None) -> int | None:
    """Where a channel axis ends up after a move (None stays None)."""
    if axis is None or how is None:
        return axis
    return how[1] if axis == how[0] else axis
