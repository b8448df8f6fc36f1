"""XRAI: image regions ranked by the Integrated-Gradients attribution they hold per pixel.

Kapishnikov, Bolukbasi, Viégas and Terry, 2019, "XRAI: Better Attributions Through Regions",
https://arxiv.org/abs/1906.02825. The behaviour matched is PAIR ``saliency``'s ``XRAI``
(``GetMaskWithDetails``, ``XRAIParameters``), one image at a time there, a batch here.

What it answers: *which regions of the image* make the model's score for the class, ranked. A
pixel attribution (Integrated Gradients) is noisy at the pixel level; XRAI pools it over
candidate regions from an over-segmentation of the image and grows the explanation region by
region, always adding the one with the highest attribution density (mean attribution per newly
added pixel). The map it returns is constant on each region, holding that region's density, so
thresholding it at any level gives the top regions that cover that fraction of the image.

The algorithm, per image:

1. **Attributions.** Integrated Gradients from each baseline (default: two constant images, the
   sample's minimum and its maximum), PAIR's rule (nodes ``linspace(0, 1, steps)``, weights
   1 / steps), averaged over the baselines, then the maximum over channels: an (H, W) map.
   Every row of every image and baseline (B x baselines x steps) runs through the fused engine
   in one sweep: the engine's noise index selects the baseline.
2. **Candidate regions.** Felzenszwalb's graph segmentation (scikit-image) of the image scaled
   to [-1, 1] and resized to 224 x 224, at the scales 50, 100, 150, 250, 500 and 1200 (sigma
   0.8, minimum segment 150 pixels), each label map resized back (nearest) to (H, W); every
   label of every scale is a candidate, dilated by a disk of radius 5. All the labels of one
   image are dilated at once (one vectorized scatter per offset of the disk, only for pixels
   near a label edge) instead of one morphological dilation per mask. The image segmented is
   the input as the model reads it (in the model's dtype, channels last); the candidates are
   PAIR's bit for bit. (A constant image is scaled to all -1, where PAIR divides by zero.)
3. **Greedy ranking** (``algorithm="full"``): while the covered area is at most
   ``area_threshold``, drop every candidate that would add fewer than ``min_pixel_diff``
   uncovered pixels, and add the one with the highest gain (mean attribution over the pixels it
   adds; ties go to the earliest candidate). The gains of all candidates are held in a vector
   and, after each step, recomputed only for the candidates that touch the newly covered pixels
   (one sparse matrix-vector product), exactly as a recomputation from scratch would give them.
   ``algorithm="fast"`` ranks the candidates once by their own density and adds them in that
   order, skipping those that add fewer than ``min_pixel_diff`` pixels (it ignores
   ``area_threshold``).
4. **Map.** Each added region holds its gain; pixels no region covered hold the mean
   attribution over them. The regions are listed by gain, highest first, the uncovered
   remainder (if any) last.

Images are independent: their segmentations and rankings run in a thread pool of one thread
per CPU core (scikit-image's Felzenszwalb and the resizes release the GIL: on 2 free cores a
batch segments about 1.9x faster than on one). On an accelerator the pool starts before the
gradient sweep, so that segmentation overlaps the model's work; on a CPU it starts after it (the
sweep's threads and the pool's would only contend for the same cores). Felzenszwalb at 224 x 224
and six scales (about 0.3 s of CPU per image, whatever the image's size) is the floor of the
method's cost, as it is of PAIR's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from xaikit.backend import T
from xaikit.checks import check_choice, check_int, check_number
from xaikit.errors import XaikitTypeError, XaikitValueError, describe
from xaikit.xai._engine.baselines import BASELINES, check_baseline
from xaikit.xai._engine.inputs import Inputs
from xaikit.xai._engine.job import Job
from xaikit.xai._engine.progress import for_method
from xaikit.xai._engine.quadrature import quadrature
from xaikit.xai._engine.sweep import sweep
from xaikit.xai._engine.threads import host_threads
from xaikit.xai.gradient.sweep import baseline_fn
from xaikit.xai.registry import Call, CallSettings, Explained, Method, register_method

__all__ = ["OPTIONS", "XraiResult", "candidate_masks", "rank_regions", "run"]

#: the options of ``explain(method="xrai")`` and their defaults (the record's options)
_DEFAULTS: dict[str, Any] = {
    "steps": 100,
    "baselines": None,
    "area_threshold": 1.0,
    "algorithm": "full",
    "min_pixel_diff": 50,
    "segments": None,
    "raw": False,
    "nsamples": None,
    "stdev_spread": 0.15,
}
#: the options of ``explain(method="xrai")`` (besides ``output`` and ``model_kwargs``)
OPTIONS = tuple(_DEFAULTS)
ALGORITHMS = ("full", "fast")

# Felzenszwalb settings of PAIR's XRAI: scales, smoothing, working size, value range, minimum
# segment size, and the radius of the disk each candidate is dilated by.
_SCALES = (50, 100, 150, 250, 500, 1200)
_SIGMA = 0.8
_WORK_SIZE = (224, 224)
_MIN_SEGMENT = 150
_DILATION = 5


@dataclass
class XraiResult:
    """What ``explain(method="xrai", raw=True)`` returns.

    Attributes:
        maps: (B, H, W) float32, the XRAI maps (what ``raw=False`` returns): each region holds
            its gain (the mean attribution over the pixels it added), the uncovered remainder
            the mean attribution over it.
        regions: per image, an (n, H, W) bool array of the regions in the order of their gain,
            highest first; they are disjoint and together cover the image. When the regions
            added left pixels uncovered (``area_threshold`` < 1, or candidates that cover only
            part of the image), those pixels form the last region.
        gains: per image, (n,) float64: each region's value in the map (for the remainder: the
            mean attribution over it).
        remainder: (B,) bool: whether the image's last region is the uncovered remainder (it
            is then listed last whatever its gain).
        attributions: the Integrated-Gradients attributions the regions were ranked by, the mean
            over the baselines (and noise samples), with the input's shape and layout, in the
            model's working dtype (float32 for float32 and half-precision models); XRAI ranks by
            their maximum over channels.
    """

    maps: np.ndarray
    regions: list[np.ndarray]
    gains: list[np.ndarray]
    remainder: np.ndarray
    attributions: np.ndarray


@dataclass
class _Options:
    steps: int
    baselines: list[Any] | None
    area_threshold: float
    algorithm: str
    min_pixel_diff: int
    segments: Any
    raw: bool
    nsamples: int | None
    stdev_spread: float


def _check_options(options: Mapping[str, Any]) -> _Options:
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise XaikitTypeError(
            f"explain(method='xrai') got unknown option(s) {unknown}; its options are "
            f"{', '.join(OPTIONS)}, output and model_kwargs"
        )
    options = {**_DEFAULTS, **options}
    algorithm = check_choice(options["algorithm"], "algorithm", ALGORITHMS)
    raw = options["raw"]
    if not isinstance(raw, (bool, np.bool_)):
        raise XaikitTypeError(f"raw must be True or False; got {describe(raw)}")
    baselines = options["baselines"]
    if baselines is not None:
        if isinstance(baselines, (str, Mapping)) or not isinstance(baselines, (list, tuple)):
            raise XaikitTypeError(
                "baselines must be None (the sample's minimum and maximum, as constant images) or "
                f"a list of baselines (arrays or names from {BASELINES}); got {describe(baselines)}"
            )
        if not baselines:
            raise XaikitValueError("baselines must hold at least one baseline; got an empty list")
        for i, spec in enumerate(baselines):
            check_baseline(spec, name=f"baselines[{i}]")
        baselines = list(baselines)
    nsamples = options["nsamples"]
    return _Options(
        steps=check_int(options["steps"], "steps", 1),
        baselines=baselines,
        area_threshold=float(check_number(options["area_threshold"], "area_threshold", low=0, high=1)),
        algorithm=algorithm,
        min_pixel_diff=check_int(options["min_pixel_diff"], "min_pixel_diff", 1),
        segments=options["segments"],
        raw=bool(raw),
        nsamples=None if nsamples is None else check_int(nsamples, "nsamples", 1, allow_none=True),
        stdev_spread=float(check_number(options["stdev_spread"], "stdev_spread", low=0)),
    )


def _image_axes(inp: Inputs) -> tuple[int, int, int]:
    """``(channel axis, H, W)`` of the one image input, in the model's layout, or a clear error."""
    if len(inp.tensors) != 1:
        raise XaikitValueError(
            f"method 'xrai' explains one image input; got {len(inp.tensors)} inputs ({inp.keys}): "
            "a model with several inputs cannot be explained by regions of one image"
        )
    shape = tuple(int(d) for d in inp.tensors[0].shape)
    axis = inp.channel_axes[0]
    if len(shape) != 4 or axis not in (1, 3):
        user = shape
        if inp.moves[0] is not None:
            user = tuple(np.moveaxis(np.empty(shape, dtype=np.int8), inp.moves[0][1], inp.moves[0][0]).shape)
        raise XaikitValueError(
            f"method 'xrai' explains image batches: x must be (B, C, H, W) or (B, H, W, C); got shape {user}"
        )
    h, w = (shape[2], shape[3]) if axis == 1 else (shape[1], shape[2])
    return axis, h, w


def _check_segments(segments: Any, batch: int, h: int, w: int) -> list[np.ndarray]:
    """User segments as one (n, H*W) bool array per image."""
    expected = (
        f"segments must be None or one list of boolean (H, W) = ({h}, {w}) masks per image ({batch} images)"
    )
    if isinstance(segments, (str, bytes, Mapping)) or not isinstance(segments, (list, tuple, np.ndarray)):
        raise XaikitTypeError(f"{expected}; got {describe(segments)}")
    if len(segments) != batch:
        raise XaikitValueError(f"{expected}; got {len(segments)} entries")
    out = []
    for b, masks in enumerate(segments):
        if isinstance(masks, np.ndarray) and masks.ndim == 3:
            masks = list(masks)
        if not isinstance(masks, (list, tuple)):
            raise XaikitTypeError(f"{expected}; segments[{b}] is {describe(masks)}")
        flat = np.zeros((len(masks), h * w), dtype=bool)
        for i, mask in enumerate(masks):
            arr = np.asarray(mask)
            if arr.shape != (h, w) or arr.dtype.kind not in "biuf":
                raise XaikitValueError(f"{expected}; segments[{b}][{i}] is {describe(mask)}")
            if arr.dtype.kind != "b" and not np.all((arr == 0) | (arr == 1)):
                raise XaikitValueError(
                    f"{expected}; segments[{b}][{i}] holds values other than 0 and 1 ({describe(mask)})"
                )
            flat[i] = arr.reshape(-1).astype(bool)
        out.append(flat)
    return out


# ---- the Integrated-Gradients part ----------------------------------------------------------------
def integrated_gradients(
    inp: Inputs,
    targets: T,
    baselines: Sequence[Any] | None,
    steps: int,
    settings: CallSettings,
    *,
    nsamples: int | None = None,
    stdev_spread: float = 0.15,
    progress: Callable[[int], None] | None = None,
) -> T:
    """The mean over baselines of PAIR's Integrated Gradients, in ONE fused sweep.

    The engine's noise index ``s`` selects the path: baseline ``s % K`` of the K baselines (and,
    with ``nsamples``, noise sample ``s // K``: SmoothGrad of the IG part, each noisy copy with
    its own draw); the sweep's mean over ``s`` is then the mean over baselines (and noise).
    ``progress`` is told the rows done after each chunk (B x K x noise samples x steps rows).
    A target object (``settings.target``) scores the rows (``targets`` are then sample indices).

    Returns:
        The attributions in the model's layout, on the model's device, (B, ...).
    """
    bk = inp.bk
    x = inp.tensors[0]
    if baselines is None:  # PAIR: constant images of the sample's minimum and maximum
        makers = [lambda s: [x * 0.0 + bk.sample_min(x)], lambda s: [x * 0.0 + bk.sample_max(x)]]
    else:
        makers = [baseline_fn(inp, spec, settings.seed) for spec in baselines]
    k = len(makers)

    def baseline(s: int) -> list[T]:
        return makers[s % k](s)  # type: ignore[no-any-return]

    job = Job.over(inp, targets, settings)
    job.n_noise = k * (nsamples or 1)
    job.alphas, job.weights = quadrature("linspace", steps)
    job.baselines = baseline
    job.progress = progress
    if nsamples is not None:
        job.sigma = [stdev_spread * (bk.sample_max(t) - bk.sample_min(t)) for t in inp.tensors]
    return sweep(job, settings.memory_budget).attributions[0]


# ---- candidate regions ----------------------------------------------------------------------------
def _normalized(image: np.ndarray) -> np.ndarray:
    """PAIR's ``_normalize_image``: values scaled to [-1, 1] over the whole image, then resized to
    224 x 224 (bicubic, anti-aliased). A constant image becomes all -1 (PAIR divides by zero)."""
    from skimage.transform import resize

    lo, hi = np.min(image), np.max(image)
    scaled = (image - lo) / (hi - lo) if hi > lo else np.zeros_like(image)
    scaled = scaled * 2.0 + -1.0
    return resize(scaled, _WORK_SIZE, order=3, mode="constant", preserve_range=True, anti_aliasing=True)  # type: ignore[no-any-return]


def label_maps(image: np.ndarray) -> list[np.ndarray]:
    """The Felzenszwalb label maps of one (H, W, C) image at PAIR's six scales, each (H, W) int.

    Bit for bit PAIR's segmentation (``_get_segments_felzenszwalb`` before the masks)."""
    from skimage.segmentation import felzenszwalb
    from skimage.transform import resize

    work = _normalized(image)
    size = image.shape[:2]
    out = []
    for scale in _SCALES:
        seg = felzenszwalb(work, scale=scale, sigma=_SIGMA, min_size=_MIN_SEGMENT)
        seg = resize(seg, size, order=0, preserve_range=True, mode="constant", anti_aliasing=False)
        out.append(seg.astype(int))
    return out


@lru_cache(maxsize=8)
def _disk_offsets(radius: int) -> np.ndarray:
    """(k, 2) offsets (dy, dx) of scikit-image's ``disk(radius)``, the centre left out."""
    from skimage.morphology import disk

    offsets = np.argwhere(disk(radius)) - radius
    return offsets[np.any(offsets != 0, axis=1)]


def dilated_masks(segs: Sequence[np.ndarray], radius: int = _DILATION) -> np.ndarray:
    """Every label of every label map as a mask dilated by a disk of ``radius``: (n, H*W) bool.

    Row order is PAIR's: map by map, labels ``min .. max`` of each (a label missing from the
    resized map gives an empty row). Pixel p belongs to label l's dilated mask when some pixel
    p + o, o in the disk, has label l. Each pixel's own label first; then only pixels near an
    edge (within a box of side 2 * radius + 1 of a pixel whose 4-neighbour has another label)
    can see another label in their disk, and for those, per offset of the disk, one gather from
    the label maps padded with a junk label and one scatter of the labels that differ, all the
    maps at once. Equal to scikit-image's ``dilation`` of each mask (its border reflection adds
    nothing for a disk), without one dilation per mask.
    """
    from scipy import ndimage

    h, w = segs[0].shape
    lows = [int(s.min()) for s in segs]
    counts = [int(s.max()) - lo + 1 for s, lo in zip(segs, lows)]
    starts = np.cumsum([0, *counts[:-1]])
    total = sum(counts)
    grid = np.stack([(s - lo + st) for s, lo, st in zip(segs, lows, starts)]).astype(np.intp)
    member = np.zeros((total + 1, h * w), dtype=bool)  # the last row: the junk label, dropped
    member[grid.reshape(len(segs), -1), np.arange(h * w)] = True
    if radius > 0:
        edge = np.zeros(grid.shape, dtype=bool)
        step_y, step_x = grid[:, 1:] != grid[:, :-1], grid[:, :, 1:] != grid[:, :, :-1]
        edge[:, 1:] |= step_y
        edge[:, :-1] |= step_y
        edge[:, :, 1:] |= step_x
        edge[:, :, :-1] |= step_x
        near = ndimage.maximum_filter(edge, size=(1, 2 * radius + 1, 2 * radius + 1), mode="constant")
        wp = w + 2 * radius
        padded = np.full((len(segs), h + 2 * radius, wp), total, dtype=np.intp)
        padded[:, radius : radius + h, radius : radius + w] = grid
        flat = padded.reshape(-1)
        s_idx, ys, xs = np.nonzero(near)
        centre = (s_idx * (h + 2 * radius) + ys + radius) * wp + xs + radius
        own = flat[centre]
        pixel = ys * w + xs
        for dy, dx in _disk_offsets(radius):
            seen = flat[centre + (dy * wp + dx)]
            other = seen != own
            member[seen[other], pixel[other]] = True
    return member[:total]


def candidate_masks(image: np.ndarray) -> np.ndarray:
    """PAIR's XRAI candidate regions of one (H, W, C) image: (n, H*W) bool, dilated."""
    return dilated_masks(label_maps(image))


# ---- ranking --------------------------------------------------------------------------------------
def _csr(masks: np.ndarray) -> Any:
    """(n, P) bool masks as a float64 CSR matrix of ones (columns sorted within each row)."""
    from scipy import sparse

    n, p = masks.shape
    rows, cols = np.nonzero(masks)
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=n), out=indptr[1:])
    return sparse.csr_matrix((np.ones(len(cols)), cols, indptr), shape=(n, p))


def _density(values: np.ndarray) -> float:
    return float(np.sum(values) / len(values))


def _rank_full(
    m: Any, attr: np.ndarray, area_threshold: float, min_pixel_diff: int
) -> list[tuple[np.ndarray, float]]:
    """Greedy regions of PAIR's ``XRAI._xrai``: (pixels added, gain) in the order added.

    ``counts`` and ``sums`` hold, per candidate, the number of uncovered pixels it would add and
    their attribution sum. A CSR row product sums a row's entries in column order, and a covered
    pixel enters as an exact 0, so a candidate's sum depends only on its uncovered pixels: after
    each step only the candidates touching the new pixels are recomputed, and every value is
    the one a recomputation of all candidates from scratch would give (two candidates adding the
    same pixels get bit-equal gains, and the earlier one wins, as in PAIR).
    """
    n, p = m.shape
    cols_of = m.tocsc()
    uncovered = np.ones(p)
    weighted = attr.copy()
    counts = m @ uncovered
    sums = m @ weighted
    alive = np.ones(n, dtype=bool)
    covered = 0
    out = []
    while covered / p <= area_threshold:
        alive &= counts >= min_pixel_diff
        if not alive.any():
            break
        gains = np.full(n, -np.inf)
        gains[alive] = sums[alive] / counts[alive]
        best = int(np.argmax(gains))
        row = m.indices[m.indptr[best] : m.indptr[best + 1]]
        new = row[uncovered[row] > 0]
        out.append((new, float(gains[best])))
        uncovered[new] = 0.0
        weighted[new] = 0.0
        covered += len(new)
        alive[best] = False
        touched = np.unique(cols_of[:, new].indices)
        touched = touched[alive[touched]]
        if len(touched):
            sub = m[touched]
            counts[touched] = sub @ uncovered
            sums[touched] = sub @ weighted
    return out


def _rank_fast(m: Any, attr: np.ndarray, min_pixel_diff: int) -> list[tuple[np.ndarray, float]]:
    """Regions of PAIR's ``XRAI._xrai_fast``: candidates sorted once by their own density (ties
    keep their order, empty ones last), added in that order unless they add fewer than
    ``min_pixel_diff`` uncovered pixels; (pixels added, gain) in the order added."""
    n, p = m.shape
    counts = np.diff(m.indptr)
    sums = m @ attr
    density = np.full(n, -np.inf)
    density[counts > 0] = sums[counts > 0] / counts[counts > 0]
    covered = np.zeros(p, dtype=bool)
    out = []
    for i in np.argsort(-density, kind="stable"):
        row = m.indices[m.indptr[i] : m.indptr[i + 1]]
        new = row[~covered[row]]
        if len(new) < min_pixel_diff:
            continue
        out.append((new, _density(attr[new])))
        covered[row] = True
    return out


def rank_regions(
    masks: np.ndarray,
    attr: np.ndarray,
    *,
    algorithm: str = "full",
    area_threshold: float = 1.0,
    min_pixel_diff: int = 50,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, bool]:
    """XRAI's regions of one image from its candidate masks and its (H, W) attribution map.

    Args:
        masks: (n, H*W) or (n, H, W) bool candidate regions, in the order ties are broken by.
        attr: (H, W) attributions (the channel maximum of Integrated Gradients).
        algorithm: ``"full"`` (greedy, overlaps accounted for) or ``"fast"`` (one sort).
        area_threshold: ``"full"`` stops adding regions once they cover more than this fraction.
        min_pixel_diff: a candidate that adds fewer uncovered pixels is dropped.

    Returns:
        ``(map, regions, gains, remainder)``: the (H, W) float64 map, the (k, H, W) bool regions
        ranked by gain (the uncovered remainder last when there is one), their (k,) gains, and
        whether the last region is that remainder.

    Example:
        >>> attr = np.array([[1.0, 1.0, 0.0], [1.0, 1.0, 0.0], [5.0, 0.0, 0.0]])
        >>> masks = np.array([[[1, 1, 0], [1, 1, 0], [0, 0, 0]], [[0, 0, 0], [0, 0, 0], [1, 1, 1]]], bool)
        >>> xmap, regions, gains, rest = rank_regions(masks, attr, min_pixel_diff=1)
        >>> gains.tolist(), bool(rest)   # the bottom row (5/3), the square (1), the rest (0)
        ([1.6666666666666667, 1.0, 0.0], True)
        >>> xmap.tolist()
        [[1.0, 1.0, 0.0], [1.0, 1.0, 0.0], [1.6666666666666667, 1.6666666666666667, 1.6666666666666667]]
    """
    attr = np.asarray(attr, dtype=np.float64)
    h, w = attr.shape
    flat_attr = attr.reshape(-1)
    m = _csr(np.asarray(masks, dtype=bool).reshape(len(masks), h * w))
    if algorithm == "full":
        added = _rank_full(m, flat_attr, area_threshold, min_pixel_diff)
    else:
        added = _rank_fast(m, flat_attr, min_pixel_diff)
    xmap = np.full(h * w, -np.inf)
    for pixels, gain in added:
        xmap[pixels] = gain
    order = sorted(range(len(added)), key=lambda i: -added[i][1])  # stable, as PAIR's
    regions = np.zeros((len(added), h * w), dtype=bool)
    for r, i in enumerate(order):
        regions[r, added[i][0]] = True
    gains = np.array([added[i][1] for i in order], dtype=np.float64)
    rest = xmap == -np.inf
    remainder = bool(rest.any())
    if remainder:
        xmap[rest] = _density(flat_attr[rest])
        regions = np.concatenate([regions, rest[None]])
        gains = np.append(gains, xmap[rest][0])
    return xmap.reshape(h, w), regions.reshape(-1, h, w), gains, remainder


# ---- the method -----------------------------------------------------------------------------------
def run(
    inp: Inputs,
    targets: T,
    settings: CallSettings,
    *,
    return_delta: bool = False,
    **options: Any,
) -> np.ndarray | XraiResult:
    """XRAI maps of a batch of images (``explain(model, x, method="xrai", ...)`` calls this).

    Args:
        inp: the prepared inputs (one image input, (B, C, H, W) or (B, H, W, C)).
        targets: int64 (B,) classes on the model's device (pinned by the caller; sample
            indices with a target object, which the IG part then explains).
        settings: the call's settings: ``seed`` draws random baselines (``"uniform"``) and the
            noise with ``nsamples``; ``max_batch`` and ``memory_budget`` chunk the IG sweep;
            ``progress`` reports the IG sweep's rows (``"xrai (IG sweep): 200/400 rows ..."``),
            then the images whose regions are ranked (``"xrai (regions): 1/2 images ..."``).
        return_delta: refused: XRAI has no completeness delta.
        **options: ``steps`` (IG steps, 100), ``baselines`` (None: two constant images, each
            sample's minimum and maximum; or a list of arrays broadcastable to the input in the
            caller's layout, or baseline names such as ``"zeros"``, ``"black"``, ``"blur"``),
            ``area_threshold`` (1.0: the fraction of the image ``"full"`` covers with ranked
            regions before it lumps the rest together), ``algorithm`` (``"full"`` or
            ``"fast"``), ``min_pixel_diff`` (50: candidates adding fewer new pixels are
            dropped), ``segments`` (None: Felzenszwalb candidates; or per image a list of
            boolean (H, W) masks, used as they are, undilated), ``raw`` (False: the maps; True:
            an :class:`XraiResult`), ``nsamples`` (None; an int: SmoothGrad of the IG part with
            that many noisy copies per baseline, noise sigma ``stdev_spread`` (0.15) x the
            sample's value range; PAIR has no such option).

    Returns:
        (B, H, W) float32 XRAI maps, or an :class:`XraiResult` with ``raw=True``.

    Example:
        >>> import torch, xaikit as xk
        >>> model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.Flatten(), torch.nn.LazyLinear(2))
        >>> _ = model(torch.zeros(1, 3, 16, 16))
        >>> maps = xk.xai.explain(model, torch.rand(2, 3, 16, 16), method="xrai", steps=8)
        >>> maps.shape, maps.dtype
        ((2, 16, 16), dtype('float32'))
    """
    if return_delta:
        raise XaikitValueError(
            "return_delta is the completeness delta of IG-based methods; XRAI's region map has none "
            "(its regions re-weight the attributions): call explain without return_delta"
        )
    opts = _check_options(options)
    axis, h, w = _image_axes(inp)
    bk, batch = inp.bk, inp.batch
    given = None if opts.segments is None else _check_segments(opts.segments, batch, h, w)
    # On an accelerator the host segments while the device runs the sweep; on a CPU the sweep
    # has the cores to itself first (its threads and the pool's would only contend).
    overlap = given is None and bk.is_accelerator(bk.model_device(inp.model))
    with ThreadPoolExecutor(max_workers=host_threads(batch)) as pool:
        candidates: list[Future[np.ndarray]] = []
        images = None
        if given is None:
            images = bk.to_numpy(inp.tensors[0])
            images = np.moveaxis(images, 1, -1) if axis == 1 else images
        if overlap:
            candidates = [pool.submit(candidate_masks, image) for image in images]  # type: ignore[union-attr]
        paths = (2 if opts.baselines is None else len(opts.baselines)) * (opts.nsamples or 1)
        with for_method(settings.progress, batch * paths * opts.steps, "xrai (IG sweep)") as bar:
            attributions = integrated_gradients(
                inp, targets, opts.baselines, opts.steps, settings, nsamples=opts.nsamples,
                stdev_spread=opts.stdev_spread, progress=bar.advance_to,
            )  # fmt: skip
            attr = bk.to_numpy(attributions)
        if not np.all(np.isfinite(attr)):
            raise XaikitValueError(
                "the Integrated-Gradients attributions hold NaN or infinite values (the model's "
                "gradients along the path are not finite); XRAI cannot rank regions by them"
            )
        channel_max = attr.max(axis=axis).astype(np.float64)

        def one(b: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, bool]:
            if given is not None:
                masks = given[b]
            elif overlap:
                masks = candidates[b].result()
            else:
                masks = candidate_masks(images[b])  # type: ignore[index]
            out = rank_regions(
                masks, channel_max[b], algorithm=opts.algorithm,
                area_threshold=opts.area_threshold, min_pixel_diff=opts.min_pixel_diff,
            )  # fmt: skip
            ranking.update(1)
            return out

        with for_method(settings.progress, batch, "xrai (regions)", "images") as ranking:
            ranked = list(pool.map(one, range(batch)))
    maps = np.stack([r[0] for r in ranked]).astype(np.float32)
    if not opts.raw:
        return maps
    return XraiResult(
        maps=maps,
        regions=[r[1] for r in ranked],
        gains=[r[2] for r in ranked],
        remainder=np.array([r[3] for r in ranked], dtype=bool),
        attributions=inp.to_user([attr])[0],
    )


def runner(call: Call, **options: Any) -> Explained:
    """The runner of ``explain(method="xrai")`` (see :mod:`xaikit.xai.registry`)."""
    result = run(call.inp, call.targets, call.settings(), **options)
    if isinstance(result, XraiResult):
        return Explained([result.maps], detail=result)
    return Explained([result])


register_method(
    Method(
        "xrai",
        "gradient",
        "XRAI",
        runner,
        _DEFAULTS,
        result="map",
        slow=True,
        check=_check_options,
        target_objects=True,
        summary="image regions ranked by their Integrated-Gradients density: which parts matter most",
        reference="Kapishnikov et al., 2019, https://arxiv.org/abs/1906.02825",
    )
)
