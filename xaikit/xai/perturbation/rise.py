"""Perturbation methods: attributions from forward passes only, no gradients.

* Occlusion — Zeiler & Fergus, 2014, https://arxiv.org/abs/1311.2901, as captum's ``Occlusion``:
  a window (all channels) slides over each image; a pixel's attribution is the mean, over the
  windows covering it, of score(x) - score(x with the window set to ``baseline``).
* RISE — Petsiuk et al., 2018, https://arxiv.org/abs/1806.07421: N random masks (binary
  ``cell`` x ``cell`` grids kept with probability ``p``, upsampled bilinearly and shifted at
  random); saliency = sum_i score(x * M_i) M_i / (N p).

Both are one row space run by the engine's chunked forward passes
(:func:`~xaikit.xai._engine.forward_scores`): row ``r`` is perturbation ``r // B`` of sample
``r % B``, so a chunk of rows needs only its own windows or masks, which are made for that chunk
alone (memory is one chunk of rows whatever the number of windows or masks). The chunk size comes
from the engine's :class:`~xaikit.xai._engine.ChunkPlan` (``max_batch``, ``memory_budget``,
forward-only row costs), and an out-of-memory error halves it. Scores come to the host once, at
the end, where they are folded into the maps in float64.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from xaikit.backend import T
from xaikit.checks import check_int, check_number
from xaikit.errors import XaikitTypeError, XaikitValueError
from xaikit.xai._engine import DEFAULT_BUDGET, forward_rows, stream_seed
from xaikit.xai._progress import for_method
from xaikit.xai.methods import Inputs
from xaikit.xai.registry import Call, Explained, Method, count, register_method

__all__ = ["occlusion", "rise", "rise_masks"]

#: RISE masks are drawn in blocks of this many, each from its own seeded stream, so a mask is a
#: pure function of (seed, its index) whatever the chunking
_MASK_BLOCK = 32
#: default number of RISE masks (see docs/perturbation.md for the cost and noise trade-off)
DEFAULT_MASKS = 1000


# ---- shared ---------------------------------------------------------------------------------------
def _image(inp: Inputs, method: str) -> tuple[int, int, int]:
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


def _mask_rows(bk: Any, masks: np.ndarray, axis: int, like: T) -> T:
    """(n, H, W) host masks as a device tensor broadcasting against (n, ...) rows."""
    shaped = masks[:, None] if axis == 1 else masks[..., None]
    return bk.as_tensor(np.ascontiguousarray(shaped), getattr(like, "device", None), bk.dtype_name(like))


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


def _to_user(inp: Inputs, maps: np.ndarray, axis: int) -> np.ndarray:
    """(B, H, W) maps repeated over the channels, in the caller's layout and dtype."""
    x = inp.tensors[0]
    channels = int(x.shape[axis])
    full = np.repeat(np.expand_dims(maps, axis), channels, axis=axis)
    return inp.to_user([full.astype(inp.dtype)])[0]


# ---- occlusion ------------------------------------------------------------------------------------
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
    *,
    window: Any = None,
    stride: Any = None,
    baseline: Any = 0.0,
    seed: int = 0,
    output: int | str = 0,
    max_batch: int | str = "auto",
    memory_budget: int | float = DEFAULT_BUDGET,
    xla: bool = False,
    progress: bool | None = None,
) -> np.ndarray:
    """Occlusion attributions (captum's ``Occlusion`` with a window over all channels).

    Args:
        inp: one prepared 4-D image input.
        targets: the pinned class of each sample.
        window: the window's (height, width), or one int for both; default an eighth of each
            side, rounded up (:func:`default_window`).
        stride: the step between windows, an int or (height, width); default half the window
            (at least 1).
        baseline: the value a window is set to (a number; default 0).
        progress: report the rows done (``"occlusion: 120/650 rows ..."``): True, False, or None
            (shown once the call has run a few seconds; see :mod:`xaikit.xai._progress`).

    Returns:
        Attributions with the input's shape and layout (the same value on every channel).
    """
    bk = inp.bk
    axis, H, W = _image(inp, "occlusion")
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

    def rows_fn(r0: int, r1: int) -> list[T]:
        r = np.arange(r0, r1)
        k = r // B - 1  # -1: the clean input, then windows iy * nx + ix
        masks = rows_y[k // nx][:, :, None] & rows_x[k % nx][:, None, :]
        masks[k < 0] = False
        m = _mask_rows(bk, masks.astype(np.float32), axis, x)
        xr = bk.gather(x, bk.index(r % B, device))
        return [xr * (1.0 - m) + fill * m]

    with for_method(progress, B * (1 + ny * nx), "occlusion") as bar:
        s = forward_rows(
            inp, targets, 1 + ny * nx, rows_fn, seed=seed, output=output, max_batch=max_batch,
            memory_budget=memory_budget, xla=xla, progress=bar.advance_to,
        )  # fmt: skip
    drop = (s[0][None, :] - s[1:]).reshape(ny, nx, B)  # score(x) - score(occluded), per window
    ry, rx = rows_y.astype(np.float64), rows_x.astype(np.float64)
    total = np.einsum("ijb,ih,jw->bhw", drop, ry, rx)
    counts = ry.sum(0)[:, None] * rx.sum(0)[None, :]  # windows covering each pixel (>= 1)
    return _to_user(inp, total / counts, axis)


# ---- RISE -----------------------------------------------------------------------------------------
def _interp(size: int, cells: int) -> np.ndarray:
    """(size, cells) weights of a bilinear resize of ``cells`` values to ``size``: half-pixel
    centres, mirrored edges (``skimage.transform.resize(order=1, mode="reflect")``, the authors'
    code). Each row sums to 1."""
    out = np.zeros((size, cells))
    if cells == 1:
        out[:, 0] = 1.0
        return out
    u = (np.arange(size) + 0.5) * cells / size - 0.5
    lo = np.floor(u).astype(int)
    t = u - lo
    for idx, wgt in ((lo, 1.0 - t), (lo + 1, t)):
        idx = np.abs(idx)  # mirror at 0: -1 -> 1
        idx = np.where(idx > cells - 1, 2 * (cells - 1) - idx, idx)  # mirror at the end
        np.add.at(out, (np.arange(size), idx), wgt)
    return out


def rise_masks(seed: int, start: int, stop: int, hw: tuple[int, int], cell: int, p: float) -> np.ndarray:
    """RISE masks ``start`` ... ``stop - 1`` of a seed, float32 (stop - start, H, W) in [0, 1].

    Mask i: a ``cell`` x ``cell`` grid of cells kept (1) with probability ``p``, resized
    bilinearly to (cell + 1) x ceil(H / cell) by (cell + 1) x ceil(W / cell) and cut to H x W at
    a random shift of 0 ... ceil(side / cell) - 1 pixels per axis (Petsiuk et al., 2018). A mask
    depends only on (seed, i): masks come in blocks of 32, each from its own stream.

    Example:
        >>> m = rise_masks(0, 3, 5, (16, 16), 4, 0.5)
        >>> m.shape, bool(np.array_equal(m[1], rise_masks(0, 4, 5, (16, 16), 4, 0.5)[0]))
        ((2, 16, 16), True)
    """
    H, W = hw
    cy, cx = math.ceil(H / cell), math.ceil(W / cell)
    ry, rx = _interp((cell + 1) * cy, cell), _interp((cell + 1) * cx, cell)
    grids, shifts = [], []
    for block in range(start // _MASK_BLOCK, (stop - 1) // _MASK_BLOCK + 1):
        gen = np.random.default_rng(stream_seed(seed, 2, block))
        grids.append(gen.random((_MASK_BLOCK, cell, cell)) < p)
        shifts.append(gen.integers(0, [cy, cx], size=(_MASK_BLOCK, 2)))
    first = (start // _MASK_BLOCK) * _MASK_BLOCK
    grid = np.concatenate(grids)[start - first : stop - first].astype(np.float64)
    shift = np.concatenate(shifts)[start - first : stop - first]
    a = ry[shift[:, :1] + np.arange(H)[None, :]]  # (k, H, cell)
    b = rx[shift[:, 1:] + np.arange(W)[None, :]]  # (k, W, cell)
    return (a @ grid @ b.transpose(0, 2, 1)).astype(np.float32)


def rise(
    inp: Inputs,
    targets: T,
    *,
    n_masks: int = DEFAULT_MASKS,
    cell: int = 8,
    p: float = 0.5,
    seed: int = 0,
    output: int | str = 0,
    max_batch: int | str = "auto",
    memory_budget: int | float = DEFAULT_BUDGET,
    xla: bool = False,
    progress: bool | None = None,
) -> np.ndarray:
    """RISE saliency maps: sum_i score(x * M_i) M_i / (N p), one (H, W) map per image.

    Args:
        inp: one prepared 4-D image input.
        targets: the pinned class of each sample.
        n_masks: N, the number of random masks (default 1000).
        cell: the mask grid's cells per side, s (default 8; at most min(H, W)).
        p: the probability that a grid cell is kept (default 0.5).
        progress: report the rows done, as for :func:`occlusion`.

    Returns:
        float (B, H, W) maps, whatever the input's layout (the masks are shared by the channels).
    """
    bk = inp.bk
    axis, H, W = _image(inp, "rise")
    n = check_int(n_masks, "n_masks", 1, kind=XaikitTypeError)
    s = check_int(cell, "cell", 1, min(H, W), kind=XaikitTypeError)
    keep = check_number(p, "p", 0, 1, low_open=True, kind=XaikitTypeError)
    B = inp.batch
    x = inp.tensors[0]
    device = getattr(x, "device", None)

    def rows_fn(r0: int, r1: int) -> list[T]:
        r = np.arange(r0, r1)
        i0, i1 = r0 // B, (r1 - 1) // B + 1
        masks = rise_masks(seed, i0, i1, (H, W), s, keep)  # only this chunk's masks
        m = bk.gather(_mask_rows(bk, masks, axis, x), bk.index(r // B - i0, device))
        return [bk.gather(x, bk.index(r % B, device)) * m]

    with for_method(progress, B * n, "rise") as bar:
        scores = forward_rows(
            inp, targets, n, rows_fn, seed=seed, output=output, max_batch=max_batch,
            memory_budget=memory_budget, xla=xla, progress=bar.advance_to,
        )  # fmt: skip
    total = np.zeros((B, H * W))
    for i0 in range(0, n, _MASK_BLOCK):  # fold in blocks: the masks again, one block at a time
        i1 = min(n, i0 + _MASK_BLOCK)
        block = rise_masks(seed, i0, i1, (H, W), s, keep).reshape(i1 - i0, -1).astype(np.float64)
        total += scores[i0:i1].T @ block
    return (total / (n * keep)).reshape(B, H, W).astype(inp.dtype)


def _occlusion(call: Call, **options: Any) -> Explained:
    return Explained([occlusion(
        call.inp, call.targets, seed=call.seed, output=call.output, max_batch=call.max_batch,  # type: ignore[arg-type]
        memory_budget=call.memory_budget, xla=call.xla, progress=call.progress, **options,
    )])  # fmt: skip


def _rise(call: Call, **options: Any) -> Explained:
    return Explained([rise(
        call.inp, call.targets, seed=call.seed, output=call.output, max_batch=call.max_batch,  # type: ignore[arg-type]
        memory_budget=call.memory_budget, xla=call.xla, progress=call.progress, **options,
    )])  # fmt: skip


def _check_rise(options: dict[str, Any]) -> None:
    for key in ("n_masks", "cell"):
        count(options.get(key), key)
    if "p" in options:
        check_number(options["p"], "p", 0, 1, low_open=True, kind=XaikitTypeError)


register_method(
    Method(
        "occlusion",
        "perturbation",
        "Occlusion",
        _occlusion,
        {"window": None, "stride": None, "baseline": 0.0},
        gradients=False,
        slow=True,
        summary="the score's drop when a window of the image is set to a baseline",
        reference="Zeiler & Fergus, 2014, https://arxiv.org/abs/1311.2901",
    )
)
register_method(
    Method(
        "rise",
        "perturbation",
        "RISE",
        _rise,
        {"n_masks": DEFAULT_MASKS, "cell": 8, "p": 0.5},
        result="map",
        gradients=False,
        noise=True,
        slow=True,
        check=_check_rise,
        summary="the score of randomly masked copies, averaged per pixel over the masks that keep it",
        reference="Petsiuk et al., 2018, https://arxiv.org/abs/1806.07421",
    )
)
