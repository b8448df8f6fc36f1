"""Faithfulness metrics that score perturbed copies of the input: ROAD, infidelity and
faithfulness correlation.

* :func:`road` — RemOve And Debias (Rong et al., ICML 2022, https://arxiv.org/abs/2202.00449):
  the most (or least) relevant pixels are replaced by a *noisy linear imputation* of their
  neighbours, so that the removal itself leaks as little of the mask's shape as possible.
* :func:`infidelity` — Yeh et al., NeurIPS 2019 (https://arxiv.org/abs/1901.09392), as captum
  defines it (``captum.metrics.infidelity``): how far ``attribution . I`` is from
  ``f(x) - f(x - I)`` over random perturbations ``I``.
* :func:`faithfulness_correlation` — Bhatt et al., IJCAI 2020 (https://arxiv.org/abs/2005.00631):
  the Pearson correlation, over random pixel subsets, between the attribution a subset holds
  and the score lost when it is set to a baseline.

Every perturbed row is scored by the chunked forward passes of
:func:`xaikit.xai.internal.forward_scores` (``max_batch`` rows at a time, never one pass per
sample or step); the clean inputs go first in the same row space. The model is left unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from xaikit.backend import Backend, T, get_backend
from xaikit.checks import check_choice, check_floats, check_int, check_number
from xaikit.errors import XaikitTypeError, XaikitValueError, describe
from xaikit.evaluate._common import (
    PerSample,
    host,
    input_layout,
    maps_or_explain,
    pin_scored,
    spatial_shape,
    to_spatial,
)
from xaikit.evaluate._conventions import public
from xaikit.evaluate._options import RunOptions, RunSettings, Unpack
from xaikit.evaluate._ranks import check_rank, rank_positions, resolve_rank
from xaikit.layout import Move, move, move_back
from xaikit.xai.internal import (
    FIXED_BASELINES,
    Inputs,
    baseline_values,
    check_baseline,
    default_rows,
    forward_scores,
    prepare,
)

__all__ = [
    "ROAD_FRACTIONS",
    "FaithfulnessCorrelationResult",
    "InfidelityResult",
    "ROADCurve",
    "ROADResult",
    "faithfulness_correlation",
    "infidelity",
    "road",
]

#: the default removal fractions of :func:`road`: 10 %, 20 %, ..., 90 % of the pixels
ROAD_FRACTIONS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
#: ROAD's pixel orders
ORDERS = ("morf", "lerf", "both")

#: the 8-neighbourhood of the noisy linear imputation: (row offset, column offset, weight);
#: direct neighbours weigh 1/6, diagonal ones 1/12 (Rong et al.; the weights sum to 1)
_NEIGHBOURS = tuple(
    (dy, dx, 1 / 12 if dy and dx else 1 / 6) for dy in (-1, 0, 1) for dx in (-1, 0, 1) if dy or dx
)


# ---- shared set-up --------------------------------------------------------------------------------
@dataclass
class _Run:
    """What every metric needs: the backend, x's layout, the prepared input and the maps."""

    bk: Backend
    shape: tuple[int, ...]
    channel_axis: int | None
    spatial: tuple[int, ...]
    inp: Inputs
    xt: T
    layout_move: Move | None
    device: Any
    saliency: np.ndarray
    chunk: Callable[[int], int]

    @property
    def batch(self) -> int:
        return self.shape[0]

    @property
    def channels(self) -> int | None:
        return self.shape[self.channel_axis] if self.channel_axis is not None else None

    def x_host(self) -> np.ndarray:
        """x in its own layout, float64."""
        return np.asarray(move_back(self.bk.to_numpy(self.xt), self.layout_move), dtype=np.float64)

    def upload(self, arr: np.ndarray) -> T:
        """A host batch in x's layout -> a tensor in the model's layout on its device."""
        return self.bk.as_tensor(move(arr, self.layout_move), self.device, self.inp.dtype)

    def pixel_tensor(self, values: np.ndarray) -> T:
        """Per-pixel values (rows, *spatial) -> a float32 tensor in the model's layout, with a
        channel axis of length 1 where x has one (it broadcasts over the channels)."""
        if self.channel_axis is not None:
            values = np.expand_dims(values, self.channel_axis)
        return self.bk.as_tensor(move(values, self.layout_move), self.device, "float32")

    def keep_rows(self, xs: T, base_rows: T, keep: np.ndarray) -> T:
        """Rows that keep x's values where ``keep`` (rows, *spatial) float32 is 1 and take the
        baseline rows' values where it is 0 (one blend on the device)."""
        bk = self.bk
        half = np.full((keep.shape[0],) + (1,) * (len(self.shape) - 1), 0.5, np.float32)
        return bk.eval.blend(
            xs, base_rows, self.pixel_tensor(keep), bk.as_tensor(half, self.device, "float32"), False
        )

    def baseline_image(self, baseline: Any) -> np.ndarray:
        """The fixed baseline image of every sample (a name of ``FIXED_BASELINES`` or an array
        broadcastable to x), in x's layout, float64."""
        if not isinstance(baseline, str):
            baseline = host(baseline, "baseline")
        return baseline_values(self.x_host(), baseline, self.channel_axis)

    def baseline_tensor(self, baseline: Any) -> T:
        """:meth:`baseline_image` as a tensor (B, ...) in the model's layout."""
        return self.upload(self.baseline_image(baseline))


def _start(
    model: Any,
    x: Any,
    saliency: Any,
    target: Any,
    settings: RunSettings,
) -> _Run:
    """The prepared run of a metric of ``(model, x, saliency)`` with the checked ``settings``."""
    max_batch = settings.max_batch
    bk = get_backend(model, settings.framework)
    shape, channel_axis = input_layout(x, bk)
    saliency = maps_or_explain(model, x, saliency, target, settings)
    maps = host(saliency, "saliency")
    inp = prepare(bk, model, [x], ["x"], model_kwargs=settings.model_kwargs)
    xt = inp.tensors[0]
    device = getattr(xt, "device", None)
    row_elems = int(np.prod(shape[1:]))

    def chunk(total: int) -> int:
        return _chunk_rows(bk, device, row_elems, max_batch, total)

    return _Run(
        bk,
        shape,
        channel_axis,
        spatial_shape(shape, channel_axis),
        inp,
        xt,
        inp.moves[0],
        device,
        maps,
        chunk,
    )


def _chunk_rows(bk: Backend, device: Any, row_elems: int, max_batch: int | str, total: int) -> int:
    """The rows of one forward pass over ``total`` rows of ``row_elems`` values each: ``max_batch``,
    or as many as fit the device (``"auto"``), at least 1 and at most ``total``."""
    rows = default_rows(bk, device, row_elems, forward_only=True) if max_batch == "auto" else int(max_batch)
    return max(1, min(rows, total))


def _spatial_map(run: _Run, absolute: bool) -> np.ndarray:
    """The map as one value per pixel, (B, *spatial): channels summed (signed or by magnitude)."""
    return to_spatial(run.saliency, run.spatial, run.batch, channels=run.channels, absolute=absolute)


def _signed_start(
    model: Any, x: Any, saliency: Any, target: Any, run: Mapping[str, Any]
) -> tuple[_Run, RunSettings, np.ndarray]:
    """The run of a metric of the signed map, its checked settings (of the run options ``run``)
    and the map, (B, P): one value per pixel, channels summed with their signs."""
    settings = RunSettings.of(run)
    job = _start(model, x, saliency, target, settings)
    return job, settings, _spatial_map(job, absolute=False).reshape(job.batch, -1)


def _ranked_map(run: _Run, rank: str) -> tuple[str, np.ndarray]:
    """The pixel order ``rank`` with ``"auto"`` resolved (:func:`resolve_rank`) and the map read
    that way, (B, *spatial): channels summed with their signs (``"signed"``) or by magnitude."""
    rank = resolve_rank(rank, run.saliency)
    return rank, _spatial_map(run, absolute=rank == "magnitude")


def _full_map(run: _Run) -> np.ndarray:
    """The map in x's full shape: as given, or a one-channel map repeated over the channels."""
    maps = run.saliency.astype(np.float64)
    if maps.shape == run.shape:
        if not np.all(np.isfinite(maps)):
            raise XaikitValueError("saliency holds NaN or infinite values")
        return maps
    if run.channel_axis is None:
        raise XaikitValueError(f"saliency must have x's shape {run.shape}; got {describe(run.saliency)}")
    smap = to_spatial(maps, run.spatial, run.batch, channels=1, absolute=False)
    return np.broadcast_to(np.expand_dims(smap, run.channel_axis), run.shape).copy()


def _stash_scores(
    run: _Run,
    model: Any,
    rows_fn: Callable[[int, int], tuple[list[T], T]],
    total: int,
    output: int | str,
    sizes: list[int],
    predicted: list[np.ndarray] | None = None,
    spec: Any = None,
) -> np.ndarray:
    flat = forward_scores(
        run.bk, model, rows_fn, total, run.chunk(total), output, sizes=sizes, model_kwargs=run.inp.kwargs,
        batch=run.batch, predicted=predicted, target=spec,
    )  # fmt: skip
    return run.bk.to_numpy(flat).astype(np.float64)


def _score_rows(
    run: _Run,
    model: Any,
    target: Any,
    output: int | str,
    total: int,
    build: Callable[[int, int, T], T],
    sizes: list[int],
    predicted: list[np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The scores (total,) of ``total`` rows made from the batch (row r: sample r % B) for the
    pinned ``target``, through one chunked :func:`forward_scores` call, and the classes to
    report of :func:`~xaikit.evaluate._common.pin_scored` (-1 per sample for a target object).
    ``build(r0, r1, idx)`` makes rows r0..r1-1 on the device (``idx``: the device index of
    their samples); ``predicted`` collects the predicted classes (not for a target object:
    its rows are scored, not predicted)."""
    bk = run.bk
    with bk.inference(model):
        targets, spec, classes = pin_scored(run.inp, target, output)

        def rows_fn(r0: int, r1: int) -> tuple[list[T], T]:
            idx = bk.index(np.arange(r0, r1) % run.batch, run.device)
            return [build(r0, r1, idx)], bk.gather(targets, idx)

        flat = _stash_scores(
            run, model, rows_fn, total, output, sizes, None if spec is not None else predicted, spec=spec
        )
    return flat, classes


#: which pixels of perturbation rows ``j`` of samples ``b`` take the baseline: (rows, pixels) bool
DropFn = Callable[[np.ndarray, np.ndarray], np.ndarray]
#: the baseline of perturbation rows ``j`` of samples ``b``: (rows, *x.shape[1:]) in x's layout
BaseFn = Callable[[np.ndarray, np.ndarray], np.ndarray]


def _removal_scores(
    job: _Run,
    model: Any,
    target: Any,
    output: int | str,
    n_pert: int,
    drop: DropFn,
    base: T | BaseFn,
    sizes: list[int],
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Score x and ``n_pert`` perturbed copies of each sample, chunk by chunk.

    Row ``r < B`` is sample ``r`` itself; row ``r >= B`` is perturbation ``j = r // B - 1`` of
    sample ``b = r % B``: x where ``drop(j, b)`` is True takes the baseline (``base``: a tensor
    (B, ...) of per-sample baselines in the model's layout, or a function of ``(j, b)`` giving
    the baseline rows in x's layout).

    Returns:
        ``(f0 (B,), scores (n_pert, B), targets (B,))``.
    """
    bk, batch = job.bk, job.batch
    total = (n_pert + 1) * batch
    n_pixels = int(np.prod(job.spatial))
    x_host = job.x_host() if callable(base) else None

    def build(r0: int, r1: int, idx: T) -> T:
        r = np.arange(r0, r1)
        removed = np.zeros((r1 - r0, n_pixels), dtype=bool)
        pert = r >= batch
        j, b = r[pert] // batch - 1, r[pert] % batch
        if pert.any():
            removed[pert] = drop(j, b)
        keep = (~removed).astype(np.float32).reshape((r1 - r0,) + job.spatial)
        if callable(base) and x_host is not None:
            values = x_host[r % batch]
            if pert.any():
                values[pert] = base(j, b)
            base_rows = job.upload(values)
        else:
            base_rows = bk.gather(base, idx)
        return job.keep_rows(bk.gather(job.xt, idx), base_rows, keep)

    flat, classes = _score_rows(job, model, target, output, total, build, sizes)
    return flat[:batch], flat[batch:].reshape(n_pert, batch), classes


def _subset_drop(sets: list[np.ndarray], n_pixels: int) -> DropFn:
    """The :data:`DropFn` of random pixel subsets: ``sets`` one int array (nsamples, B, n_k) of
    flat pixel indices per size k; perturbation ``j`` drops subset ``sets[j // nsamples][j % nsamples, b]``."""
    nsamples = sets[0].shape[0]

    def drop(j: np.ndarray, b: np.ndarray) -> np.ndarray:
        size, draw = j // nsamples, j % nsamples
        out = np.zeros((len(j), n_pixels), dtype=bool)
        for k in np.unique(size):
            at = np.nonzero(size == k)[0]
            out[at[:, None], sets[k][draw[at], b[at]]] = True
        return out

    return drop


def _subset_sums(smap: np.ndarray, pixel_sets: np.ndarray) -> np.ndarray:
    """(B, nsamples) the map ``smap`` (B, P) summed over each subset of ``pixel_sets`` (nsamples, B, n)."""
    return np.take_along_axis(smap[None], pixel_sets, axis=2).sum(axis=2).T


def _rank_scores(
    run: _Run,
    model: Any,
    target: Any,
    output: int | str,
    rank: np.ndarray,
    base_t: T,
    thresholds: np.ndarray,
    insert: bool,
    sizes: list[int],
) -> tuple[np.ndarray, np.ndarray]:
    """The scores (B, K) of a removal curve of K steps and the classes to report: at step k a
    pixel whose ``rank`` (B, *spatial) is below ``thresholds[k]`` takes the baseline ``base_t``
    (``insert``: such a pixel keeps x's value and the others take the baseline); all rows (row r: sample r % B,
    step r // B) are blended on the device and scored by one chunked :func:`_score_rows` call."""
    bk, batch = run.bk, run.batch
    rank_t = run.pixel_tensor(rank)
    ndim = len(run.shape)

    def build(r0: int, r1: int, idx: T) -> T:
        limits = thresholds[np.arange(r0, r1) // batch].astype(np.float32).reshape((-1,) + (1,) * (ndim - 1))
        return bk.eval.blend(
            bk.gather(run.xt, idx),
            bk.gather(base_t, idx),
            bk.gather(rank_t, idx),
            bk.as_tensor(limits, run.device, "float32"),
            insert,
        )

    flat, classes = _score_rows(run, model, target, output, len(thresholds) * batch, build, sizes)
    return flat.reshape(len(thresholds), batch).T, classes


class _PlainMean:
    """A result whose ``mean`` is the plain mean of its ``scores`` (NaN when one of them is NaN,
    unlike :class:`~xaikit.evaluate._common.PerSample`'s)."""

    scores: np.ndarray

    @property
    def mean(self) -> float:
        """The mean of :attr:`scores` over samples."""
        return float(self.scores.mean())


# ---- ROAD --------------------------------------------------------------------------------------------
def impute(image: np.ndarray, removed: np.ndarray, height: int, width: int) -> np.ndarray:
    """Noise-free linear imputation of the removed pixels of one image.

    Every removed pixel becomes the weighted mean of its neighbours inside the image (direct
    ones weigh 1/6, diagonal ones 1/12), known or themselves imputed: one sparse linear system
    (symmetric, positive definite as long as some pixel is kept) solved for all channels at once.

    Args:
        image: (C, H * W) the image, float64, pixels in row-major order.
        removed: (n,) flat indices of the removed pixels (distinct, fewer than H * W).
        height: H.
        width: W.

    Returns:
        (C, n) the imputed values, in the order of ``removed``.

    Example:
        >>> ramp = np.arange(16.0).reshape(1, 16)  # a 4x4 linear ramp: 4 * row + column
        >>> impute(ramp, np.array([5, 10]), 4, 4).round(12).tolist()  # interior pixels come back
        [[5.0, 10.0]]
    """
    return _impute_many(np.asarray(image, dtype=np.float64)[None], np.asarray(removed)[None], height, width)[
        0
    ]


#: most unknowns solved in one sparse system (images of a chunk are solved together, as one
#: block-diagonal system, up to this size)
_MAX_UNKNOWNS = 200_000


def _impute_many(planes: np.ndarray, removed: np.ndarray, height: int, width: int) -> np.ndarray:
    """:func:`impute` of m images at once, each with k removed pixels: planes (m, C, P), removed
    (m, k) -> (m, C, k); one block-diagonal system (the images do not interact)."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.linalg import spsolve

    m, k = removed.shape
    channels = planes.shape[1]
    if k == 0:
        return np.zeros((m, channels, 0))
    n = m * k
    ids = np.arange(n).reshape(m, k)
    var = np.full((m, height * width), -1, dtype=np.int64)
    np.put_along_axis(var, removed, ids, axis=1)
    pix = planes.transpose(0, 2, 1)  # (m, P, C)
    sample = np.broadcast_to(np.arange(m)[:, None], (m, k))
    ys, xs = np.divmod(removed, width)
    diag = np.zeros(n)
    rhs = np.zeros((n, channels))
    rows, cols, vals = [ids.ravel()], [ids.ravel()], [diag]
    for dy, dx, w in _NEIGHBOURS:
        ny, nx = ys + dy, xs + dx
        inside = (ny >= 0) & (ny < height) & (nx >= 0) & (nx < width)
        s, row, nb = sample[inside], ids[inside], ny[inside] * width + nx[inside]
        diag[row] += w
        v = var[s, nb]
        unknown = v >= 0
        rows.append(row[unknown])
        cols.append(v[unknown])
        vals.append(np.full(int(unknown.sum()), -w))
        known = ~unknown
        rhs[row[known]] += w * pix[s[known], nb[known]]  # each pixel once per offset
    a = coo_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(n, n)).tocsc()
    sol = spsolve(a, rhs[:, 0] if channels == 1 else rhs)
    return np.asarray(sol, dtype=np.float64).reshape(m, k, channels).transpose(0, 2, 1)


@dataclass
class ROADCurve:
    """One ROAD curve (one pixel order) for each sample.

    Attributes:
        order: ``"morf"`` (most relevant first) or ``"lerf"`` (least relevant first).
        scores: (B, F) the target class's score (the model's output as it returns it) after
            removing each fraction of the pixels.
        correct: (B, F) whether the model still predicts the target class (Quantus's ROAD
            output, before its mean over samples); False throughout for a target object of
            :mod:`xaikit.targets` (it names no class to predict: read ``scores``).
    """

    order: str
    scores: np.ndarray
    correct: np.ndarray

    @property
    def accuracy(self) -> np.ndarray:
        """(F,) the share of samples still predicted as their target, per fraction."""
        return self.correct.mean(axis=0)

    @property
    def mean_score(self) -> np.ndarray:
        """(B,) each sample's score averaged over the fractions (an AUC over even fractions)."""
        return self.scores.mean(axis=1)


@dataclass
class ROADResult(_PlainMean):
    """ROAD (remove and debias) curves.

    Attributes:
        order: ``"morf"``, ``"lerf"`` or ``"both"``.
        fractions: (F,) the fractions of pixels removed.
        counts: (F,) the pixels removed at each fraction (``floor(fraction * pixels)``).
        morf: the most-relevant-first curve (None when ``order="lerf"``).
        lerf: the least-relevant-first curve (None when ``order="morf"``).
        scores: (B,) per-sample score: the MoRF curve's mean score (``"morf"``: lower is
            better), the LeRF curve's (``"lerf"``: higher is better), or LeRF minus MoRF
            (``"both"``: higher is better).
        targets: (B,) the class whose score is recorded.
        chunks: rows of each forward pass.
    """

    order: str
    fractions: np.ndarray
    counts: np.ndarray
    morf: ROADCurve | None
    lerf: ROADCurve | None
    scores: np.ndarray
    targets: np.ndarray
    chunks: list[int] = field(default_factory=list)

    def __repr__(self) -> str:
        return (
            f"ROADResult({self.order}, samples={len(self.scores)}, fractions={len(self.fractions)}, "
            f"mean={self.mean:.4f})"
        )


class _NoiseStream:
    """Gaussian noise of one pixel order, drawn row after row from ``RandomState(seed)``; the
    state at the start of each chunk is kept, so that a chunk redone after an out-of-memory
    error gets the same noise."""

    def __init__(self, seed: int) -> None:
        self.rs = np.random.RandomState(seed)
        self.saved: dict[int, Any] = {}

    def at(self, r0: int) -> None:
        if r0 in self.saved:
            self.rs.set_state(self.saved[r0])
        else:
            self.saved = {r0: self.rs.get_state()}


@public(renamed={"noise": "stdev"}, old_order=("model", "x", "saliency", "target"))
def road(
    model: Any,
    x: Any,
    saliency: Any,
    *,
    target: Any = None,
    fractions: Any = ROAD_FRACTIONS,
    order: str = "morf",
    stdev: float = 0.01,
    rank: str = "auto",
    **run: Unpack[RunOptions],
) -> ROADResult:
    """ROAD: remove the most (or least) relevant pixels, impute them, and watch the prediction.

    For each fraction p the ``floor(p * pixels)`` first pixels of the order are removed and
    filled by a noisy linear imputation: every removed pixel is the weighted mean of its 8
    neighbours (1/6 direct, 1/12 diagonal; known or imputed, one sparse linear system per image,
    solved on the host with scipy), plus Gaussian noise of standard deviation ``stdev``. All
    ``F x B`` (x 2 for ``"both"``) imputed images are scored in chunked forward passes.

    Quantus's ``ROAD`` (0.6) is this metric with ``order="morf"`` and percentages ``100 * p``;
    it returns the accuracy per percentage (:attr:`ROADCurve.accuracy` here). Its noise comes
    from numpy's global generator (``np.random.randn``, per percentage, per sample, a
    (channels, removed) draw); this function draws the same sequence from
    ``np.random.RandomState(seed)`` (each order its own stream), so ``np.random.seed(seed)``
    before Quantus's call gives the same images.

    Args:
        model: a torch or Keras/TF model returning (batch, classes).
        x: the input batch (numpy or tensor) of images, in the model's layout.
        saliency: one map per sample (shapes as in :func:`~xaikit.evaluate.deletion`) or a method
            name that computes the maps with :func:`xaikit.xai.explain`.
        target: class per sample (or one for all); None = the model's prediction on x.
        fractions: the fractions of pixels to remove, each in [0, 1) (default 0.1, ..., 0.9;
            Quantus's default is 1 %, 3 %, ..., 99 %).
        order: ``"morf"`` (most relevant first), ``"lerf"`` (least relevant first) or ``"both"``.
        stdev: the standard deviation of the Gaussian noise added to the imputed values, in the
            input's units (0: none; Rong et al.'s and Quantus's ``noise``).
        rank: how pixels are ordered, as in :func:`~xaikit.evaluate.deletion` (``"auto"``:
            by the signed map when it holds a negative value, else by magnitude).
        **run: the shared run options (seed, max_batch, framework, output, model_kwargs,
            method_options), see :class:`~xaikit.evaluate.RunOptions`. ``seed`` also draws
            the noise stream and the order of tied pixels.

    Returns:
        A :class:`ROADResult`: a faithful map makes the MoRF curve fall fast (low) and the LeRF
        curve stay high.

    Example:
        >>> import torch
        >>> model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16, 2))
        >>> res = road(model, torch.rand(3, 1, 4, 4), torch.rand(3, 4, 4), fractions=(0.25, 0.5), order="both")
        >>> res.morf.scores.shape, res.counts.tolist(), res.scores.shape
        ((3, 2), [4, 8], (3,))
    """
    fraction_values = _check_fractions(fractions)
    check_choice(order, "order", ORDERS)
    stdev = check_number(stdev, "stdev", 0.0)
    check_rank(rank)
    settings = RunSettings.of(run)
    seed, output = settings.seed, settings.output
    job = _start(model, x, saliency, target, settings)
    if len(job.spatial) != 2:
        raise XaikitValueError(
            f"road needs image inputs (batch, H, W[, C]) or (batch, C, H, W); got {describe(x)}"
        )
    _, smap = _ranked_map(job, rank)
    height, width = job.spatial
    n_pixels = height * width
    counts = np.floor(np.round(fraction_values * n_pixels, 6)).astype(np.int64)
    batch = job.batch
    orders = ["morf", "lerf"] if order == "both" else [order]
    flat = smap.reshape(batch, -1)
    lists = {
        o: np.argsort(rank_positions(flat if o == "morf" else -flat, seed), axis=1) for o in orders
    }  # per sample, the pixels in removal order
    x_values = job.x_host()
    channel_axis = job.channel_axis
    planes = (x_values[:, None] if channel_axis is None else np.moveaxis(x_values, channel_axis, 1)).reshape(
        batch, -1, n_pixels
    )
    streams = {o: _NoiseStream(seed) for o in orders}
    per_order = len(fraction_values) * batch
    total = per_order * len(orders)
    sizes: list[int] = []
    predicted: list[np.ndarray] = []

    def images(r0: int, r1: int) -> np.ndarray:
        """The imputed images of rows r0..r1-1 (x's layout); the images of one order and
        fraction are solved together, noise drawn row after row (Quantus's order)."""
        out = np.empty((r1 - r0,) + job.shape[1:])
        r = r0
        while r < r1:
            o, (f, b) = orders[r // per_order], divmod(r % per_order, batch)
            k = int(counts[f])
            m = min(r1 - r, batch - b, max(1, _MAX_UNKNOWNS // max(k, 1)))  # same order and fraction
            removed = lists[o][b : b + m, :k]
            imgs = planes[b : b + m].copy()
            values = _impute_many(imgs, removed, height, width)
            for i in range(m):  # drawn also for stdev=0: the stream stays Quantus's
                draw = streams[o].rs.randn(*values[i].shape)
                imgs[i][:, removed[i]] = values[i] + stdev * draw
            grid = imgs.reshape((m, -1, height, width))
            out[r - r0 : r - r0 + m] = (
                grid[:, 0] if channel_axis is None else np.moveaxis(grid, 1, channel_axis)
            )
            r += m
        return out

    def build(r0: int, r1: int, idx: T) -> T:
        for k, o in enumerate(orders):
            streams[o].at(min(max(r0 - k * per_order, 0), per_order))
        return job.upload(images(r0, r1))

    # a target object names no class: its rows are scored, not predicted (correct stays False)
    flat_scores, classes = _score_rows(job, model, target, output, total, build, sizes, predicted)
    predictions = np.concatenate(predicted) if predicted else np.full(total, -2, dtype=np.int64)
    curves: dict[str, ROADCurve] = {}
    for k, o in enumerate(orders):
        rows = slice(k * per_order, (k + 1) * per_order)
        curve_scores = flat_scores[rows].reshape(len(fraction_values), batch).T
        still_right = predictions[rows].reshape(len(fraction_values), batch).T == classes[:, None]
        curves[o] = ROADCurve(o, curve_scores, still_right)
    morf, lerf = curves.get("morf"), curves.get("lerf")
    if morf is not None and lerf is not None:
        scores = lerf.mean_score - morf.mean_score
    else:
        scores = (morf or lerf).mean_score  # type: ignore[union-attr]
    return ROADResult(order, fraction_values, counts, morf, lerf, scores, classes, sizes)


def _check_fractions(fractions: Any) -> np.ndarray:
    values = check_floats(fractions, "fractions", "a sequence of numbers in [0, 1)")
    if (
        values.ndim != 1
        or values.size == 0
        or not np.all(np.isfinite(values))
        or np.any(values < 0)
        or np.any(values >= 1)
    ):
        raise XaikitValueError(
            f"fractions must be a non-empty sequence of numbers in [0, 1) (1 would remove every pixel, "
            f"leaving nothing to impute from); got {describe(fractions)}"
        )
    return values


# ---- infidelity ----------------------------------------------------------------------------------------
@dataclass
class InfidelityResult(_PlainMean):
    """Infidelity of each sample's attribution (lower is better; 0: the attribution predicts
    every perturbation's effect exactly).

    Attributes:
        scores: (B,) the infidelity.
        beta: (B,) the scale applied to the attribution (1 without ``normalize``).
        dots: (B, nsamples) ``attribution . I`` for each perturbation I.
        deltas: (B, nsamples) ``f(x) - f(x - I)``.
        targets: (B,) the class whose score is used.
        chunks: rows of each forward pass.
        normalize: whether the attribution was optimally rescaled (``beta``).
    """

    scores: np.ndarray
    beta: np.ndarray
    dots: np.ndarray
    deltas: np.ndarray
    targets: np.ndarray
    chunks: list[int] = field(default_factory=list)
    normalize: bool = True


def _seed_of(seed: int, j: int) -> int:
    return int(np.random.SeedSequence([seed, j]).generate_state(1, np.uint32)[0] >> 1)


@public(old_order=("model", "x", "saliency", "target"))
def infidelity(
    model: Any,
    x: Any,
    saliency: Any,
    *,
    target: Any = None,
    perturbation: Any = "gaussian",
    nsamples: int | None = None,
    stdev: float = 0.1,
    normalize: bool = True,
    **run: Unpack[RunOptions],
) -> InfidelityResult:
    """Infidelity (Yeh et al., 2019) as ``captum.metrics.infidelity`` computes it.

    ``INFD = E_I[(beta * (a . I) - (f(x) - f(x - I)))^2]`` over perturbations ``I``, with ``a``
    the attribution and ``f`` the target class's score. With ``normalize`` the attribution is
    rescaled by the least-squares ``beta = E[(a . I) Δf] / E[(a . I)^2]`` (captum's
    ``normalize=True``; 1 when the denominator is 0), so the value does not change when ``a`` is
    scaled; without it ``beta = 1``. Perturbations are built on the device and all
    ``(nsamples + 1) x B`` rows are scored in chunked forward passes.

    Quantus's ``Infidelity`` (0.6) measures something else under the same name: it
    removes square patches (default 4x4) to a black baseline one after another, *cumulatively*,
    in raster order, takes ``I = x - x_perturbed`` for each step and returns the mean of
    ``(Δf - a . I)^2`` over the steps, unnormalized; its ``n_perturb_samples`` repeats that
    deterministic computation. Passing those perturbations as an array with
    ``normalize=False`` reproduces its value.

    Args:
        model: a torch or Keras/TF model returning (batch, classes).
        x: the input batch (numpy or tensor), in the model's layout.
        saliency: attributions with x's shape, a one-channel map (repeated over the channels),
            or a method name that computes them with :func:`xaikit.xai.explain`.
        target: class per sample (or one for all); None = the model's prediction on x.
        perturbation: ``"gaussian"`` (``I ~ N(0, stdev^2)`` per input element, drawn on the
            device from ``seed``, one draw per perturbation index, so any chunking gives the
            same rows), or an array (nsamples, *x.shape) of explicit perturbations in x's layout.
        nsamples: perturbations per sample (default 10, captum's ``n_perturb_samples``; for an
            array, its first axis).
        stdev: the std of the Gaussian perturbations.
        normalize: rescale the attribution by the optimal ``beta`` (see above).
        **run: the shared run options (seed, max_batch, framework, output, model_kwargs,
            method_options), see :class:`~xaikit.evaluate.RunOptions`. ``seed`` also draws
            the Gaussian perturbations.

    Returns:
        An :class:`InfidelityResult`; lower is better.

    Example:
        >>> import torch
        >>> model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(4, 2, bias=False))
        >>> x = torch.rand(2, 1, 2, 2)
        >>> exact = model[1].weight[0].detach().reshape(1, 1, 2, 2).repeat(2, 1, 1, 1)
        >>> res = infidelity(model, x, exact, target=0, nsamples=5)  # a linear model's gradient
        >>> bool(res.scores.max() < 1e-10), res.dots.shape
        (True, (2, 5))
    """
    if not isinstance(normalize, bool):
        raise XaikitTypeError(f"normalize must be True or False; got {describe(normalize)}")
    stdev = check_number(stdev, "stdev", 0.0, low_open=True)
    explicit: np.ndarray | None = None
    if isinstance(perturbation, str):
        if perturbation != "gaussian":
            raise XaikitValueError(
                f"perturbation must be 'gaussian' or an array of perturbations; got {perturbation!r}"
            )
        n = 10 if nsamples is None else check_int(nsamples, "nsamples", 1)
    else:
        explicit = host(perturbation, "perturbation").astype(np.float64)
        n = check_int(nsamples, "nsamples", 1, allow_none=True) or explicit.shape[0]
        if explicit.ndim < 1 or explicit.shape[0] != n:
            raise XaikitValueError(
                f"perturbation must be 'gaussian' or an array (nsamples={n}, *x.shape); got {describe(perturbation)}"
            )
    settings = RunSettings.of(run)
    seed, output = settings.seed, settings.output
    job = _start(model, x, saliency, target, settings)
    batch, bk = job.batch, job.bk
    attr = _full_map(job)
    if explicit is not None:
        if explicit.shape[1:] != job.shape:
            raise XaikitValueError(
                f"perturbation must be an array (nsamples, *x.shape) = ({n}, {', '.join(map(str, job.shape))}); "
                f"got {describe(perturbation)}"
            )
        if not np.all(np.isfinite(explicit)):
            raise XaikitValueError("perturbation holds NaN or infinite values")
        pert_t = job.upload(explicit.reshape((-1,) + job.shape[1:]))  # row j * B + b
    attr_t = job.upload(attr)
    model_shape = tuple(int(d) for d in job.xt.shape)
    total = (n + 1) * batch
    sizes: list[int] = []
    dots: dict[int, tuple[int, T]] = {}

    def perturbations(j0: int, j1: int) -> T:
        """Perturbations j0..j1-1 for every sample, (rows, ...) in the model's layout."""
        if explicit is not None:
            return bk.gather(pert_t, bk.index(np.arange(j0 * batch, j1 * batch), job.device))
        blocks = [bk.normal(_seed_of(seed, j), model_shape, job.device, job.inp.dtype) for j in range(j0, j1)]
        return (bk.cat(blocks) if len(blocks) > 1 else blocks[0]) * stdev

    def build(r0: int, r1: int, idx: T) -> T:
        xs = bk.gather(job.xt, idx)
        p0, p1 = max(r0, batch), r1  # perturbed rows (the clean ones come first)
        if p0 < p1:
            j0, j1 = p0 // batch - 1, (p1 - 1) // batch  # perturbation index j = r // B - 1
            pert = perturbations(j0, j1)
            pert = bk.gather(pert, bk.index(np.arange(p0, p1) - (j0 + 1) * batch, job.device))
            if p0 > r0:
                pert = bk.cat([bk.zeros((p0 - r0,) + model_shape[1:], job.device, job.inp.dtype), pert])
            xs = xs - pert
            dots[r0] = (r1, bk.sample_sum(bk.gather(attr_t, idx) * pert))
        return xs

    flat, classes = _score_rows(job, model, target, output, total, build, sizes)
    dot_rows = np.zeros(total)
    for r0, (r1, d) in dots.items():
        dot_rows[r0:r1] = bk.to_numpy(d).astype(np.float64)[: r1 - r0]
    f0 = flat[:batch]
    deltas = (f0[None, :] - flat[batch:].reshape(n, batch)).T  # (B, n)
    ai = dot_rows[batch:].reshape(n, batch).T
    if normalize:
        num, den = (ai * deltas).sum(axis=1), (ai * ai).sum(axis=1)
        beta = num / np.where(den != 0, den, 1.0)
    else:
        beta = np.ones(batch)
    scores = ((beta[:, None] * ai - deltas) ** 2).mean(axis=1)
    return InfidelityResult(scores, beta, ai, deltas, classes, sizes, normalize)


# ---- faithfulness correlation -------------------------------------------------------------------------------
@dataclass
class FaithfulnessCorrelationResult(PerSample):
    """Faithfulness correlation of each sample (higher is better, in [-1, 1]; NaN where the
    attribution sums or the score drops do not vary over the runs).

    Attributes:
        scores: (B,) Pearson correlation between :attr:`attribution_sums` and :attr:`deltas`.
        attribution_sums: (B, nsamples) the attribution inside each subset.
        deltas: (B, nsamples) ``f(x) - f(x with the subset set to the baseline)``.
        subsets: (nsamples, B, subset_size) the flat pixel indices (row-major) of each subset.
        targets: (B,) the class whose score is used.
        chunks: rows of each forward pass.
    """

    scores: np.ndarray
    attribution_sums: np.ndarray
    deltas: np.ndarray
    subsets: np.ndarray
    targets: np.ndarray
    chunks: list[int] = field(default_factory=list)


def _pearson(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a = a - a.mean(axis=1, keepdims=True)
    b = b - b.mean(axis=1, keepdims=True)
    na, nb = np.sqrt((a * a).sum(axis=1)), np.sqrt((b * b).sum(axis=1))
    out = np.full(a.shape[0], np.nan)
    ok = (na > 0) & (nb > 0)
    out[ok] = np.clip((a[ok] * b[ok]).sum(axis=1) / (na[ok] * nb[ok]), -1.0, 1.0)
    return out


@public(old_order=("model", "x", "saliency", "target"))
def faithfulness_correlation(
    model: Any,
    x: Any,
    saliency: Any,
    *,
    target: Any = None,
    subset_size: int = 224,
    nsamples: int = 100,
    baseline: Any = "black",
    subsets: Any = None,
    **run: Unpack[RunOptions],
) -> FaithfulnessCorrelationResult:
    """Faithfulness correlation (Bhatt et al., 2020): do the pixels the map credits matter?

    Over ``nsamples`` random subsets S of ``subset_size`` pixels (all channels of a pixel), the
    Pearson correlation between ``sum_{i in S} a_i`` (the map, channels summed with their
    signs) and ``f(x) - f(x_S)``, where ``x_S`` has S set to the baseline. Subsets are drawn
    from ``np.random.default_rng(seed)`` (``choice`` without replacement, run after run, sample
    after sample); all ``(nsamples + 1) x B`` rows are scored in chunked forward passes.

    Quantus's ``FaithfulnessCorrelation`` (0.6) is the same quantity (its defaults: 100 runs,
    224 features, ``"black"`` = the sample's minimum), but it draws features (channel elements),
    not pixels, from numpy's global generator; on one-channel images, given its subsets through
    ``subsets``, the two agree to float precision.

    Args:
        model: a torch or Keras/TF model returning (batch, classes).
        x: the input batch (numpy or tensor), in the model's layout.
        saliency: one map per sample (shapes as in :func:`~xaikit.evaluate.deletion`) or a method name.
        target: class per sample (or one for all); None = the model's prediction on x.
        subset_size: pixels per subset (at most the pixel count).
        nsamples: random subsets per sample (at least 2: a correlation needs two points;
            Quantus's ``nr_runs``).
        baseline: what a pixel of S becomes: ``"black"`` (the sample's minimum), ``"zeros"``,
            ``"mean"`` (the sample's mean colour), ``"blur"`` or an array broadcastable to x.
        subsets: explicit subsets instead of random ones: ints (nsamples, B, subset_size), flat
            row-major pixel indices, distinct within a subset (``nsamples`` and ``subset_size``
            are then read from it).
        **run: the shared run options (seed, max_batch, framework, output, model_kwargs,
            method_options), see :class:`~xaikit.evaluate.RunOptions`. ``seed`` also draws
            the random subsets.

    Returns:
        A :class:`FaithfulnessCorrelationResult`; higher is better.

    Example:
        >>> import torch
        >>> model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16, 2, bias=False))
        >>> x = torch.rand(2, 1, 4, 4)
        >>> w = model[1].weight[0].detach().reshape(1, 1, 4, 4)
        >>> res = faithfulness_correlation(model, x, w * x, target=0, subset_size=4, nsamples=20, baseline="zeros")
        >>> res.scores.round(6).tolist()  # gradient x input of a linear model: exactly 1
        [1.0, 1.0]
    """
    check_baseline(baseline, FIXED_BASELINES)
    if subsets is None:
        subset_size = check_int(subset_size, "subset_size", 1)
        nsamples = check_int(nsamples, "nsamples", 2)
    job, settings, smap = _signed_start(model, x, saliency, target, run)
    batch, n_pixels = smap.shape
    if subsets is None:
        if subset_size > n_pixels:
            raise XaikitValueError(
                f"subset_size must be at most the {n_pixels} pixels of a sample; got {subset_size}"
            )
        rng = np.random.default_rng(settings.seed)
        pixel_sets = np.stack(
            [
                np.stack([rng.choice(n_pixels, subset_size, replace=False) for _ in range(batch)])
                for _ in range(nsamples)
            ]
        )
    else:
        pixel_sets = _check_subsets(subsets, batch, n_pixels)
        nsamples = pixel_sets.shape[0]
    sums = _subset_sums(smap, pixel_sets)
    drop = _subset_drop([pixel_sets], n_pixels)
    sizes: list[int] = []
    f0, scored, classes = _removal_scores(
        job, model, target, settings.output, nsamples, drop, job.baseline_tensor(baseline), sizes
    )
    deltas = (f0[None] - scored).T
    return FaithfulnessCorrelationResult(_pearson(sums, deltas), sums, deltas, pixel_sets, classes, sizes)


def _check_subsets(subsets: Any, batch: int, n_pixels: int) -> np.ndarray:
    pixel_sets = host(subsets, "subsets")
    if (
        pixel_sets.ndim != 3
        or pixel_sets.shape[1] != batch
        or pixel_sets.shape[0] < 2
        or pixel_sets.shape[2] < 1
    ):
        raise XaikitValueError(
            f"subsets must be ints (nsamples >= 2, {batch}, subset_size) of flat pixel indices; got {describe(subsets)}"
        )
    if not np.issubdtype(pixel_sets.dtype, np.integer):
        raise XaikitTypeError(f"subsets must hold integer pixel indices; got {describe(subsets)}")
    if pixel_sets.min() < 0 or pixel_sets.max() >= n_pixels:
        raise XaikitValueError(
            f"subsets must hold pixel indices in [0, {n_pixels}); got values in "
            f"[{int(pixel_sets.min())}, {int(pixel_sets.max())}]"
        )
    ordered = np.sort(pixel_sets, axis=2)
    if np.any(ordered[..., 1:] == ordered[..., :-1]):
        raise XaikitValueError("subsets must not repeat a pixel within a subset")
    return pixel_sets.astype(np.int64)
