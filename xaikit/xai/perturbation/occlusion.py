"""Occlusion — Zeiler & Fergus, 2014, https://arxiv.org/abs/1311.2901, as captum's ``Occlusion``:
a window (all channels) slides over each image; a pixel's attribution is the mean, over the
windows covering it, of score(x) - score(x with the window set to ``baseline``). Row ``r`` of
its row space is window ``r // B - 1`` of sample ``r % B`` (-1: the clean input).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from xaikit.backend import T
from xaikit.checks import check_int, check_number
from xaikit.errors import XaikitTypeError, XaikitValueError
from xaikit.xai._engine.chunks import forward_rows
from xaikit.xai._engine.inputs import Inputs
from xaikit.xai._engine.progress import for_method
from xaikit.xai.perturbation._image import maps_to_user, one_image, register_perturbation
from xaikit.xai.registry import Call, CallSettings, Explained

__all__ = ["default_window", "occlusion", "occlusion_windows"]


def _pair(value: Any, name: str, low: int = 1) -> tuple[int, int]:
    """An int or an (h, w) pair of ints >= ``low``."""
    if isinstance(value, (tuple, list)):
        if len(value) != 2:
            raise XaikitValueError(
                f"{name} must be an int or a pair (height, width) of ints; got {type(value).__name__} "
                f"of length {len(value)}: {value!r}"
            )
        parts = [check_int(v, name, low, kind=XaikitTypeError) for v in value]
        return parts[0], parts[1]
    v = check_int(value, name, low, alternative="a pair (height, width) or ", kind=XaikitTypeError)
    return v, v


def default_window(hw: tuple[int, int]) -> tuple[int, int]:
    """The default occlusion window: an eighth of each side, rounded up.

    Example:
        >>> default_window((32, 32)), default_window((224, 224)), default_window((5, 12))
        ((4, 4), (28, 28), (1, 2))
    """
    return max(1, math.ceil(hw[0] / 8)), max(1, math.ceil(hw[1] / 8))


def occlusion_windows(size: int, window: int, stride: int) -> np.ndarray:
    """Which pixels of one axis each window covers, bool (n_windows, size), captum's positions:
    0, stride, 2 stride, ... for ceil((size - window) / stride) + 1 windows, the last one cut at
    the edge when the stride does not divide size - window.

    Example:
        >>> occlusion_windows(5, 2, 2).astype(int)
        array([[1, 1, 0, 0, 0],
               [0, 0, 1, 1, 0],
               [0, 0, 0, 0, 1]])
    """
    count = math.ceil((size - window) / stride) + 1
    starts = np.arange(count) * stride
    pos = np.arange(size)
    return (pos[None, :] >= starts[:, None]) & (pos[None, :] < starts[:, None] + window)


def occlusion(
    inp: Inputs,
    targets: T,
    settings: CallSettings,
    *,
    window: Any = None,
    stride: Any = None,
    baseline: Any = 0.0,
) -> np.ndarray:
    """Occlusion attributions (captum's ``Occlusion`` with a window over all channels).

    Args:
        inp: one prepared 4-D image input.
        targets: the pinned class of each sample (its sample index with a target object).
        settings: the call's settings; ``progress`` reports the rows done
            (``"occlusion: 120/650 rows ..."``).
        window: the window's (height, width), or one int for both; default an eighth of each
            side, rounded up (:func:`default_window`).
        stride: the step between windows, an int or (height, width); default half the window
            (at least 1).
        baseline: the value a window is set to (a number; default 0).

    Returns:
        Attributions with the input's shape and layout (the same value on every channel).
    """
    bk = inp.bk
    axis, H, W = one_image(inp, "occlusion")
    wh, ww = default_window((H, W)) if window is None else _pair(window, "window")
    if wh > H or ww > W:
        raise XaikitValueError(
            f"window must fit in the image: at most (height, width) = ({H}, {W}); got ({wh}, {ww})"
        )
    sh, sw = (max(1, wh // 2), max(1, ww // 2)) if stride is None else _pair(stride, "stride")
    if sh > wh or sw > ww:
        raise XaikitValueError(
            f"stride must be at most the window ({wh}, {ww}) on each axis, so that every pixel is "
            f"covered (as in captum); got ({sh}, {sw})"
        )
    fill = check_number(baseline, "baseline", kind=XaikitTypeError)
    rows_y, rows_x = occlusion_windows(H, wh, sh), occlusion_windows(W, ww, sw)
    ny, nx = len(rows_y), len(rows_x)
    B = inp.batch
    x = inp.tensors[0]
    device = getattr(x, "device", None)

    # the windows on the device once, in the rows' dtype; a leading row of zeros for the clean
    # input: row r reads window row (r // B - 1) // nx + 1 (0 for the clean rows) and column
    # (r // B - 1) % nx, and its mask is their outer product
    dtype = bk.dtype_name(x)
    wy = bk.as_tensor(np.concatenate([np.zeros((1, H), bool), rows_y]), device, dtype)
    wx = bk.as_tensor(rows_x, device, dtype)
    shape_y, shape_x = ((1, H, 1), (1, 1, W)) if axis == 1 else ((H, 1, 1), (1, W, 1))

    def rows_fn(r0: int, r1: int) -> list[T]:
        r = bk.arange(r0, r1, device)
        k = r // B - 1  # -1: the clean input, then windows iy * nx + ix
        n = r1 - r0
        my = bk.reshape(bk.gather(wy, k // nx + 1), (n, *shape_y))
        mx = bk.reshape(bk.gather(wx, k % nx), (n, *shape_x))
        m = my * mx  # (n, 1, H, W) or (n, H, W, 1): 1 inside the window
        xr = bk.gather(x, r % B)
        return [xr * (1.0 - m) + fill * m]

    with for_method(settings.progress, B * (1 + ny * nx), "occlusion") as bar:
        s = forward_rows(inp, targets, 1 + ny * nx, rows_fn, settings, bar.advance_to)
    drop = (s[0][None, :] - s[1:]).reshape(ny, nx, B)  # score(x) - score(occluded), per window
    ry, rx = rows_y.astype(np.float64), rows_x.astype(np.float64)
    total = ry.T @ drop.transpose(2, 0, 1) @ rx  # (H, ny) @ (B, ny, nx) @ (nx, W): two products
    counts = ry.sum(0)[:, None] * rx.sum(0)[None, :]  # windows covering each pixel (>= 1)
    return maps_to_user(inp, total / counts, axis)


def _occlusion(call: Call, **options: Any) -> Explained:
    return Explained([occlusion(call.inp, call.targets, call.settings(), **options)])


register_perturbation(
    "occlusion",
    "Occlusion",
    _occlusion,
    {"window": None, "stride": None, "baseline": 0.0},
    summary="the score's drop when a window of the image is set to a baseline",
    reference="Zeiler & Fergus, 2014, https://arxiv.org/abs/1311.2901",
)
