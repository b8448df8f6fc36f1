"""The layer a class-activation map reads: :func:`find_layer` resolves ``layer=`` (None: the last
layer with a spatial output) through the backend's CAM facet and checks that its output can
become a (B, C, h, w) map; :func:`to_chw` makes it one (channel-last maps transposed, ViT tokens
(B, N, C) laid out on their patch grid by :mod:`xaikit.xai.cam.tokens`, square or with the image's
aspect ratio (:func:`grid_size`), or ``reshape=``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import numpy as np

from xaikit.backend import T
from xaikit.backend.facets import CamLayer
from xaikit.errors import XaikitError, XaikitTypeError, XaikitValueError, describe
from xaikit.xai._engine.inputs import Inputs, call_error
from xaikit.xai.cam.tokens import Size, grid_or_error, token_grid

#: the CAM family's logger (``docs/cam.md``: the layer ``layer=None`` chose is logged here)
logger = logging.getLogger("xaikit.xai.cam")


Reshape = Callable[[T], T] | tuple[int, int] | None


def grid_size(inp: Inputs) -> Size:
    """The (H, W) of the first 4-D image input, (B, C, H, W) or (B, H, W, C), whose aspect ratio
    a token layer's patch grid follows (:mod:`xaikit.xai.cam.tokens`); None (a square grid, as
    before) when no input is 4-D: a 3-D input may be tokens (B, N, C) rather than an image."""
    for t, axis in zip(inp.tensors, inp.channel_axes):
        shape = tuple(int(d) for d in t.shape)
        if len(shape) == 4:
            return (shape[2], shape[3]) if axis == 1 else (shape[1], shape[2])
    return None


def check_reshape(value: Any) -> Reshape:
    """``reshape`` as given, checked: None, a callable, or a pair of positive ints (h, w)."""
    if value is None or callable(value):
        return value  # type: ignore[no-any-return]
    if (
        isinstance(value, (tuple, list))
        and len(value) == 2
        and all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) and v > 0 for v in value)
    ):
        return (int(value[0]), int(value[1]))
    raise XaikitTypeError(
        "reshape must be None (4-D layers as they are; ViT tokens (B, k + h*w, C) to a square "
        f"grid, k <= 5 leading tokens dropped), a (h, w) pair of positive ints or a callable; got {describe(value)}"
    )


def _layer_check(layer: CamLayer, reshape: Reshape, first: bool, size: Size = None) -> None:
    """Raise when ``layer``'s output cannot become a (B, C, h, w) map with ``reshape``."""
    if callable(reshape):
        return
    shape = layer.shape
    if len(shape) == 3:
        if reshape is not None:
            raise XaikitValueError(
                f"reshape={reshape} is for a token output (B, N, C); layer {layer.name!r} already "
                f"gives a 4-D map (B, {', '.join(map(str, shape))}): leave reshape=None"
            )
        h, w = (shape[1], shape[2]) if first else (shape[0], shape[1])
        if h is not None and w is not None and h * w <= 1:
            raise XaikitValueError(
                f"layer {layer.name!r} must give a spatial output with h * w > 1 to make a "
                f"class-activation map; its output is (B, {', '.join(map(str, shape))}): choose an "
                "earlier convolutional layer"
            )
        return
    if len(shape) == 2:
        n = shape[0]
        if reshape is not None:
            if n is not None and n < reshape[0] * reshape[1]:
                raise XaikitValueError(
                    f"reshape={reshape} needs at least {reshape[0] * reshape[1]} tokens; layer "
                    f"{layer.name!r} gives (B, {n}, {shape[1]})"
                )
            return
        if n is None:
            raise XaikitValueError(
                f"layer {layer.name!r} gives tokens (B, None, {shape[1]}) of unknown count: pass "
                "reshape=(h, w) (the last h*w tokens) or a callable that returns a 4-D map"
            )
        grid_or_error(n, shape[1], layer.name, size)
        return
    raise XaikitValueError(
        f"layer {layer.name!r} must give a spatial (B, C, h, w) / (B, h, w, C) output, or ViT "
        f"tokens (B, N, C) with reshape=, to make a class-activation map; its output is "
        f"(B, {', '.join(map(str, shape))}): choose a convolutional layer"
    )


def to_chw(a: np.ndarray, first: bool, reshape: Reshape, size: Size = None) -> np.ndarray:
    """A layer's output (numpy, after a callable ``reshape``) as channel-first (B, C, h, w):
    4-D channel-last maps are transposed, (B, N, C) tokens keep their last h*w (the class,
    distillation and register tokens dropped) as an (h, w) grid, square or with the aspect ratio
    of the image ``size`` = (H, W).

    Example:
        >>> tokens = np.arange(2 * 5 * 3.0).reshape(2, 5, 3)  # a class token and a 2x2 grid
        >>> to_chw(tokens, True, None)[0, 0]
        array([[ 3.,  6.],
               [ 9., 12.]])
        >>> to_chw(np.arange(7.0).reshape(1, 7, 1), True, None, (32, 48))[0, 0]  # 1 + 2x3 tokens
        array([[1., 2., 3.],
               [4., 5., 6.]])
    """
    if a.ndim == 4:
        return a if first else a.transpose(0, 3, 1, 2)
    if a.ndim == 3:
        grid = reshape if isinstance(reshape, tuple) else token_grid(a.shape[1], size)
        if grid is None:  # pragma: no cover - checked by _layer_check
            raise XaikitValueError(f"cannot reshape tokens {a.shape} to a grid: pass reshape=(h, w)")
        h, w = grid
        return a[:, a.shape[1] - h * w :].reshape(a.shape[0], h, w, a.shape[2]).transpose(0, 3, 1, 2)
    raise XaikitValueError(
        f"reshape must give a 4-D map (B, C, h, w) (torch) / (B, h, w, C) (Keras); it gave shape {a.shape}"
    )


def find_layer(inp: Inputs, layer: Any = None, reshape: Reshape = None, output: int | str = 0) -> CamLayer:
    """The layer a CAM explains (see :meth:`~xaikit.backend.facets.CamFacet.resolve`: for
    ``layer=None`` on a model with several outputs, one that ``output`` depends on), checked
    to give a map with ``reshape`` (tokens: on a grid with the image's aspect ratio); the layer
    found for ``layer=None`` is logged."""
    facet = inp.bk.cam
    kw0 = inp.kwargs.rows(np.arange(1)) if inp.kwargs else None
    try:  # the first call of the model on these inputs: a shape the model cannot take shows here
        found = facet.resolve(inp.model, layer, [t[:1] for t in inp.tensors], kw0, output)
    except XaikitError:
        raise
    except Exception as exc:
        raise call_error(inp, exc) from exc
    _layer_check(found, reshape, facet.channel_first(inp.model), grid_size(inp))
    if layer is None:
        logger.info("class-activation map: layer=None chose layer %r (output %s)", found.name, found.shape)
    return found
