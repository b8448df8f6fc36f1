"""From a layer's map to the image: bilinear upsampling (:func:`upsample`, as torch's
``interpolate(mode="bilinear")`` and captum's ``LayerAttribution.interpolate`` compute it: half-pixel
centres, ``align_corners=False``, no normalization; Score-CAM's masks align the corners) and
the image input a map belongs to (:func:`image_size`).
"""

from __future__ import annotations

import numpy as np

from xaikit.errors import XaikitValueError
from xaikit.xai._engine.inputs import Inputs


def bilinear_matrix(n_in: int, n_out: int, align_corners: bool = False) -> np.ndarray:
    """The (n_out, n_in) matrix of 1-D linear interpolation, as torch's bilinear ``interpolate``
    computes it (half-pixel centres, clamped at 0; or corners aligned).

    Example:
        >>> bilinear_matrix(2, 4)
        array([[1.  , 0.  ],
               [0.75, 0.25],
               [0.25, 0.75],
               [0.  , 1.  ]])
    """
    r = np.zeros((n_out, n_in))
    i = np.arange(n_out, dtype=np.float64)
    if align_corners:
        src = i * (n_in - 1) / (n_out - 1) if n_out > 1 else np.zeros_like(i)
    else:
        src = np.maximum((i + 0.5) * (n_in / n_out) - 0.5, 0.0)
    i0 = np.minimum(np.floor(src).astype(np.int64), n_in - 1)
    i1 = np.minimum(i0 + 1, n_in - 1)
    lam = src - i0
    np.add.at(r, (np.arange(n_out), i0), 1.0 - lam)
    np.add.at(r, (np.arange(n_out), i1), lam)
    return r


def upsample(maps: np.ndarray, size: tuple[int, int], align_corners: bool = False) -> np.ndarray:
    """Bilinear upsampling of (..., h, w) maps to (..., H, W) (see :func:`bilinear_matrix`).

    Example:
        >>> upsample(np.array([[[0.0, 1.0]]]), (1, 4))
        array([[[0.  , 0.25, 0.75, 1.  ]]])
    """
    ry = bilinear_matrix(maps.shape[-2], size[0], align_corners)
    rx = bilinear_matrix(maps.shape[-1], size[1], align_corners)
    return ry @ maps @ rx.T  # two matmuls (a 3-operand einsum runs as a naive loop)


def image_size(inp: Inputs) -> tuple[int, tuple[int, int]]:
    """The first image input (index) and its (H, W) in the model's layout."""
    for i, (t, axis) in enumerate(zip(inp.tensors, inp.channel_axes)):
        shape = tuple(int(d) for d in t.shape)
        if len(shape) == 4:
            return i, ((shape[2], shape[3]) if axis == 1 else (shape[1], shape[2]))
        if len(shape) == 3:
            return i, (shape[1], shape[2])
    raise XaikitValueError(
        "class-activation maps need an image input (B, C, H, W), (B, H, W, C) or (B, H, W); got "
        f"shapes {[tuple(int(d) for d in t.shape) for t in inp.tensors]}"
    )
