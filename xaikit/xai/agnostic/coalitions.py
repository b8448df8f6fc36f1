"""The one forward engine of the model-agnostic methods: the model's scores on coalitions.

A coalition is a vector ``z`` in [0, 1]^F over a sample's features (1: kept, 0: switched off,
between: blended, for Sobol). Its input is ``x * m + baseline * (1 - m)`` with ``m`` the
coalition spread over the feature's pixels (and every channel) or columns. Every method of the
family is a choice of coalitions and an estimator on their scores:

* feature ablation: the clean input and one coalition per switched-off feature;
* Shapley sampling: permutations, each adding the features one by one to the empty coalition;
* KernelSHAP, LIME, HSIC: random binary coalitions; Sobol: quasi-Monte-Carlo blends.

:func:`coalition_scores` runs them as one row space of the engine's chunked forward passes
(:func:`~xaikit.xai._engine.chunks.forward_rows`): row ``r`` is coalition ``r // B`` of sample
``r % B``. The coalitions go to the device once, as a (n * B, F) matrix (small: floats per
feature, not per pixel) with the feature ids (B, P), and each chunk's masks are gathered from them
on the device: memory is one chunk of rows whatever the number of coalitions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from xaikit.backend import T
from xaikit.errors import XaikitValueError, describe
from xaikit.xai._engine.baselines import FIXED_BASELINES, check_baseline
from xaikit.xai._engine.chunks import forward_rows
from xaikit.xai._engine.progress import for_method
from xaikit.xai.agnostic.features import Features, feature_ids
from xaikit.xai.perturbation._image import maps_to_user
from xaikit.xai.registry import Call

__all__ = ["Space", "coalition_scores", "space_of"]


@dataclass
class Space:
    """What a model-agnostic method explains: one input, its features, its baseline.

    Attributes:
        call: the explanation call.
        features: the per-sample feature ids.
        axis: the channel axis of an image input in the model's layout (1 or 3), None for rows.
        base: the baseline, a tensor with the input's shape on its device.
    """

    call: Call
    features: Features
    axis: int | None
    base: T

    @property
    def batch(self) -> int:
        return self.call.batch

    def to_user(self, values: np.ndarray) -> np.ndarray:
        """(B, F) per-feature values as attributions with the input's shape, layout and dtype
        (an image's value on every channel of the feature's pixels)."""
        inp = self.call.inp
        shape = tuple(int(d) for d in inp.tensors[0].shape)
        flat = self.features.spread(values)
        if self.axis is None:
            return inp.to_user([flat.reshape(shape).astype(inp.dtype)])[0]
        hw = (shape[2], shape[3]) if self.axis == 1 else (shape[1], shape[2])
        return maps_to_user(inp, flat.reshape(-1, *hw), self.axis)


def space_of(call: Call, method: str, features: Any, baseline: Any, segments: int) -> Space:
    """The :class:`Space` of a call: one input, either images (B, C, H, W) / (B, H, W, C) or rows
    (B, F); its features; its baseline (a number, ``"zeros"``, ``"black"``, ``"mean"``,
    ``"blur"`` or an array broadcastable to the input)."""
    from xaikit.xai.gradient.sweep import baseline_fn

    inp = call.inp
    if len(inp.tensors) != 1:
        raise XaikitValueError(
            f"method {method!r} explains one input x (images or rows); got {len(inp.tensors)} inputs "
            f"({inp.keys}): pass the model's other arguments, which are not explained, in model_kwargs="
        )
    x = inp.tensors[0]
    shape = tuple(int(d) for d in x.shape)
    axis = inp.channel_axes[0]
    if len(shape) == 4 and axis in (1, 3):
        pass
    elif len(shape) == 2:
        axis = None
    else:
        raise XaikitValueError(
            f"method {method!r} explains image batches or tabular rows: x must be (B, C, H, W), (B, H, W, C) "
            f"or (B, F); got shape {shape}: flatten each sample to one row (x.reshape(len(x), -1)) for a "
            "model that takes rows"
        )
    if isinstance(baseline, str):
        check_baseline(baseline, FIXED_BASELINES)
    elif isinstance(baseline, bool) or baseline is None:
        raise XaikitValueError(
            f"baseline must be a number, one of {FIXED_BASELINES} or an array; got {describe(baseline)}"
        )
    bk = inp.bk
    host = bk.to_numpy(x)
    if bk.is_tensor(features):  # a mask held as a tensor (on any device)
        features = bk.to_numpy(features)
    feats = feature_ids(features, host, axis, segments, method)
    base = baseline_fn(inp, baseline, call.seed)(0)[0]
    return Space(call, feats, axis, base)


def coalition_scores(space: Space, coalitions: np.ndarray, name: str) -> np.ndarray:
    """The explained score of every coalition of every sample.

    Args:
        space: the call's input, features and baseline.
        coalitions: (n, B, F) values in [0, 1], F = ``space.features.width`` (columns past a
            sample's own F_b are not read).
        name: the method's name (progress messages).

    Returns:
        float64 (n, B) scores.
    """
    call = space.call
    inp, bk = call.inp, call.bk
    x = inp.tensors[0]
    B, F = inp.batch, space.features.width
    n = int(coalitions.shape[0])
    if coalitions.shape != (n, B, F):
        raise XaikitValueError(f"coalitions must be (n, {B}, {F}); got {coalitions.shape}")  # internal use
    device = getattr(x, "device", None)
    dtype = bk.dtype_name(x)
    zs = bk.as_tensor(np.ascontiguousarray(coalitions.reshape(n * B * F)), device, dtype)
    ids = bk.as_tensor(space.features.ids, device, "int64")  # (B, P)
    P = int(space.features.ids.shape[1])
    shape = tuple(int(d) for d in x.shape)
    if space.axis is None:
        mshape: tuple[int, ...] = shape[1:]
    elif space.axis == 1:
        mshape = (1, shape[2], shape[3])
    else:
        mshape = (shape[1], shape[2], 1)
    base = space.base

    def rows_fn(r0: int, r1: int) -> list[T]:
        r = bk.arange(r0, r1, device)
        b = r % B
        k = r1 - r0
        # row r is coalition row r of the (n * B, F) matrix: its value for pixel p is
        # zs[r * F + ids[b, p]]
        at = bk.gather(ids, b) + bk.reshape(r * F, (k, 1))
        m = bk.reshape(bk.gather(zs, bk.reshape(at, (k * P,))), (k, *mshape))
        return [bk.gather(x, b) * m + bk.gather(base, b) * (1.0 - m)]

    with for_method(call.progress, B * n, name) as bar:
        return forward_rows(inp, call.targets, n, rows_fn, call.settings(), bar.advance_to)  # type: ignore[arg-type]
