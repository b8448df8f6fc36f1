"""The one image input the perturbation methods take: its channel axis and size in the model's
layout (:func:`one_image`, a clear error for anything else) and host masks as device rows that
broadcast against it (:func:`mask_rows`); and the facts of the family's records
(:func:`register_perturbation`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from xaikit.backend import T
from xaikit.errors import XaikitValueError
from xaikit.xai._engine.inputs import Inputs
from xaikit.xai.registry import Method, Runner, register_method

#: what every perturbation method is: forward passes only, target objects taken, progress reported
FACTS: dict[str, Any] = {"gradients": False, "target_objects": True, "slow": True}


def one_image(inp: Inputs, method: str) -> tuple[int, int, int]:
    """``(channel axis, H, W)`` of the one 4-D image input, in the model's layout."""
    if len(inp.tensors) != 1:
        raise XaikitValueError(
            f"method {method!r} explains one image input; got {len(inp.tensors)} inputs ({inp.keys})"
        )
    x = inp.tensors[0]
    shape = tuple(int(d) for d in x.shape)
    axis = inp.channel_axes[0]
    if len(shape) != 4 or axis not in (1, 3):
        raise XaikitValueError(
            f"method {method!r} explains image batches: x must be (B, C, H, W) or (B, H, W, C); "
            f"got shape {move_shape(inp, shape)}"
        )
    h, w = (shape[2], shape[3]) if axis == 1 else (shape[1], shape[2])
    return axis, h, w


def move_shape(inp: Inputs, shape: tuple[int, ...]) -> tuple[int, ...]:
    """A model-layout shape as the caller gave it."""
    how = inp.moves[0]
    if how is None:
        return shape
    return tuple(np.moveaxis(np.empty(shape, dtype=np.int8), how[1], how[0]).shape)


def mask_rows(bk: Any, masks: np.ndarray, axis: int, like: T) -> T:
    """(n, H, W) host masks as a device tensor broadcasting against (n, ...) rows."""
    shaped = masks[:, None] if axis == 1 else masks[..., None]
    return bk.as_tensor(np.ascontiguousarray(shaped), getattr(like, "device", None), bk.dtype_name(like))


def maps_to_user(inp: Inputs, maps: np.ndarray, axis: int) -> np.ndarray:
    """(B, H, W) maps repeated over the channel ``axis`` of the model's input, in the caller's
    layout and dtype (one value per pixel, the same on every channel)."""
    channels = int(inp.tensors[0].shape[axis])
    full = np.repeat(np.expand_dims(maps, axis), channels, axis=axis)
    return inp.to_user([full.astype(inp.dtype)])[0]


def register_perturbation(
    name: str, title: str, run: Runner, options: dict[str, Any], **facts: Any
) -> Method:
    """Register a perturbation method: family ``"perturbation"``, the family's :data:`FACTS`, and
    its own ``facts`` (result, noise, check, summary, reference, ...)."""
    return register_method(Method(name, "perturbation", title, run, options, **FACTS, **facts))
