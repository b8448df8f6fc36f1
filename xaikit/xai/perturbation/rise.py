"""RISE — Petsiuk et al., 2018, https://arxiv.org/abs/1806.07421: N random masks (binary
``cell`` x ``cell`` grids kept with probability ``p``, upsampled bilinearly and shifted at
random); saliency = sum_i score(x * M_i) M_i / (N p). Row ``r`` of its row space is mask
``r // B`` of sample ``r % B``; a chunk's masks are drawn for that chunk alone.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from xaikit.backend import T
from xaikit.checks import check_int, check_number
from xaikit.errors import XaikitTypeError
from xaikit.xai._engine.chunks import forward_rows
from xaikit.xai._engine.inputs import Inputs
from xaikit.xai._engine.progress import for_method
from xaikit.xai._engine.seeds import stream_seed
from xaikit.xai.perturbation._image import one_image, register_perturbation
from xaikit.xai.registry import Call, CallSettings, Explained, count

__all__ = ["rise", "rise_masks"]


#: RISE masks are drawn in blocks of this many, each from its own seeded stream, so a mask is a
#: pure function of (seed, its index) whatever the chunking
_MASK_BLOCK = 32
#: the fold of the scores into maps takes masks in blocks of about this many values (64 MiB in
#: float32: 334 masks of 224 x 224, 3 blocks for 1,000 masks instead of 32 blocks of 32)
_FOLD_ELEMENTS = 2**24
#: default number of RISE masks (see docs/perturbation.md for the cost and noise trade-off)
DEFAULT_MASKS = 1000


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
    grid, shift = _draws(seed, start, stop, (cy, cx), cell, p)
    a = ry[shift[:, :1] + np.arange(H)[None, :]]  # (k, H, cell)
    b = rx[shift[:, 1:] + np.arange(W)[None, :]]  # (k, W, cell)
    return (a @ grid.astype(np.float64) @ b.transpose(0, 2, 1)).astype(np.float32)


def _draws(
    seed: int, start: int, stop: int, shifts: tuple[int, int], cell: int, p: float
) -> tuple[np.ndarray, np.ndarray]:
    """The seeded draws of masks ``start`` ... ``stop - 1``: their bool (k, cell, cell) grids
    and int (k, 2) shifts (each below ``shifts``), from one stream per block of 32 masks.

    Copies of draws kept for the next calls with the same arguments (8 at most: n x cell x cell
    bytes each): making the streams is most of a GPU call's host time (about 7 ms of 94 for
    1,000 masks on an H100 machine), and a trace or a dataset explained batch by batch draws the
    same masks every time."""
    grid, shift = _kept_draws(int(seed), int(start), int(stop), shifts, int(cell), float(p))
    return grid.copy(), shift.copy()


@functools.lru_cache(maxsize=8)
def _kept_draws(
    seed: int, start: int, stop: int, shifts: tuple[int, int], cell: int, p: float
) -> tuple[np.ndarray, np.ndarray]:
    grids, moves = [], []
    for block in range(start // _MASK_BLOCK, (stop - 1) // _MASK_BLOCK + 1):
        gen = np.random.default_rng(stream_seed(seed, 2, block))
        grids.append(gen.random((_MASK_BLOCK, cell, cell)) < p)
        moves.append(gen.integers(0, list(shifts), size=(_MASK_BLOCK, 2)))
    first = (start // _MASK_BLOCK) * _MASK_BLOCK
    grid = np.concatenate(grids)[start - first : stop - first]
    shift = np.concatenate(moves)[start - first : stop - first]
    return grid, shift


class _DeviceMasks:
    """RISE masks ``0 ... n - 1`` made on the device: their seeded grids and shifts are drawn on
    the host as :func:`rise_masks` draws them (small: n x cell x cell) and uploaded once; the
    bilinear resize and the shifted crop of each chunk's masks run on the device in the rows'
    dtype (the same masks as :func:`rise_masks` to that dtype's rounding), with no host copy."""

    def __init__(self, bk: Any, seed: int, n: int, hw: tuple[int, int], cell: int, p: float, like: T) -> None:
        self.bk, self.hw, self.cell = bk, hw, cell
        device, dtype = getattr(like, "device", None), bk.dtype_name(like)
        H, W = hw
        shifts = (math.ceil(H / cell), math.ceil(W / cell))
        self.ry = bk.as_tensor(_interp((cell + 1) * shifts[0], cell), device, dtype)
        self.rx = bk.as_tensor(_interp((cell + 1) * shifts[1], cell), device, dtype)
        grid, shift = _draws(seed, 0, n, shifts, cell, p)
        self.grid = bk.as_tensor(grid, device, dtype)  # (n, cell, cell)
        # each mask's rows and columns of the resized grid: shift + 0 ... H - 1 (W - 1)
        self.ys = bk.as_tensor(shift[:, :1], device, "int64") + bk.reshape(bk.arange(0, H, device), (1, H))
        self.xs = bk.as_tensor(shift[:, 1:], device, "int64") + bk.reshape(bk.arange(0, W, device), (1, W))

    def __call__(self, start: int, stop: int) -> T:
        """Masks ``start`` ... ``stop - 1``, (k, H, W) on the device."""
        bk, (H, W), k, s = self.bk, self.hw, stop - start, self.cell
        a = bk.reshape(bk.gather(self.ry, bk.reshape(self.ys[start:stop], (k * H,))), (k, H, s))
        b = bk.reshape(bk.gather(self.rx, bk.reshape(self.xs[start:stop], (k * W,))), (k, W, s))
        return bk.matmul(bk.matmul(a, self.grid[start:stop]), bk.moveaxis(b, 1, 2))


def rise(
    inp: Inputs,
    targets: T,
    settings: CallSettings,
    *,
    nsamples: int = DEFAULT_MASKS,
    cell: int = 8,
    p: float = 0.5,
) -> np.ndarray:
    """RISE saliency maps: sum_i score(x * M_i) M_i / (N p), one (H, W) map per image.

    Args:
        inp: one prepared 4-D image input.
        targets: the pinned class of each sample (its sample index with a target object).
        settings: the call's settings (``seed`` draws the masks; ``progress`` reports the rows
            done, as for :func:`~xaikit.xai.perturbation.occlusion.occlusion`).
        nsamples: N, the number of random masks (default 1000; ``n_masks`` before, still taken
            by ``explain`` with a ``FutureWarning``).
        cell: the mask grid's cells per side, s (default 8; at most min(H, W)).
        p: the probability that a grid cell is kept (default 0.5).

    Returns:
        float (B, H, W) maps, whatever the input's layout (the masks are shared by the channels).
    """
    bk = inp.bk
    axis, H, W = one_image(inp, "rise")
    n = check_int(nsamples, "nsamples", 1, kind=XaikitTypeError)
    s = check_int(cell, "cell", 1, min(H, W), kind=XaikitTypeError)
    keep = check_number(p, "p", 0, 1, low_open=True, kind=XaikitTypeError)
    B = inp.batch
    x = inp.tensors[0]
    device = getattr(x, "device", None)

    masks_of = _DeviceMasks(bk, settings.seed, n, (H, W), s, keep, x)
    shape = (1, H, W) if axis == 1 else (H, W, 1)

    def rows_fn(r0: int, r1: int) -> list[T]:
        r = bk.arange(r0, r1, device)
        i0, i1 = r0 // B, (r1 - 1) // B + 1
        masks = bk.reshape(masks_of(i0, i1), (i1 - i0, *shape))  # only this chunk's masks
        return [bk.gather(x, r % B) * bk.gather(masks, r // B - i0)]

    with for_method(settings.progress, B * n, "rise") as bar:
        scores = forward_rows(inp, targets, n, rows_fn, settings, bar.advance_to)
    # fold on the device, a block of masks at a time (the masks again, as the rows had them),
    # blocks of about _FOLD_ELEMENTS mask values: few launches, bounded memory
    weights = bk.as_tensor(np.ascontiguousarray(scores.T), device, bk.dtype_name(x))  # (B, n)
    total = None
    fold = max(_MASK_BLOCK, _FOLD_ELEMENTS // (H * W))
    for i0 in range(0, n, fold):
        i1 = min(n, i0 + fold)
        part = bk.matmul(weights[:, i0:i1], bk.reshape(masks_of(i0, i1), (i1 - i0, H * W)))
        total = part if total is None else total + part
    host = bk.to_numpy(total).astype(np.float64)
    return (host / (n * keep)).reshape(B, H, W).astype(inp.dtype)


def _rise(call: Call, **options: Any) -> Explained:
    return Explained([rise(call.inp, call.targets, call.settings(), **options)])


def _check_rise(options: dict[str, Any]) -> None:
    for key in ("nsamples", "cell"):
        count(options.get(key), key)
    if "p" in options:
        check_number(options["p"], "p", 0, 1, low_open=True, kind=XaikitTypeError)


register_perturbation(
    "rise",
    "RISE",
    _rise,
    {"nsamples": DEFAULT_MASKS, "cell": 8, "p": 0.5},
    renamed={"n_masks": "nsamples"},
    result="map",
    noise=True,
    units="none",  # a mean of masked scores, not a change of the score
    check=_check_rise,
    summary="the score of randomly masked copies, averaged per pixel over the masks that keep it",
    reference="Petsiuk et al., 2018, https://arxiv.org/abs/1806.07421",
)
